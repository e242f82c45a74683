"""A study's pseudo-data as partitioned Parquet: written owner by owner in chunks that fit a memory budget.

The Dask engine (`modelshare.miner_node.dask_engine`) learns from these files, and they are what an analyst is
handed by ``modelshare study results ID --pseudo-data`` (the results name the directory). Layout under
the miner's state directory::

    studies/<study id>/pseudo/schema.json              the study's schema (to decode the codes)
    studies/<study id>/pseudo/owner=<owner id>/part-00000.parquet, part-00001.parquet, ...

The ``owner=`` directories are Hive-style partitions, so ``pyarrow.dataset.dataset(DIR, partitioning="hive")``
or ``pandas.read_parquet(DIR)`` reads the owner back as a column. Each file is one chunk of PGEN rows
(`modelshare.miner_node.tasks.pseudo_chunks`), with schema-typed columns: a categorical attribute as its int32
category code (an index into the schema's categories), an integer attribute as int64, any other numeric
attribute as float64, the class as its int32 index into the schema's classes (the column named as
the schema's class column), and last ``_released_tree`` (`TREE_COLUMN`, int32): the index of the owner's
released tree the row was drawn from (0 for a single tree; an ensemble's trees in release order), so
that cross-validation can hold out whole released trees. Files carry the schema's JSON in their
metadata (key ``modelshare.schema``).

`sample` reads a bounded, seeded sample of rows back file by file, in batches, for the Dask engine's
``"auto"`` selection: never the whole table.

A chunk's rows follow from the memory budget and the table's width (`chunk_rows`): PGEN's float64
matrix, its per-row indices and labels, and the Arrow columns built from them are in memory at once,
never more than one chunk of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema

__all__ = ["PSEUDO_DIR", "SCHEMA_KEY", "TREE_COLUMN", "MIN_CHUNK_ROWS", "PseudoFiles", "Sample", "chunk_rows",
           "study_pseudo_dir", "arrow_schema", "write_chunk", "write_owner", "read_all", "sample"]

PSEUDO_DIR = "pseudo"
SCHEMA_KEY = b"modelshare.schema"
TREE_COLUMN = "_released_tree"
MIN_CHUNK_ROWS = 1 << 12
_READ_BATCH_ROWS = 1 << 16  # rows `sample` holds of one file at a time
_ROW_OVERHEAD_BYTES = 32  # PGEN's per-row cell, path and label indices and the class column


@dataclass(frozen=True)
class PseudoFiles:
    """One owner's written pseudo-data: its Parquet files in order and their rows in all."""

    owner_id: str
    files: tuple[Path, ...]
    rows: int


def chunk_rows(schema: Schema, memory_budget_mb: int) -> int:
    """Rows per chunk so that one chunk's PGEN matrix and its Arrow
    copy fit ``memory_budget_mb`` (at least `MIN_CHUNK_ROWS`).

    A row costs 8 bytes per attribute in PGEN's float64 matrix, as much again in the typed Arrow
    columns, and about `_ROW_OVERHEAD_BYTES` of indices and labels.
    """
    per_row = 16 * schema.n_attributes + _ROW_OVERHEAD_BYTES
    return max(MIN_CHUNK_ROWS, memory_budget_mb * (1 << 20) // per_row)


def study_pseudo_dir(state_dir: Path, study_id: str) -> Path:
    """Where a study's pseudo-data lives under the miner's state directory."""
    return state_dir / "studies" / study_id / PSEUDO_DIR


def _arrow_type(attr: CategoricalAttribute | NumericAttribute) -> pa.DataType:
    if isinstance(attr, CategoricalAttribute):
        return pa.int32()
    return pa.int64() if attr.integer else pa.float64()


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Parquet files' columns: every attribute typed by its
    kind, the class index, the released tree; the schema as metadata.

    A schema naming an attribute or its class `TREE_COLUMN` is refused (ValueError): the column would be ambiguous.
    """
    if TREE_COLUMN in (*schema.names, schema.class_name):
        raise ValueError(f"the schema names a column {TREE_COLUMN!r}, which the pseudo-data files reserve for "
                         "the released tree of each row; rename it")
    fields = [pa.field(a.name, _arrow_type(a), nullable=False) for a in schema.attributes]
    fields.append(pa.field(schema.class_name, pa.int32(), nullable=False))
    fields.append(pa.field(TREE_COLUMN, pa.int32(), nullable=False))
    return pa.schema(fields, metadata={SCHEMA_KEY: schema.to_json().encode()})


def _record_batch(schema: Schema, types: pa.Schema, X: np.ndarray, y: np.ndarray, tree: int) -> pa.RecordBatch:
    """One chunk as typed Arrow columns (PGEN's codes and whole
    numbers are exact in float64, so the casts lose nothing)."""
    columns = [pa.array(X[:, j].astype(types.field(j).type.to_pandas_dtype(), copy=False))
               for j in range(schema.n_attributes)]
    columns.append(pa.array(y.astype(np.int32, copy=False)))
    columns.append(pa.array(np.full(y.shape[0], tree, dtype=np.int32)))
    return pa.RecordBatch.from_arrays(columns, schema=types)


def write_chunk(path: Path, schema: Schema, types: pa.Schema, X: np.ndarray, y: np.ndarray, tree: int = 0) -> None:
    """One chunk of encoded rows drawn from released tree ``tree`` as one Parquet file with the columns ``types`` names.

    Only the category codes and the class are dictionary-encoded: numeric columns of PGEN rows are
    uniform draws with few repeats, where trying a dictionary first cost a third of the write time
    (bench/pgen_parquet.py) and saved little space.
    """
    coded = [a.name for a in schema.attributes if isinstance(a, CategoricalAttribute)]
    coded += [schema.class_name, TREE_COLUMN]
    pq.write_table(pa.Table.from_batches([_record_batch(schema, types, X, y, tree)]), path, use_dictionary=coded)


def write_owner(directory: Path, schema: Schema, owner_id: str,
                chunks: Iterable[tuple[np.ndarray, np.ndarray, int]]) -> PseudoFiles:
    """Write one owner's chunks ``(X, y, released tree)`` as ``directory/owner=<owner_id>/part-NNNNN.parquet``.

    One file per non-empty chunk (`modelshare.miner_node.tasks.pseudo_tree_chunks` yields them).

    A directory left by an earlier attempt at the same study (a miner restarted mid-mining) is
    replaced, so the files are always those of this run.
    """
    target = directory / f"owner={owner_id}"
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob("part-*.parquet"):
        stale.unlink()
    (directory / "schema.json").write_text(schema.to_json())
    types = arrow_schema(schema)
    files: list[Path] = []
    rows = 0
    for X, y, tree in chunks:
        if y.shape[0] == 0:
            continue
        path = target / f"part-{len(files):05d}.parquet"
        write_chunk(path, schema, types, X, y, tree)
        files.append(path)
        rows += int(y.shape[0])
    return PseudoFiles(owner_id, tuple(files), rows)


def read_all(files: Iterable[Path], schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """The encoded ``(X, y)`` of the given files, pooled in memory (what the local engine would learn from them)."""
    tables = [pq.read_table(f) for f in files]
    if not tables:
        return np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64)
    table = pa.concat_tables(tables)
    X = np.column_stack([table.column(a.name).to_numpy().astype(np.float64) for a in schema.attributes])
    return X, table.column(schema.class_name).to_numpy().astype(np.int64)



class Sample(NamedTuple):
    """Rows sampled from pseudo-data files: encoded ``X``, classes
    ``y``, and per row its ``file`` (index) and released ``tree``."""

    X: np.ndarray
    y: np.ndarray
    file: np.ndarray
    tree: np.ndarray


def sample(files: Sequence[Path], schema: Schema, rows: int, rng: np.random.Generator) -> Sample:
    """``rows`` rows drawn without replacement from all of ``files`` (all of them if they hold fewer), in file order.

    Only the files' row counts (their footers) are read to draw the rows; then each file is read in
    batches of at most `_READ_BATCH_ROWS` rows, keeping only the drawn ones, so the memory is the
    sample's plus one batch, however large the files.
    """
    counts = np.array([pq.ParquetFile(f).metadata.num_rows for f in files], dtype=np.int64)
    total = int(counts.sum())
    drawn = np.arange(total) if total <= rows else np.sort(rng.choice(total, rows, replace=False))
    starts = np.concatenate([[0], np.cumsum(counts)])
    columns = [*schema.names, schema.class_name, TREE_COLUMN]
    parts: list[pa.Table] = []
    file_of: list[np.ndarray] = []
    for k, path in enumerate(files):
        wanted = drawn[np.searchsorted(drawn, starts[k]):np.searchsorted(drawn, starts[k + 1])] - starts[k]
        if wanted.shape[0] == 0:
            continue
        offset = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=_READ_BATCH_ROWS, columns=columns):
            inside = wanted[(wanted >= offset) & (wanted < offset + batch.num_rows)] - offset
            if inside.shape[0]:
                parts.append(pa.Table.from_batches([batch]).take(pa.array(inside)))
                file_of.append(np.full(inside.shape[0], k, dtype=np.int64))
            offset += batch.num_rows
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return Sample(np.empty((0, schema.n_attributes)), empty, empty, empty)
    table = pa.concat_tables(parts)
    X = np.column_stack([table.column(a.name).to_numpy().astype(np.float64) for a in schema.attributes])
    return Sample(X, table.column(schema.class_name).to_numpy().astype(np.int64), np.concatenate(file_of),
                  table.column(TREE_COLUMN).to_numpy().astype(np.int64))
