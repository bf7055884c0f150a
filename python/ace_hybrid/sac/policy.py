"""SACPolicy: the acting half of discrete SAC -- the actor network, acting, and the policy state a rollout worker
receives. :class:`~ace_hybrid.sac.agent.DiscreteSAC` adds the critics, targets, optimisers and the update.

A rollout worker acts with a ``SACPolicy`` alone: one network of five, and no optimiser (the first Adam a process
builds imports ``torch._dynamo``, about 1.5 s at start-up, measured).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ace_hybrid.config import SACConfig
from ace_hybrid.sac.batch import float_array, mask_array
from ace_hybrid.sac.networks import ScoreNet, SparseFeatures
from ace_hybrid.sac.stream import DTYPE, MASKED, Factors
from ace_hybrid.sampling import SamplingGenerator, masked_argmax, masked_sample

__all__ = ["SACPolicy"]


def _resolve_device(name: str) -> torch.device:
    """The torch device of ``SACConfig.device`` ("cpu", "cuda" or "auto")."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("SACConfig.device = 'cuda' but torch.cuda.is_available() is False (a CPU-only torch "
                         "build or no visible GPU): expected one of 'cpu', 'auto'")
    return torch.device(name)


class SACPolicy:
    """The policy of discrete SAC over ``n_actions`` masked actions, without what learning needs (see the module
    docstring). Its actor is the one a :class:`~ace_hybrid.sac.agent.DiscreteSAC` of the same arguments starts
    with, parameter for parameter.

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
        self._action_features = features  # what a policy of the same shape is built from (DiscreteSAC.deployed)
        self.device = _resolve_device(cfg.device)
        self.obs_dim, self.n_actions, self.seed = int(obs_dim), int(n_actions), int(seed)
        self._features = None if features is None else SparseFeatures(features, self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.actor = ScoreNet(self.obs_dim, self.n_actions, cfg, self._features)
            self._init_rng = torch.get_rng_state()  # after the actor's draws: DiscreteSAC's critics go on from here
        if cfg.prior_action >= self.n_actions:
            raise ValueError(f"SACConfig.prior_action = {cfg.prior_action} out of range [0, {self.n_actions})")
        self.actor.to(self.device)
        if cfg.prior_prob > 0.0 and self.n_actions > 1:
            # Initial logits are ~0: this bias gives prior_action probability prior_prob against the rest.
            with torch.no_grad():
                self.actor.action_bias[cfg.prior_action] = math.log(
                    cfg.prior_prob / (1.0 - cfg.prior_prob) * (self.n_actions - 1))
        self._generator = SamplingGenerator(self.seed)
        self._factor_cache: dict[str, list[Any]] = {}  # name -> [key, E, bias, contiguous E.T or None]
        self._buffers: dict[str, torch.Tensor] = {}  # (n, k) buffers kept between updates (:meth:`_buffer`)

    # ---------------------------------------------------------------------------------- acting

    def _buffer(self, name: str, rows: int, cols: int) -> torch.Tensor:
        """A (rows, cols) float32 buffer kept between updates: a fresh (n, k) tensor per use is a fresh 17 MB
        allocation at n = 67,105 whose page faults cost more than the arithmetic that fills it (measured)."""
        buf = self._buffers.get(name)
        if buf is None or buf.shape != (rows, cols):
            buf = self._buffers[name] = torch.empty(rows, cols, dtype=DTYPE, device=self.device)
        return buf

    def _encoder_buffer(self, name: str) -> torch.Tensor | None:
        """(n, k + 2) buffer of network ``name``'s feature encoder (:meth:`ScoreNet.action_factors_into`), None
        for other heads."""
        if not self.actor.encodes_features:
            return None
        return self._buffer(f"{name}.hidden", self.n_actions, self.cfg.embed_dim + 2)

    def _factors(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(E, bias) of network ``name``, the action half of :meth:`ScoreNet.action_factors_into`: (n, k') and
        (n,), without gradient; :meth:`_stream_factors` gives the matching state half. The actor's scores lack a
        per-state constant (``offset=False``), which its softmax ignores; the critics' are exact.

        Cached per parameter version: the key is the in-place version counters of the network's parameters,
        which every optimiser step, Polyak update, ``load_state_dict`` or in-place edit advances (edits through
        ``.data`` bypass the counter: call ``_factor_cache.clear()`` after those). One encoder pass per parameter
        version serves acting, both passes of the next update and (the actor's) that update's backward pass,
        which :meth:`ScoreNet.backward_action_factors` takes by hand from the kept hidden layer. The feature
        encoder writes into buffers kept between versions (:meth:`_buffer`), so a returned E is valid until the
        network's parameters change."""
        net = getattr(self, name)
        key = tuple(p._version for p in net.parameters())
        hit = self._factor_cache.get(name)
        if hit is None or hit[0] != key:
            emb, bias = net.action_factors_into(self._encoder_buffer(name))
            hit = [key, emb, bias]
            self._factor_cache[name] = hit
        return hit[1], hit[2]

    def _scores(self, name: str, obs: torch.Tensor) -> torch.Tensor:
        """(B, n) scores of network ``name`` without gradient, for acting (action factors from the cache); the
        actor's up to a per-state constant (:meth:`_factors`), which sampling, argmax and softmax ignore.

        The product runs over the row-major E as it is: with torch 2.13 on one thread it is as fast as over a
        contiguous copy of E.T (0.69 vs 0.73 ms at n = 67,105, k = 66, measured), and making that copy cost 3.4 ms
        per parameter version, i.e. at almost every decision in training."""
        emb, bias = self._factors(name)
        with torch.no_grad():
            h = self._stream_factors(name, obs).h
            return torch.mm(h, emb.t()) if bias is None else torch.addmm(bias, h, emb.t())

    def _one_state(self, obs: np.ndarray, mask: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        o = float_array(obs, "obs", (self.obs_dim,))
        m = mask_array(mask, "mask", (self.n_actions,))
        if not m.any():
            raise ValueError("mask has no legal action: at least one entry must be True")
        return torch.from_numpy(o).to(self.device).unsqueeze(0), m

    def act(self, obs: np.ndarray, mask: np.ndarray, *, deterministic: bool = False,
            generator: SamplingGenerator | None = None) -> int:
        """One legal action for one state: sampled from the policy, or its most likely legal action.

        Parameters
        ----------
        obs : numpy.ndarray, (D,) float32
        mask : numpy.ndarray, (n,) bool
            Legality; at least one True.
        deterministic : bool
            True: the legal action with the largest logit (ties: lowest index). False: a draw from the masked
            softmax with ``generator``.
        generator : SamplingGenerator, optional
            Where the draw comes from; None: the agent's own generator (part of :meth:`state_dict`). The training
            loop passes one seeded per episode, so that an episode's draws do not depend on which worker plays it.

        Returns
        -------
        int
            An index in [0, n) with ``mask[index]`` True.
        """
        o, m = self._one_state(obs, mask)
        logits = self._scores("actor", o)[0].cpu().numpy()
        if deterministic:
            return int(masked_argmax(logits, m))
        return int(masked_sample(logits, m, generator=generator or self._generator).actions)

    def policy_probs(self, obs: np.ndarray, mask: np.ndarray) -> npt.NDArray[np.float32]:
        """(n,) float32: pi(a | obs) over the legal actions (exactly 0 where ``mask`` is False)."""
        o, m = self._one_state(obs, mask)
        logits = self._scores("actor", o)[0]
        p = torch.softmax(logits.masked_fill(~torch.from_numpy(m).to(self.device), MASKED), 0)
        return p.cpu().numpy()

    def _stream_factors(self, name: str, obs: torch.Tensor, *, grad: bool = False) -> Factors:
        """Network ``name``'s factors of the scores at ``obs``; ``h`` with autograd when ``grad`` (the others never)."""
        emb, bias = self._factors(name)
        net = getattr(self, name)
        with torch.set_grad_enabled(grad):
            return Factors(net.stream_factor(net.state_factor(obs), offset=name != "actor"), emb, bias)

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
