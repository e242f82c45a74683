"""Fuzzing (short run): hostile requests to every RPC of a running miner, hostile models and model files in process.

Strategies and the harness are in tests/fuzz_cases.py (signed models are sent whole and in pieces); bench/fuzz_soak.py
runs the same mix for >= 100,000 cases. Properties: every call answers a gRPC status that is not INTERNAL, UNKNOWN or
UNAVAILABLE, before its deadline; nothing rejected is stored; the miner keeps serving; in process,
`check_model` raises only `Rejection`, `decode_model` only `WireError`, `read_model` only `TreeError`,
and what decodes audits and regenerates (PGEN rows that satisfy their own paths). The regression
tests at the end pin the faults fuzzing found.
"""

from __future__ import annotations

import json
import time

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.federation.model_io import read_model
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.wire import MAX_TREES, WireError, decode_model
from modelshare.common.trees.tree import CategorySet, Edge, Interval, Node, Tree, TreeError
from modelshare.miner_node.config import Limits
from modelshare.miner_node.store import verify_log
from tests import fuzz_cases as fc
from tests.federation_helpers import make_federation

FUZZ = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                     HealthCheck.large_base_example])


def fuzz(examples: int) -> settings:
    """A short run: ``examples`` cases, no per-example deadline (calls carry their own), no example database."""
    return settings(FUZZ, max_examples=examples)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    fc.bases()
    with make_federation(tmp_path_factory.mktemp("fuzz"), fc.OWNERS) as fed:
        harness = fc.MinerTarget(fed)
        yield harness
        harness.close()


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-files") / "model.json"


def check(outcome: fc.Outcome) -> fc.Outcome:
    assert outcome.failure is None, outcome
    return outcome


# ------------------------------------------------------------------ the running miner, every RPC
@fuzz(80)
@given(case=fc.submit_cases())
def test_signed_hostile_models_are_answered_with_a_status_and_stored_only_when_accepted(target, case):
    check(target.run(case))


@fuzz(40)
@given(case=fc.chunk_cases())
def test_signed_hostile_models_in_pieces_and_hostile_streams(target, case):
    outcome = check(target.run(case))
    assert outcome.code != "OK" or case.edit == "none", outcome  # an edited stream is never taken


@fuzz(25)
@given(case=fc.refuse_cases())
def test_hostile_refusals(target, case):
    check(target.run(case))


@fuzz(40)
@given(case=fc.call_cases())
def test_hostile_requests_to_poll_create_get_list_results_health(target, case):
    check(target.run(case))


@pytest.mark.parametrize("rpc", fc.RPCS)
@fuzz(8)
@given(data=st.binary(max_size=300), caller=st.sampled_from(fc.PARTIES))
def test_arbitrary_request_bytes_to_every_rpc(target, rpc, data, caller):
    outcome = check(target.run(fc.RawCase(rpc, caller, data)))
    # only field-less requests can pass
    assert outcome.code != "OK" or rpc in ("Poll", "ListStudies", "Health"), outcome


def test_the_size_limits_answer_fast(target):
    """10^6 nodes (a 2 MB message) is refused from the raw node count, before any decoding; a message over
    16 MiB by gRPC; an answer in pieces over the study's 16 MiB at its first piece."""
    cases = [
        (fc.ManyNodes(10**6), "RESOURCE_EXHAUSTED", f"this miner accepts at most {Limits.max_nodes}"),
        (fc.ManyNodes(Limits.max_nodes), "RESOURCE_EXHAUSTED", f"this miner accepts at most {Limits.max_nodes}"),
        (fc.TreesEdit("replicate", MAX_TREES + 1), "RESOURCE_EXHAUSTED", f"this miner accepts at most {MAX_TREES}"),
        (fc.Oversized("nonce", Limits.max_grpc_message_bytes + 1), "RESOURCE_EXHAUSTED", "larger than max"),
    ]
    for edit, code, phrase in cases:
        before = target.rows()
        request, _ = target._submit_request(fc.SubmitCase("car-hm", (edit,)))
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            target.stubs["site-a"].Submit(request, timeout=10)
        assert time.monotonic() - started < 5.0, edit
        assert info.value.code().name == code and phrase in info.value.details(), (edit, info.value.details())
        assert target.rows() == before
    outcome = check(target.run(fc.ChunkCase(fc.SubmitCase("car-hm"), edit="declare-huge")))
    assert outcome.code == "RESOURCE_EXHAUSTED" and outcome.seconds < 5.0
    # as many trees as the wire allows reach the auditor, whose report check refuses them
    outcome = check(target.run(fc.SubmitCase("car-dps", (fc.TreesEdit("replicate", MAX_TREES),))))
    assert outcome.code == "INVALID_ARGUMENT"


def test_the_miner_serves_on_and_its_log_is_intact(target):
    assert target.healthy()
    assert target.stored_only_accepted()
    assert verify_log(target.fed.miner.config.state_dir).ok


# ------------------------------------------------------------------ in process
@fuzz(150)
@given(case=fc.local_cases())
def test_check_model_decode_audit_and_pgen_on_hostile_models(case):
    check(fc.run_local(case))


@fuzz(100)
@given(case=fc.file_cases())
def test_read_model_raises_only_tree_error_on_hostile_files(model_file, case):
    check(fc.run_file(case, model_file))


# ------------------------------------------------------------------ regressions: what fuzzing found
SCHEMA = Schema((CategoricalAttribute("a", ("x", "y", "z")), NumericAttribute("n", 0.0, 10.0)), "c", ("p", "q"))


def _leaf() -> Node:
    return Node(0, 4.0, 0.0)


def _split(attribute: int, edges: list[tuple[CategorySet | Interval, int]]) -> Node:
    return Node(0, 4.0 * len(edges), 0.0, None, attribute, [Edge(c, child) for c, child in edges])


def test_a_ring_of_nodes_off_the_root_is_not_a_tree():
    """Each node of 1 -> 2 -> 1 has one parent, so only a walk to the root shows that they hang off nothing."""
    x = CategorySet(frozenset({0}))
    with pytest.raises(TreeError, match=r"nodes \[1, 2\] are not reachable from the root"):
        Tree(SCHEMA, [_leaf(), _split(0, [(x, 2)]), _split(0, [(x, 1)])], "hit_miss")
    message = fc.build_message(fc.LocalCase("car-hm", (fc.DetachedCycle(0, 3),)))
    with pytest.raises(WireError, match="not reachable from the root"):
        decode_model(message)


@pytest.mark.parametrize("attribute, first, contradiction, narrowing", [
    (0, [CategorySet(frozenset({0})), CategorySet(frozenset({1}))], CategorySet(frozenset({2})),
     CategorySet(frozenset({0, 2}))),
    (1, [Interval(high=5.0), Interval(low=5.0)], Interval(7.0, 9.0), Interval(4.0, 9.0)),
])
def test_an_edge_that_contradicts_an_earlier_split_on_its_path_is_refused(attribute, first, contradiction, narrowing):
    """a in {x} then a in {z} (or n <= 5 then 7 < n <= 9): a leaf no tuple can reach, holding 4 tuples. It was
    accepted and passed the audit; mining then failed (PGEN raised IndexError on the categorical form)."""
    name = SCHEMA.attributes[attribute].name
    root = Node(0, 8.0, 0.0, None, attribute, [Edge(c, i + 1) for i, c in enumerate(first)])
    with pytest.raises(TreeError,
                       match=f"node 1: edge to node 3 on {name!r} admits no value the path to node 1 allows"):
        Tree(SCHEMA, [root, _split(attribute, [(contradiction, 3)]), _leaf(), _leaf()], "hit_miss")
    assert Tree(SCHEMA, [root, _split(attribute, [(narrowing, 3)]), _leaf(), _leaf()], "hit_miss").n_leaves == 2


def test_bytes_that_are_not_the_request_message_are_invalid_argument(target):
    outcome = check(target.run(fc.RawCase("Submit", "site-a", b"\xff\xff")))
    assert outcome.code == "INVALID_ARGUMENT"  # gRPC's own deserializer answered INTERNAL and logged a traceback
    stub = target.stubs["site-a"]
    with pytest.raises(grpc.RpcError) as info:
        target.channels["admin"].unary_unary("/modelshare.v1.StudyAdmin/GetStudy")(b"\x0a\x02\xc3\x28", timeout=10)
    assert "the request is not a valid StudyRef" in info.value.details()
    assert stub.Health(fpb.HealthRequest(), timeout=10).status == "serving"


def test_a_huge_id_is_quoted_in_a_clipped_status_message(target):
    """Echoed in full, a 1 MB study id made a 1 MB status trailer, which gRPC drops: the caller saw
    RESOURCE_EXHAUSTED ('metadata size exceeds hard limit') instead of the reason."""
    for call, request in ((target.stubs["admin"].GetStudy, fpb.StudyRef(study_id="x" * 10**6)),
                          (target.stubs["admin"].GetResults, fpb.StudyRef(study_id="é" * 10**5))):
        with pytest.raises(grpc.RpcError) as info:
            call(request, timeout=10)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND and info.value.details().startswith("no study '")
        assert "more bytes)" in info.value.details() and len(info.value.details().encode()) < 2200
    outcome = check(target.run(fc.SubmitCase("car-hm", study="s" * 10**5)))
    assert outcome.code == "NOT_FOUND"


def test_invalid_timestamps_and_nonces_are_invalid_argument_not_internal(target):
    """Timestamp.ToSeconds raised ValueError outside years 1-9999 (INTERNAL); nonces of any length were taken."""
    for edit in (fc.Stamp(-(2**40)), fc.Stamp(0, 2**31 - 1), fc.Stamp(0, 0, b""), fc.Stamp(0, 0, b"\x01" * 17)):
        outcome = check(target.run(fc.SubmitCase("car-hm", (edit,))))
        assert outcome.code == "INVALID_ARGUMENT", (edit, outcome)
    outcome = check(target.run(fc.CallCase("CreateStudy", "admin", (("deadline", 2**40),))))
    assert outcome.code == "INVALID_ARGUMENT"


def test_a_claim_the_auditor_cannot_compute_is_refused_and_the_verifier_survives(target):
    """k with 722 digits used to parse, then `leaf total >= k` overflowed in the audit and killed a verifier
    process (UNAVAILABLE, 'retry later', and a respawn per message). Requirements now refuse integers above
    2**53, so the re-audit fails the claim: INVALID_ARGUMENT, and the verifier lives on."""
    huge = "k-anonymity:k=" + "9" * 722
    edits = (fc.ReportField("requirement", huge), fc.ClaimEdit("clear"))
    for _ in range(3):
        outcome = check(target.run(fc.SubmitCase("car-hm", edits)))
        assert outcome.code == "INVALID_ARGUMENT"
    assert target.healthy()


def test_pgen_regenerates_exactly_what_a_decoded_model_discloses():
    for kind in fc.KINDS:
        model = decode_model(fc.build_message(fc.LocalCase(kind)))
        assert fc._pgen_property(model.trees) is None
        assert np.isclose(sum(t.root.total for t in model.trees), sum(p.total for t in model.trees for p in t.paths()))


@pytest.mark.parametrize("document", [{"trees": [{"disclosure": float("-inf")}]},
                                      {"trees": [{"disclosure": float("nan")}]},
                                      {"report": {"claims": [{"leaf": 1e400}]}}])
def test_a_model_file_with_a_non_finite_number_for_an_integer_field_is_a_tree_error(tmp_path, document):
    """Found by bench/fuzz_soak.py: protobuf's JSON parser let -Infinity in an enum escape as OverflowError."""
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(document))
    with pytest.raises(TreeError, match="not a ModelMessage"):
        read_model(path)


@pytest.mark.parametrize("data", [b"\r\xf2\r\xaa\xc7\x1a\xe9", b"a,b\r\n\xff\r,1\n"])
def test_an_evaluation_table_with_carriage_returns_and_bad_bytes_is_a_schema_error(data):
    """Found by bench/fuzz_soak.py: CreateStudy with these bytes answered INTERNAL (csv.Error escaped the reader)."""
    from modelshare.common.data.datasets import load_dataset
    from modelshare.common.data.schema import SchemaError
    from modelshare.miner_node.mining import load_evaluation

    with pytest.raises(SchemaError, match="not UTF-8"):
        load_evaluation(data, load_dataset("car").schema)
