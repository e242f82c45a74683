"""Measures that compare global models with the models learned on the raw data.

Sharkey et al. (2008, §4) judge a global model learned on regenerated pseudo-data by three
numbers: its accuracy on held-out raw tuples, how often it classifies a test tuple exactly as the
"ideal" model learned on the raw data does (class match), and how many of its decision-tree paths
are identical to the ideal tree's paths (path match). All three live here so every study reports
them the same way. A regression study's models predict a numeric target instead and are judged by
their root mean squared error and mean absolute error (`rmse`, `mae`).
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import accuracy_score, mean_absolute_error, root_mean_squared_error

from modelshare.common.data.schema import NumericAttribute, Schema
from modelshare.common.trees.tree import Interval, Path, Tree

__all__ = ["accuracy", "class_match", "path_match", "rmse", "mae"]


def _as_labels(values: np.ndarray, name: str) -> np.ndarray:
    """Check that ``values`` is a non-empty 1-D vector of class labels and return it as an array."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D vector of class labels; got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} is empty; a measure over zero tuples is undefined")
    return array


def _paired_labels(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate two label vectors that must describe the same tuples, in the same order."""
    left, right = _as_labels(a, name_a), _as_labels(b, name_b)
    if left.shape != right.shape:
        raise ValueError(
            f"{name_a} has {left.size} labels but {name_b} has {right.size}; they must label the same tuples"
        )
    return left, right


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Fraction of tuples whose predicted class equals the true class.

    Parameters
    ----------
    y_true, y_pred:
        1-D class vectors of equal, non-zero length (encoded class indices or labels).

    Returns
    -------
    float
        Accuracy in ``[0, 1]``.

    Raises
    ------
    ValueError
        If either argument is not a non-empty 1-D vector or their lengths differ; the message
        names the argument at fault.
    """
    truth, predicted = _paired_labels(y_true, y_pred, "y_true", "y_pred")
    return float(accuracy_score(truth, predicted))


def class_match(pred_a: np.ndarray, pred_b: np.ndarray) -> float:
    """Fraction of test tuples that two models classify identically (Sharkey et al. 2008, §4).

    Unlike accuracy this ignores the true class: it measures how closely a global model imitates
    a reference model (typically the one learned on the raw data), mistakes included.

    Parameters
    ----------
    pred_a, pred_b:
        The two models' predictions for the same test tuples, as 1-D vectors of equal, non-zero
        length.

    Returns
    -------
    float
        Class match in ``[0, 1]``; symmetric in its arguments.

    Raises
    ------
    ValueError
        If either argument is not a non-empty 1-D vector or their lengths differ.
    """
    a, b = _paired_labels(pred_a, pred_b, "pred_a", "pred_b")
    return float(np.mean(a == b))


def path_match(tree_a: Tree, tree_b: Tree, *, values: np.ndarray | None = None) -> float:
    """Share of root-to-leaf paths two trees have in common: ``|P(h) ∩ P(h')| / |P(h) ∪ P(h')|``.

    Sharkey et al. (2008, §4) define path match as this Jaccard index over ``paths(h)``, the set
    of root-to-leaf paths. A path here is its conjunction of the most specific constraint per
    attribute, together with its class; two paths are the same path when they constrain the same
    attributes, each to the same *set of admissible values*, and predict the same class:

    - a categorical constraint is its category set;
    - a numeric interval on an ``integer`` attribute is the whole numbers it admits, so
      ``x <= 50.5`` and ``x <= 50.2`` are the same path (both admit 0..50);
    - with ``values`` (reference rows, e.g. the raw training rows BASIS was learned on) a numeric
      interval is the run of the attribute's distinct reference values it admits. A learner puts
      a threshold anywhere between two neighbouring values (CART: the midpoint), so a tree
      re-learned from pseudo-data, whose values differ, places it elsewhere in the same gap;
      comparing the raw thresholds digit for digit scored 0 for two trees that split every
      reference row alike. J48, the paper's learner, splits at data values, so there the two
      readings agree;
    - without ``values`` a continuous interval is compared by its bounds, after clipping to the
      schema range.

    Low path match with high class match is still expected (the paper: "typically less than 30%
    and frequently less than 1% shared paths"): trees that predict alike need not share a path.

    Parameters
    ----------
    tree_a, tree_b:
        Trees over the same schema (attribute indices and classes must mean the same thing).
    values:
        Optional encoded reference rows (2-D, one column per schema attribute) whose distinct
        numeric values define when two numeric intervals are the same.

    Returns
    -------
    float
        The Jaccard index of the two path sets in ``[0, 1]``; 1.0 for identical trees, and
        defined as 1.0 when both sets are empty.

    Raises
    ------
    ValueError
        If an argument is not a `Tree`, ``tree_b``'s schema differs from ``tree_a``'s, or
        ``values`` does not have one column per attribute.
    """
    for name, tree in (("tree_a", tree_a), ("tree_b", tree_b)):
        if not isinstance(tree, Tree):
            raise ValueError(f"{name} must be a Tree; got {type(tree).__name__}")
    if tree_a.schema.fingerprint != tree_b.schema.fingerprint:
        raise ValueError("tree_b is over a different schema than tree_a; their paths are not comparable")
    grids = _value_grids(tree_a.schema, values)
    keys_a = {_path_key(p, tree_a.schema, grids) for p in tree_a.paths()}
    keys_b = {_path_key(p, tree_b.schema, grids) for p in tree_b.paths()}
    union = keys_a | keys_b
    if not union:
        return 1.0
    return len(keys_a & keys_b) / len(union)


def _value_grids(schema: Schema, values: np.ndarray | None) -> dict[int, np.ndarray]:
    """Sorted distinct reference values of each numeric attribute (none without ``values``)."""
    if values is None:
        return {}
    rows = np.asarray(values, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] != len(schema.attributes):
        raise ValueError(f"values must be encoded rows with {len(schema.attributes)} columns (one per attribute); "
                         f"got shape {rows.shape}")
    return {a: np.unique(rows[:, a]) for a, attr in enumerate(schema.attributes)
            if isinstance(attr, NumericAttribute)}


def _path_key(path: Path, schema: Schema, grids: dict[int, np.ndarray]) -> tuple[object, ...]:
    """A path's identity for path match: per attribute, the values its constraint admits; and its class."""
    parts = []
    for a, constraint in path.constraints:
        attr = schema.attributes[a]
        if isinstance(constraint, Interval) and isinstance(attr, NumericAttribute):
            parts.append((a, _interval_key(constraint, attr, grids.get(a))))
        else:
            parts.append((a, constraint.canonical()))
    return tuple(parts), path.label


def _interval_key(interval: Interval, attr: NumericAttribute, grid: np.ndarray | None) -> tuple[object, ...]:
    """What a numeric interval admits: a run of reference values, a range of integers, or its exact bounds."""
    if grid is not None:
        start = int(np.searchsorted(grid, interval.low, side="left" if interval.low_closed else "right"))
        stop = int(np.searchsorted(grid, interval.high, side="right" if interval.high_closed else "left"))
        return ("values", start, max(start, stop))
    if attr.integer:
        low = math.ceil(interval.low) if interval.low_closed else math.floor(interval.low) + 1
        high = math.floor(interval.high) if interval.high_closed else math.ceil(interval.high) - 1
        return ("integers", low, max(low - 1, high))
    return interval.canonical()


def _paired_values(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two equally long, non-empty 1-D float vectors of target values (regression); ValueError naming the fault."""
    truth, predicted = _paired_labels(y_true, y_pred, "y_true", "y_pred")
    return truth.astype(np.float64), predicted.astype(np.float64)


def rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Root mean squared error of predicted target values (regression), on the target's own scale.

    Raises
    ------
    ValueError
        If either argument is not a non-empty 1-D vector or their lengths differ.
    """
    truth, predicted = _paired_values(y_true, y_pred)
    return float(root_mean_squared_error(truth, predicted))


def mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean absolute error of predicted target values (regression), on the target's own scale.

    Raises
    ------
    ValueError
        If either argument is not a non-empty 1-D vector or their lengths differ.
    """
    truth, predicted = _paired_values(y_true, y_pred)
    return float(mean_absolute_error(truth, predicted))
