"""What splitting numeric attributes only at public cut points costs a local tree (docs/privacy.md, DEFAULT_CELLS).

Adult's bundled schema (public bounds), the first 20,000 rows to train and the rest to test, scikit-learn
CART at depths 4, 6 and 8: thresholds at midpoints of training values (what mechanism ``none`` may
release) against thresholds on even grids of 32, 64, 128 and 256 cells of each public range
(`modelshare.common.trees.learners.public_cuts`). Prints a Markdown table for bench/RESULTS.md.

    python bench/public_cuts.py
"""

from __future__ import annotations

import dataclasses

import numpy as np

from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import NumericAttribute, Schema
from modelshare.common.trees.learners import make_learner

DEPTHS = (4, 6, 8)
CELLS = (32, 64, 128, 256)
TRAIN = 20_000


def _grid(schema: Schema, cells: int) -> Schema:
    """``schema`` with every numeric attribute's cut points declared as the even grid of ``cells`` cells."""
    def cut(a: NumericAttribute) -> NumericAttribute:
        return dataclasses.replace(a, cuts=tuple(a.low + (a.high - a.low) * np.arange(1, cells) / cells))
    return Schema(tuple(cut(a) if isinstance(a, NumericAttribute) else a for a in schema.attributes),
                  schema.class_name, schema.classes)


def main() -> None:
    table = load_dataset("adult")
    X, y = table.schema.encode(table.frame)
    settings = [("midpoints", table.schema, False)] + [(f"{c} cells", _grid(table.schema, c), True) for c in CELLS]
    print("| thresholds | " + " | ".join(f"depth {d}" for d in DEPTHS) + " |")
    print("|---|" + "---:|" * len(DEPTHS))
    for name, schema, public in settings:
        scores = []
        for depth in DEPTHS:
            tree = make_learner("cart", schema, random_state=0, public_cuts=public, max_depth=depth).fit(
                X[:TRAIN], y[:TRAIN]).tree_
            scores.append(float((tree.predict(X[TRAIN:]) == y[TRAIN:]).mean()))
        print(f"| {name} | " + " | ".join(f"{s:.4f}" for s in scores) + " |")


if __name__ == "__main__":
    main()
