"""``ace-hybrid data check``: is each generated week sound enough to learn and test on?

Every week of a set is checked against the offline copy grid2op ships of the same environment (the data the
generator's parameters came with):

- **files**: the time series grid2op reads are there, with the offline copy's columns in its order;
- **finite**: no NaN or infinite value in loads, productions and their forecasts;
- **ranges**: every load's active power within the offline copy's range for that load, and the total production
  of every step within the offline copy's range of totals, each widened by :data:`RANGE_MARGIN` of its largest
  value (the offline copy holds two days of January and August, so a spring week may sit a little outside them);
  every generator within [0, Pmax]. A single solar farm is not held to the offline copy's range: in June it produces
  twice its January-and-August peak, well within its Pmax;
- **survival**: doing nothing and the greedy expert (30 simulations a decision), each under the safe rule every
  agent has, from the week's first step with episode seed :data:`CHECK_SEED`; the week is flagged when the greedy
  expert fails within its first day (:data:`MIN_EXPERT_STEPS`): a week the expert cannot keep up for a day is not
  data a learner can be measured on. Both are reported beside the offline copy's own scenarios.

A week that fails any check is flagged with the reason and left out of the splits (:mod:`ace_hybrid.data.splits`).
Results go to the set's ``checks.json``; each week's is kept, so a rerun checks only new weeks.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.data.sets import GeneratedSet, offline_copy_dir
from ace_hybrid.files import atomic_write_json

__all__ = ["CHECK_SEED", "MIN_EXPERT_STEPS", "RANGE_MARGIN", "check_set", "offline_ranges", "week_data_checks"]

#: Episode seed of the survival checks (opponent draws); fixed so the checks reproduce.
CHECK_SEED = 0
#: The greedy expert must survive this many steps (one day of 5-minute steps) for a week to be used.
MIN_EXPERT_STEPS = 288
#: How far outside the offline copy's range a column may go, as a fraction of the column's largest value there.
RANGE_MARGIN = 0.25
_SERIES = ("load_p", "load_q", "prod_p", "load_p_forecasted", "load_q_forecasted", "prod_p_forecasted")
_RANGED = ("load_p", "prod_total")
_CHECK_VERSION = 1


def _read(folder: Path, series: str) -> Any:
    import pandas as pd

    return pd.read_csv(folder / f"{series}.csv.bz2", sep=";")


def offline_ranges(env_name: str) -> dict[str, Any]:
    """Per column of ``load_p`` and ``prod_p``: min and max over the offline copy's scenarios, and the columns of
    every series."""
    chronics = offline_copy_dir(env_name) / "chronics"
    out: dict[str, Any] = {"columns": {}, "min": {}, "max": {}}
    for series in _SERIES:
        frames = [_read(folder, series) for folder in sorted(chronics.iterdir()) if folder.is_dir()]
        out["columns"][series] = list(frames[0].columns)
        values = np.concatenate([f.to_numpy(float) for f in frames])
        if series == "prod_p":
            series, values = "prod_total", values.sum(axis=1, keepdims=True)
        if series in _RANGED:
            out["min"][series], out["max"][series] = values.min(axis=0), values.max(axis=0)
    return out


def week_data_checks(folder: Path, ranges: dict[str, Any], pmax: np.ndarray) -> dict[str, Any]:
    """The files, finite and ranges checks of one week's folder: ``{"problems": [...], "steps": n, ...}``."""
    problems: list[str] = []
    missing = [s for s in _SERIES if not (folder / f"{s}.csv.bz2").is_file()]
    missing += [f for f in ("start_datetime.info", "time_interval.info") if not (folder / f).is_file()]
    if missing:
        return {"problems": [f"missing files: {', '.join(missing)}"], "steps": 0}
    result: dict[str, Any] = {"steps": 0, "range_excess": {}}
    for series in _SERIES:
        frame = _read(folder, series)
        if list(frame.columns) != ranges["columns"][series]:
            problems.append(f"{series}: columns differ from the offline copy's")
            continue
        values = frame.to_numpy(float)
        if series == "load_p":
            result["steps"] = len(values)
        bad = ~np.isfinite(values)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            problems.append(f"{series}: {int(bad.sum())} NaN or infinite values (first: step {row}, "
                            f"{frame.columns[col]})")
            continue
        if series == "prod_p":
            low_gen, high_gen = (values < -1e-3).any(axis=0), (values > pmax + 1e-3).any(axis=0)
            for gen in np.flatnonzero(low_gen | high_gen)[:3]:
                problems.append(f"prod_p: {frame.columns[gen]} reaches {values[:, gen].min():.1f} / "
                                f"{values[:, gen].max():.1f} MW, outside [0, Pmax = {pmax[gen]:.1f}]")
            series, columns, values = "prod_total", ["total production"], values.sum(axis=1, keepdims=True)
        else:
            columns = list(frame.columns)
        if series in _RANGED:
            problems += _range_problems(series, columns, values, ranges, result)
    result["problems"] = problems
    return result


def _range_problems(series: str, columns: list[str], values: np.ndarray, ranges: dict[str, Any],
                    result: dict[str, Any]) -> list[str]:
    """Columns of ``values`` outside the offline copy's range widened by :data:`RANGE_MARGIN`; records in
    ``result["range_excess"][series]`` the largest excess as a fraction of its column's largest offline value."""
    low, high = ranges["min"][series], ranges["max"][series]
    scale = np.maximum(np.abs(high), 1.0)
    excess = np.maximum(values - (high + RANGE_MARGIN * scale), (low - RANGE_MARGIN * scale) - values).max(axis=0)
    worst = int(np.argmax(excess))
    result["range_excess"][series] = round(float(max(excess[worst], 0.0) / scale[worst]), 4)
    if excess[worst] <= 0:
        return []
    return [f"{series}: {columns[worst]} reaches {values[:, worst].min():.1f} / {values[:, worst].max():.1f} MW, "
            f"outside the offline copy's [{low[worst]:.1f}, {high[worst]:.1f}] widened by {RANGE_MARGIN:.0%}"]


def _survival(env_source: str, scenario: int, dataset: str = "auto") -> dict[str, Any]:
    """Do nothing's and the greedy expert's steps survived on ``scenario`` from its first step (seed
    :data:`CHECK_SEED`); ``dataset="test"`` plays grid2op's offline copy of ``env_source``."""
    from ace_hybrid.grid.agents import DoNothingAgent, GreedyExpertAgent
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import make_env
    from ace_hybrid.grid.evaluation import play_episode

    env = make_env(env_source, seed=0, dataset=dataset)  # type: ignore[arg-type]
    try:
        out: dict[str, Any] = {}
        for key, agent in (("do_nothing", DoNothingAgent(env.action_space)),
                           ("greedy", GreedyExpertAgent(env.action_space, ActionCatalog.for_env(env), budget=30))):
            episode = play_episode(env, agent, scenario, CHECK_SEED)
            out[key] = int(episode.steps_survived)
            out["max_steps"] = int(episode.max_steps)
        return out
    finally:
        env.close()


def _check_week(set_path: str, name: str, scenario: int, ranges: dict[str, Any], pmax: np.ndarray) -> dict[str, Any]:
    from ace_hybrid.processes import start_child

    start_child(os.getppid())
    result = week_data_checks(Path(set_path) / "chronics" / name, ranges, pmax)
    if not result["problems"]:
        result.update(_survival(set_path, scenario))
        if result["greedy"] < min(MIN_EXPERT_STEPS, result["max_steps"]):
            result["problems"].append(f"the greedy expert fails at step {result['greedy']}, within its first day "
                                      f"({MIN_EXPERT_STEPS} steps)")
    return {"week": name, "version": _CHECK_VERSION, **result}


def _offline_reference(env_name: str) -> list[dict[str, Any]]:
    from ace_hybrid.grid.env import make_env, scenario_ids

    env = make_env(env_name, seed=0, dataset="test")
    ids = scenario_ids(env)
    names = env.ace_scenarios
    env.close()
    return [{"scenario": s, "name": names[s], **_survival(env_name, s, dataset="test")} for s in ids]


def check_set(dataset: GeneratedSet, *, jobs: int = 1, progress: bool = True) -> dict[str, Any]:
    """Check every finished week of ``dataset`` not checked yet (in ``jobs`` processes), write ``checks.json`` and
    the splits, and return the checks."""
    from ace_hybrid.data.splits import write_splits

    if not 1 <= jobs <= 64:
        raise ValueError(f"jobs = {jobs} out of range [1, 64]")
    path = dataset.path / "checks.json"
    old = _load_json(path)
    weeks = {k: v for k, v in old.get("weeks", {}).items() if v.get("version") == _CHECK_VERSION}
    todo = {k: name for k, name in dataset.weeks().items() if name not in weeks}
    env_name = dataset.env_name
    ranges = offline_ranges(env_name)
    pmax = _pmax(dataset.path, ranges["columns"]["prod_p"])
    offline = old.get("offline_copy") or None
    if todo:
        bar = _bar(len(todo) + (offline is None), f"checking {dataset.path.name}", progress)
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_check_week, str(dataset.path), name, k, ranges, pmax) for k, name in todo.items()]
            if offline is None:
                offline = _offline_reference(env_name)
                bar.update(1)
            for future in futures:
                record = future.result()
                weeks[record["week"]] = record
                bar.update(1)
                atomic_write_json(path, _checks_record(env_name, offline, weeks))  # each week kept as it ends
        bar.close()
    elif offline is None:
        offline = _offline_reference(env_name)
    checks = _checks_record(env_name, offline, weeks)
    atomic_write_json(path, checks)
    write_splits(dataset, checks)
    return checks


def _checks_record(env_name: str, offline: Any, weeks: dict[str, Any]) -> dict[str, Any]:
    return {"env": env_name, "seed": CHECK_SEED, "min_expert_steps": MIN_EXPERT_STEPS, "range_margin": RANGE_MARGIN,
            "offline_copy": offline, "weeks": dict(sorted(weeks.items()))}


def _pmax(folder: Path, gen_names: list[str]) -> np.ndarray:
    import pandas as pd

    charac = pd.read_csv(folder / "prods_charac.csv").set_index("name")
    return np.array([float(charac.loc[name, "Pmax"]) for name in gen_names])


def _load_json(path: Path) -> dict[str, Any]:
    import json

    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _bar(total: int, desc: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="week", disable=not enabled)


def checks_markdown(checks: dict[str, Any], splits: dict[str, Any]) -> str:
    """The checks as a markdown table: the offline copy's scenarios, then every week with its split or its flag."""
    lines = ["| data | split | steps | do nothing survives | greedy expert survives | checks |",
             "|:---|:---|---:|---:|---:|:---|"]

    def cell(steps: Any, total: Any) -> str:
        return "–" if steps is None else f"{steps} ({steps / total:.0%})"

    for ref in checks.get("offline_copy") or []:
        lines.append(f"| offline copy {ref['name']} | – | {ref['max_steps']} | "
                     f"{cell(ref['do_nothing'], ref['max_steps'])} | {cell(ref['greedy'], ref['max_steps'])} | – |")
    split_of_week = {k: s for s in ("train", "validation", "test") for k in splits.get(s, [])}
    for name, week in checks["weeks"].items():
        k = int(name.split("_", 1)[0])
        split = split_of_week.get(k, "left out")
        total = week.get("max_steps", week.get("steps"))
        verdict = "pass" if not week["problems"] else "flagged: " + "; ".join(week["problems"])
        lines.append(f"| week {name} | {split} | {total} | {cell(week.get('do_nothing'), total)} | "
                     f"{cell(week.get('greedy'), total)} | {verdict} |")
    counts = ", ".join(f"{len(splits.get(s, []))} {s}" for s in ("train", "validation", "test"))
    return "\n".join(lines) + f"\n\nUsable weeks: {counts}; left out: {len(splits.get('flagged', {}))}."
