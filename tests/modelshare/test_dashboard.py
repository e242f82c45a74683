"""The miner's web dashboard, served by a real ``modelshare miner serve`` process on loopback.

A federation of two owners with one finished study; the admin gets a sign-in URL with `miner dashboard` (its
certificate over mutual TLS), an owner's certificate gets none, a browser with no session is refused, and the
pages show the sites, the study's progress, its results and its report. Chromium (the system's package) loads
the overview headless; the test skips, saying why, where there is none. Bad requests (paths, methods, huge
headers, garbage instead of a TLS handshake) leave the miner serving. The access and TLS checks of the server
itself run in this process too, against the admin's kit.
"""

from __future__ import annotations

import errno
import http.client
import json
import shutil
import socket
import ssl
import subprocess
from urllib.parse import urlsplit

import grpc
import pytest

from modelshare.common.federation.kit import RosterWatcher, TlsFiles
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.miner_node.config import ConfigError, DashboardConfig, MinerConfig
from modelshare.miner_node.dashboard import COOKIE, CSP, DashboardAccess, DashboardServer
from tests.federation_helpers import CLI, Federation, deal, make_federation, signed_model, study_spec

OWNERS = ["site-a", "site-b"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def fed(tmp_path_factory, car):
    """A miner process with ``[dashboard]`` on a free loopback port, and one study (``s1``) done."""
    tmp = tmp_path_factory.mktemp("dashboard")
    federation = make_federation(tmp, OWNERS, address="localhost:0")
    miner_toml = federation.kits["miner"] / "miner.toml"
    miner_toml.write_text(miner_toml.read_text() + '\n[dashboard]\nlisten = "127.0.0.1:0"\n')
    try:
        federation.serve(tmp / "miner.log")
        admin = federation.stub("admin")
        admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s1")), timeout=10)
        admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s2-open")), timeout=10)
        spec = admin.GetStudy(fpb.StudyRef(study_id="s1"), timeout=10).spec
        for owner, (X, y) in deal(*car[1:], OWNERS).items():
            federation.stub(owner).Submit(signed_model(federation, owner, spec, X, y), timeout=60)
        assert federation.wait_study("s1", timeout=120).state == "done"
        yield federation
    finally:
        federation.close()


def send_raw(host: str, port: int, data: bytes) -> bytes:
    """What the server answers ``data`` on a connection of its own (b"" when it closes or resets it first)."""
    with socket.create_connection((host, port), timeout=30) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            return sock.recv(100)
        except (ConnectionResetError, BrokenPipeError):
            return b""
        except OSError as exc:  # the server closed first (ENOTCONN on our shutdown)
            if exc.errno != errno.ENOTCONN:
                raise
            return b""


def sign_in_url(fed: Federation, kit: str = "admin") -> str:
    run = subprocess.run([*CLI, "miner", "dashboard", "--config", str(fed.kits[kit] / "admin.toml"), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["url"]


def get(url: str, cookie: str | None = None, method: str = "GET") -> http.client.HTTPResponse:
    parts = urlsplit(url)
    assert parts.hostname is not None, url
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request(method, parts.path + (f"?{parts.query}" if parts.query else ""),
                       headers={"Cookie": f"{COOKIE}={cookie}"} if cookie else {})
    response = connection.getresponse()
    response.body = response.read()  # type: ignore[attr-defined]  # kept on the response, read before closing
    connection.close()
    return response


def session(fed: Federation) -> tuple[str, str]:
    """(the dashboard's base URL, a signed-in session cookie)."""
    url = sign_in_url(fed)
    response = get(url)
    assert response.status == 303 and response.getheader("Location") == "/"
    cookie = response.getheader("Set-Cookie")
    assert cookie is not None and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    base = url.split("/login")[0]
    return base, cookie.split(";")[0].split("=", 1)[1]


@pytest.mark.slow
def test_no_credential_an_owner_and_a_used_or_forged_code_are_refused(fed):
    base = sign_in_url(fed).split("/login")[0]
    for path in ("/", "/studies/s1", "/studies/s1/report.html", "/nothing"):
        refused = get(base + path)
        assert refused.status == 401 and b"s1" not in refused.body and b"site-a" not in refused.body
        assert refused.getheader("Cache-Control") == "no-store"
    assert get(base + "/", cookie="forged").status == 401
    assert get(base + "/login?code=forged").status == 401
    url = sign_in_url(fed)
    assert get(url, method="HEAD").status == 405  # a link preview does not use the code up
    assert get(url).status == 303
    assert get(url).status == 401  # one use only

    # an owner's certificate gets no sign-in, and its kit cannot ask
    with pytest.raises(grpc.RpcError) as info:
        fed.stub("site-a").OpenDashboard(fpb.OpenDashboardRequest(), timeout=10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.slow
def test_the_pages_show_the_sites_the_studies_their_progress_results_and_report(fed):
    base, cookie = session(fed)
    overview = get(base + "/", cookie)
    assert overview.status == 200
    assert overview.getheader("Content-Security-Policy") == CSP and overview.getheader("Cache-Control") == "no-store"
    page = overview.body.decode()
    for owner in OWNERS:  # every provisioned site, with its state, as `miner sites` lists it
        assert f"<td>{owner}</td><td>never polled</td><td>never</td>" in page
    assert '<a href="/studies/s1">s1</a></td><td>done</td>' in page
    assert '<a href="/studies/s2-open">s2-open</a></td><td>open</td>' in page and "<td>0 / 2</td>" in page
    assert "<script" not in page and "<form" not in page

    study = get(base + "/studies/s1", cookie).body.decode()
    assert "Study s1: done" in study and "answers received 2 / 2" in study
    assert "<td>decision-tree</td>" in study and 'href="/studies/s1/report.html"' in study
    open_study = get(base + "/studies/s2-open", cookie).body.decode()
    assert "answers received 0 / 2" in open_study and "report.html" not in open_study
    assert 'http-equiv="refresh"' in open_study and 'http-equiv="refresh"' not in study  # only what can still change

    report = get(base + "/studies/s1/report.html", cookie)
    assert report.status == 200 and b"<h1>Study s1: done</h1>" in report.body and b"web dashboard" in report.body
    assert get(base + "/studies/s2-open/report.html", cookie).status == 409
    assert get(base + "/studies/nope", cookie).status == 404
    assert get(base + "/studies/%3Cscript%3E", cookie).body.count(b"<script>") == 0  # escaped
    assert get(base + "/", cookie, method="HEAD").status == 200


@pytest.mark.slow
def test_bad_requests_leave_the_miner_serving(fed):
    base, cookie = session(fed)
    parts = urlsplit(base)
    for path in ("/studies/", "/studies/s1/../../etc/passwd", "/studies/%00", "/%ff%fe", "/studies/s1/report.html/x",
                 "/login/x", "/studies//report.html"):
        answer = get(base + path, cookie)
        assert answer.status == 404 and (b"Not found" in answer.body or b"No study" in answer.body), path
    assert get(base + "/?" + "q" * 5000, cookie).status == 200  # a query the overview ignores
    assert get(base + "/", cookie, method="POST").status == 405
    assert get(base + "/", cookie, method="DELETE").status == 405
    raw = [b"garbage\r\n\r\n", b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n",
           b"GET / HTTP/1.1\r\nX: " + b"b" * 70000 + b"\r\n\r\n",
           b"GET / HTTP/1.1\r\n" + b"".join(b"H%d: x\r\n" % i for i in range(200)) + b"\r\n",
           b"GET / HTTP/1.1\r\nCookie: \xff\xfe;;=;" + COOKIE.encode() + b"=\x00\r\n\r\n",
           b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64]  # a TLS hello to plain HTTP
    for data in raw:
        assert not send_raw(parts.hostname, parts.port, data).startswith(b"HTTP/1.1 200"), data[:40]
    assert get(base + "/", cookie).status == 200
    health = fed.stub("admin").Health(fpb.HealthRequest(), timeout=10)
    assert health.status == "serving"


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed here (the Debian package `chromium` provides it)")
def test_chromium_signs_in_and_finds_the_sites_and_the_finished_study(fed, tmp_path):
    url = sign_in_url(fed)
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    dom = run.stdout
    assert "<h1>Sites</h1>" in dom, run.stderr[-2000:]
    assert all(f"<td>{owner}</td>" in dom for owner in OWNERS)
    assert '<a href="/studies/s1">s1</a></td><td>done</td>' in dom


def test_a_dashboard_off_loopback_needs_tls_and_unknown_keys_are_errors(tmp_path):
    def load(table: str) -> MinerConfig:
        return MinerConfig.from_mapping({"miner": {"name": "miner"}, "dashboard": json.loads(table)},
                                        base=tmp_path, where="miner.toml")

    assert load('{}').dashboard == DashboardConfig("127.0.0.1:8750", False)
    with pytest.raises(ConfigError, match="not a loopback address: set tls = true"):
        load('{"listen": "0.0.0.0:8750"}')
    with pytest.raises(ConfigError, match="no \\[tls\\] table"):
        load('{"listen": "0.0.0.0:8750", "tls": true}')
    with pytest.raises(ConfigError, match="listen must be HOST:PORT"):
        load('{"listen": "127.0.0.1:http"}')
    with pytest.raises(ConfigError, match="extra|not permitted|unknown"):
        load('{"enabled": true}')
    assert MinerConfig.from_mapping({"miner": {"name": "miner"}}, base=tmp_path, where="m").dashboard is None


def test_the_https_dashboard_admits_a_session_only_and_survives_bad_handshakes(tmp_path):
    """In this process: HTTPS with the miner's certificate; garbage and a plain-HTTP request to the TLS port
    are dropped, the admin's session is served, a revoked admin's session ends."""
    from modelshare.provision import issue_throwaway_federation, revoke_party

    kits = issue_throwaway_federation(tmp_path / "kits", owners=["site-a"], address="localhost:0")
    roster = RosterWatcher(kits["miner"] / "roster.json")
    access = DashboardAccess(roster)
    server = DashboardServer(DashboardConfig("127.0.0.1:0", tls=True), TlsFiles.in_kit(kits["miner"]), access,
                             lambda path: (200, f"<p>page {path}</p>")).start()
    try:
        context = ssl.create_default_context(cafile=str(kits["admin"] / "ca.crt"))
        context.check_hostname = False

        def fetch(path: str, cookie: str | None = None) -> http.client.HTTPResponse:
            connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=30)
            connection.request("GET", path, headers={"Cookie": f"{COOKIE}={cookie}"} if cookie else {})
            response = connection.getresponse()
            response.body = response.read()  # type: ignore[attr-defined]  # kept on the response, read before closing
            connection.close()
            return response

        for data in (b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\xff\xff" + b"\x00" * 100, b""):
            assert not send_raw("127.0.0.1", server.port, data).startswith(b"HTTP/1.1 200")
        assert fetch("/").status == 401
        with pytest.raises(PermissionError):
            access.issue_code("site-a")  # an owner is never given a code
        url, _ = server.login_url("admin")
        assert url.startswith(f"https://127.0.0.1:{server.port}/login?code=")
        signed_in = fetch(urlsplit(url).path + "?" + urlsplit(url).query)
        assert signed_in.status == 303 and "; Secure" in signed_in.getheader("Set-Cookie")
        cookie = signed_in.getheader("Set-Cookie").split(";")[0].split("=", 1)[1]
        assert fetch("/x", cookie).body == b"<p>page /x</p>"
        revoke_party(kits["miner"].parent, "admin")
        assert fetch("/x", cookie).status == 401
    finally:
        server.stop()


def test_the_sign_in_url_names_the_miner_host_when_the_dashboard_listens_everywhere():
    from modelshare.cli.federation import dashboard_url

    assert dashboard_url("https://[::]:8750/login?code=c", "miner.example:50051") == \
        "https://miner.example:8750/login?code=c"
    assert dashboard_url("http://127.0.0.1:8750/login?code=c", "localhost:50051") == "http://127.0.0.1:8750/login?code=c"


def test_a_miner_without_a_dashboard_says_so_and_one_serving_plaintext_may_not_have_one(tmp_path):
    import dataclasses

    from modelshare.common.mechanisms import registry
    from modelshare.miner_node.server import start_miner

    with make_federation(tmp_path, OWNERS) as fed:
        with pytest.raises(grpc.RpcError) as info:
            fed.stub("admin").OpenDashboard(fpb.OpenDashboardRequest(), timeout=10)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "serves no web dashboard: add a [dashboard] table" in info.value.details()
        config = dataclasses.replace(fed.miner_config(), dashboard=DashboardConfig("127.0.0.1:0"))
    with pytest.raises(ConfigError, match="needs a miner serving mutual TLS"):
        start_miner(config, mechanisms=registry.names(), insecure=True,
                    dashboard_pages=lambda admin: lambda path: (200, ""))
    with pytest.raises(ConfigError, match="not a loopback address"):
        DashboardServer(DashboardConfig("0.0.0.0:0"), None,
                        DashboardAccess(RosterWatcher(fed.kits["miner"] / "roster.json")), lambda path: (200, ""))
