"""Helpers for tests that run training in child processes: start `ace-hybrid train` as a terminal would, wait for
its first checkpoint, and check that a killed parent leaves no living children."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["alive", "assert_children_exit_with_parent", "start_cli_training", "wait_for_checkpoint"]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def assert_children_exit_with_parent(parent: subprocess.Popen, children: list[int], timeout: float) -> None:
    """SIGKILL ``parent`` and assert that every one of ``children`` has exited within ``timeout`` seconds."""
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in children)


def start_cli_training(tmp_path: Path, sets: list[str]) -> tuple[subprocess.Popen, Path, Path, Path]:
    """``ace-hybrid train`` with ``--set`` overrides into ``tmp_path/run``, in its own session; returns (process,
    run directory, stdout file, stderr file).

    A shell's background job (nohup ... &, some CI runners) ignores SIGINT and its children inherit that: the child
    starts with the default disposition, as under a terminal's Ctrl-C."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "ace_hybrid.cli", "train", *[a for s in sets for a in ("--set", s)],
           "--run-dir", str(run)]
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as fout, err.open("w") as ferr:
        proc = subprocess.Popen(cmd, stdout=fout, stderr=ferr, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, run, out, err


def wait_for_checkpoint(proc: subprocess.Popen, run: Path, err: Path, timeout: float = 240) -> None:
    """Until ``run/checkpoint.pt`` exists; fails with the child's stderr if it exits or time runs out first."""
    deadline = time.time() + timeout
    while not (run / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, err.read_text()[-2000:]
        time.sleep(0.2)
