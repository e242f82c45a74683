"""Train a local tree whose numeric splits sit on the schema's public cut points, never on private values.

A learner left to itself splits a numeric attribute at the midpoint of two adjacent training values
(``age <= 76.5`` between 76 and 77): a released threshold then discloses that those two values occur
in the table, and next to a pruned region, one person's value. `OnPublicCuts` trains any of our
learners on the *cell index* of each numeric value instead, where the cells are cut by
`NumericAttribute.cut_points` (declared in the schema, or its even grid): the value x gets index
``searchsorted(cuts, x, side="left")``, so ``index <= k`` holds exactly when ``x <= cuts[k]``. The
learner's thresholds on indices are midpoints k + 0.5 of whole numbers, which map back to the cut
point ``cuts[k]``. The tree routes every training row to the same node as the index tree did, so
its counts are exact; only the choice of thresholds is narrowed to public ones. A learner that grows
on column codes (`BinnedLearner`) is given the cell indices as codes
(`modelshare.common.trees.learners._binned.bin_cells`),
without a float copy of the table; `OnPublicCuts.fit_chunks` takes the table a chunk of rows at a time and keeps
only their codes, so the float table need never exist whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from modelshare.common.data.schema import NumericAttribute, Schema
from modelshare.common.trees.learners._binned import Binned, CellCoder, bin_cells
from modelshare.common.trees.learners._data import check_x, check_xy
from modelshare.common.trees.tree import Edge, Interval, Node, Tree

__all__ = ["OnPublicCuts", "index_schema", "to_cells", "on_public_cuts"]


@runtime_checkable
class BinnedLearner(Protocol):
    """A learner that also grows on binned rows (the multiway and admissible ones): fed public cells directly."""

    def fit_binned(self, binned: Binned) -> Any: ...


def index_schema(schema: Schema) -> Schema:
    """``schema`` with each numeric attribute replaced by its cell index, an integer in [0, number of cuts]."""
    attributes = tuple(NumericAttribute(a.name, 0.0, float(a.cut_points().size), integer=True)
                       if isinstance(a, NumericAttribute) else a for a in schema.attributes)
    return Schema(attributes, schema.class_name, schema.classes, schema.data_derived)


def to_cells(schema: Schema, X: np.ndarray) -> np.ndarray:
    """Encoded rows with every numeric value replaced by its public cell index (module docstring)."""
    cells = np.array(X, dtype=np.float64, copy=True)
    for j, attribute in enumerate(schema.attributes):
        if isinstance(attribute, NumericAttribute):
            cells[:, j] = np.searchsorted(attribute.cut_points(), cells[:, j], side="left")
    return cells


def _cut(attribute: NumericAttribute, end: float) -> float:
    """The cut point an index threshold ``end`` (k + 0.5, or an index k itself) stands for; infinite ends stay."""
    if not math.isfinite(end):
        return end
    cuts = attribute.cut_points()
    k = int(math.floor(end))
    if not 0 <= k < cuts.size:
        raise ValueError(f"index threshold {end} of {attribute.name!r} is outside its {cuts.size} cut points")
    return float(cuts[k])


def on_public_cuts(schema: Schema, tree: Tree) -> Tree:
    """A tree trained on `index_schema` with its numeric thresholds mapped back to ``schema``'s cut points."""
    nodes = []
    for node in tree.nodes:
        edges = node.edges
        attribute = schema.attributes[node.attribute] if node.attribute is not None else None
        if isinstance(attribute, NumericAttribute):
            edges = [Edge(Interval(_cut(attribute, e.constraint.low), _cut(attribute, e.constraint.high),
                                   e.constraint.low_closed, e.constraint.high_closed), e.child)
                     for e in node.edges if isinstance(e.constraint, Interval)]
        nodes.append(Node(node.label, node.hit, node.miss, node.counts, node.attribute, list(edges)))
    return Tree(schema, nodes, tree.disclosure)


class OnPublicCuts:
    """A local learner trained on public cells: ``fit`` then ``tree_`` (module docstring).

    Parameters
    ----------
    build:
        Builds the wrapped learner for a schema (it is given `index_schema` of ``schema``).
    schema:
        The table's public schema; its numeric attributes' `cut_points` are the only thresholds.
    """

    def __init__(self, build: Callable[[Schema], Any], schema: Schema) -> None:
        self.build = build
        self.schema = schema

    def fit(self, X: np.ndarray, y: np.ndarray) -> OnPublicCuts:
        """Train the wrapped learner on the cell indices and keep its tree with public thresholds as ``tree_``."""
        X, y = check_xy(self.schema, X, y)
        learner = self.build(index_schema(self.schema))
        if isinstance(learner, BinnedLearner):
            self.learner_ = learner.fit_binned(bin_cells(self.schema, X, y))
        else:
            self.learner_ = learner.fit(to_cells(self.schema, X), y)
        self.tree_ = on_public_cuts(self.schema, self.learner_.tree_)
        return self

    def fit_chunks(self, chunks: Iterable[tuple[np.ndarray, np.ndarray]]) -> OnPublicCuts:
        """`fit` on a table given as chunks of its rows ``(X, y)`` in order: the same tree as on the rows stacked.

        Each chunk is checked as `fit` checks the whole (a bad value names its row in the whole table) and
        coded to its public cells before the next is asked for (`modelshare.common.trees.learners._binned.CellCoder`),
        so a learner on column codes never holds the table as floats; an owner can read or make a table
        larger than its memory's float copy chunk by chunk. A learner that needs the float rows gets the
        stacked cell indices.

        Raises
        ------
        ValueError
            No rows, or a chunk that does not fit the schema (`SchemaError` naming its row and column).
        """
        learner = self.build(index_schema(self.schema))
        binned = isinstance(learner, BinnedLearner)
        coder, stacked, classes, seen = CellCoder(self.schema), [], [], 0
        for X, y in chunks:
            X, y = check_xy(self.schema, X, y, first_row=seen)
            seen += y.shape[0]
            if binned:
                coder.add(X, y)
            else:
                stacked.append(to_cells(self.schema, X))
                classes.append(y)
        if binned:
            self.learner_ = learner.fit_binned(coder.binned())
        elif not classes:
            raise ValueError("no rows were given; a tree needs at least one training row")
        else:
            self.learner_ = learner.fit(np.concatenate(stacked), np.concatenate(classes))
        self.tree_ = on_public_cuts(self.schema, self.learner_.tree_)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per row, from ``tree_``."""
        return self.tree_.predict(check_x(self.schema, X))
