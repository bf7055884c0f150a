"""The ``ppo`` table of an experiment file's ``maskable-ppo`` rows: sb3-contrib's MaskablePPO hyperparameters.

They live in the experiment file, not in :class:`~ace_hybrid.config.Config`: a SAC run's configuration (and the
fingerprint that lets an experiment reuse it) stays what it was. The defaults suit the project's budgets of about
1,000-5,000 decisions (20,000 environment steps of l2rpn_neurips_2020_track1 make about 1,000): a rollout of 128
decisions gives 8-40 policy updates over such a run, each 10 epochs of minibatches of 32 (Schulman et al. 2017's
PPO with stable-baselines3's defaults otherwise)::

    [[rows]]
    name = "MaskablePPO (sb3-contrib)"
    kind = "maskable-ppo"
    ppo = { n_steps = 128, batch_size = 32, learning_rate = 3e-4 }
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PPOSettings:
    """MaskablePPO's hyperparameters (one environment, so a rollout is ``n_steps`` decisions)."""

    n_steps: int = 128
    """Decisions per rollout between two policy updates: about 8 updates over 1,000 decisions, 40 over 5,000."""
    batch_size: int = 32
    """Minibatch size of the updates (``n_steps`` must be a multiple of it: no ragged last minibatch)."""
    n_epochs: int = 10
    """Passes over each rollout per update."""
    learning_rate: float = 3e-4
    """Adam's step size (stable-baselines3's default)."""
    gamma: float = 0.99
    """Discount per decision, as ``sac.gamma`` (a decision spans the environment steps until the next one)."""
    gae_lambda: float = 0.95
    """GAE's lambda."""
    clip_range: float = 0.2
    """PPO's clipping of the probability ratio."""
    ent_coef: float = 0.01
    """Entropy bonus: keeps the policy exploring the ~100 actions of a "tutor:N" set through a short run."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the policy and value networks (separate, as ``sac.hidden``'s actor and critics)."""

    def __post_init__(self) -> None:
        for name in ("n_steps", "batch_size", "n_epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"ppo.{name} = {value!r} must be an integer >= 1")
        if self.n_steps % self.batch_size:
            raise ValueError(f"ppo.n_steps = {self.n_steps} must be a multiple of ppo.batch_size = "
                             f"{self.batch_size}")
        for name, low, high in (("learning_rate", 0.0, 1.0), ("gamma", 0.0, 1.0), ("gae_lambda", 0.0, 1.0),
                                ("clip_range", 0.0, 1.0), ("ent_coef", 0.0, 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not low <= value <= high:
                raise ValueError(f"ppo.{name} = {value!r} out of range [{low}, {high}]")
        if (not self.hidden or any(isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1
                                   for h in self.hidden)):
            raise ValueError(f"ppo.hidden = {self.hidden!r} must be a non-empty list of integers >= 1")

    @classmethod
    def from_table(cls, table: Any, where: str) -> PPOSettings:
        """The settings of a row's ``ppo`` table (its missing keys take the defaults); ValueError naming an unknown
        key or a bad value."""
        if not isinstance(table, dict):
            raise ValueError(f"{where}.ppo = {table!r} must be a table, e.g. {{ n_steps = 128, batch_size = 32 }}")
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(table) - set(valid))
        if unknown:
            raise ValueError(f"{where}.ppo: unknown key(s) {', '.join(map(repr, unknown))}; valid keys: "
                             f"{', '.join(valid)}")
        values = dict(table)
        if "hidden" in values:
            values["hidden"] = tuple(values["hidden"]) if isinstance(values["hidden"], list) else values["hidden"]
        try:
            return cls(**values)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """Plain values (JSON), the ``ppo`` table's keys."""
        return {**dataclasses.asdict(self), "hidden": list(self.hidden)}
