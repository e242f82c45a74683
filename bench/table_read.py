"""Reading an owner's table file with its schema: the whole-file loader against the streamed reader, and
``modelshare release`` end to end on the file, wall time and peak memory, in one run.

The table is Adult-shaped (`owner_scale.adult_shaped`: ``--rows`` rows drawn from the bundled Adult table, half
of each numeric column's values moved by a little noise), decoded to Adult's text and written, by a child process,
as a CSV in chunks of `WRITE_ROWS` rows, with ``?`` in 2% of the rows' ``native-country`` (dropped by the default
missing-value policy, as Adult's own). At ``--other-sizes`` the same table is also written as ``.csv.gz`` and
``.parquet``. Each case runs in a fresh child process:

* ``whole-file``: the baseline, ``load_table(path, "income", schema=...)`` then ``Schema.encode``;
* ``streamed``: `modelshare.common.data.datasets.streamed.read_encoded` (blocks of `BLOCK_BYTES`);
* ``release``: ``modelshare release --data FILE --schema S --class-column income --mechanism apt
  --requirement k-anonymity:k=10 --out M --json`` through the command's entry point (``modelshare.cli.main``),
  which reads with the streamed reader, trains the admissible learner, applies APT and reports the owner's
  attacks and readers on its rows.

Measured per child: wall time, peak resident memory (``VmHWM``; a child's ``ru_maxrss`` would start at its
parent's resident memory) and, for the readers, the peak once the imports are in, the rows kept and dropped, and
a digest of ``X`` and ``y`` (the two readers must agree). The whole-file loader is skipped on files larger than
``--whole-file-max-mb``. The machine's load average is read before and after. Results go to bench/RESULTS.md.

    python bench/table_read.py [--rows 100000 1000000 10000000] [--other-sizes 1000000] [--seed 0]
                               [--whole-file-max-mb 400] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from owner_scale import adult_shaped  # noqa: E402 (bench/ is sys.path[0] when run as a script)
from results_file import machine, write_section  # noqa: E402

from modelshare.common.data.datasets.streamed import BLOCK_BYTES

HEADING = "## Reading a table file with its schema (bench/table_read.py)"
WRITE_ROWS = 1_000_000
CLASS = "income"
RELEASE = ["--class-column", CLASS, "--mechanism", "apt", "--requirement", "k-anonymity:k=10"]


def write_table(rows: int, seed: int, folder: Path, forms: list[str]) -> tuple[dict[str, Path], Path]:
    """The Adult-shaped table in each of ``forms`` (``csv``, ``csv.gz``, ``parquet``) and its schema file."""
    schema, columns, y = adult_shaped(rows, seed)
    schema_path = folder / "adult.schema.json"
    schema.save(schema_path)
    paths = {form: folder / f"adult-{rows}.{form}" for form in forms}
    rng = np.random.default_rng(seed + 1)
    country = schema.index("native-country")
    writers: dict[str, Any] = {}
    try:
        for start in range(0, rows, WRITE_ROWS):
            stop = min(rows, start + WRITE_ROWS)
            X = np.empty((stop - start, len(columns)), dtype=np.float64)
            for j, column in enumerate(columns):
                X[:, j] = column[start:stop]
            frame = schema.decode(X, y[start:stop]).astype(str)
            frame.iloc[np.flatnonzero(rng.random(stop - start) < 0.02), country] = "?"
            table = pa.Table.from_pandas(frame, preserve_index=False)
            for form, path in paths.items():
                if form not in writers:
                    writers[form] = (pq.ParquetWriter(path, table.schema) if form == "parquet" else
                                     pacsv.CSVWriter(pa.CompressedOutputStream(str(path), "gzip")
                                                     if form == "csv.gz" else str(path), table.schema,
                                                     write_options=pacsv.WriteOptions(quoting_style="none")))
                writers[form].write_table(table)
    finally:
        for writer in writers.values():
            writer.close()
    return paths, schema_path


def _peak_mb() -> float:
    """This process's peak resident memory (``VmHWM``: the ``ru_maxrss`` of a child starts at its parent's
    resident memory at the fork, and so would count the parent's)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def child(case: str, path: Path, schema_path: Path) -> dict[str, Any]:
    """Read ``path`` with ``schema_path`` by the ``case``'s reader in this process."""
    from modelshare.common.data.datasets import load_table
    from modelshare.common.data.datasets.streamed import read_encoded
    from modelshare.common.data.schema import Schema

    schema = Schema.load(schema_path)
    imports_mb = _peak_mb()
    started = time.perf_counter()
    if case == "whole-file":
        table = load_table(path, CLASS, schema=schema)
        X, y = schema.encode(table.frame, source=table.source)
        dropped = table.dropped_rows
    else:
        found = read_encoded(path, CLASS, schema=schema)
        X, y, dropped = found.X, found.y, found.dropped_rows
    wall = time.perf_counter() - started
    digest = hashlib.sha256(memoryview(np.ascontiguousarray(X)))  # no copy of a C-ordered X (both readers give one)
    digest.update(memoryview(np.ascontiguousarray(y)))
    return {"wall": wall, "maxrss_mb": _peak_mb(), "imports_mb": imports_mb, "rows": int(y.shape[0]),
            "dropped": dropped, "digest": digest.hexdigest()[:12]}


def run_child(*options: str) -> dict[str, Any]:
    """One child process of this script; its JSON line, or ``failed`` with the tail of its stderr."""
    done = subprocess.run([sys.executable, __file__, *options], capture_output=True, text=True)
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def release_child(path: Path, schema_path: Path) -> dict[str, Any]:
    """``modelshare release`` on the file through the command's entry point, in this process."""
    import contextlib
    import io

    from modelshare.cli import main as modelshare

    argv = ["release", "--data", str(path), "--schema", str(schema_path), *RELEASE,
            "--out", str(path.with_suffix(".model.json")), "--json"]
    printed = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        code = modelshare(argv)
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"modelshare release exited {code}")
    return {"wall": wall, "maxrss_mb": _peak_mb(), "rows": json.loads(printed.getvalue())["rows"]}


def write_child(rows: int, seed: int, folder: Path, forms: list[str]) -> dict[str, Any]:
    """`write_table` in this process, so that the parent, whose children's memory is measured, stays small."""
    paths, schema_path = write_table(rows, seed, folder, forms)
    return {"paths": {form: str(path) for form, path in paths.items()}, "schema": str(schema_path)}


def _row(rows: int, form: str, size_mb: float, case: str, found: dict[str, Any], base: dict[str, Any] | None) -> str:
    if "failed" in found:
        return f"| {rows:,} | {form} | {size_mb:,.0f} MB | {case} | failed: {found['failed']} | | | | | |"
    if "skipped" in found:
        return f"| {rows:,} | {form} | {size_mb:,.0f} MB | {case} | skipped: {found['skipped']} | | | | | |"
    ratio = (f"{found['wall'] / base['wall']:.2f} / {found['maxrss_mb'] / base['maxrss_mb']:.2f}"
             if base and "wall" in base and case != "whole-file" else "")
    kept = f"{found['rows']:,}" + (f" (+{found['dropped']:,} dropped)" if "dropped" in found else "")
    imports = f"{found['imports_mb']:,.0f} MiB" if "imports_mb" in found else ""
    return (f"| {rows:,} | {form} | {size_mb:,.0f} MB | {case} | {found['wall']:.1f} | {found['maxrss_mb']:,.0f} MiB | "
            f"{imports} | {ratio} | {kept} | {found.get('digest', '')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--other-sizes", type=int, nargs="*", default=[1_000_000],
                        help="sizes also written as .csv.gz and .parquet")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--whole-file-max-mb", type=float, default=400.0,
                        help="skip the whole-file loader on a bigger file (default %(default)s)")
    parser.add_argument("--dir", type=Path, default=None, help="where the files are written (default a temp dir)")
    parser.add_argument("--child", choices=["whole-file", "streamed", "release", "write"])
    parser.add_argument("--file", type=Path)
    parser.add_argument("--schema", type=Path)
    parser.add_argument("--forms", nargs="*", default=["csv"])
    args = parser.parse_args()
    if args.child == "write":
        print(json.dumps(write_child(args.rows[0], args.seed, args.dir, args.forms)))
        return
    if args.child == "release":
        print(json.dumps(release_child(args.file, args.schema)))
        return
    if args.child:
        print(json.dumps(child(args.child, args.file, args.schema)))
        return
    load_before = os.getloadavg()
    lines = []
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for rows in args.rows:
            forms = ["csv", "csv.gz", "parquet"] if rows in args.other_sizes else ["csv"]
            written = run_child("--child", "write", "--rows", str(rows), "--seed", str(args.seed), "--dir", folder,
                                "--forms", *forms)
            if "failed" in written:
                raise SystemExit(f"writing {rows} rows failed: {written['failed']}")
            schema_path = Path(written["schema"])
            for form, name in written["paths"].items():
                path = Path(name)
                size_mb = path.stat().st_size / 2**20
                reading = ("--file", str(path), "--schema", str(schema_path))
                base: dict[str, Any] = (run_child("--child", "whole-file", *reading)
                                        if size_mb <= args.whole_file_max_mb else
                                        {"skipped": f"file over {args.whole_file_max_mb:g} MB"})
                found = {"whole-file": base, "streamed": run_child("--child", "streamed", *reading)}
                if form == "csv":
                    found["release"] = run_child("--child", "release", *reading)
                for case, result in found.items():
                    lines.append(_row(rows, form, size_mb, case, result, base))
                    print(lines[-1], flush=True)
                path.unlink()
    load_after = os.getloadavg()
    command = "python bench/table_read.py " + shlex.join(sys.argv[1:])
    section = "\n".join([
        HEADING, "",
        f"{machine()}. Load average (1, 5, 15 min) before {', '.join(f'{v:.2f}' for v in load_before)}, after "
        f"{', '.join(f'{v:.2f}' for v in load_after)}. Adult-shaped rows (seed {args.seed}, 2% of rows with a "
        f"missing native-country), each case in its own child process; streamed blocks of {BLOCK_BYTES / 2**20:g} MiB. "
        "Peak RSS is the child's VmHWM in MiB (for the readers also once the imports are in, before reading); the "
        "ratio is wall time / peak RSS against the whole-file loader reading the same file in this run (for release: "
        "the whole release against that read alone); release is "
        "`modelshare release --data FILE --schema S " + shlex.join(RELEASE) + "` (streamed reader, admissible "
        "learner, APT) end to end; the digest is of the encoded X and y, equal when the readers agree.",
        "",
        "| rows | file | size | case | wall s | peak RSS | RSS after imports | / whole-file (time / memory) "
        "| rows kept | X, y digest |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *lines, "",
        f"`{command}`", ""])
    write_section(HEADING, section)


if __name__ == "__main__":
    main()
