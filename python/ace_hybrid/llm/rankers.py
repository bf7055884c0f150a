"""How the policy actor orders its shortlist: by the LLM, by LAC, by the SAC critic's Q, by one simulated step, or
at random (``ace.ranker``).

"Thinking twice" means the LLM reads what the simulator says: every candidate is simulated for one step
(``obs.simulate``) and shown with its effect (max loading after, lines over their limit, lines disconnected). The
LLM then answers with one *label* (A, B, C, ...) and its choice is read from the next-token log-probabilities of the
labels, so the length of a candidate's text cannot bias it (scoring whole candidate texts did: per-token
likelihoods preferred the longest texts, which were the critic's Q-best ones).

The non-LLM rankers are the baselines the LLM must beat on the same candidates (``benchmarks/bench_actor.py``):
``sim`` orders by the simulated max loading (the cheapest strong heuristic), ``q`` by the SAC critic, ``random``
uniformly (seeded).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ace_hybrid.config import ACTOR_RANKERS
from ace_hybrid.llm.backend import LLMBackend, LLMError
from ace_hybrid.llm.lac import LACRanker

__all__ = ["LLM_RANKERS", "RANKERS", "CandidateEffect", "Ranker", "describe_effect", "labelled_prompt",
           "simulate_effects"]

RANKERS = tuple(r for r in ACTOR_RANKERS if r != "score")
"""The rankers; ``ace.ranker`` also accepts "score", the 0.1 name of "llm"."""
LLM_RANKERS = ("llm", "lac")
"""Rankers that call the language model (each round is one call of the budget)."""
LABELS = string.ascii_uppercase
"""One label token per candidate (at most 26 candidates)."""

DOMAIN_PREFIX = (
    "You are an expert power grid operator. Lines overheat when their loading (rho) passes 100% and are then "
    "disconnected, which can cascade into a blackout. You can change which bus each element of a substation is "
    "connected to, reconnect or disconnect a line, or do nothing. A good action brings every line well below 100% "
    "and keeps the grid out of danger for as long as possible."
)


class CandidateEffect(NamedTuple):
    """What one simulated step of a candidate does (``obs.simulate``)."""

    max_rho: float
    """Largest line loading after the step (inf when the simulation failed or the grid collapsed)."""
    overloaded: int
    """Lines at or above 100% loading after the step."""
    disconnected: int
    """Lines out of service after the step."""
    failed: bool
    """The simulation diverged, the action was illegal, or the grid collapsed."""


def simulate_effects(obs: Any, actions: Sequence[Any]) -> list[CandidateEffect]:
    """One ``obs.simulate`` per grid2op action in ``actions``."""
    out = []
    for action in actions:
        sim, _, done, info = obs.simulate(action)
        if done or info.get("is_illegal", False) or info.get("exception"):
            out.append(CandidateEffect(float("inf"), 0, 0, True))
            continue
        rho = np.asarray(sim.rho, dtype=np.float64)
        out.append(CandidateEffect(float(rho.max()), int((rho >= 1.0).sum()),
                                   int((~np.asarray(sim.line_status, dtype=bool)).sum()), False))
    return out


def describe_effect(e: CandidateEffect) -> str:
    """The simulated effect in a few words, for the prompt."""
    if e.failed:
        return "simulated: the grid collapses or the action is refused"
    return (f"simulated: max loading {100 * e.max_rho:.0f}%, {e.overloaded} line(s) over the limit, "
            f"{e.disconnected} disconnected")


def labelled_prompt(state_text: str, rl_text: str, rl_outcome: str, failed: Sequence[tuple[str, str]],
                    texts: Sequence[str], effects: Sequence[CandidateEffect]) -> list[dict[str, str]]:
    """The actor's chat prompt: state, the RL action and its outcome, failed attempts, then each candidate with a
    label and its simulated effect; the answer is one label."""
    if len(texts) > len(LABELS):
        raise ValueError(f"{len(texts)} candidates out of range [1, {len(LABELS)}]: one label letter each")
    lines = [f"State: {state_text}", f"The operator played: {rl_text}. Outcome: {rl_outcome}."]
    for text, outcome in failed:
        lines.append(f"Also tried, not better: {text}. Outcome: {outcome}.")
    lines.append("Candidate actions, each checked in a simulator for one step:")
    lines += [f"{LABELS[i]}. {text} ({describe_effect(e)})" for i, (text, e) in enumerate(zip(texts, effects))]
    lines.append("Which action keeps the grid safest? Answer with its letter only.")
    return [{"role": "system", "content": DOMAIN_PREFIX}, {"role": "user", "content": "\n".join(lines)}]


class Ranker:
    """Chooses one of the actor's candidates by the configured rule (see the module docstring).

    Parameters
    ----------
    kind
        One of :data:`RANKERS` ("score" is read as "llm").
    backend
        The language model (required by "llm" and "lac").
    lac_alpha
        LAC's critic weight.
    seed
        Seed of the "random" ranker's generator.
    """

    def __init__(self, kind: str, backend: LLMBackend | None = None, *, lac_alpha: float = 1.0,
                 seed: int = 0) -> None:
        kind = "llm" if kind == "score" else kind
        if kind not in RANKERS:
            raise ValueError(f"ranker = {kind!r} is invalid; valid: {' | '.join(repr(k) for k in RANKERS)}")
        if kind in LLM_RANKERS and backend is None:
            raise ValueError(f"ranker = {kind!r} needs a language model backend")
        self.kind, self.backend = kind, backend
        self.lac = LACRanker(backend, alpha=lac_alpha, reduction="mean") if kind == "lac" else None
        self.rng = np.random.default_rng(seed)

    @property
    def uses_llm(self) -> bool:
        return self.kind in LLM_RANKERS

    def choose(self, prompt: list[dict[str, str]], state_text: str, texts: Sequence[str],
               effects: Sequence[CandidateEffect], q: Sequence[float]) -> int:
        """Index into ``texts`` of the chosen candidate (``q``: the critic's values of the candidates)."""
        n = len(texts)
        if self.kind == "sim":
            return int(np.argmin([e.max_rho for e in effects]))
        if self.kind == "q":
            return int(np.argmax(np.nan_to_num(np.asarray(q, dtype=np.float64), nan=-np.inf)))
        if self.kind == "random":
            return int(self.rng.integers(n))
        if self.lac is not None:  # the same simulated effects as the LLM's prompt, in each judged action's text
            return self.lac.best(state_text, [f"{t} ({describe_effect(e)})" for t, e in zip(texts, effects)])
        assert self.backend is not None
        logp = np.asarray(self.backend.next_token_logprobs(prompt, list(LABELS[:n])), dtype=np.float64)
        if logp.shape != (n,) or not np.all(np.isfinite(logp)):
            raise LLMError(f"label log-probabilities {logp!r} are not {n} finite numbers",
                           backend=getattr(self.backend, "name", "?"), kind="malformed")
        return int(np.argmax(logp))
