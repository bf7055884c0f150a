"""Budget checkpoints: one training kept at several budgets (train.keep_best_at -> best-<steps>.pt, an evaluation
exactly then, resumable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("grid2op")
pytest.importorskip("torch")

from ace_hybrid.config import load_config  # noqa: E402
from ace_hybrid.training import loop  # noqa: E402
from ace_hybrid.training.checkpoint import load_checkpoint_file  # noqa: E402
from ace_hybrid.training.loop import TrainingInterrupted, train  # noqa: E402

import tiny_settings  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = pytest.mark.grid2op

REPO = Path(__file__).resolve().parents[1]
QUIET = ["log.tensorboard=false", "train.eval_every=150", "train.checkpoint_every=1000"]


def tiny(*extra: str):
    return load_config(None, [*tiny_settings.TINY, *QUIET, *extra])


def evaluated_at(run_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (run_dir / "eval").iterdir())


def test_a_budget_above_the_step_budget_is_an_error_naming_both() -> None:
    with pytest.raises(ValueError, match=r"train.keep_best_at = \[500\] is invalid: .*train.total_env_steps = 300"):
        tiny("train.total_env_steps=300", "train.keep_best_at=[500]")
    with pytest.raises(ValueError, match=r"train.keep_best_at = \[100, 100\] is invalid: must be distinct"):
        tiny("train.total_env_steps=300", "train.keep_best_at=[100, 100]")


@pytest.mark.parametrize("workers", [0, 2])
def test_each_budget_is_evaluated_exactly_then_and_kept(tmp_path: Path, workers: int) -> None:
    """Workers wait at a budget, so the learner evaluates at exactly that step, whatever the batch size."""
    run = tmp_path / "run"
    summary = train(tiny("train.total_env_steps=240", "train.keep_best_at=[100, 240]", f"train.workers={workers}",
                         "train.worker_batch_steps=30"), run)
    assert summary["env_steps"] == 240 and [k["env_steps"] for k in summary["kept_best"]] == [100, 240]
    assert 100 in evaluated_at(run) and 240 in evaluated_at(run)
    history = load_checkpoint_file(run / "checkpoint.pt")["counters"]["eval_history"]
    # best-100.pt is best.pt as it was at 100 steps: the first evaluation chose it (nothing later was known).
    assert load_checkpoint_file(run / "best-100.pt")["counters"]["env_steps"] == 100 == history[0]["env_steps"]
    best_240 = load_checkpoint_file(run / "best-240.pt")["counters"]
    assert best_240["best_survival"] == max(h["survival_rate"] for h in history)
    assert (run / "best-240.pt").read_bytes() == (run / "best.pt").read_bytes()


def test_a_resumed_run_neither_loses_nor_recomputes_its_budgets(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    original = loop.on_schedule

    def stop_after_the_first_budget(r, since=None):
        original(r, since)
        if r.counters.env_steps >= 130:
            r.stop_requested = True  # as Ctrl-C does: the run saves and raises TrainingInterrupted

    monkeypatch.setattr(loop, "on_schedule", stop_after_the_first_budget)
    with pytest.raises(TrainingInterrupted):
        train(tiny("train.total_env_steps=300", "train.keep_best_at=[100, 200, 300]"), run)
    monkeypatch.setattr(loop, "on_schedule", original)
    first = (run / "best-100.pt").stat().st_mtime_ns
    assert not (run / "best-200.pt").exists()
    summary = train(None, run, resume=True)
    assert [k["env_steps"] for k in summary["kept_best"]] == [100, 200, 300]
    assert (run / "best-100.pt").stat().st_mtime_ns == first  # not recomputed
    assert evaluated_at(run).count(100) == 1 and {200, 300} <= set(evaluated_at(run))
    with pytest.raises(ValueError, match=r"train.keep_best_at = \[100, 200, 300\] is invalid: .* = 250"):
        train(None, run, resume=True, total_env_steps=250)
