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
    [policy]                       # see owner_node.policy
    min_k = 5

The key files, roster and data file must exist when the config is loaded, so a broken kit is
reported at start, naming the key that points at the missing file, not at the first study.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from common.federation.kit import NAME_PATTERN, TlsFiles
from common.federation.toml_file import read_toml
from owner_node.policy import Policy, PolicyError

__all__ = ["OwnerConfig", "OwnerConfigError"]

_SECTIONS = {
    "owner": {"name", "miner", "miner_name", "state_dir", "signing_key", "roster", "insecure"},
    "tls": {"ca", "cert", "key"},
    "data": {"path", "class_column"},
    "policy": None,  # checked by Policy.from_mapping
}
_REQUIRED = ("owner", "tls", "data")


class OwnerConfigError(ValueError):
    """An owner config that cannot be used; the message names the file and the key."""


def _section(data: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, Mapping):
        raise OwnerConfigError(f"{where}: [{name}] must be a table")
    allowed = _SECTIONS[name]
    unknown = sorted(set(value) - allowed) if allowed is not None else []
    if unknown:
        raise OwnerConfigError(f"{where}: unknown keys {unknown} in [{name}]; expected some of {sorted(allowed or ())}")
    return value


def _text(section: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = section.get(key, default)
    if value is None:
        raise OwnerConfigError(f"{where}: {key} is required")
    if not isinstance(value, str) or not value.strip():
        raise OwnerConfigError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _party_name(section: Mapping[str, Any], key: str, where: str) -> str:
    value = _text(section, key, where)
    if not NAME_PATTERN.fullmatch(value):
        raise OwnerConfigError(f"{where}: {key} = {value!r} is not a party name ({NAME_PATTERN.pattern})")
    return value


def _address(section: Mapping[str, Any], where: str) -> str:
    value = _text(section, "miner", where)
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OwnerConfigError(f"{where}: miner = {value!r} must be HOST:PORT, e.g. 'miner.example.org:50051'")
    return value


def _file(section: Mapping[str, Any], key: str, where: str, base: Path, default: str | None = None) -> Path:
    """A path relative to the config's directory that must name an existing file."""
    value = _text(section, key, where, default)
    path = base / value
    if not path.is_file():
        why = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise OwnerConfigError(f"{where}: {key} = {value!r}: {path} {why}")
    return path


def _flag(section: Mapping[str, Any], key: str, where: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise OwnerConfigError(f"{where}: {key} must be true or false, got {value!r}")
    return value


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

    @classmethod
    def load(cls, path: str | Path) -> OwnerConfig:
        """Read and validate ``owner.toml``; every error names the file and the key at fault."""
        path = Path(path)
        data = read_toml(path, "owner config", OwnerConfigError)
        return cls.from_mapping(data, path=path)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, path: Path) -> OwnerConfig:
        """Validate parsed TOML tables; ``path`` is the file they came from (errors, relative paths)."""
        unknown = sorted(set(data) - set(_SECTIONS))
        if unknown:
            raise OwnerConfigError(f"{path}: unknown sections {unknown}; expected {sorted(_SECTIONS)}")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise OwnerConfigError(f"{path}: missing sections {missing}")
        base = path.parent
        owner, tls, table = (_section(data, name, str(path)) for name in ("owner", "tls", "data"))
        at = {name: f"{path} [{name}]" for name in _SECTIONS}
        try:
            policy = Policy.from_mapping(_section(data, "policy", str(path)), at["policy"])
        except PolicyError as exc:
            raise OwnerConfigError(str(exc)) from None
        class_column = table.get("class_column")
        return cls(
            path=path,
            name=_party_name(owner, "name", at["owner"]),
            miner=_address(owner, at["owner"]),
            miner_name=_party_name(owner, "miner_name", at["owner"]),
            state_dir=base / _text(owner, "state_dir", at["owner"], "state"),
            signing_key=_file(owner, "signing_key", at["owner"], base, "signing.key"),
            roster=_file(owner, "roster", at["owner"], base, "roster.json"),
            tls=TlsFiles(*(_file(tls, key, at["tls"], base) for key in ("ca", "cert", "key"))),
            data_path=_file(table, "path", at["data"], base),
            class_column=None if class_column is None else _text(table, "class_column", at["data"]),
            policy=policy,
            insecure=_flag(owner, "insecure", at["owner"]),
        )
