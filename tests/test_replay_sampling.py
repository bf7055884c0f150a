"""Sampling distribution, Eq. 8, importance weights, batch split, determinism, parity with a reference."""

from __future__ import annotations

import importlib.util
import math
import pathlib
import sys

import numpy as np
import pytest
from scipy import stats

from ace_hybrid import MixedReplayBuffer


def _load_reference():
    path = pathlib.Path(__file__).with_name("reference_replay.py")
    spec = importlib.util.spec_from_file_location("reference_replay", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("reference_replay", mod)
    spec.loader.exec_module(mod)
    return mod


ref = _load_reference()
D = 3


def add_episode(buf, episode: int, length: int, start_decision: int = 0, rng=None, done_at_end=True):
    """Adds one chained episode; observations encode (episode, decision). Returns the handles."""
    handles = []
    for t in range(start_decision, start_decision + length):
        obs = np.array([episode, t, 0.5], np.float32)
        nxt = np.array([episode, t + 1, 0.5], np.float32)
        done = done_at_end and t == start_decision + length - 1
        handles.append(buf.add_rl(obs, t % 7, float(t), nxt, done, False, episode, t))
    return handles


def add_llm_items(buf, improvements, valid, episode=0):
    handles = []
    for i, (imp, v) in enumerate(zip(improvements, valid)):
        obs = np.array([episode, i, 1.0], np.float32)
        handles.append(buf.add_validated(obs, i, 0.0, obs + 1, False, False, episode, i, float(imp), bool(v)))
    return handles


def draw_counts(buf, batches: int, batch_size: int = 256) -> dict[int, int]:
    counts: dict[int, int] = {}
    for _ in range(batches):
        for h in buf.sample(batch_size).index.tolist():
            counts[h] = counts.get(h, 0) + 1
    return counts


def chi_square_p(counts: dict[int, int], handles, weights) -> float:
    w = np.asarray(weights, np.float64)
    observed = np.array([counts.get(int(h), 0) for h in handles], np.float64)
    assert observed.sum() == sum(counts.values()), "a sampled handle is outside the expected support"
    assert observed[w == 0].sum() == 0, "an item of weight 0 was sampled"
    keep = w > 0
    expected = w[keep] / w[keep].sum() * observed.sum()
    return float(stats.chisquare(observed[keep], expected).pvalue)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize(
    "capacity,episodes",
    [(37, [(0, 50)]), (101, [(0, 20), (1, 15)]), (1000, [(0, 7), (1, 9), (2, 4)])],
    ids=["wrapped", "partial", "sparse"],
)
def test_sampling_matches_priorities(alpha, capacity, episodes):
    buf = MixedReplayBuffer(D, capacity, 4, alpha=alpha, beta=0.0, seed=11)
    for ep, length in episodes:
        add_episode(buf, ep, length)
    handles = buf.rl_columns()["index"]
    rng = np.random.default_rng(5)
    prio = rng.uniform(0.05, 4.0, size=len(handles))
    assert buf.update_priorities(handles, prio) == len(handles)
    counts = draw_counts(buf, 200)
    p32 = prio.astype(np.float32).astype(np.float64)
    assert chi_square_p(counts, handles, p32**alpha) > 1e-3
    # The test has power: the distribution for a clearly different alpha is rejected.
    wrong = p32 ** (alpha + 0.5 if alpha < 1.0 else 0.3)
    assert chi_square_p(counts, handles, wrong) < 1e-6


def test_zero_priority_is_never_sampled_unless_alpha_is_zero():
    for alpha in (0.6, 0.0):
        buf = MixedReplayBuffer(D, 50, 4, alpha=alpha, beta=0.0, seed=3)
        handles = add_episode(buf, 0, 20)
        prio = np.ones(20)
        prio[::2] = 0.0
        buf.update_priorities(np.array(handles), prio)
        counts = draw_counts(buf, 20)
        zero_hits = sum(counts.get(h, 0) for h in handles[::2])
        if alpha > 0:
            assert zero_hits == 0
        else:
            assert chi_square_p(counts, handles, np.ones(20)) > 1e-3


@pytest.mark.parametrize("tau", [0.5, 2.0])
def test_llm_sampling_follows_eq8(tau):
    buf = MixedReplayBuffer(D, 10, 40, beta=1.0, tau=tau, seed=2)
    rng = np.random.default_rng(1)
    imp = rng.uniform(-2.0, 2.0, size=40).astype(np.float32)
    valid = rng.random(40) < 0.7
    handles = add_llm_items(buf, imp, valid)
    counts = draw_counts(buf, 150)
    invalid_hits = sum(counts.get(h, 0) for h, v in zip(handles, valid) if not v)
    assert invalid_hits == 0
    weights = valid * np.exp(imp.astype(np.float64) / tau)
    assert chi_square_p(counts, handles, weights) > 1e-3
    assert chi_square_p(counts, handles, valid * np.exp(imp.astype(np.float64) / (2 * tau))) < 1e-6


def test_eq8_exponent_is_clipped_so_weights_stay_finite():
    buf = MixedReplayBuffer(D, 10, 4, beta=1.0, tau=1e-3, seed=2)
    handles = add_llm_items(buf, [1e3, 5e3, -1e3, 0.0], [True] * 4)
    leaves = buf._tree_snapshot()["validated_leaves"]
    assert np.all(np.isfinite(leaves))
    np.testing.assert_allclose(leaves, [math.exp(60), math.exp(60), math.exp(-60), 1.0])
    counts = draw_counts(buf, 40)
    assert chi_square_p(counts, handles[:2], [1.0, 1.0]) > 1e-3
    assert counts.get(handles[2], 0) + counts.get(handles[3], 0) == 0


def expected_weights(buf, batch, is_exponent):
    snap = buf._tree_snapshot()
    n_rl = int(np.count_nonzero(~batch.from_validated))
    n_llm = len(batch.index) - n_rl
    B = len(batch.index)
    slots_rl = (batch.index >> 1) % buf.rl_capacity
    slots_llm = (batch.index >> 1) % buf.validated_capacity
    q = np.where(
        batch.from_validated,
        n_llm / B * snap["validated_leaves"][slots_llm] / max(snap["validated_root"], 1e-300),
        n_rl / B * snap["rl_leaves"][slots_rl] / max(snap["rl_root"], 1e-300),
    )
    raw = (len(buf) * q) ** (-is_exponent)
    return raw / raw.max()


@pytest.mark.parametrize("is_exponent", [0.0, 0.4, 1.0])
def test_importance_weights_follow_the_formula_normalised_per_batch(is_exponent):
    buf = MixedReplayBuffer(D, 200, 50, alpha=0.7, beta=0.3, tau=0.8, seed=9)
    for ep in range(6):
        add_episode(buf, ep, 25)
    rng = np.random.default_rng(4)
    add_llm_items(buf, rng.normal(size=50), rng.random(50) < 0.9)
    cols = buf.rl_columns()
    buf.update_priorities(cols["index"], rng.uniform(0.01, 10.0, size=len(cols["index"])))
    for _ in range(5):
        batch = buf.sample(128, is_exponent=is_exponent)
        assert batch.weight.dtype == np.float32
        np.testing.assert_allclose(batch.weight, expected_weights(buf, batch, is_exponent), rtol=2e-6)
        assert batch.weight.max() == np.float32(1.0)  # normalised by this batch's maximum
        assert batch.from_validated.sum() == 128 - round(0.7 * 128 + 1e-9)


def test_batch_split_uses_round_half_up():
    buf = MixedReplayBuffer(D, 100, 100, beta=0.25, seed=1)
    for ep in range(3):
        add_episode(buf, ep, 20)
    add_llm_items(buf, np.zeros(30), [True] * 30)
    batch = buf.sample(6)  # (1 - 0.25) * 6 = 4.5 -> 5 RL rows, 1 LLM row
    assert list(batch.from_validated) == [False] * 5 + [True]


def test_an_empty_partition_gives_the_whole_batch_to_the_other():
    buf = MixedReplayBuffer(D, 300, 100, beta=0.25, seed=1)
    with pytest.raises(ValueError, match="no sampleable"):
        buf.sample(8)
    add_llm_items(buf, np.zeros(10), [True] * 10)
    b = buf.sample(16)  # RL empty: all 16 rows from the 10 LLM items, q = 1 * leaf / total
    assert b.from_validated.all()
    np.testing.assert_allclose(b.weight, expected_weights(buf, b, 0.4), rtol=2e-6)
    only_rl = MixedReplayBuffer(D, 300, 100, beta=0.25, seed=1)
    add_episode(only_rl, 0, 5)
    add_llm_items(only_rl, np.zeros(4), [False] * 4)  # invalid items are never sampled
    assert not only_rl.sample(64).from_validated.any()
    # RL transitions whose priorities are all 0 are not sampleable either (alpha > 0): LLM takes the batch.
    only_llm = MixedReplayBuffer(D, 300, 100, alpha=0.6, beta=0.25, seed=1)
    handles = add_episode(only_llm, 0, 5)
    only_llm.update_priorities(np.array(handles), np.zeros(5))
    add_llm_items(only_llm, [0.0], [True])
    assert only_llm.sample(8).from_validated.all()


def test_a_small_llm_partition_supplies_one_row_per_valid_item_and_rl_the_rest():
    buf = MixedReplayBuffer(D, 300, 100, beta=0.25, seed=1)
    for ep in range(8):
        add_episode(buf, ep, 30)
    add_llm_items(buf, np.zeros(10), [True] * 10)
    b = buf.sample(64)  # nominal share 16 > 10 valid items: 10 LLM rows, 54 RL rows
    assert list(b.from_validated) == [False] * 54 + [True] * 10
    np.testing.assert_allclose(b.weight, expected_weights(buf, b, 0.4), rtol=2e-6)
    assert buf.sample(40).from_validated.sum() == 10  # share 10 <= 10 valid items: the nominal split
    assert buf.sample(8).from_validated.sum() == 2
    # Invalid LLM items do not count: 10 valid + 20 invalid still give at most 10 rows.
    add_llm_items(buf, np.zeros(20), [False] * 20, episode=1)
    assert buf.validated_size == 30 and len(buf) == buf.rl_size + 10
    b = buf.sample(64)
    assert b.from_validated.sum() == 10 and b.valid[b.from_validated].all()


def test_a_short_rl_partition_still_supplies_the_rest_of_the_batch():
    buf = MixedReplayBuffer(D, 20, 10, beta=0.5, seed=1)
    add_episode(buf, 0, 3)
    add_llm_items(buf, [0.0, 1.0], [True, True])
    b = buf.sample(32)  # LLM: min(16, 2) = 2 rows; RL: the other 30 rows from its 3 transitions
    assert b.from_validated.sum() == 2 and set(b.index[~b.from_validated].tolist()) <= {0, 2, 4}
    np.testing.assert_allclose(b.weight, expected_weights(buf, b, 0.4), rtol=2e-6)
    full = MixedReplayBuffer(D, 20, 40, beta=1.0, seed=1)  # beta = 1 but only 3 LLM items: RL fills the batch
    add_episode(full, 0, 3)
    add_llm_items(full, [0.0, 1.0, 2.0], [True] * 3)
    assert full.sample(32).from_validated.sum() == 3


def test_three_llm_items_are_in_every_batch_at_their_stated_probabilities():
    """Early in training: 3 LLM items, beta 0.25, B 128 -> every batch has 3 LLM rows (not 0)."""
    B, batches, w = 128, 300, 0.4
    buf = MixedReplayBuffer(D, 200, 50, alpha=0.6, beta=0.25, tau=1.0, seed=17)
    for ep in range(4):
        add_episode(buf, ep, 10)
    rl_handles = buf.rl_columns()["index"]
    prio = np.random.default_rng(3).uniform(0.2, 3.0, size=len(rl_handles))
    buf.update_priorities(rl_handles, prio)
    improvement = np.array([-0.5, 0.3, 1.0], np.float32)
    llm_handles = add_llm_items(buf, improvement, [True] * 3)
    rl_leaf = prio.astype(np.float32).astype(np.float64) ** 0.6
    llm_leaf = np.exp(improvement.astype(np.float64))
    # The stated split and probabilities: n_llm = min(round(0.25 * 128), 3) = 3, n_rl = 125.
    q = dict(zip(rl_handles.tolist(), 125 / B * rl_leaf / rl_leaf.sum()))
    q.update(zip(llm_handles, 3 / B * llm_leaf / llm_leaf.sum()))
    assert math.isclose(sum(q.values()), 1.0)
    counts: dict[int, int] = {}
    for _ in range(batches):
        b = buf.sample(B, is_exponent=w)
        assert b.from_validated.sum() == 3 and not b.from_validated[:125].any()
        raw = (len(buf) * np.array([q[h] for h in b.index.tolist()])) ** -w
        np.testing.assert_allclose(b.weight, raw / raw.max(), rtol=2e-6)  # exact for the q actually used
        for h in b.index.tolist():
            counts[h] = counts.get(h, 0) + 1
    handles = list(q)
    assert chi_square_p(counts, handles, [q[h] for h in handles]) > 1e-3
    assert chi_square_p({h: counts.get(h, 0) for h in llm_handles}, llm_handles, llm_leaf) > 1e-3  # Eq. 8
    # Power: the nominal share (32 of 128 rows for 3 items) is clearly rejected.
    nominal = dict(q)
    nominal.update(zip(llm_handles, 32 / B * llm_leaf / llm_leaf.sum()))
    assert chi_square_p(counts, handles, [nominal[h] for h in handles]) < 1e-6


def fill_mixed(buf, seed):
    rng = np.random.default_rng(seed)
    for ep in range(5):
        add_episode(buf, ep, int(rng.integers(3, 30)), done_at_end=bool(rng.random() < 0.5))
    add_llm_items(buf, rng.normal(size=12), rng.random(12) < 0.8)
    cols = buf.rl_columns()
    buf.update_priorities(cols["index"], rng.uniform(0.1, 3.0, size=len(cols["index"])))


def test_two_buffers_seeded_alike_return_identical_batches():
    a, b, c = (MixedReplayBuffer(D, 64, 16, seed=s) for s in (42, 42, 43))
    for buf in (a, b, c):
        fill_mixed(buf, 0)
    ba, bb, bc = a.sample(64), b.sample(64), c.sample(64)
    for x, y in zip(ba, bb):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(ba.index, bc.index)


def test_rng_state_round_trip_replays_the_same_batch():
    buf = MixedReplayBuffer(D, 64, 16, seed=7)
    fill_mixed(buf, 1)
    state = buf.get_rng_state()
    assert len(state) == 4 and all(isinstance(x, int) and 0 <= x < 2**64 for x in state)
    first = buf.sample(32)
    assert buf.get_rng_state() != state
    buf.set_rng_state(state)
    again = buf.sample(32)
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x, y)
    before = buf.get_rng_state()
    with pytest.raises(ValueError, match="all zero"):
        buf.set_rng_state((0, 0, 0, 0))
    with pytest.raises(ValueError, match=r"state\[2\]"):
        buf.set_rng_state((1, 2, 2**64, 3))
    with pytest.raises(ValueError, match=r"state\[0\]"):
        buf.set_rng_state((-1, 2, 3, 4))
    assert buf.get_rng_state() == before  # rejected states change nothing


def test_generator_matches_the_reference_xoshiro():
    buf = MixedReplayBuffer(D, 8, 8, seed=123456789)
    r = ref.Xoshiro(123456789)
    assert buf.get_rng_state() == tuple(r.s)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_parity_with_the_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    alpha = [0.0, 0.6, 1.0, 0.35][seed]
    kw = dict(alpha=alpha, beta=float(rng.uniform(0, 0.6)), tau=float(rng.uniform(0.3, 3.0)), seed=seed)
    cap, lcap = int(rng.integers(5, 60)), int(rng.integers(1, 20))
    buf = MixedReplayBuffer(4, cap, lcap, **kw)
    model = ref.ReferenceReplay(4, cap, lcap, **kw)
    episode, decision = 0, 0
    prev_next = rng.normal(size=4).astype(np.float32)
    for _ in range(150):
        kind = rng.random()
        if kind < 0.65:
            if rng.random() < 0.15:  # start another episode (sometimes reusing the same observation)
                episode, decision = episode + 1, 0
                if rng.random() < 0.5:
                    prev_next = rng.normal(size=4).astype(np.float32)
            obs = prev_next
            nxt = rng.normal(size=4).astype(np.float32)
            args = (obs, int(rng.integers(0, 9)), float(rng.normal()), nxt, bool(rng.random() < 0.1),
                    bool(rng.random() < 0.05), episode, decision)
            assert buf.add_rl(*args) == model.add_rl(*args)
            prev_next, decision = nxt, decision + 1
        elif kind < 0.8:
            obs, nxt = rng.normal(size=(2, 4)).astype(np.float32)
            args = (obs, 3, float(rng.normal()), nxt, False, False, 99, int(rng.integers(0, 50)),
                    float(rng.normal()), bool(rng.random() < 0.8))
            assert buf.add_validated(*args) == model.add_validated(*args)
        elif kind < 0.9 and len(buf) > 0:
            cols = buf.rl_columns()
            if len(cols["index"]):
                pick = rng.choice(cols["index"], size=min(5, len(cols["index"])))
                pr = rng.uniform(0.0, 5.0, size=len(pick))
                assert buf.update_priorities(pick, pr) == model.update_priorities(pick, pr)
        elif len(buf) > 0:
            got = buf.sample(int(rng.integers(1, 40)), is_exponent=0.5)
            want = model.sample(len(got.index), is_exponent=0.5)
            np.testing.assert_array_equal(got.index, want["index"])
            np.testing.assert_array_equal(got.from_validated, want["from_validated"])
            np.testing.assert_allclose(got.weight, want["weight"], rtol=1e-5)
            np.testing.assert_array_equal(got.obs, want["obs"])
            np.testing.assert_array_equal(got.next_obs, want["next_obs"])
            np.testing.assert_array_equal(got.action, want["action"])
            np.testing.assert_array_equal(got.reward, want["reward"])
        assert len(buf) == len(model)
        assert buf.max_priority == pytest.approx(model.max_priority(), rel=1e-6)
    assert buf.check_invariants() == ""


def test_kept_batches_are_never_overwritten_by_later_samples():
    """Output blocks are recycled only once every array of a batch is gone."""
    buf = MixedReplayBuffer(D, 64, 16, seed=5)
    fill_mixed(buf, 2)
    kept = [buf.sample(48) for _ in range(3)]
    copies = [[np.copy(col) for col in batch] for batch in kept]
    obs_only = buf.sample(48).obs  # the rest of this batch is freed at once
    obs_copy = obs_only.copy()
    for _ in range(30):
        buf.sample(48)
        buf.get(buf.rl_columns()["index"][:5])
    for batch, copy in zip(kept, copies):
        for col, ref_col in zip(batch, copy):
            np.testing.assert_array_equal(col, ref_col)
    np.testing.assert_array_equal(obs_only, obs_copy)
    assert all(col.flags.c_contiguous and col.flags.writeable for col in kept[0])
