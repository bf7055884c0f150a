"""Legality masks: the C++ masker against the numpy reference (random catalogs and states), against Grid2Op's
get_topological_impact (random line statuses), and against Grid2Op's own verdict env._game_rules on states with
cooldowns, maintenance and opponent attacks."""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ace_hybrid.masking import ActionFootprint, LegalityMasker, observation_state, rule_parameters
from ace_hybrid.topology import bus_assignments, bus_assignments_from_layout
from reference_masking import NumpyLegalityMasker  # tests/ is on sys.path: see conftest.py

# ------------------------------------------------------------------------------------- random catalogs


@st.composite
def catalogs(draw: Any) -> tuple[ActionFootprint, int, int]:
    """A random catalog on a random grid: bus assignments + line statuses + do-nothing + random footprints
    setting several substations / statuses at once."""
    n_sub = draw(st.integers(2, 6))
    n_line = draw(st.integers(1, 6))
    or_sub = draw(st.lists(st.integers(0, n_sub - 1), min_size=n_line, max_size=n_line))
    ex_sub = draw(st.lists(st.integers(0, n_sub - 1), min_size=n_line, max_size=n_line))
    n_load = draw(st.lists(st.integers(0, 2), min_size=n_sub, max_size=n_sub))
    # layout: per substation, its line ends then its loads
    sub_info = np.zeros(n_sub, np.int64)
    pos = {"or": [], "ex": [], "load_sub": [], "load_pos": []}
    for s_or, s_ex in zip(or_sub, ex_sub):
        pos["or"].append(sub_info[s_or])
        sub_info[s_or] += 1
        pos["ex"].append(sub_info[s_ex])
        sub_info[s_ex] += 1
    for s, k in enumerate(n_load):
        for _ in range(k):
            pos["load_sub"].append(s)
            pos["load_pos"].append(sub_info[s])
            sub_info[s] += 1
    empty = np.zeros(0, np.int64)
    space = bus_assignments_from_layout(
        sub_info, pos["load_sub"], pos["load_pos"], empty, empty, or_sub, pos["or"], ex_sub, pos["ex"],
        max_actions=50_000,
    )
    parts = [space.footprint(), ActionFootprint.do_nothing(n_sub, n_line, 2)]
    lines = np.arange(n_line)
    parts.append(ActionFootprint.line_status(n_sub, n_line, np.r_[lines, lines],
                                             np.r_[np.ones(n_line), -np.ones(n_line)].astype(np.int8)))
    # general footprints: a few random multi-substation / mixed actions
    n_rand = draw(st.integers(0, 6))
    sub_ptr, sub_idx, other, sl_ptr, sl_idx, stat_ptr, stat_idx, stat_val = [0], [], [], [0], [], [0], [], []
    for _ in range(n_rand):
        subs = draw(st.lists(st.integers(0, n_sub - 1), unique=True, max_size=3))
        for s in subs:
            sub_idx.append(s)
            other.append(draw(st.booleans()))
            sl_idx += draw(st.lists(st.integers(0, n_line - 1), max_size=3))
            sl_ptr.append(len(sl_idx))
        sub_ptr.append(len(sub_idx))
        stats = draw(st.lists(st.integers(0, n_line - 1), unique=True, max_size=2))
        stat_idx += stats
        stat_val += [draw(st.sampled_from([-1, 1])) for _ in stats]
        stat_ptr.append(len(stat_idx))
    parts.append(ActionFootprint(n_sub, n_line, sub_ptr, sub_idx, np.array(other, bool), sl_ptr, sl_idx,
                                 stat_ptr, stat_idx, np.array(stat_val, np.int8)))
    return ActionFootprint.concatenate(parts), n_sub, n_line


@st.composite
def rules(draw: Any, n_sub: int, n_line: int) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "max_sub_changed": draw(st.integers(0, 2)),
        "max_line_status_changed": draw(st.integers(0, 2)),
        "check_limits": draw(st.booleans()),
        "check_cooldowns": draw(st.booleans()),
    }
    if draw(st.booleans()):
        n_area = draw(st.integers(1, n_sub))
        kw["sub_area"] = np.array(draw(st.lists(st.integers(0, n_area - 1), min_size=n_sub, max_size=n_sub)), np.int32)
        kw["line_area"] = np.array(draw(st.lists(st.integers(0, n_area - 1), min_size=n_line, max_size=n_line)), np.int32)
    return kw


def states(n_sub: int, n_line: int, batch: int) -> st.SearchStrategy[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return st.tuples(
        st.lists(st.booleans(), min_size=batch * n_line, max_size=batch * n_line).map(
            lambda v: np.array(v, bool).reshape(batch, n_line)),
        st.lists(st.sampled_from([0, 0, 1, 3]), min_size=batch * n_line, max_size=batch * n_line).map(
            lambda v: np.array(v, np.int32).reshape(batch, n_line)),
        st.lists(st.sampled_from([0, 0, 2]), min_size=batch * n_sub, max_size=batch * n_sub).map(
            lambda v: np.array(v, np.int32).reshape(batch, n_sub)),
    )


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_mask_equals_numpy_reference_on_random_catalogs_and_states(data: st.DataObject) -> None:
    fp, n_sub, n_line = data.draw(catalogs())
    kw = data.draw(rules(n_sub, n_line))
    masker = LegalityMasker(fp, **kw)
    ref = NumpyLegalityMasker(fp, **kw)
    ls, cl, cs = data.draw(states(n_sub, n_line, 3))
    batch = masker.mask_batch(ls, cl, cs)
    assert batch.shape == (3, fp.n_actions) and batch.dtype == bool
    for b in range(3):
        single = masker.mask(ls[b], cl[b], cs[b])
        np.testing.assert_array_equal(single, ref.mask(ls[b], cl[b], cs[b]))
        np.testing.assert_array_equal(batch[b], single)
        np.testing.assert_array_equal(masker.core.group_mask(ls[b], cl[b], cs[b])[fp.group_of], single)
    np.testing.assert_array_equal(ref.mask_batch(ls, cl, cs), batch)
    # integer line status and strided inputs give the same answer
    np.testing.assert_array_equal(masker.mask(ls[0].astype(np.int64), cl[0], cs[0]), batch[0])
    np.testing.assert_array_equal(masker.mask_batch(ls[:, ::1], cl.T.copy().T, cs), batch)


def test_do_nothing_is_always_legal_and_limits_bind() -> None:
    # substation 0: a load and lines 0, 1; substation 1: lines 0, 1 only.
    space = bus_assignments_from_layout([3, 2], [0], [2], [], [], [0, 0], [0, 1], [1, 1], [0, 1])
    fp = ActionFootprint.concatenate([ActionFootprint.do_nothing(2, 2), space.footprint()])
    masker = LegalityMasker(fp)
    sub1 = np.nonzero(np.r_[-1, space.substation] == 1)[0]
    calm = masker.mask([True, True], [0, 0], [0, 0])
    assert calm.all()
    both_out = masker.mask([False, False], [0, 0], [5, 5])
    assert both_out[0] and not both_out[1:].any()  # two reconnections > MAX_LINE_STATUS_CHANGED = 1
    two = LegalityMasker(fp, max_line_status_changed=2).mask([False, False], [0, 0], [5, 5])
    assert two[sub1].all()  # substation 1 holds only disconnected line ends: not a substation change


# ------------------------------------------------------------------------------------- Grid2Op helpers


def make_env(name: str) -> Any:
    grid2op = pytest.importorskip("grid2op")
    lightsim = pytest.importorskip("lightsim2grid")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return grid2op.make(name, test=True, backend=lightsim.LightSimBackend())


class Catalog:
    """do-nothing + every bus assignment + set status +1 / -1 of every line, with Grid2Op actions on demand."""

    def __init__(self, env: Any) -> None:
        cls = type(env)
        self.env, self.n_sub, self.n_line = env, int(cls.n_sub), int(cls.n_line)
        self.space = bus_assignments(env)
        lines = np.arange(self.n_line)
        self.footprint = ActionFootprint.concatenate([
            ActionFootprint.do_nothing(self.n_sub, self.n_line),
            self.space.footprint(),
            ActionFootprint.line_status(self.n_sub, self.n_line, np.r_[lines, lines],
                                        np.r_[np.ones(self.n_line), -np.ones(self.n_line)].astype(np.int8)),
        ])
        self.n_bus = self.space.n_actions

    def is_bus(self, a: int) -> bool:
        return 1 <= a <= self.n_bus

    def grid2op_action(self, a: int) -> Any:
        space = self.env.action_space
        if a == 0:
            return space({})
        if self.is_bus(a):
            return space({"set_bus": self.space.set_bus(a - 1)})
        k = a - 1 - self.n_bus
        return space({"set_line_status": [(int(k % self.n_line), 1 if k < self.n_line else -1)]})

    def subset(self, rng: np.random.Generator, per_sub: int) -> np.ndarray:
        """Do-nothing, every line action, and for every substation its first, last and `per_sub` random actions."""
        offs = self.space.sub_offsets
        chosen = {0, *range(1 + self.n_bus, 1 + self.n_bus + 2 * self.n_line)}
        for s in range(self.n_sub):
            b, e = int(offs[s]), int(offs[s + 1])
            if e > b:
                chosen |= {1 + b, e, *(1 + rng.integers(b, e, per_sub)).tolist()}
        return np.array(sorted(chosen))


def impact_legality(act: Any, status: np.ndarray, cd_line: np.ndarray, cd_sub: np.ndarray, max_sub: int,
                    max_line: int) -> bool:
    """DefaultRules' verdict computed from Grid2Op's own get_topological_impact."""
    lines, subs = act.get_topological_impact(status)
    return bool(lines.sum() <= max_line and subs.sum() <= max_sub and not (cd_line[lines] > 0).any()
                and not (cd_sub[subs] > 0).any())


@pytest.mark.grid2op
def test_mask_agrees_with_grid2op_topological_impact_on_random_statuses() -> None:
    env = make_env("l2rpn_case14_sandbox")
    try:
        cat = Catalog(env)
        actions = [cat.grid2op_action(a) for a in range(cat.footprint.n_actions)]
        rng = np.random.default_rng(7)
        for trial in range(12):
            p_off = [0.05, 0.3, 0.7, 1.0][trial % 4]  # up to every line out: substations with no connected line
            status = rng.random(cat.n_line) >= p_off
            cd_line = rng.choice([0, 0, 2], cat.n_line).astype(np.int32)
            cd_sub = rng.choice([0, 0, 0, 3], cat.n_sub).astype(np.int32)
            for max_sub, max_line in [(1, 1), (1, 2), (2, 3)]:
                mask = LegalityMasker(cat.footprint, max_sub_changed=max_sub,
                                      max_line_status_changed=max_line).mask(status, cd_line, cd_sub)
                expected = [impact_legality(a, status, cd_line, cd_sub, max_sub, max_line) for a in actions]
                np.testing.assert_array_equal(mask, expected)
    finally:
        env.close()


def rollout_and_compare(env: Any, seed: int, n_steps: int, every: int, per_sub: int) -> dict[str, int]:
    """Step with random legal topology actions and line disconnections (opponent and maintenance on), and at
    every `every`-th step compare the mask with env._game_rules on a subset covering every substation."""
    cat = Catalog(env)
    masker = LegalityMasker.for_env(env, cat.footprint)
    rng = np.random.default_rng(seed)
    subset = cat.subset(rng, per_sub)
    g2o_actions = [cat.grid2op_action(int(a)) for a in subset]
    is_bus = np.array([cat.is_bus(int(a)) for a in subset])
    env.seed(seed)
    env.set_id(0)
    obs = env.reset()
    seen = {"states": 0, "line_out": 0, "line_cooldown": 0, "sub_cooldown": 0, "bus_legal": 0, "bus_illegal": 0,
            "line_legal": 0, "line_illegal": 0, "checks": 0}
    for step in range(n_steps):
        mask = masker.from_observation(obs)
        if step % every == every - 1 and env.nb_time_step > 0:
            # the observation carries exactly what the rules read from the environment
            np.testing.assert_array_equal(obs.time_before_cooldown_line, env._times_before_line_status_actionable)
            np.testing.assert_array_equal(obs.time_before_cooldown_sub, env._times_before_topology_actionable)
            np.testing.assert_array_equal(obs.line_status, env.get_current_line_status())
            verdict = np.array([env._game_rules(action=a, env=env)[0] for a in g2o_actions])
            bad = np.nonzero(verdict != mask[subset])[0]
            assert bad.size == 0, (
                f"step {step}: mask disagrees with grid2op on catalog actions {subset[bad][:10].tolist()} "
                f"(grid2op says {verdict[bad][:10].tolist()}); line_status off {np.nonzero(~obs.line_status)[0]}, "
                f"cooldown_line {obs.time_before_cooldown_line}, cooldown_sub {obs.time_before_cooldown_sub}")
            seen["states"] += 1
            seen["checks"] += len(subset)
            seen["line_out"] += int((~obs.line_status).any())
            seen["line_cooldown"] += int((obs.time_before_cooldown_line > 0).any())
            seen["sub_cooldown"] += int((obs.time_before_cooldown_sub > 0).any())
            seen["bus_legal"] += int(verdict[is_bus].sum())
            seen["bus_illegal"] += int((~verdict[is_bus]).sum())
            seen["line_legal"] += int(verdict[~is_bus].sum())
            seen["line_illegal"] += int((~verdict[~is_bus]).sum())
        r = rng.random()
        act = env.action_space({})
        if r < 0.3:
            legal_bus = np.nonzero(mask[1 : 1 + cat.n_bus])[0]
            if legal_bus.size:
                act = env.action_space({"set_bus": cat.space.set_bus(int(rng.choice(legal_bus)))})
        elif r < 0.45 and (~obs.line_status).sum() < 4:
            candidates = np.nonzero(obs.line_status & (obs.time_before_cooldown_line == 0))[0]
            if candidates.size:
                act = env.action_space({"set_line_status": [(int(rng.choice(candidates)), -1)]})
        obs, _, done, _ = env.step(act)
        if done:
            env.set_id(int(rng.integers(0, 2)))
            obs = env.reset()
    return seen


def assert_states_were_interesting(seen: dict[str, int]) -> None:
    assert seen["states"] >= 8
    for key in ("line_out", "line_cooldown", "sub_cooldown", "bus_legal", "bus_illegal", "line_legal",
                "line_illegal"):
        assert seen[key] > 0, f"no sampled state exercised {key}: {seen}"


@pytest.mark.grid2op
def test_mask_agrees_with_grid2op_rules_on_neurips_2020_track1() -> None:
    env = make_env("l2rpn_neurips_2020_track1")
    try:
        assert type(env._opponent).__name__ != "BaseOpponent"  # the opponent attacks lines
        t0 = time.perf_counter()
        seen = rollout_and_compare(env, seed=0, n_steps=240, every=12, per_sub=3)
        print(f"\nneurips_2020_track1: {seen} in {time.perf_counter() - t0:.1f} s")
        assert_states_were_interesting(seen)
    finally:
        env.close()


@pytest.mark.grid2op
def test_mask_agrees_with_grid2op_rules_on_icaps_2021_with_two_line_changes() -> None:
    env = make_env("l2rpn_icaps_2021")
    try:
        params = env.parameters
        params.MAX_LINE_STATUS_CHANGED = 2
        env.change_parameters(params)
        env.reset()
        assert rule_parameters(env).max_line_status_changed == 2
        t0 = time.perf_counter()
        seen = rollout_and_compare(env, seed=1, n_steps=240, every=12, per_sub=3)
        print(f"\nicaps_2021: {seen} in {time.perf_counter() - t0:.1f} s")
        assert_states_were_interesting(seen)
    finally:
        env.close()


@pytest.mark.grid2op
def test_mask_agrees_with_grid2op_rules_by_area_on_idf_2023() -> None:
    env = make_env("l2rpn_idf_2023")
    try:
        params = rule_parameters(env)
        assert params.sub_area is not None and len(set(params.sub_area.tolist())) > 1
        t0 = time.perf_counter()
        seen = rollout_and_compare(env, seed=2, n_steps=72, every=12, per_sub=0)
        print(f"\nidf_2023 (RulesByArea): {seen} in {time.perf_counter() - t0:.1f} s")
        assert seen["states"] >= 5 and seen["bus_legal"] > 0
    finally:
        env.close()


@pytest.mark.grid2op
def test_from_observation_reads_status_and_cooldowns() -> None:
    env = make_env("l2rpn_case14_sandbox")
    try:
        params = env.parameters
        params.NB_TIMESTEP_COOLDOWN_LINE = 3
        env.change_parameters(params)
        cat = Catalog(env)
        masker = LegalityMasker.for_env(env, cat.footprint)
        obs = env.reset()
        obs, *_ = env.step(env.action_space({"set_line_status": [(3, -1)]}))
        np.testing.assert_array_equal(masker.from_observation(obs), masker.mask(*observation_state(obs)))
        assert not masker.from_observation(obs)[1 + cat.n_bus + 3]  # line 3 is in cooldown
    finally:
        env.close()


@pytest.mark.grid2op
def test_wcci_mask_equals_reference_and_is_fast() -> None:
    env = make_env("l2rpn_wcci_2020")
    try:
        space = bus_assignments(env)
    finally:
        env.close()
    masker, ref = LegalityMasker(space), NumpyLegalityMasker(space)
    rng = np.random.default_rng(3)
    n_line, n_sub = space.footprint().n_line, space.n_sub
    for _ in range(5):
        ls = rng.random(n_line) > 0.1
        cl = np.where(rng.random(n_line) < 0.1, 3, 0).astype(np.int32)
        cs = np.where(rng.random(n_sub) < 0.1, 3, 0).astype(np.int32)
        np.testing.assert_array_equal(masker.mask(ls, cl, cs), ref.mask(ls, cl, cs))
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        masker.mask(ls, cl, cs)
    ours = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(5):
        ref.mask(ls, cl, cs)
    theirs = (time.perf_counter() - t0) / 5
    print(f"\nwcci_2020 mask over {space.n_actions} actions: C++ {ours * 1e6:.1f} us/obs, numpy {theirs * 1e6:.0f} us/obs")
