"""Training: the loop (:mod:`.loop`), the run's state (:mod:`.run`), ACE's LLM hooks (:mod:`.ace`), checkpoints
(:mod:`.checkpoint`), metrics (:mod:`.metrics`) and the deployed policy (:mod:`.policy`).

The names below load on first use: importing a light submodule (:mod:`.dealer`, which a Ray actor process imports
alone) must not import torch and grid2op through the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ace_hybrid.training.loop import train as train
    from ace_hybrid.training.policy import SACAgent as SACAgent
    from ace_hybrid.training.policy import load_agent as load_agent

__all__ = ["SACAgent", "load_agent", "train"]

_HOMES = {"train": "ace_hybrid.training.loop", "SACAgent": "ace_hybrid.training.policy",
          "load_agent": "ace_hybrid.training.policy"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'ace_hybrid.training' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)
