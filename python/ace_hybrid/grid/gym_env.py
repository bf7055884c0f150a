"""A ``gymnasium.Env`` over a run's action set or the whole catalog: a training run's decisions, masks and reward.

The agent is asked to act only in danger states (max rho >= threshold); between decisions the activation rule's
safe policy steps the grid, and the reward of a step is the training reward: :func:`~ace_hybrid.grid.reward.step_reward`
summed over every environment step from the decision to the next one (a semi-MDP: one transition per decision, as
``ace-hybrid train`` stores them).

Registered with gymnasium as ``ace_hybrid/Grid-v0`` when :mod:`ace_hybrid.grid` is imported; the legal actions are
in ``info["action_mask"]`` and in :meth:`GridGymEnv.action_masks` (what sb3-contrib's ``MaskablePPO`` calls)::

    import gymnasium, ace_hybrid.grid
    env = gymnasium.make("ace_hybrid/Grid-v0", env_name="l2rpn_case14_sandbox", threshold=0.5, max_steps=120)

:meth:`GridGymEnv.from_config` gives the environment a training run of a configuration acts in: its action set
(``env.action_set``, e.g. "tutor:50", an :class:`~ace_hybrid.grid.action_set.ActionSet`), its training episodes in
order, its threshold and reward; :attr:`GridGymEnv.grid_steps` counts the grid's steps, the unit of a run's budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    import gymnasium as gym
except ImportError as exc:  # pragma: no cover
    raise ImportError("ace_hybrid.grid.gym_env needs gymnasium: pip install 'ace-hybrid[grid]'") from exc

from collections.abc import Sequence

from ace_hybrid.config import Config, RewardConfig, parse_action_set
from ace_hybrid.grid.action_set import ActionSet, action_set_indices
from ace_hybrid.grid.env import check_scenarios, make_env, reset_episode, scenario_ids
from ace_hybrid.grid.features import ObservationFeatures
from ace_hybrid.grid.reward import step_reward
from ace_hybrid.grid.rules import SafeRule, in_danger

__all__ = ["FEATURE_BOUND", "GridGymEnv"]

#: Bound of the observation box (features are loads in MW, ratios and flags: far below it).
FEATURE_BOUND = 1e6


class GridGymEnv(gym.Env):
    """Grid2Op topology control as a gymnasium environment.

    Parameters
    ----------
    env_name
        A supported Grid2Op environment name, an environment folder or a generated set (:func:`make_env`).
    env_seed
        Seed of the Grid2Op environment's own generators.
    scenarios
        Scenario ids episodes are drawn from (all by default); each reset picks one with the reset's generator.
    threshold
        Danger threshold: the agent acts only when max rho >= threshold (0 makes every step a decision).
    max_steps
        Optional cap on environment (grid) steps per episode, like ``env.max_episode_steps`` of a training run: the
        episode is truncated there. Gymnasium's own ``max_episode_steps`` counts decisions instead.
    reward
        The reward's scale (``[reward]`` of a configuration); the defaults are a training run's.
    action_indices
        Catalog indices of the actions the agent chooses among, do nothing (0) first, as an
        :class:`~ace_hybrid.grid.action_set.ActionSet` holds them; None: the whole catalog. Actions and masks are in
        the set's indices (:attr:`actions` maps them to grid actions).
    seed_start
        None: every episode's scenario and seed are drawn from the reset's generator. An integer: the k-th episode
        this environment plays (reset attempts included) is ``(scenarios[k % len(scenarios)], seed_start + k)``, the
        order a training run plays its episodes in (``env.train_seed_start``).
    start_spread
        When > 0, an episode's seed also chooses the step of its scenario it starts at, in [0, start_spread) (a
        configuration's ``env.start_spread``; see :func:`~ace_hybrid.grid.env.make_env`).

    Notes
    -----
    An episode starts at its first danger state: a reset plays episodes until one reaches danger within
    ``max_steps``, and raises ``ValueError`` after :attr:`RESET_ATTEMPTS` that do not. The grid steps the safe rule
    plays meanwhile count in :attr:`grid_steps`.
    """

    metadata = {"render_modes": []}

    #: Episodes tried per reset to find one that reaches a danger state.
    RESET_ATTEMPTS = 10

    def __init__(
        self,
        env_name: str = "l2rpn_case14_sandbox",
        *,
        env_seed: int = 0,
        scenarios: list[int] | None = None,
        threshold: float = 0.9,
        max_steps: int | None = None,
        reward: RewardConfig | None = None,
        action_indices: Sequence[int] | None = None,
        seed_start: int | None = None,
        start_spread: int = 0,
    ) -> None:
        from ace_hybrid.grid.catalog import ActionCatalog

        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"max_steps = {max_steps} out of range [1, inf)")
        self.reward_cfg = reward if reward is not None else RewardConfig()
        self.reward_cfg.validate()
        self.grid = make_env(env_name, seed=env_seed, start_spread=start_spread)
        self.catalog = ActionCatalog.for_env(self.grid)
        self.features = ObservationFeatures(self.grid)
        self.safe_rule = SafeRule(self.grid.action_space, threshold=threshold)
        self.threshold = float(threshold)
        self.scenarios = scenario_ids(self.grid) if scenarios is None else list(scenarios)
        check_scenarios(self.grid, self.scenarios, "scenarios")
        self.max_steps = max_steps
        self.seed_start = seed_start
        self.observation_space = gym.spaces.Box(-FEATURE_BOUND, FEATURE_BOUND, shape=(self.features.dim,),
                                                dtype=np.float32)
        self.use_actions(action_indices)
        self._obs: Any = None
        self._steps = 0
        self.grid_steps = 0  # since the environment was made: every episode, reset attempts included
        self.episodes = 0  # started since the environment was made, reset attempts included
        self._closed = False

    @classmethod
    def from_config(cls, cfg: Config) -> GridGymEnv:
        """The environment a training run of ``cfg`` acts in: its grid, action set (``env.action_set``; a "tutor:N"
        set is selected on the training scenarios, cached), training episodes in order (``env.train_scenarios``,
        seeds from ``env.train_seed_start``, starts spread by ``env.start_spread``), threshold, episode cap
        (``env.max_episode_steps``, 0 for none) and reward."""
        env = cls(cfg.env.data or cfg.env.name, env_seed=cfg.env.env_seed, scenarios=list(cfg.env.train_scenarios),
                  threshold=cfg.env.threshold, max_steps=cfg.env.max_episode_steps or None, reward=cfg.reward,
                  seed_start=cfg.env.train_seed_start, start_spread=cfg.env.start_spread)
        # The selection plays the grid: before any episode.
        tutor_set = parse_action_set(cfg.env.action_set) is not None
        env.use_actions(action_set_indices(cfg, env.grid, env.catalog) if tutor_set else None,
                        skip_no_ops=cfg.env.mask_no_ops)
        return env

    def use_actions(self, action_indices: Sequence[int] | None, *, skip_no_ops: bool = False) -> None:
        """Act over these catalog indices from now on (see the class's ``action_indices``; ``skip_no_ops``: see
        :class:`~ace_hybrid.grid.action_set.ActionSet`); sets :attr:`actions` and ``action_space``. Call it before
        an episode starts: a running one's masks would change size."""
        self.actions = ActionSet(self.catalog, action_indices, skip_no_ops=skip_no_ops)
        self.action_space = gym.spaces.Discrete(len(self.actions))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode at its first danger state.

        ``options`` may fix ``"scenario"`` and ``"episode_seed"`` (then attempt k plays seed ``episode_seed + k``);
        what is not fixed is drawn from the reset's generator. ``info`` names the episode played.
        """
        super().reset(seed=seed)
        options = options or {}
        for attempt in range(self.RESET_ATTEMPTS):
            scenario, episode_seed = self._next_episode(options, attempt)
            self._obs = reset_episode(self.grid, scenario, episode_seed)
            self._steps = 0
            self.episodes += 1
            _, terminated, truncated = self._advance_to_danger()
            if not (terminated or truncated):
                return self._features(), self._info(scenario=scenario, episode_seed=episode_seed)
        cap = f"within max_steps = {self.max_steps} steps" if self.max_steps is not None else "before its end"
        raise ValueError(f"threshold = {self.threshold}: none of {self.RESET_ATTEMPTS} episodes of scenarios "
                         f"{options.get('scenario', self.scenarios)} reached a danger state {cap}; lower the threshold "
                         f"or raise max_steps")

    def _next_episode(self, options: dict[str, Any], attempt: int) -> tuple[int, int]:
        """(scenario, seed) of the next episode: fixed by ``options``, else the next in order (``seed_start``), else
        drawn from the reset's generator."""
        k = self.episodes
        if "scenario" in options:
            scenario = int(options["scenario"])
        elif self.seed_start is not None:
            scenario = int(self.scenarios[k % len(self.scenarios)])
        else:
            scenario = int(self.np_random.choice(self.scenarios))
        if "episode_seed" in options:
            return scenario, int(options["episode_seed"]) + attempt
        if self.seed_start is not None:
            return scenario, self.seed_start + k
        return scenario, int(self.np_random.integers(0, 2**31 - 1))

    def step(self, action: int):
        """Play ``action`` in the current danger state, then the safe rule until the next one (or the episode's end).

        The reward is :func:`~ace_hybrid.grid.reward.step_reward` summed over all those environment steps.
        """
        if not 0 <= int(action) < len(self.actions):
            raise IndexError(f"action {action} out of range [0, {len(self.actions)})")
        reward, terminated, truncated = self._grid_step(self.actions.action(int(action)))
        if not (terminated or truncated):
            more, terminated, truncated = self._advance_to_danger()
            reward += more
        return self._features(), float(reward), terminated, truncated, self._info()

    def action_masks(self) -> np.ndarray:
        """The legal actions of the current state, ``(n,)`` bool (sb3-contrib's ``MaskablePPO`` calls this)."""
        return self.actions.legal_mask(self._obs)

    def _features(self) -> np.ndarray:
        return np.clip(self.features(self._obs), -FEATURE_BOUND, FEATURE_BOUND)

    def _grid_step(self, grid_action: Any) -> tuple[float, bool, bool]:
        """One environment step: the training reward of that step, blackout (terminated), truncated."""
        self._obs, _, done, info = self.grid.step(grid_action)
        self._steps += 1
        self.grid_steps += 1
        blackout = bool(done and info.get("exception"))
        truncated = (done and not blackout) or (self.max_steps is not None and self._steps >= self.max_steps)
        return step_reward(self.reward_cfg, self._obs, blackout), blackout, bool(truncated)

    def _advance_to_danger(self) -> tuple[float, bool, bool]:
        """Let the safe rule play until the grid is in danger or the episode ends."""
        total = 0.0
        while not in_danger(self._obs, self.threshold):
            reward, terminated, truncated = self._grid_step(self.safe_rule(self._obs))
            total += reward
            if terminated or truncated:
                return total, terminated, truncated
        return total, False, False

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {"action_mask": self.actions.legal_mask(self._obs), "max_rho": float(np.max(self._obs.rho)),
                "steps": self._steps, **extra}

    def close(self) -> None:
        """Close the Grid2Op environment; closing again does nothing (gymnasium's contract)."""
        if not self._closed:
            self._closed = True
            self.grid.close()
