"""The state of one training run: environments, networks, replay, counters and loggers.

:class:`Run` is what the loop (:mod:`.loop`), the checkpoints (:mod:`.checkpoint`) and ACE's hooks (:mod:`.ace`)
share. It holds no behaviour beyond building its parts from a :class:`~ace_hybrid.config.Config`.
:func:`build_acting` builds what steps an environment with the policy -- for the run, and for every rollout worker
(:mod:`.rollout`) -- and :class:`Pending` is one decision on its way to becoming a stored transition.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ace_hybrid.config import Config
from ace_hybrid.grid.action_set import ActionSet, action_set_indices
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.env import check_scenarios, make_config_env
from ace_hybrid.grid.features import MaskFromFeatures, ObservationFeatures, RunningNormalizer
from ace_hybrid.grid.reward import step_reward
from ace_hybrid.replay import MixedReplayBuffer
from ace_hybrid.sac import DiscreteSAC, SACPolicy
from ace_hybrid.training.metrics import MetricsLogger, Throughput

__all__ = ["Acting", "Counters", "Pending", "Run", "build_acting"]


@dataclass
class Counters:
    """Progress of a run; saved in every checkpoint."""

    env_steps: int = 0
    """Environment steps, safe-rule steps included (with rollout workers: the sum of what they have sent)."""
    decisions: int = 0
    updates: int = 0
    episodes: int = 0
    """Training episodes finished (those cut at the step budget included), as the learner hears of them (earlier
    versions' in-process loop counted them when they started)."""
    next_episode: int = 0
    """One past the largest episode id a worker has started (as the learner heard), where a resumed run's ids start,
    so that an id is never given to two episodes (the LLM critic groups by id)."""
    next_eval: int = 0
    next_checkpoint: int = 0
    best_survival: float = -1.0
    train_seconds: float = 0.0
    eval_history: list[dict[str, Any]] = field(default_factory=list)
    kept_best: list[dict[str, Any]] = field(default_factory=list)
    """One entry per ``train.keep_best_at`` budget reached (``best-<env_steps>.pt`` written): the run's env_steps,
    decisions, updates, train_seconds (and, ACE, llm_calls and llm_accepted) at that step."""


@dataclass
class Pending:
    """One decision: waiting for its next observation while its reward accumulates, then -- with ``next_obs``,
    ``done`` and ``truncated`` set -- a completed semi-MDP transition, as it is stored."""

    obs: np.ndarray
    action: int
    reward: float
    episode: int
    decision: int
    grid_obs: Any = None
    """The grid2op observation of the decision, kept with ``snapshot`` only (the LLM actor's prompt and shortlist)."""
    snapshot: Any = None
    """``env.copy()`` before the action, kept only while the LLM actor may refine this transition."""
    max_rho: float = 0.0
    """Largest line loading seen at the transition's steps (an overload when >= 1)."""
    blackout: bool = False
    """The grid collapsed during the transition."""
    tutor: bool = False
    """The tutor (greedy expert) decided, not the policy: the transition goes to the validated partition."""
    version: int = 0
    """Version of the policy that chose the action (the learner's update count when it sent it)."""
    next_obs: np.ndarray | None = None
    """Features of the next decision's observation, or of the episode's last one; None while pending."""
    done: bool = False
    """The grid collapsed: terminal, no bootstrap."""
    truncated: bool = False
    """The episode was cut (its scenario's end, ``env.max_episode_steps``, the run's step budget)."""


@dataclass
class Acting:
    """What steps an environment with the policy: the grid, the policy's action set, the features, the normaliser
    the policy acts with and the networks. The run's own (the inline worker acts with them) or a rollout worker's."""

    env: Any
    actions: ActionSet
    features: ObservationFeatures
    normalizer: RunningNormalizer
    sac: SACPolicy
    """The run's :class:`DiscreteSAC`, or a rollout worker's acting-only :class:`SACPolicy`."""


def build_acting(cfg: Config, env: Any, action_indices: list[int] | None, *, catalog: ActionCatalog | None = None,
                 device: str | None = None, policy_only: bool = False) -> Acting:
    """The parts that act in ``env`` over the action set ``action_indices`` (catalog indices; None: the whole
    catalog), with networks seeded by ``train.seed`` on ``device`` (None: ``sac.device``). The run builds its own
    here (the whole SAC), and so does every rollout worker (``policy_only``: the actor alone, which is all it acts
    with; on the CPU: N processes must not each claim a GPU)."""
    actions = ActionSet(catalog if catalog is not None else ActionCatalog.for_env(env), action_indices,
                        skip_no_ops=cfg.env.mask_no_ops)
    features = ObservationFeatures(env)
    sac_cfg = cfg.sac if device is None else dataclasses.replace(cfg.sac, device=device)
    make = SACPolicy if policy_only else DiscreteSAC
    sac = make(features.dim, len(actions), sac_cfg, action_features=actions.features(), seed=cfg.train.seed)
    return Acting(env, actions, features, RunningNormalizer(features.dim), sac)


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
        self.env = make_config_env(cfg)
        self.eval_env = make_config_env(cfg)
        check_scenarios(self.env, [*cfg.env.train_scenarios, *(p[0] for p in cfg.env.eval_pairs)],
                        "env.train_scenarios / env.eval_pairs")
        self.catalog = ActionCatalog.for_env(self.env)
        if action_indices is None:
            action_indices = action_set_indices(cfg, self.env, self.catalog)
        acting = build_acting(cfg, self.env, action_indices, catalog=self.catalog)
        self.actions = acting.actions
        """The policy's actions (``env.action_set``): the policy, the replay and the LLM actor use its indices."""
        self.features, self.normalizer, self.sac = acting.features, acting.normalizer, acting.sac
        self.masks = MaskFromFeatures(self.features, self.actions)
        r = cfg.replay
        self.replay = MixedReplayBuffer(self.features.dim, r.rl_capacity, r.validated_capacity, alpha=r.alpha,
                                        beta=r.beta, tau=r.tau, seed=cfg.train.seed, num_actions=len(self.actions))
        self.counters = Counters(next_eval=cfg.train.eval_every or cfg.train.total_env_steps,
                                 next_checkpoint=cfg.train.checkpoint_every)
        self.time_split = {"env": 0.0, "reset": 0.0, "update": 0.0, "eval": 0.0, "llm": 0.0, "tutor": 0.0}
        self.safe_rule_seconds = 0.0
        """Seconds the safe rule spent in ``obs.simulate`` this session (its power flows: environment time)."""
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

    def acting(self) -> Acting:
        """The run's own acting parts (the inline worker, ``train.workers = 0``, acts with them)."""
        return Acting(self.env, self.actions, self.features, self.normalizer, self.sac)

    def step_reward(self, obs: Any, blackout: bool) -> float:
        """The reward of one environment step under this run's ``[reward]`` settings."""
        return step_reward(self.cfg.reward, obs, blackout)
