"""The whole configuration of a run: one :class:`Config` holding every section, and the checks across sections."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ace_hybrid.config.ace import ACEConfig
from ace_hybrid.config.env import EnvConfig, RewardConfig
from ace_hybrid.config.llm import LLMConfig
from ace_hybrid.config.replay import ReplayConfig
from ace_hybrid.config.sac import SACConfig
from ace_hybrid.config.train import LogConfig, TrainConfig

__all__ = ["Config"]


@dataclass
class Config:
    """The whole configuration of a run."""

    env: EnvConfig = field(default_factory=EnvConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    sac: SACConfig = field(default_factory=lambda: SACConfig(prior_prob=0.5))
    """SAC; on grids the initial policy does nothing half of the time (sac.prior_prob = 0.5)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)
    llm: LLMConfig = field(default_factory=lambda: LLMConfig(backend="none"))
    """The language model; "none" (the default) trains SAC alone, the ACE configs set "smollm2" or your own."""
    ace: ACEConfig = field(default_factory=ACEConfig)

    def validate(self) -> "Config":
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate()
        if self.train.workers and self.llm.backend != "none" and self.ace.actor:
            # The actor validates a refinement in a copy of the environment taken at the decision; that copy lives
            # in the worker's process, and an environment copy cannot travel to the learner.
            raise ValueError(f"train.workers = {self.train.workers} > 0 runs SAC without the LLM actor (its "
                             "refinements need a copy of the worker's environment at each decision); set "
                             "ace.actor = false (the LLM critic still runs, in the learner) or train.workers = 0")
        fixed = self.train.updates_per_decision * self.sac.batch_size
        if not self.train.workers and self.train.samples_per_insert not in (0, fixed):
            raise ValueError(f"train.samples_per_insert = {self.train.samples_per_insert:g} with train.workers = 0: "
                             f"the in-process loop samples train.updates_per_decision x sac.batch_size = {fixed} per "
                             f"insert; set it to 0 or {fixed}, or use workers")
        if self.sac.anchor_weight > 0 and not self.train.init_policy:
            raise ValueError(f"sac.anchor_weight = {self.sac.anchor_weight:g} holds the policy near the junior it "
                             "started from, and train.init_policy names none: set train.init_policy or "
                             "sac.anchor_weight = 0")
        if self.replay.rl_capacity < self.sac.batch_size:
            raise ValueError(f"replay.rl_capacity = {self.replay.rl_capacity} must be >= sac.batch_size = "
                             f"{self.sac.batch_size}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
