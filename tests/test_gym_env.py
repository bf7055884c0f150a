"""The gymnasium environment over the catalog."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grid2op")
pytest.importorskip("gymnasium")
import gymnasium
from gymnasium.utils.env_checker import check_env

from ace_hybrid.cli import find_config
from ace_hybrid.config import load_config
from ace_hybrid.grid import GYM_ID
from ace_hybrid.grid.gym_env import GridGymEnv
from ace_hybrid.grid.reward import step_reward

import tiny_settings  # tests/ is on sys.path: see conftest.py

pytestmark = pytest.mark.grid2op


def test_registered_env_with_a_step_cap_passes_gymnasiums_checker() -> None:
    # Scenario 0 of this grid stays calm for the first 100 steps: a reset must move on to an episode in danger.
    env = gymnasium.make(GYM_ID, env_name="l2rpn_neurips_2020_track1", threshold=0.9, max_steps=100)
    assert isinstance(env.unwrapped, GridGymEnv)
    check_env(env.unwrapped, skip_render_check=True)  # also makes a second copy from the spec and closes it twice
    env.close()


def test_every_reset_starts_in_danger() -> None:
    env = GridGymEnv("l2rpn_neurips_2020_track1", threshold=0.9, max_steps=100)
    for seed in range(4):
        _, info = env.reset(seed=seed)
        assert info["max_rho"] >= 0.9, f"seed {seed}: the agent was asked to act in a calm state {info}"
    env.close()


def test_a_threshold_never_reached_is_an_error_naming_it() -> None:
    env = GridGymEnv("l2rpn_case14_sandbox", threshold=4.0, max_steps=5)
    with pytest.raises(ValueError, match="threshold = 4.0.*max_steps = 5"):
        env.reset(seed=0)
    env.close()


def test_reward_is_the_training_reward_summed_over_the_decisions_steps() -> None:
    cfg = load_config(find_config("l2rpn_case14_sandbox"), [*tiny_settings.TINY, "reward.step_scale=0.5"])
    env = GridGymEnv.from_config(cfg)
    assert (env.threshold, env.scenarios, env.max_steps) == (0.5, [0, 1], 120)
    per_step: list[float] = []
    inner = env.grid.step

    def recording_step(action):  # the grid's steps, scored as the training loop scores them
        obs, reward, done, info = inner(action)
        per_step.append(step_reward(cfg.reward, obs, bool(done and info.get("exception"))))
        return obs, reward, done, info

    env.grid.step = recording_step
    _, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(30):
        per_step.clear()
        assert np.array_equal(env.action_masks(), info["action_mask"])
        action = int(rng.choice(np.flatnonzero(env.action_masks())))
        _, reward, terminated, truncated, info = env.step(action)
        assert per_step and reward == pytest.approx(sum(per_step), rel=1e-12)
        if terminated or truncated:
            break
    env.close()


@pytest.mark.slow
def test_maskable_ppo_trains_through_the_registered_env() -> None:
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import MaskablePPO

    class LegalOnly(gymnasium.Wrapper):
        """Fails on any action the mask forbids."""

        def step(self, action):
            assert self.env.unwrapped.action_masks()[int(action)], f"illegal action {action}"
            return super().step(action)

    env = LegalOnly(gymnasium.make(GYM_ID, env_name="l2rpn_case14_sandbox", threshold=0.5, max_steps=120))
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    obs, _ = env.reset(seed=1)
    mask = env.unwrapped.action_masks()
    action, _ = model.predict(obs, action_masks=mask, deterministic=True)
    assert mask[int(action)]
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


def test_the_env_acts_over_an_action_set_in_its_indices() -> None:
    from ace_hybrid.grid.action_set import ActionSet

    env = GridGymEnv("l2rpn_case14_sandbox", threshold=0.5, max_steps=120, action_indices=[0, 3, 7, 11])
    assert env.action_space.n == 4 and isinstance(env.actions, ActionSet)
    _, info = env.reset(seed=0)
    assert info["action_mask"].shape == (4,) and np.array_equal(
        env.action_masks(), env.catalog.legal_mask(env._obs)[[0, 3, 7, 11]])
    played = []
    inner = env.grid.step
    env.grid.step = lambda action: (played.append(action), inner(action))[1]
    env.step(2)
    assert played[0] == env.catalog.action(7)  # set index 2 is catalog action 7
    with pytest.raises(IndexError, match=r"action 4 out of range \[0, 4\)"):
        env.step(4)
    env.close()


def test_from_config_plays_the_runs_episodes_in_order_over_its_action_set() -> None:
    cfg = load_config(find_config("l2rpn_case14_sandbox"), [*tiny_settings.TINY, "env.action_set=tutor:5",
                                                              "env.action_set_states=20"])
    env = GridGymEnv.from_config(cfg)
    from ace_hybrid.grid.action_set import action_set_indices

    assert env.actions.indices.tolist() == action_set_indices(cfg, env.grid, env.catalog)
    assert env.action_space.n == len(env.actions) < len(env.catalog)
    played = []
    for _ in range(3):
        _, info = env.reset()
        played.append((info["scenario"], info["episode_seed"]))
    # Episode k is (train_scenarios[k % 2], 1000 + k), as the training loop plays them (attempts included).
    assert played[0] == (0, 1000) and all(seed - 1000 < env.episodes for _, seed in played)
    assert all(s == cfg.env.train_scenarios[(seed - 1000) % 2] for s, seed in played)
    before, steps = env.grid_steps, info["steps"]
    _, _, terminated, truncated, info = env.step(0)
    assert env.grid_steps - before == info["steps"] - steps >= 1  # the decision's step and the safe rule's after it
    env.close()
