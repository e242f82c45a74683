"""`modelshare.forkserver`: parties forked from one server run the CLI as separate processes, report their exit
statuses, take signals only while running, and are stopped when the server's parent goes away."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from modelshare.forkserver import ForkServer
from modelshare.miner_node.server import read_ready
from modelshare.provision import issue_throwaway_federation

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork server forks")]


def _ready_miner(server: ForkServer, kit, log):
    """Fork ``miner serve`` for ``kit`` and wait (on its ready file, with a deadline) until it serves."""
    miner = server.fork(["miner", "serve", "--config", str(kit / "miner.toml")], log)
    deadline = time.monotonic() + 120
    while (ready := read_ready(kit / "state")) is None or ready["pid"] != miner.pid:
        assert miner.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return miner


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_forked_parties_run_the_cli_and_report_their_status(tmp_path):
    server = ForkServer(tmp_path / "forkserver.log")
    try:
        server.wait_ready(180)
        version = server.fork(["--version"], tmp_path / "version.log")
        assert version.pid != server.process.pid and version.wait(60) == 0
        assert "modelshare" in (tmp_path / "version.log").read_text()
        usage = server.fork(["no-such-command"], tmp_path / "usage.log")
        assert usage.wait(60) == 2 and "no-such-command" in (tmp_path / "usage.log").read_text()

        kits = issue_throwaway_federation(tmp_path / "kits", owners=["site-a"], address="localhost:0")
        miner = _ready_miner(server, kits["miner"], tmp_path / "miner.log")
        assert os.getsid(miner.pid) == miner.pid  # a session of its own, as a spawned party's
        with pytest.raises(subprocess.TimeoutExpired):
            miner.wait(0.2)
        miner.send_signal(signal.SIGTERM)
        assert miner.wait(60) == 0  # a clean stop
        assert read_ready(kits["miner"] / "state") is None
        miner.send_signal(signal.SIGTERM)  # reaped: the server signals no one (the pid may be reused)
        assert miner.poll() == 0
    finally:
        server.close()


def test_closing_the_server_stops_the_parties_still_running(tmp_path):
    server = ForkServer(tmp_path / "forkserver.log")
    server.wait_ready(180)
    kits = issue_throwaway_federation(tmp_path / "kits", owners=["site-a"], address="localhost:0")
    miner = _ready_miner(server, kits["miner"], tmp_path / "miner.log")
    server.close()  # as when simulate dies: the end of the server's input stops the miner (SIGTERM)
    assert server.process.returncode == 0
    assert _gone(miner.pid)
    assert "stopping the miner" in (tmp_path / "miner.log").read_text()  # SIGTERM first, which it handled
