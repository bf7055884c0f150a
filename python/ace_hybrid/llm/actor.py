"""The policy actor f_LLM of ACE ("think twice"): re-propose a better action for a bad transition.

A transition is bad when its (semi-MDP) reward is below ``r_bar`` (:class:`~ace_hybrid.config.ACEConfig`). The actor
gets the state of that decision as a snapshot of the environment (``env.copy()`` taken just before the RL action was
played) and:

1. builds a shortlist of legal candidates: the SAC critic's best Q-values and the greedy heuristic's picks
   (:meth:`~ace_hybrid.grid.catalog.ActionCatalog.shortlist`), plus do nothing, without the RL action itself;
2. asks the LLM to choose one. The prompt holds a domain prefix P_r, the state T_s, the RL action T_a with its
   outcome, and every failed attempt so far. The LLM *scores* each candidate's text as its answer (or LAC ranks them),
   so the proposal is always a legal candidate: nothing the model writes is ever executed;
3. validates the proposal in a copy of the snapshot: play it, then the safe rule until the next danger state, the end
   of the episode or ``validation_steps`` steps, summing the training reward. The RL action is replayed the same way
   (like for like: same simulator, same cap). The proposal is accepted if its reward r_hat beats the RL action's by
   more than ``min_improvement``; otherwise it goes into the next round's prompt as a failed attempt, up to
   ``max_rounds`` rounds.

An accepted proposal becomes the transition (s, a_hat, r_hat, s_hat', done_hat) of the LLM partition with I_v = 1 and
improvement r_hat - r (r: the RL action's replayed reward).

Why refine as transitions complete rather than from sampled batches: validating in a simulator needs the grid's full
state, which the replay does not keep (it stores feature vectors). The loop holds one snapshot per pending decision
(about 10 ms to copy on the 36-substation grids), which is only possible for the transition being completed.

Failures of the LLM (:class:`~ace_hybrid.llm.backend.LLMError`) are counted and end that refinement; they never stop
training.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ace_hybrid.grid.rules import SafeRule, in_danger
from ace_hybrid.grid.text import LineEndpoints, describe_state
from ace_hybrid.llm.backend import LLMBackend, LLMError
from ace_hybrid.llm.lac import LACRanker

__all__ = ["ActorStats", "PolicyActor", "Refinement", "Rollout", "actor_prompt", "rollout"]

DOMAIN_PREFIX = (
    "You are an expert power grid operator. Lines overheat when their loading (rho) passes 100% and are then "
    "disconnected, which can cascade into a blackout. You can change which bus each element of a substation is "
    "connected to, reconnect or disconnect a line, or do nothing. A good action brings every line well below 100% "
    "and keeps the grid out of danger for as long as possible."
)


class Rollout(NamedTuple):
    """A simulated semi-MDP segment: one action, then the safe rule until the next danger state.

    Attributes
    ----------
    reward : float
        Training reward summed over the segment.
    obs : Any
        The grid2op observation where the segment ended.
    blackout : bool
        The grid collapsed.
    ended : bool
        The episode ended without a blackout (end of the scenario).
    steps : int
        Environment steps simulated.
    """

    reward: float
    obs: Any
    blackout: bool
    ended: bool
    steps: int


def rollout(snapshot: Any, action: Any, *, safe_rule: SafeRule, reward_fn: Callable[[Any, bool], float],
            threshold: float, max_steps: int) -> Rollout:
    """Play ``action`` on a copy of ``snapshot`` (a grid2op environment), then the safe rule until max rho reaches
    ``threshold`` again, the episode ends, or ``max_steps`` steps. The snapshot itself is not touched."""
    if max_steps < 1:
        raise ValueError(f"max_steps = {max_steps} out of range [1, inf)")
    env = snapshot.copy()
    try:
        total, steps, grid_action = 0.0, 0, action
        while True:
            obs, _, done, info = env.step(grid_action)
            steps += 1
            blackout = bool(done and info.get("exception"))
            total += reward_fn(obs, blackout)
            if done or steps >= max_steps or in_danger(obs, threshold):
                return Rollout(total, obs, blackout, bool(done and not blackout), steps)
            grid_action = safe_rule(obs)
    finally:
        env.close()


def actor_prompt(state_text: str, rl_action_text: str, rl_outcome: str, failed: Sequence[tuple[str, str]],
                 candidate_texts: Sequence[str]) -> list[dict[str, str]]:
    """The actor's chat prompt; each candidate's text is then scored as the assistant's answer."""
    lines = [f"State: {state_text}", f"The operator played: {rl_action_text}. Outcome: {rl_outcome}."]
    for text, outcome in failed:
        lines.append(f"Also tried, not better: {text}. Outcome: {outcome}.")
    lines.append("Choose a better action among:")
    lines += [f"- {text}" for text in candidate_texts]
    lines.append("Answer with the chosen action exactly as written.")
    return [{"role": "system", "content": DOMAIN_PREFIX}, {"role": "user", "content": "\n".join(lines)}]


def describe_outcome(r: Rollout) -> str:
    """A short text of a segment's outcome, for the prompt."""
    if r.blackout:
        return f"blackout after {r.steps} steps"
    if r.ended:
        return f"the episode ended safely after {r.steps} steps"
    return f"danger again after {r.steps} steps (max loading {100 * float(np.max(r.obs.rho)):.0f}%)"


@dataclass
class Refinement:
    """What the actor did with one bad transition.

    ``action`` / ``rollout`` / ``improvement`` / ``prompt`` / ``answer`` describe the accepted proposal (None when
    no round succeeded). ``baseline`` is the RL action replayed in the simulator.
    """

    rounds: int
    calls: int
    accepted: bool
    baseline: Rollout | None = None
    action: int | None = None
    rollout: Rollout | None = None
    improvement: float = 0.0
    prompt: list[dict[str, str]] | None = None
    answer: str | None = None
    first_choice_accepted: bool = False
    error: str | None = None


@dataclass
class ActorStats:
    """Counters of the actor since the start of the run (saved with checkpoints)."""

    bad_transitions: int = 0
    """Transitions handed to the actor (reward below r_bar, with budget left)."""
    calls: int = 0
    rounds: int = 0
    accepted: int = 0
    first_choice_accepted: int = 0
    """Refinements whose first proposal was accepted: the LLM's own decisions, before any feedback."""
    errors: int = 0
    llm_seconds: float = 0.0
    validate_seconds: float = 0.0
    error_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.bad_transitions if self.bad_transitions else 0.0


class PolicyActor:
    """ACE's policy actor over an action catalog (see the module docstring).

    Parameters
    ----------
    backend : LLMBackend
    catalog : ActionCatalog
        Legal masks, action texts (T_a), the heuristic shortlist and grid2op actions.
    layout : LineEndpoints
        For the state text T_s.
    reward_fn : callable (obs, blackout) -> float
        The training reward of one environment step.
    threshold : float
        Danger threshold (the end of a simulated segment).
    candidates, max_rounds, validation_steps, min_improvement, ranker, lac_alpha
        As in :class:`~ace_hybrid.config.ACEConfig`.
    """

    def __init__(self, backend: LLMBackend, catalog: Any, layout: LineEndpoints, *,
                 reward_fn: Callable[[Any, bool], float], threshold: float, candidates: int = 8, max_rounds: int = 5,
                 validation_steps: int = 48, min_improvement: float = 0.0, ranker: str = "score",
                 lac_alpha: float = 1.0) -> None:
        if candidates < 2:
            raise ValueError(f"candidates = {candidates} out of range [2, 64]")
        if max_rounds < 1:
            raise ValueError(f"max_rounds = {max_rounds} out of range [1, 20]")
        if ranker not in ("score", "lac"):
            raise ValueError(f"ranker = {ranker!r} is invalid; valid: 'score' | 'lac'")
        self.backend, self.catalog, self.layout = backend, catalog, layout
        self.reward_fn, self.threshold = reward_fn, float(threshold)
        self.n_candidates, self.max_rounds = int(candidates), int(max_rounds)
        self.validation_steps, self.min_improvement = int(validation_steps), float(min_improvement)
        self.lac = LACRanker(backend, alpha=lac_alpha, reduction="mean") if ranker == "lac" else None
        self.stats = ActorStats()
        self._safe_rule: SafeRule | None = None

    def candidates(self, obs: Any, q_values: np.ndarray | None, rl_action: int) -> list[int]:
        """Legal candidate indices: best Q first, then the heuristic's, and do nothing last (always offered unless it
        was the RL action); never the RL action."""
        room = self.n_candidates - (rl_action != 0)  # the last slot is kept for do nothing
        out: list[int] = []

        def take(i: int, limit: int) -> None:
            if i not in (rl_action, 0) and i not in out and len(out) < limit:
                out.append(i)

        n_q = self.n_candidates // 2
        finite = np.flatnonzero(np.isfinite(q_values)) if q_values is not None else np.empty(0, np.int64)
        if n_q and finite.size:
            # The best n_q + 2 are enough (the RL action and do nothing may be among them): a partial sort, not a
            # sort of all 67K values.
            top = finite[np.argpartition(-q_values[finite], min(n_q + 2, finite.size) - 1)[: n_q + 2]]
            for i in top[np.argsort(-q_values[top], kind="stable")]:
                take(int(i), n_q)
        for i in self.catalog.shortlist(obs, self.n_candidates):
            take(int(i), room)
        if rl_action != 0:
            out.append(0)
        return out

    def _rank(self, prompt: list[dict[str, str]], state_text: str, texts: list[str]) -> int:
        """Index (into ``texts``) of the LLM's choice."""
        if self.lac is not None:
            return self.lac.best(state_text, texts)
        scores = np.asarray(self.backend.score_candidates(prompt, texts, reduction="mean").logprobs, dtype=np.float64)
        if scores.shape != (len(texts),) or not np.all(np.isfinite(scores)):
            raise LLMError(f"candidate scores {scores!r} are not {len(texts)} finite numbers",
                           backend=getattr(self.backend, "name", "?"), kind="malformed")
        return int(np.argmax(scores))

    def _simulate(self, snapshot: Any, action_index: int) -> Rollout:
        if self._safe_rule is None:
            self._safe_rule = SafeRule(snapshot.action_space, threshold=self.threshold)
        started = time.perf_counter()
        try:
            return rollout(snapshot, self.catalog.action(action_index), safe_rule=self._safe_rule,
                           reward_fn=self.reward_fn, threshold=self.threshold, max_steps=self.validation_steps)
        finally:
            self.stats.validate_seconds += time.perf_counter() - started

    def refine(self, snapshot: Any, obs: Any, rl_action: int, *, q_values: np.ndarray | None = None,
               may_call: Callable[[], bool] = lambda: True, max_rounds: int | None = None) -> Refinement:
        """Think twice about ``rl_action`` played in ``obs`` (the observation of ``snapshot``).

        Parameters
        ----------
        snapshot
            ``env.copy()`` taken in the state of ``obs``, before the RL action; not modified.
        q_values : (n_actions,) array, optional
            The SAC critic's min(Q1, Q2) in that state (-inf for illegal actions), for the shortlist.
        may_call : callable
            Asked before every LLM call; False (budget spent) ends the refinement.
        max_rounds : int, optional
            Overrides the actor's rounds (1 measures the LLM's first choice alone).
        """
        self.stats.bad_transitions += 1
        result = Refinement(rounds=0, calls=0, accepted=False)
        candidates = self.candidates(obs, q_values, rl_action)
        if not candidates:
            return result
        baseline = self._simulate(snapshot, rl_action)
        result.baseline = baseline
        state_text = describe_state(obs, self.layout)
        rl_text, rl_outcome = self.catalog.describe(rl_action), describe_outcome(baseline)
        failed: list[tuple[str, str]] = []
        rounds = self.max_rounds if max_rounds is None else max_rounds
        while candidates and result.rounds < rounds and may_call():
            texts = [self.catalog.describe(i) for i in candidates]
            prompt = actor_prompt(state_text, rl_text, rl_outcome, failed, texts)
            started = time.perf_counter()
            result.calls += 1
            self.stats.calls += 1
            try:
                choice = self._rank(prompt, state_text, texts)
            except LLMError as exc:
                self.stats.errors += 1
                self.stats.error_kinds[exc.kind] = self.stats.error_kinds.get(exc.kind, 0) + 1
                result.error = str(exc)
                return result
            finally:
                self.stats.llm_seconds += time.perf_counter() - started
            result.rounds += 1
            self.stats.rounds += 1
            action = candidates.pop(choice)
            outcome = self._simulate(snapshot, action)
            if outcome.reward > baseline.reward + self.min_improvement:
                result.accepted, result.action, result.rollout = True, action, outcome
                result.improvement = outcome.reward - baseline.reward
                result.prompt, result.answer = prompt, texts[choice]
                result.first_choice_accepted = result.rounds == 1
                self.stats.accepted += 1
                self.stats.first_choice_accepted += int(result.first_choice_accepted)
                return result
            failed.append((texts[choice], describe_outcome(outcome)))
        return result
