"""Observation features for the networks, and their running normalisation.

The vector, in order (each block's length in brackets):

==========================  ============  ===============================================================
block                       length        meaning
==========================  ============  ===============================================================
``rho``                     n_line        line loading (flow / thermal limit), 0 when disconnected
``line_status``             n_line        1 connected, 0 disconnected
``overflow_steps``          n_line        consecutive steps in overflow, / NB_TIMESTEP_OVERFLOW_ALLOWED
``cooldown_line``           n_line        steps before the line can be acted on, / its cooldown duration
``maintenance_soon``        n_line        1 - min(steps to next maintenance, horizon) / horizon (0 if none)
``bus2``                    dim_topo      1 when the element is on bus 2 or higher, else 0
``cooldown_sub``            n_sub         steps before the substation can be acted on, / its cooldown duration
``gen_p``                   n_gen         generator output / its pmax
``load_p``                  n_load        load consumption in MW (scaled by the running normaliser)
``storage_charge``          n_storage     state of charge / capacity (empty when the grid has no storage)
``time_of_day``             2             sin and cos of the hour of day
==========================  ============  ===============================================================

The :class:`RunningNormalizer` (Welford's running mean and variance) is fitted online and saved with the agent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: How far ahead (steps) a coming maintenance shows in ``maintenance_soon``: one day at 5-minute steps.
MAINTENANCE_HORIZON = 288


class ObservationFeatures:
    """Turns a Grid2Op observation into the float32 vector documented in this module.

    Parameters
    ----------
    env
        The Grid2Op environment (its class attributes give the grid's sizes and limits).
    """

    def __init__(self, env: Any) -> None:
        params = env.parameters
        self.n_line = int(env.n_line)
        self.n_sub = int(env.n_sub)
        self.dim_topo = int(env.dim_topo)
        self.n_gen = int(env.n_gen)
        self.n_load = int(env.n_load)
        self.n_storage = int(getattr(env, "n_storage", 0))
        self._overflow_allowed = max(1, int(params.NB_TIMESTEP_OVERFLOW_ALLOWED))
        self._cooldown_line = max(1, int(params.NB_TIMESTEP_COOLDOWN_LINE))
        self._cooldown_sub = max(1, int(params.NB_TIMESTEP_COOLDOWN_SUB))
        self._gen_pmax = np.maximum(np.asarray(env.gen_pmax, dtype=np.float32), 1e-3)
        capacity = np.asarray(getattr(env, "storage_Emax", np.zeros(0)), dtype=np.float32)
        self._storage_capacity = np.maximum(capacity, 1e-3)
        self.blocks: list[tuple[str, int]] = [
            ("rho", self.n_line),
            ("line_status", self.n_line),
            ("overflow_steps", self.n_line),
            ("cooldown_line", self.n_line),
            ("maintenance_soon", self.n_line),
            ("bus2", self.dim_topo),
            ("cooldown_sub", self.n_sub),
            ("gen_p", self.n_gen),
            ("load_p", self.n_load),
            ("storage_charge", self.n_storage),
            ("time_of_day", 2),
        ]
        self.dim = sum(length for _, length in self.blocks)

    def names(self) -> list[str]:
        """One name per feature, e.g. ``rho[3]``."""
        return [f"{block}[{i}]" for block, length in self.blocks for i in range(length)]

    def __call__(self, obs: Any) -> np.ndarray:
        """Features of one observation, shape ``(dim,)``, float32."""
        maintenance = np.asarray(obs.time_next_maintenance, dtype=np.float32)
        soon = np.where(maintenance < 0, 0.0, 1.0 - np.minimum(maintenance, MAINTENANCE_HORIZON) / MAINTENANCE_HORIZON)
        hour = (float(obs.hour_of_day) + float(obs.minute_of_hour) / 60.0) * (2.0 * np.pi / 24.0)
        parts = [
            np.asarray(obs.rho, dtype=np.float32),
            np.asarray(obs.line_status, dtype=np.float32),
            np.asarray(obs.timestep_overflow, dtype=np.float32) / self._overflow_allowed,
            np.asarray(obs.time_before_cooldown_line, dtype=np.float32) / self._cooldown_line,
            soon,
            (np.asarray(obs.topo_vect) >= 2).astype(np.float32),
            np.asarray(obs.time_before_cooldown_sub, dtype=np.float32) / self._cooldown_sub,
            np.asarray(obs.gen_p, dtype=np.float32) / self._gen_pmax,
            np.asarray(obs.load_p, dtype=np.float32),
            np.asarray(getattr(obs, "storage_charge", np.zeros(0)), dtype=np.float32) / self._storage_capacity,
            np.array([np.sin(hour), np.cos(hour)], dtype=np.float32),
        ]
        out = np.concatenate(parts).astype(np.float32, copy=False)
        if out.shape != (self.dim,):
            raise ValueError(f"observation gives {out.shape[0]} features, expected {self.dim}: wrong environment?")
        return out


class RunningNormalizer:
    """Running mean / variance normalisation (Welford), clipped to ``[-clip, clip]``.

    Parameters
    ----------
    dim
        Length of the feature vectors.
    clip
        Normalised values are clipped to this magnitude.
    eps
        Added to the variance before the square root, so constant features map to 0.
    """

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-4) -> None:
        if dim <= 0:
            raise ValueError(f"dim = {dim} must be > 0")
        if not clip > 0:
            raise ValueError(f"clip = {clip} must be > 0")
        self.dim = int(dim)
        self.clip = float(clip)
        self.eps = float(eps)
        self.count = 0
        self.mean = np.zeros(dim, dtype=np.float64)
        self._m2 = np.zeros(dim, dtype=np.float64)

    def update(self, x: np.ndarray) -> None:
        """Fold a batch ``(n, dim)`` or one vector ``(dim,)`` into the statistics (Chan et al.'s parallel update)."""
        batch = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if batch.shape[1] != self.dim:
            raise ValueError(f"x has {batch.shape[1]} features, expected {self.dim}")
        if not np.all(np.isfinite(batch)):
            raise ValueError("x holds NaN or infinite values")
        n = batch.shape[0]
        if n == 0:
            return
        batch_mean = batch.mean(axis=0)
        batch_m2 = ((batch - batch_mean) ** 2).sum(axis=0)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self._m2 = self._m2 + batch_m2 + delta**2 * (self.count * n / total)
        self.count = total

    @property
    def var(self) -> np.ndarray:
        """Population variance per feature (zeros before any update)."""
        return self._m2 / max(self.count, 1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Normalised copy of ``x`` (any leading shape, last axis ``dim``), float32."""
        z = (np.asarray(x, dtype=np.float64) - self.mean) / np.sqrt(self.var + self.eps)
        return np.clip(z, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore the normaliser exactly."""
        return {"dim": self.dim, "clip": self.clip, "eps": self.eps, "count": self.count,
                "mean": self.mean.copy(), "m2": self._m2.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; the dimension must match."""
        if int(state["dim"]) != self.dim:
            raise ValueError(f"normaliser state has dim {state['dim']}, this one has {self.dim}")
        self.clip, self.eps, self.count = float(state["clip"]), float(state["eps"]), int(state["count"])
        self.mean = np.asarray(state["mean"], dtype=np.float64).copy()
        self._m2 = np.asarray(state["m2"], dtype=np.float64).copy()


class MaskFromFeatures:
    """Rebuilds legal masks from stored raw feature vectors (their line status and cooldown blocks), so the replay
    need not store a mask over the whole catalog per transition.

    Parameters
    ----------
    features
        The :class:`ObservationFeatures` that made the vectors.
    actions
        The :class:`~ace_hybrid.grid.action_set.ActionSet` (or catalog) whose ``mask_batch`` builds the masks.
    """

    def __init__(self, features: ObservationFeatures, actions: Any) -> None:
        offsets, start = {}, 0
        for name, length in features.blocks:
            offsets[name] = slice(start, start + length)
            start += length
        self.status, self.cooldown_line, self.cooldown_sub = (
            offsets["line_status"], offsets["cooldown_line"], offsets["cooldown_sub"])
        self.actions = actions

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        """(B, D) raw features -> (B, n_actions) bool legal masks."""
        status = raw[:, self.status] > 0.5
        cdl = (raw[:, self.cooldown_line] > 0).astype(np.int64)
        cds = (raw[:, self.cooldown_sub] > 0).astype(np.int64)
        return self.actions.mask_batch(status, cdl, cds)
