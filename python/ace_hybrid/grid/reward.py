"""The reward of one environment step, the one every part of ace_hybrid trains and validates with.

A decision's reward (a semi-MDP transition) is the sum of this over every environment step until the next
decision; see :class:`~ace_hybrid.config.RewardConfig` for the scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ace_hybrid.config import RewardConfig

__all__ = ["step_reward"]


def step_reward(cfg: RewardConfig, obs: Any, blackout: bool) -> float:
    """``step_scale * (1 + margin_weight * clip(1 - max_rho, -1, 1))``, or ``-blackout_penalty`` on a blackout."""
    if blackout:
        return -cfg.blackout_penalty
    margin = float(np.clip(1.0 - np.max(obs.rho), -1.0, 1.0))
    return cfg.step_scale * (1.0 + cfg.margin_weight * margin)
