"""The score networks of :mod:`ace_hybrid.sac`: an MLP trunk and a linear or low-rank head over the actions, with
the sparse action-feature encoder (see docs/sac.md, "The low-rank head")."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ace_hybrid.config import SACConfig

__all__ = ["ScoreNet", "SparseFeatures"]


def _mlp(sizes: list[int], layer_norm: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), *([nn.LayerNorm(b)] if layer_norm else []), nn.ReLU()]
    return nn.Sequential(*layers)


class SparseFeatures:
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
    def forward(ctx: Any, weight: torch.Tensor, feats: SparseFeatures) -> torch.Tensor:  # type: ignore[override]
        ctx.feats = feats
        return F.embedding_bag(feats.idx, weight, per_sample_weights=feats.val, mode="sum")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return torch.sparse.mm(ctx.feats.phi_t, grad.contiguous()), None


class _ActionEncoder(nn.Module):
    """e(a): (m, embed_dim) embeddings of the given actions (all actions when ``actions`` is None)."""

    def __init__(self, n_actions: int, embed_dim: int, feats: SparseFeatures | None) -> None:
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
        (:meth:`ScoreNet.stream_factor`), a (B, k) x (k, k) product instead of an (n, k) x (k, k) one."""
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


class ScoreNet(nn.Module):
    """obs -> one score per action (policy logits or Q values), with a linear or a low-rank head.

    Both heads are ``scores = h @ E.T + bias`` for some (B, k) ``h`` and (n, k) ``E`` (:meth:`state_factor`,
    :meth:`action_factors`), which lets the update form the (B, n) scores block by block and back-propagate
    through ``h`` and ``E`` by hand.
    """

    def __init__(self, obs_dim: int, n_actions: int, cfg: SACConfig, feats: SparseFeatures | None, *,
                 layer_norm: bool = False) -> None:
        super().__init__()
        self.trunk = _mlp([obs_dim, *cfg.hidden], layer_norm)  # layer_norm: a LayerNorm before each ReLU
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

