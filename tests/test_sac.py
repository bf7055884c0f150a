"""Discrete SAC over masked actions (ace_hybrid.sac): learning, masked entropy / temperature math, the soft
target, determinism, checkpoints and argument checks."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ace_hybrid.sac import DiscreteSAC, SACConfig, UpdateBatch, UpdateResult  # noqa: E402
from ace_hybrid.sac.reference import policy_loss, reference_update  # noqa: E402
from ace_hybrid.sac.stream import (  # noqa: E402
    Factors,
    Stream,
    Workspace,
    mask_logits_,
    pack_mask,
    policy_gradient,
    sample_actions,
    sampled_logit_grad,
    soft_stream,
)

SMALL = dict(hidden=(32,), embed_dim=8, batch_size=16)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny networks gain nothing from threads, and a busy shared machine makes extra threads spin."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _features(rng: np.random.Generator, n: int, f: int, nnz: int) -> np.ndarray:
    feats = np.zeros((n, f), np.int8)
    for j in range(nnz):
        feats[np.arange(n), rng.integers(0, f, n)] = 1
    return feats


def _batch(rng: np.random.Generator, b: int, d: int, n: int, *, p_legal: float = 0.6) -> dict[str, np.ndarray]:
    mask = rng.random((b, n)) < p_legal
    mask[:, 0] = True
    next_mask = rng.random((b, n)) < p_legal
    next_mask[:, 0] = True
    action = np.array([rng.choice(np.flatnonzero(m)) for m in mask], np.int64)
    return dict(
        obs=rng.standard_normal((b, d), dtype=np.float32), action=action,
        reward=rng.standard_normal(b).astype(np.float32), next_obs=rng.standard_normal((b, d), dtype=np.float32),
        done=rng.random(b) < 0.2, weight=rng.uniform(0.2, 1.0, b).astype(np.float32), legal_mask=mask,
        next_legal_mask=next_mask, steps=rng.integers(1, 4, b),
    )


def _params(agent: DiscreteSAC) -> list[torch.Tensor]:
    return [p.detach().clone() for net in (agent.actor, agent.q1, agent.q2, agent.q1_target, agent.q2_target)
            for p in net.parameters()] + [agent.log_alpha.detach().clone()]


# ------------------------------------------------------------------------------------------- learning


def _bandit_gap_closed(head: str, n: int, steps: int, seed: int, lr: float = 3e-3, ratio: float = 0.3,
                       updates: int = 1, policy_samples: int = 0) -> float:
    """Trains on a contextual bandit with per-state illegal actions; returns the fraction of the gap between
    the uniform legal policy and the best legal action that the greedy policy closes (1 = optimal).

    8 contexts (one-hot observations); each of the ``n`` actions has a group (1 of 8) and 2 elements (of 16),
    as one-hot features; context c pays 1 for its favourite group and 0.5 for each of its two favourite
    elements. ~40% of the actions are illegal in every state (drawn anew), so the best legal action changes.
    Asserts on the way that no illegal action is ever chosen, sampled or greedy."""
    rng = np.random.default_rng(seed)
    contexts, groups, elements = 8, 8, 16
    group = rng.integers(0, groups, n)
    feats = np.concatenate([np.eye(groups, dtype=np.int8)[group], _features(rng, n, elements, 2)], axis=1)
    liked_group = rng.permutation(groups)[:contexts]
    liked = rng.integers(0, elements, (contexts, 2))
    rewards = np.stack([(group == liked_group[c]) + 0.5 * feats[:, groups + liked[c, 0]]
                        + 0.5 * feats[:, groups + liked[c, 1]] for c in range(contexts)], axis=1)
    rewards = rewards.astype(np.float32)  # (n, contexts) in {0, 0.5, 1, 1.5, 2}

    def state() -> tuple[int, np.ndarray, np.ndarray]:
        c = int(rng.integers(contexts))
        mask = rng.random(n) < 0.6
        mask[rng.integers(n)] = True
        return c, np.eye(contexts, dtype=np.float32)[c], mask

    cfg = SACConfig(hidden=(64,), head=head, embed_dim=16, lr_actor=lr, lr_critic=lr, lr_alpha=lr,
                    target_entropy_ratio=ratio, batch_size=64, policy_samples=policy_samples)
    agent = DiscreteSAC(contexts, n, cfg, action_features=feats, seed=seed)
    buf_obs, buf_act, buf_rew, buf_mask = [], [], [], []
    for step in range(steps):
        c, obs, mask = state()
        a = agent.act(obs, mask)
        assert mask[a], f"illegal action {a} chosen at step {step}"
        buf_obs.append(obs), buf_act.append(a), buf_rew.append(rewards[a, c]), buf_mask.append(mask)
        for _ in range(updates if len(buf_obs) >= cfg.batch_size else 0):
            idx = rng.integers(0, len(buf_obs), cfg.batch_size)
            o = np.stack([buf_obs[i] for i in idx])
            # one-step episodes: done, and no legal next action is needed
            agent.update(UpdateBatch(
                obs=o, action=np.array([buf_act[i] for i in idx]),
                reward=np.array([buf_rew[i] for i in idx], np.float32), next_obs=o, done=np.ones(len(idx), bool),
                weight=np.ones(len(idx), np.float32), legal_mask=np.stack([buf_mask[i] for i in idx]),
                next_legal_mask=np.zeros((len(idx), n), bool)))
    greedy = best = uniform = 0.0
    for _ in range(300):
        c, obs, mask = state()
        a = agent.act(obs, mask, deterministic=True)
        assert mask[a], f"illegal greedy action {a}"
        greedy += rewards[a, c]
        best += rewards[mask, c].max()
        uniform += rewards[mask, c].mean()
    return float((greedy - uniform) / (best - uniform))


@pytest.mark.parametrize(("head", "n", "threshold"), [("lowrank", 200, 0.8), ("linear", 60, 0.7)])
def test_sac_learns_a_masked_contextual_bandit(head: str, n: int, threshold: float) -> None:
    """The uniform legal policy scores 0 and the best legal action 1 (seeds 1-3 scored 0.88-0.98 with the
    low-rank head, 0.80-0.85 with the linear one). The low-rank head generalises through the action features,
    so it gets more actions than the linear head, which must try each (context, action) pair, in the same
    700 decisions."""
    assert _bandit_gap_closed(head, n, steps=700, seed=1) >= threshold


def test_sac_with_a_sampled_policy_gradient_learns_the_bandit_too() -> None:
    """policy_samples = 64 (seeds 1-3 scored 0.97-0.99 at n = 200, like the exact gradient; at n = 5,000 the
    sampled gradient averaged 0.87 against the exact one's 0.92 over three seeds, see the module docstring)."""
    assert _bandit_gap_closed("lowrank", 200, steps=700, seed=1, policy_samples=64) >= 0.8


def test_sampled_and_greedy_actions_are_always_legal() -> None:
    rng = np.random.default_rng(5)
    n = 40
    agent = DiscreteSAC(3, n, SACConfig(**SMALL), seed=5)
    with torch.no_grad():  # make the illegal actions the most attractive ones
        agent.actor.bias.copy_(torch.linspace(5.0, -5.0, n))
    for _ in range(300):
        mask = rng.random(n) < rng.uniform(0.02, 0.5)
        mask[rng.integers(n)] = True
        obs = rng.standard_normal(3).astype(np.float32)
        assert mask[agent.act(obs, mask)]
        assert mask[agent.act(obs, mask, deterministic=True)]


# ------------------------------------------------------------------------------------------- masked math


def _packed(legal: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(pack_mask(legal.numpy()))


def _factors(values: torch.Tensor) -> Factors:
    """Factors whose scores are exactly ``values`` (B, n): h = values, E = identity, no bias."""
    n = values.shape[1]
    return Factors(values.clone(), torch.eye(n), torch.zeros(n))


def _stream(logits: torch.Tensor, q: torch.Tensor | None, legal: torch.Tensor, alpha: float, mode: str,
            rows: int = 32) -> tuple[Stream, Workspace]:
    """A stream over (B, n) logits and Q values with blocks of ``rows`` actions (several blocks for n > rows)."""
    ws = Workspace(logits.shape[1], logits.shape[0], torch.device("cpu"), rows=rows)
    q_f = None if q is None else _factors(q)
    return soft_stream(_factors(logits), q_f, q_f, _packed(legal), alpha, ws, mode), ws


def test_masked_logits_become_finfo_min_never_minus_inf() -> None:
    keep = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    logits = torch.tensor([[3.0, -1e6, 1e-3, 1e6]])
    masked = mask_logits_(logits.clone(), keep, torch.empty(1, 4))
    fmin = torch.finfo(torch.float32).min
    assert masked[0, 1].item() == fmin and masked[0, 3].item() == fmin
    assert masked[0, 0].item() == 3.0 and masked[0, 2].item() == pytest.approx(1e-3)
    assert not torch.isinf(masked).any()


def test_packed_masks_unpack_to_the_legal_blocks() -> None:
    rng = np.random.default_rng(0)
    legal = rng.random((5, 203)) < 0.4
    ws = Workspace(203, 5, torch.device("cpu"))
    packed = torch.from_numpy(pack_mask(legal))
    for lo, hi in [(0, 64), (64, 160), (160, 203)]:
        assert np.array_equal(ws.legal_block(packed, lo, hi).numpy(), legal[:, lo:hi].T.astype(np.float32))


@pytest.mark.parametrize("k", [1, 2, 7, 50])
def test_uniform_policy_over_k_legal_actions_has_entropy_log_k(k: int) -> None:
    n, alpha = 60, 0.3
    legal = torch.zeros(2, n, dtype=torch.bool)
    legal[0, :k] = True
    legal[1, n - k:] = True  # in the last block: the running maximum starts from finfo.min
    q = torch.randn(2, n, generator=torch.Generator().manual_seed(k))
    st, _ = _stream(torch.zeros(2, n), q, legal, alpha, "grad")
    assert (st.log_z - st.mean_z).tolist() == pytest.approx([math.log(k)] * 2, abs=1e-5)  # entropy
    # sum_a pi (alpha log pi - q) with pi = 1/k: -alpha log k - mean of the legal q
    loss = -st.mean_w - alpha * st.log_z
    expected = [-alpha * math.log(k) - q[i][legal[i]].mean().item() for i in range(2)]
    assert loss.tolist() == pytest.approx(expected, abs=1e-5)


def _dense_reference(logits: torch.Tensor, q: torch.Tensor, legal: torch.Tensor,
                     alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The reference's per-state policy loss, entropy and logit gradient (ace_hybrid.sac.reference), in float64."""
    return policy_loss(logits.double(), q.double(), legal, alpha)


def test_the_reference_policy_gradient_is_autograds() -> None:
    """The dense reference writes d loss / d z out by hand; here float64 autograd of its loss agrees."""
    logits, q, legal = _problem(5, 6, 40, 0.5)
    z = logits.double().requires_grad_(True)
    loss, entropy, grad = policy_loss(z, q.double(), legal, 0.7)
    loss.sum().backward()
    torch.testing.assert_close(grad.detach(), z.grad, rtol=1e-10, atol=1e-12)
    assert (grad[~legal] == 0).all() and (loss[~legal.any(1)] == 0).all() and (entropy >= 0).all()


def _problem(seed: int, b: int, n: int, p_legal: float,
             spread: float = 3.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, n, generator=gen) * spread
    logits[:, n // 2:] += spread  # the maximum grows in a later block: earlier sums must be rescaled
    q = torch.randn(b, n, generator=gen)
    legal = torch.rand(b, n, generator=gen) < p_legal
    legal[:, 0] = True
    legal[0] = False
    legal[0, n - 3] = True  # one state's only legal action is in the last block
    return logits, q, legal


def test_all_but_one_masked_gives_no_nan_anywhere() -> None:
    rng = np.random.default_rng(2)
    n, d, b = 30, 4, 8
    agent = DiscreteSAC(d, n, SACConfig(**SMALL, init_alpha=5.0), seed=2)  # alpha > 1: alpha * finfo.min = -inf
    batch = _batch(rng, b, d, n)
    batch["legal_mask"][:] = False
    batch["legal_mask"][np.arange(b), batch["action"]] = True
    batch["next_legal_mask"][:] = False
    batch["next_legal_mask"][:, 3] = True
    batch["next_legal_mask"][batch["done"]] = False  # terminal rows may have no legal next action at all
    for _ in range(3):
        res = agent.update(UpdateBatch(**batch))
        assert np.isfinite(res.td_error).all()
        assert all(math.isfinite(v) for v in res.metrics.values()), res.metrics
        assert res.metrics["entropy"] == 0.0 and res.metrics["target_entropy"] == 0.0
    assert all(torch.isfinite(p).all() for p in _params(agent))
    probs = agent.policy_probs(batch["obs"][0], batch["legal_mask"][0])
    assert probs[batch["action"][0]] == 1.0 and probs.sum() == 1.0


def test_streamed_policy_gradient_matches_autograd() -> None:
    b, n, alpha, scale = 5, 300, 0.7, 0.25
    logits, q, legal = _problem(0, b, n, 0.3)
    st, ws = _stream(logits, q, legal, alpha, "grad")
    assert len(ws.blocks(n)) > 1
    ref_loss, ref_entropy, ref_grad = _dense_reference(logits, q, legal, alpha)
    assert torch.allclose((-st.mean_w - alpha * st.log_z).double(), ref_loss, atol=1e-4)
    assert torch.allclose((st.log_z - st.mean_z).double(), ref_entropy, atol=1e-4)
    # With h = logits and E = identity, d loss / d E = grad.T h and d loss / d h = grad; the bias gets grad.sum(0).
    f = _factors(logits)
    d_h, d_emb, d_bias = policy_gradient(f, st, ws, scale)
    assert torch.allclose(d_h.double(), scale * ref_grad, atol=1e-6)
    assert torch.allclose(d_bias.double(), scale * ref_grad.sum(0), atol=1e-6)
    assert torch.allclose(d_emb.double(), scale * ref_grad.t() @ logits.double(), atol=1e-4)
    never_legal = ~legal.any(0)
    assert never_legal.any() and (d_bias[never_legal] == 0).all()


@pytest.mark.parametrize("mode", ["value", "grad"])
def test_illegal_logits_far_above_the_legal_ones_change_nothing(mode: str) -> None:
    """The stream's running maximum includes illegal actions; a state whose illegal logits sit far above its legal
    ones (here 300 nats: every legal term would be clamped at 2^-126) must still get the exact legal softmax."""
    b, n, alpha = 4, 200, 0.4
    logits, q, legal = _problem(3, b, n, 0.5)
    logits[1] = torch.where(legal[1], logits[1], logits[1] + 300.0)
    logits[2] = torch.where(legal[2], logits[2], logits[2] + 40.0)  # not far enough to need the rerun
    st, ws = _stream(logits, q, legal, alpha, mode)
    ref_loss, ref_entropy, ref_grad = _dense_reference(logits, q, legal, alpha)
    ok = st.any_legal
    assert torch.allclose((-st.mean_w - alpha * st.log_z).double()[ok], ref_loss[ok], atol=1e-4)
    if mode == "grad":
        assert torch.allclose((st.log_z - st.mean_z).double()[ok], ref_entropy[ok], atol=1e-4)
        d_h, _, _ = policy_gradient(_factors(logits), st, ws, 1.0)
        assert torch.allclose(d_h.double(), ref_grad, atol=1e-6)


def test_streamed_soft_value_matches_a_dense_reference_and_ignores_empty_rows() -> None:
    b, n, alpha = 6, 200, 0.4
    logits, q, legal = _problem(1, b, n, 0.5)
    legal[1] = False  # a terminal next state may have no legal action at all
    st, _ = _stream(logits, q, legal, alpha, "value")
    assert st.any_legal.tolist() == [True, False, True, True, True, True]
    ref_loss, _, _ = _dense_reference(logits[st.any_legal], q[st.any_legal], legal[st.any_legal], alpha)
    value = (st.mean_w + alpha * st.log_z)[st.any_legal]
    assert torch.allclose(value.double(), -ref_loss, atol=1e-4)
    assert torch.isfinite(st.mean_w).all() and torch.isfinite(st.log_z).all()


def test_sampled_actions_follow_the_policy_and_are_never_illegal() -> None:
    b, n = 3, 150
    logits, _, legal = _problem(2, b, n, 0.4)
    st, ws = _stream(logits, None, legal, 0.5, "sample")
    draws, k = 4000, 16
    gen = torch.Generator().manual_seed(3)
    counts = torch.zeros(b, n, dtype=torch.float64)
    for _ in range(draws):
        a = sample_actions(st, ws, k, gen)
        assert legal.gather(1, a).all()
        counts.scatter_add_(1, a, torch.ones(b, k, dtype=torch.float64))
    pi = torch.softmax(logits.double().masked_fill(~legal, -1e300), 1)
    total = draws * k
    # Pearson chi-square per state over the legal actions with pi * total >= 5 (the rest pooled).
    for i in range(b):
        big = legal[i] & (pi[i] * total >= 5)
        expected = torch.cat([pi[i][big] * total, (pi[i][legal[i] & ~big] * total).sum().reshape(1)])
        observed = torch.cat([counts[i][big], counts[i][legal[i] & ~big].sum().reshape(1)])
        keep = expected > 0
        chi2 = (((observed - expected) ** 2)[keep] / expected[keep]).sum().item()
        dof = int(keep.sum()) - 1
        assert chi2 < dof + 5 * math.sqrt(2 * max(dof, 1)), (i, chi2, dof)  # ~5 sigma of the chi-square


def test_sampled_policy_gradient_is_unbiased() -> None:
    """The mean of the sampled logit gradient over many draws matches the exact one (float64 autograd): every
    entry drawn often enough lies within 5 standard errors, and the z-scores have mean ~0 and spread ~1."""
    b, n, alpha, k = 3, 150, 0.4, 8
    logits, q, legal = _problem(4, b, n, 0.5, spread=1.0)
    st, ws = _stream(logits, None, legal, alpha, "sample")
    _, _, exact = _dense_reference(logits, q, legal, alpha)
    gen = torch.Generator().manual_seed(5)
    draws = 6000
    s1 = torch.zeros(b, n, dtype=torch.float64)
    s2 = torch.zeros(b, n, dtype=torch.float64)
    hits = torch.zeros(b, n)
    for _ in range(draws):
        a = sample_actions(st, ws, k, gen)
        f = alpha * (logits.gather(1, a) - st.log_z[:, None]) - q.gather(1, a)
        one = torch.zeros(b, n, dtype=torch.float64).scatter_add_(1, a, sampled_logit_grad(f, 1.0).double())
        s1 += one
        s2 += one**2
        hits.scatter_add_(1, a, torch.ones(b, k))
    mean = s1 / draws
    se = ((s2 / draws - mean**2) / draws).sqrt()
    constant = se == 0  # e.g. the state with one legal action: its gradient is exactly 0, every draw
    assert torch.allclose(mean[constant], exact[constant], atol=1e-12)
    often = legal & (hits >= 100) & ~constant
    z = ((mean - exact) / se)[often]
    assert often.sum() > 100
    assert z.abs().max() < 5.0 and abs(z.mean().item()) < 0.3 and 0.7 < z.std().item() < 1.3
    assert (mean[~legal] == 0).all()
    # rarely drawn actions: the exact gradient there is small, and so is the estimate's error
    assert (mean - exact)[legal & ~often].abs().max() < 0.01


def _uniform_actor(agent: DiscreteSAC) -> None:
    with torch.no_grad():
        agent.actor.proj.weight.zero_()
        agent.actor.proj.bias.zero_()
        agent.actor.bias.zero_()


@pytest.mark.parametrize(("ratio", "direction"), [(0.5, -1), (1.0, 0)])
def test_temperature_falls_when_entropy_exceeds_target(ratio: float, direction: int) -> None:
    rng = np.random.default_rng(3)
    n, d, b, k = 50, 4, 16, 10
    cfg = SACConfig(**SMALL, target_entropy_ratio=ratio, init_alpha=0.2, lr_actor=1e-12)
    agent = DiscreteSAC(d, n, cfg, seed=3)
    _uniform_actor(agent)
    batch = _batch(rng, b, d, n)
    batch["legal_mask"][:] = False
    batch["legal_mask"][:, 10:10 + k] = True
    batch["action"][:] = 12
    res = agent.update(UpdateBatch(**batch))
    assert res.metrics["entropy"] == pytest.approx(math.log(k), abs=1e-5)
    assert res.metrics["target_entropy"] == pytest.approx(ratio * math.log(k), abs=1e-6)
    change = agent.alpha - 0.2
    if direction == 0:  # entropy on target: gradient ~0 (float rounding; Adam still takes at most lr)
        assert abs(res.metrics["alpha_loss"]) < 1e-5 and abs(change) <= 1.01 * cfg.lr_alpha * 0.2
    else:
        assert change < 0


@pytest.mark.parametrize("bound", [0.2, 0.25])
def test_the_temperature_stops_at_max_alpha_however_far_the_entropy_is_below_target(bound: float) -> None:
    rng = np.random.default_rng(4)
    n, d, b = 50, 4, 16
    cfg = SACConfig(**SMALL, target_entropy_ratio=0.9, lr_alpha=0.05, lr_actor=1e-12, max_alpha=bound)
    agent = DiscreteSAC(d, n, cfg, seed=4)
    _uniform_actor(agent)
    with torch.no_grad():
        agent.actor.bias[0] = 40.0  # almost deterministic on action 0: the entropy stays far below its target
    alphas = [agent.alpha]
    for _ in range(30):
        agent.update(UpdateBatch(**_batch(rng, b, d, n)))
        alphas.append(agent.alpha)
    assert alphas == sorted(alphas) and alphas[-1] == pytest.approx(bound, rel=1e-5)
    assert alphas[1] > alphas[0] or bound == 0.2  # it rose until the bound, or the bound is where it starts
    with pytest.raises(ValueError, match=r"SACConfig.max_alpha = 0.1 is invalid: expected a number in "
                                         r"\[init_alpha = 0.2, inf\]"):
        SACConfig(**SMALL, max_alpha=0.1).validate()


def test_temperature_rises_when_entropy_is_below_target() -> None:
    rng = np.random.default_rng(4)
    n, d, b = 50, 4, 16
    agent = DiscreteSAC(d, n, SACConfig(**SMALL, target_entropy_ratio=0.9), seed=4)
    _uniform_actor(agent)
    with torch.no_grad():
        agent.actor.bias[0] = 40.0  # almost deterministic on action 0
    res = agent.update(UpdateBatch(**_batch(rng, b, d, n)))
    assert res.metrics["entropy"] < 0.01 < res.metrics["target_entropy"]
    assert agent.alpha > 0.2


# ------------------------------------------------------------------------------------------- soft target


@pytest.mark.parametrize("head", ["lowrank", "linear"])
def test_td_error_matches_a_reference_soft_target_with_semi_mdp_discount(head: str) -> None:
    rng = np.random.default_rng(6)
    n, d, b = 40, 5, 12
    cfg = SACConfig(**{**SMALL, "head": head}, gamma=0.9, init_alpha=0.37)
    agent = DiscreteSAC(d, n, cfg, action_features=_features(rng, n, 9, 2), seed=6)
    batch = _batch(rng, b, d, n, p_legal=0.3)
    with torch.no_grad():  # give the target critics a state-dependent shape, unlike the online ones
        for p in agent.q1_target.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    as_t = torch.from_numpy
    logits = agent._scores("actor", as_t(batch["next_obs"])).double().numpy()
    q_next = torch.minimum(agent._scores("q1_target", as_t(batch["next_obs"])),
                           agent._scores("q2_target", as_t(batch["next_obs"]))).double().numpy()
    q_now = torch.minimum(agent._scores("q1", as_t(batch["obs"])), agent._scores("q2", as_t(batch["obs"]))).numpy()
    expected = np.empty(b)
    for i in range(b):
        legal = batch["next_legal_mask"][i]
        z = logits[i, legal]
        logp = z - z.max() - np.log(np.exp(z - z.max()).sum())
        v = (np.exp(logp) * (q_next[i, legal] - 0.37 * logp)).sum()
        y = batch["reward"][i] + (0.0 if batch["done"][i] else 0.9 ** batch["steps"][i] * v)
        expected[i] = abs(q_now[i, batch["action"][i]] - y)
    res = agent.update(UpdateBatch(**batch))
    np.testing.assert_allclose(res.td_error, expected, rtol=1e-4, atol=1e-5)
    assert isinstance(res, UpdateResult) and res.td_error.dtype == np.float32


def test_zero_importance_weights_leave_the_critics_unchanged() -> None:
    rng = np.random.default_rng(7)
    agent = DiscreteSAC(4, 20, SACConfig(**SMALL), seed=7)
    batch = _batch(rng, 8, 4, 20)
    batch["weight"][:] = 0.0
    before = [p.detach().clone() for p in agent.q1.parameters()]
    res = agent.update(UpdateBatch(**batch))
    assert res.metrics["critic_loss"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, agent.q1.parameters()))


def test_targets_follow_polyak_averaging() -> None:
    rng = np.random.default_rng(8)
    cfg = SACConfig(**SMALL, polyak=0.9)
    agent = DiscreteSAC(4, 20, cfg, seed=8)
    old = [p.detach().clone() for p in agent.q2_target.parameters()]
    agent.update(UpdateBatch(**_batch(rng, 8, 4, 20)))
    for t_old, t_new, online in zip(old, agent.q2_target.parameters(), agent.q2.parameters()):
        torch.testing.assert_close(t_new, 0.9 * t_old + 0.1 * online.detach())


# ------------------------------------------------------------------------------------------- the reference, the batch


@pytest.mark.parametrize(("head", "imitation", "layer_norm"), [("lowrank", False, False), ("lowrank", True, False),
                                                               ("linear", True, False), ("lowrank", False, True)])
def test_the_update_matches_the_dense_reference(head: str, imitation: bool, layer_norm: bool) -> None:
    """The streamed update (blocks of actions, base 2, packed masks, hand-written backward passes) against the dense
    reference (ace_hybrid.sac.reference) on twin agents: the same TD errors, losses and entropies to float32
    rounding, for two updates in a row (the second sees the first's parameters)."""
    rng = np.random.default_rng(20)
    n, d = 300, 6
    feats = _features(rng, n, 12, 3)
    cfg = SACConfig(**{**SMALL, "head": head}, init_alpha=0.3, critic_layer_norm=layer_norm)
    fast, dense = (DiscreteSAC(d, n, cfg, action_features=feats, seed=5) for _ in range(2))
    for _ in range(2):
        batch = _batch(rng, 16, d, n, p_legal=0.4)
        batch["next_legal_mask"][batch["done"]] = False  # terminal rows without a legal next action
        weights = np.r_[np.zeros(12), [0.5, 1.0, 2.0, 0.0]].astype(np.float32) if imitation else None
        batch = UpdateBatch(**batch, imitation=weights)
        a, b = fast.update(batch), reference_update(dense, batch)
        np.testing.assert_allclose(a.td_error, b.td_error, rtol=1e-4, atol=1e-5)
        assert a.metrics.keys() == b.metrics.keys() and ("imitation_loss" in a.metrics) == imitation
        for key in ("critic_loss", "actor_loss", "alpha_loss", "entropy", "target_entropy", "q_mean", "target_mean",
                    "imitation_loss"):
            if key in a.metrics:
                assert a.metrics[key] == pytest.approx(b.metrics[key], rel=1e-4, abs=1e-5), key
    assert fast.n_updates == dense.n_updates == 2


def test_the_masks_are_named_fields_and_a_swap_changes_the_update() -> None:
    """legal_mask and next_legal_mask have one shape and one dtype: they can only be passed by name, and swapping
    them is not harmless (a changed target, or an action the swapped mask calls illegal)."""
    rng = np.random.default_rng(21)
    fields = _batch(rng, 8, 4, 30, p_legal=0.5)
    with pytest.raises(TypeError):
        UpdateBatch(*fields.values())  # keyword-only
    batch = UpdateBatch(**fields)
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.legal_mask = batch.next_legal_mask  # type: ignore[misc]
    swapped = {**fields, "legal_mask": fields["next_legal_mask"], "next_legal_mask": fields["legal_mask"]}
    bad = int(np.flatnonzero(~fields["next_legal_mask"][np.arange(8), fields["action"]])[0])
    with pytest.raises(ValueError, match=rf"action\[{bad}\] = \d+ is illegal: legal_mask\[{bad}, \d+\] is False"):
        UpdateBatch(**swapped)
    both = fields["legal_mask"] & fields["next_legal_mask"]
    both[np.arange(8), fields["action"]] = True  # the actions legal under either mask
    legal = {**fields, "legal_mask": fields["legal_mask"] | both, "next_legal_mask": fields["next_legal_mask"] | both}
    crossed = {**legal, "legal_mask": legal["next_legal_mask"], "next_legal_mask": legal["legal_mask"]}
    td = [DiscreteSAC(4, 30, SACConfig(**SMALL), seed=0).update(UpdateBatch(**f)).td_error for f in (legal, crossed)]
    assert not np.allclose(*td)


def test_a_batch_that_does_not_fit_the_agent_names_the_field(small_agent: DiscreteSAC) -> None:
    batch = _batch(np.random.default_rng(22), 6, 5, 20)
    with pytest.raises(ValueError, match=r"obs has shape \(6, 5\): expected \(B, 4\)"):
        small_agent.update(UpdateBatch(**batch))
    batch = _batch(np.random.default_rng(22), 6, 4, 21)
    with pytest.raises(ValueError, match=r"legal_mask has shape \(6, 21\): expected \(B, 20\)"):
        small_agent.update(UpdateBatch(**batch))
    with pytest.raises(TypeError, match="update takes an UpdateBatch, got dict"):
        small_agent.update(batch)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- determinism


def _run(seed: int, n_updates: int) -> tuple[list[dict[str, float]], list[np.ndarray], list[int], DiscreteSAC]:
    rng = np.random.default_rng(11)
    n, d = 64, 6
    agent = DiscreteSAC(d, n, SACConfig(**SMALL), action_features=_features(rng, n, 12, 3), seed=seed)
    metrics, tds, acts = [], [], []
    for _ in range(n_updates):
        batch = _batch(rng, 16, d, n)
        res = agent.update(UpdateBatch(**batch))
        metrics.append(res.metrics)
        tds.append(res.td_error)
        acts.append(agent.act(batch["obs"][0], batch["legal_mask"][0]))
    return metrics, tds, acts, agent


def test_same_seed_gives_bit_identical_first_updates() -> None:
    m1, td1, a1, ag1 = _run(seed=21, n_updates=6)
    m2, td2, a2, ag2 = _run(seed=21, n_updates=6)
    assert m1 == m2 and a1 == a2
    assert all(np.array_equal(x, y) for x, y in zip(td1, td2))
    assert all(torch.equal(x, y) for x, y in zip(_params(ag1), _params(ag2)))
    m3, _, _, _ = _run(seed=22, n_updates=1)
    assert m3[0] != m1[0]


def test_construction_leaves_the_global_torch_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    DiscreteSAC(3, 10, SACConfig(**SMALL), seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_state_dict_round_trip_continues_identically() -> None:
    rng = np.random.default_rng(12)
    n, d = 48, 5
    feats = _features(rng, n, 10, 2)
    cfg = SACConfig(**SMALL)
    agent = DiscreteSAC(d, n, cfg, action_features=feats, seed=1)
    for _ in range(3):
        agent.update(UpdateBatch(**_batch(rng, 16, d, n)))
    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    nxt = _batch(rng, 16, d, n)
    res_a = agent.update(UpdateBatch(**nxt))
    act_a = [agent.act(nxt["obs"][i], nxt["legal_mask"][i]) for i in range(10)]

    restored = DiscreteSAC(d, n, cfg, action_features=feats, seed=999)
    buffer.seek(0)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.n_updates == 3
    res_b = restored.update(UpdateBatch(**nxt))
    act_b = [restored.act(nxt["obs"][i], nxt["legal_mask"][i]) for i in range(10)]
    assert res_a.metrics == res_b.metrics and np.array_equal(res_a.td_error, res_b.td_error)
    assert act_a == act_b and restored.n_updates == agent.n_updates == 4
    assert all(torch.equal(x, y) for x, y in zip(_params(agent), _params(restored)))


def test_policy_state_moves_the_actor_only() -> None:
    """What the learner sends rollout workers: the receiver acts like the sender, and nothing else of it changes."""
    rng = np.random.default_rng(14)
    n, d = 48, 5
    feats = _features(rng, n, 10, 2)
    learner = DiscreteSAC(d, n, SACConfig(**SMALL), action_features=feats, seed=1)
    for _ in range(3):
        learner.update(UpdateBatch(**_batch(rng, 16, d, n)))
    worker = DiscreteSAC(d, n, SACConfig(**SMALL), action_features=feats, seed=7)
    critics = [t.clone() for t in worker.q1.state_dict().values()]
    obs, mask = rng.standard_normal((10, d), dtype=np.float32), rng.random((10, n)) < 0.5
    mask[:, 0] = True
    worker.act(obs[0], mask[0])  # caches the old actor's action factors
    state = learner.policy_state()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    worker.load_policy_state(state)
    np.testing.assert_array_equal(learner.policy_probs(obs[1], mask[1]), worker.policy_probs(obs[1], mask[1]))
    assert [learner.act(o, m, deterministic=True) for o, m in zip(obs, mask)] == [
        worker.act(o, m, deterministic=True) for o, m in zip(obs, mask)]
    assert all(torch.equal(a, b) for a, b in zip(critics, worker.q1.state_dict().values()))
    assert worker.n_updates == 0
    with pytest.raises(ValueError, match=r"missing keys \['bias'\]"):
        worker.load_policy_state({k: v for k, v in state.items() if k != "bias"})
    with pytest.raises(ValueError, match=r"policy state\['bias'\] has shape \(3,\), this actor's is \(48,\)"):
        worker.load_policy_state({**state, "bias": np.zeros(3, np.float32)})


def test_layer_norm_goes_into_the_critics_only_and_a_state_must_agree_on_it() -> None:
    """sac.critic_layer_norm puts a LayerNorm before each hidden ReLU of both critics and their targets (the actor
    keeps its plain trunk); a state with it does not load into an agent without it, nor one without it (a state
    written before the option) into an agent with it."""
    cfg = SACConfig(**{**SMALL, "hidden": (16, 8)}, critic_layer_norm=True)
    agent = DiscreteSAC(4, 20, cfg, seed=0)
    norms = {name: [m.normalized_shape for m in getattr(agent, name).modules() if isinstance(m, torch.nn.LayerNorm)]
             for name in ("actor", "q1", "q2", "q1_target", "q2_target")}
    assert norms == {"actor": [], **{name: [(16,), (8,)] for name in ("q1", "q2", "q1_target", "q2_target")}}
    plain = DiscreteSAC(4, 20, SACConfig(**{**SMALL, "hidden": (16, 8)}), seed=0)
    with pytest.raises(ValueError, match=r"state\['config'\]\['critic_layer_norm'\] = True but this agent has False"):
        plain.load_state_dict(agent.state_dict())
    old = plain.state_dict()
    del old["config"]["critic_layer_norm"]
    with pytest.raises(ValueError, match=r"state\['config'\]\['critic_layer_norm'\] = False but this agent has True"):
        agent.load_state_dict(old)
    plain.load_state_dict(old)
    with pytest.raises(ValueError, match=r"SACConfig.critic_layer_norm = 1 is invalid: expected true or false"):
        SACConfig(**SMALL, critic_layer_norm=1).validate()  # type: ignore[arg-type]


def test_state_dict_is_a_snapshot() -> None:
    rng = np.random.default_rng(13)
    agent = DiscreteSAC(4, 20, SACConfig(**SMALL), seed=0)
    state = agent.state_dict()
    frozen = state["actor"]["bias"].clone()
    with torch.no_grad():
        agent.actor.bias.add_(1.0)
    agent.update(UpdateBatch(**_batch(rng, 8, 4, 20)))
    assert torch.equal(state["actor"]["bias"], frozen)


# ------------------------------------------------------------------------------------------- bad input


@pytest.fixture
def small_agent() -> DiscreteSAC:
    return DiscreteSAC(4, 20, SACConfig(**SMALL), seed=0)


@pytest.mark.parametrize(("name", "value", "match"), [
    ("action", "illegal", "action\\[0\\] = .* is illegal"),
    ("action", "out_of_range", "action\\[0\\] = 20 out of range"),
    ("action", "float", "action has shape"),
    ("obs", "short", "obs has shape"),
    ("next_obs", "short", "next_obs has shape"),
    ("reward", "nan", "reward has a non-finite"),
    ("weight", "negative", "weight has a negative"),
    ("legal_mask", "short", "legal_mask has shape"),
    ("next_legal_mask", "empty_not_done", "next_legal_mask\\[0\\] has no legal action"),
    ("done", "short", "done has shape"),
    ("steps", "zero", "steps has an entry 0"),
    ("steps", "float", "steps has shape"),
])
def test_bad_update_arguments_raise_value_error_naming_them(small_agent: DiscreteSAC, name: str, value: str,
                                                             match: str) -> None:
    batch = _batch(np.random.default_rng(0), 6, 4, 20)
    if name == "action":
        if value == "illegal":
            batch["legal_mask"][0] = False
            batch["legal_mask"][0, 0] = True
            batch["action"][0] = 5
        elif value == "out_of_range":
            batch["action"][0] = 20
        else:
            batch["action"] = batch["action"].astype(np.float32)
    elif value == "short":
        batch[name] = batch[name][:-1]
    elif value == "nan":
        batch[name][0] = np.nan
    elif value == "negative":
        batch[name][0] = -0.5
    elif value == "empty_not_done":
        batch["next_legal_mask"][0] = False
        batch["done"][0] = False
    elif value == "zero":
        batch[name][0] = 0
    else:
        batch[name] = batch[name].astype(np.float64)
    before = _params(small_agent)
    with pytest.raises(ValueError, match=match):
        small_agent.update(UpdateBatch(**batch))
    assert small_agent.n_updates == 0 and all(torch.equal(a, b) for a, b in zip(before, _params(small_agent)))


def test_bad_act_arguments(small_agent: DiscreteSAC) -> None:
    obs = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="mask has no legal action"):
        small_agent.act(obs, np.zeros(20, bool))
    with pytest.raises(ValueError, match="mask has shape"):
        small_agent.act(obs, np.ones(21, bool))
    with pytest.raises(ValueError, match="obs has shape"):
        small_agent.q_values(np.zeros(5, np.float32), np.ones(20, bool))
    q = small_agent.q_values(obs, np.arange(20) % 2 == 0)
    assert q.dtype == np.float32 and q.shape == (20,)
    assert np.isneginf(q[1::2]).all() and np.isfinite(q[::2]).all()


@pytest.mark.parametrize(("field", "value"), [
    ("hidden", ()), ("hidden", (64, 0)), ("head", "dense"), ("embed_dim", 0), ("lr_actor", 0.0),
    ("lr_critic", -1.0), ("lr_alpha", float("nan")), ("gamma", 1.5), ("polyak", -0.1), ("init_alpha", 0.0),
    ("target_entropy_ratio", 1.2), ("grad_clip", 0.0), ("batch_size", 0), ("device", "gpu"), ("device", "cuda:0"),
    ("policy_samples", 1), ("policy_samples", -2), ("policy_samples", 2.0),
])
def test_invalid_config_names_the_field(field: str, value: object) -> None:
    cfg = dataclasses.replace(SACConfig(), **{field: value})
    with pytest.raises(ValueError, match=f"SACConfig.{field} = "):
        cfg.validate()
    with pytest.raises(ValueError, match=field):
        DiscreteSAC(3, 10, cfg)


def test_every_config_field_is_documented() -> None:
    import ast
    import inspect

    import ace_hybrid.sac as sac

    tree = ast.parse(inspect.getsource(sac.SACConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    documented = {body[i].target.id for i in range(len(body) - 1)
                  if isinstance(body[i], ast.AnnAssign) and isinstance(body[i + 1], ast.Expr)
                  and isinstance(body[i + 1].value, ast.Constant)}
    assert documented == {f.name for f in dataclasses.fields(SACConfig)}
    SACConfig().validate()


def test_bad_constructor_arguments() -> None:
    cfg = SACConfig(**SMALL)
    with pytest.raises(ValueError, match="action_features has shape"):
        DiscreteSAC(3, 10, cfg, action_features=np.zeros((9, 4), np.int8))
    with pytest.raises(ValueError, match="action_features has dtype"):
        DiscreteSAC(3, 10, cfg, action_features=np.zeros((10, 4), np.float32))
    with pytest.raises(ValueError, match="n_actions"):
        DiscreteSAC(3, 0, cfg)
    with pytest.raises(ValueError, match="seed"):
        DiscreteSAC(3, 10, cfg, seed=-1)
    agent = DiscreteSAC(3, 10, cfg)
    with pytest.raises(ValueError, match="n_actions"):
        agent.load_state_dict(DiscreteSAC(3, 11, cfg).state_dict())
    with pytest.raises(ValueError, match="head"):
        agent.load_state_dict(DiscreteSAC(3, 10, dataclasses.replace(cfg, head="linear")).state_dict())


@pytest.mark.parametrize("head", ["lowrank", "linear"])
def test_prior_action_starts_with_the_requested_probability(head: str) -> None:
    cfg = SACConfig(hidden=(16,), embed_dim=4, head=head, prior_action=3, prior_prob=0.5)
    agent = DiscreteSAC(10, 500, cfg, seed=0)
    probs = agent.policy_probs(np.zeros(10, np.float32), np.ones(500, bool))
    assert probs[3] == pytest.approx(0.5, abs=0.05)
    with pytest.raises(ValueError, match="prior_action = 600 out of range"):
        DiscreteSAC(10, 500, SACConfig(hidden=(16,), prior_action=600, prior_prob=0.5), seed=0)
    with pytest.raises(ValueError, match="prior_prob"):
        SACConfig(prior_prob=1.0).validate()


# ------------------------------------------------------------------------------------------- sampled policy gradient


def test_sampled_updates_are_deterministic_and_resume_from_a_checkpoint() -> None:
    rng = np.random.default_rng(14)
    n, d = 200, 5
    feats = _features(rng, n, 10, 2)
    cfg = SACConfig(**SMALL, policy_samples=16)
    batches = [_batch(rng, 16, d, n) for _ in range(4)]

    def run(agent: DiscreteSAC, todo: list[dict[str, np.ndarray]]) -> list[UpdateResult]:
        return [agent.update(UpdateBatch(**batch)) for batch in todo]

    a, b = (DiscreteSAC(d, n, cfg, action_features=feats, seed=3) for _ in range(2))
    ra, rb = run(a, batches), run(b, batches)
    assert [r.metrics for r in ra] == [r.metrics for r in rb]
    assert all(torch.equal(x, y) for x, y in zip(_params(a), _params(b)))
    c = DiscreteSAC(d, n, cfg, action_features=feats, seed=3)
    run(c, batches[:2])
    buffer = io.BytesIO()
    torch.save(c.state_dict(), buffer)
    buffer.seek(0)
    resumed = DiscreteSAC(d, n, cfg, action_features=feats, seed=99)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert [r.metrics for r in run(resumed, batches[2:])] == [r.metrics for r in ra[2:]]
    other = DiscreteSAC(d, n, dataclasses.replace(cfg, policy_samples=32), action_features=feats, seed=3)
    assert run(other, batches[:1])[0].metrics["grad_norm_actor"] != ra[0].metrics["grad_norm_actor"]


def test_sampled_and_exact_updates_share_the_critic_target_and_the_entropy() -> None:
    """Only the actor's gradient is estimated: the soft target, the critic step, the entropy and the
    temperature step are the exact ones."""
    rng = np.random.default_rng(15)
    n, d = 120, 4
    feats = _features(rng, n, 9, 2)
    batch = _batch(rng, 16, d, n)
    batch = UpdateBatch(**batch)
    exact = DiscreteSAC(d, n, SACConfig(**SMALL), action_features=feats, seed=2).update(batch)
    sampled = DiscreteSAC(d, n, SACConfig(**SMALL, policy_samples=8), action_features=feats, seed=2).update(batch)
    np.testing.assert_array_equal(exact.td_error, sampled.td_error)
    for key in ("critic_loss", "target_mean", "q_mean", "grad_norm_critic", "entropy", "alpha_loss"):
        assert sampled.metrics[key] == pytest.approx(exact.metrics[key], rel=1e-5, abs=1e-7), key


# ------------------------------------------------------------------------------------------- caches, batches


def test_acting_follows_every_parameter_change() -> None:
    """The action factors are cached per parameter version: an update, a checkpoint load and an in-place edit
    all show in act, policy_probs and q_values."""
    rng = np.random.default_rng(16)
    n, d = 40, 4
    feats = _features(rng, n, 8, 2)
    agent = DiscreteSAC(d, n, SACConfig(**SMALL), action_features=feats, seed=4)
    obs, mask = np.zeros(d, np.float32), np.ones(n, bool)
    before_p, before_q = agent.policy_probs(obs, mask), agent.q_values(obs, mask)
    agent.update(UpdateBatch(**_batch(rng, 16, d, n)))
    after_p, after_q = agent.policy_probs(obs, mask), agent.q_values(obs, mask)
    assert not np.array_equal(before_p, after_p) and not np.array_equal(before_q, after_q)
    with torch.no_grad():
        agent.actor.bias[7] += 50.0
    assert agent.act(obs, mask, deterministic=True) == 7
    fresh = DiscreteSAC(d, n, SACConfig(**SMALL), action_features=feats, seed=5)
    fresh.policy_probs(obs, mask)  # fills its cache
    fresh.load_state_dict(agent.state_dict())
    assert fresh.act(obs, mask, deterministic=True) == 7
    np.testing.assert_array_equal(fresh.q_values(obs, mask), agent.q_values(obs, mask))


def test_batches_of_different_sizes_share_one_agent() -> None:
    rng = np.random.default_rng(17)
    agent = DiscreteSAC(4, 70, SACConfig(**SMALL), seed=0)
    for b in (16, 5, 16, 1):
        res = agent.update(UpdateBatch(**_batch(rng, b, 4, 70)))
        assert res.td_error.shape == (b,) and np.isfinite(res.td_error).all()


# ------------------------------------------------------------------------------------------- devices


def test_state_dict_holds_cpu_tensors_only() -> None:
    agent = DiscreteSAC(4, 20, SACConfig(**SMALL), seed=0)
    agent.update(UpdateBatch(**_batch(np.random.default_rng(18), 8, 4, 20)))

    def tensors(obj: object) -> list[torch.Tensor]:
        if isinstance(obj, torch.Tensor):
            return [obj]
        if isinstance(obj, dict):
            return [t for v in obj.values() for t in tensors(v)]
        if isinstance(obj, (list, tuple)):
            return [t for v in obj for t in tensors(v)]
        return []

    found = tensors(agent.state_dict())
    assert len(found) > 20 and all(t.device.type == "cpu" for t in found)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")
def test_cuda_without_a_gpu_is_a_value_error_and_auto_picks_the_cpu() -> None:
    with pytest.raises(ValueError, match="SACConfig.device = 'cuda'"):
        DiscreteSAC(3, 10, SACConfig(**SMALL, device="cuda"))
    assert DiscreteSAC(3, 10, SACConfig(**SMALL, device="auto")).device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("policy_samples", [0, 8])
def test_cuda_agent_matches_the_cpu_agent_and_checkpoints_cross_devices(policy_samples: int) -> None:
    rng = np.random.default_rng(19)
    n, d = 150, 5
    feats = _features(rng, n, 10, 2)
    cfg = SACConfig(**SMALL, policy_samples=policy_samples, prior_prob=0.3)
    cpu = DiscreteSAC(d, n, cfg, action_features=feats, seed=1)
    gpu = DiscreteSAC(d, n, dataclasses.replace(cfg, device="cuda"), action_features=feats, seed=1)
    assert gpu.device.type == "cuda"
    assert all(p.device.type == "cuda" for net in gpu._modules().values() for p in net.parameters())
    assert gpu.log_alpha.device.type == "cuda"
    batch = _batch(rng, 16, d, n)
    r_cpu, r_gpu = cpu.update(UpdateBatch(**batch)), gpu.update(UpdateBatch(**batch))
    assert r_gpu.td_error.dtype == np.float32
    np.testing.assert_allclose(r_gpu.td_error, r_cpu.td_error, rtol=1e-3, atol=1e-4)
    for key in ("critic_loss", "entropy", "q_mean", "target_mean"):
        assert r_gpu.metrics[key] == pytest.approx(r_cpu.metrics[key], rel=1e-3, abs=1e-4), key
    obs, mask = batch["obs"][0], batch["legal_mask"][0]
    assert mask[gpu.act(obs, mask)] and mask[gpu.act(obs, mask, deterministic=True)]
    probs = gpu.policy_probs(obs, mask)
    assert isinstance(probs, np.ndarray) and probs[~mask].sum() == 0.0
    assert gpu.q_values(obs, mask).dtype == np.float32
    # GPU -> file -> CPU agent, and CPU -> GPU: both continue from the same state.
    buffer = io.BytesIO()
    torch.save(gpu.state_dict(), buffer)
    buffer.seek(0)
    back = DiscreteSAC(d, n, cfg, action_features=feats, seed=7)
    back.load_state_dict(torch.load(buffer, weights_only=True))
    np.testing.assert_allclose(back.q_values(obs, mask), gpu.q_values(obs, mask), rtol=1e-5, atol=1e-5)
    again = DiscreteSAC(d, n, dataclasses.replace(cfg, device="cuda"), action_features=feats, seed=7)
    again.load_state_dict(back.state_dict())
    nxt = _batch(rng, 16, d, n)
    nxt = UpdateBatch(**nxt)
    np.testing.assert_allclose(again.update(nxt).td_error, gpu.update(nxt).td_error, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------- imitation


@pytest.mark.parametrize("head", ["lowrank", "linear"])
def test_the_imitation_gradient_is_the_gradient_of_the_cloning_loss(head: str) -> None:
    rng = np.random.default_rng(11)
    agent = DiscreteSAC(5, 30, SACConfig(**SMALL, head=head), seed=1)
    b = agent._tensors(UpdateBatch(**_batch(rng, 16, 5, 30),
                                 imitation=np.r_[np.zeros(13), [0.5, 1.0, 2.0]].astype(np.float32)))
    h = torch.randn(16, 6, dtype=torch.float64, requires_grad=True)
    emb = torch.randn(30, 6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(30, dtype=torch.float64, requires_grad=True)
    b = {k: (v.double() if v.is_floating_point() else v) for k, v in b.items()}
    mask = torch.ones(16, 30, dtype=torch.bool)
    mask[b["imit_rows"]] = b["imit_mask"]
    logp = torch.log_softmax((h @ emb.T + bias).masked_fill(~mask, torch.finfo(torch.float64).min), dim=1)
    w = torch.zeros(16, dtype=torch.float64).index_put_((b["imit_rows"],), b["imit_w"])
    loss = -(w * logp.gather(1, b["action"][:, None])[:, 0]).sum() / 16
    loss.backward()
    d_h, d_emb, d_bias = torch.zeros_like(h), torch.zeros_like(emb), torch.zeros_like(bias)
    agent._add_imitation(Factors(h.detach(), emb.detach(), bias.detach()), b, d_h, d_emb, d_bias)
    assert agent._imitation_loss == pytest.approx(float(loss.detach()), rel=1e-9)
    for mine, ref in ((d_h, h.grad), (d_emb, emb.grad), (d_bias, bias.grad)):
        torch.testing.assert_close(mine, ref, rtol=1e-9, atol=1e-12)
    assert d_h[:13].abs().max() == 0  # rows without weight get nothing


@pytest.mark.parametrize("policy_samples", [0, 16])
def test_imitation_pulls_the_policy_towards_validated_actions(policy_samples: int) -> None:
    rng = np.random.default_rng(3)
    agent = DiscreteSAC(4, 40, SACConfig(**SMALL, lr_actor=3e-3, policy_samples=policy_samples), seed=2)
    batch = _batch(rng, 16, 4, 40, p_legal=1.0)
    batch["action"][:] = 7
    batch["reward"][:] = 0.0
    before = agent.policy_probs(batch["obs"][0], batch["legal_mask"][0])[7]
    for _ in range(60):
        result = agent.update(UpdateBatch(**batch, imitation=np.full(16, 5.0, np.float32)))
    after = agent.policy_probs(batch["obs"][0], batch["legal_mask"][0])[7]
    assert after > 0.5 > before and "imitation_loss" in result.metrics
    with pytest.raises(ValueError, match="imitation has a negative entry"):
        agent.update(UpdateBatch(**batch, imitation=np.full(16, -1.0, np.float32)))
