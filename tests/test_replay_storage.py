"""Storage: next-observation pairing, stale handles, reward shaping, tree invariants, memory use."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ace_hybrid import MixedReplayBuffer

D = 4


def obs_of(episode: int, decision: int, salt: float = 0.0) -> np.ndarray:
    return np.array([episode, decision, salt, -1.0], np.float32)


# One "segment" = a run of adds: (episode delta, length, start decision, end kind, reset obs salt, decision gap).
segment = st.tuples(
    st.integers(0, 2),  # 0: same episode continues (if possible), else a new or revisited episode id
    st.integers(1, 9),
    st.integers(0, 3),
    st.sampled_from(["done", "truncated", "open"]),
    st.booleans(),  # True: the first obs differs from the stored pending next obs (non-contiguous add)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(3, 40), segments=st.lists(segment, min_size=1, max_size=12), seed=st.integers(0, 99)
)
def test_every_transition_gets_back_the_next_obs_it_was_given(capacity, segments, seed):
    buf = MixedReplayBuffer(D, capacity, 2, seed=seed)
    given_pairs: dict[int, tuple[np.ndarray, np.ndarray, bool, bool]] = {}
    episode, decision, pending = 0, 0, None
    for delta, length, gap, end, reset in segments:
        episode += delta
        decision += gap
        for t in range(length):
            reuse = pending is not None and t == 0 and not reset and gap == 0
            obs = pending if reuse else obs_of(episode, decision, 0.25)
            nxt = obs_of(episode, decision + 1, float(t))
            last = t == length - 1
            done, trunc = last and end == "done", last and end == "truncated"
            h = buf.add_rl(obs, 1, 0.0, nxt, done, trunc, episode, decision)
            given_pairs[h] = (obs.copy(), nxt.copy(), done, trunc)
            pending, decision = nxt, decision + 1
    assert buf.check_invariants() == ""
    cols = buf.rl_columns()
    assert len(cols["index"]) == buf.rl_size == len(buf)
    live = buf.get(cols["index"])
    for i, h in enumerate(cols["index"].tolist()):
        obs, nxt, done, trunc = given_pairs[h]
        np.testing.assert_array_equal(live.obs[i], obs)
        np.testing.assert_array_equal(live.next_obs[i], nxt)
        assert (live.done[i], live.truncated[i]) == (done, trunc)
    batch = buf.sample(64)
    for i, h in enumerate(batch.index.tolist()):
        np.testing.assert_array_equal(batch.obs[i], given_pairs[h][0])
        np.testing.assert_array_equal(batch.next_obs[i], given_pairs[h][1])
    # Every handle that is not live is refused by get (stale), never paired with a wrong observation.
    for h in set(given_pairs) - set(cols["index"].tolist()):
        with pytest.raises(IndexError, match="stale"):
            buf.get(np.array([h]))


def test_chained_episode_stores_each_observation_once():
    buf = MixedReplayBuffer(D, 100, 1)
    for t in range(30):
        buf.add_rl(obs_of(0, t), 0, 0.0, obs_of(0, t + 1), t == 29, False, 0, t)
    assert buf.rl_size == 30  # 31 slots: one per observation
    for t in range(75):
        buf.add_rl(obs_of(1, t), 0, 0.0, obs_of(1, t + 1), False, False, 1, t)
    # 31 + 76 = 107 slots written into 100: positions 0..6 (decisions 0..6 of episode 0) are overwritten.
    assert buf.rl_size == 23 + 75
    cols = buf.rl_columns()
    assert cols["decision"][0] == 7 and cols["episode"][0] == 0
    assert cols["index"][0] == 7 << 1


@pytest.mark.parametrize(
    "change",
    ["episode", "decision", "obs", "after_done", "after_truncated"],
)
def test_broken_chain_starts_a_fresh_slot(change):
    buf = MixedReplayBuffer(D, 50, 1)
    buf.add_rl(obs_of(0, 0), 0, 0.0, obs_of(0, 1), change == "after_done", change == "after_truncated", 0, 0)
    ep, decision, obs = 0, 1, obs_of(0, 1)
    if change == "episode":
        ep = 1
    elif change == "decision":
        decision = 2
    elif change == "obs":
        obs = obs_of(0, 1) + np.float32(1e-6)
    h = buf.add_rl(obs, 0, 0.0, obs_of(0, 2), False, False, ep, decision)
    assert h >> 1 == 2  # a fresh slot after the first transition's two slots
    got = buf.get(np.array([0, h]))
    np.testing.assert_array_equal(got.next_obs[0], obs_of(0, 1))
    np.testing.assert_array_equal(got.obs[1], obs)


def test_stale_handles_are_ignored_by_priority_and_reward_updates():
    buf = MixedReplayBuffer(D, 8, 2, alpha=1.0)
    old = [buf.add_rl(obs_of(0, t), 0, 1.0, obs_of(0, t + 1), False, False, 0, t) for t in range(4)]
    old_llm = buf.add_validated(obs_of(9, 0), 0, 1.0, obs_of(9, 1), False, False, 9, 0, 0.5, True)
    for t in range(4, 12):
        buf.add_rl(obs_of(0, t), 0, 1.0, obs_of(0, t + 1), False, False, 0, t)
    for _ in range(2):
        buf.add_validated(obs_of(9, 0), 0, 1.0, obs_of(9, 1), False, False, 9, 0, 0.5, True)
    before = buf._tree_snapshot()
    assert buf.update_priorities(np.array(old + [old_llm]), np.full(5, 7.0)) == 0
    assert buf.update_rewards(np.array(old + [old_llm]), np.full(5, 7.0)) == 0
    after = buf._tree_snapshot()
    np.testing.assert_array_equal(before["rl_leaves"], after["rl_leaves"])
    assert 7.0 not in buf.rl_columns()["reward"]


def test_llm_handles_do_not_change_priorities_but_accept_rewards():
    buf = MixedReplayBuffer(D, 8, 4)
    h = buf.add_validated(obs_of(1, 0), 2, 0.5, obs_of(1, 1), False, False, 1, 0, 1.5, True)
    leaves = buf._tree_snapshot()["validated_leaves"].copy()
    assert buf.update_priorities(np.array([h]), np.array([100.0])) == 0
    np.testing.assert_array_equal(buf._tree_snapshot()["validated_leaves"], leaves)
    assert buf.update_rewards(np.array([h]), np.array([-2.0])) == 1
    got = buf.get(np.array([h]))
    assert got.reward[0] == -2.0 and got.original_reward[0] == 0.5
    assert got.from_validated[0] and got.valid[0] and got.improvement[0] == 1.5 and got.weight[0] == 1.0


def test_reward_updates_keep_the_original_reward():
    buf = MixedReplayBuffer(D, 20, 2)
    hs = [buf.add_rl(obs_of(0, t), t, float(t), obs_of(0, t + 1), False, False, 0, t) for t in range(5)]
    # Duplicates: the last value wins and each applied entry is counted.
    assert buf.update_rewards(np.array([hs[1], hs[3], hs[1]]), np.array([10.0, 30.0, 11.0])) == 3
    cols = buf.rl_columns()
    np.testing.assert_array_equal(cols["reward"], [0.0, 11.0, 2.0, 30.0, 4.0])
    np.testing.assert_array_equal(cols["original_reward"], [0.0, 1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(cols["episode"], [0] * 5)
    np.testing.assert_array_equal(cols["decision"], np.arange(5))
    np.testing.assert_array_equal(cols["action"], np.arange(5))
    assert cols["index"].tolist() == hs


def test_new_items_get_the_current_maximum_priority_which_can_decrease():
    buf = MixedReplayBuffer(D, 40, 2, alpha=1.0)
    assert buf.max_priority == 1.0
    hs = [buf.add_rl(obs_of(0, t), 0, 0.0, obs_of(0, t + 1), False, False, 0, t) for t in range(5)]
    buf.update_priorities(np.array(hs), np.array([0.5, 9.0, 2.0, 0.1, 0.1]))
    assert buf.max_priority == 9.0
    h = buf.add_rl(obs_of(0, 5), 0, 0.0, obs_of(0, 6), False, False, 0, 5)
    assert buf._tree_snapshot()["rl_priorities"][(h >> 1) % 40] == 9.0
    buf.update_priorities(np.array([hs[1], h]), np.array([0.25, 0.25]))
    assert buf.max_priority == 2.0  # a max structure, not a running max
    buf.update_priorities(np.array(hs + [h]), np.zeros(6))
    assert buf.max_priority == 1.0  # nothing positive left: new items get 1


ops = st.lists(
    st.one_of(
        st.tuples(st.just("rl"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("llm"), st.floats(-5, 5), st.booleans()),
        st.tuples(st.just("prio"), st.lists(st.integers(0, 200), min_size=1, max_size=12),
                  st.lists(st.floats(0, 100), min_size=12, max_size=12)),
    ),
    max_size=80,
)


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(3, 70), validated_capacity=st.integers(1, 20), alpha=st.sampled_from([0.0, 0.5, 1.0]),
       stream=ops)
def test_trees_stay_consistent_under_random_add_and_update_streams(capacity, validated_capacity, alpha, stream):
    buf = MixedReplayBuffer(D, capacity, validated_capacity, alpha=alpha, tau=0.7)
    issued: list[int] = []
    decision = 0
    for op in stream:
        if op[0] == "rl":
            ep, done = op[1], op[2]
            issued.append(buf.add_rl(obs_of(ep, decision), 0, 0.0, obs_of(ep, decision + 1), done, False, ep, decision))
            decision += 1
        elif op[0] == "llm":
            issued.append(buf.add_validated(obs_of(0, 0), 0, 0.0, obs_of(0, 1), False, False, 0, 0, op[1], op[2]))
        elif issued:
            # Duplicates and stale handles included.
            pick = np.array([issued[i % len(issued)] for i in op[1]], np.int64)
            buf.update_priorities(pick, np.array(op[2][: len(pick)]))
    assert buf.check_invariants() == ""
    snap = buf._tree_snapshot()
    for leaves, root in ((snap["rl_leaves"], snap["rl_root"]), (snap["validated_leaves"], snap["validated_root"])):
        assert np.all(leaves >= 0)
        assert root == pytest.approx(math.fsum(leaves), rel=1e-12, abs=1e-300)
    live = buf.rl_columns()["index"]
    slots = (live >> 1) % capacity
    prio = snap["rl_priorities"]
    expected_leaves = np.zeros(capacity)
    expected_leaves[slots] = 1.0 if alpha == 0 else prio[slots].astype(np.float64) ** alpha
    np.testing.assert_allclose(snap["rl_leaves"], expected_leaves, rtol=1e-12)
    assert snap["max_root"] == (prio[slots].max() if len(slots) else 0.0)
    assert np.count_nonzero(prio) == np.count_nonzero(prio[slots])


def test_rl_partition_uses_at_most_1_1_times_the_observation_bytes_per_transition():
    obs_dim, capacity, length = 100, 50_000, 10_000
    buf = MixedReplayBuffer(obs_dim, capacity, 1)
    rng = np.random.default_rng(0)
    for ep in range(capacity // length + 1):
        chain = rng.random((length + 1, obs_dim), dtype=np.float32)
        buf.add_rl_batch(chain[:-1], np.zeros(length, np.int64), np.zeros(length, np.float32), chain[1:],
                         np.arange(length) == length - 1, np.zeros(length, bool), np.full(length, ep),
                         np.arange(length))
    assert buf.rl_size >= capacity - capacity // length - 2
    per_transition = buf.rl_nbytes / buf.rl_size
    assert per_transition <= 1.1 * obs_dim * 4, per_transition


def test_the_decision_index_is_named_decision_everywhere():
    """The training loop stores one transition per decision, so the column is ``decision``, not ``step``."""
    buf = MixedReplayBuffer(D, 20, 4)
    h = buf.add_rl(obs_of(0, 0), 0, 0.0, obs_of(0, 1), False, False, episode=0, decision=0)
    buf.add_rl_batch(obs_of(0, 1)[None], np.zeros(1, np.int64), np.zeros(1), obs_of(0, 2)[None], np.zeros(1, bool),
                     np.zeros(1, bool), episode=np.zeros(1, np.int64), decision=np.ones(1, np.int64))
    buf.add_validated(obs_of(1, 0), 0, 0.0, obs_of(1, 1), False, False, episode=1, decision=5, improvement=0.0,
                valid=True)
    assert buf.rl_size == 2 and buf.rl_columns()["decision"].tolist() == [0, 1]
    assert "step" not in buf.rl_columns()
    assert "decision" in buf.get(np.array([h]))._fields and "step" not in buf.sample(4)._fields
    with pytest.raises(TypeError):
        buf.add_rl(obs_of(0, 2), 0, 0.0, obs_of(0, 3), False, False, episode=0, step=2)
