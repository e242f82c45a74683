"""Kits' start.sh and stop.sh, the next commands `provision` prints, and `modelshare local up | status | down`
(a persistent federation on loopback) with real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from modelshare.admin import AdminConfig, admin_stub
from modelshare.cli import main
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.miner_node.server import read_ready
from modelshare.provision import kit_scripts, set_miner_port

PROJECT = """\
name = "scripts"
[[parties]]
name = "miner"
role = "miner"
address = "127.0.0.1:0"
listen = "127.0.0.1:0"
[[parties]]
name = "admin"
role = "admin"
[[parties]]
name = "site-a"
role = "owner"
"""


def _provision(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[Path, str]:
    (tmp_path / "project.toml").write_text(PROJECT, encoding="utf-8")
    kits = tmp_path / "kits"
    assert main(["provision", str(tmp_path / "project.toml"), "--out", str(kits), *extra]) == 0
    return kits, capsys.readouterr().out


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (an exited one nobody has reaped yet is a zombie: not running)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def _kill_leftovers(root: Path) -> None:
    """SIGKILL every process a pid file under ``root`` still names (a failed test leaves none running)."""
    for pid_file in root.rglob("*.pid"):
        text = pid_file.read_text().strip()
        if text.isdigit() and _running(int(text)):
            os.kill(int(text), signal.SIGKILL)


def _script(kit: Path, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(kit / name)], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "MODELSHARE": f"{sys.executable} -m modelshare.cli"})


# ------------------------------------------------------------------ provision's next commands, the scripts' text
def test_provision_prints_the_next_commands_with_the_paths_it_wrote(tmp_path, capsys):
    kits, printed = _provision(tmp_path, capsys)
    lines = [line.strip() for line in printed.splitlines()]
    assert "next:" in lines
    assert f"sh {kits / 'miner' / 'start.sh'}" in lines
    assert f"sh {kits / 'site-a' / 'start.sh'}" in lines
    admin = kits / "admin" / "admin.toml"
    assert f"modelshare study create study.toml --config {admin}" in printed
    assert f"modelshare study status latest --follow --config {admin}" in lines
    for path in (kits / "miner" / "start.sh", kits / "site-a" / "start.sh", admin):
        assert path.is_file()


def test_provision_json_carries_the_next_commands_and_prints_nothing_else(tmp_path, capsys):
    kits, printed = _provision(tmp_path, capsys, "--json")
    report = json.loads(printed)  # the one JSON document: no next-steps text beside it
    commands = [step["command"] for step in report["next"]]
    assert commands[:2] == [f"sh {kits / 'miner' / 'start.sh'}", f"sh {kits / 'site-a' / 'start.sh'}"]
    assert all(step["step"] for step in report["next"])


def test_provision_add_prints_how_to_start_the_new_owner(tmp_path, capsys):
    kits, _ = _provision(tmp_path, capsys)
    with (tmp_path / "project.toml").open("a", encoding="utf-8") as project:
        project.write('[[parties]]\nname = "site-b"\nrole = "owner"\n')
    assert main(["provision", str(tmp_path / "project.toml"), "--out", str(kits), "--add", "site-b", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [step["command"] for step in report["next"]] == [f"sh {kits / 'site-b' / 'start.sh'}"]
    assert (kits / "site-b" / "start.sh").is_file()


def test_miner_and_owner_kits_carry_executable_posix_scripts(tmp_path, capsys):
    kits, _ = _provision(tmp_path, capsys)
    assert not (kits / "admin" / "start.sh").exists() and kit_scripts("admin") == {}
    for name in ("miner", "site-a"):
        for script in ("start.sh", "stop.sh"):
            path = kits / name / script
            assert stat.S_IMODE(path.stat().st_mode) == 0o755
            text = path.read_text()
            assert text.startswith("#!/bin/sh\n") and "\nset -eu\n" in text
            assert subprocess.run(["sh", "-n", str(path)], capture_output=True).returncode == 0  # parses as sh


def test_stop_script_of_a_kit_that_never_started_says_so(tmp_path, capsys):
    kits, _ = _provision(tmp_path, capsys)
    done = _script(kits / "miner", "stop.sh")
    assert done.returncode == 0 and "not running" in done.stdout


# ------------------------------------------------------------------ the scripts run a miner
@pytest.mark.slow
def test_start_and_stop_scripts_run_a_miner_from_a_moved_kit(tmp_path, capsys):
    made, _ = _provision(tmp_path, capsys)
    kits = tmp_path / "moved"
    made.rename(kits)  # the scripts find the kit from their own path
    miner = kits / "miner"
    try:
        started = _script(miner, "start.sh")
        assert started.returncode == 0, started.stderr
        pid = int((miner / "miner.pid").read_text())
        assert f"started the miner (pid {pid})" in started.stdout and "serving on port" in started.stdout
        ready = read_ready(miner / "state")
        assert ready is not None and ready["pid"] == pid  # it serves from the moved kit's state
        set_miner_port([kits / "admin"], ready["port"])
        channel, _ = admin_stub(AdminConfig.load(kits / "admin" / "admin.toml"))
        with channel:
            assert fgrpc.MinerStub(channel).Health(fpb.HealthRequest(), timeout=10).status == "serving"
        again = _script(miner, "start.sh")
        assert again.returncode == 0 and f"already running (pid {pid}" in again.stdout
        assert int((miner / "miner.pid").read_text()) == pid

        stopped = _script(miner, "stop.sh")
        assert stopped.returncode == 0 and f"stopped the miner (pid {pid}, SIGTERM)" in stopped.stdout
        assert not _running(pid) and not (miner / "miner.pid").exists()
        assert "stopping the miner" in (miner / "miner.log").read_text()  # it shut down cleanly
        twice = _script(miner, "stop.sh")
        assert twice.returncode == 0 and "not running" in twice.stdout
    finally:
        _kill_leftovers(kits)


@pytest.mark.slow
def test_start_script_reports_a_miner_that_cannot_start(tmp_path, capsys):
    kits, _ = _provision(tmp_path, capsys)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        set_miner_port([kits / "miner"], taken.getsockname()[1])
        try:
            done = _script(kits / "miner", "start.sh")
        finally:
            _kill_leftovers(kits)
    assert done.returncode == 1
    assert "exited before it served" in done.stderr and "cannot listen on" in done.stderr  # the log's tail
    assert not (kits / "miner" / "miner.pid").exists()


# ------------------------------------------------------------------ local up | status | down
def test_local_refuses_a_folder_it_did_not_make(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for command in (["up"], ["status"], ["down", "--clean"]):
        assert main(["local", *command, "--dir", str(other)]) == 2
        assert "is not a local federation" in capsys.readouterr().err
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    assert main(["local", "status", "--dir", str(tmp_path / "absent")]) == 2
    assert "no local federation here" in capsys.readouterr().err


def test_local_up_refuses_a_taken_port_and_makes_nothing(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["local", "up", "--dir", str(tmp_path / "fed"), "--port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is taken" in capsys.readouterr().err
    assert not (tmp_path / "fed").exists()


@pytest.mark.slow
def test_local_up_status_a_study_and_down(tmp_path, capsys):
    root = tmp_path / "fed"
    try:
        assert main(["local", "up", "--dir", str(root), "--owners", "2", "--port", "0", "--json"]) == 0
        up = json.loads(capsys.readouterr().out)
        assert up["made"] and up["started"] == ["miner", "owner-1", "owner-2"]
        pids = up["pids"]
        assert all(_running(pid) for pid in pids.values())
        marker = json.loads((root / "local.json").read_text())
        assert marker["owners"] == ["owner-1", "owner-2"] and sum(marker["rows"].values()) > 0
        assert (root / "data" / "owner-1.csv").is_file() and (root / "test.csv").is_file()

        assert main(["local", "status", "--dir", str(root), "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert [(p["name"], p["state"], p["pid"]) for p in status["processes"]] == \
            [(name, "running", pid) for name, pid in pids.items()]
        assert status["processes"][0]["port"] == up["port"] and status["processes"][0]["health"] == "serving"

        assert main(["local", "up", "--dir", str(root)]) == 0  # already running: says so, changes nothing
        assert "already running" in capsys.readouterr().out
        assert {name: int((root / "kits" / name / f"{'miner' if name == 'miner' else 'owner'}.pid").read_text())
                for name in pids} == pids
        assert main(["local", "up", "--dir", str(root), "--owners", "3"]) == 2
        assert "holds a federation of 2 owners" in capsys.readouterr().err

        create = next(step["command"] for step in up["next"] if "study create" in step["command"])
        admin = str(root / "kits" / "admin" / "admin.toml")
        assert create == f"modelshare study create {root / 'study.toml'} --config {admin}"
        assert main(["study", "create", str(root / "study.toml"), "--config", admin, "--json"]) == 0
        capsys.readouterr()
        assert main(["study", "wait", "latest", "--timeout", "300", "--config", admin, "--json"]) == 0
        finished = json.loads(capsys.readouterr().out)
        assert finished["state"] == "done"
        assert {a["owner"]: a["state"] for a in finished["answers"]} == {"owner-1": "submitted", "owner-2": "submitted"}

        assert main(["local", "down", "--dir", str(root), "--json"]) == 0
        down = json.loads(capsys.readouterr().out)
        assert len(down["stopped"]) == 3 and all("stopped the" in line for line in down["stopped"])
        assert not any(_running(pid) for pid in pids.values())
        assert main(["local", "status", "--dir", str(root), "--json"]) == 1
        assert {p["state"] for p in json.loads(capsys.readouterr().out)["processes"]} == {"stopped"}

        assert main(["local", "up", "--dir", str(root), "--json"]) == 0  # the folder kept: up starts it again
        again = json.loads(capsys.readouterr().out)
        assert not again["made"] and again["started"] == ["miner", "owner-1", "owner-2"] and again["port"] == up["port"]
        assert main(["local", "down", "--dir", str(root), "--clean"]) == 0
        assert not any(_running(pid) for pid in again["pids"].values())
        assert not root.exists()
    finally:
        if root.exists():
            _kill_leftovers(root)
