"""benchmarks/bench_loop.py: its ratios and the learner-saturation arithmetic on made-up rates, and one real run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_loop  # noqa: E402


def _run(steps_per_s: float, decisions: int = 57, updates: int = 200, update_seconds: float = 2.0,
         wall: float = 10.0) -> dict:
    return {"env_steps": 1000, "decisions": decisions, "episodes": 3, "updates": updates, "wall": wall, "drain": 0.0,
            "update_seconds": update_seconds, "steps_per_s": steps_per_s, "decisions_per_s": 1.0,
            "updates_per_s": 1.0, "learner_busy": None, "startup": 0.0, "llm_calls": None, "accepted": None}


def test_ratios_are_taken_within_each_repeat_and_saturation_follows_the_arithmetic() -> None:
    results = {bench_loop.SAC: [_run(100.0), _run(50.0)], bench_loop.ACE: [_run(90.0), _run(20.0)],
               bench_loop.LOCAL.format(n=1): [_run(700.0, wall=12.0), _run(600.0, wall=14.0)],
               bench_loop.LOCAL.format(n=2): [_run(1400.0, wall=8.0), _run(900.0, wall=10.0)],
               bench_loop.RAY.format(n=1): [_run(650.0, wall=15.0), _run(600.0, wall=14.0)],
               bench_loop.RAY.format(n=2): [_run(1300.0, wall=10.0), _run(900.0, wall=10.0)]}
    ratios = dict(bench_loop.ratios(results))
    assert ratios["ACE / SAC-only, env steps/s (goal >= 0.8)"] == pytest.approx([0.9, 0.4])
    # The same work: end to end is the ratio of wall times, beside the ratio of steady-state rates.
    assert ratios["2 / 1 local workers, env-bound, end to end (goal >= 1.6)"] == pytest.approx([1.5, 1.4])
    assert ratios["2 / 1 local workers, env-bound, steady state"] == pytest.approx([2.0, 1.5])
    assert ratios["Ray / local, 2 workers, end to end (goal >= 0.85)"] == pytest.approx([0.8, 1.0])
    assert ratios["Ray / local, 2 workers, steady state"] == pytest.approx([1300 / 1400, 1.0])
    _, costs = bench_loop.saturation(results)
    # 650 steps/s per worker, 0.057 decisions per step, 10 ms per update: N* = 1 / (650 u 0.057 0.01)
    for u in bench_loop.UPDATES_PER_DECISION:
        assert costs["n_star"][u] == pytest.approx(1.0 / (650.0 * u * 0.057 * 0.01))
    body, page = bench_loop.report(results, 1000, 2)
    assert "0.90, 0.40" in body and "1.50, 1.40" in body and "N* = 1 /" in page


def test_the_scaling_rows_are_the_env_bound_worker_rows_at_the_goals_budget() -> None:
    plan = bench_loop.variants(ray=True, only="scaling")
    assert list(plan) == [bench_loop.LOCAL.format(n=1), bench_loop.LOCAL.format(n=2), bench_loop.RAY.format(n=1),
                          bench_loop.RAY.format(n=2)]
    assert all("train.updates_per_decision=0" in overrides for overrides in plan.values())
    # At about 1,000 env-bound steps/s per worker, a shorter run is decided by the workers' start-up (RESULTS.md).
    assert bench_loop.DEFAULT_STEPS >= 100_000


@pytest.mark.grid2op
@pytest.mark.slow
def test_one_in_process_run_reports_its_rates() -> None:
    pytest.importorskip("torch")
    res = bench_loop.run_once(["llm.backend=none", "train.learning_starts=2", "train.updates_per_decision=1"],
                              steps=150, seed=0)
    assert res["env_steps"] == 150 and res["steps_per_s"] > 0 and res["llm_calls"] is None and res["wall"] > 0
    assert res["decisions_per_s"] == pytest.approx(res["steps_per_s"] * res["decisions"] / 150)
