"""Environment factory: names, datasets, reproducible (scenario, seed) episodes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grid2op")
from ace_hybrid.grid.env import SUPPORTED_ENVS, available_envs, choose_dataset, make_env, n_scenarios, reset_episode

pytestmark = pytest.mark.grid2op


def test_every_supported_offline_env_is_available() -> None:
    names = available_envs()
    for name in SUPPORTED_ENVS[:5]:
        assert name in names


def test_unknown_env_names_the_available_ones() -> None:
    with pytest.raises(ValueError, match="l2rpn_case14_sandbox"):
        make_env("l2rpn_nonexistent", seed=0)


def test_offline_copy_is_used_when_no_full_dataset() -> None:
    choice = choose_dataset("l2rpn_case14_sandbox")
    assert choice.test or choice.path
    assert "l2rpn_case14_sandbox" in choice.describe()
    with pytest.raises(ValueError, match="dataset"):
        choose_dataset("l2rpn_case14_sandbox", "bogus")  # type: ignore[arg-type]


def test_bad_backend_is_rejected() -> None:
    with pytest.raises(ValueError, match="backend"):
        make_env("l2rpn_case14_sandbox", seed=0, backend="fortran")  # type: ignore[arg-type]


def test_same_scenario_and_seed_replay_the_same_episode(make_grid_env) -> None:
    env = make_grid_env("l2rpn_neurips_2020_track1")

    def rollout(scenario: int, seed: int) -> np.ndarray:
        reset_episode(env, scenario, seed)
        rhos = []
        for _ in range(30):
            obs, *_ = env.step(env.action_space({}))
            rhos.append(obs.rho.copy())
        return np.array(rhos)

    np.testing.assert_array_equal(rollout(1, 3), rollout(1, 3))
    assert not np.array_equal(rollout(0, 3), rollout(1, 3))


def test_scenario_out_of_range_is_an_index_error(make_grid_env) -> None:
    env = make_grid_env("l2rpn_case14_sandbox")
    with pytest.raises(IndexError, match=r"scenario 99 out of range \[0, "):
        reset_episode(env, 99, 0)
    assert n_scenarios(env) >= 1
