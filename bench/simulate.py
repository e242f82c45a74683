"""Wall time of `modelshare simulate` against the same work done in one process, measured in one run.

``modelshare simulate --dataset adult --owners 10 --json`` runs as a subprocess (a miner and ten
owner processes over mutual TLS on loopback; its JSON is parsed and checked). The baseline is
`modelshare.pipeline.run_fold` on the same 80/20 split in this process: the same ten owners'
tables (the same seeded `stratified_parts` calls, so the very same rows), the same local learner
(multiway, min leaf 1), the same release (APT, hit/miss disclosure), PGEN at the same scale (10),
and the same global models trained on the pooled pseudo-data and, for BASIS, on the pooled raw
rows, then scored on the held-out 20 % -- which is what simulate's miner and its BASIS
comparison do. BASEGEN, which simulate does not run, is switched off. The ratio (simulate wall /
in-process wall) is the price of processes, gRPC, mutual TLS, signing, verification, durable
storage and CSV round trips. Results go to bench/RESULTS.md.

simulate's default requirement for APT, ``cl-diversity:c=5,l=2``, cannot be met by any owner's
tree on Adult (APT prunes every one back to the root, so all ten owners refuse and the study
fails); the bench therefore passes ``--requirement k-anonymity:k=5`` to both sides (override
with ``--requirement``).

    python bench/simulate.py [--requirement k-anonymity:k=5] [--max-depth N] [--repeats 2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).with_name("RESULTS.md")
ROOT = Path(__file__).resolve().parents[1]
SECTION = "## simulate against the in-process pipeline (bench/simulate.py)"
DATASET = "adult"
OWNERS = 10
MODELS = ("decision-tree", "naive-bayes")
SEED = 0
TEST_FRACTION = 0.2
PGEN_SCALE = 10.0


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}, Python {platform.python_version()}"


def simulate_command(requirement: str, max_depth: int | None) -> list[str]:
    cmd = ["modelshare", "simulate", "--dataset", DATASET, "--owners", str(OWNERS), "--requirement", requirement]
    if max_depth is not None:
        cmd += ["--max-depth", str(max_depth)]
    return cmd + ["--json"]


def run_simulate(requirement: str, max_depth: int | None) -> dict:
    """One `modelshare simulate` subprocess: its wall time (interpreter start included) and report."""
    cmd = simulate_command(requirement, max_depth)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "modelshare.cli", *cmd[1:]], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with status {done.returncode}:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout)
    if len(report["owners"]) != OWNERS or not all(o["audit_passed"] for o in report["owners"]):
        raise SystemExit(f"simulate reported {len(report['owners'])} owners / failed audits: {report['owners']}")
    return {"wall": wall, "report": report}


def run_in_process(requirement: str, max_depth: int | None) -> dict:
    """simulate's work in one process: load, split as simulate does, then `run_fold` (BASIS + PGEN)."""
    from common.datasets import load_dataset
    from modelshare.pipeline import PipelineConfig, run_fold, stratified_parts

    start = time.perf_counter()
    table = load_dataset(DATASET)
    schema = table.schema
    X, y = schema.encode(table.frame, source=table.source)
    # simulate: rng = default_rng(seed); test = parts(y, 5) == 0; owners = parts(y[~test], n_owners).
    # run_fold's first draw from rng is that same owners' split, so each owner gets the same rows.
    rng = np.random.default_rng(SEED)
    test = stratified_parts(y, round(1 / TEST_FRACTION), rng) == 0
    params: dict = {"min_samples_leaf": 1}
    if max_depth is not None:
        params["max_depth"] = max_depth
    config = PipelineConfig(n_sources=OWNERS, folds=2, learner="multiway", learner_params=params, mechanism="apt",
                            requirement=requirement, disclosure="hit_miss", global_models=MODELS,
                            methods=("BASIS", "PGEN"), pgen_scale=PGEN_SCALE, seed=SEED)
    records = run_fold(schema, X[~test], y[~test], X[test], y[test], config, rng)
    wall = time.perf_counter() - start
    return {"wall": wall, "records": records}


def measure(requirement: str, max_depth: int | None, repeats: int) -> dict:
    sims, procs = [], []
    for _ in range(repeats):  # interleaved, so drift hits both sides alike
        sims.append(run_simulate(requirement, max_depth))
        procs.append(run_in_process(requirement, max_depth))
        print(f"simulate {sims[-1]['wall']:.1f} s (its own wall_seconds {sims[-1]['report']['wall_seconds']:.1f} s), "
              f"in-process {procs[-1]['wall']:.1f} s", flush=True)
    sim = min(sims, key=lambda r: r["wall"])
    proc = min(procs, key=lambda r: r["wall"])
    pgen = {r["model"]: r for r in proc["records"] if r["method"] == "PGEN"}
    basis = {r["model"]: r for r in proc["records"] if r["method"] == "BASIS"}
    released = next(r["owners_released"] for r in proc["records"] if r["method"] == "PGEN")
    return {
        "sim_wall": sim["wall"],
        "sim_internal": sim["report"]["wall_seconds"],
        "proc_wall": proc["wall"],
        "ratio": sim["wall"] / proc["wall"],
        "sim_models": {m["model"]: m for m in sim["report"]["models"]},
        "proc_pgen": pgen,
        "proc_basis": basis,
        "proc_released": released,
        "sim_pseudo_rows": sum(o["pseudo_rows"] for o in sim["report"]["owners"]),
        "sim_leaves": [o["leaves"] for o in sim["report"]["owners"]],
    }


def write_results(command: str, requirement: str, max_depth: int | None, repeats: int, r: dict) -> None:
    depth = f", max depth {max_depth}" if max_depth is not None else ", no depth limit"
    lines = [
        SECTION,
        "",
        f"`{command}` on {datetime.date.today().isoformat()}, {machine()}. "
        f"Wall time of `{' '.join(simulate_command(requirement, max_depth))}` (a subprocess: 1 miner + {OWNERS} "
        "owner processes, mutual TLS on loopback; interpreter start included) over the wall time of the same work in "
        f"this process (`modelshare.pipeline.run_fold`, methods BASIS + PGEN, multiway min leaf 1{depth}, "
        f"APT {requirement}, hit/miss, PGEN scale {PGEN_SCALE:g}, global models {', '.join(MODELS)}; load + encode + "
        f"the same 80/20 split and owner tables as simulate), same run, best of {repeats}.",
        "",
        "| simulate wall | simulate's own `wall_seconds` | in-process pipeline wall | ratio |",
        "|---:|---:|---:|---:|",
        f"| {r['sim_wall']:.1f} s | {r['sim_internal']:.1f} s | {r['proc_wall']:.1f} s | {r['ratio']:.2f} |",
        "",
        "| global model | simulate PGEN accuracy | in-process PGEN accuracy | BASIS accuracy (simulate / in-process) |",
        "|---|---:|---:|---:|",
    ]
    for name in MODELS:
        s, p, b = r["sim_models"][name], r["proc_pgen"][name], r["proc_basis"][name]
        lines.append(f"| {name} | {s['accuracy']:.4f} | {p['accuracy']:.4f} | {s['basis_accuracy']:.4f} / {b['accuracy']:.4f} |")
    lines += [
        "",
        f"Both sides released {OWNERS} of {OWNERS} owner trees (in-process: {r['proc_released']}); simulate's owners "
        f"kept {min(r['sim_leaves'])}-{max(r['sim_leaves'])} leaves and the miner generated {r['sim_pseudo_rows']:,} "
        "pseudo rows. simulate's default requirement `cl-diversity:c=5,l=2` is not used because no owner's tree on "
        "Adult can meet it (APT prunes every tree to the root; all ten owners refuse and the study fails), hence "
        "`--requirement k-anonymity:k=5` on both sides.",
        "",
        f"Interpretation: the federation costs {r['ratio']:.1f}x the in-process pipeline "
        f"({r['sim_wall'] - r['proc_wall']:.0f} s more): the learning work is the same, the rest is starting "
        f"{OWNERS + 1} Python processes, CSV round trips, provisioning and the owners' poll/submit cycle.",
    ]
    section = "\n".join(lines) + "\n"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nRatios against a baseline measured in the same run.\n\n"
    pattern = re.compile(re.escape(SECTION) + r"\n.*?(?=\n## |\Z)", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requirement", default="k-anonymity:k=5",
                        help="APT requirement for both sides (default k-anonymity:k=5; simulate's own default fails on adult)")
    parser.add_argument("--max-depth", type=int, default=None, help="depth limit of the owners' trees, both sides")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side, interleaved; best is reported")
    parser.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = parser.parse_args()
    r = measure(args.requirement, args.max_depth, args.repeats)
    print(f"simulate {r['sim_wall']:.1f} s, in-process {r['proc_wall']:.1f} s, ratio {r['ratio']:.2f}")
    for name in MODELS:
        print(f"  {name}: simulate PGEN accuracy {r['sim_models'][name]['accuracy']:.4f}, "
              f"in-process {r['proc_pgen'][name]['accuracy']:.4f}")
    if not args.no_write:
        command = "python bench/simulate.py" + "".join(
            f" {flag} {value}" for flag, value in (("--requirement", args.requirement), ("--max-depth", args.max_depth),
                                                   ("--repeats", args.repeats)) if value is not None)
        write_results(command, args.requirement, args.max_depth, args.repeats, r)


if __name__ == "__main__":
    main()
