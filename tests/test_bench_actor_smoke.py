"""benchmarks/bench_actor.py end to end on a tiny problem set: built, saved, reproduced and ranked."""

from __future__ import annotations

import json
import sys

import numpy as np
from pathlib import Path

import pytest

pytest.importorskip("grid2op")
pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_actor  # noqa: E402

pytestmark = [pytest.mark.grid2op, pytest.mark.slow]


def test_the_margins_the_benchmark_states_are_the_configuration_defaults() -> None:
    from ace_hybrid.config import ACEConfig

    assert bench_actor.ACE_MARGINS == (ACEConfig().min_improvement, ACEConfig().min_rho_drop)


def test_a_tiny_problem_set_is_built_reproduced_and_ranked(tmp_path: Path, capsys) -> None:
    path = tmp_path / "problems.json"
    argv = ["--build", "--envs", "l2rpn_case14_sandbox", "--per-env", "3", "--rankers", "sim,random",
            "--problems", str(path)]
    assert bench_actor.main(argv) == 0
    problems = json.loads(path.read_text())["problems"]
    assert len(problems) == 3 and all(len(p["candidates"]) == len(p["good"]) for p in problems)
    out = capsys.readouterr().out
    assert "| sim |" in out and "| random |" in out and "below the acceptance margin" in out
    assert "| first candidate (shortlist order) |" in out and "best control" in out
    raw = json.loads(path.with_name("problems-results.json").read_text())
    for recs in raw["refinement"].values():  # a ranker accepts only where the oracle saw a good candidate
        assert all(not r["accepted"] or any(p["good"]) for r, p in zip(recs, problems))
        assert all(r["margin_met"] for r in recs if r["accepted"])
    for chosen in raw["first_choice"]["sim"]["chosen"]:  # every order of a problem: the same candidate
        assert len(set(chosen)) == 1
    assert bench_actor.main(argv[1:]) == 0  # reused, not rebuilt: the same problems reproduce
    assert json.loads(path.read_text())["problems"] == problems


def test_an_adapter_needs_an_llm_ranker_and_an_adapter_folder(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        bench_actor.main(["--rankers", "sim", "--adapter", str(tmp_path), "--problems", str(tmp_path / "p.json")])
    assert "--adapter" in capsys.readouterr().err


class FirstLetter:
    """A model that answers by position (label A whatever stands there), as SmolLM2-135M did."""

    name = "first-letter"

    def next_token_logprobs(self, prompt, tokens):
        return np.array([0.0] + [-5.0] * (len(tokens) - 1))


def test_the_controls_catch_a_model_that_answers_by_position() -> None:
    import actor_problems as ap

    from ace_hybrid.llm.rankers import Ranker

    # Problems where the shortlist's first candidate is always the good one: position A looks like skill there.
    problems = [{"good": [True] + [False] * 7, "texts": [f"action {k}" for k in range(8)],
                 "effects": [[0.9, 0, 0, False]] * 8, "state_text": "s", "rl_text": "r", "rl_outcome": "o"}
                for _ in range(60)]
    chosen, position = ap.first_choices(Ranker("llm", FirstLetter()), problems, orders=4)
    top, _ = ap.spread(position, 8)
    rate = ap.good_rate(problems, chosen)
    controls = ap.position_controls(problems)
    assert top == 1.0  # every answer is A
    assert controls["first candidate (shortlist order)"].mean() == 1.0
    assert abs(rate.mean() - 1 / 8) < 0.08  # shuffled, A is a random candidate: no skill shows
    table = bench_actor.first_choice_table(problems, {"llm": (chosen, position)})
    assert "| llm |" in table and "| 100% | A 100%" in table
