"""Audit target (`modelshare.common.audit.dp.estimate.AuditTarget`) for DiffPETs, run as a black box.

Like every target, it runs the mechanism's registered release path (`modelshare.common.audit.dp.blackbox`: the
registry trainer, the code owners run) on D and on D' = D + r per trial, and reduces each release to
one real score read from the released trees. DiffPETs chooses its splits from the rows (the
exponential mechanism) and stops on noisy counts, so a release has no closed-form law to score by.

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

from collections.abc import Sequence
from typing import Any

import numpy as np

from modelshare.common.audit.dp.blackbox import ReleasePath
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.mechanisms.diffpets import MECHANISM
from modelshare.common.privacy.requirements import DP
from modelshare.common.trees.learners._data import check_xy
from modelshare.common.trees.tree import Tree

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
    """DiffPETs' registered release on (D, D' = D + r), run end to end per trial; the score is in the module docstring.

    Parameters
    ----------
    requirement, depth:
        The claimed ``dp:epsilon,trees`` and the depth, passed to the registry trainer as a release would.
    schema, X, y:
        D, checked against the schema. Keep it small: each trial trains on it (or on D') once.
    mechanism:
        The registry name whose trainer makes every release (a variant is audited by naming it).
    row, label:
        The added row (encoded) and its class; both None for `adversarial_row`.
    """

    mechanism = MECHANISM

    def __init__(self, requirement: DP, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray, *,
                 mechanism: str = MECHANISM, row: np.ndarray | None = None, label: int | None = None) -> None:
        X, y = check_xy(schema, X, y)
        if (row is None) != (label is None):
            raise ValueError("give both row and label, or neither (the adversarial row is then chosen)")
        if row is None or label is None:
            row, label = adversarial_row(schema, X, y)
        self.mechanism = mechanism
        self.epsilon, self.delta = float(requirement.epsilon), 0.0
        self.path = ReleasePath(mechanism, requirement, depth, schema, X, y, row, label)

    def score(self, trees: Sequence[Tree]) -> float:
        """The score of one release (module docstring)."""
        cells = self.path.cells(trees)
        return float((ISOLATED * (cells.any_class == 0) + cells.released - cells.same_class).sum())

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Scores of ``trials`` registered releases on D, then of as many on D'."""
        return self.path.scores(trials, rng, self.score)

    def describe(self) -> dict[str, Any]:
        path = self.path
        return {"added_row": path.added_row("at the public ranges' far ends, the rarest categories and class of D"),
                "release_path": f"registry trainer of {self.mechanism!r}",
                "rows_in_D": int(path.y.size), "rows_of_r_class_in_D": int(np.count_nonzero(path.y == path.label)),
                "score": f"per tree: {ISOLATED:g} if r's leaf holds no row of D, plus the released count of r's "
                         f"class there minus D's rows of that class there"}


def diffpets_target(requirement: DP, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                    rng: np.random.Generator, *, mechanism: str = MECHANISM) -> DiffPetsTarget:
    """The registry's audit target of DiffPETs (or of ``mechanism``)
    at ``dp:epsilon,trees`` and ``depth`` (row chosen)."""
    return DiffPetsTarget(requirement, depth, schema, X, y, mechanism=mechanism)
