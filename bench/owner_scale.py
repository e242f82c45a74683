"""An owner's release on a large table: wall time and peak memory against scikit-learn's CART on the same rows, in
one run.

The table is Adult-shaped: ``--rows`` rows drawn with replacement from the bundled Adult table (seed
``--seed``), each numeric value of half of them moved by a normal draw of 5% of its column's standard
deviation, rounded and clipped to the schema's public range; categories and classes are kept. Per size,
each case runs in a fresh child process that generates the rows column by column, each column kept in the
smallest dtype holding its values exactly (the table as a file holds it: 21 bytes a row of Adult's attributes,
not 112 bytes of float64), then is timed from the local learner's fit to the released tree
(`modelshare.common.mechanisms.release.release`). The learner is fed the encoded rows as float64 chunks of
`CHUNK_ROWS` rows (`OnPublicCuts.fit_chunks`, as a chunked reader of the file would), so it holds only their
public-cell codes, never the float table:

* ``admissible-k``: the admissible learner under ``k-anonymity:k=10`` (counts), then APT;
* ``admissible-cl``: the admissible learner under ``cl-diversity:c=5,l=2`` (hit/miss), then APT and its
  release guard;
* ``multiway-apt``: the multiway learner, then APT to ``k-anonymity:k=10``;
* ``cart``: the reference, scikit-learn's ``DecisionTreeClassifier(min_samples_leaf=10, random_state=0)``
  fitted on the same encoded rows as one float64 matrix (what it needs).

Measured per child: the timed step's wall time, the child's peak resident memory (``ru_maxrss``) and
its resident memory once the rows are generated (the compact table, or cart's float64 matrix), the trained and
released leaves. The machine's load average is read before and after the run. Results go to
bench/RESULTS.md.

    python bench/owner_scale.py [--rows 100000 1000000] [--cases admissible-k admissible-cl multiway-apt cart]
                                [--seed 0] [--label TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from results_file import machine, write_section  # noqa: E402 (bench/ is sys.path[0] when run as a script)

from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import NumericAttribute, Schema

HEADING = "## Owner learners at scale (bench/owner_scale.py)"
CASES: dict[str, tuple[str, str, str]] = {  # case: (learner, requirement, disclosure)
    "admissible-k": ("admissible", "k-anonymity:k=10", "counts"),
    "admissible-cl": ("admissible", "cl-diversity:c=5,l=2", "hit_miss"),
    "multiway-apt": ("multiway", "k-anonymity:k=10", "counts"),
}
REFERENCE = "cart"
CHUNK_ROWS = 1 << 16
"""Rows per float64 chunk the learners are fed (`OnPublicCuts.fit_chunks`)."""


def _compact(column: np.ndarray) -> np.ndarray:
    """``column`` in the smallest integer dtype that holds its values exactly (float64 if they are not whole)."""
    low, high = column.min(), column.max()
    if not np.array_equal(column, np.floor(column)) or low < np.iinfo(np.int64).min or high > np.iinfo(np.int64).max:
        return column
    return column.astype(np.result_type(np.min_scalar_type(int(low)), np.min_scalar_type(int(high))))


def adult_shaped(rows: int, seed: int) -> tuple[Schema, list[np.ndarray], np.ndarray]:
    """``rows`` Adult-shaped encoded rows (module docstring), made and kept column by column, each column in the
    smallest dtype that holds its values exactly: the table as a file would hold it, not as float64 rows."""
    table = load_dataset("adult")
    schema = table.schema
    X, y = schema.encode(table.frame)
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, y.shape[0], rows)
    columns = []
    for j, attribute in enumerate(schema.attributes):
        column = X[drawn, j]
        if isinstance(attribute, NumericAttribute):
            moved = np.flatnonzero(rng.random(rows) < 0.5)
            noise = np.round(rng.normal(0.0, 0.05 * column.std(), moved.size))
            column[moved] = np.clip(column[moved] + noise, attribute.low, attribute.high)
        columns.append(_compact(column))
    return schema, columns, y[drawn]


def float_chunks(columns: list[np.ndarray], y: np.ndarray,
                 size: int = CHUNK_ROWS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The table's encoded rows as float64 chunks of ``size`` rows (what a chunked reader of the file gives)."""
    for start in range(0, y.shape[0], size):
        chunk = np.empty((min(size, y.shape[0] - start), len(columns)), dtype=np.float64)
        for j, column in enumerate(columns):
            chunk[:, j] = column[start:start + size]
        yield chunk, y[start:start + size]


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(case: str, rows: int, seed: int) -> dict[str, Any]:
    """Generate the rows and time the case's release (or the reference's fit) in this process."""
    schema, columns, y = adult_shaped(rows, seed)
    if case == REFERENCE:
        from sklearn.tree import DecisionTreeClassifier

        X = np.empty((rows, len(columns)), dtype=np.float64)
        for j in range(len(columns)):
            X[:, j], columns[j] = columns[j], np.empty(0)  # each compact column dropped once copied
        data_mb = _maxrss_mb()
        started = time.perf_counter()
        fitted = DecisionTreeClassifier(min_samples_leaf=10, random_state=0).fit(X, y)
        wall = time.perf_counter() - started
        return {"wall": wall, "maxrss_mb": _maxrss_mb(), "data_mb": data_mb,
                "trained_leaves": int(fitted.get_n_leaves()), "released_leaves": None}
    from modelshare.common.mechanisms.release import local_learner, release
    from modelshare.common.trees.learners import OnPublicCuts

    data_mb = _maxrss_mb()
    learner, requirement, disclosure = CASES[case]
    started = time.perf_counter()
    local = local_learner(learner, schema, "apt", requirement=requirement, disclosure=disclosure, random_state=0)
    assert isinstance(local, OnPublicCuts)  # apt claims privacy: numeric splits on the public cuts
    trained = local.fit_chunks(float_chunks(columns, y)).tree_
    fitted_at = time.perf_counter()
    released = release("apt", tree=trained, requirement=requirement, disclosure=disclosure)
    wall = time.perf_counter() - started
    return {"wall": wall, "fit": fitted_at - started, "maxrss_mb": _maxrss_mb(), "data_mb": data_mb,
            "trained_leaves": trained.n_leaves, "released_leaves": released.tree.n_leaves}


def run(case: str, rows: int, seed: int) -> dict[str, Any]:
    """One child process; its JSON line, or ``failed`` with the tail of its stderr."""
    done = subprocess.run([sys.executable, __file__, "--child", case, "--rows", str(rows), "--seed", str(seed)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(case: str, rows: int, found: dict[str, Any], reference: dict[str, Any]) -> str:
    if "failed" in found:
        return f"| {rows:,} | {case} | failed: {found['failed']} | | | | | |"
    ratio = "" if case == REFERENCE or "wall" not in reference else f"{found['wall'] / reference['wall']:.2f}"
    fit = f"{found['fit']:.1f}" if "fit" in found else ""
    leaves = f"{found['trained_leaves']:,}" + ("" if found["released_leaves"] is None
                                              else f" -> {found['released_leaves']:,}")
    return (f"| {rows:,} | {case} | {found['wall']:.1f} | {fit} | {ratio} | {found['maxrss_mb']:,.0f} MB | "
            f"{found['data_mb']:,.0f} MB | {leaves} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--cases", nargs="+", choices=[*CASES, REFERENCE], default=[*CASES, REFERENCE])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="", help="appended to the RESULTS.md heading (a separate section)")
    parser.add_argument("--child", choices=[*CASES, REFERENCE])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rows[0], args.seed)))
        return
    load_before = os.getloadavg()
    lines = []
    for rows in args.rows:
        found = {case: run(case, rows, args.seed) for case in [REFERENCE, *(c for c in args.cases if c != REFERENCE)]
                 if case in args.cases or case == REFERENCE}
        for case, result in found.items():
            lines.append(_row(case, rows, result, found[REFERENCE]))
            print(lines[-1], flush=True)
    load_after = os.getloadavg()
    command = "python bench/owner_scale.py " + shlex.join(sys.argv[1:])
    heading = HEADING + (f", {args.label}" if args.label else "")
    section = "\n".join([
        heading, "",
        f"{machine()}. Load average (1, 5, 15 min) before {', '.join(f'{v:.2f}' for v in load_before)}, after "
        f"{', '.join(f'{v:.2f}' for v in load_after)}. Adult-shaped rows (seed {args.seed}); each case in its own "
        "child process; the time is fit plus release (the fit alone beside it), the ratio against cart at the same "
        "size in this run; peak RSS is the child's ru_maxrss, RSS before fit its ru_maxrss once the imports and "
        "the generated table are in.",
        "",
        "| rows | case | wall s | fit s | / cart | peak RSS | RSS before fit | leaves trained -> released |",
        "|---|---|---|---|---|---|---|---|",
        *lines, "",
        f"`{command}`", ""])
    write_section(heading, section)


if __name__ == "__main__":
    main()
