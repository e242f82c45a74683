"""CART through scikit-learn, converted exactly into a `modelshare.common.trees.tree.Tree`.

scikit-learn's trees split every feature by ``x <= threshold``. Categorical attributes are fed to
it either as their ordinal category index (``categorical_encoding="ordinal"``: a split keeps the
categories whose index is at most the threshold) or one indicator column per category
(``"onehot"``: a split separates one category from the rest). Either way each split converts into
a `CategorySet` edge holding exactly the categories that can reach the child, so the converted
tree routes every row as the estimator does. Numeric splits become the intervals ``(-inf, t]``
and ``(t, inf)``.

Counts: since scikit-learn 1.4, ``tree_.value`` holds class *fractions*, so a node's class
counts are the fractions times ``weighted_n_node_samples`` (rounded: samples are unweighted).
Exactness caveat: scikit-learn compares the float32 cast of a value with the float64 threshold;
the converted tree compares the float64 value. They can only disagree for a value within half a
float32 ulp of a threshold that is not itself float32-representable, which no value of the
training data is (thresholds are midpoints between distinct training values).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.tree import DecisionTreeClassifier
from sklearn.utils.validation import check_is_fitted

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.params import ParameterError, check_choice, check_positive_int
from modelshare.common.trees.learners._data import check_x, check_xy
from modelshare.common.trees.tree import CategorySet, Edge, Interval, Node, Tree

__all__ = ["CartTreeClassifier"]

Encoding = Literal["ordinal", "onehot"]


def _check_min_samples_leaf(value: object) -> None:
    if isinstance(value, float) and 0.0 < value < 1.0:
        return
    try:
        check_positive_int("min_samples_leaf", value)
    except ParameterError:
        raise ParameterError(f"min_samples_leaf must be an integer >= 1 or a float in (0, 1); got {value!r}") from None


class CartTreeClassifier(ClassifierMixin, BaseEstimator):
    """CART (scikit-learn ``DecisionTreeClassifier``) whose fitted model is a modelshare `Tree`.

    Parameters
    ----------
    schema:
        Schema of the encoded rows passed to ``fit`` and ``predict``.
    criterion:
        ``"gini"``, ``"entropy"`` or ``"log_loss"``, as in scikit-learn.
    max_depth:
        Maximum depth, or None to grow until leaves are pure or too small.
    min_samples_leaf:
        Minimum training rows per leaf: an integer >= 1, or a float in (0, 1) for that fraction of
        the training rows (scikit-learn's convention), which makes the tree's granularity
        independent of the table size, e.g. when PGEN generates a multiple of the original rows.
    categorical_encoding:
        ``"ordinal"`` (category index as a number) or ``"onehot"`` (indicator per category).
    random_state:
        Seed for scikit-learn's tie-breaking among equally good splits.

    Attributes
    ----------
    tree_ : Tree
        The converted tree with ``counts`` disclosure.
    estimator_ : DecisionTreeClassifier
        The fitted scikit-learn estimator the tree was converted from.
    """

    def __init__(
        self,
        schema: Schema,
        *,
        criterion: str = "gini",
        max_depth: int | None = None,
        min_samples_leaf: int | float = 1,
        categorical_encoding: Encoding = "ordinal",
        random_state: int | None = None,
    ) -> None:
        self.schema = schema
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.categorical_encoding = categorical_encoding
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: np.ndarray) -> CartTreeClassifier:
        """Fit scikit-learn's CART on ``(X, y)`` and convert it into ``tree_``."""
        check_choice("criterion", self.criterion, ("gini", "entropy", "log_loss"))
        check_positive_int("max_depth", self.max_depth, allow_none=True)
        _check_min_samples_leaf(self.min_samples_leaf)
        check_choice("categorical_encoding", self.categorical_encoding, ("ordinal", "onehot"))
        X, y = check_xy(self.schema, X, y)
        features, self._columns = self._features(X)
        self.estimator_ = DecisionTreeClassifier(
            criterion=self.criterion,
            max_depth=self.max_depth,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
        ).fit(features, y)
        self.tree_ = self._convert()
        self.classes_ = np.arange(self.schema.n_classes)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per row, from the converted tree."""
        check_is_fitted(self, "tree_")
        return self.tree_.predict(check_x(self.schema, X))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Per row and class index of the schema, the class shares of the row's leaf (AUC and other scores)."""
        check_is_fitted(self, "tree_")
        seen = self.estimator_.predict_proba(self.features(check_x(self.schema, X)))
        proba = np.zeros((seen.shape[0], self.schema.n_classes))
        proba[:, self.estimator_.classes_.astype(np.int64)] = seen
        return proba

    # ------------------------------------------------------------ encoding
    def _features(self, X: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int | None]]]:
        """The matrix scikit-learn sees, and per column its (attribute, category or None)."""
        if self.categorical_encoding == "ordinal":
            return X, [(j, None) for j in range(X.shape[1])]
        blocks: list[np.ndarray] = []
        columns: list[tuple[int, int | None]] = []
        for j, attr in enumerate(self.schema.attributes):
            if isinstance(attr, CategoricalAttribute):
                blocks.append((X[:, j, None] == np.arange(attr.size)[None, :]).astype(np.float64))
                columns.extend((j, c) for c in range(attr.size))
            else:
                blocks.append(X[:, j, None])
                columns.append((j, None))
        return np.hstack(blocks), columns

    def features(self, X: np.ndarray) -> np.ndarray:
        """The feature matrix the fitted estimator expects for encoded rows ``X``."""
        return self._features(np.asarray(X, dtype=np.float64))[0]

    # ---------------------------------------------------------- conversion
    def _convert(self) -> Tree:
        sk = self.estimator_.tree_
        n_classes = self.schema.n_classes
        fractions = sk.value[:, 0, :]
        counts = np.zeros((sk.node_count, n_classes))
        counts[:, self.estimator_.classes_.astype(np.int64)] = np.rint(
            fractions * sk.weighted_n_node_samples[:, None]
        )
        full_domains = {
            j: frozenset(range(a.size))
            for j, a in enumerate(self.schema.attributes)
            if isinstance(a, CategoricalAttribute)
        }
        nodes: list[Node | None] = [None] * sk.node_count
        # Each stack entry: sklearn node id, the categories still possible per categorical attribute.
        stack: list[tuple[int, dict[int, frozenset[int]]]] = [(0, full_domains)]
        while stack:
            i, domains = stack.pop()
            node = Node.from_counts(counts[i])
            nodes[i] = node
            left, right = sk.children_left[i], sk.children_right[i]
            if left == -1:
                continue
            attr_index, category = self._columns[sk.feature[i]]
            threshold = float(sk.threshold[i])
            node.attribute = attr_index
            if attr_index in domains:
                here = domains[attr_index]
                if category is None:
                    left_set = frozenset(c for c in here if c <= threshold)
                else:
                    left_set = here - {category}
                right_set = here - left_set
                node.edges = [Edge(CategorySet(left_set), int(left)), Edge(CategorySet(right_set), int(right))]
                stack.append((int(right), {**domains, attr_index: right_set}))
                stack.append((int(left), {**domains, attr_index: left_set}))
            else:
                node.edges = [
                    Edge(Interval(-math.inf, threshold, False, True), int(left)),
                    Edge(Interval(threshold, math.inf, False, False), int(right)),
                ]
                stack.append((int(right), domains))
                stack.append((int(left), domains))
        return Tree(self.schema, nodes, "counts")  # type: ignore[arg-type]
