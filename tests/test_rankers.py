"""The actor's question (ChoiceProblem), its rankers, and the co-evolution pairs: no position can pass for a choice,
and fine-tuning pairs teach which candidate was right, not which letter."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pytest

from ace_hybrid.config import ACEConfig
from ace_hybrid.llm.backend import LLMError
from ace_hybrid.llm.coevolution import content_pairs, judge_pairs
from ace_hybrid.llm.rankers import LABELS, CandidateEffect, ChoiceProblem, Ranker, neutral_order, points_vs_played

TEXTS = ("reconnect line 3", "substation 4: load 2 to bus 2; the rest stay on bus 1", "disconnect line 7",
         "do nothing")
EFFECTS = (CandidateEffect(0.85, 0, 0, False), CandidateEffect(1.20, 2, 1, False),
           CandidateEffect(float("inf"), 0, 0, True), CandidateEffect(0.97, 0, 1, False))


def _problem(texts=TEXTS, effects=EFFECTS, **kw: Any) -> ChoiceProblem:
    return ChoiceProblem("Time 10:00. Most loaded: line 5 at 104%.", "do nothing", "blackout after 3 steps",
                         tuple(texts), tuple(effects), **kw)


def _shown(prompt: list[dict[str, str]]) -> dict[str, str]:
    lines = re.findall(r"^([A-Z])\. (.*)$", prompt[-1]["content"], flags=re.M)
    return {label: text.split(" | ")[0] for label, text in lines}


def test_the_prompt_shows_the_candidates_in_their_order_with_or_without_effects() -> None:
    reading = _problem(failed=(("reconnect line 9", "danger again after 1 steps"),)).prompt()[-1]["content"]
    assert "A. reconnect line 3 | max 85%, 0 over, 0 off" in reading
    assert "C. disconnect line 7 | grid collapses or action refused" in reading
    assert "Also tried, not better: reconnect line 9. Outcome: danger again after 1 steps." in reading
    knowledge = _problem(show_effects=False).prompt()[-1]["content"]
    assert "\nB. substation 4: load 2 to bus 2\n" in knowledge and "max" not in knowledge  # the rest: implied
    moved = _problem().reordered([3, 0, 2, 1])
    assert list(_shown(moved.prompt()).values()) == [TEXTS[3], TEXTS[0], TEXTS[2], "substation 4: load 2 to bus 2"]
    assert moved.texts[3] == TEXTS[1]  # the prompt leaves out what every bus assignment says
    assert moved.effects[1] == EFFECTS[0]
    assert ChoiceProblem.from_dict(moved.to_dict()) == moved


def test_bad_problems_and_orders_name_the_value() -> None:
    with pytest.raises(ValueError, match="not a permutation"):
        _problem().reordered([0, 0, 1, 2])
    with pytest.raises(ValueError, match="2 effects for 4 candidates"):
        _problem(effects=EFFECTS[:2])
    with pytest.raises(ValueError, match=r"27 candidates out of range \[1, 26\]"):
        _problem(texts=["x"] * 27, effects=[EFFECTS[0]] * 27)
    with pytest.raises(ValueError, match="'score' was renamed: use 'llm'"):
        Ranker("score")
    with pytest.raises(ValueError, match="was renamed: use 'llm'"):
        ACEConfig(ranker="score").validate()


class LabelBackend:
    """Answers with fixed label log-probabilities (tests only)."""

    name = "labels"

    def __init__(self, scores: list[float]) -> None:
        self.scores = scores

    def next_token_logprobs(self, prompt: Any, tokens: Any) -> np.ndarray:
        return np.array(self.scores[: len(tokens)], dtype=np.float64)


def test_ties_between_the_best_labels_are_broken_at_random_never_towards_a() -> None:
    ranker = Ranker("llm", LabelBackend([-1.0, -1.0, -1.0, -9.0]), seed=0)
    picks = Counter(ranker.choose(_problem()) for _ in range(300))
    assert set(picks) == {0, 1, 2} and min(picks.values()) > 60


@pytest.mark.parametrize("scores", [[-1.0, float("nan"), -2.0, -3.0], [-1.0, -2.0, -3.0]])
def test_a_label_the_backend_could_not_score_is_a_malformed_answer(scores) -> None:
    with pytest.raises(LLMError) as info:
        Ranker("llm", LabelBackend(scores)).choose(_problem())
    assert info.value.kind == "malformed"


def test_the_controls_choose_by_content_whatever_the_order() -> None:
    problem = _problem()
    for order in ([0, 1, 2, 3], [2, 3, 1, 0], [3, 2, 0, 1]):
        shown = problem.reordered(order)
        assert shown.texts[Ranker("sim").choose(shown)] == TEXTS[0]  # lowest simulated loading
        q = [[4.0, 1.0, 2.0, 3.0][i] for i in order]
        assert shown.texts[Ranker("q").choose(shown, q)] == TEXTS[0]
    with pytest.raises(ValueError, match="one value per candidate"):
        Ranker("q").choose(problem, [1.0])
    assert sorted(neutral_order(5, np.random.default_rng(0))) == list(range(5))


# --------------------------------------------------------------------------- what a fine-tuning round can teach

def _tasks(n: int, seed: int) -> list[tuple[ChoiceProblem, int]]:
    """Problems where one kind of action is always right ("reconnect ..."), in a random order each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        texts = [f"reconnect line {rng.integers(20)}", *(f"substation {rng.integers(30)}: load {k} to bus 2"
                                                         for k in range(3))]
        problem = _problem(texts=texts, effects=EFFECTS)
        order = neutral_order(4, rng)
        out.append((problem.reordered(order), order.index(0)))
    return out


class PositionLearner:
    """Can learn only a prior over letters: the targets' letter frequencies (tests only)."""

    name = "position"

    def __init__(self) -> None:
        self.counts = Counter()

    def finetune(self, pairs: list[tuple[Any, str]]) -> None:
        self.counts.update(label for _, label in pairs)

    def next_token_logprobs(self, prompt: Any, tokens: Any) -> np.ndarray:
        return np.log(np.array([self.counts[t] + 1.0 for t in tokens]))


class ContentLearner:
    """Can learn which words the right candidates start with (tests only)."""

    name = "content"

    def __init__(self) -> None:
        self.right: Counter[str] = Counter()
        self.all: Counter[str] = Counter()

    def finetune(self, pairs: list[tuple[Any, str]]) -> None:
        for prompt, label in pairs:
            shown = _shown(prompt)
            self.right[shown[label].split()[0]] += 1
            self.all.update(text.split()[0] for text in shown.values())

    def next_token_logprobs(self, prompt: Any, tokens: Any) -> np.ndarray:
        shown = _shown(prompt)
        return np.log(np.array([(self.right[w] + 1) / (self.all[w] + 2) for w in (shown[t].split()[0] for t in tokens)]))


def _first_choice_rate(backend: Any, held_out: list[tuple[ChoiceProblem, int]]) -> float:
    ranker = Ranker("llm", backend, seed=1)
    return float(np.mean([ranker.choose(p) == right for p, right in held_out]))


def test_content_pairs_spread_the_target_letter_evenly_and_keep_the_right_candidate() -> None:
    tasks = _tasks(30, seed=0)
    pairs = content_pairs(tasks, orders=2, seed=0)
    assert len(pairs) == 60
    letters = Counter(label for _, label in pairs)
    assert set(letters) == set(LABELS[:4]) and max(letters.values()) - min(letters.values()) <= 1
    for k, (prompt, label) in enumerate(pairs):
        problem, right = tasks[k // 2]
        assert _shown(prompt)[label] == problem.texts[right]
    with pytest.raises(ValueError, match=r"right candidate 4 out of range \[0, 4\)"):
        content_pairs([(tasks[0][0], 4)], orders=1, seed=0)


def test_a_round_on_content_pairs_teaches_a_content_learner_and_nothing_to_a_position_learner() -> None:
    train, held_out = _tasks(60, seed=1), _tasks(200, seed=2)
    pairs = content_pairs(train, orders=2, seed=0)
    position, content = PositionLearner(), ContentLearner()
    before = _first_choice_rate(position, held_out)
    position.finetune(pairs)
    content.finetune(pairs)
    assert abs(_first_choice_rate(position, held_out) - before) < 0.1 and before < 0.4  # chance is 0.25
    assert _first_choice_rate(content, held_out) == 1.0
    # The letter pairs the actor used to make (always the letter it had answered, A) teach a position learner A.
    letter_only = PositionLearner()
    letter_only.finetune([(p, "A") for p, _ in pairs])
    assert Counter(Ranker("llm", letter_only).choose(p) for p, _ in held_out) == Counter({0: len(held_out)})


# --------------------------------------------------------------------------- the judge: one candidate at a time

class VerdictLearner:
    """Learns which first words of an option the simulator called GOOD; answers by them (tests only)."""

    name = "verdicts"

    def __init__(self) -> None:
        self.good: Counter[str] = Counter()
        self.seen: Counter[str] = Counter()

    @staticmethod
    def _word(prompt: Any) -> str:
        return re.search(r"^Option[^:]*: (\S+)", prompt[-1]["content"], flags=re.M).group(1)

    def finetune(self, pairs: list[tuple[Any, str]]) -> None:
        for prompt, verdict in pairs:
            self.seen[self._word(prompt)] += 1
            self.good[self._word(prompt)] += verdict == "GOOD"

    def next_token_logprobs_many(self, prompts: Any, tokens: Any) -> np.ndarray:
        p = np.array([(self.good[self._word(q)] + 1) / (self.seen[self._word(q)] + 2) for q in prompts])
        return np.log(np.stack([p, 1 - p], axis=1))


class ConstantVerdictLearner(VerdictLearner):
    """Can learn only how often GOOD is the answer (tests only)."""

    def next_token_logprobs_many(self, prompts: Any, tokens: Any) -> np.ndarray:
        p = (sum(self.good.values()) + 1) / (sum(self.seen.values()) + 2)
        return np.log(np.tile([p, 1 - p], (len(prompts), 1)))


def test_each_judging_prompt_shows_one_option_after_the_same_context() -> None:
    problem = _problem()
    prompts = [problem.judge_prompt(k)[-1]["content"] for k in range(4)]
    assert "Option, simulated one step: reconnect line 3 | max 85%, 0 over, 0 off" in prompts[0]
    assert "Option: disconnect line 7\n" in _problem(show_effects=False).judge_prompt(2)[-1]["content"]
    start = prompts[0].index("Option")
    assert all(p[:start] == prompts[0][:start] for p in prompts)  # a local model runs the common start once
    assert all(p.endswith("Answer GOOD or BAD.") for p in prompts)


def test_effects_vs_played_say_in_words_how_far_each_option_lies_from_what_was_played() -> None:
    problem = _problem(played_max_rho=1.04)
    prompts = [problem.judge_prompt(k)[-1]["content"] for k in range(4)]
    assert "reconnect line 3 | max 85%, 0 over, 0 off; 19 points below what was played\n" in prompts[0]
    assert "| max 120%, 2 over, 1 off; 16 points above what was played\n" in prompts[1]
    assert "| grid collapses or action refused\n" in prompts[2]  # a failed option has nothing to compare
    assert "; 7 points below what was played\n" in problem.prompt()[-1]["content"]  # the letter prompt too
    assert "max 85%, 0 over, 0 off; as high as what was played" in _problem(played_max_rho=0.853).prompt()[-1][
        "content"]
    lost = _problem(played_max_rho=float("inf")).judge_prompt(0)[-1]["content"]
    assert "max 85%, 0 over, 0 off; what was played lost the grid\n" in lost
    assert "points" not in _problem().judge_prompt(0)[-1]["content"]  # the default shows effects as they are
    assert "points" not in _problem(played_max_rho=1.04, show_effects=False).prompt()[-1]["content"]
    moved = problem.reordered([3, 2, 1, 0])
    assert moved.played_max_rho == 1.04 and ChoiceProblem.from_dict(moved.to_dict()) == moved
    old = {k: v for k, v in problem.to_dict().items() if k != "played_max_rho"}  # saved before the field existed
    assert ChoiceProblem.from_dict(old).played_max_rho is None
    assert [points_vs_played(e, 1.04) for e in EFFECTS[:2]] == [-19, 16]
    assert np.isnan(points_vs_played(EFFECTS[2], 1.04)) and np.isnan(points_vs_played(EFFECTS[0], None))
    assert points_vs_played(EFFECTS[0], float("inf")) == -np.inf
    with pytest.raises(ValueError, match="ace.effects_vs_played"):
        ACEConfig(effects_vs_played="yes").validate()


def test_the_judge_chooses_the_best_judged_candidate_whatever_the_order() -> None:
    learner = VerdictLearner()
    learner.finetune([(_problem().judge_prompt(0), "GOOD"), (_problem().judge_prompt(1), "BAD")])
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]):
        shown = _problem().reordered(order)
        assert shown.texts[Ranker("judge", learner).choose(shown)] == TEXTS[0]


def test_judge_pairs_balance_the_verdicts_and_teach_them() -> None:
    train, held_out = _tasks(60, seed=3), _tasks(200, seed=4)
    # The simulator's verdicts: the right candidate GOOD, the others BAD (more BAD than GOOD).
    examples = [(p, [(k, k == right) for k in range(4)]) for p, right in train]
    pairs = judge_pairs(examples, seed=0)
    assert Counter(v for _, v in pairs) == {"GOOD": 60, "BAD": 60}
    constant, learner = ConstantVerdictLearner(), VerdictLearner()
    constant.finetune(pairs)
    learner.finetune(pairs)
    assert _judge_rate(learner, held_out) == 1.0
    assert _judge_rate(constant, held_out) < 0.4  # a constant answer ties every candidate: chance (0.25)
    assert judge_pairs([(train[0][0], [(0, True)])], seed=0) == [(train[0][0].judge_prompt(0), "GOOD")]


def _judge_rate(backend: Any, held_out: list[tuple[ChoiceProblem, int]]) -> float:
    ranker = Ranker("judge", backend, seed=1)
    return float(np.mean([ranker.choose(p) == right for p, right in held_out]))
