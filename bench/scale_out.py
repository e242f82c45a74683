"""The miner's engines as pseudo-data grows: wall time and peak memory, local against Dask, in one run.

Two owners each release a CART tree (min_samples_leaf 5, no mechanism) of one half of three quarters
of the bundled Adult table; the held-out quarter is the evaluation table. For each ``--rows`` size the
study's ``pgen_scale`` is set so that PGEN regenerates that many pseudo rows in all, and the study
is mined (`modelshare.miner_node.mining.mine`, as the miner's coordinator calls it) once per engine, each in a
fresh child process (the "miner process"):

* ``local``: PGEN pooled in memory, the global models fitted in the process;
* ``dask``: PGEN streamed to Parquet in chunks of the memory budget (``--budget-mb``), the models
  fitted on a LocalCluster of ``--workers`` single-threaded worker processes on loopback, each capped at
  ``--worker-memory-mb`` (``[mining] worker_memory_mb``; started and stopped inside the timed mining, as the
  miner does for each study), the workers training streamed from the files
  (`modelshare.miner_node.dask_engine.TRAINING_MATRIX` "streamed");
* ``dask-quantile`` and ``dask-dmatrix``: the same, the workers training on `xgboost.dask`'s
  `DaskQuantileDMatrix` or `DaskDMatrix` (the whole frame computed into the workers first), to compare
  the workers' memory in one run.

The whole process tree is held under ``--cap-mb`` (stated in the results): a run whose sampled sum
exceeds it is stopped and recorded as over the cap.

Measured: the child's wall time of `mine`, its own peak resident memory (``ru_maxrss``) and the peak of
the summed resident memory of its whole process tree (the Dask scheduler runs in it, the workers
are its descendants), sampled every 0.1 s with psutil; and each model's accuracy. A size whose local
run fails (out of memory) is recorded as such; sizes beyond ``--local-max-rows`` are not run locally
(they would exhaust this machine's memory, estimated in the table). Results go to bench/RESULTS.md.

    python bench/scale_out.py [--rows 1000000 10000000] [--models gradient-boosting naive-bayes]
                              [--workers 2] [--budget-mb 256] [--worker-memory-mb 5120] [--cap-mb 14336]
                              [--local-max-rows 20000000] [--engines local dask dask-quantile dask-dmatrix]
                              [--dir DIR] [--label TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from results_file import machine, write_section  # noqa: E402 (bench/ is sys.path[0] when run as a script)

from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.study import spec_from_mapping
from modelshare.common.federation.wire import decode_model, model_message
from modelshare.common.mechanisms.release import release
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.miner_node import dask_engine
from modelshare.miner_node.config import MiningConfig
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine

HEADING = "## Scale-out: the local and the Dask engine (bench/scale_out.py)"
ENGINES = ("local", "dask", "dask-quantile", "dask-dmatrix")
#: The Dask engine's training matrix per engine of the bench (`modelshare.miner_node.dask_engine.TRAINING_MATRIX`).
MATRICES = {"dask": "streamed", "dask-quantile": "DaskQuantileDMatrix", "dask-dmatrix": "DaskDMatrix"}
SAMPLE_SECONDS = 0.1
LOCAL_MAX_ROWS = 20_000_000


def child(engine: str, rows: int, args: argparse.Namespace) -> dict[str, Any]:
    """Mine the Adult study at ``rows`` pseudo rows on ``engine``
    in this process; its timings, memory and accuracies."""
    dask_engine.TRAINING_MATRIX = MATRICES.get(engine, dask_engine.TRAINING_MATRIX)
    table = load_dataset("adult")
    schema = table.schema
    X, y = schema.encode(table.frame)
    order = np.random.default_rng(0).permutation(y.shape[0])
    test, train = order[: y.shape[0] // 4], order[y.shape[0] // 4:]
    accepted, released_rows = [], 0.0
    for owner, part in zip(("site-a", "site-b"), np.array_split(train, 2), strict=False):
        tree = CartTreeClassifier(schema, min_samples_leaf=5, random_state=0).fit(X[part], y[part]).tree_
        accepted.append(AcceptedModel(owner, decode_model(model_message(release("none", tree=tree)))))
        released_rows += tree.root.total
    study = spec_from_mapping({"study": {"id": "scale", "seed": 1}, "schema": {"dataset": "adult"},
                               "release": {"mechanism": "none", "disclosure": "counts"},
                               "mining": {"global_models": args.models, "pgen_scale": rows / released_rows}}).study
    on_dask = engine != "local"
    mining = MiningConfig(engine="dask" if on_dask else "local", workers=args.workers if on_dask else None,
                          memory_budget_mb=args.budget_mb, engine_timeout_seconds=6 * 3600,
                          worker_memory_mb=args.worker_memory_mb if on_dask else None)
    started = time.perf_counter()
    results = mine(study, accepted, Evaluation(X[test], y[test], test), mining=mining,
                   pseudo_dir=args.dir / "pseudo")
    wall = time.perf_counter() - started
    return {"engine": engine, "rows": sum(o.pseudo_rows for o in results.owners), "wall": wall,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "accuracy": {m.name: m.accuracy for m in results.models}}


def tree_rss(process: psutil.Process) -> tuple[int, int]:
    """Resident bytes of ``process`` and of it with all its descendants (processes that end meanwhile count 0)."""
    own = total = 0
    for i, p in enumerate([process, *process.children(recursive=True)]):
        try:
            rss = p.memory_info().rss
        except psutil.Error:
            continue
        own = rss if i == 0 else own
        total += rss
    return own, total


def run(engine: str, rows: int, args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    """One child run, its process tree's memory sampled while it runs; ``failed`` holds the error tail on failure."""
    command = [sys.executable, __file__, "--child", engine, "--rows", str(rows), "--models", *args.models,
               "--workers", str(args.workers), "--budget-mb", str(args.budget_mb),
               "--worker-memory-mb", str(args.worker_memory_mb), "--dir", str(directory)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err)
        watched = psutil.Process(process.pid)
        peak_own = peak_tree = peak_rest = 0
        while process.poll() is None:
            own, total = tree_rss(watched)
            peak_own, peak_tree, peak_rest = max(peak_own, own), max(peak_tree, total), max(peak_rest, total - own)
            if total > args.cap_mb * 2**20:
                stop_tree(watched)
                process.wait()
                return {"engine": engine, "rows": rows, "failed": f"stopped: the process tree reached "
                        f"{total / 2**20:,.0f} MB, over the {args.cap_mb:,} MB cap"}
            try:
                process.wait(timeout=SAMPLE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        elapsed = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            lines = err.read().decode(errors="replace").strip().splitlines()
            # a worker its nanny restarted over its memory cap says so on the child's standard error
            capped = [line.strip() for line in lines if "memory" in line
                      and ("exceeded" in line or "Restarting" in line)]
            tail = [*capped[:2], *lines[-3:]]
            return {"engine": engine, "rows": rows, "failed": f"exit {process.returncode} after "
                    f"{time.perf_counter() - started:.0f} s, process-tree peak "
                    f"{peak_tree / 2**20:,.0f} MB: {' / '.join(tail)}"}
        result = json.loads(out.read().decode().strip().splitlines()[-1])
    return {**result, "process_seconds": elapsed, "tree_peak_mb": peak_tree / 2**20,
            "sampled_own_peak_mb": peak_own / 2**20, "workers_peak_mb": peak_rest / 2**20}


def stop_tree(process: psutil.Process) -> None:
    """Kill ``process`` and its descendants (a run over the cap)."""
    for p in [*process.children(recursive=True), process]:
        try:
            p.kill()
        except psutil.Error:
            continue


def section(heading: str, results: list[dict[str, Any]], args: argparse.Namespace, skipped: list[int],
            load: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    before, after = (", ".join(f"{x:.2f}" for x in avg) for avg in load)
    lines = [heading, "",
             f"{machine()}; {psutil.virtual_memory().total / 2**30:.0f} GiB of memory, shared with other jobs, so "
             f"wall times are upper bounds; load average (1, 5, 15 min) before {before}, after {after}. Adult schema, "
             f"two owners' CART trees, global models {', '.join(args.models)}; Dask: LocalCluster of {args.workers} "
             f"single-threaded workers on loopback capped at {args.worker_memory_mb:,} MiB each (`worker_memory_mb`), "
             f"started inside the timing; chunks of the {args.budget_mb} MB budget. **Memory cap of the whole process "
             f"tree (miner, scheduler, workers): {args.cap_mb:,} MiB**, enforced by the sampler.", "",
             "| pseudo rows | engine | wall s | s per 10^6 rows | miner peak RSS | process-tree "
             "peak RSS | workers' peak RSS | accuracy |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "failed" in r:
            lines.append(f"| {r['rows']:,} | {r['engine']} | failed: {r['failed']} | | | | | |")
            continue
        accuracy = ", ".join(f"{k} {v:.4f}" for k, v in r["accuracy"].items())
        lines.append(f"| {r['rows']:,} | {r['engine']} | {r['wall']:.1f} | {r['wall'] / r['rows'] * 1e6:.1f} | "
                     f"{r['maxrss_mb']:,.0f} MB | {r['tree_peak_mb']:,.0f} MB | {r['workers_peak_mb']:,.0f} MB | "
                     f"{accuracy} |")
    for rows in skipped:
        lines.append(f"| {rows:,} | local | not run: over --local-max-rows {args.local_max_rows:,} | | | | | |")
    lines += ratios(results)
    engines = "" if args.engines == ["local", "dask"] else f" --engines {' '.join(args.engines)}"
    label = f" --label '{args.label}'" if args.label else ""
    label = (f" --local-max-rows {args.local_max_rows}" if args.local_max_rows != LOCAL_MAX_ROWS else "") + label
    lines += ["", f"`python bench/scale_out.py --rows {' '.join(str(r) for r in args.rows)} --models "
              f"{' '.join(args.models)}{engines} --workers {args.workers} --worker-memory-mb {args.worker_memory_mb} "
              f"--cap-mb {args.cap_mb}{label}`. Miner peak RSS is the mining process's own `ru_maxrss`; the tree "
              "peak is the largest sampled sum over it and its descendants (the Dask workers), the workers' peak the "
              "largest sampled sum over the descendants alone.", ""]
    return "\n".join(lines)


def ratios(results: list[dict[str, Any]]) -> list[str]:
    """Per size, the streamed engine against each `xgboost.dask` matrix run beside it (lines for the section)."""
    done = {(r["rows"], r["engine"]): r for r in results if "failed" not in r}
    out = []
    for (rows, engine), streamed in done.items():
        for other in ("dask-quantile", "dask-dmatrix"):
            base = done.get((rows, other))
            if engine == "dask" and base is not None:
                out.append(f"- {rows:,} rows, dask / {other}: workers' peak "
                           f"{streamed['workers_peak_mb'] / base['workers_peak_mb']:.2f}, process-tree peak "
                           f"{streamed['tree_peak_mb'] / base['tree_peak_mb']:.2f}, wall "
                           f"{streamed['wall'] / base['wall']:.2f}")
    return ["", *out] if out else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--models", nargs="+", default=["gradient-boosting", "naive-bayes"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget-mb", type=int, default=256)
    parser.add_argument("--worker-memory-mb", type=int, default=5120, help="each Dask worker's memory cap (MiB)")
    parser.add_argument("--cap-mb", type=int, default=14336, help="the whole process tree's cap (MiB), enforced")
    parser.add_argument("--label", default="", help="appended to the RESULTS.md heading (a separate section)")
    parser.add_argument("--local-max-rows", type=int, default=LOCAL_MAX_ROWS)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=["local", "dask"])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--child", choices=ENGINES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.rows[0], args)))
        return
    load_before = os.getloadavg()
    results, skipped = [], []
    for rows in args.rows:
        for engine in args.engines:
            if engine == "local" and rows > args.local_max_rows:
                skipped.append(rows)
                continue
            directory = Path(tempfile.mkdtemp(prefix="scale-out-", dir=args.dir))
            try:
                results.append(run(engine, rows, args, directory))
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            print(json.dumps(results[-1]), flush=True)
    if args.label:
        heading = f"{HEADING}, {args.label}"
    elif sorted(args.engines) == ["dask", "local"]:
        heading = HEADING
    elif len(args.engines) == 1:
        heading = f"{HEADING}, {args.engines[0]} engine only"
    else:
        heading = f"{HEADING}, {' against '.join(args.engines)}, {' and '.join(args.models)}"
    write_section(heading, section(heading, results, args, skipped, (load_before, os.getloadavg())))


if __name__ == "__main__":
    main()
