"""Does SAC's temperature run away? alpha, entropy − target, mean Q and Q / alpha of each run, per step bin.

Reads every ``runs/*/metrics.jsonl`` under an experiment's output directory (``ace-hybrid experiment --out DIR``)
and prints, for each SAC run, one column per bin of environment steps: the mean temperature alpha, the mean of the
policy's entropy minus its target entropy, and the mean Q of the sampled actions, over the updates logged in that
bin, and Q / alpha. A temperature that keeps rising while the entropy stays below target, and Q values growing with
it, is the runaway ``sac.max_alpha`` bounds (experiments/temperature_bound.toml). Q growing with Q / alpha steady is
the soft value's entropy bonus growing with the temperature (alpha x the policy's entropy at every later decision);
Q / alpha growing with alpha held is a critic diverging (experiments/critic_divergence.toml).

    PYTHONPATH=python python tools/temperature_runaway.py runs/budget_curve [--bin 10000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

KEYS = ("sac/alpha", "sac/entropy", "sac/target_entropy", "sac/q_mean")


def binned(metrics: Path, width: int) -> dict[int, tuple[float, float, float]]:
    """{bin start: (mean alpha, mean entropy − target, mean Q)} over the update records of ``metrics``."""
    sums: dict[int, list[float]] = {}
    with metrics.open() as f:
        for line in f:
            row = json.loads(line)
            if not all(k in row for k in KEYS):
                continue
            acc = sums.setdefault(int(row["env_steps"]) // width * width, [0.0, 0.0, 0.0, 0.0])
            acc[0] += row["sac/alpha"]
            acc[1] += row["sac/entropy"] - row["sac/target_entropy"]
            acc[2] += row["sac/q_mean"]
            acc[3] += 1
    return {start: (a / n, d / n, q / n) for start, (a, d, q, n) in sorted(sums.items())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="an experiment's output directory (holding runs/)")
    p.add_argument("--bin", type=int, default=10_000, help="environment steps per bin (default 10,000)")
    args = p.parse_args(argv)
    if args.bin < 1:
        p.error(f"--bin {args.bin} out of range [1, inf)")
    runs = sorted((args.out / "runs").glob("*/metrics.jsonl"))
    if not runs:
        p.error(f"no runs/*/metrics.jsonl under {args.out}")
    print(f"alpha / entropy - target / mean Q / Q over alpha, per {args.bin:,} environment steps")
    for metrics in runs:
        bins = binned(metrics, args.bin)
        if bins:  # MaskablePPO's runs log no SAC update
            cells = " ".join(f"{a:.2g}/{d:+.1f}/{q:.3g}/{q / a:.3g}" for a, d, q in bins.values())
            print(f"{metrics.parent.name:<28} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
