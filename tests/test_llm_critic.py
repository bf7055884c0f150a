"""The value critic g_LLM: trajectory selection on a real replay buffer, the strict answer parser, the bound on
adjustments, reward shaping without compounding, the call budget, failures, and a real tiny model in both modes."""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Callable, Sequence

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
from ace_hybrid.config import ACEConfig
from ace_hybrid.grid.text import TrajectoryStep
from ace_hybrid.llm.backend import Generation, LLMError
from ace_hybrid.llm.critic import (
    ANCHOR_BANDS,
    OPTIONS,
    CriticReport,
    ValueCritic,
    critic_step_prompt,
    parse_adjustments,
    what_followed,
)
from ace_hybrid.replay import MixedReplayBuffer
from hypothesis import given, settings
from hypothesis import strategies as st

N_LINE, OBS_DIM = 3, 5


import llm_fixtures as fixtures  # noqa: E402 (tests/ is on sys.path: see conftest.py)


# ------------------------------------------------------------------------------------------------ helpers
def _obs(episode: int, t: int) -> np.ndarray:
    """A stored observation whose first N_LINE features are line loadings (max rho = 0.5 + t / 8, exact in float32)."""
    x = np.zeros(OBS_DIM, np.float32)
    x[:N_LINE] = [0.2, 0.5 + 0.125 * t, 0.3]
    x[N_LINE:] = [episode, t]
    return x


def _store(buf: MixedReplayBuffer, episode: int, rewards: Sequence[float], end: str) -> None:
    """One trajectory; ``end`` is "done" (blackout), "truncated" or "open" (still running)."""
    for t, r in enumerate(rewards):
        last = t == len(rewards) - 1
        buf.add_rl(_obs(episode, t), 1 + t % 3, r, _obs(episode, t + 1), last and end == "done",
                   last and end == "truncated", episode, t)


# episode -> (rewards, end); r_key = 0.5 below
EPISODES: dict[int, tuple[list[float], str]] = {
    10: ([0.05, 0.04, -1.0], "done"),             # return -0.91, lowest
    11: ([0.05, 0.05, 0.05, 0.05], "truncated"),  # no key transition: never chosen
    12: ([0.05, 0.8, 0.05], "truncated"),         # return 0.90, highest
    13: ([0.1, 0.1, 0.1, -0.7], "done"),          # return -0.40, second lowest
    14: ([0.05, -0.9], "open"),                   # not finished: never chosen
    15: ([0.02, 0.6, 0.03], "truncated"),         # return 0.65, second highest
}


def _buffer(episodes: dict[int, tuple[list[float], str]] = EPISODES, capacity: int = 256) -> MixedReplayBuffer:
    buf = MixedReplayBuffer(OBS_DIM, capacity, 8, seed=3)
    for ep, (rewards, end) in episodes.items():
        _store(buf, ep, rewards, end)
    return buf


def _cfg(**changes) -> ACEConfig:
    values = dict(r_key=0.5, critic_k=0.02, critic_max_total=0.05, critic_trajectories=2, critic_mode="score")
    values.update(changes)
    cfg = ACEConfig(**values)
    cfg.validate()
    return cfg


def _critic(backend, **changes) -> ValueCritic:
    return ValueCritic(backend, _cfg(**changes), describe_action=lambda i: f"action {i}",
                       max_rho=lambda raw: raw[:, :N_LINE].max(1))


def _rewards_by_episode(buf: MixedReplayBuffer) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    c = buf.rl_columns()
    out = {}
    for ep in np.unique(c["episode"]):
        rows = np.flatnonzero(c["episode"] == ep)
        rows = rows[np.argsort(c["decision"][rows])]
        out[int(ep)] = (c["reward"][rows].astype(np.float64), c["original_reward"][rows].astype(np.float64))
    return out


def _always() -> bool:
    return True


class ScriptedCritic:
    """A test backend: in score mode it answers ``prefer[i]`` (default ``default``) for decision [i], by placing the
    real outcome's good/bad margin in that option's quarter between the anchors' (worst -1, best +1); in generate
    mode it returns the scripted answers in turn. An LLMError in a script is raised instead of answered."""

    name = "scripted"

    def __init__(self, *, prefer: dict[int, str] | None = None, default: str = "-K",
                 answers: Sequence[str | LLMError] = (), fail_calls: Sequence[int] = (),
                 during_call: Callable[[], None] | None = None) -> None:
        self.prefer = prefer or {}
        self.default = default
        self.answers = list(answers)
        self.fail_calls = set(fail_calls)
        self.during_call = during_call
        self.calls = 0
        self.prompts: list[str] = []
        self.systems: list[str] = []
        self.anchors: list[tuple[str, str]] = []

    def _enter(self, prompt) -> None:
        self.calls += 1
        self.prompts.append(prompt[-1]["content"])
        self.systems.append(prompt[0]["content"])
        if self.during_call is not None:
            self.during_call()
        if self.calls in self.fail_calls:
            raise LLMError("scripted failure", backend=self.name, kind="timeout")

    def next_token_logprobs_many(self, prompts, tokens):
        assert len(prompts) == 3 and list(tokens) == ["good", "Good", "bad", "Bad"]
        self._enter(prompts[0])
        self.anchors.append((prompts[1][-1]["content"], prompts[2][-1]["content"]))
        step = int(re.search(r"Decision \[(\d+)\]", prompts[0][-1]["content"]).group(1))
        q = {"-2K": 0.1, "-K": 0.4, "+K": 0.6, "+2K": 0.9}[self.prefer.get(step, self.default)]
        return _label_logprobs([-1.0 + 2.0 * q, 1.0, -1.0])

    def generate(self, prompt, **kwargs):
        self._enter(prompt)
        answer = self.answers.pop(0)
        if isinstance(answer, LLMError):
            raise answer
        return Generation(answer, 10, 5, "stop")


def _label_logprobs(margins: Sequence[float]) -> np.ndarray:
    """(len(margins), 4) log-probabilities of good, Good, bad, Bad with log P(good|Good) - log P(bad|Bad) = margin."""
    out = np.full((len(margins), 4), -30.0)
    out[:, 0] = np.log(0.4) + np.asarray(margins) / 2
    out[:, 2] = np.log(0.4) - np.asarray(margins) / 2
    return out


# ---------------------------------------------------------------------------------------------- selection
def test_selection_alternates_lowest_and_highest_return_among_finished_key_trajectories() -> None:
    buf = _buffer()
    columns = buf.rl_columns()
    picks = _critic(ScriptedCritic(), critic_trajectories=10).select(columns)
    episodes = [int(columns["episode"][rows[0]]) for rows in picks]
    assert episodes == [10, 12, 13, 15]  # 11 has no key transition, 14 is not finished
    for rows in picks:
        ep = int(columns["episode"][rows[0]])
        assert np.all(columns["episode"][rows] == ep)
        np.testing.assert_array_equal(columns["decision"][rows], np.arange(len(EPISODES[ep][0])))
        np.testing.assert_allclose(columns["original_reward"][rows], EPISODES[ep][0], rtol=1e-6)
    two = _critic(ScriptedCritic(), critic_trajectories=2).select(columns)
    assert [int(columns["episode"][r[0]]) for r in two] == [10, 12]
    one = _critic(ScriptedCritic(), critic_trajectories=1).select(columns)
    assert [int(columns["episode"][r[0]]) for r in one] == [10]


def test_a_lone_decision_is_never_selected() -> None:
    buf = _buffer({10: ([-1.0], "done"), 12: EPISODES[12], 13: ([0.9], "truncated")})
    columns = buf.rl_columns()
    picks = _critic(ScriptedCritic(), critic_trajectories=10).select(columns)
    assert [int(columns["episode"][r[0]]) for r in picks] == [12]  # no predecessor to blame, no successor to judge


def test_selection_groups_interleaved_episodes_by_step() -> None:
    buf = MixedReplayBuffer(OBS_DIM, 64, 8, seed=0)
    a, b = [0.1, -0.8, 0.1], [0.9, 0.1, 0.2]
    for t in range(3):  # two episodes written alternately (as two environments would)
        buf.add_rl(_obs(1, t), 1, a[t], _obs(1, t + 1), False, t == 2, 1, t)
        buf.add_rl(_obs(2, t), 2, b[t], _obs(2, t + 1), t == 2, False, 2, t)
    columns = buf.rl_columns()
    picks = _critic(ScriptedCritic(), critic_trajectories=5).select(columns)
    assert [int(columns["episode"][r[0]]) for r in picks] == [1, 2]
    for rows, rewards in zip(picks, (a, b)):
        np.testing.assert_array_equal(columns["decision"][rows], [0, 1, 2])
        np.testing.assert_allclose(columns["original_reward"][rows], rewards, rtol=1e-6)


def test_judged_episodes_are_skipped_and_the_state_round_trips() -> None:
    buf = _buffer()
    critic = _critic(ScriptedCritic(), critic_trajectories=2)
    report = critic.run(buf, may_call=_always)
    assert report.trajectories == 2 and critic.judged_episodes == {10, 12}
    columns = buf.rl_columns()
    assert [int(columns["episode"][r[0]]) for r in critic.select(columns)] == [13, 15]
    fresh = _critic(ScriptedCritic(), critic_trajectories=2)
    fresh.load_state_dict(critic.state_dict())
    assert critic.state_dict() == {"judged_episodes": [10, 12]}
    assert [int(columns["episode"][r[0]]) for r in fresh.select(columns)] == [13, 15]
    for bad in ({}, {"judged_episodes": "10"}, {"judged_episodes": [1.5]}, [10, 12]):
        with pytest.raises(ValueError, match="critic state"):
            fresh.load_state_dict(bad)


def test_episodes_that_left_the_buffer_are_forgotten() -> None:
    buf = _buffer({10: EPISODES[10], 13: EPISODES[13]}, capacity=9)  # 4 + 5 slots
    critic = _critic(ScriptedCritic(), critic_trajectories=1)
    critic.run(buf, may_call=_always)
    assert critic.judged_episodes == {10}
    _store(buf, 20, [0.05, 0.05, 0.05], "truncated")  # evicts episode 10 (ring of 9 slots)
    critic.select(buf.rl_columns())
    assert critic.judged_episodes == frozenset()


def test_bad_columns_and_settings_raise_value_error() -> None:
    critic = _critic(ScriptedCritic())
    columns = _buffer().rl_columns()
    with pytest.raises(ValueError, match="lacks"):
        critic.select({k: v for k, v in columns.items() if k != "original_reward"})
    with pytest.raises(ValueError, match="lengths"):
        critic.select(dict(columns, decision=columns["decision"][:-1]))
    with pytest.raises(ValueError, match="steps_per_trajectory"):
        ValueCritic(ScriptedCritic(), _cfg(), describe_action=str, max_rho=lambda r: r.max(1), steps_per_trajectory=0)
    cfg = _cfg()
    cfg.critic_mode = "vote"
    with pytest.raises(ValueError, match="ace.critic_mode"):
        ValueCritic(ScriptedCritic(), cfg, describe_action=str, max_rho=lambda r: r.max(1))
    assert critic.select({k: v[:0] for k, v in columns.items()}) == []


# ------------------------------------------------------------------------------------------------- parser
def test_parser_reads_well_formed_answers() -> None:
    assert parse_adjustments("[3]: -K\n[7]: +2K", [3, 7, 9]) == {3: -1, 7: 2}
    assert parse_adjustments("\n  [0] :+K  \n\n\t[12]:\t-2K\n", {0, 12}) == {0: 1, 12: -2}
    assert parse_adjustments("[1]: -K\n[2]: -K", [1, 2], max_lines=2) == {1: -1, 2: -1}


@pytest.mark.parametrize("text", [
    "", "  \n ", "[3]: -K\n[3]: +K", "[4]: -K", "[3]: 0", "[3]: K", "[3]: +3K", "[3]: -k", "[3] -K", "3: -K",
    "[03]: -K", "[3]: -K.", "Answer:\n[3]: -K", "[3]: -K because it overloaded line 2", "```\n[3]: -K\n```",
    "[3]: -K [7]: +K", "[3]: −K", "[3]: -K\n[7]: +K\n[9]: +K",
])
def test_parser_rejects_malformed_answers(text: str) -> None:
    assert parse_adjustments(text, [3, 7, 9], max_lines=2) is None


_option = st.sampled_from(sorted(OPTIONS))
_pad = st.sampled_from(["", " ", "  ", "\t"])


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.integers(0, 40), _option, min_size=1, max_size=6), st.data())
def test_well_formed_answers_parse_exactly(answer: dict[int, str], data: st.DataObject) -> None:
    pad = [[data.draw(_pad) for _ in range(4)] for _ in answer]
    lines = [f"{a}[{i}]{b}:{c}{o}{d}" for (i, o), (a, b, c, d) in zip(answer.items(), pad)]
    text = "\n".join(lines) + data.draw(st.sampled_from(["", "\n", "\n\n"]))
    assert parse_adjustments(text, range(41)) == {i: OPTIONS[o] for i, o in answer.items()}


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.integers(0, 20), _option, min_size=1, max_size=5),
       st.sampled_from(["prose", "unknown", "duplicate", "token", "too_many"]), st.data())
def test_one_defect_makes_the_whole_answer_malformed(answer: dict[int, str], defect: str,
                                                     data: st.DataObject) -> None:
    lines = [f"[{i}]: {o}" for i, o in answer.items()]
    valid = set(range(21))
    max_lines = None
    if defect == "prose":
        word = data.draw(st.text(st.characters(codec="ascii", exclude_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85"),
                                 min_size=1).filter(lambda s: s.strip() and not re.fullmatch(r"\s*\[\d+\].*", s)))
        lines.insert(data.draw(st.integers(0, len(lines))), word)
    elif defect == "unknown":
        lines.append(f"[{data.draw(st.integers(21, 999))}]: -K")
    elif defect == "duplicate":
        lines.append(f"[{next(iter(answer))}]: {data.draw(_option)}")
    elif defect == "token":
        bad = data.draw(st.sampled_from(["0", "K", "+1K", "-3K", "+K!", "good", "+2", "- K", "+k"]))
        lines.append(f"[{data.draw(st.sampled_from(sorted(valid - set(answer))))}]: {bad}")
    else:
        max_lines = len(answer) - 1
    assert parse_adjustments("\n".join(lines), valid, max_lines=max_lines) is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("[]0123456789:+-2K \nk.x")), max_size=60))
def test_any_text_parses_to_none_or_a_valid_answer(text: str) -> None:
    out = parse_adjustments(text, {1, 2, 3, 12}, max_lines=3)
    assert out is None or (0 < len(out) <= 3 and set(out) <= {1, 2, 3, 12} and set(out.values()) <= {-2, -1, 1, 2})


# ------------------------------------------------------------------------------------------- application
@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 30), st.sampled_from([-2, -1, 1, 2]), max_size=12),
       st.floats(0.001, 1.0), st.floats(1.0, 20.0))
def test_adjustments_are_bounded_and_scaled_together(units: dict[int, int], k: float, ratio: float) -> None:
    critic = _critic(ScriptedCritic(), critic_k=k, critic_max_total=k * ratio)
    a = critic.adjustments(units)
    raw = {i: u * k for i, u in units.items()}
    total = sum(abs(v) for v in raw.values())
    assert set(a) == set(units)
    assert sum(abs(v) for v in a.values()) <= k * ratio * (1 + 1e-12)
    scale = min(1.0, k * ratio / total) if total else 1.0
    for i in units:
        assert a[i] == pytest.approx(raw[i] * scale, rel=1e-12)
        assert np.sign(a[i]) == np.sign(units[i])


def test_shaping_adds_bounded_adjustments_to_original_rewards_without_compounding() -> None:
    buf = _buffer()
    before = _rewards_by_episode(buf)
    backend = ScriptedCritic(prefer={0: "+2K", 1: "-2K"}, default="-K")
    critic = _critic(backend, critic_trajectories=2, critic_k=0.02, critic_max_total=0.05)
    report = critic.run(buf, may_call=_always)
    after = _rewards_by_episode(buf)
    # Episode 10 (3 steps) and 12 (3 steps): every step but the last is asked about (cap 4).
    assert report.trajectories == 2 and report.calls == 4 and report.adjusted_steps == 4
    assert report.malformed == report.errors == report.stale == 0 and not report.stopped
    raw = np.array([0.04, -0.04, 0.0])  # +2K, -2K, the last unchanged; sum |a| = 0.08 > 0.05: scaled by 5/8
    expected = raw * 0.05 / 0.08
    for ep in (10, 12):
        np.testing.assert_allclose(after[ep][0], before[ep][1] + expected, atol=1e-6)
        np.testing.assert_array_equal(after[ep][1], before[ep][1])  # original rewards kept
        assert np.abs(after[ep][0] - after[ep][1]).sum() <= 0.05 + 1e-6
    assert report.total_abs_adjustment == pytest.approx(0.10)  # 2 x 0.05 (the bound)
    for ep in (11, 13, 14, 15):
        np.testing.assert_array_equal(after[ep][0], before[ep][0])
    # A critic that forgot its state judges the same episodes again: the result is the same, not doubled.
    again = _critic(ScriptedCritic(prefer={0: "+2K", 1: "-2K"}, default="-K"), critic_trajectories=2)
    again.run(buf, may_call=_always)
    for ep in (10, 12):
        np.testing.assert_allclose(_rewards_by_episode(buf)[ep][0], after[ep][0], atol=1e-7)


def test_score_mode_asks_about_the_most_important_steps_but_never_the_last() -> None:
    rewards = [0.05] * 9 + [-1.0]
    buf = _buffer({7: (rewards, "done")})
    backend = ScriptedCritic()
    report = _critic(backend, critic_trajectories=1).run(buf, may_call=_always)
    asked = [int(re.search(r"Decision \[(\d+)\]", p).group(1)) for p in backend.prompts]
    # The blackout step (9) would rank first, but its own reward holds its outcome; then the steps in time order
    # (rho rises by 1/8 at each, from step 1).
    assert asked == [1, 2, 3, 4] and report.adjusted_steps == 4
    assert all("power grid operator" in system for system in backend.systems)  # the domain prefix P_r
    assert "What followed: 8 more decisions earning -0.65 in total" in backend.prompts[0]
    assert backend.prompts[0].endswith("the grid collapsed 8 decisions later.\n\n" + _QUESTION)
    best, worst = backend.anchors[0]
    assert "8 more decisions earning +1.08 in total, highest loading 80%; the grid survived to the end." in best
    assert "1 more decision earning -1.00 in total, highest loading 120%; the grid collapsed 1 decision later." in worst
    for anchor in (best, worst):  # the anchors differ from the real prompt only in what followed
        assert anchor.split("\n")[0] == backend.prompts[0].split("\n")[0] and anchor.endswith(_QUESTION)


_QUESTION = "Looking at what followed, was this decision good or bad? Answer good or bad."


class _Margins:
    """A backend answering every step with fixed good/bad margins for (real, best, worst)."""

    name = "margins"

    def __init__(self, margins: Sequence[float]) -> None:
        self.margins = margins

    def next_token_logprobs_many(self, prompts, tokens):
        return _label_logprobs(self.margins)


@pytest.mark.parametrize(("real", "units"), [(-3.0, -2), (-0.6, -2), (-0.4, -1), (0.1, 1), (0.6, 2), (5.0, 2)])
def test_the_real_outcome_is_rated_by_its_place_between_the_anchors(real: float, units: int) -> None:
    steps = [TrajectoryStep(0, "do nothing", 0.01, 0.95), TrajectoryStep(1, "do nothing", -1.0, 1.3)]
    # Anchors at worst -1 and best +1: q = (real + 1) / 2, quarters at q = 1/4, 1/2, 3/4 (margins -0.5, 0, 0.5).
    judgement = _critic(_Margins([real, 1.0, -1.0])).judge(steps, survived=False)
    assert judgement.units == {0: units} and judgement.calls == 1 and judgement.malformed == 0
    assert ANCHOR_BANDS == (0.25, 0.5, 0.75)


@pytest.mark.parametrize("margins", [[0.5, -1.0, 1.0], [0.5, 0.3, 0.3], [float("nan"), 1.0, -1.0]])
def test_unreadable_answers_are_counted_and_change_nothing(margins: list[float]) -> None:
    buf = _buffer()
    before = _rewards_by_episode(buf)
    report = _critic(_Margins(margins), critic_trajectories=2).run(buf, may_call=_always)
    # Anchors in the wrong order (or tied), or a non-finite number: the model told us nothing about this step.
    assert report.calls == report.malformed == 4 and report.adjusted_steps == 0 and report.trajectories == 2
    after = _rewards_by_episode(buf)
    for ep in after:
        np.testing.assert_array_equal(after[ep][0], before[ep][0])


@settings(max_examples=200, deadline=None)
@given(st.floats(-20, 20), st.floats(-20, 20), st.floats(0.01, 20), st.floats(0, 20))
def test_a_better_outcome_is_never_rated_lower(a: float, b: float, gap: float, worst: float) -> None:
    steps = [TrajectoryStep(0, "do nothing", 0.01, 0.95), TrajectoryStep(1, "do nothing", 0.5, 0.9)]
    lo, hi = sorted((a, b))
    rate = [_critic(_Margins([m, worst + gap, worst])).judge(steps).units[0] for m in (lo, hi)]
    assert rate[0] <= rate[1] and set(rate) <= {-2, -1, 1, 2}


def test_what_followed_says_how_the_trajectory_ended() -> None:
    assert what_followed(1, -1.0, 1.2, False) == ("What followed: 1 more decision earning -1.00 in total, highest "
                                                  "loading 120%; the grid collapsed 1 decision later.")
    assert what_followed(3, 0.5, 0.93, True).endswith("3 more decisions earning +0.50 in total, highest loading 93%; "
                                                      "the grid survived to the end.")
    assert what_followed(2, 0.02, 0.9, None).endswith("highest loading 90%.")
    with pytest.raises(ValueError, match="n_later"):
        what_followed(0, 0.0, 0.9, True)
    prompt = critic_step_prompt(4, TrajectoryStep(12, "reconnect line 3", 0.01, 0.97), "What followed: x.")
    assert prompt[1]["content"] == ("Decision [4] at step 12: reconnect line 3. Its own reward: +0.01, highest line "
                                    "loading 97%.\nWhat followed: x.\n\n" + _QUESTION)


def test_generate_mode_applies_well_formed_and_ignores_malformed_answers() -> None:
    buf = _buffer()
    before = _rewards_by_episode(buf)
    backend = ScriptedCritic(answers=["[2]: -2K\n[0]: +K", "Decision 1 was great: +2K"])
    critic = _critic(backend, critic_mode="generate", critic_trajectories=2, critic_max_total=0.1)
    report = critic.run(buf, may_call=_always)
    assert (report.trajectories, report.calls, report.malformed, report.errors) == (2, 2, 1, 0)
    assert report.adjusted_steps == 2 and report.total_abs_adjustment == pytest.approx(0.06)
    after = _rewards_by_episode(buf)
    np.testing.assert_allclose(after[10][0], before[10][1] + [0.02, 0.0, -0.04], atol=1e-6)
    np.testing.assert_array_equal(after[12][0], before[12][0])  # malformed: nothing applied
    assert critic.judged_episodes == {10, 12}  # a malformed answer is an answer: not asked again


def test_the_budget_stops_a_round_and_keeps_the_answers_already_received() -> None:
    buf = _buffer()
    allowed = iter([True, True])
    backend = ScriptedCritic(default="+K")
    critic = _critic(backend, critic_trajectories=2)
    report = critic.run(buf, may_call=lambda: next(allowed, False))
    assert report.stopped and report.calls == backend.calls == 2
    assert report.adjusted_steps == 2 and report.trajectories == 1
    assert critic.judged_episodes == {10}
    nothing = critic.run(buf, may_call=lambda: False)
    assert nothing.calls == 0 and nothing.trajectories == 0 and nothing.stopped


def test_llm_errors_are_counted_and_skip_their_trajectory() -> None:
    buf = _buffer()
    before = _rewards_by_episode(buf)
    backend = ScriptedCritic(fail_calls=[2])  # the second call (episode 10, second step) fails
    critic = _critic(backend, critic_trajectories=2)
    report = critic.run(buf, may_call=_always)
    assert report.errors == 1 and report.calls == 2 + 2 and report.trajectories == 1
    after = _rewards_by_episode(buf)
    np.testing.assert_array_equal(after[10][0], before[10][0])  # nothing applied to the failed trajectory
    assert not np.array_equal(after[12][0], before[12][0])
    assert critic.judged_episodes == {12}  # the failed one may be retried

    gen = _critic(ScriptedCritic(answers=[LLMError("down", backend="x", kind="connection"), "[1]: +K"]),
                  critic_mode="generate", critic_trajectories=2)
    report = gen.run(buf, may_call=_always)
    assert (report.errors, report.calls, report.trajectories, report.adjusted_steps) == (1, 2, 1, 1)


def test_rows_overwritten_during_a_call_are_counted_stale() -> None:
    buf = _buffer({10: EPISODES[10], 12: EPISODES[12]}, capacity=9)  # 4 + 4 slots of 9

    def overwrite() -> None:  # an actor thread adding while the critic waits for the model
        if buf.rl_columns()["episode"].min() == 10:
            _store(buf, 30, [0.05, 0.05, 0.05], "truncated")  # 4 slots: evicts every row of episode 10

    report = _critic(ScriptedCritic(during_call=overwrite), critic_trajectories=1).run(buf, may_call=_always)
    assert report.calls == 2 and report.stale == 2 and report.adjusted_steps == 0
    assert report.trajectories == 1


# ------------------------------------------------------------------------------------------- a real model
@pytest.mark.parametrize("mode", ["score", "generate"])
def test_a_real_tiny_model_drives_both_modes_and_the_counters_add_up(tmp_path: pathlib.Path, mode: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ace_hybrid.llm.transformers_backend import TransformersBackend

    backend = TransformersBackend(fixtures.build_tiny_model(tmp_path / "tiny"))
    buf = _buffer()
    before = _rewards_by_episode(buf)
    critic = ValueCritic(backend, _cfg(critic_mode=mode, critic_trajectories=3, critic_max_total=0.05),
                         describe_action=lambda i: f"action {i}", max_rho=lambda raw: raw[:, :N_LINE].max(1),
                         max_new_tokens=24)
    report = critic.run(buf, may_call=_always)
    assert isinstance(report, CriticReport) and report.errors == 0 and not report.stopped
    assert report.trajectories == 3 and critic.judged_episodes == {10, 12, 13}
    after = _rewards_by_episode(buf)
    changed = sum(int(np.sum(after[ep][0] != before[ep][0])) for ep in after)
    assert changed == report.adjusted_steps
    shaped = sum(float(np.abs(after[ep][0] - after[ep][1]).sum()) for ep in after)
    assert shaped == pytest.approx(report.total_abs_adjustment, abs=1e-5)
    for ep in after:
        np.testing.assert_array_equal(after[ep][1], before[ep][1])
        assert np.abs(after[ep][0] - after[ep][1]).sum() <= 0.05 + 1e-6
    if mode == "score":
        # Every step but the last of these short trajectories is asked about; a random model may not rank the best
        # anchor above the worst, which is counted malformed and changes nothing.
        assert report.calls == 2 + 2 + 3 == report.adjusted_steps + report.malformed
    else:
        assert report.calls == 3 and report.malformed <= 3
        assert report.adjusted_steps <= 4 * (3 - report.malformed)
        assert (report.adjusted_steps == 0) == (report.malformed == 3)
    assert backend.stats["calls"] >= report.calls


def test_steps_must_not_be_empty_and_a_lone_decision_is_not_asked_about() -> None:
    with pytest.raises(ValueError, match="steps is empty"):
        _critic(ScriptedCritic()).judge([])
    lone = _critic(ScriptedCritic(default="+2K")).judge([TrajectoryStep(0, "do nothing", -1.0, 1.1)])
    assert lone.units == {} and lone.calls == 0 and not lone.answered
    two = _critic(ScriptedCritic(default="+2K")).judge([TrajectoryStep(0, "do nothing", 0.01, 0.95),
                                                       TrajectoryStep(1, "do nothing", -1.0, 1.1)])
    assert two.units == {0: 2} and two.calls == 1 and two.answered
