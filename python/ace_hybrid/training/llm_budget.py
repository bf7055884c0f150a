"""The LLM call budget of an ACE run (``ace.max_llm_calls``), shared by the policy actor and the value critic.

One budget caps the LLM calls of the actor and the critic: the critic has a reserved share (``ace.critic_share``),
the actor the rest, paced over the run (``ace.pace_budget``). A call is spent when it is made, by whichever thread
makes it (the loop's or the LLM worker's), so the counters sit behind a lock. Co-evolution's probe calls are a
measurement, counted apart (``probe_calls``) and never refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ace_hybrid.config import ACEConfig

__all__ = ["CallBudget"]


class CallBudget:
    """The calls each role has made and may make (thread-safe).

    Parameters
    ----------
    ace : ACEConfig
        ``max_llm_calls`` (0: unlimited), ``critic_share``, ``pace_budget``.
    progress : callable
        ``() -> (env_steps, total_env_steps)``, read at call time (a resumed run may change both).
    critic_on : bool
        Whether the value critic runs: only then is its share reserved.
    """

    def __init__(self, ace: ACEConfig, progress: Callable[[], tuple[int, int]], *, critic_on: bool) -> None:
        self.ace, self._progress, self._critic_on = ace, progress, critic_on
        self._lock = threading.Lock()
        self.calls = 0
        """Calls made by the actor and the critic."""
        self.role_calls = {"actor": 0, "critic": 0}
        self.probe_calls = 0
        """Co-evolution's probe calls (2 x probe_size per fine-tuning round), not in :attr:`calls`."""

    def _limit(self, role: str) -> int:
        """Calls ``role`` ("actor" or "critic") may have made by now: the critic's share of the budget is reserved
        for it (``ace.critic_share``) and unpaced (it runs on a schedule); the actor's paced rest."""
        total = self.ace.max_llm_calls
        critic = int(total * self.ace.critic_share) if self._critic_on else 0
        if role == "critic":
            return critic
        limit = total - critic
        if self.ace.pace_budget:
            t, steps = self._progress()
            limit = limit * (steps + 9 * min(t, steps)) // (10 * steps)  # limit * (0.1 + 0.9 t / T), in integers
        return limit

    def budget_left(self, role: str = "actor") -> bool:
        """Whether ``role`` may make a call now (``ace.max_llm_calls``, ``ace.critic_share``, ``ace.pace_budget``)."""
        with self._lock:
            return self.ace.max_llm_calls == 0 or self.role_calls[role] < self._limit(role)

    def may_call(self, role: str = "actor") -> bool:
        """Take one call from ``role``'s budget; False when it is spent."""
        with self._lock:
            if self.ace.max_llm_calls and self.role_calls[role] >= self._limit(role):
                return False
            self.role_calls[role] += 1
            self.calls += 1
            return True

    def may_call_critic(self) -> bool:
        """:meth:`may_call` for the critic."""
        return self.may_call("critic")

    def count_probe_call(self) -> bool:
        """Probe calls measure the LLM: counted apart and never refused, so this only counts and always allows
        (True)."""
        with self._lock:
            self.probe_calls += 1
        return True

    def state_dict(self) -> dict[str, Any]:
        """``calls``, ``role_calls``, ``probe_calls`` (a consistent copy)."""
        with self._lock:
            return {"calls": self.calls, "role_calls": dict(self.role_calls), "probe_calls": self.probe_calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.calls = int(state["calls"])
            self.role_calls.update(state["role_calls"])
            self.probe_calls = int(state["probe_calls"])
