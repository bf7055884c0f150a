"""Generated sets for the tests, made in seconds.

- :func:`offline_weeks_set`: a real set folder (``create_set``) whose weeks are the offline copy's own scenarios,
  copied under week names: a set grid2op opens, the checks play, and whose episodes must equal the offline copy's.
- :func:`scripted_generator`: a stand-in for the generation environment's Python, for the orchestration tests of
  ``ace-hybrid data generate`` (parallel, resumable, a kill leaves no half week): its worker copies an offline
  scenario as the week instead of running chronix2grid for five minutes. The real worker is tested apart
  (tests/test_data.py, with ``make data-env``'s Python).
"""

from __future__ import annotations

import shutil
import stat
import sys
from pathlib import Path
from typing import Any

ENV = "l2rpn_idf_2023"
#: The offline copy's two scenarios, as weeks 0 and 3 of the set (3 leaves a gap, as a failed week would).
OFFLINE_WEEKS = {0: "2035-01-15_0", 3: "2035-08-20_0"}

_WORKER = '''
import argparse, json, os, shutil, sys, time
p = argparse.ArgumentParser()
p.add_argument("--source"); p.add_argument("--out"); p.add_argument("--start-date"); p.add_argument("--scen-id")
p.add_argument("--seeds", type=int, nargs=3); p.add_argument("--without-loss", action="store_true")
a = p.parse_args()
name = f"{a.start_date}_{a.scen_id}"
if name in os.environ.get("FAKE_FAIL", "").split(","):
    print(json.dumps({"week": name, "error": "RuntimeError: Nan generated in solar data"})); sys.exit(3)
if name in os.environ.get("FAKE_CRASH", "").split(","):
    sys.exit(1)
chronics = sorted(os.listdir(os.environ["FAKE_SOURCE"]))
week = os.path.join(a.out, name)
os.makedirs(week)
source = os.path.join(os.environ["FAKE_SOURCE"], chronics[a.seeds[0] % len(chronics)])
for f in sorted(os.listdir(source)):
    shutil.copy(os.path.join(source, f), os.path.join(week, f))
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))  # a kill test stops it half-way through the files
with open(os.path.join(week, "seeds.txt"), "w") as f:
    f.write(" ".join(map(str, a.seeds)))
with open(os.path.join(week, "timing.json"), "w") as f:
    json.dump({"generation_time": 1.0}, f)
print(json.dumps({"week": name, "seconds": 0.1}))
'''


def offline_weeks_set(root: Path, name: str = "offline-weeks") -> Any:
    """A generated set under ``root`` holding the offline copy's scenarios as weeks :data:`OFFLINE_WEEKS`."""
    from ace_hybrid.data.sets import create_set, offline_copy_dir

    dataset = create_set(root / name, ENV, seed=0)
    source = offline_copy_dir(ENV) / "chronics"
    for k, scenario in OFFLINE_WEEKS.items():
        shutil.copytree(source / scenario, dataset.week_dir(f"{k:03d}_{scenario[:10]}"))
    return dataset


def scripted_generator(folder: Path) -> tuple[str, dict[str, str]]:
    """A fake generation Python in ``folder`` and the environment variables it reads (``FAKE_SOURCE``: where it
    copies weeks from; tests add ``FAKE_FAIL`` / ``FAKE_CRASH`` week names and ``FAKE_SLEEP`` seconds per file)."""
    from ace_hybrid.data.sets import offline_copy_dir

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "worker.py").write_text(_WORKER)
    python = folder / "python"
    # The probe (python -c "import chronix2grid, grid2op") passes; a worker call runs the scripted worker instead
    # of the real one (its path is the third argument: python -W ignore WORKER ...).
    python.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then exit 0; fi\nshift 3\n'
                      f'exec {sys.executable} {folder / "worker.py"} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python), {"FAKE_SOURCE": str(offline_copy_dir(ENV) / "chronics")}
