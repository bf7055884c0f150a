"""Discrete Soft Actor-Critic over a large, masked action catalog (tens of thousands of actions).

The algorithm is discrete SAC (Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings",
arXiv 1910.07207): twin Q networks with Polyak-averaged targets, a categorical policy over the whole action
catalog, and an automatically tuned temperature alpha. Expectations over actions are computed exactly (no
sampled actions in the losses), which is what makes the method fit a discrete action set; only the policy's
gradient can optionally be estimated from sampled actions (``SACConfig.policy_samples``, below).

Masking
-------
Illegal actions have probability exactly 0: the probabilities are multiplied by the 0/1 mask after the
exponential, and every value they multiply is finite, so no huge or infinite value reaches a sum or a gradient.
Where logits are masked (the rerun of :func:`_soft_stream`, the imitation term, ``policy_probs``) an illegal
action's logit is ``torch.finfo(float32).min``, never ``-inf`` (``0 * -inf`` is NaN). The entropy of a state is
taken over its legal actions, and so is its target:

    target_entropy(s) = target_entropy_ratio * log(number of legal actions in s)

per state (Christodoulou uses 0.98 * log|A| with a fixed |A| <= 18). Over 67,105 actions 0.98 * log|A| is
10.9 nats, an almost uniform policy over ~53,000 actions, which would keep alpha growing until the agent acts
at random; ratios well below 1 are the usual fix for large or masked discrete spaces (Xu et al. 2021,
"Target Entropy Annealing for Discrete Soft Actor-Critic"; Zhou et al. 2022, "Revisiting Discrete Soft
Actor-Critic"). The default 0.5 asks for exp(0.5 log n) = sqrt(n) effective actions (~260 of 67,105, 7 of 50).
A state with a single legal action has target 0 and entropy exactly 0, so it leaves alpha unchanged.

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
  a free (n, embed_dim) table. The encoder is state-independent, so it runs once per network and parameter
  version for all actions, and the critic's regression needs only the B chosen actions' embeddings. Over all
  actions the update never forms e(a) itself: h . (W2 x(a) + c2) + b(a) = (h W2) . x(a) + h . c2 + b(a) with x
  the encoder's hidden layer, so its output layer is applied on the state side, and the two biases become
  columns of the factors (:meth:`_ScoreNet.stream_factor`).
  ``benchmarks/bench_sac.py`` measured (previous update, batch 256 over 67,105 actions, one torch thread)
  ~0.75 s per update with "lowrank" against 2.3 s with "linear", which also has 52M online parameters against
  0.7M. "lowrank" is the default: faster, and it generalises across actions that share features.

How an update is computed
-------------------------
Every (B, n) quantity is a product ``h @ E.T + bias`` followed by elementwise passes and per-state sums. The
update streams them over blocks of ~1,000 actions: (actions, B) blocks of 1 MB computed as ``E_blk @ h.T``, the
product layout a CPU BLAS ran ~3.5x faster than ``h @ E.T`` over blocks of states (inner dimension 64,
measured), with an online softmax: a running per-state maximum M, and running sums rescaled when it grows
(Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"). Per state it keeps

    S = sum_a keep(a) exp(z(a) - M),  A = sum_a keep(a) exp(z(a) - M) w(a),  w = min_j Q_j - alpha z

so that ``log Z = M + log S``, ``E_pi[w] = A / S`` and the soft value is ``E_pi[w] + alpha log Z`` (the
policy loss is its negative with the online critics; the entropy is ``log Z - E_pi[z]``). The policy's
gradient ``d loss / d z(a) = pi(a) (E_pi[w] - w(a)) / B`` needs the final ``log Z`` and ``E_pi[w]``, so the
actor's pass keeps exp(z - M) and w of every block (two (n, B) float32 buffers, reused across updates) and a
second sweep forms the gradient block by block and multiplies it into ``h`` and ``E``.

Policy gradient: exact or sampled (``SACConfig.policy_samples``)
----------------------------------------------------------------
With ``policy_samples = 0`` (the default) the policy's gradient is the exact expectation above. That update
needs eight (B, n) products (the target: the policy at s' and both target critics; the actor: the policy and
both critics at s, then the gradient into h and into E); at batch 256 over 67,105 actions they run near the
CPU's peak FLOP rate (~80 GFLOP/s on one AVX2 core, ~0.22 s of the update) and the update is 2.6-3.1x
faster than the previous one (``benchmarks/bench_sac.py``, a shared machine).

With ``policy_samples = K >= 2`` the policy's gradient is estimated from K actions drawn per state from pi: one
stream over the policy's logits gives log Z, the exact entropy and the sums the sampler walks down
(:func:`_sample_actions`); f = alpha log pi(a_j) - min_j Q_j(s, a_j) is evaluated at the drawn actions only; the
gradient is the score-function estimate ``grad E_pi[f] = E_pi[(f - b) grad log pi]`` with the leave-one-out
baseline b (Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline for free!"; :func:`_sampled_logit_grad`).
It is unbiased (tested: the mean over many draws matches the exact gradient within its standard errors) but
**stochastic**; it draws from an own seeded generator and touches only the drawn actions, so the actor's pass
needs one (B, n) product instead of five and the update four in all: ~3.8-4.2x the previous one. The critic target,
the critic step, the entropy and the temperature step stay exact. The price is the estimate's variance: on the
contextual bandit of ``tests/test_sac.py`` (three seeds, 700 decisions) K = 64 closed the same share of the gap
as the exact gradient at 200 actions (0.97-0.99 against 0.98-0.99), less at 5,000 actions (0.83-0.93 against
0.91-0.93; K = 128 and 256 did no better) and with the linear head at 60 actions (0.71-0.77 against 0.80-0.85).

What changed against the previous update (frozen in ``benchmarks/bench_sac.py`` and timed side by side):

* layout: (actions, B) blocks streamed over the actions instead of (rows, n) blocks over states;
* base 2 and no slow exponentials: the policy's logits are scaled by log2(e) inside the product and the stream
  uses ``exp2`` (~2x faster than ``exp``); its argument is clamped at -126 and masked entries are zeroed by a
  0/1 multiply afterwards. ``exp`` of ``finfo.min`` (of anything whose result is denormal or 0) leaves the
  vectorised fast path, which made the previous passes ~3x slower per masked entry; the clamp only changes
  terms below 2^-126 of the largest, which no float32 sum can see;
* masks are packed to bits and transposed once per update, then unpacked per block (transposing the bool mask
  itself was ~2.5x slower);
* action embeddings ``E`` are cached per network and parameter version (the tensors' in-place version
  counters): the actor's is computed once per parameter version, with its autograd graph, and serves acting,
  ``policy_probs``, both passes of the next update and that update's backward pass (the previous update ran the
  actor's encoder three times per update); the online critics' serve ``q_values`` until their next step;
* fewer elementwise passes (``log pi = z - log Z`` enters only through the sums), and no (n, B) tensor is
  allocated per update;
* the running maximum M spans all actions, legal or not, so the logits are not masked (two passes per block
  fewer); a state whose legal terms would be negligible against the 2^-126 clamp (``_RAW_MAX_FLOOR``) reruns the
  stream with the legal maximum, so results never depend on the illegal logits;
* no (n, k) tensor is allocated per update either (their page faults cost more than their arithmetic): the
  feature encoder writes its hidden layer into buffers kept per network, and the actor's backward pass through
  the encoder (ReLU, then the transposed sparse features) is written out by hand from the kept hidden layer,
  instead of autograd's graph;
* the encoder's output layer is applied on the state side ((B, k) x (k, k) instead of (n, k) x (k, k) for each
  of the five networks and twice in the actor's backward pass), and the action bias is a column of the product
  (``addmm`` with a broadcast bias copies it into the output first: a pass per product);
* the actor's output-layer bias c2 adds h . c2 to every logit of a state, which the softmax ignores: its gradient
  is exactly 0 and is set so (autograd produced rounding noise of ~1e-9 there, which Adam then normalised into
  steps of the learning rate's size; c2 does not change the policy either way).

Profile of one exact update (batch 256, 67,105 actions, one thread, load 1.3-1.9 on the 2 cores), before -> after
this list's last four items: encoders 156 -> 58 ms, the two streams 358 -> 303 ms (their six products ~165
ms), the gradient sweep 91 -> 81 ms (two products ~55 ms), the actor's backward pass and step 51 -> 26 ms;
the update 696 -> 507 ms (the previous update: ~1,650 ms).

Unchanged: the losses (twin-Q soft Bellman target with the exact expectation over pi(.|s') and its entropy,
the IS-weighted critic loss on the chosen actions, the policy loss ``E_pi[alpha log pi - min_j Q_j]`` with the
just-updated critics, the temperature loss against the per-state legal-action target entropy), the optimisers,
clipping and Polyak averaging. With the exact gradient, results agree with the previous update to float32
rounding (summation order differs), not bit for bit. bfloat16 is not used: this CPU (AVX2, without AVX512-BF16
or AMX) ran a bfloat16 (256, 64) x (64, 67,105) product 6x slower than float32.

Devices and threads
-------------------
``SACConfig.device`` ("cpu", "cuda" or "auto": cuda when available) places the networks, the action features,
the optimisers and every batch; results come back as numpy arrays on the CPU. On a GPU the passes run as one
block. :meth:`DiscreteSAC.state_dict` returns CPU tensors and :meth:`DiscreteSAC.load_state_dict` moves a state
from any device to the agent's own, so checkpoints move between machines. ``torch.set_num_threads`` is the
caller's business (the training loop sets ``train.torch_threads``); export ``OMP_WAIT_POLICY=PASSIVE`` before
starting Python on a shared machine, since OpenMP reads it once, when torch is imported.

Determinism
-----------
Parameters are initialised on the CPU from ``seed`` under a forked torch RNG (the caller's global torch RNG is
neither read nor advanced), then moved to the device; exploration draws come from an own
:class:`ace_hybrid.SamplingGenerator`; the update uses no randomness with the exact policy gradient, and an
own seeded ``torch.Generator`` with a sampled one (saved in :meth:`DiscreteSAC.state_dict`). Same seed,
configuration, data and torch thread count give bit-identical updates on the CPU.
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
_POLICY_STREAM = 0x5AC_D12A  # the policy-sample generator's seed is seed ^ this (independent of exploration)
_BLOCK_FLOATS = 1 << 18
"""Elements of one (actions, B) block of the streamed passes on a CPU: 1 MB of float32, so a block's few
buffers stay in the L2 cache between passes (1,024 actions at B = 256; measured fastest of 512 / 1,024 / 2,048
actions per block with bench_sac.py)."""
_FAN = 8
"""The sampler's tree (:func:`_sample_actions`): a block splits into groups of _FAN**2 actions, those into groups
of _FAN, those into actions; blocks hold whole groups. A draw reads rows / _FAN**2 + 2 * _FAN numbers, measured
~3x faster than one level of 32-action groups."""
_EXP2_FLOOR = -126.0
_RAW_MAX_FLOOR = 2.0**-64
""":func:`_soft_stream` takes its running maximum over all actions, legal or not, and reruns over the legal ones
only for a state whose legal sum S = sum 2^(z2 - M) falls below this: the terms the 2^-126 clamp changes are
then at most n 2^-126 / S < 2^-45 of S for n < 2^17."""
"""exp2() arguments are clamped here first: float32 exp2 is slow (~2.5x per vector of 8, measured) on inputs
below -126, whose results are denormal or 0; 2^-126 = 1.2e-38 is still a normal float."""


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

    def __init__(self, features: np.ndarray, device: torch.device) -> None:
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
        self.idx, self.val = torch.from_numpy(idx).to(device), torch.from_numpy(val).to(device)
        order = np.lexsort((nz_rows, nz_cols))  # by feature, then action
        crow = np.concatenate([[0], np.cumsum(np.bincount(nz_cols, minlength=features.shape[1]))])
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore", UserWarning)
            self.phi_t = torch.sparse_csr_tensor(
                torch.from_numpy(crow.astype(np.int64)), torch.from_numpy(nz_rows[order].astype(np.int64)),
                torch.from_numpy(features[nz_rows[order], nz_cols[order]].astype(np.float32)),
                size=(features.shape[1], n)).to(device)


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
            return self.table if actions is None else self.table.index_select(0, actions)
        if actions is None:
            z = _FeatureSum.apply(self.feature_weight, self.feats)
        else:
            z = F.embedding_bag(self.feats.idx.index_select(0, actions), self.feature_weight,
                                per_sample_weights=self.feats.val.index_select(0, actions), mode="sum")
        return self.out(F.relu(z + self.feature_bias))

    def hidden_into(self, out: torch.Tensor) -> torch.Tensor:
        """The encoder's hidden layer relu(sum_f phi_f(a) W1[f] + c1) of every action, (n, k), written into ``out``
        (a buffer kept by the caller, possibly a column slice), without autograd (feature encoder only).

        The output layer e = W2 hidden + c2 is not applied: the update multiplies it into the state side instead
        (:meth:`_ScoreNet.stream_factor`), a (B, k) x (k, k) product instead of an (n, k) x (k, k) one."""
        with torch.no_grad():
            z = F.embedding_bag(self.feats.idx, self.feature_weight, per_sample_weights=self.feats.val, mode="sum")
            return torch.add(z, self.feature_bias, out=out).relu_()

    def backward_hidden(self, d_hidden: torch.Tensor, hidden: torch.Tensor) -> None:
        """Adds to ``feature_weight.grad`` and ``feature_bias.grad`` the gradient of ``sum(d_hidden * hidden)``, given
        the ``hidden`` layer :meth:`hidden_into` left; ``d_hidden`` (n, k, contiguous) is overwritten. The ReLU and
        the feature sum of :meth:`forward`'s backward pass, the latter through the transposed CSR features."""
        with torch.no_grad():
            torch.ops.aten.threshold_backward.grad_input(d_hidden, hidden, 0.0, grad_input=d_hidden)  # ReLU
            _accumulate_grad(self.feature_bias, d_hidden.sum(0))
            _accumulate_grad(self.feature_weight, torch.sparse.mm(self.feats.phi_t, d_hidden))


def _accumulate_grad(param: torch.Tensor, grad: torch.Tensor) -> None:
    """``param.grad += grad`` as autograd would accumulate it (``grad`` becomes it when there was none)."""
    if param.grad is None:
        param.grad = grad
    else:
        param.grad.add_(grad)


class _ScoreNet(nn.Module):
    """obs -> one score per action (policy logits or Q values), with a linear or a low-rank head.

    Both heads are ``scores = h @ E.T + bias`` for some (B, k) ``h`` and (n, k) ``E`` (:meth:`state_factor`,
    :meth:`action_factors`), which lets the update form the (B, n) scores block by block and back-propagate
    through ``h`` and ``E`` by hand.
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

    @property
    def action_bias(self) -> torch.Tensor:
        """(n,) the per-action bias parameter."""
        return self.bias if self.lowrank else self.linear.bias

    def action_factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(E, bias): (n, k) and (n,), the state-independent half of the scores."""
        if self.lowrank:
            return self.encoder(), self.bias
        return self.linear.weight, self.linear.bias

    @property
    def encodes_features(self) -> bool:
        """The head's E comes from the feature encoder (and is not a parameter itself)."""
        return self.lowrank and self.encoder.feats is not None

    def stream_factor(self, h: torch.Tensor, *, offset: bool) -> torch.Tensor:
        """The state half that matches :meth:`action_factors_into`, given :meth:`state_factor`'s h (B, k).

        With the feature encoder the scores are h . (W2 hidden(a) + c2) + b(a) = (h W2) . hidden(a) + h . c2 + b(a):
        the encoder's output layer moves to the state side, and the two biases become columns, so that one
        product without a bias term gives the scores: this returns [h W2, h . c2, 1] (B, k + 2) against
        E = [hidden, 1, b]. Without ``offset`` the column h . c2 is 0: the scores lack that per-state constant,
        which a softmax ignores. Other heads: h itself."""
        if not self.encodes_features:
            return h
        u = h @ self.encoder.out.weight
        ones = u.new_ones(u.shape[0], 1)
        return torch.cat([u, h @ self.encoder.out.bias[:, None] if offset else ones * 0.0, ones], 1)

    def action_factors_into(self, buf: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The action half that matches :meth:`stream_factor`, without autograd: (E, bias), (n, k') and (n,).

        With the feature encoder E = [hidden, 1, b] is written into ``buf`` ((n, k + 2), kept by the caller) and
        the bias is None (it is E's last column); other heads ignore ``buf`` and return :meth:`action_factors`,
        detached."""
        if not self.encodes_features:
            emb, bias = self.action_factors()
            return emb.detach(), bias.detach()
        assert buf is not None
        k = buf.shape[1] - 2
        self.encoder.hidden_into(buf[:, :k])
        buf[:, k].fill_(1.0)
        buf[:, k + 1].copy_(self.bias)
        return buf, None

    def backward_action_factors(self, d_emb: torch.Tensor, d_bias: torch.Tensor, emb: torch.Tensor) -> None:
        """Adds to the parameters' ``.grad`` the gradient of ``sum(d_emb * E) + sum(d_bias * bias)`` for the E and
        bias :meth:`action_factors_into` returned without ``offset`` (``emb``); ``d_emb`` may be overwritten.

        With the feature encoder E is the hidden layer: the encoder's output layer W2 took its gradient through
        :meth:`stream_factor`, and its bias c2 gets 0, its exact gradient (h . c2 is a per-state constant of the
        logits, which the policy's softmax ignores)."""
        if not self.lowrank:
            _accumulate_grad(self.linear.weight, d_emb)
            _accumulate_grad(self.linear.bias, d_bias)
            return
        _accumulate_grad(self.bias, d_bias)
        if self.encoder.feats is None:
            _accumulate_grad(self.encoder.table, d_emb)
        else:
            self.encoder.backward_hidden(d_emb, emb)
            _accumulate_grad(self.encoder.out.bias, torch.zeros_like(self.encoder.out.bias))

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

    def at_many(self, h: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """(B, K) scores of K actions per row, given the rows' state factor h (B, k)."""
        flat = actions.reshape(-1)
        if self.lowrank:
            emb, bias = self.encoder(flat), self.bias.index_select(0, flat)
        else:
            emb, bias = self.linear.weight.index_select(0, flat), self.linear.bias.index_select(0, flat)
        return torch.linalg.vecdot(emb.view(*actions.shape, -1), h[:, None, :]) + bias.view(actions.shape)


# ------------------------------------------------------------------------------------------- agent


def _resolve_device(name: str) -> torch.device:
    """The torch device of ``SACConfig.device`` ("cpu", "cuda" or "auto")."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("SACConfig.device = 'cuda' but torch.cuda.is_available() is False (a CPU-only torch "
                         "build or no visible GPU): expected one of 'cpu', 'auto'")
    return torch.device(name)


class DiscreteSAC:
    """Discrete Soft Actor-Critic over ``n_actions`` masked actions (see the module docstring).

    Parameters
    ----------
    obs_dim : int
        Length D of an observation vector (already normalised by the caller).
    n_actions : int
        Size n of the action catalog.
    cfg : SACConfig
        Hyper-parameters (validated here), including the device.
    action_features : numpy.ndarray, (n, F) integer or bool, optional
        Sparse action features (``ActionCatalog.features()``), used by the low-rank head; ignored by the
        linear head. None with the low-rank head: a free (n, embed_dim) embedding table.
    seed : int
        Seeds the parameter initialisation and the exploration generator, in [0, 2**63).

    Raises
    ------
    ValueError
        Invalid ``cfg``, dimensions, features or seed (the message names the argument), or
        ``cfg.device = "cuda"`` without a usable GPU.
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
        self.device = _resolve_device(cfg.device)
        self.obs_dim, self.n_actions, self.seed = int(obs_dim), int(n_actions), int(seed)
        feats = None if features is None else _Features(features, self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.actor, self.q1, self.q2, self.q1_target, self.q2_target = (
                _ScoreNet(self.obs_dim, self.n_actions, cfg, feats) for _ in range(5))
        if cfg.prior_action >= self.n_actions:
            raise ValueError(f"SACConfig.prior_action = {cfg.prior_action} out of range [0, {self.n_actions})")
        for net in self._modules().values():
            net.to(self.device)
        if cfg.prior_prob > 0.0 and self.n_actions > 1:
            # Initial logits are ~0: this bias gives prior_action probability prior_prob against the rest.
            with torch.no_grad():
                self.actor.action_bias[cfg.prior_action] = math.log(
                    cfg.prior_prob / (1.0 - cfg.prior_prob) * (self.n_actions - 1))
        for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_alpha), dtype=_DTYPE, device=self.device))
        self._critic_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr_actor)
        self.critic_opt = torch.optim.Adam(self._critic_params, lr=cfg.lr_critic)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.lr_alpha)
        self._generator = SamplingGenerator(self.seed)
        self._policy_generator = torch.Generator().manual_seed(self.seed ^ _POLICY_STREAM)
        self._n_updates = 0
        self._imitation_loss: float | None = None
        self._factor_cache: dict[str, list[Any]] = {}  # name -> [key, E, bias, contiguous E.T or None]
        self._buffers: dict[str, torch.Tensor] = {}  # (n, k) buffers kept between updates (:meth:`_buffer`)
        self._workspace: _Workspace | None = None

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

    def _buffer(self, name: str, rows: int, cols: int) -> torch.Tensor:
        """A (rows, cols) float32 buffer kept between updates: a fresh (n, k) tensor per use is a fresh 17 MB
        allocation at n = 67,105 whose page faults cost more than the arithmetic that fills it (measured)."""
        buf = self._buffers.get(name)
        if buf is None or buf.shape != (rows, cols):
            buf = self._buffers[name] = torch.empty(rows, cols, dtype=_DTYPE, device=self.device)
        return buf

    def _encoder_buffer(self, name: str) -> torch.Tensor | None:
        """(n, k + 2) buffer of network ``name``'s feature encoder (:meth:`_ScoreNet.action_factors_into`), None
        for other heads."""
        if not self.actor.encodes_features:
            return None
        return self._buffer(f"{name}.hidden", self.n_actions, self.cfg.embed_dim + 2)

    def _factors(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(E, bias) of network ``name``, the action half of :meth:`_ScoreNet.action_factors_into`: (n, k') and
        (n,), without gradient; :meth:`_stream_factors` gives the matching state half. The actor's scores lack a
        per-state constant (``offset=False``), which its softmax ignores; the critics' are exact.

        Cached per parameter version: the key is the in-place version counters of the network's parameters,
        which every optimiser step, Polyak update, ``load_state_dict`` or in-place edit advances (edits through
        ``.data`` bypass the counter: call ``_factor_cache.clear()`` after those). One encoder pass per parameter
        version serves acting, both passes of the next update and (the actor's) that update's backward pass,
        which :meth:`_ScoreNet.backward_action_factors` takes by hand from the kept hidden layer. The feature
        encoder writes into buffers kept between versions (:meth:`_buffer`), so a returned E is valid until the
        network's parameters change."""
        net = getattr(self, name)
        key = tuple(p._version for p in net.parameters())
        hit = self._factor_cache.get(name)
        if hit is None or hit[0] != key:
            emb, bias = net.action_factors_into(self._encoder_buffer(name))
            hit = [key, emb, bias, None]
            self._factor_cache[name] = hit
        return hit[1], hit[2]

    def _scores(self, name: str, obs: torch.Tensor) -> torch.Tensor:
        """(B, n) scores of network ``name`` without gradient, for acting (action factors from the cache); the
        actor's up to a per-state constant (:meth:`_factors`), which sampling, argmax and softmax ignore.

        Acting multiplies by E.T made contiguous once per parameter version (into a kept buffer): a (1, k) x
        (k, n) product streams it once, ~5x faster on a CPU than the same product over the row-major E (measured,
        n = 67,105, k = 64)."""
        self._factors(name)
        hit = self._factor_cache[name]
        if hit[3] is None:
            emb = hit[1]
            hit[3] = self._buffer(f"{name}.emb_t", emb.shape[1], emb.shape[0]).copy_(emb.t())
        with torch.no_grad():
            h = self._stream_factors(name, obs).h
            return torch.mm(h, hit[3]) if hit[2] is None else torch.addmm(hit[2], h, hit[3])

    def _one_state(self, obs: np.ndarray, mask: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        o = _float_array(obs, "obs", (self.obs_dim,))
        m = _mask_array(mask, "mask", (self.n_actions,))
        if not m.any():
            raise ValueError("mask has no legal action: at least one entry must be True")
        return torch.from_numpy(o).to(self.device).unsqueeze(0), m

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
        logits = self._scores("actor", o)[0].cpu().numpy()
        if deterministic:
            return int(masked_argmax(logits, m))
        return int(masked_sample(logits, m, generator=self._generator).actions)

    def q_values(self, obs: np.ndarray, mask: np.ndarray) -> npt.NDArray[np.float32]:
        """(n,) float32: min(Q1, Q2)(obs, a) for every action, -inf where ``mask`` is False."""
        o, m = self._one_state(obs, mask)
        q = torch.minimum(self._scores("q1", o), self._scores("q2", o))[0].cpu().numpy()
        return np.where(m, q, np.float32(-np.inf)).astype(np.float32, copy=False)

    def policy_probs(self, obs: np.ndarray, mask: np.ndarray) -> npt.NDArray[np.float32]:
        """(n,) float32: pi(a | obs) over the legal actions (exactly 0 where ``mask`` is False)."""
        o, m = self._one_state(obs, mask)
        logits = self._scores("actor", o)[0]
        p = torch.softmax(logits.masked_fill(~torch.from_numpy(m).to(self.device), _MASKED), 0)
        return p.cpu().numpy()

    # ---------------------------------------------------------------------------------- learning

    def update(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
               done: np.ndarray, weight: np.ndarray, mask: np.ndarray, next_mask: np.ndarray,
               steps: np.ndarray | None = None, imitation: np.ndarray | None = None) -> UpdateResult:
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
        imitation : numpy.ndarray, (B,) float32, optional
            Weights w_i >= 0 of an auxiliary behaviour-cloning term added to the actor's loss,
            ``(1/B) sum_i w_i (-log pi(a_i | s_i))``: rows whose action was validated (an expert's or an
            accepted LLM refinement) pull the policy towards it. None or all zero: the plain SAC actor loss.

        Returns
        -------
        UpdateResult
            ``td_error`` (B,) float32 = |min_j Q_j(s, a) - y| before the step, and the update's metrics.

        Raises
        ------
        ValueError
            A shape, dtype or value problem, naming the argument (e.g. an ``action`` masked in ``mask``).
        """
        b = self._batch(obs, action, reward, next_obs, done, weight, mask, next_mask, steps, imitation)
        alpha = float(self.log_alpha.detach().exp())
        ws = self._workspace_for(b["obs"].shape[0])
        # The actor's action factors are cached since acting (or made in the target's pass): both passes use
        # them, and the actor step back-propagates into the encoder from the hidden layer they hold.
        y = self._soft_target(b, alpha, ws)
        critic_loss, q_a, gn_critic = self._critic_step(b, y)
        step = self._actor_step_sampled if self.cfg.policy_samples else self._actor_step
        actor_loss, entropy, gn_actor = step(b, alpha, ws)
        target_entropy = self.cfg.target_entropy_ratio * b["n_legal"].to(_DTYPE).log()
        alpha_loss = self._alpha_step(entropy, target_entropy)
        with torch.no_grad():
            for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
                torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), 1.0 - self.cfg.polyak)
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
        return UpdateResult(td.cpu().numpy().astype(np.float32, copy=False), metrics)

    def _apply_actor_gradient(self, h: torch.Tensor, d_h: torch.Tensor, emb: torch.Tensor, d_emb: torch.Tensor,
                              d_bias: torch.Tensor) -> torch.Tensor:
        """Back-propagate the hand-made gradients of the actor's factors (the state half ``h`` by autograd, E and
        the bias by :meth:`_ScoreNet.backward_action_factors`), clip, step; returns the gradient norm."""
        self.actor_opt.zero_grad(set_to_none=True)
        h.backward(F.pad(d_h, (0, h.shape[1] - d_h.shape[1])))  # the stream's h may have extra columns
        self.actor.backward_action_factors(d_emb, d_bias, emb)
        norm = torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.cfg.grad_clip)
        self.actor_opt.step()
        return norm

    def _add_imitation(self, pi: _Factors, b: dict[str, torch.Tensor], d_h: torch.Tensor, d_emb: torch.Tensor,
                       d_bias: torch.Tensor) -> None:
        """Add the gradient of ``(1/B) sum_i w_i (-log pi(a_i | s_i))`` over the imitation rows to the actor's logit
        gradients, in place (dense over the few weighted rows only: m x n for m rows); keeps its value for the
        metrics."""
        rows = b["imit_rows"]
        if rows.numel() == 0:
            self._imitation_loss = None
            return
        h = pi.h.index_select(0, rows)
        z = (h @ pi.emb.T + pi.bias).masked_fill(~b["imit_mask"], _MASKED)
        logp = torch.log_softmax(z, dim=1)
        a, w = b["action"].index_select(0, rows), b["imit_w"] / b["obs"].shape[0]
        self._imitation_loss = float(-(w * logp.gather(1, a[:, None])[:, 0]).sum())
        g = logp.exp() * w[:, None]  # d/dz of w (log Z - z_a) = w (pi - onehot(a))
        g[torch.arange(rows.numel(), device=g.device), a] -= w
        d_h.index_add_(0, rows, g @ pi.emb)
        d_emb.add_(g.T @ h)
        d_bias.add_(g.sum(0))

    def _workspace_for(self, bsz: int) -> _Workspace:
        if self._workspace is None or self._workspace.bsz != bsz:
            self._workspace = _Workspace(self.n_actions, bsz, self.device)
        return self._workspace

    def _stream_factors(self, name: str, obs: torch.Tensor, *, grad: bool = False) -> _Factors:
        """Network ``name``'s factors of the scores at ``obs``; ``h`` with autograd when ``grad`` (the others never)."""
        emb, bias = self._factors(name)
        net = getattr(self, name)
        with torch.set_grad_enabled(grad):
            return _Factors(net.stream_factor(net.state_factor(obs), offset=name != "actor"), emb, bias)

    def _soft_target(self, b: dict[str, torch.Tensor], alpha: float, ws: _Workspace) -> torch.Tensor:
        """(B,) y = r + gamma**k (1 - done) V(s'), V(s') the soft value under pi and the target critics."""
        nxt = b["next_obs"]
        with torch.no_grad():
            pi = self._stream_factors("actor", nxt)
            st = _soft_stream(pi, self._stream_factors("q1_target", nxt),
                              self._stream_factors("q2_target", nxt), b["next_mask"], alpha, ws, "value")
            v_next = torch.where(st.any_legal, st.mean_w + alpha * st.log_z, 0.0)
            discount = torch.pow(torch.tensor(self.cfg.gamma, dtype=_DTYPE, device=self.device), b["steps"])
            return b["reward"] + discount * (~b["done"]).to(_DTYPE) * v_next

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

    def _actor_factors(self, obs: torch.Tensor) -> tuple[torch.Tensor, _Factors, _Factors]:
        """The actor's scores at ``obs`` as (h with autograd, the stream's factors, the gradient's factors).

        With the feature encoder the stream's carry the action bias as a column (E = [hidden, 1, b] against
        h = [h W2, 0, 1], :meth:`_ScoreNet.stream_factor`) and the gradient's are (h W2, hidden, b), the parts with
        parameters behind them; other heads: both the same."""
        f = self._stream_factors("actor", obs, grad=True)
        pi = _Factors(f.h.detach(), f.emb, f.bias)
        if not self.actor.encodes_features:
            return f.h, pi, pi
        k = self.cfg.embed_dim
        return f.h, pi, _Factors(pi.h[:, :k], pi.emb[:, :k], self.actor.bias.detach())

    def _actor_step(self, b: dict[str, torch.Tensor], alpha: float,
                    ws: _Workspace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """loss = mean_s sum_a pi(a|s) [alpha log pi(a|s) - min_j Q_j(s, a)] over legal a, with Q from the
        just-updated critics (no gradient); returns (loss, per-state entropy, grad norm). The gradient with
        respect to the (B, n) logits is formed block by block from the stored pass and multiplied into h and E
        by hand (:func:`_policy_gradient`), then autograd takes it through the trunk and the encoder."""
        obs = b["obs"]
        h, pi_stream, pi = self._actor_factors(obs)
        with torch.no_grad():
            st = _soft_stream(pi_stream, self._stream_factors("q1", obs), self._stream_factors("q2", obs),
                              b["mask"], alpha, ws, "grad")
            loss = (-st.mean_w - alpha * st.log_z).mean()
            entropy = _entropy(st, b["n_legal"])
            d_h, d_emb, d_bias = _policy_gradient(pi, st, ws, 1.0 / obs.shape[0],
                                                  self._buffer("actor.d_emb", *pi.emb.shape))
            self._add_imitation(pi, b, d_h, d_emb, d_bias)
        return loss, entropy, self._apply_actor_gradient(h, d_h, pi.emb, d_emb, d_bias)

    def _actor_step_sampled(self, b: dict[str, torch.Tensor], alpha: float,
                            ws: _Workspace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`_actor_step` with the gradient estimated from ``policy_samples`` draws per state.

        One stream over the actor's logits gives log Z, the exact entropy and per-block cumulative sums; K
        actions per state are drawn from pi (:func:`_sample_actions`); Q1, Q2 and the logits are evaluated at
        those actions only; the gradient with respect to the logits is the unbiased, sparse estimate of
        :func:`_sampled_logit_grad`, scattered into h, E and the bias. The returned loss is
        -alpha H(s) - mean_j min_j Q_j(s, a_j), averaged over states (its entropy part exact, its Q part an
        unbiased estimate)."""
        obs = b["obs"]
        bsz = obs.shape[0]
        h, pi_stream, pi = self._actor_factors(obs)
        with torch.no_grad():
            st = _soft_stream(pi_stream, None, None, b["mask"], alpha, ws, "sample")
            actions = _sample_actions(st, ws, self.cfg.policy_samples, self._policy_generator)
            flat = actions.reshape(-1)
            emb_a = pi.emb.index_select(0, flat).view(*actions.shape, -1)  # (B, K, k)
            z_a = torch.linalg.vecdot(emb_a, pi.h[:, None, :]) + pi.bias.index_select(0, flat).view(actions.shape)
            q_a = torch.minimum(self.q1.at_many(self.q1.state_factor(obs), actions),
                                self.q2.at_many(self.q2.state_factor(obs), actions))
            coef = _sampled_logit_grad(alpha * (z_a - st.log_z[:, None]) - q_a, 1.0 / bsz)
            entropy = _entropy(st, b["n_legal"])
            loss = (-alpha * entropy - q_a.mean(1)).mean()
            d_h = torch.bmm(coef[:, None, :], emb_a)[:, 0]
            d_emb = pi.emb.new_zeros(pi.emb.shape).index_add_(
                0, flat, (coef[:, :, None] * pi.h[:, None, :]).flatten(0, 1))
            d_bias = torch.zeros_like(pi.bias).index_add_(0, flat, coef.reshape(-1))
            self._add_imitation(pi, b, d_h, d_emb, d_bias)
        return loss, entropy, self._apply_actor_gradient(h, d_h, pi.emb, d_emb, d_bias)

    def _alpha_step(self, entropy: torch.Tensor, target_entropy: torch.Tensor) -> torch.Tensor:
        """d loss / d log_alpha = H(s) - target(s): alpha falls while the entropy is above its target and
        rises while it is below."""
        loss = (self.log_alpha * (entropy - target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([self.log_alpha], self.cfg.grad_clip)
        self.alpha_opt.step()
        return loss.detach()

    def _batch(self, obs: Any, action: Any, reward: Any, next_obs: Any, done: Any, weight: Any, mask: Any,
               next_mask: Any, steps: Any, imitation: Any = None) -> dict[str, torch.Tensor]:
        """Checks an update's arguments and returns them as tensors on the agent's device (no copy on a CPU
        where possible); the masks packed by :func:`_pack_mask`."""
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
        packed, next_packed = _pack_mask(m), _pack_mask(nm)
        n_next = _count_legal(next_packed, nm)
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
        iw = np.zeros(bsz, np.float32) if imitation is None else _float_array(imitation, "imitation", (bsz,))
        if (iw < 0).any():
            raise ValueError(f"imitation has a negative entry ({float(iw.min())}): expected values in [0, inf)")
        rows = np.flatnonzero(iw > 0)
        arrays = {"obs": o, "next_obs": no, "reward": r, "weight": w, "done": d, "mask": packed,
                  "next_mask": next_packed, "action": a, "steps": k, "n_legal": _count_legal(packed, m),
                  "imit_rows": rows.astype(np.int64), "imit_w": iw[rows], "imit_mask": m[rows]}
        return {name: torch.from_numpy(x).to(self.device) for name, x in arrays.items()}

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
        }
        for name, mod in self._modules().items():
            state[name] = mod.state_dict()
        for name, opt in self._optimisers().items():
            state[name] = opt.state_dict()
        return copy.deepcopy(_to_cpu(state))

    def policy_state(self) -> dict[str, np.ndarray]:
        """The actor's parameters and buffers as numpy copies: what acting needs, for an agent that only acts (a
        rollout worker). No critics, targets, optimiser moments or generator: one network of five, and nothing a
        receiver could train with or would have to keep in step."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.actor.state_dict().items()}

    def load_policy_state(self, state: dict[str, np.ndarray]) -> None:
        """Put :meth:`policy_state` of an agent with the same obs_dim, n_actions and network shape into this one's
        actor (its critics, optimisers and exploration generator are left as they are).

        Raises
        ------
        ValueError
            Naming the missing or unexpected keys, or a key whose shape differs from this actor's.
        """
        mine = self.actor.state_dict()
        missing, unexpected = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
        if missing or unexpected:
            raise ValueError(f"policy state does not fit this actor: missing keys {missing}, unexpected keys "
                             f"{unexpected}")
        for key, value in state.items():
            if tuple(np.shape(value)) != tuple(mine[key].shape):
                raise ValueError(f"policy state[{key!r}] has shape {tuple(np.shape(value))}, this actor's is "
                                 f"{tuple(mine[key].shape)}")
        self.actor.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in state.items()})
        self._factor_cache.clear()

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
        for name in ("hidden", "head", "embed_dim"):
            mine, theirs = getattr(self.cfg, name), cfg.get(name)
            if (tuple(theirs) if name == "hidden" and theirs is not None else theirs) != (
                    tuple(mine) if name == "hidden" else mine):
                raise ValueError(f"state['config']['{name}'] = {theirs!r} but this agent has {mine!r}")
        state = copy.deepcopy(_to_cpu(state))
        for name, mod in self._modules().items():
            mod.load_state_dict(state[name])  # copies into the parameters, on their device
        for name, opt in self._optimisers().items():
            opt.load_state_dict(state[name])  # torch moves the moments to each parameter's device
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"], dtype=_DTYPE))
        self._generator.set_state(tuple(state["generator"]))
        if "policy_generator" in state:  # absent from states written before SACConfig.policy_samples
            self._policy_generator.set_state(state["policy_generator"])
        else:
            self._policy_generator.manual_seed(self.seed ^ _POLICY_STREAM)
        self._n_updates = int(state["n_updates"])
        self._factor_cache.clear()


# ------------------------------------------------------------------------------------------- helpers


def _to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor inside (dicts, lists, tuples) detached and on the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return type(obj)((k, _to_cpu(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


class _Factors(NamedTuple):
    """One network's scores as factors, detached: scores(s, a) = h[s] . emb[a] + bias[a]."""

    h: torch.Tensor
    """(B, k) state factor."""
    emb: torch.Tensor
    """(n, k) action factor (row-major; the cached E, or the linear head's weight)."""
    bias: torch.Tensor | None
    """(n,) per-action bias, or None where it is a column of ``emb`` (against a column of ones in ``h``)."""


class _Workspace:
    """Buffers of the streamed passes for batch size ``bsz``, kept between updates (a fresh (n, B) tensor per
    update costs ~70 ms of page faults at n = 67,105, B = 256).

    ``rows`` actions per block, rounded up to a multiple of ``_FAN**2``: by default about ``_BLOCK_FLOATS / bsz``
    on a CPU, all n on other devices. ``z``, ``q``, ``w``, ``p``, ``keep``, ``neg`` hold one (rows, B) block and
    ``bits`` its unpacked mask; ``p_all`` (blocks * rows, B, zero past n) keeps the actor pass's 2^(z2 - M) and
    ``w_all`` (n, B) its w, for the gradient sweep or the sampler; ``sums_t`` holds the sampler's sums over groups
    of ``_FAN`` and ``_FAN**2`` actions, (B, groups)."""

    def __init__(self, n: int, bsz: int, device: torch.device, rows: int | None = None) -> None:
        self.bsz = bsz
        if rows is None:
            rows = _BLOCK_FLOATS // bsz if device.type == "cpu" else n
        group = _FAN * _FAN
        self.rows = max(group, min(-(-n // group), -(-rows // group)) * group)
        self.n_blocks = -(-n // self.rows)
        f = {"dtype": _DTYPE, "device": device}
        self.z, self.q, self.w, self.p, self.keep, self.neg = (torch.empty(self.rows, bsz, **f) for _ in range(6))
        self.bits = torch.empty(self.rows // 8, 8, bsz, dtype=torch.uint8, device=device)
        self.shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=device)[None, :, None]
        self.p_all = torch.zeros(self.n_blocks * self.rows, bsz, **f)
        self.w_all = torch.empty(n, bsz, **f)
        self.sums = [torch.empty(self.rows // _FAN, bsz, **f), torch.empty(self.rows // _FAN**2, bsz, **f)]
        self.sums_t = [torch.empty(bsz, self.n_blocks * self.rows // _FAN, **f),
                       torch.empty(bsz, self.n_blocks * self.rows // _FAN**2, **f)]

    def blocks(self, n: int) -> list[tuple[int, int]]:
        return [(lo, min(lo + self.rows, n)) for lo in range(0, n, self.rows)]

    def legal_block(self, packed: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """(hi - lo, B) float32 0/1 legality of actions lo..hi-1 (in ``keep``), from the transposed packed mask."""
        r8 = -(-(hi - lo) // 8)
        bits = self.bits[:r8]
        torch.bitwise_right_shift(packed[lo // 8:lo // 8 + r8, None, :], self.shifts, out=bits).bitwise_and_(1)
        keep = self.keep[:hi - lo]
        keep.copy_(bits.view(-1, self.bsz)[:hi - lo])
        return keep


def _pack_mask(mask: np.ndarray) -> np.ndarray:
    """(ceil(n / 8), B) uint8: the (B, n) bool mask packed along the actions (big-endian bits) and transposed.

    Streaming over blocks of actions needs the mask as (actions, B); transposing the bytes of a (256, 67,105)
    bool mask takes longer than packing it to 2 MB, transposing that and unpacking each block with two
    vectorised passes (:meth:`_Workspace.legal_block`; measured ~2.5x faster)."""
    return np.ascontiguousarray(np.packbits(mask, axis=1).T)


def _mask_logits_(z: torch.Tensor, keep: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """``z`` with ``finfo.min`` where ``keep`` (0/1 float, same shape) is 0, in place; ``scratch`` is overwritten.

    ``z + (keep - 1) * finfo.max``: z - finfo.max rounds to exactly finfo.min for any |z| < 1e31, never to -inf,
    and keep = 1 adds exactly 0. Two vectorised passes (a ``masked_fill_`` or ``torch.where`` with a bool mask is
    several times slower on a CPU)."""
    return z.add_(torch.sub(keep, 1.0, out=scratch), alpha=-_MASKED)


def _count_legal(packed: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B,) int64 legal actions per row: a popcount of the packed mask (numpy >= 2.0), else a count of ``mask``."""
    popcount = getattr(np, "bitwise_count", None)
    if popcount is None:  # pragma: no cover - numpy < 2.0
        return np.count_nonzero(mask, axis=1).astype(np.int64)
    return popcount(packed).sum(0, dtype=np.int64)


class _Stream(NamedTuple):
    """Per-state results of :func:`_soft_stream`, each (B,) unless noted. The stream works in base 2 (logits
    times log2(e), ``exp2``: about twice as fast as ``exp`` on a CPU, measured); fields named ``*2`` are in
    those units."""

    log_z: torch.Tensor
    """log sum_a legal exp z(a) (a huge negative number where no action is legal)."""
    mean_w: torch.Tensor
    """E_pi[w] with w = min_j Q_j - alpha z (zeros in mode "sample", which has no Q)."""
    mean_z: torch.Tensor
    """E_pi[z] (modes "grad" and "sample"; zeros in mode "value")."""
    any_legal: torch.Tensor
    """bool: the state has at least one legal action."""
    max2: torch.Tensor
    """The final running maximum M of the legal logits, base 2."""
    total: torch.Tensor
    """S = sum_a legal 2^(z2(a) - M) (1 where no action is legal)."""
    block_max2: list[torch.Tensor]
    """Modes "grad" and "sample": the running maximum M_j after each block (base 2); block j's stored values
    are relative to it (times 2^(M_j - M) relative to M)."""
    block_sum: list[torch.Tensor]
    """Mode "sample": sum over block j of 2^(z2 - M_j) at legal actions."""


_LOG2E = 1.0 / math.log(2.0)


def _scores_block(emb: torch.Tensor, h: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """``out`` (rows, B) = emb @ h.T (+ bias[:, None]). Without a bias (folded into emb and h as a column) the
    product writes ``out`` directly; ``addmm`` with a bias first copies the broadcast bias into it, a pass over
    the block that cost ~15% of a product (measured)."""
    if bias is None:
        return torch.mm(emb, h.t(), out=out)
    return torch.addmm(bias[:, None], emb, h.t(), out=out)


def _soft_stream(pi: _Factors, q1: _Factors | None, q2: _Factors | None, packed: torch.Tensor, alpha: float,
                 ws: _Workspace, mode: str, *, legal_max: bool = False) -> _Stream:
    """Streams the policy's softmax and the soft value over blocks of actions (see the module docstring).

    Per block: the products ``E_blk @ h.T + bias`` (the policy's scaled by log2(e): z2), w = min(Q1, Q2) -
    alpha z, the legal logits' maximum, p = keep * 2^max(z2 - M, -126) with M the running maximum (earlier
    sums are rescaled by 2^(M_old - M) when it grows), then S += sum p and A += sum p w. ``packed`` is the
    legality mask from :func:`_pack_mask`; a state with no legal action gets ``any_legal`` False (its other
    values are placeholders). ``mode``:

    * "value": the soft value only (the critic target);
    * "grad": also E_pi[z], and the blocks' p and w kept in ``ws.p_all`` / ``ws.w_all`` for
      :func:`_policy_gradient`;
    * "sample": no critics (``q1``, ``q2`` None); E_pi[z], and the blocks' p in ``ws.p_all`` with their group
      sums in ``ws.sums_t``, for :func:`_sample_actions`.

    M is the running maximum over all actions, legal or not: any M at or above the legal maximum gives the same
    softmax, and skipping the masking of z (two passes of :func:`_mask_logits_` per block) saves ~10% of a pass.
    Only the clamp at 2^-126 sees the difference: it is exact while the legal terms are not negligible against
    2^-126 * n, i.e. while S = sum of the legal 2^(z2 - M) stays above ``_RAW_MAX_FLOOR``. A state below it (its
    illegal logits over ~64 base-2 units above its legal ones) makes the stream rerun with ``legal_max`` (z
    masked to finfo.min first, M over the legal actions only), the previous method."""
    n = pi.emb.shape[0]
    bsz = pi.h.shape[0]
    dev = pi.h.device
    h2, bias2 = pi.h * _LOG2E, None if pi.bias is None else pi.bias * _LOG2E
    alpha2 = alpha / _LOG2E  # w = m - alpha z = m - alpha ln(2) z2
    run_max = torch.full((bsz,), _MASKED, dtype=_DTYPE, device=dev)
    s, a, d = (torch.zeros(bsz, dtype=_DTYPE, device=dev) for _ in range(3))
    maxima: list[torch.Tensor] = []
    sums: list[torch.Tensor] = []
    for lo, hi in ws.blocks(n):
        r = hi - lo
        z = ws.z[:r]
        w = ws.w_all[lo:hi] if mode == "grad" else ws.w[:r]
        p = ws.p[:r] if mode == "value" else ws.p_all[lo:hi]
        _scores_block(pi.emb[lo:hi], h2, None if bias2 is None else bias2[lo:hi], z)
        if q1 is not None and q2 is not None:
            q = ws.q[:r]
            _scores_block(q1.emb[lo:hi], q1.h, None if q1.bias is None else q1.bias[lo:hi], w)
            _scores_block(q2.emb[lo:hi], q2.h, None if q2.bias is None else q2.bias[lo:hi], q)
            torch.minimum(w, q, out=w).sub_(z, alpha=alpha2)  # min Q - alpha z: finite everywhere
        keep = ws.legal_block(packed, lo, hi)
        if legal_max:
            _mask_logits_(z, keep, ws.neg[:r])
        new_max = torch.maximum(run_max, z.amax(0))
        rescale = torch.exp2(run_max - new_max)
        s.mul_(rescale)
        a.mul_(rescale)
        d.mul_(rescale)
        run_max = new_max
        torch.sub(z, run_max, out=p).clamp_min_(_EXP2_FLOOR).exp2_().mul_(keep)  # exactly 0 where illegal
        if mode == "sample":  # group sums, stored (B, groups) so that a draw reads its group's contiguously
            fine, coarse = ws.sums
            torch.sum(ws.p_all[lo:lo + ws.rows].view(-1, _FAN, bsz), 1, out=fine)
            torch.sum(fine.view(-1, _FAN, bsz), 1, out=coarse)
            ws.sums_t[0][:, lo // _FAN:(lo + ws.rows) // _FAN].copy_(fine.t())
            ws.sums_t[1][:, lo // _FAN**2:(lo + ws.rows) // _FAN**2].copy_(coarse.t())
            block_sum = coarse.sum(0)
            sums.append(block_sum)
        else:
            block_sum = p.sum(0)
        s.add_(block_sum)
        if mode == "value":  # A += sum p w
            a.add_(w.mul_(p).sum(0))
        elif mode == "grad":  # the same, keeping w for the gradient
            a.add_(torch.mul(w, p, out=ws.w[:r]).sum(0))
        if mode != "value":  # E_pi[z] needs sum p z2: 0 times a finite z2 where illegal
            d.add_(z.mul_(p).sum(0))
            maxima.append(run_max)
    any_legal = s > 0
    if not legal_max and bool((any_legal & (s < _RAW_MAX_FLOOR)).any()):
        return _soft_stream(pi, q1, q2, packed, alpha, ws, mode, legal_max=True)
    total = torch.where(any_legal, s, 1.0)
    return _Stream(log_z=(run_max + total.log2()) / _LOG2E, mean_w=a / total, mean_z=d / total / _LOG2E,
                   any_legal=any_legal, max2=run_max, total=total, block_max2=maxima, block_sum=sums)


def _entropy(st: _Stream, n_legal: torch.Tensor) -> torch.Tensor:
    """(B,) the policy's entropy log Z - E_pi[z] per state, exactly 0 where a single action is legal (the stream's
    maximum includes illegal actions, so log Z and E_pi[z] of a lone legal action differ by rounding), so that
    such a state leaves the temperature unchanged."""
    return torch.where(n_legal > 1, st.log_z - st.mean_z, 0.0)


def _first_above(cum: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For rows of cumulative sums ``cum`` (..., m) and values ``u`` (..., j), the first index i of each value's
    row with cum[i] > u, and u minus the cumulative sum before i. ``u`` is first clamped below the row's total
    (rounding can put it at or above it), so i always exists and has positive mass: an entry of zero mass
    repeats its predecessor's sum and is never "the first above"."""
    total = cum[..., -1:]
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    i = torch.searchsorted(cum, u, right=True)
    before = torch.where(i > 0, cum.gather(-1, (i - 1).clamp_min(0)), 0.0)
    return i, u - before


def _sample_actions(st: _Stream, ws: _Workspace, k: int, generator: torch.Generator) -> torch.Tensor:
    """(B, k) int64: k independent draws per state from pi (legal actions only), after a "sample" stream.

    Inverse CDF down a tree, vectorised over the B * k draws: a block by the blocks' masses (rescaled to the
    final maximum), then a group of ``_FAN**2`` actions, a group of ``_FAN`` and an action, each by the sums
    one level down; a draw reads a few dozen numbers. Illegal and padding actions have zero
    mass and are never drawn (:func:`_first_above`). Uniforms come from ``generator`` (CPU), then move to the
    device."""
    dev = st.max2.device
    bsz = st.max2.shape[0]
    scale = torch.exp2(torch.stack(st.block_max2) - st.max2).t().contiguous()  # (B, blocks)
    cum = torch.cumsum(torch.stack(st.block_sum).t() * scale, 1)  # (B, blocks)
    u = torch.rand(bsz, k, generator=generator, dtype=_DTYPE).to(dev) * cum[:, -1:]
    block, u = _first_above(cum, u)
    u = (u / scale.gather(1, block)).unsqueeze(-1)  # in the block's own units, 2^(z2 - M_j)
    col = torch.arange(bsz, device=dev)[:, None, None]
    fine_t, coarse_t = ws.sums_t
    per_block = ws.rows // _FAN**2
    fan = torch.arange(_FAN, device=dev)
    first = (block * per_block).unsqueeze(-1)  # (B, k, 1): the block's first coarse group
    g, u = _first_above(torch.cumsum(torch.take(coarse_t, col * coarse_t.shape[1] + first
                                                + torch.arange(per_block, device=dev)), -1), u)
    first = (first + g) * _FAN  # the chosen coarse group's first fine group
    g, u = _first_above(torch.cumsum(torch.take(fine_t, col * fine_t.shape[1] + first + fan), -1), u)
    first = (first + g) * _FAN  # the chosen fine group's first action
    i, _ = _first_above(torch.cumsum(torch.take(ws.p_all, (first + fan) * bsz + col), -1), u)
    return (first + i).squeeze(-1)


def _sampled_logit_grad(f: torch.Tensor, scale: float) -> torch.Tensor:
    """(B, k) coefficients c of the sampled policy gradient: d loss / d z(s, a) is estimated by
    ``sum_j c[s, j] [a_j = a]`` for draws a_j ~ pi(.|s), where f = alpha log pi(a_j) - min_j Q_j(s, a_j).

    This is the score-function identity ``grad E_pi[f] = E_pi[f grad log pi]`` (the derivative of f itself
    through log pi has expectation zero) with a leave-one-out baseline (Kool et al. 2019, "Buy 4 REINFORCE
    samples, get a baseline for free!"): (f_j - mean of the other k - 1) / k = (f_j - mean f) / (k - 1). The
    baseline does not depend on a_j, so the estimate stays unbiased, and it sums to zero over j, so the
    ``- pi(a)`` part of ``grad log pi`` cancels and the estimate touches only the drawn actions."""
    k = f.shape[1]
    return (f - f.mean(1, keepdim=True)).mul_(scale / (k - 1))


def _policy_gradient(pi: _Factors, st: _Stream, ws: _Workspace, scale: float,
                     d_emb: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``scale * sum_s loss(s)`` with respect to the actor's h (B, k), E (n, k) and bias (n,), from
    the blocks a "grad" :func:`_soft_stream` kept.

    d loss(s) / d z(s, a) = pi(a|s) (t(a) - sum_b pi(b|s) t(b)) with t = alpha log pi - min Q = -w - alpha log Z,
    i.e. pi(a|s) (E_pi[w] - w(a)) (the log-derivative term sums to zero); 0 at illegal actions, where the stored
    p is 0. Block j's pi is p_j 2^(M_j - M) / S (base 2, see :class:`_Stream`), a per-state factor that is
    folded into h (for E's gradient) and into the (B, k) partial products (for h's), so each block costs two
    elementwise passes and two products: ``g_j @ h`` and ``g_j.T @ E_j``. E's gradient is written into ``d_emb``
    when given (an (n, k) buffer), else into a new tensor."""
    n, k = pi.emb.shape
    bsz = pi.h.shape[0]
    d_h = torch.zeros(bsz, k, dtype=_DTYPE, device=pi.h.device)
    if d_emb is None:
        d_emb = torch.empty(n, k, dtype=_DTYPE, device=pi.h.device)
    d_bias = torch.empty(n, dtype=_DTYPE, device=pi.h.device)
    part = torch.empty(bsz, k, dtype=_DTYPE, device=pi.h.device)
    c = st.mean_w
    for (lo, hi), m_j in zip(ws.blocks(n), st.block_max2):
        coef = torch.exp2(m_j - st.max2).mul_(-scale).div_(st.total)  # (B,): -scale pi / p_j
        g = ws.w_all[lo:hi].sub_(c).mul_(ws.p_all[lo:hi])  # p_j (w - E_pi[w]); coef * g is the gradient
        torch.mm(g, pi.h * coef[:, None], out=d_emb[lo:hi])
        torch.mv(g, coef, out=d_bias[lo:hi])
        torch.mm(g.t(), pi.emb[lo:hi], out=part)
        d_h.addcmul_(part, coef[:, None])
    return d_h, d_emb, d_bias


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
