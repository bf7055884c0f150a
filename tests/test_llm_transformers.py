"""The transformers backend's real code path (scoring, next-token log-probs, generation, LoRA via peft) on a
tiny randomly initialised Qwen2-style model that the tests build themselves; plus LLMConfig and make_backend."""

from __future__ import annotations

import os
import pathlib

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may be downloaded

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("tokenizers")

from ace_hybrid.llm import LLMConfig, LLMError, make_backend
from ace_hybrid.llm.backend import LLMBackend
from ace_hybrid.llm.transformers_backend import TransformersBackend


import llm_fixtures as fixtures  # noqa: E402 (tests/ is on sys.path: see conftest.py)

PROMPT = "State: line 3 is overloaded. Which action?"
CANDIDATES = ["do nothing", "reconnect line 3", "set bus 2 at substation 4", "GOOD"]
PAIRS = [
    ("color of the sky?", "blue"),
    ("color of grass?", "green"),
    ("the fox is?", "quick brown"),
    ("say no", "no"),
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return fixtures.build_tiny_model(tmp_path_factory.mktemp("tiny_lm"))


def _backend(tiny_dir: pathlib.Path, **changes) -> TransformersBackend:
    cfg = LLMConfig(backend="transformers", model_path=str(tiny_dir), lora_lr=2e-2, lora_rank=8, seed=0)
    return TransformersBackend(tiny_dir, cfg.replace(**changes) if changes else cfg)


@pytest.fixture(scope="module")
def backend(tiny_dir: pathlib.Path) -> TransformersBackend:
    return _backend(tiny_dir)


def _reference_logprobs(b: TransformersBackend, prompt, continuation: str) -> np.ndarray:
    """Token log-probs of ``continuation`` after ``prompt`` from one plain unpadded forward (full logits)."""
    p = b.render(prompt)
    c = b.encode(continuation)
    ids = torch.tensor([p + c])
    with torch.no_grad():
        logp = torch.log_softmax(b.model(input_ids=ids).logits[0].double(), -1)
    return np.array([logp[len(p) - 1 + i, tok].item() for i, tok in enumerate(c)])


# ------------------------------------------------------------------------------------------- scoring
def test_backend_follows_the_protocol(backend: TransformersBackend) -> None:
    assert isinstance(backend, LLMBackend)
    assert backend.supports_finetune
    assert backend.name == "transformers"


def test_batched_scoring_equals_a_per_candidate_loop(tiny_dir: pathlib.Path) -> None:
    b = _backend(tiny_dir, score_batch_size=3)  # 4 candidates: two chunks of different widths
    batched = b.score_candidates(PROMPT, CANDIDATES)
    loop = np.array([b.score_candidates(PROMPT, [c]).logprobs[0] for c in CANDIDATES])
    assert batched.method == "teacher_forcing" and batched.reduction == "sum"
    assert batched.logprobs.dtype == np.float64 and batched.logprobs.shape == (4,)
    np.testing.assert_allclose(batched.logprobs, loop, rtol=1e-5, atol=1e-4)
    assert list(batched.n_tokens) == [len(b.encode(c)) for c in CANDIDATES]


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_the_shared_prompt_cache_gives_the_scores_of_full_sequences(tiny_dir: pathlib.Path, batch: int) -> None:
    shared = _backend(tiny_dir, score_batch_size=batch, share_prompt_cache=True)
    full = _backend(tiny_dir, score_batch_size=batch, share_prompt_cache=False)
    a = shared.score_candidates(PROMPT, CANDIDATES)
    b = full.score_candidates(PROMPT, CANDIDATES)
    assert shared._prefix_ok  # the shared path ran; it did not fall back
    np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=1e-5, atol=1e-4)
    assert shared.stats["tokens_in"] < full.stats["tokens_in"]


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_prompts_with_a_common_start_run_it_once_and_read_the_same_next_tokens(tiny_dir: pathlib.Path,
                                                                               batch: int) -> None:
    state = "State: line 3 is overloaded at rho 1.05 and line 7 at 0.95 near substation 4. " * 2
    prompts = [[{"role": "user", "content": f"{state}Proposed action: {c}. GOOD or BAD?"}] for c in CANDIDATES]
    shared = _backend(tiny_dir, score_batch_size=batch, share_prompt_cache=True)
    full = _backend(tiny_dir, score_batch_size=batch, share_prompt_cache=False)
    a = shared.next_token_logprobs_many(prompts, ["GOOD", "BAD"])
    b = full.next_token_logprobs_many(prompts, ["GOOD", "BAD"])
    assert shared._prefix_ok and shared.stats["tokens_in"] < full.stats["tokens_in"]  # the shared path ran
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)
    one = [full.next_token_logprobs(p, ["GOOD", "BAD"]) for p in prompts]  # and each alone, unpadded
    np.testing.assert_allclose(a, np.stack(one), rtol=1e-5, atol=1e-4)


def test_scores_sum_the_candidate_token_logprobs_of_a_plain_forward(backend: TransformersBackend) -> None:
    scores = backend.score_candidates(PROMPT, CANDIDATES)
    expected = np.array([_reference_logprobs(backend, PROMPT, c).sum() for c in CANDIDATES])
    np.testing.assert_allclose(scores.logprobs, expected, rtol=1e-5, atol=1e-4)


def test_mean_reduction_is_the_sum_per_token(backend: TransformersBackend) -> None:
    total = backend.score_candidates(PROMPT, CANDIDATES, reduction="sum")
    mean = backend.score_candidates(PROMPT, CANDIDATES, reduction="mean")
    assert mean.reduction == "mean"
    np.testing.assert_allclose(mean.logprobs, total.logprobs / total.n_tokens, rtol=1e-12)


def test_next_token_logprobs_read_the_full_softmax(backend: TransformersBackend) -> None:
    messages = [{"role": "system", "content": "judge"}, {"role": "user", "content": PROMPT}]
    lp = backend.next_token_logprobs(messages, ["GOOD", "BAD"])
    assert lp.shape == (2,) and lp.dtype == np.float64
    expected = [_reference_logprobs(backend, messages, word)[0] for word in ("GOOD", "BAD")]
    np.testing.assert_allclose(lp, expected, rtol=1e-5, atol=1e-5)
    many = backend.next_token_logprobs_many([messages, "the fox", messages], ["GOOD", "BAD"])
    assert many.shape == (3, 2)
    np.testing.assert_allclose(many[0], lp, atol=1e-5)
    np.testing.assert_allclose(many[2], lp, atol=1e-5)
    np.testing.assert_allclose(many[1], backend.next_token_logprobs("the fox", ["GOOD", "BAD"]), atol=1e-5)


def test_strings_sharing_a_first_token_are_rejected(backend: TransformersBackend) -> None:
    with pytest.raises(ValueError, match="same token"):
        backend.next_token_logprobs(PROMPT, ["GOOD", "GOOD"])


# ---------------------------------------------------------------------------------------- generation
def test_greedy_generation_matches_argmax_decoding(backend: TransformersBackend) -> None:
    gen = backend.generate(PROMPT, max_new_tokens=6, temperature=0.0)
    ids = backend.render(PROMPT)
    with torch.no_grad():
        for _ in range(6):
            nxt = int(backend.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            ids.append(nxt)
            if nxt in backend._eos_ids:
                break
    expected = backend.tokenizer.decode(ids[len(backend.render(PROMPT)) :], skip_special_tokens=True)
    assert gen.text == expected
    assert gen.tokens_in == len(backend.render(PROMPT))
    assert gen.finish_reason in ("stop", "length")


def test_sampled_generation_is_seeded_and_leaves_the_global_rng_alone(backend: TransformersBackend) -> None:
    state = torch.random.get_rng_state()
    a = backend.generate(PROMPT, max_new_tokens=12, temperature=1.0, seed=5)
    b = backend.generate(PROMPT, max_new_tokens=12, temperature=1.0, seed=5)
    others = {backend.generate(PROMPT, max_new_tokens=12, temperature=1.0, seed=s).text for s in range(6, 10)}
    assert a.text == b.text
    assert len(others | {a.text}) > 1  # different seeds give different samples from a near-flat model
    assert torch.equal(torch.random.get_rng_state(), state)


def test_generation_top_logprobs_list_the_greedy_token_first(backend: TransformersBackend) -> None:
    gen = backend.generate(PROMPT, max_new_tokens=3, top_logprobs=4)
    assert gen.top_logprobs is not None and len(gen.top_logprobs) == gen.tokens_out
    for step in gen.top_logprobs:
        values = list(step.values())
        assert len(values) <= 4 and values == sorted(values, reverse=True) and max(values) <= 0.0


def test_generation_with_choices_returns_the_best_scored_choice(backend: TransformersBackend) -> None:
    scores = backend.score_candidates(PROMPT, CANDIDATES)
    gen = backend.generate(PROMPT, choices=CANDIDATES)
    assert gen.finish_reason == "choice"
    assert gen.text == CANDIDATES[int(np.argmax(scores.logprobs))]


# ---------------------------------------------------------------------------------------------- LoRA
def test_first_step_loss_is_the_answer_token_cross_entropy(tiny_dir: pathlib.Path) -> None:
    b = _backend(tiny_dir)
    expected = []
    for prompt, answer in PAIRS:  # LoRA starts as the identity (B = 0): the base model's loss
        lp = _reference_logprobs(b, prompt, answer + "<|im_end|>")
        expected.extend(lp)
    stats = b.finetune(PAIRS, epochs=1, batch_size=len(PAIRS), lr=1e-3)
    assert stats.steps == 1 and stats.n_pairs == 4
    assert stats.n_answer_tokens == len(expected)
    assert stats.losses[0] == pytest.approx(-np.mean(expected), rel=1e-4)


@pytest.mark.parametrize("micro, checkpointing", [(1, True), (3, False), (4, True)])
def test_a_step_in_micro_batches_is_the_one_pass_step(tiny_dir: pathlib.Path, micro: int, checkpointing: bool) -> None:
    """Accumulated micro-batches (with or without activation checkpointing) give the one-pass step's loss and
    update: the same adapter afterwards, hence the same scores."""
    one = _backend(tiny_dir, lora_micro_batch=len(PAIRS), lora_checkpointing=False)
    split = _backend(tiny_dir, lora_micro_batch=micro, lora_checkpointing=checkpointing)
    a = one.finetune(PAIRS, epochs=2, batch_size=len(PAIRS))
    b = split.finetune(PAIRS, epochs=2, batch_size=len(PAIRS))
    np.testing.assert_allclose(b.losses, a.losses, rtol=1e-4)
    np.testing.assert_allclose(split.score_candidates(PROMPT, CANDIDATES).logprobs,
                               one.score_candidates(PROMPT, CANDIDATES).logprobs, atol=1e-4)
    assert a.losses[1] < a.losses[0]  # the second step saw the first one's update


def test_twenty_lora_steps_reduce_the_answer_loss(tiny_dir: pathlib.Path) -> None:
    b = _backend(tiny_dir)
    before = np.array([b.score_candidates(p, [a]).logprobs[0] for p, a in PAIRS])
    stats = b.finetune(PAIRS, epochs=20, batch_size=4)
    after = np.array([b.score_candidates(p, [a]).logprobs[0] for p, a in PAIRS])
    assert stats.steps == 20 and len(stats.losses) == 20
    assert 0 < stats.trainable_params < sum(p.numel() for p in b.model.parameters()) / 5
    assert np.mean(stats.losses[-3:]) < 0.7 * np.mean(stats.losses[:3])
    assert np.all(after > before + 0.5)
    assert b.stats["finetune_steps"] == 20


def test_adapter_round_trip_switches_scores_back_and_forth(tiny_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    b = _backend(tiny_dir)
    base = b.score_candidates(PROMPT, CANDIDATES).logprobs
    b.finetune(PAIRS, epochs=5, batch_size=4)
    first = b.score_candidates(PROMPT, CANDIDATES).logprobs
    b.save_adapter(tmp_path / "first")
    b.finetune(PAIRS, epochs=5, batch_size=4)
    second = b.score_candidates(PROMPT, CANDIDATES).logprobs
    b.save_adapter(tmp_path / "second")
    assert (tmp_path / "first" / "adapter_config.json").is_file()
    assert not np.allclose(base, first, atol=1e-3) and not np.allclose(first, second, atol=1e-3)

    b.load_adapter(tmp_path / "first")
    np.testing.assert_allclose(b.score_candidates(PROMPT, CANDIDATES).logprobs, first, atol=1e-5)
    b.load_adapter(tmp_path / "second")
    np.testing.assert_allclose(b.score_candidates(PROMPT, CANDIDATES).logprobs, second, atol=1e-5)
    b.save_adapter(tmp_path / "first")  # overwrite in place with the second adapter

    fresh = _backend(tiny_dir)  # a base model loads the adapter too, and keeps training it
    fresh.load_adapter(tmp_path / "first")
    np.testing.assert_allclose(fresh.score_candidates(PROMPT, CANDIDATES).logprobs, second, atol=1e-5)
    stats = fresh.finetune(PAIRS, epochs=1, batch_size=4)
    assert stats.trainable_params > 0
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary directories left


def test_saving_without_an_adapter_is_a_caller_error(tiny_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    b = _backend(tiny_dir)
    with pytest.raises(ValueError, match="no LoRA adapter"):
        b.save_adapter(tmp_path / "x")
    with pytest.raises(LLMError) as info:
        b.load_adapter(tmp_path / "missing")
    assert info.value.kind == "io"
    assert b.stats["errors"] == 1


# ------------------------------------------------------------------------------------ error contract
@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda b: b.score_candidates(PROMPT, []), "empty"),
        (lambda b: b.score_candidates(PROMPT, "one string"), "not one string"),
        (lambda b: b.score_candidates(PROMPT, ["ok", ""]), r"candidates\[1\]"),
        (lambda b: b.score_candidates(PROMPT, ["ok"], reduction="max"), "reduction"),
        (lambda b: b.score_candidates([], ["ok"]), "empty"),
        (lambda b: b.score_candidates([{"role": "user"}], ["ok"]), "content"),
        (lambda b: b.generate(PROMPT, max_new_tokens=0), "max_new_tokens"),
        (lambda b: b.generate(PROMPT, temperature=-1.0), "temperature"),
        (lambda b: b.finetune([]), "pairs"),
        (lambda b: b.finetune([("q", "")]), r"pairs\[0\]"),
        (lambda b: b.finetune(PAIRS, rank=0), "rank"),
        (lambda b: b.finetune(PAIRS, lr=float("nan")), "lr"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(backend: TransformersBackend, call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(backend)


def test_a_failing_model_raises_llm_error_and_is_counted(tiny_dir: pathlib.Path, monkeypatch) -> None:
    b = _backend(tiny_dir)

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(b.model, "forward", broken)
    for call in (lambda: b.score_candidates(PROMPT, ["a"]), lambda: b.next_token_logprobs(PROMPT, ["GOOD", "BAD"])):
        with pytest.raises(LLMError) as info:
            call()
        assert info.value.kind == "model" and "out of memory" in str(info.value)
    assert b.stats["errors"] == 2 and b.stats["calls"] == 2


def test_an_unreadable_model_directory_raises_llm_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(LLMError) as info:
        TransformersBackend(tmp_path / "nothing_here")
    assert info.value.kind == "io"


def test_stats_count_calls_tokens_and_time(tiny_dir: pathlib.Path) -> None:
    b = _backend(tiny_dir)
    b.score_candidates(PROMPT, ["a b", "c"])
    gen = b.generate(PROMPT, max_new_tokens=3)
    s = b.stats
    n_prompt = len(b.render(PROMPT))
    assert s["calls"] == 2 and s["errors"] == 0
    # the prompt once (shared cache) + the candidates, then the prompt again for generation
    assert s["tokens_in"] == n_prompt + len(b.encode("a b")) + len(b.encode("c")) + n_prompt
    assert s["tokens_out"] == gen.tokens_out and s["seconds"] > 0


# ------------------------------------------------------------------------------------- config/factory
def test_config_defaults_validate() -> None:
    assert LLMConfig().validate().backend == "smollm2"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"backend": "gpt"}, "backend"),
        ({"backend": "transformers"}, "model_path"),
        ({"backend": "openai", "model": "m", "base_url": "ftp://x"}, "base_url"),
        ({"backend": "openai"}, "model"),
        ({"api_key_env": "MY-KEY"}, "api_key_env"),
        ({"timeout_s": 0.0}, "timeout_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"temperature": float("inf")}, "temperature"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"dtype": "int8"}, "dtype"),
        ({"reduction": "max"}, "reduction"),
        ({"top_logprobs": 21}, "top_logprobs"),
        ({"openai_scoring": "guess"}, "openai_scoring"),
        ({"lora_rank": 0}, "lora_rank"),
        ({"lora_lr": 0.0}, "lora_lr"),
        ({"lora_batch_size": True}, "lora_batch_size"),
        ({"lora_micro_batch": 0}, "lora_micro_batch"),
        ({"lora_checkpointing": 1}, "lora_checkpointing"),
    ],
)
def test_invalid_config_names_the_field_value_and_range(changes: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"LLMConfig\.{field} = .* valid: "):
        LLMConfig(**changes).validate()


def test_every_config_field_has_a_docstring() -> None:
    import ast
    import inspect
    import itertools

    from ace_hybrid.llm import backend as module

    tree = ast.parse(inspect.getsource(module.LLMConfig))
    body = tree.body[0].body
    documented = {
        node.target.id
        for node, nxt in itertools.pairwise(body)
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
    }
    assert documented == set(LLMConfig.__dataclass_fields__)


def test_make_backend_builds_the_named_backend(tiny_dir: pathlib.Path) -> None:
    assert make_backend(LLMConfig(backend="none")) is None
    b = make_backend(LLMConfig(backend="transformers", model_path=str(tiny_dir)))
    assert isinstance(b, TransformersBackend)
    with pytest.raises(ValueError, match="unknown_field"):
        LLMConfig().replace(unknown_field=1)
