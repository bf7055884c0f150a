"""Bad arguments thrown at every binding of the topology / masking areas: the right exception, a message naming
the argument, and objects that stay usable afterwards."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ace_hybrid import _core

# A small valid grid: substation 0 = line ends 0, 1 + a load; 1 = line ends + a gen; 2 = two line ends.
LAYOUT: dict[str, np.ndarray] = {
    "sub_info": np.array([3, 3, 2]),
    "load_to_subid": np.array([0]),
    "load_to_sub_pos": np.array([2]),
    "gen_to_subid": np.array([1]),
    "gen_to_sub_pos": np.array([2]),
    "line_or_to_subid": np.array([0, 0, 1]),
    "line_or_to_sub_pos": np.array([0, 1, 0]),
    "line_ex_to_subid": np.array([1, 2, 2]),
    "line_ex_to_sub_pos": np.array([1, 0, 1]),
}
N_SUB, N_LINE = 3, 3


def valid_layout() -> _core.GridLayout:
    return _core.GridLayout(**LAYOUT)


ACTIONS = _core.enumerate_bus_assignments(valid_layout())
FOOTPRINT = _core.ActionFootprint.concatenate([
    _core.ActionFootprint.do_nothing(N_SUB, N_LINE),
    _core.ActionFootprint.from_bus_assignments(ACTIONS),
    _core.ActionFootprint.line_status(N_SUB, N_LINE, [0, 1, 2], np.array([1, -1, 1], np.int8)),
])
MASKER = _core.LegalityMasker(FOOTPRINT)
STATE = (np.array([True, False, True]), np.array([0, 0, 2], np.int32), np.array([0, 1, 0], np.int32))
EXPECTED_MASK = MASKER.mask(*STATE)
EXPECTED_SET_BUS = ACTIONS.set_bus_matrix(np.arange(ACTIONS.n_actions))


def still_usable() -> None:
    np.testing.assert_array_equal(MASKER.mask(*STATE), EXPECTED_MASK)
    np.testing.assert_array_equal(ACTIONS.set_bus_matrix(np.arange(ACTIONS.n_actions)), EXPECTED_SET_BUS)
    assert len(FOOTPRINT) == 1 + ACTIONS.n_actions + 3


# ----------------------------------------------------------------------------------------- corruptions

# Each corruption maps a valid integer array to (bad value, expected exception types).
def _float(a: np.ndarray) -> Any:
    return a.astype(np.float64) + 0.5, (ValueError,)


def _nan(a: np.ndarray) -> Any:
    b = a.astype(np.float64)
    if b.size:
        b[0] = np.nan
    else:
        b = np.array([np.nan])
    return b, (ValueError,)


def _strings(a: np.ndarray) -> Any:
    return np.array(["x"] * max(a.size, 1)), (ValueError,)


def _objects(a: np.ndarray) -> Any:
    return np.array([None] * max(a.size, 1), dtype=object), (ValueError,)


def _ndim2(a: np.ndarray) -> Any:
    return a.reshape(1, -1), (ValueError,)


def _ndim0(a: np.ndarray) -> Any:
    return np.array(1, a.dtype), (ValueError,)


def _longer(a: np.ndarray) -> Any:
    return np.r_[a, a[:1] if a.size else [0]].astype(a.dtype), (ValueError, IndexError)


def _shorter(a: np.ndarray) -> Any:
    return a[:-1], (ValueError, IndexError)


def _negative(a: np.ndarray) -> Any:
    b = a.astype(np.int64).copy()
    b = np.r_[-1] if b.size == 0 else b
    b[0] = -1 if b[0] >= 0 else b[0]
    return b, (ValueError, IndexError)


def _huge(a: np.ndarray) -> Any:
    b = a.astype(np.int64).copy()
    b = np.r_[0] if b.size == 0 else b
    b[-1] = 2**40
    return b, (ValueError, IndexError)


def _uint64_huge(a: np.ndarray) -> Any:
    b = np.full(max(a.size, 1), 2**63 + 5, dtype=np.uint64)
    return b, (ValueError, IndexError)


def _not_an_array(a: np.ndarray) -> Any:
    return {"a": 1}, (ValueError, TypeError)


def _ragged(a: np.ndarray) -> Any:
    return [[1, 2], [3]], (ValueError,)


CORRUPTIONS: list[Callable[[np.ndarray], Any]] = [
    _float, _nan, _strings, _objects, _ndim2, _ndim0, _longer, _shorter, _negative, _huge, _uint64_huge,
    _not_an_array, _ragged,
]


def non_contiguous(a: np.ndarray) -> np.ndarray:
    wide = np.repeat(a[:, None], 2, axis=1) if a.ndim == 1 else np.repeat(a, 2, axis=-1)
    view = wide[:, 0] if a.ndim == 1 else wide[..., ::2]
    assert not view.flags.c_contiguous or view.size <= 1
    return view


def check_raises(call: Callable[[], Any], expected: tuple[type[BaseException], ...]) -> None:
    with pytest.raises(expected) as info:
        call()
    assert str(info.value), "the message must say what is wrong"


# ---------------------------------------------------------------------------------------------- tests


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(LAYOUT)), st.sampled_from(CORRUPTIONS))
def test_grid_layout_rejects_corrupted_arrays(name: str, corrupt: Callable[[np.ndarray], Any]) -> None:
    bad, expected = corrupt(LAYOUT[name])
    kwargs = dict(LAYOUT, **{name: bad})
    check_raises(lambda: _core.GridLayout(**kwargs), expected)
    still_usable()


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(LAYOUT)))
def test_grid_layout_accepts_non_contiguous_and_other_int_dtypes(name: str) -> None:
    for value in (non_contiguous(LAYOUT[name]), LAYOUT[name].astype(np.int16), LAYOUT[name].astype(np.uint8),
                  LAYOUT[name].tolist()):
        layout = _core.GridLayout(**dict(LAYOUT, **{name: value}))
        actions = _core.enumerate_bus_assignments(layout)
        np.testing.assert_array_equal(actions.set_bus_matrix(np.arange(actions.n_actions)), EXPECTED_SET_BUS)


def test_grid_layout_names_the_problem() -> None:
    with pytest.raises(ValueError, match="both sit at position"):
        _core.GridLayout(**dict(LAYOUT, load_to_sub_pos=np.array([0])))
    with pytest.raises(ValueError, match="holds no element"):
        _core.GridLayout(**dict(LAYOUT, sub_info=np.array([4, 3, 2])))
    with pytest.raises(IndexError, match=r"load_to_subid\[0\] = 5 out of range \[0, 3\)"):
        _core.GridLayout(**dict(LAYOUT, load_to_subid=np.array([5])))
    with pytest.raises(ValueError, match="must have an integer dtype, got float64"):
        _core.GridLayout(**dict(LAYOUT, sub_info=np.array([3.0, 3.0, 2.0])))
    with pytest.raises(ValueError, match="sub_info"):
        _core.GridLayout(**dict(LAYOUT, sub_info=None))
    with pytest.raises(TypeError):
        _core.GridLayout(LAYOUT["sub_info"])  # missing arguments


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.integers(-(2**70), 0), st.integers(128, 2**70)), st.integers(-(2**70), -1))
def test_enumeration_rejects_bad_options(n_busbar: int, max_actions: int) -> None:
    expected = (ValueError, TypeError)  # TypeError: beyond a C++ int64, pybind11 refuses the conversion
    check_raises(lambda: _core.enumerate_bus_assignments(valid_layout(), n_busbar_per_sub=n_busbar), expected)
    check_raises(lambda: _core.enumerate_bus_assignments(valid_layout(), max_actions=max_actions), expected)
    with pytest.raises(ValueError, match="max_actions"):
        _core.enumerate_bus_assignments(valid_layout(), max_actions=1)
    with pytest.raises(TypeError):
        _core.enumerate_bus_assignments("not a layout")  # type: ignore[arg-type]
    still_usable()


@settings(max_examples=100, deadline=None)
@given(st.integers(-(2**62), 2**62))
def test_action_indexing_checks_ranges(i: int) -> None:
    n = ACTIONS.n_actions
    if -n <= i < n:
        np.testing.assert_array_equal(ACTIONS.set_bus(i), EXPECTED_SET_BUS[i])
        assert ACTIONS.pattern(i).size == LAYOUT["sub_info"][ACTIONS.substation[i]]
    else:
        with pytest.raises(IndexError, match="out of range"):
            ACTIONS.set_bus(i)
        with pytest.raises(IndexError, match="out of range"):
            ACTIONS.pattern(i)
        with pytest.raises(IndexError, match=r"indices\[1\]"):
            ACTIONS.set_bus_matrix(np.array([0, i]))
    if not 0 <= i < N_SUB:
        with pytest.raises(IndexError, match="substation"):
            ACTIONS.sub_patterns(i)
    still_usable()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CORRUPTIONS))
def test_set_bus_matrix_rejects_corrupted_indices(corrupt: Callable[[np.ndarray], Any]) -> None:
    bad, expected = corrupt(np.arange(ACTIONS.n_actions))
    if corrupt in (_longer, _shorter, _negative):  # still valid index lists
        ACTIONS.set_bus_matrix(bad)
    else:
        check_raises(lambda: ACTIONS.set_bus_matrix(bad), expected)
    np.testing.assert_array_equal(ACTIONS.set_bus_matrix(non_contiguous(np.arange(ACTIONS.n_actions))),
                                  EXPECTED_SET_BUS)
    assert ACTIONS.set_bus_matrix(np.zeros(0, np.int64)).shape == (0, int(np.sum(LAYOUT["sub_info"])))
    still_usable()


FOOTPRINT_ARGS: dict[str, np.ndarray] = {
    "sub_ptr": FOOTPRINT.sub_ptr,
    "sub_idx": FOOTPRINT.sub_idx,
    "sub_sets_other": FOOTPRINT.sub_sets_other,
    "sub_line_ptr": FOOTPRINT.sub_line_ptr,
    "sub_line_idx": FOOTPRINT.sub_line_idx,
    "status_ptr": FOOTPRINT.status_ptr,
    "status_idx": FOOTPRINT.status_idx,
    "status_val": FOOTPRINT.status_val,
}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(FOOTPRINT_ARGS)), st.sampled_from(CORRUPTIONS))
def test_footprint_rejects_corrupted_csr(name: str, corrupt: Callable[[np.ndarray], Any]) -> None:
    value = FOOTPRINT_ARGS[name]
    bad, expected = corrupt(value.astype(np.int64) if value.dtype == bool else value)
    kwargs = dict(FOOTPRINT_ARGS, **{name: bad})
    if name == "status_val" and corrupt is _negative:  # +1 -> -1 is still a valid status value
        assert _core.ActionFootprint(N_SUB, N_LINE, **kwargs).n_actions == FOOTPRINT.n_actions
    else:
        check_raises(lambda: _core.ActionFootprint(N_SUB, N_LINE, **kwargs), expected)
    still_usable()


def test_footprint_factories_reject_bad_arguments() -> None:
    AF = _core.ActionFootprint
    with pytest.raises(ValueError, match="count"):
        AF.do_nothing(N_SUB, N_LINE, -1)
    with pytest.raises(ValueError, match="n_sub"):
        AF.do_nothing(-1, N_LINE)
    with pytest.raises(ValueError, match="values"):
        AF.line_status(N_SUB, N_LINE, [0], [2])
    with pytest.raises(ValueError, match="must be -1 or \\+1"):
        AF.line_status(N_SUB, N_LINE, [0], [0])
    with pytest.raises(ValueError, match="entries"):
        AF.line_status(N_SUB, N_LINE, [0, 1], [1])
    with pytest.raises(IndexError, match="status_idx"):
        AF.line_status(N_SUB, N_LINE, [3], [1])
    with pytest.raises(ValueError, match="at least one"):
        AF.concatenate([])
    with pytest.raises(TypeError, match="parts\\[1\\]"):
        AF.concatenate([FOOTPRINT, 3])
    with pytest.raises(ValueError, match="n_sub, n_line"):
        AF.concatenate([FOOTPRINT, AF.do_nothing(N_SUB + 1, N_LINE)])
    with pytest.raises(ValueError, match="twice"):
        AF(N_SUB, N_LINE, [0, 2], [0, 0], [1, 1], [0, 0, 0], [], [0, 0], [], np.zeros(0, np.int8))
    still_usable()


@settings(max_examples=60, deadline=None)
@given(st.integers(-(2**40), 2**40), st.integers(-(2**40), 2**40), st.booleans(), st.integers(-3, 5))
def test_masker_rejects_bad_rules(max_sub: int, max_line: int, areas: bool, area_value: int) -> None:
    kw: dict[str, Any] = {"max_sub_changed": max_sub, "max_line_status_changed": max_line}
    if areas:
        kw["sub_area"] = np.full(N_SUB, area_value)
        kw["line_area"] = np.zeros(N_LINE, np.int64)
    ok_limits = 0 <= max_sub <= 2**31 - 1 and 0 <= max_line <= 2**31 - 1
    ok_areas = not areas or 0 <= area_value < N_SUB
    if ok_limits and ok_areas:
        assert _core.LegalityMasker(FOOTPRINT, **kw).n_actions == FOOTPRINT.n_actions
    else:
        check_raises(lambda: _core.LegalityMasker(FOOTPRINT, **kw), (ValueError, IndexError))
    with pytest.raises(ValueError, match="together"):
        _core.LegalityMasker(FOOTPRINT, sub_area=np.zeros(N_SUB, np.int64))
    with pytest.raises(ValueError, match="sub_area has"):
        _core.LegalityMasker(FOOTPRINT, sub_area=np.zeros(N_SUB + 1, np.int64), line_area=np.zeros(N_LINE, np.int64))
    still_usable()


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["mask", "mask_batch", "group_mask"]), st.integers(0, 2), st.sampled_from(CORRUPTIONS))
def test_mask_rejects_corrupted_observations(method: str, which: int, corrupt: Callable[[np.ndarray], Any]) -> None:
    args = [a.copy() for a in STATE]
    if method == "mask_batch":
        args = [np.stack([a, a]) for a in args]
    fn = getattr(MASKER, method)
    flat = args[which].ravel()
    bad, expected = corrupt(flat)
    if corrupt is _ndim2 and method == "mask_batch":
        bad = args[which].reshape(1, 1, -1)  # one dimension too many
    elif method == "mask_batch" and isinstance(bad, np.ndarray) and corrupt not in (_ndim0, _longer, _shorter) \
            and bad.size == flat.size:
        bad = np.asarray(bad).reshape(args[which].shape)  # same shape, bad values / dtype
    args[which] = bad
    check_raises(lambda: fn(*args), expected)
    still_usable()


def test_mask_accepts_other_layouts_and_dtypes() -> None:
    ls, cl, cs = STATE
    np.testing.assert_array_equal(MASKER.mask(ls.astype(np.uint8), cl.astype(np.int64), cs.tolist()), EXPECTED_MASK)
    np.testing.assert_array_equal(MASKER.mask(non_contiguous(ls), non_contiguous(cl), non_contiguous(cs)),
                                  EXPECTED_MASK)
    batch = MASKER.mask_batch(np.stack([ls] * 4).T.copy().T, np.stack([cl] * 4), np.stack([cs] * 4)[:, ::1])
    assert batch.shape == (4, FOOTPRINT.n_actions) and (batch == EXPECTED_MASK).all()
    assert MASKER.mask_batch(np.zeros((0, N_LINE), bool), np.zeros((0, N_LINE), np.int32),
                             np.zeros((0, N_SUB), np.int32)).shape == (0, FOOTPRINT.n_actions)
    with pytest.raises(ValueError, match=r"line_status holds 2 at flat index 0, out of range \[0, 1\]"):
        MASKER.mask(np.array([2, 1, 1]), cl, cs)
    with pytest.raises(ValueError, match="cooldown_sub has shape"):
        MASKER.mask_batch(np.stack([ls] * 2), np.stack([cl] * 2), np.stack([cs] * 3))
    with pytest.raises(ValueError, match="cooldown_line must have an integer dtype"):
        MASKER.mask(ls, cl.astype(np.float32), cs)
    with pytest.raises(ValueError, match="cooldown_line holds -1"):
        MASKER.mask(ls, np.array([0, -1, 0]), cs)
