"""Ceiling for any consumer of the released trees: the owners' local trees combined directly.

For Nursery and Car with 5 and 10 owners, on exactly the folds and owner shares of
`modelshare experiment sources --folds 10 --seed 0` (`modelshare.pipeline.fold_plan`, and each
fold's first draw deals the owners as `run_fold` does), each owner's fully grown CART is trained
on its share and the test fold is classified by the sum of the trees' leaf class distributions. No pseudo-data is
involved, so the gap between this and BASIS is
information the local trees never had; the gap between this and PGEN is what PGEN loses.

    python bench/tree_ensemble_ceiling.py
"""

from __future__ import annotations

import numpy as np

from modelshare.common.data.datasets import load_dataset
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.pipeline import PipelineConfig, fold_plan, stratified_parts


def ensemble_accuracy(dataset: str, owners: int, folds: int = 10) -> float:
    table = load_dataset(dataset)
    X, y = table.schema.encode(table.frame)
    scores = []
    for _, _, test, seed in fold_plan(y, PipelineConfig(n_sources=owners, folds=folds, random_state=0)):
        X_train, y_train = X[~test], y[~test]
        source = stratified_parts(y_train, owners, np.random.default_rng(seed))  # run_fold's first draw
        votes = np.zeros((test.sum(), table.schema.n_classes))
        for s in range(owners):
            mine = source == s
            tree = CartTreeClassifier(table.schema, random_state=0).fit(X_train[mine], y_train[mine]).tree_
            counts = np.array([node.counts for node in tree.nodes])[tree.apply(X[test])]
            votes += counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        scores.append(np.mean(votes.argmax(axis=1) == y[test]))
    return float(np.mean(scores))


def main() -> None:
    for dataset in ("nursery", "car"):
        for owners in (5, 10):
            print(f"{dataset}, {owners} owners: local-tree ensemble accuracy {ensemble_accuracy(dataset, owners):.4f}")


if __name__ == "__main__":
    main()
