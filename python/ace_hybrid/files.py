"""Files ace_hybrid writes: the cache root and atomic writes (a reader or a crash never sees half a file).

A leaf module (standard library only), imported from every layer that writes.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO, Any, Callable

__all__ = ["TMP_INFIX", "atomic_write", "atomic_write_json", "atomic_write_text", "cache_root", "remove_stale_temps"]

TMP_INFIX = ".tmp."
"""Temporary files are ``<name>.tmp.<pid>`` beside their target: a killed writer leaves one, which
:func:`remove_stale_temps` clears."""


def cache_root() -> Path:
    """Where ace_hybrid keeps caches (converted models, catalogs, score copies): ``$ACE_HYBRID_CACHE`` or
    ``~/.cache/ace_hybrid``."""
    return Path(os.environ.get("ACE_HYBRID_CACHE", Path.home() / ".cache" / "ace_hybrid"))


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> Path:
    """Write ``path`` through ``write(f)`` on a temporary file beside it, fsync, then rename over ``path``.

    Readers see the old file or the new one, never a mix; a crash leaves at most a ``<name>.tmp.<pid>`` file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{TMP_INFIX}{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write` of a UTF-8 text."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """:func:`atomic_write` of indented JSON (odd types, e.g. backend statistics, are written as ``str``)."""
    return atomic_write_text(path, json.dumps(data, indent=2, default=str))


def remove_stale_temps(directory: str | os.PathLike[str], pattern: str = "*") -> list[Path]:
    """Delete the ``<name>.tmp.<pid>`` files under ``directory`` (recursively) whose writer is not alive.

    Returns the removed paths. A file of a live process (another run writing there now) is kept.
    """
    removed = []
    for tmp in Path(directory).rglob(f"{pattern}{TMP_INFIX}*"):
        pid = tmp.name.rsplit(TMP_INFIX, 1)[-1]
        if not pid.isdigit() or (int(pid) != os.getpid() and _alive(int(pid))):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
