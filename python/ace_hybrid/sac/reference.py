"""The dense reference update: the readable specification the fast update is tested against (see docs/sac.md).

:meth:`DiscreteSAC.update` streams every (B, n) quantity over blocks of actions with an online softmax, in base 2,
with packed masks and hand-written backward passes. This module computes the same step the textbook way: for a few
states at a time it forms the full (rows, n) logits and Q values and applies :func:`policy_loss`, whose few lines
are the whole of discrete SAC's policy term over a masked action set. ``tests/test_sac.py`` checks the fast update
against it (TD errors and losses, exact and with the imitation term) and :func:`policy_loss` against autograd;
``benchmarks/bench_sac.py`` times the fast update against it.

Only the two parts of an update that pass over every action are written here: the soft target and the actor's loss
and gradient. The critic step, the temperature step and the Polyak update touch the B chosen actions only, and are
the agent's own (:meth:`DiscreteSAC._apply_update` runs the same sequence for both updates). The policy gradient is
the exact one (``SACConfig.policy_samples`` is not read: the sampled one is an estimate of it, tested for bias apart).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ace_hybrid.sac.batch import UpdateBatch
from ace_hybrid.sac.stream import MASKED

if TYPE_CHECKING:
    from ace_hybrid.sac.agent import DiscreteSAC, UpdateResult

__all__ = ["anchor_terms", "imitation_terms", "policy_loss", "reference_update", "soft_policy"]

_BLOCK_FLOATS = 1 << 20
"""Elements of one (rows, n) block: 4 MB of float32 (15 states at 67,105 actions)."""


def soft_policy(logits: torch.Tensor, legal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The policy over each row's legal actions: log pi and pi, (rows, n), both exactly 0 at illegal actions (and on
    a row without a legal action), and the entropy -sum_a pi(a) log pi(a), (rows,).

    ``logits`` (rows, n) may have any float dtype (the tests use float64); ``legal`` is (rows, n) bool. Illegal logits
    are set to ``finfo(float32).min`` before the softmax, never to -inf (0 * -inf is NaN).
    """
    keep = legal.to(logits.dtype)
    log_pi = torch.log_softmax(logits.masked_fill(~legal, MASKED), dim=1) * keep
    pi = log_pi.exp() * keep
    return log_pi, pi, -(pi * log_pi).sum(1)


def policy_loss(logits: torch.Tensor, q: torch.Tensor, legal: torch.Tensor,
                alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SAC's policy loss per row, its entropy, and the loss's gradient with respect to the logits.

    loss(s) = sum_a pi(a) [alpha log pi(a) - q(a)] = -alpha H(s) - E_pi[q], and, with t = alpha log pi - q,
    d loss(s) / d z(a) = pi(a) [t(a) - loss(s)] (the term sum_a pi(a) d log pi(a) / d z = 0 drops out). Illegal
    actions get gradient 0; a row without a legal action has loss, entropy and gradient 0. The negated loss is the
    soft value of the state, sum_a pi(a) [q(a) - alpha log pi(a)].
    """
    log_pi, pi, entropy = soft_policy(logits, legal)
    t = alpha * log_pi - q
    loss = (pi * t).sum(1)
    return loss, entropy, pi * (t - loss[:, None])


def imitation_terms(logits: torch.Tensor, legal: torch.Tensor, action: torch.Tensor,
                    weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The behaviour-cloning term ``weight * (-log pi(action))`` per row and its gradient with respect to the
    logits, ``weight * (pi - onehot(action))``."""
    log_pi, pi, _ = soft_policy(logits, legal)
    chosen = torch.nn.functional.one_hot(action, logits.shape[1]).to(logits.dtype)
    return -weight * (log_pi * chosen).sum(1), weight[:, None] * (pi - chosen)


def anchor_terms(logits: torch.Tensor, legal: torch.Tensor, anchor_logits: torch.Tensor,
                 weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(pi_anchor || pi) per row over the legal actions and ``weight`` times its gradient with respect to the
    logits, ``weight * (pi - pi_anchor)``."""
    log_pi, pi, _ = soft_policy(logits, legal)
    log_p0, p0, _ = soft_policy(anchor_logits, legal)
    return torch.where(legal, p0 * (log_p0 - log_pi), 0.0).sum(1), weight * (pi - p0)


def reference_update(agent: DiscreteSAC, batch: UpdateBatch) -> UpdateResult:
    """One update of ``agent`` on ``batch``, computed densely: the step :meth:`DiscreteSAC.update` takes with the
    exact policy gradient, to float32 rounding (the summation order differs)."""
    b = agent._tensors(batch)
    legal = torch.from_numpy(batch.legal_mask).to(agent.device)
    next_legal = torch.from_numpy(batch.next_legal_mask).to(agent.device)
    return agent._apply_update(b, lambda alpha: _soft_target(agent, b, next_legal, alpha),
                               lambda alpha: _actor_step(agent, b, legal, alpha))


def _row_blocks(rows: int, n: int) -> list[slice]:
    step = max(1, min(rows, _BLOCK_FLOATS // max(n, 1)))
    return [slice(lo, lo + step) for lo in range(0, rows, step)]


def _scores(h: torch.Tensor, factors: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """(rows, n) scores h @ E.T + bias of one network, from its state factor and its action factors."""
    emb, bias = factors
    return torch.addmm(bias, h, emb.t())


def _soft_target(agent: DiscreteSAC, b: dict[str, torch.Tensor], next_legal: torch.Tensor,
                 alpha: float) -> torch.Tensor:
    """y = r + gamma**k (1 - done) V(s'), with V(s') = sum_a' pi(a'|s') [min_j Q'_j(s', a') - alpha log pi(a'|s')]
    over the legal actions of s' (0 where there is none), under the policy and the target critics."""
    obs = b["next_obs"]
    with torch.no_grad():
        nets = (agent.actor, agent.q1_target, agent.q2_target)
        h = [net.state_factor(obs) for net in nets]
        factors = [net.action_factors() for net in nets]
        value = torch.empty_like(b["reward"])
        for rows in _row_blocks(obs.shape[0], agent.n_actions):
            q = torch.minimum(_scores(h[1][rows], factors[1]), _scores(h[2][rows], factors[2]))
            loss, _, _ = policy_loss(_scores(h[0][rows], factors[0]), q, next_legal[rows], alpha)
            value[rows] = -loss
        discount = torch.pow(torch.tensor(agent.cfg.gamma, dtype=value.dtype, device=value.device), b["steps"])
        return b["reward"] + discount * (~b["done"]).to(value.dtype) * value


def _actor_step(agent: DiscreteSAC, b: dict[str, torch.Tensor], legal: torch.Tensor,
                alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The actor's loss mean_s loss(s) (the just-updated critics' Q, no gradient), plus the imitation and anchor
    terms; its gradient with respect to the (B, n) logits by blocks of states, back-propagated through h and the
    action factors by autograd; clip, step. Returns (loss without those two terms, per-state entropy, gradient
    norm)."""
    obs, bsz = b["obs"], b["obs"].shape[0]
    h = agent.actor.state_factor(obs)
    emb, bias = agent.actor.action_factors()
    loss, entropy = torch.empty_like(b["reward"]), torch.empty_like(b["reward"])
    grad = torch.empty(bsz, agent.n_actions, dtype=h.dtype, device=h.device)
    imitated = bool((b["imitation"] > 0).any())
    imitation_loss = torch.zeros((), dtype=h.dtype, device=h.device)
    anchored = agent._anchored
    anchor_kl = torch.zeros((), dtype=h.dtype, device=h.device)
    with torch.no_grad():
        critics = [(net.state_factor(obs), net.action_factors()) for net in (agent.q1, agent.q2)]
        anchor = (agent.anchor.state_factor(obs), agent.anchor.action_factors()) if anchored else None
        for rows in _row_blocks(bsz, agent.n_actions):
            logits = _scores(h[rows], (emb, bias))
            q = torch.minimum(*(_scores(hq[rows], f) for hq, f in critics))
            loss[rows], entropy[rows], grad[rows] = policy_loss(logits, q, legal[rows], alpha)
            if imitated:
                terms, g = imitation_terms(logits, legal[rows], b["action"][rows], b["imitation"][rows])
                imitation_loss += terms.sum()
                grad[rows] += g
            if anchor is not None:
                start = _scores(anchor[0][rows], anchor[1])
                kl, g = anchor_terms(logits, legal[rows], start, agent.cfg.anchor_weight)
                anchor_kl += kl.sum()
                grad[rows] += g
        grad /= bsz
    agent._imitation_loss = float(imitation_loss) / bsz if imitated else None
    agent._anchor_kl = float(anchor_kl) / bsz if anchored else None
    agent.actor_opt.zero_grad(set_to_none=True)
    torch.autograd.backward([h, emb, bias], [grad @ emb.detach(), grad.t() @ h.detach(), grad.sum(0)])
    norm = torch.nn.utils.clip_grad_norm_(agent.actor.parameters(), agent.cfg.grad_clip)
    agent.actor_opt.step()
    return loss.mean(), entropy, norm
