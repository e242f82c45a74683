"""The learning task of a table: classification (a class column) or regression (a numeric target).

A federation declares its task in the public schema. A classification schema (`Schema`) names
the class column and its classes, exactly as before; a schema file that says
``task = "regression"`` names instead a numeric ``target`` with its public bounds ``low`` and
``high`` and is read as a `modelshare.common.data.regression.RegressionSchema`::

    {"task": "regression",
     "target": {"name": "quality", "low": 0, "high": 10},
     "attributes": [{"name": "alcohol", "type": "numeric", "low": 8, "high": 14.2}, ...]}

The bounds are what the DiffPETs regressor scales the target by (its sensitivities hold for a
target in [0, 1]), so, like every attribute range, they must be public and never read from one
owner's rows. Every existing schema file (no ``task``) stays a classification schema with the same
fingerprint. This module reads either kind (`load_schema`) and loads a regression table for
exploration and simulation (`load_regression_table`), with the target's bounds given explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from modelshare.common.data.datasets.loading import load_table, read_frame
from modelshare.common.data.regression import REGRESSION_TASK, RegressionSchema
from modelshare.common.data.schema import (
    CLASSIFICATION_TASK,
    NumericAttribute,
    Schema,
    SchemaError,
    read_schema_file,
)

__all__ = [
    "AnySchema",
    "CLASSIFICATION_TASK",
    "REGRESSION_TASK",
    "TASKS",
    "LoadedRegressionTable",
    "task_of",
    "schema_from_dict",
    "load_schema",
    "load_regression_table",
]

AnySchema = Schema | RegressionSchema
TASKS = (CLASSIFICATION_TASK, REGRESSION_TASK)


def task_of(schema: AnySchema) -> str:
    """``"regression"`` for a `RegressionSchema`, ``"classification"`` for a `Schema`."""
    return REGRESSION_TASK if isinstance(schema, RegressionSchema) else CLASSIFICATION_TASK


def schema_from_dict(data: Mapping[str, Any], *, source: str | None = None) -> AnySchema:
    """The schema a parsed schema file describes: its ``task`` field picks the kind (default classification)."""
    if data.get("task") == REGRESSION_TASK:
        return RegressionSchema.from_dict(data, source=source)
    return Schema.from_dict(data, source=source)


def load_schema(path: str | Path) -> AnySchema:
    """Read a ``.json`` or ``.toml`` schema file of either task; `SchemaError` names the file and field."""
    return schema_from_dict(read_schema_file(path), source=str(path))


@dataclass(frozen=True)
class LoadedRegressionTable:
    """A regression table encoded with its schema: attributes ``X`` and the float64 target ``y``.

    ``rows`` is each encoded row's 0-based data-row position in the file (rows with a missing
    value are dropped), so scores per row can be joined back to the file.
    """

    X: np.ndarray
    y: np.ndarray
    schema: RegressionSchema
    source: str
    dropped_rows: int
    rows: np.ndarray


def load_regression_table(
    path: str | Path,
    target: str,
    *,
    schema: RegressionSchema | None = None,
    target_range: tuple[float, float] | None = None,
    source: str | None = None,
) -> LoadedRegressionTable:
    """Load and encode a CSV, TSV or Parquet regression table; rows with a missing value are dropped.

    Parameters
    ----------
    path:
        The table file (read by `modelshare.common.data.datasets.loading.read_frame`).
    target:
        The numeric target column.
    schema:
        The public regression schema; every row is checked against it (columns it does not name
        are ignored).
    target_range:
        ``(low, high)``: the target's public bounds, for a schema inferred from the table (its
        attributes' ranges then come from the data, which is for exploration only). Exactly one of
        ``schema`` and ``target_range`` must be given: the bounds are never read from the rows.
    source:
        Label used in errors instead of the path.

    Raises
    ------
    SchemaError
        Both or neither of ``schema`` and ``target_range``, a schema whose target is another
        column, an unreadable table, a missing column, or a value that does not fit (naming row and column).
    """
    label = source or str(path)
    if (schema is None) == (target_range is None):
        raise SchemaError("a regression table needs either its schema or the target's public range (low, high), "
                          "not both", source=label, column=target)
    if schema is None:
        assert target_range is not None
        table = load_table(path, target, source=label)  # infers the attributes; the target is read as text here
        frame, dropped = table.frame, table.dropped_rows
        try:
            low, high = (float(bound) for bound in target_range)
            schema = RegressionSchema(table.schema.attributes, NumericAttribute(target, low, high),
                                      data_derived=True)  # the attributes' ranges and categories come from the rows
        except SchemaError as exc:
            raise SchemaError(exc.why, source=label, column=exc.column) from None
    else:
        if schema.target.name != target:
            raise SchemaError(f"the schema's target column is {schema.target.name!r}, not {target!r}",
                              source=label, column=target)
        raw = read_frame(path, source=label)
        absent = [name for name in (*schema.names, target) if name not in raw.columns]
        if absent:
            raise SchemaError(f"columns {absent} of the schema are missing from the table", source=label,
                              column=absent[0])
        frame = raw[[*schema.names, target]].dropna()
        if frame.empty:
            raise SchemaError("no row without missing values in the schema's columns", source=label)
        dropped = len(raw) - len(frame)
    X, y = schema.encode(frame, source=label)
    return LoadedRegressionTable(X, y, schema, label, dropped, frame.index.to_numpy(dtype=np.int64))
