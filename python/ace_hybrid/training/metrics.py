"""What a run logs: JSON lines in ``metrics.jsonl`` (exact, truncated on resume), TensorBoard scalars, and the
rates of the learner and the rollout workers (:class:`Throughput`)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "Throughput", "truncate_jsonl"]


class MetricsLogger:
    """JSON lines in ``metrics.jsonl`` plus TensorBoard scalars (when tensorboardX is installed and enabled).

    TensorBoard events are written synchronously (tensorboardX's ``SummaryWriter`` queues them to a thread, and its
    ``flush`` does not wait for the queue), so :meth:`flush` at a checkpoint puts every point logged so far on disk.
    """

    def __init__(self, run_dir: Path, tensorboard: bool) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.events: Any = None
        if tensorboard:
            try:
                from tensorboardX.event_file_writer import EventsWriter
            except ImportError as exc:
                raise ImportError("log.tensorboard = true needs tensorboardX: pip install tensorboardX "
                                  "(or set log.tensorboard=false)") from exc
            run_dir.mkdir(parents=True, exist_ok=True)
            # A unique suffix: the file name's timestamp has whole seconds and the file is opened with "wb".
            self.events = EventsWriter(str(run_dir / "events"), filename_suffix=f".{uuid.uuid4().hex[:8]}")

    def write(self, step: int, values: dict[str, float]) -> None:
        now = time.time()
        with self.path.open("a") as f:
            f.write(json.dumps({"env_steps": step, "time": now, **values}) + "\n")
        if self.events is not None:
            from tensorboardX.proto.event_pb2 import Event
            from tensorboardX.summary import scalar

            for key, value in values.items():
                self.events.write_event(Event(wall_time=now, step=step, summary=scalar(key, float(value))))

    def flush(self) -> None:
        """Put the TensorBoard points logged so far on disk (the JSON lines are written at once)."""
        if self.events is not None:
            self.events.flush()

    def truncate_after(self, step: int) -> None:
        """Drop lines written after ``step`` (by a run that died before its next checkpoint)."""
        truncate_jsonl(self.path, step)

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
            self.events = None


def truncate_jsonl(path: Path, step: int) -> None:
    """Drop the lines of a JSONL log whose ``env_steps`` is after ``step``."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["env_steps"] <= step]
    path.write_text("".join(line + "\n" for line in kept))


class Throughput:
    """How fast the learner updates and the rollout workers step, over one session of ``train`` and over windows.

    Learner and workers are measured apart, because either can be the bottleneck: ``learner_updates_per_s`` and
    ``learner_busy`` (the share of its time not spent waiting for a batch) say whether the learner keeps up;
    ``worker_env_steps_per_s`` (all workers) and ``worker_<k>_env_steps_per_s`` what the environments deliver. All
    rates are per second of wall time, so the workers' add up to the total. With workers, the session's rates
    (:meth:`summary`) are measured from the first batch on until the workers' last (a worker's: from its own first
    batch to its own last): starting processes and building environments takes seconds that say nothing about throughput
    (``startup_seconds``), and so does stopping them.

    ``workers = 0`` (the inline worker, in the learner's thread) is not measured per batch: only the session's
    environment steps and updates per second are reported.
    """

    def __init__(self, workers: int, env_steps: int, updates: int,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.workers = int(workers)
        self.clock = clock
        """Seconds, monotonic (the tests give their own)."""
        self.started = clock()
        self.ended: float | None = None
        self._start_counts = (int(env_steps), int(updates))
        self._end_counts = self._start_counts
        self.first_batch: float | None = None
        self._at_first = (0, 0, 0.0)
        """(steps of the first batch, updates and seconds waited when it came): the start of the measured window."""
        self.steps = [0] * self.workers
        """Environment steps received from each worker."""
        self.busy = [0.0] * self.workers
        """Seconds each worker spent making its batches."""
        self._first = [-1.0] * self.workers
        self._last = [-1.0] * self.workers
        self._after_first = [0] * self.workers
        self._arrivals: list[list[tuple[float, int]]] = [[] for _ in range(self.workers)]
        """(time, steps) of each worker's batches."""
        self.waited = 0.0
        """Seconds the learner waited for batches."""
        self.blocked = 0.0
        """Seconds the workers (all together) were blocked: waiting to hand a batch over or for their next call
        while the learner was behind, or at a budget while it evaluated."""
        self.lag_sum, self.lag_rows = 0.0, 0
        self.limiter: Any = None
        """The run's :class:`~ace_hybrid.training.limiter.SampleToInsertRatio` (None: off): its measured ratio is
        reported."""
        self._marks: dict[str, tuple[Any, ...]] = {}

    def batch(self, worker: int, steps: int, busy: float, lag_sum: float, rows: int, updates: int,
              blocked: float = 0.0) -> None:
        """Count one batch of ``worker``: its environment steps, its making time, the summed policy lag (in
        updates) of its ``rows`` transitions and the seconds it was blocked before it; ``updates``: the learner's
        count when it arrived."""
        self.blocked += blocked
        now = self.clock()
        if self.first_batch is None:
            self.first_batch, self._at_first = now, (steps, int(updates), self.waited)
        if self._first[worker] < 0:
            self._first[worker] = now
        else:
            self._after_first[worker] += steps
        if steps:
            self._last[worker] = now
            self._arrivals[worker].append((now, steps))
        self.steps[worker] += steps
        self.busy[worker] += busy
        self.lag_sum += lag_sum
        self.lag_rows += rows

    def wait(self, seconds: float) -> None:
        """Count time the learner spent waiting for a batch."""
        self.waited += seconds

    def window(self, name: str, env_steps: int, updates: int, min_seconds: float = 0.0) -> dict[str, float] | None:
        """Rates since the last call with this ``name`` (the first: since the session started), or None when less
        than ``min_seconds`` have passed (the window then goes on). Keys: ``rate/learner_updates_per_s``,
        ``rate/learner_busy``, ``rate/worker_env_steps_per_s``, ``rate/worker_<k>_env_steps_per_s``,
        ``rate/blocked_s`` (seconds the workers were blocked in the window, summed), ``rollout/policy_lag`` (mean
        updates between the policy a transition was made with and its arrival) and, with the rate limiter,
        ``rate/samples_per_insert`` (measured since the session started)."""
        now = self.clock()
        t, steps, ups, per_worker, waited, blocked, lag_sum, lag_rows = self._marks.get(
            name, (self.started, *self._start_counts, [0] * self.workers, 0.0, 0.0, 0.0, 0))
        dt = now - t
        if dt < min_seconds or dt <= 0:
            return None
        self._marks[name] = (now, env_steps, updates, list(self.steps), self.waited, self.blocked, self.lag_sum,
                             self.lag_rows)
        out = {"rate/learner_updates_per_s": (updates - ups) / dt,
               "rate/learner_busy": max(0.0, 1.0 - (self.waited - waited) / dt),
               "rate/worker_env_steps_per_s": (env_steps - steps) / dt, "rate/blocked_s": self.blocked - blocked}
        if self.limiter is not None and self.limiter.ratio() is not None:
            out["rate/samples_per_insert"] = self.limiter.ratio()
        out.update({f"rate/worker_{k}_env_steps_per_s": (self.steps[k] - per_worker[k]) / dt
                    for k in range(self.workers)})
        if self.lag_rows > lag_rows:
            out["rollout/policy_lag"] = (self.lag_sum - lag_sum) / (self.lag_rows - lag_rows)
        return out

    def stop(self, env_steps: int, updates: int) -> None:
        """The session's work is done (what follows -- the last evaluation and checkpoint -- is not counted)."""
        if self.ended is None:
            self.ended = self.clock()
            self._end_counts = (int(env_steps), int(updates))

    def _all_running_rate(self) -> float:
        """Environment steps per second while every worker was running (see the class docstring); the first batch to
        the last when those windows do not overlap (one worker, or workers that ran one after the other)."""
        started = [t for t in self._first if t >= 0]
        if not started:
            return 0.0
        t0, t1 = max(self._first), min(self._last)
        if len(started) < self.workers or t1 <= t0:
            t0, t1 = min(started), max(self._last)
        if t1 <= t0:
            return 0.0
        steps = sum(n for arrivals in self._arrivals for t, n in arrivals if t0 < t <= t1)
        return steps / (t1 - t0)

    def summary(self) -> dict[str, Any]:
        """The session's rates (see the class docstring), for ``train``'s summary and the benchmarks."""
        end = self.ended if self.ended is not None else self.clock()
        seconds = end - self.started
        steps = self._end_counts[0] - self._start_counts[0]
        updates = self._end_counts[1] - self._start_counts[1]
        out: dict[str, Any] = {"workers": self.workers, "seconds": seconds,
                               "env_steps": steps, "updates": updates,
                               "learner_updates_per_s": updates / seconds if seconds > 0 else 0.0}
        if not self.workers:
            out["env_steps_per_s"] = steps / seconds if seconds > 0 else 0.0
            return out
        first = self.first_batch if self.first_batch is not None else end
        measured = end - first
        first_steps, first_updates, first_waited = self._at_first
        rate = (lambda n: n / measured) if measured > 0 else (lambda n: 0.0)
        out.update(startup_seconds=first - self.started, measured_seconds=measured,
                   env_steps_per_s=self._all_running_rate(), overall_env_steps_per_s=rate(sum(self.steps) - first_steps),
                   learner_updates_per_s=rate(self._end_counts[1] - first_updates),
                   learner_busy=max(0.0, 1.0 - rate(self.waited - first_waited)) if measured > 0 else 0.0,
                   policy_lag=self.lag_sum / self.lag_rows if self.lag_rows else 0.0, blocked_seconds=self.blocked,
                   per_worker=[{"env_steps": self.steps[k], "busy_seconds": self.busy[k],
                                "env_steps_per_s": (self._after_first[k] / (self._last[k] - self._first[k])
                                                    if self._last[k] > self._first[k] >= 0 else 0.0)}
                               for k in range(self.workers)])
        if self.limiter is not None:
            out.update(samples_per_insert=self.limiter.ratio(),
                       samples_per_insert_target=self.limiter.samples_per_insert)
        return out
