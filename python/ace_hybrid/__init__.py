"""ace_hybrid: LLM-guided reinforcement learning for huge discrete action spaces (ACE).

The compiled core (``ace_hybrid._core``) holds the hot paths: the mixed prioritised replay buffer,
enumeration of bus-assignment actions and legality masks over tens of thousands of actions.
"""

from __future__ import annotations

from ace_hybrid._core import build_info
from ace_hybrid.replay import MixedReplayBuffer, ReplayBatch

__version__: str = build_info()["version"]

__all__ = ["MixedReplayBuffer", "ReplayBatch", "__version__", "build_info"]
