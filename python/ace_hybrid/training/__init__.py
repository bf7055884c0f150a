"""Training: the loop (:mod:`.loop`), the run's state (:mod:`.run`), ACE's LLM hooks (:mod:`.ace`), checkpoints
(:mod:`.checkpoint`), metrics (:mod:`.metrics`) and the deployed policy (:mod:`.policy`)."""

from ace_hybrid.training.loop import train
from ace_hybrid.training.policy import SACAgent, load_agent

__all__ = ["SACAgent", "load_agent", "train"]
