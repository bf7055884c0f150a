"""Section ``[replay]``: the mixed prioritised replay (ACE's Eq. 8).

``replay.validated_capacity`` was ``replay.llm_capacity`` (the old key is refused with a ValueError naming the new one,
see :data:`~ace_hybrid.config.loading.RENAMED`)."""

from __future__ import annotations

from dataclasses import dataclass

from ace_hybrid.config.checks import check

__all__ = ["ReplayConfig"]


@dataclass
class ReplayConfig:
    """The mixed prioritised replay (ACE's Eq. 8)."""

    rl_capacity: int = 100_000
    """Capacity of the RL partition (observation slots)."""
    validated_capacity: int = 20_000
    """Capacity of the validated partition (the paper's D_LLM: LLM refinements and tutor decisions, each checked
    in a simulator)."""
    alpha: float = 0.6
    """Priority exponent of the RL partition (0: uniform)."""
    beta: float = 0.25
    """Fraction of each batch drawn from the validated partition when it has data."""
    tau: float = 1.0
    """Temperature of Eq. 8: validated items are drawn with probability proportional to I_v exp((r_hat - r) / tau)."""
    is_exponent: float = 0.4
    """Importance-sampling exponent w of the weights (N q_i)^-w."""
    priority_eps: float = 1e-3
    """Added to |TD error| to form a priority, so no transition becomes unsampleable."""

    def validate(self) -> None:
        check(self.rl_capacity >= 3, "replay.rl_capacity", self.rl_capacity, "must be >= 3")
        check(self.validated_capacity >= 1, "replay.validated_capacity", self.validated_capacity, "must be >= 1")
        check(0 <= self.alpha <= 1, "replay.alpha", self.alpha, "must be in [0, 1]")
        check(0 <= self.beta <= 1, "replay.beta", self.beta, "must be in [0, 1]")
        check(self.tau > 0, "replay.tau", self.tau, "must be > 0")
        check(0 <= self.is_exponent <= 1, "replay.is_exponent", self.is_exponent, "must be in [0, 1]")
        check(self.priority_eps > 0, "replay.priority_eps", self.priority_eps, "must be > 0")
