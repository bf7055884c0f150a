"""``sac.policy_average``: evaluations, kept checkpoints and deployment act with a Polyak average of the actor while
exploration and the updates keep the actor -- the average's arithmetic, that it leaves learning unchanged, its place
in checkpoints, the configuration's checks, and a real run whose kept checkpoint acts with it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ace_hybrid.config import load_config  # noqa: E402
from ace_hybrid.sac import DiscreteSAC, SACConfig, UpdateBatch  # noqa: E402
from ace_hybrid.sac.agent import average_decay  # noqa: E402

# tests/ is on sys.path (conftest.py); _one_thread is test_sac's autouse fixture, in force here too.
from test_sac import SMALL, _batch, _features, _one_thread  # noqa: E402, F401


def _params(net: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("head", ["lowrank", "linear"])
def test_the_average_follows_the_actor_by_the_polyak_rule_and_leaves_learning_unchanged(head: str) -> None:
    rng = np.random.default_rng(5)
    feats = _features(rng, 30, 6, 2)
    averaged = DiscreteSAC(4, 30, SACConfig(**SMALL, head=head, policy_average=0.9), action_features=feats, seed=2)
    plain = DiscreteSAC(4, 30, SACConfig(**SMALL, head=head), action_features=feats, seed=2)
    assert plain.actor_average is None and plain.deployed() is plain
    expected = _params(averaged.actor)  # the average starts as the actor
    for n in range(4):
        batch = UpdateBatch(**_batch(rng, 16, 4, 30))
        # The average is only read by deployment: the updates are the plain agent's, bit for bit.
        np.testing.assert_array_equal(averaged.update(batch).td_error, plain.update(batch).td_error)
        d = min(0.9, (1 + n) / (10 + n))  # the warm-up: 0.1, 0.18, 0.25, 0.31
        expected = [d * e + (1 - d) * a for e, a in zip(expected, _params(averaged.actor))]
    assert average_decay(0.9, 0) == 0.1 and average_decay(0.9, 1000) == 0.9 and average_decay(0.99, 90) == 0.91
    for got, want, actor in zip(averaged.actor_average.parameters(), expected, averaged.actor.parameters()):
        torch.testing.assert_close(got, want)
        assert not got.requires_grad
    assert any(not torch.allclose(a, e) for a, e in zip(averaged.actor.parameters(), expected))  # they differ

    deployed = averaged.deployed()
    reference = DiscreteSAC(4, 30, SACConfig(**SMALL, head=head), action_features=feats, seed=2)
    reference.actor.load_state_dict(averaged.actor_average.state_dict())
    obs, mask = rng.normal(size=4).astype(np.float32), rng.random(30) < 0.7
    mask[0] = True
    np.testing.assert_allclose(deployed.policy_probs(obs, mask), reference.policy_probs(obs, mask), rtol=1e-6)
    assert not np.allclose(deployed.policy_probs(obs, mask), averaged.policy_probs(obs, mask))  # not the actor's
    before = deployed.policy_probs(obs, mask)
    averaged.update(UpdateBatch(**_batch(rng, 16, 4, 30)))
    np.testing.assert_array_equal(deployed.policy_probs(obs, mask), before)  # a copy: later updates leave it


def test_the_average_is_saved_restarts_from_a_loaded_policy_and_older_states_load_without_it() -> None:
    rng = np.random.default_rng(8)
    cfg = SACConfig(**SMALL, policy_average=0.5)
    agent = DiscreteSAC(4, 30, cfg, seed=3)
    for _ in range(3):
        agent.update(UpdateBatch(**_batch(rng, 16, 4, 30)))
    again = DiscreteSAC(4, 30, cfg, seed=9)
    again.load_state_dict(agent.state_dict())
    for mine, theirs in zip(again.actor_average.parameters(), agent.actor_average.parameters()):
        torch.testing.assert_close(mine, theirs)
    # A state saved without the average (before sac.policy_average) starts the average at its actor.
    old = {k: v for k, v in DiscreteSAC(4, 30, SACConfig(**SMALL), seed=4).state_dict().items()
           if k != "actor_average"}
    fresh = DiscreteSAC(4, 30, cfg, seed=5)
    fresh.load_state_dict(old)
    for mine, actor in zip(fresh.actor_average.parameters(), fresh.actor.parameters()):
        torch.testing.assert_close(mine, actor)
    # A run started from a junior averages from the junior, not from its random initial actor.
    fresh.load_policy_state(agent.policy_state())
    for mine, theirs in zip(fresh.actor_average.parameters(), agent.actor.parameters()):
        torch.testing.assert_close(mine, theirs)


def test_the_policy_average_setting_is_checked() -> None:
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match=r"policy_average = .* is invalid: expected a number in \[0, 1\)"):
            SACConfig(policy_average=bad).validate()
    assert load_config(None, ["env.name=l2rpn_case14_sandbox"]).sac.policy_average == 0.0


@pytest.mark.grid2op
@pytest.mark.slow
def test_a_run_with_the_average_evaluates_and_keeps_the_average(tmp_path, make_grid_env) -> None:
    """A real run: its kept checkpoint holds the average, and the agent loaded from it acts with the average, not
    with the actor that explored."""
    pytest.importorskip("grid2op")
    from ace_hybrid.training.loop import train
    from ace_hybrid.training.policy import load_agent
    from tiny_settings import TINY

    cfg = load_config(None, [*TINY, "train.total_env_steps=300", "train.updates_per_decision=2",
                             "train.learning_starts=8", "train.eval_every=150", "log.tensorboard=false",
                             "sac.policy_average=0.8"])
    summary = train(cfg, tmp_path / "run")
    assert summary["updates"] > 0
    state = torch.load(tmp_path / "run" / "best.pt", weights_only=True)["sac"]
    assert any(not torch.equal(state["actor_average"][k], state["actor"][k]) for k in state["actor"])
    agent = load_agent(tmp_path / "run" / "best.pt", make_grid_env("l2rpn_case14_sandbox"))
    for key, value in agent.sac.actor.state_dict().items():
        torch.testing.assert_close(value, state["actor_average"][key])
