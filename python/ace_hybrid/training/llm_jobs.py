"""The LLM's work in an ACE run as jobs for the LLM worker, and the queue they wait in.

The LLM works beside the loop (``ace.async_llm``, the default)
-----------------------------------------------------------------
An LLM call takes seconds on a CPU, an environment step milliseconds: the loop must not wait for it. Every refinement
(:class:`Refine`), critic round (:class:`CriticRound`) and fine-tuning round (:class:`Finetune`) is a job for the LLM
worker (:mod:`ace_hybrid.training.llm_worker`, built by :func:`make_worker`): one thread that owns the backend (so a
LoRA adapter swap can never race with a scoring call), or ``llm.concurrency`` threads for an OpenAI-compatible server
(each with its own actor; fine-tuning is impossible there). The loop keeps acting and updating (the worker thread runs
at a lower priority, ``ace.worker_nice``, with its own torch threads, ``ace.worker_torch_threads``, so the learner
gets the CPU first: :func:`worker_thread_settings`); what a job produces is committed by the loop's thread at its next
hook (each job's ``commit`` calls back into :class:`~ace_hybrid.training.ace.LLMInLoop`) -- the refinement's line in
``refinements.jsonl``, the accepted transition into the validated partition, the critic's reward adjustments
(:meth:`MixedReplayBuffer.update_rewards`, deferred by :class:`DeferredRewards`), the counters -- so a checkpoint
(written by the same thread) is always consistent.

Queue policy. At most ``ace.queue_size`` bad transitions wait for the worker, each with the environment copy it will
be validated in (the worker owns the copy from then on and closes it). A bad transition that finds the queue full is
dropped by ``ace.queue_overflow``: "skip" (default) drops the new one -- and while the queue is full the loop makes no
environment copy at its decisions, the largest cost the LLM puts on the loop (``queue.decisions_not_copied``; a bad
transition met that way is counted as submitted and dropped, as the full queue would have refused it) --,
"drop_oldest" evicts the one that waited longest (fresher transitions, a copy at every decision); the count is
``llm/queue_dropped`` in the metrics and ``queue.dropped`` in the summary, the waiting ones ``llm/queue_depth``. A
bad transition whose turn comes after the budget ran out is not refined (``queue.budget_skipped``). Critic and
fine-tuning rounds are never dropped: at most one of each is pending, and a critic round that comes due while one is
pending is skipped (``queue.critic_rounds_skipped``; the next one sees the same trajectories). The budget
(:mod:`ace_hybrid.training.llm_budget`) is the same as in the loop: it is spent when a call is made, by whichever
thread. The queue's counters over the run are :data:`QUEUE_COUNTERS` (saved with checkpoints).

``ace.async_llm = false`` runs every job in the loop's thread when it is submitted (:class:`InlineWorker`): the loop
waits for each call, and a run is deterministic.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ace_hybrid.config import ACEConfig
from ace_hybrid.llm.actor import ActorStats, PolicyActor, Refinement
from ace_hybrid.llm.critic import CriticReport, ValueCritic
from ace_hybrid.training.llm_budget import CallBudget
from ace_hybrid.training.llm_coevolution import CoEvolutionInLoop
from ace_hybrid.training.llm_worker import Done, InlineWorker, LLMWorker

__all__ = ["QUEUE_COUNTERS", "CriticRound", "DeferredRewards", "Finetune", "Refine", "RefineItem", "make_worker",
           "queue_counts", "worker_thread_settings"]

log = logging.getLogger(__name__)

QUEUE_COUNTERS = ("submitted", "dropped", "budget_skipped", "critic_rounds_skipped", "lost_on_resume",
                  "max_depth", "refined", "lag_steps", "decisions_not_copied")
"""The queue's counters over a run (earlier processes of a resumed run included)."""

Commit = Callable[..., "dict[str, float] | None"]
"""A job's way back into the loop: called by the loop's thread with the run, what the job made and its seconds."""


@dataclass
class RefineItem:
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


class Refine:
    """Job: the actor refines one bad transition (on the worker); the loop logs and stores the result."""

    droppable = True

    def __init__(self, item: RefineItem, actors: list[PolicyActor], budget: CallBudget, commit: Commit) -> None:
        self.item, self.actors, self.budget, self._commit = item, actors, budget, commit

    def run(self, slot: int) -> tuple[Refinement, ActorStats] | None:
        item, actor = self.item, self.actors[slot]
        if actor.ranker.uses_llm and not self.budget.budget_left():
            return None  # spent while it waited
        actor.stats = ActorStats()  # this refinement's counters, merged into the run's when it is committed
        # One call of the budget per LLM round; a ranker without the LLM (e.g. "sim") is not budgeted: a refinement
        # costs only its validation rollouts (about 0.2 s).
        ref = actor.refine(item.snapshot, item.obs, item.action, q_values=item.q, may_call=self.budget.may_call)
        return ref, actor.stats

    def discard(self) -> None:
        if self.item.snapshot is not None:
            self.item.snapshot.close()
            self.item.snapshot = None

    def commit(self, run: Any, done: Done) -> dict[str, float] | None:
        return self._commit(run, self.item, done.value, done.seconds)


class CriticRound:
    """Job: one value-critic round on the worker; its reward writes are applied by the loop when committed."""

    droppable = False

    def __init__(self, critic: ValueCritic, replay: Any, budget: CallBudget, commit: Commit) -> None:
        self.critic, self.view, self.budget, self._commit = critic, DeferredRewards(replay), budget, commit

    def run(self, slot: int) -> tuple[CriticReport, dict[str, Any]]:
        report = self.critic.run(self.view, may_call=self.budget.may_call_critic)
        return report, self.critic.state_dict()

    def discard(self) -> None:
        pass

    def commit(self, run: Any, done: Done) -> dict[str, float]:
        return self._commit(run, done.value, self.view.writes, done.seconds)


class Finetune:
    """Job: one co-evolution round (probe, LoRA fine-tuning, probe) on the worker that owns the backend."""

    droppable = False

    def __init__(self, coevo: CoEvolutionInLoop, actors: list[PolicyActor], budget: CallBudget, replay: Any,
                 env_steps: int, lora: dict[str, Any], commit: Commit) -> None:
        self.coevo, self.actors, self.budget, self.replay = coevo, actors, budget, replay
        self.env_steps, self.lora, self._commit = env_steps, lora, commit

    def run(self, slot: int) -> dict[str, Any]:
        return self.coevo.core.finetune(self.replay, self.actors[slot], self.budget.count_probe_call, self.env_steps,
                                        self.lora)

    def discard(self) -> None:
        pass

    def commit(self, run: Any, done: Done) -> dict[str, float] | None:
        return self._commit(run, done.value)


class DeferredRewards:
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


def make_worker(ace: ACEConfig, threads: int) -> LLMWorker | InlineWorker:
    """The run's LLM worker: ``threads`` threads behind a queue of ``ace.queue_size`` (``ace.async_llm``), or the
    loop's own thread."""
    if not ace.async_llm:
        return InlineWorker()
    torch_threads, nice = ace.worker_torch_threads, ace.worker_nice
    return LLMWorker(ace.queue_size, ace.queue_overflow, threads=threads,
                     init=lambda slot: worker_thread_settings(torch_threads, nice))


def queue_counts(queue: dict[str, int], worker: LLMWorker | InlineWorker) -> dict[str, int]:
    """The queue's counters over the run: the committed ones (``queue``) with what the worker counted itself."""
    return {**queue, "dropped": queue["dropped"] + worker.stats.dropped,
            "max_depth": max(queue["max_depth"], worker.stats.max_depth)}


def worker_thread_settings(torch_threads: int, nice: int) -> None:
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
