"""Rosters, the roster watcher and TLS kit files (`modelshare.common.federation.kit`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from modelshare.common.federation.kit import (
    ROSTER_FORMAT,
    KitError,
    Party,
    Roster,
    RosterError,
    RosterWatcher,
    TlsFiles,
    cert_sha256,
    peer_identity,
)
from modelshare.common.federation.signing import (
    generate_signing_key,
    key_id,
    load_signing_key,
    public_key_to_text,
)
from modelshare.provision import issue_throwaway_federation


def _party(name: str, role: str = "owner", **changes) -> Party:
    public = generate_signing_key().public_key()
    return replace(Party(name, role, public, key_id(public), hashlib.sha256(name.encode()).hexdigest()), **changes)


def _roster_dict(*parties: Party) -> dict:
    return Roster("demo", parties).to_dict()


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    kits = issue_throwaway_federation(tmp_path_factory.mktemp("kits") / "out", owners=["site-a"],
                                      address="localhost:50051")
    return kits["site-a"]


def test_roster_round_trips_and_answers_lookups(tmp_path):
    miner, a, b = _party("miner", "miner"), _party("site-b"), _party("site-a")
    gone = _party("site-c", revoked=True, revoked_at="2025-01-02T03:04:05Z")
    path = tmp_path / "roster.json"
    Roster("demo", [miner, a, b, gone]).save(path)
    back = Roster.load(path)
    assert back.project == "demo" and list(back.parties) == ["miner", "site-b", "site-a", "site-c"]
    assert back.owners() == ["site-a", "site-b"]
    assert back.get("site-c").revoked and back.get("site-c").revoked_at == "2025-01-02T03:04:05Z"
    assert back.by_key_id(a.key_id).name == "site-b" and back.by_key_id("0" * 64) is None
    assert back.get("nobody") is None
    assert back.get("miner").signing_key.public_bytes_raw() == miner.signing_key.public_bytes_raw()
    assert json.loads(path.read_text())["format"] == ROSTER_FORMAT


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda d: d.update(format="modelshare.roster/0"), "format is 'modelshare.roster/0'"),
        (lambda d: d.update(project=""), "'project' must be a non-empty string"),
        (lambda d: d.update(parties={}), "'parties' must be a list"),
        (lambda d: d["parties"][1].update(role="boss"), r"parties\[1\] \(site-a\).role: 'boss' is not one of"),
        (lambda d: d["parties"][1].update(name="bad name"), r"parties\[1\].name: 'bad name' is not a party name"),
        (lambda d: d["parties"][1].update(key_id="f" * 64), r"parties\[1\] \(site-a\).key_id: .* is not the SHA-256"),
        (lambda d: d["parties"][1].update(signing_key="AAAA"), r"parties\[1\] \(site-a\).signing_key: .*decodes to 3"),
        (lambda d: d["parties"][1].update(tls_cert_sha256="XYZ"), r"\(site-a\).tls_cert_sha256: expected 64"),
        (lambda d: d["parties"][1].update(revoked="no"), r"\(site-a\).revoked: expected true or false"),
        (lambda d: d["parties"][1].update(revoked=True), r"\(site-a\).revoked_at: a revoked party needs"),
        (lambda d: d["parties"][1].update(revoked_at="2025-01-01T00:00:00Z"), r"revoked_at: must be null"),
        (lambda d: d["parties"][1].update(revoked=True, revoked_at="yesterday"), r"'yesterday' is not an ISO"),
        (lambda d: d["parties"][1].pop("key_id"), r"parties\[1\]: missing fields \['key_id'\]"),
        (lambda d: d["parties"][1].update(colour="red"), r"unknown fields \['colour'\]"),
        (lambda d: d["parties"].append(dict(d["parties"][1])), "party 'site-a' appears more than once"),
        (lambda d: d["parties"].append({**d["parties"][1], "name": "site-z"}),
         "'site-a' and 'site-z' share signing key"),
    ],
)
def test_invalid_roster_names_file_party_and_field(tmp_path, mutate, fragment):
    data = _roster_dict(_party("miner", "miner"), _party("site-a"))
    mutate(data)
    path = _write(tmp_path / "roster.json", data)
    with pytest.raises(RosterError, match=re.escape(str(path)) + ".*" + fragment):
        Roster.load(path)


@pytest.mark.parametrize("content, fragment",
                         [("{", "not a JSON roster"), ("[]", "expected a JSON object at top level")])
def test_unparseable_roster_names_the_file(tmp_path, content, fragment):
    path = tmp_path / "roster.json"
    path.write_text(content)
    with pytest.raises(RosterError, match=re.escape(f"{path}: {fragment}")):
        Roster.load(path)


def test_missing_roster_names_the_file(tmp_path):
    with pytest.raises(RosterError, match=re.escape(f"{tmp_path / 'roster.json'}: cannot read roster")):
        Roster.load(tmp_path / "roster.json")


def test_watcher_sees_a_revocation_and_keeps_the_last_good_roster(tmp_path, caplog):
    path = tmp_path / "roster.json"
    a = _party("site-a")
    Roster("demo", [_party("miner", "miner"), a]).save(path)
    watcher = RosterWatcher(path)
    first = watcher.current()
    assert first.owners() == ["site-a"] and watcher.current() is first
    revoked = Roster("demo", [first.get("miner"), replace(a, revoked=True, revoked_at="2025-01-01T00:00:00Z")])
    revoked.save(path)
    assert watcher.current().owners() == []
    good = watcher.current()
    with caplog.at_level(logging.WARNING, logger="modelshare.common.federation.kit"):
        path.write_text("{ broken")
        assert watcher.current() is good and watcher.current() is good
        path.unlink()
        assert watcher.current() is good
    assert len(caplog.records) == 2  # one warning per change, not per call
    assert all(str(path) in r.getMessage() for r in caplog.records)
    Roster("demo", [first.get("miner"), a]).save(path)
    assert watcher.current().owners() == ["site-a"]


def test_watcher_refuses_an_invalid_roster_at_start(tmp_path):
    path = _write(tmp_path / "roster.json", {"format": "nope"})
    with pytest.raises(RosterError, match=re.escape(str(path))):
        RosterWatcher(path)


def test_tls_files_read_and_fingerprint(kit):
    files = TlsFiles.in_kit(kit)
    ca, cert, key = files.read()
    assert ca == (kit / "ca.crt").read_bytes() and key == (kit / "tls.key").read_bytes()
    der = x509.load_pem_x509_certificate(cert).public_bytes(serialization.Encoding.DER)
    assert cert_sha256(cert) == hashlib.sha256(der).hexdigest()
    assert Roster.load(kit / "roster.json").get("site-a").tls_cert_sha256 == cert_sha256(cert)
    assert files.server_credentials() is not None and files.channel_credentials() is not None


def test_tls_files_errors_name_the_file(kit, tmp_path):
    files = TlsFiles.in_kit(kit)
    with pytest.raises(KitError, match=re.escape(f"CA certificate {tmp_path / 'ca.crt'} does not exist")):
        replace(files, ca=tmp_path / "ca.crt").read()
    loose = tmp_path / "tls.key"
    loose.write_bytes((kit / "tls.key").read_bytes())
    os.chmod(loose, 0o644)
    with pytest.raises(KitError, match=re.escape(f"run `chmod 600 {loose}`")):
        replace(files, key=loose).read()
    with pytest.raises(KitError, match=re.escape(f"does not belong to the certificate {kit / 'ca.crt'}")):
        replace(files, cert=kit / "ca.crt").read()  # the CA's certificate is not this key's
    bogus = tmp_path / "bogus.crt"
    bogus.write_text("not pem")
    with pytest.raises(KitError, match=re.escape(f"TLS certificate {bogus}: not a PEM certificate")):
        replace(files, cert=bogus).read()


def test_peer_identity_is_none_without_a_client_certificate() -> None:
    class Insecure:
        def auth_context(self) -> dict:
            return {}

    assert peer_identity(Insecure()) is None  # type: ignore[arg-type]  # a bare stand-in for a grpc context


def test_roster_signing_key_text_matches_the_kit_signing_key(kit):
    public = load_signing_key(kit / "signing.key").public_key()
    entry = Roster.load(kit / "roster.json").to_dict()["parties"]
    mine = next(p for p in entry if p["name"] == "site-a")
    assert mine["signing_key"] == public_key_to_text(public) and mine["key_id"] == key_id(public)
