"""The state of one training run: environments, networks, replay, counters and loggers.

:class:`Run` is what the loop (:mod:`.loop`), the checkpoints (:mod:`.checkpoint`) and ACE's hooks (:mod:`.ace`)
share. It holds no behaviour beyond building its parts from a :class:`~ace_hybrid.config.Config`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ace_hybrid.config import Config
from ace_hybrid.grid.action_set import ActionSet, action_set_indices
from ace_hybrid.grid.agents import make_tutor
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.env import make_env, n_scenarios
from ace_hybrid.grid.features import MaskFromFeatures, ObservationFeatures, RunningNormalizer
from ace_hybrid.grid.reward import step_reward
from ace_hybrid.grid.rules import SafeRule
from ace_hybrid.replay import MixedReplayBuffer
from ace_hybrid.sac import DiscreteSAC
from ace_hybrid.training.metrics import MetricsLogger, Throughput

__all__ = ["Counters", "Pending", "Run"]


@dataclass
class Counters:
    """Progress of a run; saved in every checkpoint."""

    env_steps: int = 0
    """Environment steps, safe-rule steps included (with rollout workers: the sum of what they have sent)."""
    decisions: int = 0
    updates: int = 0
    episodes: int = 0
    """Training episodes started (with rollout workers: finished, as the learner hears of them)."""
    next_episode: int = 0
    """With rollout workers: one past the largest episode id a worker has started (as the learner heard), where a
    resumed run's ids start, so that an id is never given to two episodes (the LLM critic groups by id)."""
    next_eval: int = 0
    next_checkpoint: int = 0
    best_survival: float = -1.0
    train_seconds: float = 0.0
    eval_history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Pending:
    """The last decision, waiting for its next observation and its accumulated reward."""

    obs: np.ndarray
    action: int
    reward: float
    episode: int
    decision: int
    grid_obs: Any = None
    """The grid2op observation of the decision (for the LLM actor's prompt and shortlist)."""
    snapshot: Any = None
    """``env.copy()`` before the action, kept only while the LLM actor may refine this transition."""
    max_rho: float = 0.0
    """Largest line loading seen at the transition's steps (an overload when >= 1)."""
    blackout: bool = False
    """The grid collapsed during the transition."""
    tutor: bool = False
    """The tutor (greedy expert) decided, not the policy: the transition goes to the validated partition."""
    version: int = 0
    """Version of the policy that chose the action (rollout workers: the learner's update count when it sent it)."""


class Run:
    """Everything the loop touches: environments, networks, replay, counters, loggers.

    ``action_indices`` (a checkpoint's saved action set) overrides the selection ``env.action_set`` asks for.

    ``llm`` is ACE's part (:class:`ace_hybrid.training.ace.LLMInLoop`), attached by
    :func:`ace_hybrid.training.ace.attach_llm` when ``llm.backend`` is not "none"; None for SAC alone.
    """

    def __init__(self, cfg: Config, run_dir: Path, action_indices: list[int] | None = None) -> None:
        self.cfg, self.dir = cfg, run_dir
        if cfg.train.torch_threads:  # 1 by default (measured: see TrainConfig.torch_threads); 0 keeps torch's
            torch.set_num_threads(cfg.train.torch_threads)
        torch.manual_seed(cfg.train.seed)
        self.env = make_env(cfg.env.name, seed=cfg.env.env_seed)
        self.eval_env = make_env(cfg.env.name, seed=cfg.env.env_seed)
        count = n_scenarios(self.env)
        for s in [*cfg.env.train_scenarios, *(p[0] for p in cfg.env.eval_pairs)]:
            if not 0 <= s < count:
                raise IndexError(f"scenario {s} (env.train_scenarios / env.eval_pairs) out of range [0, {count}) "
                                 f"for {cfg.env.name}")
        self.catalog = ActionCatalog.for_env(self.env)
        if action_indices is None:
            action_indices = action_set_indices(cfg, self.env, self.catalog)
        self.actions = ActionSet(self.catalog, action_indices)
        """The policy's actions (``env.action_set``): the policy, the replay and the LLM actor use its indices."""
        self.features = ObservationFeatures(self.env)
        self.masks = MaskFromFeatures(self.features, self.actions)
        self.normalizer = RunningNormalizer(self.features.dim)
        self.safe_rule = SafeRule(self.env.action_space, threshold=cfg.env.threshold)
        self.tutor = make_tutor(self.env, cfg, self.actions) if cfg.train.tutor_steps else None
        """The expert-guided warm start's greedy tutor over the action set (``train.tutor_steps``)."""
        self.sac = DiscreteSAC(self.features.dim, len(self.actions), cfg.sac,
                               action_features=self.actions.features(), seed=cfg.train.seed)
        r = cfg.replay
        self.replay = MixedReplayBuffer(self.features.dim, r.rl_capacity, r.llm_capacity, alpha=r.alpha,
                                        beta=r.beta, tau=r.tau, seed=cfg.train.seed)
        self.counters = Counters(next_eval=cfg.train.eval_every or cfg.train.total_env_steps,
                                 next_checkpoint=cfg.train.checkpoint_every)
        self.time_split = {"env": 0.0, "reset": 0.0, "update": 0.0, "eval": 0.0, "llm": 0.0, "tutor": 0.0}
        self.logger = MetricsLogger(run_dir, cfg.log.tensorboard)
        self.replay_files: dict[str, str] = {}
        """Replay file named by each checkpoint file (checkpoint.pt, best.pt): the ones to keep."""
        self.llm: Any = None
        self.clock = time.perf_counter()
        """When ``counters.train_seconds`` was last brought up to date (``train`` resets it when it starts)."""
        self.stop_requested = False
        """Set by Ctrl-C during ``train``: the loop stops after the current environment step and saves."""
        self.throughput: Throughput | None = None
        """The learner's and workers' rates over the current session of ``train`` (set when it starts)."""

    def step_reward(self, obs: Any, blackout: bool) -> float:
        """The reward of one environment step under this run's ``[reward]`` settings."""
        return step_reward(self.cfg.reward, obs, blackout)
