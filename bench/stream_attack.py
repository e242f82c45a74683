"""Hostile answers in pieces against a `modelshare miner serve` process: its RSS after them and an honest owner's latency.

Ten owners open ``--streams`` SubmitChunks streams in all, each declaring ``--mib`` MiB of bytes that are no
envelope and carrying a wrong digest, all at once; meanwhile an honest owner sends a signed model with ``Submit``
(acknowledged as a duplicate after the first) from its own process on one channel it keeps open, as an owner
daemon does, and the latencies of the Submits sent during the attack are kept. The miner's RSS (``VmRSS``) is read
idle, at its peak during the attack, and five seconds after the last hostile stream ended, with no collection
forced; results go to bench/RESULTS.md with the load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from results_file import machine, write_section  # noqa: E402

from modelshare.common.federation.chunks import envelope_chunks  # noqa: E402
from modelshare.common.federation.pb import federation_pb2 as fpb  # noqa: E402
from tests.conftest import _encoded  # noqa: E402
from tests.federation_helpers import deal, make_federation, signed_model, study_spec  # noqa: E402

MiB = 2**20


def rss(pid: int) -> int:
    """The process's resident set, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


HEADING = "## Miner under hostile answers in pieces (bench/stream_attack.py)"

HONEST_OWNER = """
import json, sys, time
from pathlib import Path
from modelshare.common.federation.dial import dial_miner
from modelshare.common.federation.kit import TlsFiles
from modelshare.common.federation.pb import federation_pb2 as fpb, federation_pb2_grpc as fgrpc
address, kit, envelope, stop = sys.argv[1:5]
stub = fgrpc.OwnerExchangeStub(dial_miner(address, TlsFiles.in_kit(Path(kit)), "miner"))
answer = fpb.SignedEnvelope.FromString(Path(envelope).read_bytes())
stub.Submit(answer, timeout=30)
print("ready", flush=True)
samples = []
while not Path(stop).exists():
    at, start = time.time(), time.perf_counter()
    stub.Submit(answer, timeout=30)
    samples.append((at, time.perf_counter() - start))
print(json.dumps(samples), flush=True)
"""
"""The honest owner: its own process with one channel kept open, as its daemon runs; (sent at, seconds) per Submit."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--mib", type=int, default=8)
    args = parser.parse_args()
    load_before = os.getloadavg()
    owners = [f"site-{i}" for i in range(10)]
    with tempfile.TemporaryDirectory() as tmp:
        fed = make_federation(Path(tmp), [*owners, "honest"], address="localhost:0")
        miner = fed.serve(Path(tmp) / "miner.log")
        pid = miner.process.pid
        try:
            spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("s1")), timeout=10).spec
            _, X, y = _encoded("car")
            honest = signed_model(fed, "honest", spec, *deal(X, y, ["honest"])["honest"])
            fed.stub("honest").Submit(honest, timeout=30)  # stored once: every later Submit is its duplicate
            envelope, stop = Path(tmp) / "honest.bin", Path(tmp) / "stop"
            envelope.write_bytes(honest.SerializeToString())
            owner = subprocess.Popen([sys.executable, "-c", HONEST_OWNER, fed.address, str(fed.kits["honest"]),
                                      str(envelope), str(stop)], stdout=subprocess.PIPE, text=True)
            assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
            time.sleep(2)
            idle = rss(pid)
            junk = bytes(range(256)) * (args.mib * MiB // 256)
            outcomes: list[str] = []

            def hostile(owner: str) -> None:
                pieces = list(envelope_chunks(junk, "s1", 1 * MiB))
                pieces[0].sha256 = bytes(32)
                try:
                    fed.stub(owner).SubmitChunks(iter(pieces), timeout=120)
                    outcomes.append("OK")
                except grpc.RpcError as exc:
                    outcomes.append(exc.code().name)

            threads = [threading.Thread(target=hostile, args=(owners[i % 10],)) for i in range(args.streams)]
            peak = idle
            began = time.time()
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.05)
                    peak = max(peak, rss(pid))
            ended = time.time()
            stop.write_text("")
            samples = json.loads(owner.stdout.readline())
            owner.wait(30)
            latencies = [seconds for at, seconds in samples if began <= at <= ended]  # sent during the attack
            time.sleep(5)  # the measurement the issue asks for: five seconds after the streams ended
            after = rss(pid)
        finally:
            fed.close()
    load_after = os.getloadavg()
    p99 = float(np.percentile(latencies, 99)) if latencies else float("nan")
    counts = {k: outcomes.count(k) for k in sorted(set(outcomes))}
    body = (f"{HEADING}\n\n`python bench/stream_attack.py --streams {args.streams} --mib {args.mib}`; {machine()}. Load average "
            f"before {', '.join(f'{x:.2f}' for x in load_before)}, after {', '.join(f'{x:.2f}' for x in load_after)}. "
            f"{args.streams} digest-broken streams of {args.mib} MiB from 10 owners at once against `modelshare miner "
            f"serve` (default limits); the miner's refusals: {counts}.\n\n"
            "| miner RSS idle | peak during attack | 5 s after (no forced gc) | after / idle | honest Submits | p50 | p99 |\n"
            "|---|---|---|---|---|---|---|\n"
            f"| {idle / MiB:.0f} MiB | {peak / MiB:.0f} MiB | {after / MiB:.0f} MiB | {after / idle:.2f}x | "
            f"{len(latencies)} | {np.percentile(latencies, 50) * 1000:.0f} ms | {p99 * 1000:.0f} ms |\n")
    print(body)
    write_section(HEADING, body)


if __name__ == "__main__":
    main()
