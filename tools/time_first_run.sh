#!/usr/bin/env bash
# Time the README's newcomer path from a fresh clone to a trained policy's evaluation:
# clone, `make install`, activate, then the README's three first-run commands. Prints the split and the total.
#   tools/time_first_run.sh [REPO (default: this checkout)] [WORK_DIR (default: a new temporary folder)]
set -euo pipefail
repo="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
work="${2:-$(mktemp -d)}"
logs="$work/logs" && mkdir -p "$logs"
start=$(date +%s.%N)
git clone -q "$repo" "$work/ace_hybrid"
cd "$work/ace_hybrid"
make install > "$logs/install.log" 2>&1
installed=$(date +%s.%N)
source .venv/bin/activate
export OMP_WAIT_POLICY=PASSIVE
ace-hybrid train --config l2rpn_case14_sandbox --run-dir runs/quick --set train.total_env_steps=30000 > "$logs/train.log" 2>&1
ace-hybrid evaluate --env l2rpn_case14_sandbox --agent checkpoint:runs/quick/best.pt --episodes 0-2 --seeds 100-102 \
    --out runs/quick/eval > "$logs/evaluate.log" 2>&1
ace-hybrid evaluate --env l2rpn_case14_sandbox --agent do-nothing --episodes 0-2 --seeds 100-102 \
    --out runs/quick/eval-do-nothing >> "$logs/evaluate.log" 2>&1
end=$(date +%s.%N)
python3 -c "import sys; s, i, e = map(float, sys.argv[1:]); print(f'install {i - s:.0f} s, commands {e - i:.0f} s, total {e - s:.0f} s ({(e - s) / 60:.1f} min); logs in $logs')" "$start" "$installed" "$end"
