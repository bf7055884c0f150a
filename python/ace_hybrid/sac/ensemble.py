"""Several policies over the same actions acting as one: the mean of their probabilities.

Juniors cloned on the same decisions with different seeds agree on most decisions and differ on a few, and which
few decides an episode's survival; their mean keeps what they share (docs/results.md measures it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ace_hybrid.sac.policy import SACPolicy

__all__ = ["PolicyEnsemble"]


class PolicyEnsemble:
    """Acts by the mean of its members' probabilities (each :class:`SACPolicy` over the same features and
    actions), deterministically: an ensemble is deployed or measured, never trained or sampled from."""

    def __init__(self, members: Sequence[SACPolicy]) -> None:
        self.members = list(members)
        if len(self.members) < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {len(self.members)}")
        shapes = {(m.obs_dim, m.n_actions) for m in self.members}
        if len(shapes) != 1:
            raise ValueError(f"the members act on different (obs_dim, n_actions): {sorted(shapes)}")
        self.obs_dim, self.n_actions = shapes.pop()

    def policy_probs(self, obs: np.ndarray, mask: np.ndarray) -> npt.NDArray[np.float32]:
        """(n,) float32: the members' mean pi(a | obs) over the legal actions (0 where ``mask`` is False)."""
        return np.mean([m.policy_probs(obs, mask) for m in self.members], axis=0, dtype=np.float64).astype(np.float32)

    def act(self, obs: np.ndarray, mask: np.ndarray, *, deterministic: bool = True) -> int:
        """The legal action of largest mean probability (ties: the lowest index)."""
        if not deterministic:
            raise ValueError("an ensemble acts deterministically (deterministic = True): it is deployed, not trained")
        return int(np.argmax(np.where(mask, self.policy_probs(obs, mask), -1.0)))
