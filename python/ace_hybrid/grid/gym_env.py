"""A ``gymnasium.Env`` over the action catalog, with the legal mask in ``info["action_mask"]``.

The agent is asked to act only in danger states (max rho >= threshold); between decisions the activation rule's
safe policy steps the grid, and the reward returned is the sum of the environment's rewards since the last
decision (a semi-MDP: one transition per decision, see the SAC documentation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    import gymnasium as gym
except ImportError as exc:  # pragma: no cover
    raise ImportError("ace_hybrid.grid.gym_env needs gymnasium: pip install gymnasium") from exc

from ace_hybrid.grid.env import make_env, n_scenarios, reset_episode
from ace_hybrid.grid.features import ObservationFeatures
from ace_hybrid.grid.rules import SafeRule, in_danger


#: Bound of the observation box (features are loads in MW, ratios and flags: far below it).
FEATURE_BOUND = 1e6


class GridGymEnv(gym.Env):
    """Grid2Op topology control as a gymnasium environment.

    Parameters
    ----------
    env_name
        A supported Grid2Op environment name.
    env_seed
        Seed of the Grid2Op environment's own generators.
    scenarios
        Scenario ids episodes are drawn from (all by default); each reset picks one with the reset's generator.
    threshold
        Danger threshold: the agent acts only when max rho >= threshold (0 makes every step a decision).
    max_steps
        Optional cap on environment steps per episode (the episode is truncated there).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        env_name: str = "l2rpn_case14_sandbox",
        *,
        env_seed: int = 0,
        scenarios: list[int] | None = None,
        threshold: float = 0.9,
        max_steps: int | None = None,
    ) -> None:
        from ace_hybrid.grid.catalog import ActionCatalog

        self.grid = make_env(env_name, seed=env_seed)
        self.catalog = ActionCatalog.for_env(self.grid)
        self.features = ObservationFeatures(self.grid)
        self.safe_rule = SafeRule(self.grid.action_space, threshold=threshold)
        self.threshold = float(threshold)
        count = n_scenarios(self.grid)
        self.scenarios = list(range(count)) if scenarios is None else list(scenarios)
        for s in self.scenarios:
            if not 0 <= s < count:
                raise IndexError(f"scenario {s} out of range [0, {count})")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"max_steps = {max_steps} out of range [1, inf)")
        self.max_steps = max_steps
        self.action_space = gym.spaces.Discrete(len(self.catalog))
        self.observation_space = gym.spaces.Box(-FEATURE_BOUND, FEATURE_BOUND, shape=(self.features.dim,),
                                                dtype=np.float32)
        self._obs: Any = None
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        scenario = int(options.get("scenario", self.np_random.choice(self.scenarios)))
        episode_seed = int(options.get("episode_seed", self.np_random.integers(0, 2**31 - 1)))
        for attempt in range(self.RESET_ATTEMPTS):
            self._obs = reset_episode(self.grid, scenario, episode_seed + attempt)
            self._steps = 0
            _, terminated, truncated = self._advance_to_danger()
            if not (terminated or truncated):
                break
        else:
            # No danger state in several episodes (a calm scenario): let the agent act from the start.
            attempt = 0
            self._obs = reset_episode(self.grid, scenario, episode_seed)
            self._steps = 0
        return self._features(), self._info(scenario=scenario, episode_seed=episode_seed + attempt)

    #: Episodes tried per reset to find one that reaches a danger state.
    RESET_ATTEMPTS = 5

    def step(self, action: int):
        if not 0 <= int(action) < len(self.catalog):
            raise IndexError(f"action {action} out of range [0, {len(self.catalog)})")
        reward, terminated, truncated = self._grid_step(self.catalog.action(int(action)))
        if not (terminated or truncated):
            more, terminated, truncated = self._advance_to_danger()
            reward += more
        return self._features(), float(reward), terminated, truncated, self._info()

    def _features(self) -> np.ndarray:
        return np.clip(self.features(self._obs), -FEATURE_BOUND, FEATURE_BOUND)

    def _grid_step(self, grid_action: Any) -> tuple[float, bool, bool]:
        self._obs, reward, done, info = self.grid.step(grid_action)
        self._steps += 1
        blackout = bool(done and info.get("exception"))
        truncated = (done and not blackout) or (self.max_steps is not None and self._steps >= self.max_steps)
        return float(reward), blackout, bool(truncated)

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
        return {"action_mask": self.catalog.legal_mask(self._obs), "max_rho": float(np.max(self._obs.rho)),
                "steps": self._steps, **extra}

    def close(self) -> None:
        self.grid.close()
