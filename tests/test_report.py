"""`ace-hybrid report`: figures and report.md from an experiment directory, and sentences where data is missing."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("grid2op")
pytest.importorskip("torch")
pytest.importorskip("matplotlib")
from matplotlib.image import imread

from ace_hybrid import experiment as ex
from ace_hybrid.cli import main
from ace_hybrid.report import PAPER_TEST_SECONDS, paper_comparison, write_report

import tiny_settings  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = pytest.mark.grid2op

REPO = Path(__file__).resolve().parents[1]
TINY = [*tiny_settings.TINY, "env.eval_max_steps=30", "env.max_episode_steps=100", "env.deploy_topk=2",
        "train.checkpoint_every=50", "train.eval_every=40", "log.log_every=20", "log.tensorboard=false",
        "train.total_env_steps=120"]


@pytest.fixture(scope="module")
def experiment_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny experiment (do-nothing and SAC-only, one seed), before any report."""
    base = tmp_path_factory.mktemp("report")
    path = base / "tiny.toml"
    path.write_text(f"""
name = "tiny"
config = "{REPO / 'configs' / 'l2rpn_case14_sandbox.toml'}"
set = {json.dumps(TINY)}
seeds = [0]
test_pairs = [[0, 0], [1, 1]]
test_max_steps = 25

[[rows]]
name = "DoNothing"
kind = "donothing"

[[rows]]
name = "SAC-only"
kind = "sac_only"
""")
    out = base / "out"
    ex.run_experiment(ex.load_experiment(path), out, progress=False)
    return out


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def referenced_images(report: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)


def test_report_has_valid_figures_that_it_references(experiment_dir: Path, tmp_path: Path) -> None:
    out = copy_of(experiment_dir, tmp_path / "exp")
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    images = referenced_images(report)
    assert set(images) == {"figures/learning_curves.png", "figures/test_survival.png", "figures/time_split.png"}
    for name in images:
        pixels = imread(out / name)
        assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 200, name
        assert pixels.std() > 0.01, f"{name} is blank"
    assert "| SAC-only | 1 |" in report and "| DoNothing | 1 |" in report
    assert "No LLM metrics" in report and f"{PAPER_TEST_SECONDS} s" in report and "offline" in report


def test_llm_lines_in_metrics_give_the_llm_figure(experiment_dir: Path, tmp_path: Path) -> None:
    out = copy_of(experiment_dir, tmp_path / "exp")
    metrics = out / "runs" / "sac-only-seed0" / "metrics.jsonl"
    with metrics.open("a") as f:
        for step, calls, accepted in ((40, 5, 1), (80, 12, 4), (120, 20, 9)):
            f.write(json.dumps({"env_steps": step, "time": 0.0, "llm/calls": calls, "llm/accepted": accepted,
                                "llm/acceptance_rate": accepted / calls}) + "\n")
    report = write_report(out).read_text()
    assert "figures/llm.png" in referenced_images(report)
    assert imread(out / "figures" / "llm.png").shape[0] > 100


def test_missing_metrics_and_results_give_sentences_not_errors(experiment_dir: Path, tmp_path: Path) -> None:
    out = copy_of(experiment_dir, tmp_path / "exp")
    for metrics in out.glob("runs/*/metrics.jsonl"):
        metrics.unlink()
    report = write_report(out).read_text()
    assert "No learning curves" in report and "figures/learning_curves.png" not in report
    assert not (out / "figures" / "learning_curves.png").exists()
    assert "figures/test_survival.png" in referenced_images(report)
    (out / "results.json").unlink()
    with pytest.raises(FileNotFoundError, match="no results.json"):  # nothing to report is an error (exit 2)
        write_report(out)
    (out / "results.json").write_text("{not json")
    assert "not readable JSON" in write_report(out).read_text()
    with pytest.raises(FileNotFoundError, match="no experiment directory"):
        write_report(tmp_path / "nowhere")


def row(row_id: str, kind: str, survival: float, **metrics: float) -> dict:
    values = {"survival_rate": survival, **metrics}
    return {"id": row_id, "name": row_id, "kind": kind, "n": 1,
            "metrics": {k: {"mean": v, "std": None, "values": [v]} for k, v in values.items()}}


def test_comparison_with_the_paper_states_who_wins() -> None:
    results = {"rows": [row("greedy", "greedy", 0.5), row("sac", "sac_only", 0.7),
                        row("ace", "ace", 0.6, llm_calls=300, llm_accepted=40, test_seconds_per_episode=2.0)],
               "cells": [{"row": "ace", "kind": "ace", "llm_backend": "smollm2",
                          "dataset": "x: offline test copy shipped with grid2op", "metrics": {"env_steps": 5000}}]}
    text = paper_comparison(results)
    assert "ACE improves on the greedy expert: survival 60.0% vs 50.0%" in text
    assert "**ACE is worse than SAC-only** at the same budget" in text and "60.0% vs 70.0%" in text
    assert "300 LLM calls, 40 accepted" in text and "2.00 s per episode" in text
    assert "SmolLM2-135M-Instruct" in text and "5,000 environment steps" in text
    results["rows"][1] = row("sac", "sac_only", 0.6)
    assert "ACE is not worse than SAC-only" in paper_comparison(results)
    assert "no ACE row" in paper_comparison({"rows": [], "cells": []})


def test_runs_that_never_updated_are_flagged() -> None:
    results = {"rows": [], "cells": [{"name": "SAC-only", "train": {"updates": 0}, "metrics": {}},
                                     {"name": "ACE", "train": {"updates": 12}, "metrics": {}}]}
    flagged = next(p for p in paper_comparison(results).split("\n\n") if "No SAC updates" in p)
    assert "in SAC-only:" in flagged and "ACE" not in flagged


def test_the_coevolution_table_reports_probe_acceptance_before_and_after() -> None:
    from ace_hybrid.report import _coevolution_table

    entry = {"round": 1, "env_steps": 3000, "pairs": 8, "loss_first": 0.25, "loss_last": 0.2, "seconds": 60.0,
             "probe_before": {"asked": 4, "acceptance": 0.25}, "probe_after": {"asked": 4, "acceptance": 0.5}}
    unasked = dict(entry, round=2, probe_after={"asked": 0, "acceptance": float("nan")})
    results = {"rows": [{"id": "ace", "name": "ACE"}],
               "cells": [{"row": "ace", "seed": 3, "train": {"llm": {"coevolution": [entry, unasked]}}}]}
    text = _coevolution_table(results)
    assert "| ACE | 3 | 1 | 3,000 | 8 | 0.250 -> 0.200 | 25.0% -> 50.0% (of 4) | 60 s |" in text
    assert "25.0% -> – (of 4)" in text and "nan" not in text
    assert "No co-evolution round ran" in _coevolution_table({"rows": [], "cells": []})
