"""Validation of encoded rows against a schema, shared by the learners."""

from __future__ import annotations

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, Schema, SchemaError

__all__ = ["check_x", "check_xy"]


def check_x(schema: Schema, X: object) -> np.ndarray:
    """``X`` as a float64 matrix with one column per schema attribute (shape checked only)."""
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("X must be in the encoded form (category indices and numbers; see Schema.encode)") from None
    m = schema.n_attributes
    if X.ndim != 2 or X.shape[1] != m:
        raise ValueError(f"X must have shape (rows, {m}), one column per schema attribute; got {X.shape}")
    return X


def check_xy(schema: Schema, X: object, y: object, *, first_row: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Check training rows column by column against the schema; return them as float64 / int64.

    A categorical code must be an integral index into the attribute's categories, a numeric value
    a finite number inside the schema range, a class an index into the schema's classes; the
    `SchemaError` names the column and the first offending row (1-based). ``first_row`` is the
    0-based position of ``X``'s first row in the whole table (a chunk of it), which the row number counts from.
    """
    X = check_x(schema, X)
    if X.shape[0] == 0:
        raise ValueError("X has no rows; a tree needs at least one training row")
    for j, attr in enumerate(schema.attributes):
        column = X[:, j]
        if isinstance(attr, CategoricalAttribute):
            ok = (column == np.floor(column)) & (column >= 0) & (column < attr.size)
            why = f"category codes must be integers in 0..{attr.size - 1}"
        else:
            ok = np.isfinite(column) & (column >= attr.low) & (column <= attr.high)
            why = f"values must be finite numbers in the schema range [{attr.low:g}, {attr.high:g}]"
        _raise_first_bad(ok, column, why, attr.name, first_row)
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), one class index per row of X; got {y.shape}")
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
        raise SchemaError(f"class indices must be numbers; got dtype {y.dtype}", column=schema.class_name)
    ok = (y == np.floor(y)) & (y >= 0) & (y < schema.n_classes)
    _raise_first_bad(ok, y, f"class indices must be integers in 0..{schema.n_classes - 1}",
                     schema.class_name, first_row)
    return X, y.astype(np.int64, copy=False)


def _raise_first_bad(ok: np.ndarray, values: np.ndarray, why: str, column: str, first_row: int = 0) -> None:
    """Raise a `SchemaError` naming ``column`` and the first row
    (counted from ``first_row``) where ``ok`` is False, if any."""
    bad = np.flatnonzero(~ok)
    if bad.size:
        first = int(bad[0])
        raise SchemaError(f"{why}; {bad.size} row(s) affected", row=first_row + first + 1, column=column,
                          value=values[first].item())
