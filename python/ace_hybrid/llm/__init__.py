"""Language-model backends for ACE's policy actor and value critic, and LAC scoring.

``make_backend(LLMConfig(...))`` returns one of

* :class:`~ace_hybrid.llm.smollm2.SmolLM2Backend` (``backend="smollm2"``, the embedded default),
* :class:`~ace_hybrid.llm.transformers_backend.TransformersBackend` (``"transformers"``, a local directory),
* :class:`~ace_hybrid.llm.openai_backend.OpenAIBackend` (``"openai"``, an OpenAI-compatible server),

or None for ``"none"`` (no LLM: the pure RL baseline). All follow :class:`LLMBackend` and raise
:class:`LLMError` (and only that) when the model, the server or its answer fails. The heavy dependencies
(torch, transformers, peft, openai) are imported only by the backend that needs them.
"""

from __future__ import annotations

from ace_hybrid.llm.backend import (
    BACKENDS,
    CandidateScores,
    FinetuneStats,
    Generation,
    LLMBackend,
    LLMConfig,
    LLMError,
    Message,
    Prompt,
    as_messages,
)
from ace_hybrid.llm.lac import LACRanker, LACRanking, lac_judge_prompt, lac_policy, lac_q_values

__all__ = [
    "BACKENDS",
    "CandidateScores",
    "FinetuneStats",
    "Generation",
    "LACRanker",
    "LACRanking",
    "LLMBackend",
    "LLMConfig",
    "LLMError",
    "Message",
    "Prompt",
    "as_messages",
    "lac_judge_prompt",
    "lac_policy",
    "lac_q_values",
    "make_backend",
]


def make_backend(cfg: LLMConfig) -> LLMBackend | None:
    """Build the backend ``cfg`` names (after ``cfg.validate()``); None for ``backend="none"``.

    Raises
    ------
    ValueError
        When a field of ``cfg`` is invalid (naming the field, value and valid range).
    LLMError
        When the backend cannot start (missing package, unreadable model directory).
    """
    cfg.validate()
    if cfg.backend == "none":
        return None
    if cfg.backend == "openai":
        from ace_hybrid.llm.openai_backend import OpenAIBackend

        return OpenAIBackend(cfg)
    if cfg.backend == "transformers":
        from ace_hybrid.llm.transformers_backend import TransformersBackend

        return TransformersBackend(cfg.model_path, cfg)
    from ace_hybrid.llm.smollm2 import SmolLM2Backend

    return SmolLM2Backend(cfg)
