"""Large answers in pieces: how an owner cuts a serialized SignedEnvelope into `EnvelopeChunk`s and how the
miner puts them back together, bounded.

An envelope of at most `UNARY_MAX_BYTES` travels whole in one ``Submit`` message; a larger one
travels by the client-streaming ``SubmitChunks`` in pieces of `CHUNK_BYTES`, so no gRPC message
comes near the miner's per-message receive limit (``[miner] max_grpc_message_bytes``) and the
size of an answer is bounded only by the study's ``max_message_bytes``. The first piece declares
the total size, the SHA-256 of the whole and the study it answers; `Reassembly` refuses (with
`ChunkError`) a declared or received total over the limit, a piece out of order, missing or
repeated, a piece that carries no data or repeats the header, more bytes than declared, a stream
that ends early, and a digest that does not match. It never holds more than the declared total,
which is at most the limit. Taking a piece costs one copy of its bytes and nothing more, so a server can
take pieces on its event loop; the digest and the join are done once, by `Reassembly.finish`, which a server
runs on a worker thread (``hashlib`` lets go of the GIL while it hashes). Both roles use this module, so the
two sides cannot drift apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from modelshare.common.federation.pb import federation_pb2 as fpb

__all__ = [
    "CHUNK_BYTES",
    "MIN_GRPC_MESSAGE_BYTES",
    "STREAM_MIN_BYTES_PER_SECOND",
    "TOO_LARGE",
    "UNARY_MAX_BYTES",
    "ChunkError",
    "Reassembly",
    "envelope_chunks",
    "too_large_message",
]

CHUNK_BYTES = 1024 * 1024
"""Envelope bytes per piece the owner sends."""
UNARY_MAX_BYTES = 1024 * 1024
"""The largest serialized envelope an owner sends whole (``Submit``); larger ones go by ``SubmitChunks``."""
MIN_GRPC_MESSAGE_BYTES = 2 * 1024 * 1024
"""The smallest per-message receive limit a miner may configure: a whole envelope of `UNARY_MAX_BYTES`
or a piece of `CHUNK_BYTES` with its header must fit, with room to spare."""
STREAM_MIN_BYTES_PER_SECOND = 64 * 1024
"""The slowest a stream of pieces may be on the whole: the miner cuts one off that takes longer than its
``stream_idle_seconds`` plus a second per this many declared bytes, and an owner's call waits as long."""
TOO_LARGE = "exceeds the study's size limit"
"""The words of every miner refusal of an answer for its size; an owner treats such a refusal as final."""
DIGEST_BYTES = 32


class ChunkError(ValueError):
    """A stream of pieces that cannot be an envelope; ``too_large`` when its size is the reason, ``interrupted``
    when the stream ended before the declared bytes (the sender stopped, died or lost its connection)."""

    def __init__(self, message: str, *, too_large: bool = False, interrupted: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large
        self.interrupted = interrupted


def too_large_message(size: int, limit: int, study_id: str) -> str:
    """The refusal of an answer of ``size`` bytes to a study whose limit is ``limit`` bytes (the sizes, in words)."""
    return (f"the answer is {size} bytes, which {TOO_LARGE} ({limit} bytes for study {study_id!r}); "
            "the owner must refuse (too-large) rather than send it")


def envelope_chunks(data: bytes, study_id: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[fpb.EnvelopeChunk]:
    """The pieces of the serialized envelope ``data`` answering ``study_id``, the first with the header."""
    if not data:
        raise ValueError("an empty envelope has no pieces")
    view = memoryview(data)
    for index, start in enumerate(range(0, len(data), chunk_bytes)):
        chunk = fpb.EnvelopeChunk(index=index, data=bytes(view[start:start + chunk_bytes]))
        if index == 0:
            chunk.total_bytes = len(data)
            chunk.sha256 = hashlib.sha256(data).digest()
            chunk.study_id = study_id
        yield chunk


class Reassembly:
    """An envelope put back together from its pieces, checked piece by piece.

    Built from the first piece and the limit that applies (the first piece names its study, whose
    limit the caller looks up); `add` each later piece (cheap: it keeps the piece's bytes); `finish` once the
    stream ends checks the digest and returns the envelope's bytes (the costly part, for a worker thread).
    """

    def __init__(self, first: fpb.EnvelopeChunk, limit: int) -> None:
        if first.index != 0:
            raise ChunkError(f"the stream starts with piece {first.index}; the first piece is 0")
        if first.total_bytes == 0:
            raise ChunkError("the first piece declares no total_bytes; it must give the envelope's size")
        if len(first.sha256) != DIGEST_BYTES:
            raise ChunkError(f"the first piece's sha256 is {len(first.sha256)} bytes; a "
                             f"SHA-256 digest is {DIGEST_BYTES}")
        if first.total_bytes > limit:
            raise ChunkError(too_large_message(first.total_bytes, limit, first.study_id), too_large=True)
        self.total = first.total_bytes
        self.limit = limit
        self.study_id = first.study_id
        self._digest = first.sha256
        self._pieces: list[bytes] = []
        self.received = 0
        """Envelope bytes received so far."""
        self.add(first)

    @property
    def pieces(self) -> int:
        """Pieces received so far."""
        return len(self._pieces)

    def add(self, chunk: fpb.EnvelopeChunk) -> None:
        """Take the next piece; `ChunkError` if it is not the next, carries a header again, has no data or too much."""
        expected = len(self._pieces)
        if chunk.index != expected:
            what = "repeats" if chunk.index < expected else "skips to"
            raise ChunkError(f"piece {chunk.index} {what} the order: piece {expected} was expected next")
        if expected > 0 and (chunk.total_bytes or chunk.sha256 or chunk.study_id):
            raise ChunkError(f"piece {chunk.index} repeats the header (total_bytes, sha256, "
                             "study_id); only piece 0 has it")
        data = chunk.data  # protobuf copies a bytes field out on every access: once
        if not data:
            raise ChunkError(f"piece {chunk.index} carries no data")
        arrived = self.received + len(data)
        if arrived > self.total:
            if arrived > self.limit:
                raise ChunkError(too_large_message(arrived, self.limit, self.study_id), too_large=True)
            raise ChunkError(f"piece {chunk.index} brings the envelope to {arrived} bytes; "
                             f"the first piece declared {self.total}")
        self._pieces.append(data)
        self.received = arrived

    def finish(self) -> bytes:
        """The envelope's bytes once the stream has ended; `ChunkError` if it ended early (``interrupted``) or the
        digest differs. It hashes and joins every byte received: a server runs it on a worker thread for a large
        envelope, and adds no piece meanwhile."""
        if self.received < self.total:
            raise ChunkError(f"the upload was interrupted: the stream ended after {self.pieces} piece(s) and "
                             f"{self.received} of the {self.total} declared bytes (the owner stopped sending, or its "
                             "connection was lost)", interrupted=True)
        digest = hashlib.sha256()
        for piece in self._pieces:
            digest.update(piece)
        if digest.digest() != self._digest:
            raise ChunkError(f"the {self.total} bytes received do not have the SHA-256 the first piece declared")
        return b"".join(self._pieces)
