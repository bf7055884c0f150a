"""Checkpoints of a run: save (atomically, with the replay file they name), load, and restore a :class:`Run`.

A checkpoint is written after its replay file, by a temporary file, fsync and rename
(:func:`ace_hybrid.files.atomic_write`), so ``checkpoint.pt`` always names a complete replay file. ``restore``
continues from the last one: the episode that was running when the run stopped is not recoverable (Grid2Op's state
is not saved), so the run starts the next training episode; everything stored up to the checkpoint is kept.

A checkpoint holds tensors and plain Python values only, and is read with ``torch.load(weights_only=True)``: a file
that holds anything else (a crafted pickle) is refused before any of it runs. Checkpoints of ace_hybrid 0.2 and
earlier hold float64 numpy arrays; exactly the numpy functions that rebuild those are allowed on top.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ace_hybrid.config import config_from_dict
from ace_hybrid.files import atomic_write
from ace_hybrid.replay import MixedReplayBuffer
from ace_hybrid.training.ace import REFINEMENTS_LOG, attach_llm
from ace_hybrid.training.metrics import truncate_jsonl
from ace_hybrid.training.run import Counters, Run

__all__ = ["CHECKPOINT_FORMAT", "checked_checkpoint", "load_checkpoint_file", "plain", "read_torch_file", "restore", "save_checkpoint"]

CHECKPOINT_FORMAT = 1

_KEYS = ("config", "sac", "normalizer", "counters", "torch_rng", "replay_file", "time_split", "llm")
_REPLAY_NAME = re.compile(r"replay-\d+-\d+\.bin")


def _legacy_numpy() -> list[Any]:
    """What pickles of float64 numpy arrays (the normaliser in older checkpoints) call, and nothing else."""
    core = getattr(np, "_core", None) or np.core  # numpy 2 | numpy 1
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.float64))]


def save_checkpoint(run: Run, name: str = "checkpoint.pt") -> Path:
    """Write the replay (its own atomic file) then the checkpoint that names it; drop older replay files.

    Also brings ``counters.train_seconds`` up to date and flushes the TensorBoard events, so a run killed after
    this point resumes with its time and its curves up to here.
    """
    c = run.counters
    clock_train_time(run)
    # Named by what changes the replay (adds at decisions, priorities at updates). Always written: a file of this
    # name may be left by a killed run that reached the same counters along another timeline.
    replay_name = f"replay-{c.decisions:08d}-{c.updates:08d}.bin"
    run.replay.save(run.dir / replay_name)
    state = {
        "format": CHECKPOINT_FORMAT,
        "config": run.cfg.to_dict(),
        "sac": run.sac.state_dict(),
        "normalizer": plain(run.normalizer.state_dict()),
        "counters": plain(vars(c)),
        "torch_rng": torch.get_rng_state(),
        "replay_file": replay_name,
        "time_split": plain(run.time_split),
        "llm": plain(run.llm.state_dict()) if run.llm is not None else None,
        "action_set": None if run.actions.is_full else [int(i) for i in run.actions.indices],
    }
    run.logger.flush()
    path = atomic_write(run.dir / name, lambda f: torch.save(state, f))
    run.replay_files[name] = replay_name
    for old in run.dir.glob("replay-*.bin"):
        if old.name not in run.replay_files.values():
            old.unlink(missing_ok=True)
    return path


def clock_train_time(run: Run) -> None:
    """Add the time since the last call (or since ``train`` started) to ``counters.train_seconds``."""
    now = time.perf_counter()
    run.counters.train_seconds += now - run.clock
    run.clock = now


def plain(obj: Any) -> Any:
    """``obj`` with numpy arrays as tensors and numpy scalars as Python numbers (what ``weights_only`` reads)."""
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(v) for v in obj)
    return obj


def read_torch_file(path: str | Path) -> Any:
    """The contents of a file ``torch.save`` wrote, read with ``weights_only=True``: tensors and plain values only
    (a crafted pickle is refused before any of it runs).

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        Naming ``path``: damaged, or holding objects a checkpoint never holds.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        allow = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5; before, old checkpoints are refused
        with allow(_legacy_numpy()) if allow else contextlib.nullcontext():
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's restricted unpickler stopped at something other than tensors and plain values: damage, or a
        # crafted file. Name what it found (never torch's advice to allow it).
        found = re.search(r"GLOBAL (\S+)|but got (<[^>]*>)|(Unsupported operand \d+)", str(exc))
        what = next((g for g in found.groups() if g), "") if found else str(exc).splitlines()[0]
        raise ValueError(f"{path} is not a readable checkpoint: it is damaged or holds objects other than tensors "
                         f"and plain values ({what}); nothing in it was run") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise ValueError(f"{path} is not a readable checkpoint: {exc}") from None
    return state


def load_checkpoint_file(path: str | Path) -> dict[str, Any]:
    """A checkpoint's contents, or a clear error for a missing, foreign, damaged or unsafe file.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        Naming ``path``: not a readable checkpoint (damaged, or holding objects a checkpoint never holds, which
        are refused without running them), or not one of ours.
    """
    return checked_checkpoint(read_torch_file(path), path)


def checked_checkpoint(state: Any, path: str | Path) -> dict[str, Any]:
    """``state``, read from ``path``, if it is a complete checkpoint of ours; else ValueError naming ``path``."""
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not an ace_hybrid checkpoint of format {CHECKPOINT_FORMAT}")
    missing = [k for k in _KEYS if k not in state]
    if missing:
        raise ValueError(f"{path} is not a complete ace_hybrid checkpoint: it lacks {missing}")
    if not isinstance(state["replay_file"], str) or not _REPLAY_NAME.fullmatch(state["replay_file"]):
        raise ValueError(f"{path} names the replay file {state['replay_file']!r}: expected replay-<d>-<u>.bin")
    return state


def _load_replay(checkpoint: Path, path: Path, run: Run) -> MixedReplayBuffer:
    """The checkpoint's replay, checked against the run: observations of the run's size, every stored action in its
    action set (and later adds held to it too)."""
    obs_dim, n_actions = run.features.dim, len(run.actions)
    try:
        return MixedReplayBuffer.load(path, obs_dim=obs_dim, num_actions=n_actions)
    except ValueError as exc:
        raise ValueError(f"cannot restore {checkpoint}: its replay does not fit this run (observations of size "
                         f"{obs_dim}, an action set of {n_actions} actions) or is damaged: {exc}") from None


def restore(run_dir: Path, total_env_steps: int | None = None) -> Run:
    """Rebuild a :class:`Run` from ``run_dir/checkpoint.pt`` with its saved configuration (``total_env_steps`` may
    change the budget).

    Raises
    ------
    ValueError
        Naming the checkpoint, when its replay file is damaged or does not fit the run: observations of another
        size than the run's, or an action outside the run's action set (the message names both sides).
    """
    state = load_checkpoint_file(run_dir / "checkpoint.pt")
    saved = config_from_dict(state["config"])
    if total_env_steps is not None:
        if total_env_steps <= 0:
            raise ValueError(f"train.total_env_steps = {total_env_steps} must be > 0")
        saved.train.total_env_steps = int(total_env_steps)
        saved.train.validate()  # e.g. a train.keep_best_at budget above the new total
    run = Run(saved, run_dir, state.get("action_set"))
    attach_llm(run)
    run.sac.load_state_dict(state["sac"])
    run.normalizer.load_state_dict(state["normalizer"])
    run.counters = Counters(**dict(state["counters"]))
    torch.set_rng_state(state["torch_rng"])
    run.time_split.update(state["time_split"])
    if run.llm is not None and state.get("llm") is not None:
        run.llm.load_state_dict(state["llm"])
    run.replay = _load_replay(run_dir / "checkpoint.pt", run_dir / state["replay_file"], run)
    run.replay_files["checkpoint.pt"] = state["replay_file"]
    if (run_dir / "best.pt").exists():
        run.replay_files["best.pt"] = load_checkpoint_file(run_dir / "best.pt")["replay_file"]
    run.logger.truncate_after(run.counters.env_steps)
    truncate_jsonl(run_dir / REFINEMENTS_LOG, run.counters.env_steps)
    return run
