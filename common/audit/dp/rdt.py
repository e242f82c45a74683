"""Audit targets (`common.audit.dp.estimate.AuditTarget`) for the random-tree mechanisms: laplace-rdt and kanon-rdt.

Both mechanisms draw the tree structure from a seed before reading any row, so the audit fixes
one structure (from the audit's generator) and runs only the data-dependent step, vectorised over
trials. That is sound and exact:

* *Conditioning on the structure.* Both privacy proofs hold for every fixed structure (the
  structure is independent of the data), so a violation for one structure is a violation of the
  claim.
* *Only the target's cells matter.* D and D' differ by one row r, which in each tree changes only
  the (leaf, class) cell r falls in. Every other cell is drawn independently and with the same law
  under D and D' (Laplace noise or Bernoulli sampling is per cell and per row), and inner counts
  and dropped subtrees are functions of the cells, so the likelihood ratio of a whole release
  equals that of r's cells: releasing those cells alone is a sufficient statistic for telling D
  from D'.

The neighbour r is chosen adversarially among the table's own rows and random points of the
schema's domain (with every class): for laplace-rdt the row whose cells hold the fewest rows of D
(ideally alone in its leaf in every tree); for kanon-rdt the row whose cells hold exactly k - 1
rows of D in the most trees, where r alone decides whether the cell reaches k and is released.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from scipy.stats import binom

from common.data.schema import CategoricalAttribute, Schema
from common.mechanisms.kanon_rdt import MECHANISM as KANON_RDT
from common.mechanisms.laplace_rdt import MECHANISM as LAPLACE_RDT
from common.mechanisms.laplace_rdt import SENSITIVITY, LaplaceRdt, count_log_pmf, leaf_class_counts
from common.privacy.requirements import DPS
from common.trees.learners._data import check_xy
from common.trees.learners.random_tree import random_structure

__all__ = ["LaplaceRdtTarget", "KAnonRdtTarget", "DOMAIN_CANDIDATES", "laplace_rdt_target", "kanon_rdt_target"]

DOMAIN_CANDIDATES = 1024  # random points of the schema's domain tried as the added row, besides the table's rows
_IMPOSSIBLE = 50.0  # score of a tree's outcome that one table's claimed law rules out (ln 1e21 or so)
_MAX_SEED = 2**64


def _domain_rows(schema: Schema, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` encoded rows drawn uniformly from the schema's domain (categories, public ranges)."""
    columns = [rng.integers(0, a.size, n).astype(np.float64) if isinstance(a, CategoricalAttribute)
               else rng.uniform(a.low, a.high, n) for a in schema.attributes]
    return np.column_stack(columns)


class _CellTarget(ABC):
    """The shared part: one fixed structure per tree, the added row r, and its cell count per tree in D."""

    mechanism: str
    epsilon: float
    delta: float

    def __init__(self, schema: Schema, X: np.ndarray, y: np.ndarray, *, depth: int, n_trees: int,
                 rng: np.random.Generator, numeric_reuse: bool = True, max_nodes: int = 100_000) -> None:
        X, y = check_xy(schema, X, y)
        self.schema = schema
        self.structure_seed = int(rng.integers(0, _MAX_SEED, dtype=np.uint64))
        structures = [random_structure(schema, depth, self.structure_seed, t, numeric_reuse=numeric_reuse,
                                       max_nodes=max_nodes) for t in range(n_trees)]
        candidates = np.concatenate([X, _domain_rows(schema, DOMAIN_CANDIDATES, rng)])
        # cells[t, i, c]: rows of D in tree t's (leaf of candidate i, class c) cell
        cells = np.stack([leaf_class_counts(s, X, y)[s.apply(candidates)] for s in structures])
        i, c = np.unravel_index(int(np.argmax(self._preference(cells))), cells.shape[1:])
        self.row, self.label = candidates[i], int(c)
        self.counts = cells[:, i, c]

    @abstractmethod
    def _preference(self, cells: np.ndarray) -> np.ndarray:
        """How much the audit wants each (candidate i, class c) as the added row (highest wins), from cells[t, i, c]."""

    def _neighbour(self) -> dict[str, Any]:
        row = self.schema.decode(self.row[None, :], np.array([self.label])).iloc[0]
        return {"added_row": {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()},
                "cell_counts_in_D": [int(m) for m in self.counts], "structure_seed": self.structure_seed}


class LaplaceRdtTarget(_CellTarget):
    """laplace-rdt on (D, D' = D + r), r in the emptiest cells; the score is the log-likelihood ratio.

    The releases come from ``mechanism.noisy_counts`` (the release's own noise step) on r's cells.
    The score of a release is sum_t ln P[c_t | m_t + 1] - ln P[c_t | m_t] under the *claimed*
    noise scale trees * sensitivity / epsilon (`count_log_pmf`), with m_t r's cell count in D: the
    Neyman-Pearson test of D against D' for a correct mechanism, so thresholding it gives the
    events on which a correct release comes closest to its bound, and a release noisier or less
    noisy than claimed moves it.
    """

    mechanism = LAPLACE_RDT

    def __init__(self, mechanism: LaplaceRdt, schema: Schema, X: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator) -> None:
        self.audited = mechanism  # its noisy_counts draws the releases; a broken subclass is audited as such
        self.epsilon, self.delta = float(mechanism.epsilon), 0.0
        self.claimed_scale = SENSITIVITY * mechanism.n_trees / mechanism.epsilon
        super().__init__(schema, X, y, depth=mechanism.depth, n_trees=mechanism.n_trees, rng=rng,
                         numeric_reuse=mechanism.numeric_reuse, max_nodes=mechanism.max_nodes)

    def _preference(self, cells: np.ndarray) -> np.ndarray:
        return -cells.sum(axis=0)  # fewest rows of D in r's cells, over all trees

    def _score(self, released: np.ndarray) -> np.ndarray:
        m, scale = self.counts, self.claimed_scale
        return (count_log_pmf(released, m + 1, scale) - count_log_pmf(released, m, scale)).sum(axis=1)

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        m = np.broadcast_to(self.counts, (trials, self.counts.size))
        return self._score(self.audited.noisy_counts(m, rng)), self._score(self.audited.noisy_counts(m + 1, rng))

    def describe(self) -> dict[str, Any]:
        return {**self._neighbour(), "score": f"log-likelihood ratio D'/D of r's released cells at the claimed "
                                              f"noise scale {self.claimed_scale:g}"}


class KAnonRdtTarget(_CellTarget):
    """kanon-rdt (``dps:`` requirement) on (D, D' = D + r), r in cells of k - 1 rows; the score is the LLR.

    Each release draws, per tree, the Bernoulli(`sampling_rate`) sample of r's cell (the m_t rows
    of D, plus r under D') and zeroes a sampled count below k, as
    `common.trees.learners.random_tree.RandomDecisionTrees.fit` does per cell. The score is
    sum_t ln P'[c_t] - ln P[c_t] under the *claimed* law (the requirement's beta): with
    S ~ Bin(m_t, beta) the count under D and S + Bernoulli(beta) under D', released as S when
    S >= k and 0 otherwise. An outcome only D' allows scores +`_IMPOSSIBLE` (one only D allows,
    the negative), one the claim rules out under both tables 0. The claim is (epsilon_total,
    delta_total) of Corollary 1, so the bounds subtract delta.
    """

    mechanism = KANON_RDT

    def __init__(self, requirement: DPS, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator) -> None:
        self.requirement = requirement
        self.epsilon, self.delta = requirement.epsilon, requirement.guarantee().delta_total
        super().__init__(schema, X, y, depth=depth, n_trees=requirement.trees, rng=rng)

    @property
    def sampling_rate(self) -> float:
        """The probability that a tree counts a row: the requirement's beta."""
        return self.requirement.beta

    def _preference(self, cells: np.ndarray) -> np.ndarray:
        """Most trees with exactly k - 1 rows of D in r's cell, then the smallest total distance from k - 1."""
        gap = np.abs(cells - (max(self.requirement.k, 1) - 1))
        most = cells.shape[0] * (gap.max() + 1)  # exceeds any total distance, so exact cells come first
        return (gap == 0).sum(axis=0) * most - gap.sum(axis=0)

    def _released(self, m: np.ndarray, with_r: bool, rng: np.random.Generator) -> np.ndarray:
        """Per trial and tree, r's cell count after sampling and suppression below k."""
        sampled = rng.binomial(m, self.sampling_rate)
        if with_r:
            sampled += rng.random(m.shape) < self.sampling_rate
        return np.where(sampled >= self.requirement.k, sampled, 0)

    def _score(self, released: np.ndarray) -> np.ndarray:
        m, k, beta = self.counts, self.requirement.k, self.requirement.beta
        zero = released == 0
        log_d = np.where(zero, binom.logcdf(k - 1, m, beta), binom.logpmf(released, m, beta))
        with_r = np.where(zero, binom.logcdf(k - 2, m, beta), binom.logpmf(released - 1, m, beta))
        log_d1 = np.logaddexp(np.log1p(-beta) + log_d, np.log(beta) + with_r)
        with np.errstate(invalid="ignore"):
            ratio = log_d1 - log_d
        return np.nan_to_num(ratio, nan=0.0, posinf=_IMPOSSIBLE, neginf=-_IMPOSSIBLE).sum(axis=1)

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        m = np.broadcast_to(self.counts.astype(np.int64), (trials, self.counts.size))
        return self._score(self._released(m, False, rng)), self._score(self._released(m, True, rng))

    def describe(self) -> dict[str, Any]:
        return {**self._neighbour(), "score": f"log-likelihood ratio D'/D of r's released cells under the claimed "
                                              f"beta {self.requirement.beta:g} and k {self.requirement.k}"}


def laplace_rdt_target(requirement: Any, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                       rng: np.random.Generator) -> LaplaceRdtTarget:
    """The registry's audit target of laplace-rdt at the claimed ``dp:epsilon,trees`` and ``depth``."""
    return LaplaceRdtTarget(LaplaceRdt(requirement.epsilon, requirement.trees, depth), schema, X, y, rng)


def kanon_rdt_target(requirement: DPS, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                     rng: np.random.Generator) -> KAnonRdtTarget:
    """The registry's audit target of kanon-rdt at the claimed ``dps:k,beta,epsilon,trees`` and ``depth``."""
    return KAnonRdtTarget(requirement, depth, schema, X, y, rng)
