"""Environment factory: names, datasets, reproducible (scenario, seed) episodes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grid2op")
from ace_hybrid.grid.env import (SUPPORTED_ENVS, available_envs, choose_dataset, episode_start, make_env, n_scenarios,
                                 playable_steps, reset_episode)

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


def _do_nothing_rhos(env, scenario: int, seed: int, steps: int = 10) -> np.ndarray:
    reset_episode(env, scenario, seed)
    return np.array([env.step(env.action_space({}))[0].rho.copy() for _ in range(steps)])


def test_without_an_opponent_only_a_start_spread_makes_a_seed_change_the_episode(make_grid_env) -> None:
    """l2rpn_case14_sandbox has no opponent: seeds 100 and 101 of a scenario are one episode, unless the seed also
    chooses where it starts; then the episode is the scenario from that step, with that many fewer steps to play."""
    plain = make_grid_env("l2rpn_case14_sandbox")
    np.testing.assert_array_equal(_do_nothing_rhos(plain, 0, 100), _do_nothing_rhos(plain, 0, 101))
    assert playable_steps(plain) == 575 and episode_start(plain, 100) == 0
    spread = make_env("l2rpn_case14_sandbox", seed=0, start_spread=288)
    try:
        starts = [episode_start(spread, s) for s in (100, 101)]
        assert starts[0] != starts[1] and all(0 <= k < 288 for k in starts)
        assert not np.array_equal(_do_nothing_rhos(spread, 0, 100), _do_nothing_rhos(spread, 0, 101))
        np.testing.assert_array_equal(_do_nothing_rhos(spread, 0, 100), _do_nothing_rhos(spread, 0, 100))
        reset_episode(spread, 0, 100)
        assert spread.ace_episode_start == starts[0] and playable_steps(spread) == 575 - starts[0]
        # the start is the plain episode's step: the same loads there
        first = reset_episode(spread, 0, 100)
        reset_episode(plain, 0, 100)
        for _ in range(starts[0]):
            obs, *_ = plain.step(plain.action_space({}))
        np.testing.assert_allclose(first.load_p, obs.load_p, rtol=1e-5)
    finally:
        spread.close()


def test_episode_starts_are_spread_over_the_range_and_fixed_by_the_seed() -> None:
    from types import SimpleNamespace

    env = SimpleNamespace(ace_start_spread=288)
    starts = [episode_start(env, s) for s in range(100, 132)]
    assert starts == [episode_start(env, s) for s in range(100, 132)]
    assert all(0 <= k < 288 for k in starts) and len(set(starts)) >= 28  # 32 seeds, few collisions
    assert min(starts) < 288 / 4 and max(starts) > 3 * 288 / 4
    assert episode_start(SimpleNamespace(ace_start_spread=0), 123) == 0


def test_a_start_spread_as_long_as_a_scenario_is_refused() -> None:
    pytest.importorskip("lightsim2grid")
    with pytest.raises(ValueError, match=r"start_spread = 575 out of range \[0, 575\) for l2rpn_case14_sandbox"):
        make_env("l2rpn_case14_sandbox", seed=0, start_spread=575)


class _GameOverAt:
    """A real grid whose reset ends the game at some starts (as a seed's maintenance can at an hour of a generated
    week: week 4 of l2rpn_idf_2023-weeks-s0, seed 2147, steps 696-791)."""

    def __init__(self, env, bad) -> None:  # noqa: ANN001
        self.__dict__.update(_env=env, bad=set(bad), tried=[])

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._env, name)

    def reset(self, seed: int, options: dict):  # noqa: ANN201
        from grid2op.Exceptions import EnvError

        self.tried.append(options.get("init ts", 0))
        if self.tried[-1] in self.bad:
            raise EnvError("This environment is not initialized")
        return self._env.reset(seed=seed, options=options)


def test_a_start_whose_reset_ends_the_game_moves_on_by_the_hour() -> None:
    pytest.importorskip("lightsim2grid")
    from ace_hybrid.grid.env import RESTART_STEPS

    env = make_env("l2rpn_case14_sandbox", seed=0, start_spread=288)
    try:
        first = episode_start(env, 7)
        grid = _GameOverAt(env, {first, first + RESTART_STEPS})
        obs = reset_episode(grid, 0, 7)
        assert grid.tried == [first, first + RESTART_STEPS, first + 2 * RESTART_STEPS]
        assert grid.ace_episode_start == first + 2 * RESTART_STEPS and playable_steps(grid) == (
            int(env.max_episode_duration()) - first - 2 * RESTART_STEPS)
        assert np.isfinite(obs.rho).all()
        never = _GameOverAt(env, range(first, int(env.max_episode_duration()) + RESTART_STEPS))
        with pytest.raises(ValueError, match=rf"scenario 0, seed 7\): grid2op ends the game at every start from "
                                             rf"step {first}"):
            reset_episode(never, 0, 7)
    finally:
        env.close()
