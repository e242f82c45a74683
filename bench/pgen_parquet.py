"""PGEN time against Parquet-writing time for the same chunks, measured in one run.

A CART tree trained on the bundled Adult table (min_samples_leaf 5, as bench/pgen.py) is regenerated
into ``--rows`` pseudo rows in the chunks the miner's Dask engine streams (`modelshare.miner_node.tasks.pseudo_chunks`,
chunk rows from ``--budget-mb`` by `modelshare.miner_node.pseudo_parquet.chunk_rows`); each chunk is timed twice:
drawing it (PGEN) and writing it as one typed Parquet file (`modelshare.miner_node.pseudo_parquet`, the
miner's writer, `write_chunk`, snappy-compressed). The issue's aim: writing costs no more than PGEN does (ratio write /
PGEN <= 1). Results go to bench/RESULTS.md.

    python bench/pgen_parquet.py [--rows 10000000] [--budget-mb 256] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from results_file import machine, write_section  # noqa: E402 (bench/ is sys.path[0] when run as a script)

from modelshare.common.data.datasets import load_dataset
from modelshare.common.mechanisms.release import release
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.miner_node.pseudo_parquet import arrow_schema, chunk_rows, write_chunk
from modelshare.miner_node.tasks import pseudo_chunks


def measure(rows: int, budget_mb: int, directory: Path) -> dict[str, float]:
    """Seconds spent drawing and writing ``rows`` Adult pseudo rows, chunk by chunk, and the files' size."""
    table = load_dataset("adult")
    schema = table.schema
    X, y = schema.encode(table.frame)
    tree = CartTreeClassifier(schema, min_samples_leaf=5, random_state=0).fit(X, y).tree_
    released = release("none", tree=tree)
    scale = rows / tree.root.total
    step = chunk_rows(schema, budget_mb)
    types = arrow_schema(schema)
    timing = {"pgen": 0.0, "write": 0.0}
    chunks = pseudo_chunks(released.trees, released.report, scale, np.random.default_rng(0), "exact", step)
    files: list[Path] = []
    n = 0
    while True:
        start = time.perf_counter()
        chunk = next(chunks, None)
        drawn = time.perf_counter()
        timing["pgen"] += drawn - start
        if chunk is None:
            break
        files.append(directory / f"part-{len(files):05d}.parquet")
        write_chunk(files[-1], schema, types, *chunk)
        timing["write"] += time.perf_counter() - drawn
        n += int(chunk[1].shape[0])
    size = sum(f.stat().st_size for f in files)
    return {"rows": n, "files": len(files), "chunk_rows": step, "bytes": size,
            "values": n * (schema.n_attributes + 1), **timing}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--budget-mb", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="pgen-parquet-", dir=args.dir))
    try:
        r = measure(args.rows, args.budget_mb, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    ratio = r["write"] / r["pgen"]
    print(f"{r['rows']:,} rows in {r['files']} chunks of <= {r['chunk_rows']:,}: PGEN {r['pgen']:.2f} s "
          f"({r['values'] / r['pgen'] / 1e6:.1f} M values/s), Parquet write {r['write']:.2f} s "
          f"({r['values'] / r['write'] / 1e6:.1f} M values/s, {r['bytes'] / 2**20:.0f} MiB); write / PGEN {ratio:.2f}")
    write_section("## PGEN against Parquet writing (bench/pgen_parquet.py)", "\n".join([
        "## PGEN against Parquet writing (bench/pgen_parquet.py)",
        "",
        f"{machine()}. Adult CART tree (min_samples_leaf 5), {r['rows']:,} pseudo rows in {r['files']} chunks of "
        f"at most {r['chunk_rows']:,} rows (memory budget {args.budget_mb} MB), the same chunks timed while drawn "
        "(PGEN, `pseudo_chunks`) and while written (`write_chunk`: typed Arrow columns, one snappy Parquet file each).",
        "",
        "| step | seconds | values/s |",
        "|---|---|---|",
        f"| PGEN | {r['pgen']:.2f} | {r['values'] / r['pgen'] / 1e6:.1f} M |",
        f"| Parquet write | {r['write']:.2f} | {r['values'] / r['write'] / 1e6:.1f} M |",
        "",
        f"Write / PGEN: **{ratio:.2f}** (aim <= 1); {r['bytes'] / 2**20:.0f} MiB on disk "
        f"({r['bytes'] / r['rows']:.1f} bytes a row). `python bench/pgen_parquet.py --rows {args.rows} "
        f"--budget-mb {args.budget_mb}`; the machine was shared with other jobs (load above its 2 cores), "
        "so both times carry the same contention.",
        "",
    ]))


if __name__ == "__main__":
    main()
