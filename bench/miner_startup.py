"""Start-up of `modelshare miner serve` with a store of 10,000 submissions, against `python -c "import grpc"`.

A throw-away federation's miner kit (`modelshare.provision`) on port 0, its store holding one study and
``--submissions`` accepted submissions (written once through `modelshare.miner_node.store.Store.accept`, as the
miner writes them). Each round starts the miner as a fresh process and measures the wall time from exec
until its ready file names that process (`modelshare.miner_node.server.read_ready`: the port is bound and serving),
then stops it with SIGTERM; the baseline runs in the same round, so load on a shared machine hits both
alike. Each round also times a verification worker's imports (`python -c "import modelshare.miner_node.verify"`:
what each of the workers the miner spawns once it serves imports before it verifies). Medians over the rounds go to
bench/RESULTS.md.

    python bench/miner_startup.py [--rounds 7] [--submissions 10000]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import machine, write_section  # bench/ is sys.path[0] when run as a script

from modelshare.miner_node.config import MinerConfig
from modelshare.miner_node.server import read_ready
from modelshare.miner_node.store import Store, Submission
from modelshare.provision import issue_throwaway_federation

HEADING = "## Miner start-up (bench/miner_startup.py)"
BASELINE = 'python -c "import grpc"'
VERIFIER = 'python -c "import modelshare.miner_node.verify"'
TIMEOUT = 120.0


def fill_store(state_dir: Path, submissions: int) -> None:
    """One study and ``submissions`` accepted submissions in the store (the envelopes are placeholders)."""
    store = Store(state_dir)
    try:
        store.create_study("bench", b"", None, by="bench")
        for i in range(submissions):
            sub = Submission("bench", f"owner-{i}", f"{i:064x}", b"\x00" * 2048, time.time())
            store.accept(sub, os.urandom(16))
    finally:
        store.close()


def serve_once(config: Path, state_dir: Path) -> float:
    """Seconds from exec of ``miner serve`` until its ready file names it; the miner is stopped after."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "modelshare.cli", "miner", "serve", "--config", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            ready = read_ready(state_dir)
            if ready is not None and ready["pid"] == process.pid:
                return time.perf_counter() - start
            if process.poll() is not None:
                said = process.stderr.read().decode()[-2000:] if process.stderr is not None else ""
                raise SystemExit(f"the miner exited with {process.returncode}: {said}")
            if time.perf_counter() - start > TIMEOUT:
                raise SystemExit(f"the miner was not ready after {TIMEOUT:.0f} s")
            time.sleep(0.01)
    finally:
        process.terminate()
        process.wait(timeout=60)


def timed_import(module: str) -> float:
    """Seconds a fresh interpreter takes to import ``module`` and exit."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="miner starts (after one warm-up start; default 7)")
    parser.add_argument("--submissions", type=int, default=10_000, help="submissions in the store (default 10000)")
    parser.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="modelshare-miner-startup-"))
    load_before = os.getloadavg()[0]
    try:
        kit = issue_throwaway_federation(root / "kits", owners=["site-a"], address="localhost:0")["miner"]
        config = kit / "miner.toml"
        state_dir = MinerConfig.load(config).state_dir
        filled = time.perf_counter()
        fill_store(state_dir, args.submissions)
        filled = time.perf_counter() - filled
        serves, bases, verifiers = [], [], []
        for round_ in range(args.rounds + 1):
            wall, base = serve_once(config, state_dir), timed_import("grpc")
            verifier = timed_import("modelshare.miner_node.verify")
            if round_:  # the first round warms the file cache
                serves.append(wall)
                bases.append(base)
                verifiers.append(verifier)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    serve, base, verifier = statistics.median(serves), statistics.median(bases), statistics.median(verifiers)
    print(f"store filled in {filled:.1f} s; ready in {serve:.2f} s (min {min(serves):.2f}, max {max(serves):.2f}); "
          f"import grpc {1000 * base:.0f} ms; ratio {serve / base:.1f}; a verifier's imports {verifier:.2f} s")
    if not args.no_write:
        write_section(HEADING, "\n".join([
            HEADING,
            "",
            f"`python bench/miner_startup.py --rounds {args.rounds} --submissions {args.submissions}` on "
            f"{datetime.date.today().isoformat()}, {machine()}. Wall time from exec of `modelshare miner serve` "
            "(a throw-away kit, port 0, TLS) until its ready file names the process, with a store of "
            f"{args.submissions} accepted submissions; median of {args.rounds} starts after a warm-up start, each "
            f"followed in the same round by `{BASELINE}` and `{VERIFIER}`. The machine is shared: its 1-minute "
            "load average was "
            f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after the run.",
            "",
            "| command | median wall | min | max | ratio to `import grpc` |",
            "|---|---:|---:|---:|---:|",
            f"| `modelshare miner serve` to ready | {serve:.2f} s | {min(serves):.2f} s | {max(serves):.2f} s | "
            f"{serve / base:.1f} |",
            f"| `{VERIFIER}` (a verification worker's imports) | {verifier:.2f} s | {min(verifiers):.2f} s | "
            f"{max(verifiers):.2f} s | {verifier / base:.1f} |",
            f"| `{BASELINE}` | {1000 * base:.0f} ms | {1000 * min(bases):.0f} ms | {1000 * max(bases):.0f} ms | 1.0 |",
        ]) + "\n")


if __name__ == "__main__":
    main()
