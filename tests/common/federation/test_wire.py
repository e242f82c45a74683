"""The wire codec and model files: round trips, hostile messages, signed files, generated code."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from modelshare.common.federation.model_io import (
    read_model,
    read_model_file,
    read_tree,
    write_message,
    write_release,
    write_tree,
)
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import model_pb2 as mpb
from modelshare.common.federation.signing import SignatureError, generate_signing_key, verify_envelope
from modelshare.common.federation.wire import (
    WireError,
    decode_model,
    model_message,
    report_from_pb,
    report_to_pb,
    schema_from_pb,
    schema_to_pb,
    tree_from_pb,
    tree_to_pb,
)
from modelshare.common.mechanisms.release import release
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.tree import Interval, TreeError

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def mixed_release(mixed):
    schema, X, y = mixed
    tree = make_learner("cart", schema, random_state=0, max_depth=5, public_cuts=True).fit(X, y).tree_
    return release("prune-parent", tree=tree, requirement="k-anonymity:k=10", disclosure="counts")


@pytest.fixture(scope="module")
def car_release(car):
    schema, X, y = car
    tree = make_learner("multiway", schema, random_state=0).fit(X, y).tree_
    return release("apt", tree=tree, requirement="cl-diversity:c=5,l=2", disclosure="hit_miss")


def same_tree(a, b) -> bool:
    return tree_to_pb(a) == tree_to_pb(b) and [p.key for p in a.paths()] == [p.key for p in b.paths()]


def test_schema_round_trip_keeps_the_fingerprint(mixed, car):
    for schema, _, _ in (mixed, car):
        back = schema_from_pb(mpb.Schema.FromString(schema_to_pb(schema).SerializeToString()))
        assert back == schema and back.fingerprint == schema.fingerprint


@pytest.mark.parametrize("which", ["mixed_release", "car_release"])
def test_tree_and_report_round_trip(which, request):
    release = request.getfixturevalue(which)
    wire = mpb.Tree.FromString(tree_to_pb(release.tree).SerializeToString())
    back = tree_from_pb(wire, release.tree.schema)
    assert same_tree(back, release.tree) and back.disclosure == release.tree.disclosure
    report = report_from_pb(mpb.PrivacyReport.FromString(report_to_pb(release.report).SerializeToString()))
    assert report == release.report


def test_infinite_interval_ends_survive_binary_and_json(mixed_release, tmp_path):
    ends = [(e.constraint.low, e.constraint.high) for n in mixed_release.tree.nodes for e in n.edges
            if isinstance(e.constraint, Interval)]
    assert any(math.isinf(lo) for lo, _ in ends) and any(math.isinf(hi) for _, hi in ends)
    path = tmp_path / "m.json"
    write_release(mixed_release, path)
    assert "Infinity" in path.read_text()
    assert same_tree(read_tree(path), mixed_release.tree)


def _hostile(release, mutate) -> fpb.ModelMessage:
    msg = model_message(release)
    mutate(msg)
    return fpb.ModelMessage.FromString(msg.SerializeToString())


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda m: m.trees[0].nodes[0].edges[0].__setattr__("child", 10**6), "does not exist"),
        (lambda m: m.trees[0].nodes[0].edges[1].__setattr__("child", 0), "more than one parent"),
        (lambda m: m.trees[0].nodes[1].__setattr__("label", 99), "class index 99"),
        (lambda m: m.trees[0].nodes[0].counts.append(1.0), "class counts"),
        (lambda m: m.trees[0].nodes[0].__setattr__("attribute", 77), "not an attribute index"),
        (lambda m: m.trees[0].__setattr__("disclosure", 42), "disclosure 42"),
        (lambda m: m.trees[0].nodes[0].edges[0].ClearField("constraint"), "no constraint"),
        (lambda m: m.trees[0].nodes[0].edges[0].constraint.interval.__setattr__("low", float("nan")), "NaN"),
        (lambda m: m.trees[0].nodes[2].counts.__setitem__(0, -5.0), "non-negative"),
        (lambda m: m.__setattr__("schema_fingerprint", "0" * 64), "schema_fingerprint"),
        (lambda m: m.ClearField("trees"), "1 to 64 trees"),
        (lambda m: m.schema.attributes[0].ClearField("domain"), "has no domain"),
        (lambda m: m.trees[0].ClearField("nodes"), "at least a root"),
        (lambda m: m.trees[0].ClearField("disclosure"), "disclosure 0"),
    ],
)
def test_hostile_messages_raise_wire_error_naming_the_fault(mixed_release, mutate, fragment):
    msg = _hostile(mixed_release, mutate)
    with pytest.raises(WireError, match=fragment):
        decode_model(msg)


def test_a_message_binds_study_owner_fingerprint_nonce_and_time(mixed_release):
    a = model_message(mixed_release, study_id="s1", owner_id="site-a")
    b = model_message(mixed_release, study_id="s1", owner_id="site-a")
    assert a.study_id == "s1" and a.owner_id == "site-a"
    assert a.schema_fingerprint == mixed_release.tree.schema.fingerprint
    assert len(a.nonce) == 16 and a.nonce != b.nonce
    assert a.timestamp.seconds > 1_700_000_000


# -------------------------------------------------------------- model files


def test_release_file_round_trips(tmp_path, car_release):
    path = tmp_path / "model.json"
    write_release(car_release, path)
    assert not (tmp_path / "model.json.tmp").exists()
    data = json.loads(path.read_text())
    assert set(data) >= {"schema_fingerprint", "schema", "trees", "report", "nonce", "timestamp"}
    (tree,), report = read_model(path)
    assert same_tree(tree, car_release.tree)
    assert report == car_release.report
    assert report.parameters == {"disclosure": "hit_miss", "guard_pruned_leaves": 0}


def test_bare_tree_file_reads_with_no_report(tmp_path, mixed_release):
    path = tmp_path / "tree.json"
    write_tree(mixed_release.tree, path)
    (back,), report = read_model(path)
    assert report is None
    assert [n.counts.tolist() for n in back.nodes] == [n.counts.tolist() for n in mixed_release.tree.nodes]


def test_signed_file_verifies_and_a_flipped_byte_does_not(tmp_path, car_release):
    key = generate_signing_key()
    path = tmp_path / "signed.json"
    write_release(car_release, path, study_id="s", owner_id="o", signing_key=key)
    model = read_model_file(path)
    assert model.envelope is not None and model.message.owner_id == "o"
    assert verify_envelope(model.envelope, key.public_key()) == model.envelope.payload
    tampered = fpb.SignedEnvelope()
    tampered.CopyFrom(model.envelope)
    payload = bytearray(tampered.payload)
    payload[-1] ^= 1
    tampered.payload = bytes(payload)
    with pytest.raises(SignatureError):
        verify_envelope(tampered, key.public_key())
    with pytest.raises(SignatureError):
        verify_envelope(model.envelope, generate_signing_key().public_key())


@pytest.mark.parametrize(
    "content, fragment",
    [
        ('{"schema": ', "not a JSON model file"),
        ("\xff\xfe garbage", "not a JSON model file"),
        ("[1, 2, 3]", "JSON object at top level"),
        ('{"format": "modelshare.release/1"}', "not a ModelMessage"),
        ('{"payload": "!!notbase64"}', "not a ModelMessage"),
        ('{"schema_fingerprint": "x"}', "schema"),
    ],
)
def test_corrupt_file_raises_tree_error_naming_the_file(tmp_path, content, fragment):
    path = tmp_path / "broken-model.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(TreeError) as info:
        read_model(path)
    assert str(path) in str(info.value) and fragment in str(info.value)
    with pytest.raises(TreeError, match="absent.json"):
        read_model(tmp_path / "absent.json")


def test_file_with_a_broken_report_names_the_file(tmp_path, car_release):
    msg = model_message(car_release)
    msg.report.mechanism = ""
    path = tmp_path / "release.json"
    write_message(msg, path)
    with pytest.raises(TreeError, match="mechanism") as info:
        read_model(path)
    assert str(path) in str(info.value)


def test_integral_parameters_come_back_as_ints(car_release):
    report = report_from_pb(report_to_pb(car_release.report.__class__(mechanism="x", parameters={"s": 9, "beta": 0.5})))
    assert report.parameters == {"s": 9, "beta": 0.5} and isinstance(report.parameters["s"], int)


def test_generated_code_is_current():
    pytest.importorskip("grpc_tools", reason="grpcio-tools is in the test extra")
    run = subprocess.run([sys.executable, str(ROOT / "protos" / "generate.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_check_detects_stale_generated_code(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools is in the test extra")
    sys.path.insert(0, str(ROOT / "protos"))
    try:
        import generate
    finally:
        sys.path.pop(0)
    generate.generate(tmp_path)
    assert generate.differences(tmp_path, tmp_path) == []
    stale = tmp_path / "model_pb2.py"
    stale.write_text(stale.read_text() + "# edited\n")
    fresh = tmp_path / "fresh"
    generate.generate(fresh)
    assert generate.differences(tmp_path, fresh) == ["model_pb2.py"]
