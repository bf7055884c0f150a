"""The training loop end to end on the 14-substation grid: files, determinism, kill and resume, checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("grid2op")
import torch

from ace_hybrid.config import load_config
from ace_hybrid.training.checkpoint import load_checkpoint_file
from ace_hybrid.training.loop import train

pytestmark = pytest.mark.grid2op

from tiny_settings import TINY  # noqa: E402 (tests/ is on sys.path: see conftest.py)


def tiny(steps: int, *extra: str):
    return load_config(None, [*TINY, f"train.total_env_steps={steps}", *extra])


def test_a_run_writes_everything_a_user_needs(tmp_path: Path) -> None:
    summary = train(tiny(300), tmp_path / "run")
    run = tmp_path / "run"
    assert summary["env_steps"] == 300 and summary["updates"] > 0 and summary["decisions"] > 16
    for name in ("config.json", "checkpoint.pt", "best.pt", "metrics.jsonl"):
        assert (run / name).is_file(), name
    assert list(run.glob("events.*")), "TensorBoard event file"
    assert len(list(run.glob("replay-*.bin"))) >= 1
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/survival_rate" in x for x in lines) and any("sac/critic_loss" in x for x in lines)
    assert (run / "eval").is_dir() and list((run / "eval").glob("*/evaluation.json"))
    state = load_checkpoint_file(run / "checkpoint.pt")
    assert state["counters"]["env_steps"] == 300
    for name in ("checkpoint.pt", "best.pt"):  # every checkpoint's replay survives the clean-up of older ones
        assert (run / load_checkpoint_file(run / name)["replay_file"]).is_file(), name
    with pytest.raises(FileExistsError, match="--resume"):
        train(tiny(300), run)


def test_same_seed_same_first_updates(tmp_path: Path) -> None:
    def params(run_dir: Path) -> list[torch.Tensor]:
        train(tiny(120, "train.eval_every=0", "log.tensorboard=false"), run_dir)
        sac = load_checkpoint_file(run_dir / "checkpoint.pt")["sac"]
        return [t for t in _tensors(sac)]

    a, b = params(tmp_path / "a"), params(tmp_path / "b")
    assert len(a) > 0 and all(torch.equal(x, y) for x, y in zip(a, b))
    c = train(tiny(120, "train.eval_every=0", "log.tensorboard=false", "train.seed=1"), tmp_path / "c")
    other = _tensors(load_checkpoint_file(tmp_path / "c" / "checkpoint.pt")["sac"])
    assert c["updates"] > 0 and not all(torch.equal(x, y) for x, y in zip(a, other))


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in _tensors(obj[k])]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def test_sigkill_then_resume_loses_nothing_saved(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [a for s in TINY for a in ("--set", s)] + ["--set", "train.total_env_steps=600", "--set",
                                                       "train.checkpoint_every=50"]
    cmd = [sys.executable, "-m", "ace_hybrid.cli", "train", *args, "--run-dir", str(run)]
    log = tmp_path / "stderr.txt"
    with log.open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            if (run / "checkpoint.pt").exists():
                state = load_checkpoint_file(run / "checkpoint.pt")
                if state["counters"]["env_steps"] >= 150:
                    break
            assert proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    saved = load_checkpoint_file(run / "checkpoint.pt")
    saved_steps, saved_decisions = saved["counters"]["env_steps"], saved["counters"]["decisions"]
    assert 150 <= saved_steps < 600
    from ace_hybrid.replay import MixedReplayBuffer

    saved_replay = len(MixedReplayBuffer.load(run / saved["replay_file"]))
    resumed = subprocess.run([sys.executable, "-m", "ace_hybrid.cli", "train", "--resume", str(run)],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    final = load_checkpoint_file(run / "checkpoint.pt")
    assert final["counters"]["env_steps"] == 600
    assert final["counters"]["decisions"] > saved_decisions
    assert len(MixedReplayBuffer.load(run / final["replay_file"])) >= saved_replay
    steps = [json.loads(x)["env_steps"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps), "metrics written after the checkpoint by the killed run were dropped"


def test_a_checkpoint_is_an_agent_for_evaluate(tmp_path: Path) -> None:
    train(tiny(150, "train.eval_every=0", "log.tensorboard=false"), tmp_path / "run")
    out = tmp_path / "eval"
    proc = subprocess.run(
        [sys.executable, "-m", "ace_hybrid.cli", "evaluate", "--env", "l2rpn_case14_sandbox", "--agent",
         f"checkpoint:{tmp_path / 'run' / 'checkpoint.pt'}", "--episodes", "0", "--seeds", "5",
         "--max-steps", "30", "--out", str(out), "--no-progress"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "evaluation.json").read_text())["totals"]["max_steps"] == 30


def test_damaged_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint_file(bad)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint_file(tmp_path / "missing.pt")


def test_topk_deployment_simulates_the_policys_candidates(tmp_path: Path) -> None:
    from ace_hybrid.grid.evaluation import evaluate
    from ace_hybrid.grid.env import make_env
    from ace_hybrid.training.policy import load_agent

    train(tiny(100, "train.eval_every=0", "log.tensorboard=false"), tmp_path / "run")
    env = make_env("l2rpn_case14_sandbox", seed=0)
    plain = load_agent(tmp_path / "run" / "checkpoint.pt", env, topk=0)
    checked = load_agent(tmp_path / "run" / "checkpoint.pt", env, topk=3)
    a = evaluate(env, plain, [(0, 1)], max_steps=30, progress=False).totals()
    b = evaluate(env, checked, [(0, 1)], max_steps=30, progress=False).totals()
    assert a["decisions"] > 0 and b["decisions"] > 0
    assert plain.simulations == 0  # the policy alone never simulates (the safe rule counts its own)
    assert checked.simulations >= 2 * b["decisions"]  # do nothing + at least one policy candidate per decision
    with pytest.raises(ValueError, match="topk = -1"):
        load_agent(tmp_path / "run" / "checkpoint.pt", env, topk=-1)
    env.close()


def test_a_check_with_a_shortlist_simulates_the_policys_best_and_the_experts_candidates(tmp_path: Path) -> None:
    from ace_hybrid.config import load_config
    from ace_hybrid.grid.env import make_env
    from ace_hybrid.training.policy import load_agent

    train(tiny(100, "train.eval_every=0", "log.tensorboard=false"), tmp_path / "run")
    env = make_env("l2rpn_case14_sandbox", seed=0)
    obs = env.reset()
    path = tmp_path / "run" / "checkpoint.pt"
    plain, mixed = load_agent(path, env, topk=4), load_agent(path, env, topk=4, shortlist=3)
    x = plain.normalizer(plain.features(obs))
    mask = plain.actions.legal_mask(obs)
    ranked = plain.checked(obs, x, mask)
    assert len(ranked) == 4 and 0 not in ranked and all(mask[a] for a in ranked)
    expert = [int(a) for a in mixed.actions.shortlist(obs, 4) if int(a) != ranked[0]][:3]
    assert mixed.checked(obs, x, mask) == [ranked[0], *expert]  # the policy's best, then the expert's first 3
    assert expert != ranked[1:]  # the untrained policy's order is not the heuristic's: the two checks differ
    for topk, shortlist, message in ((4, 4, r"shortlist = 4 out of range \[0, topk - 1 = 3\]"),
                                     (0, 1, r"shortlist = 1 out of range \[0, topk - 1 = 0\]"),
                                     (4, -1, r"shortlist = -1 out of range")):
        with pytest.raises(ValueError, match=message):
            load_agent(path, env, topk=topk, shortlist=shortlist)
    with pytest.raises(ValueError, match=r"env.deploy_shortlist.*must be 0 or in \[1, env.deploy_topk - 1 = 7\]"):
        load_config(None, ["env.deploy_topk=8", "env.deploy_shortlist=8"])
    env.close()


def test_a_run_that_masks_no_ops_learns_and_is_deployed_without_them(tmp_path: Path) -> None:
    """``env.mask_no_ops``: the run's actor, critics and replay masks leave out line actions that change nothing
    (training checks every stored action against its rebuilt mask), and its checkpoint acts under the same mask."""
    from ace_hybrid.grid.env import make_env, reset_episode
    from ace_hybrid.training.policy import load_agent

    summary = train(tiny(200, "env.mask_no_ops=true", "train.eval_every=0"), tmp_path / "run")
    assert summary["updates"] > 0
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        agent = load_agent(tmp_path / "run" / "checkpoint.pt", env, topk=0)
        assert agent.actions.skip_no_ops
        obs = reset_episode(env, 0, 0)
        mask = agent.actions.legal_mask(obs)
        reconnections = [i for i in range(len(agent.actions)) if agent.actions.to_catalog(i) % 2 == 1
                         and agent.actions.to_catalog(i) < 1 + 2 * env.n_line]
        assert reconnections and not mask[reconnections].any()  # every line is connected at the start
        assert agent.most_likely(agent.normalizer(agent.features(obs)), mask) not in reconnections
        plain = load_agent(tmp_path / "run" / "checkpoint.pt", env, topk=0)
        plain.actions.skip_no_ops = False
        assert plain.actions.legal_mask(obs)[reconnections].all()
    finally:
        env.close()
