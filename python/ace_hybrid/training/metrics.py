"""What a run logs: JSON lines in ``metrics.jsonl`` (exact, truncated on resume) and TensorBoard scalars."""

from __future__ import annotations

import json
import time
from pathlib import Path

__all__ = ["MetricsLogger", "truncate_jsonl"]


class MetricsLogger:
    """JSON lines in ``metrics.jsonl`` plus TensorBoard scalars (when tensorboardX is installed and enabled)."""

    def __init__(self, run_dir: Path, tensorboard: bool) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.writer = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError as exc:
                raise ImportError("log.tensorboard = true needs tensorboardX: pip install tensorboardX "
                                  "(or set log.tensorboard=false)") from exc
            self.writer = SummaryWriter(str(run_dir))

    def write(self, step: int, values: dict[str, float]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"env_steps": step, "time": time.time(), **values}) + "\n")
        if self.writer is not None:
            for key, value in values.items():
                self.writer.add_scalar(key, float(value), step)

    def truncate_after(self, step: int) -> None:
        """Drop lines written after ``step`` (by a run that died before its next checkpoint)."""
        truncate_jsonl(self.path, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def truncate_jsonl(path: Path, step: int) -> None:
    """Drop the lines of a JSONL log whose ``env_steps`` is after ``step``."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["env_steps"] <= step]
    path.write_text("".join(line + "\n" for line in kept))
