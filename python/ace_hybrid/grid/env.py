"""Grid2Op environments with lightsim2grid's backend, addressed reproducibly by (scenario id, seed).

An environment is named three ways: a supported name (the full L2RPN dataset when the user has it in grid2op's
data directory, else the small offline copy grid2op ships, ``test=True``; the log says which), the path of an
environment folder (a full dataset downloaded anywhere, a generated set), or the name of a generated set under the
data root (``$ACE_HYBRID_DATA``, else ``./data``; ``ace-hybrid data generate`` makes them). In a generated set,
whose week folders are named ``<k:03d>_<date>``, scenario id k is week k, whatever weeks are missing; elsewhere
scenario ids are the positions of the scenario folders in sorted order.
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

#: Environments ace_hybrid supports and tests (l2rpn_wcci_2022 only where its full dataset is installed).
SUPPORTED_ENVS: tuple[str, ...] = (
    "l2rpn_case14_sandbox",
    "l2rpn_wcci_2020",
    "l2rpn_neurips_2020_track1",
    "l2rpn_icaps_2021",
    "l2rpn_idf_2023",
    "l2rpn_wcci_2022",
)

Dataset = Literal["auto", "full", "test"]


#: A generated set's week folder: ``<week number>_<start date>``.
WEEK_FOLDER = re.compile(r"(\d{3})_\d{4}-\d{2}-\d{2}")
#: The file that marks a folder as a generated set (ace_hybrid.data.sets writes it).
SET_META = "ace_set.json"


@dataclass(frozen=True)
class DatasetChoice:
    """Which copy of an environment's data is used."""

    name: str
    test: bool
    """True for grid2op's small offline copy, False for the full dataset or a folder."""
    path: str | None
    """Folder of the full dataset or the folder named, None for the offline copy."""
    generated: bool = False
    """True for a generated set (``ace-hybrid data generate``)."""

    def describe(self) -> str:
        if self.test:
            return f"{self.name}: offline test copy shipped with grid2op"
        return f"{self.name}: {'generated set' if self.generated else 'full dataset'} at {self.path}"


def data_root() -> Path:
    """Where generated sets are made and found by name: ``$ACE_HYBRID_DATA``, else ``./data``."""
    return Path(os.environ.get("ACE_HYBRID_DATA") or "data")


def env_folder(name: str | os.PathLike[str]) -> Path | None:
    """The environment folder ``name`` names: a path to one (it holds ``config.py``), or a generated set's name
    under :func:`data_root`; None when it names neither (then it may be a supported environment's name)."""
    for candidate in (Path(name), data_root() / str(name)):
        if (candidate / "config.py").is_file() and (candidate / "chronics").is_dir():
            return candidate
    return None


def _folder_choice(folder: Path) -> DatasetChoice:
    if not any(p.is_dir() for p in (folder / "chronics").iterdir()):
        raise ValueError(f"{folder} holds no scenario yet (its chronics/ is empty): for a generated set, "
                         "ace-hybrid data generate makes its weeks")
    meta = folder / SET_META
    if meta.is_file():
        with open(meta, encoding="utf-8") as f:
            return DatasetChoice(str(json.load(f)["env"]), test=False, path=str(folder), generated=True)
    return DatasetChoice(folder.name, test=False, path=str(folder))


def _import_grid2op() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # grid2op warns about optional accelerators at import
            import grid2op
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("the Grid2Op layer needs grid2op and lightsim2grid: pip install 'ace-hybrid[grid]'") from exc
    return grid2op


def available_envs() -> list[str]:
    """Names :func:`make_env` accepts here: the supported ones with a full dataset or an offline copy."""
    grid2op = _import_grid2op()
    offline = set(grid2op.list_available_test_env())
    local = set(grid2op.list_available_local_env())
    return [name for name in SUPPORTED_ENVS if name in offline or name in local]


def choose_dataset(name: str, dataset: Dataset = "auto") -> DatasetChoice:
    """Decide between the full dataset and the offline copy for ``name``.

    ``name`` may also be an environment folder or a generated set (:func:`env_folder`), used as it is.
    Raises ``ValueError`` naming the valid choices for an unknown environment or an unavailable dataset.
    """
    if dataset not in ("auto", "full", "test"):
        raise ValueError(f"dataset={dataset!r} is not one of 'auto', 'full', 'test'")
    grid2op = _import_grid2op()
    if name not in SUPPORTED_ENVS:
        folder = env_folder(name)
        if folder is not None and dataset != "test":
            return _folder_choice(folder)
        raise ValueError(f"unknown environment {name!r}: not a supported name (available here: "
                         f"{', '.join(available_envs())}), an environment folder, nor a generated set under "
                         f"{data_root()}")
    full_path = os.path.join(grid2op.get_current_local_dir(), name)
    has_full = name in set(grid2op.list_available_local_env()) and os.path.isdir(full_path)
    has_test = name in set(grid2op.list_available_test_env())
    if dataset == "full" or (dataset == "auto" and has_full):
        if not has_full:
            raise ValueError(f"dataset='full' but {name!r} is not in grid2op's data directory {full_path}")
        return DatasetChoice(name, test=False, path=full_path)
    if not has_test:
        raise ValueError(f"{name!r} has no offline copy in this grid2op and no full dataset at {full_path}")
    return DatasetChoice(name, test=True, path=None)


def make_env(
    name: str,
    *,
    seed: int,
    backend: Literal["lightsim", "pandapower"] = "lightsim",
    dataset: Dataset = "auto",
    start_spread: int = 0,
    **kwargs: Any,
) -> Any:
    """Make a Grid2Op environment.

    Parameters
    ----------
    name
        One of :data:`SUPPORTED_ENVS`, the path of an environment folder (a full dataset, a generated set) or a
        generated set's name under :func:`data_root` (:func:`choose_dataset`).
    seed
        Seed of the environment's generators (opponent, maintenance, ...); episodes also take their own seed in
        :func:`reset_episode`.
    backend
        ``"lightsim"`` (lightsim2grid, fast, the default) or ``"pandapower"``.
    dataset
        ``"auto"`` uses the full dataset when installed and the offline copy otherwise.
    start_spread
        When > 0, :func:`reset_episode` starts the episode of seed s at step :func:`episode_start` (s) of its
        scenario, in [0, start_spread); it must be shorter than the scenarios.
    **kwargs
        Passed to ``grid2op.make`` (e.g. ``param=``, ``opponent_class=``).
    """
    choice = choose_dataset(name, dataset)
    grid2op = _import_grid2op()
    if backend == "lightsim":
        from lightsim2grid import LightSimBackend

        backend_obj: Any = LightSimBackend()
    elif backend == "pandapower":
        from grid2op.Backend import PandaPowerBackend

        backend_obj = PandaPowerBackend()
    else:
        raise ValueError(f"backend={backend!r} is not one of 'lightsim', 'pandapower'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "you are using a test environment" and similar notices
        if choice.test:
            env = grid2op.make(name, test=True, backend=backend_obj, **kwargs)
        else:
            env = grid2op.make(choice.path, backend=backend_obj, **kwargs)
    env.seed(int(seed))
    logger.info("environment %s", choice.describe())
    env.ace_dataset = choice  # which copy is in use travels with the env
    env.ace_scenarios = _scenario_names(env, weeks=choice.generated)
    if start_spread:  # an episode must have a step to play
        shortest = min(_scenario_length(env, s) for s in scenario_ids(env))
        if not 0 < start_spread < shortest:
            env.close()
            raise ValueError(f"start_spread = {start_spread} out of range [0, {shortest}) for {name} (its shortest "
                             f"scenario has {shortest} steps)")
    env.ace_start_spread = int(start_spread)
    env.ace_episode_start = 0
    return env


def make_config_env(cfg: Any) -> Any:
    """The environment of a run's configuration (a :class:`~ace_hybrid.config.Config`): its grid (``env.data``'s
    folder or generated set when given, which must be of ``env.name``), generator seed and episode starts."""
    if not cfg.env.data:
        return make_env(cfg.env.name, seed=cfg.env.env_seed, start_spread=cfg.env.start_spread)
    choice = choose_dataset(cfg.env.data)
    if choice.name != cfg.env.name:
        raise ValueError(f"env.data = {cfg.env.data!r} holds {choice.name!r} data but env.name = {cfg.env.name!r}")
    return make_env(cfg.env.data, seed=cfg.env.env_seed, start_spread=cfg.env.start_spread)


def _scenario_names(env: Any, weeks: bool = False) -> dict[int, str]:
    """Scenario id -> the folder name grid2op knows it by: week numbers in a generated set (``weeks``), positions
    elsewhere."""
    names = sorted(os.path.basename(str(p)) for p in env.chronics_handler.real_data.available_chronics())
    if not weeks:
        return dict(enumerate(names))
    numbered = {}
    for name in names:
        match = WEEK_FOLDER.fullmatch(name)
        if match is None:
            raise ValueError(f"{name!r} in a generated set's chronics/ is not a week folder (<k:03d>_<YYYY-MM-DD>)")
        numbered[int(match.group(1))] = name
    return numbered


def scenario_ids(env: Any) -> list[int]:
    """The scenario ids ``env`` holds, sorted (0..n-1, except in a generated set with missing weeks)."""
    names = getattr(env, "ace_scenarios", None)
    return sorted(names) if names is not None else list(range(n_scenarios(env)))


def scenario_name(env: Any, scenario: int) -> str:
    """The folder of scenario ``scenario``; ``IndexError`` naming the ids the environment holds."""
    names = getattr(env, "ace_scenarios", None) or _scenario_names(env)
    if scenario not in names:
        ids = sorted(names)
        choice = getattr(env, "ace_dataset", None)
        where = choice.path if choice is not None and choice.path else env.env_name
        if ids == list(range(len(ids))):
            raise IndexError(f"scenario {scenario} out of range [0, {len(ids)}) for {where}")
        raise IndexError(f"scenario {scenario} out of range: {where} holds scenarios {{{', '.join(map(str, ids))}}}")
    return names[scenario]


def _grid2op_id(env: Any, scenario: int) -> int | str:
    """What grid2op's ``set_id`` / "time serie id" takes for ``scenario``: the week's folder name in a generated set
    (ids there are week numbers), the position elsewhere (as every earlier table was played)."""
    name = scenario_name(env, scenario)
    choice = getattr(env, "ace_dataset", None)
    return name if choice is not None and choice.generated else int(scenario)


def check_scenarios(env: Any, scenarios: Any, what: str) -> None:
    """Raise ``IndexError`` naming ``what`` (e.g. "env.train_scenarios") for a scenario ``env`` does not hold."""
    for s in scenarios:
        try:
            scenario_name(env, int(s))
        except IndexError as exc:
            raise IndexError(f"{what}: {exc}") from None


def n_scenarios(env: Any) -> int:
    """Number of scenarios (time series) the environment holds."""
    return len(env.chronics_handler.real_data.available_chronics())


def _scenario_length(env: Any, scenario: int) -> int:
    env.set_id(_grid2op_id(env, scenario))  # the next reset's; max_episode_duration reads the scenario loaded
    env.reset()
    return int(env.max_episode_duration())


def episode_start(env: Any, seed: int) -> int:
    """The step of its scenario where the episode of seed ``seed`` starts: 0, or with ``start_spread`` > 0 (see
    :func:`make_env`) a step in [0, start_spread) hashed from the seed (splitmix64's mixer: consecutive seeds start
    at unrelated steps, the same on every machine and numpy version)."""
    spread = int(getattr(env, "ace_start_spread", 0))
    if not spread:
        return 0
    mask = 2**64 - 1
    x = (int(seed) + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return (x ^ (x >> 31)) % spread


def playable_steps(env: Any) -> int:
    """Steps of the current episode from its start to the end of its scenario (after :func:`reset_episode`)."""
    return int(env.max_episode_duration()) - int(getattr(env, "ace_episode_start", 0))


RESTART_STEPS = 12
"""Steps (an hour of 5-minute steps) an episode's start moves on by when its reset ends the game."""


def reset_episode(env: Any, scenario: int, seed: int) -> Any:
    """Reset ``env`` to scenario ``scenario`` with episode seed ``seed`` and return the first observation.

    Seeds change opponents and maintenance, hence results: an episode is the pair (scenario, seed). With a
    ``start_spread`` the seed also chooses the step the episode starts at (:func:`episode_start`). A start where
    grid2op ends the game at the reset itself (a seed's maintenance the grid cannot carry at that hour: week 4 of
    l2rpn_idf_2023-weeks-s0, seed 2147, steps 696-791) moves on by ``RESTART_STEPS`` until one resets; the step
    played from is ``env.ace_episode_start``.

    Raises
    ------
    ValueError
        A negative seed, or no start from the seed's to the scenario's end that resets.
    """
    from grid2op.Exceptions import EnvError

    which = _grid2op_id(env, int(scenario))
    if seed < 0:
        raise ValueError(f"seed {seed} must be >= 0")
    start = episode_start(env, seed)
    while True:
        options: dict[str, Any] = {"time serie id": which}
        if start:  # grid2op takes "init ts" >= 1 only
            options["init ts"] = start
        env.ace_episode_start = start
        try:
            return env.reset(seed=int(seed), options=options)
        except EnvError:
            start += RESTART_STEPS
            if start >= int(env.max_episode_duration()):
                raise ValueError(f"episode (scenario {scenario}, seed {seed}): grid2op ends the game at every "
                                 f"start from step {episode_start(env, seed)} to the scenario's end") from None
