"""Provisioning: one project CA, and a ready kit per party (certificates, keys, roster, config).

As in NVIDIA FLARE, an operator describes the federation once and hands each party its kit
directory; nobody generates keys by hand. ``modelshare provision project.toml --out kits/`` writes::

    kits/ca/          ca.crt, ca.key (0600; the CA key never enters a party kit),
                      project.json (the provisioned roster and certificate serials), crl.pem
    kits/<name>/      ca.crt, tls.crt, tls.key, signing.key, roster.json, <role>.toml,
                      and for the miner and each owner start.sh and stop.sh (`kit_scripts`)

``start.sh`` runs the kit's daemon (``modelshare miner serve`` or ``modelshare owner serve`` with the
kit's config) in the background, its output appended to ``<role>.log`` and its pid in ``<role>.pid``
beside the script, and returns once the daemon says it serves (or fails with its log's tail);
``stop.sh`` sends that pid SIGTERM and waits for it to exit. Both find the kit from their own
path, so a kit can be moved, and both are idempotent.

Directories are 0700 and key files 0600, set before any key byte is written. A project is
provisioned once: re-running on the same ``--out`` refuses rather than replace a CA every kit
trusts. Later changes go through the CA directory, which is the authority (keep it):

``--add NAME``
    issues a kit for a party of project.toml that has none yet, with the existing CA, and
    rewrites roster.json in the kits of the miner and every admin; other kits are not touched.
``--revoke NAME``
    marks the party revoked in ca/project.json and in the miner's and admins' roster.json, and
    writes ca/crl.pem (copied to the miner's kit as crl.pem, for the record: the miner enforces
    revocation through its roster, which it re-reads while running).

Re-copy the rewritten roster.json to the miner's machine when its kit lives elsewhere.

project.toml::

    name = "demo"                       # project name
    [ca]
    valid_days = 3650                   # optional CA lifetime
    [[parties]]
    name = "miner"                      # [A-Za-z0-9][A-Za-z0-9._-]{0,62}; "ca" is reserved
    role = "miner"                      # exactly one miner; any number of owners and admins
    address = "localhost:50051"         # what owners and admins dial; required for the miner
    listen = "[::]:50051"               # optional; default "[::]:<port of address>"; port 0: see below
    hosts = ["localhost", "127.0.0.1"]  # optional extra certificate names (DNS names or IPs)
    valid_days = 825                    # optional certificate lifetime, any party
    [[parties]]
    name = "admin"
    role = "admin"
    [[parties]]
    name = "site-a"
    role = "owner"
    data = "/srv/site-a/table.csv"      # optional; written into owner.toml's [data]
    class_column = "class"              # optional
    [parties.policy]                    # optional; checked as owner.toml's [policy] is, written into it as given
    min_k = 10

A party's certificate names it twice: subject CN = name (the identity the miner reads from
mutual TLS) and subject alternative names DNS:name, the host of the miner's address, and
``hosts``. Every certificate may act as TLS server and client. Keys are ECDSA P-256, signed with
SHA-256. An owner without ``policy`` gets a strict default (see `DEFAULT_POLICY`).

A miner whose ``listen`` says port 0 binds a free port its OS picks and reports it in its
``state/ready.json``; its ``address`` may then say port 0 too, and `set_miner_port` writes the
port it reported into the kits (the certificates name hosts, not ports), before which the owners'
and admins' configs refuse to load.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import tomli_w
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pydantic import model_validator

from modelshare.common.federation.config_file import ConfigModel, load_config, read_toml
from modelshare.common.federation.kit import NAME_PATTERN, ROLES, Party, Role, Roster, RosterError
from modelshare.common.federation.signing import (
    SignatureError,
    generate_signing_key,
    key_id,
    require_private_file,
    save_signing_key,
)
from modelshare.common.files import atomic_write
from modelshare.owner_node.policy import Policy

__all__ = [
    "DEFAULT_POLICY",
    "PartySpec",
    "ProjectSpec",
    "ProvisionError",
    "add_party",
    "issue_throwaway_federation",
    "kit_scripts",
    "load_project",
    "provision",
    "provisioned_roster",
    "revoke_party",
    "set_miner_port",
]

STATE_FORMAT = "modelshare.provision/1"
CA_DIR = "ca"
DEFAULT_CA_DAYS = 3650
DEFAULT_PARTY_DAYS = 825
THROWAWAY_DAYS = 30
CRL_DAYS = 365
CLOCK_SKEW = timedelta(minutes=5)  # certificates start this early, so a slow clock still accepts them
DEFAULT_POLICY: Mapping[str, Any] = {
    "mechanisms": ("apt", "prune-leaf", "prune-parent"),
    "min_k": 5,
    "min_l": 2,
    "max_c": 20,
}  # plus miners = [the miner's name]
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")
_COMMON_FIELDS = {"name", "role", "hosts", "valid_days"}
_ROLE_FIELDS = {"miner": {"address", "listen"}, "owner": {"data", "class_column", "policy"}, "admin": set()}


class ProvisionError(ValueError):
    """A project description or CA directory that cannot be provisioned; names the file and field."""


# ------------------------------------------------------------------ project description
@dataclass(frozen=True)
class PartySpec:
    """One party as the operator describes it (see the module docstring for the fields)."""

    name: str
    role: str
    address: str | None = None
    listen: str | None = None
    hosts: tuple[str, ...] = ()
    data: str | None = None
    class_column: str | None = None
    policy: Mapping[str, Any] | None = None
    valid_days: int = DEFAULT_PARTY_DAYS


@dataclass(frozen=True)
class ProjectSpec:
    """A whole federation to provision; `source` names it in errors (its file, usually)."""

    name: str
    parties: tuple[PartySpec, ...]
    ca_valid_days: int = DEFAULT_CA_DAYS
    source: str = "project"

    def miner(self) -> PartySpec:
        """The one miner (the spec must have been validated)."""
        return next(p for p in self.parties if p.role == "miner")

    def party(self, name: str) -> PartySpec | None:
        """The party called `name`, if described."""
        return next((p for p in self.parties if p.name == name), None)


class _PartyTable(ConfigModel):
    """One ``[[parties]]`` entry; a site's ``policy`` is checked here as its owner.toml will be."""

    name: str
    """The party's name (`[A-Za-z0-9][A-Za-z0-9._-]{0,62}`; `ca` is reserved): its certificate CN and roster entry."""
    role: Role
    """`miner` (exactly one), `owner` or `admin`."""
    address: str | None = None
    """Miner only, required: what owners and admins dial, HOST:PORT."""
    listen: str | None = None
    """Miner only: the address to serve on; default `[::]:<port of address>`."""
    hosts: list[str] = []
    """Extra certificate names (DNS names or IPs)."""
    data: str | None = None
    """Owner only: written into owner.toml's [data] path."""
    class_column: str | None = None
    """Owner only: written into owner.toml's [data] class_column."""
    policy: Policy | None = None
    """Owner only: checked as owner.toml's [policy] is and written into it; default: a strict policy."""
    valid_days: int = DEFAULT_PARTY_DAYS
    """The party certificate's lifetime."""

    @model_validator(mode="after")
    def _fits_role(self) -> _PartyTable:
        unknown = sorted(self.model_fields_set - _COMMON_FIELDS - _ROLE_FIELDS[self.role])
        if unknown:
            raise ValueError(f"sets {unknown}, which do not apply to the role {self.role!r}")
        return self

    def spec(self) -> PartySpec:
        policy = None if self.policy is None else self.policy.model_dump(exclude_unset=True)
        return PartySpec(self.name, self.role, self.address, self.listen, tuple(self.hosts), self.data,
                         self.class_column, policy, self.valid_days)


class _CaTable(ConfigModel):
    valid_days: int = DEFAULT_CA_DAYS
    """The project CA's lifetime."""


class _ProjectFile(ConfigModel):
    """``project.toml`` as written (module docstring)."""

    name: str
    """The project's name."""
    ca: _CaTable = _CaTable()
    parties: list[_PartyTable]


def load_project(path: str | Path) -> ProjectSpec:
    """Read and validate project.toml; every error names the file, the party index and the field."""
    file = load_config(path, _ProjectFile, ProvisionError, "project file")
    spec = ProjectSpec(name=file.name, parties=tuple(party.spec() for party in file.parties),
                       ca_valid_days=file.ca.valid_days, source=str(path))
    _validate(spec)
    return spec


def _split_host_port(text: str, where: str, *, port_0: bool = False) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    lowest = 0 if port_0 else 1
    if not sep or not host or (":" in host and not bracketed) or not port.isdigit() or not lowest <= int(port) < 65536:
        raise ProvisionError(f"{where}: {text!r} is not HOST:PORT (e.g. localhost:50051 or [::1]:50051)")
    return host, int(port)


def _check_host(host: str, where: str) -> None:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOST.fullmatch(host):
            raise ProvisionError(f"{where}: {host!r} is neither an IP address nor a DNS name") from None


def _validate_party(party: PartySpec, where: str) -> None:
    if not NAME_PATTERN.fullmatch(party.name):
        raise ProvisionError(f"{where}.name: {party.name!r} does not match {NAME_PATTERN.pattern}")
    if party.name == CA_DIR:
        raise ProvisionError(f"{where}.name: {CA_DIR!r} is reserved for the CA directory")
    if party.role not in ROLES:
        raise ProvisionError(f"{where}.role: {party.role!r} is not one of {', '.join(ROLES)}")
    if party.valid_days < 1:
        raise ProvisionError(f"{where}.valid_days: must be at least 1, got {party.valid_days}")
    if party.role == "miner":
        if party.address is None:
            raise ProvisionError(f"{where}.address: the miner needs the address owners dial (HOST:PORT)")
        listen_0 = party.listen is not None and _split_host_port(party.listen, f"{where}.listen", port_0=True)[1] == 0
        _split_host_port(party.address, f"{where}.address", port_0=listen_0)  # port 0 until `set_miner_port`
    for i, host in enumerate(party.hosts):
        _check_host(host, f"{where}.hosts[{i}]")


def _validate(spec: ProjectSpec) -> None:
    if not NAME_PATTERN.fullmatch(spec.name):
        raise ProvisionError(f"{spec.source}: name: {spec.name!r} does not match {NAME_PATTERN.pattern}")
    if spec.ca_valid_days < 1:
        raise ProvisionError(f"{spec.source}: ca.valid_days: must be at least 1, got {spec.ca_valid_days}")
    seen: dict[str, int] = {}
    for i, party in enumerate(spec.parties):
        _validate_party(party, f"{spec.source}: parties[{i}]")
        if party.name in seen:
            raise ProvisionError(
                f"{spec.source}: parties[{i}].name: {party.name!r} is also parties[{seen[party.name]}]"
            )
        seen[party.name] = i
    miners = [p.name for p in spec.parties if p.role == "miner"]
    if len(miners) != 1:
        raise ProvisionError(f"{spec.source}: a project needs exactly one party with role = \"miner\", found {miners}")


# ------------------------------------------------------------------ certificates
def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def _utc_text(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _make_ca(spec: ProjectSpec, now: datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{spec.name} modelshare CA"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, spec.name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + timedelta(days=spec.ca_valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _cert_hosts(party: PartySpec) -> list[str]:
    hosts = [party.name]
    if party.address is not None:
        hosts.append(_split_host_port(party.address, "address", port_0=True)[0])
    hosts.extend(party.hosts)
    return list(dict.fromkeys(hosts))


def _issue_cert(project: str, party: PartySpec, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
                now: datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party.name),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, project)])
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + timedelta(days=party.valid_days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in _cert_hosts(party)]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _build_crl(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, roster: Roster,
               serials: Mapping[str, int], now: datetime) -> x509.CertificateRevocationList:
    revoked = [p for p in roster.parties.values() if p.revoked]
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now)
        .next_update(now + timedelta(days=CRL_DAYS))
        .add_extension(x509.CRLNumber(len(revoked)), critical=False)  # grows with every revocation
    )
    for party in revoked:
        assert party.revoked_at is not None
        entry = (x509.RevokedCertificateBuilder()
                 .serial_number(serials[party.name])
                 .revocation_date(datetime.fromisoformat(party.revoked_at.replace("Z", "+00:00")))
                 .build())
        builder = builder.add_revoked_certificate(entry)
    return builder.sign(ca_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class _Issued:
    """A party's fresh key material, held in memory until its kit is written."""

    spec: PartySpec
    tls_key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    signing_key: Ed25519PrivateKey

    def party(self) -> Party:
        public = self.signing_key.public_key()
        return Party(self.spec.name, self.spec.role, public, key_id(public),
                     self.cert.fingerprint(hashes.SHA256()).hex())


def _issue(project: str, party: PartySpec, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
           now: datetime) -> _Issued:
    tls_key, cert = _issue_cert(project, party, ca_key, ca_cert, now)
    return _Issued(party, tls_key, cert, generate_signing_key())


# ------------------------------------------------------------------ configuration files
_TLS_TABLE = {"ca": "ca.crt", "cert": "tls.crt", "key": "tls.key"}


def _config(party: PartySpec, miner: PartySpec) -> str:
    """The kit's <role>.toml; paths are relative to the kit directory."""
    if party.role == "miner":
        assert party.address is not None  # validated: a miner has an address
        port = _split_host_port(party.address, "address", port_0=True)[1]
        main = {"name": party.name, "listen": party.listen or f"[::]:{port}", "state_dir": "state",
                "roster": "roster.json"}
    else:
        assert miner.address is not None  # validated: a miner has an address
        main = {"name": party.name, "miner": miner.address, "miner_name": miner.name}
        main |= {"state_dir": "state"} if party.role == "owner" else {}
        main |= {"signing_key": "signing.key", "roster": "roster.json"}
    tables: dict[str, Mapping[str, Any]] = {party.role: main, "tls": _TLS_TABLE}
    if party.role == "owner":
        data = {key: value for key, value in (("path", party.data), ("class_column", party.class_column))
                if value is not None}
        tables |= {"data": data} if data else {}
        tables["policy"] = party.policy if party.policy is not None else {**DEFAULT_POLICY, "miners": [miner.name]}
    return tomli_w.dumps(tables)


# ------------------------------------------------------------------ start and stop scripts
#: What each daemon prints once it serves (`modelshare.cli.federation.cmd_miner_serve`,
#: `modelshare.cli.owner.cmd_serve`); start.sh waits for it in the log.
READY_LINES = {"miner": "serving on port", "owner": "dialling the miner"}

_SCRIPT_HEAD = """#!/bin/sh
# {what}
# Written by `modelshare provision`; it finds the kit from its own path, so the kit may be moved.
set -eu
kit=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
pidfile="$kit/{role}.pid"
log="$kit/{role}.log"

# is process $1 this kit's {role} daemon? (not a zombie, not another program that got its pid)
running() {{
    ps -ww -o args= -p "$1" 2>/dev/null | grep -qF -- "{role} serve --config"
}}

# does process $1 exist and run? (a zombie has exited)
alive() {{
    state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    case $state in ''|Z*) return 1 ;; esac
}}

read_pid() {{
    pid=$(cat "$pidfile")
    case $pid in
        ''|*[!0-9]*) echo "$pidfile does not hold a process id: $pid" >&2; exit 1 ;;
    esac
}}
"""

_START = """
if [ -f "$pidfile" ]; then
    read_pid
    if running "$pid"; then
        echo "the {role} of this kit is already running (pid $pid, $pidfile)"
        exit 0
    fi
    rm -f "$pidfile"
fi
offset=0
if [ -f "$log" ]; then offset=$(wc -c < "$log"); fi
cd "$kit"
# MODELSHARE is split on purpose: a command and its arguments
nohup ${{MODELSHARE:-modelshare}} {role} serve --config "$kit/{role}.toml" >> "$log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$pidfile"
timeout=${{MODELSHARE_START_TIMEOUT:-60}}
waited=0
until tail -c +$((offset + 1)) "$log" | grep -qF "{ready}"; do
    if ! alive "$pid"; then
        rm -f "$pidfile"
        echo "the {role} exited before it served; $log ends with:" >&2
        tail -n 15 "$log" >&2
        exit 1
    fi
    if [ "$waited" -ge $((timeout * 10)) ]; then
        echo "the {role} (pid $pid) has not served within $timeout s; it still runs:" \\
            "see $log, stop it with $kit/stop.sh" >&2
        exit 1
    fi
    sleep 0.1
    waited=$((waited + 1))
done
echo "started the {role} (pid $pid): $(tail -c +$((offset + 1)) "$log" | grep -F "{ready}" | tail -n 1)"
echo "log $log; stop it with $kit/stop.sh"
"""

_STOP = """
if [ ! -f "$pidfile" ]; then
    echo "the {role} of this kit is not running (no $pidfile)"
    exit 0
fi
read_pid
if ! running "$pid"; then
    rm -f "$pidfile"
    echo "the {role} of this kit is not running (pid $pid has exited); removed $pidfile"
    exit 0
fi
timeout=${{MODELSHARE_STOP_TIMEOUT:-30}}
kill -TERM "$pid" 2>/dev/null || true
waited=0
signal=SIGTERM
while running "$pid"; do
    if [ "$waited" -eq $((timeout * 10)) ]; then
        echo "the {role} (pid $pid) did not exit within $timeout s of SIGTERM; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        signal=SIGKILL
    fi
    sleep 0.1
    waited=$((waited + 1))
done
rm -f "$pidfile"
echo "stopped the {role} (pid $pid, $signal)"
"""


def kit_scripts(role: str) -> dict[str, str]:
    """The start.sh and stop.sh of a kit of ``role`` (POSIX sh; none for an admin, who runs no daemon)."""
    if role not in READY_LINES:
        return {}
    start = (f"Start this kit's {role} in the background: output appended to {role}.log, pid in {role}.pid; returns\n"
             "# once it serves (MODELSHARE_START_TIMEOUT seconds at most, default 60); safe "
             "to rerun. MODELSHARE: the\n"
             f'# command, split on spaces (default: modelshare on PATH; e.g. "python3 -m modelshare.cli").')
    stop = (f"Stop this kit's {role} (the pid in {role}.pid): SIGTERM, wait for it to exit (SIGKILL after\n"
            f"# MODELSHARE_STOP_TIMEOUT seconds, default 30), remove the pid file; safe to rerun.")
    values = {"role": role, "ready": READY_LINES[role]}
    return {"start.sh": _SCRIPT_HEAD.format(what=start, **values) + _START.format(**values),
            "stop.sh": _SCRIPT_HEAD.format(what=stop, **values) + _STOP.format(**values)}


# ------------------------------------------------------------------ files on disk
@dataclass(frozen=True)
class _State:
    """ca/project.json: the provisioned roster and each party's certificate serial."""

    roster: Roster
    serials: Mapping[str, int]


def _state_path(out: Path) -> Path:
    return out / CA_DIR / "project.json"


def _state_bytes(state: _State) -> bytes:
    data = {"format": STATE_FORMAT, "roster": state.roster.to_dict(),
            "serials": {name: format(serial, "x") for name, serial in state.serials.items()}}
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def _serials(data: Any, roster: Roster, path: Path) -> dict[str, int]:
    if not isinstance(data, dict) or set(data) != set(roster.parties):
        raise ProvisionError(f"{path}: 'serials' must map every roster party to its certificate serial")
    try:
        return {name: int(text, 16) for name, text in data.items()}
    except (TypeError, ValueError):
        raise ProvisionError(f"{path}: 'serials' values must be hexadecimal strings") from None


def _load_state(out: Path) -> _State:
    path = _state_path(out)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProvisionError(f"{out}: no provisioned project here ({path} is missing); provision it first") from None
    except OSError as exc:
        raise ProvisionError(f"{path}: cannot read provisioning state: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProvisionError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
        raise ProvisionError(f"{path}: not a provisioning state file (format {STATE_FORMAT!r})")
    try:
        roster = Roster.from_dict(data.get("roster"), source=f"{path} roster")
    except RosterError as exc:
        raise ProvisionError(str(exc)) from None
    return _State(roster, _serials(data.get("serials"), roster, path))


def _load_ca(out: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    ca_dir = out / CA_DIR
    try:
        require_private_file(ca_dir / "ca.key", "CA key")
        cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
        key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    except SignatureError as exc:
        raise ProvisionError(str(exc)) from None
    except OSError as exc:
        raise ProvisionError(f"{ca_dir}: cannot read the CA: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ProvisionError(f"{ca_dir}: ca.crt or ca.key is not valid PEM: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise ProvisionError(f"{ca_dir}: ca.key is not the key of ca.crt")
    return key, cert


def _private_dir(path: Path) -> None:
    """Create `path` with mode 0700 whatever the umask; refuse to reuse an existing one."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        raise ProvisionError(f"{path} already exists; refusing to overwrite it") from None
    os.chmod(path, 0o700)


def _write_kit(kit: Path, issued: _Issued, miner: PartySpec, ca_pem: bytes, roster: Roster) -> None:
    _private_dir(kit)
    atomic_write(kit / "ca.crt", ca_pem, mode=0o644)
    atomic_write(kit / "tls.crt", _pem(issued.cert), mode=0o644)
    atomic_write(kit / "tls.key", _key_pem(issued.tls_key), mode=0o600)
    save_signing_key(issued.signing_key, kit / "signing.key")
    roster.save(kit / "roster.json")
    atomic_write(kit / f"{issued.spec.role}.toml", _config(issued.spec, miner).encode("utf-8"), mode=0o644)
    for name, text in kit_scripts(issued.spec.role).items():
        atomic_write(kit / name, text.encode("utf-8"), mode=0o755)


def _refuse_existing(paths: Iterable[Path]) -> None:
    taken = [str(p) for p in paths if p.exists()]
    if taken:
        raise ProvisionError(f"refusing to overwrite existing {', '.join(taken)}")


def _publish(out: Path, write: Callable[[Path], None], names: list[str]) -> None:
    """Write directories `names` into a staging directory under `out`, then move them into place.

    A failure leaves `out` as it was; the moves happen in the order given.
    """
    staging = Path(tempfile.mkdtemp(dir=out, prefix=".provision-"))
    try:
        write(staging)
        for name in names:
            os.rename(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _roster_holders(out: Path, roster: Roster) -> list[Path]:
    """Kits whose roster.json follows every change: the miner's and each admin's."""
    kits = [out / p.name for p in roster.parties.values() if p.role in ("miner", "admin")]
    missing = [str(k) for k in kits if not (k / "roster.json").exists()]
    if missing:
        raise ProvisionError(f"cannot update the roster of {', '.join(missing)}: kit missing from the CA's out dir")
    return kits


# ------------------------------------------------------------------ operations
def _provision_spec(spec: ProjectSpec, out: Path) -> dict[str, Path]:
    _validate(spec)
    if (out / CA_DIR / "ca.crt").exists():
        raise ProvisionError(
            f"{out} already holds a provisioned project ({out / CA_DIR / 'ca.crt'}); refusing to replace "
            f"the CA every kit trusts. Use --add NAME or --revoke NAME, or choose another --out"
        )
    _refuse_existing([out / CA_DIR, *(out / p.name for p in spec.parties)])
    now = _now()
    ca_key, ca_cert = _make_ca(spec, now)
    issued = [_issue(spec.name, p, ca_key, ca_cert, now) for p in spec.parties]
    state = _State(Roster(spec.name, (i.party() for i in issued), source=spec.source),
                   {i.spec.name: i.cert.serial_number for i in issued})
    miner = spec.miner()

    def write(staging: Path) -> None:
        for item in issued:
            _write_kit(staging / item.spec.name, item, miner, _pem(ca_cert), state.roster)
        _private_dir(staging / CA_DIR)
        atomic_write(staging / CA_DIR / "ca.key", _key_pem(ca_key), mode=0o600)
        atomic_write(staging / CA_DIR / "project.json", _state_bytes(state), mode=0o644)
        atomic_write(staging / CA_DIR / "ca.crt", _pem(ca_cert), mode=0o644)

    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    _publish(out, write, [*(p.name for p in spec.parties), CA_DIR])  # the CA last: it marks "provisioned"
    return {p.name: out / p.name for p in spec.parties}


def provision(project_path: str | Path, out_dir: str | Path) -> dict[str, Path]:
    """Create the CA and every party's kit under `out_dir`; returns party name -> kit directory."""
    return _provision_spec(load_project(project_path), Path(out_dir))


def add_party(project_path: str | Path, out_dir: str | Path, name: str) -> Path:
    """Issue a kit for party `name` of project.toml with the existing CA; returns its directory.

    The CA files and every other party's kit stay as they are, except roster.json in the kits of
    the miner and the admins, which gains the new party.
    """
    spec, out = load_project(project_path), Path(out_dir)
    state = _load_state(out)
    if spec.name != state.roster.project:
        raise ProvisionError(f"{spec.source}: project {spec.name!r}, but {out} holds project {state.roster.project!r}")
    new = spec.party(name)
    if new is None:
        raise ProvisionError(f"{spec.source}: no party named {name!r}; describe it under [[parties]] first")
    known = state.roster.get(name)
    if known is not None:
        status = f" and revoked at {known.revoked_at}; choose a new name" if known.revoked else ""
        raise ProvisionError(f"{name!r} is already provisioned in {out}{status}")
    miner = spec.miner()
    provisioned_miner = next(p.name for p in state.roster.parties.values() if p.role == "miner")
    if miner.name != provisioned_miner:
        raise ProvisionError(f"{spec.source}: the miner is {miner.name!r}, but {out} provisioned {provisioned_miner!r}")
    _refuse_existing([out / name])
    holders = _roster_holders(out, state.roster)
    ca_key, ca_cert = _load_ca(out)
    issued = _issue(spec.name, new, ca_key, ca_cert, _now())
    roster = Roster(spec.name, [*state.roster.parties.values(), issued.party()], source=spec.source)
    _publish(out, lambda staging: _write_kit(staging / name, issued, miner, _pem(ca_cert), roster), [name])
    for kit in holders:
        roster.save(kit / "roster.json")
    atomic_write(_state_path(out), _state_bytes(_State(roster, {**state.serials, name: issued.cert.serial_number})),
                 mode=0o644)
    return out / name


def revoke_party(out_dir: str | Path, name: str) -> None:
    """Revoke party `name`: roster entries in ca/project.json and the miner's and admins' kits, and crl.pem."""
    out = Path(out_dir)
    state = _load_state(out)
    party = state.roster.get(name)
    if party is None:
        raise ProvisionError(f"{out}: no provisioned party named {name!r}")
    if party.revoked:
        raise ProvisionError(f"{name!r} was already revoked at {party.revoked_at}")
    if party.role == "miner":
        raise ProvisionError(f"{name!r} is the miner, which enforces revocation; provision a new project instead")
    holders = _roster_holders(out, state.roster)
    ca_key, ca_cert = _load_ca(out)
    now = _now()
    roster = Roster(state.roster.project,
                    [replace(p, revoked=True, revoked_at=_utc_text(now)) if p.name == name else p
                     for p in state.roster.parties.values()],
                    source=str(_state_path(out)))
    crl = _build_crl(ca_key, ca_cert, roster, state.serials, now).public_bytes(serialization.Encoding.PEM)
    miner = next(p.name for p in roster.parties.values() if p.role == "miner")
    atomic_write(out / CA_DIR / "crl.pem", crl, mode=0o644)
    atomic_write(out / miner / "crl.pem", crl, mode=0o644)
    for kit in holders:
        roster.save(kit / "roster.json")
    atomic_write(_state_path(out), _state_bytes(_State(roster, state.serials)), mode=0o644)


def provisioned_roster(out_dir: str | Path) -> Roster:
    """The authoritative roster of the project provisioned under `out_dir` (ca/project.json)."""
    return _load_state(Path(out_dir)).roster


def issue_throwaway_federation(
    out_dir: str | Path,
    *,
    owners: list[str],
    address: str,
    owner_data: dict[str, tuple[str, str]] | None = None,
    policy: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Provision a short-lived federation (a miner "miner", an admin "admin", `owners`) in memory.

    For `modelshare simulate`: the same kits as `provision`, with a fresh CA valid for
    `THROWAWAY_DAYS` days. The miner listens only on the host of `address` (no outside exposure);
    port 0 lets it bind a free port, to be written into the kits with `set_miner_port` once the
    miner has reported it. `owner_data` maps an owner to its (data path, class column); `policy`
    replaces the default policy of every owner. Returns party name -> kit directory.
    """
    unknown = sorted(set(owner_data or {}) - set(owners))
    if unknown:
        raise ProvisionError(f"owner_data names {unknown}, which are not among the owners {owners}")
    host, port = _split_host_port(address, "address", port_0=True)
    listen = _join_host_port(host, port)
    data = owner_data or {}
    parties = (
        PartySpec("miner", "miner", address=address, listen=listen, valid_days=THROWAWAY_DAYS),
        PartySpec("admin", "admin", valid_days=THROWAWAY_DAYS),
        *(PartySpec(name, "owner", data=data[name][0] if name in data else None,
                    class_column=data[name][1] if name in data else None, policy=policy,
                    valid_days=THROWAWAY_DAYS) for name in owners),
    )
    spec = ProjectSpec("throwaway", parties, ca_valid_days=THROWAWAY_DAYS, source="throw-away federation")
    return _provision_spec(spec, Path(out_dir))


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_MINER_ADDRESS_KEYS = {"miner": "listen", "owner": "miner", "admin": "miner"}  # <role>.toml: [role] key


def set_miner_port(kits: Iterable[str | Path], port: int) -> None:
    """Write `port`, the port the miner bound, into the configs of the kit directories `kits`.

    For a miner provisioned to listen on port 0, once it has reported its port (``port`` in its
    ready file): owners and admins then dial it at the host their config names (the host the
    miner's certificate names), and the miner listens on it again when restarted. Directories
    without a kit config (such as ``ca``) are passed over.
    """
    if not 0 < port < 65536:
        raise ProvisionError(f"the miner's port must lie in 1..65535, got {port}")
    for kit in map(Path, kits):
        for role, key in _MINER_ADDRESS_KEYS.items():
            path = kit / f"{role}.toml"
            if not path.exists():
                continue
            data = read_toml(path, f"{role} config", ProvisionError)
            host, _ = _split_host_port(str(data[role][key]), f"{path}: [{role}] {key}", port_0=True)
            data[role][key] = _join_host_port(host, port)
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            header = "".join(line for line in lines[:next((i for i, s in enumerate(lines) if not s.startswith("#")),
                                                           len(lines))])  # the kit's comment header, kept
            atomic_write(path, (header + tomli_w.dumps(data)).encode("utf-8"), mode=0o644)
