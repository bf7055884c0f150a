"""The LLM backend protocol, its result types, its one exception type and its configuration.

Every backend (:mod:`~ace_hybrid.llm.transformers_backend`, :mod:`~ace_hybrid.llm.smollm2`,
:mod:`~ace_hybrid.llm.openai_backend`) implements :class:`LLMBackend`:

* :meth:`~LLMBackend.generate` -- a chat answer (greedy or seeded sampling), optionally with the top
  log-probabilities of each generated token, optionally constrained to a list of choices;
* :meth:`~LLMBackend.score_candidates` -- the log-probability of each candidate continuation of a prompt
  (the policy actor chooses among legal candidates this way, so its answer is always legal);
* :meth:`~LLMBackend.next_token_logprobs` -- log P(first token of each given string | prompt), for LAC's
  ``log P("GOOD") - log P("BAD")``;
* :meth:`~LLMBackend.finetune` / :meth:`~LLMBackend.save_adapter` / :meth:`~LLMBackend.load_adapter` --
  LoRA fine-tuning where the backend allows it (``supports_finetune``).

Error contract
--------------
A backend never lets a failure of the model, the server, the network or a malformed answer escape as
anything but :class:`LLMError`: the training loop catches that one type and counts it (``stats["errors"]``).
:class:`ValueError` is kept for arguments the caller controls (an empty candidate list, a negative
``max_new_tokens``): those are programming errors and should stop the program.

Prompts
-------
A prompt is a list of chat messages ``{"role": ..., "content": ...}`` or a string, which is shorthand for
one user message. Backends with a tokenizer render it with the model's chat template and the assistant
generation prompt; candidates and answers are the assistant's reply.

Backends are not thread-safe: use one per thread (or a lock).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ace_hybrid.config import BACKENDS, LLMConfig

__all__ = [
    "BACKENDS",
    "CandidateScores",
    "FinetuneStats",
    "Generation",
    "LLMBackend",
    "LLMConfig",
    "LLMError",
    "Message",
    "Prompt",
    "GenerateRequest",
    "MAX_TOP_LOGPROBS",
    "as_messages",
    "check_finetune_args",
    "check_reduction",
    "check_strings",
    "generate_request",
    "new_stats",
]

Message = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""

Prompt = str | Sequence[Message]
"""A list of chat messages, or a string meaning one user message."""



class LLMError(RuntimeError):
    """The one exception every backend raises for a failure of the model, server or answer.

    Parameters
    ----------
    message : str
        What went wrong (never contains an API key).
    backend : str
        The backend's name ("transformers", "smollm2", "openai").
    kind : str
        One of "timeout", "connection", "http", "malformed", "unsupported", "model", "missing_dependency",
        "io". The training loop may count errors by kind.
    """

    def __init__(self, message: str, *, backend: str, kind: str) -> None:
        super().__init__(f"[{backend}:{kind}] {message}")
        self.backend = backend
        self.kind = kind


class Generation(NamedTuple):
    """A generated chat answer.

    Attributes
    ----------
    text : str
        The answer, special tokens removed.
    tokens_in : int
        Prompt tokens (as the backend or server counted them; 0 when the server does not say).
    tokens_out : int
        Generated tokens.
    finish_reason : str
        "stop" (end of answer), "length" (hit ``max_new_tokens``) or "choice" (picked among ``choices``).
    top_logprobs : tuple of dict, or None
        For each generated token, ``{token text: log-probability}`` of the k most likely tokens, when
        asked for with ``top_logprobs=k > 0`` and available; None otherwise.
    """

    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str
    top_logprobs: tuple[dict[str, float], ...] | None = None


class CandidateScores(NamedTuple):
    """Scores of candidate continuations of one prompt.

    Attributes
    ----------
    logprobs : (n,) float64
        Score of each candidate. With ``method`` "teacher_forcing" or "echo": the sum (``reduction="sum"``)
        or mean (``"mean"``) of the candidate tokens' log-probabilities given the prompt. With ``method``
        "choice": log P(the model answers the candidate's number), a single-token log-probability
        (``reduction`` does not apply); a candidate whose number is not among the server's top
        log-probabilities cannot be scored, and the call raises LLMError "malformed".
    n_tokens : (n,) int64
        Tokens per candidate (1 for "choice").
    method : str
        "teacher_forcing" (local model, one batched forward), "echo" (completions endpoint with
        ``echo=True``) or "choice" (numbered-choice fallback of the ``openai`` backend).
    reduction : str
        "sum" or "mean" (as requested; "choice" scores are single-token either way).
    """

    logprobs: npt.NDArray[np.float64]
    n_tokens: npt.NDArray[np.int64]
    method: str
    reduction: str


class FinetuneStats(NamedTuple):
    """What one :meth:`LLMBackend.finetune` call did.

    Attributes
    ----------
    steps : int
        Optimiser steps taken.
    epochs : int
        Passes over the pairs.
    n_pairs : int
        Prompt -> answer pairs.
    n_answer_tokens : int
        Answer tokens per epoch (the only tokens that carry loss).
    losses : tuple of float
        Mean answer-token cross-entropy of each step's batch, before the step.
    trainable_params : int
        Parameters of the LoRA adapter.
    seconds : float
        Wall-clock time of the call.
    """

    steps: int
    epochs: int
    n_pairs: int
    n_answer_tokens: int
    losses: tuple[float, ...]
    trainable_params: int
    seconds: float


@runtime_checkable
class LLMBackend(Protocol):
    """What the policy actor, the value critic and LAC need from a language model.

    Every method raises :class:`LLMError` for a failure of the model, server or answer and
    :class:`ValueError` for invalid arguments; see the module docstring.
    """

    name: str
    """Backend name: "transformers", "smollm2" or "openai"."""
    supports_finetune: bool
    """Whether :meth:`finetune`, :meth:`save_adapter` and :meth:`load_adapter` work."""

    @property
    def stats(self) -> dict[str, float]:
        """Counters since construction: calls, errors, retries, tokens_in, tokens_out, seconds, finetune_steps.

        ``calls`` and ``errors`` count requests/forward calls, so an ``openai`` echo attempt that fell back
        to numbered choices counts as one call and one error before the fallback's call.
        """
        ...

    def generate(
        self,
        prompt: Prompt,
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        top_logprobs: int = 0,
        choices: Sequence[str] | None = None,
    ) -> Generation:
        """Answer a chat prompt.

        ``temperature`` 0 is greedy; otherwise sampling is seeded with ``seed`` (config seed when None).
        ``choices`` constrains the answer to one of the given strings where the backend can.
        """
        ...

    def score_candidates(
        self, prompt: Prompt, candidates: Sequence[str], *, reduction: str = "sum"
    ) -> CandidateScores:
        """Log-probability of each candidate as the assistant's answer to ``prompt``."""
        ...

    def next_token_logprobs(self, prompt: Prompt, tokens: Sequence[str]) -> npt.NDArray[np.float64]:
        """(k,) float64: log P(first token of each string | prompt) for the first answer token."""
        ...

    def next_token_logprobs_many(self, prompts: Sequence[Prompt], tokens: Sequence[str]) -> npt.NDArray[np.float64]:
        """(m, k) float64: :meth:`next_token_logprobs` for m prompts (batched where the backend can)."""
        ...

    def finetune(
        self,
        pairs: Sequence[tuple[Prompt, str]],
        *,
        rank: int | None = None,
        alpha: float | None = None,
        lr: float | None = None,
        epochs: int | None = None,
        batch_size: int | None = None,
    ) -> FinetuneStats:
        """LoRA-train on prompt -> answer pairs, loss on the answer tokens only."""
        ...

    def save_adapter(self, directory: str | os.PathLike[str]) -> None:
        """Write the current LoRA adapter to ``directory`` (atomically)."""
        ...

    def load_adapter(self, directory: str | os.PathLike[str]) -> None:
        """Replace the current adapter by the one in ``directory``; the next call uses it."""
        ...


def new_stats() -> dict[str, float]:
    """A fresh counter dict with every key a backend reports."""
    return {
        "calls": 0,
        "errors": 0,
        "retries": 0,
        "tokens_in": 0,
        "tokens_out": 0,
        "seconds": 0.0,
        "finetune_steps": 0,
    }


def as_messages(prompt: Prompt) -> list[dict[str, str]]:
    """Normalise a prompt to a list of ``{"role", "content"}`` dicts (a string becomes one user message).

    Raises
    ------
    ValueError
        If the prompt is empty or a message lacks a string role or content.
    """
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = []
    for i, message in enumerate(prompt):
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise ValueError(f"prompt message {i} = {message!r} needs string 'role' and 'content'")
        messages.append({"role": role, "content": content})
    if not messages:
        raise ValueError("prompt = [] is empty; give at least one message")
    return messages


# ----------------------------------------------------------------------------- one request path for every backend

MAX_TOP_LOGPROBS = 20
"""Most top log-probabilities per token any backend returns (OpenAI-compatible servers allow 20)."""


class GenerateRequest(NamedTuple):
    """A validated ``generate`` call with the configuration's defaults filled in."""

    messages: list[dict[str, str]]
    max_new_tokens: int
    temperature: float
    seed: int
    top_logprobs: int
    choices: list[str] | None


def generate_request(config: LLMConfig, prompt: Prompt, max_new_tokens: int | None, temperature: float | None,
                     seed: int | None, top_logprobs: int, choices: Sequence[str] | None) -> GenerateRequest:
    """Check a ``generate`` call's arguments (ValueError naming the value and its range) and fill in defaults."""
    max_new = config.max_new_tokens if max_new_tokens is None else max_new_tokens
    temp = config.temperature if temperature is None else temperature
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new_tokens = {max_new!r} must be an integer >= 1")
    if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp) or temp < 0:
        raise ValueError(f"temperature = {temp!r} must be finite and >= 0")
    if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) \
            or not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top_logprobs = {top_logprobs!r} out of range [0, {MAX_TOP_LOGPROBS}]")
    return GenerateRequest(as_messages(prompt), max_new, float(temp), config.seed if seed is None else seed,
                           top_logprobs, check_strings(choices, "choices") if choices is not None else None)


def check_strings(items: Sequence[str], what: str) -> list[str]:
    """``items`` as a list of non-empty strings, or ValueError naming ``what`` and the bad item."""
    if isinstance(items, str):
        raise ValueError(f"{what} = {items!r} must be a sequence of strings, not one string")
    out = list(items)
    if not out:
        raise ValueError(f"{what} = [] is empty; give at least one")
    for i, c in enumerate(out):
        if not isinstance(c, str) or not c:
            raise ValueError(f"{what}[{i}] = {c!r} must be a non-empty string")
    return out


def check_reduction(reduction: str) -> str:
    """``reduction`` if it is "sum" or "mean", else ValueError."""
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction = {reduction!r} is invalid; valid: 'sum' | 'mean'")
    return reduction


def check_finetune_args(pairs: Sequence[tuple[Prompt, str]], rank: Any, alpha: Any, lr: Any, epochs: Any,
                       batch_size: Any) -> list[tuple[Prompt, str]]:
    """The pairs as a list, once every argument is valid (ValueError naming the first that is not)."""
    for name, value, lo in (("rank", rank, 1), ("epochs", epochs, 1), ("batch_size", batch_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError(f"{name} = {value!r} must be an integer >= {lo}")
    for name, value in (("alpha", alpha), ("lr", lr)):
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{name} = {value!r} must be finite and > 0")
    items = list(pairs)
    if not items:
        raise ValueError("pairs = [] is empty; give at least one (prompt, answer) pair")
    for i, pair in enumerate(items):
        if len(pair) != 2 or not isinstance(pair[1], str) or not pair[1]:
            raise ValueError(f"pairs[{i}] = {pair!r} must be (prompt, non-empty answer)")
        as_messages(pair[0])
    return items
