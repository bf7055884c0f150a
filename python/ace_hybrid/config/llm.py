"""Section ``[llm]``: which language model to use and how (backends, scoring, LoRA fine-tuning)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["BACKENDS", "LLMConfig"]

BACKENDS = ("smollm2", "transformers", "openai", "none")
"""Valid values of :attr:`LLMConfig.backend`."""


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
    lora_rank: int = 16
    """LoRA rank r of a new adapter (16 and lr 5e-4 are what taught the embedded model's judge on
    benchmarks/bench_coevolution.py's dev split: docs/ace.md)."""
    lora_alpha: float = 32.0
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch during fine-tuning."""
    lora_target_modules: tuple[str, ...] = ()
    """Module names LoRA wraps; empty means peft's default for the architecture (or ("all-linear",))."""
    lora_lr: float = 5e-4
    """AdamW learning rate of fine-tuning."""
    lora_epochs: int = 1
    """Passes over the pairs per finetune() call."""
    lora_batch_size: int = 8
    """Pairs per fine-tuning step (the loss is the mean over the answer tokens of all of them)."""
    lora_micro_batch: int = 1
    """Pairs per forward/backward pass inside a step; gradients accumulate to the same step (the loss and its
    gradient are those of the whole step, to float rounding). 1 needs no padding, so attention runs unmasked, and
    keeps the activations of one prompt only: one SmolLM2-135M step on 8 prompts of 901 tokens peaked at 12.0 GB in
    one pass, 1.7 GB this way with checkpointing, 80 s and 79 s (one run each; benchmarks/bench_lora_memory.py). Raise it on a
    GPU."""
    lora_checkpointing: bool = True
    """Gradient checkpointing during fine-tuning: each layer's activations are recomputed in the backward pass
    instead of kept (about a third more compute for a fraction of the memory; long grid prompts need it on CPU)."""
    cache_dir: str = ""
    """Cache root for the converted SmolLM2 model; empty means $ACE_HYBRID_CACHE or ~/.cache/ace_hybrid."""
    concurrency: int = 1
    """Requests in flight at once to an OpenAI-compatible server ("openai" backend only): the ACE worker refines
    this many transitions side by side, and batched log-prob reads (LAC) send their prompts in parallel."""

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
        check_int("lora_micro_batch", 1, 65536)
        if not isinstance(self.lora_checkpointing, bool):
            raise bad("lora_checkpointing", "true | false")
        check_int("concurrency", 1, 256)
        if self.concurrency > 1 and self.backend != "openai":
            raise bad("concurrency", "1 for local backends (one model, one request at a time); > 1 needs "
                      "backend='openai'")
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
