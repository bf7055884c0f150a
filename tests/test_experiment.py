"""`ace-hybrid experiment`: cells, the table computed from them, resumability, and errors that name the culprit."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grid2op")
pytest.importorskip("torch")
from ace_hybrid import experiment as ex
from ace_hybrid.report import write_report
from ace_hybrid.training import loop as train_module
from ace_hybrid.training.checkpoint import load_checkpoint_file

import tiny_settings  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = pytest.mark.grid2op

REPO = Path(__file__).resolve().parents[1]
# Tiny nets and short episodes on the 14-substation sandbox, as in test_train.py.
TINY = [*tiny_settings.TINY, "env.deploy_topk=2", "train.checkpoint_every=50", "train.eval_every=60",
        "log.tensorboard=false"]


def write_experiment(path: Path, *, steps: int = 120, seeds: str = "[0, 1]", rows: str = "", extra: str = "") -> Path:
    rows = rows or """
[[rows]]
name = "DoNothing"
kind = "donothing"

[[rows]]
name = "SAC-only"
kind = "sac_only"
"""
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
    path = write_experiment(base / "tiny.toml")
    out = base / "out"
    result = ex.run_experiment(ex.load_experiment(path), out, progress=False)
    return path, out, result


def test_experiment_writes_cells_runs_and_results(finished) -> None:
    _, out, result = finished
    assert sorted(result["ran"]) == ["donothing", "sac-only-seed0", "sac-only-seed1"] and result["reused"] == []
    for name in ("results.json", "results.csv", "results.md", "cells/donothing.json", "cells/sac-only-seed0.json",
                 "runs/sac-only-seed0/best.pt", "runs/sac-only-seed1/metrics.jsonl"):
        assert (out / name).is_file(), name
    cell = json.loads((out / "cells" / "sac-only-seed1.json").read_text())
    assert cell["seed"] == 1 and cell["config"]["train"]["seed"] == 1 and cell["train"]["env_steps"] == 120
    assert [(e["scenario"], e["seed"]) for e in cell["test"]["episodes"]] == [(0, 0), (1, 1)]
    assert all(e["max_steps"] == 30 for e in cell["test"]["episodes"])
    assert json.loads((out / "cells" / "donothing.json").read_text())["train"] is None


def test_table_is_mean_and_std_of_the_cells(finished) -> None:
    _, out, _ = finished
    cells = [json.loads((out / "cells" / f"sac-only-seed{k}.json").read_text()) for k in (0, 1)]
    survival = [c["test"]["totals"]["survival_rate"] for c in cells]
    reward = [np.mean([e["cumulative_reward"] for e in c["test"]["episodes"]]) for c in cells]
    per_episode = [c["test"]["totals"]["wall_time_s"] / 2 for c in cells]
    results = json.loads((out / "results.json").read_text())
    sac = next(r for r in results["rows"] if r["id"] == "sac-only")
    assert sac["n"] == 2 and sac["seeds"] == [0, 1]
    assert sac["metrics"]["survival_rate"]["mean"] == pytest.approx(np.mean(survival), abs=1e-12)
    assert sac["metrics"]["survival_rate"]["std"] == pytest.approx(np.std(survival, ddof=1), abs=1e-12)
    assert sac["metrics"]["episode_reward"]["mean"] == pytest.approx(np.mean(reward), rel=1e-9)
    assert sac["metrics"]["test_seconds_per_episode"]["mean"] == pytest.approx(np.mean(per_episode), rel=1e-9)
    assert sac["metrics"]["env_steps"]["mean"] == 120 and sac["metrics"]["llm_calls"]["mean"] is None
    nothing = next(r for r in results["rows"] if r["id"] == "donothing")
    assert nothing["n"] == 1 and nothing["metrics"]["survival_rate"]["std"] is None
    table = (out / "results.md").read_text()
    line = next(x for x in table.splitlines() if x.startswith("| SAC-only |"))
    assert f"{np.mean(reward):.1f} ± {np.std(reward, ddof=1):.1f}" in line
    assert f"{np.mean(survival):.1%}" in line
    csv_lines = (out / "results.csv").read_text().splitlines()
    header, sac_line = csv_lines[0].split(","), next(x for x in csv_lines if x.startswith("sac-only,")).split(",")
    assert float(sac_line[header.index("survival_rate_mean")]) == pytest.approx(np.mean(survival), abs=1e-12)


def test_a_second_run_of_the_command_reruns_nothing(finished) -> None:
    path, out, _ = finished
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    checkpoint = (out / "runs" / "sac-only-seed0" / "checkpoint.pt").stat().st_mtime_ns
    proc = subprocess.run([sys.executable, "-m", "ace_hybrid.cli", "experiment", "--config", str(path), "--out",
                           str(out), "--no-progress", "--no-report"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 cell(s) run, 3 reused" in proc.stdout and "| SAC-only | 2 |" in proc.stdout
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")} == stamps
    assert (out / "runs" / "sac-only-seed0" / "checkpoint.pt").stat().st_mtime_ns == checkpoint


def test_changed_settings_do_not_silently_reuse_finished_cells(finished) -> None:
    path, out, _ = finished
    spec = ex.load_experiment(path, ["train.total_env_steps=100"])
    with pytest.raises(ValueError, match=r"cells/donothing.json was made with another configuration"):
        ex.run_experiment(spec, out, progress=False)


class Interrupted(Exception):
    pass


def test_a_half_done_training_run_is_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_experiment(tmp_path / "tiny.toml", steps=160, seeds="[3]", rows="""
[[rows]]
name = "SAC-only"
kind = "sac_only"
""")
    original = train_module.train_episode

    def stop_midway(run, bar):
        if run.counters.env_steps >= 80:
            raise Interrupted
        original(run, bar)

    monkeypatch.setattr(train_module, "train_episode", stop_midway)
    spec = ex.load_experiment(path)
    with pytest.raises(Interrupted):
        ex.run_experiment(spec, tmp_path / "out", progress=False)
    run_dir = tmp_path / "out" / "runs" / "sac-only-seed3"
    stopped_at = load_checkpoint_file(run_dir / "checkpoint.pt")["counters"]["env_steps"]
    assert 50 <= stopped_at < 160 and not (tmp_path / "out" / "cells" / "sac-only-seed3.json").exists()
    monkeypatch.setattr(train_module, "train_episode", original)
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
kind = "llm_lac"
""")
    result = ex.run_experiment(ex.load_experiment(path), tmp_path / "out", progress=False)
    assert len(seen) == 1 and seen[0].ace.lac_alpha == 2.5 and seen[0].env.threshold == 0.5
    cell = result["cells"][0]
    assert cell["cell"] == "llm-lac" and len(cell["test"]["episodes"]) == 2 and cell["metrics"]["env_steps"] is None


def test_bad_row_kind_fails_naming_it(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "bad.toml", rows='[[rows]]\nname = "SAC"\nkind = "sac-only"\n')
    with pytest.raises(ValueError, match=r"rows\[0\]\.kind = 'sac-only' \(row 'SAC'\) is not one of .*sac_only"):
        ex.load_experiment(path)
    with pytest.raises(ValueError, match=r"unknown row\(s\) 'ace'; rows of bad2.toml: donothing, sac-only"):
        ex.load_experiment(write_experiment(tmp_path / "bad2.toml"), rows=["ace"])


def test_bad_config_key_fails_naming_the_row_and_key(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "bad.toml", rows='[[rows]]\nname = "SAC"\nkind = "sac_only"\n'
                                                       'set = ["sac.hiden=[8]"]\n')
    with pytest.raises(ValueError, match=r"row 'SAC': unknown configuration key 'sac.hiden'"):
        ex.load_experiment(path)
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'seed'"):
        ex.load_experiment(write_experiment(tmp_path / "bad2.toml", extra="seed = 3"))
    with pytest.raises(ValueError, match=r"row 'ACE' \(kind ace\) has llm.backend = 'none'"):
        ex.load_experiment(write_experiment(tmp_path / "bad3.toml", rows='[[rows]]\nname = "ACE"\nkind = "ace"\n'))


def test_test_pairs_must_be_held_out(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "leak.toml")
    text = path.read_text().replace("test_pairs = [[0, 0], [1, 1]]", "test_pairs = [[2, 0], [1, 1]]")
    path.write_text(text)
    with pytest.raises(ValueError, match=r"test pair \[2, 0\] is also in env.eval_pairs"):
        ex.load_experiment(path)
    path.write_text(text.replace("[[2, 0], [1, 1]]", "[[1, 1001]]"))
    with pytest.raises(ValueError, match=r"test pair \[1, 1001\] may be training episode 1"):
        ex.load_experiment(path)


def test_cli_help_lists_the_experiment_and_report_commands() -> None:
    from ace_hybrid.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    assert "experiment" in text and "report" in text
    sub = next(a for a in parser._actions if a.dest == "command").choices
    help_text = sub["experiment"].format_help()
    for flag in ("--config", "--out", "--set", "--rows", "--seeds", "--no-report"):
        assert flag in help_text


def _llm_fixtures():
    spec = importlib.util.spec_from_file_location("llm_fixtures", Path(__file__).with_name("llm_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("llm_fixtures", module)
    spec.loader.exec_module(module)
    return module


def test_llm_rows_with_a_tiny_real_model_fill_the_llm_columns(tmp_path: Path) -> None:
    model = _llm_fixtures().build_tiny_model(tmp_path / "tiny_lm")
    ace_set = ["llm.backend=transformers", f"llm.model_path={model}", "ace.critic=false", "ace.r_bar=0.3",
               "ace.finetune_every=4", "ace.finetune_pairs=4", "ace.probe_size=2", "ace.validation_steps=6",
               "ace.max_llm_calls=20", "ace.candidates=4", "ace.max_rounds=2"]
    path = write_experiment(tmp_path / "ace.toml", steps=80, seeds="[0]", extra=f"ace_set = {json.dumps(ace_set)}",
                            rows="""
[[rows]]
name = "LLM-only (LAC)"
id = "llm-lac"
kind = "llm_lac"

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


@pytest.mark.parametrize("path", sorted((REPO / "experiments").glob("*.toml")), ids=lambda p: p.stem)
def test_the_shipped_experiment_files_are_valid(path: Path) -> None:
    spec = ex.load_experiment(path)  # builds and validates every cell's configuration
    kinds = {row.kind for row, _ in spec.cells()}
    assert {"sac_only", "ace"} <= kinds
    for row, seed in spec.cells():
        cfg = spec.row_config(row, seed)
        assert (cfg.llm.backend == "none") == (row.kind in ("sac_only", "donothing", "reco", "greedy")), row.id
