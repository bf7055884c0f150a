"""The analysis scripts under tools/ that the docs cite for figures, run on a real (tiny) checkpoint."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("grid2op")

from tiny_settings import TINY  # noqa: E402 (tests/ is on sys.path: see conftest.py)

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.grid2op
@pytest.mark.parametrize("prior", [0.5, 0.8])
def test_policy_choices_reads_an_untrained_policys_prior(prior: float, tmp_path: Path, capsys) -> None:
    """A checkpoint saved before any update holds the initial policy: do nothing at ``sac.prior_prob`` at every
    decision (give or take what the random network adds), the rest near uniform below it, so it is played at every
    decision."""
    from ace_hybrid.config import load_config
    from ace_hybrid.training.loop import train

    run = tmp_path / "run"
    train(load_config(None, [*TINY, f"sac.prior_prob={prior}", "train.total_env_steps=40",
                             "train.learning_starts=10000", "train.eval_every=0", "log.tensorboard=false"]), run)
    assert _tool("policy_choices").main([str(run / "checkpoint.pt"), "--seeds", "5,6", "--max-steps", "60"]) == 0
    out = capsys.readouterr().out
    total = re.search(r"all 2 episodes: +(\d+) decisions, acts at +([\d.]+)% \(changing nothing at +([\d.]+)%\), "
                      r"p\(do nothing\) ([\d.]+) \[([\d.]+), ([\d.]+)\], best other ([\d.]+)", out)
    assert total, out
    decisions, acts, no_ops, mean, lo, hi, other = (float(g) for g in total.groups())
    assert decisions > 0 and acts == 0.0 and no_ops == 0.0
    assert (mean, lo, hi) == pytest.approx((prior, prior, prior), abs=0.02)  # the untrained network adds a little
    assert 0 < other < 1 - prior
    assert re.search(r"survival \(policy plays\): \d+ of \d+ steps", out)


@pytest.mark.grid2op
def test_policy_choices_plays_the_critics_greedy_action_when_asked(tmp_path: Path, capsys,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from ace_hybrid.config import load_config
    from ace_hybrid.grid.env import make_env
    from ace_hybrid.training.loop import train
    from ace_hybrid.training.policy import SACAgent, load_agent

    run = tmp_path / "run"
    train(load_config(None, [*TINY, "sac.prior_prob=0.8", "train.total_env_steps=40", "train.learning_starts=10000",
                             "train.eval_every=0", "log.tensorboard=false"]), run)
    tool = _tool("policy_choices")
    env = make_env("l2rpn_case14_sandbox", seed=0)
    obs = env.reset()
    critic = tool.RecordingAgent(env, load_agent(run / "checkpoint.pt", env, topk=0), play="critic")
    x, mask = critic.normalizer(critic.features(obs)), critic.actions.legal_mask(obs)
    q = critic.sac.q_values(x, mask)
    critic.decide(obs)
    assert critic.records[-1][2] == int(np.argmax(q))  # the critics' greedy action, not the policy's
    assert critic.records[-1][0] == pytest.approx(0.8, abs=0.02)  # the probabilities recorded stay the policy's
    # Reconnecting line 0, connected at the start (catalog index 1 of the full set), changes nothing; disconnecting
    # it (index 2) does.
    assert np.asarray(obs.line_status)[0]
    for index, no_op in ((1, True), (2, False)):
        monkeypatch.setattr(SACAgent, "most_likely", lambda *_, i=index: i)
        critic.play = "policy"
        critic.decide(obs)
        assert critic.records[-1][2:] == (index, no_op)
    with pytest.raises(ValueError, match="play = 'value' is not one of policy, critic"):
        tool.RecordingAgent(env, load_agent(run / "checkpoint.pt", env, topk=0), play="value")
    env.close()
    assert tool.main([str(run / "checkpoint.pt"), "--seeds", "5", "--max-steps", "40", "--play", "critic"]) == 0
    assert re.search(r"survival \(critic plays\): \d+ of \d+ steps", capsys.readouterr().out)


@pytest.mark.grid2op
def test_policy_choices_refuses_a_missing_checkpoint(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        _tool("policy_choices").main([str(tmp_path / "none.pt")])
    assert "none.pt is not a file" in capsys.readouterr().err


@pytest.mark.grid2op
def test_policy_choices_refuses_a_file_that_is_not_a_checkpoint(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "best.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit):
        _tool("policy_choices").main([str(bad)])
    assert str(bad) in capsys.readouterr().err


@pytest.mark.grid2op
def test_learning_curves_reads_real_trainings_and_says_where_a_curve_rises(tmp_path: Path, capsys) -> None:
    import json

    from ace_hybrid.config import load_config
    from ace_hybrid.training.loop import train

    for seed in (0, 1):
        train(load_config(None, [*TINY, "env.eval_pairs=[[2, 0], [2, 1]]", "train.total_env_steps=150",
                                 "train.eval_every=75", f"train.seed={seed}", "log.tensorboard=false"]),
              tmp_path / "runs" / f"sac-seed{seed}")
    tool = _tool("learning_curves")
    assert tool.main([str(tmp_path), "--out", str(tmp_path / "curves.png")]) == 0
    table = capsys.readouterr().out
    assert re.search(r"\| sac \| 2 × 2 \| 75 \| [\d.]+% \[.*\] \| 150 \| ", table), table
    assert (tmp_path / "curves.png").stat().st_size > 0
    # A scripted training that survives 10-45% of its episodes at its first evaluation and 93-100% at its last.
    run = tmp_path / "runs" / "rising-seed0"
    for step, survived in ((5000, lambda k: 10 + 5 * k), (10000, lambda k: 100 - k)):
        (run / "eval" / f"step-{step:08d}").mkdir(parents=True)
        episodes = [{"steps_survived": survived(k), "max_steps": 100} for k in range(8)]
        (run / "eval" / f"step-{step:08d}" / "evaluation.json").write_text(json.dumps({"episodes": episodes}))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"env_steps": s, "time": 60.0 * s, "eval/survival_rate": 0})
                                                 for s in (5000, 10000)))
    assert tool.main([str(tmp_path), "--rows", "rising", "--out", str(tmp_path / "rising.png")]) == 0
    assert re.search(r"\| rising \| 1 × 8 \| 5,000 \| 27\.5% .* \| \+69\.0 \[\+\d\d\.\d, \+\d\d\.\d\] \| yes \|",
                     capsys.readouterr().out)
    with pytest.raises(SystemExit, match="no training with two evaluations or more for row\\(s\\) nothing"):
        tool.main([str(tmp_path), "--rows", "nothing"])


def _scripted_training(folder: Path, name: str, selection: dict[int, float]) -> None:
    """A training's selection-episode evaluations (``eval/step-*/evaluation.json``) with these survival rates."""
    import json

    for step, rate in selection.items():
        (folder / "runs" / name / "eval" / f"step-{step:08d}").mkdir(parents=True)
        (folder / "runs" / name / "eval" / f"step-{step:08d}" / "evaluation.json").write_text(
            json.dumps({"episodes": [], "totals": {"survival_rate": rate}}))


def _scripted_cell(folder: Path, name: str, budget: int, validation: float, **deploy) -> None:
    import json

    (folder / "cells-validation").mkdir(parents=True, exist_ok=True)
    row, seed = name.rsplit("-seed", 1)
    cell = {"train_id": row, "seed": int(seed), "budget": budget, "run_dir": f"runs/{name}", "deploy_topk": 0,
            **deploy, "test": {"totals": {"survival_rate": validation}}}
    suffix = "".join(f"-{k}{v}" for k, v in deploy.items())
    (folder / "cells-validation" / f"{row}-{budget // 1000}k{suffix}-alone-seed{seed}.json").write_text(json.dumps(cell))


def test_checkpoint_selection_finds_the_kept_checkpoint_and_scores_the_choice(tmp_path: Path, capsys) -> None:
    tool = _tool("checkpoint_selection")
    curve = {5000: 0.5, 10000: 0.8, 15000: 0.8, 20000: 0.6}
    assert [tool.kept_step(curve, b) for b in (5000, 15000, 20000)] == [5000, 10000, 10000]  # the first of equals
    with pytest.raises(ValueError, match="no evaluation at or before budget 1,000"):
        tool.kept_step(curve, 1000)
    a, b = tmp_path / "a", tmp_path / "b"
    _scripted_training(a, "sac-seed0", curve)
    _scripted_training(a, "sac-seed1", {5000: 0.9, 10000: 0.4, 20000: 0.95})
    _scripted_training(b, "ace-seed0", {5000: 0.3, 20000: 0.7})
    for folder, name, budget, validation in ((a, "sac-seed0", 5000, 0.4), (a, "sac-seed0", 20000, 0.7),
                                             (a, "sac-seed1", 5000, 0.6), (a, "sac-seed1", 20000, 0.5),
                                             (b, "ace-seed0", 5000, 0.2), (b, "ace-seed0", 20000, 0.6)):
        _scripted_cell(folder, name, budget, validation)
    _scripted_cell(a, "sac-seed0", 20000, 0.99, deploy_sure=0.6)  # a gated cell: not what selection evaluated
    assert tool.main([str(a), str(b), "--out", str(tmp_path / "scatter.png")]) == 0
    out = capsys.readouterr().out
    assert "| a/sac-seed0 | 20,000 | 10,000 | 80.0% | 70.0% |" in out and "99.0%" not in out
    assert "6 kept checkpoints of 3 trainings." in out
    assert "selection survival minus validation survival: +19.2 points" in out  # (10+10+30+45+10+10) / 6
    # Within a training the higher on selection is higher on validation in 2 of 3 pairs (sac-seed1 reverses).
    assert "2 of 3 pairs (67%; chance 50%)" in out
    # Selection moves: 0.3, 0.0, 0.2 (sac-seed0); 0.5, 0.55 (sac-seed1); 0.4 (ace-seed0): median 0.35.
    assert "moves by 35.0 points (median" in out and "over 6 moves" in out
    assert (tmp_path / "scatter.png").stat().st_size > 0
    assert tool.main([str(a), str(b), "--rows", "ace"]) == 0  # one row: ace-seed0's single move, 0.4
    out = capsys.readouterr().out
    assert "2 kept checkpoints of 1 trainings." in out and "moves by 40.0 points (median" in out
    with pytest.raises(SystemExit, match=r"--rows ace,egrl: no kept checkpoint of egrl; the rows here are ace, sac"):
        tool.main([str(a), str(b), "--rows", "ace,egrl"])
    with pytest.raises(SystemExit, match="holds no cell"):
        tool.main([str(tmp_path)])
