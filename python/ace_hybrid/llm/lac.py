"""LAC: LLM actor-critic scoring of candidate actions (Dong et al., "Enhancing decision-making of large
language models via actor-critic", arXiv 2506.06376).

The critic is read from the LLM's next-token distribution after a judging prompt::

    Q_LLM(s, a) = log P("GOOD" | judge(s, a)) - log P("BAD" | judge(s, a))

and the actor is improved without gradients over a finite candidate set::

    pi_new(a | s)  ∝  pi_LLM(a | s) * exp(alpha * Q_LLM(s, a)),

where pi_LLM(a | s) is the LLM's probability of answering the candidate's text, normalised over the
candidates. ``alpha = 0`` gives the prior back; large ``alpha`` trusts the critic.

Log-probabilities come from :meth:`LLMBackend.next_token_logprobs` (exact token logits with local models;
with a server, its top log-probabilities: a word missing from the top list cannot be scored and the call raises
LLMError "malformed", see :mod:`ace_hybrid.llm.openai_backend`). LAC reads the
*first token* of each judgement word, so pick words whose first tokens differ (the defaults do).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ace_hybrid.llm.backend import LLMBackend, LLMError

__all__ = [
    "LACRanker",
    "LACRanking",
    "lac_judge_prompt",
    "lac_policy",
    "lac_policy_prompt",
    "lac_q_values",
]

_JUDGE_SYSTEM = "You are an expert operator. You judge whether a proposed action is good in the given state."
_ACTOR_SYSTEM = "You are an expert operator. You choose the best action for the given state."


def lac_judge_prompt(state_text: str, action_text: str, *, good: str = "GOOD", bad: str = "BAD") -> list[dict[str, str]]:
    """The critic's judging prompt for one (state, action) pair; the answer's first token is read."""
    return [
        {"role": "system", "content": _JUDGE_SYSTEM},
        {
            "role": "user",
            "content": (
                f"State:\n{state_text}\n\nProposed action:\n{action_text}\n\n"
                f"Is this action good or bad in this state? Answer with one word: {good} or {bad}."
            ),
        },
    ]


def lac_policy_prompt(state_text: str) -> list[dict[str, str]]:
    """The actor's prompt for a state; each candidate action's text is scored as the answer."""
    return [
        {"role": "system", "content": _ACTOR_SYSTEM},
        {"role": "user", "content": f"State:\n{state_text}\n\nWhich action should be taken? Reply with the action only."},
    ]


def lac_q_values(
    backend: LLMBackend,
    state_text: str,
    action_texts: Sequence[str],
    *,
    good: str = "GOOD",
    bad: str = "BAD",
) -> npt.NDArray[np.float64]:
    """Q_LLM(s, a) = log P(good | judge(s, a)) - log P(bad | judge(s, a)) for each candidate action.

    Parameters
    ----------
    backend : LLMBackend
        Uses ``next_token_logprobs_many`` when the backend has it (one batched pass), else one
        ``next_token_logprobs`` call per action.
    state_text : str
    action_texts : sequence of str, length n >= 1
    good, bad : str
        The judgement words (their first tokens must differ).

    Returns
    -------
    (n,) float64

    Raises
    ------
    LLMError
        From the backend, or kind "malformed" when it returns non-finite or wrongly shaped log-probs.
    ValueError
        When ``action_texts`` is empty or not strings.
    """
    if isinstance(action_texts, str) or len(action_texts) == 0:
        raise ValueError(f"action_texts = {action_texts!r} must be a non-empty sequence of strings")
    prompts = [lac_judge_prompt(state_text, a, good=good, bad=bad) for a in action_texts]
    many = getattr(backend, "next_token_logprobs_many", None)
    if many is not None:
        lp = np.asarray(many(prompts, [good, bad]), dtype=np.float64)
    else:
        lp = np.stack([np.asarray(backend.next_token_logprobs(p, [good, bad]), dtype=np.float64) for p in prompts])
    if lp.shape != (len(prompts), 2) or not np.all(np.isfinite(lp)):
        raise LLMError(
            f"next-token log-probs of shape {lp.shape} (expected {(len(prompts), 2)}) or non-finite: {lp}",
            backend=getattr(backend, "name", type(backend).__name__),
            kind="malformed",
        )
    return lp[:, 0] - lp[:, 1]


def lac_policy(
    prior_logprobs: npt.ArrayLike, q: npt.ArrayLike, alpha: float
) -> npt.NDArray[np.float64]:
    """pi_new(a) ∝ exp(prior_logprobs[a] + alpha * q[a]), normalised over the candidates.

    Parameters
    ----------
    prior_logprobs : (n,) array_like of float
        log pi_LLM(a | s) up to a constant (normalisation is irrelevant); -inf marks an impossible candidate
        (at least one must be finite). NaN and +inf are rejected.
    q : (n,) array_like of float
        Q_LLM(s, a), finite.
    alpha : float
        Finite, >= 0. 0 returns the normalised prior.

    Returns
    -------
    (n,) float64
        Probabilities summing to 1, computed as a max-shifted softmax (no overflow for large values).

    Raises
    ------
    ValueError
        Naming the argument for bad shapes or values, or when ``prior + alpha * q`` overflows float64.
    """
    prior = np.asarray(prior_logprobs, dtype=np.float64)
    qv = np.asarray(q, dtype=np.float64)
    if prior.ndim != 1 or prior.size == 0:
        raise ValueError(f"prior_logprobs has shape {prior.shape}; expected (n,) with n >= 1")
    if qv.shape != prior.shape:
        raise ValueError(f"q has shape {qv.shape}; expected {prior.shape} like prior_logprobs")
    if np.any(np.isnan(prior)) or np.any(prior == np.inf):
        raise ValueError(f"prior_logprobs = {prior} contains NaN or +inf; valid: finite values or -inf")
    if not np.any(np.isfinite(prior)):
        raise ValueError(f"prior_logprobs = {prior} has no finite entry; at least one candidate must be possible")
    if not np.all(np.isfinite(qv)):
        raise ValueError(f"q = {qv} contains non-finite values; valid: finite")
    if isinstance(alpha, bool) or not np.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha = {alpha!r} is invalid; valid: finite and >= 0")
    with np.errstate(over="ignore", invalid="ignore"):
        z = prior + (alpha * qv if alpha > 0 else 0.0)
    if np.any(np.isnan(z)) or np.any(z == np.inf):
        raise ValueError(f"prior_logprobs + alpha * q overflows float64 (alpha = {alpha}, max |q| = {np.abs(qv).max()})")
    z = z - z.max()
    p = np.exp(z)
    return p / p.sum()


def _log_normalise(scores: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    m = scores.max()
    return scores - (m + np.log(np.exp(scores - m).sum()))


class LACRanking(NamedTuple):
    """LAC's ranking of n candidate actions for one state.

    Attributes
    ----------
    order : (n,) int64
        Candidate indices, best first (ties keep the given order).
    probs : (n,) float64
        pi_new over the candidates.
    prior_logprobs : (n,) float64
        log pi_LLM normalised over the candidates.
    q : (n,) float64
        Q_LLM per candidate.
    method : str
        How the prior was scored (``CandidateScores.method``).
    """

    order: npt.NDArray[np.int64]
    probs: npt.NDArray[np.float64]
    prior_logprobs: npt.NDArray[np.float64]
    q: npt.NDArray[np.float64]
    method: str


class LACRanker:
    """Rank candidate actions for a state text with LAC (prior from candidate scoring, critic from GOOD/BAD).

    Parameters
    ----------
    backend : LLMBackend
    alpha : float
        Critic weight (finite, >= 0).
    reduction : {"sum", "mean"}
        How candidate token log-probs make the prior (sum: sequence probability; mean: length-neutral).
    good, bad : str
        Judgement words.

    Raises
    ------
    LLMError
        From the backend, on any failure of a call.
    ValueError
        For bad arguments; nothing else escapes.
    """

    def __init__(
        self, backend: LLMBackend, *, alpha: float = 1.0, reduction: str = "sum", good: str = "GOOD", bad: str = "BAD"
    ) -> None:
        if isinstance(alpha, bool) or not np.isfinite(alpha) or alpha < 0:
            raise ValueError(f"alpha = {alpha!r} is invalid; valid: finite and >= 0")
        if reduction not in ("sum", "mean"):
            raise ValueError(f"reduction = {reduction!r} is invalid; valid: 'sum' | 'mean'")
        self.backend = backend
        self.alpha = float(alpha)
        self.reduction = reduction
        self.good = good
        self.bad = bad

    def rank(self, state_text: str, action_texts: Sequence[str]) -> LACRanking:
        """Score, judge and rank ``action_texts`` (n >= 1) for ``state_text``."""
        scores = self.backend.score_candidates(lac_policy_prompt(state_text), action_texts, reduction=self.reduction)
        prior = np.asarray(scores.logprobs, dtype=np.float64)
        if prior.shape != (len(action_texts),) or not np.all(np.isfinite(prior)):
            raise LLMError(
                f"candidate scores of shape {prior.shape} or non-finite: {prior}",
                backend=getattr(self.backend, "name", type(self.backend).__name__),
                kind="malformed",
            )
        prior = _log_normalise(prior)
        q = lac_q_values(self.backend, state_text, action_texts, good=self.good, bad=self.bad)
        probs = lac_policy(prior, q, self.alpha)
        order = np.argsort(-probs, kind="stable").astype(np.int64)
        return LACRanking(order, probs, prior, q, scores.method)

    def best(self, state_text: str, action_texts: Sequence[str]) -> int:
        """Index of the top-ranked action."""
        return int(self.rank(state_text, action_texts).order[0])
