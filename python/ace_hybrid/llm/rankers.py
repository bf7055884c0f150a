"""How the policy actor chooses among its shortlist: by the LLM, by LAC, by the SAC critic's Q, by one simulated
step, or at random (``ace.ranker``).

The LLM sees a :class:`ChoiceProblem`: the state, the RL action and its outcome, the failed attempts, and the
candidates, each (``ace.show_effects``) with its simulated one-step effect. Two ways to ask it:

* ``llm``: all candidates in one prompt, each under a letter; the answer is one *label* (A, B, C, ...), read from the
  labels' next-token log-probabilities, so the length of a candidate's text cannot bias it;
* ``judge``: each candidate in a prompt of its own, "is it better than what was played?", read as
  log P(GOOD) - log P(BAD) (LAC's critic Q_LLM, arXiv 2506.06376); the best judged candidate is chosen. No
  candidate has a position there, and the fine-tuning pairs are the simulator's verdicts on each validated candidate.

Small models answer by position: the embedded SmolLM2-135M chose letter A on 120 of 120 problems whatever stood
there. So candidates never reach a prompt in a meaningful order (the shortlist's heuristic order or the critic's Q
order would turn a position prior into a heuristic): the actor shows them in a seeded shuffled order
(:func:`neutral_order`) and maps the chosen label back to the candidate. A backend that cannot score every label
raises :class:`LLMError`; ties between the best labels are broken at random, never towards A.

The non-LLM rankers are the controls the LLM is measured against on the same candidates
(``benchmarks/bench_actor.py``): ``sim`` takes the lowest simulated max loading (the cheapest strong heuristic),
``q`` the SAC critic's best, ``random`` a uniformly random one (seeded).
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ace_hybrid.config import ACTOR_RANKERS
from ace_hybrid.llm.backend import LLMBackend, LLMError
from ace_hybrid.llm.lac import LACRanker

__all__ = ["LABELS", "LLM_RANKERS", "RANKERS", "VERDICTS", "CandidateEffect", "ChoiceProblem", "Ranker",
           "describe_effect", "neutral_order", "points_vs_played", "simulate_effects"]

RANKERS = ACTOR_RANKERS
LLM_RANKERS = ("llm", "judge", "lac")
"""Rankers that call the language model (each round is one call of the budget)."""
LABELS = string.ascii_uppercase
"""One label token per candidate (at most 26 candidates)."""
VERDICTS = ("GOOD", "BAD")
"""The "judge" ranker's answers (their first tokens differ), as LAC's critic reads them."""

DOMAIN_PREFIX = ("You operate a power grid. A line loaded over 100% trips after a while, which can cascade into a "
                 "blackout. Good actions bring every line well below 100%.")


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


def points_vs_played(e: CandidateEffect, played_max_rho: float | None) -> float:
    """Points of max loading a candidate lies above (> 0) or below (< 0) what was played, rounded as the prompt shows
    them; -inf when what was played lost the grid and the candidate did not; nan with nothing to compare (no
    reference, or the candidate's simulation failed)."""
    if played_max_rho is None or e.failed:
        return math.nan
    return -math.inf if math.isinf(played_max_rho) else float(round(100 * (e.max_rho - played_max_rho)))


def describe_effect(e: CandidateEffect, played_max_rho: float | None = None) -> str:
    """The simulated effect in a few words, for the prompt; given the played action's max loading, also how far the
    candidate's lies from it, in words (:func:`points_vs_played`)."""
    if e.failed:
        return "grid collapses or action refused"
    text = f"max {100 * e.max_rho:.0f}%, {e.overloaded} over, {e.disconnected} off"
    points = points_vs_played(e, played_max_rho)
    if math.isnan(points):
        return text
    if math.isinf(points):
        return f"{text}; what was played lost the grid"
    if points == 0:
        return f"{text}; as high as what was played"
    return f"{text}; {abs(points):.0f} points {'below' if points < 0 else 'above'} what was played"


def neutral_order(n: int, rng: np.random.Generator) -> list[int]:
    """A uniformly random order of ``n`` candidates: position k of the prompt shows candidate ``order[k]``."""
    return [int(i) for i in rng.permutation(n)]


@dataclass(frozen=True)
class ChoiceProblem:
    """One question to the actor's ranker: candidates in the order they are shown, under letters A, B, ...

    ``effects`` are always known (the "sim" ranker reads them); ``show_effects`` says whether the prompt shows them
    (the "reading" setting) or only the state and the candidates' texts (the "knowledge" setting).
    """

    state_text: str
    rl_text: str
    rl_outcome: str
    texts: tuple[str, ...]
    effects: tuple[CandidateEffect, ...]
    failed: tuple[tuple[str, str], ...] = ()
    """(text, outcome) of the attempts already validated and found no better."""
    show_effects: bool = True
    played_max_rho: float | None = None
    """The played action's max loading where its simulated segment ended (inf: it lost the grid). Given, each shown
    effect also says how far it lies from it (``ace.effects_vs_played``); None: effects are shown as they are."""

    def __post_init__(self) -> None:
        if not 1 <= len(self.texts) <= len(LABELS):
            raise ValueError(f"{len(self.texts)} candidates out of range [1, {len(LABELS)}]: one label letter each")
        if len(self.effects) != len(self.texts):
            raise ValueError(f"{len(self.effects)} effects for {len(self.texts)} candidates: need one each")

    @property
    def labels(self) -> list[str]:
        return list(LABELS[: len(self.texts)])

    def option(self, k: int) -> str:
        """Candidate ``k`` as the prompts show it (with its simulated effect when ``show_effects``)."""
        text = _compact(self.texts[k])
        return f"{text} | {describe_effect(self.effects[k], self.played_max_rho)}" if self.show_effects else text

    def prompt(self) -> list[dict[str, str]]:
        """The chat prompt; the answer is one label."""
        lines = self._context()
        lines.append("Options, each simulated one step:" if self.show_effects else "Options:")
        lines += [f"{LABELS[k]}. {self.option(k)}" for k in range(len(self.texts))]
        lines.append("Which option keeps the grid safest? Answer with its letter.")
        return [{"role": "system", "content": DOMAIN_PREFIX}, {"role": "user", "content": "\n".join(lines)}]

    def judge_prompt(self, k: int) -> list[dict[str, str]]:
        """The "judge" ranker's question about candidate ``k`` alone; the answer is GOOD or BAD. The prompts of one
        problem differ only in their last lines (a local model runs their common start once)."""
        lines = self._context()
        lines.append(f"Option{', simulated one step' if self.show_effects else ''}: {self.option(k)}")
        lines.append("Is this option better than what was played? Answer GOOD or BAD.")
        return [{"role": "system", "content": DOMAIN_PREFIX}, {"role": "user", "content": "\n".join(lines)}]

    def _context(self) -> list[str]:
        lines = [f"State: {self.state_text}", f"Played: {self.rl_text}. Outcome: {self.rl_outcome}."]
        return lines + [f"Also tried, not better: {text}. Outcome: {outcome}." for text, outcome in self.failed]

    def reordered(self, order: Sequence[int]) -> ChoiceProblem:
        """The same problem with candidate ``order[k]`` shown at position k."""
        if sorted(order) != list(range(len(self.texts))):
            raise ValueError(f"order = {list(order)} is not a permutation of range({len(self.texts)})")
        return ChoiceProblem(self.state_text, self.rl_text, self.rl_outcome, tuple(self.texts[i] for i in order),
                             tuple(self.effects[i] for i in order), self.failed, self.show_effects, self.played_max_rho)

    def to_dict(self) -> dict[str, Any]:
        """Plain values only (checkpoints are read with ``torch.load(weights_only=True)``)."""
        return {"state_text": self.state_text, "rl_text": self.rl_text, "rl_outcome": self.rl_outcome,
                "texts": list(self.texts), "effects": [list(e) for e in self.effects],
                "failed": [list(f) for f in self.failed], "show_effects": self.show_effects,
                "played_max_rho": self.played_max_rho}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChoiceProblem:
        effects = tuple(CandidateEffect(float(e[0]), int(e[1]), int(e[2]), bool(e[3])) for e in d["effects"])
        played = d.get("played_max_rho")  # absent from problems saved before it existed
        return cls(d["state_text"], d["rl_text"], d["rl_outcome"], tuple(d["texts"]), effects,
                   tuple((str(t), str(o)) for t, o in d["failed"]), bool(d["show_effects"]),
                   None if played is None else float(played))


def _compact(action_text: str) -> str:
    """An action's text without what every bus assignment says (the elements not named stay on bus 1): shorter
    prompts, cheaper calls and fine-tuning steps."""
    return action_text.removesuffix("; the rest stay on bus 1")


class Ranker:
    """Chooses one candidate of a :class:`ChoiceProblem` by the configured rule (see the module docstring).

    Parameters
    ----------
    kind
        One of :data:`RANKERS`.
    backend
        The language model (required by "llm" and "lac").
    lac_alpha
        LAC's critic weight.
    seed
        Seed of the "random" ranker and of tie-breaking.
    """

    def __init__(self, kind: str, backend: LLMBackend | None = None, *, lac_alpha: float = 1.0,
                 seed: int = 0) -> None:
        if kind == "score":
            raise ValueError("ranker = 'score' was renamed: use 'llm'")
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

    def choose(self, problem: ChoiceProblem, q: Sequence[float] = ()) -> int:
        """Position in ``problem`` of the chosen candidate (its label is ``LABELS[position]``; ``q``: the critic's
        values of the candidates in the problem's order, for the "q" ranker)."""
        n = len(problem.texts)
        if self.kind == "sim":
            return self._best(-np.array([e.max_rho for e in problem.effects]))
        if self.kind == "q":
            values = np.asarray(q, dtype=np.float64)
            if values.shape != (n,):
                raise ValueError(f"q has shape {values.shape}; the 'q' ranker needs one value per candidate ({n})")
            return self._best(np.nan_to_num(values, nan=-np.inf))
        if self.kind == "random":
            return int(self.rng.integers(n))
        if self.lac is not None:
            ranking = self.lac.rank(problem.state_text, [problem.option(k) for k in range(n)])
            return self._best(ranking.probs)
        if self.kind == "judge":
            return self._best(self.judgements(problem))
        return self._best(self.label_logprobs(problem))

    def label_logprobs(self, problem: ChoiceProblem) -> np.ndarray:
        """(n,) log P(label k | prompt) from the backend; LLMError ("malformed") unless every label got a finite
        score."""
        assert self.backend is not None
        n = len(problem.texts)
        logp = np.asarray(self.backend.next_token_logprobs(problem.prompt(), problem.labels), dtype=np.float64)
        if logp.shape != (n,) or not np.all(np.isfinite(logp)):
            raise LLMError(f"label log-probabilities {logp!r} are not {n} finite numbers",
                           backend=getattr(self.backend, "name", "?"), kind="malformed")
        return logp

    def judgements(self, problem: ChoiceProblem) -> np.ndarray:
        """(n,) log P(GOOD) - log P(BAD) of each candidate judged alone (LAC's Q_LLM); LLMError ("malformed")
        unless every one is finite."""
        assert self.backend is not None
        prompts = [problem.judge_prompt(k) for k in range(len(problem.texts))]
        many = getattr(self.backend, "next_token_logprobs_many", None)
        lp = np.asarray(many(prompts, list(VERDICTS)) if many is not None else
                        [self.backend.next_token_logprobs(p, list(VERDICTS)) for p in prompts], dtype=np.float64)
        if lp.shape != (len(prompts), 2) or not np.all(np.isfinite(lp)):
            raise LLMError(f"judgements {lp!r} are not {len(prompts)} finite (GOOD, BAD) pairs",
                           backend=getattr(self.backend, "name", "?"), kind="malformed")
        return lp[:, 0] - lp[:, 1]

    def _best(self, scores: np.ndarray) -> int:
        """Index of the highest score; ties broken at random (never by position)."""
        top = np.flatnonzero(scores == scores.max())
        return int(top[0]) if top.size == 1 else int(self.rng.choice(top))
