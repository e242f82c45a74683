"""``miner.toml``: where the miner listens, keeps its state, finds its roster and TLS files.

::

    [miner]
    name = "miner"
    listen = "[::]:50051"
    state_dir = "state"                 # relative paths are relative to this file
    roster = "roster.json"
    studies = ["nursery.toml"]          # optional: study files created at start (if new)
    max_message_bytes = 16777216        # larger messages are refused by gRPC before parsing
    max_nodes = 200000                  # per released model, summed over its trees (at most 64, common.federation.wire.MAX_TREES)
    timestamp_window_seconds = 300      # accepted clock skew / message age
    workers = 32                        # concurrent calls served
    verify_processes = 2                # model verification workers (default: cores, at most 4; 0: in-thread)

    [tls]
    ca = "ca.crt"
    cert = "tls.crt"
    key = "tls.key"
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from common.federation.kit import TlsFiles
from common.federation.toml_file import read_toml

__all__ = ["MinerConfig", "ConfigError", "Limits"]


class ConfigError(ValueError):
    """A miner config that cannot be used; the message names the file and key."""


@dataclass(frozen=True)
class Limits:
    """What the miner refuses before it does any expensive work."""

    max_message_bytes: int = 16 * 1024 * 1024
    max_nodes: int = 200_000
    timestamp_window_seconds: float = 300.0


@dataclass(frozen=True)
class MinerConfig:
    name: str
    listen: str
    state_dir: Path
    roster: Path
    tls: TlsFiles | None
    studies: tuple[Path, ...] = ()
    limits: Limits = field(default_factory=Limits)
    workers: int = 32
    verify_processes: int = field(default_factory=lambda: default_verify_processes())

    @classmethod
    def load(cls, path: str | Path) -> "MinerConfig":
        path = Path(path)
        data = read_toml(path, "miner config", ConfigError)
        return cls.from_mapping(data, base=path.parent, where=str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, base: Path, where: str) -> "MinerConfig":
        unknown = set(data) - {"miner", "tls"}
        if unknown:
            raise ConfigError(f"{where}: unknown sections {sorted(unknown)}; expected [miner] and [tls]")
        miner = _section(data, "miner", where)
        allowed = {"name", "listen", "state_dir", "roster", "studies", "max_message_bytes", "max_nodes",
                   "timestamp_window_seconds", "workers", "verify_processes"}
        bad = set(miner) - allowed
        if bad:
            raise ConfigError(f"{where}: unknown keys {sorted(bad)} in [miner]; expected {sorted(allowed)}")
        tls = None
        if "tls" in data:
            t = _section(data, "tls", where)
            missing = {"ca", "cert", "key"} - set(t)
            if missing or set(t) - {"ca", "cert", "key"}:
                raise ConfigError(f"{where}: [tls] needs exactly the keys ca, cert and key")
            tls = TlsFiles(base / _str(t, "ca", where), base / _str(t, "cert", where), base / _str(t, "key", where))
        limits = Limits(
            max_message_bytes=_int(miner, "max_message_bytes", where, Limits.max_message_bytes),
            max_nodes=_int(miner, "max_nodes", where, Limits.max_nodes),
            timestamp_window_seconds=float(_int(miner, "timestamp_window_seconds", where, 300)),
        )
        studies = miner.get("studies", [])
        if not isinstance(studies, list) or not all(isinstance(s, str) for s in studies):
            raise ConfigError(f"{where}: studies must be a list of study file paths")
        return cls(
            name=_str(miner, "name", where),
            listen=_str(miner, "listen", where, "[::]:50051"),
            state_dir=base / _str(miner, "state_dir", where, "state"),
            roster=base / _str(miner, "roster", where, "roster.json"),
            tls=tls,
            studies=tuple(base / s for s in studies),
            limits=limits,
            workers=_int(miner, "workers", where, 32),
            verify_processes=_int(miner, "verify_processes", where, default_verify_processes(), minimum=0),
        )


def _section(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: missing [{key}] table")
    return value


def _str(section: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = section.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _int(section: Mapping[str, Any], key: str, where: str, default: int, *, minimum: int = 1) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{where}: {key} must be {kind}, got {value!r}")
    return value


def default_verify_processes() -> int:
    """One verification worker per core, at most four (verification is a small share of a core each)."""
    return min(4, os.cpu_count() or 1)
