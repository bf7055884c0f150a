"""The expert-guided warm start and tutor action sets through the training loop, end to end on the sandbox grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("grid2op")

from ace_hybrid.agents import make_agent
from ace_hybrid.config import load_config
from ace_hybrid.grid.env import make_env
from ace_hybrid.replay import MixedReplayBuffer
from ace_hybrid.training.checkpoint import load_checkpoint_file
from ace_hybrid.training.loop import train

from tiny_settings import TINY  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = [pytest.mark.grid2op, pytest.mark.slow]


def test_the_tutor_decides_first_and_fills_the_validated_partition(tmp_path: Path) -> None:
    cfg = load_config(None, [*TINY, "train.total_env_steps=200", "train.tutor_steps=100", "train.tutor_budget=4",
                             "train.imitation_weight=1.0",
                             "replay.validated_capacity=500", "train.eval_every=0", "log.tensorboard=false"])
    summary = train(cfg, tmp_path / "run")
    state = load_checkpoint_file(tmp_path / "run" / "checkpoint.pt")
    replay = MixedReplayBuffer.load(tmp_path / "run" / state["replay_file"])
    n_llm, n_rl = int(replay.validated_size), len(replay.rl_columns()["index"])
    assert summary["time_split"]["tutor"] > 0
    assert n_llm > 0 and n_rl > 0  # the tutor's decisions, then the policy's after the warm start
    assert n_llm + n_rl <= summary["decisions"]
    logged = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"sac/imitation_loss"' in logged  # the validated rows reached the actor's loss


def test_a_tutor_action_set_trains_saves_and_deploys(tmp_path: Path) -> None:
    cfg = load_config(None, [*TINY, "train.total_env_steps=150", "env.action_set=tutor:6",
                             "env.action_set_states=20", "train.eval_every=0", "log.tensorboard=false"])
    train(cfg, tmp_path / "run")
    state = load_checkpoint_file(tmp_path / "run" / "checkpoint.pt")
    indices = state["action_set"]
    assert indices[0] == 0 and 1 < len(indices) <= 1 + 20 + 6  # do nothing, 20 reconnections, at most 6 more
    replay = MixedReplayBuffer.load(tmp_path / "run" / state["replay_file"])
    assert int(np.max(replay.rl_columns()["action"])) < len(indices)  # the replay holds set indices
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        agent = make_agent(f"checkpoint:{tmp_path / 'run' / 'checkpoint.pt'}", env, topk=0)
        assert len(agent.actions) == len(indices) and agent.actions.to_catalog(len(indices) - 1) == indices[-1]
    finally:
        env.close()


def test_the_tutor_row_acts_alone_over_the_run_action_set_with_its_budget() -> None:
    from ace_hybrid.experiment import baseline_agent
    from ace_hybrid.grid.action_set import action_set_indices
    from ace_hybrid.grid.catalog import ActionCatalog
    from ace_hybrid.grid.evaluation import play_episode

    cfg = load_config(None, [*TINY, "env.action_set=tutor:6", "env.action_set_states=20", "train.tutor_budget=3"])
    env = make_env("l2rpn_case14_sandbox", seed=0)
    try:
        agent = baseline_agent("tutor", env, cfg, greedy_budget=30)
        indices = action_set_indices(cfg, env, ActionCatalog.for_env(env))
        assert agent.budget == 3 and list(agent.catalog.indices) == indices
        played: list[int] = []
        choose = agent.choose
        agent.choose = lambda obs: played.append(choose(obs)) or played[-1]  # record the set index it plays
        play_episode(env, agent, 0, 0, max_steps=120)
    finally:
        env.close()
    assert agent.decisions > 0 and len(played) == agent.decisions
    assert all(0 <= i < len(indices) for i in played)
    assert agent.simulations <= 3 * agent.decisions  # do nothing and 2 candidates per danger state
