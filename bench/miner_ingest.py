"""Miner ingest: verified + durably stored submissions per second on loopback, against bare RPCs.

A throw-away federation (``--owners`` owners plus one invited owner who never answers, so no
study reaches its answers and starts mining mid-run) is provisioned; the miner runs in this
process on port 0 exactly as `modelshare miner serve` builds it (`start_miner` with the kit's
miner.toml). ``--studies`` open studies invite every owner (APT, ``k-anonymity:k=5``, counts
disclosure). Before any timing, each owner trains one small multiway tree on its own random
slice of the bundled Car table, releases it as the studies ask, and one `ModelMessage` per
(study, owner) is built and signed with that owner's key (fresh nonce and timestamp each).

Timed, with ``--threads`` client threads and one mutual-TLS channel per owner (each channel
warmed up by one untimed Health call first):

* baseline: as many bare ``Health`` RPCs as there are submissions, over the same channels;
* ``Submit`` of every envelope: TLS identity and signature checks, study checks, size limit,
  decode, the independent re-audit, then the fsync'd SQLite commit (envelope, nonce, hash-chained
  audit-log entry) and the ``audit.head`` fsync, before the ack;
* without gRPC: `Store.accept` of the same submissions into a fresh store, one thread, and a
  bare ``write + fsync`` loop on the same file system (the floor of any durable commit).

Every submission must be accepted (asserted), the ``submissions`` table must then hold exactly
that many rows, and the audit log must verify. ``--profile`` runs cProfile inside the miner's
Submit handlers instead (numbers are inflated; RESULTS.md is not written). Target >= 500
accepted submissions/s. Results go to bench/RESULTS.md.

    python bench/miner_ingest.py [--owners 64] [--studies 16] [--threads 16] [--dir DIR] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import datetime
import functools
import hashlib
import io
import os
import platform
import pstats
import re
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import grpc
import numpy as np

from common.datasets import load_dataset
from common.dial import dial_miner
from common.kit import TlsFiles
from common.learners import make_learner
from common.pb import federation_pb2 as fpb
from common.pb import federation_pb2_grpc as fgrpc
from common.signing import load_signing_key, sign_payload
from common.study import spec_from_mapping
from common.wire import model_message
from miner_node.config import MinerConfig
from miner_node.server import start_miner
from miner_node.service import MinerService
from miner_node.store import Store, Submission, verify_log
from modelshare.provision import issue_throwaway_federation
from owner_node.release import MECHANISMS, release_tree

TARGET = 500.0
RESULTS = Path(__file__).with_name("RESULTS.md")
SECTION = "## Miner ingest (bench/miner_ingest.py)"
ABSENT = "absent-owner"
MECHANISM, REQUIREMENT, DISCLOSURE = "apt", "k-anonymity:k=5", "counts"


def machine(path: Path) -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        fs = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True).stdout.splitlines()[1].split()
        where = f"state on {fs[1]} ({fs[0]})"
    except (OSError, IndexError):
        where = "state file system unknown"
    return (f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, grpcio {grpc.__version__}, {where}")


# ------------------------------------------------------------------ set-up (untimed)
def study_spec(study_id: str, owners: list[str]) -> fpb.StudySpec:
    data = {
        "study": {"id": study_id, "quorum": 0, "deadline_minutes": 120, "owners": owners},
        "schema": {"dataset": "car"},
        "release": {"mechanism": MECHANISM, "requirement": REQUIREMENT, "disclosure": DISCLOSURE},
        "training": {"learner": "multiway"},
        "mining": {"global_models": ["decision-tree"], "pgen_scale": 1},
    }
    return spec_from_mapping(data).spec


def releases(owners: list[str]) -> dict[str, Any]:
    """One released tree per owner, each trained on its own random eighth of Car."""
    table = load_dataset("car")
    X, y = table.schema.encode(table.frame)
    out = {}
    for i, owner in enumerate(owners):
        rows = np.random.default_rng(i).choice(len(y), size=len(y) // 8, replace=False)
        tree = make_learner("multiway", table.schema, random_state=0).fit(X[rows], y[rows]).tree_
        out[owner] = release_tree(tree, MECHANISM, requirement=REQUIREMENT, disclosure=DISCLOSURE)
    return out


def signed_envelopes(kits: dict[str, Path], owners: list[str], study_ids: list[str]) -> list[tuple[str, fpb.SignedEnvelope]]:
    """(owner, envelope) for every (study, owner), study-major; each message has its own nonce."""
    released = releases(owners)
    keys = {o: load_signing_key(kits[o] / "signing.key") for o in owners}
    return [(o, sign_payload(model_message(released[o], study_id=s, owner_id=o).SerializeToString(), keys[o]))
            for s in study_ids for o in owners]


def install_profiler() -> list[cProfile.Profile]:
    """Wrap MinerService.Submit (before the server registers it) with one profiler per handler thread."""
    profiles: list[cProfile.Profile] = []
    local = threading.local()
    original = MinerService.Submit

    @functools.wraps(original)
    def profiled(self: MinerService, request: Any, context: Any) -> Any:
        prof = getattr(local, "prof", None)
        if prof is None:
            prof = local.prof = cProfile.Profile()
            profiles.append(prof)
        prof.enable()
        try:
            return original(self, request, context)
        finally:
            prof.disable()

    MinerService.Submit = profiled  # type: ignore[method-assign]
    return profiles


# ------------------------------------------------------------------------ timing
@dataclasses.dataclass
class Phase:
    name: str
    calls: int
    seconds: float
    latencies: np.ndarray
    results: list[Any]
    errors: list[str]

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    def ms(self, q: float) -> float:
        return float(np.percentile(self.latencies, q) * 1e3)


def run_concurrently(name: str, calls: list[Callable[[], Any]], threads: int) -> Phase:
    """Run ``calls`` from ``threads`` threads (thread i takes calls i, i + threads, ...); wall and latencies."""
    latencies = np.zeros(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[str] = []
    start_line = threading.Barrier(threads + 1)

    def work(first: int) -> None:
        start_line.wait()
        for j in range(first, len(calls), threads):
            t0 = time.perf_counter()
            try:
                results[j] = calls[j]()
            except grpc.RpcError as exc:
                errors.append(f"{exc.code().name}: {exc.details()}")
            latencies[j] = time.perf_counter() - t0

    workers = [threading.Thread(target=work, args=(i,), name=f"client-{i}") for i in range(threads)]
    for w in workers:
        w.start()
    start_line.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    return Phase(name, len(calls), time.perf_counter() - t0, latencies, results, errors)


def time_serially(name: str, calls: list[Callable[[], Any]]) -> Phase:
    latencies = np.zeros(len(calls))
    results = []
    t0 = time.perf_counter()
    for j, call in enumerate(calls):
        s = time.perf_counter()
        results.append(call())
        latencies[j] = time.perf_counter() - s
    return Phase(name, len(calls), time.perf_counter() - t0, latencies, results, [])


def raw_store_phases(root: Path, envelopes: list[tuple[str, fpb.SignedEnvelope]]) -> tuple[Phase, Phase]:
    """`Store.accept` of the same submissions into a fresh store, and bare write+fsync, one thread."""
    subs = []
    for owner, env in envelopes:
        message = fpb.ModelMessage.FromString(env.payload)
        submission_id = hashlib.sha256(env.SerializeToString(deterministic=True)).hexdigest()
        subs.append((Submission(message.study_id, owner, submission_id, env.SerializeToString(), time.time()), message.nonce))
    store = Store(root / "raw-store")
    try:
        accept = time_serially("Store.accept, no gRPC (1 thread)", [functools.partial(store.accept, s, n) for s, n in subs])
        assert accept.results == ["accepted"] * len(subs), set(accept.results)
    finally:
        store.close()
    path = root / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)

    def write_fsync() -> None:
        os.pwrite(fd, b"x" * 64, 0)
        os.fsync(fd)

    try:
        fsync = time_serially("bare 64-byte write + fsync (1 thread)", [write_fsync] * len(subs))
    finally:
        os.close(fd)
    return accept, fsync


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    owners = [f"owner-{i:03d}" for i in range(args.owners)]
    study_ids = [f"ingest-{i:03d}" for i in range(args.studies)]
    t0 = time.perf_counter()
    kits = issue_throwaway_federation(root / "kits", owners=[*owners, ABSENT], address="localhost:50051")
    print(f"provisioned {len(owners) + 1} owners in {time.perf_counter() - t0:.1f} s", flush=True)
    profiles = install_profiler() if args.profile else None
    config = dataclasses.replace(MinerConfig.load(kits["miner"] / "miner.toml"), listen="localhost:0")
    miner = start_miner(config, mechanisms=MECHANISMS)
    address = f"localhost:{miner.port}"
    channels: list[grpc.Channel] = []
    try:
        admin_channel = dial_miner(address, TlsFiles.in_kit(kits["admin"]), "miner")
        channels.append(admin_channel)
        admin = fgrpc.MinerStub(admin_channel)
        for sid in study_ids:
            admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec(sid, [*owners, ABSENT])), timeout=30)
        t0 = time.perf_counter()
        envelopes = signed_envelopes(kits, owners, study_ids)
        sizes = [env.ByteSize() for _, env in envelopes]
        nodes = [sum(len(t.nodes) for t in fpb.ModelMessage.FromString(env.payload).trees) for _, env in envelopes]
        print(f"built and signed {len(envelopes)} envelopes in {time.perf_counter() - t0:.1f} s "
              f"(mean {np.mean(sizes):.0f} bytes, mean {np.mean(nodes):.1f} nodes)", flush=True)
        stubs = {}
        for o in owners:
            channel = dial_miner(address, TlsFiles.in_kit(kits[o]), "miner")
            channels.append(channel)
            stubs[o] = fgrpc.MinerStub(channel)
        warm = run_concurrently("warm-up", [functools.partial(stubs[o].Health, fpb.HealthRequest(), timeout=30)
                                            for o in owners], args.threads)
        assert not warm.errors, warm.errors[:3]

        health = run_concurrently("Health (baseline)", [functools.partial(stubs[o].Health, fpb.HealthRequest(), timeout=30)
                                                        for o, _ in envelopes], args.threads)
        assert not health.errors, health.errors[:3]
        print(f"Health: {health.rate:.0f}/s", flush=True)
        submit = run_concurrently("Submit", [functools.partial(stubs[o].Submit, env, timeout=60) for o, env in envelopes],
                                  args.threads)
        print(f"Submit: {submit.rate:.0f}/s", flush=True)
        accepted = sum(1 for ack in submit.results if ack is not None and not ack.duplicate)
        open_studies = len(miner.store.studies("open"))
    finally:
        for channel in channels:
            channel.close()
        miner.stop(grace=None)
    db = sqlite3.connect(f"file:{config.state_dir / 'miner.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT COUNT(*) FROM submissions").fetchone()[0]
        nonces = db.execute("SELECT COUNT(*) FROM nonces").fetchone()[0]
    finally:
        db.close()
    verdict = verify_log(config.state_dir)
    expected = len(envelopes)
    print(f"accepted {accepted} of {expected}; {rows} rows in submissions, {nonces} nonces; "
          f"log ok={verdict.ok} ({verdict.entries} entries); {open_studies} of {len(study_ids)} studies still open", flush=True)
    assert not submit.errors, f"{len(submit.errors)} submissions failed, e.g. {submit.errors[:3]}"
    assert accepted == expected, f"accepted {accepted} of {expected}"
    assert rows == expected and nonces == expected, f"{rows} submission rows and {nonces} nonces for {expected} accepted"
    assert verdict.ok, verdict.problems[:5]
    assert open_studies == len(study_ids), "a study left 'open' during the run (mining started)"
    accept, fsync = raw_store_phases(root, envelopes)
    print(f"Store.accept without gRPC: {accept.rate:.0f}/s; bare write+fsync: {fsync.rate:.0f}/s", flush=True)
    return {"health": health, "submit": submit, "accept": accept, "fsync": fsync, "expected": expected,
            "accepted": accepted, "rows": rows, "log_entries": verdict.entries, "mean_bytes": float(np.mean(sizes)),
            "mean_nodes": float(np.mean(nodes)), "profiles": profiles, "workers": config.workers}


def print_profile(profiles: list[cProfile.Profile], lines: int = 30) -> None:
    stats = pstats.Stats(profiles[0])
    for prof in profiles[1:]:
        stats.add(prof)
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        stats.stream = buf
        stats.sort_stats(key).print_stats(lines)
        print(f"--- miner Submit handlers, {len(profiles)} threads, by {key} ---")
        print(buf.getvalue())


def write_results(command: str, args: argparse.Namespace, where: Path, r: dict[str, Any]) -> None:
    health, submit, accept, fsync = r["health"], r["submit"], r["accept"], r["fsync"]
    ratio = submit.rate / health.rate
    lines = [
        SECTION,
        "",
        f"`{command}` on {datetime.date.today().isoformat()}, {machine(where)}. A throw-away federation of "
        f"{args.owners} owners (+1 invited owner who never answers, so no study starts mining), the miner in the "
        f"bench process via `start_miner` (miner.toml defaults: {r['workers']} workers, SQLite WAL + synchronous=FULL), "
        f"{args.studies} open studies (APT {REQUIREMENT}, {DISCLOSURE} disclosure), one pre-signed envelope per "
        f"(study, owner): {r['expected']} submissions, mean {r['mean_bytes']:.0f} bytes / {r['mean_nodes']:.1f} nodes "
        f"(multiway trees on 1/8 of Car). {args.threads} client threads in the same process, one mutual-TLS channel "
        "per owner (warmed up). Baseline: as many bare `Health` RPCs over the same channels, same run. "
        f"Target >= {TARGET:.0f} accepted submissions/s.",
        "",
        "| phase | calls | wall | calls/s | p50 latency | p99 latency |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in (health, submit, accept, fsync):
        lines.append(f"| {p.name} | {p.calls:,} | {p.seconds:.2f} s | {p.rate:,.0f} | {p.ms(50):.2f} ms | {p.ms(99):.2f} ms |")
    lines += [
        "",
        f"Submit/Health rate ratio {ratio:.3f} (verification + re-audit + durable commit cost "
        f"{(1 / submit.rate - 1 / health.rate) * 1e3:.2f} ms of wall per submission over a bare RPC); "
        f"accepted {r['accepted']:,} of {r['expected']:,}; `submissions` holds {r['rows']:,} rows; "
        f"audit log verifies ({r['log_entries']:,} entries). Target {'met' if submit.rate >= TARGET else 'NOT met'}: "
        f"{submit.rate:,.0f} submissions/s.",
        "",
        "Interpretation: " + interpretation(r),
    ]
    section = "\n".join(lines) + "\n"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nRatios against a baseline measured in the same run.\n\n"
    pattern = re.compile(re.escape(SECTION) + r"\n.*?(?=\n## |\Z)", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)


def interpretation(r: dict[str, Any]) -> str:
    submit, accept, fsync = r["submit"], r["accept"], r["fsync"]
    bound = "the serialized durable commit" if accept.rate < 1.5 * submit.rate else "the handler's CPU work under the GIL"
    return (f"ingest runs at {submit.rate:,.0f}/s, {'above' if submit.rate >= TARGET else 'below'} the {TARGET:.0f}/s "
            f"target; one thread commits {accept.rate:,.0f}/s through `Store.accept` and the disk does "
            f"{fsync.rate:,.0f} bare fsyncs/s (each commit takes two), so the ceiling is {bound}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owners", type=int, default=64)
    parser.add_argument("--studies", type=int, default=16)
    parser.add_argument("--threads", type=int, default=16, help="concurrent client threads (default 16)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="parent directory of the throw-away state (default: the system temp dir)")
    parser.add_argument("--profile", action="store_true", help="cProfile the miner's Submit handlers; no RESULTS.md")
    parser.add_argument("--keep", action="store_true", help="keep the kits and the miner state")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="modelshare-ingest-", dir=args.dir))
    try:
        r = measure(args, root)
        ratio = r["submit"].rate / r["health"].rate
        for p in (r["health"], r["submit"], r["accept"], r["fsync"]):
            print(f"{p.name}: {p.calls} calls in {p.seconds:.2f} s = {p.rate:,.0f}/s, p50 {p.ms(50):.2f} ms, p99 {p.ms(99):.2f} ms")
        print(f"Submit/Health ratio {ratio:.3f}")
        if args.profile:
            print_profile(r["profiles"])
        else:
            flags = [("--owners", args.owners, 64), ("--studies", args.studies, 16), ("--threads", args.threads, 16)]
            command = "python bench/miner_ingest.py" + "".join(f" {f} {v}" for f, v, d in flags if v != d)
            write_results(command, args, root, r)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if not args.profile and r["submit"].rate < TARGET:
        raise SystemExit(f"ingest {r['submit'].rate:.0f} submissions/s is below the target {TARGET:.0f}")


if __name__ == "__main__":
    main()
