"""The trained policy deployed as a grid2op agent, from a live run or a checkpoint file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.config import config_from_dict
from ace_hybrid.grid.agents import PolicyAgent, deployed_check, deployed_threshold
from ace_hybrid.grid.action_set import ActionSet
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.features import ObservationFeatures, RunningNormalizer
from ace_hybrid.sac import DiscreteSAC, SACPolicy
from ace_hybrid.sac.ensemble import PolicyEnsemble
from ace_hybrid.training.checkpoint import checked_checkpoint, read_torch_file
from ace_hybrid.training.run import Run

__all__ = ["SACAgent", "agent_of", "load_agent"]


class SACAgent(PolicyAgent):
    """The trained SAC policy as a grid2op agent under the activation rule, alone (``topk = 0``) or with the top-k
    simulation check (:class:`~ace_hybrid.grid.agents.PolicyAgent`)."""

    name = "sac"

    def __init__(self, env: Any, sac: SACPolicy | PolicyEnsemble, actions: ActionSet, features: ObservationFeatures,
                 normalizer: RunningNormalizer, threshold: float, topk: int = 0, shortlist: int = 0,
                 among: int = 0, sure: float = 0.0) -> None:
        super().__init__(env.action_space, actions, features, normalizer, threshold, topk, policy=sac,
                         shortlist=shortlist, among=among, sure=sure)
        self.sac = sac

    def policy_probs(self, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self.sac.policy_probs(x, mask)

    def most_likely(self, x: np.ndarray, mask: np.ndarray) -> int:
        return self.sac.act(x, mask, deterministic=True)


def agent_of(run: Run, env: Any) -> SACAgent:
    """The run's current policy acting in ``env`` (``env.deploy_topk``, ``env.deploy_shortlist``,
    ``env.deploy_among``, ``env.deploy_sure`` and ``env.deploy_threshold`` as configured)."""
    return SACAgent(env, run.sac.deployed(), run.actions, run.features, run.normalizer, deployed_threshold(run.cfg),
                    *deployed_check(run.cfg, None, None))


def load_agent(path: str | Path, env: Any, topk: int | None = None, shortlist: int | None = None,
               among: int | None = None, sure: float | None = None, threshold: float | None = None) -> SACAgent:
    """A trained agent from a checkpoint file or a junior file (:mod:`ace_hybrid.training.junior`; an ensemble
    file acts by its members' mean probabilities), for
    ``ace-hybrid evaluate --agent checkpoint:PATH`` (``topk``, ``shortlist``, ``among``, ``sure`` and ``threshold``
    override the run's ``env.deploy_topk``, ``env.deploy_shortlist``, ``env.deploy_among``, ``env.deploy_sure`` and
    ``env.deploy_threshold``; see :func:`~ace_hybrid.grid.agents.deployed_check`)."""
    from ace_hybrid.training.junior_file import actor_policies, checked_junior, is_junior

    state = read_torch_file(path)
    junior = is_junior(state)
    state = checked_junior(state, path) if junior else checked_checkpoint(state, path)
    cfg = config_from_dict(state["config"])
    actions = ActionSet(ActionCatalog.for_env(env), state.get("action_set"), skip_no_ops=cfg.env.mask_no_ops)
    features = ObservationFeatures(env)
    sac: SACPolicy | PolicyEnsemble
    if junior:
        members = actor_policies(state, features.dim, actions.features(), seed=cfg.train.seed)
        sac = members[0] if len(members) == 1 else PolicyEnsemble(members)
    else:
        sac = DiscreteSAC(features.dim, len(actions), cfg.sac, action_features=actions.features(),
                          seed=cfg.train.seed)
        sac.load_state_dict(state["sac"])
        sac = sac.deployed()
    normalizer = RunningNormalizer(features.dim)
    normalizer.load_state_dict(state["normalizer"])
    return SACAgent(env, sac, actions, features, normalizer, deployed_threshold(cfg, threshold),
                    *deployed_check(cfg, topk, shortlist, among, sure))

