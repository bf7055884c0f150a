"""ace_hybrid: LLM-guided reinforcement learning for huge discrete action spaces (ACE).

The compiled core (``ace_hybrid._core``) holds the hot paths: the mixed prioritised replay buffer,
enumeration of bus-assignment actions and legality masks over tens of thousands of actions.

The Python API of the command line is here too, loaded on first use so that ``import ace_hybrid`` stays light (no
torch, no grid2op)::

    from ace_hybrid import evaluate, find_config, load_config, make_agent, make_env, train

    cfg = load_config(find_config("l2rpn_case14_sandbox"), ["train.total_env_steps=2000"])
    summary = train(cfg, "runs/api")                        # ace_hybrid.training.loop.train
    env = make_env(cfg.env.name, seed=0)                    # ace_hybrid.grid.env.make_env
    agent = make_agent("checkpoint:runs/api/best.pt", env)  # ace_hybrid.agents.make_agent
    report = evaluate(env, agent, [(0, 0), (1, 1)])         # ace_hybrid.grid.evaluation.evaluate

These names need the ``grid`` extra (``train`` also the ``train`` extra); a missing one is an ``ImportError`` that says
what to install. They are not in ``__all__``, so ``from ace_hybrid import *`` works without the extras.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ace_hybrid._core import build_info
from ace_hybrid.masking import LegalityMasker
from ace_hybrid.replay import MixedReplayBuffer, ReplayBatch
from ace_hybrid.sampling import (
    MaskedSample,
    SamplingGenerator,
    TopK,
    masked_argmax,
    masked_sample,
    masked_topk,
)
from ace_hybrid.topology import BusAssignmentSpace, bus_assignments, bus_assignments_from_layout

__version__: str = build_info()["version"]

__all__ = [
    "BusAssignmentSpace",
    "LegalityMasker",
    "MaskedSample",
    "MixedReplayBuffer",
    "ReplayBatch",
    "SamplingGenerator",
    "TopK",
    "__version__",
    "build_info",
    "bus_assignments",
    "bus_assignments_from_layout",
    "masked_argmax",
    "masked_sample",
    "masked_topk",
]

if TYPE_CHECKING:  # what type checkers see of the lazy API (re-exports, hence the aliases)
    from ace_hybrid.agents import make_agent as make_agent
    from ace_hybrid.cli import find_config as find_config
    from ace_hybrid.config import load_config as load_config
    from ace_hybrid.grid.env import make_env as make_env
    from ace_hybrid.grid.evaluation import evaluate as evaluate
    from ace_hybrid.training.loop import train as train

#: The lazily loaded API and the extra each needs (named in the ImportError when it is missing).
_LAZY: dict[str, str | None] = {"train": "train", "evaluate": "grid", "make_agent": "grid", "make_env": "grid",
                                "load_config": None, "find_config": None}


def _load(name: str) -> Any:
    if name == "train":
        from ace_hybrid.training.loop import train

        return train
    if name == "evaluate":
        from ace_hybrid.grid.evaluation import evaluate

        return evaluate
    if name == "make_agent":
        from ace_hybrid.agents import make_agent

        return make_agent
    if name == "make_env":
        from ace_hybrid.grid.env import make_env

        return make_env
    if name == "load_config":
        from ace_hybrid.config import load_config

        return load_config
    from ace_hybrid.cli import find_config

    return find_config


def __getattr__(name: str) -> Any:
    """The lazy API: imported on first use (PEP 562), then cached in the module."""
    if name not in _LAZY:
        raise AttributeError(f"module 'ace_hybrid' has no attribute {name!r}")
    try:
        value = _load(name)
    except ImportError as exc:
        from ace_hybrid.cli import missing_extra

        hint = missing_extra(exc, _LAZY[name])
        if hint is None:
            raise
        raise ImportError(f"ace_hybrid.{name}: {hint}") from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
