"""Deprecated: moved to :mod:`ace_hybrid.grid.evaluation` in 0.2; this re-export goes in 0.3."""

import warnings

from ace_hybrid.grid.evaluation import EpisodeResult, EvaluationReport, evaluate, parse_pairs  # noqa: F401

warnings.warn("ace_hybrid.evaluate moved to ace_hybrid.grid.evaluation", DeprecationWarning, stacklevel=2)
