"""Owner fan-out: N owner sites wait on the miner while an admin measures Health and CreateStudy.

One throw-away federation with the largest ``--owners`` count is provisioned through
`modelshare.provision.issue_throwaway_federation` (every owner a real identity: its own
certificate, signing key and roster entry). For each N in ``--owners`` and each server mode, a
fresh state directory and a miner process (`modelshare miner serve` with the kit's miner.toml:
32 workers, mutual TLS) are started, then an owner swarm process: N owners, one mutual-TLS
channel each (grpc.aio, one event loop), each waiting as the owner daemon does, with
``Poll(wait_seconds=10)`` under a 15 s deadline, asking again at once when a Poll returns and after
the daemon's backoff when it fails. Once every owner has had its first Poll held, the admin
(this process) measures, one call at a time:

* ``Health``: ``--health`` calls (p50 / p99);
* ``CreateStudy`` of ``--creates`` studies that invite one owner outside the swarm, so each
  one wakes every waiting Poll, which finds nothing for its owner and waits again;
* fan-out: one study inviting all N owners; the time until the last owner's Poll returned it.

"Every wait answered" means no Poll of any owner failed (no DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
UNAVAILABLE) during the whole run. Modes: ``aio`` is this tree (Poll a coroutine on the asyncio
server); ``threaded`` is the miner of ``--threaded-commit`` (default: the commit before the
asyncio server, where a held Poll occupies one of the 32 worker threads), extracted with
``git archive`` and run the same way, so both modes are measured in the same run on the same
kits. Results go to bench/RESULTS.md. Not a test: nothing here asserts a time.

    python bench/owner_fanout.py [--owners 100,300,1000] [--modes aio,threaded] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from modelshare.common.federation.dial import dial_miner
from modelshare.common.federation.kit import TlsFiles
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.common.federation.study import spec_from_mapping
from modelshare.miner_node.server import read_ready
from modelshare.owner_node.daemon import POLL_GRACE_SECONDS, POLL_WAIT_SECONDS, Backoff
from modelshare.provision import issue_throwaway_federation

SECTION = "## Owner fan-out (bench/owner_fanout.py)"
ABSENT = "absent-owner"
THREADED_COMMIT = "1110075"  # the last commit whose miner holds a worker thread per waiting Poll
TREE = Path(__file__).resolve().parents[1]
from results_file import machine, write_section  # noqa: E402 (bench/ is sys.path[0] when run as a script)


# ------------------------------------------------------------------ the owner swarm (a child process)
class Swarm:
    """N owners in one event loop, each polling like the owner daemon; counts Poll outcomes."""

    def __init__(self, address: str, kits: dict[str, str]) -> None:
        self.address = address
        self.kits = kits
        self.answered = 0
        self.failed: dict[str, int] = {}  # Poll failures once every owner was connected and had polled once
        self.failed_connecting: dict[str, int] = {}  # before that: the TLS handshakes of N channels at once
        self.held = 0  # owners whose first Poll came back
        self.seen: dict[str, float] = {}  # owner -> wall time it learned of the fan-out study
        self.stop = asyncio.Event()

    async def owner(self, name: str, first_held: asyncio.Event) -> None:
        tls = TlsFiles.in_kit(Path(self.kits[name]))
        options = [("grpc.ssl_target_name_override", "miner"), ("grpc.enable_retries", 0)]
        rng, attempt, counted = random.Random(name), 0, False
        async with grpc.aio.secure_channel(self.address, tls.channel_credentials(), options=options) as channel:
            stub = fgrpc.OwnerExchangeStub(channel)
            while not self.stop.is_set():
                try:
                    reply = await stub.Poll(fpb.PollRequest(wait_seconds=POLL_WAIT_SECONDS),
                                            timeout=POLL_WAIT_SECONDS + POLL_GRACE_SECONDS)
                except grpc.aio.AioRpcError as exc:
                    if self.stop.is_set():
                        return
                    failed = self.failed if first_held.is_set() else self.failed_connecting
                    failed[exc.code().name] = failed.get(exc.code().name, 0) + 1
                    counted = counted or self._came_back(first_held)
                    attempt += 1
                    await asyncio.sleep(Backoff().delay(attempt, rng))
                    continue
                attempt = 0
                self.answered += 1
                counted = counted or self._came_back(first_held)
                if any(s.spec.study_id == "fanout" for s in reply.studies) and name not in self.seen:
                    self.seen[name] = time.time()
                    return  # as a daemon would now answer it; this owner is done

    def _came_back(self, first_held: asyncio.Event) -> bool:
        """Count an owner's first Poll to come back (held for its full wait, or failed); set ``first_held`` at the
        last."""
        self.held += 1
        if self.held == len(self.kits):
            first_held.set()
        return True


async def _swarm_main(conn: Any, address: str, kits: dict[str, str]) -> None:
    swarm = Swarm(address, kits)
    first_held = asyncio.Event()
    owners = [asyncio.create_task(swarm.owner(name, first_held)) for name in kits]
    loop = asyncio.get_running_loop()
    await first_held.wait()
    conn.send("polling")  # every owner has waited once: the second round of Polls is in flight
    await loop.run_in_executor(None, conn.recv)  # "stop" once the fan-out study is created and seen, or the bench ends
    deadline = loop.time() + 60
    while len(swarm.seen) < len(kits) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    swarm.stop.set()
    for task in owners:
        task.cancel()
    await asyncio.gather(*owners, return_exceptions=True)
    conn.send({"answered": swarm.answered, "failed": swarm.failed, "failed_connecting": swarm.failed_connecting,
               "seen": swarm.seen})


def _swarm_process(conn: Any, address: str, kits: dict[str, str]) -> None:
    asyncio.run(_swarm_main(conn, address, kits))


# ------------------------------------------------------------------ the miner (a child process)
def threaded_tree(commit: str, root: Path) -> Path:
    """The source tree of ``commit`` (for the threaded server), extracted with git archive."""
    out = root / f"tree-{commit}"
    if not out.exists():
        out.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(TREE), "archive", commit], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def start_miner(tree: Path, kit: Path, log: Path) -> subprocess.Popen:
    """``modelshare miner serve`` from ``tree`` on a fresh state directory; returns once it serves."""
    shutil.rmtree(kit / "state", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "modelshare.cli", "miner", "serve", "--config",
                                    str(kit / "miner.toml")], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tree)
    deadline = time.monotonic() + 120
    while (ready := read_ready(kit / "state")) is None or ready["pid"] != process.pid:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the miner did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return process


# ------------------------------------------------------------------ one measurement
def study(study_id: str, owners: list[str]) -> fpb.StudySpec:
    return spec_from_mapping({
        "study": {"id": study_id, "quorum": 1, "deadline_minutes": 60, "owners": owners},
        "schema": {"dataset": "car"},
        "release": {"mechanism": "apt", "requirement": "k-anonymity:k=5"},
    }).spec


def timed(call: Any) -> tuple[float, str | None]:
    t0 = time.perf_counter()
    try:
        call()
    except grpc.RpcError as exc:
        return time.perf_counter() - t0, exc.code().name
    return time.perf_counter() - t0, None


def series(call: Any, count: int, budget: float) -> list[tuple[float, str | None]]:
    """``call(i)`` for i < ``count``, one at a time, stopping early once ``budget`` seconds have passed."""
    end = time.perf_counter() + budget
    samples = []
    for i in range(count):
        samples.append(timed(lambda i=i: call(i)))
        if time.perf_counter() > end:
            break
    return samples


def measure(mode: str, tree: Path, kits: dict[str, Path], owners: list[str], args: argparse.Namespace,
            root: Path) -> dict[str, Any]:
    log = root / f"miner-{mode}-{len(owners)}.log"
    miner = start_miner(tree, kits["miner"], log)
    port = read_ready(kits["miner"] / "state")["port"]
    address = f"localhost:{port}"
    ctx = multiprocessing.get_context("spawn")
    conn, child = ctx.Pipe()
    swarm = ctx.Process(target=_swarm_process, args=(child, address, {o: str(kits[o]) for o in owners}), daemon=True)
    t_start = time.perf_counter()
    swarm.start()
    try:
        if not conn.poll(args.settle):
            raise RuntimeError(f"{mode}, {len(owners)} owners: not every owner's first Poll came "
                               f"back within {args.settle} s")
        conn.recv()
        settle = time.perf_counter() - t_start
        with dial_miner(address, TlsFiles.in_kit(kits["admin"]), "miner") as channel:
            admin = fgrpc.StudyAdminStub(channel)
            health = series(lambda _: fgrpc.MinerStub(channel).Health(fpb.HealthRequest(), timeout=30),
                            args.health, args.budget)
            creates = series(lambda i: admin.CreateStudy(fpb.CreateStudyRequest(spec=study(f"absent-{i}", [ABSENT])),
                                                         timeout=30), args.creates, args.budget)
            created_at = time.time()
            fanout_error = timed(lambda: admin.CreateStudy(fpb.CreateStudyRequest(spec=study("fanout", owners)),
                                                           timeout=30))[1]
        conn.send("stop")
        outcome = conn.recv() if conn.poll(120) else {"answered": 0, "failed": {"swarm did not report": 1},
                                                      "failed_connecting": {}, "seen": {}}
    finally:
        swarm.join(timeout=30)
        if swarm.is_alive():
            swarm.kill()
        miner.terminate()
        try:
            miner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            miner.kill()
    seen = outcome["seen"]
    fanout = max(seen.values()) - created_at if len(seen) == len(owners) else float("nan")

    def stats(samples: list[tuple[float, str | None]]) -> dict[str, Any]:
        ok = np.array([s for s, e in samples if e is None]) * 1e3
        errors: dict[str, int] = {}
        for _, e in samples:
            if e is not None:
                errors[e] = errors.get(e, 0) + 1
        return {"p50": float(np.percentile(ok, 50)) if len(ok) else float("nan"),
                "p99": float(np.percentile(ok, 99)) if len(ok) else float("nan"), "errors": errors,
                "calls": len(samples)}

    result = {"mode": mode, "owners": len(owners), "settle": settle, "health": stats(health), "create": stats(creates),
              "fanout_error": fanout_error, "fanout_s": fanout, "seen": len(seen), "answered": outcome["answered"],
              "failed": outcome["failed"], "failed_connecting": outcome["failed_connecting"]}
    print(json.dumps(result), flush=True)
    return result


# ------------------------------------------------------------------ results
def _errors(d: dict[str, int]) -> str:
    return ", ".join(f"{n} {code}" for code, n in sorted(d.items())) or "none"


def write_results(command: str, args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    label = {"aio": "asyncio server (this tree)", "threaded": f"threaded server ({args.threaded_commit})"}
    lines = [
        SECTION, "",
        f"`{command}` on {datetime.date.today().isoformat()}, {machine()}, grpcio {grpc.__version__}. One throw-away "
        f"federation of {max(r['owners'] for r in runs)} provisioned owners (each its own "
        "certificate and key); per row a "
        "fresh miner process (`modelshare miner serve`, kit miner.toml: 32 workers, mutual TLS) and a swarm process "
        "holding one mutual-TLS channel per owner, each owner polling as the daemon does (Poll held up to "
        f"{POLL_WAIT_SECONDS} s, deadline {POLL_WAIT_SECONDS + POLL_GRACE_SECONDS} s, the daemon's backoff after a "
        f"failure). After every owner's first Poll came back, the admin makes {args.health} `Health` calls, then "
        f"{args.creates} `CreateStudy` calls (each wakes every waiting Poll), one call at a time, each series cut "
        f"short after {args.budget:.0f} s; then one study "
        "invites all N owners and *fan-out* is the time until the last owner's Poll returned it. *Polls failed* "
        "counts the Polls that ended in an error: *while connecting* until every owner's first Poll came back (the "
        "first Poll's deadline includes its channel's TLS handshake, and N channels connect at once, as after a miner "
        "restart), *after* from then to the end of the row; *every wait answered* means none failed after, every "
        "owner learned of the fan-out study and no Health call failed.",
        "",
        "| server | owners N | Health calls, p50 / p99 | Health errors | CreateStudy calls, p50 / "
        "p99 | CreateStudy errors "
        "| fan-out to all N | Polls answered | Polls failed while connecting | Polls failed "
        "after | every wait answered |",
        "|---|---:|---:|---|---:|---|---:|---:|---|---|---|",
    ]
    for r in runs:
        h, c = r["health"], r["create"]
        every = "yes" if not r["failed"] and r["seen"] == r["owners"] and not h["errors"] else "no"
        fanout = (f"{r['fanout_s']:.2f} s" if r["seen"] == r["owners"]
                  else f"{r['seen']} of {r['owners']} owners in 60 s")
        lines.append(
            f"| {label[r['mode']]} | {r['owners']:,} | {h['calls']}, {h['p50']:.1f} / {h['p99']:.1f} ms | "
            f"{_errors(h['errors'])} | "
            f"{c['calls']}, {c['p50']:.1f} / {c['p99']:.1f} ms | {_errors(c['errors'])} | "
            f"{fanout} | {r['answered']:,} | {_errors(r['failed_connecting'])} | {_errors(r['failed'])} | {every} |")
    lines += ["", "Interpretation: " + interpretation(runs)]
    write_section(SECTION, "\n".join(lines) + "\n")


def interpretation(runs: list[dict[str, Any]]) -> str:
    top = max(r["owners"] for r in runs)
    new = next((r for r in runs if r["mode"] == "aio" and r["owners"] == top), None)
    old = next((r for r in runs if r["mode"] == "threaded" and r["owners"] == top), None)
    parts = []
    if new is not None:
        parts.append(f"with {top:,} waiting owners the asyncio server answered Health at p99 "
                     f"{new['health']['p99']:.1f} ms "
                     f"and {'every' if not new['failed'] else 'not every'} Poll once connected "
                     f"({_errors(new['failed'])} failed after "
                     f"connecting, {_errors(new['failed_connecting'])} while {top:,} channels connected at once); "
                     "a waiting Poll is a suspended coroutine, so the 32 worker threads stay "
                     "free for the calls that work")
    if old is not None:
        parts.append("the threaded server, at the same N, admits at most 4 x 32 = 128 calls "
                     "at once and holds a thread "
                     f"per waiting Poll: Health p99 {old['health']['p99']:.1f} ms with "
                     f"{_errors(old['health']['errors'])} errors, and {_errors(old['failed'])} Polls failed")
    return "; ".join(parts) + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owners", default="100,300,1000", help="comma-separated owner counts (default 100,300,1000)")
    parser.add_argument("--modes", default="aio,threaded", help="aio, threaded or both (default both)")
    parser.add_argument("--threaded-commit", default=THREADED_COMMIT,
                        help="the commit whose threaded miner is the baseline")
    parser.add_argument("--health", type=int, default=200, help="Health calls per row (default 200)")
    parser.add_argument("--creates", type=int, default=20, help="CreateStudy calls per row (default 20)")
    parser.add_argument("--budget", type=float, default=60,
                        help="seconds at most for each series of calls; fewer calls are made past it (default 60)")
    parser.add_argument("--settle", type=float, default=180,
                        help="seconds allowed for every owner's first Poll (default 180)")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed)")
    args = parser.parse_args()
    counts = sorted(int(n) for n in args.owners.split(","))
    modes = args.modes.split(",")
    root = args.dir or Path(tempfile.mkdtemp(prefix="owner-fanout-"))
    try:
        names = [f"owner-{i:04d}" for i in range(counts[-1])]
        t0 = time.perf_counter()
        kits = issue_throwaway_federation(root / "kits", owners=[*names, ABSENT], address="localhost:0")
        print(f"provisioned {len(names) + 1} owners in {time.perf_counter() - t0:.0f} s", flush=True)
        runs = []
        for n in counts:
            for mode in modes:
                tree = TREE if mode == "aio" else threaded_tree(args.threaded_commit, root)
                runs.append(measure(mode, tree, kits, names[:n], args, root))
        write_results(" ".join(["python", "bench/owner_fanout.py", *sys.argv[1:]]), args, runs)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
