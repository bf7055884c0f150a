"""Budget checkpoints: one training kept at several budgets (train.keep_best_at -> best-<steps>.pt, an evaluation
exactly then, resumable), and experiments that test each budget as its own table row from the one training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("grid2op")
pytest.importorskip("torch")

from ace_hybrid import experiment as ex  # noqa: E402
from ace_hybrid.config import load_config  # noqa: E402
from ace_hybrid.report import write_report  # noqa: E402
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


BUDGET_ROWS = """
rows = [{ name = "DoNothing", kind = "do-nothing" }, { name = "Greedy", kind = "greedy" },
        { name = "SAC-only", kind = "sac-only", deploy_topk = [0, 2] }]
"""


def write_budget_experiment(path: Path) -> Path:
    """A tiny experiment whose SAC row trains once to 200 steps and is tested at 100 and 200 (the file's
    ``train.total_env_steps`` is replaced by the largest budget)."""
    top = {"name": "tiny-budgets", "config": str(REPO / "configs" / "l2rpn_case14_sandbox.toml"),
           "set": [*tiny_settings.TINY, "env.deploy_topk=2", "train.checkpoint_every=50", "train.eval_every=60",
                   "log.tensorboard=false", "train.total_env_steps=5000"],
           "seeds": [0], "test_pairs": [[0, 0], [1, 1]], "test_max_steps": 30, "greedy_budget": 3,
           "budgets": [100, 200],
           "primary": [["SAC-only @ 100 (policy alone)", "DoNothing"], ["sac-only-200-top2", "sac-only-100-top2"]]}
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in top.items()) + BUDGET_ROWS)
    return path


def test_budget_rows_share_one_training_and_resume_without_retraining(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ex.load_experiment(write_budget_experiment(tmp_path / "tiny.toml"))
    ids = [r.id for r in spec.rows if r.trains]
    assert ids == ["sac-only-100-alone", "sac-only-100-top2", "sac-only-200-alone", "sac-only-200-top2"]
    names = [r.name for r in spec.rows if r.trains]
    assert names[:2] == ["SAC-only @ 100 (policy alone)", "SAC-only @ 100 + top-2 check"]
    assert [(p.a, p.b) for p in spec.primaries] == [("sac-only-100-alone", "donothing"),
                                                  ("sac-only-200-top2", "sac-only-100-top2")]
    cfg = spec.row_config(spec.rows[-1], 0)
    assert cfg.train.total_env_steps == 200 and cfg.train.keep_best_at == [100, 200]

    out = tmp_path / "out"
    trained = []
    original = ex.cells.train_cell
    monkeypatch.setattr(ex.cells, "train_cell", lambda *a, **k: (trained.append(a[1]), original(*a, **k))[1])
    result = ex.run_experiment(spec, out, progress=False, draws=200)
    assert trained == [out / "runs" / "sac-only-seed0"]  # one training for the four rows
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["sac-only-seed0"]
    assert {"best-100.pt", "best-200.pt"} <= {p.name for p in (out / "runs" / "sac-only-seed0").iterdir()}
    cells = {c["cell"]: c for c in result["cells"]}
    assert cells["sac-only-100-alone-seed0"]["metrics"]["env_steps"] == 100
    assert cells["sac-only-200-top2-seed0"]["metrics"]["env_steps"] == 200
    assert cells["sac-only-100-top2-seed0"]["budget"] == 100
    assert (cells["sac-only-100-alone-seed0"]["metrics"]["train_seconds"]
            < cells["sac-only-200-alone-seed0"]["metrics"]["train_seconds"])
    rows = {r["id"]: r for r in result["rows"]}
    assert rows["sac-only-200-top2"]["budget"] == 200 and rows["donothing"]["budget"] is None
    why = {(c["a"], c["b"]): c["why"] for c in result["comparisons"]}
    assert why[("sac-only-100-top2", "sac-only-100-alone")] == "the top-k check's share"
    assert ("sac-only-200-top2", "sac-only-100-alone") not in why  # the check's share within one budget only
    assert "budget" in (out / "results.csv").read_text().splitlines()[0].split(",")

    report = write_report(out).read_text()
    assert "## Survival against the training budget" in report and (out / "figures" / "budget_curve.png").is_file()

    # A cell to redo reuses the training: nothing is trained again.
    (out / "cells" / "sac-only-200-alone-seed0.json").unlink()
    again = ex.run_experiment(ex.load_experiment(tmp_path / "tiny.toml"), out, progress=False, draws=200)
    assert again["ran"] == ["sac-only-200-alone-seed0"] and trained == [out / "runs" / "sac-only-seed0"]


def test_budgets_belong_to_the_sac_rows(tmp_path: Path) -> None:
    bad = write_budget_experiment(tmp_path / "bad.toml")
    bad.write_text(bad.read_text().replace('deploy_topk = [0, 2] }', 'deploy_topk = [0, 2] },\n'
                                           '        { name = "Tutor", kind = "tutor", budgets = [100] }'))
    with pytest.raises(ValueError, match=r"rows\[3\]\.budgets \(row 'Tutor'\): kind 'tutor' keeps no best.pt"):
        ex.load_experiment(bad)
    bad.write_text(bad.read_text().replace("budgets = [100, 200]", "budgets = [100, 100]"))
    with pytest.raises(ValueError, match=r"budgets = \[100, 100\] must be a list of distinct"):
        ex.load_experiment(bad)
