"""Encoded rows as compact column codes, and a node's class tables over them: what the C4.5-style growers split on.

`bin_rows` turns checked encoded rows once into one code per row and attribute: a categorical attribute's
code is its category index; a numeric attribute's is the rank of its value among the column's distinct
values, or, for a column of whole numbers over a short range, the value minus the column's least one
(no sort); `bin_cells` gives the public cell index of `common.trees.learners.public_cuts` directly,
without the float copy of the table that `to_cells` makes. Each attribute keeps ``code * classes +
class`` in the smallest unsigned dtype that holds it (a histogram is then one ``np.bincount``), with
the value each code stands for, ascending.

A node's rows are an index array of `index_dtype`. `Binned.table` is the node's code-by-class count
table of an attribute; `Binned.present` the table of the codes present at the node with their values,
what the distinct values of the node's column and ``np.unique`` gave before. Every count is an exact
integer, so the growers score the same candidates with the same floats as on the float rows, and grow
the same trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.data.schema import CategoricalAttribute, NumericAttribute, Schema

__all__ = ["Binned", "bin_cells", "bin_rows", "index_dtype", "tuple_ids"]

_SHORT_RANGE = 1 << 16
"""A whole-number column spanning at most this many values is coded by offset (no sort)."""


def index_dtype(n: int) -> type[np.signedinteger]:
    """The row-index dtype for ``n`` rows: int32 while it holds them, else int64."""
    return np.int32 if n < np.iinfo(np.int32).max else np.int64


def _unsigned(bound: int) -> type[np.unsignedinteger] | type[np.int64]:
    """The smallest unsigned dtype holding 0 .. bound - 1 (int64 past uint32, which np.bincount cannot take)."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if bound <= np.iinfo(dtype).max + 1:
            return dtype
    return np.int64


@dataclass(frozen=True)
class Binned:
    """Rows as per-attribute ``code * k + class`` (``keyed``), the value of each code (``values``) and classes ``y``."""

    keyed: tuple[np.ndarray, ...]
    values: tuple[np.ndarray, ...]
    y: np.ndarray
    k: int

    @property
    def n_rows(self) -> int:
        return int(self.y.shape[0])

    def size(self, j: int) -> int:
        """How many codes attribute ``j`` has."""
        return int(self.values[j].shape[0])

    def all_rows(self) -> np.ndarray:
        """Every row's index, in `index_dtype`."""
        return np.arange(self.n_rows, dtype=index_dtype(self.n_rows))

    def codes(self, j: int, rows: np.ndarray) -> np.ndarray:
        """Attribute ``j``'s code of each of ``rows`` (int64)."""
        return self.keyed[j][rows].astype(np.int64) // self.k

    def counts(self, rows: np.ndarray) -> np.ndarray:
        """Class counts of ``rows`` (float64)."""
        return np.bincount(self.y[rows], minlength=self.k).astype(np.float64)

    def table(self, j: int, rows: np.ndarray) -> np.ndarray:
        """Code-by-class counts of ``rows`` on attribute ``j``, every code (shape ``(size, k)``, int64)."""
        return np.bincount(self.keyed[j][rows], minlength=self.size(j) * self.k).reshape(-1, self.k)

    def present(self, j: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The values of attribute ``j`` present in ``rows`` (ascending) and their code-by-class counts (int64).

        A node with far fewer rows than codes (raw numeric values) is tabled by sorting its keys
        instead of a histogram over every code; both give the same table.
        """
        if self.size(j) <= 4 * rows.size:
            table = self.table(j, rows)
            present = np.flatnonzero(table.sum(axis=1) > 0)
            return self.values[j][present], table[present]
        keys, counts = np.unique(self.keyed[j][rows], return_counts=True)
        codes = keys.astype(np.int64) // self.k
        starts = np.ones(codes.size, dtype=bool)
        starts[1:] = codes[1:] != codes[:-1]
        table = np.zeros((int(starts.sum()), self.k), dtype=np.int64)
        table[np.cumsum(starts) - 1, keys.astype(np.int64) % self.k] = counts
        return self.values[j][codes[starts]], table


def _keyed(codes: np.ndarray, size: int, y: np.ndarray, k: int) -> np.ndarray:
    """``code * k + class`` per row in the smallest dtype that holds ``size * k``."""
    dtype = _unsigned(size * k)
    keyed = codes.astype(dtype)
    keyed *= dtype(k)
    keyed += y.astype(dtype)
    return keyed


def _numeric_codes(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and their values of a numeric column: offsets for whole numbers over a short range, else ranks."""
    low, high = float(column.min()), float(column.max())
    if high - low < _SHORT_RANGE and low == np.floor(low) and bool(np.all(column == np.floor(column))):
        size = int(high - low) + 1
        return (column - low).astype(_unsigned(size)), low + np.arange(size, dtype=np.float64)
    values, inverse = np.unique(column, return_inverse=True)
    return inverse.reshape(-1), values


def _classes(y: np.ndarray, k: int) -> np.ndarray:
    return y.astype(_unsigned(k))


def bin_rows(schema: Schema, X: np.ndarray, y: np.ndarray) -> Binned:
    """Checked encoded rows (`common.trees.learners._data.check_xy`) as column codes (module docstring)."""
    k = schema.n_classes
    keyed, values = [], []
    for j, attribute in enumerate(schema.attributes):
        if isinstance(attribute, CategoricalAttribute):
            codes, levels = X[:, j].astype(np.int64), np.arange(attribute.size, dtype=np.float64)
        else:
            codes, levels = _numeric_codes(X[:, j])
        keyed.append(_keyed(codes, levels.size, y, k))
        values.append(levels)
    return Binned(tuple(keyed), tuple(values), _classes(y, k), k)


def bin_cells(schema: Schema, X: np.ndarray, y: np.ndarray) -> Binned:
    """Checked encoded rows of ``schema`` as the column codes of its `index_schema`: numeric values as public cells.

    A numeric code is the cell index ``searchsorted(cuts, x, side="left")`` (as `to_cells`), its value
    the index as a float, so a grower on these codes splits as on `to_cells` of the rows.
    """
    k = schema.n_classes
    keyed, values = [], []
    for j, attribute in enumerate(schema.attributes):
        if isinstance(attribute, NumericAttribute):
            cuts = attribute.cut_points()
            codes, size = np.searchsorted(cuts, X[:, j], side="left"), cuts.size + 1
        else:
            codes, size = X[:, j].astype(np.int64), attribute.size  # type: ignore[union-attr]
        keyed.append(_keyed(codes, size, y, k))
        values.append(np.arange(size, dtype=np.float64))
    return Binned(tuple(keyed), tuple(values), _classes(y, k), k)


def tuple_ids(binned: Binned, exclude: int) -> np.ndarray:
    """Per row: an id of its codes on every attribute but ``exclude`` (equal ids, equal codes), in `index_dtype`."""
    n = binned.n_rows
    ids, bound = np.zeros(n, dtype=np.int64), 1
    for j in range(len(binned.keyed)):
        if j == exclude:
            continue
        size = binned.size(j)
        if bound * size >= 1 << 62:
            ids = np.unique(ids, return_inverse=True)[1].reshape(-1).astype(np.int64)
            bound = int(ids.max()) + 1
        ids = ids * size + binned.codes(j, slice(None))  # type: ignore[arg-type]
        bound *= size
    return np.unique(ids, return_inverse=True)[1].reshape(-1).astype(index_dtype(n))
