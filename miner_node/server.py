"""Start and stop a miner: store, roster, lifecycle, gRPC server over mutual TLS.

`start_miner` returns once the server is bound and serving, with the port it got (``:0`` asks the
OS for a free one), so callers wait on readiness rather than on time. It also writes
``ready.json`` into the state directory for supervisors in other processes: the port it bound,
the address it listens on with that port, its pid and the configured ``listen``; `read_ready`
reads it.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import grpc

from common.federation.kit import RosterWatcher
from common.federation.pb import federation_pb2 as fpb
from common.federation.study import StudyError, load_study_file
from common.files import atomic_write
from miner_node.config import ConfigError, MinerConfig
from miner_node.coordinator import Coordinator
from miner_node.service import MinerService, tolerant_deserializer
from miner_node.store import Store
from miner_node.verify import ModelVerifier, Rejection

__all__ = ["READY_FILE", "RunningMiner", "read_ready", "start_miner"]

log = logging.getLogger("modelshare.miner")
READY_FILE = "ready.json"


@dataclass
class RunningMiner:
    """A serving miner: its port, service and store; `stop` shuts it down cleanly."""

    server: grpc.Server
    port: int
    service: MinerService
    store: Store
    coordinator: Coordinator
    config: MinerConfig

    def stop(self, grace: float | None = 2.0) -> None:
        self.server.stop(grace).wait()
        self.coordinator.stop()
        self.service.verifier.close()
        self.store.close()
        try:
            os.unlink(self.config.state_dir / READY_FILE)
        except OSError:
            pass


def read_ready(state_dir: Path) -> dict[str, Any] | None:
    """The ready file of the miner whose state is in `state_dir` ({"port", "address", "pid", "listen"}),
    or None while there is none. A miner killed without a clean stop leaves its file behind: compare
    ``pid`` with the process you started."""
    try:
        return json.loads((state_dir / READY_FILE).read_text())
    except FileNotFoundError:
        return None


def _server_options(config: MinerConfig) -> list[tuple[str, int]]:
    size = config.limits.max_message_bytes
    return [
        ("grpc.max_receive_message_length", size),
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ("grpc.so_reuseport", 0),
    ]


def _create_config_studies(config: MinerConfig, service: MinerService) -> None:
    """Create the studies the config lists, unless they exist (a restart must not duplicate them)."""
    for path in config.studies:
        try:
            study = load_study_file(path)
        except StudyError as exc:
            raise ConfigError(str(exc)) from None
        if service.store.study(study.spec.study_id) is not None:
            continue
        evaluation = study.evaluation.read_bytes() if study.evaluation else None
        spec = fpb.StudySpec()
        spec.CopyFrom(study.spec)
        try:
            service.complete_spec(spec)
        except Rejection as rej:
            raise ConfigError(f"{path}: {rej.message}") from None
        service.store.create_study(spec.study_id, spec.SerializeToString(), evaluation, by="miner config")


def _add_service(service: MinerService, server: grpc.Server) -> None:
    """Register the Miner methods as the generated `add_MinerServicer_to_server` does, with request
    deserializers that never raise: bytes that do not parse reach the handler as `UndecodableRequest` and
    are answered INVALID_ARGUMENT, where gRPC would log a traceback and answer INTERNAL."""
    methods = fpb.DESCRIPTOR.services_by_name["Miner"]
    handlers = {
        m.name: grpc.unary_unary_rpc_method_handler(
            getattr(service, m.name),
            request_deserializer=tolerant_deserializer(getattr(fpb, m.input_type.name)),
            response_serializer=getattr(fpb, m.output_type.name).SerializeToString,
        )
        for m in methods.methods
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(methods.full_name, handlers),))
    server.add_registered_method_handlers(methods.full_name, handlers)


def start_miner(config: MinerConfig, *, mechanisms: Iterable[str], insecure: bool = False) -> RunningMiner:
    """Open the store, resume unfinished studies, bind and start serving."""
    if config.tls is None and not insecure:
        raise ConfigError("the miner config has no [tls] section; mutual TLS is required (or pass --insecure to debug)")
    store = Store(config.state_dir)
    roster = RosterWatcher(config.roster)
    coordinator = Coordinator(store)
    verifier = ModelVerifier(config.verify_processes, config.limits.max_nodes)
    service = MinerService(config.name, store, roster, coordinator, config.limits, verifier,
                           mechanisms=mechanisms, insecure=insecure)
    try:
        _create_config_studies(config, service)
    except ConfigError:
        store.close()
        raise
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="miner-rpc"),
                         options=_server_options(config), maximum_concurrent_rpcs=config.workers * 4)
    _add_service(service, server)
    if insecure:
        port = server.add_insecure_port(config.listen)
    else:
        assert config.tls is not None
        port = server.add_secure_port(config.listen, config.tls.server_credentials())
    if port == 0:
        store.close()
        raise ConfigError(f"cannot listen on {config.listen} (address in use or not available)")
    verifier.start()
    coordinator.start()
    server.start()
    ready = config.state_dir / READY_FILE
    bound = f"{config.listen.rpartition(':')[0]}:{port}"  # ":0" asks the OS; say the port it gave
    atomic_write(ready, json.dumps({"port": port, "address": bound, "pid": os.getpid(), "listen": config.listen}) + "\n")
    log.info("miner %s serving on port %d (%s)", config.name, port, "INSECURE plaintext" if insecure else "mutual TLS")
    return RunningMiner(server, port, service, store, coordinator, config)
