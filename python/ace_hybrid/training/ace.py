"""What the LLM does inside a training run (ACE): the policy actor, the value critic and co-evolution.

The roles themselves live in :mod:`ace_hybrid.llm` and take only the values they need; this module wires them to a
:class:`~ace_hybrid.training.run.Run`. The training loop (:mod:`ace_hybrid.training.loop`) calls these hooks:

* :meth:`LLMInLoop.wants_snapshot` at each decision: whether to keep ``env.copy()`` of the state before the RL action
  (only while the actor may refine -- it is on and, with the LLM ranker, its call budget is not spent -- and, with
  ``ace.queue_overflow = "skip"``, the queue has room);
* :meth:`LLMInLoop.after_store` after each stored transition: a bad one (:func:`is_bad`) goes to the actor (or,
  first, to co-evolution's probe set); an accepted proposal goes to the LLM partition, and co-evolution fine-tunes when
  enough have been accepted;
* :meth:`LLMInLoop.after_episode` after each training episode: the value critic, on its schedule;
* :meth:`LLMInLoop.poll` at every environment step: commit the LLM work that has finished;
* :meth:`LLMInLoop.drain` at the end of the run, before the final checkpoint: wait for the work still queued.

The LLM works beside the loop (``ace.async_llm``, the default)
-----------------------------------------------------------------
An LLM call takes seconds on a CPU, an environment step milliseconds: the loop must not wait for it. Every refinement,
critic round and fine-tuning round is a job for the LLM worker (:mod:`ace_hybrid.training.llm_worker`): one thread
that owns the backend (so a LoRA adapter swap can never race with a scoring call), or ``llm.concurrency`` threads for
an OpenAI-compatible server (each with its own actor; fine-tuning is impossible there). The loop keeps acting and
updating (the worker thread runs at a lower priority, ``ace.worker_nice``, with its own torch threads,
``ace.worker_torch_threads``, so the learner gets the CPU first); what a job produces is committed by the loop's
thread at its next hook -- the refinement's line in ``refinements.jsonl``, the accepted transition into the LLM
partition, the critic's reward adjustments (:meth:`MixedReplayBuffer.update_rewards`), the counters -- so a
checkpoint (written by the same thread) is always consistent.

Queue policy. At most ``ace.queue_size`` bad transitions wait for the worker, each with the environment copy it will
be validated in (the worker owns the copy from then on and closes it). A bad transition that finds the queue full is
dropped by ``ace.queue_overflow``: "skip" (default) drops the new one -- and while the queue is full the loop makes no
environment copy at its decisions, the largest cost the LLM puts on the loop (``queue.decisions_not_copied``; a bad
transition met that way is counted as submitted and dropped, as the full queue would have refused it) --,
"drop_oldest" evicts the one that waited longest (fresher transitions, a copy at every decision); the count is
``llm/queue_dropped`` in the metrics and ``queue.dropped`` in the summary, the waiting ones ``llm/queue_depth``. A
bad transition whose turn comes after the budget ran out is not refined (``queue.budget_skipped``). Critic and
fine-tuning rounds are never dropped: at most one of each is pending, and a critic round that comes due while one is
pending is skipped (``queue.critic_rounds_skipped``; the next one sees the same trajectories). The budget is the same
as in the loop: it is spent when a call is made, by whichever thread.

Checkpoints while work is pending. A checkpoint holds exactly what has been committed: every accepted refinement
that is in the saved replay is in the saved counters, the saved co-evolution records and ``refinements.jsonl`` (whose
lines beyond the checkpoint are dropped on resume), and a critic round is saved wholly or not at all. Work still
pending at that moment -- waiting, running, or finished but not committed -- is not in it: a run resumed from that
checkpoint has lost it, and counts it (``queue.lost_on_resume``; the LLM calls it made stay spent). A fine-tuning
round in flight is saved as not begun (it runs again after a resume). At the end of a run the queue drains before
the final checkpoint, so nothing is lost there.

``ace.async_llm = false`` runs every job in the loop's thread when it is submitted: the loop waits for each call, and
a run is deterministic.

One budget (``ace.max_llm_calls``) caps the LLM calls of the actor and the critic: the critic has a reserved share
(``ace.critic_share``), the actor the rest, paced over the run (``ace.pace_budget``). Co-evolution's probe calls are a
measurement, counted apart (``probe_calls``) and never refused. Nothing here lets an LLM failure stop training:
backends raise :class:`~ace_hybrid.llm.backend.LLMError` only, and each role counts and skips it; any other exception
in a job is a bug and is raised in the loop.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from ace_hybrid.config import ACEConfig
from ace_hybrid.grid.text import LineEndpoints
from ace_hybrid.llm import make_backend
from ace_hybrid.llm.actor import ActorStats, PolicyActor, Refinement
from ace_hybrid.llm.coevolution import CoEvolution, ProbeProblem
from ace_hybrid.llm.critic import CriticReport, ValueCritic
from ace_hybrid.training.llm_worker import Done, InlineWorker, LLMWorker
from ace_hybrid.training.run import Pending, Run

__all__ = ["REFINEMENTS_LOG", "LLMInLoop", "attach_llm"]

REFINEMENTS_LOG = "refinements.jsonl"
"""One line per transition the LLM actor looked at (ACE runs)."""

log = logging.getLogger(__name__)

_QUEUE_COUNTERS = ("submitted", "dropped", "budget_skipped", "critic_rounds_skipped", "lost_on_resume",
                   "max_depth", "refined", "lag_steps", "decisions_not_copied")


def is_bad(p: Pending, ace: ACEConfig) -> bool:
    """A transition that really went wrong: an overload (max rho >= ``ace.bad_rho``) or a blackout inside it, or a
    reward below ``ace.r_bar`` (see :class:`~ace_hybrid.config.ACEConfig`)."""
    return p.blackout or p.max_rho >= ace.bad_rho or p.reward < ace.r_bar


def attach_llm(run: Run) -> None:
    """Give ``run`` its LLM part (``run.llm``) when ``llm.backend`` is not "none"."""
    if run.cfg.llm.backend != "none":
        run.llm = LLMInLoop(run)


@dataclass
class _Item:
    """A bad transition handed to the actor: what the worker needs, and what the loop logs and stores."""

    snapshot: Any
    """``env.copy()`` before the RL action; owned by the worker once submitted."""
    obs: Any
    """The decision's grid2op observation, bound to the snapshot's own simulator."""
    action: int
    q: np.ndarray
    x: np.ndarray
    """The stored (raw) features of the decision."""
    episode: int
    decision: int
    reward: float
    max_rho: float
    blackout: bool
    stored_at: int
    """Environment steps when the transition was stored (the lag is measured from here)."""


class _Refine:
    """Job: the actor refines one bad transition (on the worker); the loop logs and stores the result."""

    droppable = True

    def __init__(self, llm: LLMInLoop, item: _Item) -> None:
        self.llm, self.item = llm, item

    def run(self, slot: int) -> tuple[Refinement, ActorStats] | None:
        llm, item = self.llm, self.item
        actor = llm.actors[slot]
        if actor.ranker.uses_llm and not llm.budget_left():
            return None  # spent while it waited
        actor.stats = ActorStats()  # this refinement's counters, merged into the run's when it is committed
        # One call of the budget per LLM round; a ranker without the LLM (e.g. "sim") is not budgeted: a refinement
        # costs only its validation rollouts (about 0.2 s).
        ref = actor.refine(item.snapshot, item.obs, item.action, q_values=item.q, may_call=llm.may_call)
        return ref, actor.stats

    def discard(self) -> None:
        if self.item.snapshot is not None:
            self.item.snapshot.close()
            self.item.snapshot = None

    def commit(self, run: Run, done: Done) -> dict[str, float] | None:
        return self.llm._commit_refinement(run, self.item, done.value, done.seconds)


class _CriticRound:
    """Job: one value-critic round on the worker; its reward writes are applied by the loop when committed."""

    droppable = False

    def __init__(self, llm: LLMInLoop, replay: Any) -> None:
        self.llm, self.view = llm, _DeferredRewards(replay)

    def run(self, slot: int) -> tuple[CriticReport, dict[str, Any]]:
        critic = self.llm.critic
        report = critic.run(self.view, may_call=self.llm.may_call_critic)
        return report, critic.state_dict()

    def discard(self) -> None:
        pass

    def commit(self, run: Run, done: Done) -> dict[str, float]:
        return self.llm._commit_critic(run, done.value, self.view, done.seconds)


class _Finetune:
    """Job: one co-evolution round (probe, LoRA fine-tuning, probe) on the worker that owns the backend."""

    droppable = False

    def __init__(self, llm: LLMInLoop, replay: Any, env_steps: int) -> None:
        self.llm, self.replay, self.env_steps = llm, replay, env_steps

    def run(self, slot: int) -> dict[str, Any]:
        llm = self.llm
        return llm.coevo.finetune(self.replay, llm.actors[slot], llm.count_probe_call, self.env_steps, llm.lora)

    def discard(self) -> None:
        pass

    def commit(self, run: Run, done: Done) -> dict[str, float] | None:
        return self.llm._commit_finetune(run, done.value)


class _DeferredRewards:
    """The replay as a critic round on the worker sees it: reads go to the buffer (it is thread-safe), reward writes
    are kept for the loop to apply when it commits the round, so a checkpoint holds a round wholly or not at all."""

    def __init__(self, replay: Any) -> None:
        self.replay = replay
        self.writes: list[tuple[int, float, float]] = []
        """(handle, new reward, adjustment a) in the order the critic made them."""
        self._original: dict[int, float] = {}

    def rl_columns(self) -> dict[str, np.ndarray]:
        columns = self.replay.rl_columns()
        self._original = dict(zip(columns["index"].tolist(), columns["original_reward"].tolist()))
        return columns

    def get(self, index: np.ndarray) -> Any:
        return self.replay.get(index)

    def update_rewards(self, index: np.ndarray, reward: np.ndarray) -> int:
        handles, values = np.asarray(index, dtype=np.int64).tolist(), np.asarray(reward, dtype=np.float64).tolist()
        for h, r in zip(handles, values):
            self.writes.append((h, r, r - self._original[h]))
        return len(handles)


class LLMInLoop:
    """The LLM side of a run (built only when ``llm.backend`` is not "none"); see the module docstring."""

    def __init__(self, run: Run) -> None:
        cfg, ace = run.cfg, run.cfg.ace
        started = time.perf_counter()
        self.backend = make_backend(cfg.llm)
        self.load_seconds = time.perf_counter() - started
        self.ace = ace
        self.dir = run.dir
        # Read at call time: restore() replaces run.counters, and --resume may change the budget.
        self._progress = lambda: (run.counters.env_steps, run.cfg.train.total_env_steps)
        self._budget = threading.Lock()  # the worker spends calls while the loop reads the budget
        self.calls = 0
        self.role_calls = {"actor": 0, "critic": 0}
        self.probe_calls = 0
        self.seconds = 0.0
        threads = cfg.llm.concurrency if ace.async_llm else 1
        self.actors: list[PolicyActor] = []
        """One actor per worker thread (they share the backend); ``actor`` is the first."""
        if ace.actor:
            self.actors = [PolicyActor(
                self.backend, run.actions, LineEndpoints.from_env(run.env), reward_fn=run.step_reward,
                threshold=cfg.env.threshold, candidates=ace.candidates, max_rounds=ace.max_rounds,
                validation_steps=ace.validation_steps, min_improvement=ace.min_improvement,
                min_rho_drop=ace.min_rho_drop, ranker=ace.ranker, lac_alpha=ace.lac_alpha,
                show_effects=ace.show_effects, seed=cfg.train.seed + k) for k in range(threads)]
        self.actor = self.actors[0] if self.actors else None
        self.stats = ActorStats()
        """The actor's counters over the run, as committed (what checkpoints save)."""
        self.critic = None
        if ace.critic:
            n_line = int(run.env.n_line)
            self.critic = ValueCritic(self.backend, ace, describe_action=run.actions.describe,
                                      max_rho=lambda raw: np.asarray(raw)[:, :n_line].max(axis=1))
        self._critic_state = self.critic.state_dict() if self.critic is not None else None
        self.critic_totals = {"rounds": 0, "trajectories": 0, "calls": 0, "malformed": 0, "errors": 0,
                              "adjusted_steps": 0, "total_abs_adjustment": 0.0}
        self.coevo = None
        if ace.coevolve and self.actor is not None:
            self.coevo = CoEvolution(self.backend, every=ace.finetune_every, n_pairs=ace.finetune_pairs,
                                     adapter_dir=run.dir / "adapters", probe_size=ace.probe_size,
                                     orders=ace.sft_orders, seed=cfg.train.seed)
        if self.coevo is not None and self.coevo.disabled:
            log.warning("co-evolution is off for this run: %s", self.coevo.disabled)
        if threads > 1 and self.coevo is not None and self.coevo.disabled is None:
            raise ValueError(f"llm.concurrency = {threads} needs a backend that cannot fine-tune: co-evolution's "
                             "adapter swaps must not race with calls in flight (set ace.coevolve = false)")
        self.lora = {"rank": cfg.llm.lora_rank, "alpha": cfg.llm.lora_alpha, "lr": cfg.llm.lora_lr,
                     "epochs": cfg.llm.lora_epochs, "batch_size": cfg.llm.lora_batch_size}
        # Co-evolution is the loop's, except during a fine-tuning round, when the worker has it: meanwhile new
        # records and probes wait here, and checkpoints save the state from before the round.
        self._coevo_before: dict[str, Any] | None = None
        self._held_records: list[tuple[Refinement, int]] = []
        self._held_probes: list[ProbeProblem] = []
        self._critic_pending = False
        self.queue = dict.fromkeys(_QUEUE_COUNTERS, 0)
        """Counters of the queue over the run (saved with checkpoints; see :meth:`queue_summary`)."""
        self._not_copied = False
        """:meth:`wants_snapshot` declined the current decision's copy because the queue was full."""
        self.drain_seconds = 0.0
        self.log_lines = 0
        """Lines this run has committed to ``refinements.jsonl``."""
        if ace.async_llm:
            torch_threads, nice = ace.worker_torch_threads, ace.worker_nice
            self.worker: LLMWorker | InlineWorker = LLMWorker(
                ace.queue_size, ace.queue_overflow, threads=threads,
                init=lambda slot: _worker_thread_settings(torch_threads, nice))
        else:
            self.worker = InlineWorker()

    # ------------------------------------------------------------------ budget (any thread)

    def _limit(self, role: str) -> int:
        """Calls ``role`` ("actor" or "critic") may have made by now: the critic's share of the budget is reserved
        for it (``ace.critic_share``) and unpaced (it runs on a schedule); the actor's paced rest."""
        total = self.ace.max_llm_calls
        critic = int(total * self.ace.critic_share) if self.critic is not None else 0
        if role == "critic":
            return critic
        limit = total - critic
        if self.ace.pace_budget:
            t, steps = self._progress()
            limit = limit * (steps + 9 * min(t, steps)) // (10 * steps)  # limit * (0.1 + 0.9 t / T), in integers
        return limit

    def budget_left(self, role: str = "actor") -> bool:
        """Whether ``role`` may make a call now (see ``ace.max_llm_calls``, ``ace.critic_share``, ``ace.pace_budget``)."""
        with self._budget:
            return self.ace.max_llm_calls == 0 or self.role_calls[role] < self._limit(role)

    def may_call(self, role: str = "actor") -> bool:
        """Take one call from ``role``'s budget; False when it is spent."""
        with self._budget:
            if self.ace.max_llm_calls and self.role_calls[role] >= self._limit(role):
                return False
            self.role_calls[role] += 1
            self.calls += 1
            return True

    def may_call_critic(self) -> bool:
        return self.may_call("critic")

    def count_probe_call(self) -> bool:
        """Probe calls measure the LLM (2 x probe_size per fine-tuning round): counted apart and never refused, so
        this only counts and always allows (True)."""
        with self._budget:
            self.probe_calls += 1
        return True

    # ------------------------------------------------------------------ hooks (the loop's thread)

    def wants_snapshot(self) -> bool:
        """Whether to keep ``env.copy()`` of this decision: the actor may refine (:meth:`_actor_may_refine`), and --
        with ``queue_overflow = "skip"`` -- the worker's queue has room (a copy costs the loop 10-40 ms, and one made
        while the queue is full would be dropped; such decisions are counted in ``queue.decisions_not_copied``)."""
        self._not_copied = False
        if not self._actor_may_refine():
            return False
        if (self.ace.async_llm and self.ace.queue_overflow == "skip" and not self._wants_probe()
                and self.worker.waiting >= self.ace.queue_size):
            self.queue["decisions_not_copied"] += 1
            self._not_copied = True
            return False
        return True

    def _actor_may_refine(self) -> bool:
        """The actor is on and, when its ranker asks the LLM, its budget is not spent (a ranker without the LLM, e.g.
        "sim", is not budgeted: a refinement costs only its validation rollouts, about 0.2 s)."""
        return self.actor is not None and (not self.actor.ranker.uses_llm or self.budget_left())

    def _wants_probe(self) -> bool:
        """Co-evolution's probe set is not full yet: the next bad transition goes there, not to the queue."""
        return self.coevo is not None and len(self.coevo.probes) + len(self._held_probes) < self.coevo.probe_size

    def after_store(self, run: Run, p: Pending) -> dict[str, float] | None:
        """Hand a bad transition to the probe set or the actor; commit what has finished. Returns metrics to log when
        something was committed."""
        snapshot, p.snapshot = p.snapshot, None
        if snapshot is not None:
            self._hand_over(run, p, snapshot)
        elif self._not_copied and is_bad(p, self.ace) and self._actor_may_refine():
            # Not copied because the queue was full ("skip"): the queue would have refused it; counted as such.
            self.queue["submitted"] += 1
            self.queue["dropped"] += 1
        self._not_copied = False
        return self.poll(run)

    def _hand_over(self, run: Run, p: Pending, snapshot: Any) -> None:
        if not is_bad(p, self.ace) or not self._actor_may_refine():
            snapshot.close()
            return
        x = run.normalizer(p.obs)
        q = run.sac.q_values(x, run.actions.legal_mask(p.grid_obs))
        obs = p.grid_obs.copy(env=snapshot)  # obs.simulate then uses the snapshot's simulator, never the loop's
        if self._wants_probe():
            probe = ProbeProblem(snapshot, obs, p.action, q)
            if self._coevo_before is None:
                self.coevo.add_probe(probe)
            else:
                self._held_probes.append(probe)
            return
        item = _Item(snapshot, obs, p.action, q, p.obs, p.episode, p.decision, p.reward, p.max_rho, p.blackout,
                     run.counters.env_steps)
        self.queue["submitted"] += 1
        self.worker.submit(_Refine(self, item))  # dropped or not, the item is the worker's now

    def _queue_counts(self) -> dict[str, int]:
        """The queue's counters over the run (earlier processes of a resumed run included)."""
        return {**self.queue, "dropped": self.queue["dropped"] + self.worker.stats.dropped,
                "max_depth": max(self.queue["max_depth"], self.worker.stats.max_depth)}

    def after_episode(self, run: Run) -> dict[str, float] | None:
        """The value critic's round, when it is on and due; and commit what has finished."""
        c = run.counters
        if not (self.critic is None or c.env_steps < self.ace.critic_start or c.episodes % self.ace.critic_every
                or not self.budget_left("critic")):
            if self._critic_pending:
                self.queue["critic_rounds_skipped"] += 1
            else:
                self._critic_pending = True
                self.worker.submit(_CriticRound(self, run.replay))
        return self.poll(run)

    def poll(self, run: Run) -> dict[str, float] | None:
        """Commit the jobs that have finished (never waits); returns metrics to log when something was committed.

        Raises what a job raised other than an LLM failure (a bug), here in the loop's thread."""
        out: dict[str, float] = {}
        while True:
            finished = self.worker.collect()
            if not finished:
                return out or None
            for done in finished:
                if done.error is not None:
                    raise done.error
                out.update(done.job.commit(run, done) or {})

    def drain(self, run: Run) -> dict[str, float] | None:
        """Wait for every queued job and commit it (the end of a run, before its last checkpoint); stops early when
        ``run.stop_requested`` (Ctrl-C), leaving the rest pending."""
        started = time.perf_counter()
        out: dict[str, float] = {}
        while True:
            out.update(self.poll(run) or {})
            if self.worker.idle() or run.stop_requested:
                break
            self.worker.wait(0.2)
        self.drain_seconds += time.perf_counter() - started
        return out or None

    def close(self) -> None:
        """Stop the worker (jobs still waiting are discarded: their snapshots closed), then release the probe
        snapshots (grid2op environments) and the backend's threads."""
        self.worker.close()
        if self.coevo is not None:
            for p in [*self.coevo.probes, *self._held_probes]:
                p.snapshot.close()
            self.coevo.probes.clear()
            self._held_probes.clear()
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------------ commits (the loop's thread)

    def _commit_refinement(self, run: Run, item: _Item, value: tuple[Refinement, ActorStats] | None,
                           seconds: float) -> dict[str, float] | None:
        self.seconds += seconds
        if value is None:
            self.queue["budget_skipped"] += 1
            return None
        ref, stats = value
        _add_stats(self.stats, stats)
        self.queue["refined"] += 1
        self.queue["lag_steps"] += run.counters.env_steps - item.stored_at
        self._log_refinement(run, item, ref)
        if ref.accepted:
            r = ref.rollout
            handle = run.replay.add_llm(item.x, ref.action, r.reward, run.features(r.obs), r.blackout, r.ended,
                                        item.episode, item.decision, ref.improvement, True)
            if self.coevo is not None:
                if self._coevo_before is None:
                    self.coevo.record(ref, handle)
                else:
                    self._held_records.append((ref, handle))
                self._maybe_finetune(run)
        return self.metrics()

    def _maybe_finetune(self, run: Run) -> None:
        if self._coevo_before is None and self.coevo.due():
            c = self.coevo
            self._coevo_before = {"records": list(c.records), "since_last": c.since_last,
                                  "history": list(c.history), "adapter": c.adapter}
            self.worker.submit(_Finetune(self, run.replay, run.counters.env_steps))

    def _commit_finetune(self, run: Run, entry: dict[str, Any]) -> dict[str, float] | None:
        self._coevo_before = None
        run.logger.write(run.counters.env_steps, _coevo_metrics(entry))
        held_probes, self._held_probes = self._held_probes, []
        for probe in held_probes:
            self.coevo.add_probe(probe)
        held, self._held_records = self._held_records, []
        for ref, handle in held:
            self.coevo.record(ref, handle)
        self._maybe_finetune(run)
        return None

    def _commit_critic(self, run: Run, value: tuple[CriticReport, dict[str, Any]], view: _DeferredRewards,
                       seconds: float) -> dict[str, float]:
        report, state = value
        self._critic_pending = False
        self.seconds += seconds
        adjusted, total_abs = 0, 0.0
        for handle, reward, a in view.writes:  # one at a time, so that a stale handle is known exactly
            if run.replay.update_rewards(np.array([handle], dtype=np.int64), np.array([reward])):
                adjusted += 1
                total_abs += abs(a)
        self._critic_state = state
        t = self.critic_totals
        t["rounds"] += 1
        for key in ("trajectories", "calls", "malformed", "errors"):
            t[key] += getattr(report, key)
        t["adjusted_steps"] += adjusted
        t["total_abs_adjustment"] += total_abs
        return {**self.metrics(), **{f"critic/{k}": float(v) for k, v in t.items()}}

    def _log_refinement(self, run: Run, item: _Item, ref: Refinement) -> None:
        describe = run.actions.describe
        line = {"env_steps": run.counters.env_steps, "episode": item.episode, "decision": item.decision,
                "reward": item.reward, "max_rho": item.max_rho, "blackout": item.blackout, "ranker": self.ace.ranker,
                "rl_action": describe(item.action), "rounds": ref.rounds, "calls": ref.calls, "positions": ref.positions,
                "accepted": ref.accepted, "error": ref.error,
                "baseline_reward": ref.baseline.reward if ref.baseline is not None else None}
        if ref.accepted:
            line.update(action=describe(ref.action), r_hat=ref.rollout.reward, improvement=ref.improvement)
        with (run.dir / REFINEMENTS_LOG).open("a") as f:
            f.write(json.dumps(line) + "\n")
        self.log_lines += 1

    # ------------------------------------------------------------------ reporting and checkpoints

    def metrics(self) -> dict[str, float]:
        s, q = self.stats, self._queue_counts()
        return {"llm/calls": self.calls, "llm/probe_calls": self.probe_calls, "llm/bad_transitions": s.bad_transitions,
                "llm/accepted": s.accepted, "llm/rounds": s.rounds, "llm/acceptance_rate": s.acceptance_rate,
                "llm/first_choice_accepted": s.first_choice_accepted,
                "llm/errors": s.errors + self.critic_totals["errors"], "llm/seconds": self.seconds,
                "llm/queue_depth": self.worker.depth, "llm/queue_dropped": q["dropped"],
                "llm/lag_steps": q["lag_steps"] / max(1, q["refined"])}

    def queue_summary(self) -> dict[str, Any]:
        """The queue over the run: its policy, what went through it, what was dropped and why."""
        q = self._queue_counts()
        return {"async": self.ace.async_llm, "size": self.ace.queue_size, "overflow": self.ace.queue_overflow,
                "threads": self.worker.n_threads, "submitted": q["submitted"], "dropped": q["dropped"],
                "budget_skipped": q["budget_skipped"], "critic_rounds_skipped": q["critic_rounds_skipped"],
                "decisions_not_copied": q["decisions_not_copied"],
                "lost_on_resume": q["lost_on_resume"], "pending": self.worker.pending, "max_depth": q["max_depth"],
                "mean_lag_steps": q["lag_steps"] / max(1, q["refined"]), "drain_seconds": self.drain_seconds}

    def summary(self) -> dict[str, Any]:
        s = self.stats
        history = self.coevo.history if self.coevo is not None else []
        return {"calls": self.calls, "actor_calls": s.calls, "critic_calls": self.critic_totals["calls"],
                "probe_calls": self.probe_calls,
                "bad_transitions": s.bad_transitions, "accepted": s.accepted, "rounds": s.rounds,
                "first_choice_accepted": s.first_choice_accepted, "acceptance_rate": s.acceptance_rate,
                "errors": s.errors + self.critic_totals["errors"], "error_kinds": dict(s.error_kinds),
                "finetunes": len(history), "coevolution": list(history),
                "coevolution_off": self._coevolution_off(), "critic": dict(self.critic_totals),
                "seconds": self.seconds, "llm_seconds": s.llm_seconds, "validate_seconds": s.validate_seconds,
                "load_seconds": self.load_seconds, "backend": getattr(self.backend, "stats", {}),
                "queue": self.queue_summary()}

    def _coevolution_off(self) -> str | None:
        """Why co-evolution does not run (None when it does)."""
        if self.coevo is not None:
            return self.coevo.disabled
        return "ace.coevolve is false" if not self.ace.coevolve else "it needs the actor (ace.actor is false)"

    def state_dict(self) -> dict[str, Any]:
        """What has been committed (see "Checkpoints while work is pending" in the module docstring); the work
        pending now is counted in ``queue["pending"]``, and a run resumed from this state counts it as lost."""
        with self._budget:
            calls, role_calls, probe_calls = self.calls, dict(self.role_calls), self.probe_calls
        return {"calls": calls, "role_calls": role_calls, "probe_calls": probe_calls,
                "seconds": self.seconds,
                "actor": asdict(self.stats) if self.actor is not None else None,
                "critic": self._critic_state,
                "critic_totals": dict(self.critic_totals),
                "coevo": self._coevo_state(),
                "queue": {**self._queue_counts(), "pending": self.worker.pending}, "log_lines": self.log_lines}

    def _coevo_state(self) -> dict[str, Any] | None:
        if self.coevo is None:
            return None
        if self._coevo_before is None:
            return self.coevo.state_dict()
        # A fine-tuning round is in flight on the worker: the state from before it, plus what waits for it.
        state = dict(self._coevo_before)
        held = [CoEvolution.as_record(ref, handle) for ref, handle in self._held_records]
        state["records"] = [*state["records"], *held]
        state["since_last"] += len(held)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls, self.seconds = int(state["calls"]), float(state["seconds"])
        self.role_calls.update(state["role_calls"])
        self.probe_calls = int(state["probe_calls"])
        if self.actor is not None and state["actor"] is not None:
            self.stats = ActorStats(**state["actor"])
        if self.critic is not None and state["critic"] is not None:
            self.critic.load_state_dict(state["critic"])
            self._critic_state = self.critic.state_dict()
        self.critic_totals.update(state["critic_totals"])
        if self.coevo is not None and state["coevo"] is not None:
            self.coevo.load_state_dict(state["coevo"])
        queue = state.get("queue")  # older checkpoints have no queue
        if queue is not None:
            self.queue.update({k: queue[k] for k in _QUEUE_COUNTERS if k in queue})
            self.queue["lost_on_resume"] += int(queue.get("pending", 0))
        if state.get("log_lines") is not None:
            self.log_lines = int(state["log_lines"])
            _keep_lines(self.dir / REFINEMENTS_LOG, self.log_lines)


def _add_stats(total: ActorStats, delta: ActorStats) -> None:
    """``total += delta``, field by field (``error_kinds`` by kind)."""
    for f in fields(ActorStats):
        if f.name == "error_kinds":
            for kind, n in delta.error_kinds.items():
                total.error_kinds[kind] = total.error_kinds.get(kind, 0) + n
        else:
            setattr(total, f.name, getattr(total, f.name) + getattr(delta, f.name))


def _keep_lines(path: Any, n: int) -> None:
    """Keep the first ``n`` lines of a log (the ones a checkpoint counted); the rest were written after it."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    if len(lines) > n:
        path.write_text("".join(lines[:n]))


def _worker_thread_settings(torch_threads: int, nice: int) -> None:
    """Run in each worker thread: its own torch threads (thread-local with OpenMP builds: the loop's are not changed)
    and, on Linux, its own lower scheduling priority (nice is per thread there; elsewhere it would renice the whole
    process, so it is left alone)."""
    if torch_threads:
        import torch

        torch.set_num_threads(torch_threads)
    if nice and sys.platform.startswith("linux"):
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        except OSError as exc:
            log.warning("could not lower the LLM worker thread's priority (ace.worker_nice = %d): %s", nice, exc)


def _coevo_metrics(entry: dict[str, Any]) -> dict[str, float]:
    out = {"coevo/round": float(entry["round"]), "coevo/pairs": float(entry["pairs"]),
           "coevo/seconds": float(entry["seconds"])}
    for key in ("loss_first", "loss_last"):
        if key in entry:
            out[f"coevo/{key}"] = float(entry[key])
    for when in ("probe_before", "probe_after"):
        if when in entry:
            out[f"coevo/{when}_acceptance"] = float(entry[when]["acceptance"])
            out[f"coevo/{when}_top_position_share"] = float(entry[when]["top_position_share"])
    return out
