"""Freed heap memory given back to the system after large answers in pieces end (glibc's ``malloc_trim``).

An answer in pieces is put back together in a buffer of up to its study's size limit. When such buffers are
freed, glibc's allocator keeps much of their memory in its heap instead of returning it: the dynamic mmap
threshold rises after the first large free, so later buffers come from the heap, and the heap is only
trimmed from its top. The miner's resident memory therefore stayed at several times its idle size after
many broken streams had ended, and grew with their number, with no buffer alive (bench/RESULTS.md, "Miner
under hostile answers in pieces"). `HeapTrim.after_stream` schedules one ``malloc_trim(0)`` on a worker
thread `TRIM_DELAY_SECONDS` after a stream that reserved at least `TRIM_FROM_BYTES` ended, however it
ended; streams ending meanwhile share that trim. On a C library without ``malloc_trim`` (musl, macOS) it
does nothing. It reads and changes no data: it only returns pages the allocator holds free.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

__all__ = ["TRIM_DELAY_SECONDS", "TRIM_FROM_BYTES", "HeapTrim", "malloc_trim"]

TRIM_FROM_BYTES = 1 << 20  # a stream that reserved less leaves too little behind to be worth a trim
TRIM_DELAY_SECONDS = 0.5  # after the stream's call ended: its buffer and pieces are gone by then


def _libc_trim() -> Callable[[], None] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if function is None:
        return None
    function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int

    def trim() -> None:
        function(0)

    return trim


malloc_trim = _libc_trim()
"""``malloc_trim(0)`` of this process's C library, or None without one."""


class HeapTrim:
    """At most one pending trim at a time, scheduled on the running event loop after a large stream ends."""

    def __init__(self, trim: Callable[[], None] | None = malloc_trim, delay: float = TRIM_DELAY_SECONDS) -> None:
        self._trim = trim
        self._delay = delay
        self._pending = False
        self.trims = 0  # trims run so far (for tests and logs)

    def after_stream(self, reserved: int) -> None:
        """A stream that had reserved ``reserved`` bytes ended; trim soon if it was large and no trim is pending.

        Called on the server's event loop; outside one (a test, a shutdown) it does nothing."""
        if self._trim is None or reserved < TRIM_FROM_BYTES or self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._pending = True
        loop.call_later(self._delay, self._start, loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._pending = False
        loop.run_in_executor(None, self._run)

    def _run(self) -> None:
        assert self._trim is not None
        self._trim()
        self.trims += 1
