"""What answers in pieces (``SubmitChunks``) cost the miner: buffers let go however a stream ends, and the
per-owner and total limits on streams and buffered bytes, over mutual TLS on loopback.

Buffers are counted without a garbage collection: the collector is off while streams run, so a buffer
kept alive by a reference cycle stays visible (the `Reassembly` objects alive, and the bytes they hold).
The tests wait on the miner's stream ledger and on those counts, never on time.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import hashlib
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator

import grpc
import pytest

from modelshare.common.federation.chunks import Reassembly, envelope_chunks
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.mechanisms import registry
from modelshare.miner_node.server import start_miner
from modelshare.miner_node.store import verify_log
from modelshare.owner_node.daemon import is_final_failure
from tests.federation_helpers import make_federation, signed_model, study_spec, wait_until

MiB = 2**20
PIECE = 64 * 1024
JUNK = bytes(range(256)) * (MiB // 256)  # 1 MiB that is no SignedEnvelope


def _live_buffers() -> tuple[int, int]:
    """The reassemblies alive in this process and the bytes they hold (found without collecting)."""
    alive = [o for o in gc.get_objects() if isinstance(o, Reassembly)]
    return len(alive), sum(o.received for o in alive)


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """A miner that cuts a stalled stream off after one second."""
    federation = make_federation(tmp_path_factory.mktemp("buffers"), ["site-a", "site-b"])
    config = federation.miner_config()
    limits = dataclasses.replace(config.limits, stream_idle_seconds=1.0)
    federation.miner = start_miner(dataclasses.replace(config, limits=limits, verify_processes=0),
                                   mechanisms=registry.names())
    yield federation
    federation.close()


def _killed_client(fed, owner: str, data: bytes, study_id: str) -> int:
    """An owner process that sends the first two pieces of ``data`` and dies (SIGKILL) waiting to send the rest."""
    answer = fed.kits[owner].parent / f"{owner}-answer.bin"
    answer.write_bytes(data)
    code = f"""
import os, signal, sys
from pathlib import Path
from modelshare.common.federation.chunks import envelope_chunks
from modelshare.common.federation.dial import dial_miner
from modelshare.common.federation.kit import TlsFiles
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
stub = fgrpc.OwnerExchangeStub(dial_miner({fed.address!r}, TlsFiles.in_kit(Path({str(fed.kits[owner])!r})), "miner"))
data = Path({str(answer)!r}).read_bytes()
def pieces():
    chunks = envelope_chunks(data, {study_id!r}, {PIECE})
    yield next(chunks)
    yield next(chunks)
    print("sent", flush=True)
    sys.stdin.read()  # the test closes stdin once the miner holds the stream
    os.kill(os.getpid(), signal.SIGKILL)
stub.SubmitChunks(pieces(), timeout=60)
"""
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    assert process.stdout.readline() == b"sent\n"
    wait_until(lambda: fed.miner.exchange.streams.owner_bytes(owner) > 0, 30, "the miner to hold the stream")
    process.stdin.close()
    return process.wait(timeout=30)


def _stream(fed, owner: str, kind: str, study_id: str, envelope: fpb.SignedEnvelope) -> str:
    """Send one stream of ``kind`` as ``owner``; how it ended, as the owner saw it."""
    data = envelope.SerializeToString() if kind in ("completed", "bad-signature") else JUNK
    if kind == "bad-signature":
        broken = fpb.SignedEnvelope.FromString(data)
        broken.signature = bytes(len(broken.signature))
        data = broken.SerializeToString()
    if kind == "killed":
        return f"exit {_killed_client(fed, owner, data, study_id)}"
    pieces = list(envelope_chunks(data, study_id, PIECE))
    if kind == "digest":
        pieces[0].sha256 = bytes(32)
    elif kind == "early-end":
        del pieces[-1]
    release = threading.Event()

    def held() -> Iterator[fpb.EnvelopeChunk]:
        yield pieces[0]
        release.wait(60)

    stub = fed.stub(owner)
    try:
        if kind == "cancelled":
            call = stub.SubmitChunks.future(held(), timeout=60)
            wait_until(lambda: fed.miner.exchange.streams.owner_bytes(owner) > 0, 30, "the miner to hold the stream")
            call.cancel()
            return "cancelled"
        return stub.SubmitChunks(held() if kind == "stalled" else iter(pieces), timeout=60).owner_id
    except grpc.RpcError as exc:
        return exc.code().name
    finally:
        release.set()


KINDS = {
    "completed": "site-a",
    "bad-signature": "UNAUTHENTICATED",
    "not-an-envelope": "INVALID_ARGUMENT",
    "digest": "INVALID_ARGUMENT",
    "early-end": "INVALID_ARGUMENT",
    "stalled": "DEADLINE_EXCEEDED",
    "cancelled": "cancelled",
    "killed": "exit -9",
}


def test_a_streams_buffer_is_let_go_however_the_stream_ends(fed, car, caplog):
    """Each way a stream can end, one after the other, with the collector off: once each call has ended no
    reassembly is alive, no byte is reserved, the miner serves on and only the completed answer is stored; an
    upload that ended early (cut short, cancelled, its sender killed) is logged as interrupted."""
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("held")), timeout=10).spec
    envelope = signed_model(fed, "site-a", spec, *car[1:])
    ledger = fed.miner.exchange.streams
    caplog.set_level(logging.INFO, logger="modelshare.miner")
    gc.collect()
    assert _live_buffers() == (0, 0)
    gc.disable()
    try:
        for kind, want in KINDS.items():
            assert _stream(fed, "site-a", kind, "held", envelope) == want, kind
            wait_until(lambda: not ledger.streams("site-a") and not ledger.total_bytes and _live_buffers() == (0, 0),
                       30,
                       lambda kind=kind: f"the buffers of the {kind} stream to be let go: "
                       f"{_live_buffers()} (reassemblies, "
                                   f"bytes) alive, {ledger.total_bytes} bytes reserved")
    finally:
        gc.enable()
    assert fed.stub("site-b").Health(fpb.HealthRequest(), timeout=10).status == "serving"
    stored = fed.miner.store.submission("held", "site-a")
    assert stored is not None and stored.submission_id == hashlib.sha256(envelope.SerializeToString()).hexdigest()
    interrupted = [r.getMessage() for r in caplog.records if "did not complete" in r.getMessage()]
    assert len(interrupted) == 3 and all("the upload was interrupted" in m for m in interrupted), interrupted
    assert verify_log(fed.miner.config.state_dir).ok


@pytest.fixture()
def limited(tmp_path):
    """A miner taking at most 2 streams and 2 MiB from one owner, 3 MiB from all; streams may idle a minute."""
    federation = make_federation(tmp_path, ["site-a", "site-b", "site-c"])
    config = federation.miner_config()
    limits = dataclasses.replace(config.limits, max_streams_per_owner=2, max_buffered_bytes_per_owner=2 * MiB,
                                 max_buffered_bytes=3 * MiB, stream_idle_seconds=60.0)
    federation.miner = start_miner(dataclasses.replace(config, limits=limits, verify_processes=0),
                                   mechanisms=registry.names())
    yield federation
    federation.close()


def test_an_owner_over_its_limits_is_refused_while_other_owners_are_served(limited, car):
    """site-a passes its byte limit and its stream limit, site-b the miner's byte limit: each is refused with
    RESOURCE_EXHAUSTED naming the limit (which the owner retries), while site-c's answer sent whole is stored
    and Health serves; once the held streams end, site-b's answer in pieces goes through."""
    fed = limited
    ledger = fed.miner.exchange.streams
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("limits")), timeout=10).spec
    release = threading.Event()

    def held() -> Iterator[fpb.EnvelopeChunk]:
        yield next(envelope_chunks(JUNK * 2, "limits", PIECE))  # the first piece of a 2 MiB answer ...
        release.wait(60)

    def declaring(size: int) -> Iterator[fpb.EnvelopeChunk]:
        for piece in held():
            piece.total_bytes = size  # ... declaring ``size`` bytes
            yield piece

    def refusal(owner: str, size: int) -> str:
        with pytest.raises(grpc.RpcError) as info:
            fed.stub(owner).SubmitChunks(declaring(size), timeout=30)
        code, details = info.value.code(), info.value.details()
        assert details is not None
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and not is_final_failure(code, details), details
        return details

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        try:
            held_calls = [pool.submit(fed.stub("site-a").SubmitChunks, declaring(3 * MiB // 2), timeout=60)]
            wait_until(lambda: ledger.owner_bytes("site-a") == 3 * MiB // 2, 30, "site-a's first stream")
            assert "max_buffered_bytes_per_owner" in refusal("site-a", MiB)
            held_calls.append(pool.submit(fed.stub("site-a").SubmitChunks, declaring(MiB // 4), timeout=60))
            wait_until(lambda: ledger.streams("site-a") == 2, 30, "site-a's second stream")
            assert "(max_streams_per_owner)" in refusal("site-a", PIECE * 2)
            held_calls.append(pool.submit(fed.stub("site-b").SubmitChunks, declaring(MiB), timeout=60))
            wait_until(lambda: ledger.total_bytes == 11 * MiB // 4, 30, "site-b's stream")
            assert "(max_buffered_bytes)" in refusal("site-b", MiB // 2)
            ack = fed.stub("site-c").Submit(signed_model(fed, "site-c", spec, *car[1:]), timeout=30)
            assert ack.owner_id == "site-c" and not ack.duplicate
            assert fed.stub("site-c").Health(fpb.HealthRequest(), timeout=10).status == "serving"
        finally:
            release.set()
        for call in held_calls:
            with pytest.raises(grpc.RpcError) as info:
                call.result(timeout=60)
            assert "the upload was interrupted" in info.value.details()
    wait_until(lambda: not ledger.total_bytes and not ledger.streams("site-a"), 30, "the held streams to end")
    data = signed_model(fed, "site-b", spec, *car[1:]).SerializeToString()
    assert fed.stub("site-b").SubmitChunks(envelope_chunks(data, "limits", 4096), timeout=30).owner_id == "site-b"


def test_the_heap_is_trimmed_after_a_large_stream_ends_however_it_ends(fed, car):
    """A refused stream of 4 MiB, then two refused streams of 1 MiB, each lead to a `malloc_trim` soon after they
    end (glibc keeps freed buffers' memory otherwise: bench/stream_attack.py), and the miner serves on."""
    from modelshare.miner_node.heap import HeapTrim, malloc_trim

    if malloc_trim is None:
        pytest.skip("this C library has no malloc_trim (not glibc): there is nothing to give back this way")
    fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("trim")), timeout=10)
    heap = fed.miner.exchange.heap
    assert isinstance(heap, HeapTrim)
    before = heap.trims
    big = list(envelope_chunks(JUNK * 4, "trim", PIECE))
    big[0].sha256 = bytes(32)
    with pytest.raises(grpc.RpcError) as refused:
        fed.stub("site-b").SubmitChunks(iter(big), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    wait_until(lambda: heap.trims > before, 30, "a trim after the refused 4 MiB stream")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two streams that end together share one trim
        done = list(pool.map(lambda _: _stream(fed, "site-b", "digest", "trim", fpb.SignedEnvelope()), range(2)))
    assert done == ["INVALID_ARGUMENT"] * 2
    wait_until(lambda: heap.trims > before + 1, 30, "a trim after the two 1 MiB streams")
    assert fed.stub("site-b").Health(fpb.HealthRequest(), timeout=10).status == "serving"


def test_a_trim_is_asked_for_by_large_streams_only_and_pending_trims_are_shared() -> None:
    """`HeapTrim` on an event loop, with a recording trim: small streams ask for none, large ones ending within the
    delay share one, and one ending after it asks for the next."""
    import asyncio

    from modelshare.miner_node.heap import TRIM_FROM_BYTES, HeapTrim

    calls: list[int] = []

    async def scenario() -> list[int]:
        heap = HeapTrim(trim=lambda: calls.append(1), delays=(0.01,))
        heap.after_stream(TRIM_FROM_BYTES - 1)
        assert not heap._pending
        heap.after_stream(TRIM_FROM_BYTES)
        heap.after_stream(8 * TRIM_FROM_BYTES)
        while heap.trims < 1:
            await asyncio.sleep(0.005)
        heap.after_stream(TRIM_FROM_BYTES)
        while heap.trims < 2:
            await asyncio.sleep(0.005)
        return calls

    assert asyncio.run(scenario()) == [1, 1]


@pytest.fixture()
def crowded(tmp_path):
    """A miner with its default limits, three owners to flood it with answers in pieces and one honest owner."""
    federation = make_federation(tmp_path, ["site-a", "site-b", "site-c", "honest"])
    federation.miner = start_miner(dataclasses.replace(federation.miner_config(), verify_processes=0),
                                   mechanisms=registry.names())
    yield federation
    federation.close()


def test_an_honest_owner_is_served_while_a_flood_of_streams_is_in_flight(crowded, car):
    """Three owners each open six streams of 8 MiB at once with a wrong digest (two more than the four an owner may
    have in progress), sending pieces as fast as the miner takes them and holding back the last; while those
    streams are in flight, and more are waiting to be taken, the honest owner's answer sent whole is stored, its
    repeat acknowledged as a duplicate, and Health answers. Then the held streams are refused for their digest
    (the extra ones for the stream limit), nothing of them is stored, and no byte stays reserved."""
    fed = crowded
    ledger = fed.miner.exchange.streams
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("crowd")), timeout=10).spec
    size = 8 * MiB
    pieces = list(envelope_chunks(JUNK * 8, "crowd", PIECE))
    pieces[0].sha256 = bytes(32)
    release = threading.Event()

    def flooding() -> Iterator[fpb.EnvelopeChunk]:
        yield from pieces[:-1]
        release.wait(60)
        yield pieces[-1]

    def stream(owner: str) -> str:
        try:
            fed.stub(owner).SubmitChunks(flooding(), timeout=120)
        except grpc.RpcError as exc:
            return exc.code().name
        return "OK"

    attackers = [owner for owner in ("site-a", "site-b", "site-c") for _ in range(6)]
    with concurrent.futures.ThreadPoolExecutor(len(attackers)) as pool:
        try:
            calls = [pool.submit(stream, owner) for owner in attackers]
            wait_until(lambda: ledger.total_bytes == 12 * size, 60, lambda: f"twelve streams in flight; "
                       f"{ledger.total_bytes / size:g} streams' bytes reserved")
            honest = fed.stub("honest")
            answer = signed_model(fed, "honest", spec, *car[1:])
            first, again = honest.Submit(answer, timeout=60), honest.Submit(answer, timeout=60)
            health = honest.Health(fpb.HealthRequest(), timeout=60).status
            in_flight = ledger.total_bytes
        finally:
            release.set()
        outcomes = sorted(call.result(timeout=120) for call in calls)
    assert (first.owner_id, first.duplicate, again.duplicate) == ("honest", False, True)
    assert health == "serving" and in_flight == 12 * size
    assert outcomes == ["INVALID_ARGUMENT"] * 12 + ["RESOURCE_EXHAUSTED"] * 6
    wait_until(lambda: not ledger.total_bytes, 30, "the streams' bytes to be given back")
    assert fed.miner.store.submitted_owners("crowd") == {"honest"}


def test_the_last_large_stream_gets_a_trim_at_least_its_delay_after_it_ends():
    """A stream ending while a trim is pending shares it, and the pending trim is then followed by one more, its delay
    after that stream ended (so the last streams' buffers, freed late, are given back too)."""
    import asyncio

    from modelshare.miner_node.heap import TRIM_FROM_BYTES, HeapTrim

    async def scenario() -> tuple[list[float], float]:
        loop = asyncio.get_running_loop()
        at: list[float] = []
        heap = HeapTrim(trim=lambda: at.append(loop.time()), delays=(0.05,))
        heap.after_stream(TRIM_FROM_BYTES)
        await asyncio.sleep(0.02)
        heap.after_stream(TRIM_FROM_BYTES)
        last_end = loop.time()
        while heap.trims < 2 or heap._pending:
            await asyncio.sleep(0.005)
        return at, last_end

    at, last_end = asyncio.run(scenario())
    assert len(at) == 2 and at[-1] >= last_end + 0.05
