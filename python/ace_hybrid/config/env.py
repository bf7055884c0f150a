"""Sections ``[env]`` and ``[reward]``: the Grid2Op environment, its episodes, and the reward of one decision."""

from __future__ import annotations

from dataclasses import dataclass, field

from ace_hybrid.config.checks import check

__all__ = ["EnvConfig", "RewardConfig", "parse_action_set"]


def parse_action_set(spec: str) -> int | None:
    """``env.action_set``: "full" -> None, "tutor:N" -> N (ValueError naming the value otherwise)."""
    if spec == "full":
        return None
    kind, _, n = spec.partition(":")
    if kind == "tutor" and n.isdigit() and 1 <= int(n) <= 100_000:
        return int(n)
    raise ValueError(f"env.action_set = {spec!r} is invalid: 'full' or 'tutor:N' with N in [1, 100000]")


@dataclass
class EnvConfig:
    """The Grid2Op environment and the episodes used for training and evaluation."""

    name: str = "l2rpn_neurips_2020_track1"
    """Grid2Op environment (see ``ace_hybrid.grid.env.SUPPORTED_ENVS``)."""
    data: str = ""
    """Where the episodes' time series come from: "" for grid2op's copy of ``name`` (the full dataset where the user
    has it, else the offline copy), or a generated set's name under $ACE_HYBRID_DATA (default ./data) or the path of
    an environment folder of ``name`` (a generated set, a full dataset downloaded elsewhere). In a generated set
    scenario ids are week numbers (``ace-hybrid data generate``; its splits.json says which weeks are for training,
    validation and test)."""
    env_seed: int = 0
    """Seed of the environment's own generators."""
    threshold: float = 0.9
    """Danger threshold on max rho: the agent decides only at or above it (the safe rule acts below)."""
    train_scenarios: list[int] = field(default_factory=lambda: [0, 1])
    """Scenario ids training episodes cycle through."""
    train_seed_start: int = 1000
    """Training episode k uses seed train_seed_start + k (disjoint from the evaluation seeds)."""
    eval_pairs: list[list[int]] = field(default_factory=lambda: [[0, 0], [1, 1], [0, 2], [1, 3]])
    """Held-out (scenario, seed) pairs for evaluation. The offline copies hold 1-3 scenarios, so held-out means
    unseen seeds (opponent attacks and maintenance differ)."""
    max_episode_steps: int = 0
    """Cut training episodes after this many environment steps (0: the scenario's full length)."""
    eval_max_steps: int = 0
    """Cut evaluation episodes after this many steps (0: full length)."""
    start_spread: int = 0
    """When > 0, the episode seed also chooses where the episode starts in its scenario: a step in
    [0, start_spread), the same for every agent given the seed (0: every episode starts at the scenario's first
    step). Without an opponent a seed changes nothing else, so on such grids (l2rpn_case14_sandbox, l2rpn_wcci_2020)
    this is what makes (scenario, seed) pairs different episodes; survival counts the steps left after the start."""
    deploy_topk: int = 8
    """At evaluation, the policy's k most likely legal actions and do nothing are checked with one obs.simulate
    each and the safest is played (0: play the policy's most likely action unchecked)."""
    deploy_shortlist: int = 0
    """How many of the ``deploy_topk`` actions checked come from the action set's heuristic shortlist (the greedy
    expert's candidates) instead of the policy's ranking: the same simulations, candidates from both (0: all the
    policy's; else in [1, deploy_topk - 1])."""
    deploy_among: int = 0
    """The policy alone (``deploy_topk = 0``) only: it plays its most likely of do nothing and the first
    ``deploy_among - 1`` actions of the action set's heuristic shortlist (the greedy expert's candidates), none
    simulated (0: its most likely legal action; else >= 2)."""
    mask_no_ops: bool = False
    """Mask the line actions that would leave the grid as it is (reconnecting a connected line, disconnecting a
    disconnected one) wherever the policy acts, learns and is deployed. An action set holds every line reconnection:
    without it, a grid whose lines are all connected offers one copy of do nothing per line, and a policy that
    maximises entropy spreads over them."""
    deploy_sure: float = 0.0
    """The policy alone (``deploy_topk = 0``) only: it plays its most likely action only where the policy gives it at
    least this probability, and does nothing elsewhere (0: always; else in (0, 1))."""
    deploy_threshold: float = 0.0
    """Where a trained policy is deployed (alone or checked; its checkpoint selection too): the danger threshold it
    decides at, the safe rule acting below it (0: ``env.threshold``; else in [``env.threshold``, 5]). Training's
    rollouts keep ``env.threshold``: a policy trained from 0.9 and deployed from 1.0 decides only where a line is
    overloaded, and leaves the states in between, where acting may break what doing nothing keeps, to the safe
    rule."""
    action_set: str = "full"
    """The actions the policy chooses among: "full" (the whole catalog, ACE's setting) or "tutor:N" (do nothing, the
    line reconnections and the N actions a simulating tutor found best most often in danger states of the training
    scenarios; see ace_hybrid.grid.action_set)."""
    action_set_states: int = 400
    """Danger states of the training scenarios the tutor examines to select a "tutor:N" action set."""

    def validate(self) -> None:
        check(0.0 <= self.threshold <= 5.0, "env.threshold", self.threshold, "must be in [0, 5]")
        check(len(self.train_scenarios) > 0, "env.train_scenarios", self.train_scenarios, "must not be empty")
        check(all(len(p) == 2 for p in self.eval_pairs) and len(self.eval_pairs) > 0, "env.eval_pairs",
               self.eval_pairs, "must be a non-empty list of [scenario, seed]")
        check(self.max_episode_steps >= 0, "env.max_episode_steps", self.max_episode_steps, "must be >= 0")
        check(self.eval_max_steps >= 0, "env.eval_max_steps", self.eval_max_steps, "must be >= 0")
        check(0 <= self.start_spread <= 1_000_000, "env.start_spread", self.start_spread, "must be in [0, 1000000]")
        check(self.deploy_topk >= 0, "env.deploy_topk", self.deploy_topk, "must be >= 0")
        check(self.deploy_shortlist == 0 or 0 < self.deploy_shortlist < self.deploy_topk, "env.deploy_shortlist",
              self.deploy_shortlist, f"must be 0 or in [1, env.deploy_topk - 1 = {self.deploy_topk - 1}]")
        check(self.deploy_among == 0 or 2 <= self.deploy_among <= 1000, "env.deploy_among", self.deploy_among,
              "must be 0 or in [2, 1000]")
        check(self.deploy_sure == 0 or 0 < self.deploy_sure < 1, "env.deploy_sure", self.deploy_sure,
              "must be 0 or in (0, 1)")
        check(self.deploy_threshold == 0 or self.threshold <= self.deploy_threshold <= 5.0, "env.deploy_threshold",
              self.deploy_threshold, f"must be 0 or in [env.threshold = {self.threshold:g}, 5]")
        parse_action_set(self.action_set)
        check(1 <= self.action_set_states <= 1_000_000, "env.action_set_states", self.action_set_states,
               "must be in [1, 1000000]")


@dataclass
class RewardConfig:
    """The reward of one decision (a semi-MDP transition spanning k environment steps).

    R = sum over the k steps of ``step_scale * (1 + margin_weight * clip(1 - max_rho, -1, 1))``, minus
    ``blackout_penalty`` if the grid collapses. Surviving is worth about ``step_scale`` a step, a comfortable margin a
    little more; a blackout makes R negative, so ``r_bar = 0`` marks the transitions that lost the grid.
    """

    step_scale: float = 0.01
    """Reward per environment step survived."""
    margin_weight: float = 0.5
    """Weight of the loading margin (1 - max rho) in the per-step reward."""
    blackout_penalty: float = 1.0
    """Subtracted from the reward of the transition that ends in a blackout."""

    def validate(self) -> None:
        check(self.step_scale > 0, "reward.step_scale", self.step_scale, "must be > 0")
        check(0 <= self.margin_weight <= 1, "reward.margin_weight", self.margin_weight, "must be in [0, 1]")
        check(self.blackout_penalty >= 0, "reward.blackout_penalty", self.blackout_penalty, "must be >= 0")
