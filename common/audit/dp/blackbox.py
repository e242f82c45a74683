"""The black box every empirical-audit target runs: a registered mechanism's release path on D and D' = D + r.

An audit that re-implements a mechanism's noise or sampling tests the re-implementation, not what
owners run. So each target (`modelshare.common.audit.dp.rdt`, `modelshare.common.audit.dp.dpea`,
`modelshare.common.audit.dp.diffpets`, `modelshare.common.audit.dp.dpea_nb`) holds a `ReleasePath`: per trial it calls
the mechanism's registry trainer, ``registry.get(name).train(schema, X, y, requirement, depth, rng)`` (the code
`modelshare.common.mechanisms.release.release` runs for owners), on D or on D', and the target reduces the
released `Tree`s to one real score (`scores`), or the trees with the parameters the release states
to one or more scores (`release_scores`), for a mechanism that states a data-dependent choice there
(dpea-nb's temperature). A variant registered under another name (a plugin, or a test's deliberately
broken trainer) is audited by naming it; nothing of its internals is read.

`released_cell` reads, per released tree, what a score needs about the added row r: the count the
tree releases for r's class at the node r stops at (0 when r stops at an inner node, because its
leaf was dropped as all-zero), and how many rows of D stop at that node, of r's class and of any.

*What an audit says about r.* The table is the owner's, and a target may pick r among its rows (the
random-tree and DPEA targets try the table's rows as candidates). So no target describes r by its
values, its class or its row index, in the text or JSON the CLI prints or in anything stored:
`describe_added_row` says only whether r copies a row of the table or is a point of the public
domain, and where the target chose it; the targets add aggregate sizes (rows of D in r's cells).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms import registry
from modelshare.common.privacy.noise import Randomness
from modelshare.common.trees.learners._data import check_xy
from modelshare.common.trees.tree import Tree

__all__ = ["ReleasePath", "Cells", "released_cell", "describe_added_row"]

Score = Callable[[Sequence[Tree]], float]
ReleaseScore = Callable[[Sequence[Tree], Mapping[str, Any]], "float | np.ndarray"]  # of the trees and parameters


@dataclass(frozen=True)
class Cells:
    """Per released tree: r's released class count, and D's rows (of r's class; of any class) at r's node."""

    released: np.ndarray
    same_class: np.ndarray
    any_class: np.ndarray


def released_cell(trees: Sequence[Tree], row: np.ndarray, label: int, X: np.ndarray, y: np.ndarray) -> Cells:
    """What each released tree says about r's cell, and D's rows there (module docstring)."""
    released, same, anyone = (np.empty(len(trees)) for _ in range(3))
    for t, tree in enumerate(trees):
        node = int(tree.apply(row[None, :])[0])
        here = tree.apply(X) == node
        counts = tree.nodes[node].counts
        released[t] = counts[label] if tree.nodes[node].is_leaf and counts is not None else 0.0
        same[t] = np.count_nonzero(here & (y == label))
        anyone[t] = np.count_nonzero(here)
    return Cells(released, same, anyone)


def describe_added_row(X: np.ndarray, row: np.ndarray, where: str) -> str:
    """r described without its values, class or index (module docstring): its origin, then ``where`` it was chosen."""
    copied = bool((np.asarray(X, dtype=np.float64) == np.asarray(row, dtype=np.float64)).all(axis=1).any())
    origin = "a copy of one row of the table" if copied else "a point of the public domain that is no row of the table"
    return f"{origin}, {where} (its values are not shown: they may be a real row's)"


class ReleasePath:
    """One registered mechanism's trainer at a claimed setting, run on D and on D' = D + (row, label).

    Parameters
    ----------
    mechanism:
        The registry name whose ``train`` makes every release.
    requirement, depth:
        The claimed requirement and the tree depth, passed to the trainer as a release would.
    schema, X, y:
        D (checked against the schema).
    row, label:
        The added row r (encoded) and its class.
    """

    def __init__(self, mechanism: str, requirement: Any, depth: int, schema: Schema, X: np.ndarray,
                 y: np.ndarray, row: np.ndarray, label: int) -> None:
        record = registry.get(mechanism)
        if record.train is None:
            raise ValueError(f"mechanism {mechanism!r} trains no trees of its own; the empirical DP audit runs "
                             "whole-release mechanisms")
        self.mechanism, self.requirement, self.depth = mechanism, requirement, int(depth)
        self._train = record.train
        self.schema = schema
        self.X, self.y = check_xy(schema, X, y)
        self.X1, self.y1 = check_xy(schema, np.vstack([self.X, np.asarray(row, dtype=np.float64)]),
                                    np.append(self.y, int(label)))
        self.row, self.label = self.X1[-1], int(label)

    def released(self, added: bool, rng: np.random.Generator) -> tuple[list[Tree], dict[str, Any]]:
        """One release of the registered trainer on D (``added`` False) or D': its trees and stated parameters."""
        X, y = (self.X1, self.y1) if added else (self.X, self.y)
        trees, parameters = self._train(self.schema, X, y, self.requirement, self.depth, Randomness.of(rng))
        return list(trees), dict(parameters)

    def release(self, added: bool, rng: np.random.Generator) -> list[Tree]:
        """The trees of one release on D (``added`` False) or D'."""
        return self.released(added, rng)[0]

    def cells(self, trees: Sequence[Tree]) -> Cells:
        """`released_cell` of one release for this pair's r."""
        return released_cell(trees, self.row, self.label, self.X, self.y)

    def scores(self, trials: int, rng: np.random.Generator, score: Score) -> tuple[np.ndarray, np.ndarray]:
        """``score`` of the trees of ``trials`` releases on D, then of as many on D'."""
        return self.release_scores(trials, rng, lambda trees, _: score(trees))

    def release_scores(self, trials: int, rng: np.random.Generator,
                       score: ReleaseScore) -> tuple[np.ndarray, np.ndarray]:
        """``score`` of the trees and stated parameters of ``trials`` releases on D, then of as many on D'.

        A score of k values per release gives arrays of shape (trials, k) (`modelshare.common.audit.dp.estimate`).
        """
        on_d = np.array([score(*self.released(False, rng)) for _ in range(trials)], dtype=np.float64)
        on_d1 = np.array([score(*self.released(True, rng)) for _ in range(trials)], dtype=np.float64)
        return on_d, on_d1

    def added_row(self, where: str) -> str:
        """`describe_added_row` of this pair's r: never its values."""
        return describe_added_row(self.X, self.row, where)
