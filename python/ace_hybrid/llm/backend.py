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
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

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
    "as_messages",
    "default_cache_root",
    "new_stats",
]

Message = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""

Prompt = str | Sequence[Message]
"""A list of chat messages, or a string meaning one user message."""

BACKENDS = ("smollm2", "transformers", "openai", "none")
"""Valid values of :attr:`LLMConfig.backend`."""


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
        (``reduction`` does not apply); candidates whose number is not among the server's top
        log-probabilities get the smallest listed log-probability (an upper bound of their true value).
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


def default_cache_root() -> Path:
    """Where ace_hybrid writes caches: ``$ACE_HYBRID_CACHE`` or ``~/.cache/ace_hybrid``."""
    return Path(os.environ.get("ACE_HYBRID_CACHE", Path.home() / ".cache" / "ace_hybrid"))


@dataclass
class LLMConfig:
    """Which language model to use and how; :func:`ace_hybrid.llm.make_backend` builds it.

    Call :meth:`validate` (``make_backend`` does) to get a ValueError naming a bad field, its value and
    its valid range.
    """

    backend: str = "smollm2"
    """"smollm2" (embedded default), "transformers" (local directory), "openai" (HTTP server) or "none"."""
    model_path: str = ""
    """Local causal-LM directory for the "transformers" backend (config, weights, tokenizer)."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """Base URL of the OpenAI-compatible server ("openai" backend), ending in /v1."""
    model: str = ""
    """Model name the server knows ("openai" backend)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key; the key itself is never stored in the config or logged."""
    timeout_s: float = 60.0
    """Per-request timeout in seconds ("openai" backend)."""
    max_retries: int = 3
    """Retries after a timeout, connection error, HTTP 429 or 5xx ("openai"), with exponential backoff."""
    retry_backoff_s: float = 0.5
    """First retry delay in seconds; it doubles at each retry (capped at 30 s)."""
    temperature: float = 0.0
    """Sampling temperature for generate(); 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus-sampling mass for generate() when temperature > 0."""
    max_new_tokens: int = 256
    """Default cap on generated tokens."""
    seed: int = 0
    """Seed of sampled generation and of fine-tuning's shuffling and LoRA initialisation."""
    device: str = "cpu"
    """Torch device of local backends ("cpu", "cuda", "cuda:1", "mps")."""
    dtype: str = "float32"
    """Torch dtype of local backends: "float32", "bfloat16", "float16" or "auto" (the checkpoint's)."""
    score_batch_size: int = 16
    """Candidates per batched forward when scoring (more candidates are scored in chunks)."""
    share_prompt_cache: bool = True
    """Score candidates on one shared prompt key/value cache (local backends); False runs prompt + candidate each."""
    reduction: str = "sum"
    """Default reduction of candidate token log-probs: "sum" (sequence log-prob) or "mean" (per token)."""
    top_logprobs: int = 20
    """How many top log-probabilities to request from a server for next-token reads (1..20)."""
    openai_scoring: str = "auto"
    """Candidate scoring through a server: "echo" (completions, echo=True), "choice" or "auto" (echo, else choice)."""
    guided_choice: bool = False
    """Pass generate(choices=...) to the server as vLLM's extra_body guided_choice (vLLM only)."""
    lora_rank: int = 8
    """LoRA rank r of a new adapter."""
    lora_alpha: float = 16.0
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch during fine-tuning."""
    lora_target_modules: tuple[str, ...] = ()
    """Module names LoRA wraps; empty means peft's default for the architecture (or ("all-linear",))."""
    lora_lr: float = 1e-4
    """AdamW learning rate of fine-tuning."""
    lora_epochs: int = 1
    """Passes over the pairs per finetune() call."""
    lora_batch_size: int = 8
    """Pairs per fine-tuning step."""
    cache_dir: str = ""
    """Cache root for the converted SmolLM2 model; empty means $ACE_HYBRID_CACHE or ~/.cache/ace_hybrid."""

    def validate(self) -> LLMConfig:
        """Check every field; return self.

        Raises
        ------
        ValueError
            Naming the first bad field, its value and the valid range.
        """

        def bad(name: str, valid: str) -> ValueError:
            return ValueError(f"LLMConfig.{name} = {getattr(self, name)!r} is invalid; valid: {valid}")

        def check_range(name: str, lo: float, hi: float, *, lo_open: bool = False) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(name, f"a finite number in {'(' if lo_open else '['}{lo}, {hi}]")
            if value > hi or value < lo or (lo_open and value == lo):
                raise bad(name, f"{'(' if lo_open else '['}{lo}, {hi}]")

        def check_int(name: str, lo: int, hi: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise bad(name, f"an integer in [{lo}, {hi}]")

        if self.backend not in BACKENDS:
            raise bad("backend", " | ".join(repr(b) for b in BACKENDS))
        if self.backend == "transformers" and not self.model_path:
            raise bad("model_path", "a local model directory (required by backend='transformers')")
        if self.backend == "openai":
            if not self.base_url.startswith(("http://", "https://")):
                raise bad("base_url", "an http:// or https:// URL (required by backend='openai')")
            if not self.model:
                raise bad("model", "the server's model name (required by backend='openai')")
        if not self.api_key_env or not self.api_key_env.replace("_", "").isalnum():
            raise bad("api_key_env", "an environment variable name ([A-Za-z0-9_]+)")
        check_range("timeout_s", 0.0, 86400.0, lo_open=True)
        check_int("max_retries", 0, 100)
        check_range("retry_backoff_s", 0.0, 60.0)
        check_range("temperature", 0.0, 10.0)
        check_range("top_p", 0.0, 1.0, lo_open=True)
        check_int("max_new_tokens", 1, 1_000_000)
        check_int("seed", 0, 2**63 - 1)
        if self.dtype not in ("float32", "bfloat16", "float16", "auto"):
            raise bad("dtype", "'float32' | 'bfloat16' | 'float16' | 'auto'")
        if not self.device:
            raise bad("device", "a torch device string such as 'cpu' or 'cuda:0'")
        check_int("score_batch_size", 1, 65536)
        if not isinstance(self.share_prompt_cache, bool):
            raise bad("share_prompt_cache", "True | False")
        if not isinstance(self.guided_choice, bool):
            raise bad("guided_choice", "True | False")
        if self.reduction not in ("sum", "mean"):
            raise bad("reduction", "'sum' | 'mean'")
        check_int("top_logprobs", 1, 20)
        if self.openai_scoring not in ("auto", "echo", "choice"):
            raise bad("openai_scoring", "'auto' | 'echo' | 'choice'")
        check_int("lora_rank", 1, 4096)
        check_range("lora_alpha", 0.0, 1e6, lo_open=True)
        check_range("lora_dropout", 0.0, 0.99)
        if not all(isinstance(m, str) and m for m in self.lora_target_modules):
            raise bad("lora_target_modules", "a tuple of non-empty module names (or empty for peft's default)")
        check_range("lora_lr", 0.0, 1.0, lo_open=True)
        check_int("lora_epochs", 1, 10_000)
        check_int("lora_batch_size", 1, 65536)
        return self

    def replace(self, **changes: Any) -> LLMConfig:
        """A validated copy with some fields changed (unknown names raise ValueError)."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"LLMConfig has no field(s) {unknown}; valid: {sorted(names)}")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return LLMConfig(**values).validate()
