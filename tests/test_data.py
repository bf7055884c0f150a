"""Generated weeks: the plan, the set folder, generation (parallel, resumable, kill-safe, reproducible), the checks,
the splits, and the environment layer opening a set by name or path.

The orchestration tests use a scripted worker (tests/data_fixtures.py); the real chronix2grid worker is run in
``make data-env``'s environment on short weeks (12 steps), twice, and compared byte for byte.
"""

from __future__ import annotations

import bz2
import filecmp
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ace_hybrid.data.splits import PATTERN, split_of
from ace_hybrid.data.weeks import MAX_WEEKS, date_order, plan_weeks, week_seeds

ROOT = Path(__file__).resolve().parents[1]
DATES = [f"2035-{m:02d}-{d:02d}" for m in range(1, 13) for d in (1, 8, 15, 22)][:48] + [
    "2035-12-29", "2035-12-30", "2035-12-31", "2035-12-28"]


# ----------------------------------------------------------------------------- the plan and the splits


def test_a_longer_plan_keeps_every_week_of_a_shorter_one():
    assert plan_weeks(DATES, 7, 28) == plan_weeks(DATES, 7, 60)[:28]


def test_week_seeds_are_pinned_functions_of_seed_and_week():
    # Pinned: a change here regenerates every user's weeks differently.
    assert week_seeds(0, 0) != week_seeds(0, 1) != week_seeds(1, 1)
    assert all(0 <= s < 2**32 - 1 for s in week_seeds(123, 456))
    assert week_seeds(0, 0) == (1300616732, 1159855724, 3779224189)


def test_the_first_weeks_fall_in_different_seasons():
    months = [int(w.start_date[5:7]) for w in plan_weeks(DATES, 0, 4)]
    assert len({(m - 1) // 3 for m in months}) == 4, months


def test_past_one_year_weeks_reuse_dates_with_a_new_scenario_id():
    plan = plan_weeks(DATES, 0, 60)
    assert sorted(date_order(DATES)) == list(range(52))
    assert {w.start_date for w in plan[:52]} == set(DATES)
    assert plan[52].start_date == plan[0].start_date and plan[52].scen_id == 1 and plan[52].seeds != plan[0].seeds
    assert len({w.name for w in plan}) == 60


@pytest.mark.parametrize(("count", "seed", "match"), [(0, 0, r"weeks = 0 out of range \[1, 999\]"),
                                                      (MAX_WEEKS + 1, 0, "weeks = 1000 out of range"),
                                                      (3, -1, r"seed = -1 out of range \[0, 2\^32\)")])
def test_bad_week_count_or_seed_names_the_range(count, seed, match):
    with pytest.raises(ValueError, match=match):
        plan_weeks(DATES, seed, count)


def test_28_weeks_split_16_4_8_each_split_spread_over_the_year():
    plan = plan_weeks(DATES, 0, 28)
    split = {s: [w for w in plan if split_of(w.index) == s] for s in set(PATTERN)}
    assert {s: len(ws) for s, ws in split.items()} == {"train": 16, "validation": 4, "test": 8}
    for s, ws in split.items():  # every split sees at least 3 of the 4 seasons
        assert len({(int(w.start_date[5:7]) - 1) // 3 for w in ws}) >= 3, (s, [w.start_date for w in ws])
    with pytest.raises(ValueError, match="week = -1"):
        split_of(-1)


# ----------------------------------------------------------------------------- the set on disk (grid2op)

def _data_modules():
    pytest.importorskip("grid2op")
    pytest.importorskip("lightsim2grid")
    from ace_hybrid.data import checks, generate, sets

    return sets, generate, checks


@pytest.mark.grid2op
def test_a_set_plays_its_weeks_like_the_offline_copy_by_path_and_by_name(tmp_path, monkeypatch):
    _data_modules()
    from data_fixtures import offline_weeks_set

    from ace_hybrid.grid.agents import DoNothingAgent
    from ace_hybrid.grid.env import make_env, scenario_ids
    from ace_hybrid.grid.evaluation import play_episode

    dataset = offline_weeks_set(tmp_path)
    monkeypatch.setenv("ACE_HYBRID_DATA", str(tmp_path))
    offline = make_env("l2rpn_idf_2023", seed=0, dataset="test")
    for source in (str(dataset.path), dataset.path.name):  # by path, then by name under $ACE_HYBRID_DATA
        env = make_env(source, seed=0)
        assert env.ace_dataset.generated and env.ace_dataset.name == "l2rpn_idf_2023"
        assert scenario_ids(env) == [0, 3]
        for week, scenario in ((0, 0), (3, 1)):  # week 3 holds the offline copy's scenario 1
            ours = play_episode(env, DoNothingAgent(env.action_space), week, 5, max_steps=120)
            theirs = play_episode(offline, DoNothingAgent(offline.action_space), scenario, 5, max_steps=120)
            assert (ours.steps_survived, ours.cumulative_reward) == (theirs.steps_survived, theirs.cumulative_reward)
        with pytest.raises(IndexError, match=r"scenario 1 out of range: .* holds scenarios \{0, 3\}"):
            play_episode(env, DoNothingAgent(env.action_space), 1, 5, max_steps=3)
        env.close()
    offline.close()
    with pytest.raises(ValueError, match="not a supported name .* nor a generated set"):
        make_env("no-such-set", seed=0)


@pytest.mark.grid2op
def test_a_set_made_differently_or_a_grid_without_generation_parameters_is_refused(tmp_path):
    sets, _, _ = _data_modules()
    sets.create_set(tmp_path / "s", "l2rpn_idf_2023", seed=1)
    assert (tmp_path / "s" / "scenario_params.json").is_file() and sets.GeneratedSet(tmp_path / "s").finished() == []
    from ace_hybrid.grid.env import make_env

    with pytest.raises(ValueError, match="holds no scenario yet .* ace-hybrid data generate"):
        make_env(str(tmp_path / "s"), seed=0)
    with pytest.raises(ValueError, match=r"seed = 1 there, 2 asked"):
        sets.create_set(tmp_path / "s", "l2rpn_idf_2023", seed=2)
    (tmp_path / "other").mkdir()
    with pytest.raises(ValueError, match="is not a generated set"):
        sets.create_set(tmp_path / "other", "l2rpn_idf_2023", seed=1)
    with pytest.raises(ValueError, match="l2rpn_case14_sandbox has no generation parameters"):
        sets.create_set(tmp_path / "c", "l2rpn_case14_sandbox", seed=1)


def _rewrite(path: Path, edit) -> None:
    import pandas as pd

    frame = pd.read_csv(path, sep=";")
    edit(frame)
    with bz2.open(path, "wt") as f:
        frame.to_csv(f, sep=";", index=False)


@pytest.mark.grid2op
@pytest.mark.slow
def test_checks_pass_sound_weeks_and_flag_nan_and_impossible_production(tmp_path):
    _, _, checks = _data_modules()
    import shutil

    from data_fixtures import offline_weeks_set

    dataset = offline_weeks_set(tmp_path)
    bad_nan, bad_pmax = dataset.week_dir("002_2035-01-15"), dataset.week_dir("005_2035-01-15")
    for bad in (bad_nan, bad_pmax):
        shutil.copytree(dataset.week_dir("000_2035-01-15"), bad)
    _rewrite(bad_nan / "load_p.csv.bz2", lambda f: f.iloc.__setitem__((7, 3), float("nan")))
    _rewrite(bad_pmax / "prod_p.csv.bz2", lambda f: f.iloc.__setitem__((9, 0), 1e5))
    result = checks.check_set(dataset, jobs=2, progress=False)
    weeks = result["weeks"]
    assert weeks["000_2035-01-15"]["problems"] == [] and weeks["003_2035-08-20"]["problems"] == []
    assert "load_p: 1 NaN or infinite values (first: step 7" in weeks["002_2035-01-15"]["problems"][0]
    assert any("outside [0, Pmax" in p for p in weeks["005_2035-01-15"]["problems"])
    # The copies play as the offline copy does: the same survival, from the same reference episodes.
    offline = {r["name"]: r for r in result["offline_copy"]}
    assert weeks["000_2035-01-15"]["greedy"] == offline["2035-01-15_0"]["greedy"]
    assert weeks["003_2035-08-20"]["do_nothing"] == offline["2035-08-20_0"]["do_nothing"]
    splits = json.loads((dataset.path / "splits.json").read_text())
    # Weeks 2 and 5 are test weeks by their number (PATTERN); flagged, they are left out, not moved.
    assert (splits["train"], splits["validation"], splits["test"]) == ([0, 3], [], [])
    assert set(splits["flagged"]) == {"2", "5"} and "NaN" in splits["flagged"]["2"]
    assert "| week 002_2035-01-15 | left out |" in checks.checks_markdown(result, splits)
    # Experiments take each week from its split: a training week in test_pairs, a flagged week anywhere, refused.
    from tiny_settings import experiment_file

    from ace_hybrid.data.splits import check_split_use
    from ace_hybrid.experiment import load_experiment

    check_split_use(str(dataset.path), [("env.train_scenarios", "train", [0, 3])])
    with pytest.raises(ValueError, match="week 2 of .* is not a train week: it is left out of the splits .*NaN"):
        check_split_use(str(dataset.path), [("env.train_scenarios", "train", [2])])
    header = f'set = ["env.name=l2rpn_idf_2023", "env.data={dataset.path}", "env.eval_pairs=[[3, 7]]"]'
    with pytest.raises(ValueError, match="test_pairs: week 0 of .* is not a test week: it is a train week"):
        load_experiment(experiment_file(tmp_path / "e.toml", header=header))
    # Test weeks not generated yet (week 9: test by its number) are refused where played, accepted where not
    # (an experiment on its validation pairs); a flagged week is refused either way, and so is a week of another split.
    missing = [("test_pairs", "test", [9])]
    # Where played, the error gives the command that makes exactly the missing weeks of every use.
    both = [*missing, ("validation_pairs", "validation", [13, 6, 13])]
    with pytest.raises(ValueError, match=r"week\(s\) 6, 9, 13 of .* are not in the set: make them with `ace-hybrid "
                       r"data generate --env l2rpn_idf_2023 --weeks 14 --seed 0 --name .* --only 6,9,13 --jobs 2`"):
        check_split_use(str(dataset.path), both)
    check_split_use(str(dataset.path), missing, unplayed=("test_pairs",))
    for weeks, why in (([5], "left out of the splits .*outside"), ([7], "it is a train week")):
        with pytest.raises(ValueError, match=f"week {weeks[0]} of .* is not a test week: .*{why}"):
            check_split_use(str(dataset.path), [("test_pairs", "test", weeks)], unplayed=("test_pairs",))


# ----------------------------------------------------------------------------- generation


def _generate(root: Path, weeks: int, env: dict[str, str], python: str, **kwargs) -> dict:
    os.environ.update(env)
    from ace_hybrid.data.generate import generate_weeks

    return generate_weeks("l2rpn_idf_2023", weeks, 0, root=root, python=python, progress=False, **kwargs)


@pytest.mark.grid2op
def test_generation_runs_weeks_in_parallel_records_failures_and_resumes(tmp_path, monkeypatch):
    _, generate, _ = _data_modules()
    from data_fixtures import scripted_generator

    python, env = scripted_generator(tmp_path / "fake")
    monkeypatch.setenv("FAKE_FAIL", "2035-08-13_0")  # week 1's date
    first = _generate(tmp_path, 4, env, python, jobs=2)
    assert first["generated"] == ["000_2035-01-01", "002_2035-03-26", "003_2035-11-05"]
    assert first["failed"] == ["001_2035-08-13"] and first["reused"] == []
    dataset = generate.GeneratedSet(Path(first["path"]))
    assert "Nan generated" in dataset.failed()["001_2035-08-13"]
    assert not dataset.partial_dir().exists()
    # The seeds the worker got are the plan's: week k's, whatever ran beside it.
    plan = plan_weeks(dataset.dates(), 0, 4)
    assert (dataset.week_dir(plan[2].name) / "seeds.txt").read_text() == " ".join(map(str, plan[2].seeds))
    assert not (dataset.week_dir(plan[2].name) / "timing.json").exists()  # timings live in logs/
    assert len((dataset.path / "logs" / "timing.jsonl").read_text().splitlines()) == 3
    more = _generate(tmp_path, 6, env, python, jobs=1)
    assert more["generated"] == ["004_2035-06-18", "005_2035-01-29"] and len(more["reused"]) == 3
    monkeypatch.setenv("FAKE_CRASH", "2035-09-10_0")  # week 6: the worker dies without a verdict
    with pytest.raises(RuntimeError, match="week 006_2035-09-10: the worker exited with 1"):
        _generate(tmp_path, 7, env, python)
    with pytest.raises(ValueError, match="jobs = 0 out of range"):
        _generate(tmp_path, 7, env, python, jobs=0)


@pytest.mark.grid2op
def test_generation_of_one_split_makes_its_weeks_only_and_the_rest_later(tmp_path):
    _, generate, _ = _data_modules()
    from data_fixtures import scripted_generator

    python, env = scripted_generator(tmp_path / "fake")
    tests = _generate(tmp_path, 7, env, python, jobs=2, splits=["test"])
    assert tests["generated"] == ["002_2035-03-26", "005_2035-01-29"] and tests["reused"] == []
    # The same weeks as a run of the whole set makes, byte for byte; the others come when asked for.
    whole = _generate(tmp_path / "whole", 7, env, python, jobs=2)
    rest = _generate(tmp_path, 7, env, python, jobs=2)
    assert rest["reused"] == tests["generated"] and len(rest["generated"]) == 5
    assert _differences(Path(whole["path"]), Path(rest["path"])) == []
    later = _generate(tmp_path / "later", 7, env, python, splits=["test", "train"], first=3)
    assert later["generated"] == ["003_2035-11-05", "004_2035-06-18", "005_2035-01-29"]
    with pytest.raises(ValueError, match=r"first = 7 out of range \[0, 7\)"):
        _generate(tmp_path, 7, env, python, first=7)
    # --only: the weeks one file uses, the same weeks a whole run makes there.
    chosen = _generate(tmp_path / "only", 7, env, python, only=[4, 1])
    assert chosen["generated"] == ["001_2035-08-13", "004_2035-06-18"]
    for week in chosen["generated"]:
        assert _differences(Path(whole["path"], "chronics", week), Path(chosen["path"], "chronics", week)) == []
    for bad in ([], [7], [-1]):
        with pytest.raises(ValueError, match=r"must be non-empty week numbers in \[0, 7\)"):
            _generate(tmp_path, 7, env, python, only=bad)
    for bad in ([], ["holdout"]):
        with pytest.raises(ValueError, match=r"must be a non-empty subset of \['train', 'validation', 'test'\]"):
            _generate(tmp_path, 7, env, python, splits=bad)


@pytest.mark.grid2op
def test_a_killed_generation_leaves_no_half_week_and_the_rerun_matches_a_clean_run(tmp_path):
    _data_modules()
    from data_fixtures import scripted_generator

    python, env = scripted_generator(tmp_path / "fake")
    command = [sys.executable, "-m", "ace_hybrid.cli", "data", "generate", "--weeks", "4", "--seed", "0", "--jobs",
               "2", "--root", str(tmp_path / "killed"), "--python", python, "--no-progress"]
    child_env = dict(os.environ, **env, FAKE_SLEEP="0.15", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(command, env=child_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    chronics = tmp_path / "killed" / "l2rpn_idf_2023-weeks-s0" / "chronics"
    partial = chronics.parent / ".partial"
    deadline = time.time() + 120
    while time.time() < deadline and not any(partial.glob("*/*/load_p.csv.bz2")):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the command and its workers, half-way through writing weeks
    proc.wait()
    assert any(partial.glob("*/*")), "the kill came after the weeks were written: nothing tested"
    for week in chronics.iterdir():  # what is in chronics/ is whole
        assert len(list(week.iterdir())) == 14, week
    done = _generate(tmp_path / "killed", 4, env, python, jobs=2)
    assert len(done["generated"]) + len(done["reused"]) == 4 and not partial.exists()
    _generate(tmp_path / "clean", 4, env, python, jobs=1)
    clean = tmp_path / "clean" / "l2rpn_idf_2023-weeks-s0"
    assert _differences(clean, chronics.parent) == []


def _differences(a: Path, b: Path) -> list[str]:
    """Files that differ or exist on one side only, ``logs/`` (timings) and the lock file aside."""
    def files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                and p.relative_to(root).parts[0] not in ("logs", ".lock")}

    names_a, names_b = files(a), files(b)
    diff = sorted(names_a ^ names_b)
    _, mismatch, errors = filecmp.cmpfiles(a, b, sorted(names_a & names_b), shallow=False)
    return diff + mismatch + errors


def _generation_python() -> str | None:
    python = ROOT / ".venv-data" / "bin" / "python"
    return str(python) if python.is_file() else os.environ.get("ACE_HYBRID_DATA_PYTHON")


@pytest.mark.grid2op
@pytest.mark.slow
def test_chronix2grid_weeks_reproduce_byte_for_byte_and_play(tmp_path):
    """The real worker in the generation environment (``make data-env``), on weeks of 12 steps."""
    _, generate, checks = _data_modules()
    python = _generation_python()
    if python is None:
        pytest.skip("no generation environment: make data-env (make test builds it)")
    from ace_hybrid.grid.env import make_env, scenario_ids

    runs = [generate.generate_weeks("l2rpn_idf_2023", 2, 3, root=tmp_path / r, jobs=2, python=python, steps=12,
                                    progress=False) for r in ("a", "b")]
    assert runs[0]["generated"] == ["000_2035-01-01", "001_2035-08-13"] and runs[0]["failed"] == []
    a, b = (Path(r["path"]) for r in runs)
    assert _differences(a, b) == []
    env = make_env(str(a), seed=0)
    assert scenario_ids(env) == [0, 1]
    env.close()
    result = checks.check_set(generate.GeneratedSet(a), jobs=1, progress=False)
    week = result["weeks"]["001_2035-08-13"]
    assert week["steps"] == 14 and week["max_steps"] >= 12 and "greedy" in week


# ----------------------------------------------------------------------------- the command line


@pytest.mark.grid2op
def test_data_commands_name_a_missing_set_and_a_bad_count(tmp_path, capsys):
    from ace_hybrid.cli import main

    assert main(["data", "show", str(tmp_path / "nothing")]) == 2
    assert "no generated set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["data", "generate", "--weeks", "0", "--seed", "0"])
    assert "0 out of range [1, inf)" in capsys.readouterr().err
    assert main(["data", "generate", "--weeks", "1000", "--seed", "0", "--root", str(tmp_path)]) == 2
    assert "weeks = 1000 out of range [1, 999]" in capsys.readouterr().err


@pytest.mark.grid2op
@pytest.mark.slow
def test_evaluate_and_train_run_on_a_generated_week_by_name_and_path(tmp_path):
    _data_modules()
    from data_fixtures import offline_weeks_set
    from tiny_settings import TINY

    dataset = offline_weeks_set(tmp_path)
    env = dict(os.environ, ACE_HYBRID_DATA=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path),
               OMP_WAIT_POLICY="PASSIVE")
    cli = [sys.executable, "-m", "ace_hybrid.cli"]
    evaluated = subprocess.run([*cli, "evaluate", "--env", dataset.path.name, "--agent", "do-nothing", "--episodes",
                                "3", "--seeds", "1", "--max-steps", "20", "--out", str(tmp_path / "eval"),
                                "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    assert report["episodes"][0]["scenario"] == 3 and report["episodes"][0]["steps_survived"] == 20
    overrides = [*TINY, "env.name=l2rpn_idf_2023", f"env.data={dataset.path}", "env.train_scenarios=[0, 3]",
                 "env.eval_pairs=[[3, 7]]", "env.action_set=tutor:5", "env.action_set_states=8",
                 "train.total_env_steps=150", "train.learning_starts=8"]
    trained = subprocess.run([*cli, "train", "--run-dir", str(tmp_path / "run"),
                              *[a for o in overrides for a in ("--set", o)]],
                             env=env, capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert (tmp_path / "run" / "best.pt").is_file()
    wrong = subprocess.run([*cli, "train", "--run-dir", str(tmp_path / "wrong"), "--set",
                            "env.name=l2rpn_case14_sandbox", "--set", f"env.data={dataset.path}"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 2 and "holds 'l2rpn_idf_2023' data but env.name = 'l2rpn_case14_sandbox'" in wrong.stderr


@pytest.mark.grid2op
def test_a_tutor_collection_plays_validation_weeks_and_refuses_test_weeks(tmp_path, capsys):
    _data_modules()
    from data_fixtures import offline_weeks_set

    from ace_hybrid.cli import main
    from ace_hybrid.config import load_config
    from ace_hybrid.training.tutor_decisions import collect_decisions

    dataset = offline_weeks_set(tmp_path)
    (dataset.path / "splits.json").write_text(json.dumps({"train": [0], "validation": [], "test": [3],
                                                           "flagged": {}}))
    cfg = load_config(None, ["env.name=l2rpn_idf_2023", f"env.data={dataset.path}", "env.train_scenarios=[0]",
                             "env.eval_pairs=[[0, 1]]", "env.action_set=tutor:5"])
    with pytest.raises(ValueError, match=r"weeks \[3\] of .* are test weeks"):
        collect_decisions(cfg, tmp_path / "c", 5, progress=False, scenarios=[0, 3])
    base = ["junior", "collect", "--set", "env.name=l2rpn_idf_2023", "--set", f"env.data={dataset.path}",
            "--decisions", "5", "--out", str(tmp_path / "c")]
    assert main([*base, "--scenarios", "validation"]) == 2  # the set has no validation week left
    assert "scenarios = [] out of range" in capsys.readouterr().err
    assert main([*base, "--scenarios", "3,x"]) == 2
    assert "--scenarios '3,x': expected comma-separated scenario ids or `validation`" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()  # refused before anything was written or played
    # An experiment refuses a junior fitted on a week outside the training split (its `learnt_from`).
    import torch

    from ace_hybrid.experiment import load_experiment

    (dataset.path / "splits.json").write_text(json.dumps({"train": [0], "validation": [5], "test": [3],
                                                           "flagged": {}}))  # week 5: a validation week on paper
    junior = {"format": 1, "kind": "junior", "config": cfg.to_dict(), "actor": {}, "normalizer": {},
              "action_set": None, "fit": {"learnt_from": [0, 3]}}
    torch.save(junior, tmp_path / "junior.pt")
    config = ROOT / "configs" / "l2rpn_idf_2023.toml"
    (tmp_path / "e.toml").write_text(
        f'name = "j"\nconfig = "{config}"\nseeds = [0]\ntest_pairs = [[3, 100]]\n'
        f'set = ["env.data={dataset.path}", "env.train_scenarios=[0]", "env.eval_pairs=[[5, 1]]"]\n'
        f'[[rows]]\nname = "Junior"\nkind = "junior"\nset = ["train.init_policy={tmp_path / "junior.pt"}"]\n')
    with pytest.raises(ValueError, match=r"the weeks train.init_policy = .* learnt from: week 3 of .* is not a "
                                         r"train week: it is a test week"):
        load_experiment(tmp_path / "e.toml")
