"""Bad arguments at every method: the right exception, a message naming the problem, and no damage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ace_hybrid import MixedReplayBuffer

D = 3
N = 4
f32 = np.float32
nan, inf = float("nan"), float("inf")


def good_args(method: str) -> dict:
    obs = np.arange(D, dtype=f32)
    rows = np.arange(N * D, dtype=f32).reshape(N, D)
    one = dict(obs=obs, action=1, reward=0.5, next_obs=obs + 1, done=False, truncated=False, episode=0,
               decision=0)
    batch = dict(obs=rows, action=np.arange(N), reward=np.zeros(N, f32), next_obs=rows + 1,
                 done=np.zeros(N, bool), truncated=np.zeros(N, bool), episode=np.zeros(N, np.int64),
                 decision=np.arange(N))
    return {
        "add_rl": one,
        "add_validated": dict(one, improvement=0.3, valid=True),
        "add_rl_batch": batch,
        "add_validated_batch": dict(batch, improvement=np.zeros(N, f32), valid=np.ones(N, bool)),
        "sample": dict(batch_size=8, is_exponent=0.4),
        "update_priorities": dict(index=np.array([0, 2]), priority=np.array([1.0, 2.0])),
        "update_rewards": dict(index=np.array([0, 1]), reward=np.array([1.0, 2.0])),
        "get": dict(index=np.array([0, 2])),
        "set_rng_state": dict(state=(1, 2, 3, 4)),
        "__init__": dict(obs_dim=D, rl_capacity=10, validated_capacity=5, alpha=0.6, beta=0.25, tau=1.0, seed=0),
    }[method]


# (bad value, expected exception) per argument kind. None in a float array argument becomes a 0-d NaN array
# (numpy conversion), hence ValueError there.
SCALAR_INT = [(-1, ValueError), (1.5, TypeError), (2**70, TypeError), ("1", TypeError), (None, TypeError)]
DECISION_INT = [(-1, ValueError), (2**31, ValueError), (1.5, TypeError), (2**70, TypeError)]
SCALAR_FLOAT = [
    (nan, ValueError), (inf, ValueError), (-inf, ValueError), (1e39, ValueError), ("x", TypeError),
    (None, TypeError),
]
SCALAR_BOOL = [("x", TypeError), (None, TypeError), (1, TypeError), (np.array([True]), TypeError)]
OBS_1D = [
    (np.zeros(D + 1, f32), ValueError), (np.zeros((1, D), f32), ValueError), (np.zeros(0, f32), ValueError),
    (np.array([0, nan, 0], f32), ValueError), (np.array([inf, 0, 0], f32), ValueError),
    (np.array(["a", "b", "c"]), TypeError), (None, ValueError), (np.float32(1.0), ValueError),
]
ROWS = [
    (np.zeros((N, D + 1), f32), ValueError), (np.zeros(N * D, f32), ValueError),
    (np.zeros((N, D, 1), f32), ValueError), (np.zeros((N + 1, D), f32), ValueError),
    (np.full((N, D), nan, f32), ValueError), (np.array([["a"] * D] * N), TypeError), (None, ValueError),
]
INT_COL = [
    (np.zeros(N, f32), ValueError), (np.zeros(N + 1, np.int64), ValueError),
    (np.zeros((N, 1), np.int64), ValueError), (np.full(N, -1), ValueError), ([0] * N, TypeError),
    (np.array(["a"] * N), ValueError),
]
EP_COL = INT_COL + [(np.full(N, 2**31), ValueError), (np.full(N, 2**64 - 1, np.uint64), ValueError)]
FLOAT_COL = [
    (np.full(N, nan), ValueError), (np.full(N, inf), ValueError), (np.full(N, 1e39), ValueError),
    (np.zeros(N + 1, f32), ValueError), (np.zeros((N, 2), f32), ValueError), (None, ValueError),
]
BOOL_COL = [
    (np.zeros(N, f32), ValueError), (np.full(N, 2), ValueError), (np.zeros(N + 1, bool), ValueError),
    (np.array(["a"] * N), ValueError),
]
HANDLES = [
    (np.array([-2, 0]), IndexError), (np.array([10**6, 0]), IndexError), (np.array([0.0, 2.0]), ValueError),
    (np.array([[0, 2]]), ValueError), (np.array([0, 2, 4]), ValueError), (None, TypeError),
]
PRIORITIES = [
    (np.array([nan, 1.0]), ValueError), (np.array([1.0, -1.0]), ValueError),
    (np.array([inf, 1.0]), ValueError), (np.array([1e39, 1.0]), ValueError), (np.array([1.0]), ValueError),
]
REWARDS = [
    (np.array([nan, 1.0]), ValueError), (np.array([1.0, inf]), ValueError),
    (np.array([[1.0, 2.0]]), ValueError),
]
RNG_STATES = [
    ((0, 0, 0, 0), ValueError), ((1, 2, 3), ValueError), ((1, 2, 3, -4), ValueError),
    ((1, 2, 3, 2**64), ValueError), ((1, 2, 3, "4"), TypeError), ([1, 2, 3, 4], TypeError),
]
# Index 3 is the LLM position 1 (never written); 6 is RL position 3, a pending next observation.
GET_HANDLES = HANDLES[:4] + [(np.array([3]), IndexError), (np.array([6]), IndexError), (None, TypeError)]

BAD: dict[str, dict[str, list]] = {
    "add_rl": dict(obs=OBS_1D, next_obs=OBS_1D, action=SCALAR_INT, reward=SCALAR_FLOAT, episode=DECISION_INT,
                   decision=DECISION_INT, done=SCALAR_BOOL[:3]),
    "add_validated": dict(obs=OBS_1D, improvement=SCALAR_FLOAT, valid=SCALAR_BOOL, action=SCALAR_INT),
    "add_rl_batch": dict(obs=ROWS, next_obs=ROWS, action=INT_COL, reward=FLOAT_COL, episode=EP_COL,
                         decision=EP_COL, done=BOOL_COL, truncated=BOOL_COL),
    "add_validated_batch": dict(obs=ROWS, improvement=FLOAT_COL, valid=BOOL_COL, action=INT_COL),
    "sample": dict(batch_size=[(0, ValueError), (-5, ValueError), (2**21, ValueError), (2**70, TypeError),
                               (1.0, TypeError)],
                   is_exponent=[(nan, ValueError), (-0.1, ValueError), (1.5, ValueError), ("a", TypeError)]),
    "update_priorities": dict(index=HANDLES, priority=PRIORITIES),
    "update_rewards": dict(index=HANDLES, reward=REWARDS),
    "get": dict(index=GET_HANDLES),
    "set_rng_state": dict(state=RNG_STATES),
    "__init__": dict(obs_dim=[(0, ValueError), (-1, ValueError), (2**25, ValueError), (2**70, TypeError)],
                     rl_capacity=[(2, ValueError), (10**15, ValueError), (2**41, ValueError),
                                  ("9", TypeError)],
                     validated_capacity=[(0, ValueError), (2**50, ValueError)],
                     alpha=[(nan, ValueError), (-0.5, ValueError), (1.5, ValueError)],
                     beta=[(nan, ValueError), (1.01, ValueError)],
                     tau=[(0.0, ValueError), (inf, ValueError), (-1.0, ValueError)],
                     seed=[(-1, ValueError), (2**64, ValueError), ("s", TypeError), (1.5, TypeError)]),
}
CASES = [(m, arg, i) for m, args in BAD.items() for arg, vals in args.items() for i in range(len(vals))]


def make_buffer() -> MixedReplayBuffer:
    buf = MixedReplayBuffer(D, 10, 5, seed=3)
    for t in range(3):  # handles 0, 2, 4 are live RL transitions
        o = np.full(D, t, f32)
        buf.add_rl(o, t, 1.0, o + 1, False, False, 0, t)
    buf.add_validated(np.zeros(D, f32), 0, 0.0, np.ones(D, f32), False, False, 0, 0, 0.5, True)
    return buf


def fingerprint(buf: MixedReplayBuffer):
    snap = buf._tree_snapshot()
    return (len(buf), buf.rl_size, buf.validated_size, buf.get_rng_state(), buf.max_priority,
            snap["rl_leaves"].tobytes(), snap["validated_leaves"].tobytes(), buf.rl_columns()["reward"].tobytes())


def call(buf: MixedReplayBuffer, method: str, kwargs: dict):
    if method == "__init__":
        return MixedReplayBuffer(kwargs.pop("obs_dim"), kwargs.pop("rl_capacity"), kwargs.pop("validated_capacity"),
                                 **kwargs)
    return getattr(buf, method)(**kwargs)


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(CASES))
def test_bad_arguments_raise_the_right_error_and_change_nothing(case):
    method, arg, i = case
    value, exc = BAD[method][arg][i]
    buf = make_buffer()
    before = fingerprint(buf)
    kwargs = good_args(method)
    kwargs[arg] = value
    with pytest.raises(exc):
        call(buf, method, kwargs)
    assert fingerprint(buf) == before
    assert buf.check_invariants() == ""
    assert len(buf.sample(4).index) == 4  # still usable


@pytest.mark.parametrize("method", [m for m in BAD if m != "__init__"])
def test_good_arguments_are_accepted(method):
    call(make_buffer(), method, good_args(method))


def test_error_messages_name_the_argument_index_and_value():
    buf = make_buffer()
    with pytest.raises(ValueError, match=r"priority\[1\] = nan"):
        buf.update_priorities(np.array([0, 2]), np.array([1.0, nan]))
    with pytest.raises(ValueError, match=r"priority\[0\] = -3"):
        buf.update_priorities(np.array([0, 2]), np.array([-3.0, 1.0]))
    pattern = r"index\[1\] = 999998.*position 499999 is out of range \[0, 4\) for the RL partition"
    with pytest.raises(IndexError, match=pattern):
        buf.update_priorities(np.array([0, 999998]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match=r"next_obs\[2, 1\] = inf"):
        rows = np.zeros((N, D), f32)
        bad = rows.copy()
        bad[2, 1] = inf
        buf.add_rl_batch(rows, np.zeros(N, np.int64), np.zeros(N, f32), bad, np.zeros(N, bool),
                         np.zeros(N, bool), np.zeros(N, np.int64), np.arange(N))
    with pytest.raises(ValueError, match=r"obs has shape \(4,\): axis 0 must be 3"):
        buf.add_rl(np.zeros(4, f32), 0, 0.0, np.zeros(D, f32), False, False, 0, 0)
    with pytest.raises(ValueError, match=r"rl_capacity = 2 out of range \[3,"):
        MixedReplayBuffer(D, 2, 1)
    with pytest.raises(IndexError, match="stale"):
        for t in range(20):
            buf.add_rl(np.full(D, 9, f32), 0, 0.0, np.full(D, 10 + t, f32), True, False, 1, 0)
        buf.get(np.array([0]))


def test_a_batch_with_one_bad_row_stores_nothing():
    buf = make_buffer()
    before = fingerprint(buf)
    rows = np.zeros((N, D), f32)
    with pytest.raises(ValueError, match=r"decision\[3\] = -1"):
        buf.add_rl_batch(rows, np.zeros(N, np.int64), np.zeros(N, f32), rows, np.zeros(N, bool),
                         np.zeros(N, bool), np.zeros(N, np.int64), np.array([0, 1, 2, -1]))
    with pytest.raises(IndexError):
        buf.update_priorities(np.array([0, 2, 4, 1 << 40]), np.ones(4))
    assert fingerprint(buf) == before


def test_non_contiguous_and_other_dtype_arrays_are_copied_correctly():
    buf = MixedReplayBuffer(D, 20, 5)
    big = np.arange(4 * N * D, dtype=np.float64).reshape(N * 2, D * 2)
    obs, nxt = big[::2, ::2], big[1::2, ::2] + 0.5  # strided float64 views
    assert not obs.flags.c_contiguous
    idx = np.arange(2 * N, dtype=np.int32)[::2]  # strided int32
    h = buf.add_rl_batch(obs, idx, np.ones(N), nxt, np.zeros(N, bool), np.zeros(N, bool), np.arange(N) * 0,
                         np.arange(N, dtype=np.uint8))
    got = buf.get(h)
    np.testing.assert_array_equal(got.obs, obs.astype(f32))
    np.testing.assert_array_equal(got.next_obs, nxt.astype(f32))
    np.testing.assert_array_equal(got.action, idx)
    np.testing.assert_array_equal(buf.get(h[::-1][::2]).action, idx[::-1][::2])


def test_huge_requests_are_refused_before_allocating():
    with pytest.raises(ValueError, match="exceeds the limit"):
        MixedReplayBuffer(2**20, 2**20, 1)
    buf = MixedReplayBuffer(2**16, 3, 1)
    buf.add_rl(np.zeros(2**16, f32), 0, 0.0, np.ones(2**16, f32), False, False, 0, 0)
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(2**16)  # 2^32 floats per observation array
