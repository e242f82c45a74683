"""Reading an owner's table file with its schema: the whole-file loader against the streamed reader, and
``modelshare release`` end to end on the file, wall time and peak memory, in one run.

The table is Adult-shaped (`owner_scale.adult_shaped`: ``--rows`` rows drawn from the bundled Adult table, half
of each numeric column's values moved by a little noise), decoded to Adult's text and written as a CSV in chunks
of `WRITE_ROWS` rows, with ``?`` in 2% of the rows' ``native-country`` (dropped by the default missing-value
policy, as Adult's own). At ``--other-sizes`` the same table is also written as ``.csv.gz`` and ``.parquet``. Each
case runs in a fresh child process:

* ``whole-file``: the baseline, ``load_table(path, "income", schema=...)`` then ``Schema.encode``;
* ``streamed``: `modelshare.common.data.datasets.streamed.read_encoded` (blocks of `BLOCK_BYTES`);
* ``release``: ``modelshare release --data FILE --schema S --class-column income --mechanism apt
  --requirement k-anonymity:k=10 --out M`` (which reads with the streamed reader), as a subprocess whose
  resource usage ``os.wait4`` returns.

Measured per child: wall time, peak resident memory (``ru_maxrss``) and, for the readers, the resident memory
after the imports, the rows kept and dropped, and a digest of ``X`` and ``y`` (the two readers must agree). The
whole-file loader is skipped at sizes whose file exceeds ``--whole-file-max-mb`` (its peak at the sizes it ran,
scaled, would pass the memory the brief allows). The machine's load average is read before and after. Results
go to bench/RESULTS.md.

    python bench/table_read.py [--rows 100000 1000000 10000000] [--other-sizes 1000000] [--seed 0]
                               [--whole-file-max-mb 400] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
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


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(case: str, path: Path, schema_path: Path) -> dict[str, Any]:
    """Read ``path`` with ``schema_path`` by the ``case``'s reader in this process."""
    from modelshare.common.data.datasets import load_table
    from modelshare.common.data.datasets.streamed import read_encoded
    from modelshare.common.data.schema import Schema

    schema = Schema.load(schema_path)
    imports_mb = _maxrss_mb()
    started = time.perf_counter()
    if case == "whole-file":
        table = load_table(path, CLASS, schema=schema)
        X, y = schema.encode(table.frame, source=table.source)
        dropped = table.dropped_rows
    else:
        found = read_encoded(path, CLASS, schema=schema)
        X, y, dropped = found.X, found.y, found.dropped_rows
    wall = time.perf_counter() - started
    digest = hashlib.sha256(np.ascontiguousarray(X).tobytes() + y.tobytes()).hexdigest()[:12]
    return {"wall": wall, "maxrss_mb": _maxrss_mb(), "imports_mb": imports_mb, "rows": int(y.shape[0]),
            "dropped": dropped, "digest": digest}


def run_reader(case: str, path: Path, schema_path: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", case, "--file", str(path), "--schema", str(schema_path)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run_release(path: Path, schema_path: Path) -> dict[str, Any]:
    """``modelshare release`` on the file as a child process; its wall time and ``ru_maxrss`` from ``os.wait4``."""
    out = path.with_suffix(".model.json")
    command = [sys.executable, "-m", "modelshare.cli", "release", "--data", str(path), "--schema", str(schema_path),
               *RELEASE, "--out", str(out), "--json"]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True)
        _, status, usage = os.wait4(process.pid, 0)  # reaped here, so that its own resource usage comes back
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        stdout.seek(0)
        stderr.seek(0)
        if process.returncode != 0:
            return {"failed": (stderr.read().strip().splitlines() or [f"exit {process.returncode}"])[-1]}
        summary = json.loads(stdout.read())
    return {"wall": wall, "maxrss_mb": usage.ru_maxrss / 1024, "rows": summary["rows"]}


def _row(rows: int, form: str, size_mb: float, case: str, found: dict[str, Any], base: dict[str, Any] | None) -> str:
    if "failed" in found:
        return f"| {rows:,} | {form} | {size_mb:,.0f} MB | {case} | failed: {found['failed']} | | | | | |"
    if "skipped" in found:
        return f"| {rows:,} | {form} | {size_mb:,.0f} MB | {case} | skipped: {found['skipped']} | | | | | |"
    ratio = (f"{found['wall'] / base['wall']:.2f} / {found['maxrss_mb'] / base['maxrss_mb']:.2f}"
             if base and "wall" in base and case != "whole-file" else "")
    kept = f"{found['rows']:,}" + (f" (+{found['dropped']:,} dropped)" if "dropped" in found else "")
    imports = f"{found['imports_mb']:,.0f} MB" if "imports_mb" in found else ""
    return (f"| {rows:,} | {form} | {size_mb:,.0f} MB | {case} | {found['wall']:.1f} | {found['maxrss_mb']:,.0f} MB | "
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
    parser.add_argument("--child", choices=["whole-file", "streamed"])
    parser.add_argument("--file", type=Path)
    parser.add_argument("--schema", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.file, args.schema)))
        return
    load_before = os.getloadavg()
    lines = []
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for rows in args.rows:
            forms = ["csv", "csv.gz", "parquet"] if rows in args.other_sizes else ["csv"]
            paths, schema_path = write_table(rows, args.seed, Path(folder), forms)
            for form, path in paths.items():
                size_mb = path.stat().st_size / 2**20
                base: dict[str, Any] = (run_reader("whole-file", path, schema_path)
                                        if size_mb <= args.whole_file_max_mb else
                                        {"skipped": f"file over {args.whole_file_max_mb:g} MB"})
                found = {"whole-file": base, "streamed": run_reader("streamed", path, schema_path)}
                if form == "csv":
                    found["release"] = run_release(path, schema_path)
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
        f"missing native-country), each case in its own child process; streamed blocks of {BLOCK_BYTES >> 20} MiB. "
        "Peak RSS is the child's ru_maxrss (for the readers also once the imports are in, before reading); the "
        "ratio is wall time / peak RSS against the whole-file loader on the same file in this run; release is "
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
