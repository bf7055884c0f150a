"""Baseline agents, all grid2op ``BaseAgent``s running under the activation rule (see :mod:`.rules`).

- :class:`DoNothingAgent`: in danger, does nothing.
- :class:`RecoPowerlineAgent`: in danger, reconnects the disconnected line whose simulated outcome is best.
- :class:`GreedyExpertAgent`: in danger, simulates a shortlist of legal catalog actions ranked by a cheap heuristic
  around the overloaded lines, within a budget of simulations, and keeps the best. :func:`make_tutor` builds the one
  that expert-guided RL learns from (the training loop, the rollout workers and the experiments' "tutor" row).

:class:`RuleAgent` is the common frame: it counts decisions (danger states) and simulations, which the evaluation
reports. :class:`PolicyAgent` is the frame of every learned policy (SAC's, MaskablePPO's): the policy alone, or its
top-k simulation check.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ace_hybrid.config import Config
from ace_hybrid.grid.rules import SafeRule, in_danger

try:  # grid2op is an optional dependency of the package, required by this module.
    from grid2op.Agent import BaseAgent
except ImportError as exc:  # pragma: no cover
    raise ImportError("ace_hybrid.grid.agents needs grid2op: pip install 'ace-hybrid[grid]'") from exc


class RuleAgent(BaseAgent):
    """A grid2op agent that lets :meth:`decide` choose in danger and the :class:`SafeRule` otherwise.

    Parameters
    ----------
    action_space
        The environment's action space.
    threshold
        Danger threshold on max rho (0.9 by default).
    """

    name = "rule"

    def __init__(self, action_space: Any, threshold: float = 0.9) -> None:
        super().__init__(action_space)
        self.threshold = float(threshold)
        self.safe_rule = SafeRule(action_space, threshold=self.threshold)
        self.decisions = 0
        self.acted = 0
        """Decisions whose action was not do-nothing: what the agent chose, beside how often it was asked."""
        self.simulations = 0
        self._do_nothing = action_space({})

    @property
    def total_simulations(self) -> int:
        """Simulations used by the policy and the safe rule."""
        return self.simulations + self.safe_rule.simulations

    def act(self, observation: Any, reward: float, done: bool = False) -> Any:
        if in_danger(observation, self.threshold):
            self.decisions += 1
            action = self.decide(observation)
            self.acted += action != self._do_nothing
            return action
        return self.safe_rule(observation)

    def decide(self, observation: Any) -> Any:
        """The policy's action in a danger state."""
        raise NotImplementedError

    def _simulate_max_rho(self, observation: Any, action: Any) -> float:
        """Max rho after ``action`` by one ``obs.simulate``; +inf when it fails, is illegal or ends the episode."""
        self.simulations += 1
        sim_obs, _, done, info = observation.simulate(action)
        if done or info.get("is_illegal", False) or info.get("exception"):
            return float("inf")
        return float(np.max(sim_obs.rho))


class DoNothingAgent(RuleAgent):
    """Does nothing in danger (the safe rule still reconnects lines and reverts substations)."""

    name = "do-nothing"

    def decide(self, observation: Any) -> Any:
        return self.action_space({})


class RecoPowerlineAgent(RuleAgent):
    """In danger, reconnects the reconnectable line with the lowest simulated max rho, if any beats doing nothing."""

    name = "reco"

    def decide(self, observation: Any) -> Any:
        do_nothing = self.action_space({})
        status = np.asarray(observation.line_status, dtype=bool)
        ready = np.flatnonzero(~status & (np.asarray(observation.time_before_cooldown_line) == 0))
        if ready.size == 0:
            return do_nothing
        best, best_rho = do_nothing, self._simulate_max_rho(observation, do_nothing)
        for line in ready:
            action = self.action_space({"set_line_status": [(int(line), 1)]})
            rho = self._simulate_max_rho(observation, action)
            if rho < best_rho:
                best, best_rho = action, rho
        return best


class GreedyExpertAgent(RuleAgent):
    """Simulates a shortlist of legal catalog actions around the overloaded lines and keeps the best.

    Parameters
    ----------
    action_space
        The environment's action space.
    catalog
        The :class:`~ace_hybrid.grid.catalog.ActionCatalog` of the environment, or an
        :class:`~ace_hybrid.grid.action_set.ActionSet` (the tutor of a run works in its indices).
    budget
        Simulations per decision (the do-nothing reference included).
    threshold
        Danger threshold on max rho.
    """

    name = "greedy"

    def __init__(self, action_space: Any, catalog: Any, budget: int = 30, threshold: float = 0.9) -> None:
        super().__init__(action_space, threshold)
        if budget < 2:
            raise ValueError(f"budget = {budget} out of range [2, inf): one simulation is the do-nothing reference")
        self.catalog = catalog
        self.budget = int(budget)

    def decide(self, observation: Any) -> Any:
        return self.catalog.action(self.choose(observation))

    def choose(self, observation: Any) -> int:
        """The catalog index of the best simulated candidate (0, do nothing, unless one beats it)."""
        return self.best(*self.simulated(observation))

    @staticmethod
    def best(candidates: list[int], rhos: list[float]) -> int:
        """The candidate of the lowest simulated max rho, the first of equals: do nothing wins ties."""
        return candidates[int(np.argmin(rhos))]

    def simulated(self, observation: Any) -> tuple[list[int], list[float]]:
        """The candidates (do nothing, then the heuristic shortlist of ``budget - 1``) and each one's simulated max
        rho (+inf when it fails, is illegal or ends the episode)."""
        candidates = [0, *(int(i) for i in self.catalog.shortlist(observation, self.budget - 1))]
        return candidates, [self._simulate_max_rho(observation, self.catalog.action(c)) for c in candidates]


class RandomCandidateAgent(RuleAgent):
    """Plays a uniformly random one of the candidates the LLM-only LAC agent chooses among (do nothing and the
    catalog's shortlist): the control that tells whether the LAC agent's choices add anything to its candidates.

    Parameters
    ----------
    action_space
        The environment's action space.
    catalog
        The environment's :class:`~ace_hybrid.grid.catalog.ActionCatalog`.
    candidates
        Candidates, do nothing included (>= 2), as ``ace.candidates`` gives the LAC agent.
    threshold
        Danger threshold on max rho.
    seed
        Seed of the choices.
    """

    name = "random-candidate"

    def __init__(self, action_space: Any, catalog: Any, candidates: int = 8, threshold: float = 0.9,
                 seed: int = 0) -> None:
        super().__init__(action_space, threshold)
        if candidates < 2:
            raise ValueError(f"candidates = {candidates} out of range [2, inf): do nothing and at least one other")
        self.catalog, self.candidates = catalog, int(candidates)
        self.rng = np.random.default_rng(seed)

    def decide(self, observation: Any) -> Any:
        options = [0, *(int(i) for i in self.catalog.shortlist(observation, self.candidates - 1))]
        return self.catalog.action(options[int(self.rng.integers(len(options)))])


class PolicyAgent(RuleAgent):
    """A learned policy over an :class:`~ace_hybrid.grid.action_set.ActionSet`, deployed under the activation rule.

    With ``topk = 0`` it plays the policy's most likely legal action. With ``topk = k`` it checks the k most likely
    legal actions and do nothing with one ``obs.simulate`` each and plays the one with the lowest simulated max rho
    (the top-k validation most L2RPN agents deploy with); the policy still chooses what is worth simulating. With
    ``shortlist = m`` (< k), m of the k checked are the action set's heuristic shortlist (the greedy expert's
    candidates, :meth:`~ace_hybrid.grid.action_set.ActionSet.shortlist`) and k − m the policy's most likely: the same
    number of simulations, the candidates drawn from both (the policy's fill any the shortlist does not give).
    Subclasses give the policy's probabilities (:meth:`policy_probs`) and may give its own most likely action
    (:meth:`most_likely`).

    Parameters
    ----------
    action_space
        The environment's action space.
    actions
        The actions the policy chooses among.
    features
        Observation -> raw feature vector (:class:`~ace_hybrid.grid.features.ObservationFeatures`).
    normalizer
        Raw -> normalised features, as in training (:class:`~ace_hybrid.grid.features.RunningNormalizer`).
    threshold
        Danger threshold on max rho.
    topk
        Actions checked by simulation per decision (0: the policy alone).
    policy
        The trained model the subclass reads (kept as ``self.policy``).
    shortlist
        How many of the ``topk`` checked come from the action set's heuristic shortlist (0: all the policy's).
    among
        The policy alone only (``topk = 0``): it plays its most likely of do nothing and the first ``among - 1`` of
        the action set's heuristic shortlist -- the greedy expert's candidates, none simulated (0: of every legal
        action).
    sure
        The policy alone only (``topk = 0``): it plays its most likely action only where that action's probability,
        among the actions it chooses from, is at least ``sure``, and does nothing elsewhere (0: it always plays it).
        Without simulation, a guess the policy is unsure of can break a grid that doing nothing would keep.
    """

    def __init__(self, action_space: Any, actions: Any, features: Any, normalizer: Any, threshold: float,
                 topk: int = 0, policy: Any = None, shortlist: int = 0, among: int = 0, sure: float = 0.0) -> None:
        super().__init__(action_space, threshold)
        if topk < 0:
            raise ValueError(f"topk = {topk} out of range [0, inf)")
        if shortlist != 0 and not 0 < shortlist < topk:
            raise ValueError(f"shortlist = {shortlist} out of range [0, topk - 1 = {max(topk - 1, 0)}]: the policy "
                             f"proposes at least one of the topk = {topk} actions checked (topk = 0: the policy "
                             f"alone, no shortlist)")
        if among != 0 and (among < 2 or topk != 0):
            raise ValueError(f"among = {among} out of range: 0, or >= 2 (do nothing and at least one shortlisted "
                             f"action) with the policy alone (topk = 0, not {topk})")
        if sure != 0 and not (0 < sure < 1 and topk == 0):
            raise ValueError(f"sure = {sure} out of range: 0, or in (0, 1) with the policy alone (topk = 0, not "
                             f"{topk})")
        self.actions, self.features, self.normalizer, self.policy = actions, features, normalizer, policy
        self.topk, self.shortlist, self.among, self.sure = int(topk), int(shortlist), int(among), float(sure)
        self.unsure = 0
        """Decisions where the policy alone did nothing because it was not ``sure`` of its most likely action."""

    def decide(self, observation: Any) -> Any:
        x = self.normalizer(self.features(observation))
        mask = self.actions.legal_mask(observation)
        if self.topk == 0:
            if self.among:
                mask = among_mask(mask, [0, *self.actions.shortlist(observation, self.among - 1)])
            choice = self.most_likely(x, mask)
            if self.sure and choice != 0 and self.confidence(x, mask, choice) < self.sure:
                self.unsure += 1
                choice = 0
            return self.actions.action(choice)
        candidates = [0, *self.checked(observation, x, mask)]
        rhos = [self._simulate_max_rho(observation, self.actions.action(a)) for a in candidates]
        return self.actions.action(candidates[int(np.argmin(rhos))])

    def checked(self, observation: Any, x: np.ndarray, mask: np.ndarray) -> list[int]:
        """The (at most ``topk``) legal actions other than do nothing that the check simulates: the policy's
        ``topk - shortlist`` most likely, the first ``shortlist`` of the heuristic shortlist not among them, then the
        policy's next ones if the shortlist gave fewer. Policy's first: an equal simulated max rho keeps its choice."""
        order = np.argsort(-self.policy_probs(x, mask), kind="stable")
        ranked = order[mask[order] & (order != 0)]  # vectorised: the full catalog has ~67K actions
        own = [int(a) for a in ranked[: self.topk - self.shortlist]]
        if self.shortlist == 0:
            return own
        extra = [int(a) for a in self.actions.shortlist(observation, self.topk) if int(a) not in own][: self.shortlist]
        # At most `shortlist` of the policy's next ones are in `extra`: 2 x shortlist of them fill what it lacks.
        rest = [int(a) for a in ranked[len(own): len(own) + 2 * self.shortlist] if int(a) not in extra]
        return [*own, *extra, *rest][: self.topk]

    def policy_probs(self, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(n,) pi(a | x) over the action set, 0 where ``mask`` is False; ``x`` is the normalised features."""
        raise NotImplementedError

    def most_likely(self, x: np.ndarray, mask: np.ndarray) -> int:
        """The policy's most likely legal action (ties: the lowest index)."""
        return int(np.argmax(np.where(mask, self.policy_probs(x, mask), -1.0)))

    def confidence(self, x: np.ndarray, mask: np.ndarray, choice: int) -> float:
        """pi(choice | x) among the actions ``mask`` keeps (renormalised over them)."""
        probs = np.where(mask, self.policy_probs(x, mask), 0.0)
        total = float(probs.sum())
        return float(probs[choice]) / total if total > 0 else 0.0


def among_mask(mask: np.ndarray, candidates: Any) -> np.ndarray:
    """``mask`` kept at ``candidates`` only (indices; negative ones, padding, are skipped): one state's (n,) mask
    and (k,) candidates, or a batch's (N, n) and (N, k)."""
    keep = np.zeros_like(mask)
    chosen = np.asarray(candidates, np.int64)
    listed = chosen >= 0
    keep[(*np.nonzero(listed)[:-1], chosen[listed])] = True  # the row of each candidate, if batched, and its index
    return mask & keep


def deployed_check(cfg: Config, topk: int | None, shortlist: int | None, among: int | None = None,
                   sure: float | None = None) -> tuple[int, int, int, float]:
    """(topk, shortlist, among, sure) a saved policy is deployed with: the run's ``env.deploy_topk``,
    ``env.deploy_shortlist``, ``env.deploy_among`` and ``env.deploy_sure`` where not given; the policy alone (topk 0)
    has no shortlist and a check (topk > 0) no ``among`` or ``sure``. A shortlist that does not fit the top-k is the
    agent's ValueError."""
    k = cfg.env.deploy_topk if topk is None else topk
    if shortlist is None:
        shortlist = cfg.env.deploy_shortlist if k > 0 else 0
    if among is None:
        among = cfg.env.deploy_among if k == 0 else 0
    if sure is None:
        sure = cfg.env.deploy_sure if k == 0 else 0.0
    return k, shortlist, among, sure


def deployed_threshold(cfg: Config, threshold: float | None = None) -> float:
    """The danger threshold a saved policy is deployed with: ``threshold`` where given, else the run's
    ``env.deploy_threshold`` (0: its ``env.threshold``, the one it was trained at)."""
    if threshold is not None:
        return float(threshold)
    return cfg.env.deploy_threshold or cfg.env.threshold


def make_tutor(env: Any, cfg: Config, actions: Any = None) -> GreedyExpertAgent:
    """Expert-guided RL's tutor: the greedy expert over the run's action set with ``train.tutor_budget`` simulations
    per decision, under ``env.threshold``.

    ``actions``: the run's :class:`~ace_hybrid.grid.action_set.ActionSet` when the caller has built it; None builds
    it from ``env.action_set`` (the experiments' "tutor" row, which acts alone).
    """
    if actions is None:
        from ace_hybrid.grid.action_set import ActionSet, action_set_indices
        from ace_hybrid.grid.catalog import ActionCatalog

        catalog = ActionCatalog.for_env(env)
        actions = ActionSet(catalog, action_set_indices(cfg, env, catalog))
    return GreedyExpertAgent(env.action_space, actions, budget=cfg.train.tutor_budget, threshold=cfg.env.threshold)
