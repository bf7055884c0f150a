"""Reading a junior file (:mod:`ace_hybrid.training.junior` writes them): apart, so that what only plays a junior
(:func:`~ace_hybrid.training.policy.load_agent`, a collection a junior drives) need not import what fits one.

An ensemble file (``ace-hybrid junior ensemble``) is a junior file whose ``members`` key holds the actors of
juniors fitted on the same decisions (``actor`` is the first): it acts by their mean probabilities."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["JUNIOR_FORMAT", "actor_policies", "actors", "checked_junior", "is_junior", "learnt_from", "load_junior"]

JUNIOR_FORMAT = 1
_KEYS = ("format", "kind", "config", "actor", "normalizer", "action_set", "fit")


def load_junior(path: str | Path) -> dict[str, Any]:
    """A junior file's contents, or a clear error for a missing, foreign or damaged file."""
    from ace_hybrid.training.checkpoint import read_torch_file

    return checked_junior(read_torch_file(path), path)


def is_junior(state: Any) -> bool:
    """What :func:`~ace_hybrid.training.checkpoint.read_torch_file` read is a junior file (else a checkpoint)."""
    return isinstance(state, dict) and state.get("kind") == "junior"


def checked_junior(state: Any, path: str | Path) -> dict[str, Any]:
    """``state``, read from ``path``, if it is a complete junior file; else ValueError naming ``path``."""
    if not isinstance(state, dict) or state.get("kind") != "junior" or state.get("format") != JUNIOR_FORMAT:
        raise ValueError(f"{path} is not an ace_hybrid junior file of format {JUNIOR_FORMAT}")
    missing = [k for k in _KEYS if k not in state]
    if missing:
        raise ValueError(f"{path} is not a complete junior file: it lacks {missing}")
    return state


def learnt_from(state: dict[str, Any]) -> list[int]:
    """The scenarios (weeks) whose decisions a junior was fitted on: its collection's and every ``also``
    collection's (files written before this was recorded: its collection's configuration's)."""
    weeks = state["fit"].get("learnt_from")
    return [int(k) for k in (weeks if weeks is not None else state["config"]["env"]["train_scenarios"])]


def actors(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The actor states a junior file acts with: its one actor, or an ensemble's members."""
    return list(state.get("members") or [state["actor"]])


def actor_policies(state: dict[str, Any], obs_dim: int, action_features: Any, seed: int = 0) -> list[Any]:
    """A :class:`~ace_hybrid.sac.SACPolicy` per actor of a junior file (one, or an ensemble's members), over the
    action features ``action_features`` of its action set."""
    from ace_hybrid.config import config_from_dict
    from ace_hybrid.sac import SACPolicy

    cfg = config_from_dict(state["config"])
    policies = []
    for actor in actors(state):
        policy = SACPolicy(obs_dim, action_features.shape[0], cfg.sac, action_features=action_features, seed=seed)
        policy.load_policy_state({k: v.numpy() for k, v in actor.items()})
        policies.append(policy)
    return policies
