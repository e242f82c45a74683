"""What the miner may buffer of answers sent in pieces: streams and bytes per owner and in total.

Every ``SubmitChunks`` stream holds a slot (`StreamLedger.open`) for as long as its call lasts, and
reserves the envelope size its first piece declares (`StreamSlot.reserve`) before any more of it is
received: a reassembly buffer never grows past its declared size (`modelshare.common.federation.chunks.Reassembly`),
so the reservations bound the memory the buffers can take. Three limits apply, each a ``[miner]``
setting (`modelshare.miner_node.config.Limits`): the streams one owner has in progress (``max_streams_per_owner``),
the bytes reserved for one owner's streams (``max_buffered_bytes_per_owner``) and the bytes reserved for
all streams together (``max_buffered_bytes``). Beyond one of them the stream is refused with
RESOURCE_EXHAUSTED, naming the limit and its setting; an owner's daemon retries such a refusal later
(`modelshare.owner_node.daemon.is_final_failure`), and answers sent whole (``Submit``) are not counted here.

All streams are reassembled on the server's event loop, so the ledger needs no lock; the slot gives back
its stream and its bytes when the call ends, however it ends.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator

import grpc

from modelshare.miner_node.config import Limits
from modelshare.miner_node.verify import Rejection

__all__ = ["StreamLedger", "StreamSlot"]


def _mib(size: int) -> str:
    """``size`` bytes in MiB, for a message."""
    return f"{size / 2**20:.1f} MiB"


class StreamSlot:
    """One stream in progress: its owner and the bytes it has reserved (returned by `StreamLedger.open`)."""

    def __init__(self, ledger: StreamLedger, owner: str) -> None:
        self._ledger = ledger
        self.owner = owner
        self.reserved = 0

    def reserve(self, size: int) -> None:
        """Reserve ``size`` more bytes for this stream; RESOURCE_EXHAUSTED if the owner's or the miner's limit
        of buffered bytes would be passed (nothing is reserved then)."""
        self._ledger._reserve(self, size)


class StreamLedger:
    """The streams in progress and the bytes reserved for them, per owner and in total, within ``limits``."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._streams: collections.Counter[str] = collections.Counter()
        self._bytes: collections.Counter[str] = collections.Counter()
        self.total_bytes = 0

    def streams(self, owner: str) -> int:
        """The streams ``owner`` has in progress."""
        return self._streams[owner]

    def owner_bytes(self, owner: str) -> int:
        """The bytes reserved for ``owner``'s streams in progress."""
        return self._bytes[owner]

    @contextlib.contextmanager
    def open(self, owner: str) -> Iterator[StreamSlot]:
        """A slot for one more stream of ``owner``, held until the block ends; RESOURCE_EXHAUSTED when the owner
        already has ``max_streams_per_owner`` streams in progress."""
        limit = self.limits.max_streams_per_owner
        if self._streams[owner] >= limit:
            raise Rejection(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"{owner!r} already has {limit} answers in pieces in progress, the most this miner takes "
                            "from one owner at once (max_streams_per_owner); retry when one has ended; nothing stored")
        self._streams[owner] += 1
        slot = StreamSlot(self, owner)
        try:
            yield slot
        finally:
            self._release(slot)

    def _reserve(self, slot: StreamSlot, size: int) -> None:
        owner = slot.owner
        per_owner, total = self.limits.max_buffered_bytes_per_owner, self.limits.max_buffered_bytes
        if self._bytes[owner] + size > per_owner:
            raise Rejection(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"an answer of {size} bytes in pieces would bring what the miner buffers for {owner!r} to "
                            f"{_mib(self._bytes[owner] + size)}, over the {_mib(per_owner)} it buffers for one owner "
                            "(max_buffered_bytes_per_owner); retry when its other answers in pieces have ended; "
                            "nothing stored")
        if self.total_bytes + size > total:
            raise Rejection(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"an answer of {size} bytes in pieces would bring what the miner buffers for all owners to "
                            f"{_mib(self.total_bytes + size)}, over the {_mib(total)} it buffers at once "
                            "(max_buffered_bytes); retry later; nothing stored")
        self._bytes[owner] += size
        self.total_bytes += size
        slot.reserved += size

    def _release(self, slot: StreamSlot) -> None:
        owner = slot.owner
        self._streams[owner] -= 1
        if not self._streams[owner]:
            del self._streams[owner]
        self._bytes[owner] -= slot.reserved
        if not self._bytes[owner]:
            del self._bytes[owner]
        self.total_bytes -= slot.reserved
        slot.reserved = 0
