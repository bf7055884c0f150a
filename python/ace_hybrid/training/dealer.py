"""The session's work, dealt to rollout workers: episode ids one at a time, environment steps in chunks.

Kept apart from :mod:`ace_hybrid.training.rollout` and free of heavy imports (no torch, no grid2op): the Ray
executor runs a :class:`Dealer` as its own actor, and the process that hosts it imports only this module, so it is
ready in a fraction of a second while the rollout workers are still importing theirs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Budget", "Dealer", "Grant"]


@dataclass(frozen=True)
class Budget:
    """A session's work: the run's environment steps ``[first_step, total_steps)`` and its episode ids from
    ``first_episode`` on."""

    first_step: int
    total_steps: int
    first_episode: int
    until: int | None = None
    """Steps are granted up to this one (None: ``total_steps``) until the learner moves it on
    (:meth:`Dealer.grant_until`): the run's next ``train.keep_best_at`` budget, where the workers wait while the
    learner evaluates, so that the evaluation sees exactly that many steps."""


class Grant(NamedTuple):
    """What :meth:`Dealer.steps` hands out."""

    first: int
    """Index in the run of the first step granted."""
    steps: int
    """How many (0: none now; the workers wait at a budget, or the budget is spent)."""
    last: bool
    """The step budget is spent with these: no steps come after them."""


class Dealer:
    """Hands out a session's :class:`Budget`: episode ids one at a time, environment steps in chunks, never past
    ``until``.

    In-process by default; :meth:`shared` keeps the counters in shared memory behind a lock, for worker processes
    (pickled to them when they start), and the Ray executor runs one as an actor.
    """

    def __init__(self, budget: Budget, counts: Any = None, lock: Any = None) -> None:
        self._counts = counts if counts is not None else [0, 0, 0, 0]  # next step, next episode, until, total
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self.reset(budget)

    @classmethod
    def shared(cls, ctx: Any, budget: Budget) -> Dealer:
        """A dealer whose counters live in shared memory (``ctx``: a multiprocessing context)."""
        return cls(budget, ctx.RawArray("q", 4), ctx.Lock())

    def reset(self, budget: Budget) -> None:
        """Deal ``budget`` from now on (a dealer made before the session's budget was known)."""
        with self._lock:
            total = int(budget.total_steps)
            until = total if budget.until is None else min(int(budget.until), total)
            self._counts[:] = [int(budget.first_step), int(budget.first_episode), until, total]

    def steps(self, want: int) -> Grant:
        """Up to ``want`` more steps, none past ``until`` (see :class:`Grant`)."""
        with self._lock:
            first, until, total = int(self._counts[0]), int(self._counts[2]), int(self._counts[3])
            granted = max(0, min(int(want), until - first))
            self._counts[0] = first + granted
        return Grant(first, granted, first + granted >= total)

    def grant_until(self, step: int) -> None:
        """Let the steps up to ``step`` (at most the total) be granted: the learner has evaluated at the budget
        where the workers waited."""
        with self._lock:
            self._counts[2] = min(int(step), int(self._counts[3]))

    def episode(self) -> int:
        """The next episode id."""
        with self._lock:
            k = int(self._counts[1])
            self._counts[1] = k + 1
        return k
