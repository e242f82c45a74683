"""What the miner's three gRPC services share: who is calling, the admin interceptor, error handling, registration.

The miner serves three services on one port (protos/modelshare/v1/federation.proto): the owner exchange
(`modelshare.miner_node.exchange`), the study administration (`modelshare.miner_node.administration`) and `Miner.Health`
(`HealthService`, here). `Identity.caller` maps a call's TLS peer to its roster party (the certificate must
be the one provisioned for the name, and the party not revoked). `AdminInterceptor` lets a call into the
study administration through only when that party is the admin, once, before any handler runs; under
``--insecure`` no caller can prove to be the admin, so every such call is refused. Handlers never let an
exception escape (`handler`, `async_handler`: a `Rejection` becomes its status, anything else INTERNAL, and
the server keeps serving), request bytes that do not parse reach them as `UndecodableRequest`
(`tolerant_deserializer`, installed by `add_service`) and are answered INVALID_ARGUMENT, and status messages,
which quote request fields, are clipped to `MAX_DETAILS_BYTES` so that gRPC delivers them. `ChangeFeed`
wakes the coroutines that hold a call (``Poll``, ``WatchStudy``) when the coordinator changes a study.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError

from modelshare.common.federation.kit import REVOKED, Party, RosterWatcher, peer_cert_sha256, peer_identity
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.miner_node.coordinator import Coordinator
from modelshare.miner_node.store import Store, StoreError
from modelshare.miner_node.verify import Rejection

__all__ = ["ADMIN_SERVICE", "AdminInterceptor", "ChangeFeed", "HealthService", "Identity", "MAX_DETAILS_BYTES",
           "UndecodableRequest", "add_service", "async_handler", "clip", "handler", "timestamp_seconds",
           "tolerant_deserializer"]

log = logging.getLogger("modelshare.miner")
ADMIN_SERVICE = fpb.DESCRIPTOR.services_by_name["StudyAdmin"].full_name
MAX_DETAILS_BYTES = 2048
"""Longest status message sent (UTF-8 bytes). Messages quote request fields; gRPC drops a status whose
trailer exceeds 16 KiB (the client then sees RESOURCE_EXHAUSTED instead of the reason), and percent-encoding
can triple non-ASCII bytes."""
INSECURE_ADMIN = ("this miner serves plaintext (--insecure), where no caller can prove to be the admin: admin calls "
                  "are refused; list studies in the miner config's `studies`, or serve with TLS")
T = TypeVar("T")


def clip(text: str, limit: int = MAX_DETAILS_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, saying how much was cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore") + f"... ({len(data) - limit} more bytes)"


def timestamp_seconds(timestamp: Any, what: str) -> int:
    """A Timestamp's seconds; INVALID_ARGUMENT for one outside years 1-9999 or with nanos outside [0, 1e9)."""
    try:
        return int(timestamp.ToSeconds())
    except ValueError as exc:
        raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, f"{what} is not a valid time ({exc})") from None


@dataclass(frozen=True)
class UndecodableRequest:
    """A request whose bytes do not parse as the method's message; its handler answers INVALID_ARGUMENT."""

    message_type: str
    error: str


def tolerant_deserializer(message_type: Any) -> Callable[[bytes], Any]:
    """A request deserializer that never raises (gRPC would log a traceback and answer INTERNAL)."""

    def parse(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except (DecodeError, RecursionError) as exc:
            return UndecodableRequest(message_type.DESCRIPTOR.name, str(exc))

    return parse


class Identity:
    """Who is calling: the roster party behind a call's TLS identity, read from the live roster.

    ``insecure`` is the plaintext debugging mode: no TLS identity exists, so `caller` answers None (signatures
    alone then identify owners) and nobody passes `admin`. Only ever enabled by an explicit ``--insecure`` flag.
    """

    def __init__(self, roster: RosterWatcher, *, insecure: bool = False) -> None:
        self.roster = roster
        self.insecure = insecure

    def caller(self, context: Any) -> Party | None:
        """The roster party of the TLS peer (None only in insecure
        mode); UNAUTHENTICATED / PERMISSION_DENIED otherwise."""
        name = peer_identity(context)
        if name is None:
            if self.insecure:
                return None
            raise Rejection(grpc.StatusCode.UNAUTHENTICATED, "no client certificate; connect with your kit's TLS files")
        party = self.roster.current().get(name)
        if party is None:
            raise Rejection(grpc.StatusCode.UNAUTHENTICATED, f"TLS identity {name!r} is not on the miner's roster")
        if peer_cert_sha256(context) != party.tls_cert_sha256:
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED,
                            f"the certificate presented for {name!r} is not the one provisioned for it")
        if party.revoked:
            context.set_trailing_metadata(((REVOKED, party.revoked_at or ""),))  # the owner's daemon stops for good
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED, f"{name!r} was revoked at {party.revoked_at}")
        return party

    def admin(self, context: Any) -> str:
        """The admin's name, proven by its TLS certificate; under
        ``--insecure`` nobody can prove it, so nobody passes."""
        party = self.caller(context)
        if party is None:
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED, INSECURE_ADMIN)
        if party.role != "admin":
            raise Rejection(grpc.StatusCode.PERMISSION_DENIED,
                            f"{party.name!r} is a {party.role}; only the admin may do this")
        return party.name


class AdminInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates every call into the study administration (`ADMIN_SERVICE`) as the admin's, before its handler.

    gRPC hands an interceptor the method's name but not the peer's certificate, so the interceptor wraps the
    method's behaviour: the wrapper checks `Identity.admin` on the call's context and aborts with its status
    (PERMISSION_DENIED, UNAUTHENTICATED) or runs the handler. A synchronous handler stays synchronous (it runs on
    the server's worker threads, as before) and a coroutine stays a coroutine. Calls to the other services pass
    through untouched.
    """

    def __init__(self, identity: Identity) -> None:
        self.identity = identity

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        method_handler = await continuation(handler_call_details)
        if method_handler is None or not handler_call_details.method.startswith(f"/{ADMIN_SERVICE}/"):
            return method_handler
        if method_handler.unary_unary is None:  # every admin method is unary; a new kind must be wrapped here first
            raise RuntimeError(f"{handler_call_details.method}: the admin interceptor wraps unary methods only")
        behaviour = method_handler.unary_unary
        identity = self.identity
        if inspect.iscoroutinefunction(behaviour):
            async def checked_async(request: Any, context: Any) -> Any:
                try:
                    identity.admin(context)
                except Rejection as rej:
                    code, message = rej.code, clip(rej.message)
                else:
                    return await behaviour(request, context)
                await context.abort(code, message)

            wrapped: Callable[..., Any] = checked_async
        else:
            def checked(request: Any, context: Any) -> Any:
                try:
                    identity.admin(context)
                except Rejection as rej:
                    code, message = rej.code, clip(rej.message)
                else:
                    return behaviour(request, context)
                context.abort(code, message)

            wrapped = checked
        return grpc.unary_unary_rpc_method_handler(wrapped, request_deserializer=method_handler.request_deserializer,
                                                   response_serializer=method_handler.response_serializer)


class ChangeFeed:
    """The coordinator's change notifications on the server's event loop: a version number and a wake-up.

    Waiting RPCs (``OwnerExchange.Poll``, ``StudyAdmin.WatchStudy``) are coroutines on the asyncio
    server, so a site waiting for a study costs a suspended coroutine, not a worker thread.
    `changed` may be called from any thread; it bumps the version on the loop and wakes every waiter. Changes
    made while a bump is already scheduled share it (every accepted submission is a change): a waiter reads the
    store after the bump runs, and so sees them all.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.version = 0
        self._event = asyncio.Event()
        self._scheduled = threading.Lock()  # held from scheduling a bump until it starts running

    def changed(self) -> None:
        """Thread-safe: schedule a version bump on the loop unless one is scheduled and has not started yet (a loop
        already closed has no waiters left)."""
        if not self._scheduled.acquire(blocking=False):
            return
        try:
            self.loop.call_soon_threadsafe(self._bump)
        except RuntimeError:
            self._scheduled.release()

    def _bump(self) -> None:
        self._scheduled.release()  # a change from now on needs a bump of its own
        self.version += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, version: int, timeout: float) -> None:
        """Return once the version differs from ``version``, or after ``timeout`` seconds."""
        if self.version != version:
            return
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except asyncio.TimeoutError:
            pass


class Attached:
    """A servicer whose waiting calls run on the server's event loop and read the store on its worker threads."""

    feed: ChangeFeed | None = None
    _pool: Executor | None = None

    def attach(self, feed: ChangeFeed, pool: Executor) -> None:
        """Wake waiting calls on ``feed``; read the store on ``pool`` (the server's worker threads)."""
        self.feed = feed
        self._pool = pool

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store read on the worker threads, keeping the event loop free."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)


def failure(method: str, exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The status that answers ``exc`` raised by the handler ``method``: a `Rejection`'s own, UNAVAILABLE for the
    store, INTERNAL (logged with its traceback) for anything else."""
    if isinstance(exc, Rejection):
        return exc.code, clip(exc.message)
    if isinstance(exc, StoreError):
        log.error("%s: %s", method, exc)
        return grpc.StatusCode.UNAVAILABLE, f"the miner cannot store data right now ({exc}); retry later"
    log.error("%s: unexpected error", method, exc_info=exc)
    return grpc.StatusCode.INTERNAL, "internal miner error; the request was not stored"


def handler(method: Callable[..., T]) -> Callable[..., T]:
    """Turn `Rejection` into its status and any other exception into INTERNAL; the server lives on.

    The call is aborted outside the ``except`` block, so that gRPC's abort exception, which the call's state
    keeps in a reference cycle, chains no refusal whose traceback would keep the request alive; the request
    itself is let go before the abort for the same reason.
    """

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> T:
        if isinstance(request, UndecodableRequest):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          clip(f"the request is not a valid {request.message_type}: {request.error}"))
        try:
            return method(self, request, context)
        except Exception as exc:
            code, message = failure(method.__name__, exc)
        del request
        context.abort(code, message)
        raise AssertionError("unreachable")  # context.abort raises

    return wrapper


def async_handler(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """`handler` for a coroutine RPC on the asyncio server (``context.abort`` is awaited there)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Any) -> T:
        if isinstance(request, UndecodableRequest):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                clip(f"the request is not a valid {request.message_type}: {request.error}"))
        try:
            return await method(self, request, context)
        except Exception as exc:
            code, message = failure(method.__name__, exc)
        del request
        await context.abort(code, message)
        raise AssertionError("unreachable")  # context.abort raises

    return wrapper


def add_service(servicer: Any, service: str, server: grpc.aio.Server) -> None:
    """Register the methods of ``service`` (its proto name, e.g. "OwnerExchange") as the generated
    ``add_..._to_server`` does, with request deserializers that never raise (for a client stream, per piece):
    bytes that do not parse reach the handler as `UndecodableRequest` and are answered INVALID_ARGUMENT, where
    gRPC would log a traceback and answer INTERNAL. The handlers are registered twice, as gRPC's generated code
    does: as a generic handler, and per method (``add_registered_method_handlers``), so that the server takes
    each method's calls from a queue of its own: the calls of a flood of ``SubmitChunks`` streams waiting to be
    taken do not hold back an owner's ``Submit`` or a ``Health`` behind them (bench/stream_attack.py). The
    server's interceptors (`AdminInterceptor`) see every call either way."""
    methods = fpb.DESCRIPTOR.services_by_name[service]
    handlers = {
        m.name: (grpc.stream_unary_rpc_method_handler if m.client_streaming else grpc.unary_unary_rpc_method_handler)(
            getattr(servicer, m.name),
            request_deserializer=tolerant_deserializer(getattr(fpb, m.input_type.name)),
            response_serializer=getattr(fpb, m.output_type.name).SerializeToString,
        )
        for m in methods.methods
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(methods.full_name, handlers),))
    server.add_registered_method_handlers(methods.full_name, handlers)


class HealthService:
    """``Miner.Health``: any party on the roster may ask whether the miner serves."""

    def __init__(self, name: str, store: Store, coordinator: Coordinator, identity: Identity,
                 clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.store = store
        self.coordinator = coordinator
        self.identity = identity
        self.clock = clock

    @handler
    def Health(self, request: fpb.HealthRequest, context: grpc.ServicerContext) -> fpb.HealthReply:
        """``serving``, or ``unhealthy: ...`` with the reason while mining cannot progress (`Coordinator.health`)."""
        self.identity.caller(context)
        problem = self.coordinator.health()
        status = "serving" if problem is None else f"unhealthy: mining cannot progress: {problem}"
        return fpb.HealthReply(status=clip(status, 1024), name=self.name, open_studies=len(self.store.studies("open")),
                               submissions=self.store.count_submissions())
