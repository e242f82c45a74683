"""The released trees' vote: a global model the miner builds from the releases themselves, not from pseudo-data.

Every released tree gives each row the class distribution of the leaf it falls in, the same
distribution PGEN draws that leaf's classes from (`modelshare.miner_node.pgen.leaf_class_distributions`: the
counts, or under hit/miss the majority's hit share with the miss spread evenly over the other
classes); the vote sums them over every released tree of every owner, each tree with weight one,
and predicts the largest. Why a miner wants it beside the models learned from PGEN's pooled
pseudo-data: there a tree's weight at a point is its leaf's pseudo-row density, so the trees
whose leaves happen to be small and dense there outvote the rest, and off-path attributes are
drawn, not seen; on Adult under k-anonymity (10 owners) the vote is 0.5 points above gradient
boosting on the pseudo-data (EXPERIMENTS.md). It has no hyperparameters and reads no pseudo row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from modelshare.common.trees.learners._data import check_x
from modelshare.common.trees.tree import Tree
from modelshare.miner_node.pgen import leaf_class_distributions

__all__ = ["TREE_VOTE", "TreeVote"]

TREE_VOTE = "tree-vote"
"""The vote's name among a classification study's global models (built by the miner, never fitted on rows)."""


class TreeVote:
    """Summed leaf class distributions of released trees (module docstring); ``predict`` and ``predict_proba``.

    A row that some tree cannot route to a leaf (no edge of an inner node admits it) gets no vote
    from that tree; a row no tree routes gets the uniform distribution.
    """

    def __init__(self, trees: Sequence[Tree]) -> None:
        if not trees:
            raise ValueError("the tree vote needs at least one released tree")
        self.trees = list(trees)
        self.schema = self.trees[0].schema
        self.classes_ = np.arange(self.schema.n_classes, dtype=np.int64)
        self._tables = [leaf_class_distributions(tree) for tree in self.trees]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Per row, the summed leaf class distributions normalised to one; shape ``(rows, classes)``."""
        X = check_x(self.schema, X)
        total = np.zeros((X.shape[0], self.classes_.size))
        for tree, table in zip(self.trees, self._tables, strict=False):
            total += table[tree.apply(X)]
        sums = total.sum(axis=1, keepdims=True)
        proba: np.ndarray = np.divide(total, sums, out=np.full_like(total, 1.0 / self.classes_.size), where=sums > 0)
        return proba

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Per row, the class with the largest summed distribution (the lowest index on ties)."""
        labels: np.ndarray = np.argmax(self.predict_proba(X), axis=1).astype(np.int64)
        return labels
