"""Audit target (`modelshare.common.audit.dp.estimate.AuditTarget`)
for dpea-nb: every part of its release, choices included.

Every trial runs dpea-nb's registered trainer end to end (`modelshare.common.audit.dp.blackbox.ReleasePath`) on D or
on D' = D + r, and scores the whole release, its trees and the temperature its parameters state. Four
log-likelihood ratios ln P'/P under the *claimed* law (the real `DpeaNb` at the claimed epsilon and its
public shares) read one thing the release shows each:

* *the root's split* (``tree_share``, the selection half): ln P'(a) - ln P(a) of the released root
  attribute under the claimed root's exact selection law (`DPEA.structure_log_probs` of the registered root
  setting, over its depth-1 structures; 0 when the root released no split because every count was 0);
* *r's root cell*: the released count c of r's class at r's root leaf against D's rows m of that class there,
  ln P[c | m + 1] - ln P[c | m] at the claimed root noise scale (`discrete_laplace_log_pmf`);
* *r's histogram cells* (``histogram_share``): the same ratio for r's (leaf, bin, class) cell of each
  histogram tree at the claimed histogram scale (histogram trees / (histogram share x epsilon));
* *the temperature* (``calibration_share``): given the released root and histograms, the claimed law picks
  T with probability proportional to exp(beta u(T)), u(T) the rows of the table the released model
  classifies right at T and beta = calibration share x epsilon. The auditor holds both tables, so it
  computes u_D from the released trees, and u_D' = u_D + [r right at T]: the ratio is
  beta [r right at T] - ln sum_T' P_D(T') exp(beta [r right at T']).

A release gets three scores (`SCORES`; `modelshare.common.audit.dp.estimate` chooses the column and threshold of its
event on the first half of the trials): the sum of the four, the Neyman-Pearson statistic of a correct
release, which histograms with less noise than claimed move; the root split's ratio alone; and the
temperature's alone. The two choices spend only 19% of the budget (half the root's share and the
temperature's), so in the sum their evidence drowns in the cells' noise; alone, a split or temperature
picked without the exponential mechanism's noise shows as an event of probability 0 under one table and 1
under the other, wherever r changes the pick (`tests/common/audit/test_dp_audit_broken.py`, the ``tie`` table). A score
is any function of the release, so the audit stays sound whatever it reads.

*The added row.* r is chosen among `CANDIDATES` domain points drawn from the schema's public ranges, each
with every class: first one that changes the claimed root law's most likely split (where one row can,
which is where a noiseless selection shows: under D and D' it then picks different splits every time),
then the fewest rows of D in its histogram cells (its bin of every attribute, with its class; where r's
count is smallest, the noise alone hides it), then the largest change of the root law (symmetrised KL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.special import logsumexp

from modelshare.common.audit.dp.blackbox import ReleasePath
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.mechanisms.dpea import Domain, registered_dpea
from modelshare.common.mechanisms.dpea_nb import (
    CALIBRATION_SHARE,
    HISTOGRAM_SHARE,
    MECHANISM,
    TEMPERATURES,
    TREE_SHARE,
    DpeaNb,
    HistogramBins,
    NaiveBayesRelease,
)
from modelshare.common.privacy.noise import discrete_laplace_log_pmf
from modelshare.common.privacy.requirements import DP
from modelshare.common.trees.learners._data import check_xy
from modelshare.common.trees.tree import Tree

__all__ = ["CANDIDATES", "SCORES", "DpeaNbTarget", "dpea_nb_target"]

CANDIDATES = 256  # random domain points tried as the added row (each with every class)
SCORES = ("LLR of the release", "LLR of the root split", "LLR of the temperature")  # the columns of a trial's scores


def _count_llr(released: np.ndarray, m: np.ndarray, scale: float) -> float:
    """sum of ln P[released | m + 1] - ln P[released | m] of clamped discrete Laplace counts at ``scale``."""
    ratio = discrete_laplace_log_pmf(released, m + 1, scale) - discrete_laplace_log_pmf(released, m, scale)
    return float(ratio.sum())


class DpeaNbTarget:
    """dpea-nb's registered release on (D, D' = D + r); the scores are claimed LLRs of its parts (module docstring)."""

    score_names = SCORES

    def __init__(self, requirement: DP, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator, *, mechanism: str = MECHANISM) -> None:
        X, y = check_xy(schema, X, y)
        claimed = DpeaNb(requirement.epsilon, depth=depth)  # the claimed setting; refuses a depth it does not run
        self.mechanism = mechanism
        self.epsilon, self.delta = float(requirement.epsilon), 0.0
        self.epsilon_histograms = requirement.epsilon * HISTOGRAM_SHARE
        self.calibration_beta = requirement.epsilon * CALIBRATION_SHARE
        self.root = registered_dpea(requirement.epsilon * TREE_SHARE, 1, claimed.depth, schema)
        self.structures = Domain.of(schema, self.root.bins, self.root.max_arity).structures(claimed.depth)
        self._structure_of = {structure[0]: s for s, structure in enumerate(self.structures) if structure is not None}
        row, label, self.root_laws = self._choose(schema, X, y, rng)
        self.path = ReleasePath(mechanism, requirement, depth, schema, X, y, row, label)

    # ------------------------------------------------------------------ the pair
    def _root_law(self, schema: Schema, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """log P(root split) per depth-1 structure under the claimed root's selection law on (X, y)."""
        return self.root.structure_log_probs(schema, X, y, self.structures)

    def _choose(self, schema: Schema, X: np.ndarray, y: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, int, tuple[np.ndarray, np.ndarray]]:
        """r, its class, and the claimed root laws on D and D' (module docstring, "The added row")."""
        bins = HistogramBins.of(schema)
        columns = [rng.integers(0, a.size, CANDIDATES).astype(np.float64) if isinstance(a, CategoricalAttribute)
                   else rng.uniform(a.low, a.high, CANDIDATES) for a in schema.attributes]
        points = np.column_stack(columns)
        crowd = np.zeros((CANDIDATES, schema.n_classes))
        for a in range(schema.n_attributes):
            table = np.zeros((bins.size(a), schema.n_classes))
            np.add.at(table, (bins.codes(X, a), y), 1)
            crowd += table[bins.codes(points, a)]
        log_d = self._root_law(schema, X, y)
        mode = int(np.argmax(log_d))
        best: tuple[tuple[bool, float, float], np.ndarray, int, np.ndarray] | None = None
        laws: dict[tuple[tuple[int, ...], int], np.ndarray] = {}
        domain = Domain.of(schema, self.root.bins, self.root.max_arity)
        for i, point in enumerate(points):
            key_codes = tuple(int(c) for c in domain.codes(point[None, :])[0])
            for label in range(schema.n_classes):
                if (key_codes, label) not in laws:  # r moves the root law only through its codes and class
                    laws[(key_codes, label)] = self._root_law(schema, np.vstack([X, point]), np.append(y, label))
                log_d1 = laws[(key_codes, label)]
                divergence = float(((np.exp(log_d1) - np.exp(log_d)) * (log_d1 - log_d)).sum())
                key = (int(np.argmax(log_d1)) != mode, -float(crowd[i, label]), divergence)
                if best is None or key > best[0]:
                    best = (key, point, label, log_d1)
        assert best is not None
        return best[1], best[2], (log_d, best[3])

    # ------------------------------------------------------------------ the score
    def _root_split(self, root: Tree) -> float:
        """ln P'(split) - ln P(split) of the released root's split (0 when the root released none)."""
        node = root.nodes[0]
        s = None if node.is_leaf or node.attribute is None else self._structure_of.get(node.attribute)
        return 0.0 if s is None else float(self.root_laws[1][s] - self.root_laws[0][s])

    def _temperature(self, trees: Sequence[Tree], parameters: Mapping[str, Any]) -> float:
        """ln P'(T) - ln P(T) of the stated temperature given the released trees (0 when it is off the grid)."""
        stated, grid = parameters.get("temperature"), np.asarray(TEMPERATURES)
        if isinstance(stated, bool) or not isinstance(stated, (int, float)):
            return 0.0
        matches = np.flatnonzero(np.isclose(grid, float(stated), rtol=1e-9, atol=0.0))
        if not matches.size:
            return 0.0
        X, y, row = self.path.X, self.path.y, self.path.row
        prior, lik = NaiveBayesRelease(trees, parameters).parts(np.vstack([X, row]))
        right = np.argmax(prior[:, None, :] + lik[:, None, :] / grid[None, :, None], axis=2) == \
            np.append(y, self.path.label)[:, None]  # (rows, temperatures)
        utility, r_right = right[:-1].sum(axis=0).astype(np.float64), right[-1].astype(np.float64)
        beta = self.calibration_beta
        log_p = beta * utility - logsumexp(beta * utility)
        return float(beta * r_right[matches[0]] - logsumexp(log_p + beta * r_right))

    def scores(self, trees: Sequence[Tree], parameters: Mapping[str, Any]) -> np.ndarray:
        """The `SCORES` of one release: the claimed LLR D'/D of the whole, of its root split, of its temperature."""
        if not trees:
            return np.zeros(len(SCORES))
        root, histograms = trees[0], list(trees[1:])
        split, temperature = self._root_split(root), self._temperature(trees, parameters)
        root_cell = self.path.cells([root])
        counts = _count_llr(root_cell.released, root_cell.same_class, self.root.noise_scale)
        if histograms:
            cells = self.path.cells(histograms)
            counts += _count_llr(cells.released, cells.same_class, len(histograms) / self.epsilon_histograms)
        return np.array([split + counts + temperature, split, temperature])

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The `SCORES` of ``trials`` registered releases on D, then on D' (arrays of shape (trials, 3))."""
        return self.path.release_scores(trials, rng, self.scores)

    def describe(self) -> dict[str, Any]:
        flips = bool(np.argmax(self.root_laws[1]) != np.argmax(self.root_laws[0]))
        where = ("where it changes the root's most likely split, then its histogram cells hold the fewest rows of D"
                 if flips else "where its histogram cells hold the fewest rows of D (no row changes the root's "
                               "most likely split)")
        return {"added_row": self.path.added_row(where), "release_path": f"registry trainer of {self.mechanism!r}",
                "score": "log-likelihood ratio D'/D under the claimed law of the root's split, r's root and "
                         "histogram-tree cells (noise scales: root "
                         f"{self.root.noise_scale:g}, histograms histogram trees / {self.epsilon_histograms:g}) and "
                         f"the temperature given the released trees (beta {self.calibration_beta:g})"}


def dpea_nb_target(requirement: DP, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                   rng: np.random.Generator, *, mechanism: str = MECHANISM) -> DpeaNbTarget:
    """The registry's audit target of dpea-nb (or of ``mechanism``, a variant) at ``dp:epsilon,trees=1``, ``depth``."""
    return DpeaNbTarget(requirement, depth, schema, X, y, rng, mechanism=mechanism)
