"""Behaviour of masked sampling, argmax and top-k (ace_hybrid.sampling) against small numpy references."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ace_hybrid import _core
from ace_hybrid.sampling import (
    MaskedSample,
    SamplingGenerator,
    TopK,
    masked_argmax,
    masked_sample,
    masked_topk,
)

# --- numpy references -------------------------------------------------------------------------------------


def legal_log_softmax(logits: np.ndarray, mask: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """float64 log-softmax over legal entries; -inf at masked ones."""
    z = np.where(mask, logits.astype(np.float64) / temperature, -np.inf)
    zmax = z.max(axis=-1, keepdims=True)
    return z - zmax - np.log(np.exp(z - zmax).sum(axis=-1, keepdims=True))


def reference_topk(logits: np.ndarray, mask: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of one row over legal finite logits: larger value first, then lower index."""
    cand = np.flatnonzero(mask & (logits > -np.inf))
    order = np.lexsort((cand, -logits[cand].astype(np.float64)))[:k]
    return cand[order], logits[cand[order]]


def chi2_pvalue(stat: float, dof: int) -> float:
    """Upper tail of chi-square(dof) by the Wilson-Hilferty normal approximation (good to ~1e-3 here)."""
    z = ((stat / dof) ** (1.0 / 3.0) - (1.0 - 2.0 / (9.0 * dof))) / math.sqrt(2.0 / (9.0 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def chi2_against(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson chi-square of counts vs probabilities, pooling the least likely categories into bins of
    expected count >= min_expected. Returns (statistic, degrees of freedom)."""
    total = counts.sum()
    order = np.argsort(probs)
    obs_bins, exp_bins = [], []
    acc_o = acc_e = 0.0
    for i in order:
        acc_o += counts[i]
        acc_e += probs[i] * total
        if acc_e >= min_expected:
            obs_bins.append(acc_o)
            exp_bins.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:  # leftover mass joins the last bin
        obs_bins[-1] += acc_o
        exp_bins[-1] += acc_e
    o, e = np.array(obs_bins), np.array(exp_bins)
    return float(((o - e) ** 2 / e).sum()), len(o) - 1


def draw_many(
    logits_row: np.ndarray, mask_row: np.ndarray, draws: int, seed: int, temperature: float
) -> np.ndarray:
    """Counts of `draws` samples from one row, drawn in batches of identical rows."""
    n = logits_row.shape[0]
    gen = SamplingGenerator(seed)
    per_call = max(1, min(draws, 4_000_000 // n))
    counts = np.zeros(n, dtype=np.int64)
    done = 0
    while done < draws:
        b = min(per_call, draws - done)
        batch = np.ascontiguousarray(np.broadcast_to(logits_row, (b, n)))
        out = masked_sample(batch, mask_row, generator=gen, temperature=temperature)
        counts += np.bincount(out.actions, minlength=n)
        done += b
    return counts


def random_problem(rng: np.random.Generator, batch: int, n: int, p_legal: float = 0.5):
    logits = (rng.standard_normal((batch, n)) * 2.0).astype(np.float32)
    mask = rng.random((batch, n)) < p_legal
    mask[np.arange(batch), rng.integers(0, n, size=batch)] = True  # at least one legal action per row
    return logits, mask


# --- distribution -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "temperature"),
    [(1, 1.0), (2, 1.0), (7, 0.5), (511, 1.0), (512, 2.0), (513, 1.0), (1300, 0.7), (4099, 1.0)],
)
def test_sampling_matches_softmax_over_legal_logits(n: int, temperature: float) -> None:
    rng = np.random.default_rng(1000 + n)
    logits, mask = random_problem(rng, 1, n, p_legal=0.6)
    logits, mask = logits[0], mask[0]
    logits[rng.random(n) < 0.05] = -np.inf  # legal -inf: probability 0
    if not np.isfinite(logits[mask]).any():
        logits[np.flatnonzero(mask)[0]] = 0.0
    probs = np.exp(legal_log_softmax(logits, mask, temperature))
    draws = 60_000
    counts = draw_many(logits, mask, draws, seed=n, temperature=temperature)
    assert counts[probs == 0].sum() == 0  # masked and -inf actions are never drawn
    if (probs > 0).sum() == 1:
        assert counts[np.argmax(probs)] == draws
        return
    stat, dof = chi2_against(counts[probs > 0], probs[probs > 0])
    assert chi2_pvalue(stat, dof) > 1e-4, (stat, dof)


def test_chi_square_detects_a_wrong_distribution() -> None:
    # The statistical check above must be able to fail: compare samples against a tempered-off distribution.
    rng = np.random.default_rng(7)
    logits, mask = random_problem(rng, 1, 600)
    counts = draw_many(logits[0], mask[0], 60_000, seed=3, temperature=1.0)
    wrong = np.exp(legal_log_softmax(logits[0], mask[0], 1.1))
    stat, dof = chi2_against(counts[wrong > 0], wrong[wrong > 0])
    assert chi2_pvalue(stat, dof) < 1e-6


def test_log_probs_match_numpy_log_softmax() -> None:
    rng = np.random.default_rng(11)
    logits, mask = random_problem(rng, 64, 3000)
    logits[:, :40] = -np.inf
    gen = SamplingGenerator(5)
    for temperature in (0.05, 0.5, 1.0, 4.0):
        out = masked_sample(logits, mask, generator=gen, temperature=temperature)
        ref = legal_log_softmax(logits, mask, temperature)[np.arange(64), out.actions]
        np.testing.assert_allclose(out.log_probs, ref, rtol=0, atol=2e-6)
        assert out.log_probs.dtype == np.float64 and out.actions.dtype == np.int64


def test_extreme_temperatures_give_argmax_and_uniform() -> None:
    rng = np.random.default_rng(12)
    logits, mask = random_problem(rng, 200, 700)
    gen = SamplingGenerator(1)
    cold = masked_sample(logits, mask, generator=gen, temperature=1e-6)
    np.testing.assert_array_equal(cold.actions, masked_argmax(logits, mask))
    hot = masked_sample(logits, mask, generator=gen, temperature=1e30)
    np.testing.assert_allclose(hot.log_probs, -np.log(mask.sum(axis=1)), rtol=1e-6)


# --- masking ----------------------------------------------------------------------------------------------


@st.composite
def masked_problems(draw):
    n = draw(st.integers(1, 1100))
    batch = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((batch, n)) * draw(st.sampled_from([0.1, 3.0, 50.0]))).astype(np.float32)
    kind = draw(st.sampled_from(["single", "sparse", "dense", "shared"]))
    if kind == "single":
        mask = np.zeros((batch, n), dtype=bool)
        mask[np.arange(batch), rng.integers(0, n, size=batch)] = True
    else:
        p = {"sparse": 0.01, "dense": 0.9, "shared": 0.3}[kind]
        mask = rng.random((batch, n)) < p
        mask[np.arange(batch), rng.integers(0, n, size=batch)] = True
    if kind == "shared":
        mask = mask[0]
    # masked positions hold tempting values: huge, +inf, NaN (never read for their value)
    full = np.broadcast_to(mask, (batch, n))
    bait = rng.choice(np.array([1e30, np.inf, np.nan], dtype=np.float32), size=(batch, n))
    logits = np.where(full, logits, bait).astype(np.float32)
    return logits, mask, seed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(masked_problems())
def test_masked_action_is_never_sampled_argmaxed_or_topked(problem) -> None:
    logits, mask, seed = problem
    batch, n = logits.shape
    full = np.broadcast_to(mask, (batch, n))
    rows = np.arange(batch)
    out = masked_sample(logits, mask, generator=SamplingGenerator(seed), temperature=1.0)
    assert full[rows, out.actions].all()
    assert not out.empty.any()
    am = masked_argmax(logits, mask)
    assert full[rows, am].all()
    k = int(full.sum(axis=1).min())
    top = masked_topk(logits, min(k, 5), mask)
    assert full[rows[:, None], top.indices].all()


def test_uint8_mask_treats_any_nonzero_as_legal() -> None:
    logits = np.array([[5.0, 1.0, 2.0, 9.0]], dtype=np.float32)
    mask = np.array([0, 7, 255, 0], dtype=np.uint8)
    assert masked_argmax(logits, mask)[0] == 2
    np.testing.assert_array_equal(masked_topk(logits, 2, mask).indices, [[2, 1]])


# --- argmax / top-k parity --------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 2000), st.integers(1, 6))
def test_argmax_and_topk_match_numpy_with_ties(seed: int, n: int, batch: int) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.integers(-3, 4, size=(batch, n)).astype(np.float32)  # many ties
    logits[rng.random((batch, n)) < 0.05] = -np.inf
    mask = rng.random((batch, n)) < 0.5
    mask[:, rng.integers(0, n)] = True
    logits[mask & (logits == -np.inf)] = -np.inf
    finite_legal = (mask & np.isfinite(logits)).sum(axis=1)
    ok = finite_legal > 0
    logits[~ok, 0] = 1.0
    mask[~ok, 0] = True
    ref_arg = np.where(mask, logits, -np.inf).argmax(axis=1)
    np.testing.assert_array_equal(masked_argmax(logits, mask), ref_arg)
    k = int(min(8, (mask & np.isfinite(logits)).sum(axis=1).min()))
    top = masked_topk(logits, k, mask)
    for r in range(batch):
        ref_i, ref_v = reference_topk(logits[r], mask[r], k)
        np.testing.assert_array_equal(top.indices[r], ref_i)
        np.testing.assert_array_equal(top.values[r], ref_v)


def test_ties_go_to_the_lowest_index() -> None:
    logits = np.zeros((2, 1000), dtype=np.float32)
    logits[0, [3, 400, 999]] = 2.0
    logits[1, 500:] = -0.0  # -0.0 ties with +0.0
    mask = np.ones(1000, dtype=bool)
    mask[3] = False
    np.testing.assert_array_equal(masked_argmax(logits, mask), [400, 0])
    top = masked_topk(logits, 4, mask)
    np.testing.assert_array_equal(top.indices, [[400, 999, 0, 1], [0, 1, 2, 4]])


def test_topk_with_k_equal_n_sorts_every_legal_action() -> None:
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 300)).astype(np.float32)
    top = masked_topk(logits, 300)
    for r in range(3):
        np.testing.assert_array_equal(top.indices[r], np.lexsort((np.arange(300), -logits[r])))


# --- empty rows, non-finite logits ------------------------------------------------------------------------


def test_empty_row_is_an_error_naming_the_row() -> None:
    logits = np.zeros((4, 50), dtype=np.float32)
    mask = np.ones((4, 50), dtype=bool)
    mask[2] = False
    gen = SamplingGenerator(0)
    with pytest.raises(ValueError, match=r"row 2 has no legal action"):
        masked_sample(logits, mask, generator=gen)
    with pytest.raises(ValueError, match=r"row 2 has no legal action"):
        masked_argmax(logits, mask)
    with pytest.raises(ValueError, match=r"row 2 has 0 legal action"):
        masked_topk(logits, 1, mask)


def test_row_whose_legal_logits_are_all_minus_inf_is_empty() -> None:
    logits = np.zeros((3, 600), dtype=np.float32)
    logits[1, :] = -np.inf
    logits[1, 10] = 5.0  # masked below
    mask = np.ones(600, dtype=bool)
    mask[10] = False
    with pytest.raises(ValueError, match=r"row 1 "):
        masked_argmax(logits, mask)
    out = masked_sample(logits, mask, generator=SamplingGenerator(1), on_empty="index", fallback_index=0)
    np.testing.assert_array_equal(out.empty, [False, True, False])
    assert out.actions[1] == 0 and out.log_probs[1] == 0.0
    np.testing.assert_allclose(out.log_probs[[0, 2]], -np.log(599.0), rtol=1e-6)


def test_fallback_index_fills_empty_rows_and_short_topk_rows() -> None:
    logits = np.zeros((2, 8), dtype=np.float32)
    mask = np.zeros((2, 8), dtype=bool)
    mask[0, [1, 6]] = True
    np.testing.assert_array_equal(masked_argmax(logits, mask, on_empty="index", fallback_index=3), [1, 3])
    top = masked_topk(logits, 3, mask, on_empty="index", fallback_index=0)
    np.testing.assert_array_equal(top.indices, [[1, 6, 0], [0, 0, 0]])
    assert np.isneginf(top.values[0, 2]) and np.isneginf(top.values[1]).all()
    msg = r"row 0 has 2 legal action\(s\) with a finite logit, fewer than k = 3"
    with pytest.raises(ValueError, match=msg):
        masked_topk(logits, 3, mask)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_plus_inf_at_a_legal_position_is_an_error_naming_row_and_column(bad: float) -> None:
    logits = np.zeros((3, 700), dtype=np.float32)
    mask = np.ones(700, dtype=bool)
    mask[5] = False
    logits[0, 5] = bad  # masked: fine
    masked_argmax(logits, mask)
    logits[2, 650] = bad
    with pytest.raises(ValueError, match=r"logits\[2, 650\] = (nan|inf) at a legal action"):
        masked_sample(logits, mask, generator=SamplingGenerator(0))
    with pytest.raises(ValueError, match=r"logits\[2, 650\]"):
        masked_argmax(logits, mask)
    with pytest.raises(ValueError, match=r"logits\[2, 650\]"):
        masked_topk(logits, 2, mask)


def test_minus_inf_logits_are_never_drawn() -> None:
    logits = np.full((500, 40), -np.inf, dtype=np.float32)
    logits[:, [4, 33]] = [0.0, 1.0]
    out = masked_sample(logits, None, generator=SamplingGenerator(2))
    assert set(np.unique(out.actions)) <= {4, 33}


# --- determinism, generator -------------------------------------------------------------------------------


def test_same_seed_or_state_gives_the_same_samples() -> None:
    rng = np.random.default_rng(3)
    logits, mask = random_problem(rng, 100, 2000)
    a = masked_sample(logits, mask, generator=SamplingGenerator(99))
    b = masked_sample(logits, mask, generator=SamplingGenerator(99))
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.log_probs, b.log_probs)
    c = masked_sample(logits, mask, generator=SamplingGenerator(100))
    assert (a.actions != c.actions).any()

    gen = SamplingGenerator(5)
    state = gen.get_state()
    first = masked_sample(logits, mask, generator=gen).actions
    second = masked_sample(logits, mask, generator=gen).actions
    gen.set_state(state)
    np.testing.assert_array_equal(masked_sample(logits, mask, generator=gen).actions, first)
    clone = pickle.loads(pickle.dumps(gen))
    np.testing.assert_array_equal(masked_sample(logits, mask, generator=clone).actions, second)


def test_each_row_consumes_exactly_one_uniform_and_thread_count_does_not_matter() -> None:
    rng = np.random.default_rng(8)
    logits, mask = random_problem(rng, 33, 5000)
    results = [
        masked_sample(logits, mask, generator=SamplingGenerator(4), num_threads=t) for t in (1, 2, 3, 0)
    ]
    for r in results[1:]:
        np.testing.assert_array_equal(r.actions, results[0].actions)
        np.testing.assert_array_equal(r.log_probs, results[0].log_probs)
    g1, g2 = SamplingGenerator(4), SamplingGenerator(4)
    masked_sample(logits, mask, generator=g1)
    g2.uniform(33)
    assert g1.get_state() == g2.get_state()


def test_a_failed_call_leaves_the_generator_unchanged() -> None:
    logits = np.zeros((3, 10), dtype=np.float32)
    logits[1, 4] = np.nan
    gen = SamplingGenerator(6)
    state = gen.get_state()
    with pytest.raises(ValueError):
        masked_sample(logits, None, generator=gen)
    assert gen.get_state() == state


def test_generator_uniforms_are_in_unit_interval_and_state_round_trips() -> None:
    gen = SamplingGenerator(2**64 - 1)
    u = gen.uniform(100_000)
    assert u.dtype == np.float64 and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005
    state = gen.get_state()
    assert len(state) == 4 and all(0 <= s < 2**64 for s in state)
    other = SamplingGenerator(0)
    other.set_state(state)
    np.testing.assert_array_equal(other.uniform(10), gen.uniform(10))
    assert repr(gen).startswith("SamplingGenerator(state=(")


# --- inputs: layouts, one row, torch ----------------------------------------------------------------------


def test_strided_and_byte_swapped_inputs_give_the_same_results() -> None:
    rng = np.random.default_rng(9)
    big = rng.standard_normal((10, 1200)).astype(np.float32)
    mask_big = rng.random((10, 1200)) < 0.5
    mask_big[:, ::2] = True
    view, mask_view = big[::2, ::2], mask_big[::2, ::2]
    assert not view.flags.c_contiguous
    dense, mask_dense = np.ascontiguousarray(view), np.ascontiguousarray(mask_view)
    np.testing.assert_array_equal(masked_argmax(view, mask_view), masked_argmax(dense, mask_dense))
    a = masked_sample(view, mask_view, generator=SamplingGenerator(1))
    b = masked_sample(dense.astype(">f4"), mask_dense, generator=SamplingGenerator(1))
    np.testing.assert_array_equal(a.actions, b.actions)


def test_one_dimensional_logits_return_scalars() -> None:
    logits = np.array([0.0, 3.0, 1.0], dtype=np.float32)
    mask = np.array([True, False, True])
    assert masked_argmax(logits, mask) == 2
    out = masked_sample(logits, mask, generator=SamplingGenerator(0))
    assert isinstance(out, MaskedSample) and np.ndim(out.actions) == 0 and out.actions in (0, 2)
    top = masked_topk(logits, 2, mask)
    assert isinstance(top, TopK)
    np.testing.assert_array_equal(top.indices, [2, 0])


def test_empty_batch_returns_empty_results() -> None:
    logits = np.zeros((0, 9), dtype=np.float32)
    out = masked_sample(logits, None, generator=SamplingGenerator(0))
    assert out.actions.shape == (0,) and out.log_probs.shape == (0,)
    assert masked_argmax(logits).shape == (0,)
    assert masked_topk(logits, 3).indices.shape == (0, 3)


def test_torch_tensors_are_accepted_and_agree_with_numpy() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    logits, mask = random_problem(rng, 8, 900)
    t_logits = torch.from_numpy(logits).requires_grad_(True)
    t_mask = torch.from_numpy(mask)
    np.testing.assert_array_equal(masked_argmax(t_logits, t_mask), masked_argmax(logits, mask))
    a = masked_sample(t_logits, t_mask, generator=SamplingGenerator(3))
    b = masked_sample(logits, mask, generator=SamplingGenerator(3))
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(
        masked_topk(t_logits, 3, t_mask).indices, masked_topk(logits, 3, mask).indices
    )


def test_core_functions_are_documented() -> None:
    for fn in (_core.sample_masked_logits, _core.argmax_masked_logits, _core.topk_masked_logits):
        assert "logits" in fn.__doc__ and "Returns" in fn.__doc__
    assert "xoshiro256**" in SamplingGenerator.__doc__
