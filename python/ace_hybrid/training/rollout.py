"""Rollout workers: environments stepped with a copy of the policy, beside the learner (``train.workers`` >= 1).

A :class:`RolloutWorker` is what the in-process loop (:func:`ace_hybrid.training.loop.train_episode`) does minus the
learning: it builds its own Grid2Op environment (lightsim2grid backend), features, action set, safe rule, tutor and
an acting-only :class:`~ace_hybrid.sac.DiscreteSAC`, runs training episodes -- the agent decides in danger states,
the safe rule steps the grid otherwise, one semi-MDP transition per decision -- and returns what it made in
batches (:class:`TransitionBatch`, every ``train.worker_batch_steps`` environment steps): the completed transitions,
the episodes it started and finished, its step count and its timings. The learner stores them, updates, and sends
back :class:`PolicyWeights` now and then (``train.sync_every``). The executors
(:mod:`ace_hybrid.training.executors`) run the same class as a local process or as a Ray actor.

Seeds and episodes
------------------
Worker ``k`` (0-based) of ``N``, in a session whose first episode id is ``b`` (0 for a new run,
``counters.next_episode`` for a resumed one):

* its ``j``-th episode has the id ``e = b + j N + k``, scenario ``env.train_scenarios[e % len]`` and seed
  ``env.train_seed_start + e``: the (scenario, seed) pairs the in-process loop would play, dealt round-robin (with
  one worker, exactly its sequence). Ids are never reused, also across a resume, so the LLM critic's grouping by
  id holds;
* its exploration generator is seeded from ``SeedSequence(train.seed, spawn_key=(k, b))`` and its environment from
  ``SeedSequence(env.env_seed, spawn_key=(k, b))`` (:func:`worker_seed`): independent streams per worker, unchanged
  by the number of workers, fresh for a resumed session (whose generators were never saved).

So the same configuration gives each worker the same transitions, run after run and local or on Ray, as long as its
policy is the same: with ``updates_per_decision = 0`` it never changes (nothing is sent), and each worker folds its
own decisions into its normaliser before it acts, as the in-process loop does. Once the learner updates, when a
new policy reaches a worker depends on timing.

Budgets
-------
The session's remaining environment steps are split evenly, the first ``remaining % N`` workers taking one more;
a worker stops at its share (its last transition is then truncated, as the in-process loop's is at the run's
budget), so ``counters.env_steps`` ends at exactly ``train.total_env_steps``. The tutor's warm start
(``train.tutor_steps``) is split the same way: worker ``k`` lets the greedy expert decide during its first share of
steps, and marks those transitions (``tutor``) for the replay's validated partition.

What is lost when a run stops
-----------------------------
A worker's partial episode -- the steps since its last batch and the decision still waiting for its next
observation -- lives only in its process. A checkpoint holds what the learner has received; a resumed run starts
every worker on a fresh episode, and what was in flight is dropped, as a kill drops the in-process loop's episode.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ace_hybrid.config import Config
from ace_hybrid.grid.action_set import ActionSet
from ace_hybrid.grid.agents import make_tutor
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.env import make_env, reset_episode
from ace_hybrid.grid.features import ObservationFeatures, RunningNormalizer
from ace_hybrid.grid.reward import step_reward
from ace_hybrid.grid.rules import SafeRule, in_danger
from ace_hybrid.sac import DiscreteSAC
from ace_hybrid.training.run import Pending, Run

__all__ = ["PolicyWeights", "RolloutWorker", "TransitionBatch", "WorkerSpec", "plan_workers", "policy_weights",
           "share", "worker_seed"]

TIMERS = ("env", "reset", "act", "tutor", "safe_rule_simulate", "busy")
"""Seconds a worker reports per batch: environment steps, resets, the policy's forward passes, the tutor's
simulations, the safe rule's simulations, and the whole batch ("busy": the rest of its wall time, the worker waited
to hand a batch over or for its next call)."""


class PolicyWeights(NamedTuple):
    """What the learner sends its workers: the actor and the normaliser, with a version number."""

    version: int
    """The learner's update count when it sent them; every transition made with them carries it (policy lag)."""
    actor: dict[str, np.ndarray]
    """:meth:`DiscreteSAC.policy_state`."""
    normalizer: dict[str, Any]
    """:meth:`RunningNormalizer.state_dict`."""


class TransitionBatch(NamedTuple):
    """What a worker sends the learner every ``train.worker_batch_steps`` environment steps; columns have one row
    per completed transition (n rows), in the order they completed."""

    worker: int
    obs: np.ndarray
    """(n, D) float32: raw features of each decision (the learner's normaliser folds them in)."""
    action: np.ndarray
    """(n,) int64, indices in the run's action set."""
    reward: np.ndarray
    """(n,) float64, accumulated over the transition's environment steps."""
    next_obs: np.ndarray
    """(n, D) float32."""
    done: np.ndarray
    """(n,) bool: the grid collapsed (terminal)."""
    truncated: np.ndarray
    """(n,) bool: the episode was cut (its scenario's end, env.max_episode_steps, the worker's budget)."""
    episode: np.ndarray
    """(n,) int64 episode ids (see the module docstring)."""
    decision: np.ndarray
    """(n,) int64: index of the decision within its episode."""
    tutor: np.ndarray
    """(n,) bool: the tutor decided (the validated partition), not the policy."""
    version: np.ndarray
    """(n,) int64: version of the policy that acted."""
    env_steps: int
    """Environment steps in this batch."""
    started: list[int]
    """Ids of the episodes this worker started during the batch."""
    finished: list[tuple[int, int, bool]]
    """(id, steps, blackout) of the episodes that ended during the batch (cut ones included)."""
    seconds: dict[str, float]
    """This batch's :data:`TIMERS`."""
    last: bool
    """The worker's budget is spent: no further batch has steps."""

    @property
    def decisions(self) -> int:
        return int(self.action.shape[0])


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker builds itself from: sent, pickled, to a new process or a Ray actor."""

    index: int
    """k, in [0, workers)."""
    workers: int
    """N: ids are dealt round-robin over the workers."""
    config: Config
    action_indices: list[int] | None
    """The run's action set (catalog indices; None: the whole catalog), as the learner chose it."""
    first_episode: int
    """b: the session's first episode id."""
    env_steps: int
    """This worker's share of the session's environment steps."""
    tutor_steps: int
    """This worker's share of the remaining tutor warm start (its first this many steps)."""
    seed: int
    """Seed of the exploration generator (:func:`worker_seed`)."""
    env_seed: int
    """Seed of the environment's generators."""


def share(total: int, parts: int, k: int) -> int:
    """Part ``k`` of ``total`` split evenly over ``parts``, the first ``total % parts`` parts one larger."""
    if parts < 1 or not 0 <= k < parts:
        raise ValueError(f"part {k} out of range [0, {parts})")
    return max(0, total) // parts + (k < max(0, total) % parts)


def worker_seed(seed: int, k: int, first_episode: int, bits: int = 63) -> int:
    """A seed in [0, 2**bits) for worker ``k`` of a session starting at episode ``first_episode``: a child of
    ``numpy.random.SeedSequence(seed)``, so streams of different workers, sessions and base seeds do not overlap
    (``seed + 1000 k`` would give run 1000's first worker run 0's second). 63 bits for the exploration generator,
    31 for Grid2Op, whose seeds are int32."""
    if not 1 <= bits <= 63:
        raise ValueError(f"bits = {bits} out of range [1, 63]")
    state = np.random.SeedSequence(int(seed), spawn_key=(int(k), int(first_episode))).generate_state(2, np.uint32)
    return ((int(state[0]) << 32) | int(state[1])) & ((1 << bits) - 1)


def plan_workers(run: Run) -> list[WorkerSpec]:
    """One :class:`WorkerSpec` per worker for the rest of ``run`` (see the module docstring)."""
    cfg, c = run.cfg, run.counters
    n = cfg.train.workers
    remaining = cfg.train.total_env_steps - c.env_steps
    tutor_left = cfg.train.tutor_steps - c.env_steps
    first = max(c.next_episode, c.episodes)
    indices = None if run.actions.is_full else [int(i) for i in run.actions.indices]
    return [WorkerSpec(index=k, workers=n, config=cfg, action_indices=indices, first_episode=first,
                       env_steps=share(remaining, n, k), tutor_steps=share(tutor_left, n, k),
                       seed=worker_seed(cfg.train.seed, k, first),
                       env_seed=worker_seed(cfg.env.env_seed, k, first, bits=31))
            for k in range(n)]


def policy_weights(run: Run) -> PolicyWeights:
    """The run's current policy, as the learner sends it."""
    return PolicyWeights(run.counters.updates, run.sac.policy_state(), run.normalizer.state_dict())


class RolloutWorker:
    """Steps its own environment with the latest policy it was given; see the module docstring.

    Call :meth:`set_policy` once before the first :meth:`collect`. Not thread-safe (one caller).
    """

    def __init__(self, spec: WorkerSpec) -> None:
        cfg = spec.config
        if not 0 <= spec.index < spec.workers:
            raise ValueError(f"worker index {spec.index} out of range [0, {spec.workers})")
        self.spec, self.cfg = spec, cfg
        self.env = make_env(cfg.env.name, seed=spec.env_seed)
        self.actions = ActionSet(ActionCatalog.for_env(self.env), spec.action_indices)
        self.features = ObservationFeatures(self.env)
        self.normalizer = RunningNormalizer(self.features.dim)
        self.safe_rule = SafeRule(self.env.action_space, threshold=cfg.env.threshold)
        self.tutor = make_tutor(self.env, cfg, self.actions) if spec.tutor_steps else None
        # Workers act on the CPU, whatever the learner's device: N processes must not each claim a GPU.
        self.sac = DiscreteSAC(self.features.dim, len(self.actions), dataclasses.replace(cfg.sac, device="cpu"),
                               action_features=self.actions.features(), seed=spec.seed)
        self.version = -1
        self.steps = 0
        """Environment steps this worker has made (this session)."""
        self._episodes = 0
        self._obs: Any = None
        self._pending: Pending | None = None
        self._episode_steps = 0
        self._episode = -1
        self._decision = 0
        # What the current collect() has made (see TransitionBatch).
        self._rows: list[tuple[Pending, np.ndarray, bool, bool]] = []
        self._started: list[int] = []
        self._finished: list[tuple[int, int, bool]] = []
        self._seconds = dict.fromkeys(TIMERS, 0.0)

    def set_policy(self, policy: PolicyWeights) -> None:
        """Act with ``policy`` from now on (its normaliser replaces this worker's)."""
        self.sac.load_policy_state(policy.actor)
        self.normalizer.load_state_dict(policy.normalizer)
        self.version = int(policy.version)

    def collect(self) -> TransitionBatch:
        """Run up to ``train.worker_batch_steps`` environment steps (fewer when the budget ends) and return what
        they completed. Once the budget is spent, every call returns an empty batch with ``last`` set."""
        if self.version < 0:
            raise RuntimeError("RolloutWorker.collect before set_policy: the worker has no policy to act with")
        started = time.perf_counter()
        self._rows, self._started, self._finished = [], [], []
        self._seconds = dict.fromkeys(TIMERS, 0.0)
        simulate_before = self.safe_rule.simulate_seconds
        n = min(self.cfg.train.worker_batch_steps, self.spec.env_steps - self.steps)
        for _ in range(max(0, n)):
            if self._obs is None:
                self._start_episode()
            self._step()
        self._seconds["safe_rule_simulate"] = self.safe_rule.simulate_seconds - simulate_before
        self._seconds["busy"] = time.perf_counter() - started
        return self._batch(max(0, n))

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------ one episode, one step at a time

    def _start_episode(self) -> None:
        spec, env_cfg = self.spec, self.cfg.env
        e = spec.first_episode + self._episodes * spec.workers + spec.index
        self._episodes += 1
        t0 = time.perf_counter()
        self._obs = reset_episode(self.env, env_cfg.train_scenarios[e % len(env_cfg.train_scenarios)],
                                  env_cfg.train_seed_start + e)
        self._seconds["reset"] += time.perf_counter() - t0
        self._episode, self._episode_steps, self._decision, self._pending = e, 0, 0, None
        self._started.append(e)

    def _step(self) -> None:
        """One environment step of the current episode (the body of the in-process loop, without learning)."""
        obs, cfg = self._obs, self.cfg
        if in_danger(obs, cfg.env.threshold):
            x = self.features(obs)
            if self._pending is not None:
                self._complete(x, done=False, truncated=False)
            self._pending = self._decide(obs, x)
            grid_action = self.actions.action(self._pending.action)
        else:
            grid_action = self.safe_rule(obs)
        t0 = time.perf_counter()
        obs, _, done, info = self.env.step(grid_action)
        self._seconds["env"] += time.perf_counter() - t0
        self._obs = obs
        self.steps += 1
        self._episode_steps += 1
        blackout = bool(done and info.get("exception"))
        if self._pending is not None:
            self._pending.reward += step_reward(cfg.reward, obs, blackout)
        cut = cfg.env.max_episode_steps and self._episode_steps >= cfg.env.max_episode_steps
        if done or cut or self.steps >= self.spec.env_steps:
            if self._pending is not None:
                self._complete(self.features(obs), done=blackout, truncated=not blackout)
            self._finished.append((self._episode, self._episode_steps, blackout))
            self._obs = None

    def _decide(self, obs: Any, x: np.ndarray) -> Pending:
        """Fold ``x`` into the normaliser, then the tutor's choice (its share of the warm start) or the policy's."""
        self.normalizer.update(x)
        decision, self._decision = self._decision, self._decision + 1
        if self.tutor is not None and self.steps < self.spec.tutor_steps:
            t0 = time.perf_counter()
            action = self.tutor.choose(obs)
            self._seconds["tutor"] += time.perf_counter() - t0
            return Pending(obs=x, action=action, reward=0.0, episode=self._episode, decision=decision, tutor=True,
                           version=self.version)
        t0 = time.perf_counter()
        action = self.sac.act(self.normalizer(x), self.actions.legal_mask(obs))
        self._seconds["act"] += time.perf_counter() - t0
        return Pending(obs=x, action=action, reward=0.0, episode=self._episode, decision=decision,
                       version=self.version)

    def _complete(self, next_x: np.ndarray, *, done: bool, truncated: bool) -> None:
        self._rows.append((self._pending, next_x, done, truncated))
        self._pending = None

    def _batch(self, steps: int) -> TransitionBatch:
        rows, dim = self._rows, self.features.dim
        return TransitionBatch(
            worker=self.spec.index,
            obs=np.array([p.obs for p, *_ in rows], np.float32).reshape(len(rows), dim),
            action=np.array([p.action for p, *_ in rows], np.int64),
            reward=np.array([p.reward for p, *_ in rows], np.float64),
            next_obs=np.array([x for _, x, *_ in rows], np.float32).reshape(len(rows), dim),
            done=np.array([r[2] for r in rows], bool), truncated=np.array([r[3] for r in rows], bool),
            episode=np.array([p.episode for p, *_ in rows], np.int64),
            decision=np.array([p.decision for p, *_ in rows], np.int64),
            tutor=np.array([p.tutor for p, *_ in rows], bool),
            version=np.array([p.version for p, *_ in rows], np.int64), env_steps=steps, started=self._started,
            finished=self._finished, seconds=self._seconds, last=self.steps >= self.spec.env_steps)
