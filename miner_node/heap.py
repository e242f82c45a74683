"""Freed heap memory given back to the system after large answers in pieces end (glibc's ``malloc_trim``).

An answer in pieces is put back together in a buffer of up to its study's size limit. When such buffers are
freed, glibc's allocator keeps much of their memory in its heap instead of returning it: the dynamic mmap
threshold rises after the first large free, so later buffers come from the heap, and the heap is only
trimmed from its top. The miner's resident memory therefore stayed at several times its idle size after
many broken streams had ended, and grew with their number, with no buffer alive (bench/RESULTS.md, "Miner
under hostile answers in pieces"). The connection a large stream came on holds buffers of its own (gRPC's
reads and flow control) until it is closed; the server closes a connection with no call in progress after
`IDLE_CONNECTION_SECONDS` (`modelshare.miner_node.server`). `HeapTrim.after_stream` therefore schedules one
``malloc_trim(0)`` on a worker thread `TRIM_DELAY_SECONDS` after a stream that reserved at least
`TRIM_FROM_BYTES` ended, however it ended, and one more `2 * IDLE_CONNECTION_SECONDS` after it, when its
connection, if left idle, has been closed (the server's idle close is a GOAWAY, which the client answers by
closing the connection; only then are its buffers freed); streams ending meanwhile share those trims, and a trim
is followed by one more when a stream ended less than its delay before it. On a C
library without ``malloc_trim`` (musl, macOS) it does nothing. It reads and changes no data: it only returns
pages the allocator holds free.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

__all__ = ["IDLE_CONNECTION_SECONDS", "TRIM_DELAY_SECONDS", "TRIM_FROM_BYTES", "HeapTrim", "malloc_trim"]

TRIM_FROM_BYTES = 1 << 20  # a stream that reserved less leaves too little behind to be worth a trim
TRIM_DELAY_SECONDS = 0.5  # after the stream's call ended: its buffer and pieces are gone by then
IDLE_CONNECTION_SECONDS = 2.0  # the server closes a connection with no call in progress after this


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
    """At most one pending trim per delay at a time, scheduled on the running event loop after a large stream ends.

    ``delays``: the seconds after a stream's end at which to trim; by default once its buffers are gone and once
    its connection, if left idle, has been closed and let go."""

    def __init__(self, trim: Callable[[], None] | None = malloc_trim,
                 delays: tuple[float, ...] = (TRIM_DELAY_SECONDS, 2 * IDLE_CONNECTION_SECONDS)) -> None:
        self._trim = trim
        self._delays = delays
        self._pending: set[float] = set()  # the delays with a trim scheduled
        self._last_end = float("-inf")  # when the last large stream ended (event-loop time)
        self.trims = 0  # trims run so far (for tests and logs)

    def after_stream(self, reserved: int) -> None:
        """A stream that had reserved ``reserved`` bytes ended; if it was large, trim after each delay that has no
        trim pending (a pending one is followed by another if it comes less than its delay after this stream).

        Called on the server's event loop; outside one (a test, a shutdown) it does nothing."""
        if self._trim is None or reserved < TRIM_FROM_BYTES:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._last_end = loop.time()
        for delay in self._delays:
            if delay not in self._pending:
                self._pending.add(delay)
                loop.call_later(delay, self._start, loop, delay)

    def _start(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        loop.run_in_executor(None, self._run)
        if self._last_end + delay > loop.time():  # a stream ended since this trim was scheduled: trim after it too
            loop.call_at(self._last_end + delay, self._start, loop, delay)
        else:
            self._pending.discard(delay)

    def _run(self) -> None:
        assert self._trim is not None
        self._trim()
        self.trims += 1
