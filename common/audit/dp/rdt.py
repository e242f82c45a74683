"""Audit targets (`modelshare.common.audit.dp.estimate.AuditTarget`)
for the random-tree mechanisms: laplace-rdt and kanon-rdt.

Every trial runs the mechanism's registered release path end to end (`modelshare.common.audit.dp.blackbox`:
the registry trainer on D or on D' = D + r, a fresh structure seed each time) and scores the
released trees. Nothing of the mechanism is re-implemented, so a trainer that skips noise on some
cells, samples too much or suppresses too little is audited as it runs.

* *What the score reads.* D and D' differ by the row r, which in each tree changes only the
  (leaf, class) cell r falls in; every other cell has the same law under both tables given the
  structure. So the score of a release is built from r's cell in each released tree
  (`modelshare.common.audit.dp.blackbox.released_cell`): the released count c_t of r's class at the node r
  stops at (0 when that leaf was dropped as all-zero) and the rows m_t of D of that class there.
* *The score: a log-likelihood ratio under the claim.* sum_t ln P'(c_t) - ln P(c_t) under the
  *claimed* law of one cell with m_t rows of D (laplace-rdt: the clamped, rounded Laplace at scale
  trees / epsilon; kanon-rdt: Bernoulli(beta) sampling and counts below k zeroed). It is the
  Neyman-Pearson statistic of a correct release, and a release that departs from the claim moves
  it; outcomes the claim rules out under one table score +-`_IMPOSSIBLE`.
* *The added row.* The structures are drawn from public randomness only, so the target draws
  `STRUCTURE_SAMPLES` of them from the same law (`random_structure`, the schema alone) and chooses r
  among the table's rows and `DOMAIN_CANDIDATES` random points of the domain (with every class) by
  the cell counts it would have: for laplace-rdt the fewest rows of D (r alone in its leaf); for
  kanon-rdt (``aim="threshold"``) most often exactly k - 1 rows, where r alone decides whether the
  cell reaches k, or (``aim="sparse"``) the fewest rows, where only suppression hides r.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

import numpy as np
from scipy.stats import binom

from modelshare.common.audit.dp.blackbox import ReleasePath
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.mechanisms.kanon_rdt import LOG_MECHANISM as KANON_RDT_LOG
from modelshare.common.mechanisms.kanon_rdt import MECHANISM as KANON_RDT
from modelshare.common.mechanisms.laplace_rdt import MECHANISM as LAPLACE_RDT
from modelshare.common.mechanisms.laplace_rdt import SENSITIVITY, leaf_class_counts
from modelshare.common.privacy.noise import discrete_laplace_log_pmf
from modelshare.common.privacy.requirements import DP, DPS
from modelshare.common.trees.learners._data import check_xy
from modelshare.common.trees.learners.random_tree import ThresholdScale, random_structure
from modelshare.common.trees.tree import Tree

__all__ = ["LaplaceRdtTarget", "KAnonRdtTarget", "DOMAIN_CANDIDATES", "STRUCTURE_SAMPLES", "laplace_rdt_target",
           "kanon_rdt_target", "kanon_rdt_log_target"]

DOMAIN_CANDIDATES = 1024  # random points of the schema's domain tried as the added row, besides the table's rows
STRUCTURE_SAMPLES = 32  # public random structures the added row is chosen on
_IMPOSSIBLE = 50.0  # score of a tree's outcome that one table's claimed law rules out (ln 1e21 or so)
_MAX_SEED = 2**64
_FEWEST = "where its cells hold the fewest rows of D over the public structures sampled"

Aim = Literal["threshold", "sparse"]


def _domain_rows(schema: Schema, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` encoded rows drawn uniformly from the schema's domain (categories, public ranges)."""
    columns = [rng.integers(0, a.size, n).astype(np.float64) if isinstance(a, CategoricalAttribute)
               else rng.uniform(a.low, a.high, n) for a in schema.attributes]
    return np.column_stack(columns)


def _candidate_cells(schema: Schema, X: np.ndarray, y: np.ndarray, depth: int, rng: np.random.Generator,
                     thresholds: ThresholdScale) -> tuple[np.ndarray, np.ndarray]:
    """The candidate rows, and cells[s, i, c]: rows of D in public structure s's (leaf of candidate i, class c)."""
    candidates = np.concatenate([X, _domain_rows(schema, DOMAIN_CANDIDATES, rng)])
    seeds = rng.integers(0, _MAX_SEED, STRUCTURE_SAMPLES, dtype=np.uint64)
    structures = [random_structure(schema, depth, int(seed), thresholds=thresholds) for seed in seeds]
    return candidates, np.stack([leaf_class_counts(s, X, y)[s.apply(candidates)] for s in structures])


def _fewest(cells: np.ndarray) -> np.ndarray:
    """Preference for the candidate whose cells hold the fewest rows of D, over the structures."""
    fewest: np.ndarray = -cells.sum(axis=0)
    return fewest


def _threshold(cells: np.ndarray, k: int) -> np.ndarray:
    """Preference: most structures with exactly k - 1 rows of D in r's cell, then the smallest total distance."""
    gap = np.abs(cells - (max(k, 1) - 1))
    most = cells.shape[0] * (gap.max() + 1)  # exceeds any total distance, so exact cells come first
    preference: np.ndarray = (gap == 0).sum(axis=0) * most - gap.sum(axis=0)
    return preference


class _RdtTarget(ABC):
    """The shared part: the added row chosen on public structures, and the registered release path."""

    mechanism: str
    epsilon: float
    delta: float

    def __init__(self, mechanism: str, requirement: DP | DPS, depth: int, schema: Schema, X: np.ndarray,
                 y: np.ndarray, rng: np.random.Generator, preference: Callable[[np.ndarray], np.ndarray],
                 thresholds: ThresholdScale = "uniform") -> None:
        X, y = check_xy(schema, X, y)
        candidates, cells = _candidate_cells(schema, X, y, depth, rng, thresholds)
        i, c = np.unravel_index(int(np.argmax(preference(cells))), cells.shape[1:])
        self.mechanism = mechanism
        self.path = ReleasePath(mechanism, requirement, depth, schema, X, y, candidates[i], int(c))
        self.expected_counts = cells[:, i, c]

    @abstractmethod
    def _score(self, trees: Sequence[Tree]) -> float:
        """The score of one release, from its released trees."""

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Scores of ``trials`` registered releases on D, then on D'."""
        return self.path.scores(trials, rng, self._score)

    def _neighbour(self, where: str) -> dict[str, Any]:
        """r without its values (`modelshare.common.audit.dp.blackbox.describe_added_row`) and its cells' sizes in D."""
        counts = self.expected_counts
        return {"added_row": self.path.added_row(where), "release_path": f"registry trainer of {self.mechanism!r}",
                "cell_counts_in_D": [int(counts.min()), int(np.median(counts)), int(counts.max())]}


class LaplaceRdtTarget(_RdtTarget):
    """laplace-rdt's registered release on (D, D' = D + r), r in the emptiest cells; the score is the LLR.

    The score of a release is sum_t ln P[c_t | m_t + 1] - ln P[c_t | m_t] at the *claimed* noise
    scale trees * sensitivity / epsilon (`discrete_laplace_log_pmf`), with c_t and m_t read from released tree t
    (module docstring).
    """

    def __init__(self, requirement: DP, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator, *, mechanism: str = LAPLACE_RDT) -> None:
        self.epsilon, self.delta = float(requirement.epsilon), 0.0
        self.claimed_scale = SENSITIVITY * requirement.trees / requirement.epsilon
        super().__init__(mechanism, requirement, depth, schema, X, y, rng, _fewest)

    def _score(self, trees: Sequence[Tree]) -> float:
        cells, scale = self.path.cells(trees), self.claimed_scale
        m = cells.same_class
        return float((discrete_laplace_log_pmf(cells.released, m + 1, scale)
                      - discrete_laplace_log_pmf(cells.released, m, scale)).sum())

    def describe(self) -> dict[str, Any]:
        return {**self._neighbour(_FEWEST), "score": f"log-likelihood ratio D'/D of r's released cells at the claimed "
                                              f"noise scale {self.claimed_scale:g}"}


class KAnonRdtTarget(_RdtTarget):
    """kanon-rdt's registered release (``dps:`` claim) on (D, D' = D + r); the score is the LLR under the claim.

    Under the claimed law r's cell with m_t rows of D releases S ~ Bin(m_t, beta) under D and
    S + Bernoulli(beta) under D', as S when S >= k and 0 otherwise. An outcome only D' allows scores
    +`_IMPOSSIBLE` (one only D allows, the negative), one the claim rules out under both 0. A nonzero
    count is scored by the sampling law alone, so a count below k that only D' can reach (suppression
    skipped) scores +`_IMPOSSIBLE` too. The claim is (epsilon_total, delta_total) of Corollary 1, so
    the bounds subtract delta.
    """

    def __init__(self, requirement: DPS, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator, *, mechanism: str = KANON_RDT, aim: Aim = "threshold",
                 thresholds: ThresholdScale = "uniform") -> None:
        if aim not in ("threshold", "sparse"):
            raise ValueError(f"aim must be 'threshold' or 'sparse'; got {aim!r}")
        self.requirement, self.aim = requirement, aim
        self.epsilon, self.delta = requirement.epsilon, requirement.guarantee().delta_total
        preference = _fewest if aim == "sparse" else partial(_threshold, k=requirement.k)
        super().__init__(mechanism, requirement, depth, schema, X, y, rng, preference, thresholds)

    def _score(self, trees: Sequence[Tree]) -> float:
        cells = self.path.cells(trees)
        released, m = cells.released, cells.same_class
        k, beta = self.requirement.k, self.requirement.beta
        zero = released == 0
        log_d = np.where(zero, binom.logcdf(k - 1, m, beta), binom.logpmf(released, m, beta))
        with_r = np.where(zero, binom.logcdf(k - 2, m, beta), binom.logpmf(released - 1, m, beta))
        log_d1 = np.logaddexp(np.log1p(-beta) + log_d, np.log(beta) + with_r)
        with np.errstate(invalid="ignore"):
            ratio = log_d1 - log_d
        return float(np.nan_to_num(ratio, nan=0.0, posinf=_IMPOSSIBLE, neginf=-_IMPOSSIBLE).sum())

    def describe(self) -> dict[str, Any]:
        where = (_FEWEST if self.aim == "sparse" else
                 f"where its cells hold k - 1 = {self.requirement.k - 1} rows of D in the most "
                 "public structures sampled")
        return {**self._neighbour(where), "aim": self.aim,
                "score": f"log-likelihood ratio D'/D of r's released cells under the claimed beta "
                         f"{self.requirement.beta:g} and k {self.requirement.k}"}


def laplace_rdt_target(requirement: DP, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                       rng: np.random.Generator, *, mechanism: str = LAPLACE_RDT) -> LaplaceRdtTarget:
    """The registry's audit target of laplace-rdt (or of ``mechanism``, a variant) at ``dp:epsilon,trees``,
    ``depth``."""
    return LaplaceRdtTarget(requirement, depth, schema, X, y, rng, mechanism=mechanism)


def kanon_rdt_target(requirement: DPS, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                     rng: np.random.Generator, *, mechanism: str = KANON_RDT, aim: Aim = "threshold") -> KAnonRdtTarget:
    """The registry's audit target of kanon-rdt (or of ``mechanism``) at ``dps:k,beta,epsilon,trees``, ``depth``."""
    return KAnonRdtTarget(requirement, depth, schema, X, y, rng, mechanism=mechanism, aim=aim)


def kanon_rdt_log_target(requirement: DPS, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                         rng: np.random.Generator, *, mechanism: str = KANON_RDT_LOG,
                         aim: Aim = "threshold") -> KAnonRdtTarget:
    """The registry's audit target of kanon-rdt-log: kanon-rdt's, its added row chosen on log-scale structures."""
    return KAnonRdtTarget(requirement, depth, schema, X, y, rng, mechanism=mechanism, aim=aim, thresholds="log")
