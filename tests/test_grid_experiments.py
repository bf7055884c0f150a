"""The paper's grids and budgets in experiment tables: the L2RPN score and episode reward beside survival, the relative
difference in episode reward (``reward_vs``), a Holm family over several metrics (``holm``), the shipped files of
issue 23 (budget_curve, grid_*, action_sets_*) and their smoke versions (``--smoke``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ace_hybrid import experiment as ex
from ace_hybrid.config import read_toml
from ace_hybrid.experiment.smoke import SMOKE_PAIRS, SMOKE_STEPS, smoke_budgets

REPO = Path(__file__).resolve().parents[1]
GRID_FILES = sorted((REPO / "experiments").glob("grid_*.toml"))
STUDY_FILES = sorted((REPO / "experiments").glob("action_sets_*.toml"))


def reward_row(row_id: str, rewards: list[list[float]], seeds: list[int | None]) -> dict:
    """A results.json row whose episodes all survive 10 of 10 steps, with the given episode rewards."""
    r = np.asarray(rewards, dtype=float)
    ones = np.ones_like(r)
    return {"id": row_id, "name": row_id, "kind": "sac-only" if seeds != [None] else "greedy", "train_id": row_id,
            "deploy_topk": None, "n": len(seeds), "seeds": seeds,
            "episodes": {"steps_survived": (10 * ones).tolist(), "max_steps": (10 * ones).tolist(),
                         "cumulative_reward": r.tolist(), "score": (2 * r).tolist()}}


def test_reward_vs_is_a_with_its_interval_relative_to_b() -> None:
    b = reward_row("b", [[100.0, 200.0, 300.0], [150.0, 250.0, 350.0]], [0, 1])
    a = reward_row("a", (1.25 * np.asarray(b["episodes"]["cumulative_reward"])).tolist(), [0, 1])
    resample = ex.Resample.draw([0, 1], 3, draws=200)
    rel = ex.relative_difference(resample, a, b)
    assert rel["relative"] == pytest.approx(0.25) and rel["lo"] == pytest.approx(0.25)
    assert rel["hi"] == pytest.approx(0.25)
    worse = reward_row("c", [[-100.0, 200.0, 300.0], [150.0, 250.0, 350.0]], [0, 1])  # one worse episode
    rel = ex.relative_difference(resample, worse, b)
    assert rel["relative"] == pytest.approx(-200 / 1350) and rel["lo"] < rel["relative"] <= rel["hi"] <= 0
    # |B| divides: against a negative B, doing better is still a positive relative difference.
    negative = reward_row("n", [[-100.0, -100.0, -100.0], [-100.0, -100.0, -100.0]], [0, 1])
    half = reward_row("h", [[-50.0, -50.0, -50.0], [-50.0, -50.0, -50.0]], [0, 1])
    assert ex.relative_difference(resample, half, negative)["relative"] == pytest.approx(0.5)


def test_a_holm_family_over_several_metrics_corrects_each_primary_in_each() -> None:
    rows = [reward_row("a", [[110.0, 220.0, 330.0]], [0]), reward_row("b", [[100.0, 200.0, 300.0]], [0]),
            reward_row("c", [[100.0, 230.0, 300.0]], [0])]
    primaries = [ex.Primary("a", "b", "a", "b"), ex.Primary("c", "b", "c", "b")]
    alone = ex.compare_rows(rows, [0], 3, primaries=primaries, draws=500)
    both = [c for c in ex.compare_rows(rows, [0], 3, primaries=primaries, holm_metrics=("survival", "reward", "score"),
                                       draws=500) if c["primary"]]
    for c in alone:
        assert c["secondary"]["episode_reward"]["difference"] is not None and "p_holm" not in c["secondary"][
            "episode_reward"]
    family = [c[k] if k == "p" else c["secondary"][k]["p"] for c in both for k in ("p", "episode_reward",
                                                                                     "l2rpn_score")]
    adjusted = ex.holm(family)
    assert [c["p_holm"] for c in both] == adjusted[0::3]
    assert [c["secondary"]["episode_reward"]["p_holm"] for c in both] == adjusted[1::3]
    assert [c["secondary"]["l2rpn_score"]["p_holm"] for c in both] == adjusted[2::3]
    assert both[0]["secondary"]["episode_reward"]["difference"] == pytest.approx(20.0)  # 660 / 3 - 600 / 3


def test_reporting_keys_are_checked_naming_the_key(tmp_path: Path) -> None:
    import tiny_settings

    bad = {"score = 1": r"score = 1 must be true or false",
           'holm = ["reward"]': r"holm = \['reward'\] must be \[\"survival\"\]",
           'holm = ["survival", "score"]': r"holm names \"score\" but the file has no score = true",
           'reward_vs = [["Reconnect", "Nobody"]]': r"reward_vs\[0\]\[1\]: unknown row 'Nobody'",
           'reward_vs = [["each trained row", "DoNothing"]]': r"reward_vs\[0\]\[0\]: unknown row",
           "paper_note = 3": r"paper_note = 3 must be a string"}
    for header, message in bad.items():
        path = tiny_settings.experiment_file(tmp_path / "bad.toml", header=header)
        with pytest.raises(ValueError, match=message):
            ex.load_experiment(path)


@pytest.mark.grid2op
def test_score_on_fills_the_score_columns_and_the_reward_and_score_differences(tmp_path: Path) -> None:
    pytest.importorskip("grid2op")
    import tiny_settings

    path = tiny_settings.experiment_file(
        tmp_path / "scored.toml", test_max_steps=20,
        header='score = true\nholm = ["survival", "score"]\nprimary = [["Reconnect", "DoNothing"]]\n'
               'reward_vs = [["Reconnect", "DoNothing"]]\npaper_note = "Reconnect vs doing nothing: +0% (nobody)"')
    result = ex.run_experiment(ex.load_experiment(path), tmp_path / "out", progress=False, draws=200)
    for row in result["rows"]:
        assert row["metrics"]["l2rpn_score"]["value"] is not None and row["metrics"]["l2rpn_score"]["lo"] is not None
        assert np.isfinite(np.asarray(row["episodes"]["score"], dtype=float)).all()
    for cell in result["cells"]:
        for episode in cell["test"]["episodes"]:  # the score's replay played the test episode again
            assert episode["score_steps_survived"] == episode["steps_survived"]
    (primary,) = [c for c in result["comparisons"] if c["primary"]]
    assert primary["p_holm"] is not None and primary["secondary"]["l2rpn_score"]["p_holm"] is not None
    assert primary["secondary"]["episode_reward"]["lo"] is not None  # secondary, not in this family
    assert "p_holm" not in primary["secondary"]["episode_reward"]
    (relative,) = result["relative"]
    assert relative["a_name"] == "Reconnect" and relative["relative"] == pytest.approx(0.0)
    table = (tmp_path / "out" / "results.md").read_text()
    assert "L2RPN score [95% CI]" in table and "L2RPN score A − B [95% CI]" in table
    assert "episode reward A − B [95% CI]" in table and "p (Holm)" in table
    assert "Holm-corrected: the primary comparisons in survival and L2RPN score" in table
    assert "+0% (nobody)" in table and "(A − B) / abs(B)" in table
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["score"] is True and saved["holm"] == ["survival", "score"] and saved["reward_vs"]
    assert "l2rpn_score" in (tmp_path / "out" / "results.csv").read_text().splitlines()[0]


def test_an_experiment_without_a_score_has_no_score_column() -> None:
    rows = [reward_row("a", [[1.0, 2.0]], [None])]
    rows[0]["metrics"] = {"survival_rate": {"value": 1.0}, "l2rpn_score": {"value": None}}
    assert "L2RPN score" not in ex.to_markdown(rows)
    rows[0]["metrics"]["l2rpn_score"] = {"value": 12.0, "lo": 10.0, "hi": 14.0}
    assert "L2RPN score [95% CI]" in ex.to_markdown(rows)


# ----------------------------------------------------------------------------- the shipped files of issue 23


def _training_seeds_and_selection(spec: ex.ExperimentSpec) -> set[int]:
    return {int(k) for row, seed in spec.cells() for _, k in spec.row_config(row, seed).env.eval_pairs}


@pytest.mark.parametrize("path", GRID_FILES, ids=lambda p: p.stem)
def test_the_grid_files_are_valid_and_complete(path: Path) -> None:
    spec = ex.load_experiment(path)  # builds every cell's config; checks pairs disjoint, primaries name rows
    cfg = spec.row_config(next(r for r in spec.rows if r.kind == "sac-only"), 0)
    assert spec.score and cfg.env.name == f"l2rpn_{path.stem.removeprefix('grid_')}".replace(
        "l2rpn_case14", "l2rpn_case14_sandbox")
    assert {row.kind for row in spec.rows} == {"do-nothing", "greedy", "tutor", "sac-only", "expert-guided", "ace",
                                               "maskable-ppo"}
    assert spec.seeds == [0, 1] and all(row.topk in (0, 7) for row in spec.rows if row.trains)
    assert len(spec.test_pairs) >= 32 and len(spec.validation_pairs) >= 16
    seeds = {k for _, k in spec.test_pairs} | {k for _, k in spec.validation_pairs}
    assert not seeds & _training_seeds_and_selection(spec) and max(seeds) < cfg.env.train_seed_start
    assert {s for s, _ in spec.test_pairs} == set(cfg.env.train_scenarios)  # every scenario of the offline copy
    text = path.read_text()
    assert "THE BUDGET" in text and "THE ACTION SET" in text and f"action_sets_{path.stem[5:]}.toml" in text
    assert "Expected time" in text and f"--config experiments/{path.name}" in text
    budgets = {spec.row_config(row, 0).train.total_env_steps for row in spec.rows if row.trains}
    assert budgets == {40000}  # one budget for every training row, MaskablePPO's too
    assert spec.primaries and all(p.a_name.startswith("ACE") for p in spec.primaries)
    # make run's ACE, as the header says: its ace_set, so its ACE and LLM settings (the grid's env and train aside).
    make_run = ex.load_experiment(REPO / "experiments" / "make_run.toml", rows=["ace"])
    ours = spec.row_config(next(r for r in spec.rows if r.kind == "ace"), 0).to_dict()
    theirs = make_run.row_config(make_run.rows[0], 0).to_dict()
    assert spec.ace_overrides == make_run.ace_overrides
    assert (ours["ace"], ours["llm"]) == (theirs["ace"], theirs["llm"])
    assert states_its_status(text)
    # Without an opponent a seed alone does not make a new episode there: it chooses the episode's start.
    assert (cfg.env.start_spread > 0) == (path.stem in ("grid_case14", "grid_wcci_2020"))
    if path.stem == "grid_wcci_2020":
        assert [(p.a_name, p.b_name) for p in spec.reward_vs] == [("ACE (policy alone)",
                                                                   "Expert-guided RL (policy alone)")]
        assert "+22.2%" in spec.paper_note


def states_its_status(header: str) -> bool:
    """An experiment file's header says whether it has run: "NOT RUN YET", or "RUN (<date>" with what it found."""
    return "NOT RUN YET" in header or re.search(r"^# RUN \(\d{4}-\d{2}-\d{2}", header, re.MULTILINE) is not None


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.stem)
def test_the_action_set_studies_compare_sets_on_validation_pairs_of_their_grid(path: Path) -> None:
    spec = ex.load_experiment(path, on="validation")
    grid = ex.load_experiment(REPO / "experiments" / f"grid_{path.stem.removeprefix('action_sets_')}.toml")
    assert spec.validation_pairs == grid.validation_pairs and spec.test_pairs == grid.test_pairs
    trained = [row for row in spec.rows if row.trains]
    sets = [spec.row_config(row, 0).env.action_set for row in trained]
    assert {row.kind for row in trained} == {"sac-only"} and len(set(sets)) == len(sets) >= 2 and "tutor:50" in sets
    assert spec.seeds == [0] and {spec.row_config(row, 0).train.total_env_steps for row in trained} == {10000}
    grid_cfg = grid.row_config(next(r for r in grid.rows if r.kind == "sac-only"), 0)
    assert {spec.row_config(row, 0).env.start_spread for row in trained} == {grid_cfg.env.start_spread}
    assert "--on validation" in path.read_text() and states_its_status(path.read_text())


def test_the_budget_curve_is_make_runs_configuration_at_three_budgets() -> None:
    spec = ex.load_experiment(REPO / "experiments" / "budget_curve.toml")
    make_run = ex.load_experiment(REPO / "experiments" / "make_run.toml")
    assert spec.ace_overrides == make_run.ace_overrides
    for kind in ("sac-only", "expert-guided", "ace"):
        row = next(r for r in spec.rows if r.kind == kind)
        ours, theirs = spec.row_config(row, 0).to_dict(), make_run.row_config(
            next(r for r in make_run.rows if r.kind == kind), 0).to_dict()
        assert ours["train"].pop("total_env_steps") == 100000
        assert ours["train"].pop("keep_best_at") == [20000, 40000, 100000]
        theirs["train"].pop("total_env_steps"), theirs["train"].pop("keep_best_at")
        assert ours == theirs, kind
        assert row.budgets == (20000, 40000, 100000)
    ppo = next(r for r in spec.rows if r.kind == "maskable-ppo")
    assert spec.row_config(ppo, 0).train.total_env_steps == 100000 and ppo.budget is None
    assert spec.test_pairs == make_run.test_pairs and spec.validation_pairs == make_run.validation_pairs
    assert len(spec.primaries) == 12 and spec.seeds == [0, 1] and len(spec.reward_vs) == 3


# The studies that change one setting of another file's trained rows: {file: (the file whose runs it reuses, {kind:
# {variant row id: (its own overrides as (section, key, value))}})}. Their unchanged rows are that file's own runs
# (copied in and reused).
SEL8 = [[0, 10], [0, 11], [0, 12], [0, 13], [0, 22], [0, 36], [0, 43], [0, 49]]
STUDIES_OF_RUNS = {
    "temperature_bound": ("budget_curve", {"sac-only": {"sac-only-bounded": [("sac", "max_alpha", 0.2)]},
                                           "ace": {"ace-bounded": [("sac", "max_alpha", 0.2)]}}),
    "critic_divergence": ("budget_curve", {
        "sac-only": {"sac-only-utd1": [("train", "updates_per_decision", 1)],
                     "sac-only-layernorm": [("sac", "critic_layer_norm", True)],
                     "sac-only-layernorm-bounded": [("sac", "critic_layer_norm", True), ("sac", "max_alpha", 0.2)]}}),
    "selection_wcci_2020": ("grid_wcci_2020", {"sac-only": {"sac-only-sel8": [("env", "eval_pairs", SEL8)]},
                                               "expert-guided": {"expert-guided-rl-sel8": [("env", "eval_pairs", SEL8)]},
                                               "ace": {"ace-sel8": [("env", "eval_pairs", SEL8)]}}),
    "do_nothing_first": ("make_run", {"ace": {"ace-dn-first": [("ace", "do_nothing_first", True)]}}),
}
PRIMARIES_OF_STUDIES = {"do_nothing_first": 4}
"""Primary comparisons of a study that names more than one per changed row (the rest name one each)."""


@pytest.mark.parametrize("name", sorted(STUDIES_OF_RUNS))
def test_a_study_of_another_files_runs_reuses_them_and_changes_one_setting_per_row(name: str) -> None:
    """Its unchanged rows are the other file's own (same ids, same configuration: their runs can be copied in and
    reused); each other row differs from them in the named settings alone."""
    path = REPO / "experiments" / f"{name}.toml"
    spec = ex.load_experiment(path)
    base_name, studied = STUDIES_OF_RUNS[name]
    base = ex.load_experiment(REPO / "experiments" / f"{base_name}.toml")
    assert (spec.test_pairs, spec.validation_pairs, spec.seeds) == (base.test_pairs, base.validation_pairs,
                                                                     base.seeds)
    for kind, variants in studied.items():
        rows = {r.train_id: r for r in spec.rows if r.kind == kind}
        theirs = next(r for r in base.rows if r.kind == kind)
        plain = rows[theirs.train_id]
        assert plain.budgets == theirs.budgets
        assert set(rows) == {theirs.train_id, *variants}
        for seed in spec.seeds:
            assert ex.training_fingerprint(spec.row_config(plain, seed)) == ex.training_fingerprint(
                base.row_config(theirs, seed))
            for variant, changes in variants.items():
                mine, other = spec.row_config(rows[variant], seed).to_dict(), spec.row_config(plain, seed).to_dict()
                for section, key, value in changes:
                    assert mine[section].pop(key) == value != other[section].pop(key)
                assert mine == other
    assert len(spec.primaries) == PRIMARIES_OF_STUDIES.get(name, sum(map(len, studied.values())))
    assert states_its_status(path.read_text())


def test_the_search_study_tests_the_budget_curves_own_trainings_with_the_same_simulations() -> None:
    """Nothing is trained anew: each trained row is the curve's (same id, same configuration: its runs are copied
    in), deployed with the top-7 check whose candidates come partly from the shortlist; the tutor control simulates
    as much as the check, and no check simulates more than a third of the greedy expert's budget."""
    path = REPO / "experiments" / "search_neurips.toml"
    spec, base = ex.load_experiment(path), ex.load_experiment(REPO / "experiments" / "budget_curve.toml")
    assert (spec.test_pairs, spec.validation_pairs, spec.seeds) == (base.test_pairs, base.validation_pairs,
                                                                     base.seeds)
    trained = [r for r in spec.rows if r.trains]
    assert {(r.kind, r.budget, r.shortlist) for r in trained} == {
        (kind, b, m) for kind in ("expert-guided", "ace") for b in (20000, 40000, 100000) for m in (0, 3, 5)}
    for row in trained:
        theirs = next(r for r in base.rows if r.train_id == row.train_id and r.budget == row.budget)
        assert row.topk == 7 and (row.topk + 1) * 3 <= spec.greedy_budget
        for seed in spec.seeds:
            assert ex.training_fingerprint(spec.row_config(row, seed)) == ex.training_fingerprint(
                base.row_config(theirs, seed))
    tutor = next(r for r in spec.rows if r.kind == "tutor")
    assert spec.row_config(tutor, None).train.tutor_budget == 8 and len(spec.primaries) == 12
    assert states_its_status(path.read_text())


@pytest.mark.parametrize("path", [REPO / "experiments" / "budget_curve.toml",
                                  *(REPO / "experiments" / f"{name}.toml" for name in STUDIES_OF_RUNS), *GRID_FILES,
                                  *STUDY_FILES, REPO / "experiments" / "search_neurips.toml"],
                         ids=lambda p: p.stem)
def test_the_smoke_version_of_a_file_keeps_its_rows_and_names_and_shrinks_the_rest(path: Path) -> None:
    spec = ex.load_experiment(path)
    small = ex.smoke_version(spec)  # every cell's configuration built and validated
    assert [r.id for r in small.rows] == [r.id for r in spec.rows] and small.primaries == spec.primaries
    assert len(small.test_pairs) == SMOKE_PAIRS and small.seeds == spec.seeds[:1] and small.smoke
    assert "--smoke" in small.command("out")
    for row in small.rows:
        if row.trains:
            cfg = small.row_config(row, small.seeds[0])
            assert cfg.train.total_env_steps == SMOKE_STEPS
            assert row.budget is None or row.budget in cfg.train.keep_best_at


def test_smoke_budgets_keep_the_order_and_end_at_the_smoke_steps() -> None:
    assert smoke_budgets((20000, 40000, 100000)) == {20000: 60, 40000: 120, 100000: 300}
    assert list(smoke_budgets((1, 2, 100000)).values()) == [1, 2, 300]


@pytest.mark.grid2op
def test_the_smoke_run_of_a_grid_file_runs_the_real_command(tmp_path: Path) -> None:
    """The case14 grid file through the CLI's --smoke, its rows without a language model or sb3-contrib: scored,
    trained and tested end to end."""
    pytest.importorskip("grid2op")
    pytest.importorskip("torch")
    out = tmp_path / "smoke"
    done = subprocess.run(
        [sys.executable, "-m", "ace_hybrid.cli", "experiment", "--config", str(REPO / "experiments" /
                                                                              "grid_case14.toml"),
         "--smoke", "--rows", "donothing,greedy-expert,sac-only-alone", "--out", str(out), "--no-progress",
         "--no-report"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (out / "results.md").read_text()
    assert "(smoke run" in table and "--smoke" in table and "L2RPN score [95% CI]" in table
    results = json.loads((out / "results.json").read_text())
    assert results["smoke"] and len(results["test_pairs"]) == SMOKE_PAIRS
    sac = next(c for c in results["cells"] if c["row"] == "sac-only-alone")
    assert sac["train"]["env_steps"] == SMOKE_STEPS and all(e["score"] is not None for e in sac["test"]["episodes"])
