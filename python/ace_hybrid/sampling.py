"""Masked sampling, argmax and top-k over huge discrete action sets (numpy or torch in, numpy out).

Thin facade over ``ace_hybrid._core`` (C++, ``cpp/include/ace_hybrid/masked_sampling.hpp``). The logits of a
policy over tens of thousands of actions (66,810 bus-assignment actions on l2rpn_wcci_2020) are masked by
legality, and one action per row is drawn with probability ``softmax(logits / temperature)`` over the legal
actions, or the best legal actions are selected.

Conventions shared by every function here:

* ``logits`` is float32, shape ``(batch, n)`` or ``(n,)`` (one row; results are then scalars),
  ``1 <= n < 2**31``. Other dtypes are rejected rather than silently converted (a float64 batch of 67k
  actions is a 130 MB copy).
* ``mask`` is bool or uint8, shape ``(n,)`` (shared by all rows) or ``(batch, n)``; nonzero means legal;
  ``None`` means every action is legal.
* A masked action is never returned. A legal ``-inf`` logit has probability 0 and is never returned either.
  NaN or ``+inf`` at a legal position is a ValueError naming row and column (masked positions are never read
  for their value). A row with no legal finite logit is "empty": ValueError naming the row
  (``on_empty="error"``), or the row returns ``fallback_index`` (``on_empty="index"``; e.g. 0, do-nothing).
* Ties (argmax, top-k) go to the lowest index; -0.0 ties with +0.0. This matches ``numpy.argmax``.
* torch tensors are accepted: CPU tensors are viewed through ``Tensor.numpy()`` without a copy (others are
  copied to the CPU first). Results are numpy arrays.
* ``num_threads=0`` picks a thread count from the work size (at most 4); results never depend on it. The GIL
  is released while rows are processed.

Precision: sampling weights use a vectorised polynomial exp with relative error below 3e-7 (tested), so each
action's probability is within ~1e-6 relative of the exact softmax; returned log-probabilities are accurate to
~1e-6 absolute. Weights below ``exp(-87)`` of the largest logit in their 512-action block are treated as 0.
"""

from __future__ import annotations

import sys
from typing import Any, Literal, NamedTuple

import numpy as np

from ace_hybrid import _core
from ace_hybrid._core import SamplingGenerator

__all__ = ["MaskedSample", "SamplingGenerator", "TopK", "masked_argmax", "masked_sample", "masked_topk"]

OnEmpty = Literal["error", "index"]


class MaskedSample(NamedTuple):
    """Result of :func:`masked_sample` (shapes ``(batch,)``, or scalars for one-dimensional logits)."""

    actions: np.ndarray
    """int64: the sampled action of each row."""
    log_probs: np.ndarray
    """float64: log-probability of that action under softmax(logits / temperature) over the legal actions
    (0.0 for an empty row that returned the fallback)."""
    empty: np.ndarray
    """bool: True where the row had no legal finite logit and returned ``fallback_index``."""


class TopK(NamedTuple):
    """Result of :func:`masked_topk` (shapes ``(batch, k)``, or ``(k,)`` for one-dimensional logits)."""

    indices: np.ndarray
    """int64: the k best legal actions of each row, best first (ties: lowest index first)."""
    values: np.ndarray
    """float32: their logits (-inf in slots filled with ``fallback_index`` under ``on_empty="index"``)."""


def _as_numpy(x: Any, name: str) -> np.ndarray:
    """Returns ``x`` as a numpy array: no copy for numpy arrays and CPU torch tensors."""
    if isinstance(x, np.ndarray):
        return x
    torch = sys.modules.get("torch")  # a tensor implies torch is imported: never import it here
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    return np.asarray(x)


def _rows(logits: Any, mask: Any) -> tuple[np.ndarray, np.ndarray | None, bool]:
    """Normalises (logits, mask) to 2-D logits; returns them and whether the input was one row."""
    lg = _as_numpy(logits, "logits")
    mk = None if mask is None else _as_numpy(mask, "mask")
    if lg.ndim == 1:
        if mk is not None and mk.ndim != 1:
            raise ValueError(f"mask for one-dimensional logits of shape {lg.shape} must have shape "
                             f"({lg.shape[0]},), got {mk.shape}")
        return lg[np.newaxis, :], mk, True
    return lg, mk, False


def masked_sample(
    logits: Any,
    mask: Any = None,
    *,
    generator: SamplingGenerator,
    temperature: float = 1.0,
    on_empty: OnEmpty = "error",
    fallback_index: int = 0,
    num_threads: int = 0,
) -> MaskedSample:
    """Draws one legal action per row with probability softmax(logits / temperature) over the legal actions.

    Parameters
    ----------
    logits : numpy.ndarray or torch.Tensor, float32, shape (batch, n) or (n,)
        Unnormalised log-probabilities.
    mask : numpy.ndarray or torch.Tensor, bool or uint8, shape (n,) or (batch, n), optional
        Legality, nonzero = legal. ``None``: every action is legal.
    generator : SamplingGenerator
        Source of randomness. One draw per row, in row order; a call that raises leaves it unchanged.
    temperature : float, default 1.0
        In [1e-30, 1e30]; small values approach the argmax, large values the uniform over legal actions.
    on_empty : {"error", "index"}, default "error"
        What an empty row (no legal finite logit) does: raise ValueError naming it, or return
        ``fallback_index``.
    fallback_index : int, default 0
        Returned for empty rows under ``on_empty="index"``; must be in [0, n) then.
    num_threads : int, default 0
        0 = automatic, else 1..256. Results do not depend on it.

    Returns
    -------
    MaskedSample
        ``actions`` int64, ``log_probs`` float64, ``empty`` bool; shape (batch,) or scalars for (n,) logits.

    Raises
    ------
    ValueError
        Wrong dtype / shape, NaN or +inf at a legal position, empty row under ``on_empty="error"``,
        temperature or num_threads out of range.
    IndexError
        ``fallback_index`` outside [0, n) under ``on_empty="index"``.

    Notes
    -----
    Cost O(batch * n): one pass over memory per row (per 512-action block: legal max, polynomial exp, sum),
    then a rescan of the single block holding the drawn action. Discrete SAC (Christodoulou 2019,
    arXiv 1910.07207) needs the log-probabilities of the sampled actions; they come at no extra cost.
    """
    lg, mk, one = _rows(logits, mask)
    actions, log_probs, empty = _core.sample_masked_logits(
        lg, mk, generator, temperature, on_empty, fallback_index, num_threads
    )
    if one:
        return MaskedSample(actions[0], log_probs[0], empty[0])
    return MaskedSample(actions, log_probs, empty)


def masked_argmax(
    logits: Any,
    mask: Any = None,
    *,
    on_empty: OnEmpty = "error",
    fallback_index: int = 0,
    num_threads: int = 0,
) -> np.ndarray:
    """Index of the largest legal logit per row (ties: the lowest index, as ``numpy.argmax``).

    Parameters
    ----------
    logits, mask, on_empty, fallback_index, num_threads
        As in :func:`masked_sample`.

    Returns
    -------
    numpy.ndarray
        int64, shape (batch,), or a scalar for (n,) logits.

    Raises
    ------
    ValueError, IndexError
        As in :func:`masked_sample`.
    """
    lg, mk, one = _rows(logits, mask)
    actions = _core.argmax_masked_logits(lg, mk, on_empty, fallback_index, num_threads)
    return actions[0] if one else actions


def masked_topk(
    logits: Any,
    k: int,
    mask: Any = None,
    *,
    on_empty: OnEmpty = "error",
    fallback_index: int = 0,
    num_threads: int = 0,
) -> TopK:
    """The ``k`` legal actions with the largest finite logits per row, best first (ties: lowest index first).

    Parameters
    ----------
    logits, mask, num_threads
        As in :func:`masked_sample`.
    k : int
        Number of actions per row, in [1, n].
    on_empty : {"error", "index"}, default "error"
        A row with fewer than ``k`` legal finite logits raises ValueError naming it, or (``"index"``) fills
        its missing slots with ``fallback_index`` and value -inf.
    fallback_index : int, default 0
        In [0, n) when used.

    Returns
    -------
    TopK
        ``indices`` int64 and ``values`` float32, shape (batch, k), or (k,) for (n,) logits.

    Raises
    ------
    ValueError
        As in :func:`masked_sample`, and ``k`` outside [1, n].
    IndexError
        ``fallback_index`` outside [0, n) under ``on_empty="index"``.

    Notes
    -----
    Cost O(batch * n) typical: a heap of k candidates, with 256-action chunks skipped by a vectorised test
    when nothing in them beats the worst kept candidate; O(batch * n log k) worst case (ascending logits).
    """
    lg, mk, one = _rows(logits, mask)
    indices, values = _core.topk_masked_logits(lg, mk, k, on_empty, fallback_index, num_threads)
    if one:
        return TopK(indices[0], values[0])
    return TopK(indices, values)
