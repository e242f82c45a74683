"""Writing encoded tables to CSV or Parquet, streamed chunk by chunk."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.files import atomic_write_via

__all__ = ["write_table_chunks"]


def write_table_chunks(schema: Schema | RegressionSchema, chunks: Iterable[tuple[np.ndarray, np.ndarray]],
                       path: str | Path) -> int:
    """Decode each ``(X, y)`` chunk with the schema and append it to ``path``; returns rows written.

    The format follows the suffix: ``.parquet``, or CSV (``.csv``, ``.csv.gz``). The file is written
    under a temporary name and renamed at the end, so a failure never leaves a truncated table.
    """
    path = Path(path)
    suffixes = "".join(path.suffixes[-2:]).lower()
    if not (suffixes.endswith(".parquet") or suffixes.endswith(".csv") or suffixes.endswith(".csv.gz")):
        raise ValueError(f"{path}: output must end in .csv, .csv.gz or .parquet")

    def write(tmp: Path) -> int:
        rows = 0
        writer: pq.ParquetWriter | None = None
        try:
            for i, (X, y) in enumerate(chunks):
                frame = schema.decode(X, y)
                if suffixes.endswith(".parquet"):
                    table = pa.Table.from_pandas(frame, preserve_index=False)
                    if writer is None:
                        writer = pq.ParquetWriter(tmp, table.schema)
                    writer.write_table(table)
                else:
                    frame.to_csv(tmp, mode="w" if i == 0 else "a", header=i == 0, index=False,
                                 compression="gzip" if suffixes.endswith(".gz") else None)
                rows += len(frame)
        finally:
            if writer is not None:
                writer.close()
        return rows

    return atomic_write_via(path, write)
