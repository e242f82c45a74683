"""Large answers in pieces (``SubmitChunks``): reassembly refusals in process, then over mutual TLS on loopback.

The miner of these tests reads single gRPC messages of at most `MIN_GRPC_MESSAGE_BYTES` (2 MiB) and
cuts a stalled stream off after one second; a release of a fully grown CART tree on a synthetic
table is ~2.2 MB, so it cannot travel whole and must travel in pieces.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import threading

import grpc
import numpy as np
import pytest

from modelshare.cli import main
from modelshare.common.data.schema import NumericAttribute, Schema
from modelshare.common.federation.chunks import (
    MIN_GRPC_MESSAGE_BYTES,
    TOO_LARGE,
    UNARY_MAX_BYTES,
    ChunkError,
    Reassembly,
    envelope_chunks,
)
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.signing import sign_payload
from modelshare.common.federation.wire import model_message, schema_to_pb
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.release import release
from modelshare.common.trees.learners import make_learner
from modelshare.miner_node.server import start_miner
from modelshare.miner_node.store import verify_log
from modelshare.miner_node.verify import Rejection, StudyTerms, check_model
from modelshare.owner_node.daemon import OwnerDaemon, is_final_failure
from modelshare.owner_node.status import read_status
from tests.federation_helpers import car_tables, make_federation, signed_model, study_spec, wait_until

OWNERS = ["site-a", "site-b"]
SCHEMA = Schema(tuple(NumericAttribute(f"x{i}", 0.0, 1.0) for i in range(4)), "c", ("p", "q"))


# ------------------------------------------------------------------ in process: the reassembly rules
def _pieces(data: bytes, size: int = 10) -> list[fpb.EnvelopeChunk]:
    return list(envelope_chunks(data, "s1", size))


def _reassemble(pieces: list[fpb.EnvelopeChunk], limit: int = 1000) -> bytes:
    whole = Reassembly(pieces[0], limit)
    for piece in pieces[1:]:
        whole.add(piece)
    return bytes(whole.finish())


def test_pieces_put_back_together_are_the_envelope():
    data = bytes(range(256)) * 3
    pieces = _pieces(data, 100)
    assert [p.index for p in pieces] == list(range(8)) and pieces[0].total_bytes == len(data)
    assert pieces[0].sha256 == hashlib.sha256(data).digest() and pieces[0].study_id == "s1"
    assert not any(p.total_bytes or p.sha256 or p.study_id for p in pieces[1:])
    assert _reassemble(pieces) == data


def _edited(edit: str) -> list[fpb.EnvelopeChunk]:
    pieces = _pieces(b"0123456789" * 5)  # five pieces of ten bytes
    if edit == "digest":
        pieces[0].sha256 = bytes(32)
    elif edit == "short-digest":
        pieces[0].sha256 = b"\x01"
    elif edit == "no-total":
        pieces[0].total_bytes = 0
    elif edit == "declared-less":
        pieces[0].total_bytes = 45
    elif edit == "declared-more":
        pieces[0].total_bytes = 51
    elif edit == "declared-over":
        pieces[0].total_bytes = 1001
    elif edit == "repeat":
        pieces.insert(2, pieces[1])
    elif edit == "swap":
        pieces[2], pieces[3] = pieces[3], pieces[2]
    elif edit == "skip":
        del pieces[2]
    elif edit == "early-end":
        del pieces[-1]
    elif edit == "empty":
        pieces[1].data = b""
    elif edit == "header-again":
        pieces[3].study_id = "s2"
    elif edit == "start-at-one":
        pieces = pieces[1:]
    elif edit == "past-the-limit":  # declared within the limit, received beyond it
        pieces = _pieces(b"x" * 1010, 100)
        pieces[0].total_bytes = 1000
    return pieces


@pytest.mark.parametrize("edit, words, too_large", [
    ("digest", "do not have the SHA-256 the first piece declared", False),
    ("short-digest", "sha256 is 1 bytes; a SHA-256 digest is 32", False),
    ("no-total", "declares no total_bytes", False),
    ("declared-less", "piece 4 brings the envelope to 50 bytes; the first piece declared 45", False),
    ("declared-more", "ended after 5 piece(s) and 50 of the 51 declared bytes", False),
    ("declared-over", f"the answer is 1001 bytes, which {TOO_LARGE} (1000 bytes for study 's1')", True),
    ("repeat", "piece 1 repeats the order: piece 2 was expected next", False),
    ("swap", "piece 3 skips to the order: piece 2 was expected next", False),
    ("skip", "piece 3 skips to the order: piece 2 was expected next", False),
    ("early-end", "ended after 4 piece(s) and 40 of the 50 declared bytes", False),
    ("empty", "piece 1 carries no data", False),
    ("header-again", "piece 3 repeats the header", False),
    ("start-at-one", "the stream starts with piece 1; the first piece is 0", False),
    ("past-the-limit", f"the answer is 1010 bytes, which {TOO_LARGE} (1000 bytes", True),
])
def test_a_stream_that_is_not_its_declared_envelope_is_refused_with_the_reason(edit, words, too_large):
    with pytest.raises(ChunkError) as info:
        _reassemble(_edited(edit))
    assert words in str(info.value) and info.value.too_large == too_large


# ------------------------------------------------------------------ over mutual TLS
@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chunks")
    federation = make_federation(tmp, OWNERS, owner_data=car_tables(tmp, OWNERS))
    config = federation.miner_config()
    limits = dataclasses.replace(config.limits, max_grpc_message_bytes=MIN_GRPC_MESSAGE_BYTES, stream_idle_seconds=1.0)
    federation.miner = start_miner(dataclasses.replace(config, limits=limits), mechanisms=registry.names())
    yield federation
    federation.close()


@pytest.fixture(scope="module")
def large_tree():
    """A fully grown CART tree on 60,000 random rows: ~35,000 nodes, a ~2.2 MB release."""
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (60_000, len(SCHEMA.attributes))), rng.integers(0, 2, 60_000)
    return make_learner("cart", SCHEMA, random_state=0).fit(X, y).tree_


def _large_study(fed, study_id: str, owner: str, *, max_message_bytes: int = 0) -> fpb.StudySpec:
    spec = study_spec(study_id, owners=[owner], mechanism="none", requirement=None, disclosure="counts",
                      global_models=("naive-bayes",))
    spec.schema.CopyFrom(schema_to_pb(SCHEMA))
    spec.schema_fingerprint = SCHEMA.fingerprint
    spec.max_message_bytes = max_message_bytes
    return fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10).spec


def _large_envelope(fed, owner: str, study_id: str, tree) -> bytes:
    message = model_message(release("none", tree=tree, disclosure="counts"), study_id=study_id, owner_id=owner)
    return sign_payload(message.SerializeToString(), fed.key(owner)).SerializeToString()


def _stored(fed, study_id: str, owner: str):
    return fed.miner.store.submission(study_id, owner)


def test_a_release_larger_than_one_grpc_message_travels_in_pieces_and_is_mined(fed, large_tree):
    _large_study(fed, "big", "site-a")
    data = _large_envelope(fed, "site-a", "big", large_tree)
    assert MIN_GRPC_MESSAGE_BYTES < len(data) < fed.miner.config.limits.max_message_bytes
    with pytest.raises(grpc.RpcError) as info:  # whole, it is more than gRPC lets through
        fed.stub("site-a").Submit(fpb.SignedEnvelope.FromString(data), timeout=30)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in info.value.details()
    with OwnerDaemon(fed.owner_config("site-a")) as daemon:
        daemon.outbox.put("big", data)
        [outcome] = daemon.resend_outbox(threading.Event())
    assert outcome.outcome == "submitted" and outcome.reason == "OK"
    stored = _stored(fed, "big", "site-a")
    assert stored.envelope == data and stored.submission_id == hashlib.sha256(data).hexdigest() == outcome.submission_id
    assert fed.wait_study("big", timeout=120).state == "done"
    [owner] = fed.stub("admin").GetResults(fpb.StudyRef(study_id="big"), timeout=30).owners
    assert owner.audit_passed and owner.leaves == large_tree.n_leaves and owner.pseudo_rows > 0


def test_pieces_and_a_whole_message_are_one_answer_to_the_miner(fed, car):
    """The same bytes sent in pieces then whole (or whole then
    in pieces) are one submission: the second is a duplicate."""
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("twin")), timeout=10).spec
    for owner, order in (("site-a", ("SubmitChunks", "Submit")), ("site-b", ("Submit", "SubmitChunks"))):
        envelope = signed_model(fed, owner, spec, *car[1:])
        data = envelope.SerializeToString()
        stub = fed.stub(owner)
        sends = {"Submit": lambda stub=stub, envelope=envelope: stub.Submit(envelope, timeout=30),
                 "SubmitChunks": lambda stub=stub, data=data: stub.SubmitChunks(envelope_chunks(data, "twin", 997),
                                                                                 timeout=30)}
        first, second = (sends[rpc]() for rpc in order)
        assert not first.duplicate and second.duplicate and first.submission_id == second.submission_id
        assert _stored(fed, "twin", owner).envelope == data
    assert fed.wait_study("twin", timeout=120).state == "done"
    results = fed.stub("admin").GetResults(fpb.StudyRef(study_id="twin"), timeout=30)
    assert sorted(o.owner_id for o in results.owners) == OWNERS and all(o.audit_passed for o in results.owners)


def test_an_answer_over_the_studys_limit_is_refused_with_sizes_and_is_final_at_the_owner(fed, large_tree, capsys):
    limit = UNARY_MAX_BYTES + 100_000
    _large_study(fed, "capped", "site-b", max_message_bytes=limit)
    data = _large_envelope(fed, "site-b", "capped", large_tree)
    before = fed.miner.store.count_submissions()
    with OwnerDaemon(fed.owner_config("site-b")) as daemon:
        daemon.outbox.put("capped", data)
        [outcome] = daemon.resend_outbox(threading.Event())
        status = read_status(daemon.config.state_dir)
        config = daemon.config.path
    want = f"RESOURCE_EXHAUSTED: the answer is {len(data)} bytes, which {TOO_LARGE} ({limit} bytes for study 'capped')"
    assert outcome.outcome == "gave-up" and outcome.reason.startswith(want)
    assert status is not None and status["gave_up"] == {"capped": outcome.reason}
    assert fed.miner.store.count_submissions() == before
    assert main(["owner", "status", "--config", str(config), "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["gave_up"]["capped"].startswith(want)


def test_a_whole_answer_over_the_studys_limit_is_refused_with_sizes(fed, car):
    """The size check is the shared path's: a small answer sent whole to a study that takes less is refused too."""
    spec = study_spec("tiny")
    spec.max_message_bytes = 1000
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10).spec
    envelope = signed_model(fed, "site-a", spec, *car[1:])
    with pytest.raises(grpc.RpcError) as info:
        fed.stub("site-a").Submit(envelope, timeout=30)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.value.details().startswith(f"the answer is {envelope.ByteSize()} bytes, which {TOO_LARGE} (1000 bytes")


def _raw_stream(fed, owner: str, messages: list[bytes], timeout: float = 30) -> grpc.RpcError:
    """Send ``messages`` as the pieces of a SubmitChunks stream, whatever bytes they are; the refusal."""
    fed.stub(owner)  # dials a channel with the owner's kit, the last of fed.channels
    method = fed.channels[-1].stream_unary("/modelshare.v1.OwnerExchange/SubmitChunks",
                                           response_deserializer=fpb.SubmitAck.FromString)
    with pytest.raises(grpc.RpcError) as info:
        method(iter(messages), timeout=timeout)
    return info.value


@pytest.mark.parametrize("edit, code, words", [
    ("digest", "INVALID_ARGUMENT", "do not have the SHA-256 the first piece declared"),
    ("declared-less", "INVALID_ARGUMENT", "the first piece declared"),
    ("early-end", "INVALID_ARGUMENT", "the upload was interrupted: the stream ended after"),
    ("repeat", "INVALID_ARGUMENT", "repeats the order"),
    ("declared-over", "RESOURCE_EXHAUSTED", TOO_LARGE),
    ("garbage", "INVALID_ARGUMENT", "piece 1 is not a valid EnvelopeChunk"),
    ("nothing", "INVALID_ARGUMENT", "the stream ended before its first piece"),
    ("unknown-study", "NOT_FOUND", "no study 'missing'"),
    ("not-an-envelope", "INVALID_ARGUMENT", "bytes received are not a SignedEnvelope"),
])
def test_hostile_streams_are_refused_and_the_miner_serves_on(fed, car, edit, code, words):
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec(f"hostile-{edit}")), timeout=10).spec
    data = signed_model(fed, "site-a", spec, *car[1:]).SerializeToString()
    pieces = list(envelope_chunks(data, spec.study_id, 1000))
    if edit == "digest":
        pieces[0].sha256 = bytes(32)
    elif edit == "declared-less":
        pieces[0].total_bytes -= 1
    elif edit == "early-end":
        del pieces[-1]
    elif edit == "repeat":
        pieces.insert(1, pieces[0])
    elif edit == "declared-over":
        pieces[0].total_bytes = 2**63
    elif edit == "unknown-study":
        pieces[0].study_id = "missing"
    elif edit == "not-an-envelope":
        pieces = list(envelope_chunks(b"\xff" * 5000, spec.study_id, 1000))
    messages = [p.SerializeToString() for p in pieces]
    if edit == "garbage":
        messages[1] = b"\xff\xff\xff"
    elif edit == "nothing":
        messages = []
    before = fed.miner.store.count_submissions()
    error = _raw_stream(fed, "site-a", messages)
    assert error.code().name == code and words in error.details(), error.details()
    assert fed.miner.store.count_submissions() == before and _stored(fed, spec.study_id, "site-a") is None
    assert fed.stub("site-b").Health(fpb.HealthRequest(), timeout=10).status == "serving"


def test_a_stalled_stream_is_cut_off_and_an_admin_may_not_stream(fed, car):
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("stalled")), timeout=10).spec
    data = signed_model(fed, "site-a", spec, *car[1:]).SerializeToString()
    pieces = list(envelope_chunks(data, "stalled", 1000))
    release_sender = threading.Event()

    def stall():
        yield pieces[0]
        release_sender.wait(60)  # the miner gives up long before this

    try:
        with pytest.raises(grpc.RpcError) as info:
            fed.stub("site-a").SubmitChunks(stall(), timeout=30)
    finally:
        release_sender.set()
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert info.value.details().startswith("the stream stalled waiting for piece 1 (1000 of")
    with pytest.raises(grpc.RpcError) as info:
        fed.stub("admin").SubmitChunks(iter(pieces), timeout=30)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "only owners submit" in info.value.details()
    assert _stored(fed, "stalled", "site-a") is None
    assert fed.stub("site-a").SubmitChunks(iter(pieces), timeout=30).submission_id == hashlib.sha256(data).hexdigest()
    assert verify_log(fed.miner.config.state_dir).ok


@pytest.mark.parametrize("trees, max_nodes", [(65, 10**6), (2, 1)])
def test_a_model_over_the_miners_tree_or_node_limit_is_final_at_the_owner(trees, max_nodes):
    """The miner's RESOURCE_EXHAUSTED for too many trees or nodes cannot pass on a resend, unlike a busy server."""
    message = fpb.ModelMessage()
    for _ in range(trees):
        message.trees.add().nodes.add()
    with pytest.raises(Rejection) as info:
        check_model(message, StudyTerms("apt", "hit_miss", None), max_nodes)
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert is_final_failure(info.value.code, info.value.message)
    assert not is_final_failure(grpc.StatusCode.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")


def test_one_owner_may_have_only_so_many_streams_in_progress(tmp_path, car):
    """``max_streams_per_owner`` = 2 over mutual TLS on loopback: site-a's third stream is refused while two of its
    streams are held open (not final at the owner); site-b streams meanwhile; once one ends, site-a's goes through.
    site-c never answers, so the study stays open and nothing is mined."""
    federation = make_federation(tmp_path, [*OWNERS, "site-c"])
    config = federation.miner_config()
    limits = dataclasses.replace(config.limits, max_streams_per_owner=2, stream_idle_seconds=60.0)
    federation.miner = start_miner(dataclasses.replace(config, limits=limits, verify_processes=0),
                                   mechanisms=registry.names())
    release_senders = threading.Event()
    try:
        spec = federation.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("busy")), timeout=10).spec
        answers = {owner: signed_model(federation, owner, spec, *car[1:]).SerializeToString() for owner in OWNERS}
        pieces = {owner: list(envelope_chunks(data, "busy", 1000)) for owner, data in answers.items()}

        def held():
            yield pieces["site-a"][0]
            release_senders.wait(60)
            yield from pieces["site-a"][1:]

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            streams = [pool.submit(federation.stub("site-a").SubmitChunks, held(), timeout=60) for _ in range(2)]
            wait_until(lambda: federation.miner.exchange.streams.streams("site-a") == 2, 30,
                       "site-a's two streams to be open")
            with pytest.raises(grpc.RpcError) as info:
                federation.stub("site-a").SubmitChunks(iter(pieces["site-a"]), timeout=30)
            code, details = info.value.code(), info.value.details()
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_streams_per_owner" in details, details
            assert "'site-a' already has 2 answers in pieces in progress" in details
            assert not is_final_failure(code, details)  # the owner's daemon sends it again later
            assert federation.stub("site-b").SubmitChunks(iter(pieces["site-b"]), timeout=30).owner_id == "site-b"
            release_senders.set()
            acks = [stream.result(timeout=60) for stream in streams]
        assert {ack.submission_id for ack in acks} == {hashlib.sha256(answers["site-a"]).hexdigest()}
        assert federation.stub("site-a").SubmitChunks(iter(pieces["site-a"]), timeout=30).duplicate
        assert not federation.miner.exchange.streams.streams("site-a")
        assert not federation.miner.exchange.streams.total_bytes
    finally:
        release_senders.set()
        federation.close()
