"""The one path of an environment step: the rollout worker, wherever it runs.

A :class:`RolloutWorker` steps training episodes: the agent decides in danger states (the policy, or the tutor
during the expert-guided warm start), the safe rule steps the grid otherwise, the reward accumulates until the next
decision, and each completed decision is one semi-MDP transition (:class:`~ace_hybrid.training.run.Pending` with its
next observation), handed to its sink. It returns what a call of :meth:`RolloutWorker.collect` made as a
:class:`TransitionBatch`. The same class runs

* in the learner's process (``train.workers = 0``, RLlib's local worker): on the run's own environment, normaliser
  and networks, one environment step per call, its sink storing each transition at once (so ACE's hooks run where
  they always have: :mod:`ace_hybrid.training.executors`, ``InlineExecutor``);
* in N local processes or Ray actors (``train.workers = N``): on its own environment (built by
  :meth:`RolloutWorker.prepare` as soon as the process starts, while the learner builds its run) and an acting-only
  policy (:class:`~ace_hybrid.sac.SACPolicy`: the actor alone) that the learner replaces every ``train.sync_every``
  updates (:class:`PolicyWeights`), ``worker_batch_steps`` steps per call, its transitions travelling in the batch.

Episodes and the step budget
----------------------------
Work comes from one :class:`Dealer` per session, shared by every worker: episode ids ``b, b + 1, ...`` (``b`` = 0
for a new run, ``counters.next_episode`` for a resumed one) handed out one at a time as workers start episodes, and
environment steps ``[counters.env_steps, train.total_env_steps)`` granted in chunks as workers ask for them. Episode
``k`` is always scenario ``env.train_scenarios[k % len]`` with seed ``env.train_seed_start + k`` (:func:`episode_of`)
and exploration draws seeded by ``(train.seed, k)`` (:func:`exploration_seed`), whichever worker plays it: the
training distribution is the episode sequence, not the number of workers. Ids are never reused, also across a resume,
so the LLM critic's grouping by id holds. The tutor decides at the steps whose index in the run is below
``train.tutor_steps``. No step past the next ``train.keep_best_at`` budget is granted until the learner has evaluated
there (:attr:`Budget.until`): the workers wait, so that evaluation sees exactly that many steps.

When the budget is spent, every episode still in progress ends where it stands: its pending decision is stored as a
truncated transition and the episode counts as finished (cut). That is one episode with one worker and up to N with
N; the run then holds exactly ``train.total_env_steps`` steps either way.

Determinism
-----------
An episode's transitions depend on its id, the policy that acts and the normaliser it acts with. Each worker folds
its own decisions into that normaliser before it acts (the inline worker's is the learner's own), so with one worker
a configuration gives the same transitions run after run, inline or in a process or on Ray, as long as the policy is
the same (``updates_per_decision = 0``: it never changes). With N >= 2 workers which worker plays an episode depends
on timing, and with it the normaliser's history; a fixed policy that reads no normaliser (the tutor) still plays the
same episodes, transition for transition.

What is lost when a run stops
-----------------------------
A worker's partial episode -- the steps since its last batch and the decision still waiting for its next
observation -- lives only in the worker. A checkpoint holds what the learner has received; a resumed run starts every
worker on a fresh episode, and what was in flight is dropped, as a kill drops it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ace_hybrid.config import Config
from ace_hybrid.grid.agents import make_tutor
from ace_hybrid.grid.catalog import ActionCatalog
from ace_hybrid.grid.env import make_config_env, reset_episode
from ace_hybrid.grid.reward import step_reward
from ace_hybrid.grid.rules import SafeRule, in_danger
from ace_hybrid.sampling import SamplingGenerator
from ace_hybrid.training.dealer import Budget, Dealer, Grant
from ace_hybrid.training.run import Acting, Pending, Run, build_acting

__all__ = ["PolicyWeights", "RolloutWorker", "TransitionBatch", "WorkerSpec",
           "episode_of", "exploration_seed", "next_hold", "plan_workers", "policy_weights", "session_budget"]

TIMERS = ("env", "reset", "act", "tutor", "llm", "safe_rule_simulate", "busy", "blocked")
"""Seconds a worker reports per batch: environment steps, resets, the policy's forward passes, the tutor's
simulations, ACE's environment copies, the safe rule's simulations, the whole batch ("busy"), and the time it was
blocked ("blocked": since its previous batch was made -- handing it over to a full queue, or waiting for the next
call, while the learner is behind -- and at a ``train.keep_best_at`` budget while the learner evaluates)."""
HOLD_POLL_SECONDS = 1.0
"""How long :meth:`RolloutWorker.collect` waits at a budget for steps before it returns an empty batch (so that a
worker process still reads its commands)."""


class PolicyWeights(NamedTuple):
    """What the learner sends its workers: the actor and the normaliser, with a version number."""

    version: int
    """The learner's update count when it sent them; every transition made with them carries it (policy lag)."""
    actor: dict[str, np.ndarray]
    """:meth:`DiscreteSAC.policy_state`."""
    normalizer: dict[str, Any]
    """:meth:`RunningNormalizer.state_dict`."""


class TransitionBatch(NamedTuple):
    """What one :meth:`RolloutWorker.collect` made."""

    worker: int
    transitions: list[Pending]
    """The completed transitions, in the order they completed (raw features: the learner's normaliser folds them
    in). Empty from the inline worker, whose sink has stored them already."""
    decisions: int
    """Transitions completed in this batch (stored by the learner from ``transitions``, or already by the sink)."""
    env_steps: int
    """Environment steps in this batch."""
    started: list[int]
    """Ids of the episodes this worker started during the batch."""
    finished: list[tuple[int, int, bool]]
    """(id, steps, blackout) of the episodes that ended during the batch (cut ones included)."""
    seconds: dict[str, float]
    """This batch's :data:`TIMERS`."""
    last: bool
    """The step budget is spent: no further batch of this worker has steps."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker builds itself from: sent, pickled, to a new process or a Ray actor."""

    index: int
    """k, in [0, workers): names the worker in batches, rates and errors."""
    config: Config
    action_indices: list[int] | None
    """The run's action set (catalog indices; None: the whole catalog), as the learner chose it."""


def episode_of(cfg: Config, k: int) -> tuple[int, int]:
    """(scenario, seed) of training episode ``k``: ``env.train_scenarios[k % len]``, ``env.train_seed_start + k``."""
    return cfg.env.train_scenarios[k % len(cfg.env.train_scenarios)], cfg.env.train_seed_start + k


def exploration_seed(seed: int, k: int) -> int:
    """Seed in [0, 2**63) of episode ``k``'s exploration draws: a child of ``numpy.random.SeedSequence(seed)``."""
    state = np.random.SeedSequence(int(seed), spawn_key=(int(k),)).generate_state(2, np.uint32)
    return ((int(state[0]) << 32) | int(state[1])) & ((1 << 63) - 1)


def session_budget(run: Run) -> Budget:
    """The rest of ``run``: its remaining steps, and episode ids from where its last session's stopped; steps are
    granted up to :func:`next_hold`."""
    c = run.counters
    return Budget(c.env_steps, run.cfg.train.total_env_steps, max(c.next_episode, c.episodes), next_hold(run))


def next_hold(run: Run) -> int:
    """Where the workers wait next: the first ``train.keep_best_at`` budget not kept yet (the learner evaluates
    there and keeps ``best-<steps>.pt``), else the step budget."""
    kept = {k["env_steps"] for k in run.counters.kept_best}
    return min([b for b in run.cfg.train.keep_best_at if b not in kept] + [run.cfg.train.total_env_steps])


def plan_workers(run: Run) -> list[WorkerSpec]:
    """One :class:`WorkerSpec` per worker for the rest of ``run`` (one, the inline worker, for ``train.workers =
    0``)."""
    indices = None if run.actions.is_full else [int(i) for i in run.actions.indices]
    return [WorkerSpec(index=k, config=run.cfg, action_indices=indices) for k in range(max(1, run.cfg.train.workers))]


def policy_weights(run: Run) -> PolicyWeights:
    """The run's current policy, as the learner sends it."""
    return PolicyWeights(run.counters.updates, run.sac.policy_state(), run.normalizer.state_dict())


class RolloutWorker:
    """Steps training episodes with the latest policy it was given; see the module docstring.

    Parameters
    ----------
    spec
        What to build.
    dealer
        Where episode ids and environment steps come from.
    acting
        The parts to act with (the inline worker: the run's own); None builds the worker's own from ``spec``, with
        an acting-only policy (:class:`~ace_hybrid.sac.SACPolicy`: the actor alone) on the CPU.
    prepared
        What :meth:`prepare` built from the configuration before the spec came (a worker process's grid and
        catalog); None builds them now.
    sink
        Takes each completed transition when it completes (the inline worker's stores it); None keeps them for the
        batch.
    wants_snapshot
        Asked at each of the policy's decisions whether to keep ``env.copy()`` of the state before the action (ACE's
        :meth:`~ace_hybrid.training.ace.LLMInLoop.wants_snapshot`); None: never.
    batch_steps
        Environment steps per :meth:`collect` (None: ``train.worker_batch_steps``).

    Call :meth:`set_policy` once before the first :meth:`collect`. Not thread-safe (one caller).
    """

    def __init__(self, spec: WorkerSpec, dealer: Any, *, acting: Acting | None = None, prepared: Any = None,
                 sink: Callable[[Pending], None] | None = None, wants_snapshot: Callable[[], bool] | None = None,
                 batch_steps: int | None = None) -> None:
        cfg = self.cfg = spec.config
        self.spec, self.dealer, self.wants_snapshot = spec, dealer, wants_snapshot
        self._owns_env = acting is None
        if acting is None:
            # On the CPU, whatever the learner's device.
            env, catalog = prepared if prepared is not None else self.prepare(cfg)
            acting = build_acting(cfg, env, spec.action_indices, catalog=catalog, device="cpu", policy_only=True)
        self.env, self.actions, self.features = acting.env, acting.actions, acting.features
        self.normalizer, self.sac = acting.normalizer, acting.sac
        self.safe_rule = SafeRule(self.env.action_space, threshold=cfg.env.threshold)
        self.tutor = make_tutor(self.env, cfg, self.actions) if cfg.train.tutor_steps else None
        self.sink = sink if sink is not None else self._keep
        self.batch_steps = int(batch_steps or cfg.train.worker_batch_steps)
        self.version = -1
        self._returned: float | None = None
        """When the last :meth:`collect` returned (the start of the time blocked before the next)."""
        self._explore: SamplingGenerator | None = None
        self._obs: Any = None
        self._pending: Pending | None = None
        self._episode, self._episode_steps, self._decision = -1, 0, 0
        # What the current collect() has made (see TransitionBatch).
        self._rows: list[Pending] = []
        self._completed = 0
        self._started: list[int] = []
        self._finished: list[tuple[int, int, bool]] = []
        self._seconds = dict.fromkeys(TIMERS, 0.0)

    @classmethod
    def prepare(cls, config: Config) -> tuple[Any, ActionCatalog]:
        """What a worker builds from the configuration alone (its environment section): the grid and its action
        catalog (cached on disk), and the imports they take -- most of a worker process's start-up. Executors call
        it as soon as a worker process starts, while the learner builds its run; the spec (the action set) and the
        policy come after. Every episode reseeds the grid, so the seed it is made with never reaches a
        transition."""
        env = make_config_env(config)
        return env, ActionCatalog.for_env(env)

    def set_policy(self, policy: PolicyWeights) -> None:
        """Act with ``policy`` from now on (its normaliser replaces this worker's)."""
        self.sac.load_policy_state(policy.actor)
        self.normalizer.load_state_dict(policy.normalizer)
        self.version = int(policy.version)

    def collect(self) -> TransitionBatch:
        """Run the environment steps the dealer grants (up to ``batch_steps``) and return what they made. When the
        budget is spent, the episode in progress ends there (cut) and the batch is the worker's last; every call
        after it returns an empty last batch."""
        if self.version < 0:
            raise RuntimeError("RolloutWorker.collect before set_policy: the worker has no policy to act with")
        started = time.perf_counter()
        self._rows, self._completed, self._started, self._finished = [], 0, [], []
        self._seconds = dict.fromkeys(TIMERS, 0.0)
        self._seconds["blocked"] = started - self._returned if self._returned is not None else 0.0
        simulate_before = self.safe_rule.simulate_seconds
        grant = self._grant()
        for i in range(grant.steps):
            if self._obs is None:
                self._start_episode()
            self._step(grant.first + i)
        if grant.last and self._obs is not None:
            self._end_episode(blackout=False)
        self._seconds["safe_rule_simulate"] = self.safe_rule.simulate_seconds - simulate_before
        self._returned = time.perf_counter()
        self._seconds["busy"] = self._returned - started
        return TransitionBatch(self.spec.index, self._rows, self._completed, grant.steps, self._started,
                               self._finished, self._seconds, grant.last)

    def _grant(self) -> Grant:
        """The dealer's next steps; at a budget where the learner evaluates, wait for them (counted as blocked) up to
        :data:`HOLD_POLL_SECONDS`."""
        t0 = time.perf_counter()
        grant = self.dealer.steps(self.batch_steps)
        held = not grant.steps and not grant.last
        while not grant.steps and not grant.last and time.perf_counter() - t0 < HOLD_POLL_SECONDS:
            time.sleep(0.005)
            grant = self.dealer.steps(self.batch_steps)
        if held:
            self._seconds["blocked"] += time.perf_counter() - t0
        return grant

    def close(self) -> None:
        """Drop the pending decision (its environment copy is closed) and, when the worker built it, its
        environment."""
        if self._pending is not None and self._pending.snapshot is not None:
            self._pending.snapshot.close()
        self._pending = None
        if self._owns_env:
            self.env.close()

    # ------------------------------------------------------------------ one episode, one step at a time

    def _start_episode(self) -> None:
        k = self.dealer.episode()
        scenario, seed = episode_of(self.cfg, k)
        t0 = time.perf_counter()
        self._obs = reset_episode(self.env, scenario, seed)
        self._seconds["reset"] += time.perf_counter() - t0
        self._explore = SamplingGenerator(exploration_seed(self.cfg.train.seed, k))
        self._episode, self._episode_steps, self._decision, self._pending = k, 0, 0, None
        self._started.append(k)

    def _step(self, index: int) -> None:
        """Step ``index`` of the run (its place in the step budget): act, step the grid, accumulate."""
        obs, cfg = self._obs, self.cfg
        if in_danger(obs, cfg.env.threshold):
            x = self.features(obs)
            if self._pending is not None:
                self._complete(x, done=False, truncated=False)
            self._pending = self._decide(obs, x, tutor=index < cfg.train.tutor_steps)
            grid_action = self.actions.action(self._pending.action)
        else:
            grid_action = self.safe_rule(obs)
        t0 = time.perf_counter()
        obs, _, done, info = self.env.step(grid_action)
        self._seconds["env"] += time.perf_counter() - t0
        self._obs = obs
        self._episode_steps += 1
        blackout = bool(done and info.get("exception"))
        p = self._pending
        if p is not None:
            p.reward += step_reward(cfg.reward, obs, blackout)
            p.max_rho = max(p.max_rho, float(np.max(obs.rho)))
            p.blackout |= blackout
        if done or (cfg.env.max_episode_steps and self._episode_steps >= cfg.env.max_episode_steps):
            self._end_episode(blackout)

    def _decide(self, obs: Any, x: np.ndarray, tutor: bool) -> Pending:
        """Fold ``x`` into the normaliser, then the tutor's choice (during the warm start) or the policy's; keep an
        environment copy for ACE when it asks for one."""
        self.normalizer.update(x)
        p = Pending(obs=x, action=0, reward=0.0, episode=self._episode, decision=self._decision,
                    version=self.version)
        self._decision += 1
        t0 = time.perf_counter()
        if tutor and self.tutor is not None:
            p.action, p.tutor = self.tutor.choose(obs), True
            self._seconds["tutor"] += time.perf_counter() - t0
            return p
        p.action = self.sac.act(self.normalizer(x), self.actions.legal_mask(obs), generator=self._explore)
        self._seconds["act"] += time.perf_counter() - t0
        if self.wants_snapshot is not None and self.wants_snapshot():
            t0 = time.perf_counter()
            p.snapshot, p.grid_obs = self.env.copy(), obs
            self._seconds["llm"] += time.perf_counter() - t0
        return p

    def _complete(self, next_x: np.ndarray, *, done: bool, truncated: bool) -> None:
        p, self._pending = self._pending, None
        p.next_obs, p.done, p.truncated = next_x, done, truncated
        self._completed += 1
        self.sink(p)

    def _end_episode(self, blackout: bool) -> None:
        """The episode ends at the current observation: by a blackout (terminal), its scenario's end,
        ``env.max_episode_steps`` or the step budget (truncated)."""
        if self._pending is not None:
            self._complete(self.features(self._obs), done=blackout, truncated=not blackout)
        self._finished.append((self._episode, self._episode_steps, blackout))
        self._obs = None

    def _keep(self, p: Pending) -> None:
        self._rows.append(p)
