"""benchmarks/bench_actor.py end to end on a tiny problem set: built, saved, reproduced and ranked."""

from __future__ import annotations

import json
import sys
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
    results = json.loads(path.with_name("problems-results.json").read_text())["results"]
    for recs in results.values():  # a ranker accepts only where the oracle saw a good candidate
        assert all(not r["accepted"] or any(p["good"]) for r, p in zip(recs, problems))
        assert all(r["margin_met"] for r in recs if r["accepted"])
    assert bench_actor.main(argv[1:]) == 0  # reused, not rebuilt: the same problems reproduce
    assert json.loads(path.read_text())["problems"] == problems
