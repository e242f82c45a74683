"""Size and time of a DPEA release at its registry defaults: the paper's domain against the compact one, same run.

For each table (Adult's first 1,500 rows, and a synthetic table of 20 attributes, 10 numeric and 10
categorical), DPEA releases at the registry's default requirement and depth (``dp:epsilon=1,trees=10``,
depth 4) as `modelshare release` does (`modelshare.common.mechanisms.release.release`, fresh randomness), with
the registry trainer's public domain either ``paper`` (every category, the finest bins up to 24 whose
worst-case tree fits 100,000 nodes: the setting before compact releases) or ``compact`` (the default:
`modelshare.common.mechanisms.dpea.release_domain`). Measured: nodes, the model file's bytes
(`write_release`), the ModelMessage's bytes on the wire, release seconds, then `modelshare audit`'s
work (`read_model` + `modelshare.common.audit.release.audit`) in seconds, and the peak RSS of each setting. Each
setting runs in its own child process so that its peak memory is its own. Ratios are compact / paper.
Results go to bench/RESULTS.md.

    python bench/dp_release_size.py [--rows 1500] [--synthetic-rows 5000]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from results_file import machine, write_section  # noqa: E402 (bench/ is sys.path[0] when run as a script)

from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.federation.model_io import read_model, write_release
from modelshare.common.federation.wire import model_message
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.dpea import MECHANISM, RELEASE_BYTES, train_dpea
from modelshare.common.mechanisms.release import release

SETTINGS = ("paper", "compact")


def synthetic(rows: int, seed: int = 0) -> tuple[Schema, np.ndarray, np.ndarray]:
    """20 attributes (10 numeric over public ranges, 10 categorical of 2-20 categories); the class follows three."""
    rng = np.random.default_rng(seed)
    attributes: list[CategoricalAttribute | NumericAttribute] = [
        NumericAttribute(f"x{i}", 0.0, 100.0 * (i + 1)) for i in range(10)]
    sizes = [2, 3, 4, 5, 6, 8, 10, 12, 16, 20]
    attributes += [CategoricalAttribute(f"c{i}", tuple(f"v{j}" for j in range(n))) for i, n in enumerate(sizes)]
    schema = Schema(tuple(attributes), "label", ("no", "yes"))
    numeric = rng.random((rows, 10)) * 100.0 * np.arange(1, 11)
    categorical = np.column_stack([rng.integers(0, n, rows) for n in sizes])
    X = np.hstack([numeric, categorical]).astype(np.float64)
    signal = (numeric[:, 0] > 30) ^ (categorical[:, 9] < 5) ^ (numeric[:, 3] > 250)
    y = np.where(rng.random(rows) < 0.9, signal, ~signal).astype(np.int64)
    return schema, X, y


def table(name: str, rows: int) -> tuple[Schema, np.ndarray, np.ndarray]:
    if name == "synthetic":
        return synthetic(rows)
    loaded = load_dataset(name)
    X, y = loaded.schema.encode(loaded.frame.iloc[:rows])
    return loaded.schema, X, y


def measure_one(name: str, rows: int, setting: str) -> dict[str, Any]:
    """One release and its audit with the registry trainer on ``setting``'s domain (in this process)."""
    record = registry.get(MECHANISM)
    registry.register(dataclasses.replace(record, train=functools.partial(train_dpea, domain=setting)), replace=True)
    schema, X, y = table(name, rows)
    requirement = record.default_requirement
    depth = record.default_max_depth
    start, cpu = time.perf_counter(), time.process_time()
    released = release(MECHANISM, requirement=requirement, schema=schema, X=X, y=y, max_depth=depth)
    release_s, release_cpu = time.perf_counter() - start, time.process_time() - cpu
    wire = model_message(released).ByteSize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.json"
        write_release(released, path)
        file_bytes = path.stat().st_size
        start, cpu = time.perf_counter(), time.process_time()
        trees, report = read_model(path)
        result = audit(trees, report)
        audit_s, audit_cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"table": name, "rows": int(y.size), "attributes": schema.n_attributes, "setting": setting,
            "requirement": requirement, "depth": depth, "bins": report.parameters["bins"],
            "max_arity": report.parameters["max_arity"], "nodes": sum(len(t.nodes) for t in released.trees),
            "file_bytes": file_bytes, "wire_bytes": wire, "release_s": release_s, "audit_s": audit_s,
            "release_cpu_s": release_cpu, "audit_cpu_s": audit_cpu,
            "audit_passed": bool(result.passed),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def measure(name: str, rows: int, setting: str) -> dict[str, Any]:
    """`measure_one` in a child process (its own peak memory)."""
    done = subprocess.run([sys.executable, __file__, "--one", name, str(rows), setting], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_results(results: list[dict[str, Any]], argv: str, load: float) -> None:
    lines = ["## Compact DP releases (bench/dp_release_size.py)", "",
             f"`python bench/dp_release_size.py{argv}` on {time.strftime('%Y-%m-%d')}, "
             f"{machine()}. DPEA at the registry's "
             "default requirement and depth through `release` (as `modelshare release "
             "--mechanism dpea`), the registry "
             f"trainer's domain `paper` (every category, finest bins <= 24 fitting 100,000 nodes per tree: the setting "
             f"before compact releases) against `compact` (the default), same run; audit = `read_model` + "
             f"`audit` (as `modelshare audit`). Target: under {RELEASE_BYTES / 1e6:g} MB on the wire, release + audit "
             "under 30 s.", "",
             "| table | domain | bins / max arity | nodes | file | wire | release wall (CPU) | "
             "audit wall (CPU) | peak RSS | audit | target met |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        met = r["wire_bytes"] <= RELEASE_BYTES and r["release_s"] + r["audit_s"] < 30
        lines.append(f"| {r['table']} ({r['rows']:,} rows, {r['attributes']} attributes) | {r['setting']} | "
                     f"{r['bins']} / {r['max_arity'] or 'none'} | {r['nodes']:,} | {r['file_bytes'] / 1e6:.2f} MB | "
                     f"{r['wire_bytes'] / 1e6:.2f} MB | {r['release_s']:.1f} s ({r['release_cpu_s']:.1f} s) | "
                     f"{r['audit_s']:.1f} s ({r['audit_cpu_s']:.1f} s) | "
                     f"{r['peak_rss_mb']:,.0f} MB | {'PASS' if r['audit_passed'] else 'FAIL'} | "
                     f"{'yes' if met else 'no'} |")
    lines += ["", "Wall time includes waiting for the CPU on a shared machine (load average at the start: "
              f"{load:.1f} on {os.cpu_count()} cores); CPU time is the process's own. Compact / paper, same run:", "",
              "| table | nodes | wire bytes | release CPU | audit CPU | peak RSS |", "|---|---:|---:|---:|---:|---:|"]
    by = {(r["table"], r["setting"]): r for r in results}
    for name in dict.fromkeys(r["table"] for r in results):
        old, new = by[(name, "paper")], by[(name, "compact")]
        ratio = [new[k] / old[k] for k in ("nodes", "wire_bytes", "release_cpu_s", "audit_cpu_s", "peak_rss_mb")]
        lines.append(f"| {name}: compact / paper | " + " | ".join(f"{x:.3g}" for x in ratio) + " |")
    write_section(lines[0], "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1500, help="Adult's first rows (default 1500)")
    parser.add_argument("--synthetic-rows", type=int, default=5000,
                        help="rows of the 20-attribute table (default 5000)")
    parser.add_argument("--one", nargs=3, metavar=("TABLE", "ROWS", "SETTING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one[0], int(args.one[1]), args.one[2])))
        return
    load = os.getloadavg()[0]
    results = []
    for name, rows in (("adult", args.rows), ("synthetic", args.synthetic_rows)):
        for setting in SETTINGS:
            results.append(measure(name, rows, setting))
            print(json.dumps(results[-1]), flush=True)
    argv = "".join(f" {a}" for a in sys.argv[1:])
    write_results(results, argv, load)


if __name__ == "__main__":
    main()
