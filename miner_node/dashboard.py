"""The miner's read-only web dashboard: an HTTP(S) server in a thread, open to the admin only.

`DashboardAccess` decides who may look. The credential is the admin's gRPC certificate itself: the admin's
client calls ``StudyAdmin.OpenDashboard`` over mutual TLS (so `modelshare.miner_node.rpc.AdminInterceptor` has
checked the certificate against the roster, as for any admin call) and gets a one-time sign-in URL carrying a
random 256-bit code, valid `CODE_SECONDS` and for one use. Opening it exchanges the code for a session cookie
(another 256-bit random value; ``HttpOnly``, ``SameSite=Strict``, ``Secure`` under TLS, ``Path=/``) and
redirects to the overview, so the code leaves the address bar and the browser history at once. Only SHA-256
digests of codes and sessions are kept, in memory (a restarted miner forgets every session), compared in
constant time; a session lasts `SESSION_SECONDS` and ends as soon as the roster revokes the admin or replaces
its certificate. A request with no valid session is answered 401, and an owner's certificate can get no code
(the interceptor refuses it), so no owner can look.

`DashboardServer` serves GET and HEAD only (anything else is 405: there is no form and nothing to change),
with ``Cache-Control: no-store``, a Content-Security-Policy that allows no script, no network load and no
framing (`CSP`), on its own daemon threads: at most `MAX_CONNECTIONS` at once, each with a `SOCKET_SECONDS`
socket timeout and, under TLS, its handshake done on its own thread, so that no bad request, oversized header,
failed handshake or stalled client reaches the miner. What a signed-in admin sees comes from ``pages``, a
function of the path the composition root supplies (`modelshare.dashboard`): it returns the status and the HTML.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import http.server
import logging
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from modelshare.common.federation.kit import RosterWatcher, TlsFiles
from modelshare.miner_node.config import ConfigError, DashboardConfig, is_loopback

__all__ = ["CODE_SECONDS", "COOKIE", "CSP", "MAX_CONNECTIONS", "SESSION_SECONDS", "DashboardAccess", "DashboardServer",
           "Pages"]

log = logging.getLogger("modelshare.miner")
CODE_SECONDS = 60
"""How long a sign-in URL may wait before it is opened."""
SESSION_SECONDS = 8 * 3600
"""How long a session cookie is honoured after sign-in."""
MAX_PENDING = 32
"""Sign-in codes and sessions kept at most each; the oldest goes first."""
MAX_CONNECTIONS = 16
"""Connections served at once; one more is closed without an answer."""
SOCKET_SECONDS = 10.0
"""A client silent this long (handshake, headers) is disconnected."""
COOKIE = "modelshare_dashboard"
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
"""No script at all, no load from any address (images are data: URIs of the page itself), no form, no framing;
the pages' own inline CSS is allowed, and with nothing to load it can send nothing anywhere."""
Pages = Callable[[str], tuple[int, str]]
"""What the dashboard shows: a URL path -> (HTTP status, HTML page)."""


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True)
class _Grant:
    admin: str
    cert_sha256: str
    expires: float


class DashboardAccess:
    """One-time sign-in codes and the sessions they open, for the roster's admin only (module docstring)."""

    def __init__(self, roster: RosterWatcher, clock: Callable[[], float] = time.time) -> None:
        self.roster = roster
        self.clock = clock
        self._codes: dict[bytes, _Grant] = {}
        self._sessions: dict[bytes, _Grant] = {}
        self._lock = threading.Lock()

    def issue_code(self, admin: str) -> tuple[str, float]:
        """A new sign-in code for ``admin`` (who proved its certificate on the call) and when it expires."""
        party = self.roster.current().get(admin)
        if party is None or party.role != "admin":
            raise PermissionError(f"{admin!r} is not the roster's admin")
        code = secrets.token_urlsafe(32)
        expires = self.clock() + CODE_SECONDS
        with self._lock:
            self._keep(self._codes, _digest(code), _Grant(admin, party.tls_cert_sha256, expires))
        return code, expires

    def redeem(self, code: str) -> str | None:
        """A new session for an unexpired, unused code (which is used up), or None."""
        with self._lock:
            grant = self._find(self._codes, code, pop=True)
            if grant is None or not self._still_admin(grant):
                return None
            session = secrets.token_urlsafe(32)
            self._keep(self._sessions, _digest(session),
                       _Grant(grant.admin, grant.cert_sha256, self.clock() + SESSION_SECONDS))
        log.info("dashboard: %s signed in", grant.admin)
        return session

    def session(self, token: str) -> str | None:
        """The admin's name behind a live session token, or None
        (unknown, expired, or the admin revoked or re-keyed)."""
        with self._lock:
            grant = self._find(self._sessions, token, pop=False)
            return grant.admin if grant is not None and self._still_admin(grant) else None

    def _find(self, table: dict[bytes, _Grant], secret: str, *, pop: bool) -> _Grant | None:
        digest = _digest(secret)
        now = self.clock()
        for key in [k for k, g in table.items() if g.expires <= now]:
            del table[key]
        match = next((k for k in table if hmac.compare_digest(k, digest)), None)
        if match is None:
            return None
        return table.pop(match) if pop else table[match]

    def _still_admin(self, grant: _Grant) -> bool:
        party = self.roster.current().get(grant.admin)
        return (party is not None and party.role == "admin" and not party.revoked
                and hmac.compare_digest(party.tls_cert_sha256, grant.cert_sha256))

    @staticmethod
    def _keep(table: dict[bytes, _Grant], key: bytes, grant: _Grant) -> None:
        table[key] = grant
        while len(table) > MAX_PENDING:
            del table[next(iter(table))]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, context: ssl.SSLContext | None,
                 access: DashboardAccess, pages: Pages) -> None:
        self.address_family = family
        self.ssl_context = context
        self.access = access
        self.pages = pages
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("dashboard: a connection from %s failed", client_address, exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = SOCKET_SECONDS
    server_version = "modelshare-dashboard"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        if self.server.ssl_context is not None:  # the handshake runs here, on this connection's own thread
            self.request.settimeout(SOCKET_SECONDS)
            self.request = self.server.ssl_context.wrap_socket(self.request, server_side=True)
        super().setup()

    def end_headers(self) -> None:
        for name, value in (("Cache-Control", "no-store"), ("Content-Security-Policy", CSP),
                            ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
                            ("X-Frame-Options", "DENY"), ("Cross-Origin-Opener-Policy", "same-origin")):
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("dashboard: %s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _refuse_method(self) -> None:
        self.close_connection = True  # a body it may have sent is never read, so the connection cannot go on
        self._send(405, _message("Method not allowed", "The dashboard is read-only: it answers GET and HEAD only."),
                   body=True, extra=(("Allow", "GET, HEAD"),))

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse_method

    def _answer(self, *, body: bool) -> None:
        path, _, query = self.path.partition("?")  # the request target as sent, never read as a URL with a host
        path = path.partition("#")[0]
        if path == "/login" and not body:  # a link preview's HEAD must not use up the code
            self._send(405, "", body=False, extra=(("Allow", "GET"),))
            return
        if path == "/login":
            codes = parse_qs(query).get("code", [])
            session = self.server.access.redeem(codes[0]) if len(codes) == 1 else None
            if session is None:
                self._send(401, _message("Sign-in link not valid", "This sign-in link was used already or has expired. "
                                         "Run `modelshare miner dashboard --config admin.toml` for a new one."),
                           body=body)
                return
            secure = "; Secure" if self.server.ssl_context is not None else ""
            cookie = f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={SESSION_SECONDS}{secure}"
            self._send(303, "", body=body, extra=(("Location", "/"), ("Set-Cookie", cookie)))
            return
        if self._admin() is None:
            self._send(401, _message("Sign-in required", "This dashboard is for the federation's admin. Run "
                                     "`modelshare miner dashboard --config admin.toml` with the admin's kit and open "
                                     "the URL it prints."), body=body)
            return
        try:
            status, page = self.server.pages(path)
        except Exception:
            log.error("dashboard: the page %r failed", path, exc_info=True)
            status, page = 500, _message("Internal error", "The page could not be made; the miner's log says why.")
        self._send(status, page, body=body)

    def _admin(self) -> str | None:
        header = self.headers.get("Cookie")
        if not header:
            return None
        try:
            morsel = SimpleCookie(header).get(COOKIE)
        except CookieError:
            return None
        return None if morsel is None else self.server.access.session(morsel.value)

    def _send(self, status: int, page: str, *, body: bool, extra: tuple[tuple[str, str], ...] = ()) -> None:
        data = page.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)


def _message(title: str, text: str) -> str:
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>")


class DashboardServer:
    """The dashboard's HTTP(S) server on its own thread; `start` binds (ConfigError naming the address if it
    cannot), `login_url` makes a sign-in URL for the admin, `stop` closes it."""

    def __init__(self, config: DashboardConfig, tls: TlsFiles | None, access: DashboardAccess, pages: Pages) -> None:
        self.config = config
        self.access = access
        self.pages = pages
        self.context: ssl.SSLContext | None = None
        if not config.tls and not is_loopback(self.host):
            raise ConfigError(f"[dashboard] listen {config.listen!r} is not a loopback address: set tls = true")
        if config.tls:
            if tls is None:
                raise ConfigError("[dashboard] tls = true serves the [tls] certificate, and there is no [tls] table")
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.minimum_version = ssl.TLSVersion.TLSv1_2
            self.context.load_cert_chain(tls.cert, tls.key)
        self.port = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return self.config.listen.rpartition(":")[0]

    @property
    def base_url(self) -> str:
        """``http(s)://HOST:PORT`` as configured, with the port bound."""
        return f"{'https' if self.context else 'http'}://{self.host}:{self.port}"

    def start(self) -> DashboardServer:
        host = self.host.strip("[]")
        wanted = int(self.config.listen.rpartition(":")[2])
        try:
            info = socket.getaddrinfo(host or None, wanted, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            family, _, _, _, address = info[0]
            self._server = _Server((str(address[0]), int(address[1])), family, self.context, self.access, self.pages)
        except OSError as exc:
            raise ConfigError(f"[dashboard] cannot listen on {self.config.listen}: {exc.strerror or exc}; change "
                              "[dashboard] listen or stop what uses the port") from None
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="miner-dashboard", daemon=True)
        self._thread.start()
        log.info("dashboard serving on %s (%s)", self.base_url, "HTTPS" if self.context else "loopback HTTP")
        return self

    def login_url(self, admin: str) -> tuple[str, float]:
        """A one-time sign-in URL for ``admin`` and when it expires (``StudyAdmin.OpenDashboard``)."""
        code, expires = self.access.issue_code(admin)
        return f"{self.base_url}/login?code={code}", expires

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join()
        self._server = None
