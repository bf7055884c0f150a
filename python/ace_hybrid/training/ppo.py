"""sb3-contrib's MaskablePPO, a policy a user could pick instead of ours, trained and deployed on the same terms.

It learns through the project's gymnasium environment (:meth:`~ace_hybrid.grid.gym_env.GridGymEnv.from_config`):
the run's action set (``env.action_set``), reward (``[reward]``), danger threshold (the safe rule acts below it),
training scenarios and episodes in the run's order (seeds from ``env.train_seed_start``), and its budget of grid
steps: ``train.total_env_steps`` counts environment steps, not decisions, so a callback stops PPO once the gym
environment's grid steps reach it (the decision under way finishes: at most one decision's steps beyond the budget).
The observations are the SAC run's features, normalised the same way (a running mean and variance,
:class:`~ace_hybrid.grid.features.RunningNormalizer`, updated with every observation PPO sees).

Nothing selects a checkpoint (the SAC runs choose best.pt on ``env.eval_pairs``): the last model is tested. A run
directory holds :data:`MODEL_FILE` (the model, sb3's zip) and :data:`STATE_FILE` (configuration, hyperparameters,
action set, normaliser and the training summary), written last: a run with it is finished. Deployed
(:class:`MaskablePPOAgent`) it acts like every learned agent here (:class:`~ace_hybrid.grid.agents.PolicyAgent`):
the most likely legal action of the masked policy in danger, or its top-k simulation check, the safe rule otherwise.
Needs the ``rl`` extra: ``pip install 'ace-hybrid[rl]'``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.config import Config, config_from_dict
from ace_hybrid.files import atomic_write_json
from ace_hybrid.grid.action_set import ActionSet
from ace_hybrid.grid.agents import PolicyAgent, deployed_check, deployed_threshold
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.features import ObservationFeatures, RunningNormalizer

__all__ = ["MODEL_FILE", "STATE_FILE", "MaskablePPOAgent", "load_ppo_agent", "read_state", "train_maskable_ppo"]

MODEL_FILE = "maskable_ppo.zip"
"""The trained model in a run directory (``MaskablePPO.save``)."""
STATE_FILE = "maskable_ppo.json"
"""What the model needs beside it, and the training summary; written last, so its presence marks a finished run."""


def read_state(run_dir: str | Path) -> dict[str, Any]:
    """The :data:`STATE_FILE` of a finished run (FileNotFoundError naming the directory when it is not one)."""
    path = Path(run_dir) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} holds no finished MaskablePPO run (no {STATE_FILE})")
    return json.loads(path.read_text())


def _normalized(env: Any, normalizer: RunningNormalizer) -> Any:
    """``env`` with its observations normalised by ``normalizer``, which every observation updates first."""
    import gymnasium as gym

    class NormalizedFeatures(gym.ObservationWrapper):
        def __init__(self) -> None:
            super().__init__(env)
            self.observation_space = gym.spaces.Box(-normalizer.clip, normalizer.clip, shape=(normalizer.dim,),
                                                    dtype=np.float32)

        def observation(self, observation: np.ndarray) -> np.ndarray:
            normalizer.update(observation)
            return normalizer(observation)

    return NormalizedFeatures()


def _grid_step_budget(env: Any, budget: int) -> Any:
    """A callback that stops training once ``env`` (a GridGymEnv) has played ``budget`` grid steps."""
    from stable_baselines3.common.callbacks import BaseCallback

    class GridStepBudget(BaseCallback):
        def _on_step(self) -> bool:
            return env.grid_steps < budget

    return GridStepBudget()


def train_maskable_ppo(cfg: Config, run_dir: str | Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Train MaskablePPO for ``cfg``'s budget of grid steps (see the module docstring) and save it in ``run_dir``.

    Parameters
    ----------
    cfg
        The run's configuration: environment, action set, reward, threshold, ``train.total_env_steps``,
        ``train.seed`` (PPO's seed) and ``train.torch_threads``.
    run_dir
        Where :data:`MODEL_FILE` and :data:`STATE_FILE` are written.
    settings
        MaskablePPO's keyword arguments (``n_steps``, ``batch_size``, ``learning_rate``, ...) and ``hidden``, the
        networks' layer sizes (:class:`~ace_hybrid.experiment.ppo_settings.PPOSettings`' fields).

    Returns
    -------
    dict
        The summary: ``env_steps`` (grid steps), ``decisions``, ``updates`` (gradient steps), ``episodes``,
        ``train_seconds``; ``best_survival``, ``time_split`` and ``last_eval`` are None (no evaluation during
        training), ``llm`` is empty.
    """
    import torch
    from sb3_contrib import MaskablePPO

    from ace_hybrid.grid.gym_env import GridGymEnv

    started = time.time()
    if cfg.train.torch_threads:
        torch.set_num_threads(cfg.train.torch_threads)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    kwargs = dict(settings)
    hidden = [int(h) for h in kwargs.pop("hidden")]
    grid_env = GridGymEnv.from_config(cfg)
    normalizer = RunningNormalizer(grid_env.features.dim)
    try:
        model = MaskablePPO("MlpPolicy", _normalized(grid_env, normalizer), seed=cfg.train.seed, device="cpu",
                            verbose=0, policy_kwargs={"net_arch": {"pi": hidden, "vf": hidden}}, **kwargs)
        model.learn(total_timesteps=cfg.train.total_env_steps,
                    callback=_grid_step_budget(grid_env, cfg.train.total_env_steps))
        model.save(run_dir / MODEL_FILE)
        summary = {"env_steps": grid_env.grid_steps, "decisions": int(model.num_timesteps),
                   "updates": int(model._n_updates), "episodes": grid_env.episodes, "best_survival": None,
                   "train_seconds": time.time() - started, "time_split": None, "last_eval": None, "llm": {},
                   "run_dir": str(run_dir)}
        indices = grid_env.actions.indices
        normal = normalizer.state_dict()
        atomic_write_json(run_dir / STATE_FILE, {
            "config": cfg.to_dict(), "settings": {**dict(settings), "hidden": hidden},
            "action_set": None if indices is None else indices.tolist(),
            "normalizer": {**normal, "mean": normal["mean"].tolist(), "m2": normal["m2"].tolist()},
            "summary": summary})
    finally:
        grid_env.close()
    return summary


class MaskablePPOAgent(PolicyAgent):
    """A trained MaskablePPO model (``policy``) as a grid2op agent under the activation rule, alone (``topk = 0``: the
    most likely legal action) or with the top-k simulation check (:class:`~ace_hybrid.grid.agents.PolicyAgent`)."""

    name = "maskable-ppo"

    def policy_probs(self, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            obs, _ = self.policy.policy.obs_to_tensor(x)
            dist = self.policy.policy.get_distribution(obs, action_masks=mask[None, :])
            return dist.distribution.probs[0].cpu().numpy()


def load_ppo_agent(run_dir: str | Path, env: Any, topk: int | None = None, shortlist: int | None = None,
                   among: int | None = None, sure: float | None = None,
                   threshold: float | None = None) -> MaskablePPOAgent:
    """The MaskablePPO agent of a finished run directory acting in ``env`` (``topk``, ``shortlist``, ``among``,
    ``sure``, ``threshold`` None: the run's own ``env.deploy_topk``, ``env.deploy_shortlist``, ``env.deploy_among``,
    ``env.deploy_sure``, ``env.deploy_threshold``), for
    ``make_agent("maskable-ppo:RUN_DIR", ...)``."""
    from sb3_contrib import MaskablePPO

    state = read_state(run_dir)
    cfg = config_from_dict(state["config"])
    model = MaskablePPO.load(Path(run_dir) / MODEL_FILE, device="cpu")
    actions = ActionSet(ActionCatalog.for_env(env), state["action_set"], skip_no_ops=cfg.env.mask_no_ops)
    features = ObservationFeatures(env)
    normalizer = RunningNormalizer(features.dim)
    normalizer.load_state_dict(state["normalizer"])  # mean and m2 as lists: it makes arrays of them
    topk, shortlist, among, sure = deployed_check(cfg, topk, shortlist, among, sure)
    return MaskablePPOAgent(env.action_space, actions, features, normalizer, deployed_threshold(cfg, threshold), topk,
                            policy=model, shortlist=shortlist, among=among, sure=sure)
