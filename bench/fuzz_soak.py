"""Fuzz soak: >= 100,000 hostile cases against a running miner over mutual TLS and against the model readers.

The strategies and properties are those of tests/federation/test_fuzz.py (tests/fuzz_cases.py), run for many
more cases. A throw-away federation (owners site-a, site-b and one that never answers, so no
study is ever mined) is provisioned and its miner started in this process exactly as `modelshare
miner serve` builds it (`start_miner` with the kit's miner.toml: mutual TLS, verifier processes).
Rounds of hypothesis-generated cases (generate phase only: no shrinking, no example database)
mix, by default:

* ``local``: a hostile model in process through `check_model`, `decode_model`, `modelshare.common.audit.release.audit`
  and `modelshare.miner_node.pgen` (only `Rejection` / `WireError` may escape; what decodes must audit and
  regenerate rows that satisfy their own paths);
* ``file``: a hostile model file through `modelshare.common.federation.model_io.read_model` (only `TreeError`), then
  audit and PGEN of what it reads;
* ``miner``: a hostile request over mutual TLS to one of the nine RPCs (signed hostile models, sent
  whole or in pieces by ``SubmitChunks`` with intact or edited streams, and refusals reaching the
  decoder and the auditor, hostile fields for the admin RPCs and Poll, arbitrary request bytes), and ``miner-big``:
  signed models with the expensive edits (10^6 nodes, deep chains, 64+ trees, megabyte fields).

Every miner call must answer a status other than INTERNAL, UNKNOWN or UNAVAILABLE before its
deadline, a rejected call must leave the submissions, nonces, refusals and studies tables as they
were, and an accepted one must store exactly its row (and pass `check_model` in process). After
every round the miner must answer Health; at the end the store must hold exactly what the miner
acknowledged and the audit log must verify. Counts by outcome go to bench/RESULTS.md.

    python bench/fuzz_soak.py [--cases 100000] [--round 2000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/ is not an installed package

import grpc  # noqa: E402
import hypothesis  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from modelshare.miner_node.store import verify_log  # noqa: E402
from tests import fuzz_cases as fc  # noqa: E402
from tests.federation_helpers import make_federation  # noqa: E402

SECTION = "## Fuzz soak (bench/fuzz_soak.py)"
MIX = (("local", 0.54), ("file", 0.15), ("miner", 0.30), ("miner-big", 0.01))
KINDS = ("crash", "hang", "rejected-but-stored", "inconsistent", "harness error")
from results_file import machine, write_section  # noqa: E402 (bench/ is sys.path[0] when run as a script)


class Tally:
    """Outcomes by target and status code, the slowest answer per target, and every failure."""

    def __init__(self) -> None:
        self.codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.slowest: dict[str, float] = collections.defaultdict(float)
        self.failures: collections.Counter = collections.Counter()
        self.examples: list[str] = []
        self.cases = 0

    def add(self, outcome: fc.Outcome, case: Any) -> None:
        self.cases += 1
        self.codes[outcome.rpc][outcome.code] += 1
        self.slowest[outcome.rpc] = max(self.slowest[outcome.rpc], outcome.seconds)
        if outcome.failure is not None:
            self.failures[outcome.kind] += 1
            if len(self.examples) < 20:
                self.examples.append(f"{outcome.kind}: {outcome.failure[:300]} <- {case!r}"[:1500])
                print("FAILURE", self.examples[-1], flush=True)


def run_round(strategy: Any, check: Callable[[Any], fc.Outcome], n: int, tally: Tally) -> None:
    """``n`` generated cases through ``check``; a harness exception is recorded, not raised (the run goes on)."""

    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def body(case: Any) -> None:
        try:
            outcome = check(case)
        except Exception as exc:  # noqa: BLE001 - a harness fault must not end a 15-minute run unrecorded
            outcome = fc.Outcome("harness", "error", 0.0, f"harness raised {exc!r}")
            tally.failures["harness error"] += 1
            tally.cases += 1
            if len(tally.examples) < 20:
                tally.examples.append(f"harness error: {exc!r} <- {case!r}"[:1500])
            return
        tally.add(outcome, case)

    body()


def machine_with_libraries() -> str:
    return f"{machine()}, grpcio {grpc.__version__}, hypothesis {hypothesis.__version__}"


def write_results(command: str, tally: Tally, seconds: float, after: dict[str, Any]) -> None:
    local = {"local", "read_model"}
    miner_cases = sum(sum(c.values()) for rpc, c in tally.codes.items() if rpc not in local)
    lines = [
        SECTION,
        "",
        f"`{command}` on {datetime.date.today().isoformat()}, {machine_with_libraries()}: {tally.cases:,} "
        "hypothesis-generated cases "
        f"in {seconds / 60:.1f} min, {miner_cases:,} of them over mutual TLS to a miner in the bench process "
        f"(`start_miner` with the kit's miner.toml, {after['verifiers']} verifier processes; "
        "owners site-a, site-b and one "
        "that never answers, so no study is mined). Strategies and properties of "
        "tests/federation/test_fuzz.py: signed models with "
        "hostile fields (cycles, detached rings, 10^6 nodes, deep chains, up to and past 64 trees, NaN/inf intervals, "
        "negative or inconsistent counts, unknown enums, schema mismatches, megabyte fields, lying reports) or bytes "
        "(truncated, bit-flipped, arbitrary), envelopes altered after signing, hostile refusals, hostile requests to "
        "Poll/CreateStudy/GetStudy/ListStudies/GetResults/Health from the admin's and the owners' identities, "
        "the same models in pieces (`SubmitChunks`: intact streams and streams with a wrong "
        "digest, a wrong declared size, "
        "pieces repeated, swapped, skipped, empty or missing), arbitrary request bytes to all nine RPCs; in process, "
        "the same models through `check_model`, `decode_model`, "
        "`audit` and PGEN, and model files through `read_model`.",
        "",
        "| target | cases | outcomes | slowest answer |",
        "|---|---:|---|---:|",
    ]
    order = [*fc.RPCS, "local", "read_model"]
    for rpc in sorted(tally.codes, key=lambda r: order.index(r) if r in order else len(order)):
        codes = tally.codes[rpc]
        shown = ", ".join(f"{code} {n:,}" for code, n in codes.most_common())
        where = "in process" if rpc in local else "gRPC"
        lines.append(f"| {rpc} ({where}) | {sum(codes.values()):,} | {shown} | {tally.slowest[rpc]:.2f} s |")
    failures = ", ".join(f"{kind} {tally.failures.get(kind, 0)}" for kind in KINDS)
    lines += [
        "",
        f"Failures: {failures} (expected: all 0). A crash is INTERNAL, UNKNOWN or UNAVAILABLE from the miner (an "
        "unhandled exception, a lost verifier) or an exception other than the project's own in process; a hang is an "
        "answer after the call's deadline (10 s; Poll 1 s); rejected-but-stored is a refused call after which a row "
        "of submissions, nonces, refusals or studies had changed.",
        "",
        f"After the run: Health {after['health']}; the store holds {after['submissions']:,} submissions and "
        f"{after['refusals']:,} refusals, exactly the ones the miner acknowledged ({after['exact']}); audit log "
        f"{'intact' if after['log_ok'] else 'BROKEN'} ({after['log_entries']:,} entries).",
    ]
    if tally.examples:
        lines += ["", "First failures:", "", *(f"- `{e[:400]}`" for e in tally.examples)]
    section = "\n".join(lines) + "\n"
    write_section(SECTION, section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000, help="cases in all (default 100000)")
    parser.add_argument("--round", type=int, default=2_000, help="cases per round; Health is checked after each")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the throw-away state (default: system temp)")
    parser.add_argument("--no-results", action="store_true", help="do not write bench/RESULTS.md")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # numpy overflow warnings on hostile numbers are expected
    import logging

    logging.basicConfig(level=logging.CRITICAL)  # the miner logs every rejection; the tally is the record
    root = Path(tempfile.mkdtemp(prefix="modelshare-fuzz-", dir=args.dir))
    fc.bases()
    fed = make_federation(root, fc.OWNERS)
    fed.start()
    target = fc.MinerTarget(fed)
    model_file = root / "model.json"
    targets = {
        "local": (fc.local_cases(), fc.run_local),
        "file": (fc.file_cases(), lambda case: fc.run_file(case, model_file)),
        "miner": (fc.miner_cases(), target.run),
        "miner-big": (fc.submit_cases(big=True), target.run),
    }
    tally = Tally()
    started = time.monotonic()
    try:
        while tally.cases < args.cases:
            for name, share in MIX:
                strategy, check = targets[name]
                run_round(strategy, check, max(1, round(args.round * share)), tally)
            if not target.healthy():
                raise SystemExit("the miner stopped answering Health")
            elapsed = time.monotonic() - started
            done = min(tally.cases, args.cases)
            print(f"[{elapsed:6.0f} s] {tally.cases:,} cases ({done / args.cases:.0%}); failures "
                  f"{sum(tally.failures.values())}; eta {elapsed / done * (args.cases - done):.0f} s", flush=True)
        seconds = time.monotonic() - started
        log = verify_log(fed.miner.config.state_dir)
        rows = target.rows()
        after = {
            "health": "serving" if target.healthy() else "NOT SERVING",
            "submissions": rows.submissions - target.start_rows.submissions,
            "refusals": rows.refusals - target.start_rows.refusals,
            "exact": "checked" if target.stored_only_accepted() else "MISMATCH",
            "log_ok": log.ok,
            "log_entries": log.entries,
            "verifiers": fed.miner.exchange.verifier.processes,
        }
    finally:
        target.close()
        fed.close()
        shutil.rmtree(root, ignore_errors=True)
    for rpc, codes in sorted(tally.codes.items()):
        print(f"{rpc:12} {sum(codes.values()):8,}  " + ", ".join(f"{c} {n:,}" for c, n in codes.most_common()))
    print(f"{tally.cases:,} cases in {seconds:.0f} s; failures: {dict(tally.failures) or 0}; after: {after}")
    if not args.no_results:
        flags = [("--cases", args.cases, 100_000), ("--round", args.round, 2_000)]
        write_results("python bench/fuzz_soak.py" + "".join(f" {f} {v}" for f, v, d in flags if v != d),
                      tally, seconds, after)
    bad = (sum(tally.failures.values()) or after["health"] != "serving" or after["exact"] != "checked"
           or not after["log_ok"])
    if bad:
        raise SystemExit("the fuzz soak found failures (see above)")


if __name__ == "__main__":
    main()
