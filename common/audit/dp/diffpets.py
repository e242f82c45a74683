"""Audit target (`common.audit.dp.estimate.AuditTarget`) for DiffPETs, run as a black box.

Unlike the random-tree mechanisms (`common.audit.dp.rdt`), DiffPETs chooses its splits from the rows
(the exponential mechanism) and stops on noisy counts, so there is no fixed structure to condition
on and no closed-form law of a release. The target therefore runs the whole mechanism, ``fit``
included, on D and on D' = D + r, and reduces each release to one real score.

The added row r is chosen to be alone in its region: every numeric attribute at the end of its
public range farthest from D's values, every categorical one at its rarest category in D, and the
rarest class of D. A random public threshold then separates r from every row of D with high
probability, and in that case r's leaf holds r alone under D' and nothing under D.

Score of a release: the sum over its trees of

* ``ISOLATED`` if no row of D stops at the node r stops at (r's leaf region holds no row of D), and
* the released count of r's class at that node minus the rows of D of r's class there (0 for an
  inner node, where r stops when its leaf was dropped because all its released counts were 0).

Why it distinguishes: the second term is the leaf noise alone under D and 1 plus the leaf noise
under D', the Laplace evidence that r exists (what halving the leaf noise sharpens). The first term
records which split was chosen: a correct DiffPETs draws thresholds from the public range, so r is
separated from D about as often under both tables (the exponential mechanism favours the separating
split under D' only by its eps2 budget); a split that reads the data (thresholds between the node's
data minimum and maximum, or a stopping rule on raw purity) can separate r only when r is present,
an event of probability 0 under D. ``ISOLATED`` dwarfs any count, so the audit's threshold events
{score >= t} are "separated, with a large excess" for t near ``ISOLATED`` and "separated, or a large
excess" below it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.data.schema import CategoricalAttribute, Schema
from common.mechanisms.diffpets import MECHANISM, DiffPets
from common.trees.learners._data import check_xy
from common.trees.tree import Tree

__all__ = ["ISOLATED", "DiffPetsTarget", "adversarial_row", "diffpets_target"]

ISOLATED = 1e6  # score of "r's leaf holds no row of D", above any count difference


def adversarial_row(schema: Schema, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
    """The added row r (encoded) and its class: as far from D's rows as the public domain allows.

    Numeric attributes take the public range end with the larger gap to D's values (the high end on
    ties), categorical ones their rarest category in D, and the class is D's rarest (lowest index on
    ties).
    """
    row = np.empty(schema.n_attributes)
    for j, attr in enumerate(schema.attributes):
        column = X[:, j]
        if isinstance(attr, CategoricalAttribute):
            row[j] = np.argmin(np.bincount(column.astype(np.int64), minlength=attr.size))
        else:
            row[j] = attr.high if attr.high - column.max() >= column.min() - attr.low else attr.low
    return row, int(np.argmin(np.bincount(y, minlength=schema.n_classes)))


class DiffPetsTarget:
    """DiffPETs on (D, D' = D + r), run end to end per trial; the score is described in the module docstring.

    Parameters
    ----------
    mechanism:
        The DiffPETs setting under audit; its ``fit`` makes every release (a broken subclass is
        audited as such), and its ``epsilon`` is the claim.
    schema, X, y:
        D, checked against the schema. Keep it small: each trial fits the mechanism on it twice.
    row, label:
        The added row (encoded) and its class; both None for `adversarial_row`.
    """

    mechanism = MECHANISM

    def __init__(self, mechanism: DiffPets, schema: Schema, X: np.ndarray, y: np.ndarray, *,
                 row: np.ndarray | None = None, label: int | None = None) -> None:
        X, y = check_xy(schema, X, y)
        if (row is None) != (label is None):
            raise ValueError("give both row and label, or neither (the adversarial row is then chosen)")
        if row is None or label is None:
            row, label = adversarial_row(schema, X, y)
        X1, y1 = check_xy(schema, np.vstack([X, np.asarray(row, dtype=np.float64)]), np.append(y, label))
        self.audited = mechanism
        self.epsilon, self.delta = float(mechanism.epsilon), 0.0
        self.schema, self.X, self.y = schema, X, y
        self.X1, self.y1 = X1, y1
        self.row, self.label = X1[-1], int(label)

    def score(self, trees: list[Tree]) -> float:
        """The score of one release (module docstring)."""
        total = 0.0
        for tree in trees:
            node = int(tree.apply(self.row[None, :])[0])
            here = tree.apply(self.X) == node
            released = tree.nodes[node].counts[self.label] if tree.nodes[node].is_leaf else 0.0  # type: ignore[index]
            total += ISOLATED * (not here.any()) + released - np.count_nonzero(here & (self.y == self.label))
        return total

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Scores of ``trials`` releases on D, then of as many on D'."""
        on_d = [self.score(self.audited.fit(self.schema, self.X, self.y, rng).trees) for _ in range(trials)]
        on_d1 = [self.score(self.audited.fit(self.schema, self.X1, self.y1, rng).trees) for _ in range(trials)]
        return np.array(on_d), np.array(on_d1)

    def describe(self) -> dict[str, Any]:
        row = self.schema.decode(self.row[None, :], np.array([self.label])).iloc[0]
        return {"added_row": {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()},
                "rows_in_D": int(self.y.size), "rows_of_r_class_in_D": int(np.count_nonzero(self.y == self.label)),
                "score": f"per tree: {ISOLATED:g} if r's leaf holds no row of D, plus the released count of r's "
                         f"class there minus D's rows of that class there"}


def diffpets_target(requirement: Any, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                    rng: np.random.Generator) -> DiffPetsTarget:
    """The registry's audit target of DiffPETs at the claimed ``dp:epsilon,trees`` and ``depth`` (the row is chosen)."""
    return DiffPetsTarget(DiffPets(requirement.epsilon, requirement.trees, depth), schema, X, y)
