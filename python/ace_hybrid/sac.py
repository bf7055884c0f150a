"""Discrete Soft Actor-Critic over a large, masked action catalog (tens of thousands of actions, CPU).

The algorithm is discrete SAC (Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings",
arXiv 1910.07207): twin Q networks with Polyak-averaged targets, a categorical policy over the whole action
catalog, and an automatically tuned temperature alpha. Expectations over actions are computed exactly (no
sampled actions in the losses), which is what makes the method fit a discrete action set.

Masking
-------
Illegal actions get the logit ``torch.finfo(float32).min`` (never ``-inf``: ``0 * -inf`` is NaN), so their
probability is exactly 0. Every expectation, the entropy and the soft value ignore them: before a product with
the probabilities the masked log-probabilities and Q values are replaced by 0, so no huge or infinite value
reaches a sum or a gradient. The entropy of a state is taken over its legal actions, and so is its target:

    target_entropy(s) = target_entropy_ratio * log(number of legal actions in s)

per state (Christodoulou uses 0.98 * log|A| with a fixed |A| <= 18). Over 67,105 actions 0.98 * log|A| is
10.9 nats, an almost uniform policy over ~53,000 actions, which would keep alpha growing until the agent acts
at random; ratios well below 1 are the usual fix for large or masked discrete spaces (Xu et al. 2021,
"Target Entropy Annealing for Discrete Soft Actor-Critic"; Zhou et al. 2022, "Revisiting Discrete Soft
Actor-Critic"). The default 0.5 asks for exp(0.5 log n) = sqrt(n) effective actions (~260 of 67,105, 7 of 50).
A state with a single legal action has target 0 and entropy 0, so it leaves alpha unchanged.

Semi-MDP transitions
--------------------
The agent decides only at some steps (when the grid is in danger); one transition spans the ``k >= 1``
environment steps until the next decision and ``reward`` is what the caller accumulated over them (for an
exact semi-MDP return, ``sum_i gamma**i r_{t+i}``). The soft target then discounts by ``gamma ** k``:

    y = r + gamma**k * (1 - done) * sum_a' pi(a'|s') [min_j Q'_j(s', a') - alpha log pi(a'|s')]

with the sum over the legal actions of ``s'`` (``next_mask``). ``steps=None`` means k = 1 for every row.
``done`` means terminal (no bootstrap); a truncated episode is not done.

Importance-sampling weights
---------------------------
The replay batch's IS weights (Schaul et al. 2016; the mixed buffer's Eq. 8 weights) multiply the per-sample
critic losses, whose fixed point they are meant to correct. They are *not* applied to the policy or the
temperature loss: those depend on the state only (not on the sampled action), and reweighting states does not
move the per-state optimum pi(.|s) ~ exp(Q(s, .) / alpha); with weights normalised by their maximum (<= 1) it
would only shrink the actor's step on exactly the states the buffer finds informative.

Network heads (``SACConfig.head``)
----------------------------------
Each of the actor, Q1 and Q2 is an MLP trunk ``obs -> hidden`` followed by a head over the n actions:

* ``"linear"``: ``hidden[-1] -> n`` (a (n, hidden) weight matrix per network, ~17M parameters at n = 67,105).
* ``"lowrank"`` (default): ``logits(s, a) = h(s) . e(a) + b(a)`` with ``h(s) = Linear(hidden[-1], embed_dim)``
  and a per-action bias ``b``. ``e(a)`` comes from the catalog's sparse int8 action features ``phi(a)``:
  ``e(a) = W2 relu(sum_f phi_f(a) W1[f] + c1) + c2`` (an ``EmbeddingBag`` over the few non-zeros of each row,
  then one hidden layer, so features interact); each network has its own encoder. Without features, ``e`` is
  a free (n, embed_dim) table. The encoder is state-independent, so it runs once per update for all actions,
  and the critic's regression needs only the B chosen actions' embeddings.
  ``benchmarks/bench_sac.py`` measures both heads at batch 256 over 67,105 actions, one torch thread: one
  update took ~0.75 s (quiet machine) / 1.2 s (loaded) with "lowrank", 2.3 s / 3.5 s with "linear" (2.8x
  interleaved), which also has 52M online parameters against 0.7M. "lowrank" is the default: faster, and it
  generalises across actions that share features.

Determinism
-----------
Parameters are initialised from ``seed`` under a forked torch RNG (the caller's global torch RNG is neither
read nor advanced); exploration draws come from an own :class:`ace_hybrid.SamplingGenerator`; the update
itself uses no randomness. Same seed, configuration, data and torch thread count give bit-identical updates
on the CPU. ``torch.set_num_threads`` is the caller's business.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import asdict
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch.nn import functional as F

from ace_hybrid.config import HEADS, SACConfig
from ace_hybrid.sampling import SamplingGenerator, masked_argmax, masked_sample

__all__ = ["DiscreteSAC", "SACConfig", "UpdateResult", "HEADS"]

_DTYPE = torch.float32
_MASKED = torch.finfo(_DTYPE).min
_STATE_FORMAT = 1


class UpdateResult(NamedTuple):
    """What :meth:`DiscreteSAC.update` returns."""

    td_error: npt.NDArray[np.float32]
    """(B,) float32: |min(Q1, Q2)(s, a) - y| before the update, for the replay priorities."""
    metrics: dict[str, float]
    """Scalars of the update: critic_loss, actor_loss, alpha_loss, alpha, entropy, target_entropy, q_mean,
    target_mean, td_abs_mean, grad_norm_critic, grad_norm_actor (norms before clipping)."""


# ------------------------------------------------------------------------------------------- networks


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class _Features:
    """The catalog's sparse action features in the two layouts the encoder needs (shared, never trained).

    ``idx``/``val`` (n, K): each action's non-zero feature indices and values, padded with (0, 0.0), for
    ``embedding_bag`` (fast forward, also for a subset of actions); ``phi_t`` (F, n) CSR: the transposed
    matrix, so the gradient w.r.t. the feature embeddings is one sparse-dense product (the dense backward of
    ``embedding_bag`` sorts all n * K indices, ~5x slower at n = 67,105).
    """

    def __init__(self, features: np.ndarray) -> None:
        nz_rows, nz_cols = np.nonzero(features)
        n = features.shape[0]
        counts = np.bincount(nz_rows, minlength=n)
        k = max(int(counts.max(initial=0)), 1)
        idx = np.zeros((n, k), np.int64)
        val = np.zeros((n, k), np.float32)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.arange(len(nz_rows)) - starts[nz_rows]
        idx[nz_rows, slot] = nz_cols
        val[nz_rows, slot] = features[nz_rows, nz_cols]
        self.idx, self.val = torch.from_numpy(idx), torch.from_numpy(val)
        order = np.lexsort((nz_rows, nz_cols))  # by feature, then action
        crow = np.concatenate([[0], np.cumsum(np.bincount(nz_cols, minlength=features.shape[1]))])
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            self.phi_t = torch.sparse_csr_tensor(
                torch.from_numpy(crow.astype(np.int64)), torch.from_numpy(nz_rows[order].astype(np.int64)),
                torch.from_numpy(features[nz_rows[order], nz_cols[order]].astype(np.float32)),
                size=(features.shape[1], n))


class _FeatureSum(torch.autograd.Function):
    """sum_f phi_f(a) W[f] for every action a: embedding_bag forward, transposed-CSR backward."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, feats: _Features) -> torch.Tensor:  # type: ignore[override]
        ctx.feats = feats
        return F.embedding_bag(feats.idx, weight, per_sample_weights=feats.val, mode="sum")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return torch.sparse.mm(ctx.feats.phi_t, grad.contiguous()), None


class _ActionEncoder(nn.Module):
    """e(a): (m, embed_dim) embeddings of the given actions (all actions when ``actions`` is None)."""

    def __init__(self, n_actions: int, embed_dim: int, feats: _Features | None) -> None:
        super().__init__()
        self.feats = feats
        if feats is None:
            self.table = nn.Parameter(torch.randn(n_actions, embed_dim) / math.sqrt(embed_dim))
            return
        self.feature_weight = nn.Parameter(torch.randn(feats.phi_t.shape[0], embed_dim) / math.sqrt(embed_dim))
        self.feature_bias = nn.Parameter(torch.zeros(embed_dim))
        self.out = nn.Linear(embed_dim, embed_dim)

    def forward(self, actions: torch.Tensor | None = None) -> torch.Tensor:
        if self.feats is None:
            return self.table if actions is None else self.table[actions]
        if actions is None:
            z = _FeatureSum.apply(self.feature_weight, self.feats)
        else:
            z = F.embedding_bag(self.feats.idx[actions], self.feature_weight,
                                per_sample_weights=self.feats.val[actions], mode="sum")
        return self.out(F.relu(z + self.feature_bias))


class _ScoreNet(nn.Module):
    """obs -> one score per action (policy logits or Q values), with a linear or a low-rank head.

    Both heads are ``scores = h @ E.T + bias`` for some (B, k) ``h`` and (n, k) ``E`` (:meth:`factors`), which
    lets the update form the (B, n) scores block by block and back-propagate through ``h`` and ``E`` by hand.
    """

    def __init__(self, obs_dim: int, n_actions: int, cfg: SACConfig, feats: _Features | None) -> None:
        super().__init__()
        self.trunk = _mlp([obs_dim, *cfg.hidden])
        width = cfg.hidden[-1]
        self.lowrank = cfg.head == "lowrank"
        if self.lowrank:
            self.proj = nn.Linear(width, cfg.embed_dim)
            self.encoder = _ActionEncoder(n_actions, cfg.embed_dim, feats)
            self.bias = nn.Parameter(torch.zeros(n_actions))
            last = self.proj
        else:
            self.linear = nn.Linear(width, n_actions)
            last = self.linear
        with torch.no_grad():  # small initial scores: a near-uniform policy and Q ~ 0
            last.weight.mul_(0.1)
            last.bias.zero_()

    def action_factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(E, bias): (n, k) and (n,), the state-independent half of the scores."""
        if self.lowrank:
            return self.encoder(), self.bias
        return self.linear.weight, self.linear.bias

    def state_factor(self, obs: torch.Tensor) -> torch.Tensor:
        """h: (B, k), the state half of the scores."""
        h = self.trunk(obs)
        return self.proj(h) if self.lowrank else h

    def at(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """(B,) scores of one action per row, without computing the other n - 1."""
        h = self.state_factor(obs)
        if not self.lowrank:
            return (h * self.linear.weight[actions]).sum(1) + self.linear.bias[actions]
        return (h * self.encoder(actions)).sum(1) + self.bias[actions]


# ------------------------------------------------------------------------------------------- agent


class DiscreteSAC:
    """Discrete Soft Actor-Critic over ``n_actions`` masked actions (see the module docstring).

    Parameters
    ----------
    obs_dim : int
        Length D of an observation vector (already normalised by the caller).
    n_actions : int
        Size n of the action catalog.
    cfg : SACConfig
        Hyper-parameters (validated here).
    action_features : numpy.ndarray, (n, F) integer or bool, optional
        Sparse action features (``ActionCatalog.features()``), used by the low-rank head; ignored by the
        linear head. None with the low-rank head: a free (n, embed_dim) embedding table.
    seed : int
        Seeds the parameter initialisation and the exploration generator, in [0, 2**63).

    Raises
    ------
    ValueError
        Invalid ``cfg``, dimensions, features or seed (the message names the argument).
    """

    def __init__(self, obs_dim: int, n_actions: int, cfg: SACConfig, *,
                 action_features: np.ndarray | None = None, seed: int = 0) -> None:
        cfg.validate()
        for name, v in (("obs_dim", obs_dim), ("n_actions", n_actions)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} = {v!r} out of range: expected an integer in [1, inf)")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
            raise ValueError(f"seed = {seed!r} out of range: expected an integer in [0, 2**63)")
        features = None
        if action_features is not None and cfg.head == "lowrank":
            features = np.asarray(action_features)
            if features.ndim != 2 or features.shape[0] != n_actions or features.shape[1] < 1:
                raise ValueError(f"action_features has shape {features.shape}: expected ({n_actions}, F), F >= 1")
            if not (np.issubdtype(features.dtype, np.integer) or features.dtype == np.bool_):
                raise ValueError(f"action_features has dtype {features.dtype}: expected an integer or bool dtype")
        self.cfg = copy.deepcopy(cfg)
        self.obs_dim, self.n_actions, self.seed = int(obs_dim), int(n_actions), int(seed)
        feats = None if features is None else _Features(features)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.actor, self.q1, self.q2, self.q1_target, self.q2_target = (
                _ScoreNet(self.obs_dim, self.n_actions, cfg, feats) for _ in range(5))
        if cfg.prior_action >= self.n_actions:
            raise ValueError(f"SACConfig.prior_action = {cfg.prior_action} out of range [0, {self.n_actions})")
        if cfg.prior_prob > 0.0 and self.n_actions > 1:
            # Initial logits are ~0: this bias gives prior_action probability prior_prob against the rest.
            _, bias = self.actor.action_factors()
            with torch.no_grad():
                bias[cfg.prior_action] = math.log(cfg.prior_prob / (1.0 - cfg.prior_prob) * (self.n_actions - 1))
        for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha), dtype=_DTYPE))
        self._critic_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr_actor)
        self.critic_opt = torch.optim.Adam(self._critic_params, lr=cfg.lr_critic)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.lr_alpha)
        self._generator = SamplingGenerator(self.seed)
        self._n_updates = 0
        self._factor_cache: dict[str, tuple[int, torch.Tensor, torch.Tensor]] = {}

    # ---------------------------------------------------------------------------------- properties

    @property
    def n_updates(self) -> int:
        """Number of completed :meth:`update` calls (restored by :meth:`load_state_dict`)."""
        return self._n_updates

    @property
    def alpha(self) -> float:
        """The current temperature exp(log_alpha)."""
        return float(self.log_alpha.detach().exp())

    # ---------------------------------------------------------------------------------- acting

    def _scores(self, name: str, obs: torch.Tensor) -> torch.Tensor:
        """(B, n) scores of network ``name`` without gradient; E is cached until the next update."""
        net = getattr(self, name)
        hit = self._factor_cache.get(name)
        if hit is None or hit[0] != self._n_updates:
            hit = self._refresh_factors(name)
        with torch.no_grad():
            return torch.addmm(hit[2], net.state_factor(obs), hit[1])

    def _refresh_factors(self, name: str) -> tuple[int, torch.Tensor, torch.Tensor]:
        """Recompute and cache network ``name``'s action factors (E^T, bias) for the current parameters.

        E^T is kept contiguous, (k, n): a (1, k) x (k, n) product streams it once, about twice as fast on a CPU
        as the (1, k) x (n, k)^T product over the row-major E."""
        with torch.no_grad():
            emb, bias = getattr(self, name).action_factors()
            hit = (self._n_updates, emb.t().contiguous(), bias)
        self._factor_cache[name] = hit
        return hit

    def _one_state(self, obs: np.ndarray, mask: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        o = _float_array(obs, "obs", (self.obs_dim,))
        m = _mask_array(mask, "mask", (self.n_actions,))
        if not m.any():
            raise ValueError("mask has no legal action: at least one entry must be True")
        return torch.from_numpy(o).unsqueeze(0), m

    def act(self, obs: np.ndarray, mask: np.ndarray, *, deterministic: bool = False) -> int:
        """One legal action for one state: sampled from the policy, or its most likely legal action.

        Parameters
        ----------
        obs : numpy.ndarray, (D,) float32
        mask : numpy.ndarray, (n,) bool
            Legality; at least one True.
        deterministic : bool
            True: the legal action with the largest logit (ties: lowest index). False: a draw from the masked
            softmax with the agent's own generator (part of :meth:`state_dict`).

        Returns
        -------
        int
            An index in [0, n) with ``mask[index]`` True.
        """
        o, m = self._one_state(obs, mask)
        with torch.no_grad():
            logits = self._scores("actor", o)[0].numpy()
        if deterministic:
            return int(masked_argmax(logits, m))
        return int(masked_sample(logits, m, generator=self._generator).actions)

    def q_values(self, obs: np.ndarray, mask: np.ndarray) -> npt.NDArray[np.float32]:
        """(n,) float32: min(Q1, Q2)(obs, a) for every action, -inf where ``mask`` is False."""
        o, m = self._one_state(obs, mask)
        with torch.no_grad():
            q = torch.minimum(self._scores("q1", o), self._scores("q2", o))[0].numpy()
        return np.where(m, q, np.float32(-np.inf)).astype(np.float32, copy=False)

    def policy_probs(self, obs: np.ndarray, mask: np.ndarray) -> npt.NDArray[np.float32]:
        """(n,) float32: pi(a | obs) over the legal actions (exactly 0 where ``mask`` is False)."""
        o, m = self._one_state(obs, mask)
        with torch.no_grad():
            logits = self._scores("actor", o)[0]
            p = torch.softmax(logits.masked_fill(~torch.from_numpy(m), _MASKED), 0)
        return p.numpy()

    # ---------------------------------------------------------------------------------- learning

    def update(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
               done: np.ndarray, weight: np.ndarray, mask: np.ndarray, next_mask: np.ndarray,
               steps: np.ndarray | None = None) -> UpdateResult:
        """One gradient step of the critics, the actor and the temperature, then the Polyak target update.

        Parameters
        ----------
        obs, next_obs : numpy.ndarray, (B, D) float32
        action : numpy.ndarray, (B,) int64
            Legal under ``mask``.
        reward : numpy.ndarray, (B,) float32
            Reward accumulated over the transition's ``steps`` environment steps.
        done : numpy.ndarray, (B,) bool
            Terminal: no bootstrap. A truncation is not done.
        weight : numpy.ndarray, (B,) float32
            Importance-sampling weights (>= 0), applied to the critic losses.
        mask, next_mask : numpy.ndarray, (B, n) bool
            Legal actions in ``obs`` and in ``next_obs``. A row of ``next_mask`` may be all False only
            where ``done``.
        steps : numpy.ndarray, (B,) integer, optional
            Environment steps k >= 1 spanned by each transition: the bootstrap is discounted by gamma**k.
            None: 1 everywhere.

        Returns
        -------
        UpdateResult
            ``td_error`` (B,) float32 = |min_j Q_j(s, a) - y| before the step, and the update's metrics.

        Raises
        ------
        ValueError
            A shape, dtype or value problem, naming the argument (e.g. an ``action`` masked in ``mask``).
        """
        b = self._batch(obs, action, reward, next_obs, done, weight, mask, next_mask, steps)
        cfg = self.cfg
        bsz = b["obs"].shape[0]
        alpha = float(self.log_alpha.detach().exp())
        rows = _block_rows(bsz, self.n_actions)

        # Critic target: soft value of s' under the current policy and the target critics, legal a' only.
        with torch.no_grad():
            pi_next = _Factors(self.actor, b["next_obs"])
            q1_next, q2_next = _Factors(self.q1_target, b["next_obs"]), _Factors(self.q2_target, b["next_obs"])
            v_next = torch.empty(bsz)
            for lo in range(0, bsz, rows):
                blk = slice(lo, lo + rows)
                keep, neg = _block_masks(b["next_mask"][blk])
                q = _min_q(q1_next, q2_next, blk, keep)
                soft, _ = _soft_policy_block(pi_next.scores(blk), q, keep, neg, alpha)
                v_next[blk] = -soft
            discount = torch.pow(torch.tensor(cfg.gamma, dtype=_DTYPE), b["steps"])
            y = b["reward"] + discount * (~b["done"]).to(_DTYPE) * v_next

        # Critic step (IS-weighted squared TD errors), on the chosen actions only.
        q1_a = self.q1.at(b["obs"], b["action"])
        q2_a = self.q2.at(b["obs"], b["action"])
        w = b["weight"]
        critic_loss = 0.5 * ((w * (q1_a - y).square()).mean() + (w * (q2_a - y).square()).mean())
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        gn_critic = torch.nn.utils.clip_grad_norm_(self._critic_params, cfg.grad_clip)
        self.critic_opt.step()
        q_a = torch.minimum(q1_a, q2_a).detach()
        td = (q_a - y).abs()

        # Actor step: loss = mean_s sum_a pi(a|s) [alpha log pi(a|s) - min_j Q_j(s, a)] over legal a, with Q
        # from the just-updated critics (no gradient). The (B, n) logits are formed and differentiated block by
        # block (cache-sized); their gradient G then flows into h and E as G @ E and G.T @ h.
        h = self.actor.state_factor(b["obs"])
        emb, bias = self.actor.action_factors()
        pi = _Factors.of(h.detach(), emb.detach(), bias.detach())
        with torch.no_grad():
            q1_now, q2_now = _Factors(self.q1, b["obs"]), _Factors(self.q2, b["obs"])
            grad = torch.empty(bsz, self.n_actions)
            soft = torch.empty(bsz)
            entropy = torch.empty(bsz)
            for lo in range(0, bsz, rows):
                blk = slice(lo, lo + rows)
                keep, neg = _block_masks(b["mask"][blk])
                q = _min_q(q1_now, q2_now, blk, keep)
                soft[blk], entropy[blk] = _soft_policy_block(pi.scores(blk), q, keep, neg, alpha,
                                                             grad_out=grad[blk], grad_scale=1.0 / bsz)
            actor_loss = soft.mean()
            grads = [grad @ pi.emb, grad.t() @ pi.h, grad.sum(0)]
        self.actor_opt.zero_grad(set_to_none=True)
        torch.autograd.backward([h, emb, bias], grads)
        gn_actor = torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.grad_clip)
        self.actor_opt.step()

        # Temperature step: d loss / d log_alpha = H(s) - target(s), so alpha falls while the entropy is above
        # its target and rises while it is below.
        target_entropy = cfg.target_entropy_ratio * b["n_legal"].to(_DTYPE).log()
        alpha_loss = (self.log_alpha * (entropy - target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        torch.nn.utils.clip_grad_norm_([self.log_alpha], cfg.grad_clip)
        self.alpha_opt.step()

        # Targets.
        with torch.no_grad():
            for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
                torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), 1.0 - cfg.polyak)
        self._n_updates += 1
        # The policy's action embeddings change with every update: refresh them here, as part of the update, so
        # acting between updates costs one (1, k) x (k, n) product.
        self._refresh_factors("actor")

        metrics = {
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "alpha_loss": float(alpha_loss.detach()),
            "alpha": alpha,
            "entropy": float(entropy.mean()),
            "target_entropy": float(target_entropy.mean()),
            "q_mean": float(q_a.mean()),
            "target_mean": float(y.mean()),
            "td_abs_mean": float(td.mean()),
            "grad_norm_critic": float(gn_critic),
            "grad_norm_actor": float(gn_actor),
        }
        return UpdateResult(td.numpy().astype(np.float32, copy=False), metrics)

    def _batch(self, obs: Any, action: Any, reward: Any, next_obs: Any, done: Any, weight: Any, mask: Any,
               next_mask: Any, steps: Any) -> dict[str, torch.Tensor]:
        """Checks an update's arguments and returns them as CPU tensors (no copy where possible)."""
        o = _float_array(obs, "obs", (-1, self.obs_dim))
        bsz = o.shape[0]
        if bsz < 1:
            raise ValueError("obs has 0 rows: expected a batch of at least 1 transition")
        no = _float_array(next_obs, "next_obs", (bsz, self.obs_dim))
        r = _float_array(reward, "reward", (bsz,))
        w = _float_array(weight, "weight", (bsz,))
        if (w < 0).any():
            raise ValueError(f"weight has a negative entry ({float(w.min())}): expected values in [0, inf)")
        d = _mask_array(done, "done", (bsz,))
        m = _mask_array(mask, "mask", (bsz, self.n_actions))
        nm = _mask_array(next_mask, "next_mask", (bsz, self.n_actions))
        a = np.asarray(action)
        if a.shape != (bsz,) or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"action has shape {a.shape} and dtype {a.dtype}: expected ({bsz},) integers")
        a = a.astype(np.int64, copy=False)
        if ((a < 0) | (a >= self.n_actions)).any():
            bad = int(np.flatnonzero((a < 0) | (a >= self.n_actions))[0])
            raise ValueError(f"action[{bad}] = {int(a[bad])} out of range [0, {self.n_actions})")
        legal = m[np.arange(bsz), a]
        if not legal.all():
            bad = int(np.flatnonzero(~legal)[0])
            raise ValueError(f"action[{bad}] = {int(a[bad])} is illegal: mask[{bad}, {int(a[bad])}] is False")
        n_next = nm.sum(1)
        if ((n_next == 0) & ~d).any():
            bad = int(np.flatnonzero((n_next == 0) & ~d)[0])
            raise ValueError(f"next_mask[{bad}] has no legal action but done[{bad}] is False: "
                             "a non-terminal next state needs at least one legal action")
        if steps is None:
            k = np.ones(bsz, np.float32)
        else:
            k = np.asarray(steps)
            if k.shape != (bsz,) or not np.issubdtype(k.dtype, np.integer):
                raise ValueError(f"steps has shape {k.shape} and dtype {k.dtype}: expected ({bsz},) integers")
            if (k < 1).any():
                raise ValueError(f"steps has an entry {int(k.min())} out of range [1, inf)")
            k = k.astype(np.float32)
        return {
            "obs": torch.from_numpy(o), "next_obs": torch.from_numpy(no), "reward": torch.from_numpy(r),
            "weight": torch.from_numpy(w), "done": torch.from_numpy(d), "mask": torch.from_numpy(m),
            "next_mask": torch.from_numpy(nm), "action": torch.from_numpy(a), "steps": torch.from_numpy(k),
            "n_legal": torch.from_numpy(m.sum(1)),
        }

    # ---------------------------------------------------------------------------------- checkpoints

    def _modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "q1": self.q1, "q2": self.q2, "q1_target": self.q1_target,
                "q2_target": self.q2_target}

    def _optimisers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}

    def state_dict(self) -> dict[str, Any]:
        """A snapshot (deep copy, unaffected by later updates) of everything that determines future updates:
        networks, targets, optimisers, log_alpha, the exploration generator's state and the update counter.
        ``torch.save`` can write it."""
        state: dict[str, Any] = {
            "format": _STATE_FORMAT,
            "obs_dim": self.obs_dim,
            "n_actions": self.n_actions,
            "config": asdict(self.cfg),
            "log_alpha": self.log_alpha.detach().clone(),
            "generator": tuple(self._generator.get_state()),
            "n_updates": self._n_updates,
        }
        for name, mod in self._modules().items():
            state[name] = mod.state_dict()
        for name, opt in self._optimisers().items():
            state[name] = opt.state_dict()
        return copy.deepcopy(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict` of an agent with the same obs_dim, n_actions and network shape.

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
        for name in ("hidden", "head", "embed_dim"):
            mine, theirs = getattr(self.cfg, name), cfg.get(name)
            if (tuple(theirs) if name == "hidden" and theirs is not None else theirs) != (
                    tuple(mine) if name == "hidden" else mine):
                raise ValueError(f"state['config']['{name}'] = {theirs!r} but this agent has {mine!r}")
        state = copy.deepcopy(state)
        for name, mod in self._modules().items():
            mod.load_state_dict(state[name])
        for name, opt in self._optimisers().items():
            opt.load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"], dtype=_DTYPE))
        self._generator.set_state(tuple(state["generator"]))
        self._n_updates = int(state["n_updates"])
        self._factor_cache.clear()


# ------------------------------------------------------------------------------------------- helpers


class _Factors:
    """h (B, k), E (n, k), bias (n,) of one network, detached: scores(rows) = bias + h[rows] @ E.T."""

    def __init__(self, net: _ScoreNet | None, obs: torch.Tensor | None) -> None:
        if net is not None and obs is not None:
            self.h = net.state_factor(obs)
            self.emb, self.bias = net.action_factors()

    @classmethod
    def of(cls, h: torch.Tensor, emb: torch.Tensor, bias: torch.Tensor) -> "_Factors":
        f = cls(None, None)
        f.h, f.emb, f.bias = h, emb, bias
        return f

    def scores(self, rows: slice) -> torch.Tensor:
        return torch.addmm(self.bias, self.h[rows], self.emb.t())


def _block_rows(batch: int, n_actions: int) -> int:
    """Rows per block of the (B, n) passes: ~4 MB of float32 per (rows, n) block, so the few tensors of a
    block stay in the CPU cache between the elementwise passes (measured ~1.5x faster than whole-batch passes
    at B = 256, n = 67,105; bench_sac.py)."""
    return max(1, min(batch, (1 << 20) // max(n_actions, 1)))


def _block_masks(legal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep, neg) float32 of a block of a bool mask: keep = 1 / 0 at legal / illegal actions, neg = 0 /
    finfo.min. ``x * keep`` and ``x + neg`` are vectorised passes ~10x faster than ``masked_fill_``; for any
    finite ``|x| < 1e31``, ``x + finfo.min`` rounds to exactly ``finfo.min`` (never -inf)."""
    keep = legal.to(_DTYPE)
    return keep, (keep - 1.0).mul_(-_MASKED)


def _min_q(q1: _Factors, q2: _Factors, rows: slice, keep: torch.Tensor) -> torch.Tensor:
    """min(Q1, Q2) on a block of rows, 0 at illegal actions (so that a product with pi = 0 stays 0)."""
    q = q1.scores(rows)
    torch.minimum(q, q2.scores(rows), out=q)
    return q.mul_(keep)


def _soft_policy_block(logits: torch.Tensor, q: torch.Tensor, keep: torch.Tensor, neg: torch.Tensor,
                       alpha: float, *,
                       grad_out: torch.Tensor | None = None,
                       grad_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: sum_a pi(a) [alpha log pi(a) - q(a)] and the entropy of pi, over the legal actions.

    ``pi = softmax(logits)`` with illegal logits set to ``finfo.min``, so pi is exactly 0 there; log pi and q
    are then 0 at illegal actions (``q`` must come zeroed, see :func:`_min_q`; ``keep``, ``neg`` from
    :func:`_block_masks`) and every product is finite
    (no ``0 * -inf``). A row with no legal action (only allowed for terminal next states) gives 0.
    ``logits`` and ``q`` are overwritten (both are temporaries of the caller).

    With ``grad_out`` (same shape as logits), writes ``grad_scale * d(first output)/d logits``:
    ``pi(a) [t(a) - sum_b pi(b) t(b)]`` with ``t = alpha log pi - q`` (the alpha / log-derivative term sums to
    zero), which is 0 at illegal actions. About ten passes over the block instead of the ~30 of autograd.
    """
    z = logits.add_(neg)  # finfo.min at illegal actions
    z.sub_(z.amax(1, keepdim=True))
    p = torch.exp(z)
    total = p.sum(1, keepdim=True)
    p.div_(total)
    logp = z.sub_(total.log_()).mul_(keep)  # finite (~finfo.min) * 0 = 0 at illegal actions
    t = q.neg_().add_(logp, alpha=alpha)  # alpha log pi - q; 0 at illegal actions
    soft = torch.linalg.vecdot(p, t)
    entropy = -torch.linalg.vecdot(p, logp)
    if grad_out is not None:
        torch.mul(t.sub_(soft.unsqueeze(1)), p, out=grad_out)
        if grad_scale != 1.0:
            grad_out.mul_(grad_scale)
    return soft, entropy


def _float_array(x: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(x)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} has dtype {arr.dtype}: expected float32")
    expected = tuple(arr.shape[i] if s == -1 and i < arr.ndim else s for i, s in enumerate(shape))
    if arr.shape != expected:
        raise ValueError(f"{name} has shape {arr.shape}: expected {_shape_text(shape)}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has a non-finite entry (NaN or inf)")
    return arr


def _mask_array(x: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != np.bool_:
        if not np.issubdtype(arr.dtype, np.integer) or ((arr != 0) & (arr != 1)).any():
            raise ValueError(f"{name} has dtype {arr.dtype}: expected bool (or 0/1 integers)")
        arr = arr.astype(np.bool_)
    if arr.shape != shape:
        raise ValueError(f"{name} has shape {arr.shape}: expected {_shape_text(shape)}")
    return np.ascontiguousarray(arr)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join("B" if s == -1 else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
