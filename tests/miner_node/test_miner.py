"""The miner over real mutual TLS on loopback: accepting, rejecting with reasons, mining, restarts."""

from __future__ import annotations

import sqlite3

import grpc
import pytest

from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.miner_node.store import verify_log
from tests.federation_helpers import (
    deal,
    make_federation,
    signed_model,
    signed_refusal,
    study_spec,
)

OWNERS = ["site-a", "site-b", "site-c"]


@pytest.fixture()
def fed(tmp_path):
    with make_federation(tmp_path, OWNERS) as federation:
        yield federation


@pytest.fixture(scope="module")
def car_parts(car):
    return deal(*car[1:], OWNERS)


def stored_rows(fed) -> tuple[int, int]:
    db = sqlite3.connect(fed.miner.config.state_dir / "miner.sqlite")
    try:
        return (db.execute("SELECT COUNT(*) FROM submissions").fetchone()[0],
                db.execute("SELECT COUNT(*) FROM nonces").fetchone()[0])
    finally:
        db.close()


def test_a_study_runs_from_creation_to_results(fed, car_parts):
    admin = fed.stub("admin")
    status = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s1")), timeout=10)
    assert status.state == "open" and list(status.spec.owners) == OWNERS and status.spec.quorum == 3
    for owner in OWNERS:
        polled = fed.stub(owner).Poll(fpb.PollRequest(wait_seconds=0), timeout=10)
        assert [a.spec.study_id for a in polled.studies] == ["s1"]
        ack = fed.stub(owner).Submit(signed_model(fed, owner, status.spec, *car_parts[owner]), timeout=30)
        assert ack.owner_id == owner and not ack.duplicate
        assert not fed.stub(owner).Poll(fpb.PollRequest(wait_seconds=0), timeout=10).studies
    done = fed.wait_study("s1")
    assert done.state == "done", done.reason
    results = admin.GetResults(fpb.StudyRef(study_id="s1"), timeout=10)
    assert [o.owner_id for o in results.owners] == OWNERS and all(o.audit_passed for o in results.owners)
    assert results.models[0].name == "decision-tree" and results.models[0].train_rows > 0
    assert verify_log(fed.miner.config.state_dir).ok


def test_resubmitting_the_identical_envelope_returns_the_same_ack(fed, car_parts):
    admin = fed.stub("admin")
    spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s2")), timeout=10).spec
    envelope = signed_model(fed, "site-a", spec, *car_parts["site-a"])
    owner = fed.stub("site-a")
    first = owner.Submit(envelope, timeout=30)
    again = owner.Submit(envelope, timeout=30)
    assert again.duplicate and again.submission_id == first.submission_id and again.accepted_at == first.accepted_at
    with pytest.raises(grpc.RpcError) as info:
        owner.Submit(signed_model(fed, "site-a", spec, *car_parts["site-a"]), timeout=30)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS and "different model" in info.value.details()
    assert stored_rows(fed) == (1, 1)


def rejection(fed, party, envelope):
    with pytest.raises(grpc.RpcError) as info:
        fed.stub(party).Submit(envelope, timeout=30)
    return info.value.code(), info.value.details()


def test_each_rejection_has_its_reason_and_stores_nothing(fed, car_parts, tmp_path):
    admin = fed.stub("admin")
    spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s3",
                                                                    owners=["site-a", "site-b"])), timeout=10).spec
    X, y = car_parts["site-a"]
    good = signed_model(fed, "site-a", spec, X, y)

    # TLS identity is not the signer
    assert rejection(fed, "site-b", good)[1].startswith("TLS identity 'site-b' does not match the signer 'site-a'")
    # signature over altered bytes
    forged = fpb.SignedEnvelope()
    forged.CopyFrom(good)
    forged.payload = good.payload[:-1] + bytes([good.payload[-1] ^ 1])
    code, why = rejection(fed, "site-a", forged)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "signature does not verify" in why
    # not invited
    code, why = rejection(fed, "site-c", signed_model(fed, "site-c", spec, X, y))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "not invited" in why
    # unknown study
    other = study_spec("nope")
    code, why = rejection(fed, "site-a", signed_model(fed, "site-a", other, X, y))
    assert code == grpc.StatusCode.NOT_FOUND and "no study 'nope'" in why
    # schema fingerprint
    code, why = rejection(fed, "site-a", signed_model(fed, "site-a", spec, X, y,
                                                     mutate=lambda m: setattr(m, "schema_fingerprint", "ab" * 32)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "schema fingerprint" in why
    # stale timestamp
    code, why = rejection(fed, "site-a", signed_model(fed, "site-a", spec, X, y,
                                                     mutate=lambda m: m.timestamp.FromSeconds(
                                                         m.timestamp.seconds - 3600)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "s old; the window is 300 s" in why
    # weaker than the study requires (k=2 < k=5), honestly audited
    code, why = rejection(fed, "site-a", signed_model(fed, "site-a", spec, X, y, requirement="k-anonymity:k=2"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "weaker than the study requires" in why
    # a claim the tree does not meet: the re-audit catches it
    def lie(m):
        m.report.requirement = "k-anonymity:k=500"
        for c in m.report.claims:
            c.requirement = "k-anonymity:k=500"
    code, why = rejection(fed, "site-a", signed_model(fed, "site-a", spec, X, y, mutate=lie))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "re-audit of the claims failed" in why
    # malformed model
    code, why = rejection(fed, "site-a", signed_model(fed, "site-a", spec, X, y,
                                                     mutate=lambda m: m.trees[0].nodes[0].edges[0].__setattr__(
                                                         "child", 10**6)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "malformed model" in why
    # wrong mechanism
    code, why = rejection(fed, "site-a", signed_model(fed, "site-a", spec, X, y, mechanism="prune-leaf"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "the study requires 'apt'" in why
    # an owner may not act as the admin
    with pytest.raises(grpc.RpcError) as info:
        fed.stub("site-a").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s4")), timeout=10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "only the admin" in info.value.details()
    assert stored_rows(fed) == (0, 0)
    # then the good one is accepted, and its replay under a new study id cannot happen (nonce)
    assert fed.stub("site-a").Submit(good, timeout=30).owner_id == "site-a"
    assert stored_rows(fed) == (1, 1)
    log = verify_log(fed.miner.config.state_dir)
    assert log.ok and log.entries >= 12


def test_refusal_is_reported_and_fails_an_unreachable_quorum(fed, car_parts):
    admin = fed.stub("admin")
    admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s5", owners=["site-a", "site-b"])), timeout=10)
    fed.stub("site-b").Refuse(signed_refusal(fed, "site-b", "s5", "this site requires at least k=10"), timeout=10)
    status = fed.wait_study("s5")
    assert status.state == "failed"
    assert "site-b refused: this site requires at least k=10" in status.reason
    assert {o.owner_id: o.state for o in status.owners} == {"site-a": "waiting", "site-b": "refused"}
    with pytest.raises(grpc.RpcError) as info:
        fed.stub("site-a").Submit(signed_model(fed, "site-a", status.spec, *car_parts["site-a"]), timeout=30)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "is failed" in info.value.details()


def test_submissions_survive_a_restart_and_the_study_finishes(fed, car_parts):
    admin = fed.stub("admin")
    spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s6")), timeout=10).spec
    envelopes = {o: signed_model(fed, o, spec, *car_parts[o]) for o in OWNERS}
    for o in OWNERS[:2]:
        fed.stub(o).Submit(envelopes[o], timeout=30)
    fed.restart()
    with pytest.raises(grpc.RpcError) as info:  # a replay after the restart is still a replay
        used = fpb.ModelMessage.FromString(envelopes["site-a"].payload).nonce
        fed.stub("site-a").Submit(signed_model(fed, "site-a", spec, *car_parts["site-a"],
                                               mutate=lambda m: setattr(m, "nonce", used)), timeout=30)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert fed.stub("site-a").Submit(envelopes["site-a"], timeout=30).duplicate
    fed.stub("site-c").Submit(envelopes["site-c"], timeout=30)
    assert fed.wait_study("s6").state == "done"
    assert len(admin_results := fed.stub("admin").GetResults(fpb.StudyRef(study_id="s6"), timeout=10).owners) == 3
    assert all(o.audit_passed for o in admin_results)


def test_a_tampered_or_truncated_log_is_detected(fed, car_parts):
    admin = fed.stub("admin")
    admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s7")), timeout=10)
    fed.stub("site-a").Refuse(signed_refusal(fed, "site-a", "s7", "no"), timeout=10)
    state = fed.miner.config.state_dir
    fed.close()
    assert verify_log(state).ok
    db = sqlite3.connect(state / "miner.sqlite")
    db.execute("UPDATE audit_log SET event = replace(event, 'no', 'yes') WHERE event LIKE '%refusal%'")
    db.commit()
    verdict = verify_log(state)
    assert not verdict.ok and any("edited" in p for p in verdict.problems)
    db.execute("DELETE FROM audit_log WHERE seq = (SELECT MAX(seq) FROM audit_log)")
    db.commit()
    db.close()
    assert any("truncated" in p for p in verify_log(state).problems)


def test_at_the_deadline_a_study_with_its_quorum_is_mined_without_the_silent_owner(fed, car_parts):
    admin = fed.stub("admin")
    spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s8", quorum=1,
                                                                    deadline_minutes=0.03)), timeout=10).spec
    fed.stub("site-a").Submit(signed_model(fed, "site-a", spec, *car_parts["site-a"]), timeout=30)
    assert admin.GetStudy(fpb.StudyRef(study_id="s8"), timeout=10).state == "open"  # others may still answer
    status = fed.wait_study("s8")
    assert status.state == "done", status.reason
    results = admin.GetResults(fpb.StudyRef(study_id="s8"), timeout=10)
    assert [o.owner_id for o in results.owners] == ["site-a"]


def test_studies_listed_in_the_miner_config_are_created_once(tmp_path):
    import dataclasses

    from modelshare.common.mechanisms import registry
    from modelshare.miner_node.server import start_miner

    federation = make_federation(tmp_path, OWNERS)
    study = tmp_path / "kits" / "miner" / "nursery.toml"
    study.write_text('[study]\nid = "from-config"\n[schema]\ndataset = "nursery"\n'
                     '[release]\nmechanism = "apt"\nrequirement = "k-anonymity:k=5"\n')
    config = dataclasses.replace(federation.miner_config(), studies=(study,))
    for _ in range(2):  # a restart must not create it again
        miner = start_miner(config, mechanisms=registry.names(kind="tree"))
        assert [r.study_id for r in miner.store.studies()] == ["from-config"]
        miner.stop(grace=None)
    bad = tmp_path / "bad.toml"
    bad.write_text('[study]\nid = "bad"\n[schema]\ndataset = "nursery"\n[release]\nmechanism = "nonsense"\n')
    with pytest.raises(ValueError, match="unknown mechanism 'nonsense'"):
        start_miner(dataclasses.replace(config, studies=(bad,)), mechanisms=registry.names(kind="tree"))


def test_the_evaluation_table_counts_the_rows_it_drops_for_a_missing_value():
    from modelshare.common.data.datasets import load_dataset
    from modelshare.miner_node.mining import load_evaluation

    table = load_dataset("car")
    frame = table.frame.head(20).astype(object)
    frame.iloc[[2, 5, 7], 0] = "?"
    evaluation = load_evaluation(frame.to_csv(index=False).encode(), table.schema)
    assert (evaluation.dropped, len(evaluation.y)) == (3, 17)
    assert 2 not in evaluation.rows.tolist() and 3 in evaluation.rows.tolist()


def test_waiting_polls_hold_no_worker_thread(tmp_path, car_parts):
    import dataclasses

    from modelshare.common.mechanisms import registry
    from modelshare.miner_node.server import start_miner

    federation = make_federation(tmp_path, OWNERS)
    # two worker threads, which admit at most eight calls at once on a threaded server, and 24 waiting owners
    federation.miner = start_miner(dataclasses.replace(federation.miner_config(), workers=2),
                                   mechanisms=registry.names())
    try:
        waiting = [federation.stub(owner).Poll.future(fpb.PollRequest(wait_seconds=30), timeout=60)
                   for owner in OWNERS for _ in range(8)]
        admin = federation.stub("admin")
        assert admin.Health(fpb.HealthRequest(), timeout=10).status == "serving"
        admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("w1")), timeout=10)
        assert all([s.spec.study_id for s in poll.result().studies] == ["w1"] for poll in waiting)
    finally:
        federation.close()


def test_a_miner_config_without_tls_is_refused_naming_the_section(tmp_path, capsys):
    from modelshare.cli import main

    config = tmp_path / "miner.toml"
    config.write_text('[miner]\nname = "miner"\nlisten = "localhost:0"\n')
    assert main(["miner", "serve", "--config", str(config)]) == 2
    assert "the miner config has no [tls] section" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()
