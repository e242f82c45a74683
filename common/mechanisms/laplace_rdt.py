"""Laplace random decision trees (``laplace-rdt``): the classic eps-DP random forest, as a baseline.

Every tree has the data-independent random structure of `modelshare.common.trees.learners.random_tree`
(`random_structure`: splits drawn from the schema's attributes and public ranges, never from the
rows), and releases its leaf class counts with discrete Laplace noise (`modelshare.common.privacy.noise`).

Privacy (neighbouring tables differ by one added or removed row):

* *One tree, sensitivity 1.* The full structure routes every row to exactly one leaf (categorical
  splits have a child per category, numeric ones cover both sides of the threshold), so the leaves
  partition the rows and adding or removing one row changes exactly one (leaf, class) count, by
  exactly 1: the vector of all leaf class counts has L1 sensitivity 1. Adding independent discrete
  Laplace(1/eps_t) noise (P[z] proportional to exp(-eps_t |z|)) to every count, empty leaves
  included, makes the tree eps_t-DP (the geometric mechanism, Ghosh et al. 2009); this is parallel
  composition over the disjoint leaves. The noisy counts are integers drawn by an exact sampler, so
  their bits carry nothing beyond their values (no floating-point leak, Mironov 2012).
* *T trees, sequential composition.* Each tree gets eps_t = epsilon / T, so the forest is
  epsilon-DP; the noise scale per count is ``T * 1 / epsilon``.
* *Structure and post-processing are free.* The structure seed is drawn before any row is read,
  and everything done to the noisy counts afterwards depends on nothing else: each count is
  clamped at 0 (so counts read like counts and PGEN can draw rows from them), inner counts are recomputed as sums of
  their children, and subtrees whose released counts are all 0 are not materialised (a row reaching them is predicted
  from the other trees, exactly as a zero count would be).

`LaplaceRdt.noisy_counts` is the one place noise is drawn, and
`modelshare.common.privacy.noise.discrete_laplace_log_pmf` is the exact law of a released count, which the
empirical audit (`modelshare.common.audit.dp.rdt`, running `train_laplace_rdt` end to end) scores releases by.

Auditors (`modelshare.common.audit.release`, in the miner's verifier processes) import this module for its constants
only, so the random-tree code (and with it scikit-learn) is imported on first use in `LaplaceRdt.fit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.params import check_positive_int, check_positive_real
from modelshare.common.privacy.checks import Check, integer_counts_check, numeric_parameter, recomputed
from modelshare.common.privacy.noise import Randomness, SecretNoise, noisy_counts
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.trees.rebuild import release_leaf_counts
from modelshare.common.trees.tree import Tree

if TYPE_CHECKING:
    from modelshare.common.privacy.requirements import DP

__all__ = [
    "MECHANISM",
    "SENSITIVITY",
    "POST_PROCESSING",
    "LaplaceRdt",
    "LaplaceRdtRelease",
    "leaf_class_counts",
    "train_laplace_rdt",
    "audit_checks",
]

MECHANISM = "laplace-rdt"  # the release mechanism's registry name in reports, studies and policies
SENSITIVITY = 1  # L1 sensitivity of one tree's leaf class counts under add/remove-one-row (module docstring)
POST_PROCESSING = "integer noisy counts clamped at 0; inner counts are sums of their children"

_MAX_SEED = 2**64


@dataclass(frozen=True)
class LaplaceRdtRelease:
    """The output of `LaplaceRdt.fit`: the released trees, and the structure seed (for tests, not released)."""

    trees: list[Tree]
    structure_seed: int


def leaf_class_counts(structure: Tree, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per node of a full random structure, the class counts of the rows it routes to that node.

    Shape ``(nodes, classes)``. In a full structure every row stops at a leaf, so inner nodes count 0.
    """
    n_nodes, n_classes = len(structure.nodes), structure.schema.n_classes
    node = structure.apply(X)
    counts = np.bincount(node * n_classes + y, minlength=n_nodes * n_classes)
    return counts.reshape(n_nodes, n_classes).astype(np.float64)


@dataclass(frozen=True)
class LaplaceRdt:
    """The laplace-rdt mechanism at one setting: total ``epsilon`` over ``n_trees`` trees of ``depth``.

    ``numeric_reuse`` is passed to `random_structure` (a numeric attribute may be split again below
    a split on it). ``max_nodes`` bounds the nodes of one full structure: every leaf, empty or not,
    must get noise, so the whole structure is materialised, and a schema with many categories at a
    large depth is refused (naming the limit) rather than exhausting memory.
    """

    epsilon: float
    n_trees: int
    depth: int
    numeric_reuse: bool = True
    max_nodes: int = 100_000

    def __post_init__(self) -> None:
        check_positive_real("epsilon", self.epsilon)
        check_positive_int("n_trees", self.n_trees)
        check_positive_int("depth", self.depth)
        check_positive_int("max_nodes", self.max_nodes)

    @property
    def scale(self) -> float:
        """Laplace scale per count: sensitivity / (epsilon / n_trees)."""
        return SENSITIVITY * self.n_trees / self.epsilon

    def parameters(self) -> dict[str, Any]:
        """What a release states about this setting
        (`modelshare.common.audit.release` recomputes the derived values)."""
        return {
            "epsilon": float(self.epsilon), "trees": self.n_trees, "depth": self.depth,
            "epsilon_per_tree": self.epsilon / self.n_trees, "sensitivity": SENSITIVITY,
            "noise_scale": SENSITIVITY * self.n_trees / self.epsilon, "post_processing": POST_PROCESSING,
        }

    def noisy_counts(self, true: np.ndarray, noise: SecretNoise) -> np.ndarray:
        """``true`` plus independent discrete Laplace(`scale`) noise per entry, clamped at 0 (any shape)."""
        return noisy_counts(true, self.scale, noise)

    def fit(
        self, schema: Schema, X: np.ndarray, y: np.ndarray, rng: int | np.random.Generator | Randomness | None = None
    ) -> LaplaceRdtRelease:
        """Draw the structure seed, then release every tree's noisy leaf counts.

        Parameters
        ----------
        schema, X, y:
            The schema and the encoded rows (checked against the schema).
        rng:
            `Randomness` (or a seed or Generator for `Randomness.seeded`): the structure seed comes
            from its public stream, the noise from its secret one. None is `Randomness.fresh`, which
            a release needs (anyone who knows a seed can subtract the noise).

        Raises
        ------
        ValueError
            Rows that do not fit the schema (naming the column and row), or a structure larger
            than ``max_nodes``.
        """
        from modelshare.common.trees.learners._data import check_xy  # see the module docstring
        from modelshare.common.trees.learners.random_tree import random_structure

        X, y = check_xy(schema, X, y)
        randomness = Randomness.of(rng)
        seed = int(randomness.public.integers(0, _MAX_SEED, dtype=np.uint64))
        trees = [self._tree(random_structure(schema, self.depth, seed, t, numeric_reuse=self.numeric_reuse,
                                             max_nodes=self.max_nodes), X, y, randomness.secret)
                 for t in range(self.n_trees)]
        return LaplaceRdtRelease(trees, seed)

    def _tree(self, structure: Tree, X: np.ndarray, y: np.ndarray, noise: SecretNoise) -> Tree:
        """One released tree: noisy counts at every leaf of ``structure``, zero subtrees dropped, inner sums."""
        leaves = np.array(structure.leaves, dtype=np.int64)
        noisy = self.noisy_counts(leaf_class_counts(structure, X, y)[leaves], noise)
        return release_leaf_counts(structure.schema, structure.nodes, leaves, noisy)


def train_laplace_rdt(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
                      rng: Randomness) -> tuple[list[Tree], dict[str, Any]]:
    """The registry trainer of laplace-rdt: ``requirement.trees`` noisy random trees of ``depth``."""
    mechanism = LaplaceRdt(requirement.epsilon, requirement.trees, depth)
    return mechanism.fit(schema, X, y, rng).trees, mechanism.parameters()


def audit_checks(trees: Sequence[Tree], report: PrivacyReport, requirement: DP) -> list[Check]:
    """laplace-rdt's accounting (scale = trees * sensitivity / epsilon) and its stated post-processing."""
    per_tree = requirement.epsilon / requirement.trees
    scale = SENSITIVITY / per_tree
    wrong = [f"sensitivity={report.parameters.get('sensitivity')!r} (add/remove one row changes one leaf count "
             f"by 1: {SENSITIVITY})"] if numeric_parameter(report.parameters, "sensitivity") != SENSITIVITY else []
    wrong += recomputed(report.parameters, {"epsilon_per_tree": per_tree, "noise_scale": scale})
    noise = Check("noise scale recomputed from (epsilon, trees)", not wrong, "; ".join(wrong) if wrong else (
        f"Laplace scale {scale:g} per count = sensitivity {SENSITIVITY} / (epsilon {requirement.epsilon:g} / "
        f"{requirement.trees} trees); that noise was drawn cannot be seen in the release "
        f"(the empirical audit, modelshare privacy audit-dp, tests it)"))
    return [noise, integer_counts_check(trees, report, POST_PROCESSING)]
