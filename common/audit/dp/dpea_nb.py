"""Audit target (`common.audit.dp.estimate.AuditTarget`) for dpea-nb: its histogram trees' cells of the added row.

Every trial runs dpea-nb's registered trainer end to end (`common.audit.dp.blackbox.ReleasePath`) on D or
on D' = D + r and scores the release by r's cells in its histogram trees: in each, the released count of
r's class at the leaf r reaches (the root's leaf, then r's bin of that tree's attribute; 0 where that leaf
was dropped) and the rows m_t of D of r's class there. The score is sum_t ln P[c_t | m_t + 1] - ln P[c_t |
m_t] at the *claimed* histogram noise scale (histogram trees / (histogram share x epsilon),
`common.privacy.noise.discrete_laplace_log_pmf`): the Neyman-Pearson statistic of the histograms, the
part that spends most of the budget. A release whose histograms carry less noise than claimed moves it.

The root's selection and the temperature's choice are not scored (a score of part of a release bounds
the loss of the whole from below, so the audit stays sound, only less sharp about those parts); DPEA's
own target audits DPEA's selection. r is the domain point, among `CANDIDATES` drawn from the schema's
public ranges with each class, that has the fewest rows of D in its cells under a noiseless root-free
count (its bin of every attribute): where r's count is smallest, the noise alone hides it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.audit.dp.blackbox import ReleasePath
from common.data.schema import CategoricalAttribute, Schema
from common.mechanisms.dpea_nb import HISTOGRAM_SHARE, MECHANISM, HistogramBins
from common.privacy.noise import discrete_laplace_log_pmf
from common.privacy.requirements import DP
from common.trees.learners._data import check_xy
from common.trees.tree import Tree

__all__ = ["CANDIDATES", "DpeaNbTarget", "dpea_nb_target"]

CANDIDATES = 256  # random domain points tried as the added row


def _candidate(schema: Schema, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """The domain point and class whose (bin, class) cells over every attribute hold the fewest rows of D."""
    bins = HistogramBins.of(schema)
    columns = [rng.integers(0, a.size, CANDIDATES).astype(np.float64) if isinstance(a, CategoricalAttribute)
               else rng.uniform(a.low, a.high, CANDIDATES) for a in schema.attributes]
    points = np.column_stack(columns)
    crowd = np.zeros((CANDIDATES, schema.n_classes))
    for a in range(schema.n_attributes):
        table = np.zeros((bins.size(a), schema.n_classes))
        np.add.at(table, (bins.codes(X, a), y), 1)
        crowd += table[bins.codes(points, a)]
    i, c = np.unravel_index(int(np.argmin(crowd)), crowd.shape)
    return points[i], int(c)


class DpeaNbTarget:
    """dpea-nb's registered release on (D, D' = D + r); the score is the LLR of r's histogram cells (module docstring)."""

    def __init__(self, requirement: DP, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator, *, mechanism: str = MECHANISM) -> None:
        X, y = check_xy(schema, X, y)
        row, label = _candidate(schema, X, y, rng)
        self.mechanism = mechanism
        self.epsilon, self.delta = float(requirement.epsilon), 0.0
        self.path = ReleasePath(mechanism, requirement, depth, schema, X, y, row, label)
        self.epsilon_histograms = requirement.epsilon * HISTOGRAM_SHARE

    def _score(self, trees: list[Tree]) -> float:
        histograms = trees[1:]
        if not histograms:
            return 0.0
        cells = self.path.cells(histograms)
        scale = len(histograms) / self.epsilon_histograms
        m = cells.same_class
        return float((discrete_laplace_log_pmf(cells.released, m + 1, scale)
                      - discrete_laplace_log_pmf(cells.released, m, scale)).sum())

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Scores of ``trials`` registered releases on D, then on D'."""
        return self.path.scores(trials, rng, self._score)

    def describe(self) -> dict[str, Any]:
        return {"added_row": self.path.added_row("where its (bin, class) cells hold the fewest rows of D"), "release_path": f"registry trainer of {self.mechanism!r}",
                "score": "log-likelihood ratio D'/D of r's histogram-tree cells at the claimed noise scale "
                         f"(histogram trees / {self.epsilon_histograms:g})"}


def dpea_nb_target(requirement: DP, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                   rng: np.random.Generator, *, mechanism: str = MECHANISM) -> DpeaNbTarget:
    """The registry's audit target of dpea-nb (or of ``mechanism``, a variant) at ``dp:epsilon,trees=1``, ``depth``."""
    return DpeaNbTarget(requirement, depth, schema, X, y, rng, mechanism=mechanism)
