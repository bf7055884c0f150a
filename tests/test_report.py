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
from ace_hybrid.report import PAPER_TEST_SECONDS, claim, claims, paper_comparison, write_report

import tiny_settings  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = pytest.mark.grid2op

REPO = Path(__file__).resolve().parents[1]
TINY = [*tiny_settings.TINY, "env.eval_max_steps=30", "env.max_episode_steps=100", "env.deploy_topk=2",
        "train.checkpoint_every=50", "train.eval_every=40", "log.log_every=20", "log.tensorboard=false",
        "train.total_env_steps=120"]


@pytest.fixture(scope="module")
def experiment_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny experiment (do-nothing, and SAC-only alone and with a top-2 check, one seed), before any
    report."""
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
kind = "do-nothing"

[[rows]]
name = "SAC-only"
kind = "sac-only"
deploy_topk = [0, 2]
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
    assert set(images) == {"figures/test_survival.png", "figures/differences.png", "figures/per_episode.png",
                           "figures/learning_curves.png", "figures/time_split.png"}
    for name in images:
        pixels = imread(out / name)
        assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 200, name
        assert pixels.std() > 0.01, f"{name} is blank"
    assert "| SAC-only (policy alone) | 1 × 2 |" in report and "| DoNothing | 2 |" in report
    assert "No LLM metrics" in report and f"{PAPER_TEST_SECONDS} s" in report and "offline" in report
    results = json.loads((out / "results.json").read_text())
    assert f"Made by `{results['command']}`, then `ace-hybrid report {out}`." in report
    assert "**SAC-only + top-2 check**" in report and "the top-k check's share" in report
    assert "## Simulations at deployment" in report


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
    results = json.loads((out / "results.json").read_text())
    for key in ("comparisons", "command"):
        del results[key]  # a results.json from before the intervals
    (out / "results.json").write_text(json.dumps(results))
    report = write_report(out).read_text()
    assert "no paired intervals" in report and "survives longer" not in report
    assert "figures/differences.png" not in report
    (out / "results.json").unlink()
    with pytest.raises(FileNotFoundError, match="no results.json"):  # nothing to report is an error (exit 2)
        write_report(out)
    (out / "results.json").write_text("{not json")
    assert "not readable JSON" in write_report(out).read_text()
    with pytest.raises(FileNotFoundError, match="no experiment directory"):
        write_report(tmp_path / "nowhere")


def row(row_id: str, kind: str, survived: list[int], seeds: list | None = None, **metrics: float) -> dict:
    """A results.json row: steps survived of 100 on each test pair (one line per seed)."""
    seeds = seeds or [None]
    episodes = {"steps_survived": [survived] * len(seeds), "max_steps": [[100] * len(survived)] * len(seeds)}
    record = {"id": row_id, "name": row_id, "kind": kind, "train_id": row_id, "deploy_topk": None, "n": len(seeds),
              "seeds": seeds, "episodes": episodes,
              "metrics": {k: {"mean": v, "std": None, "values": [v]} for k, v in metrics.items()}}
    record["metrics"]["survival_rate"] = {"value": sum(survived) / (100 * len(survived))}
    return record


def results_of(*rows: dict) -> dict:
    seeds = sorted({s for r in rows for s in r["seeds"] if s is not None}) or [0]
    n_pairs = len(rows[0]["episodes"]["max_steps"][0])
    return {"rows": list(rows), "seeds": seeds, "test_pairs": [[0, k] for k in range(n_pairs)],
            "comparisons": ex.compare_rows(list(rows), seeds, n_pairs),
            "cells": [{"row": "ace", "kind": "ace", "llm_backend": "smollm2",
                       "dataset": "x: offline test copy shipped with grid2op", "metrics": {"env_steps": 5000}}]}


def test_report_claims_a_difference_only_when_the_paired_interval_excludes_zero() -> None:
    greedy = row("greedy", "greedy", [50] * 16)
    # 16 pairs: ACE survives longer on 13, shorter on 3 -> separated; SAC on 9 of 16, by the same margins -> not.
    ace = row("ace", "ace", [90] * 13 + [40] * 3, seeds=[0])
    sac = row("sac", "sac-only", [90] * 9 + [10] * 7, seeds=[0])
    results = results_of(greedy, sac, ace)
    by_pair = {(c["a"], c["b"]): c for c in results["comparisons"]}
    separated, overlapping = by_pair[("ace", "greedy")], by_pair[("sac", "greedy")]
    assert separated["separated"] and separated["lo"] > 0
    assert not overlapping["separated"] and overlapping["lo"] < 0 < overlapping["hi"]
    text = claims(results)
    assert claim(separated) in text and claim(overlapping) in text
    assert claim(separated).startswith("**ace** survives longer than **greedy** (against the greedy expert): "
                                       "80.6% vs 50.0%, +30.6 points [95% CI ")
    assert claim(overlapping).startswith("**sac** and **greedy** are not distinguishable at these sample sizes")
    assert "includes 0 (16 test pairs × 1 training seed)" in claim(overlapping)
    assert "survives" not in claim(overlapping) and "improves" not in text
    worse = dict(separated, a_name="x", b_name="y", difference=-0.2, lo=-0.3, hi=-0.1)
    assert claim(worse).startswith("**y** survives longer than **x** (against the greedy expert): 50.0% vs 80.6%, "
                                   "+20.0 points [95% CI +10.0, +30.0]")
    assert by_pair[("ace", "sac")]["separated"] and "2 of 3 exploratory comparisons separate" in text
    assert "No primary comparison" not in text and "names no primary comparison" in text


def test_report_states_primaries_first_and_only_after_holm() -> None:
    greedy = row("greedy", "greedy", [50] * 16)
    ace = row("ace", "ace", [90] * 13 + [40] * 3, seeds=[0])
    sac = row("sac", "sac-only", [90] * 9 + [10] * 7, seeds=[0])
    results = results_of(greedy, sac, ace)
    primaries = [ex.Primary("ace", "greedy", "ace", "greedy"), ex.Primary("sac", "greedy", "sac", "greedy")]
    results["comparisons"] = ex.compare_rows(results["rows"], [0], 16, primaries=primaries)
    ace_greedy, sac_greedy = results["comparisons"][:2]
    assert ace_greedy["p_holm"] == pytest.approx(min(1.0, 2 * ace_greedy["p"]))  # the smaller p of m = 2
    text = claims(results)
    primary, exploratory = text.split("### Exploratory (not corrected)")
    assert "### Primary comparisons (Holm)" in primary and "1 of 2 primary comparisons separate" in primary
    assert claim(ace_greedy).startswith("**ace** survives longer than **greedy** (separated (Holm)) (against the "
                                        "greedy expert): 80.6% vs 50.0%")
    assert "Holm-adjusted p" in claim(ace_greedy) and claim(ace_greedy) in primary
    assert claim(sac_greedy).startswith("**sac** and **greedy** are not distinguishable at these sample sizes after "
                                        "Holm's correction")
    assert "**ace** survives longer than **sac**" in exploratory and "**greedy**" not in exploratory


def test_comparison_with_the_paper_follows_the_claim_rule() -> None:
    greedy = row("greedy", "greedy", [50] * 16)
    ace = row("ace", "ace", [90] * 13 + [40] * 3, seeds=[0], llm_calls=300, llm_accepted=40)
    ace["metrics"]["test_seconds_per_episode"] = {"value": 2.0}
    text = paper_comparison(results_of(greedy, ace))
    assert "| ACE vs the expert(-guided) baseline (ours: the greedy expert (no expert-guided RL row)) |" in text
    assert "ace vs greedy: ace survives longer, 80.6% vs 50.0%, +30.6 points [" in text
    assert "300 LLM calls, 40 accepted" in text and "ace: 2.00 s per episode" in text
    assert "SmolLM2-135M-Instruct" in text and "5,000 environment steps" in text
    guided = row("eg", "expert-guided", [40] * 3 + [90] * 13, seeds=[0])  # the same, on other pairs
    text = paper_comparison(results_of(greedy, guided, ace))
    assert "(ours: expert-guided RL) | ACE improves on it | ace vs eg: not distinguishable, " in text
    assert "improves on the greedy" not in text and "is worse than" not in text
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
