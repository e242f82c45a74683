"""``owner.toml``: who this owner is, which miner it dials, where its kit, data and state live, its policy.

Provisioning writes one into each owner's kit; relative paths are relative to the file's
directory. Every key is validated and unknown sections or keys are errors, because a typo in a
policy key (``min-k`` for ``min_k``) must not silently weaken what the site releases::

    [owner]
    name = "site-a"
    miner = "localhost:50051"      # address to dial
    miner_name = "miner"           # the miner's TLS identity (certificate CN / SAN)
    state_dir = "state"
    signing_key = "signing.key"
    roster = "roster.json"
    # insecure = true              # honoured only together with `--insecure` on the command line
    [tls]
    ca = "ca.crt"
    cert = "tls.crt"
    key = "tls.key"
    [data]
    path = "table.csv"             # the private table (CSV, TSV or Parquet)
    class_column = "class"         # optional; default: the study schema's class name
    missing = "drop"               # a row with a missing value: "drop" it (counted), or keep a missing
                                   # categorical value as the category "(missing)" ("category")
    [policy]                       # see modelshare.owner_node.policy
    min_k = 5

The key files and the roster must exist when the config is loaded, so a broken kit is reported at
start, naming the key that points at the missing file, not at the first study. The data file need
not: a site whose table is not in place yet (a mount that dropped, a file still being exported)
starts, shows the wait in ``owner status``, and answers a study once the file appears
(`modelshare.owner_node.daemon`); ``[data] path`` naming a directory is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator

from modelshare.common.federation.config_file import ConfigModel, Text, at_key, read_toml, validate_config
from modelshare.common.federation.kit import PartyName, TlsFiles, TlsTable
from modelshare.owner_node.policy import Policy

__all__ = ["OwnerConfig", "OwnerConfigError"]


class OwnerConfigError(ValueError):
    """An owner config that cannot be used; the message names the file and the key."""


def _address(value: str) -> str:
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"= {value!r} must be HOST:PORT, e.g. 'miner.example.org:50051'")
    return value


class _OwnerTable(ConfigModel):
    name: PartyName
    """This owner's party name: its TLS identity and roster entry."""
    miner: Annotated[str, AfterValidator(_address)]  # address to dial
    """The miner's address to dial, HOST:PORT."""
    miner_name: PartyName  # the miner's TLS identity
    """The miner's TLS identity (certificate CN / SAN); a miner presenting another is refused."""
    state_dir: Text = "state"
    """Where the daemon keeps its outbox, budget ledger and status file."""
    signing_key: Text = "signing.key"
    """This owner's Ed25519 signing key (PEM, mode 0600)."""
    roster: Text = "roster.json"
    """Every party's public signing key, as provisioned."""
    insecure: bool = False
    """Plaintext gRPC; honoured only together with `--insecure` on the command line (debugging)."""


class _DataTable(ConfigModel):
    path: Text
    """The private table (CSV, TSV or Parquet); its rows never leave the owner's process. It may be absent when the
    daemon starts (`owner status` shows the wait; a study waits for it until a minute before its deadline)."""
    class_column: Text | None = None
    """The class column's name; default: the study schema's class name."""
    missing: Literal["drop", "category"] = "drop"
    """Rows with a missing value: `drop` them (the count is logged and in `owner status`), or `category`: keep a
    missing categorical value as the category `(missing)`, which the study's schema must list (a row missing a
    numeric value or its class is still dropped)."""


class _OwnerFile(ConfigModel):
    """``owner.toml`` as written (module docstring)."""

    owner: _OwnerTable
    tls: TlsTable
    data: _DataTable
    policy: Policy = Policy()


def _existing(base: Path, value: str, where: str, table: str, key: str) -> Path:
    """The file ``value`` names, relative to the config's directory; it must exist."""
    path = base / value
    if not path.is_file():
        why = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise OwnerConfigError(f"{at_key(where, (table, key))} = {value!r}: {path} {why}")
    return path


def _data_file(base: Path, value: str, where: str) -> Path:
    """The data file ``value`` names, relative to the config's directory; it may be absent, but not a directory."""
    path = base / value
    if path.is_dir():
        raise OwnerConfigError(f"{at_key(where, ('data', 'path'))} = {value!r}: {path} is a directory, not a file")
    return path


@dataclass(frozen=True)
class OwnerConfig:
    """A validated ``owner.toml`` with every path resolved against the file's directory.

    ``insecure`` records that the file asks for a plaintext channel; the daemon honours it only
    when the operator also passes ``--insecure``, so the file alone can never turn TLS off.
    """

    path: Path
    name: str
    miner: str
    miner_name: str
    state_dir: Path
    signing_key: Path
    roster: Path
    tls: TlsFiles
    data_path: Path
    class_column: str | None
    policy: Policy
    insecure: bool = False
    missing: Literal["drop", "category"] = "drop"

    @classmethod
    def load(cls, path: str | Path) -> OwnerConfig:
        """Read and validate ``owner.toml``; every error names the file and the key at fault."""
        path = Path(path)
        data = read_toml(path, "owner config", OwnerConfigError)
        return cls.from_mapping(data, path=path)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, path: Path) -> OwnerConfig:
        """Validate parsed TOML tables; ``path`` is the file they came from (errors, relative paths)."""
        where, base = str(path), path.parent
        file = validate_config(data, _OwnerFile, OwnerConfigError, where=where)
        owner, tls = file.owner, file.tls
        return cls(
            path=path,
            name=owner.name,
            miner=owner.miner,
            miner_name=owner.miner_name,
            state_dir=base / owner.state_dir,
            signing_key=_existing(base, owner.signing_key, where, "owner", "signing_key"),
            roster=_existing(base, owner.roster, where, "owner", "roster"),
            tls=TlsFiles(*(_existing(base, getattr(tls, key), where, "tls", key) for key in ("ca", "cert", "key"))),
            data_path=_data_file(base, file.data.path, where),
            class_column=file.data.class_column,
            policy=file.policy,
            insecure=owner.insecure,
            missing=file.data.missing,
        )
