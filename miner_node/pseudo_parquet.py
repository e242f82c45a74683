"""A study's pseudo-data as partitioned Parquet: written owner by owner in chunks that fit a memory budget.

The Dask engine (`miner_node.dask_engine`) learns from these files, and they are what an analyst is
handed by ``modelshare study results ID --pseudo-data`` (the results name the directory). Layout under
the miner's state directory::

    studies/<study id>/pseudo/schema.json              the study's schema (to decode the codes)
    studies/<study id>/pseudo/owner=<owner id>/part-00000.parquet, part-00001.parquet, ...

The ``owner=`` directories are Hive-style partitions, so ``pyarrow.dataset.dataset(DIR, partitioning="hive")``
or ``pandas.read_parquet(DIR)`` reads the owner back as a column. Each file is one chunk of PGEN rows
(`miner_node.tasks.pseudo_chunks`), with schema-typed columns: a categorical attribute as its int32
category code (an index into the schema's categories), an integer attribute as int64, any other numeric
attribute as float64, and the class as its int32 index into the schema's classes (the column named as
the schema's class column). Files carry the schema's JSON in their metadata (key ``modelshare.schema``).

A chunk's rows follow from the memory budget and the table's width (`chunk_rows`): PGEN's float64
matrix, its per-row indices and labels, and the Arrow columns built from them are in memory at once,
never more than one chunk of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.data.schema import CategoricalAttribute, NumericAttribute, Schema

__all__ = ["PSEUDO_DIR", "SCHEMA_KEY", "MIN_CHUNK_ROWS", "PseudoFiles", "chunk_rows", "study_pseudo_dir",
           "arrow_schema", "write_chunk", "write_owner", "read_all"]

PSEUDO_DIR = "pseudo"
SCHEMA_KEY = b"modelshare.schema"
MIN_CHUNK_ROWS = 1 << 12
_ROW_OVERHEAD_BYTES = 32  # PGEN's per-row cell, path and label indices and the class column


@dataclass(frozen=True)
class PseudoFiles:
    """One owner's written pseudo-data: its Parquet files in order and their rows in all."""

    owner_id: str
    files: tuple[Path, ...]
    rows: int


def chunk_rows(schema: Schema, memory_budget_mb: int) -> int:
    """Rows per chunk so that one chunk's PGEN matrix and its Arrow copy fit ``memory_budget_mb`` (at least `MIN_CHUNK_ROWS`).

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
    """The Parquet files' columns: every attribute typed by its kind, then the class index; the schema JSON as metadata."""
    fields = [pa.field(a.name, _arrow_type(a), nullable=False) for a in schema.attributes]
    fields.append(pa.field(schema.class_name, pa.int32(), nullable=False))
    return pa.schema(fields, metadata={SCHEMA_KEY: schema.to_json().encode()})


def _record_batch(schema: Schema, types: pa.Schema, X: np.ndarray, y: np.ndarray) -> pa.RecordBatch:
    """One chunk as typed Arrow columns (PGEN's codes and whole numbers are exact in float64, so the casts lose nothing)."""
    columns = [pa.array(X[:, j].astype(types.field(j).type.to_pandas_dtype(), copy=False))
               for j in range(schema.n_attributes)]
    columns.append(pa.array(y.astype(np.int32, copy=False)))
    return pa.RecordBatch.from_arrays(columns, schema=types)


def write_chunk(path: Path, schema: Schema, types: pa.Schema, X: np.ndarray, y: np.ndarray) -> None:
    """One chunk of encoded rows as one Parquet file with the columns ``types`` (`arrow_schema`) names.

    Only the category codes and the class are dictionary-encoded: numeric columns of PGEN rows are
    uniform draws with few repeats, where trying a dictionary first cost a third of the write time
    (bench/pgen_parquet.py) and saved little space.
    """
    coded = [a.name for a in schema.attributes if isinstance(a, CategoricalAttribute)] + [schema.class_name]
    pq.write_table(pa.Table.from_batches([_record_batch(schema, types, X, y)]), path, use_dictionary=coded)


def write_owner(directory: Path, schema: Schema, owner_id: str,
                chunks: Iterable[tuple[np.ndarray, np.ndarray]]) -> PseudoFiles:
    """Write one owner's chunks as ``directory/owner=<owner_id>/part-NNNNN.parquet``, one file per non-empty chunk.

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
    for X, y in chunks:
        if y.shape[0] == 0:
            continue
        path = target / f"part-{len(files):05d}.parquet"
        write_chunk(path, schema, types, X, y)
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

