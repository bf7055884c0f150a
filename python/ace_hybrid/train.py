"""Deprecated: moved to :mod:`ace_hybrid.training` in 0.2; this re-export goes in 0.3."""

import warnings

from ace_hybrid.training.checkpoint import load_checkpoint_file, restore, save_checkpoint  # noqa: F401
from ace_hybrid.training.loop import train  # noqa: F401
from ace_hybrid.training.policy import SACAgent, load_agent  # noqa: F401

warnings.warn("ace_hybrid.train moved to ace_hybrid.training (loop, checkpoint, policy)", DeprecationWarning,
              stacklevel=2)
