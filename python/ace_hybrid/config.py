"""Configuration: a tree of dataclasses, one documented default per field, loaded from TOML and ``--set`` overrides.

Every field carries its documentation as a string literal right below it (shown by ``ace-hybrid train --help-config``).
An unknown key or a value of the wrong type fails at start-up with a ``ValueError`` naming it; each section's
``validate`` checks ranges.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import numbers
import sys
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


HEADS = ("linear", "lowrank")
"""Valid values of :attr:`SACConfig.head`."""

BACKENDS = ("smollm2", "transformers", "openai", "none")
"""Valid values of :attr:`LLMConfig.backend`."""

ACTOR_RANKERS = ("llm", "lac", "sim", "q", "random")
"""Valid values of :attr:`ACEConfig.ranker`."""

QUEUE_OVERFLOW = ("skip", "drop_oldest")
"""Valid values of :attr:`ACEConfig.queue_overflow`."""

EXECUTORS = ("local", "ray")
"""Valid values of :attr:`TrainConfig.executor`."""

MAX_WORKERS = 64
"""Largest :attr:`TrainConfig.workers` (one process and one environment each)."""


def _check(cond: bool, name: str, value: Any, valid: str) -> None:
    if not cond:
        raise ValueError(f"{name} = {value!r} is invalid: {valid}")


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
    deploy_topk: int = 8
    """At evaluation, the policy's k most likely legal actions and do nothing are checked with one obs.simulate
    each and the safest is played (0: play the policy's most likely action unchecked)."""
    action_set: str = "full"
    """The actions the policy chooses among: "full" (the whole catalog, ACE's setting) or "tutor:N" (do nothing, the
    line reconnections and the N actions a simulating tutor found best most often in danger states of the training
    scenarios; see ace_hybrid.grid.action_set)."""
    action_set_states: int = 400
    """Danger states of the training scenarios the tutor examines to select a "tutor:N" action set."""

    def validate(self) -> None:
        _check(0.0 <= self.threshold <= 5.0, "env.threshold", self.threshold, "must be in [0, 5]")
        _check(len(self.train_scenarios) > 0, "env.train_scenarios", self.train_scenarios, "must not be empty")
        _check(all(len(p) == 2 for p in self.eval_pairs) and len(self.eval_pairs) > 0, "env.eval_pairs",
               self.eval_pairs, "must be a non-empty list of [scenario, seed]")
        _check(self.max_episode_steps >= 0, "env.max_episode_steps", self.max_episode_steps, "must be >= 0")
        _check(self.eval_max_steps >= 0, "env.eval_max_steps", self.eval_max_steps, "must be >= 0")
        _check(self.deploy_topk >= 0, "env.deploy_topk", self.deploy_topk, "must be >= 0")
        parse_action_set(self.action_set)
        _check(1 <= self.action_set_states <= 1_000_000, "env.action_set_states", self.action_set_states,
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
        _check(self.step_scale > 0, "reward.step_scale", self.step_scale, "must be > 0")
        _check(0 <= self.margin_weight <= 1, "reward.margin_weight", self.margin_weight, "must be in [0, 1]")
        _check(self.blackout_penalty >= 0, "reward.blackout_penalty", self.blackout_penalty, "must be >= 0")


@dataclass
class ReplayConfig:
    """The mixed prioritised replay (ACE's Eq. 8)."""

    rl_capacity: int = 100_000
    """Capacity of the RL partition (observation slots)."""
    llm_capacity: int = 20_000
    """Capacity of the LLM partition."""
    alpha: float = 0.6
    """Priority exponent of the RL partition (0: uniform)."""
    beta: float = 0.25
    """Fraction of each batch drawn from the LLM partition when it has data."""
    tau: float = 1.0
    """Temperature of Eq. 8: LLM items are drawn with probability proportional to I_v exp((r_hat - r) / tau)."""
    is_exponent: float = 0.4
    """Importance-sampling exponent w of the weights (N q_i)^-w."""
    priority_eps: float = 1e-3
    """Added to |TD error| to form a priority, so no transition becomes unsampleable."""

    def validate(self) -> None:
        _check(self.rl_capacity >= 3, "replay.rl_capacity", self.rl_capacity, "must be >= 3")
        _check(self.llm_capacity >= 1, "replay.llm_capacity", self.llm_capacity, "must be >= 1")
        _check(0 <= self.alpha <= 1, "replay.alpha", self.alpha, "must be in [0, 1]")
        _check(0 <= self.beta <= 1, "replay.beta", self.beta, "must be in [0, 1]")
        _check(self.tau > 0, "replay.tau", self.tau, "must be > 0")
        _check(0 <= self.is_exponent <= 1, "replay.is_exponent", self.is_exponent, "must be in [0, 1]")
        _check(self.priority_eps > 0, "replay.priority_eps", self.priority_eps, "must be > 0")


@dataclass
class TrainConfig:
    """The training loop's budget and rhythm."""

    total_env_steps: int = 20_000
    """Environment steps to train for (safe-rule steps included)."""
    learning_starts: int = 64
    """Decisions stored before the first update."""
    updates_per_decision: int = 1
    """SAC updates after each stored decision."""
    eval_every: int = 5_000
    """Evaluate on the held-out pairs every this many environment steps (0: only at the end)."""
    checkpoint_every: int = 2_000
    """Write a checkpoint every this many environment steps (and at the end)."""
    keep_best_at: list[int] = field(default_factory=list)
    """Budgets (env steps): evaluate exactly then and copy best.pt to best-<steps>.pt, as if training stopped there."""
    tutor_steps: int = 0
    """Expert-guided warm start: for the run's first this many environment steps (over all workers) the greedy expert
    (simulating tutor_budget of the policy's actions) decides instead of the policy; its decisions go to the replay's
    validated partition (the LLM partition, I_v = 1), where the imitation loss and the critic learn from them."""
    tutor_budget: int = 30
    """Simulations per decision of the tutor (the do-nothing reference included)."""
    imitation_weight: float = 0.0
    """Weight of the auxiliary loss -log pi(a | s) on the validated rows of each batch (LLM-refined or tutor
    decisions); Eq. 8 draws those rows with probability proportional to I_v exp((r_hat - r) / tau), so the loss is
    the Eq. 8-weighted cross-entropy in expectation. 0 turns it off."""
    seed: int = 0
    """Seed of the networks, the replay and the exploration."""
    torch_threads: int = 1
    """torch.set_num_threads at start-up (0: leave PyTorch's default, one per core). 1 was fastest where measured
    (2 shared cores: one update at 67k actions 20% slower on 2 threads with OMP_WAIT_POLICY=PASSIVE, ~15x slower
    without it); raise it on a dedicated machine with more cores. Export OMP_WAIT_POLICY=PASSIVE before starting
    Python whenever this is not 1: OpenMP reads it once, when torch is imported, so the package cannot set it."""
    workers: int = 0
    """Rollout workers (0: one steps in the learner's thread on its networks, one step at a time, the classic loop).
    N >= 1: N workers, each with its own environment and a copy of the policy, step while the learner updates; the
    same worker code, one episode sequence and the run's step budget either way (ace_hybrid.training.rollout). Each
    takes one core and one torch thread; the learner needs little CPU when updates are few."""
    sync_every: int = 20
    """The learner sends the workers its policy (weights and normaliser, with a version number) after every this
    many updates. A run without updates (updates_per_decision = 0, or before learning_starts) never sends: the
    policy has not changed, and each worker's normaliser follows its own decisions."""
    executor: str = "local"
    """Where the workers run: "local" (processes started by the learner, multiprocessing's spawn) or "ray" (Ray
    actors: pip install 'ace-hybrid[cluster]'). The same worker code runs either way."""
    ray_address: str = ""
    """executor = "ray": the cluster to join ("auto", or "ray://head:10001"); "" starts a local Ray with one CPU per
    worker, which stops with the run. On a cluster, every node needs ace_hybrid and the Grid2Op data installed."""
    worker_batch_steps: int = 100
    """Environment steps a worker takes from the run's budget and runs between two messages to the learner: more
    steps, fewer messages; fewer, fresher data and policies (workers = 0: one)."""
    samples_per_insert: float = 0.0
    """Workers: transitions sampled per stored one, any number of workers (rate limiter: ace_hybrid.training.limiter;
    0: updates_per_decision per decision). workers = 0: 0 or updates_per_decision x sac.batch_size."""
    samples_per_insert_tolerance: float = 0.1
    """How far (a fraction of the samples due) the learner may fall behind samples_per_insert before workers wait."""

    def validate(self) -> None:
        _check(self.total_env_steps > 0, "train.total_env_steps", self.total_env_steps, "must be > 0")
        _check(self.learning_starts >= 1, "train.learning_starts", self.learning_starts, "must be >= 1")
        _check(self.updates_per_decision >= 0, "train.updates_per_decision", self.updates_per_decision,
               "must be >= 0")
        _check(self.eval_every >= 0, "train.eval_every", self.eval_every, "must be >= 0")
        _check(self.checkpoint_every > 0, "train.checkpoint_every", self.checkpoint_every, "must be > 0")
        _check(len(set(self.keep_best_at)) == len(self.keep_best_at) and all(0 < b <= self.total_env_steps for b in
               self.keep_best_at), "train.keep_best_at", self.keep_best_at,
               f"must be distinct steps in [1, train.total_env_steps = {self.total_env_steps}]")
        _check(self.tutor_steps >= 0, "train.tutor_steps", self.tutor_steps, "must be >= 0")
        _check(2 <= self.tutor_budget <= 10_000, "train.tutor_budget", self.tutor_budget, "must be in [2, 10000]")
        _check(0.0 <= self.imitation_weight <= 1000.0, "train.imitation_weight", self.imitation_weight,
               "must be in [0, 1000]")
        _check(self.torch_threads >= 0, "train.torch_threads", self.torch_threads, "must be >= 0")
        _check(0 <= self.workers <= MAX_WORKERS, "train.workers", self.workers, f"must be in [0, {MAX_WORKERS}]")
        _check(self.sync_every >= 1, "train.sync_every", self.sync_every, "must be >= 1")
        _check(self.executor in EXECUTORS, "train.executor", self.executor, f"must be one of {EXECUTORS}")
        _check(self.executor == "local" or self.workers >= 1, "train.executor", self.executor,
               "'ray' runs rollout workers: set train.workers >= 1")
        _check(isinstance(self.ray_address, str), "train.ray_address", self.ray_address,
               "must be a string ('' for a local Ray)")
        _check(not self.ray_address or self.executor == "ray", "train.ray_address", self.ray_address,
               "is read only with train.executor = 'ray'")
        _check(1 <= self.worker_batch_steps <= 100_000, "train.worker_batch_steps", self.worker_batch_steps,
               "must be in [1, 100000]")
        _check(self.samples_per_insert >= 0, "train.samples_per_insert", self.samples_per_insert, "must be >= 0")
        _check(0 <= self.samples_per_insert_tolerance <= 1, "train.samples_per_insert_tolerance",
               self.samples_per_insert_tolerance, "must be in [0, 1]")


@dataclass
class LogConfig:
    """Logging."""

    tensorboard: bool = True
    """Write TensorBoard event files into the run directory (needs tensorboardX)."""
    progress: bool = True
    """Show a live progress bar."""
    log_every: int = 100
    """Write a metrics line every this many environment steps."""

    def validate(self) -> None:
        _check(self.log_every > 0, "log.log_every", self.log_every, "must be > 0")


@dataclass
class ACEConfig:
    """ACE's LLM roles in the loop (arXiv 2506.02522): policy actor, value critic, co-evolution. They run only when
    ``llm.backend`` is not "none"; each can be switched off alone (the ablations).

    A transition is *bad*, and goes to the actor, when something really went wrong inside it: a line reached
    ``bad_rho`` (an overload, 100% by default) at one of its steps, or the grid collapsed, or its reward is below
    ``r_bar``. Reward scale (see :class:`RewardConfig`): a transition that keeps the grid out of danger for k steps
    earns about ``0.01 k``; one that ends in a blackout earns about -1; so ``r_bar = 0`` adds nothing to the blackout
    rule and ``r_bar = 0.3`` would add every transition followed by renewed danger within ~25 steps.
    """

    actor: bool = True
    """Policy actor f_LLM: re-propose actions for bad transitions (r < r_bar), validated in a simulator copy."""
    r_bar: float = 0.0
    """A completed transition with reward below r_bar is bad (see the class note on scale)."""
    bad_rho: float = 1.0
    """A completed transition in which some line's loading reached bad_rho is bad (1.0: an overload)."""
    candidates: int = 8
    """Legal candidates shown to the actor: half from the SAC critic's best Q-values, half from the greedy heuristic."""
    max_rounds: int = 5
    """Rounds of propose -> validate per bad transition; a failed attempt is put in the next round's prompt."""
    ranker: str = "sim"
    """How the actor picks among candidates (shown in a seeded shuffled order): "llm" (the model answers with a
    candidate's letter, read from the letters' log-probabilities), "lac" (prior x exp(lac_alpha Q_LLM), Q_LLM from
    GOOD/BAD token logits), or the controls "sim" (lowest simulated max loading), "q" (the SAC critic's best) and
    "random". The default is what measures best in benchmarks/bench_actor.py (see the README's LLM section for the
    embedded model against these controls); point "llm" at a stronger model and measure it there."""
    show_effects: bool = True
    """Show each candidate's simulated one-step effect (max loading, lines over the limit, lines off) in the LLM's
    prompt ("reading"); false shows the state and the candidates' texts only ("knowledge of the grid")."""
    lac_alpha: float = 1.0
    """Critic weight of LAC when ranker = "lac" and for the LLM-only agent."""
    validation_steps: int = 48
    """Longest simulated continuation (safe rule after the proposal, until the next danger state) in validation."""
    min_improvement: float = 0.01
    """A proposal is accepted when its simulated reward exceeds the RL action's by at least this (0.01: about one more
    step survived), or when see min_rho_drop; never when it ends in a blackout the RL action avoided."""
    min_rho_drop: float = 0.05
    """... or when, with a reward no lower, the max loading where its simulated segment ends is lower by at least
    this (segments often end at the next step, in danger whatever was played: the loading tells them apart)."""
    max_llm_calls: int = 400
    """Budget of LLM calls per run (actor + critic; co-evolution's probe calls are counted apart); 0: unlimited."""
    critic_share: float = 0.25
    """Share of max_llm_calls reserved for the value critic when it is on (the actor gets the rest)."""
    pace_budget: bool = True
    """Spread the actor's calls over the run: by environment step t of T, at most max_llm_calls * (0.1 + 0.9 t / T)
    calls are spent, so the early, random policy's many bad transitions do not use it all up."""
    critic: bool = True
    """Value critic g_LLM: trajectory-level reward shaping in {-2K, -K, +K, +2K}."""
    critic_start: int = 2_000
    """Environment steps before the critic switches on."""
    critic_every: int = 2
    """Run the critic after every this many finished training episodes."""
    critic_trajectories: int = 2
    """Trajectories (stored episodes) judged per critic round, chosen by reward among those with key transitions."""
    r_key: float = 0.5
    """A transition with |r| > r_key is a key transition."""
    critic_k: float = 0.02
    """K: the unit of the critic's per-step adjustment."""
    critic_max_total: float = 0.1
    """Bound on the summed |adjustment| per trajectory (larger sums are scaled down)."""
    critic_mode: str = "score"
    """How the critic answers: each key step's adjustment chosen by scoring the four options, always well-formed
    ("score"), or one generated answer per trajectory parsed strictly, malformed answers counted and ignored
    ("generate")."""
    coevolve: bool = True
    """Co-evolution: LoRA fine-tune the LLM on its best accepted refinements (backends that support it)."""
    finetune_every: int = 100
    """Fine-tune after every this many accepted refinements."""
    finetune_pairs: int = 64
    """Accepted refinements per fine-tuning round, those with the largest r_hat - r."""
    sft_orders: int = 2
    """Each of a round's refinements is shown under this many orders of its candidates, the accepted candidate's
    letter cycling evenly over the positions: the pairs teach which candidate was right, never a letter."""
    probe_size: int = 8
    """Bad transitions set aside (never refined or trained on) to measure the LLM's first-choice acceptance before
    and after each fine-tuning round on identical problems (0: no probe)."""
    async_llm: bool = True
    """Run the LLM's work (the actor's refinements, the critic's rounds, co-evolution's fine-tuning) on a worker
    thread behind a bounded queue, so acting and learning never wait for it; results enter the replay when they
    arrive, and the queue drains at the end of the run. False: every LLM call runs in the loop's thread, which waits
    for it (deterministic; slower)."""
    queue_size: int = 2
    """Bad transitions that may wait for the worker (async_llm); each holds an environment copy until it is run, and
    the run's end waits for them (the drain)."""
    queue_overflow: str = "skip"
    """When a bad transition finds the queue full: "skip" drops the new one, and while the queue is full the loop does
    not even copy the environment at its decisions (a copy costs it 10-40 ms); "drop_oldest" evicts the oldest waiting
    one (the freshest transitions are refined, at the price of a copy at every decision). Either way the dropped one
    is counted (llm/queue_dropped)."""
    worker_torch_threads: int = 1
    """Torch CPU threads of the LLM worker thread (async_llm; thread-local with OpenMP builds), leaving the other cores
    to the learner; 0: torch's default for a new thread (all cores)."""
    worker_nice: int = 19
    """How much lower the LLM worker thread's scheduling priority is than the loop's (Linux only, per thread; 0:
    the same): the learner gets the CPU first, the LLM what is left, and what it cannot keep up with is dropped.
    It matters only when the cores are oversubscribed (a free core runs the worker at full speed at any nice).
    Measured on 2 shared cores (load ~2.7), 3,000 steps of make run's configuration, one run each (no interval): at
    nice 5 the ACE loop took 47.9 s against SAC-only's 30.6 s (its updates and steps slowed by the worker); at nice
    19, 25.2 s. The price: with no free core the worker gets almost nothing (make run's --jobs 2: 19-22 LLM calls
    per ACE run, its results only in the final drain)."""

    def validate(self) -> None:
        _check(-10.0 <= self.r_bar <= 10.0, "ace.r_bar", self.r_bar, "must be in [-10, 10]")
        _check(2 <= self.candidates <= 26, "ace.candidates", self.candidates, "must be in [2, 26] (one letter each)")
        _check(1 <= self.max_rounds <= 20, "ace.max_rounds", self.max_rounds, "must be in [1, 20]")
        _check(self.ranker != "score", "ace.ranker", self.ranker, "was renamed: use 'llm'")
        _check(self.ranker in ACTOR_RANKERS, "ace.ranker", self.ranker, f"must be one of {ACTOR_RANKERS}")
        _check(0.0 < self.bad_rho <= 5.0, "ace.bad_rho", self.bad_rho, "must be in (0, 5]")
        _check(0.0 <= self.lac_alpha <= 100.0, "ace.lac_alpha", self.lac_alpha, "must be in [0, 100]")
        _check(1 <= self.validation_steps <= 10_000, "ace.validation_steps", self.validation_steps,
               "must be in [1, 10000]")
        _check(self.min_improvement >= 0, "ace.min_improvement", self.min_improvement, "must be >= 0")
        _check(0 <= self.min_rho_drop <= 5, "ace.min_rho_drop", self.min_rho_drop, "must be in [0, 5]")
        _check(self.max_llm_calls >= 0, "ace.max_llm_calls", self.max_llm_calls, "must be >= 0")
        _check(0.0 <= self.critic_share <= 1.0, "ace.critic_share", self.critic_share, "must be in [0, 1]")
        _check(self.critic_start >= 0, "ace.critic_start", self.critic_start, "must be >= 0")
        _check(self.critic_every >= 1, "ace.critic_every", self.critic_every, "must be >= 1")
        _check(1 <= self.critic_trajectories <= 1000, "ace.critic_trajectories", self.critic_trajectories,
               "must be in [1, 1000]")
        _check(self.r_key >= 0, "ace.r_key", self.r_key, "must be >= 0")
        _check(0 < self.critic_k <= 10, "ace.critic_k", self.critic_k, "must be in (0, 10]")
        _check(self.critic_max_total >= self.critic_k, "ace.critic_max_total", self.critic_max_total,
               f"must be >= ace.critic_k = {self.critic_k}")
        _check(self.critic_mode in ("score", "generate"), "ace.critic_mode", self.critic_mode,
               "must be 'score' or 'generate'")
        _check(self.finetune_every >= 1, "ace.finetune_every", self.finetune_every, "must be >= 1")
        _check(self.finetune_pairs >= 1, "ace.finetune_pairs", self.finetune_pairs, "must be >= 1")
        _check(1 <= self.sft_orders <= 26, "ace.sft_orders", self.sft_orders, "must be in [1, 26]")
        _check(0 <= self.probe_size <= 256, "ace.probe_size", self.probe_size, "must be in [0, 256]")
        _check(1 <= self.queue_size <= 10_000, "ace.queue_size", self.queue_size, "must be in [1, 10000]")
        _check(self.queue_overflow in QUEUE_OVERFLOW, "ace.queue_overflow", self.queue_overflow,
               f"must be one of {QUEUE_OVERFLOW}")
        _check(0 <= self.worker_torch_threads <= 1024, "ace.worker_torch_threads", self.worker_torch_threads,
               "must be in [0, 1024]")
        _check(0 <= self.worker_nice <= 19, "ace.worker_nice", self.worker_nice, "must be in [0, 19]")


@dataclass
class SACConfig:
    """Hyper-parameters of :class:`DiscreteSAC` (defaults sized for ~67k actions on a CPU)."""

    hidden: tuple[int, ...] = (256, 256)
    """Widths of the MLP trunk of each network (actor, Q1, Q2), at least one layer, each >= 1."""
    head: str = "lowrank"
    """Output head over the actions: "lowrank" (h(s) . e(a) + b(a), fast at 67k actions) or "linear"."""
    embed_dim: int = 64
    """Width of the low-rank head: dimension of h(s) and of the action embeddings e(a) (>= 1)."""
    lr_actor: float = 3e-4
    """Adam learning rate of the policy network (> 0)."""
    lr_critic: float = 3e-4
    """Adam learning rate of the twin Q networks (> 0)."""
    lr_alpha: float = 3e-4
    """Adam learning rate of log(alpha), the temperature (> 0)."""
    gamma: float = 0.99
    """Discount per decision (per stored transition), in [0, 1]: the agent decides only in danger states and a
    transition spans every environment step until the next decision, so gamma applies once per transition."""
    polyak: float = 0.995
    """Target-network averaging after each update: target <- polyak * target + (1 - polyak) * online; [0, 1]."""
    init_alpha: float = 0.2
    """Initial temperature alpha (> 0); then tuned automatically towards the target entropy."""
    target_entropy_ratio: float = 0.5
    """Target entropy per state = ratio * log(number of legal actions), ratio in [0, 1] (see the module doc)."""
    grad_clip: float = 10.0
    """Maximum global L2 norm of each optimiser's gradient (actor, critics, alpha), > 0 (inf: no clipping)."""
    batch_size: int = 256
    """Transitions per update, as sampled by the training loop from the replay buffer (>= 1)."""
    prior_action: int = 0
    """Action given the initial probability prior_prob (ace_hybrid's catalogs: 0, do nothing); in [0, n)."""
    prior_prob: float = 0.0
    """Initial policy probability of prior_action, in [0, 1) (0: a uniform initial policy). On power grids most
    random topology changes hurt, so starting from "mostly do nothing" keeps early episodes alive."""
    policy_samples: int = 0
    """Actions drawn per state to estimate the policy loss's gradient (an integer >= 2), or 0 for the exact
    expectation over all legal actions. Sampled: unbiased (score function, leave-one-out baseline), stochastic."""
    device: str = "cpu"
    """Torch device of the networks and the update: "cpu", "cuda" or "auto" (cuda when available, else cpu)."""

    def validate(self) -> None:
        """Raises ValueError naming the first invalid field, its value and the valid range."""

        def bad(name: str, valid: str) -> ValueError:
            return ValueError(f"SACConfig.{name} = {getattr(self, name)!r} is invalid: expected {valid}")

        hidden = self.hidden
        if (not isinstance(hidden, (tuple, list)) or len(hidden) == 0
                or any(isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1 for h in hidden)):
            raise bad("hidden", "a non-empty tuple of integers >= 1")
        if self.head not in HEADS:
            raise bad("head", f"one of {HEADS}")
        for name in ("embed_dim", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise bad(name, "an integer in [1, inf)")
        for name in ("lr_actor", "lr_critic", "lr_alpha", "init_alpha"):
            v = getattr(self, name)
            if not _is_real(v) or not (0.0 < v < math.inf):
                raise bad(name, "a finite number in (0, inf)")
        if isinstance(self.prior_action, bool) or not isinstance(self.prior_action, numbers.Integral) \
                or self.prior_action < 0:
            raise bad("prior_action", "an integer in [0, n_actions)")
        if not _is_real(self.prior_prob) or not 0.0 <= self.prior_prob < 1.0:
            raise bad("prior_prob", "a number in [0, 1)")
        for name in ("gamma", "polyak", "target_entropy_ratio"):
            v = getattr(self, name)
            if not _is_real(v) or not (0.0 <= v <= 1.0):
                raise bad(name, "a number in [0, 1]")
        if not _is_real(self.grad_clip) or not self.grad_clip > 0.0:
            raise bad("grad_clip", "a number in (0, inf]")
        if isinstance(self.policy_samples, bool) or not isinstance(self.policy_samples, numbers.Integral) \
                or self.policy_samples < 0 or self.policy_samples == 1:
            raise bad("policy_samples", "0 (exact) or an integer in [2, inf)")
        if self.device not in ("cpu", "cuda", "auto"):
            raise bad("device", "one of ('cpu', 'cuda', 'auto')")


def _is_real(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, numbers.Real) and not math.isnan(v)



@dataclass
class LLMConfig:
    """Which language model to use and how; :func:`ace_hybrid.llm.make_backend` builds it.

    Call :meth:`validate` (``make_backend`` does) to get a ValueError naming a bad field, its value and
    its valid range.
    """

    backend: str = "smollm2"
    """"smollm2" (embedded default), "transformers" (local directory), "openai" (HTTP server) or "none"."""
    model_path: str = ""
    """Local causal-LM directory for the "transformers" backend (config, weights, tokenizer)."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """Base URL of the OpenAI-compatible server ("openai" backend), ending in /v1."""
    model: str = ""
    """Model name the server knows ("openai" backend)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key; the key itself is never stored in the config or logged."""
    timeout_s: float = 60.0
    """Per-request timeout in seconds ("openai" backend)."""
    max_retries: int = 3
    """Retries after a timeout, connection error, HTTP 429 or 5xx ("openai"), with exponential backoff."""
    retry_backoff_s: float = 0.5
    """First retry delay in seconds; it doubles at each retry (capped at 30 s)."""
    temperature: float = 0.0
    """Sampling temperature for generate(); 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus-sampling mass for generate() when temperature > 0."""
    max_new_tokens: int = 256
    """Default cap on generated tokens."""
    seed: int = 0
    """Seed of sampled generation and of fine-tuning's shuffling and LoRA initialisation."""
    device: str = "cpu"
    """Torch device of local backends ("cpu", "cuda", "cuda:1", "mps")."""
    dtype: str = "float32"
    """Torch dtype of local backends: "float32", "bfloat16", "float16" or "auto" (the checkpoint's)."""
    score_batch_size: int = 16
    """Candidates per batched forward when scoring (more candidates are scored in chunks)."""
    share_prompt_cache: bool = True
    """Score candidates on one shared prompt key/value cache (local backends); False runs prompt + candidate each."""
    reduction: str = "sum"
    """Default reduction of candidate token log-probs: "sum" (sequence log-prob) or "mean" (per token)."""
    top_logprobs: int = 20
    """How many top log-probabilities to request from a server for next-token reads (1..20)."""
    openai_scoring: str = "auto"
    """Candidate scoring through a server: "echo" (completions, echo=True), "choice" or "auto" (echo, else choice)."""
    guided_choice: bool = False
    """Pass generate(choices=...) to the server as vLLM's extra_body guided_choice (vLLM only)."""
    lora_rank: int = 8
    """LoRA rank r of a new adapter."""
    lora_alpha: float = 16.0
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch during fine-tuning."""
    lora_target_modules: tuple[str, ...] = ()
    """Module names LoRA wraps; empty means peft's default for the architecture (or ("all-linear",))."""
    lora_lr: float = 1e-4
    """AdamW learning rate of fine-tuning."""
    lora_epochs: int = 1
    """Passes over the pairs per finetune() call."""
    lora_batch_size: int = 8
    """Pairs per fine-tuning step (the loss is the mean over the answer tokens of all of them)."""
    lora_micro_batch: int = 1
    """Pairs per forward/backward pass inside a step; gradients accumulate to the same step (the loss and its
    gradient are those of the whole step, to float rounding). 1 needs no padding, so attention runs unmasked, and
    keeps the activations of one prompt only: one SmolLM2-135M step on 8 prompts of 901 tokens peaked at 12.0 GB in
    one pass, 1.7 GB this way with checkpointing, 80 s and 79 s (one run each; benchmarks/bench_lora_memory.py). Raise it on a
    GPU."""
    lora_checkpointing: bool = True
    """Gradient checkpointing during fine-tuning: each layer's activations are recomputed in the backward pass
    instead of kept (about a third more compute for a fraction of the memory; long grid prompts need it on CPU)."""
    cache_dir: str = ""
    """Cache root for the converted SmolLM2 model; empty means $ACE_HYBRID_CACHE or ~/.cache/ace_hybrid."""
    concurrency: int = 1
    """Requests in flight at once to an OpenAI-compatible server ("openai" backend only): the ACE worker refines
    this many transitions side by side, and batched log-prob reads (LAC) send their prompts in parallel."""

    def validate(self) -> LLMConfig:
        """Check every field; return self.

        Raises
        ------
        ValueError
            Naming the first bad field, its value and the valid range.
        """

        def bad(name: str, valid: str) -> ValueError:
            return ValueError(f"LLMConfig.{name} = {getattr(self, name)!r} is invalid; valid: {valid}")

        def check_range(name: str, lo: float, hi: float, *, lo_open: bool = False) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(name, f"a finite number in {'(' if lo_open else '['}{lo}, {hi}]")
            if value > hi or value < lo or (lo_open and value == lo):
                raise bad(name, f"{'(' if lo_open else '['}{lo}, {hi}]")

        def check_int(name: str, lo: int, hi: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise bad(name, f"an integer in [{lo}, {hi}]")

        if self.backend not in BACKENDS:
            raise bad("backend", " | ".join(repr(b) for b in BACKENDS))
        if self.backend == "transformers" and not self.model_path:
            raise bad("model_path", "a local model directory (required by backend='transformers')")
        if self.backend == "openai":
            if not self.base_url.startswith(("http://", "https://")):
                raise bad("base_url", "an http:// or https:// URL (required by backend='openai')")
            if not self.model:
                raise bad("model", "the server's model name (required by backend='openai')")
        if not self.api_key_env or not self.api_key_env.replace("_", "").isalnum():
            raise bad("api_key_env", "an environment variable name ([A-Za-z0-9_]+)")
        check_range("timeout_s", 0.0, 86400.0, lo_open=True)
        check_int("max_retries", 0, 100)
        check_range("retry_backoff_s", 0.0, 60.0)
        check_range("temperature", 0.0, 10.0)
        check_range("top_p", 0.0, 1.0, lo_open=True)
        check_int("max_new_tokens", 1, 1_000_000)
        check_int("seed", 0, 2**63 - 1)
        if self.dtype not in ("float32", "bfloat16", "float16", "auto"):
            raise bad("dtype", "'float32' | 'bfloat16' | 'float16' | 'auto'")
        if not self.device:
            raise bad("device", "a torch device string such as 'cpu' or 'cuda:0'")
        check_int("score_batch_size", 1, 65536)
        if not isinstance(self.share_prompt_cache, bool):
            raise bad("share_prompt_cache", "True | False")
        if not isinstance(self.guided_choice, bool):
            raise bad("guided_choice", "True | False")
        if self.reduction not in ("sum", "mean"):
            raise bad("reduction", "'sum' | 'mean'")
        check_int("top_logprobs", 1, 20)
        if self.openai_scoring not in ("auto", "echo", "choice"):
            raise bad("openai_scoring", "'auto' | 'echo' | 'choice'")
        check_int("lora_rank", 1, 4096)
        check_range("lora_alpha", 0.0, 1e6, lo_open=True)
        check_range("lora_dropout", 0.0, 0.99)
        if not all(isinstance(m, str) and m for m in self.lora_target_modules):
            raise bad("lora_target_modules", "a tuple of non-empty module names (or empty for peft's default)")
        check_range("lora_lr", 0.0, 1.0, lo_open=True)
        check_int("lora_epochs", 1, 10_000)
        check_int("lora_batch_size", 1, 65536)
        check_int("lora_micro_batch", 1, 65536)
        if not isinstance(self.lora_checkpointing, bool):
            raise bad("lora_checkpointing", "true | false")
        check_int("concurrency", 1, 256)
        if self.concurrency > 1 and self.backend != "openai":
            raise bad("concurrency", "1 for local backends (one model, one request at a time); > 1 needs "
                      "backend='openai'")
        return self

    def replace(self, **changes: Any) -> LLMConfig:
        """A validated copy with some fields changed (unknown names raise ValueError)."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"LLMConfig has no field(s) {unknown}; valid: {sorted(names)}")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return LLMConfig(**values).validate()


@dataclass
class Config:
    """The whole configuration of a run."""

    env: EnvConfig = field(default_factory=EnvConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    sac: SACConfig = field(default_factory=lambda: SACConfig(prior_prob=0.5))
    """SAC; on grids the initial policy does nothing half of the time (sac.prior_prob = 0.5)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)
    llm: LLMConfig = field(default_factory=lambda: LLMConfig(backend="none"))
    """The language model; "none" (the default) trains SAC alone, the ACE configs set "smollm2" or your own."""
    ace: ACEConfig = field(default_factory=ACEConfig)

    def validate(self) -> "Config":
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate()
        if self.train.workers and self.llm.backend != "none" and self.ace.actor:
            # The actor validates a refinement in a copy of the environment taken at the decision; that copy lives
            # in the worker's process, and an environment copy cannot travel to the learner.
            raise ValueError(f"train.workers = {self.train.workers} > 0 runs SAC without the LLM actor (its "
                             "refinements need a copy of the worker's environment at each decision); set "
                             "ace.actor = false (the LLM critic still runs, in the learner) or train.workers = 0")
        fixed = self.train.updates_per_decision * self.sac.batch_size
        if not self.train.workers and self.train.samples_per_insert not in (0, fixed):
            raise ValueError(f"train.samples_per_insert = {self.train.samples_per_insert:g} with train.workers = 0: "
                             f"the in-process loop samples train.updates_per_decision x sac.batch_size = {fixed} per "
                             f"insert; set it to 0 or {fixed}, or use workers")
        if self.replay.rl_capacity < self.sac.batch_size:
            raise ValueError(f"replay.rl_capacity = {self.replay.rl_capacity} must be >= sac.batch_size = "
                             f"{self.sac.batch_size}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _coerce(value: Any, annotation: Any, name: str) -> Any:
    """``value`` as the field's declared type, or ValueError naming the key."""
    origin = typing.get_origin(annotation)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif origin in (list, tuple):
        if isinstance(value, str):
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise ValueError(f"{name} = {value!r} is not a list literal") from None
        if isinstance(value, (list, tuple)):
            args = typing.get_args(annotation)
            inner = args[0] if args else Any
            items = [v if inner is Any or typing.get_origin(inner) is not None else _coerce(v, inner, name)
                     for v in value]
            return tuple(items) if origin is tuple else items
    raise ValueError(f"{name} = {value!r} is not a valid {getattr(annotation, '__name__', annotation)}")


def _apply(obj: Any, values: dict[str, Any], prefix: str) -> None:
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if key not in names:
            raise ValueError(f"unknown configuration key {full!r}; valid keys here: {', '.join(sorted(names))}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ValueError(f"{full} is a section: give a table, not {value!r}")
            _apply(current, value, f"{full}.")
        else:
            setattr(obj, key, _coerce(value, hints[key], full))


def parse_override(text: str) -> dict[str, Any]:
    """``"sac.lr_actor=1e-4"`` -> ``{"sac": {"lr_actor": "1e-4"}}`` (values are coerced by field type later)."""
    if "=" not in text:
        raise ValueError(f"override {text!r} must look like section.key=value")
    key, value = text.split("=", 1)
    out: dict[str, Any] = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value.strip()
    return out


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The tables of a TOML file; FileNotFoundError or ValueError naming the file (``what`` says what it is)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} {p} does not exist")
    with p.open("rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{p}: {exc}") from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """The defaults, then the TOML file, then each ``key=value`` override; validated."""
    cfg = Config()
    if path is not None:
        _apply(cfg, read_toml(path, "configuration file"), "")
    for text in overrides or []:
        _apply(cfg, parse_override(text), "")
    return cfg.validate()


def config_from_dict(data: dict[str, Any]) -> Config:
    """Rebuild a :class:`Config` saved with :meth:`Config.to_dict` (checkpoints)."""
    cfg = Config()
    _apply(cfg, data, "")
    return cfg.validate()


def describe_fields(obj: Any = None, prefix: str = "") -> list[str]:
    """``key = default  # doc`` lines for every field (``ace-hybrid train --help-config``)."""
    import inspect

    obj = Config() if obj is None else obj
    try:
        source = inspect.getsource(type(obj))
    except (OSError, TypeError):
        source = ""
    lines: list[str] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            lines.append(f"[{prefix}{f.name}]")
            lines += describe_fields(value, f"{prefix}{f.name}.")
            continue
        doc = _field_doc(source, f.name)
        lines.append(f"  {prefix}{f.name} = {value!r}" + (f"  # {doc}" if doc else ""))
    return lines


def _field_doc(source: str, name: str) -> str:
    """The string literal right after ``name: ... = ...`` in a class body."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(f"{name}:") and i + 1 < len(lines):
            nxt = lines[i + 1].strip()
            if nxt.startswith('"""'):
                doc = nxt.strip('"')
                j = i + 2
                while not nxt.endswith('"""') or nxt == '"""':
                    if j >= len(lines):
                        break
                    nxt = lines[j].strip()
                    doc += " " + nxt.strip('"')
                    j += 1
                return " ".join(doc.split())
    return ""
