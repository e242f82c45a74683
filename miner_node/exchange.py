"""The owner exchange (the ``OwnerExchange`` gRPC service): owners poll for studies and answer them.

``Poll`` holds a call until a study waits for the calling owner; ``Submit`` and ``SubmitChunks`` take a
signed model, ``Refuse`` a signed refusal. A submission is checked in this order, and the first failure is the
answer (a gRPC status whose message says what to do): the TLS identity is the signer's roster entry (same name,
the certificate provisioned for it); the signature verifies over the exact payload bytes (before the
payload is parsed); the signer is not revoked; an identical envelope already stored gets its
original ack back, whatever the study's state is by now (safe retries, even after a crash lost
the first ack); the study exists, is open and invites the signer; the envelope is within the
study's ``max_message_bytes`` (RESOURCE_EXHAUSTED, with both sizes); the schema fingerprint is the
study's; the message is fresh (a valid timestamp inside the window) and its nonce 16 bytes and unseen; the owner has not
submitted a different model; the model is within the size
limits (counted on the raw message, before the expensive decode, which is why this check comes
before the audit rather than after it); it decodes into valid trees; its claims pass an independent re-audit
(`modelshare.common.audit.release`) and are at least as strong as the study requires. Only then is it committed,
and only after the commit is it acknowledged. Every accepted and rejected submission is appended
to the hash-chained audit log. No exception escapes a handler (`modelshare.miner_node.rpc.handler`): a bug answers
INTERNAL and the server keeps serving. An envelope over `modelshare.common.federation.chunks.UNARY_MAX_BYTES` arrives in
pieces (`SubmitChunks`): they are put back together within the study's limit and a deadline, then take
exactly the path above; what the miner buffers of such streams is bounded per owner and in total
(`modelshare.miner_node.streams`: beyond a limit, RESOURCE_EXHAUSTED, which the owner retries), and a stream's
buffer is let go when its call ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import DecodeError

from modelshare.common.federation.chunks import STREAM_MIN_BYTES_PER_SECOND, ChunkError, Reassembly, too_large_message
from modelshare.common.federation.freshness import sent_at, staleness
from modelshare.common.federation.kit import Party, peer_cert_sha256, peer_identity
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.common.federation.refusal import describe
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import SignatureError, verify_envelope
from modelshare.common.federation.wire import NONCE_BYTES
from modelshare.miner_node.config import Limits
from modelshare.miner_node.coordinator import Coordinator
from modelshare.miner_node.heap import HeapTrim
from modelshare.miner_node.rpc import (
    Attached,
    Identity,
    UndecodableRequest,
    async_handler,
    clip,
    handler,
    timestamp_seconds,
)
from modelshare.miner_node.store import Store, StoreError, StudyRow, Submission
from modelshare.miner_node.streams import StreamLedger, StreamSlot
from modelshare.miner_node.verify import ModelVerifier, Rejection, StudyTerms

__all__ = ["Interrupted", "OwnerExchangeService"]

log = logging.getLogger("modelshare.miner")

#: The pieces of a `OwnerExchangeService.SubmitChunks` stream as the tolerant deserializer hands them over.
Pieces: TypeAlias = AsyncIterator[fpb.EnvelopeChunk | UndecodableRequest]

MAX_POLL_SECONDS = 30


class Interrupted(Rejection):
    """An answer in pieces whose stream ended before its declared bytes: most likely an owner that died or lost its
    connection mid-upload, logged as an interrupted upload rather than as a rejected answer."""


@dataclass(frozen=True)
class _OpenStudy:
    """An open study as `Poll` needs it: the spec and the owners that answered it already."""

    spec: fpb.StudySpec
    answered: frozenset[str]


@dataclass(frozen=True)
class _Invitation:
    """What a submission to a study is checked against before its model, decoded once per stored spec
    (`_invitation`)."""

    spec: bytes  # as stored: the key of the study's `_terms`
    owners: frozenset[str]
    max_message_bytes: int
    schema_fingerprint: str


@functools.lru_cache(maxsize=256)
def _invitation(spec: bytes) -> _Invitation:
    decoded = fpb.StudySpec.FromString(spec)
    return _Invitation(spec, frozenset(decoded.owners), decoded.max_message_bytes, decoded.schema_fingerprint)


@functools.lru_cache(maxsize=256)
def _terms(spec: bytes) -> StudyTerms:
    """What a submission to the study stored as ``spec`` is checked against, decoded once per study."""
    return StudyTerms.of(study_from_pb(fpb.StudySpec.FromString(spec)))


def _remaining(context: grpc.ServicerContext) -> float | None:
    """Seconds left before the caller's deadline, None without one."""
    remaining = context.time_remaining()
    return None if remaining is None or remaining > 1e6 else max(remaining, 0.0)


async def _next_chunk(pieces: Pieces, index: int, timeout: float, what: str) -> fpb.EnvelopeChunk | None:
    """The next piece of a `OwnerExchangeService.SubmitChunks` stream, None at its end; DEADLINE_EXCEEDED after
    ``timeout`` seconds (the stream is cut off), INVALID_ARGUMENT for bytes that are no `EnvelopeChunk`."""
    try:
        chunk = await asyncio.wait_for(pieces.__anext__(), max(timeout, 0.0))
    except StopAsyncIteration:
        return None
    except asyncio.TimeoutError:
        raise Rejection(grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"the stream stalled waiting for {what}; cut off, nothing stored") from None
    if isinstance(chunk, UndecodableRequest):
        raise Rejection(grpc.StatusCode.INVALID_ARGUMENT,
                        f"piece {index} is not a valid {chunk.message_type}: {chunk.error}")
    return chunk


class OwnerExchangeService(Attached, fgrpc.OwnerExchangeServicer):
    """Implements the OwnerExchange service over a `Store`, the callers' `Identity` and a `Coordinator`.

    Parameters
    ----------
    store, identity, coordinator:
        Durable state, who is calling (the live roster), and the study lifecycle.
    limits:
        Size and freshness limits.
    verifier:
        Decodes, validates and re-audits submitted models (in worker processes).
    clock:
        The miner's time, against which a message's freshness is judged.
    """

    def __init__(self, store: Store, identity: Identity, coordinator: Coordinator, limits: Limits,
                 verifier: ModelVerifier, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.identity = identity
        self.roster = identity.roster
        self.coordinator = coordinator
        self.limits = limits
        self.verifier = verifier
        self.clock = clock
        self._snapshot: tuple[int, asyncio.Future[list[_OpenStudy]]] | None = None
        self.streams = StreamLedger(limits)  # SubmitChunks in progress and their bytes, per owner and in all
        self.heap = HeapTrim()  # freed buffers' memory given back to the system after large streams
        # the digests of streams that ended, one at a time: the event loop never hashes, and a burst of them
        # takes one core, not every worker thread
        self._digests = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="miner-digest")

    def close(self) -> None:
        """Stop the digest thread (after the server stopped: no stream is being put back together)."""
        self._digests.shutdown(wait=True)

    # ------------------------------------------------------------- identity
    def _signed_by_caller(self, envelope: fpb.SignedEnvelope, context: grpc.ServicerContext) -> tuple[Party, bytes]:
        """Check TLS identity vs signer, the signature, and revocation, in that order."""
        name = peer_identity(context)
        signer = self.roster.current().by_key_id(envelope.signer_key_id)
        if signer is None:
            raise Rejection(grpc.StatusCode.UNAUTHENTICATED,
                            f"signer key {envelope.signer_key_id[:16]!r} is not on the miner's roster")
        if not self.identity.insecure or name is not None:
            if name != signer.name:
                raise Rejection(grpc.StatusCode.PERMISSION_DENIED,
                                f"TLS identity {name!r} does not match the signer {signer.name!r}")
            if peer_cert_sha256(context) != signer.tls_cert_sha256:
                raise Rejection(grpc.StatusCode.PERMISSION_DENIED,
                                f"the certificate presented for {name!r} is not the one provisioned for it")
        try:
            payload = verify_envelope(envelope, signer.signing_key)
        except SignatureError as exc:
            raise Rejection(grpc.StatusCode.UNAUTHENTICATED,
                            f"{exc}; the envelope was altered or signed by another key") from None
        if signer.revoked:
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED, f"{signer.name!r} was revoked at {signer.revoked_at}")
        if signer.role != "owner":
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED,
                            f"{signer.name!r} is a {signer.role}; only owners submit")
        return signer, payload

    # ---------------------------------------------------------- study checks
    def _open_study(self, study_id: str, owner: str) -> _Invitation:
        return self._invited(self.store.study(study_id), study_id, owner)

    @staticmethod
    def _invited(row: StudyRow | None, study_id: str, owner: str) -> _Invitation:
        """The study ``row`` as ``owner`` may answer it; NOT_FOUND, FAILED_PRECONDITION (not open) or
        PERMISSION_DENIED."""
        if row is None:
            raise Rejection(grpc.StatusCode.NOT_FOUND, f"no study {study_id!r} on this miner")
        if row.state == "cancelled":
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION,
                            f"study {study_id!r} is cancelled ({row.reason}); it takes no answers")
        if row.state != "open":
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION,
                            f"study {study_id!r} is {row.state}; it takes no more answers")
        invitation = _invitation(row.spec)
        if owner not in invitation.owners:
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED, f"{owner!r} is not invited to study {study_id!r}")
        return invitation

    def _fresh(self, timestamp: Any, context: grpc.ServicerContext) -> None:
        """FAILED_PRECONDITION unless the message was signed within the window; the trailing metadata
        says whether it is old (the owner re-signs it) or the owner's clock is off
        (`modelshare.common.federation.freshness`)."""
        late = staleness(timestamp_seconds(timestamp, "message timestamp"), sent_at(context.invocation_metadata()),
                         self.clock(), self.limits.timestamp_window_seconds)
        if late is not None:
            context.set_trailing_metadata(late.trailing())
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION, late.message)

    def _unspent(self, nonce: bytes, seen: bool | None = None) -> None:
        """INVALID_ARGUMENT for a nonce of the wrong size, ALREADY_EXISTS for a spent one (``seen``, read now if
        None)."""
        if len(nonce) != NONCE_BYTES:
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT,
                            f"the nonce is {len(nonce)} bytes; every message carries {NONCE_BYTES} fresh random bytes")
        if self.store.nonce_seen(nonce) if seen is None else seen:
            raise Rejection(grpc.StatusCode.ALREADY_EXISTS,
                            "this message's nonce was used before (a replay); nothing stored")

    # ------------------------------------------------------------------ RPCs
    @handler
    def Submit(self, request: fpb.SignedEnvelope, context: grpc.ServicerContext) -> fpb.SubmitAck:
        return self._submit_logged(request, context, {"peer": peer_identity(context)})

    @async_handler
    async def SubmitChunks(self, request_iterator: Pieces, context: Any) -> fpb.SubmitAck:
        """`Submit` for an envelope sent in pieces (`modelshare.common.federation.chunks`): put back together within
        the study's size limit, a deadline and the buffer limits (`modelshare.miner_node.streams`), then checked, stored
        and acknowledged by the same code as `Submit`.

        Reassembly is a coroutine (a slow sender holds no worker thread); the checks run on a worker. The stream
        keeps its slot and its reserved bytes until the call ends, however it ends.
        """
        event: dict[str, Any] = {"peer": peer_identity(context), "rpc": "SubmitChunks"}
        with contextlib.ExitStack() as held:
            try:
                party = await self.offload(self.identity.caller, context)
                if party is not None and party.role != "owner":
                    raise Rejection(grpc.StatusCode.PERMISSION_DENIED,
                                    f"{party.name!r} has the role {party.role}; only owners submit")
                owner = party.name if party is not None else f"peer {context.peer()}"
                slot = held.enter_context(self.streams.open(owner))
                # runs before the slot gives its bytes back
                held.callback(lambda: self.heap.after_stream(slot.reserved))
                envelope = await self._receive_envelope(request_iterator, slot, event)
            except Rejection as rej:
                await self.offload(self._log_rejection, event, rej)
                raise
            return await self.offload(self._submit_logged, envelope, context, event)

    async def _receive_envelope(self, chunks: Pieces, slot: StreamSlot,
                                event: dict[str, Any]) -> fpb.SignedEnvelope:
        """The envelope sent in pieces, parsed; the reassembled bytes are let go before a refusal is raised, so a
        refusal kept alive (by a log handler, a debugger) does not keep them."""
        data = await self._receive_chunks(chunks, slot, event)
        size = len(data)
        try:
            envelope: fpb.SignedEnvelope | None = fpb.SignedEnvelope.FromString(data)
        except (DecodeError, RecursionError):
            envelope = None
        del data
        if envelope is None:
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, f"the {size} bytes received are not a SignedEnvelope")
        return envelope

    async def _receive_chunks(self, chunks: Pieces, slot: StreamSlot, event: dict[str, Any]) -> bytes:
        """The envelope's bytes from its pieces; `Rejection` for a study that does not exist, a stream
        `Reassembly` refuses (RESOURCE_EXHAUSTED when over the limit), one that stalls, or one over the
        buffer limits (`StreamSlot.reserve`, of the size the first piece declares, before more is taken).

        The reassembly lives only in `_reassemble`'s frame, and a `ChunkError` (whose traceback holds that
        frame) is turned into its `Rejection` only after that frame is gone, so no exception that outlives the
        call can reach the buffer."""
        pieces = chunks.__aiter__()
        first = await _next_chunk(pieces, 0, self.limits.stream_idle_seconds, "the first piece")
        if first is None:
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, "the stream ended before its first piece; nothing stored")
        event["study"] = first.study_id
        limit = await self.offload(self._stream_limit, first.study_id)
        slot.reserve(min(first.total_bytes, limit))  # more than the limit is refused by `Reassembly` itself
        try:
            return await self._reassemble(pieces, first, limit)
        except ChunkError as exc:
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if exc.too_large else grpc.StatusCode.INVALID_ARGUMENT
            refusal = Interrupted if exc.interrupted else Rejection
            message = f"{exc}; nothing stored"
        raise refusal(code, message)

    async def _reassemble(self, pieces: Pieces, first: fpb.EnvelopeChunk, limit: int) -> bytes:
        """The bytes of the pieces after ``first``, checked by `Reassembly` and within the stream's deadlines.

        Only taking each piece runs on the event loop; the digest over the whole and the join run on the
        digest thread, so the loop keeps serving other calls (an honest owner's ``Submit``, ``Health``) while
        many large streams end at once."""
        loop = asyncio.get_running_loop()
        idle = self.limits.stream_idle_seconds
        whole = Reassembly(first, limit)
        del first
        budget = idle + whole.total / STREAM_MIN_BYTES_PER_SECOND
        deadline = loop.time() + budget
        while True:
            chunk = await _next_chunk(pieces, whole.pieces, min(idle, deadline - loop.time()),
                                      f"piece {whole.pieces} ({whole.received} of {whole.total} bytes in; the miner "
                                      f"waits {idle:g} s for a piece and {budget:.0f} s for the whole)")
            if chunk is None:
                return await loop.run_in_executor(self._digests, whole.finish)
            whole.add(chunk)

    def _stream_limit(self, study_id: str) -> int:
        """The size limit of the study a stream's first piece names; NOT_FOUND when there is none."""
        row = self.store.study(study_id)
        if row is None:
            raise Rejection(grpc.StatusCode.NOT_FOUND, f"no study {study_id!r} on this miner")
        return self._study_limit(_invitation(row.spec))

    def _study_limit(self, study: _Invitation) -> int:
        """The largest answer ``study`` takes: its ``max_message_bytes``, within this miner's own limit."""
        return min(study.max_message_bytes or self.limits.max_message_bytes, self.limits.max_message_bytes)

    def _submit_logged(self, request: fpb.SignedEnvelope, context: Any, event: dict[str, Any]) -> fpb.SubmitAck:
        """`_submit`, logging a rejection: the one path of an envelope sent whole or in pieces."""
        event["signer_key"] = request.signer_key_id[:16]
        try:
            return self._submit(request, context, event)
        except Rejection as rej:
            self._log_rejection(event, rej)
            raise

    def _submit(self, request: fpb.SignedEnvelope, context: grpc.ServicerContext,
                event: dict[str, Any]) -> fpb.SubmitAck:
        signer, payload = self._signed_by_caller(request, context)
        event["owner"] = signer.name
        try:
            message = fpb.ModelMessage.FromString(payload)
        except (DecodeError, RecursionError):
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, "the payload is not a ModelMessage") from None
        event["study"] = message.study_id
        if message.owner_id != signer.name:
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED,
                            f"the message names owner {message.owner_id!r} but is signed by {signer.name!r}")
        envelope = request.SerializeToString(deterministic=True)
        submission_id = hashlib.sha256(envelope).hexdigest()
        view = self.store.submit_view(message.study_id, signer.name, message.nonce)
        # the exact bytes already stored: the same ack, whatever the study's state is now (an owner whose
        # ack was lost in a crash must learn its answer counted, even once mining started)
        if view.previous_id == submission_id and \
                (ack := self._stored_ack(message.study_id, signer.name, submission_id)) is not None:
            return ack
        study = self._invited(view.study, message.study_id, signer.name)
        if len(envelope) > (limit := self._study_limit(study)):
            raise Rejection(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            too_large_message(len(envelope), limit, message.study_id))
        if message.schema_fingerprint != study.schema_fingerprint:
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION,
                            f"schema fingerprint {message.schema_fingerprint[:12]} is not the study's "
                            f"{study.schema_fingerprint[:12]}; encode the table with the study's schema")
        self._fresh(message.timestamp, context)
        try:
            self._unspent(message.nonce, view.nonce_seen)
        except Rejection:
            # the same bytes, committed by a concurrent call since the first look: a duplicate, not a replay
            if (ack := self._stored_ack(message.study_id, signer.name, submission_id)) is not None:
                return ack
            raise
        if view.previous_id is not None:
            raise Rejection(grpc.StatusCode.ALREADY_EXISTS,
                            f"{signer.name!r} already submitted a different model to {message.study_id!r}")
        self.verifier.check(message, payload, _terms(study.spec), _remaining(context))
        sub = Submission(message.study_id, signer.name, submission_id, envelope, self.clock())
        outcome = self.store.accept(sub, message.nonce)
        if outcome == "duplicate":
            ack = self._stored_ack(message.study_id, signer.name, submission_id)
            assert ack is not None
            return ack
        if outcome != "accepted":
            raise Rejection(grpc.StatusCode.ALREADY_EXISTS, f"rejected as a {outcome} by the store; nothing stored")
        log.info("study %s: accepted the model of %s", message.study_id, signer.name,
                 extra={"study": message.study_id, "owner": signer.name, "outcome": "accepted"})
        self.coordinator.answered(message.study_id)
        return self._ack(sub, duplicate=False)

    def _stored_ack(self, study_id: str, owner: str, submission_id: str) -> fpb.SubmitAck | None:
        """The duplicate ack of ``submission_id`` when exactly that envelope is stored for (study, owner)."""
        stored = self.store.submission(study_id, owner)
        if stored is None or stored.submission_id != submission_id:
            return None
        return self._ack(stored, duplicate=True)

    @staticmethod
    def _ack(sub: Submission, *, duplicate: bool) -> fpb.SubmitAck:
        ack = fpb.SubmitAck(study_id=sub.study_id, owner_id=sub.owner_id, submission_id=sub.submission_id,
                            duplicate=duplicate)
        ack.accepted_at.FromNanoseconds(int(sub.accepted_at * 1e9))
        return ack

    def _log_rejection(self, event: dict[str, Any], rej: Rejection) -> None:
        """Log a refused submission, and append it to the audit log: as ``rejected``, or as ``interrupted`` for an
        upload whose stream ended early (`Interrupted`)."""
        event = {k: clip(v, 256) if isinstance(v, str) else v for k, v in event.items()}  # ids may be megabytes
        outcome = "interrupted" if isinstance(rej, Interrupted) else "rejected"
        owner = event.get("owner") or event.get("peer")
        if outcome == "interrupted":
            log.info("study %s: an upload of %s did not complete: %s", event.get("study"), owner, clip(rej.message),
                     extra={"study": event.get("study"), "owner": owner, "outcome": outcome})
        else:
            log.info("rejected a submission (%s): %s", rej.code.name, clip(rej.message),
                     extra={"study": event.get("study"), "owner": owner, "outcome": f"rejected:{rej.code.name}"})
        try:
            self.store.log_rejection({**event, "code": rej.code.name, "reason": clip(rej.message)}, outcome=outcome)
        except StoreError as exc:
            log.error("could not log a %s submission: %s", outcome, exc)

    @handler
    def Refuse(self, request: fpb.SignedEnvelope, context: grpc.ServicerContext) -> fpb.SubmitAck:
        signer, payload = self._signed_by_caller(request, context)
        try:
            refusal = fpb.OwnerRefusal.FromString(payload)
        except (DecodeError, RecursionError):
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, "the payload is not an OwnerRefusal") from None
        if refusal.owner_id != signer.name:
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED,
                            f"the refusal names owner {refusal.owner_id!r} but is signed by {signer.name!r}")
        self._open_study(refusal.study_id, signer.name)
        self._fresh(refusal.timestamp, context)
        self._unspent(refusal.nonce)
        reason = describe(refusal)[:2000]
        if not self.store.refuse(refusal.study_id, signer.name, reason, refusal.nonce):
            raise Rejection(grpc.StatusCode.ALREADY_EXISTS, f"{signer.name!r} already answered {refusal.study_id!r}")
        log.info("study %s: %s refused: %s", refusal.study_id, signer.name, reason,
                 extra={"study": refusal.study_id, "owner": signer.name, "outcome": "refused"})
        self.coordinator.answered(refusal.study_id)
        ack = fpb.SubmitAck(study_id=refusal.study_id, owner_id=signer.name,
                            submission_id=hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest())
        ack.accepted_at.FromNanoseconds(int(self.clock() * 1e9))
        return ack

    @async_handler
    async def Poll(self, request: fpb.PollRequest, context: Any) -> fpb.PollReply:
        """The open studies still waiting for the calling owner, held until there is one (at most `MAX_POLL_SECONDS`).

        A coroutine: a held Poll costs no worker thread, so the miner's threads do not scale with the
        number of waiting sites. The open studies are read once per change and shared by every waiter.
        """
        party = self.identity.caller(context)
        if party is None or party.role != "owner":
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED, "only owners poll for studies")
        owner = party.name
        await self.offload(self.store.record_poll, owner, self.clock(), clip(request.version, 64),
                           clip(request.health, 200))
        assert self.feed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(request.wait_seconds, MAX_POLL_SECONDS)
        while True:
            version = self.feed.version
            reply = fpb.PollReply()
            for study in await self._open_studies():
                if owner in study.spec.owners and owner not in study.answered:
                    reply.studies.add().spec.CopyFrom(study.spec)
            remaining = deadline - loop.time()
            if reply.studies or remaining <= 0:
                return reply
            await self.feed.wait(version, remaining)

    async def _open_studies(self) -> list[_OpenStudy]:
        """The open studies as of the current change version (read once per version, whoever asks)."""
        assert self.feed is not None
        version = self.feed.version
        if self._snapshot is None or self._snapshot[0] != version or \
                (self._snapshot[1].done() and self._snapshot[1].exception() is not None):
            self._snapshot = (version, asyncio.ensure_future(self.offload(self._read_open_studies)))
        return await asyncio.shield(self._snapshot[1])

    def _read_open_studies(self) -> list[_OpenStudy]:
        studies = []
        for row in self.store.studies("open"):
            answered = self.store.submitted_owners(row.study_id) | set(self.store.refusals(row.study_id))
            studies.append(_OpenStudy(fpb.StudySpec.FromString(row.spec), frozenset(answered)))
        return studies

