"""Multiway categorical decision trees in the style of Quinlan's C4.5, without pruning.

An owner trains this learner on its private table and releases the tree. A categorical split
has one child per category of the schema, and a categorical attribute is used at most once on a
path, so every root-to-leaf path reads like a quasi-identifier group of an anonymized table: a
conjunction of ``attribute = category`` terms (plus intervals for numeric attributes) with the
class counts of the rows in it. That shape is what the privacy measures and PGEN expect, which
is why the learner is not a binary CART and why it does not prune (pruning would merge groups
after the fact and blur what a path discloses).

Rows use the encoded form of `modelshare.common.data.schema`: ``X`` is float64 with category indices in
categorical columns and values in numeric columns, ``y`` holds class indices; the learner grows on
their column codes (`modelshare.common.trees.learners._binned`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from modelshare.common.data.schema import Schema
from modelshare.common.params import check_choice, check_nonnegative_real, check_positive_int
from modelshare.common.trees.learners._binned import Binned, bin_rows
from modelshare.common.trees.learners._data import check_x, check_xy
from modelshare.common.trees.learners._growing import (
    CRITERIA,
    GrowerBase,
    best_cuts,
    gain_and_split_info,
    midpoint,
    xlog2x,
)
from modelshare.common.trees.learners._params import check_schema
from modelshare.common.trees.tree import CategorySet, Constraint, Edge, Interval, Node, Tree

__all__ = ["CRITERIA", "MultiwayTreeClassifier"]

@dataclass(frozen=True)
class _Split:
    """An admissible split of one node: attribute, quality, and threshold for numeric attributes."""

    attribute: int
    gain: float
    split_info: float
    threshold: float | None


class MultiwayTreeClassifier(ClassifierMixin, BaseEstimator):
    """C4.5-style decision tree with one child per category and binary numeric thresholds.

    The tree is grown greedily without pruning. At each node every admissible split is scored;
    a categorical split has a child for every category of the schema (categories absent at the
    node get an empty leaf labelled with the node's majority class, so a released path never
    hides which categories exist), and a categorical attribute is never split twice on a path.
    A numeric split is ``x <= t`` / ``x > t`` at the midpoint ``t`` between consecutive distinct
    values at the node; numeric attributes may be split again deeper down.

    Parameters
    ----------
    schema:
        The schema the encoded rows and the released tree refer to.
    criterion:
        ``"gain_ratio"`` (C4.5: among attributes whose gain is at least the average gain of the
        attributes with positive gain, take the highest gain / split information) or
        ``"info_gain"`` (the highest information gain, ID3's rule, which favours attributes
        with many categories).
    max_depth:
        Maximum depth of the tree (the root has depth 0); None grows until the other rules stop.
    min_samples_leaf:
        C4.5's minimum number of cases: a split is admissible only if at least two children get
        that many rows (for numeric thresholds, both sides must), and a node with fewer than
        twice that many rows is a leaf.
    min_gain:
        A split whose information gain is below this many bits is not made.

    Attributes
    ----------
    tree_ : Tree
        The fitted tree, with ``"counts"`` disclosure.
    classes_ : numpy.ndarray
        The class indices ``0 .. n_classes - 1`` that `predict` returns; their names are
        ``schema.classes``.
    n_features_in_ : int
        Number of attributes of the schema.
    """

    def __init__(
        self,
        schema: Schema,
        *,
        criterion: str = "gain_ratio",
        max_depth: int | None = None,
        min_samples_leaf: int = 2,
        min_gain: float = 1e-9,
    ) -> None:
        self.schema = schema
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.min_gain = min_gain

    # ------------------------------------------------------------------ fit
    def fit(self, X: np.ndarray, y: np.ndarray) -> MultiwayTreeClassifier:
        """Grow the tree on encoded rows and store it as ``tree_``.

        Parameters
        ----------
        X:
            Encoded attributes, shape ``(rows, schema.n_attributes)``.
        y:
            Class indices, shape ``(rows,)``.

        Returns
        -------
        MultiwayTreeClassifier
            ``self``, fitted.

        Raises
        ------
        ValueError
            A parameter is invalid (`ParameterError`, naming it), or ``X``/``y`` do not fit the
            schema (`SchemaError` naming the column and the first offending row).
        """
        self._settings()  # a bad parameter is named before a bad row
        X, y = check_xy(self.schema, X, y)
        return self.fit_binned(bin_rows(self.schema, X, y))

    def fit_binned(self, binned: Binned) -> MultiwayTreeClassifier:
        """`fit` on rows already binned for ``schema``
        (`modelshare.common.trees.learners._binned.bin_rows` or `bin_cells`)."""
        grower = _Grower(self.schema, binned, *self._settings())
        self.tree_ = Tree(self.schema, grower.grow(), "counts")
        self.classes_ = np.arange(self.schema.n_classes, dtype=np.int64)
        self.n_features_in_ = self.schema.n_attributes
        return self

    def _settings(self) -> tuple[str, int | None, int, float]:
        """The checked parameters: criterion, max_depth, min_samples_leaf, min_gain."""
        check_schema(self.schema)
        return (check_choice("criterion", self.criterion, CRITERIA),
                check_positive_int("max_depth", self.max_depth, allow_none=True),
                check_positive_int("min_samples_leaf", self.min_samples_leaf),
                check_nonnegative_real("min_gain", self.min_gain))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per row: the label of the node where the row stops in ``tree_``.

        Rows are not checked against the schema beyond their shape: a row with an unknown
        category or a NaN stops at the inner node no edge admits it from and gets its label.
        """
        check_is_fitted(self, "tree_")
        return self.tree_.predict(check_x(self.schema, X))


class _Grower(GrowerBase):
    """One fit's state: grows the node list depth-first with an explicit stack (no recursion limit)."""

    def __init__(self, schema: Schema, binned: Binned, criterion: str, max_depth: int | None,
                 min_samples_leaf: int, min_gain: float) -> None:
        super().__init__(schema, binned, criterion, max_depth, min_gain)
        self.min_samples_leaf = min_samples_leaf

    def grow(self) -> list[Node]:
        """Build and return the nodes; node 0 is the root, siblings get consecutive indices."""
        root_rows = self.binned.all_rows()
        nodes = [Node.from_counts(self._counts(root_rows))]
        # (node index, its training rows, its depth, attributes still usable on its path)
        stack = [(0, root_rows, 0, np.ones(self.schema.n_attributes, dtype=bool))]
        while stack:
            index, rows, depth, usable = stack.pop()
            node = nodes[index]
            split = (None if self._is_leaf(node, rows.size, depth)
                     else self._best_split(rows, node.class_counts(), usable))
            if split is None:
                continue
            node.attribute = split.attribute
            child_usable = usable
            if self.categorical[split.attribute]:
                child_usable = usable.copy()
                child_usable[split.attribute] = False
            pending = []
            for constraint, child_rows in self._partition(split, rows):
                child = len(nodes)
                if child_rows.size:
                    nodes.append(Node.from_counts(self._counts(child_rows)))
                    pending.append((child, child_rows, depth + 1, child_usable))
                else:
                    nodes.append(Node.from_counts(np.zeros(self.k), label=node.label))
                node.edges.append(Edge(constraint, child))
            stack.extend(reversed(pending))
        return nodes

    def _is_leaf(self, node: Node, n: int, depth: int) -> bool:
        """The stopping rules that need no split search: purity, too few rows, depth limit."""
        pure = np.count_nonzero(node.class_counts()) <= 1
        too_small = n < 2 * self.min_samples_leaf
        too_deep = self.max_depth is not None and depth >= self.max_depth
        return bool(pure or too_small or too_deep)

    def _partition(self, split: _Split, rows: np.ndarray) -> list[tuple[Constraint, np.ndarray]]:
        """The split's edge constraints with the rows each child receives, in edge order."""
        j = split.attribute
        codes = self.binned.codes(j, rows)
        if split.threshold is None:
            size = self.binned.size(j)
            order = np.argsort(codes, kind="stable")
            bounds = np.cumsum(np.bincount(codes, minlength=size))[:-1]
            groups = np.split(rows[order], bounds)
            return [(CategorySet(frozenset({code})), groups[code]) for code in range(size)]
        t = split.threshold
        left = codes <= np.searchsorted(self.binned.values[j], t, side="right") - 1
        return [
            (Interval(-math.inf, t, low_closed=False, high_closed=True), rows[left]),
            (Interval(t, math.inf, low_closed=False, high_closed=False), rows[~left]),
        ]

    def _best_split(self, rows: np.ndarray, counts: np.ndarray, usable: np.ndarray) -> _Split | None:
        """The split the criterion picks among admissible ones with gain >= min_gain, or None.

        Every numeric attribute's thresholds are searched at once (`best_cuts`): the thresholds lie between
        consecutive distinct values at the node, each side holding at least ``min_samples_leaf`` rows. As in
        C4.5 the threshold is chosen by gain (the lowest one on ties) and the attribute then competes with
        that threshold's gain and split information.
        """
        parent_cells = float(xlog2x(counts).sum())
        node = self.binned.node(rows)
        numeric: dict[int, np.ndarray] = {}  # attribute: the distinct values at the node
        tables = []
        for found in np.flatnonzero(usable & ~self.categorical):
            values, table = node.present(int(found))
            numeric[int(found)] = values
            tables.append(table)
        cuts = dict(zip(numeric, best_cuts(tables, rows.size, parent_cells, self._both_large), strict=False))
        candidates = []
        for j in map(int, np.flatnonzero(usable)):
            cut = None if self.categorical[j] else cuts[j]
            if self.categorical[j]:
                split = self._categorical_split(j, node.table(j), rows.size, parent_cells)
            elif cut is not None:
                at, gain, split_info = cut
                split = _Split(j, gain, split_info, midpoint(float(numeric[j][at]), float(numeric[j][at + 1])))
            else:
                split = None
            if split is not None and split.gain >= self.min_gain:
                candidates.append(split)
        return self._pick(candidates)

    def _both_large(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Per candidate threshold: do both sides hold at least ``min_samples_leaf`` rows?"""
        large: np.ndarray = (left.sum(axis=1) >= self.min_samples_leaf) & (right.sum(axis=1) >= self.min_samples_leaf)
        return large

    def _categorical_split(self, j: int, table: np.ndarray, n: int, parent_cells: float) -> _Split | None:
        """Score the one-child-per-category split on attribute ``j`` (its code-by-class ``table``), if admissible."""
        if np.count_nonzero(table.sum(axis=1) >= self.min_samples_leaf) < 2:
            return None
        gain, split_info = gain_and_split_info(table.astype(np.float64), n, parent_cells)
        return _Split(j, float(gain), float(split_info), None)
