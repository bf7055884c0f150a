"""The batch one SAC update takes: named, keyword-only fields, checked when the batch is built.

After stable-baselines3's ``ReplayBufferSamples``: the training loop draws from the replay, normalises the
observations and rebuilds the legal masks, and hands the whole :class:`UpdateBatch` to
:meth:`~ace_hybrid.sac.DiscreteSAC.update` (and to :func:`~ace_hybrid.sac.reference.reference_update`). The two
masks have the same shape and dtype, so no shape check could tell them apart: they are named fields that can only be
passed by keyword.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["UpdateBatch", "check_dims", "float_array", "mask_array", "to_tensors"]


@dataclass(frozen=True, kw_only=True)
class UpdateBatch:
    """B transitions for one update. Every field is keyword-only; the arrays are checked (and made contiguous, in the
    dtypes below) when the batch is built, so a bad batch fails where it is made, with a ValueError naming the field.

    The agent checks what only it knows when it updates: D (its ``obs_dim``) and n (its ``n_actions``).
    """

    obs: np.ndarray
    """(B, D) float32: the decisions' observations, normalised by the caller; finite."""
    action: np.ndarray
    """(B,) int64 in [0, n): legal under ``legal_mask``."""
    reward: np.ndarray
    """(B,) float32: accumulated over the transition's ``steps`` environment steps; finite."""
    next_obs: np.ndarray
    """(B, D) float32: the next decision's observation (or the episode's last), normalised; finite."""
    done: np.ndarray
    """(B,) bool: terminal, no bootstrap. A truncation is not done."""
    weight: np.ndarray
    """(B,) float32 >= 0: importance-sampling weights, applied to the critic losses."""
    legal_mask: np.ndarray
    """(B, n) bool: the legal actions in ``obs``."""
    next_legal_mask: np.ndarray
    """(B, n) bool: the legal actions in ``next_obs``; a row may be all False only where ``done``."""
    steps: np.ndarray | None = None
    """(B,) int >= 1: environment steps k each transition spans (the bootstrap is discounted by gamma**k); None: 1."""
    imitation: np.ndarray | None = None
    """(B,) float32 >= 0: weights w_i of the behaviour-cloning term ``(1/B) sum_i w_i (-log pi(a_i | s_i))`` added to
    the actor's loss (rows whose action was validated: the tutor's or an accepted LLM refinement); None: none."""

    def __post_init__(self) -> None:
        obs = float_array(self.obs, "obs", ("B", "D"))
        bsz, dim = obs.shape
        if bsz < 1:
            raise ValueError("obs has 0 rows: expected a batch of at least 1 transition")
        checked = {"obs": obs, "next_obs": float_array(self.next_obs, "next_obs", (bsz, dim)),
                   "reward": float_array(self.reward, "reward", (bsz,)),
                   "weight": _non_negative(float_array(self.weight, "weight", (bsz,)), "weight"),
                   "done": mask_array(self.done, "done", (bsz,)),
                   "legal_mask": mask_array(self.legal_mask, "legal_mask", (bsz, "n"))}
        n = checked["legal_mask"].shape[1]
        checked["next_legal_mask"] = mask_array(self.next_legal_mask, "next_legal_mask", (bsz, n))
        checked["action"] = _actions(self.action, checked["legal_mask"])
        empty = ~checked["next_legal_mask"].any(axis=1) & ~checked["done"]
        if empty.any():
            bad = int(np.flatnonzero(empty)[0])
            raise ValueError(f"next_legal_mask[{bad}] has no legal action but done[{bad}] is False: "
                             "a non-terminal next state needs at least one legal action")
        checked["steps"] = _steps(self.steps, bsz)
        if self.imitation is not None:
            checked["imitation"] = _non_negative(float_array(self.imitation, "imitation", (bsz,)), "imitation")
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def size(self) -> int:
        """B, the number of transitions."""
        return int(self.obs.shape[0])


def _non_negative(w: np.ndarray, name: str) -> np.ndarray:
    if (w < 0).any():
        raise ValueError(f"{name} has a negative entry ({float(w.min())}): expected values in [0, inf)")
    return w


def _actions(action: Any, legal: np.ndarray) -> np.ndarray:
    bsz, n = legal.shape
    a = np.asarray(action)
    if a.shape != (bsz,) or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"action has shape {a.shape} and dtype {a.dtype}: expected ({bsz},) integers")
    a = a.astype(np.int64, copy=False)
    outside = (a < 0) | (a >= n)
    if outside.any():
        bad = int(np.flatnonzero(outside)[0])
        raise ValueError(f"action[{bad}] = {int(a[bad])} out of range [0, {n})")
    illegal = ~legal[np.arange(bsz), a]
    if illegal.any():
        bad = int(np.flatnonzero(illegal)[0])
        raise ValueError(f"action[{bad}] = {int(a[bad])} is illegal: legal_mask[{bad}, {int(a[bad])}] is False")
    return a


def _steps(steps: Any, bsz: int) -> np.ndarray | None:
    if steps is None:
        return None
    k = np.asarray(steps)
    if k.shape != (bsz,) or not np.issubdtype(k.dtype, np.integer):
        raise ValueError(f"steps has shape {k.shape} and dtype {k.dtype}: expected ({bsz},) integers")
    if (k < 1).any():
        raise ValueError(f"steps has an entry {int(k.min())} out of range [1, inf)")
    return k.astype(np.int64, copy=False)


def check_dims(batch: UpdateBatch, obs_dim: int, n_actions: int) -> None:
    """ValueError when ``batch`` does not fit an agent of ``obs_dim`` and ``n_actions`` (naming the field)."""
    if not isinstance(batch, UpdateBatch):
        raise TypeError(f"update takes an UpdateBatch, got {type(batch).__name__}")
    for name, cols, want in (("obs", batch.obs.shape[1], obs_dim), ("legal_mask", batch.legal_mask.shape[1],
                                                                    n_actions)):
        if cols != want:
            raise ValueError(f"{name} has shape {getattr(batch, name).shape}: expected {_shape_text(('B', want))}")


def to_tensors(batch: UpdateBatch, device: torch.device) -> dict[str, torch.Tensor]:
    """The batch's columns as tensors on ``device`` (no copy on a CPU), with ``steps`` as float32 (1 where None),
    ``imitation`` as float32 (0 where None) and ``n_legal``, the legal actions per row (int64)."""
    bsz = batch.size
    steps = np.ones(bsz, np.float32) if batch.steps is None else batch.steps.astype(np.float32)
    imitation = np.zeros(bsz, np.float32) if batch.imitation is None else batch.imitation
    arrays = {"obs": batch.obs, "next_obs": batch.next_obs, "reward": batch.reward, "weight": batch.weight,
              "done": batch.done, "action": batch.action, "steps": steps, "imitation": imitation}
    return {name: torch.from_numpy(x).to(device) for name, x in arrays.items()}


def float_array(x: Any, name: str, shape: tuple[int | str, ...]) -> np.ndarray:
    """``x`` as a contiguous float32 array of ``shape`` (a name such as "B": any size), finite; ValueError naming
    ``name``."""
    arr = np.asarray(x)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} has dtype {arr.dtype}: expected float32")
    if not _fits(arr.shape, shape):
        raise ValueError(f"{name} has shape {arr.shape}: expected {_shape_text(shape)}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has a non-finite entry (NaN or inf)")
    return arr


def mask_array(x: Any, name: str, shape: tuple[int | str, ...]) -> np.ndarray:
    """``x`` as a contiguous bool array of ``shape`` (a name: any size; 0/1 integers accepted); ValueError naming
    ``name``."""
    arr = np.asarray(x)
    if arr.dtype != np.bool_:
        if not np.issubdtype(arr.dtype, np.integer) or ((arr != 0) & (arr != 1)).any():
            raise ValueError(f"{name} has dtype {arr.dtype}: expected bool (or 0/1 integers)")
        arr = arr.astype(np.bool_)
    if not _fits(arr.shape, shape):
        raise ValueError(f"{name} has shape {arr.shape}: expected {_shape_text(shape)}")
    return np.ascontiguousarray(arr)


def _fits(actual: tuple[int, ...], shape: tuple[int | str, ...]) -> bool:
    return len(actual) == len(shape) and all(isinstance(s, str) or a == s for a, s in zip(actual, shape))


def _shape_text(shape: tuple[int | str, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
