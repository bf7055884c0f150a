"""Scoring many continuations of one prompt with the prompt run once (a local model's key/value cache shared).

The policy actor's candidates are continuations of one prompt (:meth:`TransformersBackend.score_candidates`), and
the judging prompts of one decision (LAC's critic, the actor's "judge" ranker, the value critic's questions about one
trajectory) differ only after a long common start (the state): the common part runs once, and each chunk of
continuations runs on a copy of its cache repeated over the batch, positions continuing after it. Cost: the prefix
once plus the continuations' tokens, instead of the whole prompt once per continuation.

The functions take the backend (:class:`~ace_hybrid.llm.transformers_backend.TransformersBackend`) for its model,
device, padding id and the name its model's forward gives the cache. A model whose cache cannot be repeated over a
batch raises ``NotImplementedError``; the backend then scores without sharing.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_SHARED_TOKENS", "common_prefix", "continuation_logprobs", "next_token_logprobs"]

MIN_SHARED_TOKENS = 16
"""Shorter common starts are not worth a separate pass."""


def common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest common start of ``sequences``, leaving every one at least one token after it."""
    n = min(len(s) for s in sequences) - 1
    first = sequences[0]
    for k in range(max(n, 0)):
        if any(s[k] != first[k] for s in sequences[1:]):
            return k
    return max(n, 0)


def _prefix_cache(backend: Any, prefix: Sequence[int]) -> tuple[Any, Any]:
    """(log-probs of the token after ``prefix``, its key/value cache)."""
    torch = backend._torch
    kwargs: dict[str, Any] = {"input_ids": torch.tensor([list(prefix)], device=backend.device), "use_cache": True}
    if backend._has_logits_to_keep:
        kwargs["logits_to_keep"] = 1
    out = backend.model(**kwargs)
    cache = getattr(out, backend._cache_name, None)
    if cache is None or not hasattr(cache, "batch_repeat_interleave"):
        raise NotImplementedError(f"the model returned no expandable cache ({type(cache).__name__})")
    return torch.log_softmax(out.logits[0, -1].float(), dim=-1), cache


def _run_chunk(backend: Any, cache: Any, n_prefix: int, chunk: Sequence[Sequence[int]]) -> tuple[Any, Any]:
    """Logits (B, width, vocab) of right-padded continuations run on a copy of the prefix cache, and their ids."""
    torch = backend._torch
    width = max(len(c) for c in chunk)
    ids = torch.full((len(chunk), width), backend._pad_id, dtype=torch.long)
    mask = torch.zeros((len(chunk), n_prefix + width), dtype=torch.long)
    mask[:, :n_prefix] = 1
    for row, c in enumerate(chunk):
        ids[row, : len(c)] = torch.tensor(list(c), dtype=torch.long)
        mask[row, n_prefix : n_prefix + len(c)] = 1
    positions = (n_prefix + torch.arange(width)).expand(len(chunk), width)
    batch_cache = copy.deepcopy(cache)
    batch_cache.batch_repeat_interleave(len(chunk))
    ids, mask, positions = ids.to(backend.device), mask.to(backend.device), positions.to(backend.device)
    logits = backend.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                           **{backend._cache_name: batch_cache}).logits
    return logits, ids


def continuation_logprobs(backend: Any, prompt_ids: list[int], cand_ids: list[list[int]]) -> npt.NDArray[np.float64]:
    """(n,) summed log-probabilities of each candidate continuation of ``prompt_ids``."""
    torch = backend._torch
    first, cache = _prefix_cache(backend, prompt_ids)
    totals = np.empty(len(cand_ids), dtype=np.float64)
    step = backend.config.score_batch_size
    for start in range(0, len(cand_ids), step):
        chunk = cand_ids[start : start + step]
        logits, ids = _run_chunk(backend, cache, len(prompt_ids), chunk)
        rest = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        lens = torch.tensor([len(c) for c in chunk], device=rest.device)
        in_candidate = torch.arange(1, ids.shape[1], device=rest.device)[None, :] < lens[:, None]
        sums = first[ids[:, 0]] + (rest * in_candidate).sum(-1)
        totals[start : start + len(chunk)] = sums.double().cpu().numpy()
    return totals


def next_token_logprobs(backend: Any, rendered: Sequence[Sequence[int]], shared: int, index: Any
                        ) -> npt.NDArray[np.float64]:
    """(m, k) log-probabilities of the tokens ``index`` after each of the m token sequences ``rendered``, whose
    first ``shared`` tokens are the same."""
    torch = backend._torch
    _, cache = _prefix_cache(backend, rendered[0][:shared])
    out = np.empty((len(rendered), len(index)), dtype=np.float64)
    step = backend.config.score_batch_size
    for start in range(0, len(rendered), step):
        chunk = [r[shared:] for r in rendered[start : start + step]]
        logits, _ = _run_chunk(backend, cache, shared, chunk)
        last = torch.tensor([len(c) - 1 for c in chunk], device=logits.device)
        at_end = logits[torch.arange(len(chunk), device=logits.device), last]
        out[start : start + len(chunk)] = torch.log_softmax(at_end.float(), dim=-1)[:, index].double().cpu().numpy()
    return out
