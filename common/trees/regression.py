"""Released regression trees: per node a noisy row count and a noisy sum of the scaled target.

A `RegressionTree` borrows the structure checks, routing and paths of a classification `Tree`
over `RegressionSchema.features` (its classification mirror), so a regression release obeys every
structural rule a classification release does. DiffPETs regression (`modelshare.common.mechanisms.diffpets`)
releases them; the miner's regression PGEN reads them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.trees.tree import CategorySet, Constraint, Edge, Interval, Node, Tree, TreeError, counts_match

__all__ = ["RegressionForest", "RegressionNode", "RegressionTree"]


@dataclass(frozen=True)
class RegressionNode:
    """A released regression node: noisy count N' and noisy target sum S' (scaled target), and its split.

    Leaves hold the released (N', S'); inner nodes hold the sums of their children's.
    """

    count: float
    total: float
    attribute: int | None = None
    edges: tuple[Edge, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return not self.edges

    @property
    def value(self) -> float:
        """The prediction on the [0, 1] scale: clip(S' / max(N', 1), 0, 1)."""
        return min(max(self.total / max(self.count, 1.0), 0.0), 1.0)


def _constraint_to_dict(constraint: Constraint) -> dict[str, Any]:
    if isinstance(constraint, CategorySet):
        return {"in": sorted(constraint.codes)}
    return {"low": None if constraint.low == -math.inf else constraint.low,
            "high": None if constraint.high == math.inf else constraint.high,
            "low_closed": constraint.low_closed, "high_closed": constraint.high_closed}


def _constraint_from_dict(data: Mapping[str, Any]) -> Constraint:
    if "in" in data:
        return CategorySet(frozenset(int(c) for c in data["in"]))
    low, high = data.get("low"), data.get("high")
    return Interval(-math.inf if low is None else float(low), math.inf if high is None else float(high),
                    bool(data.get("low_closed", False)), bool(data.get("high_closed", True)))


class RegressionTree:
    """A released DiffPETs regression tree, validated on construction; node 0 is the root.

    The structure is checked, routed and turned into paths by its classification mirror `tree`
    (same nodes and edges over `RegressionSchema.features`), so it obeys every rule of `Tree`.

    Raises
    ------
    TreeError
        A malformed structure, a non-finite statistic, or an inner node that is not the sum of its children.
    """

    def __init__(self, schema: RegressionSchema, nodes: Sequence[RegressionNode]) -> None:
        self.schema = schema
        self.nodes = tuple(nodes)
        features = schema.features()
        structure = Tree(features, [Node(0, 0.0, 0.0, np.zeros(2), n.attribute, list(n.edges)) for n in self.nodes])
        stats = np.array([[n.count, n.total] for n in self.nodes], dtype=np.float64).reshape(-1, 2)
        bad = np.flatnonzero(~np.isfinite(stats).all(axis=1))
        if bad.size:
            raise TreeError(f"node {bad[0]}: count and sum {stats[bad[0]].tolist()} must be finite")
        for i, node in enumerate(self.nodes):
            if node.edges and not counts_match(sum(stats[e.child] for e in node.edges), stats[i]).all():
                raise TreeError(f"node {i}: count and sum {stats[i].tolist()} are not the sums of its children's")
        self.tree = self._mirror(features, structure, self.nodes)
        self.values = np.array([n.value for n in self.nodes])

    @staticmethod
    def _mirror(features: Schema, structure: Tree, nodes: Sequence[RegressionNode]) -> Tree:
        """The classification mirror: leaves disclose max(N', 0) rows of placeholder class 0, inner nodes sums.

        ``structure`` is the validated zero-count copy, so the sums below walk a checked tree (no cycles).
        """
        rows = np.array([max(n.count, 0.0) if n.is_leaf else 0.0 for n in nodes])
        order = [0]
        for i in order:  # breadth first: parents before children
            order.extend(e.child for e in structure.nodes[i].edges)
        for i in reversed(order):
            if not nodes[i].is_leaf:
                rows[i] = sum(rows[e.child] for e in nodes[i].edges)
        return Tree(features, [Node(0, float(r), 0.0, np.array([r, 0.0]), n.attribute, list(n.edges))
                               for r, n in zip(rows, nodes, strict=False)], "counts")

    @property
    def leaves(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.is_leaf]

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Index of the leaf each encoded row reaches."""
        return self.tree.apply(X)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The leaf value of each row on the target's original scale."""
        return self.schema.unscale(self.values[self.apply(X)])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (infinite interval ends are None); `from_dict` inverts it."""
        return {"schema": self.schema.to_dict(), "nodes": [
            {"count": n.count, "total": n.total, "attribute": n.attribute,
             "edges": [{"child": e.child, **_constraint_to_dict(e.constraint)} for e in n.edges]}
            for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegressionTree:
        """Rebuild and re-validate a tree from `to_dict`'s form."""
        schema = RegressionSchema.from_dict(data["schema"])
        nodes = [RegressionNode(float(n["count"]), float(n["total"]),
                                None if n.get("attribute") is None else int(n["attribute"]),
                                tuple(Edge(_constraint_from_dict(e), int(e["child"])) for e in n.get("edges", ())))
                 for n in data["nodes"]]
        return cls(schema, nodes)


@dataclass(frozen=True)
class RegressionForest:
    """A released DiffPETs regression forest: the trees over one schema; predicts their mean (§1.9)."""

    schema: RegressionSchema
    trees: tuple[RegressionTree, ...]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The mean of the trees' leaf values, on the target's original scale."""
        return self.schema.unscale(np.mean([tree.values[tree.apply(X)] for tree in self.trees], axis=0))

    def to_dict(self) -> dict[str, Any]:
        return {"trees": [tree.to_dict() for tree in self.trees]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegressionForest:
        """Inverse of `to_dict`; ValueError when the trees disagree on the schema."""
        trees = tuple(RegressionTree.from_dict(t) for t in data["trees"])
        if not trees:
            raise ValueError("a regression forest needs at least one tree")
        if any(t.schema != trees[0].schema for t in trees):
            raise ValueError("the trees of a regression forest must share one schema")
        return cls(trees[0].schema, trees)
