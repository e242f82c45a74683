"""The deployment in deploy/: the example project, systemd units, compose file, the multi-host demo,
and the health report (`modelshare owner status`) a service manager relies on.

Every command line in the units and the compose file is parsed with modelshare's own parser, so
a renamed flag or sub-command fails here rather than on a site's server. The multi-host demo runs
where it can create network namespaces (root on Linux with iproute2) and is skipped, with the
reason, elsewhere.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath

import grpc
import pytest
import yaml

from modelshare.cli import build_parser, main
from modelshare.cli import federation as cli_federation
from modelshare.cli import owner as cli_owner
from modelshare.cli import owner_status as cli_owner_status
from modelshare.cli.owner_status import owner_health
from modelshare.common.data.datasets import export_dataset
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.miner_node.config import MinerConfig
from modelshare.miner_node.server import READY_FILE
from modelshare.owner_node.config import OwnerConfig
from modelshare.owner_node.daemon import Backoff, OwnerDaemon
from modelshare.owner_node.status import STATUS_FILE, StatusFile, read_status
from modelshare.provision import issue_throwaway_federation, load_project, provision

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SPEC = load_project(DEPLOY / "project.toml")
KIT_ROOT = PurePosixPath("/etc/modelshare")        # where the units and compose.yaml expect each kit
STATE_ROOT = PurePosixPath("/var/lib/modelshare")  # systemd's StateDirectory=modelshare/<name>
DAEMONS = {"miner": cli_federation.cmd_miner_serve, "owner": cli_owner.cmd_serve}
# what the install step of docs/how-to/federation.md rewrites
STATE_DIR_LINE = re.compile(r"^state_dir = .*$", re.MULTILINE)


def _parse(argv: list[str]) -> argparse.Namespace:
    """`argv` (without the program name) parsed by the real `modelshare` parser, or the test fails."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"not a valid modelshare command line: {argv}")


def _modelshare() -> str:
    """The modelshare command of the running environment (the venv's, next to this Python)."""
    beside = Path(sys.executable).with_name("modelshare")
    found = str(beside) if beside.is_file() else shutil.which("modelshare")
    if found is None:
        pytest.skip("no modelshare command installed next to this Python or on PATH")
    return found


# ------------------------------------------------------------------ the example project
def test_the_example_project_has_a_miner_an_admin_and_three_sites():
    roles = {p.name: p.role for p in SPEC.parties}
    assert roles == {"miner": "miner", "admin": "admin", "site-a": "owner", "site-b": "owner", "site-c": "owner"}
    for owner in (p for p in SPEC.parties if p.role == "owner"):
        assert owner.data == f"/srv/modelshare/{owner.name}/table.csv" and owner.class_column == "class"


def test_the_example_project_provisions_kits_whose_state_dir_the_install_step_moves(tmp_path):
    kits = provision(DEPLOY / "project.toml", tmp_path / "kits")
    assert sorted(kits) == sorted(p.name for p in SPEC.parties)
    for party in SPEC.parties:
        config = kits[party.name] / f"{party.role}.toml"
        text = config.read_text(encoding="utf-8")
        if party.role == "admin":
            assert not STATE_DIR_LINE.search(text)  # the admin keeps no state
            continue
        assert len(STATE_DIR_LINE.findall(text)) == 1
        config.write_text(STATE_DIR_LINE.sub(f'state_dir = "{STATE_ROOT / party.name}"', text), encoding="utf-8")
        if party.role == "miner":
            assert MinerConfig.load(config).state_dir == Path(STATE_ROOT / party.name)
        else:
            owner = tomllib.loads(config.read_text(encoding="utf-8"))
            assert owner["owner"]["state_dir"] == str(STATE_ROOT / party.name)
            assert owner["data"]["path"] == party.data
            assert owner["owner"]["miner"] == SPEC.miner().address


# ------------------------------------------------------------------ systemd
def _unit(path: Path, instance: str | None = None) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values]}} (keys may repeat), with %i set to `instance`."""
    text = path.read_text(encoding="utf-8")
    if instance is not None:
        text = text.replace("%i", instance)
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path}:{number}: not KEY=VALUE in a section: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _unit_for(party) -> tuple[Path, dict[str, dict[str, list[str]]]]:
    if party.role == "miner":
        path = DEPLOY / "systemd" / "modelshare-miner.service"
        return path, _unit(path)
    path = DEPLOY / "systemd" / "modelshare-owner@.service"
    return path, _unit(path, instance=party.name)


@pytest.mark.parametrize("party", [p for p in SPEC.parties if p.role in DAEMONS], ids=lambda p: p.name)
def test_each_daemon_has_a_unit_running_the_real_command_with_its_kit_read_only(party):
    path, unit = _unit_for(party)
    service = unit["Service"]
    [exec_start] = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert PurePosixPath(argv[0]).name == "modelshare"
    args = _parse(argv[1:])
    assert args.func is DAEMONS[party.role] and args.log_json, f"{path}: ExecStart must serve, logging JSON lines"
    kit = KIT_ROOT / party.name
    assert PurePosixPath(args.config) == kit / f"{party.role}.toml"
    read_only = {PurePosixPath(p.lstrip("-")) for value in service["ReadOnlyPaths"] for p in value.split()}
    assert kit in read_only
    assert service["ProtectSystem"] == ["strict"]  # everything else read-only too ...
    assert service["StateDirectory"] == [f"modelshare/{party.name}"]  # ... but /var/lib/modelshare/<name>
    if party.role == "owner":
        assert any(PurePosixPath(party.data).is_relative_to(p) for p in read_only), "the site's table is readable"
    assert service["User"] == ["modelshare"] and service["Restart"] == ["on-failure"]
    assert service["StandardOutput"] == service["StandardError"] == ["journal"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed; the unit files were only parsed")
    modelshare = _modelshare()
    # verify insists that ExecStart's program exists: point it at this environment's modelshare,
    # and check the owner template through one instance per site, as systemd would run it
    units = []
    for party in (p for p in SPEC.parties if p.role in DAEMONS):
        source, _ = _unit_for(party)
        name = source.name.replace("@.", f"@{party.name}.")
        target = tmp_path / name
        target.write_text(source.read_text(encoding="utf-8").replace("/opt/modelshare/venv/bin/modelshare", modelshare),
                          encoding="utf-8")
        units.append(target)
    result = subprocess.run([analyze, "verify", *map(str, units)], check=False, capture_output=True,
                            text=True, timeout=120)
    complaints = [line for line in (result.stdout + result.stderr).splitlines()
                  if any(u.name in line for u in units)]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr


# ------------------------------------------------------------------ compose
COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
SERVICE_KEYS = {  # a subset of the Compose specification's service keys: a typo is not ignored here
    "build", "image", "command", "entrypoint", "environment", "volumes", "ports", "networks", "depends_on",
    "healthcheck", "restart", "read_only", "tmpfs", "cap_drop", "cap_add", "security_opt", "user",
    "working_dir", "profiles", "labels", "logging", "stop_grace_period", "init",
}


def _service(name: str) -> dict:
    return COMPOSE["services"][name]


DASK_SERVICES = {"dask-scheduler", "dask-worker"}  # the miner's Dask engine (docs/scale-out.md)


def test_compose_has_one_service_per_party_and_only_known_keys():
    assert set(COMPOSE) <= {"name", "services", "volumes", "networks"} | {k for k in COMPOSE if k.startswith("x-")}
    assert set(COMPOSE["services"]) == {p.name for p in SPEC.parties} | DASK_SERVICES
    for name, service in COMPOSE["services"].items():
        assert set(service) <= SERVICE_KEYS, f"{name}: unknown keys {set(service) - SERVICE_KEYS}"
        dask = name in DASK_SERVICES or name == "miner"  # the image with the dask extra
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile",
                                    **({"args": {"EXTRAS": "[dask]"}} if dask else {})}
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]


def test_compose_dask_workers_read_the_miners_state_at_the_miners_path():
    scheduler, worker = _service("dask-scheduler"), _service("dask-worker")
    assert scheduler["entrypoint"] == ["dask", "scheduler"] and "8786" in scheduler["command"]
    assert worker["entrypoint"] == ["dask", "worker"] and worker["command"][0] == "tcp://dask-scheduler:8786"
    miner_state = next(m for m in _service("miner")["volumes"] if m["type"] == "volume")
    assert {**miner_state, "read_only": True} in worker["volumes"]


@pytest.mark.parametrize("party", SPEC.parties, ids=lambda p: p.name)
def test_each_service_mounts_its_kit_read_only_and_runs_a_real_command(party):
    service = _service(party.name)
    mounts = {m["target"]: m for m in service["volumes"]}
    kit = mounts[str(KIT_ROOT / party.name)]
    assert kit["type"] == "bind" and kit["read_only"] is True
    assert (DEPLOY / kit["source"]).resolve() == (ROOT / "kits" / party.name).resolve()  # provision --out kits/
    args = _parse(service["command"])
    assert PurePosixPath(args.config) == KIT_ROOT / party.name / f"{party.role}.toml"
    if party.role == "admin":
        assert service["profiles"] == ["admin"] and service["restart"] == "no"  # run on demand, not a daemon
        return
    assert args.func is DAEMONS[party.role] and args.log_json
    state = mounts[str(STATE_ROOT)]  # the parent of the state_dir the install step writes into the config
    assert state["type"] == "volume" and not state.get("read_only") and state["source"] in COMPOSE["volumes"]
    others = [m for m in service["volumes"] if m["target"] not in (str(KIT_ROOT / party.name), str(STATE_ROOT))]
    assert all(m.get("read_only") for m in others), "only the state volume is writable"
    if party.role == "owner":
        assert any(PurePosixPath(party.data).is_relative_to(m["target"]) for m in others), "the table is mounted"


def test_compose_health_checks_and_the_miner_address():
    miner = _service("miner")
    host, port = SPEC.miner().address.rsplit(":", 1)
    assert f"{port}:{port}" in miner["ports"] and host in miner["networks"]["default"]["aliases"]
    assert miner["healthcheck"]["test"] == ["CMD", "test", "-s", str(STATE_ROOT / "miner" / READY_FILE)]
    for owner in (p for p in SPEC.parties if p.role == "owner"):
        test = _service(owner.name)["healthcheck"]["test"]
        assert test[:2] == ["CMD", "modelshare"]
        args = _parse(test[2:])
        assert args.func is cli_owner_status.cmd_status and args.config == Path(KIT_ROOT / owner.name / "owner.toml")


def test_the_dockerfile_copies_every_package_and_no_kit():
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    copied = {part for line in text.splitlines() if line.startswith("COPY ") for part in line.split()[1:-1]}
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    patterns = setuptools["packages"]["find"]["include"]
    assert {p.rstrip("*").split(".")[0] for p in patterns} <= copied
    assert all((ROOT / p).exists() for p in copied) and not copied & {".", "kits", "data"}


# ------------------------------------------------------------------ owner status
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def _record(**changes) -> dict:
    def at(seconds: int) -> str:
        return (NOW - timedelta(seconds=seconds)).isoformat()

    record = {"owner": "site-a", "miner": "miner:50051", "pid": 4242, "started_at": at(300), "updated_at": at(5),
              "state": "polling", "study": None, "last_contact_at": at(5), "consecutive_failures": 0,
              "last_error": None, "last_error_at": None}
    return record | {k: (at(v) if k.endswith("_at") and isinstance(v, int) else v) for k, v in changes.items()}


@pytest.mark.parametrize(
    "record, alive, healthy, fragment",
    [
        (None, True, False, "no status file"),
        (_record(), True, True, "last answer 5 s ago"),
        (_record(), False, False, "process 4242 is gone"),
        (_record(state="stopped"), True, False, "stopped"),
        (_record(consecutive_failures=2, last_error="poll: UNAVAILABLE: down", last_error_at=1), True, False,
         "2 failed call(s)"),
        (_record(last_contact_at=120), True, False, "stale"),
        (_record(state="answering", study="s1", last_contact_at=600), True, True, "answering study s1"),
        (_record(state="starting", started_at=3, last_contact_at=None), True, True, "starting"),
        (_record(state="starting", started_at=600, last_contact_at=None), True, False, "no answer from the miner"),
    ],
)
def test_owner_health_judges_the_status_record(record, alive, healthy, fragment):
    verdict, reason = owner_health(record, now=NOW, max_age=45, alive=lambda pid: alive)
    assert verdict is healthy and fragment in reason


@pytest.fixture()
def owner_kit(tmp_path) -> Path:
    """A provisioned owner kit with a real table (bundled car data); its owner.toml."""
    table = tmp_path / "car.csv"
    export_dataset("car", table)
    kits = issue_throwaway_federation(tmp_path / "kits", owners=["site-a"], address="localhost:1",
                                      owner_data={"site-a": (str(table), "class")})
    return kits["site-a"] / "owner.toml"


def _status_cli(config: Path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["owner", "status", "--config", str(config), *extra])
    return code, capsys.readouterr().out


def test_owner_status_exit_codes_for_a_service_manager(owner_kit, tmp_path, capsys):
    state_dir = OwnerConfig.load(owner_kit).state_dir
    code, out = _status_cli(owner_kit, capsys)
    assert code == 1 and "UNHEALTHY" in out and "no status file" in out  # never started
    state_dir.mkdir(parents=True)
    status = StatusFile(state_dir, owner="site-a", miner="localhost:1")  # this process stands in for the daemon
    code, out = _status_cli(owner_kit, capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["healthy"] and report["state"] == "starting" and report["pid"] == os.getpid()
    status.contact(state="polling")
    assert _status_cli(owner_kit, capsys)[0] == 0
    status.failure("poll: UNAVAILABLE: connection refused", state="backing-off")
    code, out = _status_cli(owner_kit, capsys, "--json")
    assert code == 1 and json.loads(out)["last_error"] == "poll: UNAVAILABLE: connection refused"
    status.update(state="stopped")
    assert _status_cli(owner_kit, capsys)[0] == 1
    broken = tmp_path / "broken.toml"
    broken.write_text("[owner]\n", encoding="utf-8")
    assert main(["owner", "status", "--config", str(broken)]) == 2
    (state_dir / STATUS_FILE).write_text("{}", encoding="utf-8")
    assert main(["owner", "status", "--config", str(owner_kit)]) == 2  # not a status file


class _Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "network is unreachable"


class _FlakyMiner:
    """Poll fails once, then answers (empty) and stops the daemon; records the status in between."""

    def __init__(self, state_dir: Path, stop: threading.Event) -> None:
        self.state_dir, self.stop, self.polls = state_dir, stop, 0
        self.seen: list[dict[str, object] | None] = []

    def Poll(self, request, timeout):
        self.polls += 1
        self.seen.append(read_status(self.state_dir))
        if self.polls == 1:
            raise _Unavailable()
        self.stop.set()
        return fpb.PollReply()


def test_the_daemon_keeps_its_status_file_through_a_failure_and_a_recovery(owner_kit):
    config = OwnerConfig.load(owner_kit)
    stop = threading.Event()
    with OwnerDaemon(config, backoff=Backoff(base=0.0, cap=0.0)) as daemon:
        daemon._stub = miner = _FlakyMiner(config.state_dir, stop)
        daemon.run(stop)
    starting, after_failure = miner.seen
    assert starting["state"] == "starting" and starting["pid"] == os.getpid()
    assert after_failure["state"] == "backing-off" and after_failure["consecutive_failures"] == 1
    assert after_failure["last_error"] == "poll: UNAVAILABLE: network is unreachable"
    assert not owner_health(after_failure, now=datetime.now(timezone.utc), max_age=45)[0]
    final = read_status(config.state_dir)
    assert final["state"] == "stopped" and final["consecutive_failures"] == 0 and final["last_contact_at"]
    assert not [p for p in config.state_dir.iterdir() if p.name.endswith(".tmp")]  # written atomically


# ------------------------------------------------------------------ the multi-host demo
DEMO = DEPLOY / "multihost-demo.sh"
DEMO_TIMEOUT = 150  # seconds for the whole script on an idle machine; it takes about 45 s on 2 idle cores


def _slowdown() -> int:
    """How many times longer than on an idle machine the demo may take: the 1-minute load per core,
    rounded up, between 1 and 4 (the script's own DEMO_SLOWDOWN rule, passed to it so both agree)."""
    return min(4, max(1, math.ceil(os.getloadavg()[0] / (os.cpu_count() or 1))))


def test_the_demo_runs_the_parties_of_the_example_project():
    text = DEMO.read_text(encoding="utf-8")
    sites = re.search(r"^SITES=\((.*)\)$", text, re.MULTILINE).group(1).split()
    assert sites == [p.name for p in SPEC.parties if p.role == "owner"]
    assert re.search(r"^PARTIES=\(miner admin \"\$\{SITES\[@\]\}\"\)$", text, re.MULTILINE)
    assert {p.name for p in SPEC.parties if p.role != "owner"} == {"miner", "admin"}


def _netns_unavailable() -> str | None:
    """Why the demo cannot run here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "the multi-host demo needs root (it creates network namespaces, veth pairs and a bridge)"
    missing = [tool for tool in ("ip", "ss", "setsid", "awk", "timeout", "bash") if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    probe = f"ms-probe-{os.getpid()}"
    added = subprocess.run(["ip", "netns", "add", probe], check=False, capture_output=True, text=True)
    if added.returncode != 0:
        return f"cannot create a network namespace here: {added.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], check=False, capture_output=True)
    return None


@pytest.mark.slow
def test_the_multihost_demo_completes_a_study_across_namespaces_with_a_partition():
    reason = _netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    slowdown = _slowdown()
    timeout = DEMO_TIMEOUT * slowdown
    env = {**os.environ, "MODELSHARE": _modelshare(), "PYTHON": sys.executable, "DEMO_TIMEOUT": str(timeout),
           "DEMO_SLOWDOWN": str(slowdown)}
    env.pop("DEMO_WORK_DIR", None)
    started = time.monotonic()
    demo = subprocess.Popen(["bash", str(DEMO)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:  # the script's own deadline fires first; past it, SIGTERM lets its trap tear down
        stdout, stderr = demo.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        demo.terminate()
        stdout, stderr = demo.communicate(timeout=60)
    elapsed = time.monotonic() - started
    output = stdout + stderr
    assert demo.returncode == 0, output
    marks = [line[len("DEMO "):] for line in stdout.splitlines() if line.startswith("DEMO ")]
    expected = ["network-ok", "owners-connected", "partition-cut site-c",
                "partition-holds study=open site-c=waiting", "partition-noticed site-c", "partition-restored site-c",
                "study-done multihost-demo site-c=submitted", "healthy-again site-c", "complete",
                "teardown-complete status=0"]
    positions = [next((i for i, m in enumerate(marks) if m.startswith(e)), None) for e in expected]
    assert None not in positions and positions == sorted(positions), "\n".join(marks)
    owners = sorted(m for m in marks if m.startswith("owner "))
    assert [m.split()[1] for m in owners] == ["site-a", "site-b", "site-c"] and all("audit=PASS" in m for m in owners)
    assert {m.split()[1] for m in marks if m.startswith("model ")} == {"decision-tree", "naive-bayes"}
    assert "IP Address:10.77.0.1" in output  # the miner's certificate names its namespace's address
    # torn down: no namespace of this run, no work directory
    prefix = re.search(r"namespace (ms\d+)-switch", output).group(1)
    assert prefix not in subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, text=True).stdout
    work = re.search(r"work directory: (\S+);", output).group(1)
    assert not Path(work).exists()
    print(f"multi-host demo: {elapsed:.1f} s (step limits x{slowdown})")
