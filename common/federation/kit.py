"""A party's kit: the roster of the federation and the TLS material that authenticates the party.

`modelshare provision` makes one kit directory per party::

    ca.crt          the project CA certificate (PEM)
    tls.crt         the party's certificate, signed by the CA; subject CN = the party's name
    tls.key         its private key (PKCS8 PEM), mode 0600
    signing.key     its Ed25519 signing key (`modelshare.common.federation.signing` format), mode 0600
    roster.json     the roster: every party's name, role, signing key and certificate digest
    <role>.toml     a ready configuration: miner.toml, owner.toml or admin.toml

Mutual TLS proves which certificate a peer holds; the roster says what that party may do and
whether it has been revoked. A miner keeps the roster behind a `RosterWatcher`, so a revocation
written by ``modelshare provision --revoke`` takes effect without a restart.

roster.json::

    {"format": "modelshare.roster/1", "project": "demo", "parties": [
      {"name": "site-a", "role": "owner", "signing_key": "<base64 raw Ed25519 public key>",
       "key_id": "<hex SHA-256 of the raw key>", "tls_cert_sha256": "<hex SHA-256 of the DER cert>",
       "revoked": false, "revoked_at": null}]}
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import AfterValidator

from modelshare.common.federation.config_file import ConfigModel, Text
from modelshare.common.federation.signing import (
    KEY_ID_PREFIX,
    SignatureError,
    key_id,
    public_key_from_text,
    public_key_to_text,
    require_private_file,
)
from modelshare.common.files import atomic_write

__all__ = [
    "NAME_PATTERN",
    "ROLES",
    "Role",
    "ROSTER_FORMAT",
    "KitError",
    "Party",
    "Roster",
    "RosterError",
    "RosterWatcher",
    "PartyName",
    "TlsFiles",
    "TlsTable",
    "cert_sha256",
    "peer_cert_sha256",
    "peer_identity",
]

log = logging.getLogger(__name__)

Role = Literal["miner", "owner", "admin"]
ROLES: tuple[str, ...] = get_args(Role)
ROSTER_FORMAT = "modelshare.roster/1"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")
_PARTY_FIELDS = ("name", "role", "signing_key", "key_id", "tls_cert_sha256", "revoked", "revoked_at")


class KitError(ValueError):
    """A kit file (certificate, TLS key) that is missing or unusable; the message names it."""


class RosterError(ValueError):
    """A roster that is unreadable or inconsistent; the message names the file, party and field."""


@dataclass(frozen=True)
class Party:
    """One roster entry: who a party is, what it may do, and the keys that prove it."""

    name: str
    role: str
    signing_key: Ed25519PublicKey
    key_id: str
    tls_cert_sha256: str
    revoked: bool = False
    revoked_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The roster.json form of this entry."""
        return {
            "name": self.name,
            "role": self.role,
            "signing_key": public_key_to_text(self.signing_key),
            "key_id": self.key_id,
            "tls_cert_sha256": self.tls_cert_sha256,
            "revoked": self.revoked,
            "revoked_at": self.revoked_at,
        }


def _text_field(entry: dict[str, Any], field: str, where: str) -> str:
    value = entry[field]
    if not isinstance(value, str):
        raise RosterError(f"{where}.{field}: expected a string, got {type(value).__name__}")
    return value


def _revocation(entry: dict[str, Any], where: str) -> tuple[bool, str | None]:
    revoked, revoked_at = entry["revoked"], entry["revoked_at"]
    if not isinstance(revoked, bool):
        raise RosterError(f"{where}.revoked: expected true or false, got {revoked!r}")
    if not revoked:
        if revoked_at is not None:
            raise RosterError(f"{where}.revoked_at: must be null for a party that is not revoked")
        return False, None
    if not isinstance(revoked_at, str):
        raise RosterError(f"{where}.revoked_at: a revoked party needs an ISO 8601 UTC timestamp")
    try:
        datetime.fromisoformat(revoked_at.replace("Z", "+00:00"))
    except ValueError:
        raise RosterError(f"{where}.revoked_at: {revoked_at!r} is not an ISO 8601 timestamp") from None
    return True, revoked_at


def _party_from_dict(entry: Any, where: str) -> Party:
    if not isinstance(entry, dict):
        raise RosterError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    missing = [f for f in _PARTY_FIELDS if f not in entry]
    unknown = sorted(set(entry) - set(_PARTY_FIELDS))
    if missing or unknown:
        raise RosterError(f"{where}: missing fields {missing}, unknown fields {unknown}")
    name = _text_field(entry, "name", where)
    if not NAME_PATTERN.fullmatch(name):
        raise RosterError(f"{where}.name: {name!r} is not a party name ({NAME_PATTERN.pattern})")
    where = f"{where} ({name})"
    role = _text_field(entry, "role", where)
    if role not in ROLES:
        raise RosterError(f"{where}.role: {role!r} is not one of {', '.join(ROLES)}")
    try:
        signing_key = public_key_from_text(_text_field(entry, "signing_key", where), where=f"{where}.signing_key")
    except SignatureError as exc:
        raise RosterError(str(exc)) from None
    kid = _text_field(entry, "key_id", where)
    if kid != key_id(signing_key):
        raise RosterError(f"{where}.key_id: {kid[:KEY_ID_PREFIX]!r} is not the SHA-256 of signing_key")
    digest = _text_field(entry, "tls_cert_sha256", where)
    if not _HEX_SHA256.fullmatch(digest):
        raise RosterError(f"{where}.tls_cert_sha256: expected 64 lowercase hex characters")
    revoked, revoked_at = _revocation(entry, where)
    return Party(name, role, signing_key, kid, digest, revoked, revoked_at)


class Roster:
    """The parties of one project, by name and by signing key id. Treat it as read-only.

    Parameters
    ----------
    project:
        The project name every party's kit was provisioned for.
    parties:
        The entries; names and key ids must be unique.
    source:
        What to call the roster in errors (its file, usually).
    """

    def __init__(self, project: str, parties: Iterable[Party], *, source: str = "roster") -> None:
        self.project = project
        self.parties: dict[str, Party] = {}
        self._by_key_id: dict[str, Party] = {}
        for party in parties:
            if party.name in self.parties:
                raise RosterError(f"{source}: party {party.name!r} appears more than once")
            holder = self._by_key_id.get(party.key_id)
            if holder is not None:
                raise RosterError(
                    f"{source}: parties {holder.name!r} and {party.name!r} share signing key "
                    f"{party.key_id[:KEY_ID_PREFIX]}"
                )
            self.parties[party.name] = party
            self._by_key_id[party.key_id] = party

    @classmethod
    def from_dict(cls, data: Any, *, source: str) -> Roster:
        """Validate the roster.json form; errors name `source` and the party and field at fault."""
        if not isinstance(data, dict):
            raise RosterError(f"{source}: expected a JSON object at top level")
        if data.get("format") != ROSTER_FORMAT:
            raise RosterError(f"{source}: format is {data.get('format')!r}, expected {ROSTER_FORMAT!r}")
        project, entries = data.get("project"), data.get("parties")
        if not isinstance(project, str) or not project:
            raise RosterError(f"{source}: 'project' must be a non-empty string")
        if not isinstance(entries, list):
            raise RosterError(f"{source}: 'parties' must be a list")
        return cls(project, (_party_from_dict(e, f"{source}: parties[{i}]") for i, e in enumerate(entries)),
                   source=source)

    @classmethod
    def load(cls, path: str | Path) -> Roster:
        """Read and validate a roster.json file."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise RosterError(f"{path}: cannot read roster: {exc.strerror}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RosterError(f"{path}: not a JSON roster: {exc}") from None
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """The roster.json form."""
        return {"format": ROSTER_FORMAT, "project": self.project,
                "parties": [p.to_dict() for p in self.parties.values()]}

    def save(self, path: str | Path) -> None:
        """Write roster.json atomically, so a watching miner never reads half a file."""
        atomic_write(path, (json.dumps(self.to_dict(), indent=2) + "\n").encode("utf-8"), mode=0o644)

    def get(self, name: str) -> Party | None:
        """The party called `name`, revoked or not."""
        return self.parties.get(name)

    def by_key_id(self, kid: str) -> Party | None:
        """The party whose signing key has id `kid`, revoked or not."""
        return self._by_key_id.get(kid)

    def owners(self) -> list[str]:
        """Names of the owners that are not revoked, sorted."""
        return sorted(p.name for p in self.parties.values() if p.role == "owner" and not p.revoked)


class RosterWatcher:
    """A roster file that is re-read when it changes, for servers that must see revocations live.

    The first load must succeed. Later, a changed file (new mtime, size or inode, as an atomic
    replace makes) is reloaded; if it is invalid or gone, the last good roster stays in force and
    one warning is logged per change. Safe to call from many threads.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._roster = Roster.load(self.path)

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def current(self) -> Roster:
        """The roster as the file says now, or the last good one if the file became invalid."""
        with self._lock:
            stamp = self._file_stamp()
            if stamp == self._stamp:
                return self._roster
            self._stamp = stamp
            if stamp is None:
                log.warning("roster %s is gone; keeping the roster loaded before", self.path)
                return self._roster
            try:
                self._roster = Roster.load(self.path)
            except RosterError as exc:
                log.warning("keeping the previous roster: %s", exc)
            return self._roster


def _party_name(value: str) -> str:
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(f"= {value!r} is not a party name ({NAME_PATTERN.pattern})")
    return value


PartyName = Annotated[str, AfterValidator(_party_name)]
"""A config file's party name (`NAME_PATTERN`): a certificate's CN and a roster key."""


@dataclass(frozen=True)
class TlsFiles:
    """The three PEM files of a party's mutual TLS: CA certificate, own certificate, own key."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def in_kit(cls, kit_dir: str | Path) -> TlsFiles:
        """The files under their provisioned names in a kit directory."""
        kit = Path(kit_dir)
        return cls(kit / "ca.crt", kit / "tls.crt", kit / "tls.key")

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(ca, cert, key) PEM bytes, checked to parse and to belong together."""
        try:
            require_private_file(self.key, "TLS key")
        except SignatureError as exc:
            raise KitError(str(exc)) from None
        ca, cert, key = (_read_pem(path, what) for path, what in
                         ((self.ca, "CA certificate"), (self.cert, "TLS certificate"), (self.key, "TLS key")))
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError as exc:
            raise KitError(f"CA certificate {self.ca}: not a PEM certificate ({exc})") from None
        try:
            certificate = x509.load_pem_x509_certificate(cert)
        except ValueError as exc:
            raise KitError(f"TLS certificate {self.cert}: not a PEM certificate ({exc})") from None
        try:
            private_key = serialization.load_pem_private_key(key, password=None)
        except (ValueError, TypeError) as exc:
            raise KitError(f"TLS key {self.key}: not an unencrypted PEM private key ({exc})") from None
        if certificate.public_key() != private_key.public_key():
            raise KitError(f"TLS key {self.key} does not belong to the certificate {self.cert}")
        return ca, cert, key

    def server_credentials(self) -> grpc.ServerCredentials:
        """Server side of mutual TLS: clients must present a certificate signed by the CA."""
        ca, cert, key = self.read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Client side of mutual TLS: trust only the CA, present this party's certificate."""
        ca, cert, key = self.read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


class TlsTable(ConfigModel):
    """A config file's ``[tls]`` table: the three PEM files, relative to the file's directory."""

    ca: Text
    """The project CA's certificate (PEM): the only CA this party trusts."""
    cert: Text
    """This party's TLS certificate (PEM), issued by the project CA."""
    key: Text
    """This party's TLS private key (PEM, mode 0600)."""

    def files(self, base: Path) -> TlsFiles:
        """The files resolved against ``base``, the config file's directory."""
        return TlsFiles(base / self.ca, base / self.cert, base / self.key)


def _read_pem(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise KitError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise KitError(f"{what} {path}: cannot read: {exc.strerror}") from None


REVOKED = "modelshare-revoked"
"""Trailing metadata of a call the miner refuses because the caller's party is revoked: when it was revoked."""


def peer_identity(context: grpc.ServicerContext) -> str | None:
    """The authenticated client's party name (its certificate's CN); None without client TLS."""
    # grpc maps each property to a list of bytes values; types-grpcio's stub says one bytes value
    names: Sequence[bytes] | None = context.auth_context().get("x509_common_name")  # type: ignore[assignment]
    return names[0].decode("utf-8", errors="replace") if names else None


def peer_cert_sha256(context: grpc.ServicerContext) -> str | None:
    """SHA-256 of the client's DER certificate, to match the roster's ``tls_cert_sha256``."""
    pems = context.auth_context().get("x509_pem_cert")
    return cert_sha256(pems[0]) if pems else None


@functools.lru_cache(maxsize=4096)
def cert_sha256(pem: bytes) -> str:
    """Lowercase hex SHA-256 of a PEM certificate's DER encoding (its usual fingerprint)."""
    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise KitError(f"not a PEM certificate ({exc})") from None
    return certificate.fingerprint(hashes.SHA256()).hex()
