"""The LLM worker: a thread (a few, for an HTTP server) that runs a run's slow LLM work behind a bounded queue.

Roles, not threads sprinkled in (Sample Factory, RLlib): the training loop acts and learns; the worker runs the jobs
the loop hands it and hands their results back; the loop commits them (to the replay, the logs, the counters) at its
own hook points, so everything a checkpoint saves is written by one thread. The learner never waits on the worker:
:meth:`LLMWorker.submit` and :meth:`LLMWorker.collect` return at once; only :meth:`LLMWorker.wait` blocks (the end of
a run, when the queue drains).

Queue policy
------------
Two kinds of jobs (:attr:`Job.droppable`):

* droppable jobs (the actor's refinements of bad transitions) wait in a FIFO of at most ``size``. When it is full,
  ``overflow`` decides: "drop_oldest" evicts the job that has waited longest (a fresher transition, from the current
  policy, is worth more), "skip" refuses the new one. Either way the dropped job is discarded and counted
  (``stats.dropped``);
* rounds (the value critic's, co-evolution's fine-tuning) are never dropped and run before waiting droppable jobs; the
  caller keeps at most one of each kind pending, so they cannot pile up.

Ownership: a submitted job belongs to the worker. A worker thread runs it and then calls :meth:`Job.discard` (which
releases what the job holds, e.g. an environment copy); a job that never runs (evicted, refused, or still waiting at
:meth:`LLMWorker.close`) is discarded by the queue. The caller never touches a job's resources again.

Failures: a job handles its own expected failures (the LLM roles count :class:`~ace_hybrid.llm.backend.LLMError` and
go on). Anything else that escapes :meth:`Job.run` is a bug: it comes back in :attr:`Done.error`, for the committing
thread to raise.

:class:`InlineWorker` has the same interface and runs each job on the caller's thread at submission
(``ace.async_llm = false``): the loop waits, and the run is deterministic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ace_hybrid.config import QUEUE_OVERFLOW as OVERFLOW

__all__ = ["OVERFLOW", "Done", "InlineWorker", "Job", "LLMWorker", "QueueStats"]

log = logging.getLogger(__name__)


class Job(Protocol):
    """A unit of work for the worker."""

    droppable: bool
    """True: it waits in the bounded queue and may be dropped; False: a round, never dropped."""

    def run(self, slot: int) -> Any:
        """Do the work on worker thread ``slot`` (0 .. threads - 1) and return its result."""

    def discard(self) -> None:
        """Release what the job holds; called exactly once, after :meth:`run` or instead of it."""


class Done(NamedTuple):
    """A finished job, waiting to be committed by the loop.

    Attributes
    ----------
    job : Job
    value : Any
        What :meth:`Job.run` returned (None when it raised).
    error : BaseException or None
        What :meth:`Job.run` raised: a bug, to be raised again by the committing thread.
    seconds : float
        Wall-clock time of :meth:`Job.run`.
    """

    job: Any
    value: Any
    error: BaseException | None
    seconds: float


@dataclass
class QueueStats:
    """Counters of a worker since it was built."""

    submitted: int = 0
    """Jobs handed to :meth:`LLMWorker.submit`."""
    dropped: int = 0
    """Droppable jobs evicted or refused by a full queue (the overflow policy)."""
    done: int = 0
    """Jobs that ran (including ones that raised)."""
    abandoned: int = 0
    """Jobs still waiting when the worker was closed (discarded unrun)."""
    max_depth: int = 0
    """Most droppable jobs waiting at once."""


class LLMWorker:
    """``threads`` daemon threads running :class:`Job` s from a bounded queue (see the module docstring).

    Parameters
    ----------
    size : int
        Most droppable jobs waiting at once (>= 1).
    overflow : str
        "drop_oldest" or "skip" (:data:`OVERFLOW`).
    threads : int
        Worker threads (>= 1). More than one only for thread-safe backends (an HTTP server): jobs then run side by
        side, each on its own ``slot``.
    init : callable, optional
        Called with the slot at the start of each worker thread (e.g. to set its torch threads).
    name : str
        Thread name prefix.

    Threads start at the first submission. Thread-safety: every method may be called from any thread; jobs are
    committed by whoever calls :meth:`collect` (the training loop).
    """

    def __init__(self, size: int, overflow: str, *, threads: int = 1, init: Callable[[int], None] | None = None,
                 name: str = "ace-llm") -> None:
        if size < 1:
            raise ValueError(f"size = {size} out of range [1, inf)")
        if overflow not in OVERFLOW:
            raise ValueError(f"overflow = {overflow!r} is invalid: must be one of {OVERFLOW}")
        if threads < 1:
            raise ValueError(f"threads = {threads} out of range [1, inf)")
        self.size, self.overflow, self.n_threads = int(size), overflow, int(threads)
        self.stats = QueueStats()
        self._init, self._name = init, name
        self._cond = threading.Condition()
        self._waiting: deque[Any] = deque()
        self._rounds: deque[Any] = deque()
        self._done: deque[Done] = deque()
        self._running = 0
        self._closed = False
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ the loop's side

    def submit(self, job: Any) -> bool:
        """Queue ``job`` (it now belongs to the worker); False when the overflow policy refused it ("skip").

        Never blocks beyond a short lock. Raises RuntimeError after :meth:`close` (the job is discarded first).
        """
        evicted = None
        with self._cond:
            if self._closed:
                job.discard()
                raise RuntimeError("the LLM worker is closed")
            self.stats.submitted += 1
            if not job.droppable:
                self._rounds.append(job)
            elif len(self._waiting) < self.size:
                self._waiting.append(job)
            elif self.overflow == "skip":
                evicted = job
            else:
                evicted = self._waiting.popleft()
                self._waiting.append(job)
            if evicted is not None:
                self.stats.dropped += 1
            self.stats.max_depth = max(self.stats.max_depth, len(self._waiting))
            if not self._threads:
                self._start()
            self._cond.notify()
        if evicted is not None:
            evicted.discard()
        return evicted is not job

    def collect(self) -> list[Done]:
        """The jobs finished since the last call, in the order they finished (never blocks)."""
        if not self._done:  # a racy read is fine: what is missed now is collected next time
            return []
        with self._cond:
            out = list(self._done)
            self._done.clear()
        return out

    def wait(self, timeout: float | None = None) -> None:
        """Block until a finished job can be collected, the worker is idle, or ``timeout`` seconds pass."""
        with self._cond:
            self._cond.wait_for(lambda: self._done or self._idle_locked(), timeout)

    @property
    def depth(self) -> int:
        """Jobs waiting (droppable ones and rounds), not counting the ones running."""
        return len(self._waiting) + len(self._rounds)

    @property
    def waiting(self) -> int:
        """Droppable jobs waiting (what ``size`` bounds)."""
        return len(self._waiting)

    @property
    def pending(self) -> int:
        """Jobs not yet committed: waiting, running, or finished and not collected."""
        with self._cond:
            return len(self._waiting) + len(self._rounds) + self._running + len(self._done)

    def idle(self) -> bool:
        """Nothing waiting, running or left to collect."""
        with self._cond:
            return self._idle_locked() and not self._done

    def close(self, timeout: float | None = None) -> None:
        """Stop the threads after their current job (waiting up to ``timeout`` s for each) and discard every job that
        has not run (counted in ``stats.abandoned``). Finished jobs stay collectable."""
        with self._cond:
            self._closed = True
            left = list(self._rounds) + list(self._waiting)
            self._rounds.clear()
            self._waiting.clear()
            self.stats.abandoned += len(left)
            self._cond.notify_all()
        for job in left:
            job.discard()
        for t in self._threads:
            t.join(timeout)

    # ------------------------------------------------------------------ the worker's side

    def _idle_locked(self) -> bool:
        return not (self._waiting or self._rounds or self._running)

    def _start(self) -> None:
        for slot in range(self.n_threads):
            t = threading.Thread(target=self._loop, args=(slot,), name=f"{self._name}-{slot}", daemon=True)
            self._threads.append(t)
            t.start()

    def _loop(self, slot: int) -> None:
        if self._init is not None:
            try:
                self._init(slot)
            except Exception:  # a thread without its settings still does the work
                log.exception("LLM worker thread %d: init failed; running with defaults", slot)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._rounds or self._waiting)
                if self._closed:
                    return
                job = self._rounds.popleft() if self._rounds else self._waiting.popleft()
                self._running += 1
            started = time.perf_counter()
            value, error = None, None
            try:
                value = job.run(slot)
            except BaseException as exc:  # noqa: BLE001 - handed to the committing thread, which raises it
                error = exc
            finally:
                job.discard()
            with self._cond:
                self._running -= 1
                self.stats.done += 1
                self._done.append(Done(job, value, error, time.perf_counter() - started))
                self._cond.notify_all()


class InlineWorker:
    """:class:`LLMWorker`'s interface, running each job at once on the caller's thread (``ace.async_llm = false``).

    Nothing is ever dropped or pending between calls; an exception from a job propagates from :meth:`submit`.
    """

    n_threads = 1
    size = 0
    overflow = "none"

    def __init__(self) -> None:
        self.stats = QueueStats()
        self._done: deque[Done] = deque()

    def submit(self, job: Any) -> bool:
        self.stats.submitted += 1
        started = time.perf_counter()
        try:
            value = job.run(0)
        finally:
            job.discard()
            self.stats.done += 1
        self._done.append(Done(job, value, None, time.perf_counter() - started))
        return True

    def collect(self) -> list[Done]:
        out = list(self._done)
        self._done.clear()
        return out

    def wait(self, timeout: float | None = None) -> None:
        return None

    depth = 0
    waiting = 0

    @property
    def pending(self) -> int:
        return len(self._done)

    def idle(self) -> bool:
        return not self._done

    def close(self, timeout: float | None = None) -> None:
        return None
