"""Baselines under the activation rule, the evaluation report and the `evaluate` command."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("grid2op")
from ace_hybrid.agents import make_agent
from ace_hybrid.grid.agents import DoNothingAgent, RecoPowerlineAgent
from ace_hybrid.grid.evaluation import evaluate, parse_pairs
from ace_hybrid.grid.env import reset_episode
from ace_hybrid.grid.rules import SafeRule, in_danger

pytestmark = pytest.mark.grid2op


def test_safe_rule_reconnects_a_disconnected_line(make_grid_env) -> None:
    env = make_grid_env("l2rpn_case14_sandbox")
    reset_episode(env, 0, 0)
    obs, *_ = env.step(env.action_space({"set_line_status": [(3, -1)]}))
    for _ in range(env.parameters.NB_TIMESTEP_COOLDOWN_LINE):
        obs, *_ = env.step(env.action_space({}))
    assert not obs.line_status[3] and obs.time_before_cooldown_line[3] == 0
    rule = SafeRule(env.action_space, threshold=0.99)
    action = rule(obs)
    assert action.line_set_status[3] == 1
    assert rule.simulations >= 1
    with pytest.raises(ValueError, match="threshold"):
        SafeRule(env.action_space, threshold=-1.0)


def test_agents_decide_only_in_danger(make_grid_env) -> None:
    env = make_grid_env("l2rpn_neurips_2020_track1")
    obs = reset_episode(env, 1, 1)
    agent = DoNothingAgent(env.action_space, threshold=0.9)
    dangers = 0
    for _ in range(120):
        dangers += in_danger(obs, 0.9)
        obs, _, done, _ = env.step(agent.act(obs, 0.0))
        if done:
            break
    assert agent.decisions == dangers


def test_evaluation_reports_every_episode_and_totals(make_grid_env, tmp_path) -> None:
    env = make_grid_env("l2rpn_neurips_2020_track1")
    report = evaluate(env, RecoPowerlineAgent(env.action_space), [(0, 0), (1, 1)], max_steps=60, progress=False)
    totals = report.totals()
    assert [(e.scenario, e.seed) for e in report.episodes] == [(0, 0), (1, 1)]
    assert totals["max_steps"] == 120 and 0 < totals["steps_survived"] <= 120
    assert totals["survival_rate"] == pytest.approx(totals["steps_survived"] / 120)
    assert all(e.wall_time_s > 0 for e in report.episodes)
    json_path, md_path = report.save(tmp_path)
    data = json.loads(json_path.read_text())
    assert data["totals"]["steps_survived"] == totals["steps_survived"]
    assert "| **all** |" in md_path.read_text() and "| acted |" in md_path.read_text()
    assert data["totals"]["acted"] == sum(e["acted"] for e in data["episodes"]) <= totals["decisions"]
    again = evaluate(env, RecoPowerlineAgent(env.action_space), [(0, 0), (1, 1)], max_steps=60, progress=False)
    assert [e.cumulative_reward for e in again.episodes] == [e.cumulative_reward for e in report.episodes]


def test_pairs_broadcast_one_seed_and_reject_mismatches() -> None:
    assert parse_pairs([0, 1], [5]) == [(0, 5), (1, 5)]
    with pytest.raises(ValueError, match="2 scenarios but 3 seeds"):
        parse_pairs([0, 1], [1, 2, 3])


def test_unknown_agent_lists_the_valid_ones(make_grid_env) -> None:
    with pytest.raises(ValueError, match="do-nothing, reco, greedy"):
        make_agent("genius", make_grid_env("l2rpn_case14_sandbox"))


@pytest.mark.parametrize(("old", "new"), [("donothing", "do-nothing"), ("llm_lac", "lac")])
def test_an_old_spelling_names_the_new_one(make_grid_env, old: str, new: str) -> None:
    with pytest.raises(ValueError, match=f"agent '{old}' is now spelled '{new}'"):
        make_agent(old, make_grid_env("l2rpn_case14_sandbox"))


def test_the_random_candidate_control_plays_the_lac_agents_candidates_at_random(make_grid_env) -> None:
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.env import reset_episode

    env = make_grid_env("l2rpn_case14_sandbox")
    catalog = ActionCatalog.for_env(env)
    obs = reset_episode(env, 0, 0)
    agent = make_agent("random-candidate", env, threshold=0.0)
    options = {0, *(int(i) for i in catalog.shortlist(obs, agent.candidates - 1))}
    played = [catalog.index_of(agent.act(obs, 0.0)) for _ in range(60)]
    assert set(played) == options  # every candidate, nothing else
    again = make_agent("random-candidate", env, threshold=0.0)
    assert [catalog.index_of(again.act(obs, 0.0)) for _ in range(60)] == played  # seeded


def test_evaluate_command_end_to_end(tmp_path) -> None:
    out = tmp_path / "eval"
    proc = subprocess.run(
        [sys.executable, "-m", "ace_hybrid.cli", "evaluate", "--env", "l2rpn_case14_sandbox", "--agent", "reco",
         "--episodes", "0", "--seeds", "3", "--max-steps", "40", "--out", str(out), "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| **all** |" in proc.stdout
    data = json.loads((out / "evaluation.json").read_text())
    assert data["episodes"][0]["seed"] == 3 and data["episodes"][0]["max_steps"] == 40
    bad = subprocess.run([sys.executable, "-m", "ace_hybrid.cli", "evaluate", "--env", "nope", "--agent", "reco"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "unknown environment 'nope'" in bad.stderr


def test_greedy_expert_outlasts_doing_nothing(make_grid_env) -> None:
    env = make_grid_env("l2rpn_neurips_2020_track1")
    pairs = [(1, 1), (1, 3)]  # do nothing loses the grid early on both
    base = evaluate(env, make_agent("do-nothing", env), pairs, max_steps=400, progress=False).totals()
    greedy_agent = make_agent("greedy", env, budget=12)
    greedy = evaluate(env, greedy_agent, pairs, max_steps=400, progress=False).totals()
    assert base["steps_survived"] < base["max_steps"]
    assert greedy["steps_survived"] > base["steps_survived"]
    # What each chose: doing nothing never acts; the expert acts at some of its decisions, not more than it decides.
    assert base["acted"] == 0 < base["decisions"] and 0 < greedy["acted"] <= greedy["decisions"]
    assert 0 < greedy["decision_simulations"] <= 12 * greedy["decisions"]  # its budget, do nothing included
    assert greedy["simulations"] == greedy["decision_simulations"] + greedy_agent.safe_rule.simulations


def test_l2rpn_score_is_computed_on_a_private_copy(make_grid_env) -> None:

    from ace_hybrid.files import cache_root
    from ace_hybrid.grid.scores import score_report

    env = make_grid_env("l2rpn_case14_sandbox")
    report = evaluate(env, make_agent("do-nothing", env), [(1, 4), (1, 5)], max_steps=20, progress=False)
    score_report(report, lambda e: make_agent("do-nothing", e), max_steps=20, env_name="l2rpn_case14_sandbox")
    assert "ScoreL2RPN2020" in report.score_note
    assert all(e.score is not None and np.isfinite(e.score) for e in report.episodes)
    assert [e.score_steps_survived for e in report.episodes] == [e.steps_survived for e in report.episodes]
    copies = list((cache_root() / "score_envs" / "l2rpn_case14_sandbox").iterdir())
    assert copies and all(len(list((c / "chronics").iterdir())) == 1 for c in copies if c.is_dir())
    # grid2op caches the reference episodes in the folder without checking their seeds: one copy per (scenario, seed).
    both = [c for c in copies if c.name.endswith(("-seed4", "-seed5"))]
    assert len(both) == 2 and all(any(p.name.startswith("_statistics_") for p in c.iterdir()) for c in both)
    assert "n/a" not in report.to_markdown().splitlines()[-1]


def test_a_cut_episode_scored_against_whole_references_survived_every_step(make_grid_env) -> None:
    """grid2op counts a failing step as played; an episode cut at max_steps has not failed, even where the copy's
    references were computed on the whole episode (grid2op reuses them)."""
    from ace_hybrid.grid.scores import score_report

    env = make_grid_env("l2rpn_case14_sandbox")
    for cut in (None, 20):
        report = evaluate(env, make_agent("do-nothing", env), [(2, 6)], max_steps=cut, progress=False)
        score_report(report, lambda e: make_agent("do-nothing", e), max_steps=cut)
        assert report.episodes[0].score_steps_survived == report.episodes[0].steps_survived == (cut or 575)


def test_an_episode_that_starts_late_is_evaluated_and_scored_from_its_start(tmp_path) -> None:
    """With env.start_spread the seed moves the episode's start: survival counts the steps left from there, and the
    score replays the same episode on a copy whose time series begin at that step."""
    import grid2op
    from lightsim2grid import LightSimBackend

    from ace_hybrid.grid.env import episode_start, make_env
    from ace_hybrid.grid.scores import copy_path, score_report

    env = make_env("l2rpn_case14_sandbox", seed=0, start_spread=288)
    try:
        start = episode_start(env, 100)
        report = evaluate(env, make_agent("do-nothing", env), [(0, 100)], progress=False)
        episode = report.episodes[0]
        assert episode.start_step == start > 0 and episode.max_steps == 575 - start == episode.steps_survived
        cut = evaluate(env, make_agent("do-nothing", env), [(0, 100)], max_steps=20, progress=False)
        score_report(cut, lambda e: make_agent("do-nothing", e), max_steps=20)
        assert cut.episodes[0].score_steps_survived == cut.episodes[0].steps_survived == 20
        assert np.isfinite(cut.episodes[0].score)
        assert copy_path(env, 0, 100, start).name == f"0000-seed100-start{start}"
        copy = grid2op.make(str(copy_path(env, 0, 100, start)), backend=LightSimBackend())
        try:
            assert int(copy.max_episode_duration()) == 575 - start
            np.testing.assert_allclose(copy.reset(seed=100).load_p, reset_episode(env, 0, 100).load_p, rtol=1e-5)
        finally:
            copy.close()
    finally:
        env.close()


def test_a_late_start_copy_keeps_the_maintenance_its_episode_drew(make_grid_env) -> None:
    """l2rpn_wcci_2020 draws maintenance over the whole scenario from the episode seed (seed 100 draws some): the
    score's copy starting at step 500 reads the same maintenance from there, not a new draw over fewer days."""
    import grid2op
    from lightsim2grid import LightSimBackend

    from ace_hybrid.grid.scores import scenario_copy

    env = make_grid_env("l2rpn_wcci_2020")
    folder = scenario_copy(env, 0, 100, 500)
    reset_episode(env, 0, 100)
    drawn = env.chronics_handler.real_data.data.maintenance
    assert drawn[500:].any()
    copy = grid2op.make(str(folder), backend=LightSimBackend())
    try:
        copy.reset(seed=100)
        np.testing.assert_array_equal(copy.chronics_handler.real_data.data.maintenance, drawn[500:])
        assert int(copy.max_episode_duration()) == 2878 - 500
    finally:
        copy.close()


def test_safe_rule_reverts_a_split_substation(make_grid_env) -> None:
    from ace_hybrid.grid.catalog import ActionCatalog

    env = make_grid_env("l2rpn_case14_sandbox")
    catalog = ActionCatalog.for_env(env)
    obs = reset_episode(env, 0, 0)
    split = int(np.flatnonzero(catalog.n_bus2 > 0)[0])  # the first assignment that splits a substation
    sub = int(catalog.substation[split])
    obs, *_ = env.step(catalog.action(split))
    for _ in range(env.parameters.NB_TIMESTEP_COOLDOWN_SUB):
        obs, *_ = env.step(env.action_space({}))
    assert (obs.sub_topology(sub) == 2).any() and obs.time_before_cooldown_sub[sub] == 0
    action = SafeRule(env.action_space, threshold=5.0)(obs)
    impact = action.get_topological_impact()[1]
    assert impact[sub] and (action.set_bus[action.set_bus != 0] == 1).all()
