"""DiscreteSAC: the update and checkpoints, on top of the acting policy of :mod:`ace_hybrid.sac.policy` (see
docs/sac.md)."""

from __future__ import annotations

import copy
import math
from dataclasses import asdict
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch.nn import functional as F

from ace_hybrid.config import ADDED, SACConfig
from ace_hybrid.sac.batch import UpdateBatch, check_dims, to_tensors
from ace_hybrid.sac.networks import ScoreNet
from ace_hybrid.sac.policy import SACPolicy
from ace_hybrid.sac.stream import (
    DTYPE,
    MASKED,
    Factors,
    Workspace,
    count_legal,
    policy_entropy,
    pack_mask,
    policy_gradient,
    sample_actions,
    sampled_logit_grad,
    soft_stream,
)

__all__ = ["DiscreteSAC", "UpdateResult", "average_decay"]

_STATE_FORMAT = 1
_POLICY_STREAM = 0x5AC_D12A  # the policy-sample generator's seed is seed ^ this (independent of exploration)


class UpdateResult(NamedTuple):
    """What :meth:`DiscreteSAC.update` returns."""

    td_error: npt.NDArray[np.float32]
    """(B,) float32: |min(Q1, Q2)(s, a) - y| before the update, for the replay priorities."""
    metrics: dict[str, float]
    """Scalars of the update: critic_loss, actor_loss, alpha_loss, alpha, entropy, target_entropy, q_mean,
    target_mean, td_abs_mean, grad_norm_critic, grad_norm_actor (norms before clipping)."""



class DiscreteSAC(SACPolicy):
    """Discrete Soft Actor-Critic over ``n_actions`` masked actions (see docs/sac.md): the policy of
    :class:`~ace_hybrid.sac.policy.SACPolicy` (acting, the policy state a rollout worker receives) with twin critics,
    their targets, the temperature, the optimisers and the update.

    Its parameters, their seeding and its errors are :class:`~ace_hybrid.sac.policy.SACPolicy`'s; the critics are
    initialised from the same seeded stream, after the actor.
    """

    def __init__(self, obs_dim: int, n_actions: int, cfg: SACConfig, *,
                 action_features: np.ndarray | None = None, seed: int = 0) -> None:
        super().__init__(obs_dim, n_actions, cfg, action_features=action_features, seed=seed)
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._init_rng)  # the critics' draws follow the actor's, as one seeded stream
            self.q1, self.q2, self.q1_target, self.q2_target = (
                ScoreNet(self.obs_dim, self.n_actions, cfg, self._features, layer_norm=cfg.critic_layer_norm)
                for _ in range(4))
        for net in (self.q1, self.q2, self.q1_target, self.q2_target):
            net.to(self.device)
        for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha), dtype=DTYPE, device=self.device))
        self._critic_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr_actor)
        self.critic_opt = torch.optim.Adam(self._critic_params, lr=cfg.lr_critic)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.lr_alpha)
        self._policy_generator = torch.Generator().manual_seed(self.seed ^ _POLICY_STREAM)
        self._n_updates = 0
        self._imitation_loss: float | None = None
        self.anchor: ScoreNet | None = None
        self._anchor_kl: float | None = None
        self._workspace: Workspace | None = None
        self.actor_average: ScoreNet | None = self._frozen_copy_of_actor() if cfg.policy_average > 0 else None
        """The Polyak average of the actor that :meth:`deployed` acts with (``sac.policy_average`` > 0), else None."""

    # ---------------------------------------------------------------------------------- properties

    @property
    def n_updates(self) -> int:
        """Number of completed :meth:`update` calls (restored by :meth:`load_state_dict`)."""
        return self._n_updates

    @property
    def alpha(self) -> float:
        """The current temperature exp(log_alpha)."""
        return float(self.log_alpha.detach().exp())

    def q_values(self, obs: np.ndarray, mask: np.ndarray) -> npt.NDArray[np.float32]:
        """(n,) float32: min(Q1, Q2)(obs, a) for every action, -inf where ``mask`` is False."""
        o, m = self._one_state(obs, mask)
        q = torch.minimum(self._scores("q1", o), self._scores("q2", o))[0].cpu().numpy()
        return np.where(m, q, np.float32(-np.inf)).astype(np.float32, copy=False)

    @property
    def _anchored(self) -> bool:
        """Whether updates add the anchor's term: an anchor is set and ``sac.anchor_weight`` > 0."""
        return self.anchor is not None and self.cfg.anchor_weight > 0

    def set_anchor(self) -> None:
        """Hold the actor as it is now (the junior a run starts from) as the anchor of ``sac.anchor_weight``: a
        frozen copy, saved with the agent's state."""
        self.anchor = self._frozen_copy_of_actor()
        self._factor_cache.pop("anchor", None)

    def _frozen_copy_of_actor(self) -> ScoreNet:
        """A copy of the actor as it is now, without gradient, on the agent's device."""
        # A new network, not a deepcopy (torch cannot copy the sparse feature matrix); its initial draws must not
        # advance the caller's random stream.
        with torch.random.fork_rng(devices=[]):
            copy_ = ScoreNet(self.obs_dim, self.n_actions, self.cfg, self._features)
        copy_.load_state_dict(self.actor.state_dict())
        return copy_.to(self.device).requires_grad_(False)

    def load_policy_state(self, state: dict[str, np.ndarray]) -> None:
        """:meth:`SACPolicy.load_policy_state`; the actor's average (``sac.policy_average``) restarts from it, as a
        run started from a junior averages from the junior."""
        super().load_policy_state(state)
        if self.actor_average is not None:
            self.actor_average.load_state_dict(self.actor.state_dict())

    def deployed(self) -> SACPolicy:
        """The policy evaluations, kept checkpoints and deployment act with: this agent itself, or with
        ``sac.policy_average`` > 0 a policy of the same shape holding the actor's Polyak average (a copy: later
        updates do not move it)."""
        if self.actor_average is None:
            return self
        policy = SACPolicy(self.obs_dim, self.n_actions, self.cfg, action_features=self._action_features,
                           seed=self.seed)
        policy.load_policy_state({k: v.detach().cpu().numpy() for k, v in self.actor_average.state_dict().items()})
        return policy

    # ---------------------------------------------------------------------------------- learning

    def update(self, batch: UpdateBatch) -> UpdateResult:
        """One gradient step of the critics, the actor and the temperature, then the Polyak target update.

        Parameters
        ----------
        batch : UpdateBatch
            B transitions (observations normalised by the caller, the legal masks of both states, the IS weights,
            optional ``steps`` and ``imitation``), checked when it was built; here its D and n must match this
            agent's.

        Returns
        -------
        UpdateResult
            ``td_error`` (B,) float32 = |min_j Q_j(s, a) - y| before the step, and the update's metrics.

        Raises
        ------
        ValueError
            ``batch.obs`` or ``batch.legal_mask`` does not fit this agent (naming the field and both shapes).
        TypeError
            ``batch`` is not an :class:`UpdateBatch`.
        """
        b = self._tensors(batch)
        ws = self._workspace_for(batch.size)
        # The actor's action factors are cached since acting (or made in the target's pass): both passes use
        # them, and the actor step back-propagates into the encoder from the hidden layer they hold.
        step = self._actor_step_sampled if self.cfg.policy_samples else self._actor_step
        result = self._apply_update(b, lambda alpha: self._soft_target(b, alpha, ws),
                                    lambda alpha: step(b, alpha, ws))
        # The stepped actor's encoder pass now rather than at the next decision: the next update or act needs it
        # either way (same number of passes), and acting between updates stays a forward pass of the state half.
        self._factors("actor")
        return result

    def _apply_update(self, b: dict[str, torch.Tensor], soft_target: Callable[[float], torch.Tensor],
                      actor_step: Callable[[float], tuple[torch.Tensor, ...]]) -> UpdateResult:
        """The update's sequence, given the two parts that pass over every action (``soft_target(alpha)``: y;
        ``actor_step(alpha)``: the actor's loss, per-state entropy and gradient norm, its step taken): the critic
        step, the actor step, the temperature step, the Polyak update and the metrics. The dense reference update
        (:func:`ace_hybrid.sac.reference.reference_update`) runs the same sequence with its own two parts."""
        alpha = float(self.log_alpha.detach().exp())
        y = soft_target(alpha)
        critic_loss, q_a, gn_critic = self._critic_step(b, y)
        actor_loss, entropy, gn_actor = actor_step(alpha)
        target_entropy = self.cfg.target_entropy_ratio * b["n_legal"].to(DTYPE).log()
        alpha_loss = self._alpha_step(entropy, target_entropy)
        with torch.no_grad():
            for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
                torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), 1.0 - self.cfg.polyak)
            if self.actor_average is not None:
                torch._foreach_lerp_(list(self.actor_average.parameters()), list(self.actor.parameters()),
                                     1.0 - average_decay(self.cfg.policy_average, self._n_updates))
        self._n_updates += 1

        td = (q_a - y).abs()
        metrics = {
            "critic_loss": float(critic_loss), "actor_loss": float(actor_loss), "alpha_loss": float(alpha_loss),
            "alpha": alpha, "entropy": float(entropy.mean()), "target_entropy": float(target_entropy.mean()),
            "q_mean": float(q_a.mean()), "target_mean": float(y.mean()), "td_abs_mean": float(td.mean()),
            "grad_norm_critic": float(gn_critic), "grad_norm_actor": float(gn_actor),
        }
        if self._imitation_loss is not None:
            metrics["imitation_loss"] = self._imitation_loss
        if self._anchor_kl is not None:
            metrics["anchor_kl"] = self._anchor_kl
        return UpdateResult(td.cpu().numpy().astype(np.float32, copy=False), metrics)

    def _tensors(self, batch: UpdateBatch) -> dict[str, torch.Tensor]:
        """The batch as tensors on this agent's device (:func:`~ace_hybrid.sac.batch.to_tensors`), plus the masks
        packed by :func:`~ace_hybrid.sac.stream.pack_mask` (``legal_packed``, ``next_packed``), the legal actions
        per row (``n_legal``) and the imitation rows (``imit_rows``, their weights ``imit_w`` and masks
        ``imit_mask``)."""
        check_dims(batch, self.obs_dim, self.n_actions)
        b = to_tensors(batch, self.device)
        packed = pack_mask(batch.legal_mask)
        weights = np.zeros(batch.size, np.float32) if batch.imitation is None else batch.imitation
        rows = np.flatnonzero(weights > 0)
        extra = {"legal_packed": packed, "next_packed": pack_mask(batch.next_legal_mask),
                 "n_legal": count_legal(packed, batch.legal_mask), "imit_rows": rows.astype(np.int64),
                 "imit_w": weights[rows], "imit_mask": batch.legal_mask[rows]}
        if self._anchored:  # the dense (B, n) mask only where the anchor's term needs it (a copy per update on a GPU)
            extra["legal_mask"] = batch.legal_mask
        return {**b, **{name: torch.from_numpy(x).to(self.device) for name, x in extra.items()}}

    def _apply_actor_gradient(self, h: torch.Tensor, d_h: torch.Tensor, emb: torch.Tensor, d_emb: torch.Tensor,
                              d_bias: torch.Tensor) -> torch.Tensor:
        """Back-propagate the hand-made gradients of the actor's factors (the state half ``h`` by autograd, E and
        the bias by :meth:`ScoreNet.backward_action_factors`), clip, step; returns the gradient norm."""
        self.actor_opt.zero_grad(set_to_none=True)
        h.backward(F.pad(d_h, (0, h.shape[1] - d_h.shape[1])))  # the stream's h may have extra columns
        self.actor.backward_action_factors(d_emb, d_bias, emb)
        norm = torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.cfg.grad_clip)
        self.actor_opt.step()
        return norm

    def _add_imitation(self, pi: Factors, b: dict[str, torch.Tensor], d_h: torch.Tensor, d_emb: torch.Tensor,
                       d_bias: torch.Tensor) -> None:
        """Add the gradient of ``(1/B) sum_i w_i (-log pi(a_i | s_i))`` over the imitation rows to the actor's logit
        gradients, in place (dense over the few weighted rows only: m x n for m rows); keeps its value for the
        metrics."""
        rows = b["imit_rows"]
        if rows.numel() == 0:
            self._imitation_loss = None
            return
        h = pi.h.index_select(0, rows)
        z = (h @ pi.emb.T + pi.bias).masked_fill(~b["imit_mask"], MASKED)
        logp = torch.log_softmax(z, dim=1)
        a, w = b["action"].index_select(0, rows), b["imit_w"] / b["obs"].shape[0]
        self._imitation_loss = float(-(w * logp.gather(1, a[:, None])[:, 0]).sum())
        g = logp.exp() * w[:, None]  # d/dz of w (log Z - z_a) = w (pi - onehot(a))
        g[torch.arange(rows.numel(), device=g.device), a] -= w
        d_h.index_add_(0, rows, g @ pi.emb)
        d_emb.add_(g.T @ h)
        d_bias.add_(g.sum(0))

    def _add_anchor(self, pi: Factors, b: dict[str, torch.Tensor], d_h: torch.Tensor, d_emb: torch.Tensor,
                    d_bias: torch.Tensor) -> None:
        """Add the gradient of ``anchor_weight * mean_s KL(pi_anchor(.|s) || pi(.|s))`` to the actor's logit
        gradients, in place: ``weight / B * (pi - pi_anchor)`` per state, dense over the legal actions (B x n);
        keeps the mean KL for the metrics. Nothing without an anchor or at weight 0."""
        if not self._anchored:
            self._anchor_kl = None
            return
        weight = self.cfg.anchor_weight
        obs, illegal = b["obs"], ~b["legal_mask"]
        logp = torch.log_softmax((pi.h @ pi.emb.T + pi.bias).masked_fill(illegal, MASKED), dim=1)
        logp0 = torch.log_softmax(self._scores("anchor", obs).masked_fill(illegal, MASKED), dim=1)
        p0 = logp0.exp()
        self._anchor_kl = float(torch.where(illegal, 0.0, p0 * (logp0 - logp)).sum(1).mean())
        g = (logp.exp() - p0) * (weight / obs.shape[0])
        d_h.add_(g @ pi.emb)
        d_emb.add_(g.T @ pi.h)
        d_bias.add_(g.sum(0))

    def _workspace_for(self, bsz: int) -> Workspace:
        if self._workspace is None or self._workspace.bsz != bsz:
            self._workspace = Workspace(self.n_actions, bsz, self.device)
        return self._workspace

    def _soft_target(self, b: dict[str, torch.Tensor], alpha: float, ws: Workspace) -> torch.Tensor:
        """(B,) y = r + gamma**k (1 - done) V(s'), V(s') the soft value under pi and the target critics."""
        nxt = b["next_obs"]
        with torch.no_grad():
            pi = self._stream_factors("actor", nxt)
            st = soft_stream(pi, self._stream_factors("q1_target", nxt),
                             self._stream_factors("q2_target", nxt), b["next_packed"], alpha, ws, "value")
            v_next = torch.where(st.any_legal, st.mean_w + alpha * st.log_z, 0.0)
            discount = torch.pow(torch.tensor(self.cfg.gamma, dtype=DTYPE, device=self.device), b["steps"])
            return b["reward"] + discount * (~b["done"]).to(DTYPE) * v_next

    def _critic_step(self, b: dict[str, torch.Tensor],
                     y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """IS-weighted squared TD errors on the chosen actions; returns (loss, min_j Q_j(s, a), grad norm)."""
        q1_a = self.q1.at(b["obs"], b["action"])
        q2_a = self.q2.at(b["obs"], b["action"])
        w = b["weight"]
        loss = 0.5 * ((w * (q1_a - y).square()).mean() + (w * (q2_a - y).square()).mean())
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self._critic_params, self.cfg.grad_clip)
        self.critic_opt.step()
        return loss.detach(), torch.minimum(q1_a, q2_a).detach(), norm

    def _actor_factors(self, obs: torch.Tensor) -> tuple[torch.Tensor, Factors, Factors]:
        """The actor's scores at ``obs`` as (h with autograd, the stream's factors, the gradient's factors).

        With the feature encoder the stream's carry the action bias as a column (E = [hidden, 1, b] against
        h = [h W2, 0, 1], :meth:`ScoreNet.stream_factor`) and the gradient's are (h W2, hidden, b), the parts with
        parameters behind them; other heads: both the same."""
        f = self._stream_factors("actor", obs, grad=True)
        pi = Factors(f.h.detach(), f.emb, f.bias)
        if not self.actor.encodes_features:
            return f.h, pi, pi
        k = self.cfg.embed_dim
        return f.h, pi, Factors(pi.h[:, :k], pi.emb[:, :k], self.actor.bias.detach())

    def _actor_step(self, b: dict[str, torch.Tensor], alpha: float,
                    ws: Workspace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """loss = mean_s sum_a pi(a|s) [alpha log pi(a|s) - min_j Q_j(s, a)] over legal a, with Q from the
        just-updated critics (no gradient); returns (loss, per-state entropy, grad norm). The gradient with
        respect to the (B, n) logits is formed block by block from the stored pass and multiplied into h and E
        by hand (:func:`policy_gradient`), then autograd takes it through the trunk and the encoder."""
        obs = b["obs"]
        h, pi_stream, pi = self._actor_factors(obs)
        with torch.no_grad():
            st = soft_stream(pi_stream, self._stream_factors("q1", obs), self._stream_factors("q2", obs),
                             b["legal_packed"], alpha, ws, "grad")
            loss = (-st.mean_w - alpha * st.log_z).mean()
            entropy = policy_entropy(st, b["n_legal"])
            d_h, d_emb, d_bias = policy_gradient(pi, st, ws, 1.0 / obs.shape[0],
                                                 self._buffer("actor.d_emb", *pi.emb.shape))
            self._add_imitation(pi, b, d_h, d_emb, d_bias)
            self._add_anchor(pi, b, d_h, d_emb, d_bias)
        return loss, entropy, self._apply_actor_gradient(h, d_h, pi.emb, d_emb, d_bias)

    def _actor_step_sampled(self, b: dict[str, torch.Tensor], alpha: float,
                            ws: Workspace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`_actor_step` with the gradient estimated from ``policy_samples`` draws per state.

        One stream over the actor's logits gives log Z, the exact entropy and per-block cumulative sums; K
        actions per state are drawn from pi (:func:`sample_actions`); Q1, Q2 and the logits are evaluated at
        those actions only; the gradient with respect to the logits is the unbiased, sparse estimate of
        :func:`sampled_logit_grad`, scattered into h, E and the bias. The returned loss is
        -alpha H(s) - mean_j min_j Q_j(s, a_j), averaged over states (its entropy part exact, its Q part an
        unbiased estimate)."""
        obs = b["obs"]
        bsz = obs.shape[0]
        h, pi_stream, pi = self._actor_factors(obs)
        with torch.no_grad():
            st = soft_stream(pi_stream, None, None, b["legal_packed"], alpha, ws, "sample")
            actions = sample_actions(st, ws, self.cfg.policy_samples, self._policy_generator)
            flat = actions.reshape(-1)
            emb_a = pi.emb.index_select(0, flat).view(*actions.shape, -1)  # (B, K, k)
            z_a = torch.linalg.vecdot(emb_a, pi.h[:, None, :]) + pi.bias.index_select(0, flat).view(actions.shape)
            q_a = torch.minimum(self.q1.at_many(self.q1.state_factor(obs), actions),
                                self.q2.at_many(self.q2.state_factor(obs), actions))
            coef = sampled_logit_grad(alpha * (z_a - st.log_z[:, None]) - q_a, 1.0 / bsz)
            entropy = policy_entropy(st, b["n_legal"])
            loss = (-alpha * entropy - q_a.mean(1)).mean()
            d_h = torch.bmm(coef[:, None, :], emb_a)[:, 0]
            d_emb = pi.emb.new_zeros(pi.emb.shape).index_add_(
                0, flat, (coef[:, :, None] * pi.h[:, None, :]).flatten(0, 1))
            d_bias = torch.zeros_like(pi.bias).index_add_(0, flat, coef.reshape(-1))
            self._add_imitation(pi, b, d_h, d_emb, d_bias)
            self._add_anchor(pi, b, d_h, d_emb, d_bias)
        return loss, entropy, self._apply_actor_gradient(h, d_h, pi.emb, d_emb, d_bias)

    def _alpha_step(self, entropy: torch.Tensor, target_entropy: torch.Tensor) -> torch.Tensor:
        """d loss / d log_alpha = H(s) - target(s): alpha falls while the entropy is above its target and
        rises while it is below."""
        loss = (self.log_alpha * (entropy - target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([self.log_alpha], self.cfg.grad_clip)
        self.alpha_opt.step()
        if math.isfinite(self.cfg.max_alpha):
            with torch.no_grad():
                self.log_alpha.clamp_(max=math.log(self.cfg.max_alpha))
        return loss.detach()

    # ---------------------------------------------------------------------------------- checkpoints

    def _modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "q1": self.q1, "q2": self.q2, "q1_target": self.q1_target,
                "q2_target": self.q2_target}

    def _optimisers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}

    def state_dict(self) -> dict[str, Any]:
        """A snapshot (deep copy, unaffected by later updates) of everything that determines future updates:
        networks, targets, optimisers, log_alpha, the exploration generator's state and the update counter.
        Every tensor is on the CPU, whatever the agent's device, so ``torch.save`` writes a file any machine
        can load."""
        state: dict[str, Any] = {
            "format": _STATE_FORMAT,
            "obs_dim": self.obs_dim,
            "n_actions": self.n_actions,
            "config": asdict(self.cfg),
            "log_alpha": self.log_alpha.detach(),
            "generator": tuple(self._generator.get_state()),
            "policy_generator": self._policy_generator.get_state(),
            "n_updates": self._n_updates,
            "anchor": None if self.anchor is None else self.anchor.state_dict(),
            "actor_average": None if self.actor_average is None else self.actor_average.state_dict(),
        }
        for name, mod in self._modules().items():
            state[name] = mod.state_dict()
        for name, opt in self._optimisers().items():
            state[name] = opt.state_dict()
        return copy.deepcopy(_to_cpu(state))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict` of an agent with the same obs_dim, n_actions and network shape.

        Tensors may be on any device; they are copied to this agent's (a checkpoint written on a GPU loads on
        a CPU and back). ``config['device']`` of the state is not compared.

        Raises
        ------
        ValueError
            A missing key, another format, or a different obs_dim / n_actions / network configuration.
        """
        keys = ["format", "obs_dim", "n_actions", "config", "log_alpha", "generator", "n_updates",
                *self._modules(), *self._optimisers()]
        missing = [k for k in keys if k not in state]
        if missing:
            raise ValueError(f"state is missing keys {missing}")
        if state["format"] != _STATE_FORMAT:
            raise ValueError(f"state['format'] = {state['format']!r}: expected {_STATE_FORMAT}")
        for name in ("obs_dim", "n_actions"):
            if state[name] != getattr(self, name):
                raise ValueError(f"state['{name}'] = {state[name]} but this agent has {getattr(self, name)}")
        cfg = state["config"]
        for name in ("hidden", "head", "embed_dim", "critic_layer_norm"):
            # A key added after a state was saved reads as its default (ADDED) there.
            mine, theirs = getattr(self.cfg, name), cfg.get(name, ADDED.get(f"sac.{name}"))
            if (tuple(theirs) if name == "hidden" and theirs is not None else theirs) != (
                    tuple(mine) if name == "hidden" else mine):
                raise ValueError(f"state['config']['{name}'] = {theirs!r} but this agent has {mine!r}")
        state = copy.deepcopy(_to_cpu(state))
        for name, mod in self._modules().items():
            mod.load_state_dict(state[name])  # copies into the parameters, on their device
        for name, opt in self._optimisers().items():
            opt.load_state_dict(state[name])  # torch moves the moments to each parameter's device
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"], dtype=DTYPE))
        self._generator.set_state(tuple(state["generator"]))
        if "policy_generator" in state:  # absent from states written before SACConfig.policy_samples
            self._policy_generator.set_state(state["policy_generator"])
        else:
            self._policy_generator.manual_seed(self.seed ^ _POLICY_STREAM)
        self._n_updates = int(state["n_updates"])
        if state.get("anchor") is not None:  # absent from states written before SACConfig.anchor_weight
            self.set_anchor()
            self.anchor.load_state_dict(state["anchor"])
        if self.actor_average is not None:  # a state written without the average restarts it from the actor
            average = state.get("actor_average")
            self.actor_average.load_state_dict(self.actor.state_dict() if average is None else average)
        self._factor_cache.clear()



def average_decay(policy_average: float, n_updates: int) -> float:
    """The decay of the actor's average at update ``n_updates`` (0 for the first): ``sac.policy_average``, but no
    more than (1 + n) / (10 + n), so that early on the average follows the actor instead of holding its random
    start (the warm-up of TensorFlow's ExponentialMovingAverage): at 0.99 it lags by ~10% of the updates until
    ~900 updates, then by ~100."""
    return min(policy_average, (1.0 + n_updates) / (10.0 + n_updates))


def _to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor inside (dicts, lists, tuples) detached and on the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return type(obj)((k, _to_cpu(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj
