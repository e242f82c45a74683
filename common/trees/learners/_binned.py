"""Encoded rows as compact column codes, and a node's class tables over them: what the C4.5-style growers split on.

`bin_rows` turns checked encoded rows once into one code per row and attribute: a categorical attribute's
code is its category index; a numeric attribute's is the rank of its value among the column's distinct
values, or, for a column of whole numbers over a short range, the value minus the column's least one
(no sort); `bin_cells` gives the public cell index of `modelshare.common.trees.learners.public_cuts` directly,
without the float copy of the table that `to_cells` makes, and `CellCoder` does so a chunk of rows at a time,
so that a table read or made in chunks is held only as codes. Each code keeps the value it stands for,
ascending. An attribute of at most `DENSE_CODES` codes (every categorical and public-cell one) is a
column of one row-major matrix of ``(its first cell + code) * classes + class`` in the smallest unsigned
dtype that holds them, so that one ``np.bincount`` over a node's rows of it tables every such attribute
at once (`Binned.node`); a wider one (raw values) keeps ``code * classes + class`` on its own and is
tabled by a sort where the node has far fewer rows than codes.

A node's rows are an index array of `index_dtype`. `NodeTables.table` is the node's code-by-class
count table of an attribute; `NodeTables.present` the table of the codes present at the node with their
values, what the distinct values of the node's column and ``np.unique`` gave before. Every count is an
exact integer, so the growers score the same candidates with the same floats as on the float rows, and
grow the same trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema

__all__ = ["DENSE_CODES", "Binned", "CellCoder", "NodeTables", "bin_cells", "bin_rows", "dense_ids",
           "index_dtype", "tuple_ids"]

_SHORT_RANGE = 1 << 16
"""A whole-number column spanning at most this many values is coded by offset (no sort)."""

DENSE_CODES = 4096
"""Attributes with at most this many codes are tabled together, by one histogram per node."""

_CHUNK_ROWS = 1 << 16
"""Rows are cut to public cells, and a node's dense keys histogrammed, this many at a time."""


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
    """Binned rows (module docstring): ``dense`` keys, per attribute its ``column`` there (-1: wide) and first
    ``cell``, the ``wide`` attributes' keys, the ``values`` of each attribute's codes, classes ``y``."""

    dense: np.ndarray
    column: tuple[int, ...]
    cell: tuple[int, ...]
    wide: dict[int, np.ndarray]
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

    def codes(self, j: int, rows: np.ndarray | slice) -> np.ndarray:
        """Attribute ``j``'s code of each of ``rows``, in its keys' unsigned dtype."""
        keys = self.wide[j][rows] if self.column[j] < 0 else self.dense[rows, self.column[j]]
        codes: np.ndarray = keys // keys.dtype.type(self.k)
        if self.column[j] >= 0:
            codes -= keys.dtype.type(self.cell[j])
        return codes

    def counts(self, rows: np.ndarray) -> np.ndarray:
        """Class counts of ``rows`` (float64)."""
        return np.bincount(self.y[rows], minlength=self.k).astype(np.float64)

    def table(self, j: int, rows: np.ndarray) -> np.ndarray:
        """Code-by-class counts of ``rows`` on attribute ``j``, every code (shape ``(size, k)``, int64)."""
        keys = self.codes(j, rows).astype(np.int64) * self.k + self.y[rows]
        return np.bincount(keys, minlength=self.size(j) * self.k).reshape(-1, self.k)

    def node(self, rows: np.ndarray) -> NodeTables:
        """The class tables of a node's ``rows``: every dense attribute's from one histogram."""
        if not self.dense.shape[1]:
            return NodeTables(self, rows, None)
        cells = self.cell[-1] + (self.size(len(self.values) - 1) if self.column[-1] >= 0 else 0)
        counts = np.zeros(cells * self.k, dtype=np.int64)
        for start in range(0, rows.size, _CHUNK_ROWS):  # bounds np.bincount's intp copy of the keys
            counts += np.bincount(self.dense[rows[start:start + _CHUNK_ROWS]].reshape(-1), minlength=counts.size)
        return NodeTables(self, rows, counts.reshape(-1, self.k))


@dataclass(frozen=True)
class NodeTables:
    """One node's class tables over its ``rows``; ``histogram`` is every dense attribute's, cell by class."""

    binned: Binned
    rows: np.ndarray
    histogram: np.ndarray | None

    def table(self, j: int) -> np.ndarray:
        """Code-by-class counts of attribute ``j`` at the node, every code (shape ``(size, k)``, int64)."""
        binned = self.binned
        if binned.column[j] < 0:
            return np.bincount(binned.wide[j][self.rows], minlength=binned.size(j) * binned.k).reshape(-1, binned.k)
        assert self.histogram is not None
        return self.histogram[binned.cell[j]:binned.cell[j] + binned.size(j)]

    def present(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """The values of attribute ``j`` present at the node (ascending) and their code-by-class counts (int64).

        A wide attribute at a node with far fewer rows than codes is tabled by sorting its keys instead
        of a histogram over every code; both give the same table.
        """
        binned, rows = self.binned, self.rows
        if binned.column[j] >= 0 or binned.size(j) <= 4 * rows.size:
            table = self.table(j)
            present = np.flatnonzero(table.sum(axis=1) > 0)
            return binned.values[j][present], table[present]
        keys, counts = np.unique(binned.wide[j][rows], return_counts=True)
        codes = keys.astype(np.int64) // binned.k
        starts = np.ones(codes.size, dtype=bool)
        starts[1:] = codes[1:] != codes[:-1]
        table = np.zeros((int(starts.sum()), binned.k), dtype=np.int64)
        table[np.cumsum(starts) - 1, keys.astype(np.int64) % binned.k] = counts
        return binned.values[j][codes[starts]], table


def _numeric_codes(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and their values of a numeric column: offsets for whole numbers over a short range, else ranks."""
    low, high = float(column.min()), float(column.max())
    if high - low < _SHORT_RANGE and low == np.floor(low) and bool(np.all(column == np.floor(column))):
        size = int(high - low) + 1
        return (column - low).astype(_unsigned(size)), low + np.arange(size, dtype=np.float64)
    values, inverse = np.unique(column, return_inverse=True)
    return inverse.reshape(-1).astype(_unsigned(values.size)), values


def _binned(coded: list[tuple[list[np.ndarray], np.ndarray]], classes: list[np.ndarray], k: int) -> Binned:
    """Rows from each attribute's (codes in parts of rows, values) and the classes in the same parts: the dense
    attributes keyed into one matrix, the wide on their own. Each attribute's parts are emptied once keyed, so
    the codes and the keys are not held twice."""
    dense_of = [j for j, (_, values) in enumerate(coded) if values.size <= DENSE_CODES]
    cells, cell, column = 0, [], []
    for j, (_, values) in enumerate(coded):
        column.append(dense_of.index(j) if j in dense_of else -1)
        cell.append(cells)
        cells += values.size if j in dense_of else 0
    dtype = _unsigned(cells * k)
    ends = np.cumsum([0, *(part.shape[0] for part in classes)])
    dense = np.empty((int(ends[-1]), len(dense_of)), dtype=dtype)
    wide = {}
    for j, (parts, values) in enumerate(coded):
        key_dtype = dtype if column[j] >= 0 else _unsigned(values.size * k)
        into = dense[:, column[j]] if column[j] >= 0 else np.empty(int(ends[-1]), dtype=key_dtype)
        for start, codes, part_classes in zip(ends[:-1], parts, classes, strict=True):
            keys = codes.astype(key_dtype)
            if column[j] >= 0:
                keys += key_dtype(cell[j])
            keys *= key_dtype(k)
            keys += part_classes.astype(key_dtype)
            into[start:start + keys.shape[0]] = keys
        parts.clear()
        if column[j] < 0:
            wide[j] = into
    y = (classes[0] if len(classes) == 1 else np.concatenate(classes)).astype(_unsigned(k), copy=False)
    return Binned(dense, tuple(column), tuple(cell), wide, tuple(values for _, values in coded), y, k)


def bin_rows(schema: Schema, X: np.ndarray, y: np.ndarray) -> Binned:
    """Checked encoded rows (`modelshare.common.trees.learners._data.check_xy`) as column codes (module docstring)."""
    coded = [([X[:, j].astype(_unsigned(a.size))], np.arange(a.size, dtype=np.float64))
             if isinstance(a, CategoricalAttribute) else _single(_numeric_codes(X[:, j]))
             for j, a in enumerate(schema.attributes)]
    return _binned(coded, [y], schema.n_classes)


def _single(coded: tuple[np.ndarray, np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    return [coded[0]], coded[1]


def _cell_codes(attribute: NumericAttribute | CategoricalAttribute, column: np.ndarray) -> np.ndarray:
    """A column's public cell codes: a numeric value's cell index
    ``searchsorted(cuts, x, side="left")``, a category's index."""
    if isinstance(attribute, CategoricalAttribute):
        return column.astype(_unsigned(attribute.size))
    cuts = attribute.cut_points()
    codes = np.empty(column.shape[0], dtype=_unsigned(cuts.size + 1))
    for start in range(0, column.shape[0], _CHUNK_ROWS):  # no int64 copy of the whole column
        codes[start:start + _CHUNK_ROWS] = np.searchsorted(cuts, column[start:start + _CHUNK_ROWS], side="left")
    return codes


class CellCoder:
    """Checked encoded rows of a schema coded to public cells a chunk of rows at a time, then binned once.

    `add` keeps only each chunk's codes (one or two bytes a value) and classes, so a table read or made in
    chunks is never held as floats; `binned` gives what `bin_cells` gives on the chunks stacked, and may be
    called once (the parts are handed over to it and emptied).
    """

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.n_rows = 0
        self._parts: list[list[np.ndarray]] = [[] for _ in schema.attributes]
        self._classes: list[np.ndarray] = []

    def add(self, X: np.ndarray, y: np.ndarray) -> None:
        """Code checked rows ``X`` (float64, one column per attribute) with their classes ``y``."""
        for j, attribute in enumerate(self.schema.attributes):
            self._parts[j].append(_cell_codes(attribute, X[:, j]))
        self._classes.append(y.astype(_unsigned(self.schema.n_classes)))
        self.n_rows += int(y.shape[0])

    def binned(self) -> Binned:
        """Every row added, as the column codes of `index_schema` (`bin_cells`)."""
        if not self.n_rows:
            raise ValueError("no rows were added; a tree needs at least one training row")
        cells = [np.arange(a.cut_points().size + 1 if isinstance(a, NumericAttribute) else a.size, dtype=np.float64)
                 for a in self.schema.attributes]
        parts, classes, self._parts, self._classes = self._parts, self._classes, [], []
        return _binned(list(zip(parts, cells, strict=True)), classes, self.schema.n_classes)


def bin_cells(schema: Schema, X: np.ndarray, y: np.ndarray) -> Binned:
    """Checked encoded rows of ``schema`` as the column codes of its `index_schema`: numeric values as public cells.

    A numeric code is the cell index ``searchsorted(cuts, x, side="left")`` (as `to_cells`), its value
    the index as a float, so a grower on these codes splits as on `to_cells` of the rows.
    """
    coder = CellCoder(schema)
    coder.add(X, y)
    return coder.binned()


def dense_ids(keys: np.ndarray) -> np.ndarray:
    """Per key: the rank of its value among the distinct values of ``keys`` (``np.unique``'s inverse), in `index_dtype`.

    One argsort and one sorted copy of ``keys``; ``np.unique(..., return_inverse=True)`` holds about three
    more int64 arrays of their length at once, which at 10^7 rows is most of the (c,l) grower's peak.
    """
    n = keys.shape[0]
    order = np.argsort(keys)
    ordered = keys[order]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    del ordered
    ranks = np.cumsum(new, dtype=index_dtype(n))
    ranks -= 1
    ids = np.empty(n, dtype=ranks.dtype)
    ids[order] = ranks
    return ids


def tuple_ids(binned: Binned, exclude: int) -> np.ndarray:
    """Per row: an id of its codes on every attribute but ``exclude`` (equal ids, equal codes), in `index_dtype`."""
    n = binned.n_rows
    ids, bound = np.zeros(n, dtype=np.int64), 1
    for j in range(len(binned.values)):
        if j == exclude:
            continue
        size = binned.size(j)
        if bound * size >= 1 << 62:
            ids = dense_ids(ids).astype(np.int64)
            bound = int(ids.max()) + 1
        ids *= size
        ids += binned.codes(j, slice(None))
        bound *= size
    return dense_ids(ids)
