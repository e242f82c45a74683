"""Column codes and the stacked cut search give what the float rows give: distinct values, tables, tuples, cuts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.trees.learners import _binned
from modelshare.common.trees.learners._binned import CellCoder, bin_cells, bin_rows, dense_ids, tuple_ids
from modelshare.common.trees.learners._growing import best_cuts, first_best, gain_and_split_info, xlog2x
from modelshare.common.trees.learners.public_cuts import to_cells


def _schema(n_classes: int) -> Schema:
    return Schema((CategoricalAttribute("c", ("a", "b", "c")), NumericAttribute("whole", 0.0, 1000.0),
                   NumericAttribute("real", -50.0, 50.0)), "y", tuple(f"k{i}" for i in range(n_classes)))


@st.composite
def _rows(draw):
    """Rows over a category, a whole-number column and a real one, with a subset of them (a node)."""
    n_classes = draw(st.integers(2, 4))
    n = draw(st.integers(2, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    X = np.column_stack([rng.integers(0, 3, n), rng.integers(0, draw(st.sampled_from([3, 40, 1000])), n),
                         np.round(rng.uniform(-50, 50, n), draw(st.integers(0, 3)))]).astype(np.float64)
    y = rng.integers(0, n_classes, n)
    rows = np.flatnonzero(rng.random(n) < draw(st.floats(0.05, 1.0)))
    return _schema(n_classes), X, y, rows if rows.size else np.arange(1)


@settings(max_examples=60, deadline=None)
@given(_rows())
def test_a_nodes_present_values_and_tables_are_those_of_its_float_rows(case) -> None:
    schema, X, y, rows = case
    dense = bin_rows(schema, X, y)
    _binned.DENSE_CODES, kept = 8, _binned.DENSE_CODES  # the wide path: attributes of more codes on their own
    try:
        wide = bin_rows(schema, X, y)
    finally:
        _binned.DENSE_CODES = kept
    for binned, j in ((binned, j) for binned in (dense, wide) for j in range(schema.n_attributes)):
        values, table = binned.node(rows).present(j)
        expected, inverse = np.unique(X[rows, j], return_inverse=True)
        assert np.array_equal(values, expected)
        k = schema.n_classes
        assert np.array_equal(table, np.bincount(inverse * k + y[rows], minlength=expected.size * k).reshape(-1, k))
        assert np.array_equal(binned.values[j][binned.codes(j, rows)], X[rows, j])
        assert np.array_equal(binned.table(j, rows), binned.node(rows).table(j))
    assert np.array_equal(binned.counts(rows), np.bincount(y[rows], minlength=schema.n_classes))


@settings(max_examples=40, deadline=None)
@given(_rows())
def test_public_cells_bin_as_to_cells_does(case) -> None:
    schema, X, y, rows = case
    binned, cells = bin_cells(schema, X, y), to_cells(schema, X)
    for j in range(schema.n_attributes):
        assert np.array_equal(binned.values[j][binned.codes(j, rows)], cells[rows, j])


@settings(max_examples=40, deadline=None)
@given(_rows(), st.data())
def test_cells_coded_chunk_by_chunk_bin_as_the_whole_rows_do(case, data) -> None:
    schema, X, y, rows = case
    ends = sorted(set(data.draw(st.lists(st.integers(1, X.shape[0] - 1), max_size=5)))) + [X.shape[0]]
    coder, start = CellCoder(schema), 0
    for end in ends:
        coder.add(X[start:end], y[start:end])
        start = end
    chunked, whole = coder.binned(), bin_cells(schema, X, y)
    assert np.array_equal(chunked.dense, whole.dense) and np.array_equal(chunked.y, whole.y)
    assert (chunked.column, chunked.cell, chunked.wide.keys()) == (whole.column, whole.cell, whole.wide.keys())
    assert all(np.array_equal(a, b) for a, b in zip(chunked.values, whole.values, strict=True))
    with pytest.raises(ValueError, match="no rows were added"):
        CellCoder(schema).binned()


@given(st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=200), st.sampled_from([np.int64, np.int32]))
def test_dense_ids_are_np_uniques_inverse(values, dtype) -> None:
    keys = np.array(values, dtype=np.int64)
    keys = keys.astype(dtype) if dtype is np.int64 else (keys % 1000).astype(dtype)
    assert np.array_equal(dense_ids(keys), np.unique(keys, return_inverse=True)[1].reshape(-1))


@settings(max_examples=40, deadline=None)
@given(_rows())
def test_tuple_ids_tell_rows_apart_as_their_other_values_do(case) -> None:
    schema, X, y, _ = case
    binned = bin_rows(schema, X, y)
    for j in range(schema.n_attributes):
        expected = np.unique(np.delete(X, j, axis=1), axis=0, return_inverse=True)[1].reshape(-1)
        found = tuple_ids(binned, j)
        pairs = np.unique(np.column_stack([expected, found]), axis=0)
        assert len(pairs) == len(np.unique(expected)) == len(np.unique(found))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(2, 4), st.integers(1, 30))
def test_stacked_cut_search_picks_each_tables_own_best_cut(seed: int, n_tables: int, k: int, floor: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 200))
    tables = []
    for _ in range(n_tables):  # each a partition of the same n rows over some values
        values = rng.integers(1, 12)
        tables.append(np.bincount(rng.integers(0, values, n) * k + rng.integers(0, k, n),
                                  minlength=values * k).reshape(values, k).astype(np.float64))
    counts = tables[0].sum(axis=0)
    parent = float(xlog2x(counts).sum())

    def admissible(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return (left.sum(axis=1) >= floor) & (right.sum(axis=1) >= floor)

    found = best_cuts(tables, n, parent, admissible)
    for table, got in zip(tables, found, strict=False):
        left = np.cumsum(table, axis=0)[:-1]
        right = table.sum(axis=0) - left
        positions = np.flatnonzero(admissible(left, right))
        if positions.size == 0:
            assert got is None
            continue
        gain, split_info = gain_and_split_info(np.stack([left[positions], right[positions]], axis=1), n, parent)
        best = first_best(gain)
        assert got == (int(positions[best]), float(gain[best]), float(split_info[best]))
