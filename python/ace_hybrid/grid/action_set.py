"""The actions a policy chooses among: the whole catalog, or a subset selected from data.

The L2RPN winners act over a few hundred actions chosen from the full space (PARL 500, the NeurIPS 2020 runner-up
208, the IDF 2023 winner 50-909), not over all 67K; ACE's paper acts over the whole catalog. ``env.action_set``
picks either:

* ``"full"``: every catalog action (:class:`~ace_hybrid.grid.catalog.ActionCatalog`);
* ``"tutor:N"``: do nothing, every line reconnection, and the N bus-assignment or line actions that a simulating
  tutor found best most often in danger states of the *training* episodes (:func:`select_by_tutor`), cached
  beside the catalog.

An :class:`ActionSet` speaks the catalog's language (``len``, ``action``, ``describe``, ``legal_mask``,
``shortlist``, ``features``, ``mask_batch``) in its own indices, so the policy, the replay and the LLM actor work in
set indices; :meth:`ActionSet.to_catalog` maps back. Legality is the C++ masker's verdict over the whole catalog,
restricted to the set.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ace_hybrid.config import Config, parse_action_set
from ace_hybrid.files import atomic_write, cache_root
from ace_hybrid.grid.catalog import RECONNECT, ActionCatalog

__all__ = ["ActionSet", "action_set_indices", "select_by_tutor"]

log = logging.getLogger(__name__)


class ActionSet:
    """A subset of an :class:`ActionCatalog`, indexed 0..n-1 (see the module docstring).

    Parameters
    ----------
    catalog
        The grid's catalog.
    indices
        Catalog indices of the set, do nothing (0) first; None for the whole catalog (no copy, no remapping).
    skip_no_ops
        Mask, besides the illegal actions, the line actions that would leave the grid as it is: reconnecting a
        connected line, disconnecting a disconnected one (``env.mask_no_ops``). A set holds every line
        reconnection, so without it a grid whose lines are all connected offers one copy of do nothing per line.
    """

    def __init__(self, catalog: ActionCatalog, indices: Sequence[int] | None = None, *,
                 skip_no_ops: bool = False) -> None:
        self.catalog = catalog
        if indices is None:
            self.indices = None
        else:
            idx = np.asarray(list(dict.fromkeys(int(i) for i in indices)), dtype=np.int64)
            if idx.size == 0 or idx[0] != 0:
                raise ValueError(f"action set indices must start with 0 (do nothing); got {idx[:5].tolist()}...")
            if idx.min() < 0 or idx.max() >= len(catalog):
                raise ValueError(f"action set index {int(idx.max()) if idx.max() >= len(catalog) else int(idx.min())}"
                                 f" out of range [0, {len(catalog)})")
            self.indices = idx
        self._position = None if self.indices is None else {int(c): i for i, c in enumerate(self.indices)}
        self.skip_no_ops = bool(skip_no_ops)
        # The set's line actions: catalog index 1 + 2l reconnects line l, 2 + 2l disconnects it.
        cat = np.arange(len(catalog)) if self.indices is None else self.indices
        line = (cat >= 1) & (cat < 1 + 2 * catalog.n_line)
        self._line_positions = np.flatnonzero(line)
        self._line_of = (cat[line] - 1) // 2
        self._reconnects = (cat[line] - 1) % 2 == 0

    @property
    def is_full(self) -> bool:
        return self.indices is None

    def __len__(self) -> int:
        return len(self.catalog) if self.indices is None else int(self.indices.size)

    def to_catalog(self, i: int) -> int:
        """The catalog index of set action ``i``."""
        if self.indices is None:
            return int(i)
        if not 0 <= i < self.indices.size:
            raise IndexError(f"action {i} out of range [0, {self.indices.size})")
        return int(self.indices[i])

    def from_catalog(self, c: int) -> int | None:
        """The set index of catalog action ``c`` (None when it is not in the set)."""
        return int(c) if self._position is None else self._position.get(int(c))

    def action(self, i: int) -> Any:
        return self.catalog.action(self.to_catalog(i))

    def describe(self, i: int) -> str:
        return self.catalog.describe(self.to_catalog(i))

    def legal_mask(self, obs: Any, *, only_changes: bool = False) -> npt.NDArray[np.bool_]:
        mask = self.catalog.legal_mask(obs, only_changes=only_changes)
        mask = mask if self.indices is None else mask[self.indices]
        return self._without_no_ops(mask, np.asarray(obs.line_status, dtype=bool)) if self.skip_no_ops else mask

    def mask_batch(self, line_status: np.ndarray, cooldown_line: np.ndarray,
                   cooldown_sub: np.ndarray) -> npt.NDArray[np.bool_]:
        """(B, n) legal masks from line status and cooldowns (see :class:`~ace_hybrid.masking.LegalityMasker`)."""
        masks = self.catalog.mask_batch(line_status, cooldown_line, cooldown_sub)
        masks = masks if self.indices is None else masks[:, self.indices]
        return self._without_no_ops(masks, np.asarray(line_status, dtype=bool)) if self.skip_no_ops else masks

    def _without_no_ops(self, mask: np.ndarray, status: np.ndarray) -> np.ndarray:
        """``mask`` ((n,) or (B, n)) without the line actions that change nothing under ``status`` ((n_line,) or
        (B, n_line))."""
        connected = status[..., self._line_of]
        mask[..., self._line_positions] &= np.where(self._reconnects, ~connected, connected)
        return mask

    def features(self) -> npt.NDArray[np.int8]:
        feats = self.catalog.features()
        return feats if self.indices is None else feats[self.indices]

    def shortlist(self, obs: Any, k: int) -> npt.NDArray[np.int64]:
        """Up to ``k`` legal, topology-changing set actions: the catalog heuristic's order first, then the rest of the
        set's legal actions in set order."""
        if self.indices is None:
            return self.catalog.shortlist(obs, k)
        if k <= 0:
            raise ValueError(f"k = {k} out of range [1, inf)")
        ranked = [self._position[int(c)] for c in self.catalog.shortlist(obs, max(k, 64)) if int(c) in self._position]
        legal = np.flatnonzero(self.legal_mask(obs, only_changes=True))
        out = list(dict.fromkeys([*ranked, *(int(i) for i in legal if i != 0)]))
        return np.asarray(out[:k], dtype=np.int64)

    def __repr__(self) -> str:
        return f"ActionSet({len(self):,} of {len(self.catalog):,} catalog actions)"


def select_by_tutor(env: Any, catalog: ActionCatalog, n: int, pairs: Sequence[tuple[int, int]], *,
                    threshold: float = 0.9, candidates: int = 64, per_state: int = 3, max_states: int = 400,
                    max_steps: int = 2000, cache: bool = True) -> npt.NDArray[np.int64]:
    """Catalog indices of a ``tutor:n`` action set (do nothing first, then reconnections, then the n most useful).

    The tutor plays do nothing (and the safe rule) on the training ``pairs`` (scenario, seed) and, in each danger
    state, simulates do nothing and ``candidates`` actions of the catalog's heuristic shortlist; the ``per_state``
    actions with the lowest simulated max loading that beat do nothing score a point each. The n actions with most
    points make the set (ties: catalog order), after do nothing and every line reconnection; fewer when fewer ever
    scored. Stops after ``max_states`` danger states.
    The result is cached under ``$ACE_HYBRID_CACHE/catalogs`` keyed by the grid and these arguments.
    """
    from ace_hybrid.grid.env import reset_episode
    from ace_hybrid.grid.rules import SafeRule, in_danger

    key = json.dumps({"signature": catalog.signature, "n": n, "pairs": [list(map(int, p)) for p in pairs],
                      "threshold": threshold, "candidates": candidates, "per_state": per_state,
                      "max_states": max_states,
                      "max_steps": max_steps, "version": 1,
                      # added only when on: sets selected before episode starts could move stay cached
                      **({"start_spread": env.ace_start_spread} if getattr(env, "ace_start_spread", 0) else {})},
                     sort_keys=True)
    path = cache_root() / "catalogs" / f"actionset-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npy"
    if cache and path.is_file():
        return np.load(path)
    rule, points, states = SafeRule(env.action_space, threshold=threshold), Counter(), 0
    do_nothing = catalog.action(0)
    for scenario, seed in pairs:
        obs, steps, done = reset_episode(env, int(scenario), int(seed)), 0, False
        while not done and steps < max_steps and states < max_states:
            if in_danger(obs, threshold):
                states += 1
                base = _simulated_max_rho(obs, do_nothing)
                scored = [(_simulated_max_rho(obs, catalog.action(int(c))), int(c))
                          for c in catalog.shortlist(obs, candidates)]
                for rho, c in sorted(scored)[:per_state]:
                    if rho < base:
                        points[c] += 1
                action = do_nothing
            else:
                action = rule(obs)
            obs, _, done, _ = env.step(action)
            steps += 1
        if states >= max_states:
            break
    reconnect = np.flatnonzero(catalog.kind == RECONNECT)
    ranked = [c for c, _ in sorted(points.items(), key=lambda kv: (-kv[1], kv[0])) if c not in set(reconnect)]
    indices = np.asarray([0, *reconnect.tolist(), *ranked[:n]], dtype=np.int64)
    log.info("tutor action set: %d danger states, %d actions scored, %d kept", states, len(points), indices.size)
    if cache:
        atomic_write(path, lambda f: np.save(f, indices))
    return indices


def action_set_indices(cfg: Config, env: Any, catalog: ActionCatalog) -> list[int] | None:
    """Catalog indices of the run's action set (None: the whole catalog); a "tutor:N" set is selected on the
    training scenarios (seeds from ``env.train_seed_start``), cached beside the catalog."""
    n = parse_action_set(cfg.env.action_set)
    if n is None:
        return None
    scenarios = cfg.env.train_scenarios
    pairs = [(scenarios[k % len(scenarios)], cfg.env.train_seed_start + k) for k in range(4 * len(scenarios) + 16)]
    return select_by_tutor(env, catalog, n, pairs, threshold=cfg.env.threshold,
                           max_states=cfg.env.action_set_states).tolist()


def _simulated_max_rho(obs: Any, action: Any) -> float:
    sim, _, done, info = obs.simulate(action)
    if done or info.get("is_illegal", False) or info.get("exception"):
        return float("inf")
    return float(np.max(sim.rho))
