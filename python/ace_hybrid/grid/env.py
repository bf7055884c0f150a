"""Grid2Op environments with lightsim2grid's backend, addressed reproducibly by (scenario id, seed).

The full L2RPN datasets are used when the user has them in grid2op's data directory; otherwise the small offline
copies that grid2op ships (``test=True``) are used, and the log says which.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
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


@dataclass(frozen=True)
class DatasetChoice:
    """Which copy of an environment's data is used."""

    name: str
    test: bool
    """True for grid2op's small offline copy, False for the full dataset."""
    path: str | None
    """Folder of the full dataset, None for the offline copy."""

    def describe(self) -> str:
        return f"{self.name}: {'offline test copy shipped with grid2op' if self.test else f'full dataset at {self.path}'}"


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

    Raises ``ValueError`` naming the valid choices for an unknown environment or an unavailable dataset.
    """
    if dataset not in ("auto", "full", "test"):
        raise ValueError(f"dataset={dataset!r} is not one of 'auto', 'full', 'test'")
    grid2op = _import_grid2op()
    if name not in SUPPORTED_ENVS:
        raise ValueError(f"unknown environment {name!r}; available here: {', '.join(available_envs())}")
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
        One of :data:`SUPPORTED_ENVS`.
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
    if start_spread:  # an episode must have a step to play
        shortest = min(_scenario_length(env, s) for s in range(n_scenarios(env)))
        if not 0 < start_spread < shortest:
            env.close()
            raise ValueError(f"start_spread = {start_spread} out of range [0, {shortest}) for {name} (its shortest "
                             f"scenario has {shortest} steps)")
    env.ace_start_spread = int(start_spread)
    env.ace_episode_start = 0
    return env


def make_config_env(cfg: Any) -> Any:
    """The environment of a run's configuration (a :class:`~ace_hybrid.config.Config`): its grid, generator seed and
    episode starts."""
    return make_env(cfg.env.name, seed=cfg.env.env_seed, start_spread=cfg.env.start_spread)


def n_scenarios(env: Any) -> int:
    """Number of scenarios (time series) the environment holds."""
    return len(env.chronics_handler.real_data.available_chronics())


def _scenario_length(env: Any, scenario: int) -> int:
    env.set_id(int(scenario))  # the next reset's; max_episode_duration reads the scenario loaded
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


def reset_episode(env: Any, scenario: int, seed: int) -> Any:
    """Reset ``env`` to scenario ``scenario`` with episode seed ``seed`` and return the first observation.

    Seeds change opponents and maintenance, hence results: an episode is the pair (scenario, seed). With a
    ``start_spread`` the seed also chooses the step the episode starts at (:func:`episode_start`).
    """
    count = n_scenarios(env)
    if not 0 <= scenario < count:
        raise IndexError(f"scenario {scenario} out of range [0, {count}) for {env.env_name}")
    if seed < 0:
        raise ValueError(f"seed {seed} must be >= 0")
    start = episode_start(env, seed)
    options: dict[str, int] = {"time serie id": int(scenario)}
    if start:  # grid2op takes "init ts" >= 1 only
        options["init ts"] = start
    env.ace_episode_start = start
    return env.reset(seed=int(seed), options=options)
