"""The action catalog: layout, index <-> grid2op action, legal masks against grid2op, text, cache."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("grid2op")
from ace_hybrid.grid.catalog import BUS_ASSIGNMENT, DISCONNECT, DO_NOTHING, RECONNECT, ActionCatalog
from ace_hybrid.grid.env import reset_episode

pytestmark = pytest.mark.grid2op


@pytest.mark.parametrize(("name", "n_bus"), [
    ("l2rpn_case14_sandbox", 178), ("l2rpn_wcci_2020", 66_810), ("l2rpn_neurips_2020_track1", 66_810),
    ("l2rpn_icaps_2021", 66_810), ("l2rpn_idf_2023", 72_973),
])
def test_catalog_holds_do_nothing_line_status_and_every_bus_assignment(make_grid_env, name, n_bus, tmp_path) -> None:
    env = make_grid_env(name)
    started = time.perf_counter()
    catalog = ActionCatalog(env, cache_dir=tmp_path)
    built_in = time.perf_counter() - started
    assert len(catalog) == 1 + 2 * env.n_line + n_bus
    assert catalog.kind[0] == DO_NOTHING
    assert np.all(catalog.kind[1 : 1 + 2 * env.n_line : 2] == RECONNECT)
    assert np.all(catalog.kind[2 : 1 + 2 * env.n_line : 2] == DISCONNECT)
    assert np.all(catalog.kind[1 + 2 * env.n_line :] == BUS_ASSIGNMENT)
    print(f"{name}: catalog of {len(catalog):,} actions built in {built_in:.3f} s")
    # the cache file is reused and gives the same arrays
    again = ActionCatalog(env, cache_dir=tmp_path)
    np.testing.assert_array_equal(again.n_bus2, catalog.n_bus2)
    assert len(list(tmp_path.glob("catalog-*.npz"))) == 1


def test_corrupt_cache_is_rebuilt(make_grid_env, tmp_path) -> None:
    env = make_grid_env("l2rpn_case14_sandbox")
    first = ActionCatalog(env, cache_dir=tmp_path)
    (cache,) = tmp_path.glob("catalog-*.npz")
    cache.write_bytes(b"not a zip file")
    second = ActionCatalog(env, cache_dir=tmp_path)
    np.testing.assert_array_equal(first.kind, second.kind)


def test_index_round_trips_through_grid2op_actions(make_grid_env) -> None:
    env = make_grid_env("l2rpn_case14_sandbox")
    catalog = ActionCatalog.for_env(env)
    for i in range(len(catalog)):
        assert catalog.index_of(catalog.action(i)) == i
    assert catalog.action(5) is catalog.action(5)  # built once
    with pytest.raises(IndexError, match=r"action 100000 out of range \[0, "):
        catalog.action(100_000)
    two_lines = env.action_space({"set_line_status": [(0, -1), (1, -1)]})
    with pytest.raises(ValueError, match="not in the catalog"):
        catalog.index_of(two_lines)


def test_legal_mask_agrees_with_grid2op_rules(make_grid_env) -> None:
    env = make_grid_env("l2rpn_neurips_2020_track1")
    catalog = ActionCatalog.for_env(env)
    obs = reset_episode(env, 0, 0)
    rng = np.random.default_rng(0)
    checked = 0
    for step in range(12):
        mask = catalog.legal_mask(obs)
        sample = np.concatenate([np.arange(1 + 2 * env.n_line), rng.choice(len(catalog), 150, replace=False)])
        for i in sample:
            legal, _ = env._game_rules(action=catalog.action(int(i)), env=env)
            assert bool(mask[i]) == bool(legal), (step, int(i), catalog.describe(int(i)))
            checked += 1
        # move to a state with cooldowns: a legal topology change or a line disconnection
        choices = np.flatnonzero(mask[1:]) + 1
        obs, _, done, _ = env.step(catalog.action(int(rng.choice(choices))))
        if done:
            obs = reset_episode(env, 1, step)
    assert checked > 2_000


def test_only_changes_masks_actions_that_keep_the_topology(make_grid_env) -> None:
    env = make_grid_env("l2rpn_case14_sandbox")
    catalog = ActionCatalog.for_env(env)
    obs = reset_episode(env, 0, 0)
    mask = catalog.legal_mask(obs, only_changes=True)
    assert mask[0]
    assert not mask[1 : 1 + 2 * env.n_line : 2].any()  # every line is connected: reconnecting changes nothing
    for i in np.flatnonzero(mask[1 + 2 * env.n_line :])[:20] + 1 + 2 * env.n_line:
        s = catalog.substation[i]
        block = obs.sub_topology(int(s))
        assert not np.array_equal(catalog.bus.pattern(i - 1 - 2 * env.n_line), block)


def test_descriptions_name_the_elements_moved(make_grid_env) -> None:
    env = make_grid_env("l2rpn_case14_sandbox")
    catalog = ActionCatalog.for_env(env)
    assert catalog.describe(0) == "do nothing"
    assert catalog.describe(3) == "reconnect line 1"
    assert catalog.describe(4) == "disconnect line 1"
    text = catalog.describe(len(catalog) - 1)
    assert text.startswith(f"substation {catalog.substation[-1]}: ") and text.endswith("the rest stay on bus 1")
    assert "to bus 2" in text


def test_features_and_shortlist(make_grid_env) -> None:
    env = make_grid_env("l2rpn_case14_sandbox")
    catalog = ActionCatalog.for_env(env)
    feats = catalog.features()
    assert feats.shape == (len(catalog), 4 + env.n_sub + env.n_line + env.dim_topo)
    assert np.all(feats[:, :4].sum(axis=1) == 1)
    obs = reset_episode(env, 0, 0)
    short = catalog.shortlist(obs, 12)
    legal = catalog.legal_mask(obs, only_changes=True)
    assert 0 < len(short) <= 12 and legal[short].all() and 0 not in short
    with pytest.raises(ValueError, match="k = 0"):
        catalog.shortlist(obs, 0)
