"""The ``openai`` backend: any OpenAI-compatible HTTP server (vLLM, llama.cpp server, Ollama, hosted APIs).

Configuration comes from :class:`~ace_hybrid.llm.backend.LLMConfig`: ``base_url``, ``model``, ``timeout_s``,
``max_retries`` / ``retry_backoff_s`` (exponential backoff after timeouts, connection errors, HTTP 429 and
5xx; other HTTP errors fail at once), ``top_logprobs``, ``openai_scoring`` and ``guided_choice``. The API
key is read from the environment variable named by ``api_key_env`` (default ``OPENAI_API_KEY``) when the
backend is built; it is never stored in the config, logged, put in a repr or an error message (error text
from the server is scrubbed of it). Without the variable the placeholder key "EMPTY" is sent, which local
servers accept.

Log-probabilities
-----------------
* :meth:`OpenAIBackend.next_token_logprobs` asks the chat endpoint for one token with
  ``logprobs=True, top_logprobs=k``. A requested string's log-probability is the log of the total
  probability of the listed tokens that, stripped of whitespace, are non-empty prefixes of the string
  (and of no other requested string): ``"GOOD"``, ``" GOOD"`` and ``"GO"`` all count for "GOOD".
  **No floor:** a string with no listed token cannot be scored, and the call raises LLMError "malformed"
  (counted by the caller) rather than give every unlisted string the same made-up value: a tie among
  them would silently go to the first (an actor's label A). Raise ``llm.top_logprobs`` (at most 20) or
  ask about fewer strings.
* :meth:`OpenAIBackend.score_candidates` uses the completions endpoint with ``echo=True, logprobs=1``
  (method "echo": prompt text + " " + candidate, summing the log-probs of the tokens that overlap the
  candidate's characters) when the server supports it; otherwise (method "choice") it lists the candidates
  numbered 1..n in the chat prompt, asks for the number, and reads the first answer token's top
  log-probabilities (a missing number is "malformed", as above). ``openai_scoring`` = "auto" tries echo first
  and remembers when the server refuses it. The completions endpoint gets raw text: a message list is
  written as ``role: content`` lines followed by ``assistant:``.

Concurrency
-----------
Unlike the local backends, this one is thread-safe: several threads may call it at once (the ACE worker runs
``llm.concurrency`` refinements side by side against a server), and at most ``llm.concurrency`` requests are in flight
at any moment, whoever sends them (a semaphore around each HTTP attempt; a retry's backoff does not hold it).
:meth:`OpenAIBackend.next_token_logprobs_many` sends its prompts through a pool of that many threads, so LAC's
per-candidate judgements overlap on the server (vLLM batches concurrent requests). With the default of 1 every
request waits for the one before.

Errors follow :mod:`ace_hybrid.llm.backend`: every failure is an :class:`LLMError` whose ``kind`` is
"timeout", "connection", "http", "malformed" or "unsupported".
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ace_hybrid.llm.backend import (
    CandidateScores,
    FinetuneStats,
    Generation,
    LLMConfig,
    LLMError,
    Prompt,
    as_messages,
    check_reduction,
    check_strings,
    generate_request,
    new_stats,
)

__all__ = ["OpenAIBackend"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_UNSUPPORTED_STATUS = (400, 404, 405, 422)
_MAX_BACKOFF_S = 30.0


def _logsumexp(values: Sequence[float]) -> float:
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def _plain_text(prompt: Prompt) -> str:
    """Raw completion text for a prompt: ``role: content`` lines, then ``assistant:``."""
    return "".join(f"{m['role']}: {m['content']}\n" for m in as_messages(prompt)) + "assistant:"


class OpenAIBackend:
    """A model behind an OpenAI-compatible server, through the official ``openai`` client.

    Parameters
    ----------
    config : LLMConfig
        ``backend="openai"`` with ``base_url`` and ``model`` set.

    Raises
    ------
    LLMError
        kind "missing_dependency" when the ``openai`` package is not installed.
    """

    name: str = "openai"
    supports_finetune: bool = False

    def __init__(self, config: LLMConfig) -> None:
        self.config = config.validate()
        try:
            import openai
        except ImportError as exc:
            raise LLMError(f"{exc}; install it with: pip install openai", backend=self.name, kind="missing_dependency") from exc
        self._openai = openai
        key = os.environ.get(config.api_key_env, "")
        self._secret = key  # only used to scrub error text; never printed
        if not key:
            log.info("environment variable %s is not set; sending the placeholder key 'EMPTY'", config.api_key_env)
        self._client = openai.OpenAI(
            base_url=config.base_url, api_key=key or "EMPTY", timeout=config.timeout_s, max_retries=0
        )
        self._stats = new_stats()
        self._stats_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._echo_supported: bool | None = None if config.openai_scoring == "auto" else config.openai_scoring == "echo"

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(base_url={self.config.base_url!r}, model={self.config.model!r}, "
            f"api_key_env={self.config.api_key_env!r})"
        )

    @property
    def stats(self) -> dict[str, float]:
        """Counters since construction (a copy): calls, errors, retries, tokens_in, tokens_out, seconds (summed
        over requests, so it exceeds wall time when requests overlap)."""
        with self._stats_lock:
            return dict(self._stats)

    def close(self) -> None:
        """Stop the thread pool of :meth:`next_token_logprobs_many` (if it was started); the backend stays usable."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _count(self, key: str, value: float = 1) -> None:
        with self._stats_lock:
            self._stats[key] += value

    # ---------------------------------------------------------------------------------------- plumbing
    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _error(self, message: str, kind: str) -> LLMError:
        return LLMError(self._scrub(message), backend=self.name, kind=kind)

    def _request(self, what: str, call: Callable[[], Any], parse: Callable[[Any], _T]) -> _T:
        """Run ``call`` with retries and backoff, then ``parse`` its response; count everything."""
        openai = self._openai
        cfg = self.config
        started = time.perf_counter()
        self._count("calls")
        try:
            last: tuple[str, str] = ("http", "no attempt")
            for attempt in range(cfg.max_retries + 1):
                try:
                    with self._slots:  # at most llm.concurrency requests in flight
                        response = call()
                except openai.APITimeoutError:
                    last = ("timeout", f"no answer within {cfg.timeout_s} s")
                except openai.APIConnectionError as exc:
                    last = ("connection", f"{type(exc).__name__}: {exc}")
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    if status != 429 and status < 500:
                        kind = "unsupported" if status in _UNSUPPORTED_STATUS else "http"
                        raise self._error(f"{what}: HTTP {status}: {exc.message}", kind) from None
                    last = ("http", f"HTTP {status}: {exc.message}")
                except (openai.APIError, ValueError, TypeError) as exc:  # undecodable answer, bad fields
                    raise self._error(f"{what}: malformed answer: {type(exc).__name__}: {exc}", "malformed") from None
                else:
                    try:
                        return parse(response)
                    except LLMError:
                        raise
                    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
                        raise self._error(
                            f"{what}: malformed answer: {type(exc).__name__}: {exc}", "malformed"
                        ) from None
                if attempt < cfg.max_retries:
                    delay = min(cfg.retry_backoff_s * 2**attempt, _MAX_BACKOFF_S)
                    self._count("retries")
                    log.warning("%s: %s; retry %d/%d in %.2f s", what, self._scrub(last[1]), attempt + 1,
                                cfg.max_retries, delay)
                    time.sleep(delay)
            raise self._error(f"{what}: gave up after {cfg.max_retries + 1} attempt(s); last: {last[1]}", last[0])
        except LLMError:
            self._count("errors")
            raise
        finally:
            self._count("seconds", time.perf_counter() - started)

    def _count_usage(self, response: Any) -> tuple[int, int]:
        usage = getattr(response, "usage", None)
        tin = int(getattr(usage, "prompt_tokens", 0) or 0) if usage is not None else 0
        tout = int(getattr(usage, "completion_tokens", 0) or 0) if usage is not None else 0
        with self._stats_lock:
            self._stats["tokens_in"] += tin
            self._stats["tokens_out"] += tout
        return tin, tout

    def _chat(self, messages: list[dict[str, str]], **kwargs: Any) -> Callable[[], Any]:
        return lambda: self._client.chat.completions.create(model=self.config.model, messages=messages, **kwargs)

    @staticmethod
    def _first_message(response: Any) -> Any:
        choices = response.choices
        if not choices:
            raise ValueError("the answer has no choices")
        return choices[0]

    def _top_list(self, response: Any) -> list[tuple[str, float]]:
        """(token, logprob) pairs of the first answer token's top log-probabilities."""
        choice = self._first_message(response)
        content = getattr(choice.logprobs, "content", None) if choice.logprobs is not None else None
        if not content:
            raise self._error("the server returned no log-probabilities (logprobs unsupported?)", "unsupported")
        pairs = [(str(t.token), float(t.logprob)) for t in content[0].top_logprobs]
        if not pairs or not all(math.isfinite(v) for _, v in pairs):
            raise ValueError(f"top log-probabilities {pairs!r} are empty or not numbers")
        return pairs

    # ------------------------------------------------------------------------------------- generation
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
        """Answer a chat prompt through ``/chat/completions``.

        Parameters
        ----------
        prompt : str or list of messages
        max_new_tokens, temperature, seed : optional
            Config defaults when None; the seed is passed to the server (honoured by vLLM and OpenAI).
        top_logprobs : int
            0..20; when > 0 the server is asked for each token's top log-probabilities.
        choices : sequence of str, optional
            With ``guided_choice`` on, passed as vLLM's ``extra_body={"guided_choice": [...]}`` (an answer
            outside the choices is an LLMError "malformed"); otherwise the choices are scored with
            :meth:`score_candidates` and the best is returned (``finish_reason`` "choice").
        """
        cfg = self.config
        messages, max_new, temp, seed, top_logprobs, options = generate_request(
            cfg, prompt, max_new_tokens, temperature, seed, top_logprobs, choices)
        if options is not None and not cfg.guided_choice:
            scores = self.score_candidates(prompt, options)
            pick = int(np.argmax(scores.logprobs))
            return Generation(options[pick], 0, int(scores.n_tokens[pick]), "choice", None)
        kwargs: dict[str, Any] = {"max_tokens": max_new, "temperature": temp, "seed": seed}
        if temp > 0:
            kwargs["top_p"] = cfg.top_p
        if top_logprobs > 0:
            kwargs.update(logprobs=True, top_logprobs=top_logprobs)
        if options is not None:
            kwargs["extra_body"] = {"guided_choice": options}

        def parse(response: Any) -> Generation:
            choice = self._first_message(response)
            text = choice.message.content
            if not isinstance(text, str):
                raise ValueError(f"message content is {type(text).__name__}, not text")
            if options is not None and text.strip() not in options:
                raise self._error(f"guided answer {text[:80]!r} is not one of the {len(options)} choices", "malformed")
            tops = None
            if top_logprobs > 0 and choice.logprobs is not None and choice.logprobs.content:
                tops = tuple({str(t.token): float(t.logprob) for t in item.top_logprobs} for item in choice.logprobs.content)
            tin, tout = self._count_usage(response)
            finish = str(choice.finish_reason or "stop")
            return Generation(text.strip() if options is not None else text, tin, tout, finish, tops)

        return self._request("generate", self._chat(messages, **kwargs), parse)

    # ------------------------------------------------------------------------------------ log-probs
    def next_token_logprobs(self, prompt: Prompt, tokens: Sequence[str]) -> npt.NDArray[np.float64]:
        """log P(string | prompt) of each string's start at the first answer token, from top log-probs.

        Returns
        -------
        (k,) float64
            Listed probability mass of each string's first token (see the module docstring); LLMError
            "malformed" when some string has no listed token.
        """
        messages = as_messages(prompt)
        targets = check_strings(tokens, "tokens")
        if len(set(targets)) != len(targets):
            raise ValueError(f"tokens = {targets!r} contain duplicates")
        kwargs = {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": self.config.top_logprobs,
                  "seed": self.config.seed}

        def parse(response: Any) -> npt.NDArray[np.float64]:
            pairs = self._top_list(response)
            self._count_usage(response)
            return self._all_listed(_match_targets(pairs, targets), targets, pairs)

        return self._request("next_token_logprobs", self._chat(messages, **kwargs), parse)

    def next_token_logprobs_many(self, prompts: Sequence[Prompt], tokens: Sequence[str]) -> npt.NDArray[np.float64]:
        """(m, k) float64: :meth:`next_token_logprobs` for each of m prompts (one request each, up to
        ``llm.concurrency`` of them in flight at once; rows in the order of ``prompts``). The first failure is
        raised once every request has ended."""
        if isinstance(prompts, str) or len(prompts) == 0:
            raise ValueError(f"prompts = {prompts!r} must be a non-empty sequence of prompts")
        if self.config.concurrency == 1 or len(prompts) == 1:
            return np.stack([self.next_token_logprobs(p, tokens) for p in prompts])
        futures = [self._thread_pool().submit(self.next_token_logprobs, p, tokens) for p in prompts]
        errors = [f.exception() for f in futures]  # waits for all: nothing is left running behind a failure
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return np.stack([f.result() for f in futures])

    def _thread_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="openai")
            return self._pool

    def score_candidates(
        self, prompt: Prompt, candidates: Sequence[str], *, reduction: str | None = None
    ) -> CandidateScores:
        """Score candidate answers by echo log-probs, or by the numbered-choice fallback.

        Returns
        -------
        CandidateScores
            ``method`` says which was used: "echo" (sum or mean of candidate token log-probs) or "choice"
            (log P(answer = candidate's number); ``n_tokens`` all 1).
        """
        as_messages(prompt)
        items = check_strings(candidates, "candidates")
        reduction = check_reduction(reduction or self.config.reduction)
        if self._echo_supported is not False:
            try:
                return self._score_echo(prompt, items, reduction)
            except LLMError as exc:
                if self.config.openai_scoring == "echo" or exc.kind not in ("unsupported", "malformed"):
                    raise
                if exc.kind == "unsupported":
                    self._echo_supported = False
                log.info("echo scoring unavailable (%s); using numbered choices", exc)
        return self._score_choice(prompt, items, reduction)

    def _score_echo(self, prompt: Prompt, items: list[str], reduction: str) -> CandidateScores:
        head = _plain_text(prompt)
        texts = [f"{head} {c}" for c in items]
        start = len(head)

        def call() -> Any:
            return self._client.completions.create(
                model=self.config.model, prompt=texts, echo=True, logprobs=1, max_tokens=1, temperature=0.0
            )

        def parse(response: Any) -> CandidateScores:
            rows = sorted(response.choices, key=lambda c: c.index)
            if len(rows) != len(items):
                raise ValueError(f"{len(rows)} choices for {len(items)} prompts")
            sums = np.empty(len(items), dtype=np.float64)
            counts = np.empty(len(items), dtype=np.int64)
            for i, (row, text) in enumerate(zip(rows, texts)):
                lp = row.logprobs
                offsets = list(getattr(lp, "text_offset", None) or []) if lp is not None else []
                values = list(getattr(lp, "token_logprobs", None) or []) if lp is not None else []
                if not offsets or len(offsets) != len(values):
                    raise self._error("the server returned no echoed prompt log-probabilities", "unsupported")
                picked = [
                    values[j]
                    for j in range(len(offsets))
                    if offsets[j] < len(text) and (offsets[j + 1] if j + 1 < len(offsets) else math.inf) > start
                ]
                if not picked or any(v is None or not math.isfinite(float(v)) for v in picked):
                    raise ValueError(f"candidate {i}: token log-probs {picked!r} missing or not finite")
                sums[i] = float(sum(float(v) for v in picked))
                counts[i] = len(picked)
            self._count_usage(response)
            return CandidateScores(sums / counts if reduction == "mean" else sums, counts, "echo", reduction)

        result = self._request("score_candidates(echo)", call, parse)
        self._echo_supported = True
        return result

    def _score_choice(self, prompt: Prompt, items: list[str], reduction: str) -> CandidateScores:
        listing = "\n".join(f"{i + 1}. {c}" for i, c in enumerate(items))
        ask = f"Candidates:\n{listing}\n\nAnswer with the number of the best candidate only."
        messages = as_messages(prompt)
        if messages[-1]["role"] == "user":
            messages[-1] = {"role": "user", "content": f"{messages[-1]['content']}\n\n{ask}"}
        else:
            messages.append({"role": "user", "content": ask})
        numbers = [str(i + 1) for i in range(len(items))]
        kwargs = {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": self.config.top_logprobs,
                  "seed": self.config.seed}

        def parse(response: Any) -> CandidateScores:
            pairs = self._top_list(response)
            listed = {}
            for token, value in pairs:
                key = token.strip()
                if key in numbers:
                    listed.setdefault(key, []).append(value)
            out = np.array([_logsumexp(listed[n]) if n in listed else np.nan for n in numbers], dtype=np.float64)
            self._count_usage(response)
            self._all_listed(out, numbers, pairs)
            return CandidateScores(out, np.ones(len(items), dtype=np.int64), "choice", reduction)

        return self._request("score_candidates(choice)", self._chat(messages, **kwargs), parse)

    def _all_listed(self, values: npt.NDArray[np.float64], targets: list[str],
                    pairs: list[tuple[str, float]]) -> npt.NDArray[np.float64]:
        """``values`` if every target was scored; else LLMError "malformed" naming the unlisted ones."""
        missing = [t for t, v in zip(targets, values) if np.isnan(v)]
        if missing:
            raise self._error(f"{missing!r} not among the top {len(pairs)} log-probabilities {[t for t, _ in pairs]!r}: "
                              "they cannot be scored (raise llm.top_logprobs, at most 20, or offer fewer)", "malformed")
        return values

    # ------------------------------------------------------------------------------------------ LoRA
    def finetune(self, pairs: Sequence[tuple[Prompt, str]], **kwargs: Any) -> FinetuneStats:
        """Not possible through an inference server: always LLMError(kind="unsupported")."""
        raise self._error("fine-tuning is not available through an OpenAI-compatible server", "unsupported")

    def save_adapter(self, directory: str | os.PathLike[str]) -> None:
        """Always LLMError(kind="unsupported")."""
        raise self._error("adapters are not available through an OpenAI-compatible server", "unsupported")

    def load_adapter(self, directory: str | os.PathLike[str]) -> None:
        """Always LLMError(kind="unsupported") (serve the adapter with the server instead, e.g. vLLM --lora-modules)."""
        raise self._error("adapters are not available through an OpenAI-compatible server", "unsupported")


def _match_targets(pairs: list[tuple[str, float]], targets: list[str]) -> npt.NDArray[np.float64]:
    """Listed log-probability mass of each target's start; NaN when none is listed."""
    out = np.empty(len(targets), dtype=np.float64)
    for i, target in enumerate(targets):
        values = []
        for token, value in pairs:
            key = token.strip()
            if key and target.startswith(key) and not any(o.startswith(key) for o in targets if o != target):
                values.append(value)
        out[i] = _logsumexp(values) if values else np.nan
    return out
