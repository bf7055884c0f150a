"""`ace-hybrid experiment`: cells, deploy_topk rows from one training, the table and its bootstrap intervals,
resumability, errors that name the culprit, and the shipped experiment files."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import types
from itertools import takewhile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grid2op")
pytest.importorskip("torch")
from ace_hybrid import experiment as ex
from ace_hybrid.report import write_report
from ace_hybrid.training import loop as train_module
from ace_hybrid.config import read_toml
from ace_hybrid.data.splits import split_of
from ace_hybrid.training.checkpoint import load_checkpoint_file

import tiny_settings  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = pytest.mark.grid2op

REPO = Path(__file__).resolve().parents[1]
# Tiny nets and short episodes on the 14-substation sandbox, as in test_train.py.
TINY = [*tiny_settings.TINY, "env.deploy_topk=2", "train.checkpoint_every=50", "train.eval_every=60",
        "log.tensorboard=false"]


DO_NOTHING_AND_SAC = """
[[rows]]
name = "DoNothing"
kind = "do-nothing"

[[rows]]
name = "SAC-only"
kind = "sac-only"
deploy_topk = [0, 2]
"""


def write_experiment(path: Path, *, steps: int = 120, seeds: str = "[0, 1]", rows: str = "", extra: str = "") -> Path:
    rows = rows or DO_NOTHING_AND_SAC
    path.write_text(f"""
name = "tiny"
config = "{REPO / 'configs' / 'l2rpn_case14_sandbox.toml'}"
set = {json.dumps(TINY + [f"train.total_env_steps={steps}"])}
seeds = {seeds}
test_pairs = [[0, 0], [1, 1]]
test_max_steps = 30
{extra}
{rows}
""")
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    base = tmp_path_factory.mktemp("experiment")
    path = write_experiment(base / "tiny.toml", extra='primary = [["each trained row (policy alone)", "DoNothing"]]')
    out = base / "out"
    result = ex.run_experiment(ex.load_experiment(path), out, progress=False)
    return path, out, result


def test_experiment_writes_cells_runs_and_results(finished) -> None:
    _, out, result = finished
    cells = ["donothing", "sac-only-alone-seed0", "sac-only-alone-seed1", "sac-only-top2-seed0", "sac-only-top2-seed1"]
    assert sorted(result["ran"]) == cells and result["reused"] == []
    for name in ("results.json", "results.csv", "results.md", "cells/donothing.json", "cells/sac-only-top2-seed0.json",
                 "runs/sac-only-seed0/best.pt", "runs/sac-only-seed1/metrics.jsonl"):
        assert (out / name).is_file(), name
    cell = json.loads((out / "cells" / "sac-only-top2-seed1.json").read_text())
    assert cell["seed"] == 1 and cell["config"]["train"]["seed"] == 1 and cell["train"]["env_steps"] == 120
    assert cell["deploy_topk"] == 2 and cell["run_dir"] == "runs/sac-only-seed1" and cell["train_id"] == "sac-only"
    assert [(e["scenario"], e["seed"]) for e in cell["test"]["episodes"]] == [(0, 0), (1, 1)]
    assert all(e["max_steps"] == 30 for e in cell["test"]["episodes"])
    assert json.loads((out / "cells" / "donothing.json").read_text())["train"] is None



def test_cells_run_in_worker_processes_give_the_same_figures(finished, tmp_path: Path) -> None:
    path, _, sequential = finished
    result = ex.run_experiment(ex.load_experiment(path), tmp_path / "out", progress=False, jobs=2)
    assert sorted(result["ran"]) == sorted(sequential["ran"])

    def episodes(res: dict) -> dict:
        return {c["cell"]: [(e["steps_survived"], round(e["cumulative_reward"], 6)) for e in c["test"]["episodes"]]
                for c in res["cells"]}

    assert episodes(result) == episodes(sequential)
    assert [c["cell"] for c in result["cells"]] == [c["cell"] for c in sequential["cells"]]
    # One training per seed, shared by its two deployments, in the workers too.
    for seed in (0, 1):
        alone, top2 = (json.loads((tmp_path / "out" / "cells" / f"sac-only-{v}-seed{seed}.json").read_text())
                       for v in ("alone", "top2"))
        assert alone["train"] == top2["train"] and alone["train"]["resumed"] is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_exit_when_the_experiment_process_is_killed(tmp_path: Path) -> None:
    """SIGKILL on the parent (no Ctrl-C reaching the group): its workers must not go on writing cells."""
    import time

    from process_fixtures import assert_children_exit_with_parent

    path = write_experiment(tmp_path / "tiny.toml", steps=4000, seeds="[0, 1]")
    code = ("import sys; from ace_hybrid import experiment as ex; "
            f"ex.run_experiment(ex.load_experiment({str(path)!r}), {str(tmp_path / 'out')!r}, progress=False, jobs=2)")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    try:
        workers: list[int] = []
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            out = subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout
            workers = [int(w) for w in out.split() if _cmdline(int(w)).find("spawn_main") >= 0]
        assert len(workers) == 2, "the workers did not start"
        assert_children_exit_with_parent(parent, workers, timeout=20)
    finally:
        if parent.poll() is None:
            parent.kill()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_deploy_topk_rows_test_one_training_each(finished) -> None:
    _, out, result = finished
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["sac-only-seed0", "sac-only-seed1"]
    rows = {r["id"]: r for r in result["rows"]}
    assert rows["sac-only-alone"]["name"] == "SAC-only (policy alone)" and rows["sac-only-alone"]["deploy_topk"] == 0
    assert rows["sac-only-top2"]["name"] == "SAC-only + top-2 check" and rows["sac-only-top2"]["deploy_topk"] == 2
    for seed in (0, 1):
        alone, top2 = (json.loads((out / "cells" / f"sac-only-{v}-seed{seed}.json").read_text())
                       for v in ("alone", "top2"))
        assert alone["train"] == top2["train"] and alone["train"]["resumed"] is False  # trained once, not resumed
        assert alone["train_fingerprint"] == top2["train_fingerprint"]
        assert alone["fingerprint"] != top2["fingerprint"]
    # The check simulates do nothing and the 2 most likely actions per decision; the policy alone simulates nothing
    # (what either row counts beyond that is the safe rule's).
    sims = {k: rows[k]["metrics"]["simulations_per_decision"]["value"] for k in ("sac-only-alone", "sac-only-top2")}
    assert sims["sac-only-alone"] == 0.0 and 1.0 < sims["sac-only-top2"] <= 3.0
    every = {k: rows[k]["metrics"]["all_simulations_per_decision"]["value"] for k in sims}
    assert all(every[k] >= sims[k] for k in sims)
    # What each chose: the share of decisions that played something other than do-nothing, in the table.
    acting = {k: rows[k]["metrics"]["acting_share"]["value"] for k in sims}
    assert all(0.0 <= v <= 1.0 for v in acting.values()) and "Decisions that act" in (out / "results.md").read_text()
    assert ("sac-only-top2", "sac-only-alone", "the top-k check's share") in [
        (c["a"], c["b"], c["why"]) for c in result["comparisons"]]


def test_table_values_are_pooled_over_episodes_with_bootstrap_intervals(finished) -> None:
    _, out, _ = finished
    cells = [json.loads((out / "cells" / f"sac-only-top2-seed{k}.json").read_text()) for k in (0, 1)]
    episodes = [e for c in cells for e in c["test"]["episodes"]]
    survival = sum(e["steps_survived"] for e in episodes) / sum(e["max_steps"] for e in episodes)
    reward = np.mean([e["cumulative_reward"] for e in episodes])
    results = json.loads((out / "results.json").read_text())
    assert results["bootstrap"]["draws"] == ex.BOOTSTRAP_DRAWS and results["bootstrap"]["seed"] == ex.BOOTSTRAP_SEED
    sac = next(r for r in results["rows"] if r["id"] == "sac-only-top2")
    assert sac["n"] == 2 and sac["seeds"] == [0, 1]
    assert sac["episodes"]["steps_survived"] == [[e["steps_survived"] for e in c["test"]["episodes"]] for c in cells]
    stat = sac["metrics"]["survival_rate"]
    assert stat["value"] == pytest.approx(survival, abs=1e-12)
    assert stat["lo"] <= stat["value"] <= stat["hi"]
    assert stat["values"] == [c["test"]["totals"]["survival_rate"] for c in cells]
    assert sac["metrics"]["episode_reward"]["value"] == pytest.approx(reward, rel=1e-9)
    assert sac["metrics"]["env_steps"]["mean"] == 120 and sac["metrics"]["llm_calls"]["mean"] is None
    # Recomputed from results.json alone, the intervals come out the same.
    resample = ex.Resample.draw(results["seeds"], len(results["test_pairs"]))
    assert ex.interval(resample.statistic(sac, "survival_rate")[1]) == (stat["lo"], stat["hi"])
    nothing = next(r for r in results["rows"] if r["id"] == "donothing")
    assert nothing["n"] == 1 and nothing["seeds"] == [None] and len(nothing["episodes"]["max_steps"][0]) == 2
    table = (out / "results.md").read_text()
    assert f"Made by `ace-hybrid experiment --config {results['experiment_file']} --out {out}`" in table
    line = next(x for x in table.splitlines() if x.startswith("| SAC-only + top-2 check |"))
    assert f"| 2 × 2 | {survival:.1%} [{stat['lo']:.1%}, {stat['hi']:.1%}] |" in line
    assert "## Paired differences in survival" in table
    primary, exploratory = table.split("### Primary comparisons (Holm)")[1].split("### Exploratory (not corrected)")
    assert "| SAC-only (policy alone) | DoNothing |" in primary and "| p (Holm) |" in primary
    assert "| SAC-only + top-2 check | DoNothing | against doing nothing |" in exploratory
    assert "| SAC-only (policy alone) | DoNothing |" not in exploratory  # a primary is not repeated uncorrected
    first = results["comparisons"][0]
    assert first["primary"] and (first["a"], first["b"]) == ("sac-only-alone", "donothing")
    assert first["p_holm"] == first["p"] and not any(c["primary"] for c in results["comparisons"][1:])
    csv_lines = (out / "results.csv").read_text().splitlines()
    header, sac_line = csv_lines[0].split(","), next(x for x in csv_lines if x.startswith("sac-only-top2,")).split(",")
    assert float(sac_line[header.index("survival_rate")]) == pytest.approx(survival, abs=1e-12)
    assert float(sac_line[header.index("survival_rate_hi")]) == pytest.approx(stat["hi"], abs=1e-12)


def test_a_second_run_of_the_command_reruns_nothing(finished) -> None:
    path, out, _ = finished
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    checkpoint = (out / "runs" / "sac-only-seed0" / "checkpoint.pt").stat().st_mtime_ns
    proc = subprocess.run([sys.executable, "-m", "ace_hybrid.cli", "experiment", "--config", str(path), "--out",
                           str(out), "--no-progress", "--no-report"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 cell(s) run, 5 reused" in proc.stdout and "| SAC-only (policy alone) | 2 × 2 |" in proc.stdout
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")} == stamps
    assert (out / "runs" / "sac-only-seed0" / "checkpoint.pt").stat().st_mtime_ns == checkpoint


def test_a_missing_sibling_cell_reuses_the_training_of_the_other(finished, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path, out, _ = finished
    import shutil

    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    (copy / "cells" / "sac-only-alone-seed1.json").unlink()

    def no_training(*args, **kwargs):
        raise AssertionError("the run was trained again")

    monkeypatch.setattr(ex.cells, "train_cell", no_training)
    result = ex.run_experiment(ex.load_experiment(path, rows=["sac-only-alone"], seeds=[1]), copy, progress=False)
    assert result["ran"] == ["sac-only-alone-seed1"]
    assert result["cells"][0]["train"] == json.loads((copy / "cells" / "sac-only-top2-seed1.json").read_text())["train"]
    assert result["command"].endswith("--rows sac-only-alone --seeds 1")


def test_changed_settings_do_not_silently_reuse_finished_cells(finished) -> None:
    path, out, _ = finished
    spec = ex.load_experiment(path, ["train.total_env_steps=100"])
    with pytest.raises(ValueError, match=r"cells/donothing.json was made with another configuration"):
        ex.run_experiment(spec, out, progress=False)


def test_a_renamed_configuration_key_leaves_finished_cells_and_runs_valid(finished, tmp_path: Path) -> None:
    """Fingerprints hash renamed keys under their first names, and a run whose config.json predates a rename is
    still the same run: renaming replay.llm_capacity makes no experiment rerun anything."""
    path, out, _ = finished
    import shutil

    cfg = ex.load_experiment(path).row_config(ex.load_experiment(path).rows[1], 0)
    assert "llm_capacity" in ex.cells._settings(cfg)["replay"]  # what fingerprints hash
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    saved = copy / "runs" / "sac-only-seed0" / "config.json"
    old = json.loads(saved.read_text())
    old["replay"]["llm_capacity"] = old["replay"].pop("validated_capacity")  # as written before the rename
    saved.write_text(json.dumps(old))
    for cell in ("sac-only-alone-seed0", "sac-only-top2-seed0"):  # no sibling to reuse: the run itself is checked
        (copy / "cells" / f"{cell}.json").unlink()
    result = ex.run_experiment(ex.load_experiment(path, rows=["sac-only-alone"], seeds=[0]), copy, progress=False)
    assert result["ran"] == ["sac-only-alone-seed0"] and result["cells"][0]["train"]["resumed"]


def test_an_added_configuration_key_at_its_default_leaves_finished_cells_and_runs_valid(finished,
                                                                                       tmp_path: Path) -> None:
    """env.start_spread came after runs were saved: at its default (0) a fingerprint leaves it out and a run whose
    config.json lacks it is the same run; at another value it is a different configuration."""
    path, out, _ = finished
    import shutil

    spec = ex.load_experiment(path)
    cfg = spec.row_config(spec.rows[1], 0)
    assert "start_spread" not in ex.cells._settings(cfg)["env"]
    spread = ex.load_experiment(path, ["env.start_spread=50"])
    assert ex.cells._settings(spread.row_config(spread.rows[1], 0))["env"]["start_spread"] == 50
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    saved = copy / "runs" / "sac-only-seed0" / "config.json"
    old = json.loads(saved.read_text())
    del old["env"]["start_spread"]  # as written before the key was added
    saved.write_text(json.dumps(old))
    (copy / "cells" / "sac-only-alone-seed0.json").unlink()
    (copy / "cells" / "sac-only-top2-seed0.json").unlink()
    result = ex.run_experiment(ex.load_experiment(path, rows=["sac-only-alone"], seeds=[0]), copy, progress=False)
    assert result["ran"] == ["sac-only-alone-seed0"] and result["cells"][0]["train"]["resumed"]
    for cell in ("sac-only-alone-seed0", "sac-only-top2-seed0"):
        (copy / "cells" / f"{cell}.json").unlink(missing_ok=True)
    with pytest.raises(ValueError, match=r"another configuration \(env.start_spread: (0|None) in the run, 50 now\)"):
        ex.run_experiment(ex.load_experiment(path, ["env.start_spread=50"], rows=["sac-only-alone"], seeds=[0]),
                          copy, progress=False)


def test_on_validation_tests_every_row_apart_and_reuses_the_trained_runs(finished, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from ace_hybrid.cli import main

    path, out, _ = finished
    copy = shutil.copytree(out, tmp_path / "out")
    validation = tmp_path / "tiny.toml"
    pairs = "test_pairs = [[0, 0], [1, 1]]"
    validation.write_text(path.read_text().replace(pairs, f"{pairs}\nvalidation_pairs = [[0, 2], [1, 3]]"))
    stamps = {p.name: p.stat().st_mtime_ns for p in [*(copy / "cells").glob("*.json"), copy / "results.json",
                                                     copy / "results.md", copy / "results.csv"]}

    def no_training(*args, **kwargs):
        raise AssertionError("the run was trained again")

    monkeypatch.setattr(ex.cells, "train_cell", no_training)
    assert main(["experiment", "--config", str(validation), "--out", str(copy), "--on", "validation",
                 "--no-progress"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in [*(copy / "cells").glob("*.json"), copy / "results.json",
                                                   copy / "results.md", copy / "results.csv"]} == stamps
    assert not (copy / "report-validation.md").exists()
    results = json.loads((copy / "results-validation.json").read_text())
    assert results["on"] == "validation" and results["pairs"] == [[0, 2], [1, 3]]
    assert results["command"].endswith("--on validation")
    assert sorted(p.name for p in (copy / "cells-validation").glob("*.json")) == sorted(
        p.name for p in (copy / "cells").glob("*.json"))
    cell = json.loads((copy / "cells-validation" / "sac-only-top2-seed1.json").read_text())
    assert [(e["scenario"], e["seed"]) for e in cell["test"]["episodes"]] == [(0, 2), (1, 3)]
    assert cell["train"] == json.loads((copy / "cells" / "sac-only-top2-seed1.json").read_text())["train"]
    text = (copy / "results-validation.md").read_text()
    assert text.startswith("# tiny (on the validation pairs)") and "2 validation episodes (scenario, seed)" in text
    # The test results are reused as they were: the validation pairs are not part of a test cell's fingerprint.
    assert ex.run_experiment(ex.load_experiment(validation), copy, progress=False)["ran"] == []


def test_cluster_scenario_resamples_whole_scenarios_in_the_tables_without_playing_again(
        finished, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    path, out, _ = finished
    clustered = tmp_path / "clustered.toml"
    clustered.write_text(path.read_text().replace("test_max_steps = 30", 'test_max_steps = 30\ncluster = "scenario"'))
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    monkeypatch.setattr(ex.cells, "train_cell", lambda *a, **k: pytest.fail("the run was trained again"))
    spec = ex.load_experiment(clustered)
    assert spec.cluster == "scenario" and spec.clusters == [0, 1] and ex.load_experiment(path).clusters is None
    result = ex.run_experiment(spec, copy, progress=False)
    assert result["ran"] == []  # statistics only: every cell is reused
    results = json.loads((copy / "results.json").read_text())
    assert results["bootstrap"]["cluster"] == "scenario" and "resampling whole scenarios" in results["setup"]
    expected = ex.compare_rows(result["rows"], spec.seeds, 2, primaries=spec.primaries, clusters=[0, 1])
    assert [c["lo"] for c in result["comparisons"]] == [c["lo"] for c in expected]
    for bad in ('"week"', "true"):
        clustered.write_text(path.read_text().replace("test_max_steps = 30", f"test_max_steps = 30\ncluster = {bad}"))
        with pytest.raises(ValueError, match=r"cluster = .* must be one of \('pair', 'scenario'\)"):
            ex.load_experiment(clustered)


def test_validation_pairs_are_disjoint_from_test_selection_and_training(tmp_path: Path) -> None:
    def load(pairs: str, on: str = "test"):
        path = write_experiment(tmp_path / "v.toml", extra=f"validation_pairs = {pairs}" if pairs else "")
        return ex.load_experiment(path, on=on)

    assert load("[[0, 2], [1, 3]]", on="validation").pairs == [(0, 2), (1, 3)]
    with pytest.raises(ValueError, match=r"test pairs \[0, 0\], \[1, 1\] are also in validation_pairs"):
        load("[[1, 1], [0, 0], [0, 7]]")
    with pytest.raises(ValueError, match=r"validation pair \[2, 0\] is also in env.eval_pairs \(row 'DoNothing': "
                                         r"they choose best.pt\)"):
        load("[[0, 3], [2, 0]]")
    with pytest.raises(ValueError, match=r"validation pair \[1, 1001\] may be training episode 1 of row"):
        load("[[1, 1001]]")
    with pytest.raises(ValueError, match=r"validation_pairs \[0, 3\] appear more than once"):
        load("[[0, 3], [0, 3]]")
    with pytest.raises(ValueError, match=r"--on validation: v.toml has no validation_pairs"):
        load("", on="validation")
    with pytest.raises(ValueError, match=r"on = 'train' is not one of test, validation"):
        load("", on="train")


def test_maskable_ppo_row_trains_through_the_runner_and_is_tested_like_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sb3_contrib")
    from ace_hybrid.training import ppo as ppo_module

    path = write_experiment(tmp_path / "ppo.toml", steps=300, seeds="[0]",
                            extra='primary = [["each trained row (policy alone)", "DoNothing"]]', rows="""
[[rows]]
name = "DoNothing"
kind = "do-nothing"

[[rows]]
name = "PPO"
kind = "maskable-ppo"
set = ["env.action_set=tutor:5", "env.action_set_states=20"]
ppo = { n_steps = 32, batch_size = 16, n_epochs = 2, hidden = [32] }
deploy_topk = [0, 2]
""")
    out = tmp_path / "out"
    result = ex.run_experiment(ex.load_experiment(path), out, progress=False)
    assert sorted(result["ran"]) == ["donothing", "ppo-alone-seed0", "ppo-top2-seed0"]
    alone, top2 = (json.loads((out / "cells" / f"ppo-{v}-seed0.json").read_text()) for v in ("alone", "top2"))
    train = alone["train"]
    assert train == top2["train"] and train["resumed"] is False  # one training, tested twice
    # The budget counts grid steps (a decision and the safe rule's steps after it may pass it, within one episode).
    assert 300 <= train["env_steps"] < 300 + 120 and 32 <= train["decisions"] <= train["env_steps"]
    assert train["updates"] > 0 and train["episodes"] >= 1
    state = ppo_module.read_state(out / "runs" / "ppo-seed0")
    assert state["settings"]["n_steps"] == 32 and state["config"]["train"]["seed"] == 0
    model = (out / "runs" / "ppo-seed0" / ppo_module.MODEL_FILE)
    assert model.is_file() and ex.cells.finished_model("maskable-ppo") == ppo_module.STATE_FILE
    assert 2 <= len(state["action_set"]) < 100  # the run's tutor:5 set: do nothing, reconnections, 5 more
    for cell in (alone, top2):
        assert [(e["scenario"], e["seed"]) for e in cell["test"]["episodes"]] == [(0, 0), (1, 1)]
    rows = {r["id"]: r for r in result["rows"]}
    assert rows["ppo-alone"]["metrics"]["simulations_per_decision"]["value"] == 0.0
    assert 1.0 <= rows["ppo-top2"]["metrics"]["simulations_per_decision"]["value"] <= 3.0
    assert result["comparisons"][0]["a"] == "ppo-alone" and result["comparisons"][0]["primary"]
    # A finished model is reused, not trained again.
    for name in ("ppo-alone-seed0.json", "ppo-top2-seed0.json"):
        (out / "cells" / name).unlink()

    def no_training(*args, **kwargs):
        raise AssertionError("the finished model was trained again")

    monkeypatch.setattr(ppo_module, "train_maskable_ppo", no_training)
    again = ex.run_experiment(ex.load_experiment(path), out, progress=False)
    cell = next(c for c in again["cells"] if c["cell"] == "ppo-alone-seed0")
    def played(c: dict) -> list:
        return [(e["steps_survived"], e["cumulative_reward"], e["decisions"]) for e in c["test"]["episodes"]]

    assert cell["train"]["resumed"] is True and played(cell) == played(alone)  # the same model, the same play


def test_ppo_settings_are_checked_naming_the_row_and_key(tmp_path: Path) -> None:
    from ace_hybrid.experiment.ppo_settings import PPOSettings

    assert PPOSettings().n_steps % PPOSettings().batch_size == 0
    ppo_row = '[[rows]]\nname = "PPO"\nkind = "maskable-ppo"\n'
    for table, message in (("{ n_step = 64 }", r"rows\[0\] \(row 'PPO'\)\.ppo: unknown key\(s\) 'n_step'; valid keys: "
                                               r"n_steps, batch_size"),
                           ("{ n_steps = 100, batch_size = 32 }", r"ppo.n_steps = 100 must be a multiple of "
                                                                  r"ppo.batch_size = 32"),
                           ("{ learning_rate = -1.0 }", r"ppo.learning_rate = -1.0 out of range")):
        with pytest.raises(ValueError, match=message):
            ex.load_experiment(write_experiment(tmp_path / "p.toml", rows=ppo_row + f"ppo = {table}\n"))
    with pytest.raises(ValueError, match=r"rows\[0\]\.ppo \(row 'SAC'\): kind 'sac-only' is not maskable-ppo"):
        ex.load_experiment(write_experiment(tmp_path / "p.toml", rows='[[rows]]\nname = "SAC"\nkind = "sac-only"\n'
                                                                       'ppo = { n_steps = 64 }\n'))
    with pytest.raises(ValueError, match=r"row 'PPO' \(kind maskable-ppo\) has train.tutor_steps = 40"):
        ex.load_experiment(write_experiment(tmp_path / "p.toml", rows=ppo_row + 'set = ["train.tutor_steps=40"]\n'))
    spec = ex.load_experiment(write_experiment(tmp_path / "p.toml", rows=ppo_row))
    assert spec.rows[0].ppo == PPOSettings() and spec.row_config(spec.rows[0], 0).llm.backend == "none"


class Interrupted(Exception):
    pass


def test_a_half_done_training_run_is_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_experiment(tmp_path / "tiny.toml", steps=160, seeds="[3]", rows="""
[[rows]]
name = "SAC-only"
kind = "sac-only"
""")
    original = train_module.on_schedule

    def stop_midway(run, since=None):
        if run.counters.env_steps >= 80:
            raise Interrupted
        original(run, since)

    monkeypatch.setattr(train_module, "on_schedule", stop_midway)
    spec = ex.load_experiment(path)
    with pytest.raises(Interrupted):
        ex.run_experiment(spec, tmp_path / "out", progress=False)
    run_dir = tmp_path / "out" / "runs" / "sac-only-seed3"
    stopped_at = load_checkpoint_file(run_dir / "checkpoint.pt")["counters"]["env_steps"]
    assert 50 <= stopped_at < 160 and not (tmp_path / "out" / "cells" / "sac-only-seed3.json").exists()
    monkeypatch.setattr(train_module, "on_schedule", original)
    result = ex.run_experiment(spec, tmp_path / "out", progress=False)
    cell = result["cells"][0]
    assert result["ran"] == ["sac-only-seed3"] and cell["train"]["resumed"] is True
    assert cell["train"]["env_steps"] == 160


def test_llm_only_row_tests_the_lac_agent_from_its_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ace_hybrid.grid.agents import DoNothingAgent

    seen = []

    def make_lac_agent(env, cfg):
        seen.append(cfg)
        return DoNothingAgent(env.action_space, cfg.env.threshold)

    fake = types.ModuleType("ace_hybrid.llm.lac_agent")
    fake.make_lac_agent = make_lac_agent
    monkeypatch.setitem(sys.modules, "ace_hybrid.llm.lac_agent", fake)
    path = write_experiment(tmp_path / "lac.toml", extra='ace_set = ["ace.lac_alpha=2.5"]', rows="""
[[rows]]
name = "LLM-only (LAC)"
id = "llm-lac"
kind = "lac"
""")
    result = ex.run_experiment(ex.load_experiment(path), tmp_path / "out", progress=False)
    assert len(seen) == 1 and seen[0].ace.lac_alpha == 2.5 and seen[0].env.threshold == 0.5
    cell = result["cells"][0]
    assert cell["cell"] == "llm-lac" and len(cell["test"]["episodes"]) == 2 and cell["metrics"]["env_steps"] is None


def test_bad_row_kind_fails_naming_it(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "bad.toml", rows='[[rows]]\nname = "SAC"\nkind = "sac"\n')
    with pytest.raises(ValueError, match=r"rows\[0\]\.kind = 'sac' \(row 'SAC'\) is not one of .*sac-only"):
        ex.load_experiment(path)
    for old, new in (("donothing", "'do-nothing'"), ("llm_lac", "'lac'"),
                     ("sac_only", "'sac-only' \\('expert-guided' for a row with train.tutor_steps > 0\\)")):
        path = write_experiment(tmp_path / "old.toml", rows=f'[[rows]]\nname = "X"\nkind = "{old}"\n')
        with pytest.raises(ValueError, match=rf"rows\[0\]\.kind = '{old}' \(row 'X'\) is now spelled {new}"):
            ex.load_experiment(path)
    with pytest.raises(ValueError, match=r"unknown row\(s\) 'ace'; rows of bad2.toml: donothing, sac-only, "
                                         r"sac-only-alone, sac-only-top2"):
        ex.load_experiment(write_experiment(tmp_path / "bad2.toml"), rows=["ace"])


def test_deploy_topk_expands_a_training_row_and_fails_naming_the_row(tmp_path: Path) -> None:
    spec = ex.load_experiment(write_experiment(tmp_path / "ok.toml"))
    assert [(r.id, r.name, r.topk, r.train_id) for r in spec.rows] == [
        ("donothing", "DoNothing", None, "donothing"),
        ("sac-only-alone", "SAC-only (policy alone)", 0, "sac-only"),
        ("sac-only-top2", "SAC-only + top-2 check", 2, "sac-only")]
    assert [r.id for r in ex.load_experiment(tmp_path / "ok.toml", rows=["sac-only"]).rows] == [
        "sac-only-alone", "sac-only-top2"]
    assert [r.id for r in ex.load_experiment(tmp_path / "ok.toml", rows=["sac-only-top2"]).rows] == ["sac-only-top2"]
    for bad, message in (("[0, 0]", r"deploy_topk = \[0, 0\] \(row 'SAC'\) must be a non-empty list of distinct"),
                         ("[]", r"deploy_topk = \[\] \(row 'SAC'\)"), ("[-1]", r"deploy_topk = \[-1\]"),
                         ("4", r"deploy_topk = 4")):
        _refuses_sac_row(tmp_path, f"deploy_topk = {bad}", message)
    path = write_experiment(tmp_path / "bad.toml", rows='[[rows]]\nname = "Greedy"\nkind = "greedy"\n'
                                                       'deploy_topk = [0, 8]\n')
    with pytest.raises(ValueError, match=r"rows\[0\]\.deploy_topk \(row 'Greedy'\): kind 'greedy' has no policy"):
        ex.load_experiment(path)
    path = write_experiment(tmp_path / "bad.toml", rows='[[rows]]\nname = "SAC"\nkind = "sac-only"\n'
                                                       'deploy_topk = [0]\n\n[[rows]]\nname = "SAC alone"\n'
                                                       'id = "sac-alone"\nkind = "sac-only"\n')
    with pytest.raises(ValueError, match=r"row id\(s\) sac-alone appear more than once"):
        ex.load_experiment(path)


def _one_row_file(tmp_path: Path, keys: str, name: str = "SAC") -> ex.ExperimentSpec:
    """An experiment file whose one row, ``name`` (sac-only), has these extra keys, loaded."""
    return ex.load_experiment(write_experiment(tmp_path / "ok.toml",
                                               rows=f'[[rows]]\nname = "{name}"\nkind = "sac-only"\n{keys}\n'))


def test_deploy_shortlist_adds_a_row_per_check_and_fails_naming_the_row(tmp_path: Path) -> None:
    spec = _one_row_file(tmp_path, "deploy_topk = [0, 4]\ndeploy_shortlist = [0, 2]")
    assert [(r.id, r.name, r.topk, r.shortlist, r.train_id) for r in spec.rows] == [
        ("sac-alone", "SAC (policy alone)", 0, None, "sac"),
        ("sac-top4", "SAC + top-4 check", 4, 0, "sac"),
        ("sac-top4-s2", "SAC + top-4 check, 2 from the shortlist", 4, 2, "sac")]
    plain, mixed = (next(r for r in spec.rows if r.id == i) for i in ("sac-top4", "sac-top4-s2"))
    cfg = spec.row_config(plain, 0)
    fingerprint = ex.cells.fingerprint
    assert fingerprint(spec, plain, cfg) != fingerprint(spec, mixed, cfg)
    # The plain check's cells made before deploy_shortlist existed stay valid.
    assert fingerprint(spec, plain, cfg) == fingerprint(spec, dataclasses.replace(plain, shortlist=None), cfg)
    for bad, message in (("[4]", r"deploy_shortlist = \[4\] \(row 'SAC'\) must be a non-empty list of distinct "
                                 r"integers in \[0, 3\]"),
                         ("[1, 1]", r"deploy_shortlist = \[1, 1\]"), ("2", r"deploy_shortlist = 2")):
        _refuses_sac_row(tmp_path, f"deploy_topk = [0, 4]\ndeploy_shortlist = {bad}", message)
    _refuses_sac_row(tmp_path, "deploy_topk = [0]\ndeploy_shortlist = [0, 1]",
                     r"deploy_shortlist \(row 'SAC'\) needs a top-k check")


def _one_run_two_cells(spec: ex.ExperimentSpec, alone: ex.RowSpec, restricted: ex.RowSpec) -> None:
    """A restricted deployment of a policy alone is a cell of its own, from the same training run."""
    cfg = spec.row_config(alone, 0)
    assert ex.cells.fingerprint(spec, alone, cfg) != ex.cells.fingerprint(spec, restricted, cfg)
    assert ex.cells.training_fingerprint(cfg) == ex.cells.training_fingerprint(spec.row_config(restricted, 0))


def test_deploy_among_adds_the_policy_alone_among_k_and_fails_naming_the_row(tmp_path: Path) -> None:
    spec = _one_row_file(tmp_path, 'id = "sac"\ndeploy_topk = [0, 4]\ndeploy_among = [8, 3]', name="SAC (scratch)")
    assert [(r.id, r.name, r.topk, r.among, r.train_id) for r in spec.rows] == [
        ("sac-alone", "SAC (scratch, policy alone)", 0, None, "sac"),
        ("sac-among8", "SAC (scratch, policy alone, among 8)", 0, 8, "sac"),
        ("sac-among3", "SAC (scratch, policy alone, among 3)", 0, 3, "sac"),
        ("sac-top4", "SAC (scratch) + top-4 check", 4, None, "sac")]
    _one_run_two_cells(spec, *spec.rows[:2])
    for bad, message in (("[1]", r"deploy_among = \[1\] \(row 'SAC'\) must be a non-empty list of distinct integers "
                                 r"in \[2, 1000\]"),
                         ("[8, 8]", r"deploy_among = \[8, 8\]"), ("8", r"deploy_among = 8")):
        _refuses_sac_row(tmp_path, f"deploy_topk = [0, 4]\ndeploy_among = {bad}", message)
    _refuses_sac_row(tmp_path, "deploy_topk = [4]\ndeploy_among = [8]",
                     r"deploy_among \(row 'SAC'\) restricts the policy alone: give deploy_topk with a 0")
    _refuses_sac_row(tmp_path, "deploy_among = [8]", r"deploy_among \(row 'SAC'\) restricts the policy alone")
    made = ex.comparisons_to_make([{"id": r.id, "kind": r.kind, "train_id": r.train_id, "deploy_topk": r.topk,
                                    "deploy_among": r.among, "budget": None} for r in spec.rows])
    assert [(a, b) for a, b, why in made if why == "the restriction's share"] == [("sac-among8", "sac-alone"),
                                                                                 ("sac-among3", "sac-alone")]
    assert ("sac-top4", "sac-alone", "the top-k check's share") in made
    # A run deployed among 8 by its own env.deploy_among is compared with rows restricted alike, and its check with
    # that policy alone.
    ace = [{"id": "ace-alone", "kind": "ace", "train_id": "ace", "deploy_topk": 0, "deploy_among": 8, "budget": None},
           {"id": "ace-top4", "kind": "ace", "train_id": "ace", "deploy_topk": 4, "deploy_among": None, "budget": None}]
    made = ex.comparisons_to_make([{"id": r.id, "kind": r.kind, "train_id": r.train_id, "deploy_topk": r.topk,
                                    "deploy_among": r.among, "budget": None} for r in spec.rows] + ace)
    assert ("ace-alone", "sac-among8", "against SAC-only") in made and ("ace-top4", "ace-alone",
                                                                         "the top-k check's share") in made
    assert not any(a == "ace-alone" and why == "the restriction's share" for a, _, why in made)


def test_deploy_sure_adds_the_policy_alone_where_it_is_sure_and_fails_naming_the_row(tmp_path: Path) -> None:
    spec = _one_row_file(tmp_path, 'id = "sac"\ndeploy_topk = [0, 4]\ndeploy_sure = [0.7, 0.5]', name="SAC (scratch)")
    assert [(r.id, r.name, r.topk, r.sure, r.train_id) for r in spec.rows] == [
        ("sac-alone", "SAC (scratch, policy alone)", 0, None, "sac"),
        ("sac-sure0.7", "SAC (scratch, policy alone, sure 0.7)", 0, 0.7, "sac"),
        ("sac-sure0.5", "SAC (scratch, policy alone, sure 0.5)", 0, 0.5, "sac"),
        ("sac-top4", "SAC (scratch) + top-4 check", 4, None, "sac")]
    _one_run_two_cells(spec, *spec.rows[:2])
    for bad in ("[1.0]", "[0]", "[0.7, 0.7]", "0.7", "[true]"):
        _refuses_sac_row(tmp_path, f"deploy_topk = [0, 4]\ndeploy_sure = {bad}",
                         rf"deploy_sure = {re.escape(bad.replace('true', 'True'))} \(row 'SAC'\) must be a non-empty "
                         r"list of distinct probabilities in \(0, 1\)")
    _refuses_sac_row(tmp_path, "deploy_topk = [4]\ndeploy_sure = [0.7]",
                     r"deploy_sure \(row 'SAC'\) gates the policy alone: give deploy_topk with a 0")
    made = _made_comparisons(spec, "deploy_sure", "sure")
    assert _restriction_shares(made) == [("sac-sure0.7", "sac-alone"), ("sac-sure0.5", "sac-alone")]
    assert ("sac-top4", "sac-alone", "the top-k check's share") in made


def test_deploy_threshold_adds_the_policy_alone_deciding_from_a_higher_rho(tmp_path: Path) -> None:
    spec = _one_row_file(tmp_path, 'id = "sac"\ndeploy_topk = [0, 4]\ndeploy_threshold = [0.95, 1]')
    threshold = spec.row_config(spec.rows[0], 0).env.threshold
    assert [(r.id, r.name, r.topk, r.threshold, r.train_id) for r in spec.rows] == [
        ("sac-alone", "SAC (policy alone)", 0, None, "sac"),
        ("sac-rho0.95", "SAC (policy alone, from rho 0.95)", 0, 0.95, "sac"),
        ("sac-rho1", "SAC (policy alone, from rho 1)", 0, 1.0, "sac"),
        ("sac-top4", "SAC + top-4 check", 4, None, "sac")]
    _one_run_two_cells(spec, *spec.rows[:2])
    for bad in ("[0]", "[6]", "[1.0, 1.0]", "1.0", "[true]"):
        _refuses_sac_row(tmp_path, f"deploy_topk = [0, 4]\ndeploy_threshold = {bad}",
                         rf"deploy_threshold = {re.escape(bad.replace('true', 'True'))} \(row 'SAC'\) must be a "
                         r"non-empty list of distinct max-rho levels in \(0, 5\]")
    _refuses_sac_row(tmp_path, "deploy_topk = [4]\ndeploy_threshold = [1.0]",
                     r"deploy_threshold \(row 'SAC'\) sets where the policy alone decides: give deploy_topk with a 0")
    # Under the row's own env.threshold the policy would decide in states it never trained in.
    _refuses_sac_row(tmp_path, f"deploy_topk = [0]\ndeploy_threshold = [{threshold / 2:g}]",
                     rf"deploy_threshold {threshold / 2:g} \(row 'SAC'\) is below its env.threshold {threshold:g}.*"
                     rf"valid: \[{threshold:g}, 5\]")
    made = _made_comparisons(spec, "deploy_threshold", "threshold")
    assert _restriction_shares(made) == [("sac-rho0.95", "sac-alone"), ("sac-rho1", "sac-alone")]


def _made_comparisons(spec: ex.ExperimentSpec, key: str, attr: str) -> list[tuple[str, str, str]]:
    """The declared comparisons of ``spec``'s rows, each row carrying its restriction ``key`` (RowSpec.``attr``)."""
    return ex.comparisons_to_make([{"id": r.id, "kind": r.kind, "train_id": r.train_id, "deploy_topk": r.topk,
                                    key: getattr(r, attr), "budget": None} for r in spec.rows])


def _restriction_shares(made: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    return [(a, b) for a, b, why in made if why == "the restriction's share"]


def _refuses_sac_row(tmp_path: Path, keys: str, message: str) -> None:
    """A file whose one row, "SAC" (sac-only), has these extra keys fails to load with ``message``."""
    path = write_experiment(tmp_path / "bad.toml", rows=f'[[rows]]\nname = "SAC"\nkind = "sac-only"\n{keys}\n')
    with pytest.raises(ValueError, match=message):
        ex.load_experiment(path)


def test_bad_config_key_fails_naming_the_row_and_key(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "bad.toml", rows='[[rows]]\nname = "SAC"\nkind = "sac-only"\n'
                                                       'set = ["sac.hiden=[8]"]\n')
    with pytest.raises(ValueError, match=r"row 'SAC': unknown configuration key 'sac.hiden'"):
        ex.load_experiment(path)
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'seed'"):
        ex.load_experiment(write_experiment(tmp_path / "bad2.toml", extra="seed = 3"))
    with pytest.raises(ValueError, match=r"row 'ACE' \(kind ace\) has llm.backend = 'none'"):
        ex.load_experiment(write_experiment(tmp_path / "bad3.toml", rows='[[rows]]\nname = "ACE"\nkind = "ace"\n'))


def test_expert_guided_rows_have_a_tutor_and_sac_only_rows_none(tmp_path: Path) -> None:
    guided = '[[rows]]\nname = "EG"\nkind = "expert-guided"\n'
    with pytest.raises(ValueError, match=r"row 'EG' \(kind expert-guided\) has train.tutor_steps = 0 and no "
                                         r"train.tutor_data: .*"
                                         r"train.tutor_steps=5000"):
        ex.load_experiment(write_experiment(tmp_path / "eg.toml", rows=guided))
    with pytest.raises(ValueError, match=r"row 'SAC' \(kind sac-only\) has train.tutor_steps = 40: .*use kind "
                                         r"expert-guided"):
        ex.load_experiment(write_experiment(tmp_path / "sac.toml", rows='[[rows]]\nname = "SAC"\nkind = "sac-only"\n'
                                                                         'set = ["train.tutor_steps=40"]\n'))
    with pytest.raises(ValueError, match=r"row 'SAC' \(kind sac-only\) has train.tutor_steps = 0 and "
                                         r"train.tutor_data = 'tutor-dir': .*use kind expert-guided"):
        ex.load_experiment(write_experiment(tmp_path / "sac2.toml", rows='[[rows]]\nname = "SAC"\nkind = "sac-only"\n'
                                                                          'set = ["train.tutor_data=tutor-dir"]\n'))
    spec = ex.load_experiment(write_experiment(tmp_path / "ok.toml", rows=guided + 'set = ["train.tutor_steps=40"]\n'))
    cfg = spec.row_config(spec.rows[0], 0)
    assert spec.rows[0].trains and cfg.train.tutor_steps == 40 and cfg.llm.backend == "none"


def test_test_pairs_must_be_held_out(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "leak.toml")
    text = path.read_text().replace("test_pairs = [[0, 0], [1, 1]]", "test_pairs = [[2, 0], [1, 1]]")
    path.write_text(text)
    with pytest.raises(ValueError, match=r"test pair \[2, 0\] is also in env.eval_pairs"):
        ex.load_experiment(path)
    path.write_text(text.replace("[[2, 0], [1, 1]]", "[[1, 1001]]"))
    with pytest.raises(ValueError, match=r"test pair \[1, 1001\] may be training episode 1"):
        ex.load_experiment(path)
    path.write_text(text.replace("[[2, 0], [1, 1]]", "[[0, 5], [1, 1], [0, 5]]"))
    with pytest.raises(ValueError, match=r"test pair\(s\) \[0, 5\] appear more than once"):
        ex.load_experiment(path)


def test_cli_help_lists_the_experiment_and_report_commands() -> None:
    from ace_hybrid.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    assert "experiment" in text and "report" in text
    sub = next(a for a in parser._actions if a.dest == "command").choices
    help_text = sub["experiment"].format_help()
    for flag in ("--config", "--out", "--set", "--rows", "--seeds", "--no-report", "--on"):
        assert flag in help_text


def _llm_fixtures():
    spec = importlib.util.spec_from_file_location("llm_fixtures", Path(__file__).with_name("llm_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("llm_fixtures", module)
    spec.loader.exec_module(module)
    return module


def test_llm_rows_with_a_tiny_real_model_fill_the_llm_columns(tmp_path: Path) -> None:
    model = _llm_fixtures().build_tiny_model(tmp_path / "tiny_lm")
    ace_set = ["llm.backend=transformers", f"llm.model_path={model}", "ace.critic=false", "ace.r_bar=0.3", "ace.ranker=llm",
               "ace.finetune_every=4", "ace.finetune_pairs=4", "ace.probe_size=2", "ace.validation_steps=6",
               "ace.max_llm_calls=20", "ace.candidates=4", "ace.max_rounds=2"]
    path = write_experiment(tmp_path / "ace.toml", steps=80, seeds="[0]", extra=f"ace_set = {json.dumps(ace_set)}",
                            rows="""
[[rows]]
name = "LLM-only (LAC)"
id = "llm-lac"
kind = "lac"

[[rows]]
name = "ACE"
kind = "ace"
""")
    result = ex.run_experiment(ex.load_experiment(path), tmp_path / "out", progress=False)
    write_report(tmp_path / "out")
    lac, ace = result["cells"]
    assert lac["test_llm"]["calls"] > 0 and lac["metrics"]["llm_calls"] is None
    llm = ace["train"]["llm"]
    assert 0 < llm["calls"] <= 20 and ace["metrics"]["llm_calls"] == llm["calls"]
    assert ace["metrics"]["llm_accepted"] == llm["accepted"] and ace["train"]["time_split"]["llm"] > 0
    line = next(x for x in result["markdown"].splitlines() if x.startswith("| ACE |"))
    assert f"| {llm['calls']:,} | {llm['accepted']:,} |" in line
    report = (tmp_path / "out" / "report.md").read_text()
    assert "figures/llm.png" in report and (tmp_path / "out" / "figures" / "llm.png").is_file()


# ----------------------------------------------------------------------------- bootstrap (known answers)


def synthetic_row(row_id: str, survived: list[list[int]], seeds: list[int | None], length: int = 100) -> dict:
    """A results.json row with the given steps survived per (seed, test pair), every episode ``length`` long."""
    survived_arr = np.asarray(survived, dtype=float)
    return {"id": row_id, "name": row_id, "kind": "sac-only" if seeds != [None] else "greedy", "train_id": row_id,
            "deploy_topk": None, "n": len(seeds), "seeds": seeds,
            "episodes": {"steps_survived": survived_arr.tolist(),
                         "max_steps": np.full_like(survived_arr, length).tolist(),
                         "cumulative_reward": survived_arr.tolist(), "decisions": np.ones_like(survived_arr).tolist(),
                         "simulations": np.zeros_like(survived_arr).tolist(),
                         "wall_time_s": np.ones_like(survived_arr).tolist()}}


def test_a_field_older_cells_lack_gives_no_figure_rather_than_a_wrong_one() -> None:
    resample = ex.Resample.draw([0], 2, draws=50)
    row = synthetic_row("a", [[50, 60]], [0])  # as results.json rows were before decision simulations were counted
    assert resample.statistic(row, "all_simulations_per_decision")[0] == 0.0
    value, draws = resample.statistic(row, "simulations_per_decision")
    assert value is None and np.isnan(draws).all()
    row["episodes"]["decision_simulations"] = [[4.0, float("nan")]]  # one cell of an older version among new ones
    assert resample.statistic(row, "simulations_per_decision")[0] is None
    episodes = [{"steps_survived": 5, "max_steps": 10, "cumulative_reward": 1.0, "decisions": 2, "simulations": 6,
                 "decision_simulations": None, "wall_time_s": 0.1}]
    metrics = ex.episode_metrics(episodes)
    assert metrics["simulations_per_decision"] is None and metrics["all_simulations_per_decision"] == 3.0


def test_identical_rows_have_a_difference_interval_at_zero() -> None:
    rng = np.random.default_rng(0)
    survived = rng.integers(0, 101, size=(3, 16)).tolist()
    resample = ex.Resample.draw([0, 1, 2], 16)
    c = ex.paired_difference(resample, synthetic_row("a", survived, [0, 1, 2]), synthetic_row("b", survived, [0, 1, 2]))
    assert c["difference"] == 0.0 and c["lo"] == 0.0 and c["hi"] == 0.0 and not c["separated"]
    assert c["pairs"] == 16 and c["seeds"] == 3


def test_a_row_that_always_survives_longer_separates() -> None:
    rng = np.random.default_rng(1)
    base = rng.integers(0, 80, size=(3, 16))
    better = base + rng.integers(1, 20, size=(3, 16))  # longer on every (seed, pair), by varying amounts
    resample = ex.Resample.draw([0, 1, 2], 16)
    c = ex.paired_difference(resample, synthetic_row("a", better.tolist(), [0, 1, 2]),
                             synthetic_row("b", base.tolist(), [0, 1, 2]))
    assert c["lo"] > 0 and c["separated"] and c["lo"] <= c["difference"] <= c["hi"]
    reverse = ex.paired_difference(resample, synthetic_row("b", base.tolist(), [0, 1, 2]),
                                   synthetic_row("a", better.tolist(), [0, 1, 2]))
    assert reverse["hi"] < 0 and reverse["separated"]


def test_a_difference_that_flips_with_the_pair_does_not_separate() -> None:
    a = [[100, 0] * 8] * 2
    b = [[0, 100] * 8] * 2  # same mean, better on the other half of the pairs
    c = ex.paired_difference(ex.Resample.draw([0, 1], 16), synthetic_row("a", a, [0, 1]),
                             synthetic_row("b", b, [0, 1]))
    assert c["difference"] == 0.0 and c["lo"] < 0 < c["hi"] and not c["separated"]


def test_a_difference_shared_within_weeks_is_wider_when_weeks_are_resampled_whole() -> None:
    # 4 weeks x 4 seeds: A is 40 points ahead on weeks 0-1 and 30 behind on weeks 2-3, the same on every seed.
    # Resampling pairs treats the 16 as independent; resampling weeks sees only 4 draws of the difference.
    weeks = [w for _ in range(4) for w in range(4)]
    a = [[60 if w < 2 else 20 for w in weeks]]
    b = [[20 if w < 2 else 50 for w in weeks]]
    by_pair = ex.paired_difference(ex.Resample.draw([], 16), synthetic_row("a", a, [None]),
                                   synthetic_row("b", b, [None]))
    clustered = ex.Resample.draw([], 16, clusters=weeks)
    assert (clustered.pair_counts.reshape(-1, 4, 4) == clustered.pair_counts[:, None, :4]).all()  # a week whole
    by_week = ex.paired_difference(clustered, synthetic_row("a", a, [None]), synthetic_row("b", b, [None]))
    assert by_week["difference"] == by_pair["difference"] == pytest.approx(0.05)
    assert by_week["hi"] - by_week["lo"] > 1.5 * (by_pair["hi"] - by_pair["lo"])
    with pytest.raises(ValueError, match="3 cluster labels for 16 test pairs"):
        ex.Resample.draw([], 16, clusters=[0, 1, 2])


def test_pair_level_interval_matches_the_binomial_quantiles() -> None:
    # A baseline surviving 8 of 16 equally long pairs in full and the rest not at all: the resampled survival is
    # Binomial(16, 1/2) / 16, whose 2.5% and 97.5% quantiles are 4/16 and 12/16.
    row = synthetic_row("a", [[100] * 8 + [0] * 8], [None])
    value, draws = ex.Resample.draw([0, 1, 2], 16).statistic(row, "survival_rate")
    assert value == 0.5 and ex.interval(draws) == (0.25, 0.75)
    assert draws.shape == (ex.BOOTSTRAP_DRAWS,)


def test_seed_level_is_resampled_for_training_rows() -> None:
    # Seed 0 survives every pair, seed 1 none: resampling the two seeds gives 0, 1/2 or 1 with chances 1/4, 1/2, 1/4.
    row = synthetic_row("a", [[100] * 16, [0] * 16], [0, 1])
    value, draws = ex.Resample.draw([0, 1], 16).statistic(row, "survival_rate")
    assert value == 0.5 and ex.interval(draws) == (0.0, 1.0)
    assert abs(np.mean(draws == 0.5) - 0.5) < 0.02


def test_bootstrap_draws_are_fixed_by_their_seed() -> None:
    row = synthetic_row("a", np.random.default_rng(2).integers(0, 101, size=(2, 16)).tolist(), [0, 1])
    first = ex.Resample.draw([0, 1], 16).statistic(row, "survival_rate")[1]
    assert np.array_equal(first, ex.Resample.draw([0, 1], 16).statistic(row, "survival_rate")[1])
    assert not np.array_equal(first, ex.Resample.draw([0, 1], 16, seed=1).statistic(row, "survival_rate")[1])


def test_comparisons_are_declared_by_kind_not_by_results() -> None:
    rows = [dict(synthetic_row("greedy", [[50] * 4], [None]), kind="greedy"),
            dict(synthetic_row("nothing", [[50] * 4], [None]), kind="do-nothing"),
            dict(synthetic_row("tutor", [[50] * 4], [None]), kind="tutor"),
            dict(synthetic_row("sac-alone", [[50] * 4], [0]), train_id="sac", deploy_topk=0),
            dict(synthetic_row("sac-top8", [[50] * 4], [0]), train_id="sac", deploy_topk=8),
            dict(synthetic_row("eg-top8", [[50] * 4], [0]), kind="expert-guided", train_id="eg", deploy_topk=8),
            dict(synthetic_row("ace-top8", [[50] * 4], [0]), kind="ace", train_id="ace", deploy_topk=8),
            dict(synthetic_row("ace-no-actor-alone", [[50] * 4], [0]), kind="ace", train_id="ace-no-actor",
                 deploy_topk=0),
            dict(synthetic_row("ace-no-actor-top8", [[50] * 4], [0]), kind="ace", train_id="ace-no-actor",
                 deploy_topk=8)]
    made = ex.comparisons_to_make(rows)
    assert ("sac-top8", "sac-alone", "the top-k check's share") in made
    assert ("ace-top8", "sac-top8", "against SAC-only") in made and ("eg-top8", "sac-top8", "against SAC-only") in made
    assert ("ace-top8", "eg-top8", "against expert-guided RL") in made
    assert ("ace-top8", "greedy", "against the greedy expert") in made
    assert {a for a, b, why in made if why == "against the tutor"} == {"sac-top8", "eg-top8", "ace-top8",
                                                                      "ace-no-actor-top8"}
    assert {a for a, b, why in made if why == "against doing nothing"} == {"sac-alone", "sac-top8", "eg-top8",
                                                                            "ace-top8", "ace-no-actor-alone",
                                                                            "ace-no-actor-top8"}
    assert all(b == "nothing" for _, b, why in made if why == "against doing nothing")
    # An ablation is compared with the first ACE row deployed the same way (this one has no ACE row alone).
    assert [(a, b) for a, b, why in made if why == "against ACE"] == [("ace-no-actor-top8", "ace-top8")]
    assert not any(a == b for a, b, _ in made) and not any(b == "ace-no-actor-top8" for _, b, _ in made)


def test_a_check_partly_from_the_shortlist_is_compared_with_rows_deployed_the_same_way() -> None:
    # The ACE file row has deploy_shortlist = [0, 3] (its plain check: shortlist 0), the SAC-only one none (None):
    # both plain checks are one deployment; the mixed check has no SAC-only row deployed its way.
    rows = [dict(synthetic_row("sac-top7", [[50] * 4], [0]), train_id="sac", deploy_topk=7),
            dict(synthetic_row("ace-top7", [[50] * 4], [0]), kind="ace", train_id="ace", deploy_topk=7,
                 deploy_shortlist=0),
            dict(synthetic_row("ace-top7-s3", [[50] * 4], [0]), kind="ace", train_id="ace", deploy_topk=7,
                 deploy_shortlist=3)]
    made = ex.comparisons_to_make(rows)
    assert [(a, b) for a, b, why in made if why == "against SAC-only"] == [("ace-top7", "sac-top7")]


def test_p_value_is_twice_the_smaller_tail_of_the_draws() -> None:
    assert ex.p_value(np.array([-1.0, 1.0, 2.0, 3.0])) == 0.5  # P(<= 0) = 1/4
    assert ex.p_value(np.array([0.0, 0.0])) == 1.0 and ex.p_value(np.array([1.0, 2.0])) == 0.0
    assert ex.p_value(np.array([np.nan, -1.0, -2.0, 1.0])) == pytest.approx(2 / 3)
    assert ex.p_value(np.array([np.nan])) is None


def test_holm_steps_down_and_counts_comparisons_without_data() -> None:
    # Sorted 0.01, 0.03, 0.04 of m = 3: 0.03, 0.06, then max(0.06, 0.04) = 0.06.
    assert ex.holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])
    assert ex.holm([0.01, None]) == [0.02, None]  # the comparison that did not run still counts in m
    assert ex.holm([0.6, 0.7]) == [1.0, 1.0] and ex.holm([]) == []


def test_cluster_draws_resample_whole_clusters_and_pair_columns() -> None:
    from ace_hybrid.experiment.statistics import cluster_draws

    # Two clusters, each all hits or all misses: a draw's mean is the share of hits among the decisions it drew.
    hit = np.array([1, 1, 1, 0], float)
    cluster = np.array([7, 7, 7, 9])
    draws = cluster_draws(hit, cluster, draws=2000, seed=0)
    # Two picks per draw: {7, 7} gives 6/6, {9, 9} 0/2, {7, 9} 3/4; never a mix within a cluster.
    assert set(np.round(draws, 6)) == {0.0, 0.75, 1.0}
    # Paired columns share draws: the difference of a column from itself is 0 in every draw.
    both = cluster_draws(np.stack([hit, hit], 1), cluster, draws=100, seed=0)
    assert both.shape == (100, 2) and np.array_equal(both[:, 0], both[:, 1])


def test_primaries_come_first_with_holm_and_the_rest_is_exploratory() -> None:
    rng = np.random.default_rng(1)
    base = rng.integers(0, 80, size=(1, 16))
    rows = [dict(synthetic_row("nothing", base.tolist(), [None]), kind="do-nothing"),
            synthetic_row("sac", (base + rng.integers(1, 20, size=(1, 16))).tolist(), [0]),
            dict(synthetic_row("ace", base.tolist(), [0]), kind="ace")]
    primaries = [ex.Primary("ace", "sac", "ace", "sac"), ex.Primary("sac", "nothing", "sac", "nothing"),
                 ex.Primary("gone", "nothing", "not run", "nothing")]
    out = ex.compare_rows(rows, [0], 16, primaries=primaries)
    assert [(c["a"], c["b"], c["primary"]) for c in out[:3]] == [("ace", "sac", True), ("sac", "nothing", True),
                                                                  ("gone", "nothing", True)]
    first, second, missing = out[:3]
    assert (first["why"], second["why"], missing["why"]) == ("against SAC-only", "against doing nothing",
                                                              "named primary")
    assert missing["difference"] is None and missing["p_holm"] is None and ex.verdict(missing) == "no data"
    # sac survives longer on every pair: p = 0, so Holm leaves it 0; ace - sac is the same in reverse.
    assert second["p"] == 0.0 and second["p_holm"] == 0.0 and ex.stated(second)
    assert ex.verdict(second) == "A survives longer, separated (Holm)"
    assert ex.verdict(first) == "B survives longer, separated (Holm)"
    explored = [(c["a"], c["b"]) for c in out[3:]]
    assert ("ace", "sac") not in explored and ("sac", "nothing") not in explored and ("ace", "nothing") in explored
    assert not any(c["primary"] for c in out[3:])
    weak = dict(second, p=0.03, p_holm=0.09)  # its own interval excludes 0, but not after the correction
    assert ex.verdict(weak) == "not distinguishable (Holm)" and not ex.stated(weak)


def test_primaries_name_table_rows_and_fail_naming_an_unknown_one(tmp_path: Path) -> None:
    rows = DO_NOTHING_AND_SAC + """
[[rows]]
name = "EG"
kind = "expert-guided"
set = ["train.tutor_steps=40"]
deploy_topk = [0]
"""
    primary = '[["each trained row (policy alone)", "DoNothing"], ["sac-only-top2", "EG (policy alone)"], ' \
              '["SAC-only (policy alone)", "DoNothing"]]'
    spec = ex.load_experiment(write_experiment(tmp_path / "ok.toml", rows=rows, extra=f"primary = {primary}"),
                              rows=["sac-only"])
    assert [(p.a, p.b) for p in spec.primaries] == [("sac-only-alone", "donothing"), ("eg-alone", "donothing"),
                                                    ("sac-only-top2", "eg-alone")]  # a repeat is dropped
    assert spec.primaries[2].a_name == "SAC-only + top-2 check"  # rows left out by --rows stay in the family
    bad = write_experiment(tmp_path / "bad.toml", rows=rows, extra='primary = [["SAC-only", "DoNothing"]]')
    with pytest.raises(ValueError, match=r"primary\[0\]\[0\]: unknown row 'SAC-only'; valid names \(or a row's "
                                         r"id\): 'DoNothing', 'SAC-only \(policy alone\)', 'SAC-only \+ top-2 check', "
                                         r"'EG \(policy alone\)', 'each trained row'"):
        ex.load_experiment(bad)
    for value, message in (('[["DoNothing"]]', r"must be a list of \[A, B\]"),
                           ('[["DoNothing", "donothing"]]', r"compares a row with itself"),
                           ('[["each trained row", "each trained row (policy alone)"]]', r"at most one side")):
        with pytest.raises(ValueError, match=message):
            ex.load_experiment(write_experiment(tmp_path / "bad.toml", rows=rows, extra=f"primary = {value}"))


# ----------------------------------------------------------------------------- the shipped experiment files

# The replications of goal 4's rise (more_updates_idf_2023's plain checkpoints), in the order they ran, with their
# weeks: each plays only validation weeks no earlier file played (the weeks the checks flagged are left out: 83;
# 97, 125, 139, 146, 160).
REPLICATIONS = {"rise_new_weeks_idf_2023": {69, 76, 90},
                "rise_more_weeks_idf_2023": {104, 111, 118, 132, 153}}

# The files that play masked_curves_idf_2023's learners, with week-long selection, on the replications' 48 pairs:
# their rows' ids and their twins' in masked_curves, the last one trained by the file (the earlier ones copied in).
RISE_WEEKS_TWINS = {"egrl_rise_weeks_idf_2023": {"egrl-weeksel": "egrl-noops"},
                    "ace_rise_weeks_idf_2023": {"egrl-weeksel": "egrl-noops", "ace-weeksel": "ace-noops"}}


def _validation_seeds() -> set[int]:
    return {int(seed) for config in (REPO / "configs").glob("*.toml")
            for _, seed in read_toml(config, "config").get("env", {}).get("eval_pairs", [])}


def _check_coevolution_loop(spec: ex.ExperimentSpec, judge_id: str) -> None:
    """The co-evolution experiments: their judge rows against make run's own ACE and expert-guided RL."""
    assert len(spec.seeds) >= 2 and len(spec.primaries) >= 4
    cfg = {row.train_id: spec.row_config(row, 0) for row in spec.rows if row.trains}
    judge, frozen = cfg[judge_id].ace, cfg[f"{judge_id}-frozen"].ace
    assert judge.effects_vs_played == frozen.effects_vs_played == (judge_id == "ace-judge-vs")
    assert (judge.ranker, judge.coevolve, judge.label_candidates) == ("judge", True, True)
    assert (REPO / judge.exam).is_file() and judge.exam_size >= 150
    assert (frozen.ranker, frozen.coevolve) == ("judge", False) and cfg["ace-sim"].ace.ranker == "sim"
    # The simulation-ranker and expert-guided rows train what make run trains (the same runs for the same seeds).
    make_run = ex.load_experiment(REPO / "experiments" / "make_run.toml", rows=["ace", "expert-guided-rl"])
    ours = {ex.training_fingerprint(c) for key, c in cfg.items() if key in ("ace-sim", "expert-guided-rl")}
    assert {ex.training_fingerprint(make_run.row_config(r, 0)) for r in make_run.rows} == ours


@pytest.mark.parametrize("path", sorted((REPO / "experiments").glob("*.toml")), ids=lambda p: p.stem)
def test_the_shipped_experiment_files_are_valid(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Generated sets are not in the checkout: a file naming one is checked against its splits where the set exists
    # (tests/test_data.py), here for its own structure only, whatever this machine's ./data holds.
    monkeypatch.setenv("ACE_HYBRID_DATA", str(tmp_path))
    spec = ex.load_experiment(path)  # builds and validates every cell's config
    kinds = {row.kind for row, _ in spec.cells()}
    for row, seed in spec.cells():
        cfg = spec.row_config(row, seed)
        assert (cfg.llm.backend == "none") == (row.kind not in ex.LLM_KINDS), row.id
        assert all(k < cfg.env.train_seed_start for _, k in spec.test_pairs), row.id
        # In the loop's thread: each ACE run makes its LLM calls whatever else the machine runs (--jobs 2).
        assert row.kind != "ace" or not cfg.ace.async_llm, row.id
    seeds = [k for _, k in spec.test_pairs]
    assert len(spec.test_pairs) >= 32 and len(set(seeds)) == len(seeds)
    assert not set(seeds) & _validation_seeds()
    # Configurations are chosen on validation pairs: disjoint from the test pairs (load_experiment checks the rest).
    # The replications play fewer pairs than they declared: the checks flagged 1 of 4 weeks and 5 of 10.
    replication = path.stem in REPLICATIONS
    fewer = {"rise_new_weeks_idf_2023": 12, "rise_more_weeks_idf_2023": 15}
    assert len(spec.validation_pairs) >= fewer.get(path.stem, 16)
    assert not set(spec.validation_pairs) & set(spec.test_pairs)
    env = spec.row_config(spec.rows[0], None if not spec.rows[0].trains else 0).env
    tested, validated = {s for s, _ in spec.test_pairs}, {s for s, _ in spec.validation_pairs}
    if env.data:  # generated weeks: held out by week (test, validation and selection, training weeks apart)
        selection = {s for s, _ in env.eval_pairs}
        flagged = path.stem == "never_worse_unseen_weeks_idf_2023"  # 8 declared, one flagged by the checks
        # A replication plays weeks its checkpoints were not chosen on; every other file validates on them too.
        assert len(tested) >= (7 if flagged else 8) and (not selection & validated if replication
                                                         else selection <= validated)
        assert not tested & validated and not (tested | validated) & set(env.train_scenarios)
    else:  # an offline copy's few scenarios: every one is tested, and validated on
        assert tested == validated == set(env.train_scenarios)
    assert ex.load_experiment(path, on="validation").pairs == spec.validation_pairs
    if path.stem in ("budget_study", "temperature_bound", "critic_divergence", "selection_wcci_2020",
                     "search_neurips", "do_nothing_first", "junior_idf_2023", "junior_anchor_neurips") or \
            path.stem.startswith("action_sets_"):
        # studies that choose a configuration
        assert "--on validation" in path.read_text()
        return
    if path.stem == "never_worse_gate_idf_2023":  # fixed juniors, gated, on pairs no idf file had played
        played = [ex.load_experiment(REPO / "experiments" / f"{stem}.toml") for stem in
                  ("sure_gate_idf_2023", "junior_anchor_idf_2023", "weeks_idf_2023", "weeks_idf_2023_all_weeks")]
        assert not set(spec.test_pairs) & {p for other in played for p in other.test_pairs}
        assert spec.validation_pairs == played[0].validation_pairs and spec.cluster == "scenario"
        never_worse = [spec.row_config(r, None) for r in spec.rows if r.train_id in ("nw", "nw-b")]
        assert never_worse and all(c.env.deploy_among == 8 for c in never_worse)
    if path.stem == "never_worse_unseen_weeks_idf_2023":  # the gated juniors, unchanged, on weeks no file played
        others = [ex.load_experiment(p) for p in sorted((REPO / "experiments").glob("*.toml")) if p != path]
        assert not {w for w, _ in spec.test_pairs} & {w for other in others for w, _ in other.test_pairs}
        gate = ex.load_experiment(REPO / "experiments" / "never_worse_gate_idf_2023.toml")
        for row in (r for r in spec.rows if r.kind == "junior"):
            twin = next(r for r in gate.rows if r.train_id == row.train_id and r.sure == row.sure)
            assert spec.row_config(row, None).to_dict() == gate.row_config(twin, None).to_dict()
    if not any(row.trains for row in spec.rows):  # a confirmation of fixed policies (weeks_idf_2023_new_weeks)
        assert "do-nothing" in kinds and "--share" in path.read_text()
        return
    if path.stem == "masked_curves_idf_2023":  # goal 4 on validation: every learner with no-ops masked, 5K vs 20K
        gate = ex.load_experiment(REPO / "experiments" / "sure_gate_idf_2023.toml")
        learners = [r for r in spec.rows if r.trains]
        assert spec.validation_pairs == gate.validation_pairs and {r.budget for r in learners} == {5000, 20000}
        assert {r.kind for r in learners} == {"sac-only", "expert-guided", "ace"}
        assert all(spec.row_config(r, 0).env.mask_no_ops and not spec.row_config(r, 0).train.init_policy
                   for r in learners)
        assert {(p.a_name, p.b_name) for p in spec.primaries} == {
            (f"{r.train_name} @ 20K (policy alone)", f"{r.train_name} @ 5K (policy alone)") for r in learners}
        sac = next(r for r in spec.rows if r.train_id == "sac-only-noops")  # sure_gate's runs serve: no retraining
        assert ex.training_fingerprint(spec.row_config(sac, 0)) == ex.training_fingerprint(
            gate.row_config(next(r for r in gate.rows if r.train_id == "sac-only-noops"), 0))
        assert "--on validation" in path.read_text()
        return
    if path.stem == "masked_long_idf_2023":  # masked_curves_idf_2023 trained to 40K on fresh seeds, 5K vs 40K
        short = ex.load_experiment(REPO / "experiments" / "masked_curves_idf_2023.toml")
        learners = [r for r in spec.rows if r.trains]
        assert {r.budget for r in learners} == {5000, 20000, 40000} and not set(spec.seeds) & set(range(4))
        assert spec.validation_pairs == short.validation_pairs
        for row in learners:  # the same learner as masked_curves's but for its length
            cfg = spec.row_config(row, 0)
            assert cfg.train.total_env_steps == 40000 and cfg.train.keep_best_at == [5000, 20000, 40000]
            cfg.train.total_env_steps, cfg.train.keep_best_at = 20000, [5000, 20000]
            twin = next(r for r in short.rows if r.train_id == row.train_id)
            assert ex.training_fingerprint(cfg) == ex.training_fingerprint(short.row_config(twin, 0))
        assert {(p.a_name, p.b_name) for p in spec.primaries} == {
            (f"{r.train_name} @ 40K (policy alone)", f"{r.train_name} @ 5K (policy alone)") for r in learners}
        assert "--on validation" in path.read_text()
        return
    if path.stem == "averaged_policy_idf_2023":  # masked_curves's SAC-only, selection to the week's end, +/- average
        short = ex.load_experiment(REPO / "experiments" / "masked_curves_idf_2023.toml")
        twin = short.row_config(next(r for r in short.rows if r.train_id == "sac-only-noops"), 0)
        learners = [r for r in spec.rows if r.trains]
        assert spec.validation_pairs == short.validation_pairs and not set(spec.seeds) & set(range(6))
        averages = []
        for row in learners:  # masked_curves's SAC-only but for the selection episodes' length and the average
            cfg = spec.row_config(row, 0)
            assert cfg.env.eval_max_steps == 0 and cfg.env.eval_pairs == twin.env.eval_pairs
            averages.append(cfg.sac.policy_average)
            cfg.env.eval_max_steps, cfg.sac.policy_average = twin.env.eval_max_steps, 0.0
            assert ex.training_fingerprint(cfg) == ex.training_fingerprint(twin)
        assert set(averages) == {0.0, 0.99} and {r.budget for r in learners} == {5000, 20000}
        assert {(p.a_name, p.b_name) for p in spec.primaries} == {
            (f"{r.train_name} @ 20K (policy alone)", f"{r.train_name} @ 5K (policy alone)") for r in learners}
        assert "--on validation" in path.read_text()
        return
    if path.stem == "more_updates_idf_2023":  # averaged_policy's plain row on 7 validation weeks, +/- 4 updates
        plain = ex.load_experiment(REPO / "experiments" / "averaged_policy_idf_2023.toml")
        plain_row = next(r for r in plain.rows if r.train_id == "sac-only-weeksel")
        twin = plain.row_config(plain_row, 6)
        learners = [r for r in spec.rows if r.trains]
        weeks = {week for week, _ in spec.validation_pairs}
        assert {week for week, _ in plain.validation_pairs} < weeks and set(plain.seeds) < set(spec.seeds)
        assert len(weeks) == 7 and all(split_of(week) == "validation" for week in weeks)
        # The header's command makes exactly the weeks the file trains and plays on (--on validation)
        only = re.search(r"--only ([\d,]+)", path.read_text()).group(1)
        uses = {*twin.env.train_scenarios, *(week for week, _ in twin.env.eval_pairs), *weeks}
        assert sorted(map(int, only.split(","))) == sorted(uses)
        updates = []
        for row in learners:  # the plain row's training but for the updates per decision
            cfg = spec.row_config(row, 6)
            updates.append(cfg.train.updates_per_decision)
            cfg.train.updates_per_decision = 1
            assert ex.training_fingerprint(cfg) == ex.training_fingerprint(twin)
        assert sorted(updates) == [1, 1, 4, 4] and {r.budget for r in learners} == {5000, 20000}
        # Its seeds 6 and 7 are copied in from averaged_policy: the same run directories
        assert any(r.train_id == plain_row.train_id and r.train_name == plain_row.train_name for r in learners)
        assert {(p.a_name, p.b_name) for p in spec.primaries} == {
            (f"{r.train_name} @ 20K (policy alone)", f"{r.train_name} @ 5K (policy alone)") for r in learners}
        assert "--on validation" in path.read_text()
        return
    if path.stem == "deploy_threshold_idf_2023":  # ace_rise_weeks's 20K policies deployed from max rho 1.0
        rise = ex.load_experiment(REPO / "experiments" / "ace_rise_weeks_idf_2023.toml", on="validation")
        ours = ex.load_experiment(path, on="validation")
        assert ours.pairs == rise.pairs and len(set(spec.test_pairs)) == 32
        for row in (r for r in ours.rows if r.trains):  # the same trainings, the plain rows the same cells
            twin = next(r for r in rise.rows if r.train_id == row.train_id and r.budget == row.budget)
            cfg = ours.row_config(row, 6)
            assert ex.training_fingerprint(cfg) == ex.training_fingerprint(rise.row_config(twin, 6))
            assert row.threshold in (None, 1.0) and (row.threshold is not None or ex.cells.fingerprint(
                ours, row, cfg) == ex.cells.fingerprint(rise, twin, rise.row_config(twin, 6)))
        others = [ex.load_experiment(p) for p in (REPO / "experiments").glob("*.toml") if p != path]
        assert not {seed for _, seed in spec.test_pairs} & {seed for other in others
                                                            for _, seed in [*other.test_pairs, *other.validation_pairs]}
        assert {(p.a_name.split(" @")[0], p.b_name.split(" @")[0]) for p in spec.primaries} == {
            (a, b) for a in ("Expert-guided RL, week-long selection", "ACE, week-long selection")
            for b in (a, "DoNothing")}
        assert all(p.a_name.endswith("@ 20K (policy alone, from rho 1)") for p in spec.primaries)
        return
    if path.stem in RISE_WEEKS_TWINS:  # masked_curves's learners on the SAC-only files' 48 pairs
        curves = ex.load_experiment(REPO / "experiments" / "masked_curves_idf_2023.toml")
        learners = [r for r in spec.rows if r.trains]
        assert {r.train_id for r in learners} == set(RISE_WEEKS_TWINS[path.stem])
        assert {r.budget for r in learners} == {5000, 20000}
        for row in learners:  # but for selection episodes played to the week's end, as SAC-only's
            twin = curves.row_config(next(r for r in curves.rows
                                          if r.train_id == RISE_WEEKS_TWINS[path.stem][row.train_id]), 6)
            cfg = spec.row_config(row, 6)
            assert cfg.env.eval_max_steps == 0 and cfg.env.eval_pairs == twin.env.eval_pairs
            cfg.env.eval_max_steps = twin.env.eval_max_steps
            assert ex.training_fingerprint(cfg) == ex.training_fingerprint(twin)
        sac_files = ["more_updates_idf_2023", *REPLICATIONS]
        assert spec.validation_pairs == [pair for stem in sac_files for pair in ex.load_experiment(
            REPO / "experiments" / f"{stem}.toml").validation_pairs]
        newest = [r for r in learners if r.train_id == [*RISE_WEEKS_TWINS[path.stem]][-1]]
        assert spec.seeds == [6, 7, 8] and [(p.a_name, p.b_name) for p in spec.primaries] == [
            (f"{newest[0].train_name} @ 20K (policy alone)", f"{newest[0].train_name} @ 5K (policy alone)")]
        assert "--on validation" in path.read_text()
        return
    if replication:  # more_updates's plain checkpoints on validation weeks no file had played
        plain = ex.load_experiment(REPO / "experiments" / "more_updates_idf_2023.toml")
        twin_row = next(r for r in plain.rows if r.train_id == "sac-only-weeksel")
        learners = [r for r in spec.rows if r.trains]
        assert {r.train_id for r in learners} == {"sac-only-weeksel"} and spec.seeds == plain.seeds
        for row in learners:
            assert ex.training_fingerprint(spec.row_config(row, 6)) == ex.training_fingerprint(
                plain.row_config(twin_row, 6))
        weeks = {week for week, _ in spec.validation_pairs}
        earlier = [*takewhile(lambda stem: stem != path.stem, REPLICATIONS)]
        played = {week for week, _ in [*spec.row_config(learners[0], 6).env.eval_pairs, *plain.validation_pairs]}
        played |= set().union(*(REPLICATIONS[stem] for stem in earlier))
        assert weeks == REPLICATIONS[path.stem] and not weeks & played
        assert all(split_of(week) == "validation" for week in weeks)
        assert [(p.a_name, p.b_name) for p in spec.primaries] == [
            ("SAC-only, week-long selection @ 20K (policy alone)", "SAC-only, week-long selection @ 5K (policy alone)")]
        assert "--on validation" in path.read_text()
        return
    # The top-7 check simulates at most 8 candidates: under a third of the greedy expert's 30.
    assert all(row.topk in (0, 7) for row in spec.rows if row.trains) and spec.greedy_budget >= 3 * 8
    if path.stem == "coevolution_loop":
        _check_coevolution_loop(spec, "ace-judge")
        return
    if path.stem == "coevolution_vs_played":  # the same loop, each effect compared with what was played: nothing else
        _check_coevolution_loop(spec, "ace-judge-vs")
        loop = ex.load_experiment(REPO / "experiments" / "coevolution_loop.toml")
        for before, after in zip(loop.rows, spec.rows):
            cfg = spec.row_config(after, 0) if after.trains else None
            if cfg is not None:
                cfg.ace.effects_vs_played = False
            assert cfg is None or cfg.to_dict() == loop.row_config(before, 0).to_dict(), after.id
        return
    if path.stem == "junior_anchor_neurips_confirm":  # the study's trainings, played on pairs it never played
        study = ex.load_experiment(REPO / "experiments" / "junior_anchor_neurips.toml")
        _trains_as(spec, study)
        assert not set(spec.test_pairs) & (set(study.test_pairs) | set(study.validation_pairs))
        assert {"greedy", "maskable-ppo"} <= kinds and len(spec.primaries) == 7 and "--share" in path.read_text()
        return
    if path.stem == "weeks_idf_2023_all_weeks":  # the confirmation above, and ACE alone against SAC-only and PPO
        assert {"do-nothing", "sac-only", "maskable-ppo", "ace"} <= kinds and "--share" in path.read_text()
        assert {p.b_name for p in spec.primaries} == {"SAC-only (policy alone)",
                                                      "MaskablePPO (sb3-contrib, policy alone)"}
        return
    assert {"sac-only", "expert-guided", "do-nothing", "ace"} <= kinds and len(spec.primaries) >= 4
    names = {r["name"] for r in read_toml(path, "experiment file")["rows"]}
    if path.stem in ("make_run", "paper_table"):
        assert {(p.a_name, p.b_name) for p in spec.primaries} >= {
            ("ACE (policy alone)", "SAC-only (policy alone)"),
            ("ACE (policy alone)", "Expert-guided RL (policy alone)"),
            ("ACE + top-7 check", "Greedy expert"), ("SAC-only (policy alone)", "DoNothing")}
        expanded = {row.name for row in ex.load_experiment(path).rows}
        assert {"SAC-only (policy alone)", "SAC-only + top-7 check"} <= expanded
    if path.stem == "make_run":
        assert names == {"DoNothing", "Greedy expert", "Tutor (tutor:50, 30 simulations)",
                         "Tutor (tutor:50, 8 simulations)", "SAC-only", "Expert-guided RL", "ACE",
                         "MaskablePPO (sb3-contrib)"}
    # MaskablePPO trains on the same terms as the SAC rows: action set, budget, reward, threshold, episodes, seeds.
    ppo = next(r for r in spec.rows if r.kind == "maskable-ppo")
    sac = next(r for r in spec.rows if r.kind == "sac-only")
    ppo_cfg, sac_cfg = spec.row_config(ppo, 0), spec.row_config(sac, 0)
    for section in ("env", "reward"):
        assert ppo_cfg.to_dict()[section] == sac_cfg.to_dict()[section]
    assert ppo_cfg.train.total_env_steps == sac_cfg.train.total_env_steps and ppo_cfg.train.seed == 0
    assert ppo.topk in (0, 7) and ppo.ppo.n_steps * 4 <= 1000
    if path.stem == "paper_table":
        assert len(spec.seeds) >= 3
        assert {"Expert-guided RL", "ACE", "ACE w/o actor"} <= names
        # Its LLM rows were dropped (they measured the candidates' order); the LLM as ranker is coevolution_loop's.
        assert not {"ACE (LLM ranker)", "LLM-only (LAC)"} & names
        rankers = {row.name: spec.row_config(row, 0).ace.ranker for row in spec.rows if row.kind == "ace"}
        assert set(rankers.values()) == {"sim"}  # ACE and its ablations
        # Its ACE row trains what make run's ACE trains (same configuration, so the same runs for the shared seeds).
        make_run = ex.load_experiment(REPO / "experiments" / "make_run.toml", rows=["ace"])
        assert {ex.training_fingerprint(make_run.row_config(make_run.rows[0], k)) for k in make_run.seeds} <= {
            ex.training_fingerprint(spec.row_config(next(r for r in spec.rows if r.train_id == "ace"), k))
            for k in spec.seeds}
    if path.stem == "sure_gate_idf_2023":  # the anchor file's trainings, gated, on seeds no file had played
        anchor = ex.load_experiment(REPO / "experiments" / "junior_anchor_idf_2023.toml")
        weeks = ex.load_experiment(REPO / "experiments" / "weeks_idf_2023.toml")
        assert not set(spec.test_pairs) & (set(anchor.test_pairs) | set(weeks.test_pairs))
        assert spec.cluster == "scenario" and spec.validation_pairs == anchor.validation_pairs
        assert {r.train_id for r in anchor.rows if r.trains} - {r.train_id for r in spec.rows} == {"maskable-ppo-5k"}
        _trains_as(spec, anchor)  # its runs serve: nothing retrains
        gated = {r.train_id for r in spec.rows if r.sure}
        assert gated == {"junior", "sac-only", "sac-only-noops", "egrl-junior-anchor1", "ace-junior-anchor1",
                         "maskable-ppo"}
        assert spec.row_config(next(r for r in spec.rows if r.train_id == "sac-only-noops"), 0).env.mask_no_ops
        assert "--on validation" in path.read_text() and "--share" in path.read_text()
        return
    if path.stem == "junior_anchor_idf_2023":  # the anchor on held-out weeks, on seeds no weeks file had played
        weeks = ex.load_experiment(REPO / "experiments" / "weeks_idf_2023.toml")
        assert not set(spec.test_pairs) & set(weeks.test_pairs) and spec.cluster == "scenario"
        anchored = [spec.row_config(r, 0) for r in spec.rows if r.kind in ("expert-guided", "ace")]
        assert anchored and all(c.sac.anchor_weight == 1 and c.train.eval_at_start and c.train.init_policy
                                for c in anchored)
        assert len(spec.primaries) == 7 and "--share" in path.read_text()
        return
    guided = [r for r in read_toml(path, "experiment file")["rows"] if r.get("id") == "expert-guided-rl"]
    assert guided and guided[0]["kind"] == "expert-guided" and guided[0]["deploy_topk"] == [0, 7]
    assert guided[0]["name"].startswith("Expert-guided RL")
    cfg = spec.row_config(next(r for r in spec.rows if r.train_id == "expert-guided-rl"), spec.seeds[0])
    assert (cfg.train.tutor_steps > 0 or cfg.train.tutor_data) and cfg.train.imitation_weight > 0


def _trains_as(spec: ex.ExperimentSpec, study: ex.ExperimentSpec) -> None:
    """Every training row of ``spec`` that ``study`` has trains exactly as there: the study's runs serve."""
    theirs = {r.train_id: r for r in study.rows if r.trains}
    for row in (r for r in spec.rows if r.trains and r.train_id in theirs):
        for seed in spec.seeds:
            assert ex.training_fingerprint(spec.row_config(row, seed)) == ex.training_fingerprint(
                study.row_config(theirs[row.train_id], seed)), row.id


def test_groups_with_a_language_model_run_first_then_trainings_then_baselines(tmp_path: Path) -> None:
    rows = "".join(f'[[rows]]\nname = "{name}"\nkind = "{kind}"\n' + ('deploy_topk = [0, 7]\n' if trains else "")
                   for name, kind, trains in [("DoNothing", "do-nothing", False), ("Reco", "reco", False),
                                              ("Greedy", "greedy", False), ("LAC", "lac", False),
                                              ("Random candidate", "random-candidate", False),
                                              ("SAC-only", "sac-only", True), ("ACE", "ace", True)])
    spec = ex.load_experiment(write_experiment(tmp_path / "order.toml", rows=rows, seeds="[0, 1]",
                                               extra='ace_set = ["llm.backend=smollm2"]'))
    plan = [(row, seed, spec.row_config(row, seed)) for row, seed in spec.cells()]
    kinds = [group[0][0].kind for group in ex.longest_first(ex.cell_groups(plan))]
    llm = kinds.count("lac") + kinds.count("ace")
    # The LLM-only agent asks the model at every test decision: left to the end it would run alone for most of an hour.
    assert kinds[0] == "lac" and set(kinds[:llm]) == {"lac", "ace"}
    trained = kinds.count("sac-only")
    assert set(kinds[llm:llm + trained]) == {"sac-only"}
    assert set(kinds[llm + trained:]) == {"do-nothing", "reco", "greedy", "random-candidate"}
