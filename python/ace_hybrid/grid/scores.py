"""The L2RPN score of an environment, computed by grid2op's own score classes on writable data copies.

grid2op's score classes run reference agents (do nothing, and reconnect lines with overflow disconnections off) to
normalise the score and cache their statistics inside the environment's data folder, which may be read-only
(site-packages) and holds every scenario. That cache is keyed by the folder alone: grid2op does not check the seeds it
was computed with ("TODO check for the seeds here too" in ``ScoreL2RPN2020._init_stat``), so a folder shared by two
seeds of one scenario would normalise the second episode by the first one's references. So each (scenario, seed) gets
a private copy of the environment folder under the cache directory, holding that scenario only (linked, not copied),
and the score class is run there with the episode's seed: one score per (scenario, seed). An episode that starts past
its scenario's first step (``env.start_spread``) is scored on a copy whose time series start at that step: the score
classes replay episodes from the data's first step only. A lock file beside each copy keeps two processes
(``ace-hybrid experiment --jobs 2``) from making it or computing its references at once.

Cost: the references (two episodes of the scenario) are computed once per copy and reused by every later score of
that (scenario, seed); each score then replays the agent's whole episode through grid2op's runner, as long as the
test episode itself plus a few seconds to make the copy's environment.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from ace_hybrid.grid.evaluation import EvaluationReport
from ace_hybrid.files import cache_root

#: grid2op's score class per environment (the competitions' own scores).
SCORE_CLASSES: dict[str, str] = {
    "l2rpn_case14_sandbox": "ScoreL2RPN2020",
    "l2rpn_wcci_2020": "ScoreL2RPN2020",
    "l2rpn_neurips_2020_track1": "ScoreL2RPN2020",
    "l2rpn_icaps_2021": "ScoreICAPS2021",
    "l2rpn_wcci_2022": "ScoreL2RPN2022",
    "l2rpn_idf_2023": "ScoreL2RPN2023",
}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) while the block runs; no lock without fcntl."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: one process at a time is the caller's business
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _chronic_of(env: Any, scenario: int) -> Path:
    from ace_hybrid.grid.env import scenario_name

    return Path(env.chronics_handler.real_data.path) / scenario_name(env, scenario)


def copy_path(env: Any, scenario: int, seed: int, start: int = 0) -> Path:
    """Where :func:`scenario_copy` keeps the copy for episode (``scenario``, ``seed``) starting at step ``start``;
    its lock file is beside it, the same name with ``.lock``."""
    if start < 0:
        raise ValueError(f"start = {start} out of range [0, inf)")
    name = f"{_chronic_of(env, scenario).name}-seed{int(seed)}" + (f"-start{int(start)}" if start else "")
    return cache_root() / "score_envs" / Path(env.get_path_env()).name / name


def scenario_copy(env: Any, scenario: int, seed: int, start: int = 0) -> Path:
    """A writable copy of ``env``'s data folder that holds only scenario ``scenario``, for the episode seed ``seed``,
    its time series from step ``start`` on (made once, then reused; call it under :func:`_locked` of its lock file,
    :func:`copy_path` ``.lock``, when processes may share the cache)."""
    source, chronic = Path(env.get_path_env()), _chronic_of(env, scenario)
    target = copy_path(env, scenario, seed, start)
    if not (target / "chronics" / chronic.name).exists():
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("chronics", "_statistics_*", "__pycache__"))
        (tmp / "chronics").mkdir()
        if start:
            _cut_scenario(env, scenario, seed, chronic, start, tmp)
        else:
            (tmp / "chronics" / chronic.name).symlink_to(chronic.resolve(), target_is_directory=True)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)  # atomic: a half-made copy is never used
    return target


def _cut_scenario(env: Any, scenario: int, seed: int, chronic: Path, start: int, copy: Path) -> None:
    """Write scenario ``scenario`` (folder ``chronic``) into the environment copy ``copy`` from its step ``start`` on:
    each time series without its first ``start`` steps (``h`` rows a step for a file of h-step forecasts), the start
    date moved on. grid2op's own ``split_and_save`` is not used: the episode it makes starts two steps early.

    Maintenance that grid2op draws over the whole scenario from the episode seed (``maintenance_meta.json``) would be
    drawn anew, otherwise, over the shorter one: the copy gets the maintenance episode ``seed`` drew, as a fixed
    ``maintenance.csv``, and reads it with the same class less the drawing."""
    import pandas as pd

    from ace_hybrid.grid.env import reset_episode

    spread, env.ace_start_spread = getattr(env, "ace_start_spread", 0), 0
    try:
        reset_episode(env, scenario, seed)  # loads the scenario from its first step: length, time step, maintenance
    finally:
        env.ace_start_spread = spread
    steps = int(env.max_episode_duration())
    if not 0 < start < steps:
        raise ValueError(f"start = {start} out of range [1, {steps}) for scenario {scenario} ({steps} steps)")
    target = copy / "chronics" / chronic.name
    target.mkdir()
    for source in chronic.iterdir():
        if not source.name.endswith((".csv", ".csv.bz2")):
            shutil.copy(source, target / source.name)
            continue
        table = pd.read_csv(source, sep=";")
        per_step, rest = divmod(len(table), steps + 1)  # a row per step, and the initial state's
        if rest or not per_step:
            raise ValueError(f"{source} has {len(table)} rows: not a time series of {steps + 1} steps to cut")
        table.iloc[start * per_step:].to_csv(target / source.name, sep=";", index=False)
    first = datetime.datetime.strptime((chronic / "start_datetime.info").read_text().strip(), "%Y-%m-%d %H:%M")
    moved = first + start * env.chronics_handler.time_interval
    (target / "start_datetime.info").write_text(f"{moved:%Y-%m-%d %H:%M}\n")
    if (chronic / "maintenance_meta.json").exists():
        drawn, fixed = "GridStateFromFileWithForecastsWithMaintenance", "GridStateFromFileWithForecasts"
        config = (copy / "config.py").read_text()
        if drawn not in config:
            raise ValueError(f"{chronic} draws its maintenance with a class other than {drawn}: cannot start its "
                             f"episodes at step {start} for the score")
        maintenance = env.chronics_handler.real_data.data.maintenance[start:].astype(int)
        pd.DataFrame(maintenance, columns=list(env.name_line)).to_csv(target / "maintenance.csv.bz2", sep=";",
                                                                      index=False)
        (copy / "config.py").write_text(config.replace(drawn, fixed))


def score_report(
    report: EvaluationReport,
    agent_factory: Callable[[Any], Any],
    *,
    max_steps: int | None = None,
    env_name: str | None = None,
    env_source: str | None = None,
) -> None:
    """Fill ``score`` and ``score_steps_survived`` of every episode of ``report`` (in place) with the environment's
    L2RPN score and the steps its replay survived.

    ``agent_factory(env)`` builds a fresh agent for the scored environment copy ``env``. The score replays the
    episode with grid2op's runner (environment and agent seeded with the episode's seed); ``score_steps_survived``
    equal to ``steps_survived`` says the replay played the test episode again. Environments without a grid2op score
    class get ``score_note`` saying so. ``env_source`` is the folder or generated set the episodes were played on
    (:func:`~ace_hybrid.grid.env.make_env`'s name; default: the environment ``env_name`` names).
    """
    import grid2op
    import grid2op.utils as scores
    from lightsim2grid import LightSimBackend

    from ace_hybrid.grid.env import make_env

    name = env_name or report.env_name
    if name not in SCORE_CLASSES:
        report.score_note = f"grid2op has no score class for {name}"
        return
    score_cls = getattr(scores, SCORE_CLASSES[name])
    reference = make_env(env_source or name, seed=0)
    for episode in report.episodes:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            where = copy_path(reference, episode.scenario, episode.seed, episode.start_step)
            with _locked(where.with_name(where.name + ".lock")):
                folder = scenario_copy(reference, episode.scenario, episode.seed, episode.start_step)
                env = grid2op.make(str(folder), backend=LightSimBackend())
                scorer = score_cls(env, nb_scenario=1, env_seeds=[episode.seed], agent_seeds=[episode.seed],
                                   max_step=max_steps if max_steps else -1, verbose=0)
            agent = agent_factory(env)
            all_scores, played, playable = scorer.get(agent)[:3]
        first = all_scores[0]
        episode.score = float(first[0] if isinstance(first, (tuple, list)) else first)
        # grid2op counts the step on which an episode fails as played; steps_survived does not. An episode cut at
        # max_steps has not failed (its references may have been computed on the whole episode).
        horizon = min(int(playable[0]), max_steps) if max_steps else int(playable[0])
        episode.score_steps_survived = int(played[0]) - int(int(played[0]) < horizon)
        env.close()
    reference.close()
    report.score_note = f"grid2op {SCORE_CLASSES[name]}, one (scenario, seed) at a time"

