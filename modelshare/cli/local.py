"""`modelshare local up | status | down`: a persistent federation on this machine to keep poking at (FLARE's POC mode).

``local up`` makes, once, a folder (default ``./modelshare-local``) that holds a federation: a bundled
dataset dealt to ``--owners`` owners and a held-out ``test.csv`` (`modelshare.simulate.deal_tables`, as
``simulate`` deals it), ``project.toml`` and the kits ``provision`` writes from it (``kits/``, with their
start.sh and stop.sh), a ``study.toml`` with simulate's defaults that scores on ``test.csv``
(`modelshare.cli.study_init.study_template`), and ``local.json``, which marks the folder as one. It then
starts the miner and every owner with their kits' start.sh (pid files and logs in the kits), waits until
the miner answers ``Health`` and every owner has polled it, and prints the commands that create and
follow a study. Every process runs in a session of its own, so the federation outlives the command;
re-running ``up`` starts only what is stopped and says when everything already runs. ``local status``
shows each process (running or stopped, pid, port, health; exit 0 when all run and are healthy, 1
otherwise), and ``local down`` stops them with their stop.sh and keeps the folder (``--clean`` removes
it). A folder without ``local.json`` is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomli_w

from modelshare.cli.common import CommandFailed, add_json, add_seed, err, out, positive_int, titled_table
from modelshare.cli.owner_status import DEFAULT_MAX_AGE, owner_health
from modelshare.cli.study_init import study_template
from modelshare.common.data.datasets import DATASETS
from modelshare.common.federation.config_file import read_toml
from modelshare.common.files import atomic_write
from modelshare.owner_node.status import read_status

__all__ = ["DEFAULT_DIR", "DEFAULT_PORT", "LocalFederation", "cmd_down", "cmd_status", "cmd_up", "configure_down",
           "configure_status", "configure_up", "load_federation"]

DEFAULT_DIR = Path("modelshare-local")
DEFAULT_PORT = 50061
DEFAULT_OWNERS = 3
MAX_OWNERS = 10
DEFAULT_DATASET = "nursery"
MARKER = "local.json"
FORMAT = "modelshare.local/1"
TEST_FRACTION = 0.2


class LocalError(CommandFailed):
    """A process of the local federation failed to start or to become ready (exit status 1)."""


@dataclass(frozen=True)
class LocalFederation:
    """A local federation's folder, as ``local.json`` describes it."""

    root: Path
    dataset: str
    owners: tuple[str, ...]

    def kit(self, name: str) -> Path:
        return self.root / "kits" / name

    @property
    def admin_config(self) -> Path:
        return self.kit("admin") / "admin.toml"

    def parties(self) -> list[tuple[str, str]]:
        """(name, role) of every process: the miner first, then the owners."""
        return [("miner", "miner"), *((owner, "owner") for owner in self.owners)]


def load_federation(root: Path) -> LocalFederation:
    """The federation in ``root``; ValueError when the folder is missing or is not one (no valid ``local.json``)."""
    marker = root / MARKER
    if not root.is_dir():
        raise ValueError(f"{root}: no local federation here (no such folder); `modelshare local up --dir {root}` "
                         "makes one")
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{root} is not a local federation (it has no {MARKER}); `local` commands touch only a "
                         "folder `modelshare local up` made") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{marker}: unreadable: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{marker}: not a local federation's marker (format {FORMAT!r})")
    owners = data.get("owners")
    if not isinstance(owners, list) or not owners or not all(isinstance(o, str) for o in owners):
        raise ValueError(f"{marker}: 'owners' must be a non-empty list of names")
    return LocalFederation(root, str(data.get("dataset")), tuple(owners))


# ------------------------------------------------------------------ making the folder
def _project(owners: list[str], port: int) -> dict[str, Any]:
    """project.toml: a miner on loopback, an admin and the
    owners, each reading its dealt table (relative to its kit)."""
    return {"name": "modelshare-local", "parties": [
        {"name": "miner", "role": "miner", "address": f"127.0.0.1:{port}", "listen": f"127.0.0.1:{port}",
         "hosts": ["localhost"]},
        {"name": "admin", "role": "admin"},
        *({"name": owner, "role": "owner", "data": f"../../data/{owner}.csv"} for owner in owners)]}


def _create(root: Path, dataset: str, count: int, port: int, seed: int) -> LocalFederation:
    """Deal ``dataset``, provision the kits and write study.toml and the marker in ``root`` (new or empty)."""
    from modelshare.common.data.datasets import load_dataset
    from modelshare.common.federation.study import load_study_file
    from modelshare.provision import provision
    from modelshare.simulate import deal_tables, owner_names

    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"{root} exists and is not a local federation (it has no {MARKER}); give --dir a new or "
                         "empty folder")
    made = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    try:
        table = load_dataset(dataset)
        X, y = table.schema.encode(table.frame, source=table.source)
        owners = owner_names(count)
        dealt = deal_tables(table.schema, X, y, owners, root, test_fraction=TEST_FRACTION, seed=seed)
        atomic_write(root / "project.toml", tomli_w.dumps(_project(owners, port)).encode("utf-8"), mode=0o644)
        provision(root / "project.toml", root / "kits")
        atomic_write(root / "study.toml", study_template(dataset=dataset, evaluation="test.csv").encode("utf-8"),
                     mode=0o644)
        load_study_file(root / "study.toml")  # what `study create` will read
        marker = {"format": FORMAT, "dataset": dataset, "owners": owners, "rows": dealt.rows,
                  "test_rows": int(dealt.test.sum()), "seed": seed,
                  "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        atomic_write(root / MARKER, (json.dumps(marker, indent=2) + "\n").encode("utf-8"), mode=0o644)
    except BaseException:
        if made:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for child in root.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        raise
    return load_federation(root)


# ------------------------------------------------------------------ processes
def _pid(kit: Path, role: str) -> int | None:
    """The pid in the kit's pid file when that process is the kit's running daemon (as start.sh and stop.sh judge)."""
    try:
        text = (kit / f"{role}.pid").read_text(encoding="ascii").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    if not text.isdigit():
        return None
    args = subprocess.run(["ps", "-ww", "-o", "args=", "-p", text], capture_output=True, text=True).stdout
    return int(text) if f"{role} serve --config" in args else None


def _script_env() -> dict[str, str]:
    """The environment the kits' scripts run in: this installation's ``modelshare`` first on PATH."""
    env = dict(os.environ)
    script = Path(sys.executable).with_name("modelshare")
    if script.is_file():
        env["PATH"] = f"{script.parent}{os.pathsep}{env.get('PATH', '')}"
        env.pop("MODELSHARE", None)
    else:  # no console script beside this interpreter: run the package with it
        env["MODELSHARE"] = f"{sys.executable} -m modelshare.cli"
    return env


def _run_script(kit: Path, script: str, timeout: float) -> str:
    """Run the kit's start.sh or stop.sh in a session of its own; its output, or LocalError with what it said."""
    env = {**_script_env(), "MODELSHARE_START_TIMEOUT": str(max(1, round(timeout)))}
    try:
        done = subprocess.run(["sh", str(kit / script)], env=env, capture_output=True, text=True,
                              start_new_session=True, timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        raise LocalError(f"{kit / script} did not finish within {timeout + 60:.0f} s") from None
    if done.returncode != 0:
        raise LocalError(f"{kit / script} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()}")
    return done.stdout.strip()


def _configured_port(fed: LocalFederation) -> int:
    miner = read_toml(fed.kit("miner") / "miner.toml", "miner config", ValueError)["miner"]
    return int(str(miner["listen"]).rpartition(":")[2])


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds: a closing port is free
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _miner_port(fed: LocalFederation, pid: int) -> int | None:
    """The port the running miner ``pid`` reported in its ready file (None before it has)."""
    from modelshare.miner_node.server import read_ready

    ready = read_ready(fed.kit("miner") / "state")
    return int(ready["port"]) if ready is not None and ready.get("pid") == pid else None


def _health(fed: LocalFederation, timeout: float) -> str:
    """The miner's answer to Health, asked with the admin's kit ("serving", "unhealthy: ..."), or why none came."""
    import grpc

    from modelshare.admin import AdminConfig, admin_stub
    from modelshare.common.federation.pb import federation_pb2 as fpb
    from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc

    channel, _ = admin_stub(AdminConfig.load(fed.admin_config))
    with channel:
        try:
            return str(fgrpc.MinerStub(channel).Health(fpb.HealthRequest(), timeout=timeout).status)
        except grpc.RpcError as exc:
            return f"no answer: {exc.code().name}"


def _polling(fed: LocalFederation) -> set[str]:
    """The owners the miner has seen poll recently (``miner sites``'s state "polling")."""
    import grpc

    from modelshare.admin import AdminConfig, admin_stub
    from modelshare.common.federation.pb import federation_pb2 as fpb

    channel, stub = admin_stub(AdminConfig.load(fed.admin_config))
    with channel:
        try:
            reply = stub.ListSites(fpb.ListSitesRequest(), timeout=5)
        except grpc.RpcError:
            return set()
    return {site.owner_id for site in reply.sites if site.state == "polling"}


def _log_tail(kit: Path, role: str, lines: int = 10) -> str:
    try:
        return "\n".join((kit / f"{role}.log").read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_ready(fed: LocalFederation, pids: dict[str, int], timeout: float) -> int:
    """Wait until the miner reports its port and answers Health "serving" and every owner has polled; the port."""
    deadline = time.monotonic() + timeout
    port = health = None
    polling: set[str] = set()
    while True:
        for name, role in fed.parties():
            if _pid(fed.kit(name), role) != pids[name]:
                raise LocalError(f"{name} (pid {pids[name]}) exited; {fed.kit(name) / (role + '.log')} ends with:\n"
                                 f"{_log_tail(fed.kit(name), role)}")
        port = port or _miner_port(fed, pids["miner"])
        if port is not None and health != "serving":
            health = _health(fed, timeout=2)
        if health == "serving" and port is not None:
            polling = _polling(fed)
            if polling >= set(fed.owners):
                return port
        if time.monotonic() > deadline:
            waiting = "the miner's Health" if health != "serving" else \
                f"the first poll of {', '.join(sorted(set(fed.owners) - polling))}"
            raise LocalError(f"timed out after {timeout:.0f} s waiting for {waiting} (miner: {health or 'no port'})")
        time.sleep(0.1)


# ------------------------------------------------------------------ up
def _open(args: argparse.Namespace) -> tuple[LocalFederation, bool]:
    """The federation in ``--dir``, made first when the folder is new or empty; whether it was made now."""
    root: Path = args.dir
    if not (root / MARKER).exists():
        if root.exists() and root.is_dir() and any(root.iterdir()):
            load_federation(root)  # raises: a folder some other tool made
        port = DEFAULT_PORT if args.port is None else args.port
        if args.owners is not None and not 1 <= args.owners <= MAX_OWNERS:
            raise ValueError(f"--owners must be between 1 and {MAX_OWNERS} (as simulate's), got {args.owners}")
        if not 0 <= port < 65536:
            raise ValueError(f"--port must lie in 0..65535, got {port}")
        if port and _port_taken(port):
            raise ValueError(f"port {port} on 127.0.0.1 is taken (another miner or program listens on it); pass "
                             "--port N, or --port 0 for any free port")
        return _create(root, args.dataset or DEFAULT_DATASET, args.owners or DEFAULT_OWNERS, port, args.seed), True
    fed = load_federation(root)
    if args.owners is not None and args.owners != len(fed.owners):
        raise ValueError(f"{root} holds a federation of {len(fed.owners)} owners, not --owners {args.owners}; "
                         f"`modelshare local down --clean --dir {root}` removes it, or give another --dir")
    if args.dataset is not None and args.dataset != fed.dataset:
        raise ValueError(f"{root} holds a federation of the dataset {fed.dataset}, not --dataset {args.dataset}; "
                         f"`modelshare local down --clean --dir {root}` removes it, or give another --dir")
    return fed, False


def _move_port(fed: LocalFederation, port: int | None) -> None:
    """``--port`` on an existing federation whose miner is stopped: write the new port into every kit."""
    from modelshare.provision import set_miner_port

    if port is None or port == _configured_port(fed):
        return
    if _pid(fed.kit("miner"), "miner") is not None:
        raise ValueError(f"the miner of {fed.root} runs on port {_configured_port(fed)}; `modelshare local down` "
                         f"before moving it to --port {port}")
    if port == 0:
        raise ValueError(f"{fed.root} is already provisioned; give --port a port number (0 picks one only when the "
                         "federation is made)")
    set_miner_port([fed.root / "kits" / name for name in ("miner", "admin", *fed.owners)], port)


def _start_all(fed: LocalFederation, timeout: float) -> tuple[dict[str, int], list[str], int]:
    """Start whatever is stopped; (pid of every process, the parties started now, the miner's port)."""
    from modelshare.provision import set_miner_port

    started: list[str] = []
    try:
        if _pid(fed.kit("miner"), "miner") is None:
            configured = _configured_port(fed)
            if configured and _port_taken(configured):
                raise ValueError(f"port {configured} on 127.0.0.1 is taken by another program; stop it, or move this "
                                 f"federation with `modelshare local up --port N --dir {fed.root}`")
            _run_script(fed.kit("miner"), "start.sh", timeout)
            started.append("miner")
        miner_pid = _pid(fed.kit("miner"), "miner")
        if miner_pid is None:  # start.sh returned once it served, and it exited since
            raise LocalError(f"the miner exited after it started; {fed.kit('miner') / 'miner.log'} ends with:\n"
                             f"{_log_tail(fed.kit('miner'), 'miner')}")
        port = _miner_port(fed, miner_pid)
        if port is not None and _configured_port(fed) == 0:  # made with --port 0: the kits learn the port it bound
            set_miner_port([fed.root / "kits" / name for name in ("miner", "admin", *fed.owners)], port)
        for owner in fed.owners:
            if _pid(fed.kit(owner), "owner") is None:
                _run_script(fed.kit(owner), "start.sh", timeout)
                started.append(owner)
        pids = {name: _pid(fed.kit(name), role) for name, role in fed.parties()}
        missing = [name for name, pid in pids.items() if pid is None]
        if missing:
            raise LocalError(f"{', '.join(missing)} exited right after starting; see their logs in {fed.root / 'kits'}")
        port = _wait_ready(fed, {name: int(pid) for name, pid in pids.items() if pid is not None}, timeout)
    except BaseException:
        for name in reversed(started):  # leave nothing of this attempt running
            subprocess.run(["sh", str(fed.kit(name) / "stop.sh")], capture_output=True, timeout=120)
        raise
    return {name: int(pid) for name, pid in pids.items() if pid is not None}, started, port


def _study_commands(fed: LocalFederation) -> list[dict[str, str]]:
    """How to create a study against the federation, follow it, fetch its results, and see or stop the processes."""
    config = f"--config {shlex.quote(str(fed.admin_config))}"
    study = shlex.quote(str(fed.root / "study.toml"))
    where = "" if fed.root == DEFAULT_DIR else f" --dir {shlex.quote(str(fed.root))}"
    return [{"step": "create a study (simulate's defaults, scored on the held-out test.csv)",
             "command": f"modelshare study create {study} {config}"},
            {"step": "follow it to the end", "command": f"modelshare study status latest --follow {config}"},
            {"step": "fetch its results", "command": f"modelshare study results latest --out results {config}"},
            {"step": "see the processes; stop them", "command": f"modelshare local status{where}; "
                                                               f"modelshare local down{where}"}]


def cmd_up(args: argparse.Namespace) -> int:
    fed, made = _open(args)
    if not made:
        _move_port(fed, args.port)
    running = {name: _pid(fed.kit(name), role) for name, role in fed.parties()}
    if all(pid is not None for pid in running.values()):
        port = _miner_port(fed, int(running["miner"] or 0)) or _configured_port(fed)
        pids, started = {name: int(pid or 0) for name, pid in running.items()}, list[str]()
    else:
        pids, started, port = _start_all(fed, args.timeout)
    steps = _study_commands(fed)
    report = {"dir": str(fed.root), "made": made, "already_running": not started, "started": started,
              "dataset": fed.dataset, "port": port, "pids": pids, "next": steps}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if not started:
        out.print(f"the local federation in {fed.root} is already running (miner on 127.0.0.1:{port}, "
                  f"{len(fed.owners)} owners); nothing changed", highlight=False, soft_wrap=True)
    else:
        verb = "made and started" if made else "started"
        out.print(f"{verb} the local federation in {fed.root}: the miner on 127.0.0.1:{port} and "
                  f"{len(fed.owners)} owners ({', '.join(fed.owners)}) polling it, each holding a share of "
                  f"{fed.dataset}; started now: {', '.join(started)}", highlight=False, soft_wrap=True)
    out.print("next:", highlight=False, soft_wrap=True)
    for number, step in enumerate(steps, 1):
        out.print(f"  {number}. {step['step']}:\n       {step['command']}", highlight=False, soft_wrap=True)
    return 0


# ------------------------------------------------------------------ status and down
def _status_rows(fed: LocalFederation) -> list[dict[str, Any]]:
    from modelshare.owner_node.config import OwnerConfig

    rows = []
    now = datetime.now(timezone.utc)
    for name, role in fed.parties():
        pid = _pid(fed.kit(name), role)
        row: dict[str, Any] = {"name": name, "role": role, "state": "running" if pid else "stopped", "pid": pid,
                               "port": None, "healthy": False, "health": "stopped"}
        if role == "miner":
            row["port"] = (_miner_port(fed, pid) if pid else None) or _configured_port(fed)
            if pid:
                row["health"] = _health(fed, timeout=5)
                row["healthy"] = row["health"] == "serving"
        elif pid:
            status = read_status(OwnerConfig.load(fed.kit(name) / "owner.toml").state_dir)
            row["healthy"], row["health"] = owner_health(status, now=now, max_age=DEFAULT_MAX_AGE)
        rows.append(row)
    return rows


def cmd_status(args: argparse.Namespace) -> int:
    fed = load_federation(args.dir)
    rows = _status_rows(fed)
    healthy = all(row["healthy"] for row in rows)
    if args.json:
        print(json.dumps({"dir": str(fed.root), "healthy": healthy, "processes": rows}, indent=2))
        return 0 if healthy else 1
    table = titled_table(f"local federation {fed.root} ({fed.dataset})")
    for column in ("name", "role", "state", "pid", "port"):
        table.add_column(column, no_wrap=True)
    table.add_column("health", overflow="fold")
    for row in rows:
        table.add_row(row["name"], row["role"], row["state"], str(row["pid"] or "-"), str(row["port"] or "-"),
                      row["health"])
    out.print(table)
    return 0 if healthy else 1


def cmd_down(args: argparse.Namespace) -> int:
    fed = load_federation(args.dir)
    said = [f"{name}: {_run_script(fed.kit(name), 'stop.sh', timeout=60)}"
            for name, _ in [*fed.parties()[1:], fed.parties()[0]]]  # the owners first, then the miner
    if args.clean:
        shutil.rmtree(fed.root)
    if args.json:
        print(json.dumps({"dir": str(fed.root), "stopped": said, "removed": args.clean}, indent=2))
        return 0
    for line in said:
        out.print(line, highlight=False, soft_wrap=True)
    err.print(f"removed {fed.root}" if args.clean else f"kept {fed.root}: `modelshare local up` starts it again, "
              "`local down --clean` removes it", highlight=False, soft_wrap=True)
    return 0


# ------------------------------------------------------------------ parsers
def _dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                   help=f"the local federation's folder (default {DEFAULT_DIR})")


def configure_up(up: argparse.ArgumentParser) -> None:
    """`local up [--dir DIR] [--owners N] [--dataset NAME] [--port N]`."""
    _dir(up)
    up.add_argument("--owners", type=positive_int, default=None, metavar="N",
                    help=f"owners of a new federation, 1-{MAX_OWNERS} (default {DEFAULT_OWNERS}; an "
                    "existing one keeps its own)")
    up.add_argument("--dataset", choices=sorted(DATASETS), default=None,
                    help=f"the bundled dataset dealt to the owners of a new federation (default {DEFAULT_DATASET})")
    up.add_argument("--port", type=int, default=None,
                    help=f"the miner's port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port, when made; on a "
                         "stopped federation: move it there)")
    add_seed(up, default=0, help="seed of the dealing of a new federation's table (default 0)")
    up.add_argument("--timeout", type=float, default=120.0,
                    help="seconds to wait for each process to serve and the owners to poll (default 120)")
    add_json(up, "the folder, the processes' pids, the miner's port and the commands to run next")
    up.set_defaults(func=cmd_up)


def configure_status(status: argparse.ArgumentParser) -> None:
    """`local status [--dir DIR]`."""
    _dir(status)
    add_json(status, "every process: state, pid, port, health")
    status.set_defaults(func=cmd_status)


def configure_down(down: argparse.ArgumentParser) -> None:
    """`local down [--dir DIR] [--clean]`."""
    _dir(down)
    down.add_argument("--clean", action="store_true", help="then remove the folder (kits, tables, state, logs)")
    add_json(down, "what each stop script said")
    down.set_defaults(func=cmd_down)
