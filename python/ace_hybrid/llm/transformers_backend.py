"""The ``transformers`` backend: any local causal-LM directory, scored and LoRA-tuned in process.

Scoring is teacher forcing: the prompt (rendered with the model's chat template and the assistant
generation prompt) followed by each candidate's tokens, summing (or averaging) the candidate tokens'
log-probabilities. By default (``LLMConfig.share_prompt_cache``) the prompt runs once and its key/value
cache is repeated over one batched forward of all candidates, so 8 candidates after a 300-token prompt
cost about one prompt, not eight. Otherwise (or when an architecture's cache cannot be repeated) every
prompt + candidate sequence goes through one left-padded batched forward. Either way only the logits of
the candidate positions are computed (``logits_to_keep``), so a large vocabulary stays cheap in memory.

Fine-tuning is LoRA through peft on the answer tokens only (prompt tokens carry no loss). The first
:meth:`TransformersBackend.finetune` creates the adapter; later calls keep training it;
:meth:`TransformersBackend.load_adapter` hot-swaps it.

Errors follow :mod:`ace_hybrid.llm.backend`: :class:`LLMError` for anything the model or the files do wrong,
ValueError for invalid arguments.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ace_hybrid.llm import shared_prefix
from ace_hybrid.llm.backend import (
    CandidateScores,
    FinetuneStats,
    Generation,
    LLMConfig,
    LLMError,
    Prompt,
    as_messages,
    check_finetune_args,
    check_reduction,
    check_strings,
    generate_request,
    new_stats,
)

__all__ = ["TransformersBackend"]

log = logging.getLogger(__name__)

_IGNORE = -100
ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""The adapter weights file :meth:`TransformersBackend.load_adapter` reads (peft's safetensors name)."""


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Hide transformers' tqdm bars (loading, converting) for the duration."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _quiet_third_party() -> Iterator[None]:
    """Silence known deprecation chatter between peft and newer transformers (not ours to fix)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
        warnings.filterwarnings("ignore", message=r".*is_activation_checkpointing.*", category=FutureWarning)
        yield


class TransformersBackend:
    """A local Hugging Face causal LM (e.g. Qwen2-7B-Instruct) behind the :class:`LLMBackend` protocol.

    Parameters
    ----------
    model_path : str or PathLike
        Directory with config.json, weights and tokenizer files; loaded offline (``local_files_only``).
    config : LLMConfig, optional
        Generation, scoring, device/dtype and LoRA defaults (``LLMConfig(backend="transformers")`` if None).
    name : str
        Name reported in errors and by :attr:`name`.

    Raises
    ------
    LLMError
        kind "missing_dependency" when torch/transformers are not installed, "io" when the directory cannot
        be loaded.
    """

    supports_finetune: bool = True

    def __init__(
        self, model_path: str | os.PathLike[str], config: LLMConfig | None = None, *, name: str = "transformers"
    ) -> None:
        self.name = name
        cfg = config if config is not None else LLMConfig(backend="transformers", model_path=str(model_path))
        self.config = cfg.validate()
        self.model_path = Path(model_path)
        self._stats = new_stats()
        self._adapter: str | None = None
        self._adapter_serial = 0
        self._finetune_calls = 0
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise LLMError(
                f"{exc}; install the LLM extras: pip install torch transformers peft", backend=name,
                kind="missing_dependency",
            ) from exc
        self._torch = torch
        started = time.perf_counter()
        dtype: Any = "auto" if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
        try:
            with _no_progress_bars():
                self.tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(self.model_path, local_files_only=True, dtype=dtype)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise LLMError(f"cannot load a causal LM from {str(self.model_path)!r}: {exc}", backend=name, kind="io") from exc
        self.device = torch.device(cfg.device)
        model.to(self.device)
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        self.model: Any = model
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        self._eos_ids = self._end_of_answer_ids()
        forward_parameters = inspect.signature(model.forward).parameters
        self._has_logits_to_keep = "logits_to_keep" in forward_parameters
        # transformers >= 5.24 renamed the key/value cache argument and output field to `cache` (the old
        # `past_key_values` still works there but warns); older releases know only `past_key_values`.
        self._cache_name = "cache" if "cache" in forward_parameters else "past_key_values"
        self._prefix_ok = True
        self.load_seconds = time.perf_counter() - started
        """Seconds spent loading the model and tokenizer."""

    # ----------------------------------------------------------------------------------------- helpers
    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model_path={str(self.model_path)!r}, device={str(self.device)!r}, "
            f"adapter={self._adapter!r})"
        )

    @property
    def stats(self) -> dict[str, float]:
        """Counters since construction (a copy): calls, errors, retries, tokens_in, tokens_out, seconds,
        finetune_steps."""
        return dict(self._stats)

    @property
    def adapter(self) -> str | None:
        """Name of the active LoRA adapter, or None when the base model is used."""
        return self._adapter

    def _end_of_answer_ids(self) -> list[int]:
        ids = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        for value in gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]:
            if value is not None:
                ids.add(int(value))
        return sorted(ids)

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Count the call and its time; turn any failure inside into LLMError(kind="model")."""
        started = time.perf_counter()
        self._stats["calls"] += 1
        try:
            yield
        except LLMError:
            self._stats["errors"] += 1
            raise
        except Exception as exc:  # torch / transformers / peft failures: one documented type for the caller
            self._stats["errors"] += 1
            raise LLMError(f"{what} failed: {type(exc).__name__}: {exc}", backend=self.name, kind="model") from exc
        finally:
            self._stats["seconds"] += time.perf_counter() - started

    def render(self, prompt: Prompt) -> list[int]:
        """Token ids of ``prompt`` with the chat template and the assistant generation prompt.

        Without a chat template the messages are written as ``role: content`` lines followed by
        ``assistant: `` (with the tokenizer's special tokens, e.g. BOS).
        """
        messages = as_messages(prompt)
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def encode(self, text: str) -> list[int]:
        """Token ids of a continuation (no special tokens)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _left_padded(self, sequences: Sequence[Sequence[int]]) -> tuple[Any, Any, Any]:
        """(input_ids, attention_mask, position_ids), each (B, T) int64 on the device, left-padded."""
        torch = self._torch
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
            mask[row, width - len(seq) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    def _tail_logprobs(self, sequences: Sequence[Sequence[int]], tail: int) -> tuple[Any, Any]:
        """Log-probs of the last ``tail`` tokens of each left-padded sequence.

        Returns (token_logprobs (B, tail) float32, targets (B, tail) int64); rows shorter than ``tail``
        have padding in front, which the caller masks out.
        """
        torch = self._torch
        ids, mask, positions = self._left_padded(sequences)
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": positions,
                                  "use_cache": False}  # one pass, nothing to reuse (and none under checkpointing)
        if self._has_logits_to_keep:
            kwargs["logits_to_keep"] = tail + 1
        logits = self.model(**kwargs).logits[:, -(tail + 1) : -1, :]
        logp = torch.log_softmax(logits.float(), dim=-1)
        targets = ids[:, -tail:]
        return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), targets

    # ----------------------------------------------------------------------------------------- scoring
    def score_candidates(
        self, prompt: Prompt, candidates: Sequence[str], *, reduction: str | None = None
    ) -> CandidateScores:
        """Log-probability of each candidate as the assistant's answer to ``prompt``.

        Parameters
        ----------
        prompt : str or list of messages
        candidates : sequence of str, non-empty strings
            Tokenised on their own (no special tokens) and appended to the rendered prompt.
        reduction : {"sum", "mean"}, optional
            Sum of the candidate tokens' log-probs, or their mean per token (config default when None).

        Returns
        -------
        CandidateScores
            ``logprobs`` (n,) float64, ``n_tokens`` (n,) int64, method "teacher_forcing".
        """
        as_messages(prompt)
        items = check_strings(candidates, "candidates")
        reduction = check_reduction(reduction or self.config.reduction)
        with self._guard("score_candidates"), self._torch.inference_mode():
            prompt_ids = self.render(prompt)
            cand_ids = [self.encode(c) for c in items]
            totals = np.empty(len(items), dtype=np.float64)
            counts = np.array([len(c) for c in cand_ids], dtype=np.int64)
            step = self.config.score_batch_size
            shared = self.config.share_prompt_cache and self._prefix_ok and len(items) > 1
            if shared:
                try:
                    totals[:] = shared_prefix.continuation_logprobs(self, prompt_ids, cand_ids)
                    self._stats["tokens_in"] += len(prompt_ids) + int(counts.sum())
                except (AttributeError, TypeError, NotImplementedError) as exc:
                    self._no_prefix_sharing(exc)
                    shared = False
            for start in range(0, 0 if shared else len(items), step):
                chunk = cand_ids[start : start + step]
                tail = max(len(c) for c in chunk)
                lp, _ = self._tail_logprobs([prompt_ids + c for c in chunk], tail)
                lens = self._torch.tensor([len(c) for c in chunk], device=lp.device)
                in_candidate = self._torch.arange(tail, device=lp.device)[None, :] >= (tail - lens)[:, None]
                sums = (lp * in_candidate).sum(-1).double().cpu().numpy()
                totals[start : start + len(chunk)] = sums
                self._stats["tokens_in"] += sum(len(prompt_ids) + len(c) for c in chunk)
            if not np.all(np.isfinite(totals)):
                raise LLMError(f"non-finite candidate scores {totals}", backend=self.name, kind="model")
        if reduction == "mean":
            totals = totals / counts
        return CandidateScores(totals, counts, "teacher_forcing", reduction)

    def _no_prefix_sharing(self, exc: Exception) -> None:
        """This architecture's cache cannot be repeated over a batch: score full sequences from now on."""
        log.warning("prompt-cache sharing unavailable (%s: %s); scoring full sequences", type(exc).__name__, exc)
        self._prefix_ok = False

    def first_token_ids(self, tokens: Sequence[str]) -> list[int]:
        """Token id of the first token of each string (ValueError if two strings share it)."""
        items = check_strings(tokens, "tokens")
        encoded = [self.encode(t) for t in items]
        empty = [t for t, e in zip(items, encoded) if not e]
        if empty:
            raise ValueError(f"tokens {empty!r} encode to no token")
        ids = [e[0] for e in encoded]
        if len(set(ids)) != len(ids):
            raise ValueError(
                f"tokens = {items!r} start with the same token(s) {ids}; give strings whose first tokens differ"
            )
        return ids

    def next_token_logprobs(self, prompt: Prompt, tokens: Sequence[str]) -> npt.NDArray[np.float64]:
        """log P(first token of each string | prompt) at the first answer position.

        Parameters
        ----------
        prompt : str or list of messages
        tokens : sequence of str
            E.g. ``["GOOD", "BAD"]``; each string's first token (encoded without special tokens) is read.

        Returns
        -------
        (k,) float64
            Exact log-probabilities from the full softmax (never missing).
        """
        return self.next_token_logprobs_many([prompt], tokens)[0]

    def next_token_logprobs_many(
        self, prompts: Sequence[Prompt], tokens: Sequence[str]
    ) -> npt.NDArray[np.float64]:
        """(m, k) float64: :meth:`next_token_logprobs` for m prompts in left-padded batches."""
        if isinstance(prompts, str) or len(prompts) == 0:
            raise ValueError(f"prompts = {prompts!r} must be a non-empty sequence of prompts")
        for p in prompts:
            as_messages(p)
        token_ids = self.first_token_ids(tokens)
        out = np.empty((len(prompts), len(token_ids)), dtype=np.float64)
        torch = self._torch
        with self._guard("next_token_logprobs"), torch.inference_mode():
            rendered = [self.render(p) for p in prompts]
            index = torch.tensor(token_ids, device=self.device)
            shared = shared_prefix.common_prefix(rendered) if len(rendered) > 1 else 0
            if self.config.share_prompt_cache and self._prefix_ok and shared >= shared_prefix.MIN_SHARED_TOKENS:
                try:
                    out[:] = shared_prefix.next_token_logprobs(self, rendered, shared, index)
                    self._stats["tokens_in"] += shared + sum(len(r) - shared for r in rendered)
                    return out
                except (AttributeError, TypeError, NotImplementedError) as exc:
                    self._no_prefix_sharing(exc)
            step = self.config.score_batch_size
            for start in range(0, len(rendered), step):
                chunk = rendered[start : start + step]
                ids, mask, positions = self._left_padded(chunk)
                kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
                if self._has_logits_to_keep:
                    kwargs["logits_to_keep"] = 1
                logits = self.model(**kwargs).logits[:, -1, :]
                logp = torch.log_softmax(logits.float(), dim=-1)[:, index]
                out[start : start + len(chunk)] = logp.double().cpu().numpy()
                self._stats["tokens_in"] += sum(len(r) for r in chunk)
        return out

    # -------------------------------------------------------------------------------------- generation
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

        Parameters
        ----------
        prompt : str or list of messages
        max_new_tokens : int, optional
            Cap on generated tokens (config default when None).
        temperature : float, optional
            0 is greedy; > 0 samples (with the config's top_p), seeded by ``seed`` (config seed when None)
            without touching the global torch generator.
        seed : int, optional
        top_logprobs : int
            When > 0, each generated token's k most likely tokens (from the unwarped logits).
        choices : sequence of str, optional
            Constrain the answer to one of these strings, exactly: the choices are scored
            (:meth:`score_candidates`, sum) and the best is returned (greedy) or one is sampled from
            ``softmax(score / temperature)``. ``finish_reason`` is then "choice".
        """
        cfg = self.config
        _, max_new, temp, seed, top_logprobs, options = generate_request(
            cfg, prompt, max_new_tokens, temperature, seed, top_logprobs, choices)
        if options is not None:
            return self._generate_choice(prompt, options, temp, seed)
        torch = self._torch
        from transformers import GenerationConfig

        with self._guard("generate"), torch.inference_mode():
            prompt_ids = self.render(prompt)
            gen_cfg = GenerationConfig(
                max_new_tokens=max_new,
                do_sample=temp > 0,
                temperature=temp if temp > 0 else None,
                top_p=cfg.top_p if temp > 0 else None,
                top_k=None,
                pad_token_id=self._pad_id,
                eos_token_id=self._eos_ids or None,
                return_dict_in_generate=True,
                output_logits=top_logprobs > 0,
            )
            input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
            devices = [self.device.index or 0] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                out = self.model.generate(
                    input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gen_cfg
                )
            new_ids = out.sequences[0, len(prompt_ids) :].tolist()
            finish = "stop" if new_ids and new_ids[-1] in self._eos_ids else "length"
            tops = None
            if top_logprobs > 0 and out.logits is not None:
                tops_list = []
                for step_logits in out.logits:
                    values, indices = torch.log_softmax(step_logits[0].float(), -1).topk(top_logprobs)
                    tops_list.append(
                        {self.tokenizer.decode([int(i)]): float(v) for v, i in zip(values.tolist(), indices.tolist())}
                    )
                tops = tuple(tops_list)
            text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
            self._stats["tokens_in"] += len(prompt_ids)
            self._stats["tokens_out"] += len(new_ids)
        return Generation(text, len(prompt_ids), len(new_ids), finish, tops)

    def _generate_choice(self, prompt: Prompt, choices: list[str], temp: float, seed: int) -> Generation:
        scores = self.score_candidates(prompt, choices, reduction="sum")
        if temp > 0:
            z = scores.logprobs / temp
            p = np.exp(z - z.max())
            pick = int(np.random.default_rng(seed).choice(len(choices), p=p / p.sum()))
        else:
            pick = int(np.argmax(scores.logprobs))
        self._stats["tokens_out"] += int(scores.n_tokens[pick])
        n_prompt = len(self.render(prompt))
        return Generation(choices[pick], n_prompt, int(scores.n_tokens[pick]), "choice", None)

    # ----------------------------------------------------------------------------------------- LoRA
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
        """LoRA-train on prompt -> answer pairs, the loss on the answer tokens (and end-of-answer) only.

        Parameters
        ----------
        pairs : sequence of (prompt, answer)
            The answer is what the assistant should reply; an end-of-answer token is appended.
        rank, alpha : optional
            LoRA rank and scaling of a *new* adapter (config defaults); ignored when an adapter exists,
            which keeps training.
        lr, epochs, batch_size : optional
            AdamW learning rate, passes over the pairs, pairs per step (config defaults).

        Returns
        -------
        FinetuneStats
            ``losses`` holds each step's mean answer-token cross-entropy before the step.
        """
        cfg = self.config
        rank = cfg.lora_rank if rank is None else rank
        alpha = cfg.lora_alpha if alpha is None else alpha
        lr = cfg.lora_lr if lr is None else lr
        epochs = cfg.lora_epochs if epochs is None else epochs
        batch_size = cfg.lora_batch_size if batch_size is None else batch_size
        items = check_finetune_args(pairs, rank, alpha, lr, epochs, batch_size)
        started = time.perf_counter()
        with self._guard("finetune"), _quiet_third_party():
            self._ensure_adapter(rank, float(alpha))
            examples = [(self.render(p), self.encode(a) + self._eos_ids[:1]) for p, a in items]
            params = [p for p in self.model.parameters() if p.requires_grad]
            losses = self._train(examples, params, float(lr), epochs, batch_size)
        return FinetuneStats(len(losses), epochs, len(items), sum(len(a) for _, a in examples), tuple(losses),
                             sum(p.numel() for p in params), time.perf_counter() - started)

    def _train(self, examples: list[tuple[list[int], list[int]]], params: list[Any], lr: float, epochs: int,
               batch_size: int) -> list[float]:
        """AdamW over ``epochs`` shuffled passes of ``examples`` (prompt ids, answer ids); each step's loss."""
        from tqdm.auto import tqdm  # a dependency of transformers

        torch, cfg = self._torch, self.config
        optimizer = torch.optim.AdamW(params, lr=lr)
        generator = torch.Generator().manual_seed(cfg.seed + self._finetune_calls)
        self._finetune_calls += 1
        if cfg.lora_checkpointing:
            self._enable_checkpointing()
        losses: list[float] = []
        steps = epochs * -(-len(examples) // batch_size)
        bar = tqdm(total=steps, desc="LoRA fine-tuning", unit="step", leave=False, disable=steps < 4)
        self.model.train()
        try:
            for _ in range(epochs):
                order = torch.randperm(len(examples), generator=generator).tolist()
                for start in range(0, len(order), batch_size):
                    batch = [examples[j] for j in order[start : start + batch_size]]
                    optimizer.zero_grad(set_to_none=True)
                    loss = self._accumulate_answer_loss(batch, cfg.lora_micro_batch)
                    if not np.isfinite(loss):
                        raise LLMError(f"non-finite fine-tuning loss {loss}", backend=self.name, kind="model")
                    optimizer.step()
                    losses.append(loss)
                    bar.update()
                    bar.set_postfix(loss=f"{loss:.3f}")
                    self._stats["finetune_steps"] += 1
                    self._stats["tokens_in"] += sum(len(p) + len(a) for p, a in batch)
        finally:
            bar.close()
            self.model.eval()
        return losses

    def _enable_checkpointing(self) -> None:
        """Activation checkpointing, non-reentrant (it works with frozen embeddings, no input grads needed); it
        is idle in eval mode. transformers >= 5 renamed the switch."""
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        kwargs = {"use_reentrant": False}
        if hasattr(base, "activation_checkpointing_enable"):
            if not base.is_activation_checkpointing:
                base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        elif not base.is_gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    def _accumulate_answer_loss(self, batch: Sequence[tuple[list[int], list[int]]], micro: int) -> float:
        """Backward of one step's loss -- the mean log-loss over the answer tokens of every pair in ``batch`` --
        in passes of ``micro`` pairs: each pass adds its answer tokens' summed loss divided by the step's token
        count, so the accumulated gradient is the whole step's. Returns the step's loss."""
        torch = self._torch
        total = sum(len(a) for _, a in batch)
        loss = 0.0
        for start in range(0, len(batch), micro):
            part = batch[start : start + micro]
            tail = max(len(a) for _, a in part)
            lp, _ = self._tail_logprobs([p + a for p, a in part], tail)
            lens = torch.tensor([len(a) for _, a in part], device=lp.device)
            in_answer = torch.arange(tail, device=lp.device)[None, :] >= (tail - lens)[:, None]
            piece = -(lp * in_answer).sum() / total
            piece.backward()
            loss += float(piece.item())
        return loss

    def _new_adapter_name(self) -> str:
        self._adapter_serial += 1
        return f"ace_{self._adapter_serial}"

    def _ensure_adapter(self, rank: int, alpha: float) -> None:
        if self._adapter is not None:
            return
        from peft import LoraConfig, get_peft_model

        name = self._new_adapter_name()
        targets: Any = list(self.config.lora_target_modules) or None
        if targets == ["all-linear"]:
            targets = "all-linear"
        torch = self._torch
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.config.seed)
            lora = LoraConfig(
                r=rank, lora_alpha=alpha, lora_dropout=self.config.lora_dropout, target_modules=targets,
                task_type="CAUSAL_LM",
            )
            try:
                model = get_peft_model(self.model, lora, adapter_name=name)
            except ValueError:
                if targets is not None:
                    raise
                # peft has no default target list for this architecture: wrap every linear layer.
                lora.target_modules = "all-linear"
                model = get_peft_model(self.model, lora, adapter_name=name)
        self.model = model
        self.model.eval()
        self._adapter = name

    def save_adapter(self, directory: str | os.PathLike[str]) -> None:
        """Write the active LoRA adapter (adapter_config.json + weights) to ``directory``.

        The files are written to a temporary sibling directory first and renamed into place, so a reader
        never sees a half-written adapter; an existing ``directory`` is replaced.

        Raises
        ------
        ValueError
            When there is no adapter yet (call :meth:`finetune` or :meth:`load_adapter` first).
        LLMError
            kind "io" when writing fails.
        """
        if self._adapter is None:
            raise ValueError("no LoRA adapter to save: call finetune() or load_adapter() first")
        target = Path(directory)
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with self._guard("save_adapter"):
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with _quiet_third_party():
                    self.model.save_pretrained(str(tmp), selected_adapters=[self._adapter])
                source = tmp / self._adapter if (tmp / self._adapter / "adapter_config.json").exists() else tmp
                _replace_dir(source, target)
            except OSError as exc:
                raise LLMError(f"cannot save the adapter to {str(target)!r}: {exc}", backend=self.name, kind="io") from exc
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

    def load_adapter(self, directory: str | os.PathLike[str]) -> None:
        """Hot-swap the LoRA adapter saved in ``directory``: the next call (score, generate) uses it and
        :meth:`finetune` keeps training it. The previous adapter is dropped.

        Raises
        ------
        LLMError
            kind "io" when the directory holds no adapter or it does not fit this model.
        """
        source = Path(directory)
        with self._guard("load_adapter"), _quiet_third_party():
            if not (source / "adapter_config.json").is_file():
                raise LLMError(f"no adapter_config.json in {str(source)!r}", backend=self.name, kind="io")
            # Weights as safetensors only (what save_adapter writes): peft would read a pickled
            # adapter_model.bin, whose safety then rests on its torch.load settings.
            if not (source / ADAPTER_WEIGHTS).is_file():
                raise LLMError(f"no {ADAPTER_WEIGHTS} in {str(source)!r}: adapters are loaded from safetensors "
                               "only (a pickled adapter_model.bin is refused)", backend=self.name, kind="io")
            from peft import PeftModel

            name = self._new_adapter_name()
            try:
                if self._adapter is None:
                    self.model = PeftModel.from_pretrained(self.model, str(source), adapter_name=name, is_trainable=True)
                else:
                    self.model.load_adapter(str(source), adapter_name=name, is_trainable=True)
                    self.model.set_adapter(name)
                    self.model.delete_adapter(self._adapter)
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise LLMError(f"cannot load the adapter in {str(source)!r}: {exc}", backend=self.name, kind="io") from exc
            self.model.eval()
            self._adapter = name


def _replace_dir(source: Path, target: Path) -> None:
    """Move ``source`` to ``target`` with renames only (the old ``target``, if any, is removed after)."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(target, old)
    os.rename(source, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
