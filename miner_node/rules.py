"""A rule-list learner, C4.5rules-style: rules read off a decision tree, then generalized and ordered.

Sharkey et al. compare several kinds of global model; a rule list is the one whose knowledge is
most readable. Following Quinlan's C4.5rules, a decision tree is grown first, every leaf becomes
a rule (the conjunction of the most specific condition per attribute on its path, concluding the
leaf's class), each rule is generalized by greedily dropping conditions that do not hurt its
Laplace accuracy on the training data, duplicates are removed and the rules are ordered by that
accuracy. A tuple takes the class of the first rule it satisfies, or the default class.

Works on the encoded form of `modelshare.common.data.schema`: ``X`` float64 (rows, attributes) with categorical
columns holding category indices, ``y`` int64 class indices into ``schema.classes``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import overload

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from modelshare.common.data.schema import NumericAttribute, Schema
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.common.trees.learners._data import check_x, check_xy
from modelshare.common.trees.tree import CategorySet, Constraint, Interval, conjunction_mask

__all__ = ["Conditions", "Rule", "RuleListClassifier", "generalize", "laplace"]

#: A rule body: ``(attribute index, constraint)`` pairs sorted by attribute, at most one per attribute.
Conditions = tuple[tuple[int, Constraint], ...]


@overload
def laplace(correct: int, covered: int, n_classes: int) -> float: ...
@overload
def laplace(correct: np.ndarray, covered: np.ndarray, n_classes: int) -> np.ndarray: ...
def laplace(correct: int | np.ndarray, covered: int | np.ndarray, n_classes: int) -> float | np.ndarray:
    """Laplace accuracy ``(correct + 1) / (covered + n_classes)`` of a rule on training data.

    It shrinks a rule's observed accuracy towards ``1 / n_classes`` in proportion to how few tuples
    it covers, so a broad accurate rule outranks a narrow perfect one.
    """
    return (correct + 1) / (covered + n_classes)


def _describe_interval(interval: Interval, attribute: NumericAttribute) -> str:
    """Readable numeric condition, e.g. ``age <= 30.5`` or ``30.5 < age <= 52``."""
    name = attribute.name
    low_op = "<=" if interval.low_closed else "<"
    high_op = "<=" if interval.high_closed else "<"
    if math.isinf(interval.low):
        return f"{name} {high_op} {interval.high:g}"
    if math.isinf(interval.high):
        return f"{name} {'>=' if interval.low_closed else '>'} {interval.low:g}"
    return f"{interval.low:g} {low_op} {name} {high_op} {interval.high:g}"


@dataclass(frozen=True)
class Rule:
    """``IF conditions THEN label``, with the training statistics it was ranked by.

    Attributes
    ----------
    conditions:
        ``(attribute index, constraint)`` pairs sorted by attribute; a categorical constraint is a
        `CategorySet` of allowed codes, a numeric one an `Interval`. Empty means "always".
    label:
        Concluded class index into ``schema.classes``.
    covered, correct:
        Training tuples the rule covers, and those of them in class ``label``.
    laplace:
        Laplace accuracy ``(correct + 1) / (covered + n_classes)`` on the training data.
    """

    conditions: Conditions
    label: int
    covered: int
    correct: int
    laplace: float

    def mask(self, X: np.ndarray) -> np.ndarray:
        """Rows of encoded ``X`` that satisfy every condition."""
        return conjunction_mask(self.conditions, X)

    def describe(self, schema: Schema) -> str:
        """The rule in words, e.g. ``IF safety = low AND persons in {4, more} THEN unacc (laplace 0.97)``."""
        parts = []
        for attribute, constraint in self.conditions:
            attr = schema.attributes[attribute]
            if isinstance(constraint, CategorySet):
                # the ignore below: a CategorySet's attribute is categorical
                parts.append(constraint.describe(attr))  # type: ignore[arg-type]
            else:
                # the ignore below: an Interval's attribute is numeric
                parts.append(_describe_interval(constraint, attr))  # type: ignore[arg-type]
        body = " AND ".join(parts) if parts else "TRUE"
        return f"IF {body} THEN {schema.classes[self.label]} (laplace {self.laplace:.2f})"


def generalize(conditions: Conditions, label: int, X: np.ndarray, y: np.ndarray, n_classes: int) -> Rule:
    """Greedily drop the condition whose removal gives the best Laplace accuracy, while it does not drop.

    C4.5rules' generalization: a condition a leaf inherited from the tree is often unnecessary
    for the rule on its own, and a shorter rule covers more tuples. Each step removes the
    condition whose removal yields the highest training Laplace accuracy, provided that is no
    lower than the current one (ties favour the shorter rule; the first condition wins a tie
    among candidates). On return, removing any remaining condition would lower it strictly.

    Vectorized by counting, per row, how many kept conditions it fails: the rows a rule gains by
    dropping condition ``i`` are exactly those failing only ``i``, so each step looks at the rows
    failing one condition instead of re-evaluating every reduced conjunction.

    Parameters
    ----------
    conditions, label:
        The rule to generalize; its class stays ``label``.
    X, y:
        Encoded training rows and their class indices.
    n_classes:
        Number of classes of the schema (the Laplace denominator's prior term).
    """
    fails_each = np.empty((len(conditions), X.shape[0]), dtype=bool)
    for i, (attribute, constraint) in enumerate(conditions):
        fails_each[i] = ~constraint.mask(X[:, attribute])
    fails = fails_each.sum(axis=0, dtype=np.min_scalar_type(len(conditions)))  # small ints sum fastest
    hit = y == label
    covered = fails == 0
    n_covered, n_correct = int(np.count_nonzero(covered)), int(np.count_nonzero(covered & hit))
    best = float(laplace(n_correct, n_covered, n_classes))
    kept = list(range(len(conditions)))
    while kept:
        near = np.flatnonzero(fails == 1)
        gains = fails_each[np.ix_(np.asarray(kept, dtype=np.intp), near)]
        gain_covered = np.count_nonzero(gains, axis=1)
        gain_correct = np.count_nonzero(gains[:, hit[near]], axis=1)
        scores = laplace(n_correct + gain_correct, n_covered + gain_covered, n_classes)
        j = int(np.argmax(scores))
        if scores[j] < best:
            break
        fails -= fails_each[kept[j]]
        n_covered += int(gain_covered[j])
        n_correct += int(gain_correct[j])
        best = float(scores[j])
        del kept[j]
    return Rule(tuple(conditions[i] for i in kept), label, n_covered, n_correct, best)


class RuleListClassifier(ClassifierMixin, BaseEstimator):
    """Ordered rule list, C4.5rules-style: rules read off a decision tree, then generalized and ordered.

    Parameters
    ----------
    schema:
        Schema of the encoded tables it is fitted on and predicts.
    max_depth, min_samples_leaf, criterion:
        Limits and split criterion of the scikit-learn tree the rules are read from (categorical
        columns are split as ordinal codes; a rule still states them as sets of categories).
    random_state:
        Seed of the tree's tie-breaking among equally good splits.

    Attributes
    ----------
    rules_ : list[Rule]
        The ordered rules; the first one a tuple satisfies decides its class.
    default_class_ : int
        Class of tuples no rule covers: the majority class of the training tuples no rule
        covers, or the overall training majority when every tuple is covered.
    classes_ : numpy.ndarray
        Class indices seen in training.
    """

    def __init__(
        self,
        schema: Schema,
        *,
        max_depth: int | None = None,
        min_samples_leaf: int = 5,
        criterion: str = "entropy",
        random_state: int | None = None,
    ) -> None:
        self.schema = schema
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.criterion = criterion
        self.random_state = random_state

    # ------------------------------------------------------------------ fit
    def fit(self, X: np.ndarray, y: np.ndarray) -> RuleListClassifier:
        """Grow the tree, read and generalize one rule per leaf, dedupe, order, pick the default."""
        X, y = check_xy(self.schema, X, y)
        tree = CartTreeClassifier(
            self.schema,
            criterion=self.criterion,
            max_depth=self.max_depth,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
        ).fit(X, y).tree_
        n_classes = self.schema.n_classes
        candidates = [generalize(p.constraints, p.label, X, y, n_classes) for p in tree.paths()]
        # Best first; ties keep the tree's leaf order, so the ordering is deterministic.
        candidates.sort(key=lambda r: (-r.laplace, -r.covered))
        seen: set[tuple[tuple[int, tuple[object, ...]], ...]] = set()
        self.rules_: list[Rule] = []
        for rule in candidates:
            key = tuple((a, c.canonical()) for a, c in rule.conditions)
            if key not in seen:  # a later rule with the same conditions could never fire
                seen.add(key)
                self.rules_.append(rule)
        covered = np.zeros(X.shape[0], dtype=bool)
        for rule in self.rules_:
            covered |= rule.mask(X)
        rest = y[~covered] if not covered.all() else y
        self.default_class_ = int(np.argmax(np.bincount(rest, minlength=self.schema.n_classes)))
        self.classes_ = np.unique(y)
        return self

    # -------------------------------------------------------------- predict
    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per row: the label of the first rule the row satisfies, else the default class."""
        check_is_fitted(self, "rules_")
        X = check_x(self.schema, X)
        predictions = np.full(X.shape[0], self.default_class_, dtype=np.int64)
        decided = np.zeros(X.shape[0], dtype=bool)
        for rule in self.rules_:
            fires = rule.mask(X) & ~decided
            predictions[fires] = rule.label
            decided |= fires
        return predictions

    def describe(self) -> str:
        """The whole rule list, one rule per line, ending with the default class."""
        lines = [rule.describe(self.schema) for rule in self.rules_]
        lines.append(f"ELSE {self.schema.classes[self.default_class_]}")
        return "\n".join(lines)
