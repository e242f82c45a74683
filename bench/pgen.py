"""PGEN throughput against the raw throughput of the same numpy Generator, measured in one run.

For a tree trained on each bundled table (categorical Nursery, mixed Adult), PGEN generates a
large pseudo table; its output values per second (rows x (attributes + class)) are divided by
the values per second of ``Generator.random`` drawing the same number of float64 values. The
ratio is hardware-independent enough to be a target: >= 0.6 on both tables (issue 35; it was 0.5
in issue 21, PGEN keeping up with the writer). Results go to bench/RESULTS.md.

    python bench/pgen.py [--rows 2000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
from collections.abc import Callable

import numpy as np

from modelshare.common.data.datasets import load_dataset
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.miner_node.pgen import pgen

TARGET = 0.6
from results_file import machine, write_section  # noqa: E402 (bench/ is sys.path[0] when run as a script)


def best_seconds(works: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Best wall time of each piece of work over ``repeats`` rounds, the pieces interleaved within a round.

    Interleaving makes every piece see the same swings of load on a shared machine, so a ratio of
    two best times is not decided by which piece happened to run while the machine was idle.
    """
    times: dict[str, list[float]] = {name: [] for name in works}
    for _ in range(repeats):
        for name, work in works.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    return {name: min(t) for name, t in times.items()}


def measure(dataset: str, rows: int, repeats: int) -> dict[str, float]:
    table = load_dataset(dataset)
    X, y = table.schema.encode(table.frame)
    tree = CartTreeClassifier(table.schema, min_samples_leaf=5, random_state=0).fit(X, y).tree_
    values = rows * (table.schema.n_attributes + 1)
    rng = np.random.default_rng(0)
    best = best_seconds({"pgen": lambda: pgen(tree, rows=rows, rng=rng),
                         "shuffled": lambda: pgen(tree, rows=rows, rng=rng, shuffle=True),
                         "raw": lambda: rng.random(values)}, repeats)
    pgen_s, shuffled_s, raw_s = best["pgen"], best["shuffled"], best["raw"]
    return {
        "shuffled_ratio": raw_s / shuffled_s,
        "paths": tree.n_leaves,
        "values": values,
        "pgen_values_per_s": values / pgen_s,
        "raw_values_per_s": values / raw_s,
        "ratio": raw_s / pgen_s,
    }


def write_results(rows: int, repeats: int, results: dict[str, dict[str, float]], load: tuple[float, float]) -> None:
    lines = [
        "## PGEN throughput (bench/pgen.py)",
        "",
        f"`python bench/pgen.py --rows {rows} --repeats {repeats}` on {datetime.date.today()}, "
        f"{machine()}; 1-minute load average "
        f"{load[0]:.1f} before and {load[1]:.1f} after the run (a shared machine; PGEN and its baseline "
        "are timed in the same run). PGEN output values/s over `numpy.random.Generator.random` values/s "
        "for the same number of values, same run, best of repeats (PGEN, shuffled PGEN and the baseline interleaved "
        f"in each round). Target ratio >= {TARGET}. PGEN as the miner "
        "runs it (rows grouped by path); the last column shuffles the rows too, as `modelshare pgen` does for files.",
        "",
        "| tree | paths | values | PGEN values/s | raw Generator values/s | ratio | target met | "
        "ratio with shuffle=True |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} (CART, min leaf 5) | {r['paths']} | {r['values']:,} | {r['pgen_values_per_s']:.3g} | "
            f"{r['raw_values_per_s']:.3g} | {r['ratio']:.3f} | {'yes' if r['ratio'] >= TARGET else 'NO'} | "
            f"{r['shuffled_ratio']:.3f} |"
        )
    section = "\n".join(lines) + "\n"
    write_section("## PGEN throughput (bench/pgen.py)", section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = {name: measure(name, args.rows, args.repeats) for name in ("nursery", "adult")}
    load_after = os.getloadavg()[0]
    for name, r in results.items():
        print(f"{name}: {r['paths']} paths, ratio {r['ratio']:.3f} "
              f"(PGEN {r['pgen_values_per_s']:.3g} values/s, raw {r['raw_values_per_s']:.3g} values/s)")
    write_results(args.rows, args.repeats, results, (load_before, load_after))
    worst = min(r["ratio"] for r in results.values())
    if worst < TARGET:
        raise SystemExit(f"PGEN ratio {worst:.3f} is below the target {TARGET}")


if __name__ == "__main__":
    main()
