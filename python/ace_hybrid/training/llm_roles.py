"""ACE's two LLM roles built for a run, and the loop's bookkeeping of what they did.

* the policy actor f_LLM (:class:`~ace_hybrid.llm.actor.PolicyActor`): one per LLM worker thread, sharing the
  backend; its counters over the run (:class:`~ace_hybrid.llm.actor.ActorStats`) are the sum of each committed
  refinement's (:func:`add_stats`);
* the value critic g_LLM (:class:`~ace_hybrid.llm.critic.ValueCritic`), on its schedule (:class:`CriticInLoop`):
  at most one round pending, a round that comes due meanwhile is skipped (the next one sees the same trajectories),
  and a round's reward writes are applied when it is committed, so a checkpoint holds a round wholly or not at all.

The roles take only the values they need (the backend, the action catalog, a reward function, ...), never the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np

from ace_hybrid.grid.text import LineEndpoints
from ace_hybrid.llm.actor import ActorStats, PolicyActor
from ace_hybrid.llm.backend import LLMBackend
from ace_hybrid.llm.critic import CriticReport, ValueCritic
from ace_hybrid.training.run import Run

__all__ = ["CriticInLoop", "add_stats", "make_actors"]


def make_actors(run: Run, backend: LLMBackend, n: int) -> list[PolicyActor]:
    """``n`` policy actors over ``run``'s actions and environment (``ace.*`` settings), actor k seeded
    ``train.seed + k``."""
    cfg, ace = run.cfg, run.cfg.ace
    endpoints = LineEndpoints.from_env(run.env)
    return [PolicyActor(
        backend, run.actions, endpoints, reward_fn=run.step_reward, threshold=cfg.env.threshold,
        candidates=ace.candidates, max_rounds=ace.max_rounds, validation_steps=ace.validation_steps,
        min_improvement=ace.min_improvement, min_rho_drop=ace.min_rho_drop, ranker=ace.ranker,
        lac_alpha=ace.lac_alpha, show_effects=ace.show_effects, seed=cfg.train.seed + k,
        do_nothing_first=ace.do_nothing_first, label_all=ace.label_candidates,
        effects_vs_played=ace.effects_vs_played) for k in range(n)]


def add_stats(total: ActorStats, delta: ActorStats) -> None:
    """``total += delta``, field by field (``error_kinds`` by kind)."""
    for f in fields(ActorStats):
        if f.name == "error_kinds":
            for kind, n in delta.error_kinds.items():
                total.error_kinds[kind] = total.error_kinds.get(kind, 0) + n
        else:
            setattr(total, f.name, getattr(total, f.name) + getattr(delta, f.name))


class CriticInLoop:
    """The value critic of a run (``core``; None when ``ace.critic`` is off), its schedule and its totals over the
    run (as committed; zero without the critic)."""

    def __init__(self, run: Run, backend: LLMBackend) -> None:
        self.ace = run.cfg.ace
        self.core: ValueCritic | None = None
        if self.ace.critic:
            n_line = int(run.env.n_line)
            self.core = ValueCritic(backend, self.ace, describe_action=run.actions.describe,
                                    max_rho=lambda raw: np.asarray(raw)[:, :n_line].max(axis=1))
        self.state = self.core.state_dict() if self.core is not None else None
        """The critic's state as of the last committed round (what checkpoints save)."""
        self.totals = {"rounds": 0, "trajectories": 0, "calls": 0, "malformed": 0, "errors": 0,
                       "adjusted_steps": 0, "total_abs_adjustment": 0.0}
        self.pending = False
        """A round is with the worker."""

    def due(self, env_steps: int, episodes: int, budget_left: Callable[[str], bool]) -> bool:
        """The critic is on, ``ace.critic_start`` steps have passed, ``ace.critic_every`` episodes divide the
        episodes finished, and its budget is not spent."""
        return not (self.core is None or env_steps < self.ace.critic_start or episodes % self.ace.critic_every
                    or not budget_left("critic"))

    def commit(self, replay: Any, report: CriticReport, state: dict[str, Any],
               writes: list[tuple[int, float, float]]) -> dict[str, float]:
        """Apply a finished round's reward writes ((handle, reward, adjustment), in order) to ``replay``; returns the
        ``critic/*`` totals."""
        self.pending = False
        adjusted, total_abs = 0, 0.0
        for handle, reward, a in writes:  # one at a time, so that a stale handle is known exactly
            if replay.update_rewards(np.array([handle], dtype=np.int64), np.array([reward])):
                adjusted += 1
                total_abs += abs(a)
        self.state = state
        t = self.totals
        t["rounds"] += 1
        for key in ("trajectories", "calls", "malformed", "errors"):
            t[key] += getattr(report, key)
        t["adjusted_steps"] += adjusted
        t["total_abs_adjustment"] += total_abs
        return {f"critic/{k}": float(v) for k, v in t.items()}

    def load_state_dict(self, state: dict[str, Any] | None, totals: dict[str, Any]) -> None:
        if self.core is not None and state is not None:
            self.core.load_state_dict(state)
            self.state = self.core.state_dict()
        self.totals.update(totals)
