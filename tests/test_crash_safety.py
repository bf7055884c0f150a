"""What a kill, a crash or Ctrl-C leaves behind, and what a resumed run makes of it (tiny runs on the 14-bus grid)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
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
from ace_hybrid.training import loop  # noqa: E402
from ace_hybrid.training.checkpoint import load_checkpoint_file, restore, save_checkpoint  # noqa: E402
from ace_hybrid.training.loop import train  # noqa: E402

from process_fixtures import start_cli_training, wait_for_checkpoint  # noqa: E402 (tests/ is on sys.path)
from tiny_settings import TINY  # noqa: E402 (tests/ is on sys.path: see conftest.py)

pytestmark = pytest.mark.grid2op

QUIET = ["train.eval_every=0", "log.tensorboard=false"]


def tiny(steps: int, *extra: str):
    return load_config(None, [*TINY, f"train.total_env_steps={steps}", *extra])


class Killed(Exception):
    """Stands for SIGKILL in-process: nothing after the checkpoint is saved, no file is closed."""


def train_until_killed(cfg, run_dir: Path, monkeypatch: pytest.MonkeyPatch, saves: int):
    """Train until the ``saves``-th checkpoint is written, then die; returns the run (to close its files)."""
    seen = []

    def save_then_die(run, name="checkpoint.pt"):
        path = save_checkpoint(run, name)
        seen.append(run)
        if len(seen) == saves:
            raise Killed
        return path

    monkeypatch.setattr(loop, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        train(cfg, run_dir)
    monkeypatch.setattr(loop, "save_checkpoint", save_checkpoint)
    return seen[-1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("crash") / "run"
    train(tiny(60, *QUIET), run)
    return run


# ----------------------------------------------------------------------------------------- replay files


def test_a_save_never_keeps_a_replay_file_it_did_not_write(trained: Path, tmp_path: Path) -> None:
    """A killed run may have left replay-<d>-<u>.bin for counters this run reaches along another timeline."""
    run_dir = shutil.copytree(trained, tmp_path / "run")
    run = restore(run_dir)
    x = np.zeros(run.features.dim, np.float32)
    run.replay.add_rl(x, 0, 1.0, x, False, False, 99, 0)  # this timeline goes on...
    run.counters.decisions += 1
    stale = run_dir / f"replay-{run.counters.decisions:08d}-{run.counters.updates:08d}.bin"
    shutil.copy(run_dir / load_checkpoint_file(run_dir / "checkpoint.pt")["replay_file"], stale)  # ...another did not
    save_checkpoint(run)
    saved = load_checkpoint_file(run_dir / "checkpoint.pt")["replay_file"]
    assert saved == stale.name and len(MixedReplayBuffer.load(run_dir / saved)) == len(run.replay)
    run.logger.close()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _plant_temps(run_dir: Path) -> tuple[list[Path], Path]:
    """Temporary files of killed saves (a dead writer) and one of a live writer (this test's parent)."""
    dead = _dead_pid()
    stale = [run_dir / f"checkpoint.pt.tmp.{dead}", run_dir / f"replay-00000009-00000001.bin.tmp.{dead}",
             run_dir / "eval" / "step-00000050" / f"evaluation.json.tmp.{dead}"]
    live = run_dir / f"replay-00000001-00000000.bin.tmp.{os.getppid()}"
    for path in [*stale, live]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * 1024)
    return stale, live


def test_temporary_files_of_killed_saves_are_removed_on_start_and_on_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    stale, live = _plant_temps(run_dir)
    train(tiny(20, *QUIET), run_dir)
    assert not any(p.exists() for p in stale) and live.exists()
    stale, live = _plant_temps(run_dir)
    train(None, run_dir, resume=True, total_env_steps=30)
    assert not any(p.exists() for p in stale) and live.exists()


# --------------------------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_saves_a_checkpoint_prints_how_to_resume_and_exits_130(tmp_path: Path) -> None:
    sets = [*TINY, *QUIET, "train.total_env_steps=100000", "train.checkpoint_every=50"]
    proc, run, out, err = start_cli_training(tmp_path, sets)
    try:
        wait_for_checkpoint(proc, run, err)
        first = load_checkpoint_file(run / "checkpoint.pt")["counters"]["env_steps"]
        first_mtime = (run / "checkpoint.pt").stat().st_mtime_ns
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, err.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err.read_text()
    final = load_checkpoint_file(run / "checkpoint.pt")["counters"]["env_steps"]
    assert final >= first and (run / "checkpoint.pt").stat().st_mtime_ns > first_mtime
    printed = out.read_text()
    assert f"interrupted after {final} environment steps" in printed
    assert f"resume with: ace-hybrid train --resume {run}" in printed
    resumed = subprocess.run([sys.executable, "-m", "ace_hybrid.cli", "train", "--resume", str(run), "--set",
                              f"train.total_env_steps={final + 20}"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert load_checkpoint_file(run / "checkpoint.pt")["counters"]["env_steps"] == final + 20


# ------------------------------------------------------------------------------------- what a resume does


def test_a_resume_does_not_save_a_checkpoint_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = train_until_killed(tiny(300, *QUIET, "train.checkpoint_every=50"), tmp_path / "run", monkeypatch, saves=2)
    run.logger.close()
    assert load_checkpoint_file(tmp_path / "run" / "checkpoint.pt")["counters"]["env_steps"] == 100
    saved_at = []

    def record(run, name="checkpoint.pt"):
        if name == "checkpoint.pt":  # not best.pt, which the final evaluation writes
            saved_at.append(run.counters.env_steps)
        return save_checkpoint(run, name)

    monkeypatch.setattr(loop, "save_checkpoint", record)
    train(None, tmp_path / "run", resume=True, total_env_steps=140)
    assert saved_at == [140]  # the next one was due at 150: only the final save


def _tensorboard_points(run_dir: Path) -> set[tuple[str, int]]:
    """(tag, step) of every scalar in the run's event files (TFRecord framing: length, crc, event, crc)."""
    from tensorboardX.proto.event_pb2 import Event

    points = set()
    for path in run_dir.glob("events.*"):
        data, i = path.read_bytes(), 0
        while i + 12 <= len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            if i + 16 + n > len(data):
                break
            event = Event.FromString(data[i + 12:i + 12 + n])
            points |= {(v.tag, event.step) for v in event.summary.value}
            i += 16 + n
    return points


def test_a_killed_run_keeps_its_training_time_and_tensorboard_points(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "run"
    started = time.perf_counter()
    run = train_until_killed(tiny(300, "train.eval_every=0", "train.checkpoint_every=50"), run_dir, monkeypatch,
                             saves=2)
    elapsed = time.perf_counter() - started
    saved = load_checkpoint_file(run_dir / "checkpoint.pt")["counters"]
    assert 0 < saved["train_seconds"] <= elapsed
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = {(k, x["env_steps"]) for x in lines for k in x if k not in ("env_steps", "time")}
    before = {p for p in logged if p[1] < saved["env_steps"]}
    assert before and before <= _tensorboard_points(run_dir)  # read before anything closes the writer
    run.logger.close()
    summary = train(None, run_dir, resume=True, total_env_steps=120)
    assert summary["train_seconds"] > saved["train_seconds"]


# ----------------------------------------------------------------------------------------- a short run


def test_a_run_too_short_to_update_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ace_hybrid.cli import main

    sets = [*TINY, *QUIET, "train.total_env_steps=30", "train.learning_starts=1000"]
    assert main(["train", *[a for s in sets for a in ("--set", s)], "--run-dir", str(tmp_path / "run")]) == 0
    decisions = load_checkpoint_file(tmp_path / "run" / "checkpoint.pt")["counters"]["decisions"]
    err = capsys.readouterr().err
    assert "no SAC update was made" in err and "train.learning_starts = 1000" in err
    assert f"{decisions} decisions" in err
