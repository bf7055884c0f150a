"""Child processes ace_hybrid starts (``experiment --jobs``, rollout workers): what each does first
(:func:`start_child`): it ignores the known third-party warnings, as the command line does, and it never outlives
its parent.

Standard library and :mod:`ace_hybrid.known_warnings` only; imported by every layer that starts processes.
"""

from __future__ import annotations

import os
import threading
import time

from ace_hybrid.known_warnings import ignore_known_warnings

__all__ = ["exit_with_parent", "start_child"]


def start_child(parent: int) -> None:
    """Called first thing in a child process: :func:`~ace_hybrid.known_warnings.ignore_known_warnings` (a spawned
    child starts with the default filters, not its parent's) and :func:`exit_with_parent` (``parent``: the pid of the
    process that started it)."""
    ignore_known_warnings()
    exit_with_parent(parent)


def exit_with_parent(parent: int, poll_seconds: float = 1.0) -> None:
    """Start a daemon thread that ends this process (``os._exit(1)``) once its parent ``parent`` is gone.

    Called first thing in a child (:func:`start_child`). A parent killed with SIGKILL (or crashed) cannot stop its children, and Ctrl-C
    only reaches the ones in its process group: without this an orphan would go on writing cells into an output
    folder, or stepping an environment for no one, until the machine is rebooted. The parent is polled every
    ``poll_seconds`` (a child adopted by init or a subreaper sees another ``getppid()``).

    Raises
    ------
    ValueError
        ``parent`` is not a positive pid or ``poll_seconds`` is not in (0, 60].
    """
    if isinstance(parent, bool) or not isinstance(parent, int) or parent <= 0:
        raise ValueError(f"parent = {parent!r} is invalid: expected a process id >= 1")
    if not 0.0 < poll_seconds <= 60.0:
        raise ValueError(f"poll_seconds = {poll_seconds!r} out of range (0, 60]")

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
