"""Measures that compare global models with the models learned on the raw data.

Sharkey et al. (2008, §4) judge a global model learned on regenerated pseudo-data by three
numbers: its accuracy on held-out raw tuples, how often it classifies a test tuple exactly as the
"ideal" model learned on the raw data does (class match), and how many of its decision-tree paths
are identical to the ideal tree's paths (path match). All three live here so every study reports
them the same way. A regression study's models predict a numeric target instead and are judged by
their root mean squared error and mean absolute error (`rmse`, `mae`).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, mean_absolute_error, root_mean_squared_error

from common.trees.tree import Tree

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


def path_match(tree_a: Tree, tree_b: Tree) -> float:
    """Share of root-to-leaf paths two trees have in common: ``|P(h) ∩ P(h')| / |P(h) ∪ P(h')|``.

    ``P(h)`` is the set of ``Path.key`` over ``tree.paths()``: each path's canonical conjunction of
    its most specific constraint per attribute (numeric intervals clipped to the schema range)
    together with the path's class. Two paths therefore match only when they constrain the same
    attributes to exactly the same category sets or intervals *and* predict the same class. A tree
    learned on pseudo-data almost never reproduces a numeric threshold of the raw-data tree to the
    last digit, so path match is low for trees with numeric splits even when their predictions
    agree closely, as Sharkey et al. observed; class match is the better gauge of behaviour there.

    Parameters
    ----------
    tree_a, tree_b:
        Trees over the same schema (attribute indices and classes must mean the same thing).

    Returns
    -------
    float
        The Jaccard index of the two path sets in ``[0, 1]``; defined as 1.0 when both sets are
        empty.

    Raises
    ------
    ValueError
        If an argument is not a `Tree`, or ``tree_b``'s schema differs from ``tree_a``'s.
    """
    for name, tree in (("tree_a", tree_a), ("tree_b", tree_b)):
        if not isinstance(tree, Tree):
            raise ValueError(f"{name} must be a Tree; got {type(tree).__name__}")
    if tree_a.schema.fingerprint != tree_b.schema.fingerprint:
        raise ValueError("tree_b is over a different schema than tree_a; their paths are not comparable")
    keys_a = {p.key for p in tree_a.paths()}
    keys_b = {p.key for p in tree_b.paths()}
    union = keys_a | keys_b
    if not union:
        return 1.0
    return len(keys_a & keys_b) / len(union)


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
