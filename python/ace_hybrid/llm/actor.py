"""The policy actor f_LLM of ACE ("think twice"): re-propose a better action for a bad transition.

A transition is bad when its (semi-MDP) reward is below ``r_bar`` (:class:`~ace_hybrid.config.ACEConfig`). The actor
gets the state of that decision as a snapshot of the environment (``env.copy()`` taken just before the RL action was
played) and:

1. builds a shortlist of legal candidates: the SAC critic's best Q-values and the greedy heuristic's picks
   (:meth:`~ace_hybrid.grid.catalog.ActionCatalog.shortlist`), plus do nothing, without the RL action itself;
2. asks the ranker to choose one (:mod:`ace_hybrid.llm.rankers`, ``ace.ranker``). For the LLM the prompt holds a
   domain prefix P_r, the state T_s, the RL action T_a with its outcome, every failed attempt so far, and each
   candidate under a letter, with its simulated one-step effect when ``show_effects``; the candidates are shown in a
   seeded shuffled order (never the shortlist's or the critic's: a small model's position prior would pass for a
   choice), and the chosen letter is mapped back to its candidate. The LLM's answer is read from the labels'
   next-token log-probabilities, so the proposal is always a legal candidate and nothing the model writes is ever
   executed. The rankers "sim" (lowest simulated max loading), "q" (the SAC critic) and "random" are the controls
   it is measured against;
3. validates the proposal in a copy of the snapshot: play it, then the safe rule until the next danger state, the end
   of the episode or ``validation_steps`` steps, summing the training reward. The RL action is replayed the same way
   (like for like: same simulator, same cap). The proposal is accepted if it does not end in a blackout the RL
   action avoided and either its reward r_hat beats the RL action's by at least ``min_improvement`` (0.01 by default:
   about one more step survived on the reward's scale) or, no lower in reward, it ends with a max loading lower by
   at least ``min_rho_drop`` (0.05) (:meth:`PolicyActor.better`); otherwise it goes into the next round's prompt as a failed attempt, up to
   ``max_rounds`` rounds.

An accepted proposal becomes the transition (s, a_hat, r_hat, s_hat', done_hat) of the validated partition with
I_v = 1 and improvement r_hat - r (r: the RL action's replayed reward).

Why refine as transitions complete rather than from sampled batches: validating in a simulator needs the grid's full
state, which the replay does not keep (it stores feature vectors). The loop holds one snapshot per pending decision
(about 10 ms to copy on the 36-substation grids), which is only possible for the transition being completed.

Failures of the LLM (:class:`~ace_hybrid.llm.backend.LLMError`) are counted and end that refinement; they never stop
training.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ace_hybrid.grid.rules import SafeRule, in_danger
from ace_hybrid.grid.text import LineEndpoints, describe_state
from ace_hybrid.llm.backend import LLMBackend, LLMError
from ace_hybrid.llm.rankers import LABELS, ChoiceProblem, Ranker, neutral_order, simulate_effects

__all__ = ["ActorStats", "PolicyActor", "Refinement", "Rollout", "rollout"]


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


def max_rho(obs: Any) -> float:
    """Largest line loading of a grid2op observation."""
    return float(np.max(obs.rho))


def played_max_rho(r: Rollout) -> float | None:
    """The max loading where a segment ended, as the prompt compares candidates with it: inf for a blackout, None
    for an episode that ended safely (no candidate can do better)."""
    if r.blackout:
        return math.inf
    return None if r.ended else float(np.max(r.obs.rho))


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

    ``action`` / ``rollout`` / ``improvement`` / ``problem`` / ``choice`` describe the accepted proposal (None when
    no round succeeded): ``problem`` is the question of the accepted round, candidates in the order shown, and
    ``choice`` the accepted candidate's position in it. ``baseline`` is the RL action replayed in the simulator.
    """

    rounds: int
    calls: int
    accepted: bool
    baseline: Rollout | None = None
    action: int | None = None
    rollout: Rollout | None = None
    improvement: float = 0.0
    problem: ChoiceProblem | None = None
    choice: int | None = None
    first_choice_accepted: bool = False
    error: str | None = None
    tried: list[int] = field(default_factory=list)
    """Candidates validated, in the order the ranker chose them."""
    positions: list[int] = field(default_factory=list)
    """Position (0 = A) of each round's choice in the order shown: how spread a model's choices are."""
    first_problem: ChoiceProblem | None = None
    """The first round's question (every candidate, in the order shown)."""
    verdicts: list[tuple[int, bool]] = field(default_factory=list)
    """(position in ``first_problem``, accepted) of every candidate validated: the simulator's labels."""

    @property
    def prompt(self) -> list[dict[str, str]] | None:
        """The accepted round's prompt."""
        return self.problem.prompt() if self.problem is not None else None

    @property
    def answer(self) -> str | None:
        """The accepted round's answer (a label)."""
        return LABELS[self.choice] if self.choice is not None else None


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
    candidates, max_rounds, validation_steps, min_improvement, ranker, lac_alpha, show_effects, do_nothing_first,
    effects_vs_played
        As in :class:`~ace_hybrid.config.ACEConfig`.
    label_all
        After a refinement that asked the ranker, validate every candidate it was shown that no round tried, so
        its verdicts label them all (``ace.label_candidates``: co-evolution's judge pairs).
    seed
        Seed of the candidates' shown order, of the "random" ranker and of tie-breaking.
    """

    def __init__(self, backend: LLMBackend | None, catalog: Any, layout: LineEndpoints, *,
                 reward_fn: Callable[[Any, bool], float], threshold: float, candidates: int = 8, max_rounds: int = 5,
                 validation_steps: int = 48, min_improvement: float = 0.01, min_rho_drop: float = 0.05,
                 ranker: str = "llm", lac_alpha: float = 1.0, show_effects: bool = True, seed: int = 0,
                 do_nothing_first: bool = False, label_all: bool = False, effects_vs_played: bool = False) -> None:
        if not 2 <= candidates <= len(LABELS):
            raise ValueError(f"candidates = {candidates} out of range [2, {len(LABELS)}]")
        if max_rounds < 1:
            raise ValueError(f"max_rounds = {max_rounds} out of range [1, 20]")
        if not min_improvement >= 0:
            raise ValueError(f"min_improvement = {min_improvement} out of range [0, inf)")
        if not min_rho_drop >= 0:
            raise ValueError(f"min_rho_drop = {min_rho_drop} out of range [0, inf)")
        self.backend, self.catalog, self.layout = backend, catalog, layout
        self.ranker = Ranker(ranker, backend, lac_alpha=lac_alpha, seed=seed)
        self.show_effects = bool(show_effects)
        self.effects_vs_played = bool(effects_vs_played)
        self.order_rng = np.random.default_rng([seed, 1])
        self.reward_fn, self.threshold = reward_fn, float(threshold)
        self.n_candidates, self.max_rounds = int(candidates), int(max_rounds)
        self.validation_steps, self.min_improvement = int(validation_steps), float(min_improvement)
        self.min_rho_drop = float(min_rho_drop)
        self.do_nothing_first = bool(do_nothing_first)
        self.label_all = bool(label_all)
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

    def _accept(self, result: Refinement, action: int, outcome: Rollout, baseline: Rollout,
                problem: ChoiceProblem | None = None, choice: int | None = None) -> None:
        """Record ``action``, whose segment beat the RL action's, as the refinement (``problem`` None: no ranker
        chose it)."""
        result.accepted, result.action, result.rollout = True, action, outcome
        result.improvement = outcome.reward - baseline.reward
        result.problem, result.choice = problem, choice
        result.first_choice_accepted = problem is not None and result.rounds == 1
        self.stats.accepted += 1
        self.stats.first_choice_accepted += int(result.first_choice_accepted)

    def _simulate(self, snapshot: Any, action_index: int) -> Rollout:
        if self._safe_rule is None:
            self._safe_rule = SafeRule(snapshot.action_space, threshold=self.threshold)
        started = time.perf_counter()
        try:
            return rollout(snapshot, self.catalog.action(action_index), safe_rule=self._safe_rule,
                           reward_fn=self.reward_fn, threshold=self.threshold, max_steps=self.validation_steps)
        finally:
            self.stats.validate_seconds += time.perf_counter() - started

    def better(self, outcome: Rollout, baseline: Rollout) -> bool:
        """Whether a proposal's simulated segment beats the RL action's by the acceptance margin.

        Never when it ends in a blackout the RL action avoided. Otherwise: its reward is higher by at least
        ``min_improvement``, or (both survive) its reward is no lower and the max loading where it ends is lower by
        at least ``min_rho_drop`` (a segment often ends at the next step, in danger whatever was played: then the
        loading is what tells a better action).
        """
        if outcome.blackout and not baseline.blackout:
            return False
        gain = outcome.reward - baseline.reward
        if gain >= max(self.min_improvement, 1e-12):
            return True
        if outcome.blackout or baseline.blackout or gain < 0:
            return False
        return max_rho(baseline.obs) - max_rho(outcome.obs) >= max(self.min_rho_drop, 1e-12)

    def refine(self, snapshot: Any, obs: Any, rl_action: int, *, q_values: np.ndarray | None = None,
               may_call: Callable[[], bool] = lambda: True, max_rounds: int | None = None,
               shortlist: Sequence[int] | None = None, order_seed: int | None = None) -> Refinement:
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
        shortlist : sequence of int, optional
            The candidates to choose from (default: :meth:`candidates`); fixed problem sets pass theirs.
        order_seed : int, optional
            Seed of the order the candidates are shown in (default: the actor's own generator); fixed problem
            sets pass one per problem, so every ranker and every model sees the same order.
        """
        self.stats.bad_transitions += 1
        result = Refinement(rounds=0, calls=0, accepted=False)
        candidates = self.candidates(obs, q_values, rl_action) if shortlist is None else list(shortlist)
        if not candidates:
            return result
        rng = self.order_rng if order_seed is None else np.random.default_rng(order_seed)
        shown = [candidates[i] for i in neutral_order(len(candidates), rng)]
        baseline = self._simulate(snapshot, rl_action)
        result.baseline = baseline
        if self.do_nothing_first and 0 in shown:
            # Validated before any round, no ranker asked: a refinement with no problem (co-evolution skips it).
            shown.remove(0)
            outcome = self._simulate(snapshot, 0)
            result.tried.append(0)
            if self.better(outcome, baseline):
                self._accept(result, 0, outcome, baseline)
                return result
        first = list(shown)
        state_text = describe_state(obs, self.layout)
        rl_text, rl_outcome = self.catalog.describe(rl_action), describe_outcome(baseline)
        played = played_max_rho(baseline) if self.effects_vs_played else None
        effects = dict(zip(shown, simulate_effects(obs, [self.catalog.action(i) for i in shown])))
        failed: list[tuple[str, str]] = []
        rounds = self.max_rounds if max_rounds is None else max_rounds
        uses_llm = self.ranker.uses_llm
        while shown and result.rounds < rounds and (not uses_llm or may_call()):
            problem = ChoiceProblem(state_text, rl_text, rl_outcome, tuple(self.catalog.describe(i) for i in shown),
                                    tuple(effects[i] for i in shown), tuple(failed), self.show_effects, played)
            q = [float(q_values[i]) if q_values is not None else np.nan for i in shown]
            started = time.perf_counter()
            result.calls += int(uses_llm)
            self.stats.calls += int(uses_llm)
            try:
                choice = self.ranker.choose(problem, q)
            except LLMError as exc:
                self.stats.errors += 1
                self.stats.error_kinds[exc.kind] = self.stats.error_kinds.get(exc.kind, 0) + 1
                result.error = str(exc)
                return result
            finally:
                self.stats.llm_seconds += time.perf_counter() - started
            result.rounds += 1
            self.stats.rounds += 1
            result.positions.append(choice)
            result.first_problem = result.first_problem or problem
            action = shown.pop(choice)
            outcome = self._simulate(snapshot, action)
            result.tried.append(action)
            result.verdicts.append((first.index(action), self.better(outcome, baseline)))
            if result.verdicts[-1][1]:
                self._accept(result, action, outcome, baseline, problem, choice)
                break
            failed.append((problem.texts[choice], describe_outcome(outcome)))
        if self.label_all and result.first_problem is not None:
            for action in shown:  # the candidates no round tried: labels only, the refinement is decided
                result.verdicts.append((first.index(action), self.better(self._simulate(snapshot, action), baseline)))
        return result
