"""DiffPETs (Li, Chen & Xie 2020): differentially private ExtraTrees, for classification and regression.

Every tree grows top-down on the whole table. At each node the mechanism draws K random
(attribute, split) candidates from the public schema, lets the exponential mechanism pick one by a
utility of the node's rows (count-weighted Gini for classes, minus the sum of squared errors for a
target), and stops on a noisy row count; leaves release noisy statistics (a class histogram, or a
noisy count and sum of the target). This follows the recommended implementation of
``docs/paper-notes.md`` §1.4 and every choice of §1.10:

* *No bootstrap by default* (A1). Alg. 1 resamples |D| rows with replacement, so one person may
  appear many times in a tree and every sensitivity below is multiplied by that multiplicity: the
  paper's epsilon does not hold. ``bootstrap=True`` reproduces the paper and its parameters say the
  guarantee is void.
* *Split points from the public schema* (A3). A numeric threshold is uniform on the attribute's
  public range narrowed by the splits above the node (Geurts' ExtraTrees draw it between the node's
  data minimum and maximum, which leaks the extremes); a categorical split sends a uniformly random
  non-empty proper subset of the categories still allowed at the node left and the rest right.
  Attributes are never removed from the pool (Alg. 2 recurses on the full A), so an attribute may be
  split again on its narrowed domain; one with nothing left to split is not a candidate.
* *Noisy-count stopping* (A4). A node becomes a leaf at depth h, when its noisy size N' is below
  ``theta``, or when no attribute can be split in its region. The paper's other rules (all labels
  equal, error below a threshold) read the raw rows without budget and would leak; they are not used.
  The default ``theta`` is Friedman & Schuster's DiffP-C4.5 rule, sqrt(2)*|C|/eps2 for classes and
  sqrt(2)/eps2 for a target: below it the noise of N' is of the order of N' itself, and splitting
  such a node spends budget on noise.
* *Utilities* (A9): classification q = -sum_j tau_j * (1 - sum_c (tau_jc / tau_j)^2), the paper's
  Eq. 5, with Delta q = 2; regression q = -(SSE_left + SSE_right) on the target scaled to [0, 1],
  with Delta q = 2 as the paper states (adding or removing one y in [0, 1] changes an SSE by at most
  n / (n + 1) < 1, so 1 would do; 2 is kept to match the paper).
* *Budget* (§1.2, A6): eps1 = epsilon / t per tree and eps2 = eps1 / (2 (h + 1)) per node half; the
  root has depth 0, leaves have depth <= h, so a path holds at most h + 1 nodes.
* *K* (A2): ceil(sqrt(|A|)) candidates for classification, |A| for regression (scikit-learn's
  ExtraTrees defaults), attributes drawn without replacement among those splittable at the node.
* *Leaves* (A5): a classifier leaf releases the mean of two independent noisy class histograms (the
  one drawn for the stopping test and one drawn with the leaf's second half), clamped at 0 and
  rounded; its label is the argmax. A regression leaf releases (N', S'), the stopping test's noisy
  count and a noisy sum of the scaled target, and predicts clip(S' / max(N', 1), 0, 1).
* *Noise on integers* (`modelshare.common.privacy.noise`). Every noisy statistic is an integer plus discrete
  Laplace noise from OpenDP's exact sampler, and the exponential mechanism's pick is OpenDP's exact
  Gumbel noisy-max; both are secret draws, never taken from the stream that draws the public
  candidates. A regression target scaled to [0, 1] is first rounded to the public grid of
  1/``TARGET_GRID`` (a per-row, data-independent map), so its sum is an integer number of grid units
  with sensitivity ``TARGET_GRID`` units (= 1 in target units); S' is that noisy integer divided by
  ``TARGET_GRID``, a power of two, so the released float is exact and its bits carry nothing beyond
  the noisy integer (Mironov 2012's attack on continuous Laplace outputs has nothing to read).

Privacy (neighbouring tables differ by one added or removed row r; Laplace and exponential
mechanisms as in Dwork et al. 2006 and McSherry & Talwar 2007):

1. *One node is 2*eps2-DP on its own rows.* Half 1: the node's class histogram (classification)
   or row count (regression) has L1 sensitivity 1, so adding Laplace(1/eps2) to each entry is
   eps2-DP; only its sum N' is used before the leaf, to decide whether to stop. Half 2, chosen from
   public facts and N': at an inner node, the exponential mechanism with Pr[k] proportional to
   exp(eps2 * q_k / (2 * Delta q)) over candidates drawn from the public region is eps2-DP because
   q changes by at most Delta q = 2; at a leaf, a second Laplace(1/eps2) histogram (sensitivity 1)
   or the Laplace(1/eps2) sum of the target (each y in [0, 1]: sensitivity 1) is eps2-DP. By
   (adaptive) sequential composition the node is 2*eps2-DP. The candidates, the thresholds and the
   decision "no attribute left to split" depend only on the schema and on the outputs above the
   node, so they cost nothing.
2. *One level is 2*eps2-DP.* The nodes at one depth have disjoint regions (each split partitions its
   node's region), fixed by the outputs of the levels above. Row r lies in at most one of them, so
   every other node at the level sees the same rows under both tables: parallel composition.
3. *One tree is eps1-DP.* A tree has at most h + 1 levels (depths 0..h); sequential composition
   over the levels, each run on the outputs of the previous ones, costs 2 * (h + 1) * eps2 = eps1.
4. *The forest is epsilon-DP.* Each of the t trees reads the whole table (no bootstrap), so the t
   trees compose sequentially: t * eps1 = epsilon.
5. *Post-processing is free.* Averaging the two leaf histograms, clamping at 0, rounding, inner
   counts as sums of their children, dropping leaves whose released counts are all 0 (a row
   reaching one is predicted by the other trees, exactly as a zero count would be), the regression
   leaf value S'/max(N', 1), prediction and PGEN are functions of the released values alone.

Auditors (`modelshare.common.audit.release`, in the miner's verifier processes) import this module for its constants
only, so it imports neither scikit-learn nor scipy: the row checks are imported on first use in
``fit``. The empirical audit is `modelshare.common.audit.dp.diffpets`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import (
    Attribute,
    CategoricalAttribute,
    NumericAttribute,
    Schema,
)
from modelshare.common.params import check_positive_int, check_positive_real
from modelshare.common.privacy.checks import Check, integer_counts_check, numeric_parameter, recomputed
from modelshare.common.privacy.noise import Randomness, SecretNoise, to_grid
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.trees.rebuild import release_leaf_counts
from modelshare.common.trees.regression import RegressionForest, RegressionNode, RegressionTree
from modelshare.common.trees.tree import (
    CategorySet,
    Constraint,
    Edge,
    Interval,
    Node,
    Tree,
)

if TYPE_CHECKING:

    from modelshare.common.privacy.requirements import DP

__all__ = [
    "MECHANISM",
    "COUNT_SENSITIVITY",
    "GINI_SENSITIVITY",
    "VARIANCE_SENSITIVITY",
    "POST_PROCESSING",
    "REGRESSION_POST_PROCESSING",
    "BOOTSTRAP_CAVEAT",
    "DiffPets",
    "DiffPetsRelease",
    "DiffPetsRegressor",
    "gini_utility",
    "variance_utility",
    "exponential_choice",
    "train_diffpets",
]

MECHANISM = "diffpets"  # the release mechanism's registry name in reports, studies and policies
COUNT_SENSITIVITY = 1  # L1 sensitivity of a node's class histogram, row count or target sum (y in [0, 1])
TARGET_GRID = 2**10  # a regression target scaled to [0, 1] is noised in units of 1 / TARGET_GRID (module docstring)
GINI_SENSITIVITY = 2  # Delta q of the count-weighted Gini utility (paper Eq. 5)
VARIANCE_SENSITIVITY = 2  # Delta q of -SSE on y in [0, 1], as the paper states (1 is a valid, tighter bound)
POST_PROCESSING = ("leaf counts are the mean of two noisy class histograms, clamped at 0 and rounded to integers; "
                   "inner counts are sums of their children; leaves whose counts are all 0 are dropped")
REGRESSION_POST_PROCESSING = ("leaves release the integer noisy count N' and the noisy sum S' of the target scaled to "
                              "[0, 1], an integer multiple of 1/1024; inner nodes hold the sums of their children; "
                              "value = clip(S' / max(N', 1), 0, 1)")
BOOTSTRAP_CAVEAT = ("bootstrap resampling repeats rows within a tree, multiplying every sensitivity by a row's "
                    "multiplicity: the stated epsilon does not hold")

Voting = Literal["majority", "soft"]


# ----------------------------------------------------------------- utilities
def _weighted_gini(counts: np.ndarray) -> np.ndarray:
    """tau * (1 - sum_c p_c^2) = tau - sum_c tau_c^2 / tau per row of ``counts`` (K, C); 0 for tau = 0."""
    tau = counts.sum(axis=1)
    squares = np.square(counts).sum(axis=1)
    gini: np.ndarray = tau - np.divide(squares, tau, out=np.zeros_like(squares), where=tau > 0)
    return gini


def gini_utility(left: np.ndarray, y: np.ndarray, n_classes: int) -> np.ndarray:
    """Paper Eq. 5 for K candidate splits at once: minus the count-weighted Gini impurity of both sides.

    Parameters
    ----------
    left:
        Boolean (K, n): whether each of the node's n rows goes left under each candidate.
    y:
        The node's class indices, shape (n,).
    n_classes:
        Number of classes C.

    Returns
    -------
    numpy.ndarray
        Shape (K,); 0 is best (both sides pure), the sensitivity is `GINI_SENSITIVITY`.
    """
    k = left.shape[0]
    cells = (np.arange(k)[:, None] * n_classes + y[None, :])[left]  # (candidate, class) of every left row
    left_counts = np.bincount(cells, minlength=k * n_classes).reshape(k, n_classes).astype(np.float64)
    right_counts = np.bincount(y, minlength=n_classes).astype(np.float64)[None, :] - left_counts
    utility: np.ndarray = -(_weighted_gini(left_counts) + _weighted_gini(right_counts))
    return utility


def _sse(moments: np.ndarray) -> np.ndarray:
    """Sum of squared errors from (count, sum, sum of squares) rows; 0 for an empty side."""
    n, total, squares = moments.T
    mean_square = np.divide(total * total, n, out=np.zeros_like(total), where=n > 0)
    sse: np.ndarray = np.maximum(squares - mean_square, 0.0)
    return sse


def variance_utility(left: np.ndarray, y: np.ndarray) -> np.ndarray:
    """-(SSE_left + SSE_right) for K candidate splits at once (NOTES §1.5), y scaled to [0, 1].

    Parameters
    ----------
    left:
        Boolean (K, n): whether each of the node's n rows goes left under each candidate.
    y:
        The node's targets in [0, 1], shape (n,).

    Returns
    -------
    numpy.ndarray
        Shape (K,); 0 is best, the sensitivity is `VARIANCE_SENSITIVITY`.
    """
    moments = np.column_stack([np.ones_like(y), y, y * y])
    left_moments = left.astype(np.float64) @ moments
    utility: np.ndarray = -(_sse(left_moments) + _sse(moments.sum(axis=0)[None, :] - left_moments))
    return utility


def exponential_choice(utility: np.ndarray, coefficient: float, noise: SecretNoise) -> int:
    """Index k drawn with probability proportional to exp(coefficient * utility[k]).

    ``coefficient`` is eps / (2 Delta q) for the exponential mechanism; the draw is ``noise``'s
    exact Gumbel noisy-max, a secret draw.
    """
    return noise.exponential_index(coefficient * np.asarray(utility, dtype=np.float64))


# ------------------------------------------------------------ regions, splits
@dataclass(frozen=True)
class _Split:
    """A binary split: ``x <= threshold`` goes left (numeric), or ``x in subset`` does (categorical)."""

    attribute: int
    threshold: float = math.nan
    subset: np.ndarray | None = None  # categorical: boolean mask over all of the attribute's categories

    def goes_left(self, column: np.ndarray) -> np.ndarray:
        """Whether each value of the split attribute's column goes left."""
        if self.subset is None:
            return column <= self.threshold
        return self.subset[column.astype(np.int64)]


@dataclass(frozen=True)
class _Region:
    """The part of the domain a node covers: what the splits on its path allow, per attribute.

    Numeric attribute j holds values in (low[j], high[j]] (closed at the schema's low end, where the
    root starts); categorical attribute j holds the categories ``allowed[j]`` marks.
    """

    low: np.ndarray
    high: np.ndarray
    allowed: tuple[np.ndarray | None, ...]

    @classmethod
    def root(cls, attributes: Sequence[Attribute]) -> _Region:
        """The whole public domain: schema ranges and every category."""
        low = np.array([a.low if isinstance(a, NumericAttribute) else np.nan for a in attributes])
        high = np.array([a.high if isinstance(a, NumericAttribute) else np.nan for a in attributes])
        allowed = tuple(np.ones(a.size, dtype=bool) if isinstance(a, CategoricalAttribute) else None
                        for a in attributes)
        return cls(low, high, allowed)

    def splittable(self) -> np.ndarray:
        """Attributes with two non-empty sides left: >= 2 categories, or a float strictly inside (low, high)."""
        ok = [mask.sum() >= 2 if mask is not None else np.nextafter(lo, np.inf) < hi
              for mask, lo, hi in zip(self.allowed, self.low, self.high, strict=False)]
        return np.flatnonzero(ok)

    def draw_split(self, attribute: int, rng: np.random.Generator) -> _Split:
        """A random split of ``attribute`` inside the region (it must be splittable).

        Numeric: threshold uniform on (low, high), kept strictly inside so both sides are
        non-empty intervals. Categorical: a uniformly random non-empty proper subset of the allowed
        categories, by rejection (each category in with probability 1/2; at least half the draws
        are accepted since at least two categories are allowed).
        """
        mask = self.allowed[attribute]
        if mask is None:
            lo, hi = self.low[attribute], self.high[attribute]
            t = min(max(lo + rng.random() * (hi - lo), np.nextafter(lo, np.inf)), np.nextafter(hi, -np.inf))
            return _Split(attribute, threshold=float(t))
        codes = np.flatnonzero(mask)
        while True:
            pick = rng.random(codes.size) < 0.5
            if 0 < pick.sum() < codes.size:
                subset = np.zeros(mask.size, dtype=bool)
                subset[codes[pick]] = True
                return _Split(attribute, subset=subset)

    def children(self, split: _Split) -> tuple[tuple[Constraint, _Region], tuple[Constraint, _Region]]:
        """The (edge constraint, region) of the left and the right child of ``split``."""
        a = split.attribute
        mask = self.allowed[a]
        if mask is None or split.subset is None:
            t = split.threshold
            left_high, right_low = self.high.copy(), self.low.copy()
            left_high[a], right_low[a] = t, t
            left = Interval(-math.inf, t, low_closed=False, high_closed=True)
            right = Interval(t, math.inf, low_closed=False, high_closed=False)
            return (left, _Region(self.low, left_high, self.allowed)), (right,
                                                                        _Region(right_low, self.high, self.allowed))
        sides = []
        for keep in (mask & split.subset, mask & ~split.subset):
            allowed = list(self.allowed)
            allowed[a] = keep
            constraint = CategorySet(frozenset(np.flatnonzero(keep).tolist()))
            sides.append((constraint, _Region(self.low, self.high, tuple(allowed))))
        return sides[0], sides[1]


# ---------------------------------------------------------------- the tasks
class _Task(Protocol):
    """What differs between classification and regression: the noisy statistics and the utility.

    Both statistics are integers (noise is added on integers); ``half_two_units`` is how many units
    of `half_two` one row can change, the factor its noise scale carries.
    """

    half_two_units: ClassVar[int]

    def half_one(self, target: np.ndarray) -> np.ndarray:
        """The integer statistic noised in every node's first half (its sum is the size the stopping test uses)."""
        ...

    def half_two(self, target: np.ndarray) -> np.ndarray:
        """The integer statistic noised in a leaf's second half."""
        ...

    def utility(self, left: np.ndarray, target: np.ndarray) -> np.ndarray:
        """The exponential mechanism's utility of each candidate (rows of ``left``)."""
        ...


@dataclass(frozen=True)
class _Classification:
    """Half 1 and half 2 are both the class histogram; the utility is Gini (Eq. 5)."""

    n_classes: int
    half_two_units: ClassVar[int] = COUNT_SENSITIVITY

    def half_one(self, target: np.ndarray) -> np.ndarray:
        return np.bincount(target, minlength=self.n_classes)

    def half_two(self, target: np.ndarray) -> np.ndarray:
        return self.half_one(target)

    def utility(self, left: np.ndarray, target: np.ndarray) -> np.ndarray:
        return gini_utility(left, target, self.n_classes)


class _Regression:
    """Half 1 is the row count, half 2 the sum of the target on the public grid; the utility is -SSE.

    The target arrives as grid units (`to_grid` of the target scaled to [0, 1]), so one row changes
    the sum by at most `TARGET_GRID` units; the utility reads the units back as values in [0, 1].
    """

    half_two_units: ClassVar[int] = TARGET_GRID

    def half_one(self, target: np.ndarray) -> np.ndarray:
        return np.array([target.size])

    def half_two(self, target: np.ndarray) -> np.ndarray:
        return np.array([int(target.sum())])

    def utility(self, left: np.ndarray, target: np.ndarray) -> np.ndarray:
        return variance_utility(left, target / TARGET_GRID)


@dataclass(eq=False)
class _Grown:
    """A node as grown: its split (inner) or its two noisy statistics (leaf: half 1, half 2)."""

    attribute: int | None = None
    edges: list[Edge] = field(default_factory=list)
    halves: tuple[np.ndarray, np.ndarray] | None = None


# ------------------------------------------------------------ the mechanism
@dataclass(frozen=True)
class _DiffPetsBase:
    """The budget, the tree growth and the exponential mechanism shared by both tasks.

    Parameters
    ----------
    epsilon:
        Total privacy budget of the forest (add/remove one row).
    n_trees:
        Number of trees t; each spends epsilon / t.
    max_depth:
        Maximum depth h of a leaf (the root has depth 0), an integer >= 1.
    n_candidates:
        Candidates K per node; None for the task's default (ceil(sqrt(|A|)) or |A|).
    theta:
        A node whose noisy size is below theta becomes a leaf; None for the task's default, -inf for
        the pure depth rule.
    bootstrap:
        Resample |D| rows with replacement per tree, as Alg. 1 does; voids the guarantee (A1).
    """

    epsilon: float
    n_trees: int
    max_depth: int
    n_candidates: int | None = None
    theta: float | None = None
    bootstrap: bool = False

    utility_name: ClassVar[str]  # set by each task
    utility_sensitivity: ClassVar[int]

    def __post_init__(self) -> None:
        check_positive_real("epsilon", self.epsilon)
        check_positive_int("n_trees", self.n_trees)
        check_positive_int("max_depth", self.max_depth)
        if self.n_candidates is not None:
            check_positive_int("n_candidates", self.n_candidates)
        theta = self.theta
        if theta is not None and (isinstance(theta, bool) or not isinstance(theta, numbers.Real)
                                  or math.isnan(theta) or theta == math.inf):
            raise ValueError(f"theta must be None, a real number or -inf; got {theta!r}")
        if not isinstance(self.bootstrap, (bool, np.bool_)):
            raise ValueError(f"bootstrap must be True or False; got {self.bootstrap!r}")

    # ------------------------------------------------------------ accounting
    @property
    def epsilon_per_tree(self) -> float:
        """eps1 = epsilon / t."""
        return self.epsilon / self.n_trees

    @property
    def epsilon_per_node(self) -> float:
        """eps2 = eps1 / (2 (h + 1)): each half of a level's budget."""
        return self.epsilon_per_tree / (2 * (self.max_depth + 1))

    @property
    def noise_scale(self) -> float:
        """Laplace scale of every noisy count, histogram entry and target sum: sensitivity 1 / eps2."""
        return COUNT_SENSITIVITY / self.epsilon_per_node

    @property
    def em_coefficient(self) -> float:
        """eps2 / (2 Delta q): the exponential mechanism picks k with probability proportional to exp(this * q_k)."""
        return self.epsilon_per_node / (2 * self.utility_sensitivity)

    def _candidates(self, n_attributes: int) -> int:
        """K for a schema of ``n_attributes`` (the task's default when `n_candidates` is None)."""
        if self.n_candidates is None:
            return self._default_candidates(n_attributes)
        if self.n_candidates > n_attributes:
            raise ValueError(f"n_candidates={self.n_candidates} exceeds the schema's {n_attributes} attributes")
        return self.n_candidates

    def _default_candidates(self, n_attributes: int) -> int:
        raise NotImplementedError

    def _theta(self, n_classes: int) -> float:
        """The stopping threshold: `theta`, or sqrt(2) * n_classes / eps2 (n_classes = 1 for regression)."""
        return math.sqrt(2) * n_classes / self.epsilon_per_node if self.theta is None else float(self.theta)

    def _common_parameters(self, n_attributes: int, n_classes: int) -> dict[str, Any]:
        """What a release of either task states about this setting."""
        theta = self._theta(n_classes)
        parameters: dict[str, Any] = {
            "epsilon": float(self.epsilon), "trees": self.n_trees, "depth": self.max_depth,
            "epsilon_per_tree": self.epsilon_per_tree, "epsilon_per_node": self.epsilon_per_node,
            "candidates": self._candidates(n_attributes), "theta": theta if math.isfinite(theta) else None,
            "utility": self.utility_name, "utility_sensitivity": self.utility_sensitivity,
            "count_sensitivity": COUNT_SENSITIVITY, "leaf_noise_scale": self.noise_scale,
            "split_points": "uniform on the public schema range narrowed by the path; random category subsets",
            "bootstrap": bool(self.bootstrap),
        }
        if self.bootstrap:
            parameters["guarantee_caveat"] = BOOTSTRAP_CAVEAT
        return parameters

    # ---------------------------------------------------------------- growth
    def _samples(self, n: int, rng: np.random.Generator) -> list[np.ndarray | None]:
        """Per tree, the bootstrap row indices (``bootstrap``,
        from a secret numpy stream, no OpenDP sampler) or None."""
        return [rng.integers(0, n, n) if self.bootstrap else None for _ in range(self.n_trees)]

    def _grow(self, task: _Task, attributes: Sequence[Attribute], X: np.ndarray, target: np.ndarray,
              theta: float, k: int, randomness: Randomness) -> list[_Grown]:
        """One tree (module docstring): children are numbered after their parents.

        Candidates come from ``randomness.public``; the noise and the exponential mechanism's pick
        from ``randomness.secret``.
        """
        noise = randomness.secret
        nodes = [_Grown()]
        stack = [(0, np.arange(target.size), 0, _Region.root(attributes))]
        while stack:
            i, rows, depth, region = stack.pop()
            node, Xn, yn = nodes[i], X[rows], target[rows]
            first = noise.discrete_laplace(task.half_one(yn), self.noise_scale)  # half 1
            split = None
            if depth < self.max_depth and first.sum() >= theta:
                split = self._choose_split(task, region, Xn, yn, k, randomness)  # half 2 at an inner node
            if split is None:
                second = noise.discrete_laplace(task.half_two(yn), self.noise_scale * task.half_two_units)
                node.halves = (first, second)  # half 2 at a leaf
                continue
            left = split.goes_left(Xn[:, split.attribute])
            node.attribute = split.attribute
            for (constraint, child_region), side in zip(region.children(split), (left, ~left), strict=False):
                node.edges.append(Edge(constraint, len(nodes)))
                stack.append((len(nodes), rows[side], depth + 1, child_region))
                nodes.append(_Grown())
        return nodes

    def _choose_split(self, task: _Task, region: _Region, Xn: np.ndarray, yn: np.ndarray, k: int,
                      randomness: Randomness) -> _Split | None:
        """The exponential mechanism over K random candidates of the region; None if nothing is splittable.

        The candidates are public draws (they depend on the region alone); the pick is secret.
        """
        features = region.splittable()
        if features.size == 0:
            return None
        picked = randomness.public.choice(features, size=min(k, features.size), replace=False)
        candidates = [region.draw_split(int(a), randomness.public) for a in picked]
        left = np.stack([c.goes_left(Xn[:, c.attribute]) for c in candidates])
        return candidates[exponential_choice(task.utility(left, yn), self.em_coefficient, randomness.secret)]


@dataclass(frozen=True)
class DiffPetsRelease:
    """The output of `DiffPets.fit`: the released trees (``counts`` disclosure)."""

    trees: list[Tree]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Soft vote: the released counts of the leaves the row reaches, summed over the trees and normalised.

        A row stopping at an inner node (its leaf was dropped: all counts 0) adds nothing from that
        tree; a row with nothing from any tree gets the summed root distribution (uniform if that is 0).
        """
        X = np.asarray(X, dtype=np.float64)
        schema = self.trees[0].schema
        total = np.zeros((X.shape[0], schema.n_classes))
        for tree in self.trees:
            table = np.array([n.class_counts() if n.is_leaf else np.zeros(schema.n_classes) for n in tree.nodes])
            total += table[tree.apply(X)]
        prior = np.sum([tree.root.class_counts() for tree in self.trees], axis=0)
        total[total.sum(axis=1) == 0] = prior if prior.sum() > 0 else np.ones(schema.n_classes)
        proba: np.ndarray = total / total.sum(axis=1, keepdims=True)
        return proba

    def predict(self, X: np.ndarray, voting: Voting = "majority") -> np.ndarray:
        """Class index per row: the majority of the trees' labels (the paper, §1.9) or the soft vote.

        Majority ties go to the lowest class index; a tree votes with the label of the node the row
        stops at.
        """
        if voting == "soft":
            soft: np.ndarray = np.argmax(self.predict_proba(X), axis=1)
            return soft
        if voting != "majority":
            raise ValueError(f"voting is {voting!r}; expected 'majority' or 'soft'")
        n_classes = self.trees[0].schema.n_classes
        votes = np.stack([tree.predict(np.asarray(X, dtype=np.float64)) for tree in self.trees], axis=1)
        tally = np.zeros((votes.shape[0], n_classes), dtype=np.int64)
        np.add.at(tally, (np.arange(votes.shape[0])[:, None], votes), 1)
        majority: np.ndarray = np.argmax(tally, axis=1)
        return majority


@dataclass(frozen=True)
class DiffPets(_DiffPetsBase):
    """DiffPETs classification at one setting: ``epsilon`` over ``n_trees`` trees of depth <= ``max_depth``.

    Defaults: K = ceil(sqrt(|A|)), theta = sqrt(2) * |C| / eps2, no bootstrap (module docstring).
    """

    utility_name = "gini"
    utility_sensitivity = GINI_SENSITIVITY

    def _default_candidates(self, n_attributes: int) -> int:
        return math.ceil(math.sqrt(n_attributes))

    def parameters(self, schema: Schema) -> dict[str, Any]:
        """What a release over ``schema`` states (K and theta depend on |A| and |C|)."""
        return {**self._common_parameters(schema.n_attributes, schema.n_classes), "post_processing": POST_PROCESSING}

    def fit(self, schema: Schema, X: np.ndarray, y: np.ndarray,
            rng: int | np.random.Generator | Randomness | None = None) -> DiffPetsRelease:
        """Grow and release ``n_trees`` trees on the rows.

        Parameters
        ----------
        schema, X, y:
            The schema and the encoded rows (checked against the schema).
        rng:
            `Randomness` (or a seed or Generator for `Randomness.seeded`): candidates from its public
            stream, noise and picks from its secret one. None is `Randomness.fresh`, which a release
            needs (anyone who knows a seed can subtract the noise).

        Returns
        -------
        DiffPetsRelease
            The trees, ``counts`` disclosure, every one valid for `Tree.validate`.

        Raises
        ------
        ValueError
            Rows that do not fit the schema (naming the column and row), or more candidates than attributes.
        """
        from modelshare.common.trees.learners._data import check_xy  # see the module docstring

        X, y = check_xy(schema, X, y)
        randomness = Randomness.of(rng)
        task = _Classification(schema.n_classes)
        k, theta = self._candidates(schema.n_attributes), self._theta(schema.n_classes)
        trees = []
        for sample in self._samples(y.size, randomness.secret.numpy_generator()):
            Xt, yt = (X, y) if sample is None else (X[sample], y[sample])
            trees.append(self._release(schema, self._grow(task, schema.attributes, Xt, yt, theta, k, randomness)))
        return DiffPetsRelease(trees)

    @staticmethod
    def _release(schema: Schema, grown: list[_Grown]) -> Tree:
        """The released `Tree`: leaf counts post-processed, zero leaves dropped, inner counts summed."""
        nodes = [Node(0, 0.0, 0.0, np.zeros(schema.n_classes), g.attribute, g.edges) for g in grown]
        leaves = [i for i, g in enumerate(grown) if g.halves is not None]
        # the ignore below: leaves: the nodes whose halves are set
        counts = np.array([np.maximum(np.rint((grown[i].halves[0] + grown[i].halves[1]) / 2), 0.0)  # type: ignore[index]
                           for i in leaves]).reshape(len(leaves), schema.n_classes)
        return release_leaf_counts(schema, nodes, leaves, counts)


def train_diffpets(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
                   rng: Randomness) -> tuple[list[Tree], dict[str, Any]]:
    """The registry trainer of DiffPETs: ``dp:epsilon=E,trees=T`` at leaf depth <= ``depth``."""
    mechanism = DiffPets(requirement.epsilon, requirement.trees, depth)
    return mechanism.fit(schema, X, y, rng).trees, mechanism.parameters(schema)


@dataclass(frozen=True)
class DiffPetsRegressor(_DiffPetsBase):
    """DiffPETs regression at one setting: the target scaled to [0, 1] by public bounds, -SSE utility.

    Defaults: K = |A|, theta = sqrt(2) / eps2, no bootstrap. A leaf releases (N', S') with
    N' = count + discrete Laplace(1/eps2) (half 1, also the stopping test) and S' = (sum of the scaled
    target in grid units + discrete Laplace(TARGET_GRID/eps2)) / TARGET_GRID (half 2); its value is
    clip(S' / max(N', 1), 0, 1).
    """

    utility_name = "variance (-SSE of the target scaled to [0, 1])"
    utility_sensitivity = VARIANCE_SENSITIVITY

    def _default_candidates(self, n_attributes: int) -> int:
        return n_attributes

    def parameters(self, schema: RegressionSchema) -> dict[str, Any]:
        """What a release over ``schema`` states, with the public target bounds."""
        return {**self._common_parameters(schema.n_attributes, 1), "post_processing": REGRESSION_POST_PROCESSING,
                "target": schema.target.to_dict(), "target_grid": TARGET_GRID}

    def fit(self, schema: RegressionSchema, X: np.ndarray, y: np.ndarray,
            rng: int | np.random.Generator | Randomness | None = None) -> RegressionForest:
        """Grow and release ``n_trees`` regression trees.

        Parameters
        ----------
        schema:
            The attributes and the target's public bounds.
        X, y:
            Encoded attributes (checked against the schema) and the target (finite; clipped to its bounds).
        rng:
            `Randomness` (or a seed or Generator for `Randomness.seeded`); None is `Randomness.fresh`
            (what a release needs).

        Raises
        ------
        ValueError
            Rows that do not fit the schema, a non-finite target (naming the row), more candidates than attributes.
        """
        from modelshare.common.trees.learners._data import check_xy  # see the module docstring

        features = schema.features()
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"y must be one target value per row; got shape {y.shape}")
        X, _ = check_xy(features, X, np.zeros(y.size, dtype=np.int64))  # checks the attribute columns only
        target = to_grid(schema.scale(y), TARGET_GRID)
        randomness = Randomness.of(rng)
        k, theta = self._candidates(schema.n_attributes), self._theta(1)
        trees = []
        for sample in self._samples(target.size, randomness.secret.numpy_generator()):
            Xt, yt = (X, target) if sample is None else (X[sample], target[sample])
            grown = self._grow(_Regression(), schema.attributes, Xt, yt, theta, k, randomness)
            trees.append(self._release(schema, grown))
        return RegressionForest(schema, tuple(trees))

    @staticmethod
    def _release(schema: RegressionSchema, grown: list[_Grown]) -> RegressionTree:
        """The released tree: (N', S') at the leaves, sums at inner nodes (children come after parents)."""
        stats = np.zeros((len(grown), 2))
        for i in range(len(grown) - 1, -1, -1):
            g = grown[i]
            if g.halves is None:
                stats[i] = np.sum([stats[e.child] for e in g.edges], axis=0)
            else:
                stats[i] = g.halves[0][0], g.halves[1][0] / TARGET_GRID  # exact: a power of two
        return RegressionTree(schema, [RegressionNode(float(c), float(s), g.attribute, tuple(g.edges))
                                       for (c, s), g in zip(stats, grown, strict=False)])


def train_diffpets_regression(schema: RegressionSchema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
                              rng: Randomness) -> tuple[RegressionForest, dict[str, Any]]:
    """The registry's regression trainer: a DiffPETs regression
    forest, ``dp:epsilon=E,trees=T`` at leaf depth <= ``depth``."""
    regressor = DiffPetsRegressor(requirement.epsilon, requirement.trees, depth)
    return regressor.fit(schema, X, y, rng), regressor.parameters(schema)


def _budget_check(parameters: Mapping[str, Any], requirement: DP, utility: str, sensitivity: int, label: str) -> Check:
    """DiffPETs' budget split (eps/T per tree, halved over depth + 1 levels), sensitivities, no bootstrap.

    ``utility`` and ``sensitivity`` are what the task's exponential mechanism must state (Gini and
    `GINI_SENSITIVITY` for classes, -SSE and `VARIANCE_SENSITIVITY` for a target); ``label`` names it.
    """
    depth = numeric_parameter(parameters, "depth") or 0.0
    per_tree = requirement.epsilon / requirement.trees
    per_node = per_tree / (2 * (depth + 1))
    wrong = recomputed(parameters, {"epsilon_per_tree": per_tree, "epsilon_per_node": per_node,
                                    "leaf_noise_scale": COUNT_SENSITIVITY / per_node,
                                    "count_sensitivity": COUNT_SENSITIVITY, "utility_sensitivity": sensitivity})
    if parameters.get("utility") != utility:
        wrong.append(f"utility={parameters.get('utility')!r} (expected the {label} utility {utility!r})")
    if parameters.get("bootstrap") is not False:
        wrong.append(f"bootstrap={parameters.get('bootstrap')!r}: resampled rows multiply every sensitivity, "
                     "so the stated epsilon would not hold")
    return Check("budget split recomputed from (epsilon, trees, depth)", not wrong, "; ".join(wrong) if wrong else (
        f"eps {requirement.epsilon:g} / {requirement.trees} trees / (2 x {depth + 1:g} levels) = {per_node:.4g} per "
        f"node half: Laplace scale {1 / per_node:.4g} on counts, exponential mechanism with {label} sensitivity "
        f"{sensitivity}; that noise was drawn cannot be seen in the release (modelshare privacy audit-dp tests it)"))


def audit_checks(trees: Sequence[Tree], report: PrivacyReport, requirement: DP) -> list[Check]:
    """DiffPETs' budget split with the Gini utility and its stated post-processing."""
    budget = _budget_check(report.parameters, requirement, "gini", GINI_SENSITIVITY, "Gini")
    return [budget, integer_counts_check(trees, report, POST_PROCESSING)]


def _grid_check(forest: RegressionForest, parameters: Mapping[str, Any]) -> Check:
    """Every released count is an integer and every sum an integer number of 1/TARGET_GRID units.

    That is what noise drawn on integers looks like; a continuous-Laplace output (whose low-order
    bits can tell neighbouring tables apart) fails it.
    """
    name = "noisy statistics on the public integer grid"
    if parameters.get("target_grid") != TARGET_GRID:
        return Check(name, False, f"target_grid={parameters.get('target_grid')!r}, expected {TARGET_GRID}")
    for t, tree in enumerate(forest.trees):
        stats = np.array([(node.count, node.total * TARGET_GRID) for node in tree.nodes], dtype=np.float64)
        bad = np.flatnonzero((stats != np.rint(stats)).any(axis=1))
        if bad.size:
            node = tree.nodes[int(bad[0])]
            return Check(name, False, f"tree {t} node {int(bad[0])} releases count {node.count!r} and sum "
                                      f"{node.total!r}: not an integer and a multiple of 1/{TARGET_GRID}")
    return Check(name, True, f"every count is an integer and every sum a multiple of 1/{TARGET_GRID} "
                             f"in the {len(forest.trees)} trees")


def regression_audit_checks(forest: RegressionForest, report: PrivacyReport, requirement: DP) -> list[Check]:
    """DiffPETs regression: the budget split with the -SSE utility, the stated post-processing, the target's bounds.

    The bounds must be the schema's (the study's, whose fingerprint the message carries): the
    sensitivity 1 of each noisy target sum holds only for the target scaled by public bounds.
    """
    parameters = report.parameters
    budget = _budget_check(parameters, requirement, DiffPetsRegressor.utility_name, VARIANCE_SENSITIVITY, "variance")
    stated_post = parameters.get("post_processing")
    post = Check("statistics post-processed as stated", stated_post == REGRESSION_POST_PROCESSING,
                 f"post_processing={stated_post!r}" + ("" if stated_post == REGRESSION_POST_PROCESSING
                                                      else f", expected {REGRESSION_POST_PROCESSING!r}"))
    grid = _grid_check(forest, parameters)
    target, stated = forest.schema.target, parameters.get("target")
    same = stated == target.to_dict()
    bounds = Check("target bounds are the schema's public bounds", same,
                   f"the target {target.name!r} is scaled from its public range [{target.low:g}, {target.high:g}]"
                   if same else f"the report states target={stated!r}; the schema's is {target.to_dict()!r}")
    return [budget, post, grid, bounds]
