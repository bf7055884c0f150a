"""Rollout workers: one step path inline (train.workers = 0) and in local processes or Ray actors, one sequence of
episodes and one step budget whatever the number of workers, the same transitions from the same seeds, checkpoints and
resume, Ctrl-C, and workers that fail or die (tiny runs on the 14-substation grid)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("grid2op")

from ace_hybrid.config import load_config  # noqa: E402
from ace_hybrid.replay import MixedReplayBuffer  # noqa: E402
from ace_hybrid.training.checkpoint import load_checkpoint_file  # noqa: E402
from ace_hybrid.training.executors import LocalExecutor, RayExecutor, WorkerError  # noqa: E402
from ace_hybrid.training import loop  # noqa: E402
from ace_hybrid.training.loop import train  # noqa: E402
from ace_hybrid.training.dealer import Budget, Dealer  # noqa: E402
from ace_hybrid.training.rollout import episode_of, exploration_seed  # noqa: E402

import rollout_fixtures as fx  # noqa: E402 (tests/ is on sys.path: see conftest.py)
from process_fixtures import assert_children_exit_with_parent, start_cli_training, wait_for_checkpoint  # noqa: E402
from tiny_settings import TINY  # noqa: E402

pytestmark = pytest.mark.grid2op

TESTS = Path(__file__).resolve().parent
PACKAGE_ROOT = Path(__import__("ace_hybrid").__file__).resolve().parents[1]
QUIET = ["log.tensorboard=false", "train.workers=2", "train.worker_batch_steps=40"]
FIXED = [*QUIET, "train.updates_per_decision=0", "train.eval_every=0", "train.checkpoint_every=100000",
         "train.total_env_steps=160"]
"""A fixed policy: nothing is learned, nothing is sent after the first policy."""
ALIGNED = [*FIXED, "env.max_episode_steps=20", "train.worker_batch_steps=20", "train.tutor_steps=160",
           "train.tutor_budget=3", "replay.validated_capacity=400"]
"""A fixed policy that reads no normaliser (the tutor decides at every danger step), and episodes that all run 20 steps
(none blacks out), one per batch: every number of workers plays episodes 0-7 in full, whatever the timing."""
FIELDS = ("episode", "decision", "obs", "action", "reward", "next_obs", "done", "truncated", "max_rho", "blackout",
          "tutor", "version")


def tiny(*extra: str):
    return load_config(None, [*TINY, *extra])


def transitions(run_dir: Path) -> dict[str, np.ndarray]:
    """Both partitions of the run's last checkpoint (the tutor's decisions are in the LLM one), ordered by
    (episode, decision)."""
    replay = MixedReplayBuffer.load(run_dir / load_checkpoint_file(run_dir / "checkpoint.pt")["replay_file"])
    handles = np.concatenate([replay.rl_columns()["index"], np.arange(replay.validated_size, dtype=np.int64) * 2 + 1])
    rows = replay.get(handles)
    order = np.lexsort((rows.decision, rows.episode))
    return {k: getattr(rows, k)[order] for k in ("episode", "decision", "obs", "action", "reward", "next_obs",
                                                  "done", "truncated", "from_validated")}


def episodes(run_dir: Path) -> list[tuple[int, int, float]]:
    """(id, steps, blackout) of every finished episode the run logged, by id."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return sorted((x["episode/id"], x["episode/steps"], x["episode/blackout"]) for x in lines if "episode/id" in x)


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    for key, values in a.items():
        np.testing.assert_array_equal(values, b[key], err_msg=key)


def stored(monkeypatch: pytest.MonkeyPatch, cfg, run_dir: Path) -> dict[str, list]:
    """Train ``cfg``, recording every transition the learner stores, as it stores it (the inline worker's from its
    sink, a worker process's from its batches), ordered by (episode, decision)."""
    seen = []
    original = loop.store
    monkeypatch.setattr(loop, "store", lambda run, p: (seen.append(p), original(run, p)))
    train(cfg, run_dir)
    monkeypatch.setattr(loop, "store", original)
    seen.sort(key=lambda p: (p.episode, p.decision))
    return {k: [getattr(p, k) for p in seen] for k in FIELDS}


# ------------------------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(("override", "message"), [
    ("train.workers=-1", r"train.workers = -1 is invalid: must be in \[0, 64\]"),
    ("train.workers=65", r"train.workers = 65 is invalid: must be in \[0, 64\]"),
    ("train.sync_every=0", r"train.sync_every = 0 is invalid: must be >= 1"),
    ("train.executor=spark", r"train.executor = 'spark' is invalid: must be one of \('local', 'ray'\)"),
    ("train.worker_batch_steps=0", r"train.worker_batch_steps = 0 is invalid: must be in \[1, 100000\]"),
])
def test_bad_worker_options_fail_at_start_naming_the_value(override: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_config(None, [override])


def test_options_that_need_each_other_say_so() -> None:
    with pytest.raises(ValueError, match="train.executor = 'ray' is invalid: 'ray' runs rollout workers"):
        load_config(None, ["train.executor=ray"])
    with pytest.raises(ValueError, match="train.ray_address = 'auto' is invalid: is read only with"):
        load_config(None, ["train.workers=2", "train.ray_address=auto"])
    ace = ["llm.backend=smollm2", "train.workers=2"]
    with pytest.raises(ValueError, match="train.workers = 2 > 0 runs SAC without the LLM actor.*set ace.actor = "
                                         "false .* or train.workers = 0"):
        load_config(None, ace)
    assert load_config(None, [*ace, "ace.actor=false"]).train.workers == 2  # the critic runs in the learner
    assert load_config(None, ["train.workers=2", "train.executor=ray", "train.ray_address=auto"])


def test_one_dealer_hands_out_the_episodes_in_order_and_the_budget_once() -> None:
    dealer = Dealer(Budget(first_step=10, total_steps=25, first_episode=3))
    assert [dealer.steps(10) for _ in range(3)] == [(10, 10, False), (20, 5, True), (25, 0, True)]
    assert [dealer.episode() for _ in range(3)] == [3, 4, 5]
    import multiprocessing

    shared = Dealer.shared(multiprocessing.get_context("spawn"), Budget(0, 7, 0))
    assert [shared.steps(4), shared.steps(4), shared.episode(), shared.episode()] == [(0, 4, False), (4, 3, True),
                                                                                      0, 1]
    # A budget (train.keep_best_at): nothing past it until the learner lets the steps go on.
    held = Dealer(Budget(first_step=0, total_steps=25, first_episode=0, until=12))
    assert [held.steps(10), held.steps(10), held.steps(10)] == [(0, 10, False), (10, 2, False), (12, 0, False)]
    held.grant_until(40)
    assert [held.steps(10), held.steps(10)] == [(12, 10, False), (22, 3, True)]
    cfg = tiny("env.train_scenarios=[0, 1, 2]", "env.train_seed_start=100")
    assert [episode_of(cfg, k) for k in range(4)] == [(0, 100), (1, 101), (2, 102), (0, 103)]
    seeds = {exploration_seed(s, k) for s in (0, 1) for k in range(50)}
    assert len(seeds) == 100 and all(0 <= x < 2**63 for x in seeds)


def test_rates_are_measured_while_every_worker_runs() -> None:
    """Workers that start seconds apart must not be measured one after the other (a made-up clock)."""
    from ace_hybrid.training.metrics import Throughput

    now = [0.0]
    meter = Throughput(2, env_steps=0, updates=0, clock=lambda: now[0])
    arrivals = [(1, 0), (2, 0), (3, 1), (3, 0), (4, 0), (4, 1), (5, 0), (5, 1), (6, 1)]  # (time, worker)
    for t, k in arrivals:
        now[0] = float(t)
        meter.wait(0.5)
        meter.batch(k, 100, busy=0.9, lag_sum=3.0, rows=2, updates=10 * t)
    rates = meter.window("log", env_steps=900, updates=60)
    assert rates["rate/worker_env_steps_per_s"] == 150 and rates["rate/worker_1_env_steps_per_s"] == 400 / 6
    assert rates["rate/learner_updates_per_s"] == 10 and rates["rollout/policy_lag"] == 1.5
    meter.stop(env_steps=900, updates=60)
    out = meter.summary()
    assert out["startup_seconds"] == 1 and out["measured_seconds"] == 5
    assert out["env_steps_per_s"] == 200  # (3, 5]: both workers ran, 4 batches in 2 s
    assert out["overall_env_steps_per_s"] == 800 / 5 and out["learner_updates_per_s"] == 50 / 5
    assert out["learner_busy"] == 1 - 4 / 5  # 8 waits of 0.5 s after the first batch
    assert [w["env_steps_per_s"] for w in out["per_worker"]] == [100, 100]  # 400 in (1, 5], 300 in (3, 6]


def test_the_default_path_never_imports_ray() -> None:
    code = ("import sys\nimport ace_hybrid, ace_hybrid.cli, ace_hybrid.training.loop, ace_hybrid.training.executors\n"
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)})
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_ray_missing_names_the_extra_before_building_anything(tmp_path: Path) -> None:
    code = ("import sys\nsys.modules['ray'] = None  # import of ray halted: not installed\n"
            "from ace_hybrid.cli import main\n"
            "sys.exit(main(['train', '--config', 'l2rpn_case14_sandbox', '--set', 'train.workers=1', '--set', "
            f"'train.executor=ray', '--run-dir', {str(tmp_path / 'run')!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)})
    assert out.returncode == 2 and "pip install 'ace-hybrid[cluster]'" in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------- local processes


@pytest.mark.slow
def test_local_workers_train_save_and_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    summary = train(tiny(*QUIET, "train.total_env_steps=240", "train.tutor_steps=60", "train.tutor_budget=3",
                         "replay.validated_capacity=200"), run)
    assert summary["env_steps"] == 240 and summary["updates"] > 0
    rates = summary["rates"]
    assert sum(w["env_steps"] for w in rates["per_worker"]) == 240 and len(rates["per_worker"]) == 2
    assert rates["env_steps_per_s"] > 0 and rates["learner_updates_per_s"] > 0 and rates["startup_seconds"] > 0
    state = load_checkpoint_file(run / "checkpoint.pt")
    assert state["counters"]["env_steps"] == 240 and state["counters"]["decisions"] == summary["decisions"]
    replay = MixedReplayBuffer.load(run / state["replay_file"])
    # Every decision is one transition: the policy's in the RL partition, the tutor's (the run's first 60 steps) in
    # the validated partition.
    assert 0 < replay.validated_valid_size <= 60
    made = transitions(run)
    assert len(made["action"]) == summary["decisions"] and made["from_validated"].sum() == replay.validated_valid_size
    ids = np.unique(made["episode"])
    assert ids.tolist() == list(range(len(ids)))  # one sequence of episodes, not one per worker
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rated = [x for x in lines if "rate/learner_updates_per_s" in x]
    assert rated and all(f"rate/worker_{k}_env_steps_per_s" in x for x in rated for k in (0, 1))
    assert any("rollout/policy_lag" in x for x in rated) and any("sac/critic_loss" in x for x in lines)
    assert (run / "best.pt").is_file() and list((run / "eval").glob("*/evaluation.json"))

    saved_next = state["counters"]["next_episode"]
    resumed = train(None, run, resume=True, total_env_steps=300)
    assert resumed["env_steps"] == 300 and resumed["decisions"] > summary["decisions"]
    new = set(transitions(run)["episode"].tolist()) - set(ids.tolist())
    assert new and min(new) >= saved_next  # a resumed run never reuses an episode id
    steps = [json.loads(x)["env_steps"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps)


@pytest.mark.slow
def test_the_inline_worker_and_a_worker_process_make_the_same_transitions(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """One step path: a fixed policy (the initial networks, nothing learned) stepped in the learner's thread
    (train.workers = 0) and in one local worker process makes the same transitions, field by field, down to what only
    ACE reads (max rho, blackout)."""
    fixed = [*FIXED, "train.total_env_steps=120"]
    inline = stored(monkeypatch, tiny(*fixed, "train.workers=0"), tmp_path / "inline")
    process = stored(monkeypatch, tiny(*fixed, "train.workers=1"), tmp_path / "process")
    assert len(inline["action"]) > 20 and len(set(inline["episode"])) > 2 and any(inline["blackout"])
    for key in FIELDS:
        np.testing.assert_array_equal(np.asarray(inline[key]), np.asarray(process[key]), err_msg=key)


@pytest.fixture(scope="module")
def aligned_two_workers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("aligned") / "run"
    summary = train(tiny(*ALIGNED), run)
    assert summary["updates"] == 0 and sum(w["env_steps"] for w in summary["rates"]["per_worker"]) == 160
    return run


@pytest.mark.slow
def test_one_and_two_workers_play_the_same_episodes(aligned_two_workers: Path, tmp_path: Path) -> None:
    """Episodes come from one sequence and the budget is the run's: one worker and two play episodes 0-7 -- the same
    (scenario, seed) pairs, each in full -- and the same transitions (a fixed policy that reads no normaliser)."""
    train(tiny(*ALIGNED, "train.workers=1"), tmp_path / "one")
    played = episodes(aligned_two_workers)
    assert played == episodes(tmp_path / "one") == [(k, 20, 0.0) for k in range(8)]
    cfg = tiny(*ALIGNED)
    assert [episode_of(cfg, k) for k, _, _ in played] == [(k % 2, cfg.env.train_seed_start + k) for k in range(8)]
    assert_same(transitions(aligned_two_workers), transitions(tmp_path / "one"))


def test_a_worker_acts_with_the_learners_initial_actor_alone(make_grid_env) -> None:
    """What a worker builds: the actor the learner starts with, parameter for parameter, and no critics, targets or
    optimisers (the first Adam of a process imports torch._dynamo: seconds of start-up)."""
    import torch

    from ace_hybrid.sac import DiscreteSAC, SACPolicy
    from ace_hybrid.training.rollout import RolloutWorker, WorkerSpec
    from ace_hybrid.training.run import build_acting

    cfg = tiny()
    env = make_grid_env("l2rpn_case14_sandbox")
    prepared = RolloutWorker.prepare(cfg)
    worker = RolloutWorker(WorkerSpec(0, cfg, None), Dealer(Budget(0, 10, 0)), prepared=prepared)
    try:
        learner = build_acting(cfg, env, None).sac
        assert type(worker.sac) is SACPolicy and isinstance(learner, DiscreteSAC)
        assert not any(hasattr(worker.sac, k) for k in ("q1", "q1_target", "actor_opt", "critic_opt", "log_alpha"))
        mine, theirs = worker.sac.actor.state_dict(), learner.actor.state_dict()
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
        worker.sac.load_policy_state(learner.policy_state())  # what the learner sends fits
    finally:
        worker.close()


def test_workers_launched_before_the_run_is_built_get_their_spec_later() -> None:
    executor = LocalExecutor(worker_cls=fx.StampWorker)
    try:
        executor.launch(fx.spec(0).config, 2)  # the processes start (and prepare) before any spec exists
        assert len(executor.pids) == 2 and executor.collect(timeout=0.2) is None
        executor.start([fx.spec(0), fx.spec(1)], fx.policy(3), fx.budget())
        assert _versions(executor, until=lambda v: all(v.get(k) == 3 for k in (0, 1))) == {0: 3, 1: 3}
        with pytest.raises(ValueError, match="1 worker specs for 2 launched workers"):
            executor.start([fx.spec(0)], fx.policy(3), fx.budget())
    finally:
        executor.close()


def test_a_new_policy_reaches_the_workers() -> None:
    executor = LocalExecutor(worker_cls=fx.StampWorker)
    try:
        executor.start([fx.spec(0), fx.spec(1)], fx.policy(0), fx.budget())
        seen = _versions(executor, until=lambda v: all(v.get(k) == 0 for k in (0, 1)))
        executor.set_weights(fx.policy(7))
        seen = _versions(executor, until=lambda v: all(v.get(k) == 7 for k in (0, 1)))
        assert seen == {0: 7, 1: 7}
    finally:
        executor.close()


def _versions(executor, until, seconds: float = 60.0) -> dict[int, int]:
    """Collect batches until ``until(latest version per worker)`` holds (a clear failure, never a hang)."""
    latest: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    while not until(latest):
        assert time.monotonic() < deadline, f"versions seen: {latest}"
        batch = executor.collect(timeout=0.5)
        if batch is not None:
            latest[batch.worker] = batch.transitions[0].version
    return latest


def _collect_until_finished(executor, seconds: float = 60.0) -> dict[int, list[int]]:
    """Each worker's batch numbers (CountingWorker), in the order the executor gave them."""
    seen: dict[int, list[int]] = {0: [], 1: []}
    deadline = time.monotonic() + seconds
    while not executor.finished:
        assert time.monotonic() < deadline, f"batches seen: {seen}"
        batch = executor.collect(timeout=0.5)
        if batch is not None:
            seen[batch.worker] += [p.decision for p in batch.transitions]
    return seen


def test_local_batches_come_in_order_and_all_before_finished() -> None:
    executor = LocalExecutor(worker_cls=fx.CountingWorker)
    try:
        executor.start([fx.spec(0), fx.spec(1)], fx.policy(0), fx.budget())
        assert _collect_until_finished(executor) == {0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4]}
    finally:
        executor.close()


def test_a_worker_that_raises_is_a_clear_error() -> None:
    executor = LocalExecutor(worker_cls=fx.BrokenWorker)
    try:
        executor.start([fx.spec(0)], fx.policy(0), fx.budget())
        with pytest.raises(WorkerError, match="(?s)rollout worker 0 failed.*worker 0 broken on purpose"):
            _versions(executor, until=lambda v: False)
    finally:
        executor.close()


def test_a_killed_worker_is_a_clear_error_not_a_hang() -> None:
    executor = LocalExecutor(worker_cls=fx.StampWorker)
    try:
        executor.start([fx.spec(0), fx.spec(1)], fx.policy(0), fx.budget())
        _versions(executor, until=lambda v: len(v) == 2)
        os.kill(executor.pids[1], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(WorkerError, match=r"rollout worker 1 \(pid \d+\) was killed by SIGKILL"):
            _versions(executor, until=lambda v: False)
        assert time.monotonic() - started < 30
    finally:
        executor.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_exit_when_the_learner_is_killed(tmp_path: Path) -> None:
    code = (f"import sys, time\nsys.path.insert(0, {str(TESTS)!r})\nimport rollout_fixtures as fx\n"
            "from ace_hybrid.training.executors import LocalExecutor\n"
            "if __name__ == '__main__':\n"
            "    ex = LocalExecutor(worker_cls=fx.StampWorker)\n"
            "    ex.start([fx.spec(0), fx.spec(1)], fx.policy(0), fx.budget())\n"
            "    print(*ex.pids, flush=True)\n"
            "    time.sleep(600)\n")
    script = tmp_path / "learner.py"
    script.write_text(code)
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}) as learner:
        try:
            pids = [int(p) for p in learner.stdout.readline().split()]
            assert len(pids) == 2
            assert_children_exit_with_parent(learner, pids, timeout=30)
        finally:
            if learner.poll() is None:
                learner.kill()


@pytest.mark.slow
def test_ctrl_c_stops_the_workers_and_saves(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the whole process group: the workers ignore it, the learner saves and exits."""
    sets = [*TINY, *QUIET, "train.eval_every=0", "train.total_env_steps=100000", "train.checkpoint_every=80"]
    proc, run, out, err = start_cli_training(tmp_path, sets)
    try:
        wait_for_checkpoint(proc, run, err)
        first = load_checkpoint_file(run / "checkpoint.pt")["counters"]["env_steps"]
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == 130, err.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in err.read_text() and "KeyboardInterrupt" not in err.read_text()
    state = load_checkpoint_file(run / "checkpoint.pt")
    final = state["counters"]["env_steps"]
    assert final >= first and f"interrupted after {final} environment steps" in out.read_text()
    assert len(MixedReplayBuffer.load(run / state["replay_file"])) == state["counters"]["decisions"]


@pytest.mark.slow
def test_the_llm_critic_runs_in_the_learner(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    import llm_fixtures

    model = llm_fixtures.build_tiny_model(tmp_path / "tiny_lm")
    ace = ["llm.backend=transformers", f"llm.model_path={model}", "ace.actor=false", "ace.critic_start=0",
           "ace.critic_every=1", "ace.r_key=0.0", "ace.critic_trajectories=1", "ace.async_llm=false",
           "ace.pace_budget=false", "env.max_episode_steps=25"]
    summary = train(tiny(*QUIET, *ace, "train.total_env_steps=120", "train.eval_every=0"), tmp_path / "run")
    critic = summary["llm"]["critic"]
    assert summary["env_steps"] == 120 and critic["rounds"] >= 1 and critic["adjusted_steps"] > 0
    assert summary["llm"]["actor_calls"] == 0


# -------------------------------------------------------------------------------------------------- Ray


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    path = os.pathsep.join([str(PACKAGE_ROOT), str(TESTS)])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_workers_make_the_local_transitions(ray_cluster, aligned_two_workers: Path, tmp_path: Path) -> None:
    summary = train(tiny(*ALIGNED, "train.executor=ray"), tmp_path / "run")
    assert sum(w["env_steps"] for w in summary["rates"]["per_worker"]) == 160
    assert episodes(tmp_path / "run") == episodes(aligned_two_workers)
    assert_same(transitions(aligned_two_workers), transitions(tmp_path / "run"))
    assert ray_cluster.is_initialized()  # a Ray the caller started is the caller's to stop


@pytest.mark.slow
def test_ray_workers_train_and_save(ray_cluster, tmp_path: Path) -> None:
    run = tmp_path / "run"
    summary = train(tiny(*QUIET, "train.executor=ray", "train.total_env_steps=160", "train.sync_every=5"), run)
    assert summary["env_steps"] == 160 and summary["updates"] > 0 and summary["rates"]["policy_lag"] >= 0
    state = load_checkpoint_file(run / "checkpoint.pt")
    assert state["counters"]["env_steps"] == 160
    assert len(MixedReplayBuffer.load(run / state["replay_file"])) == summary["decisions"]


def test_ray_batches_come_in_order_and_all_before_finished(ray_cluster) -> None:
    """Two calls in flight per actor: the last batch must not be read before an earlier one that is also ready."""
    executor = RayExecutor(worker_cls=fx.CountingWorker)
    try:
        executor.start([fx.spec(0), fx.spec(1)], fx.policy(0), fx.budget())
        time.sleep(1.0)  # both calls of each actor done before the first read
        assert _collect_until_finished(executor) == {0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4]}
    finally:
        executor.close()


def test_a_killed_ray_worker_is_a_clear_error(ray_cluster) -> None:
    executor = RayExecutor(worker_cls=fx.StampWorker)
    try:
        executor.start([fx.spec(0), fx.spec(1)], fx.policy(0), fx.budget())
        _versions(executor, until=lambda v: len(v) == 2)
        ray_cluster.kill(executor.actors[0])
        with pytest.raises(WorkerError, match="rollout worker 0 died on Ray"):
            _versions(executor, until=lambda v: False)
    finally:
        executor.close()
