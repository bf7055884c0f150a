"""ace_hybrid: LLM-guided reinforcement learning for huge discrete action spaces (ACE).

The compiled core (``ace_hybrid._core``) holds the hot paths: the mixed prioritised replay buffer,
enumeration of bus-assignment actions and legality masks over tens of thousands of actions.
"""

from __future__ import annotations

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
