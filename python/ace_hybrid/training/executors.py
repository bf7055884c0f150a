"""Where rollout workers run: in the learner's process, in local processes or as Ray actors, behind one interface.

Every executor runs the same :class:`~ace_hybrid.training.rollout.RolloutWorker` (Ray is an executor, not a second
code path; nor is ``train.workers = 0``) and offers the learner the same calls:

``launch(config, workers)``
    Start the workers' processes (or actors) before the learner builds its run: each imports torch and grid2op and
    builds what the configuration alone determines (``RolloutWorker.prepare``: its grid and catalog) while the
    learner builds its own. Optional: ``start`` launches them if this was not called.
``start(specs, policy, budget)``
    Build one worker per spec, give each the first policy and one shared
    :class:`~ace_hybrid.training.dealer.Dealer` of the session's ``budget``, and set them going.
``set_weights(policy)``
    Send a new policy to every worker still running; never waits for them.
``grant_until(step)``
    Let the dealer grant environment steps up to ``step``: the workers wait at a ``train.keep_best_at`` budget
    until the learner has evaluated there (:class:`~ace_hybrid.training.rollout.Budget`).
``collect(timeout)``
    The next :class:`~ace_hybrid.training.rollout.TransitionBatch` from any worker, blocking up to ``timeout``
    seconds (the learner sleeps here when it has nothing to do, rather than spin); None when none came. A worker
    that raised or died raises :class:`WorkerError` here, naming it.
``close()``
    Stop the workers (what they were doing is dropped) and release them. Safe to call twice.

``finished`` is True once every worker has sent its last batch (the step budget is spent).

In the learner's process (``train.workers = 0``)
------------------------------------------------
:class:`InlineExecutor` runs one worker in the learner's thread, on the run's own environment, normaliser and
networks (RLlib's local worker): each ``collect`` is one environment step, and each transition goes to the learner's
store the moment it completes, so ACE's hooks keep their order (``wants_snapshot`` at a decision, ``after_store``
before the next one, ``poll`` at every step). Nothing is copied or sent: ``set_weights`` only stamps the version.

Local processes (``train.executor = "local"``)
----------------------------------------------
One process per worker from multiprocessing's "spawn" context (a fresh interpreter: no forked torch or grid2op
state), launched before the learner builds its run (each prepares its grid meanwhile, then gets its spec and first
policy through its queue), sharing one dealer in shared memory. Batches come back through one bounded queue (two per worker: a worker
that gets that far ahead of the learner waits), policies go out through one queue per worker, and a worker takes the
newest one before each batch. A worker ignores SIGINT -- a terminal's Ctrl-C reaches the whole process group, and it
is the learner's to handle (it saves, then stops the workers) -- and ends when its parent dies
(:func:`ace_hybrid.processes.exit_with_parent`). It only exits when told: one that exits otherwise died, and the
learner says so.

Ray actors (``train.executor = "ray"``)
---------------------------------------
One actor per worker (``num_cpus=1``), created (and preparing its grid) before the learner builds its run, with two
``collect`` calls in flight each, so an actor starts its next batch
while the learner reads the last; a worker's batches are read in the order it made them, as locally. The dealer is
one more actor (``num_cpus=0``, created with the workers; its process imports only
:mod:`ace_hybrid.training.dealer`), asked once per batch (a batch ahead) and once per episode. Policies are put once
in the object store and sent by reference; an actor applies one after the calls already queued. If Ray is not
running, a local instance is started with one CPU per worker (or per core, if more) and stopped at ``close``; its
workers find this ace_hybrid through the ``PYTHONPATH`` they inherit (not a ``runtime_env``, which would keep them
from reusing the worker processes Ray starts ahead: about 0.5 s more per actor on 2 cores). ``train.ray_address``
joins a cluster instead, whose nodes need ace_hybrid and the Grid2Op data. Actors are owned by the learner's
process: Ray stops them when it exits or dies.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from ace_hybrid.config import Config
from ace_hybrid.processes import start_child
from ace_hybrid.training.dealer import Budget, Dealer, Grant
from ace_hybrid.training.rollout import PolicyWeights, RolloutWorker, TransitionBatch, WorkerSpec
from ace_hybrid.training.run import Pending, Run

__all__ = ["Executor", "InlineExecutor", "LocalExecutor", "RayExecutor", "WorkerError", "import_ray",
           "make_executor", "remote_executor"]

_STOP = "stop"
"""A local worker's command to return (anything else on its queue is a PolicyWeights)."""


class WorkerError(RuntimeError):
    """A rollout worker raised or died; the message names it and carries its traceback or exit status."""


class Executor(Protocol):
    """What the learner needs from an executor (see the module docstring)."""

    @property
    def finished(self) -> bool: ...

    def launch(self, config: Config, workers: int) -> None: ...

    def start(self, specs: list[WorkerSpec], policy: PolicyWeights, budget: Budget) -> None: ...

    def set_weights(self, policy: PolicyWeights) -> None: ...

    def grant_until(self, step: int) -> None: ...

    def collect(self, timeout: float) -> TransitionBatch | None: ...

    def close(self) -> None: ...


def make_executor(run: Run, store: Callable[[Pending], None]) -> Executor:
    """The executor of ``run``'s ``train.workers`` and ``train.executor``: inline (0 workers; ``store`` takes each
    transition as it completes), local processes or Ray actors."""
    return remote_executor(run.cfg) if run.cfg.train.workers else InlineExecutor(run, store)


def remote_executor(cfg: Config) -> LocalExecutor | RayExecutor:
    """The executor of ``train.workers >= 1`` workers: local processes or Ray actors (``train.executor``)."""
    t = cfg.train
    if t.executor == "local":
        return LocalExecutor()
    if t.executor == "ray":
        return RayExecutor(t.ray_address)
    raise ValueError(f"train.executor = {t.executor!r} is invalid: must be one of ('local', 'ray')")


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError that names the extra to install (``train`` calls it before it builds
    anything when ``train.executor = "ray"``: a missing Ray fails at start-up, not after the environments)."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("train.executor = 'ray' needs Ray: pip install 'ace-hybrid[cluster]' (or ray>=2.9)") from exc
    return ray


def _one_torch_thread() -> None:
    """A worker steps one environment: more torch threads would only fight the learner and the other workers."""
    import torch

    torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------- inline


class InlineExecutor:
    """``train.workers = 0``: one worker in the learner's thread on the run's own parts (see the module docstring).

    ``store`` takes each transition as it completes (the learner's store, with ACE's ``after_store``); ACE's
    ``wants_snapshot`` is asked at each of the policy's decisions.
    """

    def __init__(self, run: Run, store: Callable[[Pending], None]) -> None:
        self.run, self.store = run, store
        self.worker: RolloutWorker | None = None
        self._last = False

    @property
    def finished(self) -> bool:
        return self._last

    def launch(self, config: Config, workers: int) -> None:
        pass  # the worker acts with the run's own parts, built with it

    def start(self, specs: list[WorkerSpec], policy: PolicyWeights, budget: Budget) -> None:
        llm = self.run.llm
        self.worker = RolloutWorker(specs[0], Dealer(budget), acting=self.run.acting(), sink=self.store,
                                    wants_snapshot=llm.wants_snapshot if llm is not None else None, batch_steps=1)
        self.worker.version = policy.version

    def set_weights(self, policy: PolicyWeights) -> None:
        pass  # the worker acts with the learner's own networks and normaliser

    def grant_until(self, step: int) -> None:
        self.worker.dealer.grant_until(step)

    def collect(self, timeout: float) -> TransitionBatch | None:
        self.worker.version = self.run.counters.updates  # the learner's networks, as of now: no lag
        batch = self.worker.collect()
        self._last = batch.last
        return batch

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


# ---------------------------------------------------------------------------------------------- local processes


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Hold SIGINT back while children start: they inherit the mask, so a Ctrl-C in that window stays pending in
    them until they ignore it, and is delivered to the parent (not lost) when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _local_worker_main(worker_cls: type, index: int, config: Config, dealer: Dealer, commands: Any, results: Any,
                       parent: int) -> None:
    """A local worker's process: prepare what the configuration determines, build the worker from the spec that
    follows, then one batch after another (each with the newest policy) until its budget is spent or it is told to
    stop.

    An exception goes to the learner as text (it may not pickle), then the process waits to be stopped, like one
    whose budget is spent: so a worker that exits unasked is a dead one."""
    start_child(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    worker, message = None, None
    try:
        _one_torch_thread()
        prepared = worker_cls.prepare(config)  # while the learner builds its run
        message = commands.get()  # the spec, then the first policy
        if not _is_stop(message):
            worker = worker_cls(message, dealer, prepared=prepared)
            message = commands.get()
        while not _is_stop(message):
            if message is not None:
                worker.set_policy(message)
            batch = worker.collect()
            results.put(("batch", index, batch))
            if batch.last:
                break
            message = _newest(commands)
    except BaseException:  # noqa: BLE001 - everything goes to the learner, which raises it
        results.put(("error", index, traceback.format_exc()))
    finally:
        if worker is not None:
            worker.close()
    while not _is_stop(message):
        message = commands.get()
    # Everything it sent is in the pipe; nothing else is left to save. os._exit skips the interpreter's teardown of
    # torch and grid2op, which took most of the 2 s close() waits for a worker (measured).
    results.close()
    results.join_thread()
    os._exit(0)


def _is_stop(message: Any) -> bool:
    return isinstance(message, str) and message == _STOP


def _newest(commands: Any) -> Any:
    """The last message waiting on ``commands`` (STOP wins over policies), or None when there is none."""
    newest = None
    while True:
        try:
            message = commands.get_nowait()
        except queue.Empty:
            return newest
        if _is_stop(message):
            return message
        newest = message


class LocalExecutor:
    """Rollout workers as local processes (see the module docstring).

    ``worker_cls`` builds a worker from a spec (the tests pass a failing one); ``stop_seconds`` is how long
    :meth:`close` lets the workers finish their batch before it terminates them.
    """

    def __init__(self, worker_cls: type = RolloutWorker, stop_seconds: float = 2.0) -> None:
        self.worker_cls = worker_cls
        self.stop_seconds = float(stop_seconds)
        self._processes: list[Any] = []
        self._commands: list[Any] = []
        self._results: Any = None
        self._dealer: Dealer | None = None
        self._done: set[int] = set()
        self._next_check = 0.0

    @property
    def finished(self) -> bool:
        return len(self._done) == len(self._processes)

    @property
    def pids(self) -> list[int]:
        """The workers' process ids, by worker index."""
        return [int(p.pid) for p in self._processes]

    def launch(self, config: Config, workers: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        # Kept here: its lock must outlive the children's unpickling of it (a collected semaphore is unlinked). Its
        # budget comes with start().
        self._dealer = dealer = Dealer.shared(ctx, Budget(0, 0, 0))
        self._results = ctx.Queue(maxsize=2 * workers)
        self._commands = [ctx.Queue() for _ in range(workers)]
        with _sigint_blocked():
            for k, commands in enumerate(self._commands):
                p = ctx.Process(target=_local_worker_main, name=f"rollout-worker-{k}", daemon=True,
                                args=(self.worker_cls, k, config, dealer, commands, self._results, os.getpid()))
                p.start()
                self._processes.append(p)

    def start(self, specs: list[WorkerSpec], policy: PolicyWeights, budget: Budget) -> None:
        if not self._processes:
            self.launch(specs[0].config, len(specs))
        if len(specs) != len(self._processes):
            raise ValueError(f"{len(specs)} worker specs for {len(self._processes)} launched workers")
        self._dealer.reset(budget)
        for spec, commands in zip(specs, self._commands):
            commands.put(spec)
            commands.put(policy)

    def set_weights(self, policy: PolicyWeights) -> None:
        for k, commands in enumerate(self._commands):
            if k not in self._done:
                commands.put(policy)

    def grant_until(self, step: int) -> None:
        self._dealer.grant_until(step)

    def collect(self, timeout: float) -> TransitionBatch | None:
        # A worker only exits when told: one that is gone is dead, even while the others keep the queue full.
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + 0.5
            self._check_alive()
        try:
            kind, k, payload = self._results.get(timeout=timeout)
        except queue.Empty:
            self._check_alive()
            return None
        if kind == "error":
            raise WorkerError(f"rollout worker {k} failed:\n{payload}")
        if payload.last:
            self._done.add(k)
        return payload

    def _check_alive(self) -> None:
        for k, p in enumerate(self._processes):
            code = p.exitcode
            if code is not None:
                how = (f"was killed by {signal.Signals(-code).name}" if code < 0 else
                       f"exited with code {code} (its error, if any, is on stderr above)")
                raise WorkerError(f"rollout worker {k} (pid {p.pid}) {how} while the run needed it; its partial "
                                  "episode is lost (resume from the last checkpoint)")

    def close(self) -> None:
        if not self._processes:
            return
        for commands in self._commands:
            with contextlib.suppress(Exception):
                commands.put(_STOP)
        deadline = time.monotonic() + self.stop_seconds
        while any(p.is_alive() for p in self._processes) and time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # a worker blocked on a full queue finishes its put
                self._results.get(timeout=0.05)
        for p in self._processes:
            if p.is_alive():
                p.terminate()
            p.join(5.0)
            if p.is_alive():  # pragma: no cover - ignores SIGTERM
                p.kill()
                p.join()
        # Messages for dead readers would keep this process waiting at exit for its queue threads to flush them.
        for q in [*self._commands, self._results]:
            q.cancel_join_thread()
            q.close()
        self._processes, self._commands, self._results, self._dealer = [], [], None, None


# ---------------------------------------------------------------------------------------------- Ray actors


class _RayWorker:
    """The actor Ray runs: prepared from the configuration when it starts (one torch thread), the worker built when
    its spec comes (:meth:`begin`)."""

    def __init__(self, worker_cls: type, config: Config) -> None:
        _one_torch_thread()
        self.worker_cls, self.prepared, self.worker = worker_cls, worker_cls.prepare(config), None

    def begin(self, spec: WorkerSpec, dealer: _RemoteDealer) -> bool:
        self.worker = self.worker_cls(spec, dealer, prepared=self.prepared)
        return True

    def set_policy(self, policy: PolicyWeights) -> None:
        self.worker.set_policy(policy)

    def collect(self) -> TransitionBatch:
        return self.worker.collect()


class _RemoteDealer:
    """A worker's handle on the dealer actor: one call per episode, and one per batch asked a batch ahead, so that
    the next grant travels while this batch steps (a round trip between actors costs milliseconds on a loaded
    machine). The grant asked ahead is the worker's as if it had asked then: every grant is used, none is dropped."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self._ahead: Any = None
        """The next grant's call in flight, or None."""

    def steps(self, want: int) -> Grant:
        import ray

        ahead, self._ahead = self._ahead, None
        grant = ray.get(ahead if ahead is not None else self.actor.steps.remote(want))
        if grant.steps and not grant.last:  # none ahead of a wait at a budget (the worker polls) or of the end
            self._ahead = self.actor.steps.remote(want)
        return grant

    def episode(self) -> int:
        import ray

        return ray.get(self.actor.episode.remote())


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """This process's environment with ``values`` set, restored on exit."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _package_root() -> str:
    """The directory holding this ace_hybrid package (a local Ray's workers import the learner's code)."""
    return str(Path(__file__).resolve().parents[2])


class RayExecutor:
    """Rollout workers as Ray actors (see the module docstring).

    ``address``: ``train.ray_address`` ("" for a local Ray). ``startup_seconds``: how long the actors may take to
    be placed and built before :meth:`start` gives up (a cluster without free CPUs would otherwise wait forever).
    """

    def __init__(self, address: str = "", worker_cls: type = RolloutWorker, startup_seconds: float = 600.0,
                 in_flight: int = 2) -> None:
        self.address = address
        self.worker_cls = worker_cls
        self.startup_seconds = float(startup_seconds)
        self.in_flight = int(in_flight)
        self._ray: Any = None
        self._owns_ray = False
        self._actors: list[Any] = []
        self._calls: list[deque[Any]] = []
        """Each worker's collect() calls in flight, oldest first: a worker's batches are read in the order it made
        them (``ray.wait`` alone could return its last batch before an earlier one that is also ready)."""
        self._done: set[int] = set()
        self._dealer: Any = None

    @property
    def finished(self) -> bool:
        return len(self._done) == len(self._actors)

    @property
    def actors(self) -> list[Any]:
        """The actor handles, by worker index."""
        return list(self._actors)

    def launch(self, config: Config, workers: int) -> None:
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if self.address:
                ray.init(address=self.address, **options)
            else:
                path = os.pathsep.join(p for p in (_package_root(), os.environ.get("PYTHONPATH", "")) if p)
                with _environ(PYTHONPATH=path):  # Ray's processes, started now, keep it; this one gets its own back
                    ray.init(num_cpus=max(workers, os.cpu_count() or 1), **options)
            self._owns_ray = True
        remote = ray.remote(num_cpus=1, max_restarts=0)(_RayWorker)
        self._actors = [remote.remote(self.worker_cls, config) for _ in range(workers)]  # they prepare meanwhile
        self._dealer = ray.remote(num_cpus=0, max_restarts=0)(Dealer).remote(Budget(0, 0, 0))  # dealt at start()

    def start(self, specs: list[WorkerSpec], policy: PolicyWeights, budget: Budget) -> None:
        if not self._actors:
            self.launch(specs[0].config, len(specs))
        if len(specs) != len(self._actors):
            raise ValueError(f"{len(specs)} worker specs for {len(self._actors)} launched workers")
        ray = self._ray
        try:  # the dealer's reset returns before any worker asks it for work (their collect calls come after)
            ray.get([self._dealer.reset.remote(budget),
                     *(a.begin.remote(spec, _RemoteDealer(self._dealer)) for a, spec in zip(self._actors, specs))],
                    timeout=self.startup_seconds)
        except ray.exceptions.GetTimeoutError:
            cpus = ray.cluster_resources().get("CPU", 0)
            raise WorkerError(f"Ray did not start the {len(specs)} rollout workers within {self.startup_seconds:.0f} s:"
                              f" each needs 1 CPU and the cluster has {cpus:g} (train.workers, train.ray_address)") \
                from None
        except ray.exceptions.RayError as exc:
            raise WorkerError(f"a rollout worker failed to start on Ray:\n{exc}") from None
        self.set_weights(policy)
        self._calls = [deque(actor.collect.remote() for _ in range(self.in_flight)) for actor in self._actors]

    def set_weights(self, policy: PolicyWeights) -> None:
        ref = self._ray.put(policy)
        for k, actor in enumerate(self._actors):
            if k not in self._done:
                actor.set_policy.remote(ref)

    def grant_until(self, step: int) -> None:
        self._dealer.grant_until.remote(step)  # the dealer actor runs its calls in order

    def collect(self, timeout: float) -> TransitionBatch | None:
        ray = self._ray
        oldest = {calls[0]: k for k, calls in enumerate(self._calls) if calls}
        if not oldest:
            time.sleep(timeout)
            return None
        ready, _ = ray.wait(list(oldest), num_returns=1, timeout=timeout)
        if not ready:
            return None
        k = oldest[ready[0]]
        self._calls[k].popleft()
        try:
            batch = ray.get(ready[0])
        except ray.exceptions.RayActorError as exc:
            raise WorkerError(f"rollout worker {k} died on Ray; its partial episode is lost (resume from the last "
                              f"checkpoint):\n{exc}") from None
        except ray.exceptions.RayError as exc:
            raise WorkerError(f"rollout worker {k} failed:\n{exc}") from None
        if batch.last:
            self._done.add(k)
            self._calls[k].clear()  # the calls after its last batch have no steps
        else:
            self._calls[k].append(self._actors[k].collect.remote())
        return batch

    def close(self) -> None:
        ray = self._ray
        if ray is None:
            return
        for actor in [*self._actors, self._dealer]:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self._actors, self._calls, self._dealer = [], [], None
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
        self._ray = None
