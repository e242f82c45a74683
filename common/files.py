"""Atomic, durable file replacement: the one way this project writes a file that someone may read.

A reader (another process, or this one after a crash) sees the old file or the new one, never a
part: the content goes to a temporary file with a unique name in the target's directory (so the
rename stays on one file system and two writers never share a temporary file), is flushed to the
disk, renamed over the target, and the directory entry is flushed too, so the rename survives a
power cut. `atomic_write` takes the bytes; `atomic_write_via` takes a writer callback for
libraries that write to a path themselves (pandas, matplotlib, pyarrow).

This module sits outside common's layers: every layer and node may use it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["atomic_write", "atomic_write_via", "fsync_dir"]

T = TypeVar("T")


def fsync_dir(path: str | Path) -> None:
    """Make a rename in directory ``path`` durable (the directory entry, not just the file, must reach the disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary(path: Path) -> Path:
    """A fresh name beside ``path``, hidden and unique, so concurrent writers never collide."""
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")


def _publish(tmp: Path, path: Path) -> None:
    """Rename the finished ``tmp`` over ``path`` and make the rename durable."""
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write(path: str | Path, data: bytes | str, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) all at once, durably.

    With ``mode`` the file gets exactly that mode, set before any byte is written (the file is
    created no more permissive than ``mode``), so secret content is never readable by others even
    for an instant; without it the umask decides, as for any new file.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = _temporary(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        _publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_via(path: str | Path, write: Callable[[Path], T], *, mode: int | None = None) -> T:
    """Replace ``path`` with what ``write(tmp)`` writes to the temporary path ``tmp``; returns its result.

    For writers that open the file themselves (``frame.to_csv``, ``figure.savefig``); ``write``
    creates ``tmp`` with the umask's permissions unless ``mode`` is given. A failure removes the
    temporary file and leaves ``path`` as it was.
    """
    path = Path(path)
    tmp = _temporary(path)
    try:
        result = write(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        _publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return result
