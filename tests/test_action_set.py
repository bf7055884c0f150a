"""Action sets: the whole catalog or a tutor-selected subset, in the catalog's language with their own indices."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grid2op")
from ace_hybrid.config import load_config, parse_action_set
from ace_hybrid.grid.action_set import ActionSet, select_by_tutor
from ace_hybrid.grid.catalog import RECONNECT, ActionCatalog
from ace_hybrid.grid.env import reset_episode

pytestmark = pytest.mark.grid2op
ENV = "l2rpn_case14_sandbox"


@pytest.fixture()
def grid(make_grid_env):
    env = make_grid_env(ENV)
    return env, ActionCatalog.for_env(env)


def test_the_full_set_is_the_catalog(grid) -> None:
    env, catalog = grid
    full = ActionSet(catalog)
    obs = reset_episode(env, 0, 0)
    assert full.is_full and len(full) == len(catalog) and full.to_catalog(17) == 17 == full.from_catalog(17)
    np.testing.assert_array_equal(full.legal_mask(obs), catalog.legal_mask(obs))
    np.testing.assert_array_equal(full.features(), catalog.features())


def test_a_subset_maps_indices_masks_and_features(grid) -> None:
    env, catalog = grid
    subset = [0, 5, 40, 41, 100]
    actions = ActionSet(catalog, subset)
    obs = reset_episode(env, 0, 0)
    assert len(actions) == 5 and [actions.to_catalog(i) for i in range(5)] == subset
    assert actions.from_catalog(40) == 2 and actions.from_catalog(6) is None
    np.testing.assert_array_equal(actions.legal_mask(obs), catalog.legal_mask(obs)[subset])
    np.testing.assert_array_equal(actions.features(), catalog.features()[subset])
    status = np.ones((2, env.n_line), dtype=bool)
    zeros_l, zeros_s = np.zeros((2, env.n_line), np.int64), np.zeros((2, env.n_sub), np.int64)
    np.testing.assert_array_equal(actions.mask_batch(status, zeros_l, zeros_s),
                                  catalog.mask_batch(status, zeros_l, zeros_s)[:, subset])
    assert actions.describe(2) == catalog.describe(40)
    assert actions.action(4) == catalog.action(100)
    short = actions.shortlist(obs, 3)
    assert all(0 < i < 5 and actions.legal_mask(obs, only_changes=True)[i] for i in short)
    with pytest.raises(IndexError, match=r"action 5 out of range \[0, 5\)"):
        actions.to_catalog(5)


def test_skip_no_ops_masks_line_actions_that_change_nothing(grid) -> None:
    """``env.mask_no_ops``: reconnecting a connected line and disconnecting a disconnected one are masked, alone and
    in batches, the same way; everything else keeps the masker's verdict."""
    env, catalog = grid
    subset = [0, 1, 2, 3, 4, 40, 100]  # do nothing, reconnect and disconnect lines 0 and 1, two bus assignments
    plain, skipping = ActionSet(catalog, subset), ActionSet(catalog, subset, skip_no_ops=True)
    obs = reset_episode(env, 0, 0)
    assert np.asarray(obs.line_status).all()
    want = plain.legal_mask(obs)
    want[[1, 3]] = False  # reconnecting lines 0 and 1, both connected
    np.testing.assert_array_equal(skipping.legal_mask(obs), want)
    status = np.ones((2, env.n_line), dtype=bool)
    status[1, 1] = False  # the second state has line 1 disconnected
    zeros_l, zeros_s = np.zeros((2, env.n_line), np.int64), np.zeros((2, env.n_sub), np.int64)
    masks, base = skipping.mask_batch(status, zeros_l, zeros_s), plain.mask_batch(status, zeros_l, zeros_s)
    np.testing.assert_array_equal(masks[0], base[0] & [True, False, True, False, True, True, True])
    np.testing.assert_array_equal(masks[1], base[1] & [True, False, True, True, False, True, True])
    assert masks[:, 0].all()  # do nothing stays
    full = ActionSet(catalog, skip_no_ops=True)
    legal = full.legal_mask(obs)
    assert not legal[1 : 1 + 2 * env.n_line : 2].any()  # no line to reconnect
    np.testing.assert_array_equal(legal[1 + 2 * env.n_line :], catalog.legal_mask(obs)[1 + 2 * env.n_line :])


def test_bad_subsets_are_refused(grid) -> None:
    _, catalog = grid
    with pytest.raises(ValueError, match="start with 0"):
        ActionSet(catalog, [3, 0])
    with pytest.raises(ValueError, match="out of range"):
        ActionSet(catalog, [0, len(catalog)])
    for bad in ("tutor:0", "tutor:x", "all", "tutor"):
        with pytest.raises(ValueError, match="env.action_set"):
            parse_action_set(bad)
        with pytest.raises(ValueError, match="env.action_set"):
            load_config(None, [f"env.action_set={bad}"])
    assert parse_action_set("full") is None and parse_action_set("tutor:50") == 50


def test_the_tutor_selects_useful_actions_deterministically_and_caches_them(grid) -> None:
    env, catalog = grid
    pairs = [(0, 1000), (1, 1001)]
    first = select_by_tutor(env, catalog, 10, pairs, max_states=25, max_steps=400)
    assert first[0] == 0 and len(first) == len(set(first.tolist()))
    reconnect = np.flatnonzero(catalog.kind == RECONNECT)
    np.testing.assert_array_equal(first[1 : 1 + reconnect.size], reconnect)
    picked = first[1 + reconnect.size :]
    assert 0 < picked.size <= 10 and all(catalog.kind[c] != RECONNECT for c in picked)
    again = select_by_tutor(env, catalog, 10, pairs, max_states=25, max_steps=400, cache=False)
    np.testing.assert_array_equal(first, again)  # recomputed, not read back: the selection is deterministic
