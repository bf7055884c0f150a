"""``ace-hybrid data generate``: weeks of an environment made by chronix2grid, in parallel, resumable, reproducible.

Each week is one worker process (:mod:`ace_hybrid.data.chronix_week`) in the generation environment's Python
(chronix2grid needs numpy < 2; ``make data-env`` builds ``.venv-data``), writing into the set's ``.partial/``; the
finished week is moved into ``chronics/`` with one rename, so a kill leaves no half-written week there, and the next
run regenerates only the weeks that are missing. Workers die with the command (``PR_SET_PDEATHSIG``), and a lock
keeps two commands from writing one set.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ace_hybrid.data.sets import GeneratedSet, create_set
from ace_hybrid.data.splits import SPLITS, split_of
from ace_hybrid.data.weeks import WeekPlan, plan_weeks
from ace_hybrid.grid.env import data_root

__all__ = ["default_name", "find_generator_python", "generate_weeks"]

_WORKER = Path(__file__).with_name("chronix_week.py")
#: Where ``make data-env`` puts the generation environment (relative to the working directory).
DATA_ENV_PYTHON = Path(".venv-data") / "bin" / "python"


def default_name(env_name: str, seed: int) -> str:
    """The set's folder name when none is given: ``<env>-weeks-s<seed>``."""
    return f"{env_name}-weeks-s{seed}"


def _has_chronix2grid(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import chronix2grid, grid2op"], capture_output=True)
    return probe.returncode == 0


def find_generator_python(python: str | None = None) -> str:
    """The Python that runs the workers: ``python`` if given, else ``$ACE_HYBRID_DATA_PYTHON``, else
    ``.venv-data/bin/python``, else this interpreter if chronix2grid imports here. Raises ``FileNotFoundError``
    saying how to make one."""
    candidates = [python] if python else [os.environ.get("ACE_HYBRID_DATA_PYTHON"), str(DATA_ENV_PYTHON),
                                          sys.executable]
    for candidate in filter(None, candidates):
        if Path(candidate).is_file() and _has_chronix2grid(candidate):
            return candidate
    tried = ", ".join(filter(None, candidates))
    raise FileNotFoundError(f"no Python with chronix2grid and grid2op found (tried {tried}): run `make data-env` "
                            "(creates .venv-data: chronix2grid needs numpy < 2) or pass --python")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive, non-blocking lock on ``path``: a second command on the same set fails at once."""
    import fcntl

    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"another command is generating into {path.parent} (lock {path}); wait for it") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _run_worker(python: str, dataset: GeneratedSet, week: WeekPlan, with_loss: bool,
                steps: int | None) -> dict[str, Any]:
    """Generate ``week`` into ``.partial/<name>`` and move it into ``chronics/``; return the worker's record."""
    scratch = dataset.partial_dir() / week.name
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    command = [python, "-W", "ignore", str(_WORKER), "--source", str(dataset.path), "--out", str(scratch),
               "--start-date", week.start_date, "--scen-id", str(week.scen_id), "--seeds", *map(str, week.seeds)]
    if not with_loss:
        command.append("--without-loss")
    if steps is not None:
        command += ["--steps", str(steps)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with open(scratch.with_suffix(".log"), "w") as log:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                              preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    record = json.loads(lines[-1]) if lines else {}
    if done.returncode == 3 and "error" in record:  # chronix2grid's own verdict on this week: deterministic
        dataset.record_failure(week.name, record["error"])
        return {"week": week.name, "error": record["error"]}
    if done.returncode != 0:
        tail = scratch.with_suffix(".log").read_text().strip().splitlines()[-5:]
        raise RuntimeError(f"week {week.name}: the worker exited with {done.returncode}: " + " | ".join(tail))
    made = scratch / f"{week.start_date}_{week.scen_id}"
    timing = json.loads((made / "timing.json").read_text())
    (made / "timing.json").unlink()
    os.replace(made, dataset.week_dir(week.name))  # the week appears whole
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.with_suffix(".log").unlink(missing_ok=True)
    dataset.log_timing({"week": week.name, "seconds": record.get("seconds"), **timing})
    return {"week": week.name, "seconds": record.get("seconds")}


def generate_weeks(env_name: str, weeks: int, seed: int, *, name: str | None = None, root: Path | None = None,
                   jobs: int = 1, python: str | None = None, with_loss: bool = True, steps: int | None = None,
                   progress: bool = True, splits: Collection[str] | None = None,
                   first: int = 0, only: Collection[int] | None = None) -> dict[str, Any]:
    """Make (or complete) the set of ``weeks`` weeks of ``env_name`` generated with ``seed``.

    Parameters
    ----------
    env_name
        An environment with generation parameters (l2rpn_idf_2023).
    weeks
        Weeks 0..weeks-1 (:func:`ace_hybrid.data.weeks.plan_weeks`); those already there are kept.
    seed
        The set's seed: week k's seeds are a function of (seed, k).
    name, root
        The set's folder: ``root / name`` (defaults: :func:`data_root`, :func:`default_name`).
    jobs
        Weeks generated at once, one process (one core) each.
    python
        The generation environment's interpreter (:func:`find_generator_python`).
    with_loss
        chronix2grid's AC loss correction (the environment's own setting; off is faster and rougher).
    steps
        Weeks of this many 5-minute steps instead of whole weeks (2,016): short sets for tests and trials.
    splits
        Only the weeks of these splits (:func:`ace_hybrid.data.splits.split_of`), e.g. ``("test",)`` for more held-out
        weeks without the hours of the training weeks between them; the others stay missing until asked for.
    first
        Only weeks ``first..weeks-1`` (the same weeks a whole run makes there), e.g. test weeks no file has played.
    only
        Only these week numbers (each in ``[0, weeks)``), e.g. the weeks one experiment file trains and plays on.

    Returns
    -------
    dict
        ``path`` (the set's folder), ``generated``, ``reused`` and ``failed`` (week names) and ``seconds``.
    """
    if not 1 <= jobs <= 64:
        raise ValueError(f"jobs = {jobs} out of range [1, 64]")
    if steps is not None and not 1 <= steps <= 2016:
        raise ValueError(f"steps = {steps} out of range [1, 2016] (a week has 2,016 five-minute steps)")
    if splits is not None and (not splits or set(splits) - set(SPLITS)):
        raise ValueError(f"splits = {sorted(splits)} must be a non-empty subset of {list(SPLITS)}")
    if not 0 <= first < weeks:
        raise ValueError(f"first = {first} out of range [0, {weeks}) (weeks = {weeks})")
    if only is not None and (not only or not all(0 <= k < weeks for k in only)):
        raise ValueError(f"only = {sorted(only)} must be non-empty week numbers in [0, {weeks}) (weeks = {weeks})")
    path = (root or data_root()) / (name or default_name(env_name, seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset = create_set(path, env_name, seed, with_loss=with_loss, steps=steps)
    plan = [w for w in plan_weeks(dataset.dates(), seed, weeks)
            if w.index >= first and (splits is None or split_of(w.index) in splits)
            and (only is None or w.index in only)]
    start = time.perf_counter()
    with _locked(path / ".lock"):
        shutil.rmtree(dataset.partial_dir(), ignore_errors=True)  # what a killed run left half-written
        have, failed = set(dataset.finished()), dataset.failed()
        todo = [w for w in plan if w.name not in have and w.name not in failed]
        done: list[dict[str, Any]] = []
        if todo:
            interpreter = find_generator_python(python)
            bar = _progress_bar(len(todo), f"{env_name}: weeks", progress)
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(_run_worker, interpreter, dataset, w, with_loss, steps) for w in todo]
                for future in as_completed(futures):
                    record = future.result()
                    done.append(record)
                    if bar is not None:
                        bar.set_postfix_str(f"{record['week']}: " + (f"{record['seconds']:.0f} s"
                                                                      if "seconds" in record else "failed"))
                        bar.update(1)
            if bar is not None:
                bar.close()
        shutil.rmtree(dataset.partial_dir(), ignore_errors=True)
    return {"path": str(path), "generated": sorted(r["week"] for r in done if "seconds" in r),
            "failed": sorted(r["week"] for r in done if "error" in r),
            "reused": sorted(w.name for w in plan if w.name in have),
            "seconds": round(time.perf_counter() - start, 1)}


def _progress_bar(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="week")
