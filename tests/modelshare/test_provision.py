"""Provisioning kits (`modelshare.provision`), and mutual TLS between them over real gRPC."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import stat
import sys
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from modelshare.admin import AdminConfig
from modelshare.cli import main
from modelshare.common.federation.dial import dial_miner
from modelshare.common.federation.kit import (
    Roster,
    RosterWatcher,
    TlsFiles,
    cert_sha256,
    peer_cert_sha256,
    peer_identity,
)
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.common.federation.signing import key_id, load_signing_key
from modelshare.common.mechanisms import registry
from modelshare.miner_node.config import MinerConfig
from modelshare.miner_node.server import read_ready, start_miner
from modelshare.owner_node.config import OwnerConfig, OwnerConfigError
from modelshare.provision import (
    ProvisionError,
    add_party,
    issue_throwaway_federation,
    load_project,
    provision,
    provisioned_roster,
    revoke_party,
    set_miner_port,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

PROJECT = """\
name = "demo"
[ca]
valid_days = 3650
[[parties]]
name = "miner"
role = "miner"
address = "localhost:50051"
hosts = ["127.0.0.1"]
[[parties]]
name = "admin"
role = "admin"
[[parties]]
name = "site-a"
role = "owner"
data = "/srv/site-a/table.csv"
class_column = "class"
[parties.policy]
min_k = 10
mechanisms = ["apt"]
[[parties]]
name = "site-b"
role = "owner"
"""
SITE_C = """\
[[parties]]
name = "site-c"
role = "owner"
"""
NAMES = ["miner", "admin", "site-a", "site-b"]


def _write_project(directory: Path, text: str = PROJECT) -> Path:
    path = directory / "project.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def kits(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("provisioned")
    out = base / "kits"
    made = provision(_write_project(base), out)
    assert made == {name: out / name for name in NAMES}
    return out


@pytest.fixture()
def fresh(tmp_path) -> tuple[Path, Path]:
    """A project provisioned for one test that changes it: (project.toml, out dir)."""
    project = _write_project(tmp_path)
    provision(project, tmp_path / "kits")
    return project, tmp_path / "kits"


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    files = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}
    return {**files, ".": (b"", directory.stat().st_mtime_ns)}


# ------------------------------------------------------------------ what provisioning writes
def test_every_certificate_chains_to_the_ca_and_names_its_party(kits):
    ca = _cert(kits / "ca" / "ca.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    for name in NAMES:
        cert = _cert(kits / name / "tls.crt")
        cert.verify_directly_issued_by(ca)
        assert (kits / name / "ca.crt").read_bytes() == (kits / "ca" / "ca.crt").read_bytes()
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    miner_san = _cert(kits / "miner" / "tls.crt").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert miner_san.get_values_for_type(x509.DNSName) == ["miner", "localhost"]
    assert miner_san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    owner_san = _cert(kits / "site-a" / "tls.crt").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert owner_san.get_values_for_type(x509.DNSName) == ["site-a"]


def test_keys_are_private_and_the_ca_key_stays_in_ca(kits):
    assert _mode(kits) == 0o700 and _mode(kits / "ca") == 0o700 and _mode(kits / "ca" / "ca.key") == 0o600
    ca_key = (kits / "ca" / "ca.key").read_bytes()
    for name in NAMES:
        kit = kits / name
        assert _mode(kit) == 0o700
        assert _mode(kit / "tls.key") == 0o600 and _mode(kit / "signing.key") == 0o600
        role = Roster.load(kit / "roster.json").get(name).role
        scripts = ["start.sh", "stop.sh"] if role in ("miner", "owner") else []
        assert sorted(p.name for p in kit.iterdir()) == sorted(
            ["ca.crt", "tls.crt", "tls.key", "signing.key", "roster.json", f"{role}.toml", *scripts])
        assert all(ca_key not in p.read_bytes() for p in kit.iterdir())
    assert not [p for p in kits.iterdir() if p.name.startswith(".")]  # no staging directory left


def test_every_kit_holds_the_full_roster_matching_its_keys(kits):
    state = provisioned_roster(kits)
    assert state.project == "demo" and list(state.parties) == NAMES
    for name in NAMES:
        roster = Roster.load(kits / name / "roster.json")
        assert roster.to_dict() == state.to_dict()
        party = roster.get(name)
        assert party.key_id == key_id(load_signing_key(kits / name / "signing.key").public_key())
        assert party.tls_cert_sha256 == cert_sha256((kits / name / "tls.crt").read_bytes())
    assert state.owners() == ["site-a", "site-b"]
    assert [state.get(n).role for n in NAMES] == ["miner", "admin", "owner", "owner"]


def _config(kit: Path, role: str) -> dict:
    config = tomllib.loads((kit / f"{role}.toml").read_text(encoding="utf-8"))
    for key in ("ca", "cert", "key"):
        assert (kit / config["tls"][key]).is_file()
    for key in ("roster", "signing_key"):
        if key in config[role]:
            assert (kit / config[role][key]).is_file()
    return config


def test_configs_parse_and_point_at_kit_files(kits):
    miner = _config(kits / "miner", "miner")
    assert miner["miner"] == {"name": "miner", "listen": "[::]:50051", "state_dir": "state", "roster": "roster.json"}
    admin = _config(kits / "admin", "admin")
    assert admin["admin"]["miner"] == "localhost:50051" and admin["admin"]["miner_name"] == "miner"
    site_a = _config(kits / "site-a", "owner")
    assert site_a["owner"] == {"name": "site-a", "miner": "localhost:50051", "miner_name": "miner",
                               "state_dir": "state", "signing_key": "signing.key", "roster": "roster.json"}
    assert site_a["data"] == {"path": "/srv/site-a/table.csv", "class_column": "class"}
    assert site_a["policy"] == {"min_k": 10, "mechanisms": ["apt"]}
    site_b = _config(kits / "site-b", "owner")
    assert "data" not in site_b
    assert site_b["policy"] == {"mechanisms": ["apt", "prune-leaf", "prune-parent"], "min_k": 5, "min_l": 2,
                                "max_c": 20, "miners": ["miner"]}


def test_rerun_refuses_and_leaves_the_ca_alone(fresh):
    project, out = fresh
    before = _snapshot(out / "ca")
    with pytest.raises(ProvisionError, match="already holds a provisioned project.*refusing to replace"):
        provision(project, out)
    assert _snapshot(out / "ca") == before


def test_existing_kit_directory_is_not_overwritten(tmp_path):
    (tmp_path / "kits" / "site-b").mkdir(parents=True)
    taken = tmp_path / "kits" / "site-b"
    with pytest.raises(ProvisionError, match=re.escape(f"refusing to overwrite existing {taken}")):
        provision(_write_project(tmp_path), tmp_path / "kits")
    assert sorted(p.name for p in (tmp_path / "kits").iterdir()) == ["site-b"]


# ------------------------------------------------------------------ project validation
@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda t: t.replace('role = "admin"', 'role = "miner"\naddress = "h:1"'), "exactly one party with role"),
        (lambda t: t.replace('name = "site-b"', 'name = "site-a"'),
         r"parties\[3\].name: 'site-a' is also parties\[2\]"),
        (lambda t: t.replace('name = "site-b"', 'name = "site b"'), r"parties\[3\].name: 'site b' does not match"),
        (lambda t: t.replace('name = "site-b"', 'name = "ca"'), r"parties\[3\].name: 'ca' is reserved"),
        (lambda t: t.replace('address = "localhost:50051"\n', ""), r"parties\[0\].address: the miner needs"),
        (lambda t: t.replace("localhost:50051", "localhost"), r"parties\[0\].address: 'localhost' is not HOST:PORT"),
        (lambda t: t.replace("localhost:50051", "::1:50051"), r"parties\[0\].address: '::1:50051' is not HOST:PORT"),
        (lambda t: t.replace("localhost:50051", "localhost:0"),
         r"parties\[0\].address: 'localhost:0' is not HOST:PORT"),
        (lambda t: t.replace('address = "localhost:50051"', 'address = "localhost:0"\nlisten = "[::]:1"'),
         r"parties\[0\].address: 'localhost:0' is not HOST:PORT"),
        (lambda t: t.replace('address = "localhost:50051"', 'address = "localhost:1"\nlisten = "[::]:65536"'),
         r"parties\[0\].listen: '\[::\]:65536' is not HOST:PORT"),
        (lambda t: t.replace('hosts = ["127.0.0.1"]', 'hosts = ["bad host"]'), r"parties\[0\].hosts\[0\]: 'bad host'"),
        (lambda t: t.replace('hosts = ["127.0.0.1"]', "hosts = [1]"),
         r"\[parties\[0\]\]: hosts\[0\] must be a string, got 1"),
        (lambda t: t.replace('role = "admin"', 'role = "admin"\ndata = "x.csv"'),
         r": parties\[1\] sets \['data'\], which do not apply to the role 'admin'"),
        (lambda t: t.replace('role = "admin"', 'role = "boss"'),
         r"\[parties\[1\]\]: role must be 'miner' or 'owner' or 'admin', got 'boss'"),
        (lambda t: t.replace('name = "admin"\n', ""), r"\[parties\[1\]\]: name is required"),
        (lambda t: t.replace("valid_days = 3650", 'valid_days = "long"'),
         r"\[ca\]: valid_days must be an integer, got 'long'"),
        (lambda t: t.replace("valid_days = 3650", "valid_days = true"),
         r"\[ca\]: valid_days must be an integer, got True"),
        (lambda t: t.replace("min_k = 10", "min_k = 10\n[parties.policy.nested]\nx = 1"),
         r"unknown key 'parties\[2\].policy.nested'; allowed keys in \[parties\[2\].policy\]: mechanisms, min_k,"),
        (lambda t: "colour = 1\n" + t, r"unknown key 'colour'; allowed keys: name, ca, parties"),
        (lambda t: t + "[[parties]]\n", r"\[parties\[4\]\]: role is required"),
        (lambda t: t.replace('name = "demo"', "name = ["), "not a TOML project file"),
    ],
)
def test_bad_project_names_the_party_and_field(tmp_path, edit, fragment):
    project = _write_project(tmp_path, edit(PROJECT))
    with pytest.raises(ProvisionError, match=re.escape(str(project)) + ".*" + fragment):
        load_project(project)
    assert not (tmp_path / "kits").exists()


# ------------------------------------------------------------------ --add and --revoke
def test_add_issues_a_kit_with_the_same_ca_and_touches_only_miner_and_admin(fresh):
    project, out = fresh
    untouched = {d: _snapshot(out / d) for d in ("site-a", "site-b")}
    ca_files = {n: (out / "ca" / n).read_bytes() for n in ("ca.crt", "ca.key")}
    project.write_text(PROJECT + SITE_C, encoding="utf-8")
    kit = add_party(project, out, "site-c")
    assert kit == out / "site-c" and _mode(kit) == 0o700 and _mode(kit / "tls.key") == 0o600
    assert {d: _snapshot(out / d) for d in ("site-a", "site-b")} == untouched
    assert {n: (out / "ca" / n).read_bytes() for n in ("ca.crt", "ca.key")} == ca_files
    _cert(kit / "tls.crt").verify_directly_issued_by(_cert(out / "ca" / "ca.crt"))
    for holder in ("miner", "admin", "site-c", "ca"):
        roster = provisioned_roster(out) if holder == "ca" else Roster.load(out / holder / "roster.json")
        assert roster.owners() == ["site-a", "site-b", "site-c"]
    assert Roster.load(out / "site-a" / "roster.json").get("site-c") is None
    assert _config(kit, "owner")["owner"]["miner"] == "localhost:50051"
    with pytest.raises(ProvisionError, match="'site-c' is already provisioned"):
        add_party(project, out, "site-c")
    with pytest.raises(ProvisionError, match="no party named 'site-d'"):
        add_party(project, out, "site-d")


def test_add_refuses_a_different_project(fresh, tmp_path):
    _, out = fresh
    other = tmp_path / "other.toml"
    other.write_text(PROJECT.replace('name = "demo"', 'name = "other"') + SITE_C, encoding="utf-8")
    with pytest.raises(ProvisionError, match="project 'other', but .* holds project 'demo'"):
        add_party(other, out, "site-c")


def test_revoke_marks_the_roster_and_lists_the_serial_in_the_crl(fresh):
    _, out = fresh
    untouched = _snapshot(out / "site-a")
    ca_files = {n: (out / "ca" / n).read_bytes() for n in ("ca.crt", "ca.key")}
    watcher = RosterWatcher(out / "miner" / "roster.json")
    assert watcher.current().owners() == ["site-a", "site-b"]
    revoke_party(out, "site-b")
    for roster in (Roster.load(out / "miner" / "roster.json"), Roster.load(out / "admin" / "roster.json"),
                   provisioned_roster(out)):
        party = roster.get("site-b")
        assert party.revoked and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", party.revoked_at)
        assert roster.owners() == ["site-a"]
    assert watcher.current().owners() == ["site-a"]  # a running miner sees it without restart
    assert not Roster.load(out / "site-b" / "roster.json").get("site-b").revoked
    assert _snapshot(out / "site-a") == untouched
    assert {n: (out / "ca" / n).read_bytes() for n in ("ca.crt", "ca.key")} == ca_files
    ca = _cert(out / "ca" / "ca.crt")
    crl = x509.load_pem_x509_crl((out / "ca" / "crl.pem").read_bytes())
    assert crl.is_signature_valid(ca.public_key()) and crl.issuer == ca.subject
    assert crl.get_revoked_certificate_by_serial_number(_cert(out / "site-b" / "tls.crt").serial_number) is not None
    assert crl.get_revoked_certificate_by_serial_number(_cert(out / "site-a" / "tls.crt").serial_number) is None
    assert (out / "miner" / "crl.pem").read_bytes() == (out / "ca" / "crl.pem").read_bytes()
    with pytest.raises(ProvisionError, match="'site-b' was already revoked at"):
        revoke_party(out, "site-b")
    with pytest.raises(ProvisionError, match="'miner' is the miner"):
        revoke_party(out, "miner")
    with pytest.raises(ProvisionError, match="no provisioned party named 'nobody'"):
        revoke_party(out, "nobody")


def test_changes_need_a_provisioned_out_dir(tmp_path):
    with pytest.raises(ProvisionError, match="no provisioned project here"):
        revoke_party(tmp_path, "site-a")


# ------------------------------------------------------------------ mutual TLS over gRPC
def _whoami(request: bytes, context: grpc.ServicerContext) -> bytes:
    return json.dumps({"name": peer_identity(context), "cert": peer_cert_sha256(context)}).encode()


@pytest.fixture(scope="module")
def miner_port(kits):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.unary_unary_rpc_method_handler(_whoami)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Probe", {"WhoAmI": handler}),))
    port = server.add_secure_port("localhost:0", TlsFiles.in_kit(kits / "miner").server_credentials())
    server.start()
    yield port
    server.stop(None)


def _call(port: int, credentials: grpc.ChannelCredentials) -> dict:
    with grpc.secure_channel(f"localhost:{port}", credentials) as channel:
        who_am_i: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/test.Probe/WhoAmI")
        return json.loads(who_am_i(b"", timeout=10))


def test_the_miner_sees_the_owner_it_talks_to(kits, miner_port):
    for name in ("site-a", "admin"):
        seen = _call(miner_port, TlsFiles.in_kit(kits / name).channel_credentials())
        assert seen == {"name": name, "cert": provisioned_roster(kits).get(name).tls_cert_sha256}


def test_a_client_of_another_ca_fails_the_handshake(kits, miner_port, tmp_path):
    stranger = provision(_write_project(tmp_path), tmp_path / "other")["site-a"]
    with pytest.raises(grpc.RpcError) as failure:
        _call(miner_port, TlsFiles.in_kit(stranger).channel_credentials())
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_without_a_certificate_is_refused(kits, miner_port):
    credentials = grpc.ssl_channel_credentials(root_certificates=(kits / "ca" / "ca.crt").read_bytes())
    with pytest.raises(grpc.RpcError) as failure:
        _call(miner_port, credentials)
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE


# ------------------------------------------------------------------ throw-away federation and CLI
def test_throwaway_federation_makes_the_same_kits(tmp_path):
    made = issue_throwaway_federation(tmp_path / "sim", owners=["o1", "o2"], address="127.0.0.1:50999",
                                      owner_data={"o1": ("/data/o1.csv", "label")}, policy={"min_k": 3})
    assert sorted(made) == ["admin", "miner", "o1", "o2"]
    assert _config(made["miner"], "miner")["miner"]["listen"] == "127.0.0.1:50999"
    o1, o2 = _config(made["o1"], "owner"), _config(made["o2"], "owner")
    assert o1["data"] == {"path": "/data/o1.csv", "class_column": "label"} and "data" not in o2
    assert o1["policy"] == o2["policy"] == {"min_k": 3}
    san = _cert(made["miner"] / "tls.crt").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    with pytest.raises(ProvisionError, match=r"owner_data names \['o3'\]"):
        issue_throwaway_federation(tmp_path / "x", owners=["o1"], address="h:1", owner_data={"o3": ("a", "b")})
    with pytest.raises(ProvisionError, match=r"parties\[2\].name: 'miner' is also parties\[0\]"):
        issue_throwaway_federation(tmp_path / "y", owners=["miner"], address="h:1")


def test_a_miner_on_port_0_reports_its_port_and_set_miner_port_writes_it_into_the_kits(tmp_path):
    (tmp_path / "o1.csv").write_text("a,class\n1,x\n")
    kits = issue_throwaway_federation(tmp_path / "kits", owners=["o1"], address="localhost:0",
                                      owner_data={"o1": (str(tmp_path / "o1.csv"), "class")}, policy={"min_k": 3})
    before = _config(kits["o1"], "owner")
    assert _config(kits["miner"], "miner")["miner"]["listen"] == "localhost:0"
    with pytest.raises(OwnerConfigError, match="miner = 'localhost:0' must be HOST:PORT"):
        OwnerConfig.load(kits["o1"] / "owner.toml")  # not dialable before the miner has said its port
    miner = start_miner(MinerConfig.load(kits["miner"] / "miner.toml"), mechanisms=registry.names())
    try:
        ready = read_ready(miner.config.state_dir)
        assert miner.port > 0 and ready is not None
        assert ready["port"] == miner.port and ready["address"] == f"localhost:{miner.port}"
        assert ready["listen"] == "localhost:0" and ready["pid"] == os.getpid()
        set_miner_port([*kits.values(), tmp_path / "kits" / "ca"], miner.port)
        address = f"localhost:{miner.port}"
        assert _config(kits["miner"], "miner")["miner"]["listen"] == address
        assert AdminConfig.load(kits["admin"] / "admin.toml").miner == address
        assert _config(kits["o1"], "owner") == before | {"owner": before["owner"] | {"miner": address}}
        owner = OwnerConfig.load(kits["o1"] / "owner.toml")
        with dial_miner(owner.miner, owner.tls, owner.miner_name) as channel:  # the certificate names the host
            assert fgrpc.MinerStub(channel).Health(fpb.HealthRequest(), timeout=10).status == "serving"
    finally:
        miner.stop(grace=None)
    assert read_ready(miner.config.state_dir) is None  # a clean stop removes it
    with pytest.raises(ProvisionError, match="must lie in 1..65535, got 0"):
        set_miner_port(kits.values(), 0)


def test_cli_provisions_adds_revokes_and_reports_errors(tmp_path, capsys):
    project, out = _write_project(tmp_path), tmp_path / "kits"
    assert main(["provision", str(project), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in report["parties"]] == NAMES and report["action"] == "provision"
    assert report["parties"][2]["key_id"] == provisioned_roster(out).get("site-a").key_id
    assert main(["provision", str(project), "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err
    project.write_text(PROJECT + SITE_C, encoding="utf-8")
    assert main(["provision", str(project), "--out", str(out), "--add", "site-c"]) == 0
    assert "site-c" in capsys.readouterr().out
    assert main(["provision", str(project), "--out", str(out), "--revoke", "site-a", "--json"]) == 0
    revoked = json.loads(capsys.readouterr().out)["parties"]
    assert revoked[0]["name"] == "site-a" and revoked[0]["revoked"]
    with pytest.raises(SystemExit):
        main(["provision", str(project), "--out", str(out), "--add", "x", "--revoke", "y"])
