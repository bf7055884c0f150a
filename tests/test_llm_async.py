"""The LLM beside the loop (ace.async_llm): the worker's bounded queue and its overflow policy, ownership of what is
handed over, and ACE through the training loop -- the loop keeps stepping while the LLM works, one thread owns the
backend, a checkpoint taken while work is pending loses nothing accepted, and the synchronous path stays
deterministic."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"

import llm_fixtures as fixtures  # tests/ is on sys.path: see conftest.py
import numpy as np
import pytest
import tiny_settings
from ace_hybrid.config import load_config
from ace_hybrid.training.llm_worker import InlineWorker, LLMWorker


class _Job:
    """A test job: waits for ``gate`` (if any), records where and when it ran, and whether it was discarded."""

    def __init__(self, name: str, log: list, *, droppable: bool = True, gate: threading.Event | None = None,
                 sleep: float = 0.0, fail: bool = False) -> None:
        self.name, self.log, self.droppable, self.gate, self.sleep, self.fail = name, log, droppable, gate, sleep, fail
        self.discarded = 0
        self.span: tuple[float, float] | None = None

    def run(self, slot: int) -> str:
        started = time.monotonic()
        if self.gate is not None:
            assert self.gate.wait(10)
        time.sleep(self.sleep)
        if self.fail:
            raise KeyError("a bug in a job")
        self.log.append((self.name, threading.current_thread().name))
        self.span = (started, time.monotonic())
        return self.name.upper()

    def discard(self) -> None:
        self.discarded += 1


def _drain(worker: LLMWorker, n: int) -> list:
    out: list = []
    deadline = time.monotonic() + 10
    while len(out) < n and time.monotonic() < deadline:
        worker.wait(0.5)
        out += worker.collect()
    return out


def _blocked(worker: LLMWorker, log: list) -> threading.Event:
    """Occupy the worker's thread with a job that waits for the returned gate."""
    gate = threading.Event()
    worker.submit(_Job("blocker", log, gate=gate))
    deadline = time.monotonic() + 5
    while worker.depth and time.monotonic() < deadline:  # until the thread has taken it
        time.sleep(0.005)
    return gate


# ------------------------------------------------------------------------------------------------- the queue

def test_a_full_queue_drops_the_oldest_waiting_job_and_counts_it() -> None:
    log: list = []
    worker = LLMWorker(2, "drop_oldest")
    try:
        gate = _blocked(worker, log)
        jobs = [_Job(f"j{k}", log) for k in range(4)]
        assert all(worker.submit(j) for j in jobs)  # each new one gets in ...
        assert worker.stats.dropped == 2 and worker.depth == 2 and worker.stats.max_depth == 2
        assert [j.discarded for j in jobs] == [1, 1, 0, 0]  # ... the oldest are evicted and released at once
        gate.set()
        done = _drain(worker, 3)
    finally:
        worker.close()
    assert [d.value for d in done] == ["BLOCKER", "J2", "J3"]  # FIFO among the survivors
    assert [j.discarded for j in jobs] == [1, 1, 1, 1]  # run ones are released by the worker, once
    assert worker.stats.submitted == 5 and worker.stats.done == 3


def test_skip_refuses_the_new_job_when_the_queue_is_full() -> None:
    log: list = []
    worker = LLMWorker(1, "skip")
    try:
        gate = _blocked(worker, log)
        first, second = _Job("first", log), _Job("second", log)
        assert worker.submit(first) and not worker.submit(second)
        assert second.discarded == 1 and first.discarded == 0 and worker.stats.dropped == 1
        gate.set()
        done = _drain(worker, 2)
    finally:
        worker.close()
    assert [d.value for d in done] == ["BLOCKER", "FIRST"]


def test_rounds_are_never_dropped_and_run_before_waiting_jobs() -> None:
    log: list = []
    worker = LLMWorker(1, "drop_oldest")
    try:
        gate = _blocked(worker, log)
        worker.submit(_Job("refine", log))
        rounds = [_Job(f"round{k}", log, droppable=False) for k in range(3)]
        for r in rounds:
            worker.submit(r)
        assert worker.stats.dropped == 0 and worker.depth == 4
        gate.set()
        done = _drain(worker, 5)
    finally:
        worker.close()
    assert [d.value for d in done] == ["BLOCKER", "ROUND0", "ROUND1", "ROUND2", "REFINE"]


def test_submit_and_collect_return_at_once_while_a_job_runs() -> None:
    log: list = []
    worker = LLMWorker(4, "drop_oldest")
    try:
        worker.submit(_Job("slow", log, sleep=0.5))
        started = time.perf_counter()
        for k in range(3):
            worker.submit(_Job(f"j{k}", log))
            worker.collect()
        assert time.perf_counter() - started < 0.1  # the caller never waits for the running job
        assert worker.pending == 4 and not worker.idle()
        assert len(_drain(worker, 4)) == 4 and worker.idle()
    finally:
        worker.close()


def test_an_error_in_a_job_comes_back_to_be_raised_by_the_loop() -> None:
    worker = LLMWorker(1, "skip")
    try:
        job = _Job("bad", [], fail=True)
        worker.submit(job)
        (done,) = _drain(worker, 1)
    finally:
        worker.close()
    assert isinstance(done.error, KeyError) and done.value is None and job.discarded == 1


def test_close_discards_the_jobs_that_never_ran_and_counts_them() -> None:
    log: list = []
    worker = LLMWorker(3, "drop_oldest")
    gate = _blocked(worker, log)
    waiting = [_Job(f"w{k}", log) for k in range(2)] + [_Job("round", log, droppable=False)]
    for j in waiting:
        worker.submit(j)
    gate.set()
    worker.close()
    assert worker.stats.abandoned + worker.stats.done == 4
    assert all(j.discarded == 1 for j in waiting)
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit(_Job("late", log))


def test_two_threads_run_jobs_side_by_side() -> None:
    log: list = []
    worker = LLMWorker(4, "skip", threads=2)
    try:
        jobs = [_Job(f"j{k}", log, sleep=0.4) for k in range(2)]
        for j in jobs:
            worker.submit(j)
        _drain(worker, 2)
    finally:
        worker.close()
    (a0, a1), (b0, b1) = jobs[0].span, jobs[1].span
    assert max(a0, b0) < min(a1, b1)  # they overlap in time
    assert {name for _, name in log} == {"ace-llm-0", "ace-llm-1"}


def test_the_worker_sets_its_own_torch_threads_not_the_loops() -> None:
    torch = pytest.importorskip("torch")
    before, seen = torch.get_num_threads(), []

    def init(slot: int) -> None:
        torch.set_num_threads(1)
        seen.append(torch.get_num_threads())

    worker = LLMWorker(1, "skip", init=init)
    try:
        worker.submit(_Job("j", []))
        _drain(worker, 1)
    finally:
        worker.close()
    assert seen == [1] and torch.get_num_threads() == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread on Linux only")
def test_the_worker_thread_runs_at_a_lower_priority_than_the_loop() -> None:
    from ace_hybrid.training.llm_jobs import worker_thread_settings as _worker_thread_settings

    seen: list[int] = []

    class _Nice(_Job):
        def run(self, slot: int) -> str:
            seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            return super().run(slot)

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    worker = LLMWorker(1, "skip", init=lambda slot: _worker_thread_settings(0, 5))
    try:
        worker.submit(_Nice("j", []))
        _drain(worker, 1)
    finally:
        worker.close()
    assert seen == [min(19, before + 5)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # the loop's thread is untouched


def test_the_inline_worker_runs_at_submission() -> None:
    log: list = []
    worker = InlineWorker()
    job = _Job("now", log)
    assert worker.submit(job) and log == [("now", threading.current_thread().name)] and job.discarded == 1
    assert [d.value for d in worker.collect()] == ["NOW"] and worker.idle()
    with pytest.raises(KeyError):
        worker.submit(_Job("bad", log, fail=True))


@pytest.mark.parametrize(("override", "name"), [
    ("ace.queue_overflow=block", "ace.queue_overflow"),
    ("ace.queue_size=0", "ace.queue_size"),
    ("ace.worker_torch_threads=-1", "ace.worker_torch_threads"),
    ("ace.worker_nice=20", "ace.worker_nice"),
    ("llm.concurrency=2", "concurrency"),  # a local model answers one request at a time
])
def test_bad_queue_settings_fail_at_start_naming_the_option(override: str, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        load_config(None, ["llm.backend=smollm2", override])


# ------------------------------------------------------------------------------------- ACE through the loop

pytest.importorskip("grid2op")
pytest.importorskip("torch")
from ace_hybrid.replay import MixedReplayBuffer
from ace_hybrid.training.checkpoint import load_checkpoint_file, restore, save_checkpoint
from ace_hybrid.training.loop import _open, learn, train

TINY = [
    *tiny_settings.TINY, "env.eval_max_steps=10", "env.max_episode_steps=25", "replay.validated_capacity=200",
    "train.checkpoint_every=100000", "train.eval_every=0", "log.tensorboard=false",
    "llm.backend=transformers", "ace.ranker=llm", "ace.r_bar=0.3", "ace.critic_start=0", "ace.critic_every=1", "ace.r_key=0.0",
    "ace.critic_trajectories=1", "ace.validation_steps=6", "ace.candidates=4", "ace.max_rounds=2",
    "ace.pace_budget=false", "ace.min_improvement=0.0", "ace.min_rho_drop=0.0",
]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return fixtures.build_tiny_model(tmp_path_factory.mktemp("tiny_lm"))


def _cfg(tiny_lm: pathlib.Path, *extra: str):
    return load_config(None, [*TINY, f"llm.model_path={tiny_lm}", *extra])


@pytest.fixture()
def slow_backend(monkeypatch: pytest.MonkeyPatch):
    """Every call of the tiny model takes 0.15 s more (like a real model, relative to a tiny grid's steps); the
    threads that used the backend are recorded by method."""
    from ace_hybrid.llm.transformers_backend import TransformersBackend

    threads: dict[str, set[str]] = {}
    for name in ("next_token_logprobs", "next_token_logprobs_many", "score_candidates", "generate", "finetune",
                 "save_adapter"):
        original = getattr(TransformersBackend, name)

        def wrapped(self, *args: Any, _original=original, _name=name, **kwargs: Any) -> Any:
            threads.setdefault(_name, set()).add(threading.current_thread().name)
            if _name != "save_adapter":
                time.sleep(0.15)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(TransformersBackend, name, wrapped)
    return threads


def _lines(run_dir: pathlib.Path) -> list[dict]:
    path = run_dir / "refinements.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _llm_rows(replay: MixedReplayBuffer):
    """The LLM partition in insertion order (it holds fewer items than its capacity here)."""
    return replay.get(np.arange(replay.validated_size, dtype=np.int64) * 2 + 1)


def _assert_committed_consistently(run_dir: pathlib.Path, state: dict, replay: MixedReplayBuffer) -> None:
    """What a checkpoint says was accepted is exactly the LLM partition and the accepted lines of the log."""
    accepted = state["llm"]["actor"]["accepted"]
    lines = _lines(run_dir)
    assert replay.validated_size == replay.validated_valid_size == accepted
    assert len(lines) == state["llm"]["log_lines"] == state["llm"]["actor"]["bad_transitions"]
    kept = [x for x in lines if x["accepted"]]
    assert len(kept) == accepted
    if accepted:
        rows = _llm_rows(replay)
        np.testing.assert_allclose(rows.reward, [x["r_hat"] for x in kept], rtol=1e-6)
        assert rows.episode.tolist() == [x["episode"] for x in kept]
        assert rows.decision.tolist() == [x["decision"] for x in kept]


def test_skip_makes_no_copy_while_the_queue_is_full_and_counts_a_bad_transition_as_dropped() -> None:
    from ace_hybrid.training.ace import LLMInLoop
    from ace_hybrid.training.llm_jobs import QUEUE_COUNTERS as _QUEUE_COUNTERS
    from ace_hybrid.training.run import Pending

    llm = object.__new__(LLMInLoop)  # the hooks' state only: no backend, no environment
    llm.ace = load_config(None, ["llm.backend=smollm2", "ace.queue_size=1", "ace.queue_overflow=skip"]).ace
    llm.actor = SimpleNamespace(ranker=SimpleNamespace(uses_llm=True))
    llm.coevo, llm._held_probes, llm._not_copied = None, [], False
    llm.budget_left = lambda role="actor": True
    llm.queue = dict.fromkeys(_QUEUE_COUNTERS, 0)
    llm.worker = LLMWorker(1, "skip")
    log: list = []
    gate = _blocked(llm.worker, log)
    try:
        assert llm.wants_snapshot()  # room in the queue: copy
        llm.worker.submit(_Job("waiting", log))  # now full
        bad = Pending(obs=np.zeros(2), action=0, reward=-1.0, episode=0, decision=0, blackout=True)
        good = Pending(obs=np.zeros(2), action=0, reward=1.0, episode=0, decision=1, max_rho=0.5)
        assert not llm.wants_snapshot()
        assert llm.after_store(None, good) is None and llm.queue["dropped"] == 0  # a good one is not lost
        assert not llm.wants_snapshot()
        assert llm.after_store(None, bad) is None
        assert llm.queue["decisions_not_copied"] == 2 and llm.queue["dropped"] == llm.queue["submitted"] == 1
    finally:
        gate.set()
        llm.worker.close()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kwargs: Any) -> None:
        pass


@pytest.mark.grid2op
@pytest.mark.slow
def test_the_loop_keeps_stepping_while_one_worker_thread_owns_the_backend(tiny_lm, tmp_path, slow_backend) -> None:
    # worker_nice 0: what is tested is the queue and who owns the backend; at nice 19 a loaded machine may starve
    # the worker of the CPU until the drain (that priority has its own test). A round after every accepted
    # refinement, over 300 steps (7-8 bad transitions reach the slow LLM, 2-3 accepted): with a round every 2 over 150
    # steps, a run where timing let only one be accepted made no round (1 run in 3 on a 2-core machine).
    cfg = _cfg(tiny_lm, "train.total_env_steps=300", "ace.max_llm_calls=0", "ace.queue_size=1",
               "ace.queue_overflow=drop_oldest", "ace.worker_nice=0",
               "ace.finetune_every=1", "ace.finetune_pairs=1", "ace.probe_size=1")
    summary = train(cfg, tmp_path / "run")
    llm, queue = summary["llm"], summary["llm"]["queue"]
    assert queue["async"] and queue["overflow"] == "drop_oldest" and queue["pending"] == 0
    assert queue["mean_lag_steps"] > 0  # results were committed steps after their transitions were stored
    assert queue["dropped"] > 0 and queue["max_depth"] == 1  # more bad transitions than a slow LLM can take
    assert queue["submitted"] == llm["bad_transitions"] + queue["dropped"] + queue["budget_skipped"]
    assert llm["finetunes"] >= 1 and llm["probe_calls"] >= 1 and llm["critic"]["rounds"] >= 1
    # One thread owns the backend: every call, scoring and fine-tuning alike, came from the same worker thread.
    assert set().union(*slow_backend.values()) == {"ace-llm-0"}
    # The actor's letters, the critic's per-decision prompts (one batched call each), LoRA fine-tuning.
    assert {"next_token_logprobs", "next_token_logprobs_many", "finetune"} <= set(slow_backend)
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    dropped = [m["llm/queue_dropped"] for m in metrics if "llm/queue_dropped" in m]
    assert dropped and dropped == sorted(dropped) and dropped[-1] <= queue["dropped"]
    assert any("llm/queue_depth" in m for m in metrics)
    state = load_checkpoint_file(tmp_path / "run" / "checkpoint.pt")
    _assert_committed_consistently(tmp_path / "run", state, MixedReplayBuffer.load(tmp_path / "run" /
                                                                                   state["replay_file"]))


@pytest.mark.grid2op
@pytest.mark.slow
def test_a_checkpoint_with_work_pending_resumes_without_losing_what_was_accepted(tiny_lm, tmp_path,
                                                                                  slow_backend) -> None:
    run_dir = tmp_path / "run"
    cfg = _cfg(tiny_lm, "train.total_env_steps=400", "ace.max_llm_calls=0", "ace.queue_size=3",
               "ace.coevolve=false")
    run = _open(cfg, run_dir, False, None)
    poll = run.llm.poll

    def poll_until_accepted_with_more_pending(r):
        out = poll(r)
        if r.llm.stats.accepted and r.llm.worker.pending:
            r.stop_requested = True  # as Ctrl-C does: the learner stops after this step
        return out

    run.llm.poll = poll_until_accepted_with_more_pending
    try:  # drive the learner by hand, kill-free: save the moment something is accepted while more is pending
        learn(run, _NoBar())
        assert run.stop_requested, "nothing was accepted while more was pending in 400 steps"
        assert run.llm.stats.accepted >= 1 and run.llm.worker.pending >= 1
        save_checkpoint(run)
        saved_steps = run.counters.env_steps
    finally:
        run.llm.close()
        run.logger.close()
    state = load_checkpoint_file(run_dir / "checkpoint.pt")
    pending = state["llm"]["queue"]["pending"]
    assert pending >= 1
    saved_replay = MixedReplayBuffer.load(run_dir / state["replay_file"])
    # The pending jobs' results never reached the checkpoint; what it holds is consistent.
    resumed = restore(run_dir)
    try:
        assert resumed.llm.stats.accepted == state["llm"]["actor"]["accepted"] == saved_replay.validated_size
        assert resumed.llm.queue["lost_on_resume"] == pending
        _assert_committed_consistently(run_dir, state, resumed.replay)  # the log lost its lines beyond the save
        np.testing.assert_array_equal(_llm_rows(resumed.replay).obs, _llm_rows(saved_replay).obs)
    finally:
        resumed.llm.close()
        resumed.logger.close()
    summary = train(None, run_dir, resume=True, total_env_steps=saved_steps + 60)
    llm = summary["llm"]
    assert llm["accepted"] >= state["llm"]["actor"]["accepted"]
    assert llm["queue"]["lost_on_resume"] == pending and llm["queue"]["pending"] == 0
    final = load_checkpoint_file(run_dir / "checkpoint.pt")
    _assert_committed_consistently(run_dir, final, MixedReplayBuffer.load(run_dir / final["replay_file"]))


@pytest.mark.grid2op
@pytest.mark.slow
def test_the_synchronous_path_is_deterministic(tiny_lm, tmp_path) -> None:
    cfg = ["train.total_env_steps=60", "ace.async_llm=false", "ace.max_llm_calls=16", "ace.finetune_every=2",
           "ace.finetune_pairs=2", "ace.probe_size=1"]
    runs = [train(_cfg(tiny_lm, *cfg), tmp_path / name) for name in ("a", "b")]
    for r in runs:
        assert r["llm"]["queue"]["async"] is False and r["llm"]["queue"]["dropped"] == 0
        assert r["llm"]["queue"]["mean_lag_steps"] == 0  # committed in the step that stored the transition
    keys = ("calls", "bad_transitions", "accepted", "rounds", "critic", "probe_calls")
    first, second = ({k: r["llm"][k] for k in keys} for r in runs)
    assert first == second
    assert _lines(tmp_path / "a") == _lines(tmp_path / "b") and _lines(tmp_path / "a")
    replays = [MixedReplayBuffer.load(tmp_path / n / load_checkpoint_file(tmp_path / n / "checkpoint.pt")[
        "replay_file"]) for n in ("a", "b")]
    assert replays[0].validated_size == replays[1].validated_size
    a, b = (_llm_rows(r) for r in replays)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.reward, b.reward)
    ra, rb = (r.rl_columns() for r in replays)
    np.testing.assert_array_equal(ra["reward"], rb["reward"])  # the critic's shaping too


@pytest.mark.grid2op
@pytest.mark.slow
def test_an_openai_server_gets_llm_concurrency_refinements_side_by_side(tmp_path, monkeypatch) -> None:
    pytest.importorskip("openai")
    monkeypatch.setenv("ACE_TEST_OPENAI_KEY", "sk-test")
    # Every label the actor (A-D) and the critic (good/Good/bad/Bad) read is listed: an unlisted one is an error.
    top = [("B", -0.9), ("A", -1.0), ("D", -1.1), ("C", -1.2), ("good", -1.3), ("Bad", -1.4), ("bad", -1.5),
           ("Good", -1.6)]
    with fixtures.FakeOpenAIServer(default="sleep", sleep_s=0.1, lifetime_s=120, top=top) as server:
        in_flight = fixtures.track_in_flight(server)
        cfg = load_config(None, [
            *TINY, "llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=fake",
            "llm.api_key_env=ACE_TEST_OPENAI_KEY", "llm.concurrency=2", "llm.top_logprobs=8", "llm.timeout_s=10",
            "train.total_env_steps=60", "ace.max_llm_calls=16", "ace.queue_size=4"])
        summary = train(cfg, tmp_path / "run")
    llm = summary["llm"]
    assert llm["queue"]["threads"] == 2 and llm["coevolution_off"] is not None  # a server cannot fine-tune
    assert llm["actor_calls"] >= 2 and llm["errors"] == 0
    assert in_flight["max"] == 2  # two refinements (or a refinement and a critic round) at once, never more
    state = load_checkpoint_file(tmp_path / "run" / "checkpoint.pt")
    _assert_committed_consistently(tmp_path / "run", state,
                                   MixedReplayBuffer.load(tmp_path / "run" / state["replay_file"]))
