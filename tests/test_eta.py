"""The experiment bar's remaining time: each cell's expected cost, calibrated on the finished cells of its kind, so a
long first cell does not make the cheap ones left look long (make run once read 9 h 13 min, and ended 4 min later)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest

from ace_hybrid.experiment import load_experiment
from ace_hybrid.experiment.eta import (FULL_EPISODE_STEPS, TEST_SECONDS, TRAIN_SECONDS, RemainingTime, cost_class,
                                       format_duration)
from ace_hybrid.experiment.schedule import cell_groups, results_as_finished

import tiny_settings  # tests/ is on sys.path: see conftest.py

STEPS, PAIRS, TEST_STEPS = 1000, 2, 10
ROWS = tiny_settings.rows(("Greedy", "greedy"), ("SAC-only", "sac-only", "deploy_topk = [0, 2]"), ("ACE", "ace"))


@pytest.fixture
def spec(tmp_path: Path):
    path = tiny_settings.experiment_file(
        tmp_path / "tiny.toml", tiny_settings.BASELINE_ROWS + ROWS, test_max_steps=TEST_STEPS,
        header=f'set = ["train.total_env_steps={STEPS}"]\nace_set = ["llm.backend=smollm2"]')
    return load_experiment(path)


def _plan(spec):
    return [(row, seed, spec.row_config(row, seed)) for row, seed in spec.cells()]


def _record(cell: str, seconds: float) -> dict:
    return {"cell": cell, "started": 1000.0, "finished": 1000.0 + seconds}


def test_cells_fall_in_cost_classes(spec) -> None:
    classes = {row.id: cost_class(row, cfg) for row, _, cfg in _plan(spec)}
    assert classes == {"donothing": "baseline", "reconnect": "baseline", "greedy": "simulating",
                       "sac-only-alone": "training", "sac-only-top2": "training", "ace": "llm-training"}


def test_no_estimate_before_a_cell_has_finished_and_zero_after_the_last(spec) -> None:
    plan = _plan(spec)
    eta = RemainingTime(spec, cell_groups(plan), 1, {})
    assert eta.seconds() is None and eta.describe("donothing") == "donothing"
    for row, seed, _ in plan:
        eta.finished(_record(row.id if seed is None else f"{row.id}-seed{seed}", 1.0))
    assert eta.seconds() == 0.0


def test_a_long_first_cell_does_not_make_the_cheap_ones_left_look_long(spec) -> None:
    """The ACE training finishes first, after an hour; four cheap cells and one SAC training are left. A mean over
    cells would say 5 more hours; its cost class says a fraction of one."""
    plan = _plan(spec)
    eta = RemainingTime(spec, cell_groups(plan), 1, {})
    eta.finished(_record("ace-seed0", 3600.0))
    ace_prior = STEPS * TRAIN_SECONDS["llm-training"] + PAIRS * TEST_STEPS * TEST_SECONDS["llm-training"]
    scale = 3600.0 / ace_prior  # no other class has finished: every prior takes this ratio
    test = PAIRS * TEST_STEPS
    left = (2 * test * TEST_SECONDS["baseline"] + test * TEST_SECONDS["simulating"]
            + STEPS * TRAIN_SECONDS["training"] + 2 * test * TEST_SECONDS["training"]) * scale
    assert eta.seconds() == pytest.approx(left) and eta.seconds() < 3600.0
    assert "left, ends ~" in eta.describe()


def test_each_class_is_calibrated_on_its_own_finished_cells(spec) -> None:
    plan = _plan(spec)
    eta = RemainingTime(spec, cell_groups(plan), 1, {})
    test = PAIRS * TEST_STEPS
    eta.finished(_record("donothing", 4 * test * TEST_SECONDS["baseline"]))  # baselines: 4 x their prior
    eta.finished(_record("ace-seed0", 0.5 * (STEPS * TRAIN_SECONDS["llm-training"]
                                             + test * TEST_SECONDS["llm-training"])))  # ACE: half of it
    overall = (4 * test * TEST_SECONDS["baseline"] + 0.5 * (STEPS * TRAIN_SECONDS["llm-training"]
                                                            + test * TEST_SECONDS["llm-training"])) / (
        test * TEST_SECONDS["baseline"] + STEPS * TRAIN_SECONDS["llm-training"] + test * TEST_SECONDS["llm-training"])
    left = (4 * test * TEST_SECONDS["baseline"]  # the other baseline, at its class's ratio
            + (test * TEST_SECONDS["simulating"] + STEPS * TRAIN_SECONDS["training"]
               + 2 * test * TEST_SECONDS["training"]) * overall)  # classes not seen yet: the ratio over all
    assert eta.seconds() == pytest.approx(left)


def test_workers_share_the_work_but_a_group_runs_in_one(spec) -> None:
    plan = _plan(spec)
    one, four = (RemainingTime(spec, cell_groups(plan), jobs, {}) for jobs in (1, 4))
    for eta in (one, four):
        eta.finished(_record("donothing", PAIRS * TEST_STEPS * TEST_SECONDS["baseline"]))  # scale 1
    ace = STEPS * TRAIN_SECONDS["llm-training"] + PAIRS * TEST_STEPS * TEST_SECONDS["llm-training"]
    assert one.seconds() / 4 < ace  # four workers would share the rest, but the ACE group cannot be split
    assert four.seconds() == pytest.approx(ace)


def test_a_run_already_trained_costs_only_its_tests(spec) -> None:
    from ace_hybrid.experiment import training_fingerprint

    plan = _plan(spec)
    row, seed, cfg = next(c for c in plan if c[0].id == "sac-only-alone")
    trained = {(f"runs/{row.train_id}-seed{seed}", training_fingerprint(cfg)): {}}
    fresh, reused = (RemainingTime(spec, cell_groups(plan), 1, t) for t in ({}, trained))
    for eta in (fresh, reused):
        eta.finished(_record("donothing", PAIRS * TEST_STEPS * TEST_SECONDS["baseline"]))  # scale 1
    assert fresh.seconds() - reused.seconds() == pytest.approx(STEPS * TRAIN_SECONDS["training"])


def test_full_length_episodes_count_as_whole_scenarios(spec) -> None:
    spec.test_max_steps = 0
    eta = RemainingTime(spec, [[_plan(spec)[0]], [_plan(spec)[1]]], 1, {})
    eta.finished(_record("donothing", PAIRS * FULL_EPISODE_STEPS * TEST_SECONDS["baseline"]))
    assert eta.seconds() == pytest.approx(PAIRS * FULL_EPISODE_STEPS * TEST_SECONDS["baseline"])


@pytest.mark.parametrize(("seconds", "text"), [(4.4, "4 s"), (59.6, "1 min"), (754, "12 min"), (3900, "1 h 05 min"),
                                               (33180, "9 h 13 min"), (183600, "2 d 3 h")])
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.grid2op
def test_the_bar_shows_the_estimate_not_a_mean_over_cells(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("grid2op")
    from ace_hybrid.experiment import run_experiment

    path = tiny_settings.experiment_file(tmp_path / "baselines.toml")
    run_experiment(load_experiment(path), tmp_path / "out", progress=True)
    bar = capfd.readouterr().err
    assert "left, ends ~" in bar and "cell/s" not in bar and "s/cell" not in bar, bar


def test_the_bar_moves_as_each_group_finishes_not_when_all_have() -> None:
    # With --jobs 2 the bar once stayed at 0 until every group had finished (wait(FIRST_EXCEPTION) returns on the
    # first failure or when all are done): a finished group's cells now arrive while another still runs.
    slow, fast = Future(), Future()
    fast.set_result(["fast"])
    results = results_as_finished({slow, fast})
    assert next(results) == ["fast"] and not slow.done()
    slow.set_result(["slow"])
    assert list(results) == [["slow"]]


def test_the_first_failing_group_is_raised_and_the_waiting_ones_cancelled() -> None:
    failing, waiting = Future(), Future()
    failing.set_exception(RuntimeError("group 2 failed"))
    with pytest.raises(RuntimeError, match="group 2 failed"):
        list(results_as_finished({failing, waiting}))
    assert waiting.cancelled()
