"""The training loop: act, store, refine and shape (the LLM), update, evaluate, log, save.

The agent decides only in danger states (max rho >= ``env.threshold``); between decisions the safe rule steps the
grid. One transition is stored per decision (a semi-MDP): its reward is accumulated over every environment step
until the next decision (see :class:`~ace_hybrid.config.RewardConfig`), its next observation is the next decision's
observation, and the discount applies per decision (gamma per transition, not gamma^k: the value counts decisions).

Acting has one path, the rollout worker (:mod:`ace_hybrid.training.rollout`); this module is the learner
(:func:`learn`), the same for any ``train.workers``: it collects what the worker(s) made from an executor
(:mod:`ace_hybrid.training.executors`) -- the inline worker in this thread for 0, local processes or Ray actors for
N --, stores it, updates ``updates_per_decision`` times per stored transition, sends the policy to remote workers
every ``train.sync_every`` updates, and evaluates, logs and saves on the environment-step schedule. The inline
worker makes one environment step per batch and stores each transition as it completes, so with 0 workers the loop
still decides, stores and updates step by step, as a classic loop does.

With ``llm.backend`` other than "none" the run is ACE (:mod:`ace_hybrid.training.ace`): each decision keeps a
snapshot of the environment, a completed bad transition goes to the LLM policy actor (its validated proposals fill
the replay's validated partition), the LLM value critic reshapes stored trajectories after episodes, and co-evolution
fine-tunes the LLM's LoRA adapter (saved under ``adapters/``, named in the checkpoint). The LLM works on a worker
thread behind a bounded queue (``ace.async_llm``): the loop hands work over and commits results at its hooks, never
waiting, except at the end, when the queue drains before the last checkpoint.

Run directory layout::

    config.json          the full configuration of the run
    checkpoint.pt        the latest checkpoint (networks, optimisers, normaliser, counters, generators)
    replay-<d>-<u>.bin   the replay buffer the checkpoint refers to (after d decisions and u updates)
    best.pt              the checkpoint with the best evaluation survival so far
    best-<steps>.pt      best.pt as it was at each train.keep_best_at budget (its replay file is not kept)
    metrics.jsonl        one JSON line per log interval and per evaluation
    refinements.jsonl    one JSON line per bad transition the LLM actor refined (ACE runs)
    events.*             TensorBoard event files
    eval/                each evaluation's JSON and markdown
    adapters/round-<k>/  the LoRA adapter after each co-evolution round (ACE runs)

Checkpoints: :mod:`ace_hybrid.training.checkpoint`.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ace_hybrid.config import Config, config_from_dict
from ace_hybrid.files import atomic_write, remove_stale_temps
from ace_hybrid.grid.evaluation import EvaluationReport, evaluate
from ace_hybrid.replay import ReplayBatch
from ace_hybrid.sac import UpdateBatch
from ace_hybrid.training.ace import attach_llm
from ace_hybrid.training.checkpoint import clock_train_time, restore, save_checkpoint
from ace_hybrid.training.executors import Executor, import_ray, make_executor, remote_executor
from ace_hybrid.training.limiter import SampleToInsertRatio
from ace_hybrid.training.metrics import Throughput
from ace_hybrid.training.policy import agent_of
from ace_hybrid.training.rollout import TransitionBatch, next_hold, plan_workers, policy_weights, session_budget
from ace_hybrid.training.run import Pending, Run

__all__ = ["StopOnSigint", "TrainingInterrupted", "learn", "train"]

log = logging.getLogger(__name__)


def train(cfg: Config | None, run_dir: str | Path, *, resume: bool = False,
          total_env_steps: int | None = None) -> dict[str, Any]:
    """Train SAC (ACE when ``cfg.llm.backend`` is not "none") as ``cfg`` says; returns the final summary.

    With ``resume``, the configuration saved in ``run_dir`` is used (``cfg`` is ignored) and ``total_env_steps``, if
    given, extends or shortens the budget.

    Raises
    ------
    TrainingInterrupted
        After the first Ctrl-C (SIGINT, main thread only): the run stops after the current environment step and
        saves a checkpoint first. A second Ctrl-C raises KeyboardInterrupt at once, without saving.
    """
    if cfg is not None and not resume and cfg.train.executor == "ray":
        import_ray()  # a missing Ray fails now, not after the environments are built
    run, executor = _open_and_launch(cfg, Path(run_dir), resume, total_env_steps)
    try:
        bar = _progress(run)
        run.clock = time.perf_counter()
        try:
            with StopOnSigint(run):
                learn(run, bar, executor)
                run.throughput.stop(run.counters.env_steps, run.counters.updates)
                if run.llm is not None and not run.stop_requested:  # the LLM's queued work, before the last save
                    _llm_hook(run, run.llm.drain, run)
                if run.stop_requested:
                    save_checkpoint(run)
                    run.logger.close()
                    raise TrainingInterrupted(summary(run))
        finally:
            clock_train_time(run)
            bar.close()
            if run.llm is not None:
                run.llm.close()
    finally:
        if executor is not None:
            executor.close()
    if not run.counters.eval_history or run.counters.eval_history[-1]["env_steps"] != run.counters.env_steps:
        evaluate_and_keep_best(run)
    save_checkpoint(run)
    run.logger.close()
    return summary(run)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped :func:`train` after it saved a checkpoint; ``summary`` is the run's summary at that point."""

    def __init__(self, summary: dict[str, Any]) -> None:
        super().__init__(f"training interrupted after {summary['env_steps']} environment steps (checkpoint saved)")
        self.summary = summary


class StopOnSigint:
    """While active, the first SIGINT only sets ``run.stop_requested`` (the loop stops at a consistent point to
    save); the handler then steps aside, so a second one raises KeyboardInterrupt. Active only in the main thread and
    when SIGINT has Python's default handler (not when it is ignored or handled by the caller)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._installed = False

    def __enter__(self) -> None:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            signal.signal(signal.SIGINT, self._handle)
            self._installed = True

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _handle(self, signum: int, frame: Any) -> None:
        # No printing here: the signal may arrive while the progress bar writes to stderr.
        self.run.stop_requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _open(cfg: Config | None, run_dir: Path, resume: bool, total_env_steps: int | None) -> Run:
    """A new run in ``run_dir``, or the one saved there (``resume``); temporary files of killed saves are removed."""
    if resume:
        _remove_stale_temps(run_dir)
        return restore(run_dir, total_env_steps)
    if cfg is None:
        raise ValueError("a new run needs a configuration")
    if (run_dir / "checkpoint.pt").exists():
        raise FileExistsError(f"{run_dir} already holds a run: use --resume {run_dir} or another --run-dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(run_dir)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    run = Run(cfg, run_dir)
    if cfg.train.init_policy or cfg.train.tutor_data:
        from ace_hybrid.training.junior import init_from_junior, store_tutor_data

        if cfg.train.init_policy:
            init_from_junior(run, cfg.train.init_policy)
            if cfg.sac.anchor_weight > 0:
                run.sac.set_anchor()
        if cfg.train.tutor_data:
            store_tutor_data(run, cfg.train.tutor_data)
    attach_llm(run)
    return run


def _open_and_launch(cfg: Config | None, run_dir: Path, resume: bool,
                     total_env_steps: int | None) -> tuple[Run, Executor | None]:
    """Open the run (:func:`_open`) and, with ``train.workers``, launch its rollout workers at the same time
    (:meth:`Executor.launch`): they import torch and grid2op and build their grids while the run is built, on a
    helper thread while this one starts them (Ray's start-up takes seconds). The executor is None without workers,
    and when the run will not open (a new run where one exists, an unreadable saved configuration: opening says
    why)."""
    launch = _worker_config(cfg, run_dir, resume)
    if launch is None:
        return _open(cfg, run_dir, resume, total_env_steps), None
    executor = remote_executor(launch)
    with ThreadPoolExecutor(1, thread_name_prefix="open-run") as pool:
        opened = pool.submit(_open, cfg, run_dir, resume, total_env_steps)
        try:
            executor.launch(launch, launch.train.workers)
            return opened.result(), executor
        except BaseException:
            executor.close()
            raise


def _worker_config(cfg: Config | None, run_dir: Path, resume: bool) -> Config | None:
    """The configuration to launch rollout workers with before the run is open (see :func:`_open_and_launch`)."""
    if resume:
        try:
            cfg = config_from_dict(json.loads((run_dir / "config.json").read_text()))
        except (OSError, ValueError):
            return None
    elif cfg is None or (run_dir / "checkpoint.pt").exists():
        return None
    return cfg if cfg.train.workers else None


def _remove_stale_temps(run_dir: Path) -> None:
    removed = remove_stale_temps(run_dir)
    if removed:
        log.info("removed %d temporary file(s) left in %s by saves that were killed", len(removed), run_dir)


def learn(run: Run, bar: Any, executor: Executor | None = None) -> None:
    """The learner, for any ``train.workers`` (see the module docstring): until the step budget is spent (or
    Ctrl-C), store what the worker(s) made, update, send the policy, and evaluate / log / save on schedule. The
    learner waits on the executor when it has nothing to do, so an environment-bound run leaves the cores to the
    workers. With ``train.samples_per_insert`` (and workers) it updates at that ratio instead of per decision of each
    batch (:mod:`ace_hybrid.training.limiter`). ``executor``: workers launched already (:func:`train` starts them
    before it builds the run); None makes the run's own."""
    cfg, c = run.cfg, run.counters
    run.throughput = Throughput(cfg.train.workers, c.env_steps, c.updates)
    if cfg.train.eval_at_start and c.env_steps == 0 and not c.eval_history:  # the policy the run starts from
        evaluate_and_keep_best(run)
        save_checkpoint(run)
    if keep_best_at_budgets(run):  # reached by a run that stopped before it could keep them
        save_checkpoint(run)
    if c.env_steps >= cfg.train.total_env_steps:  # a resumed run whose budget is spent: no worker to start
        return
    executor = executor if executor is not None else make_executor(run, lambda p: store(run, p))
    limiter = run.throughput.limiter = SampleToInsertRatio.of(cfg)
    try:
        budget = session_budget(run)
        executor.start(plan_workers(run), policy_weights(run), budget)
        sync, hold = _WeightSync(run, executor), budget.until
        while not executor.finished and not run.stop_requested:
            owed = limiter is not None and limiter.owed()
            batch = _collect(run, executor, timeout=0.0 if owed else 0.5)  # owed: update when no batch is ready
            if batch is None:
                if owed:
                    _sample(run, limiter, sync)
                continue
            before = c.env_steps
            store_batch(run, batch)
            if limiter is None:
                _update_per_decision(run, batch, sync)
            else:
                limiter.insert(batch.decisions if len(run.replay) >= cfg.train.learning_starts else 0)
                _catch_up(run, limiter, sync, settle=c.env_steps == hold)  # all owed before an evaluation at a hold
            bar.update(c.env_steps - before)
            _postfix(run, bar, batch)
            on_schedule(run, since=before)
            if next_hold(run) != hold:  # the learner evaluated at the budget where the workers wait
                hold = next_hold(run)
                executor.grant_until(hold)
        if limiter is not None:
            _catch_up(run, limiter, sync, settle=True)
        run.throughput.stop(c.env_steps, c.updates)  # the workers' part ends here, not when they have exited
    finally:
        executor.close()


class _WeightSync:
    """Sends the workers the learner's policy after every ``train.sync_every`` updates."""

    def __init__(self, run: Run, executor: Executor) -> None:
        self.run, self.executor, self.synced = run, executor, run.counters.updates

    def __call__(self) -> None:
        if self.run.counters.updates - self.synced >= self.run.cfg.train.sync_every:
            self.executor.set_weights(policy_weights(self.run))
            self.synced = self.run.counters.updates


def _update_per_decision(run: Run, batch: TransitionBatch, sync: _WeightSync) -> None:
    """``updates_per_decision`` updates per decision of ``batch`` before the next batch (the limiter off)."""
    for _ in range(batch.decisions):
        if run.stop_requested:
            break
        update(run)
        sync()


def _sample(run: Run, limiter: SampleToInsertRatio, sync: _WeightSync) -> None:
    limiter.sample(update(run, 1))
    sync()


def _catch_up(run: Run, limiter: SampleToInsertRatio, sync: _WeightSync, settle: bool) -> None:
    """Update while the learner is behind the ratio (the workers' batches wait meanwhile); with ``settle``, until it
    owes nothing (before an evaluation at a budget, and at the end)."""
    while not run.stop_requested and (limiter.behind() or settle and limiter.owed()):
        _sample(run, limiter, sync)


def _collect(run: Run, executor: Executor, timeout: float) -> TransitionBatch | None:
    """The next batch; with remote workers, the time waited for it is the learner's idle time."""
    t0 = time.perf_counter()
    batch = executor.collect(timeout=timeout)
    if run.cfg.train.workers:
        waited = time.perf_counter() - t0
        run.time_split["wait"] = run.time_split.get("wait", 0.0) + waited
        run.throughput.wait(waited)
    return batch


def store_batch(run: Run, b: TransitionBatch) -> None:
    """A worker's batch into the run: its transitions into the normaliser and the replay (:func:`store`, in the
    worker's order, so its episodes chain in the RL partition; the inline worker's are stored already), its steps,
    episodes and timings into the counters; each finished episode is logged and handed to ACE's episode hook."""
    c = run.counters
    if b.transitions:
        run.normalizer.update(np.stack([p.obs for p in b.transitions]))
    for p in b.transitions:
        store(run, p)
    c.decisions += b.decisions
    c.env_steps += b.env_steps
    if b.started:
        c.next_episode = max(c.next_episode, max(b.started) + 1)
    if run.cfg.train.workers:
        lag = float(sum(c.updates - p.version for p in b.transitions))
        run.throughput.batch(b.worker, b.env_steps, b.seconds["busy"], lag, len(b.transitions), c.updates,
                             b.seconds.get("blocked", 0.0))
    for key in ("env", "reset", "tutor", "act", "llm"):
        run.time_split[key] = run.time_split.get(key, 0.0) + b.seconds[key]
    run.safe_rule_seconds += b.seconds["safe_rule_simulate"]
    for k, steps, blackout in b.finished:
        c.episodes += 1
        run.logger.write(c.env_steps, {"episode/id": k, "episode/steps": steps, "episode/blackout": float(blackout)})
        if run.llm is not None:
            _llm_hook(run, run.llm.after_episode, run)


def store(run: Run, p: Pending) -> None:
    """One completed semi-MDP transition into the RL partition (raw features: normalised when sampled), then the LLM
    actor's look at it (ACE runs). A tutor's decision goes to the validated partition instead (I_v = 1, improvement
    0: all tutor decisions weigh alike in Eq. 8; refinements that beat the policy by more weigh more)."""
    if p.tutor:
        run.replay.add_validated(p.obs, p.action, p.reward, p.next_obs, p.done, p.truncated, p.episode, p.decision, 0.0,
                           True)
        return
    run.replay.add_rl(p.obs, p.action, p.reward, p.next_obs, p.done, p.truncated, p.episode, p.decision)
    if run.llm is not None:
        _llm_hook(run, run.llm.after_store, run, p)


def _postfix(run: Run, bar: Any, b: TransitionBatch) -> None:
    """The progress bar's figures: the learner's and workers' rates with remote workers (at most once a second),
    the last episode's length with the inline worker."""
    c = run.counters
    if run.cfg.train.workers:
        rates = run.throughput.window("bar", c.env_steps, c.updates, min_seconds=1.0)
        if rates is not None:
            bar.set_postfix(learner=f"{rates['rate/learner_updates_per_s']:.1f}upd/s",
                            workers=f"{rates['rate/worker_env_steps_per_s']:.0f}steps/s", decisions=c.decisions,
                            **_llm_postfix(run), refresh=False)
    elif b.finished:
        bar.set_postfix(decisions=c.decisions, survived=b.finished[-1][1], **_llm_postfix(run), refresh=False)


def _llm_hook(run: Run, hook: Any, *args: Any) -> None:
    """Run an LLM hook, timing it as LLM time and logging what it reports."""
    t0 = time.perf_counter()
    metrics = hook(*args)
    run.time_split["llm"] += time.perf_counter() - t0
    if metrics:
        run.logger.write(run.counters.env_steps, metrics)


def _llm_postfix(run: Run) -> dict[str, Any]:
    if run.llm is None:
        return {}
    m = run.llm.metrics()
    return {"llm_calls": int(m["llm/calls"]), "accepted": int(m["llm/accepted"])}


def update(run: Run, n: int | None = None) -> int:
    """``n`` (default ``updates_per_decision``) SAC updates on prioritised batches, none before the replay holds
    ``train.learning_starts`` transitions; priorities from the new TD errors. Returns how many were made."""
    cfg = run.cfg
    n = cfg.train.updates_per_decision if n is None else n
    if n == 0 or len(run.replay) < cfg.train.learning_starts:
        return 0
    t0 = time.perf_counter()
    for _ in range(n):
        drawn = run.replay.sample(cfg.sac.batch_size, is_exponent=cfg.replay.is_exponent)
        result = run.sac.update(update_batch(run, drawn))
        run.replay.update_priorities(drawn.index, np.abs(result.td_error) + cfg.replay.priority_eps)
        run.counters.updates += 1
    run.time_split["update"] += time.perf_counter() - t0
    if run.counters.updates % 10 == 0:
        run.logger.write(run.counters.env_steps, {f"sac/{k}": v for k, v in result.metrics.items()})
    return n


def update_batch(run: Run, drawn: ReplayBatch) -> UpdateBatch:
    """What SAC learns from a replay batch: observations normalised, the legal masks of both states rebuilt from the
    stored features, the IS weights, and (``train.imitation_weight``) the imitation weight of the validated rows --
    the tutor's decisions and accepted LLM refinements, which pull the policy towards their actions."""
    imitation = None
    if run.cfg.train.imitation_weight > 0:
        imitation = run.cfg.train.imitation_weight * (drawn.from_validated & drawn.valid).astype(np.float32)
    return UpdateBatch(obs=run.normalizer(drawn.obs), action=drawn.action, reward=drawn.reward,
                       next_obs=run.normalizer(drawn.next_obs), done=drawn.done, weight=drawn.weight,
                       legal_mask=run.masks(drawn.obs), next_legal_mask=run.masks(drawn.next_obs), imitation=imitation)


def on_schedule(run: Run, since: int | None = None) -> None:
    """Commit the LLM's finished work (ACE), then log, evaluate and checkpoint when their intervals come up.

    ``since``: the step count before the steps just made (default: one step ago). A worker's batch may pass
    several due times at once: each comes up once, at the batch that reaches it. With rollout workers the log line
    carries the learner's and the workers' rates (:class:`~ace_hybrid.training.metrics.Throughput`).
    """
    c, cfg = run.counters, run.cfg
    since = c.env_steps - 1 if since is None else since
    if run.llm is not None:
        _llm_hook(run, run.llm.poll, run)
    if c.env_steps // cfg.log.log_every > since // cfg.log.log_every:
        rates = run.throughput.window("log", c.env_steps, c.updates) if cfg.train.workers else None
        run.logger.write(c.env_steps, {"train/decisions": c.decisions, "train/updates": c.updates,
                                       "train/replay": len(run.replay), **{f"time/{k}": v for k, v in
                                                                           run.time_split.items()}, **(rates or {})})
    # Each due time moves on before its save, so the checkpoint does not count it as still due (a resumed run would
    # save again at once). A budget kept is saved at once, so a resumed run never keeps it again.
    if cfg.train.eval_every and c.env_steps >= c.next_eval:
        c.next_eval = _next_due(c.next_eval, cfg.train.eval_every, c.env_steps)
        evaluate_and_keep_best(run)
    kept = keep_best_at_budgets(run)
    if c.env_steps >= c.next_checkpoint:
        c.next_checkpoint = _next_due(c.next_checkpoint, cfg.train.checkpoint_every, c.env_steps)
        save_checkpoint(run)
    elif kept:
        save_checkpoint(run)


def _next_due(due: int, every: int, now: int) -> int:
    """The first due time after ``now`` on the grid ``due + k * every`` (``due + every`` when ``now == due``)."""
    return due + every * ((now - due) // every + 1)


def evaluate_and_keep_best(run: Run) -> EvaluationReport:
    """Evaluate the deterministic policy on the held-out pairs; keep ``best.pt`` when survival improves."""
    t0 = time.perf_counter()
    cfg, c = run.cfg, run.counters
    pairs = [(int(s), int(seed)) for s, seed in cfg.env.eval_pairs]
    report = evaluate(run.eval_env, agent_of(run, run.eval_env), pairs, agent_name="sac",
                      max_steps=cfg.env.eval_max_steps or None, progress=False)
    totals = report.totals()
    report.save(run.dir / "eval" / f"step-{c.env_steps:08d}")
    c.eval_history.append({"env_steps": c.env_steps, **totals})
    run.logger.write(c.env_steps, {"eval/survival_rate": totals["survival_rate"],
                                   "eval/mean_reward": totals["mean_reward"]})
    run.time_split["eval"] += time.perf_counter() - t0
    if totals["survival_rate"] > c.best_survival:
        c.best_survival = totals["survival_rate"]
        save_checkpoint(run, name="best.pt")
    return report


def keep_best_at_budgets(run: Run) -> list[int]:
    """At each ``train.keep_best_at`` budget the run has reached (the workers wait there, so it is reached exactly):
    evaluate on ``env.eval_pairs`` unless that was just done at this step, then copy ``best.pt`` -- chosen on what was
    known by then -- to ``best-<steps>.pt`` (atomically), as if training had stopped there. Returns the budgets kept
    now (the caller saves a checkpoint, so a resumed run neither loses nor recomputes them)."""
    c = run.counters
    done = {k["env_steps"] for k in c.kept_best}
    due = [b for b in sorted(run.cfg.train.keep_best_at) if b <= c.env_steps and b not in done]
    if not due:
        return []
    if not c.eval_history or c.eval_history[-1]["env_steps"] != c.env_steps:
        evaluate_and_keep_best(run)
    clock_train_time(run)
    llm = run.llm.metrics() if run.llm is not None else {}
    for budget in due:
        best = (run.dir / "best.pt").read_bytes()
        atomic_write(run.dir / f"best-{budget}.pt", lambda f: f.write(best))
        c.kept_best.append({"env_steps": budget, "decisions": c.decisions, "updates": c.updates,
                            "train_seconds": c.train_seconds,
                            **({"llm_calls": llm["llm/calls"], "llm_accepted": llm["llm/accepted"]} if llm else {})})
        log.info("kept best.pt at %d environment steps as best-%d.pt", c.env_steps, budget)
    return due


def summary(run: Run) -> dict[str, Any]:
    """What ``train`` returns: counters, the last evaluation, time split, the learner's and workers' rates
    (``rates``: :meth:`Throughput.summary`, what a throughput benchmark reads) and (ACE) the LLM's totals."""
    c = run.counters
    last = c.eval_history[-1] if c.eval_history else {}
    split = {**run.time_split, "safe_rule_simulate": run.safe_rule_seconds}
    out = {"env_steps": c.env_steps, "decisions": c.decisions, "updates": c.updates, "episodes": c.episodes,
           "best_survival": c.best_survival, "last_eval": last, "train_seconds": c.train_seconds,
           "time_split": split, "kept_best": list(c.kept_best), "run_dir": str(run.dir)}
    if run.throughput is not None:
        out["rates"] = run.throughput.summary()
    if run.llm is not None:
        out["llm"] = run.llm.summary()
    out["warnings"] = _warnings(run)
    return out


def _warnings(run: Run) -> list[str]:
    """What the user should know about a run that ran but did not learn."""
    c, t = run.counters, run.cfg.train
    if c.updates or c.env_steps == 0:
        return []
    if t.updates_per_decision == 0:
        return ["no SAC update was made: train.updates_per_decision = 0"]
    return [(f"no SAC update was made: updates start when the replay holds train.learning_starts = "
             f"{t.learning_starts} transitions, and the run made {c.decisions} decisions (one transition each) in "
             f"{c.env_steps} environment steps; train longer or lower train.learning_starts")]


def _progress(run: Run) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=run.cfg.train.total_env_steps, initial=run.counters.env_steps, unit="step",
                desc=f"train {run.cfg.env.name}", disable=not run.cfg.log.progress, dynamic_ncols=True)
