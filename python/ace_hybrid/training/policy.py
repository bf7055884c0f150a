"""The trained policy deployed as a grid2op agent, from a live run or a checkpoint file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.config import config_from_dict
from ace_hybrid.grid.agents import RuleAgent
from ace_hybrid.grid.action_set import ActionSet
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.features import ObservationFeatures, RunningNormalizer
from ace_hybrid.sac import DiscreteSAC
from ace_hybrid.training.checkpoint import load_checkpoint_file
from ace_hybrid.training.run import Run

__all__ = ["SACAgent", "agent_of", "load_agent"]


class SACAgent(RuleAgent):
    """The trained policy as a grid2op agent under the activation rule.

    With ``topk = 0`` it plays the policy's most likely legal action. With ``topk = k`` it checks the k most likely
    legal actions and do nothing with one ``obs.simulate`` each and plays the one with the lowest simulated max rho
    (the top-k validation most L2RPN agents deploy with); the policy still chooses what is worth simulating.
    """

    name = "sac"

    def __init__(self, env: Any, sac: DiscreteSAC, actions: ActionSet, features: ObservationFeatures,
                 normalizer: RunningNormalizer, threshold: float, topk: int = 0) -> None:
        super().__init__(env.action_space, threshold)
        if topk < 0:
            raise ValueError(f"topk = {topk} out of range [0, inf)")
        self.sac, self.actions, self.features, self.normalizer = sac, actions, features, normalizer
        self.topk = int(topk)

    def decide(self, observation: Any) -> Any:
        x = self.normalizer(self.features(observation))
        mask = self.actions.legal_mask(observation)
        if self.topk == 0:
            return self.actions.action(self.sac.act(x, mask, deterministic=True))
        probs = self.sac.policy_probs(x, mask)
        candidates = [0, *(int(a) for a in np.argsort(-probs, kind="stable")[: self.topk] if a != 0 and mask[a])]
        rhos = [self._simulate_max_rho(observation, self.actions.action(a)) for a in candidates]
        return self.actions.action(candidates[int(np.argmin(rhos))])


def agent_of(run: Run, env: Any) -> SACAgent:
    """The run's current policy acting in ``env`` (``env.deploy_topk`` as configured)."""
    return SACAgent(env, run.sac, run.actions, run.features, run.normalizer, run.cfg.env.threshold,
                    run.cfg.env.deploy_topk)


def load_agent(path: str | Path, env: Any, topk: int | None = None) -> SACAgent:
    """A trained agent from a checkpoint file, for ``ace-hybrid evaluate --agent checkpoint:PATH`` (``topk``
    overrides the run's ``env.deploy_topk``)."""
    state = load_checkpoint_file(path)
    cfg = config_from_dict(state["config"])
    actions = ActionSet(ActionCatalog.for_env(env), state.get("action_set"))
    features = ObservationFeatures(env)
    sac = DiscreteSAC(features.dim, len(actions), cfg.sac, action_features=actions.features(), seed=cfg.train.seed)
    sac.load_state_dict(state["sac"])
    normalizer = RunningNormalizer(features.dim)
    normalizer.load_state_dict(state["normalizer"])
    return SACAgent(env, sac, actions, features, normalizer, cfg.env.threshold,
                    cfg.env.deploy_topk if topk is None else topk)
