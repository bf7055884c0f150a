"""The anchor of ``sac.anchor_weight``: KL(pi_start || pi) toward the actor a run started from (its junior) -- the
gradient, the dense reference, what it does to learning, checkpoints, and the configuration's checks."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ace_hybrid.config import load_config  # noqa: E402
from ace_hybrid.sac import DiscreteSAC, SACConfig, UpdateBatch  # noqa: E402
from ace_hybrid.sac.reference import reference_update  # noqa: E402
from ace_hybrid.sac.stream import Factors  # noqa: E402

# tests/ is on sys.path (conftest.py); _one_thread is test_sac's autouse fixture, in force here too.
from test_sac import SMALL, _batch, _features, _one_thread  # noqa: E402, F401


def _moved(agent: DiscreteSAC, seed: int = 0) -> DiscreteSAC:
    """``agent`` with its anchor set, then its actor moved away from it (as if updates had run)."""
    agent.set_anchor()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for p in agent.actor.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return agent


def _kl(agent: DiscreteSAC, obs: np.ndarray, mask: np.ndarray) -> float:
    """Mean over states of KL(pi_anchor || pi), from the two networks' own probabilities."""
    start = DiscreteSAC(agent.obs_dim, agent.n_actions, agent.cfg, seed=agent.seed)
    start.actor.load_state_dict(agent.anchor.state_dict())
    total = 0.0
    for o, m in zip(obs, mask):
        p, p0 = agent.policy_probs(o, m), start.policy_probs(o, m)
        total += float(np.sum(np.where(m, p0 * (np.log(p0 + 1e-30) - np.log(p + 1e-30)), 0.0)))
    return total / len(obs)


@pytest.mark.parametrize("head", ["lowrank", "linear"])
def test_the_anchor_gradient_is_the_gradient_of_the_kl(head: str) -> None:
    rng = np.random.default_rng(31)
    agent = _moved(DiscreteSAC(5, 30, SACConfig(**SMALL, head=head, anchor_weight=2.5), seed=1))
    batch = UpdateBatch(**_batch(rng, 16, 5, 30, p_legal=0.5))
    b = agent._tensors(batch)
    h = torch.randn(16, 6, dtype=torch.float64, requires_grad=True)
    emb = torch.randn(30, 6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(30, dtype=torch.float64, requires_grad=True)
    legal = torch.from_numpy(batch.legal_mask)
    low = torch.finfo(torch.float64).min
    logp = torch.log_softmax((h @ emb.T + bias).masked_fill(~legal, low), dim=1)
    z0 = agent._scores("anchor", b["obs"]).double().masked_fill(~legal, low)
    logp0 = torch.log_softmax(z0, dim=1)
    kl = torch.where(legal, logp0.exp() * (logp0 - logp), 0.0).sum(1).mean()
    (2.5 * kl).backward()
    d_h, d_emb, d_bias = torch.zeros_like(h), torch.zeros_like(emb), torch.zeros_like(bias)
    agent._add_anchor(Factors(h.detach(), emb.detach(), bias.detach()), b, d_h, d_emb, d_bias)
    assert agent._anchor_kl == pytest.approx(float(kl.detach()), rel=1e-5)
    for mine, ref in ((d_h, h.grad), (d_emb, emb.grad), (d_bias, bias.grad)):
        torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("head", "imitation"), [("lowrank", False), ("lowrank", True), ("linear", False)])
def test_the_anchored_update_matches_the_dense_reference(head: str, imitation: bool) -> None:
    rng = np.random.default_rng(32)
    n, d = 200, 6
    feats = _features(rng, n, 12, 3)
    cfg = SACConfig(**{**SMALL, "head": head}, anchor_weight=0.7)
    fast, dense = (_moved(DiscreteSAC(d, n, cfg, action_features=feats, seed=4)) for _ in range(2))
    for _ in range(2):
        weights = np.r_[np.zeros(13), [0.5, 1.0, 2.0]].astype(np.float32) if imitation else None
        batch = UpdateBatch(**_batch(rng, 16, d, n, p_legal=0.4), imitation=weights)
        a, b = fast.update(batch), reference_update(dense, batch)
        assert a.metrics.keys() == b.metrics.keys() and "anchor_kl" in a.metrics
        for key in ("actor_loss", "entropy", "anchor_kl", "grad_norm_actor"):
            assert a.metrics[key] == pytest.approx(b.metrics[key], rel=1e-4, abs=1e-5), key
        np.testing.assert_allclose(a.td_error, b.td_error, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy_samples", [0, 16])
def test_the_anchor_holds_the_policy_near_where_it_started(policy_samples: int) -> None:
    """Critics that reward one action pull the policy to it; the anchor keeps it nearer the start, and the update
    reports the KL it pays. Without an anchor (weight 0, or none set) the update has no anchor term at all."""
    rng = np.random.default_rng(33)
    batch = _batch(rng, 16, 4, 40, p_legal=1.0)
    batch["action"][:] = 7
    batch["reward"][:] = 5.0
    kls = {}
    for weight in (0.0, 20.0):
        agent = DiscreteSAC(4, 40, SACConfig(**SMALL, lr_actor=3e-3, policy_samples=policy_samples,
                                             anchor_weight=weight), seed=2)
        agent.set_anchor()
        for _ in range(150):
            result = agent.update(UpdateBatch(**batch))
        assert ("anchor_kl" in result.metrics) == (weight > 0)
        kls[weight] = _kl(agent, batch["obs"], batch["legal_mask"])
    assert kls[20.0] < 0.5 * kls[0.0]
    assert "anchor_kl" not in DiscreteSAC(4, 40, SACConfig(**SMALL, anchor_weight=1.0)).update(
        UpdateBatch(**batch)).metrics  # no anchor set: nothing to hold to


def test_the_anchor_is_saved_with_the_agent_and_older_states_load_without_it() -> None:
    rng = np.random.default_rng(34)
    cfg = SACConfig(**SMALL, anchor_weight=1.0)
    agent = _moved(DiscreteSAC(4, 30, cfg, seed=3))
    batch = UpdateBatch(**_batch(rng, 16, 4, 30))
    agent.update(batch)
    state = agent.state_dict()
    again = DiscreteSAC(4, 30, cfg, seed=9)
    again.load_state_dict(state)
    for mine, theirs in zip(again.anchor.parameters(), agent.anchor.parameters()):
        torch.testing.assert_close(mine, theirs)
    assert not any(p.requires_grad for p in again.anchor.parameters())
    np.testing.assert_array_equal(again.update(batch).td_error, agent.update(batch).td_error)
    old = {k: v for k, v in DiscreteSAC(4, 30, SACConfig(**SMALL), seed=3).state_dict().items() if k != "anchor"}
    plain = DiscreteSAC(4, 30, SACConfig(**SMALL), seed=5)
    plain.load_state_dict(old)
    assert plain.anchor is None


def test_the_anchor_settings_are_checked() -> None:
    with pytest.raises(ValueError, match=r"anchor_weight = -1.0 is invalid: expected a number in \[0, 1000\]"):
        SACConfig(anchor_weight=-1.0).validate()
    with pytest.raises(ValueError, match="sac.anchor_weight = 0.5 .* train.init_policy names none"):
        load_config(None, ["env.name=l2rpn_case14_sandbox", "sac.anchor_weight=0.5"])
    assert load_config(None, ["env.name=l2rpn_case14_sandbox"]).sac.anchor_weight == 0.0
