"""What the LLM does inside a training run (ACE): the policy actor, the value critic and co-evolution.

The roles themselves live in :mod:`ace_hybrid.llm` and take only the values they need; :class:`LLMInLoop` wires them
to a :class:`~ace_hybrid.training.run.Run` through a few collaborators, one concern each:

* :mod:`~ace_hybrid.training.llm_roles`: the actors and the critic built for the run, the critic's schedule and totals;
* :mod:`~ace_hybrid.training.llm_budget`: the call budget (``ace.max_llm_calls``) the actor and the critic share;
* :mod:`~ace_hybrid.training.llm_jobs`: the LLM's work as jobs for the LLM worker, the queue and its policy;
* :mod:`~ace_hybrid.training.llm_coevolution`: co-evolution while a fine-tuning round is with the worker;
* :mod:`~ace_hybrid.training.refinement_log`: ``refinements.jsonl``.

The training loop (:mod:`ace_hybrid.training.loop`) calls these hooks, all in its own thread:

* :meth:`LLMInLoop.wants_snapshot` at each decision: whether to keep ``env.copy()`` of the state before the RL action
  (only while the actor may refine -- it is on and, with the LLM ranker, its call budget is not spent -- and, with
  ``ace.queue_overflow = "skip"``, the queue has room);
* :meth:`LLMInLoop.after_store` after each stored transition: a bad one (:func:`is_bad`) goes to the actor (or,
  first, to co-evolution's probe set); an accepted proposal goes to the validated partition, and co-evolution
  fine-tunes when enough have been accepted;
* :meth:`LLMInLoop.after_episode` after each training episode: the value critic, on its schedule;
* :meth:`LLMInLoop.poll` at every environment step: commit the LLM work that has finished;
* :meth:`LLMInLoop.drain` at the end of the run, before the final checkpoint: wait for the work still queued.

Checkpoints while work is pending. A checkpoint holds exactly what has been committed: every accepted refinement
that is in the saved replay is in the saved counters, the saved co-evolution records and ``refinements.jsonl`` (whose
lines beyond the checkpoint are dropped on resume), and a critic round is saved wholly or not at all. Work still
pending at that moment -- waiting, running, or finished but not committed -- is not in it: a run resumed from that
checkpoint has lost it, and counts it (``queue.lost_on_resume``; the LLM calls it made stay spent). A fine-tuning
round in flight is saved as not begun (it runs again after a resume). At the end of a run the queue drains before
the final checkpoint, so nothing is lost there.

Nothing here lets an LLM failure stop training: backends raise :class:`~ace_hybrid.llm.backend.LLMError` only, and
each role counts and skips it; any other exception in a job is a bug and is raised in the loop.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

from ace_hybrid.config import ACEConfig
from ace_hybrid.llm import make_backend
from ace_hybrid.llm.actor import ActorStats, PolicyActor, Refinement
from ace_hybrid.llm.coevolution import ProbeProblem
from ace_hybrid.llm.critic import CriticReport
from ace_hybrid.training.llm_budget import CallBudget
from ace_hybrid.training.llm_coevolution import CoEvolutionInLoop, coevolution_metrics
from ace_hybrid.training.llm_jobs import (QUEUE_COUNTERS, CriticRound, Finetune, Refine, RefineItem, make_worker,
                                          queue_counts)
from ace_hybrid.training.llm_roles import CriticInLoop, add_stats, make_actors
from ace_hybrid.training.refinement_log import REFINEMENTS_LOG, RefinementLog, refinement_line
from ace_hybrid.training.run import Pending, Run

__all__ = ["REFINEMENTS_LOG", "LLMInLoop", "attach_llm", "is_bad"]

log = logging.getLogger(__name__)


def is_bad(p: Pending, ace: ACEConfig) -> bool:
    """A transition that really went wrong: an overload (max rho >= ``ace.bad_rho``) or a blackout inside it, or a
    reward below ``ace.r_bar`` (see :class:`~ace_hybrid.config.ACEConfig`)."""
    return p.blackout or p.max_rho >= ace.bad_rho or p.reward < ace.r_bar


def attach_llm(run: Run) -> None:
    """Give ``run`` its LLM part (``run.llm``) when ``llm.backend`` is not "none"."""
    if run.cfg.llm.backend != "none":
        run.llm = LLMInLoop(run)


class LLMInLoop:
    """The LLM side of a run (built only when ``llm.backend`` is not "none"); see the module docstring."""

    def __init__(self, run: Run) -> None:
        cfg, ace = run.cfg, run.cfg.ace
        started = time.perf_counter()
        self.backend = make_backend(cfg.llm)
        self.load_seconds = time.perf_counter() - started
        self.ace = ace
        self.seconds = 0.0
        """Wall-clock seconds of the jobs committed."""
        threads = cfg.llm.concurrency if ace.async_llm else 1
        self.actors: list[PolicyActor] = make_actors(run, self.backend, threads) if ace.actor else []
        """One actor per worker thread (they share the backend); ``actor`` is the first."""
        self.actor = self.actors[0] if self.actors else None
        self.stats = ActorStats()
        """The actor's counters over the run, as committed (what checkpoints save)."""
        self.critic = CriticInLoop(run, self.backend)
        # Read at call time: restore() replaces run.counters, and --resume may change the budget.
        self.budget = CallBudget(ace, lambda: (run.counters.env_steps, run.cfg.train.total_env_steps),
                                 critic_on=self.critic.core is not None)
        self.coevo = None
        if ace.coevolve and self.actor is not None and self.actor.ranker.uses_llm:
            self.coevo = CoEvolutionInLoop(self.backend, ace, run.dir / "adapters", cfg.train.seed)
            if self.coevo.disabled:
                log.warning("co-evolution is off for this run: %s", self.coevo.disabled)
            elif threads > 1:
                raise ValueError(f"llm.concurrency = {threads} needs a backend that cannot fine-tune: co-evolution's "
                                 "adapter swaps must not race with calls in flight (set ace.coevolve = false)")
        self.lora = {"rank": cfg.llm.lora_rank, "alpha": cfg.llm.lora_alpha, "lr": cfg.llm.lora_lr,
                     "epochs": cfg.llm.lora_epochs, "batch_size": cfg.llm.lora_batch_size}
        self.refinements = RefinementLog(run.dir)
        self.queue = dict.fromkeys(QUEUE_COUNTERS, 0)
        """Counters of the queue over the run (saved with checkpoints; see :meth:`queue_summary`)."""
        self._not_copied = False
        """:meth:`wants_snapshot` declined the current decision's copy because the queue was full."""
        self.drain_seconds = 0.0
        self.worker = make_worker(ace, threads)

    # ------------------------------------------------------------------ budget (any thread; see llm_budget)

    @property
    def calls(self) -> int:
        return self.budget.calls

    @property
    def role_calls(self) -> dict[str, int]:
        return self.budget.role_calls

    @property
    def probe_calls(self) -> int:
        return self.budget.probe_calls

    def budget_left(self, role: str = "actor") -> bool:
        """Whether ``role`` may make a call now (:meth:`CallBudget.budget_left`)."""
        return self.budget.budget_left(role)

    def may_call(self, role: str = "actor") -> bool:
        """Take one call from ``role``'s budget; False when it is spent."""
        return self.budget.may_call(role)

    def may_call_critic(self) -> bool:
        return self.budget.may_call_critic()

    def count_probe_call(self) -> bool:
        """Count one of co-evolution's probe calls (never refused: True)."""
        return self.budget.count_probe_call()

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
        return self.coevo is not None and self.coevo.wants_probe()

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
            self.coevo.add_probe(ProbeProblem(snapshot, obs, p.action, q))
            return
        item = RefineItem(snapshot, obs, p.action, q, p.obs, p.episode, p.decision, p.reward, p.max_rho, p.blackout,
                          run.counters.env_steps)
        self.queue["submitted"] += 1
        self.worker.submit(Refine(item, self.actors, self.budget, self._commit_refinement))  # the worker's now

    def after_episode(self, run: Run) -> dict[str, float] | None:
        """The value critic's round, when it is on and due; and commit what has finished."""
        c = run.counters
        if self.critic.due(c.env_steps, c.episodes, self.budget_left):
            if self.critic.pending:
                self.queue["critic_rounds_skipped"] += 1
            else:
                self.critic.pending = True
                self.worker.submit(CriticRound(self.critic.core, run.replay, self.budget, self._commit_critic))
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
            self.coevo.close()
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------------ commits (the loop's thread)

    def _commit_refinement(self, run: Run, item: RefineItem, value: tuple[Refinement, ActorStats] | None,
                           seconds: float) -> dict[str, float] | None:
        self.seconds += seconds
        if value is None:
            self.queue["budget_skipped"] += 1
            return None
        ref, stats = value
        add_stats(self.stats, stats)
        self.queue["refined"] += 1
        self.queue["lag_steps"] += run.counters.env_steps - item.stored_at
        self.refinements.write(refinement_line(run.counters.env_steps, item, ref, self.ace.ranker,
                                               run.actions.describe))
        if ref.accepted:
            r = ref.rollout
            handle = run.replay.add_validated(item.x, ref.action, r.reward, run.features(r.obs), r.blackout, r.ended,
                                        item.episode, item.decision, ref.improvement, True)
            if self.coevo is not None:
                self.coevo.record(ref, handle)
                self._maybe_finetune(run)
        elif self.coevo is not None:
            self.coevo.record(ref)  # kept for the judge's pairs only: its verdicts
            self._maybe_finetune(run)
        return self.metrics()

    def _maybe_finetune(self, run: Run) -> None:
        if self.coevo.begin_round():
            self.worker.submit(Finetune(self.coevo, self.actors, self.budget, run.replay, run.counters.env_steps,
                                        self.lora, self._commit_finetune))

    def _commit_finetune(self, run: Run, entry: dict[str, Any]) -> dict[str, float] | None:
        run.logger.write(run.counters.env_steps, coevolution_metrics(entry, self.coevo.exam_controls))
        self.coevo.end_round()
        self._maybe_finetune(run)
        return None

    def _commit_critic(self, run: Run, value: tuple[CriticReport, dict[str, Any]],
                       writes: list[tuple[int, float, float]], seconds: float) -> dict[str, float]:
        report, state = value
        self.seconds += seconds
        totals = self.critic.commit(run.replay, report, state, writes)
        return {**self.metrics(), **totals}

    # ------------------------------------------------------------------ reporting and checkpoints

    def _queue_counts(self) -> dict[str, int]:
        return queue_counts(self.queue, self.worker)

    def metrics(self) -> dict[str, float]:
        s, q = self.stats, self._queue_counts()
        return {"llm/calls": self.calls, "llm/probe_calls": self.probe_calls, "llm/bad_transitions": s.bad_transitions,
                "llm/accepted": s.accepted, "llm/rounds": s.rounds, "llm/acceptance_rate": s.acceptance_rate,
                "llm/first_choice_accepted": s.first_choice_accepted,
                "llm/errors": s.errors + self.critic.totals["errors"], "llm/seconds": self.seconds,
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
        s, critic = self.stats, self.critic.totals
        history = self.coevo.history if self.coevo is not None else []
        return {"calls": self.calls, "actor_calls": s.calls, "critic_calls": critic["calls"],
                "probe_calls": self.probe_calls,
                "bad_transitions": s.bad_transitions, "accepted": s.accepted, "rounds": s.rounds,
                "first_choice_accepted": s.first_choice_accepted, "acceptance_rate": s.acceptance_rate,
                "errors": s.errors + critic["errors"], "error_kinds": dict(s.error_kinds),
                "finetunes": len(history), "coevolution": list(history),
                "finetune_seconds": sum(e.get("seconds", 0.0) for e in history),
                "exam_controls": self.coevo.exam_controls if self.coevo is not None else {},
                "coevolution_off": self._coevolution_off(), "critic": dict(critic),
                "seconds": self.seconds, "llm_seconds": s.llm_seconds, "validate_seconds": s.validate_seconds,
                "load_seconds": self.load_seconds, "backend": getattr(self.backend, "stats", {}),
                "queue": self.queue_summary()}

    def _coevolution_off(self) -> str | None:
        """Why co-evolution does not run (None when it does)."""
        if self.coevo is not None:
            return self.coevo.disabled
        if not self.ace.coevolve:
            return "ace.coevolve is false"
        if self.actor is None:
            return "it needs the actor (ace.actor is false)"
        return f"the actor's ranker ({self.ace.ranker!r}) does not ask the LLM: a round would teach it nothing it uses"

    def state_dict(self) -> dict[str, Any]:
        """What has been committed (see "Checkpoints while work is pending" in the module docstring); the work
        pending now is counted in ``queue["pending"]``, and a run resumed from this state counts it as lost."""
        return {**self.budget.state_dict(),
                "seconds": self.seconds,
                "actor": asdict(self.stats) if self.actor is not None else None,
                "critic": self.critic.state,
                "critic_totals": dict(self.critic.totals),
                "coevo": self.coevo.state_dict() if self.coevo is not None else None,
                "queue": {**self._queue_counts(), "pending": self.worker.pending}, "log_lines": self.refinements.lines}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.budget.load_state_dict(state)
        self.seconds = float(state["seconds"])
        if self.actor is not None and state["actor"] is not None:
            self.stats = ActorStats(**state["actor"])
        self.critic.load_state_dict(state["critic"], state["critic_totals"])
        if self.coevo is not None and state["coevo"] is not None:
            self.coevo.load_state_dict(state["coevo"])
        queue = state.get("queue")  # older checkpoints have no queue
        if queue is not None:
            self.queue.update({k: queue[k] for k in QUEUE_COUNTERS if k in queue})
            self.queue["lost_on_resume"] += int(queue.get("pending", 0))
        if state.get("log_lines") is not None:
            self.refinements.keep(int(state["log_lines"]))
