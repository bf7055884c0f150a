"""What a run logs: JSON lines in ``metrics.jsonl`` (exact, truncated on resume) and TensorBoard scalars."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "truncate_jsonl"]


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
