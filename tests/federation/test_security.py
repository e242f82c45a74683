"""Attacks on a running miner over real mutual TLS on loopback: each is refused with its reason, nothing is stored.

Covered already in tests/miner_node/test_miner.py (not repeated here): TLS identity of one owner presenting
another owner's envelope, a signature over altered bytes, an owner not invited, an unknown study,
a schema fingerprint mismatch, a timestamp an hour old, a claim weaker than the study's k
(k=2 < k=5, honestly audited), a requirement the tree does not meet (k=500), a malformed tree, the
wrong mechanism, CreateStudy from an owner, a replayed nonce to the same study after a restart, a
submission to a failed study. tests/modelshare/test_provision.py checks the handshake of a client without a
certificate and of another CA against a bare gRPC probe; here the same clients meet the miner.
"""

from __future__ import annotations

import dataclasses
import datetime
import sqlite3

import grpc
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modelshare.common.data.schema import Schema
from modelshare.common.federation.kit import TlsFiles
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import sign_payload
from modelshare.common.federation.wire import (
    model_message,
    new_nonce,
    report_from_pb,
    report_to_pb,
    tree_from_pb,
    tree_to_pb,
)
from modelshare.common.mechanisms.release import release as release_model
from modelshare.common.privacy.attacks import attack_report
from modelshare.common.trees.tree import Node, Tree
from modelshare.miner_node.store import verify_log
from modelshare.provision import issue_throwaway_federation, revoke_party
from tests.federation_helpers import (
    MinerStubs,
    deal,
    make_federation,
    signed_model,
    signed_refusal,
    study_spec,
)

OWNERS = ["site-a", "site-b", "site-c"]  # site-c is revoked by one test; the others never invite it


@pytest.fixture(scope="module")
def fed(tmp_path_factory, car):
    federation = make_federation(tmp_path_factory.mktemp("security"), OWNERS)
    federation.start()
    federation.data = deal(*car[1:], OWNERS)
    admin = federation.stub("admin")
    week = 7 * 24 * 60
    for spec in (study_spec("open", owners=OWNERS, deadline_minutes=week),
                 study_spec("counts", owners=["site-a", "site-b"], disclosure="counts", deadline_minutes=week),
                 study_spec("dps", owners=["site-a", "site-b"], mechanism="kanon-rdt", disclosure="counts", max_depth=3,
                            requirement="dps:k=5,beta=0.5,epsilon=4,trees=4", global_models=("naive-bayes",),
                            deadline_minutes=week)):
        admin.CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
    yield federation
    federation.close()


def rows(fed) -> dict[str, int]:
    db = sqlite3.connect(f"file:{fed.miner.config.state_dir / 'miner.sqlite'}?mode=ro", uri=True)
    try:
        return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("submissions", "nonces", "refusals", "studies")}
    finally:
        db.close()


def spec_of(fed, study_id: str) -> fpb.StudySpec:
    return fed.stub("admin").GetStudy(fpb.StudyRef(study_id=study_id), timeout=10).spec


def refused(call, *args, timeout: float = 30) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=timeout)
    return info.value.code(), info.value.details() or ""


def model(fed, owner: str, study_id: str, **kw) -> fpb.SignedEnvelope:
    return signed_model(fed, owner, spec_of(fed, study_id), *fed.data[owner], **kw)


# ------------------------------------------------------------------ TLS: who may connect at all
def _channel(fed, *, key: bytes | None = None, cert: bytes | None = None) -> grpc.Channel:
    """A channel that trusts the project CA (so only the miner's verdict on our certificate matters)."""
    root = (fed.kits["site-a"] / "ca.crt").read_bytes()
    credentials = grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=cert)
    channel = grpc.secure_channel(fed.address, credentials, options=[("grpc.ssl_target_name_override", "miner")])
    fed.channels.append(channel)
    return channel


def _mint(fed, *, name: str, days: tuple[int, int]) -> tuple[bytes, bytes]:
    """A key and certificate for ``name`` signed by the project's real CA key, valid from/to ``days`` from now."""
    ca_dir = fed.kits["miner"].parent / "ca"  # provision keeps the CA key outside every party kit
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)  # provision's CA key
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=days[0]))
        .not_valid_after(now + datetime.timedelta(days=days[1]))
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return pem_key, cert.public_bytes(serialization.Encoding.PEM)


def _handshake_refused(fed, channel: grpc.Channel, envelope: fpb.SignedEnvelope) -> None:
    """Every call fails the TLS handshake: UNAVAILABLE before any handler runs, and the store is untouched."""
    before = rows(fed)
    stub = MinerStubs(channel)
    for call, request in ((stub.Submit, envelope), (stub.Health, fpb.HealthRequest())):
        code, why = refused(call, request, timeout=10)
        assert code == grpc.StatusCode.UNAVAILABLE and "failed to connect" in why, (code, why)
    assert rows(fed) == before


def test_a_client_without_a_certificate_fails_the_handshake(fed):
    _handshake_refused(fed, _channel(fed), model(fed, "site-a", "open"))


def test_a_certificate_from_another_ca_fails_the_handshake(fed, tmp_path):
    kits = issue_throwaway_federation(tmp_path / "other", owners=["site-a"], address="localhost:1")
    stranger = TlsFiles.in_kit(kits["site-a"])
    channel = _channel(fed, key=stranger.key.read_bytes(), cert=stranger.cert.read_bytes())
    _handshake_refused(fed, channel, model(fed, "site-a", "open"))  # signed by the real site-a: only TLS is wrong


def test_an_expired_certificate_from_the_real_ca_fails_the_handshake(fed):
    key, cert = _mint(fed, name="site-a", days=(-30, -1))
    _handshake_refused(fed, _channel(fed, key=key, cert=cert), model(fed, "site-a", "open"))


def test_a_valid_certificate_the_roster_does_not_know_is_refused(fed):
    """A certificate the CA signed for site-a (a re-issue, a leaked CA key) is not the one provisioned for it."""
    before = rows(fed)
    key, cert = _mint(fed, name="site-a", days=(-1, 30))
    stub = MinerStubs(_channel(fed, key=key, cert=cert))
    for call, request in ((stub.Submit, model(fed, "site-a", "open")), (stub.Health, fpb.HealthRequest()),
                          (stub.Poll, fpb.PollRequest())):
        code, why = refused(call, request)
        assert code == grpc.StatusCode.PERMISSION_DENIED, (code, why)
        assert "the certificate presented for 'site-a' is not the one provisioned for it" in why
    key, cert = _mint(fed, name="mallory", days=(-1, 30))
    code, why = refused(MinerStubs(_channel(fed, key=key, cert=cert)).Health, fpb.HealthRequest())
    assert code == grpc.StatusCode.UNAUTHENTICATED and "TLS identity 'mallory' is not on the miner's roster" in why
    assert rows(fed) == before


# ------------------------------------------------------------------ identity: who may say what
def test_an_owner_cannot_speak_for_another_owner(fed):
    before = rows(fed)
    site_a = fed.stub("site-a")
    # its own key and TLS identity, but a message naming site-b
    code, why = refused(site_a.Submit, model(fed, "site-a", "open", mutate=lambda m: setattr(m, "owner_id", "site-b")))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "names owner 'site-b' but is signed by 'site-a'" in why
    refusal = fpb.OwnerRefusal(study_id="open", owner_id="site-b",
                               reason="site-b does not want this", nonce=new_nonce())
    refusal.timestamp.GetCurrentTime()
    code, why = refused(site_a.Refuse, sign_payload(refusal.SerializeToString(), fed.key("site-a")))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "refusal names owner 'site-b' but is signed by 'site-a'" in why
    # an envelope that names site-b's key but carries site-a's signature
    envelope = model(fed, "site-a", "open")
    envelope.signer_key_id = sign_payload(b"", fed.key("site-b")).signer_key_id
    code, why = refused(site_a.Submit, envelope)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "TLS identity 'site-a' does not match the signer 'site-b'" in why
    # site-a's key id and TLS identity, site-b's signature
    message = model(fed, "site-a", "open").payload
    forged = fpb.SignedEnvelope(payload=message, signer_key_id=sign_payload(b"", fed.key("site-a")).signer_key_id,
                                signature=fed.key("site-b").sign(message))
    code, why = refused(site_a.Submit, forged)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "signature does not verify" in why
    # a key that is on no roster
    from modelshare.common.federation.signing import generate_signing_key

    code, why = refused(site_a.Submit, sign_payload(message, generate_signing_key()))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "is not on the miner's roster" in why
    assert rows(fed) == before


def test_admin_actions_need_the_admin_and_only_owners_submit_or_poll(fed):
    before = rows(fed)
    owner = fed.stub("site-a")
    for call, request in ((owner.CreateStudy, fpb.CreateStudyRequest(spec=study_spec("by-owner"))),
                          (owner.GetStudy, fpb.StudyRef(study_id="open")),
                          (owner.ListStudies, fpb.ListStudiesRequest()),
                          (owner.GetResults, fpb.StudyRef(study_id="open")),
                          (owner.CancelStudy, fpb.CancelStudyRequest(study_id="open")),
                          (owner.WatchStudy, fpb.WatchStudyRequest(study_id="open"))):
        code, why = refused(call, request)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "'site-a' is a owner; only the admin may do this" in why
    admin = fed.stub("admin")
    code, why = refused(admin.Submit, signed_model(fed, "admin", spec_of(fed, "open"), *fed.data["site-a"]))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "'admin' is a admin; only owners submit" in why
    code, why = refused(admin.Poll, fpb.PollRequest())
    assert code == grpc.StatusCode.PERMISSION_DENIED and "only owners poll" in why
    assert rows(fed) == before


def test_the_admin_interceptor_refuses_an_owner_before_any_admin_handler_runs(fed):
    """An owner's certificate on the study administration is refused by the interceptor, before the request is
    even parsed: bytes that are no request get PERMISSION_DENIED, not the handler's INVALID_ARGUMENT."""
    before = rows(fed)
    fed.stub("site-a")
    channel = fed.channels[-1]  # the channel dialled with site-a's kit
    for method in fpb.DESCRIPTOR.services_by_name["StudyAdmin"].methods:
        code, why = refused(channel.unary_unary(f"/modelshare.v1.StudyAdmin/{method.name}"), b"\xff\xff")
        assert code == grpc.StatusCode.PERMISSION_DENIED, (method.name, code, why)
        assert "only the admin may do this" in why, (method.name, code, why)
    admin = fed.stub("admin")
    code, why = refused(fed.channels[-1].unary_unary("/modelshare.v1.StudyAdmin/GetStudy"), b"\xff\xff")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid StudyRef" in why  # the admin reaches the handler
    assert admin.GetStudy(fpb.StudyRef(study_id="open"), timeout=10).state == "open"
    assert rows(fed) == before


def test_a_revoked_owner_is_refused_at_once_without_a_restart(fed):
    envelope, refusal = model(fed, "site-c", "open"), signed_refusal(fed, "site-c", "open", "no")
    site_c = fed.stub("site-c")
    assert site_c.Health(fpb.HealthRequest(), timeout=10).status == "serving"
    revoke_party(fed.kits["miner"].parent, "site-c")  # rewrites the miner's roster.json; its RosterWatcher reloads it
    before = rows(fed)
    for call, request in ((site_c.Submit, envelope), (site_c.Refuse, refusal), (site_c.Health, fpb.HealthRequest()),
                          (site_c.Poll, fpb.PollRequest())):
        code, why = refused(call, request)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "'site-c' was revoked at" in why, (code, why)
    assert rows(fed) == before
    assert fed.stub("site-a").Health(fpb.HealthRequest(), timeout=10).status == "serving"  # the others are unaffected


# ------------------------------------------------------------------ freshness and replay
def test_stale_future_and_invalid_timestamps_are_refused(fed):
    before = rows(fed)
    site_a = fed.stub("site-a")
    for shift, nanos, phrase, code_ in ((+3600, 0, "s in the future; the window is 300 s",
                                         grpc.StatusCode.FAILED_PRECONDITION),
                                        (-301 - 5, 0, "s old; the window is 300 s",
                                         grpc.StatusCode.FAILED_PRECONDITION),
                                        (0, 2**31 - 1, "message timestamp is not a valid time",
                                         grpc.StatusCode.INVALID_ARGUMENT),
                                        (-(2**40), 0, "message timestamp is not a valid time",
                                         grpc.StatusCode.INVALID_ARGUMENT)):
        def stamp(m, shift=shift, nanos=nanos):
            m.timestamp.seconds += shift
            m.timestamp.nanos = nanos

        code, why = refused(site_a.Submit, model(fed, "site-a", "open", mutate=stamp))
        assert code == code_ and phrase in why, (code, why)
        refusal = fpb.OwnerRefusal(study_id="open", owner_id="site-a", reason="no", nonce=new_nonce())
        refusal.timestamp.GetCurrentTime()
        stamp(refusal)
        code, why = refused(site_a.Refuse, sign_payload(refusal.SerializeToString(), fed.key("site-a")))
        assert code == code_ and phrase in why, (code, why)
    assert rows(fed) == before


def test_a_nonce_stays_spent_across_a_restart(fed):
    admin = fed.stub("admin")
    week = 7 * 24 * 60
    for sid in ("replay-1", "replay-2"):
        admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec(sid, owners=["site-a", "site-b"],
                                                                 deadline_minutes=week)), timeout=10)
    first = model(fed, "site-a", "replay-1")
    ack = fed.stub("site-a").Submit(first, timeout=30)
    nonce = fpb.ModelMessage.FromString(first.payload).nonce
    fed.restart()
    before = rows(fed)
    site_a = fed.stub("site-a")
    again = site_a.Submit(first, timeout=30)  # the identical envelope: its original ack, nothing new
    assert again.duplicate and again.submission_id == ack.submission_id
    # the same nonce in a new, validly signed message to another study
    code, why = refused(site_a.Submit, model(fed, "site-a", "replay-2", mutate=lambda m: setattr(m, "nonce", nonce)))
    assert code == grpc.StatusCode.ALREADY_EXISTS and "nonce was used before (a replay); nothing stored" in why
    # and in a refusal
    refusal = fpb.OwnerRefusal(study_id="replay-2", owner_id="site-a", reason="no", nonce=nonce)
    refusal.timestamp.GetCurrentTime()
    code, why = refused(site_a.Refuse, sign_payload(refusal.SerializeToString(), fed.key("site-a")))
    assert code == grpc.StatusCode.ALREADY_EXISTS and "nonce was used before (a replay); nothing stored" in why
    assert rows(fed) == before
    assert verify_log(fed.miner.config.state_dir).ok


# ------------------------------------------------------------------ claims: the re-audit and the study's bar
def _thin_a_leaf(m: fpb.ModelMessage, spec: fpb.StudySpec) -> int:
    """Shrink one leaf to 2 tuples and its ancestors by as many, and restate the claims' sizes and the attack
    counts to match: a valid, self-consistent tree whose only lie is the k-anonymity of that leaf's path."""
    schema = study_from_pb(spec).schema
    assert isinstance(schema, Schema)
    tree = tree_from_pb(m.trees[0], schema)
    leaf = next(i for i in tree.leaves if tree.nodes[i].total >= 7)
    old = tree.nodes[leaf].counts
    new = np.zeros_like(old)
    new[tree.nodes[leaf].label] = 2.0
    nodes = [Node(n.label, n.hit, n.miss, None if n.counts is None else n.counts.copy(), n.attribute, list(n.edges))
             for n in tree.nodes]
    i = leaf
    while i >= 0:
        counts = nodes[i].counts - (old - new)
        label = nodes[i].label if counts[nodes[i].label] == counts.max() else int(np.argmax(counts))
        nodes[i] = dataclasses.replace(Node.from_counts(counts, label), attribute=nodes[i].attribute,
                                       edges=nodes[i].edges)
        i = int(tree.parents[i])
    thinned = Tree(schema, nodes, "counts")
    m.trees[0].CopyFrom(tree_to_pb(thinned))
    report = report_from_pb(m.report)
    claims = tuple(dataclasses.replace(c, tuples=thinned.nodes[c.leaf].total) for c in report.claims)
    m.report.CopyFrom(report_to_pb(dataclasses.replace(report, claims=claims, attacks=attack_report(thinned))))
    return leaf


def test_a_count_tampered_after_release_and_re_signed_fails_the_re_audit(fed):
    before = rows(fed)
    spec = spec_of(fed, "counts")
    thinned = []
    envelope = signed_model(fed, "site-a", spec, *fed.data["site-a"],
                            mutate=lambda m: thinned.append(_thin_a_leaf(m, spec)))
    code, why = refused(fed.stub("site-a").Submit, envelope)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "the miner's re-audit of the claims failed" in why
    assert "every path meets k-anonymity:k=5 (exact counts): " in why and f"failing leaves [{thinned[0]}]" in why
    assert "attack counts" not in why and "claims cover" not in why  # the one lie, and only it, is caught
    assert rows(fed) == before


def test_claims_weaker_than_the_study_requires_are_refused(fed, car):
    before = rows(fed)
    site_a = fed.stub("site-a")

    def claim_nothing(m):  # an honest release that drops its claim: nothing to re-audit, nothing that meets the study
        m.report.ClearField("requirement")
        del m.report.claims[:]

    code, why = refused(site_a.Submit, model(fed, "site-a", "open", mutate=claim_nothing))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "the model claims nothing; the study requires k-anonymity:k=5" in why
    # an honest k-AnonToRdt ensemble whose epsilon (8) is above the study's (4): it re-audits, but is too weak
    release = release_model("kanon-rdt", schema=car[0], X=fed.data["site-a"][0], y=fed.data["site-a"][1],
                            requirement="dps:k=5,beta=0.5,epsilon=8,trees=4", max_depth=3)
    message = model_message(release, study_id="dps", owner_id="site-a")
    code, why = refused(site_a.Submit, sign_payload(message.SerializeToString(), fed.key("site-a")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "weaker than the study requires" in why and "epsilon" in why
    assert rows(fed) == before


def test_closed_studies_take_no_answers(fed):
    admin = fed.stub("admin")
    spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("closes", owners=["site-a"],
                                                                    global_models=("naive-bayes",))),
                             timeout=10).spec
    fed.stub("site-a").Submit(signed_model(fed, "site-a", spec, *fed.data["site-a"]), timeout=30)
    assert fed.wait_study("closes").state == "done"
    admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("fails", owners=["site-a", "site-b"])), timeout=10)
    fed.stub("site-b").Refuse(signed_refusal(fed, "site-b", "fails", "not this one"), timeout=10)
    assert admin.GetStudy(fpb.StudyRef(study_id="fails"), timeout=10).state in ("open", "failed")
    before = rows(fed)
    site_a = fed.stub("site-a")
    for study_id, state in (("closes", "done"), ("fails", "failed")):
        assert fed.wait_study(study_id, timeout=30).state == state
        for call, request in ((site_a.Submit, model(fed, "site-a", study_id)),
                              (site_a.Refuse, signed_refusal(fed, "site-a", study_id, "late"))):
            code, why = refused(call, request)
            assert code == grpc.StatusCode.FAILED_PRECONDITION
            assert f"study {study_id!r} is {state}; it takes no more answers" in why
    assert rows(fed) == before


# ------------------------------------------------------------------ the owner checks whom it talks to
@pytest.mark.parametrize("miner_name, state", [("site-b", "a owner"), ("nobody", "absent")])
def test_an_owner_daemon_refuses_a_miner_the_roster_does_not_name_as_miner(fed, miner_name, state):
    from modelshare.owner_node.config import OwnerConfig, OwnerConfigError
    from modelshare.owner_node.daemon import OwnerDaemon

    kit = fed.kits["site-a"]
    path = kit / f"owner-{miner_name}.toml"  # the kit's config plus a [data] table (kits are issued without one)
    path.write_text((kit / "owner.toml").read_text() + '\n[data]\npath = "table.csv"\n')
    (kit / "table.csv").write_text("a,class\n1,x\n")
    config = dataclasses.replace(OwnerConfig.load(path), miner_name=miner_name)
    with pytest.raises(OwnerConfigError, match=f"miner_name '{miner_name}' is {state} in roster"):
        OwnerDaemon(config)


def test_an_insecure_miner_refuses_every_admin_call_to_a_caller_without_identity(tmp_path):
    from modelshare.common.mechanisms import registry
    from modelshare.miner_node.server import start_miner

    federation = make_federation(tmp_path, ["site-a"])
    miner = start_miner(federation.miner_config(), mechanisms=registry.names(), insecure=True)
    try:
        with grpc.insecure_channel(f"localhost:{miner.port}") as channel:
            anonymous = MinerStubs(channel)
            for call, request in ((anonymous.CreateStudy, fpb.CreateStudyRequest(spec=study_spec("anon"))),
                                  (anonymous.ListStudies, fpb.ListStudiesRequest()),
                                  (anonymous.GetStudy, fpb.StudyRef(study_id="anon")),
                                  (anonymous.GetResults, fpb.StudyRef(study_id="anon")),
                                  (anonymous.CancelStudy, fpb.CancelStudyRequest(study_id="anon")),
                                  (anonymous.WatchStudy, fpb.WatchStudyRequest(study_id="anon"))):
                code, why = refused(call, request)
                assert code == grpc.StatusCode.PERMISSION_DENIED and "no caller can prove to be the admin" in why
            assert anonymous.Health(fpb.HealthRequest(), timeout=10).status == "serving"
        assert miner.store.studies() == []
    finally:
        miner.stop(grace=None)
