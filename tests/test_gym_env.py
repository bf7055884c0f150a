"""The gymnasium environment over the catalog."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grid2op")
pytest.importorskip("gymnasium")
from gymnasium.utils.env_checker import check_env

from ace_hybrid.grid.gym_env import GridGymEnv

pytestmark = pytest.mark.grid2op


def test_passes_gymnasiums_checker() -> None:
    env = GridGymEnv("l2rpn_case14_sandbox", threshold=0.0, max_steps=100)
    check_env(env, skip_render_check=True)
    env.close()


def test_masks_are_given_and_steps_are_decisions_in_danger() -> None:
    env = GridGymEnv("l2rpn_neurips_2020_track1", threshold=0.9, max_steps=500)
    obs, info = env.reset(seed=3, options={"scenario": 1, "episode_seed": 1})
    assert obs.shape == env.observation_space.shape and obs.dtype == np.float32
    assert info["action_mask"].shape == (env.action_space.n,) and info["action_mask"][0]
    assert info["max_rho"] >= 0.9
    obs, reward, terminated, truncated, info = env.step(0)
    assert np.isfinite(reward) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert terminated or truncated or info["max_rho"] >= 0.9  # the next decision is again in danger
    with pytest.raises(IndexError, match="out of range"):
        env.step(env.action_space.n)
    env.close()


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(IndexError, match="scenario 9"):
        GridGymEnv("l2rpn_case14_sandbox", scenarios=[9])
    with pytest.raises(ValueError, match="max_steps"):
        GridGymEnv("l2rpn_case14_sandbox", max_steps=0)


def test_terminal_observations_stay_finite_and_in_the_box() -> None:
    env = GridGymEnv("l2rpn_neurips_2020_track1", threshold=0.9)
    obs, info = env.reset(seed=0, options={"scenario": 1, "episode_seed": 1})
    rng = np.random.default_rng(0)
    for _ in range(400):
        legal = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(rng.choice(legal)))  # random legal topology play
        assert env.observation_space.contains(obs) and np.isfinite(reward)
        if terminated or truncated:
            break
    assert terminated or truncated, "random topology play should end the episode within 400 decisions"
    env.close()
