"""Discrete Soft Actor-Critic over a large, masked action catalog (tens of thousands of actions).

Twin Q networks with Polyak-averaged targets, a categorical policy over the whole catalog, an automatically tuned
temperature, a low-rank head over sparse action features, and an update streamed over blocks of actions with an
online softmax. It knows no grid, LLM or training loop. What the update computes, how, and what it was measured at:
docs/sac.md.
"""

from __future__ import annotations

from ace_hybrid.config import HEADS, SACConfig
from ace_hybrid.sac.agent import DiscreteSAC, UpdateResult
from ace_hybrid.sac.batch import UpdateBatch
from ace_hybrid.sac.policy import SACPolicy

__all__ = ["DiscreteSAC", "HEADS", "SACConfig", "SACPolicy", "UpdateBatch", "UpdateResult"]
