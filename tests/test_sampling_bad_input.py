"""Bad arguments to every sampling binding raise the right exception and a useful message; no crash."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ace_hybrid import _core
from ace_hybrid.sampling import SamplingGenerator, masked_argmax, masked_sample, masked_topk

N = 37
BATCH = 3


def good_logits() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((BATCH, N)).astype(np.float32)


def call(binding: str, logits, mask=None, **kw):
    """Calls one _core binding with defaults for the arguments not given."""
    if binding == "sample":
        return _core.sample_masked_logits(
            logits, mask, kw.pop("generator", SamplingGenerator(0)), kw.pop("temperature", 1.0),
            kw.pop("on_empty", "error"), kw.pop("fallback_index", 0), kw.pop("num_threads", 0))
    if binding == "argmax":
        return _core.argmax_masked_logits(
            logits, mask, kw.pop("on_empty", "error"), kw.pop("fallback_index", 0), kw.pop("num_threads", 0))
    return _core.topk_masked_logits(
        logits, mask, kw.pop("k", 2), kw.pop("on_empty", "error"), kw.pop("fallback_index", 0),
        kw.pop("num_threads", 0))


BINDINGS = ["sample", "argmax", "topk"]

# Each case: (description, kwargs builder, expected exception, message fragment).
BAD_LOGITS = [
    ("float64 logits", lambda: good_logits().astype(np.float64), ValueError, "dtype float32, got float64"),
    ("float16 logits", lambda: good_logits().astype(np.float16), ValueError, "dtype float32, got float16"),
    ("int32 logits", lambda: np.zeros((BATCH, N), dtype=np.int32), ValueError, "dtype float32, got int32"),
    ("bool logits", lambda: np.zeros((BATCH, N), dtype=bool), ValueError, "dtype float32, got bool"),
    ("complex logits", lambda: np.zeros((BATCH, N), dtype=np.complex64), ValueError, "dtype float32"),
    ("object logits", lambda: np.array([[1.0, "a"]], dtype=object), ValueError, "dtype float32, got object"),
    ("0-d logits", lambda: np.ones((), np.float32), ValueError, "2 dimension(s), got 0"),
    ("1-d logits", lambda: np.zeros(N, dtype=np.float32), ValueError, "2 dimension(s), got 1"),
    ("3-d logits", lambda: np.zeros((2, 2, N), dtype=np.float32), ValueError, "2 dimension(s), got 3"),
    ("no actions", lambda: np.zeros((BATCH, 0), dtype=np.float32), ValueError, "number of actions"),
    ("list logits", lambda: [[1.0, 2.0]], TypeError,
     "logits must be a numpy array of dtype float32, got list"),
    ("scalar logits", lambda: np.float32(1.0), TypeError, "got float32"),
    ("None logits", lambda: None, TypeError, "got NoneType"),
]

BAD_MASKS = [
    ("int32 mask", np.ones(N, dtype=np.int32), ValueError, "dtype bool or uint8, got int32"),
    ("float mask", np.ones(N, dtype=np.float32), ValueError, "dtype bool or uint8, got float32"),
    ("int8 mask", np.ones(N, dtype=np.int8), ValueError, "dtype bool or uint8, got int8"),
    ("short mask", np.ones(N - 1, dtype=bool), ValueError, f"axis 0 must be {N}"),
    ("long mask", np.ones(N + 1, dtype=bool), ValueError, f"axis 0 must be {N}"),
    ("wrong batch", np.ones((BATCH + 1, N), dtype=bool), ValueError, f"axis 0 must be {BATCH}"),
    ("wrong width", np.ones((BATCH, N + 2), dtype=bool), ValueError, f"axis 1 must be {N}"),
    ("3-d mask", np.ones((1, BATCH, N), dtype=bool), ValueError, f"shape ({N},) or ({BATCH}, {N})"),
    ("0-d mask", np.ones((), dtype=bool), ValueError, "got ()"),
    ("list mask", [True] * N, TypeError,
     "mask must be a numpy array of dtype bool or uint8, or None, got list"),
]

BAD_OPTIONS = [
    ("on_empty typo", {"on_empty": "raise"}, ValueError,
     'on_empty = "raise" is not one of {"error", "index"}'),
    ("negative fallback", {"on_empty": "index", "fallback_index": -1}, IndexError, f"[0, {N})"),
    ("fallback == n", {"on_empty": "index", "fallback_index": N}, IndexError,
     f"fallback_index {N} out of range"),
    ("negative threads", {"num_threads": -1}, ValueError, "num_threads = -1 out of range [0, 256]"),
    ("too many threads", {"num_threads": 257}, ValueError, "num_threads = 257 out of range"),
    ("threads not int", {"num_threads": 1.5}, TypeError, ""),
    ("fallback not int", {"on_empty": "index", "fallback_index": "0"}, TypeError, ""),
]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(BINDINGS), st.sampled_from(BAD_LOGITS))
def test_bad_logits_are_rejected_by_every_binding(binding, case) -> None:
    _, make, exc, fragment = case
    with pytest.raises(exc) as info:
        call(binding, make())
    assert fragment in str(info.value)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(BINDINGS), st.sampled_from(BAD_MASKS))
def test_bad_masks_are_rejected_by_every_binding(binding, case) -> None:
    _, mask, exc, fragment = case
    with pytest.raises(exc) as info:
        call(binding, good_logits(), mask)
    assert fragment in str(info.value)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(BINDINGS), st.sampled_from(BAD_OPTIONS))
def test_bad_options_are_rejected_by_every_binding(binding, case) -> None:
    _, kwargs, exc, fragment = case
    with pytest.raises(exc) as info:
        call(binding, good_logits(), None, **dict(kwargs))
    assert fragment in str(info.value)


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.integers(-(2**70), 0), st.integers(N + 1, 2**70)))
def test_k_out_of_range_is_a_value_error_naming_k_and_the_range(k: int) -> None:
    if not -(2**63) <= k < 2**63:
        with pytest.raises(TypeError):  # does not fit the C++ int64 parameter
            call("topk", good_logits(), k=k)
        return
    with pytest.raises(ValueError, match=rf"k = {k} out of range \[1, {N}\]"):
        call("topk", good_logits(), k=k)


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.floats(max_value=9.9e-31), st.floats(min_value=1.01e30), st.just(float("nan"))))
def test_temperature_out_of_range_is_a_value_error(temperature: float) -> None:
    with pytest.raises(ValueError, match=r"temperature = .* out of range \[1e-30, 1e\+30\]"):
        call("sample", good_logits(), temperature=temperature)


@pytest.mark.parametrize("generator", [None, 0, np.random.default_rng(0), "seed"])
def test_generator_must_be_a_sampling_generator(generator) -> None:
    with pytest.raises(TypeError):
        call("sample", good_logits(), generator=generator)


@pytest.mark.parametrize(
    ("seed", "exc", "fragment"),
    [(-1, ValueError, "seed = -1 out of range [0, 18446744073709551615]"),
     (2**64, ValueError, "seed = 18446744073709551616 out of range"),
     (1.5, TypeError, "seed must be an integer, got float"),
     ("3", TypeError, "seed must be an integer, got str"),
     (None, TypeError, "seed must be an integer, got NoneType")],
)
def test_bad_seed_is_rejected(seed, exc, fragment) -> None:
    with pytest.raises(exc) as info:
        SamplingGenerator(seed)
    assert fragment in str(info.value)


def test_numpy_integer_seed_is_accepted() -> None:
    assert SamplingGenerator(np.uint64(2**64 - 1)).get_state() == SamplingGenerator(2**64 - 1).get_state()


@pytest.mark.parametrize(
    ("state", "exc", "fragment"),
    [((1, 2, 3), ValueError, "state must have 4 integers, got 3"),
     ((0, 0, 0, 0), ValueError, "must not be all zero"),
     ((1, 2, 3, -4), ValueError, "state element = -4 out of range"),
     ((1, 2, 3, 2**64), ValueError, "out of range [0, 18446744073709551615]"),
     ((1, 2, 3, 4.0), TypeError, "state element must be an integer"),
     ("abcd", TypeError, "sequence of 4 integers"),
     (5, TypeError, "sequence of 4 integers")],
)
def test_bad_state_is_rejected_and_leaves_the_generator_unchanged(state, exc, fragment) -> None:
    gen = SamplingGenerator(1)
    before = gen.get_state()
    with pytest.raises(exc) as info:
        gen.set_state(state)
    assert fragment in str(info.value)
    assert gen.get_state() == before


@pytest.mark.parametrize("size", [-1, 2**41])
def test_uniform_size_out_of_range_is_rejected(size: int) -> None:
    with pytest.raises(ValueError, match="size = .* out of range"):
        SamplingGenerator(0).uniform(size)


@settings(max_examples=50, deadline=None)
@given(
    binding=st.sampled_from(BINDINGS),
    logits_case=st.sampled_from(BAD_LOGITS + [("good", good_logits, None, "")]),
    mask_case=st.sampled_from(BAD_MASKS + [("none", None, None, ""), ("good", np.ones(N, bool), None, "")]),
    options=st.sampled_from(BAD_OPTIONS + [("none", {}, None, "")]),
)
def test_random_combinations_of_bad_arguments_raise_and_the_process_survives(
    binding, logits_case, mask_case, options
) -> None:
    logits, mask, kwargs = logits_case[1](), mask_case[1], dict(options[1])
    expected = tuple(e for e in (logits_case[2], mask_case[2], options[2]) if e is not None)
    if not expected:
        call(binding, logits, mask, **kwargs)  # all good: must work
        return
    with pytest.raises(expected):
        call(binding, logits, mask, **kwargs)
    # the module still works afterwards
    assert call("argmax", good_logits()).shape == (BATCH,)


def test_facade_rejects_bad_inputs_with_the_same_errors() -> None:
    gen = SamplingGenerator(0)
    with pytest.raises(ValueError, match="dtype float32, got float64"):
        masked_sample(np.zeros((2, 4)), generator=gen)
    with pytest.raises(ValueError, match=r"must have shape \(4,\)"):
        masked_argmax(np.zeros(4, np.float32), np.ones((1, 4), bool))
    with pytest.raises(TypeError, match="logits must be an array, got None"):
        masked_topk(None, 1)
    with pytest.raises(ValueError, match="dtype float32, got float64"):
        masked_argmax([[1.0, 2.0]])  # a list becomes float64: rejected, not silently converted


def test_non_contiguous_inputs_are_copied_not_misread() -> None:
    logits = np.random.default_rng(1).standard_normal((BATCH, 2 * N)).astype(np.float32)
    strided = logits[:, ::2]
    mask = np.zeros((BATCH, 3 * N), bool)
    mask[:, ::3] = True
    strided_mask = mask[:, ::3]
    expected = np.where(strided_mask, strided, -np.inf).argmax(axis=1)
    np.testing.assert_array_equal(call("argmax", strided, strided_mask), expected)
    fortran = np.asfortranarray(logits)
    np.testing.assert_array_equal(call("argmax", fortran), logits.argmax(axis=1))
