"""Owner side without a network: the local table, signed submissions and refusals, the durable outbox.

The daemon's transport is exercised with an in-process fake stub (no gRPC server): it checks that
every answer is on disk before the first send, that retries send identical bytes, and how each
status the miner may answer with settles, defers or abandons a study.
"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.kit import Party, Roster
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.refusal import SENTENCES, Refusal
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import (
    generate_signing_key,
    key_id,
    save_signing_key,
    verify_envelope,
)
from modelshare.common.federation.study import StudyError, spec_from_mapping
from modelshare.common.federation.wire import decode_model, tree_to_pb
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable
from modelshare.common.mechanisms.release import local_learner, release
from modelshare.owner_node.config import OwnerConfig, OwnerConfigError
from modelshare.owner_node.daemon import Backoff, Outbox, OwnerDaemon, deliver, envelope_kind
from modelshare.owner_node.policy import Policy
from modelshare.owner_node.training import (
    DataUnavailable,
    LocalDataError,
    build_refusal,
    build_submission,
    load_local_table,
)
from tests.federation_helpers import make_owner_config

NO_WAIT = Backoff(base=0.0, cap=0.0, attempts=4)


def study(study_id: str = "car-1", mechanism: str = "apt", requirement: str | None = "k-anonymity:k=5",
          disclosure: str = "hit_miss", learner: str = "multiway", **training: Any) -> fpb.StudySpec:
    release: dict[str, Any] = {"mechanism": mechanism, "disclosure": disclosure}
    if requirement is not None:
        release["requirement"] = requirement
    data = {"study": {"id": study_id, "seed": 3}, "schema": {"dataset": "car"}, "release": release,
            "training": {"learner": learner, "min_samples_leaf": 1, **training}}
    return spec_from_mapping(data).spec


@pytest.fixture(scope="module")
def key():
    return generate_signing_key()


@pytest.fixture
def car_table(tmp_path: Path) -> Path:
    path = tmp_path / "table.csv"
    load_dataset("car").frame.to_csv(path, index=False)
    return path


# ------------------------------------------------------------- local table
def test_load_local_table_encodes_with_the_study_schema(tmp_path, car_table, car):
    schema, X_ref, y_ref = car
    X, y = load_local_table(make_owner_config(tmp_path, car_table), schema)
    np.testing.assert_array_equal(X, X_ref)
    np.testing.assert_array_equal(y, y_ref)


def test_the_class_column_may_have_a_local_name(tmp_path, car):
    schema, _, y_ref = car
    path = tmp_path / "renamed.tsv"
    load_dataset("car").frame.rename(columns={"class": "verdict"}).to_csv(path, sep="\t", index=False)
    _, y = load_local_table(make_owner_config(tmp_path, path, class_column="verdict"), schema)
    np.testing.assert_array_equal(y, y_ref)


def test_a_bad_value_is_named_locally_and_its_refusal_says_only_the_code(tmp_path, car, key):
    schema = car[0]
    frame = load_dataset("car").frame.astype(object)
    frame.loc[6, "buying"] = "secret-value"
    path = tmp_path / "table.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(LocalDataError) as info:
        load_local_table(make_owner_config(tmp_path, path), schema)
    full = str(info.value)
    assert str(path) in full and "row 7" in full and "column 'buying'" in full and "'secret-value'" in full
    assert "unknown category" in full
    envelope = build_refusal(study().study_id, Refusal("bad-local-data"), owner_id="site-a", key=key)
    refusal = fpb.OwnerRefusal.FromString(verify_envelope(envelope, key.public_key()))
    assert refusal.code == fpb.REFUSAL_CODE_BAD_LOCAL_DATA
    assert refusal.reason == f"{SENTENCES['bad-local-data']}; the details stay in the site's own log"
    assert not any(part in envelope.payload for part in (b"secret-value", b"row 7", b"buying", b"table.csv"))


def test_missing_columns_and_missing_files_are_local_data_errors(tmp_path, car):
    schema = car[0]
    path = tmp_path / "table.csv"
    load_dataset("car").frame.drop(columns=["doors"]).to_csv(path, index=False)
    with pytest.raises(LocalDataError, match=r"column 'doors': the table lacks columns \['doors'\]"):
        load_local_table(make_owner_config(tmp_path, path), schema)
    load_dataset("car").frame.to_csv(path, index=False)
    with pytest.raises(LocalDataError, match=r"column 'label': the table lacks columns \['label'\]"):
        load_local_table(make_owner_config(tmp_path, path, class_column="label"), schema)
    with pytest.raises(DataUnavailable, match=r"the data file .*gone.csv is missing"):
        load_local_table(make_owner_config(tmp_path, tmp_path / "gone.csv"), schema)


# ------------------------------------------------------------ envelopes
def test_a_submission_verifies_decodes_and_passes_the_audit(key, car):
    _, X, y = car
    spec = study(requirement="cl-diversity:c=10,l=3")
    envelope = build_submission(study_from_pb(spec), X, y, owner_id="site-a", key=key)
    message = fpb.ModelMessage.FromString(verify_envelope(envelope, key.public_key()))
    assert (message.study_id, message.owner_id) == ("car-1", "site-a")
    assert message.schema_fingerprint == spec.schema_fingerprint and len(message.nonce) == 16
    model = decode_model(message)
    assert model.report is not None and model.report.requirement == "cl-diversity:c=10,l=3"
    tree = model.trees[0]
    assert tree.disclosure == "hit_miss"
    assert audit(tree, model.report).passed


def test_training_is_deterministic_in_the_study_seed(key, car):
    _, X, y = car
    spec = study(learner="cart", mechanism="prune-parent", requirement="k-anonymity:k=10", disclosure="counts")
    spec.seed = 2**40 + 5  # a uint64 seed beyond scikit-learn's 32 bits still works
    first, second = (fpb.ModelMessage.FromString(
        build_submission(study_from_pb(spec), X, y, owner_id="a", key=key).payload) for _ in range(2))
    assert first.trees == second.trees and first.nonce != second.nonce


def test_the_study_sets_the_admissible_learners_category_grouping(key, car):
    """[training] category_split and pairing reach the owner's learner: the tree is the one local_learner grows."""
    schema, X, y = car
    trees = {}
    for split in ("grouped", "binary"):
        spec = study(learner="admissible", requirement="k-anonymity:k=10", disclosure="counts", category_split=split,
                     pairing="eager")
        assert study_from_pb(spec).describe()["category_split"] == split
        assert study_from_pb(spec).describe()["pairing"] == "eager"
        submission = build_submission(study_from_pb(spec), X, y, owner_id="a", key=key)
        trees[split] = decode_model(fpb.ModelMessage.FromString(submission.payload)).trees[0]
        local = local_learner("admissible", schema, "apt", requirement="k-anonymity:k=10", disclosure="counts",
                              random_state=3, min_samples_leaf=1, category_split=split, pairing="eager")
        released = release("apt", tree=local.fit(X, y).tree_, requirement="k-anonymity:k=10", disclosure="counts")
        assert tree_to_pb(trees[split]) == tree_to_pb(released.tree)
    assert tree_to_pb(trees["grouped"]) != tree_to_pb(trees["binary"])
    assert all(len(node.edges) == 2 for node in trees["binary"].nodes if not node.is_leaf)


@pytest.mark.parametrize("training, said", [
    ({"learner": "multiway", "category_split": "binary"}, "category_split applies to the admissible learner only"),
    ({"learner": "admissible", "pairing": "lazy"}, "pairing"),
    ({"learner": "admissible", "grouping": "binary"}, "grouping"),
    ({"learner": "multiway", "confidence": "none"}, "confidence applies to the admissible learner only"),
    ({"learner": "admissible", "confidence": 1.5}, "confidence"),
    ({"learner": "admissible", "confidence": "off"}, "confidence"),
])
def test_a_study_refuses_learner_options_it_cannot_apply(training, said):
    with pytest.raises(StudyError, match=said):
        study(**training)


def test_the_study_releases_the_grown_tree_with_confidence_none(key, car):
    """[training] confidence = "none" reaches the owner: the released tree is the unpruned one local_learner grows."""
    schema, X, y = car
    requirement = "cl-diversity:c=5,l=2"
    trees = {}
    for confidence in ("none", 0.25):
        spec = study(learner="admissible", requirement=requirement, confidence=confidence)
        assert study_from_pb(spec).describe()["confidence"] == confidence
        trees[confidence] = decode_model(fpb.ModelMessage.FromString(
            build_submission(study_from_pb(spec), X, y, owner_id="a", key=key).payload)).trees[0]
        local = local_learner("admissible", schema, "apt", requirement=requirement, disclosure="hit_miss",
                              random_state=3, min_samples_leaf=1, confidence=None
                              if confidence == "none" else confidence)
        released = release("apt", tree=local.fit(X, y).tree_, requirement=requirement, disclosure="hit_miss")
        assert tree_to_pb(trees[confidence]) == tree_to_pb(released.tree)
    assert trees["none"].n_leaves > trees[0.25].n_leaves


def test_an_announced_spec_with_grouping_for_another_learner_is_refused():
    """The owner re-checks the spec it receives: grouping set on the wire for a multiway study fails check_spec."""
    spec = study(learner="multiway")
    spec.category_split = "binary"
    with pytest.raises(StudyError, match=r"\[training\]: category_split applies to the admissible learner only"):
        study_from_pb(spec)
    spec = study(learner="admissible")
    spec.confidence = 1.0
    with pytest.raises(StudyError, match=r"\[training\]: confidence must lie strictly between 0 and 1"):
        study_from_pb(spec)


def test_an_unsatisfiable_requirement_raises_for_the_caller_to_refuse(key, car):
    _, X, y = car
    spec = study(requirement="k-anonymity:k=5000")
    with pytest.raises(RequirementUnsatisfiable):
        build_submission(study_from_pb(spec), X, y, owner_id="site-a", key=key)
    assert str(Refusal("unsatisfiable")) == ("unsatisfiable: no release of this site's table meets the study's "
                                             "requirement; nothing is released; the details stay in the site's own log")


def test_a_refusal_is_signed_with_a_nonce_and_time(key):
    envelope = build_refusal(study().study_id, Refusal("policy", ("mechanisms", "min_k", "mechanisms")),
                             owner_id="site-a", key=key)
    refusal = fpb.OwnerRefusal.FromString(verify_envelope(envelope, key.public_key()))
    assert (refusal.study_id, refusal.owner_id, refusal.code, refusal.reason) == (
        "car-1", "site-a", fpb.REFUSAL_CODE_POLICY, "this site's policy does not allow this study "
                                                    "(policy keys: mechanisms, min_k)")
    assert len(refusal.nonce) == 16 and refusal.timestamp.seconds > 0
    assert envelope_kind(envelope.SerializeToString()) == "refuse"


# --------------------------------------------------------------- outbox
class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class FakeStub:
    """Answers Submit/Refuse from a script; records what was sent and whether it was on disk first."""

    def __init__(self, outbox: Outbox, *script: Any) -> None:
        self.outbox, self.script = outbox, list(script)
        self.sent: list[tuple[str, bytes, float, bool]] = []

    def _call(self, method: str, envelope: fpb.SignedEnvelope, timeout: float, metadata: Any = ()) -> fpb.SubmitAck:
        data = envelope.SerializeToString()
        on_disk = [p.read_bytes() for p in self.outbox.pending_dir.glob("*.bin")]
        self.sent.append((method, data, timeout, data in on_disk))
        step = self.script.pop(0)
        if isinstance(step, grpc.StatusCode):
            raise FakeRpcError(step, f"miner says {step.name.lower()}")
        if isinstance(step, tuple):
            raise FakeRpcError(*step)
        return step

    def Submit(self, envelope: fpb.SignedEnvelope, timeout: float, metadata: Any = ()) -> fpb.SubmitAck:
        return self._call("Submit", envelope, timeout, metadata)

    def Refuse(self, envelope: fpb.SignedEnvelope, timeout: float, metadata: Any = ()) -> fpb.SubmitAck:
        return self._call("Refuse", envelope, timeout, metadata)


def ack(study_id: str = "car-1", duplicate: bool = False) -> fpb.SubmitAck:
    return fpb.SubmitAck(study_id=study_id, owner_id="site-a", submission_id="ab" * 32, duplicate=duplicate)


@pytest.fixture
def stored(tmp_path, key, car) -> tuple[Outbox, bytes]:
    _, X, y = car
    outbox = Outbox(tmp_path / "state")
    data = build_submission(study_from_pb(study()), X, y, owner_id="site-a", key=key).SerializeToString()
    path = outbox.put("car-1", data)
    assert path == tmp_path / "state" / "outbox" / "car-1.bin" and path.read_bytes() == data
    assert outbox.pending() == ["car-1"] and envelope_kind(data) == "submit"
    return outbox, data


def test_the_answer_is_on_disk_before_it_is_sent_and_moves_to_sent_after_the_ack(stored):
    outbox, data = stored
    stub = FakeStub(outbox, ack())
    outcome = deliver(stub, outbox, "car-1", stop=threading.Event(), backoff=NO_WAIT)
    assert (outcome.outcome, outcome.reason, outcome.submission_id) == ("submitted", "OK", "ab" * 32)
    assert stub.sent == [("Submit", data, 30, True)]
    assert outbox.pending() == [] and outbox.is_sent("car-1")
    assert (outbox.sent_dir / "car-1.bin").read_bytes() == data
    [line] = outbox.answers.read_text().splitlines()
    record = json.loads(line)
    assert (record["study_id"], record["outcome"], record["submission_id"], record["status"]) == \
        ("car-1", "submitted", "ab" * 32, "OK")
    assert record["time"]


def test_retries_resend_identical_bytes_after_transient_failures(stored):
    outbox, data = stored
    stub = FakeStub(outbox, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, ack(duplicate=True))
    outcome = deliver(stub, outbox, "car-1", stop=threading.Event(), backoff=NO_WAIT)
    assert outcome.outcome == "submitted" and outcome.reason == "duplicate"
    assert [s[1] for s in stub.sent] == [data, data, data]


@pytest.mark.parametrize("code", [grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION])
def test_a_final_status_settles_the_study(stored, code):
    outbox, _ = stored
    outcome = deliver(FakeStub(outbox, code), outbox, "car-1", stop=threading.Event(), backoff=NO_WAIT)
    assert outcome.outcome == "submitted" and outcome.reason.startswith(code.name)
    assert outbox.is_sent("car-1")
    assert json.loads(outbox.answers.read_text())["status"] == code.name


@pytest.mark.parametrize("code", [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.UNAUTHENTICATED])
def test_a_rejection_gives_up_and_keeps_the_outbox_file(stored, code, caplog):
    outbox, _ = stored
    stub = FakeStub(outbox, code)
    outcome = deliver(stub, outbox, "car-1", stop=threading.Event(), backoff=NO_WAIT)
    assert outcome.outcome == "gave-up" and outcome.reason == f"{code.name}: miner says {code.name.lower()}"
    assert len(stub.sent) == 1 and outbox.pending() == ["car-1"] and not outbox.answers.exists()
    assert f"miner says {code.name.lower()}" in caplog.text


def test_a_message_over_the_miners_size_limit_is_final_and_a_busy_miner_is_retried(stored):
    outbox, data = stored
    too_large = (grpc.StatusCode.RESOURCE_EXHAUSTED, "Received message larger than max (56939713 vs. 16777216)")
    stub = FakeStub(outbox, too_large)
    outcome = deliver(stub, outbox, "car-1", stop=threading.Event(), backoff=NO_WAIT)
    assert outcome.outcome == "gave-up" and "larger than max" in outcome.reason and len(stub.sent) == 1
    busy = (grpc.StatusCode.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")
    stub = FakeStub(outbox, busy, ack())
    assert deliver(stub, outbox, "car-1", stop=threading.Event(), backoff=NO_WAIT).outcome == "submitted"
    assert [s[1] for s in stub.sent] == [data, data]


def test_exhausted_retries_and_stop_defer_the_study(stored):
    outbox, _ = stored
    stub = FakeStub(outbox, *[grpc.StatusCode.UNAVAILABLE] * NO_WAIT.attempts)
    outcome = deliver(stub, outbox, "car-1", stop=threading.Event(), backoff=NO_WAIT)
    assert outcome.outcome == "deferred" and len(stub.sent) == NO_WAIT.attempts
    stop = threading.Event()
    stop.set()
    assert deliver(FakeStub(outbox), outbox, "car-1", stop=stop).reason == "stop requested"
    assert outbox.pending() == ["car-1"]


def test_backoff_is_full_jitter_under_the_cap():
    backoff, rng = Backoff(), random.Random(0)
    delays = [backoff.delay(n, rng) for n in range(100)]
    assert all(0 <= d <= min(4.0, 0.5 * 2**n) for n, d in enumerate(delays))
    assert max(delays[10:]) > 3  # jittered up to the cap, not collapsed to zero
    assert 1.5 < sum(delays[10:]) / 90 < 2.5  # uniform under the cap: about 2 s on average


def test_outbox_refuses_study_ids_that_are_not_file_names(tmp_path):
    with pytest.raises(ValueError, match="not usable as a file name"):
        Outbox(tmp_path).put("../escape", b"x")


# --------------------------------------------------------------- daemon
@pytest.fixture
def daemon_config(tmp_path, car_table, key) -> OwnerConfig:
    save_signing_key(key, tmp_path / "signing.key")
    parties = [Party("site-a", "owner", key.public_key(), key_id(key.public_key()), "0" * 64),
               Party("miner", "miner", (miner := generate_signing_key().public_key()), key_id(miner), "1" * 64)]
    Roster("demo", parties).save(tmp_path / "roster.json")
    return make_owner_config(tmp_path, car_table, policy=Policy(min_k=5))


def test_the_daemon_answers_once_and_sends_only_reason_codes(daemon_config, monkeypatch, caplog):
    frame = load_dataset("car").frame.astype(object)
    frame.loc[0, "safety"] = "patient-42"
    frame.to_csv(daemon_config.data_path, index=False)
    with OwnerDaemon(daemon_config, insecure=True, backoff=NO_WAIT) as daemon:
        stub = FakeStub(daemon.outbox, ack("bad"), ack("weak"))
        monkeypatch.setattr(daemon, "_stub", stub)
        stop = threading.Event()
        data_error = daemon.answer(study("bad"), stop)
        weak = daemon.answer(study("weak", requirement="k-anonymity:k=2"), stop)
        again = daemon.answer(study("weak", requirement="k-anonymity:k=2"), stop)
    assert (data_error.outcome, weak.outcome, again.outcome) == ("refused", "refused", "skipped")
    refusals = [fpb.OwnerRefusal.FromString(fpb.SignedEnvelope.FromString(s[1]).payload) for s in stub.sent]
    assert [(r.code, r.reason) for r in refusals] == [
        (fpb.REFUSAL_CODE_BAD_LOCAL_DATA, Refusal("bad-local-data").sentence),
        (fpb.REFUSAL_CODE_POLICY, "this site's policy does not allow this study (policy keys: min_k)")]
    assert not any(part in s[1] for s in stub.sent for part in (b"patient-42", b"row 1", b"safety"))
    # the details stay in the site's own log
    assert "row 1, column 'safety'" in caplog.text and "'patient-42'" in caplog.text
    assert "study requires k-anonymity:k=2; this site requires at least k=5" in caplog.text
    assert all(s[0] == "Refuse" and s[3] for s in stub.sent)


def test_the_daemon_resends_the_outbox_before_anything_else(daemon_config, key, car, monkeypatch):
    _, X, y = car
    outbox = Outbox(daemon_config.state_dir)
    data = build_submission(study_from_pb(study()), X, y, owner_id="site-a", key=key).SerializeToString()
    outbox.put("car-1", data)
    with OwnerDaemon(daemon_config, insecure=True, backoff=NO_WAIT) as daemon:
        stub = FakeStub(daemon.outbox, ack())
        monkeypatch.setattr(daemon, "_stub", stub)
        [outcome] = daemon.resend_outbox(threading.Event())
        assert daemon.answer(study(), threading.Event()).outcome == "skipped"
    assert outcome.outcome == "submitted" and stub.sent[0][1] == data


def test_insecure_in_the_config_alone_does_not_turn_tls_off(daemon_config):
    config = make_owner_config(daemon_config.path.parent, daemon_config.data_path, insecure=True)
    with pytest.raises(OwnerConfigError, match="insecure = true takes effect only with --insecure"):
        OwnerDaemon(config)


def test_the_daemon_checks_the_roster_at_start(daemon_config, tmp_path):
    save_signing_key(generate_signing_key(), tmp_path / "signing.key")
    with pytest.raises(OwnerConfigError, match="is not the key roster .* holds for owner 'site-a'"):
        OwnerDaemon(daemon_config, insecure=True)
