"""``miner.toml``: where the miner listens, keeps its state, finds its roster and TLS files.

::

    [miner]
    name = "miner"
    listen = "[::]:50051"
    state_dir = "state"                 # relative paths are relative to this file
    roster = "roster.json"
    studies = ["nursery.toml"]          # optional: study files created at start (if new)
    max_message_bytes = 16777216        # the largest answer (a whole signed envelope), however it travels
    max_grpc_message_bytes = 16777216   # the largest single gRPC message (an evaluation table, a whole answer)
    stream_idle_seconds = 30            # an answer sent in pieces with no piece this long is cut off
    max_nodes = 200000                  # per released model, summed over its trees
                                        # (at most 64, modelshare.common.federation.wire.MAX_TREES)
    timestamp_window_seconds = 300      # accepted clock skew / message age
    workers = 32                        # threads serving calls (waiting Polls hold none)
    max_calls = 10000                   # calls in progress at once, waiting Polls included; more: RESOURCE_EXHAUSTED
    max_streams_per_owner = 4           # answers in pieces (SubmitChunks) one owner may have in progress at once
    max_buffered_bytes_per_owner = 67108864  # bytes of answers in pieces buffered for one owner at once (64 MiB)
    max_buffered_bytes = 268435456      # bytes of answers in pieces buffered for all owners at once (256 MiB)
    mining_timeout_seconds = 3600       # a study still mining this long after it started fails, with the reason
    verify_processes = 2                # model verification workers (default: cores, at most 4; 0: in-thread)

    [mining]                            # optional; docs/scale-out.md
    engine = "local"                    # "local" (in-process, the default) or "dask"
    workers = 2                         # dask: a LocalCluster of N worker processes on loopback, or ...
    # scheduler = "tcp://10.0.0.5:8786" # dask: ... an existing cluster (exactly one of the two)
    memory_budget_mb = 256              # pseudo-data is written to Parquet in chunks that fit this budget
    engine_timeout_seconds = 600        # dask: a deadline on every cluster call (connect, fit, counts)

    [dashboard]                         # optional: the admin's read-only web dashboard (off without this table)
    listen = "127.0.0.1:8750"           # loopback by default; another address needs tls = true
    tls = false                         # serve HTTPS with the [tls] certificate (the federation CA signs it)

    [tls]
    ca = "ca.crt"
    cert = "tls.crt"
    key = "tls.key"
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from modelshare.common.federation.chunks import MIN_GRPC_MESSAGE_BYTES
from modelshare.common.federation.config_file import ConfigModel, Text, read_toml, validate_config
from modelshare.common.federation.kit import TlsFiles, TlsTable
from modelshare.common.federation.wire import DEFAULT_MAX_MESSAGE_BYTES

MINING_TIMEOUT_SECONDS = 3600.0

__all__ = ["MINING_TIMEOUT_SECONDS", "MinerConfig", "ConfigError", "DashboardConfig", "Limits", "MiningConfig",
           "ENGINES", "is_loopback"]

ENGINES = ("local", "dask")
_SCHEDULER = re.compile(r"(tcp|tls)://\S+:\d+")


class ConfigError(ValueError):
    """A miner config that cannot be used; the message names the file and key."""


@dataclass(frozen=True)
class Limits:
    """What the miner refuses before it does any expensive work.

    ``max_message_bytes`` bounds an answer (the serialized signed envelope, sent whole or in pieces;
    every study carries it); ``max_grpc_message_bytes`` bounds one gRPC message, which gRPC enforces
    before parsing: answers over `modelshare.common.federation.chunks.UNARY_MAX_BYTES` travel in pieces, so it
    limits only whole messages such as a study's evaluation table. ``max_streams_per_owner`` bounds
    one owner's answers in pieces in progress at once, each of which the miner buffers up to
    ``max_message_bytes`` (4 x 16 MiB at the defaults); an owner's daemon sends one at a time.
    ``max_buffered_bytes_per_owner`` and ``max_buffered_bytes`` bound the bytes those streams declare, of
    one owner and of all owners (`modelshare.miner_node.streams`), so no owner can buffer the miner out of memory.
    """

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_nodes: int = 200_000
    timestamp_window_seconds: float = 300.0
    max_grpc_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    stream_idle_seconds: float = 30.0
    max_streams_per_owner: int = 4
    max_buffered_bytes_per_owner: int = 64 * 2**20
    max_buffered_bytes: int = 256 * 2**20


_Count = Annotated[int, Field(ge=1)]


class _MinerTable(ConfigModel):
    name: Text
    """The miner's party name (its TLS identity)."""
    listen: Text = "[::]:50051"
    """The address to serve on; port 0 binds a free port and reports it in `state/ready.json`."""
    state_dir: Text = "state"
    """The SQLite store, audit log and ready file."""
    roster: Text = "roster.json"
    """Every party's public signing key; re-read while running (revocations take effect)."""
    studies: Annotated[list[Text], Field(description="a list of study file paths")] = []
    """Study files created at start (if new)."""
    max_message_bytes: _Count = Limits.max_message_bytes
    """The largest answer (a signed envelope, sent whole or in 1 MiB pieces); every study created here carries
    the limit, owners refuse (reason too-large) to send a larger answer, and the miner refuses one."""
    max_grpc_message_bytes: Annotated[int, Field(ge=MIN_GRPC_MESSAGE_BYTES)] = Limits.max_grpc_message_bytes
    """The largest single gRPC message, refused by gRPC before parsing: a study's evaluation table, an answer
    of at most 1 MiB sent whole. Larger answers travel in pieces and are bounded by `max_message_bytes` instead."""
    stream_idle_seconds: _Count = int(Limits.stream_idle_seconds)
    """An answer sent in pieces is cut off (DEADLINE_EXCEEDED) when no piece arrives for this long, or when
    the whole takes longer than this plus one second per 64 KiB declared."""
    max_nodes: _Count = Limits.max_nodes
    """Nodes per released model, summed over its trees."""
    timestamp_window_seconds: _Count = int(Limits.timestamp_window_seconds)
    """Accepted clock skew and message age."""
    workers: _Count = 32
    """Threads serving calls; a Poll or WatchStudy waiting for a change holds none."""
    max_calls: _Count = 10_000
    """Calls in progress at once, waiting Polls included (one
    per connected site); more are answered RESOURCE_EXHAUSTED."""
    max_streams_per_owner: _Count = Limits.max_streams_per_owner
    """Answers in pieces (SubmitChunks streams) one owner may have in progress at once, each buffered up to
    `max_message_bytes`; more are answered RESOURCE_EXHAUSTED, which the owner retries later (`max_calls` bounds
    the calls of all owners together, so one owner could otherwise take them all)."""
    max_buffered_bytes_per_owner: _Count = Limits.max_buffered_bytes_per_owner
    """Bytes of answers in pieces buffered for one owner at once, counted as each stream's first piece declares
    them (at least `max_message_bytes`, so the largest answer fits); a stream that would pass it is answered
    RESOURCE_EXHAUSTED, which the owner retries later. The default, 64 MiB, takes four answers of 16 MiB."""
    max_buffered_bytes: _Count = Limits.max_buffered_bytes
    """Bytes of answers in pieces buffered for all owners together (at least `max_buffered_bytes_per_owner`); a
    stream that would pass it is answered RESOURCE_EXHAUSTED, which the owner retries later. Answers sent whole
    are not counted; the default, 256 MiB, bounds what hostile or stalled streams can make the miner hold."""
    mining_timeout_seconds: _Count = int(MINING_TIMEOUT_SECONDS)
    """A study still mining this many seconds after it started fails, with the reason (its late results are dropped)."""
    verify_processes: Annotated[int | None, Field(ge=0)] = None  # None: `default_verify_processes`
    """Model verification worker processes (default: the cores, at most 4; 0: in the serving thread)."""

    @model_validator(mode="after")
    def _buffers(self) -> _MinerTable:
        """The largest answer fits one owner's buffer, and one owner's buffer fits the miner's."""
        if self.max_buffered_bytes_per_owner < self.max_message_bytes:
            raise ValueError(f"max_buffered_bytes_per_owner ({self.max_buffered_bytes_per_owner}) is less than "
                             f"max_message_bytes ({self.max_message_bytes}): the largest answer could never arrive")
        if self.max_buffered_bytes < self.max_buffered_bytes_per_owner:
            raise ValueError(f"max_buffered_bytes ({self.max_buffered_bytes}) is less than "
                             "max_buffered_bytes_per_owner "
                             f"({self.max_buffered_bytes_per_owner}); raise it or lower the per-owner limit")
        return self


@dataclass(frozen=True)
class MiningConfig:
    """Where the global models are learned and how much memory pseudo-data chunks may take (``[mining]``)."""

    engine: str = "local"
    scheduler: str | None = None
    workers: int | None = None
    memory_budget_mb: int = 256
    engine_timeout_seconds: float = 600.0


class _MiningTable(ConfigModel):
    engine: Literal["local", "dask"] = "local"
    """``"local"``: PGEN and the global models in the miner's process (the default, for small studies);
    ``"dask"``: pseudo-data streamed to Parquet under the state directory and the global models learned on a
    Dask cluster with xgboost, each study's ``[global_models]`` settings mapped onto xgboost's parameters
    (needs `pip install 'modelshare[dask]'`; docs/scale-out.md)."""
    scheduler: Text | None = None
    """Engine dask: the address of an existing Dask scheduler, ``tcp://HOST:PORT`` (its workers must read the
    miner's state directory at the same path)."""
    workers: _Count | None = None
    """Engine dask: start a LocalCluster of this many single-threaded worker processes on loopback, stopped after
    each study (instead of ``scheduler``)."""
    memory_budget_mb: _Count = MiningConfig.memory_budget_mb
    """Memory one chunk of pseudo-data may take while it is generated and written to Parquet; the chunk's rows
    follow from it and the schema's width."""
    engine_timeout_seconds: _Count = int(MiningConfig.engine_timeout_seconds)
    """Engine dask: the deadline of every call to the cluster (starting or connecting, each fit, each count); a lost
    cluster fails the study with the reason instead of hanging the miner."""

    @model_validator(mode="after")
    def _cluster(self) -> _MiningTable:
        """Engine dask needs exactly one of ``scheduler`` and ``workers``; engine local takes neither."""
        if self.scheduler is not None and not _SCHEDULER.fullmatch(self.scheduler):
            raise ValueError(f"scheduler must be tcp://HOST:PORT (or tls://HOST:PORT), got {self.scheduler!r}")
        given = [k for k in ("scheduler", "workers") if getattr(self, k) is not None]
        if self.engine == "dask" and len(given) != 1:
            raise ValueError('engine "dask" needs exactly one of scheduler = "tcp://HOST:PORT" and workers = N'
                             + (" (both are given)" if given else ""))
        if self.engine == "local" and given:
            raise ValueError(f'{given[0]} applies to engine "dask"; engine is "local"')
        return self

    def config(self) -> MiningConfig:
        return MiningConfig(self.engine, self.scheduler, self.workers, self.memory_budget_mb,
                            float(self.engine_timeout_seconds))


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address's host part, brackets allowed) names this machine only: localhost, 127/8, ::1."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class DashboardConfig:
    """Where the admin's web dashboard listens (``[dashboard]``) and whether it serves HTTPS."""

    listen: str = "127.0.0.1:8750"
    tls: bool = False


class _DashboardTable(ConfigModel):
    listen: Text = DashboardConfig.listen
    """``HOST:PORT`` of the admin's read-only web dashboard (port 0: a free port, reported in `state/ready.json`).
    Loopback by default; any other address needs ``tls = true``, so that the session cookie never crosses a
    network in clear."""
    tls: bool = False
    """Serve HTTPS with the miner's ``[tls]`` certificate and key (signed by the federation CA, which the browser
    must trust); required on a non-loopback address."""

    @model_validator(mode="after")
    def _address(self) -> _DashboardTable:
        """``HOST:PORT`` with a port in 0-65535; a non-loopback host only with ``tls = true``."""
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"listen must be HOST:PORT (e.g. 127.0.0.1:8750), got {self.listen!r}")
        if not self.tls and not is_loopback(host):
            raise ValueError(f"listen {self.listen!r} is not a loopback address: set tls = true (the session cookie "
                             "must not cross a network in clear), or listen on 127.0.0.1")
        return self


class _MinerFile(ConfigModel):
    """``miner.toml`` as written (module docstring); without [tls] the miner can only serve plaintext."""

    miner: _MinerTable
    mining: _MiningTable | None = None
    dashboard: _DashboardTable | None = None
    tls: TlsTable | None = None

    @model_validator(mode="after")
    def _dashboard_tls(self) -> _MinerFile:
        if self.dashboard is not None and self.dashboard.tls and self.tls is None:
            raise ValueError("[dashboard] tls = true serves the [tls] certificate, and there is no [tls] table")
        return self


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
    max_calls: int = 10_000
    mining_timeout_seconds: float = MINING_TIMEOUT_SECONDS
    verify_processes: int = field(default_factory=lambda: default_verify_processes())
    mining: MiningConfig = field(default_factory=MiningConfig)
    dashboard: DashboardConfig | None = None

    @classmethod
    def load(cls, path: str | Path) -> MinerConfig:
        path = Path(path)
        data = read_toml(path, "miner config", ConfigError)
        return cls.from_mapping(data, base=path.parent, where=str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, base: Path, where: str) -> MinerConfig:
        """Validate parsed TOML tables; relative paths are resolved against ``base``."""
        file = validate_config(data, _MinerFile, ConfigError, where=where)
        miner = file.miner
        return cls(
            name=miner.name,
            listen=miner.listen,
            state_dir=base / miner.state_dir,
            roster=base / miner.roster,
            tls=None if file.tls is None else file.tls.files(base),
            studies=tuple(base / s for s in miner.studies),
            limits=Limits(max_message_bytes=miner.max_message_bytes, max_nodes=miner.max_nodes,
                          timestamp_window_seconds=float(miner.timestamp_window_seconds),
                          max_grpc_message_bytes=miner.max_grpc_message_bytes,
                          stream_idle_seconds=float(miner.stream_idle_seconds),
                          max_streams_per_owner=miner.max_streams_per_owner,
                          max_buffered_bytes_per_owner=miner.max_buffered_bytes_per_owner,
                          max_buffered_bytes=miner.max_buffered_bytes),
            workers=miner.workers,
            max_calls=miner.max_calls,
            mining_timeout_seconds=float(miner.mining_timeout_seconds),
            verify_processes=default_verify_processes() if miner.verify_processes is None else miner.verify_processes,
            mining=MiningConfig() if file.mining is None else file.mining.config(),
            dashboard=None if file.dashboard is None else DashboardConfig(file.dashboard.listen, file.dashboard.tls),
        )


def default_verify_processes() -> int:
    """One verification worker per core, at most four (verification is a small share of a core each)."""
    return min(4, os.cpu_count() or 1)
