"""Sections ``[train]`` and ``[log]``: the training loop's budget and rhythm, its workers, and logging."""

from __future__ import annotations

from dataclasses import dataclass, field

from ace_hybrid.config.checks import check

__all__ = ["EXECUTORS", "MAX_WORKERS", "LogConfig", "TrainConfig"]

EXECUTORS = ("local", "ray")
"""Valid values of :attr:`TrainConfig.executor`."""

MAX_WORKERS = 64
"""Largest :attr:`TrainConfig.workers` (one process and one environment each)."""


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
    eval_at_start: bool = False
    """Also evaluate before the first step, so that best.pt can be the policy the run started from (the junior of
    train.init_policy) when no later evaluation beats it, and the learning curve has its starting point."""
    checkpoint_every: int = 2_000
    """Write a checkpoint every this many environment steps (and at the end)."""
    keep_best_at: list[int] = field(default_factory=list)
    """Budgets (environment steps): at each, evaluate on env.eval_pairs exactly then and copy best.pt as it is to
    best-<steps>.pt, as if training had stopped there (one training tested at several budgets; rollout workers wait
    there for the evaluation)."""
    tutor_steps: int = 0
    """Expert-guided warm start: for the run's first this many environment steps (over all workers) the greedy expert
    (simulating tutor_budget of the policy's actions) decides instead of the policy; its decisions go to the replay's
    validated partition (I_v = 1, beside the LLM's refinements), where the imitation loss and the critic learn
    from them."""
    init_policy: str = ""
    """A junior file (ace-hybrid junior fit): a new run's actor and normaliser start as the policy cloned from the
    tutor's decisions, over the same action set; its critics start fresh. "" (default): a fresh actor."""
    tutor_data: str = ""
    """A collection of the tutor's decisions (ace-hybrid junior collect): a new run starts with all of them in the
    replay's validated partition (I_v = 1, as the warm start's), for the critic and the imitation term; the
    collection must be of this run's grid, weeks and action set. Its features fold into the normaliser unless
    train.init_policy gives one. "" (default): none."""
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
    """With workers, a rate limiter (Reverb's SampleToInsertRatio, ace_hybrid.training.limiter): the learner samples
    this many transitions (sac.batch_size per update) per stored transition, whatever the number of workers; behind,
    it updates while the workers wait; ahead, it waits for them. 0: updates_per_decision per stored decision, each
    batch in turn. With workers = 0 it must be 0 or updates_per_decision x sac.batch_size (what the loop samples)."""
    samples_per_insert_tolerance: float = 0.1
    """How far (a fraction of the samples due) the learner may fall behind samples_per_insert before workers wait."""

    def validate(self) -> None:
        check(self.total_env_steps > 0, "train.total_env_steps", self.total_env_steps, "must be > 0")
        check(self.learning_starts >= 1, "train.learning_starts", self.learning_starts, "must be >= 1")
        check(self.updates_per_decision >= 0, "train.updates_per_decision", self.updates_per_decision,
               "must be >= 0")
        check(self.eval_every >= 0, "train.eval_every", self.eval_every, "must be >= 0")
        check(self.checkpoint_every > 0, "train.checkpoint_every", self.checkpoint_every, "must be > 0")
        check(len(set(self.keep_best_at)) == len(self.keep_best_at) and all(
            0 < b <= self.total_env_steps for b in self.keep_best_at), "train.keep_best_at", self.keep_best_at,
            f"must be distinct steps in [1, train.total_env_steps = {self.total_env_steps}]")
        check(self.tutor_steps >= 0, "train.tutor_steps", self.tutor_steps, "must be >= 0")
        check(2 <= self.tutor_budget <= 10_000, "train.tutor_budget", self.tutor_budget, "must be in [2, 10000]")
        check(0.0 <= self.imitation_weight <= 1000.0, "train.imitation_weight", self.imitation_weight,
               "must be in [0, 1000]")
        check(self.torch_threads >= 0, "train.torch_threads", self.torch_threads, "must be >= 0")
        check(0 <= self.workers <= MAX_WORKERS, "train.workers", self.workers, f"must be in [0, {MAX_WORKERS}]")
        check(self.sync_every >= 1, "train.sync_every", self.sync_every, "must be >= 1")
        check(self.executor in EXECUTORS, "train.executor", self.executor, f"must be one of {EXECUTORS}")
        check(self.executor == "local" or self.workers >= 1, "train.executor", self.executor,
               "'ray' runs rollout workers: set train.workers >= 1")
        check(isinstance(self.ray_address, str), "train.ray_address", self.ray_address,
               "must be a string ('' for a local Ray)")
        check(not self.ray_address or self.executor == "ray", "train.ray_address", self.ray_address,
               "is read only with train.executor = 'ray'")
        check(1 <= self.worker_batch_steps <= 100_000, "train.worker_batch_steps", self.worker_batch_steps,
               "must be in [1, 100000]")
        check(self.samples_per_insert >= 0, "train.samples_per_insert", self.samples_per_insert, "must be >= 0")
        check(0 <= self.samples_per_insert_tolerance <= 1, "train.samples_per_insert_tolerance",
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
        check(self.log_every > 0, "log.log_every", self.log_every, "must be > 0")
