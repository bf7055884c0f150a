"""The co-evolving LLM's exam: held-out labelled problems of two grids, first choices scored beside the controls
that explain a score without the model, and co-evolution's rounds examined before and after."""

from __future__ import annotations

import gzip
import json
import pathlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ace_hybrid.config import load_config
from ace_hybrid.llm.coevolution import CoEvolution
from ace_hybrid.llm.exam import BELOW_PLAYED, Exam, below_played_choice, choice_problem, read_problem_set, split_of
from ace_hybrid.llm.rankers import Ranker
from ace_hybrid.training.llm_coevolution import coevolution_metrics

SET = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "coevolution_problems.json.gz"


@pytest.fixture(scope="module")
def exam() -> Exam:
    return Exam.load(SET, size=60)


def test_the_exam_holds_held_out_problems_of_both_grids_from_episodes_no_run_trains_on(exam) -> None:
    assert len(exam.problems) == 60
    assert exam.grids == ["l2rpn_case14_sandbox", "l2rpn_neurips_2020_track1"]
    assert {split_of(p) for p in exam.problems} == {"held-out"}
    # Training episodes are seeded 1000 + k; the set's episodes start at 15,000 and no two problems repeat.
    assert min(p["seed"] for p in exam.problems) >= 15_000
    keys = {(p["env"], p["seed"], len(p["prefix"])) for p in exam.problems}
    assert len(keys) == 60
    # The whole held-out split, unlike its thinned selection, is what the offline curves were measured on.
    assert len(Exam.load(SET, size=5000).problems) > 160


class Oracle:
    """Knows the labels: picks a candidate the simulator accepted where there is one (tests only)."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        self.good = {(p["state_text"], t): g for p in problems for t, g in zip(p["texts"], p["good"])}

    def choose(self, problem: Any) -> int:
        flags = [self.good[(problem.state_text, t)] for t in problem.texts]
        return flags.index(True) if True in flags else 0


class FirstLetter:
    """Answers A whatever stands there (tests only)."""

    def choose(self, problem: Any) -> int:
        return 0


def test_the_simulation_ranker_scores_as_its_control_and_an_oracle_beats_every_control(exam) -> None:
    controls = exam.controls()
    assert set(controls) == {"first candidate (shortlist order)", "best fixed position (shortlist order: A)",
                             "any fixed letter, shuffled orders (= random)",
                             "simulation ranker (lowest simulated loading)", BELOW_PLAYED}
    sim = exam.sit(Ranker("sim"))
    assert sim["accuracy"] == pytest.approx(controls["simulation ranker (lowest simulated loading)"]["mean"])
    assert sim["minus_simulation"] == {"mean": 0.0, "low": 0.0, "high": 0.0}
    oracle = exam.sit(Oracle(exam.problems), untrained=sim["per_problem"])
    solvable = np.mean([any(p["good"]) for p in exam.problems])
    assert oracle["accuracy"] == pytest.approx(solvable)
    assert oracle["minus_best_control"]["low"] > 0 and oracle["minus_untrained"]["mean"] >= 0
    assert oracle["low"] <= oracle["accuracy"] <= oracle["high"]
    assert np.mean(list(oracle["per_grid"].values())) == pytest.approx(oracle["accuracy"])  # 30 problems each


def test_an_answer_by_position_scores_like_a_random_choice(exam) -> None:
    by_letter = exam.sit(FirstLetter())
    random = exam.controls()["any fixed letter, shuffled orders (= random)"]
    assert by_letter["top_position_share"] == 1.0
    assert by_letter["low"] <= random["mean"] <= by_letter["high"]
    assert by_letter["minus_simulation"]["high"] < 0


class ReadsTheWords:
    """Picks the first option said to lie below what was played, else A (tests only)."""

    def choose(self, problem: Any) -> int:
        below = [k for k in range(len(problem.texts))
                 if any(w in problem.option(k) for w in ("below what was played", "lost the grid"))]
        return below[0] if below else 0


def test_effects_vs_played_carry_the_one_line_rule_into_the_exam(exam) -> None:
    words = Exam.load(SET, size=60, vs_played=True)
    assert exam.sit(ReadsTheWords())["top_position_share"] == 1.0  # without the words: always A
    read = words.sit(ReadsTheWords())
    rule = words.controls()[BELOW_PLAYED]
    # Reading the words is the rule (its first candidate instead of a uniform one among them): no better than it.
    assert read["low"] <= rule["mean"] <= read["high"]
    assert read["minus_below_played"]["low"] <= 0 <= read["minus_below_played"]["high"]
    assert read["minus_best_control"]["low"] > 0  # and the rule beats every position-only control
    assert rule["mean"] < words.controls()["simulation ranker (lowest simulated loading)"]["mean"]
    # The reference: inf where what was played lost the grid, its max loading otherwise.
    lost = next(p for p in words.problems if p["blackout"])
    kept = next(p for p in words.problems if not p["blackout"])
    assert choice_problem(lost, vs_played=True).played_max_rho == float("inf")
    assert choice_problem(kept, vs_played=True).played_max_rho == pytest.approx(kept["max_rho"])
    assert choice_problem(kept).played_max_rho is None
    assert below_played_choice([{**kept, "rl_outcome": "the episode ended safely after 3 steps"}])[0] == \
        pytest.approx(np.mean(kept["good"]))  # nothing is below an episode that ended: a uniform choice


def test_bad_exams_name_the_value(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere.json.gz not found"):
        Exam.load(tmp_path / "nowhere.json.gz")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": 1, "problems": []}))
    with pytest.raises(ValueError, match="format 1; this version reads format 2"):
        read_problem_set(old)
    with pytest.raises(ValueError, match="exam size = 0 is invalid"):
        Exam.load(SET, size=0)
    with pytest.raises(ValueError, match="split = 'test' is invalid"):
        Exam.load(SET, split="test")
    empty = tmp_path / "empty.json.gz"
    empty.write_bytes(gzip.compress(json.dumps({"format": 2, "problems": []}).encode()))
    with pytest.raises(ValueError, match="no held-out problem"):
        Exam.load(empty)
    with pytest.raises(ValueError, match=r"ace.exam_size.*\[10, 5000\]"):
        load_config(None, ["ace.exam_size=5"])


# ----------------------------------------------------------------------------- co-evolution's rounds, examined

@dataclass
class Stats:
    steps: int = 1
    losses: list[float] = field(default_factory=lambda: [1.0, 0.5])


class LearnsTheLabels:
    """A fine-tunable judge that knows nothing until its first round, then the labels (tests only)."""

    name, supports_finetune = "labels", True

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        # A judging prompt shows one candidate after its problem's context, whatever the order: it names the verdict.
        shown = [(choice_problem(p), p["good"]) for p in problems]
        self.good = {q.judge_prompt(k)[-1]["content"]: g for q, flags in shown for k, g in enumerate(flags)}
        self.rounds = 0

    def finetune(self, pairs: Any, **lora: Any) -> Stats:
        self.rounds += 1
        return Stats()

    def save_adapter(self, directory: pathlib.Path) -> None:
        pathlib.Path(directory).mkdir(parents=True)

    def next_token_logprobs_many(self, prompts: Any, tokens: Any) -> np.ndarray:
        p = np.array([0.5 if not self.rounds else 0.9 if self.good[q[-1]["content"]] else 0.1 for q in prompts])
        return np.log(np.stack([p, 1 - p], axis=1))


class NoReplay:
    def get(self, index: Any) -> None:
        raise IndexError


@dataclass
class JudgeActor:
    ranker: Ranker


def test_each_round_is_examined_paired_with_the_untrained_model(exam, tmp_path: pathlib.Path) -> None:
    backend = LearnsTheLabels(exam.problems)
    coevo = CoEvolution(backend, every=1, n_pairs=4, adapter_dir=tmp_path, probe_size=0, target="judge", exam=exam)
    actor = JudgeActor(Ranker("judge", backend))
    first = coevo.finetune(NoReplay(), actor, lambda: True, env_steps=100)
    second = coevo.finetune(NoReplay(), actor, lambda: True, env_steps=200)
    assert "exam_before" in first and "exam_before" not in second
    untrained, after = first["exam_before"], second["exam_after"]
    assert untrained["problems"] == after["problems"] == 60
    assert after["accuracy"] == pytest.approx(np.mean([any(p["good"]) for p in exam.problems]))
    assert after["minus_untrained"]["low"] > 0
    assert after["minus_untrained"]["mean"] == pytest.approx(after["accuracy"] - untrained["accuracy"])
    metrics = coevolution_metrics(second, exam.controls())
    assert metrics["coevo/exam_accuracy"] == pytest.approx(after["accuracy"])
    assert metrics["coevo/exam_control_simulation"] == pytest.approx(
        exam.controls()["simulation ranker (lowest simulated loading)"]["mean"])
    assert {"coevo/exam_minus_best_control_low", "coevo/exam_minus_untrained_high",
            "coevo/exam_minus_below_played_low", "coevo/exam_control_first_candidate", "coevo/exam_control_random",
            "coevo/exam_control_below_played"} <= set(metrics)
    assert "coevo/exam_untrained_accuracy" in coevolution_metrics(first)


def _refinement(problem: Any, verdicts: list[tuple[int, bool]], accepted: bool) -> Any:
    from ace_hybrid.llm.actor import Refinement

    choice = next((k for k, ok in verdicts if ok), None) if accepted else None
    return Refinement(rounds=1, calls=1, accepted=accepted, improvement=0.5 if accepted else 0.0,
                      problem=problem if accepted else None, choice=choice, first_problem=problem,
                      verdicts=verdicts)


def test_the_judge_learns_from_every_refinement_since_its_last_round_accepted_or_not(exam, tmp_path) -> None:
    backend = LearnsTheLabels(exam.problems)
    problems = [choice_problem(p) for p in exam.problems[:6]]
    judge = CoEvolution(backend, every=2, n_pairs=10, adapter_dir=tmp_path / "judge", probe_size=0, target="judge")
    letter = CoEvolution(backend, every=2, n_pairs=10, adapter_dir=tmp_path / "letter", probe_size=0)
    refused = _refinement(problems[0], [(0, False), (1, False), (2, True)], accepted=False)
    for coevo in (judge, letter):
        coevo.record(refused)
        coevo.record(_refinement(problems[1], [(0, True), (1, False)], accepted=True), handle=7)
        coevo.record(_refinement(problems[2], [], accepted=False))  # an LLM error before any verdict
    assert len(judge.records) == 2 and len(letter.records) == 1
    assert (judge.since_last, letter.since_last) == (2, 1)  # the judge learns from both
    pairs = judge.best_pairs(NoReplay())
    assert sorted(label for _, label in pairs) == ["BAD", "BAD", "GOOD", "GOOD"]  # balanced: 2 GOOD, 3 BAD seen
    assert judge.records == []  # each refinement is trained on once
    judge.record(_refinement(problems[3], [(0, True), (1, False)], accepted=True), handle=8)
    assert len(judge.best_pairs(NoReplay())) == 2
