"""Deprecated: moved to :mod:`ace_hybrid.training.ace` in 0.2; this re-export goes in 0.3."""

import warnings

from ace_hybrid.training.ace import LLMInLoop  # noqa: F401

warnings.warn("ace_hybrid.llm.loop moved to ace_hybrid.training.ace", DeprecationWarning, stacklevel=2)
