"""Enumeration of bus-assignment actions: hand-made substations, Grid2Op's algorithm, Grid2Op's own output."""

from __future__ import annotations

import itertools
import time
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ace_hybrid.topology import BusAssignmentSpace, bus_assignments, bus_assignments_from_layout, grid_layout

# ---------------------------------------------------------------------------------------------- helpers


def layout_arrays(subs: list[str]) -> dict[str, np.ndarray]:
    """Raw layout arrays of substations given as strings of kinds ('L' line end, 'd' load, 'g' gen,
    's' storage). Line ends are paired in order of appearance; a leftover end gets a 1-element substation."""
    arrays: dict[str, list[int]] = {k: [] for k in ("load", "gen", "storage")}
    pos: dict[str, list[int]] = {k: [] for k in ("load", "gen", "storage")}
    sub_info = [len(s) for s in subs]
    ends: list[tuple[int, int]] = []
    kind_name = {"d": "load", "g": "gen", "s": "storage"}
    for s, kinds in enumerate(subs):
        for j, k in enumerate(kinds):
            if k == "L":
                ends.append((s, j))
            else:
                arrays[kind_name[k]].append(s)
                pos[kind_name[k]].append(j)
    if len(ends) % 2:
        sub_info.append(1)
        ends.append((len(sub_info) - 1, 0))
    i64 = np.int64
    return {
        "sub_info": np.array(sub_info, i64),
        "load_to_subid": np.array(arrays["load"], i64),
        "load_to_sub_pos": np.array(pos["load"], i64),
        "gen_to_subid": np.array(arrays["gen"], i64),
        "gen_to_sub_pos": np.array(pos["gen"], i64),
        "line_or_to_subid": np.array([e[0] for e in ends[0::2]], i64),
        "line_or_to_sub_pos": np.array([e[1] for e in ends[0::2]], i64),
        "line_ex_to_subid": np.array([e[0] for e in ends[1::2]], i64),
        "line_ex_to_sub_pos": np.array([e[1] for e in ends[1::2]], i64),
        "storage_to_subid": np.array(arrays["storage"], i64),
        "storage_to_sub_pos": np.array(pos["storage"], i64),
    }


def grid2op_algorithm(is_line: list[bool], n_busbar: int, add_alone_line: bool) -> list[tuple[int, ...]]:
    """A literal port of Grid2Op's _aux_get_all_unitary_topologies_set_comp_topo (product, then filters)."""

    def ok_symmetry(tup: tuple[int, ...], bus_start: int = 2, id_start: int = 1) -> bool:
        if id_start >= len(tup) or bus_start >= n_busbar:
            return True
        if tup[id_start] < bus_start:
            return ok_symmetry(tup, bus_start, id_start + 1)
        if tup[id_start] == bus_start:
            return ok_symmetry(tup, bus_start + 1, id_start + 1)
        return False

    n = len(is_line)
    if n == 0:
        return []
    out = []
    for rest in itertools.product(range(1, n_busbar + 1), repeat=n - 1):
        tup = (1, *rest)
        if not ok_symmetry(tup):
            continue
        line_buses = {b for b, line in zip(tup, is_line) if line}
        if len(line_buses) != max(tup):
            continue
        if not add_alone_line and any(tup.count(b) < 2 for b in range(1, max(tup) + 1)):
            continue
        out.append(tup)
    return out if len(out) >= 2 else []


# --------------------------------------------------------------------------------- hand-made substations


@pytest.mark.parametrize(
    ("kinds", "n_busbar", "alone", "expected"),
    [
        ("LL", 2, True, 2),  # (1,1) (1,2)
        ("Ld", 2, True, 0),  # the load cannot sit alone: one topology, dropped
        ("dLLL", 2, True, 7),  # 8 minus "every line on bus 2"
        ("LLLL", 2, True, 8),  # 2**(n-1)
        ("LLLL", 3, True, 14),  # S(4,1) + S(4,2) + S(4,3)
        ("LLLL", 4, True, 15),  # Bell number B4
        ("LLLL", 2, False, 4),  # all together + three 2-2 splits
        ("LLL", 2, False, 0),
        ("LLLL", 1, True, 0),  # one busbar: nothing to choose
    ],
)
def test_hand_counted_substations(kinds: str, n_busbar: int, alone: bool, expected: int) -> None:
    space = bus_assignments_from_layout(**layout_arrays([kinds]), n_busbar_per_sub=n_busbar, add_alone_line=alone)
    assert space.sub_offsets[1] - space.sub_offsets[0] == expected


def test_set_bus_vectors_hold_the_pattern_at_the_substation_only() -> None:
    space = bus_assignments_from_layout(**layout_arrays(["Ld", "LLg", "LL"]))
    starts = np.r_[0, np.cumsum(layout_arrays(["Ld", "LLg", "LL"])["sub_info"])]
    assert space.n_actions == len(space) == 5
    matrix = space.set_bus_matrix(np.arange(space.n_actions))
    assert matrix.dtype == np.int8 and matrix.shape == (5, space.dim_topo)
    for i in range(space.n_actions):
        s = int(space.substation[i])
        v = space.set_bus(i)
        np.testing.assert_array_equal(v, matrix[i])
        np.testing.assert_array_equal(v[starts[s] : starts[s + 1]], space.pattern(i))
        assert (np.delete(v, np.arange(starts[s], starts[s + 1])) == 0).all()
    np.testing.assert_array_equal(space.set_bus(-1), matrix[-1])
    np.testing.assert_array_equal(space.set_bus_matrix([-1, 0]), matrix[[4, 0]])
    np.testing.assert_array_equal(space.core.sub_patterns(1), matrix[:3, 2:5])


def test_footprint_names_the_substation_and_its_lines() -> None:
    arrays = layout_arrays(["LLd", "LL", "L"])
    space = bus_assignments_from_layout(**arrays)
    csr = space.footprint_csr()
    for i in range(space.n_actions):
        s = int(space.substation[i])
        assert list(csr.substation_idx[csr.substation_ptr[i] : csr.substation_ptr[i + 1]]) == [s]
        lines = set(np.nonzero(arrays["line_or_to_subid"] == s)[0]) | set(np.nonzero(arrays["line_ex_to_subid"] == s)[0])
        assert set(csr.line_idx[csr.line_ptr[i] : csr.line_ptr[i + 1]].tolist()) == lines
    assert space.footprint().n_groups == len(set(space.substation.tolist()))


kinds_st = st.text(alphabet="LLLdgs", min_size=0, max_size=7)


@settings(max_examples=150, deadline=None)
@given(st.lists(kinds_st, min_size=1, max_size=5), st.integers(1, 4), st.booleans())
def test_enumeration_equals_grid2op_algorithm_on_random_layouts(
    subs: list[str], n_busbar: int, alone: bool
) -> None:
    arrays = layout_arrays(subs)
    space = bus_assignments_from_layout(**arrays, n_busbar_per_sub=n_busbar, add_alone_line=alone)
    layout = space.core.layout
    kinds, starts = layout.topo_kind, layout.sub_start
    expected: list[tuple[int, tuple[int, ...]]] = []
    for s in range(layout.n_sub):
        is_line = [bool(k in (2, 3)) for k in kinds[starts[s] : starts[s + 1]]]
        if n_busbar >= 2:
            expected += [(s, tup) for tup in grid2op_algorithm(is_line, n_busbar, alone)]
    got = [(int(space.substation[i]), tuple(int(x) for x in space.pattern(i))) for i in range(space.n_actions)]
    assert got == expected


# --------------------------------------------------------------------------------------------- Grid2Op


def make_env(name: str, **kwargs: Any) -> Any:
    grid2op = pytest.importorskip("grid2op")
    lightsim = pytest.importorskip("lightsim2grid")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return grid2op.make(name, test=True, backend=lightsim.LightSimBackend(), **kwargs)


def grid2op_set_bus(env: Any, **kwargs: Any) -> tuple[np.ndarray, float]:
    space = env.action_space
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actions = space.get_all_unitary_topologies_set(space, **kwargs)
    elapsed = time.perf_counter() - t0
    return np.stack([a.set_bus for a in actions]).astype(np.int8), elapsed


@pytest.fixture(scope="module")
def wcci_env() -> Any:
    env = make_env("l2rpn_wcci_2020")
    yield env
    env.close()


@pytest.mark.grid2op
def test_layout_matches_grid2op_positions(wcci_env: Any) -> None:
    cls = type(wcci_env)
    layout = grid_layout(wcci_env)
    np.testing.assert_array_equal(layout.line_or_pos_topo_vect, cls.line_or_pos_topo_vect)
    np.testing.assert_array_equal(layout.line_ex_pos_topo_vect, cls.line_ex_pos_topo_vect)
    np.testing.assert_array_equal(layout.topo_id[cls.load_pos_topo_vect], np.arange(cls.n_load))
    np.testing.assert_array_equal(layout.topo_id[cls.gen_pos_topo_vect], np.arange(cls.n_gen))
    assert layout.dim_topo == cls.dim_topo
    np.testing.assert_array_equal(grid_layout(wcci_env.action_space).sub_start, layout.sub_start)
    with pytest.raises(TypeError, match="no Grid2Op grid layout"):
        grid_layout(object())


@pytest.mark.grid2op
def test_case14_actions_are_grid2ops_in_grid2ops_order() -> None:
    env = make_env("l2rpn_case14_sandbox")
    try:
        space = bus_assignments(env)
        expected, _ = grid2op_set_bus(env)
        assert space.n_actions == 178 == len(expected)
        np.testing.assert_array_equal(space.set_bus_matrix(np.arange(space.n_actions)), expected)
        act = space.to_grid2op(env.action_space, 17)
        np.testing.assert_array_equal(act.set_bus, expected[17])
    finally:
        env.close()


@pytest.mark.grid2op
def test_wcci_2020_actions_are_grid2ops_in_grid2ops_order(wcci_env: Any) -> None:
    t0 = time.perf_counter()
    space = bus_assignments(wcci_env)
    ours = time.perf_counter() - t0
    expected, theirs = grid2op_set_bus(wcci_env)
    print(f"\nl2rpn_wcci_2020 enumeration: ace_hybrid {ours * 1e3:.2f} ms, grid2op {theirs:.2f} s "
          f"({space.n_actions} actions)")
    assert space.n_actions == 66810 == len(expected)
    np.testing.assert_array_equal(space.set_bus_matrix(np.arange(space.n_actions)), expected)


@pytest.mark.grid2op
@pytest.mark.parametrize(
    "name",
    ["l2rpn_neurips_2020_track1", "l2rpn_icaps_2021", "l2rpn_idf_2023"],
)
def test_counts_match_grid2op_per_substation(name: str) -> None:
    env = make_env(name)
    try:
        space = bus_assignments(env)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            counts = env.action_space.get_all_unitary_topologies_set(env.action_space, _count_only=True)
        print(f"\n{name}: {space.n_actions} actions (grid2op count {sum(counts)})")
        np.testing.assert_array_equal(np.diff(space.sub_offsets), counts)
    finally:
        env.close()


@pytest.mark.grid2op
@pytest.mark.parametrize(("n_busbar", "alone"), [(2, False), (3, True), (4, False)])
def test_more_busbars_and_no_alone_line_match_grid2op(n_busbar: int, alone: bool) -> None:
    env = make_env("l2rpn_case14_sandbox", n_busbar=n_busbar)
    try:
        space = bus_assignments(env, add_alone_line=alone)
        assert space.n_busbar_per_sub == n_busbar
        expected, _ = grid2op_set_bus(env, add_alone_line=alone)
        np.testing.assert_array_equal(space.set_bus_matrix(np.arange(space.n_actions)), expected)
    finally:
        env.close()


def test_space_wraps_the_core_object() -> None:
    space = bus_assignments_from_layout(**layout_arrays(["LLL", "LL"]))
    assert isinstance(space, BusAssignmentSpace)
    assert repr(space).startswith("BusAssignmentSpace(n_actions=6")
    with pytest.raises(ValueError):
        space.substation[0] = 3  # read-only view
