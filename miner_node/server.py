"""Start and stop a miner: state lock, port, store, roster, lifecycle, gRPC server over mutual TLS.

`start_miner` takes the state directory's lock (`StateLock`: one miner per directory) and binds
its port before it opens the store, so a second miner, or a port in use, is refused with the
reason and nothing touched. It returns once the server is bound and serving, with the port it got
(``:0`` asks the OS for a free one), so callers wait on readiness rather than on time. It also
writes ``ready.json`` into the state directory for supervisors in other processes: the port it
bound, the address it listens on with that port, its pid, the configured ``listen`` and, when it serves the
admin's web dashboard (``[dashboard]``, `modelshare.miner_node.dashboard`), the dashboard's ``http(s)://HOST:PORT``;
`read_ready` reads it. The verification workers start in the background once it serves
(`ModelVerifier.start_in_background`), so a restarted miner is back in seconds
(`bench/miner_startup.py`).

The server is gRPC's asyncio server, on an event loop in its own thread: the waiting RPCs
(``OwnerExchange.Poll``, ``StudyAdmin.WatchStudy``) and the reassembly of an answer sent in pieces
(``OwnerExchange.SubmitChunks``) are coroutines, so a waiting site or a slow sender costs no
thread, and every other RPC runs, as written, on a pool of ``workers`` threads. It serves three services
(`modelshare.miner_node.exchange`, `modelshare.miner_node.administration`, and ``Miner.Health`` from
`modelshare.miner_node.rpc`), with `modelshare.miner_node.rpc.AdminInterceptor` authenticating every
study-administration call as the admin's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import grpc

from modelshare.common.federation.kit import RosterWatcher
from modelshare.common.federation.study import load_study_file
from modelshare.common.files import atomic_write
from modelshare.common.study import StudyError
from modelshare.miner_node.administration import StudyAdminService
from modelshare.miner_node.config import ConfigError, MinerConfig
from modelshare.miner_node.coordinator import Coordinator
from modelshare.miner_node.dashboard import DashboardAccess, DashboardServer, Pages
from modelshare.miner_node.exchange import OwnerExchangeService
from modelshare.miner_node.heap import IDLE_CONNECTION_SECONDS
from modelshare.miner_node.rpc import AdminInterceptor, ChangeFeed, HealthService, Identity, add_service
from modelshare.miner_node.store import StateLock, Store
from modelshare.miner_node.verify import ModelVerifier, Rejection

__all__ = ["READY_FILE", "ReadyFile", "RunningMiner", "read_ready", "start_miner"]

log = logging.getLogger("modelshare.miner")
READY_FILE = "ready.json"
T = TypeVar("T")


class _EventLoop:
    """An asyncio event loop running in a thread of its own ("miner-aio"), for the gRPC server."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="miner-aio", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result here."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Cancel what is left on the loop, stop it and join its thread."""
        self.run(_cancel_others())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _cancel_others() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class RunningMiner:
    """A serving miner: its port, services and store; `stop` shuts it down cleanly."""

    server: grpc.aio.Server
    port: int
    exchange: OwnerExchangeService
    admin: StudyAdminService
    store: Store
    coordinator: Coordinator
    config: MinerConfig
    loop: _EventLoop
    pool: futures.ThreadPoolExecutor
    lock: StateLock
    dashboard: DashboardServer | None = None

    stopped: bool = False

    def stop(self, grace: float | None = 2.0) -> None:
        """Stop serving (in-flight calls get ``grace`` seconds),
        then the lifecycle, the store and the lock; idempotent."""
        if self.stopped:
            return
        self.stopped = True
        if self.dashboard is not None:
            self.dashboard.stop()
        self.loop.run(self.server.stop(grace))
        self.coordinator.stop()
        self.exchange.close()
        self.exchange.verifier.close()
        self.store.close()
        self.loop.close()
        self.pool.shutdown(wait=True)
        try:
            os.unlink(self.config.state_dir / READY_FILE)
        except OSError:
            pass
        self.lock.release()


class _Serving(TypedDict):
    port: int
    address: str
    pid: int
    listen: str


class ReadyFile(_Serving, total=False):
    """``ready.json``: the bound port, the address to dial, the serving process, the configured ``listen`` and,
    when the miner serves one, the web dashboard's base URL."""

    dashboard: str


def read_ready(state_dir: Path) -> ReadyFile | None:
    """The ready file of the miner whose state is in `state_dir`, or None while there is none. A miner killed
    without a clean stop leaves its file behind: compare ``pid`` with the process you started."""
    try:
        ready: ReadyFile = json.loads((state_dir / READY_FILE).read_text())  # written whole by `start_miner` only
    except FileNotFoundError:
        return None
    return ready


def _server_options(config: MinerConfig) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", config.limits.max_grpc_message_bytes),
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ("grpc.so_reuseport", 0),
        # a connection with no call in progress is closed (its client reconnects for its next call), so the
        # buffers gRPC keeps per connection do not outlive what it carried (`modelshare.miner_node.heap`)
        ("grpc.max_connection_idle_ms", int(IDLE_CONNECTION_SECONDS * 1000)),
    ]


def _create_config_studies(config: MinerConfig, admin: StudyAdminService) -> None:
    """Create the studies the config lists, unless they exist (a restart must not duplicate them)."""
    for path in config.studies:
        try:
            study = load_study_file(path)
        except StudyError as exc:
            raise ConfigError(str(exc)) from None
        if admin.store.study(study.study.study_id) is not None:
            continue
        evaluation = study.evaluation.read_bytes() if study.evaluation else None
        spec = study.spec
        try:
            admin.complete_spec(spec)
        except Rejection as rej:
            raise ConfigError(f"{path}: {rej.message}") from None
        admin.store.create_study(spec.study_id, spec.SerializeToString(), evaluation, by="miner config")


async def _new_server(config: MinerConfig, pool: futures.ThreadPoolExecutor, interceptor: AdminInterceptor,
                      insecure: bool) -> tuple[grpc.aio.Server, int]:
    """An asyncio server bound to ``config.listen`` (not started); ConfigError naming the address if it cannot bind."""
    server = grpc.aio.server(migration_thread_pool=pool, options=_server_options(config),
                             maximum_concurrent_rpcs=config.max_calls, interceptors=[interceptor])
    try:
        if insecure:
            port = server.add_insecure_port(config.listen)
        else:
            assert config.tls is not None
            port = server.add_secure_port(config.listen, config.tls.server_credentials())
    except RuntimeError:
        port = 0
    if port == 0:
        raise ConfigError(f"cannot listen on {config.listen}: the address is in use (another miner?) or not available "
                          "on this host; change [miner] listen or stop the other server")
    return server, port


def start_miner(config: MinerConfig, *, mechanisms: Iterable[str], insecure: bool = False,
                dashboard_pages: Callable[[StudyAdminService], Pages] | None = None) -> RunningMiner:
    """Lock the state directory, bind, open the store, resume unfinished studies and start serving.

    With a ``[dashboard]`` table the web dashboard serves too, showing ``dashboard_pages(admin service)``
    (the composition root's pages, `modelshare.dashboard`)."""
    if config.tls is None and not insecure:
        raise ConfigError("the miner config has no [tls] section; mutual TLS is required (or pass --insecure to debug)")
    if config.dashboard is not None and (insecure or dashboard_pages is None):
        raise ConfigError("[dashboard] needs a miner serving mutual TLS (the admin signs in with its certificate); "
                          "remove [dashboard] from the miner config to serve --insecure" if insecure else
                          "[dashboard]: this miner was started without the dashboard's pages (use "
                          "`modelshare miner serve`)")
    lock = StateLock(config.state_dir)
    loop = _EventLoop()
    pool = futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="miner-rpc")
    def abandon() -> None:
        loop.close()
        pool.shutdown()
        lock.release()

    try:
        identity = Identity(RosterWatcher(config.roster), insecure=insecure)
        server, port = loop.run(_new_server(config, pool, AdminInterceptor(identity), insecure))
        store = Store(config.state_dir)
    except BaseException:
        abandon()
        raise
    coordinator = Coordinator(store, mining_timeout=config.mining_timeout_seconds, mining=config.mining,
                              state_dir=config.state_dir)
    verifier = ModelVerifier(config.verify_processes, config.limits.max_nodes)
    exchange = OwnerExchangeService(store, identity, coordinator, config.limits, verifier)
    admin = StudyAdminService(store, identity, coordinator, config.limits, mechanisms=mechanisms)
    try:
        _create_config_studies(config, admin)
    except ConfigError:
        store.close()
        abandon()
        raise
    feed = ChangeFeed(loop.loop)
    coordinator.subscribe(feed.changed)
    for service in (exchange, admin):
        service.attach(feed, pool)
    add_service(exchange, "OwnerExchange", server)
    add_service(admin, "StudyAdmin", server)
    add_service(HealthService(config.name, store, coordinator, identity), "Miner", server)
    dashboard = None
    if config.dashboard is not None and dashboard_pages is not None:
        try:
            dashboard = DashboardServer(config.dashboard, config.tls, DashboardAccess(identity.roster),
                                        dashboard_pages(admin)).start()
        except BaseException:
            store.close()
            abandon()
            raise
        admin.dashboard = dashboard.login_url
    coordinator.start()
    loop.run(server.start())
    verifier.start_in_background()
    ready = config.state_dir / READY_FILE
    bound = f"{config.listen.rpartition(':')[0]}:{port}"  # ":0" asks the OS; say the port it gave
    record = ReadyFile(port=port, address=bound, pid=os.getpid(), listen=config.listen)
    if dashboard is not None:
        record["dashboard"] = dashboard.base_url
    atomic_write(ready, json.dumps(record) + "\n")
    log.info("miner %s serving on port %d (%s)", config.name, port, "INSECURE plaintext" if insecure else "mutual TLS")
    return RunningMiner(server, port, exchange, admin, store, coordinator, config, loop, pool, lock, dashboard)
