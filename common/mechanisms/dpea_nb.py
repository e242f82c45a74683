"""DPEA-NB (``dpea-nb``): a DPEA root, per-leaf class histograms of every other attribute, a chosen temperature.

The release whose own model reaches 0.845 on Adult at total eps = 1 (issue 23; EXPERIMENTS.md, "Issue 23
at eps = 1"). Three parts, each eps-DP on its share of the budget, composed sequentially (pure eps-DP,
neighbouring tables differ by one added or removed row):

1. *The root* (``tree_share`` of eps, default 0.18): one DPEA tree of depth 1 (`registered_dpea`, the
   registry trainer's compact public domain and its own accounting: the split chosen by the exponential
   mechanism, noisy leaf class counts). Released as trees[0].
2. *The histograms* (``histogram_share``, default 0.72): for every attribute the root's split leaves free
   (every other attribute with at least two public bins), a *histogram tree*: the root's released split
   repeated, then under each of its children a split of that attribute on its public bins
   (`HistogramBins`: a child per category; ``bins`` bins of the schema's public range for a number, on
   log(1 + x - low) where the range spans 10^3 or more), whose leaves release class counts plus discrete
   Laplace noise, clamped at 0. A row lies in one root child and one bin of each attribute, so it adds one
   to one (leaf, class) count of each of the m histogram trees: the histograms have L1 sensitivity m, and
   noise of scale m / eps_h makes them eps_h-DP (the same accounting as m trees at eps_h / m each). Which
   root children exist is the root's release (post-processing); rows in a child the root dropped are
   counted nowhere. Released as trees[1..m], in schema order of their attributes.
3. *The calibration* (``calibration_share``, default 0.1). A naive Bayes per root leaf
   (`NaiveBayesRelease`: the leaf's class counts times the smoothed histograms) ranks rows well but is
   overconfident, because correlated attributes are counted as independent. The owner picks a
   *temperature* T from the public grid `TEMPERATURES` that divides the histograms' log-likelihood
   (log P(c | x) = log P(c | leaf) + sum_a log P(x_a | leaf, c) / T, for any number of classes) by the
   exponential mechanism with utility u(T) = the number of the owner's rows the model at T classifies
   right. One row changes every u(T) by 0 or 1 in the same direction (adding a row never lowers a
   utility), a monotone utility of sensitivity 1, so beta = eps_c / 1 is eps_c-DP (McSherry and Talwar
   2007; Dwork and Roth, Thm. 3.10's remark; the argument DPEA's "monotone" selection makes). The model
   is a function of parts 1-2, so the utility reads the rows only through the counts. The chosen T is
   stated in the report's parameters, like DPEA's selected structure is released.

This replaced the design's released calibration histogram (a new release field): on Adult at eps = 1 the
temperature gives the same accuracy (bench/dp_eps1_probe.py, EXPERIMENTS.md), and every part travels as
ordinary trees and parameters. ``trees=1`` in the requirement is the number of DPEA roots; the release
carries 1 + m trees (`release_shape`, which the audit uses for the tree count and depth). Only one root
of depth 1 is supported: a deeper root leaves different attributes free per leaf, not built.

Everything public comes from the schema and the stated setting: the bins, the grid, the smoothing
(``smoothing`` noise scales of pseudo-counts towards the per-class histogram pooled over the leaves,
post-processing by every reader of the release). `audit_checks` re-derives the budget split, the root's
DPEA accounting and domain, every histogram tree's structure, the noise scale, the counts and the grid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.mechanisms import dpea
from modelshare.common.mechanisms.class_prior import DECLINE_SIGNAL
from modelshare.common.params import check_positive_real
from modelshare.common.privacy.checks import Check, integer_counts_check, numeric_parameter, recomputed
from modelshare.common.privacy.noise import Randomness, SecretNoise, noisy_counts
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.trees.rebuild import release_leaf_counts
from modelshare.common.trees.tree import CategorySet, Constraint, Edge, Interval, Node, Tree

if TYPE_CHECKING:
    from modelshare.common.privacy.requirements import DP

__all__ = [
    "MECHANISM",
    "RELEASE_MODEL",
    "TREE_SHARE",
    "HISTOGRAM_SHARE",
    "CALIBRATION_SHARE",
    "BINS",
    "TEMPERATURES",
    "SMOOTHING",
    "POST_PROCESSING",
    "HistogramBins",
    "DpeaNb",
    "NaiveBayesRelease",
    "train_dpea_nb",
    "release_shape",
    "audit_checks",
]

MECHANISM = "dpea-nb"
RELEASE_MODEL = "calibrated-nb"  # the miner's model of a dpea-nb release (`modelshare.miner_node.calibrated_nb`)
TREE_SHARE = 0.18  # of eps: the DPEA root (the probe's best setting, EXPERIMENTS.md)
HISTOGRAM_SHARE = 0.72  # of eps: the per-leaf class histograms
CALIBRATION_SHARE = 0.10  # of eps: the temperature's exponential mechanism
BINS = 16  # public bins per numeric attribute of the histograms
LOG_DECADES = 3.0  # a numeric range spanning 10^3 or more is binned on log(1 + x - low)
TEMPERATURES: tuple[float, ...] = tuple(float(t) for t in np.round(np.geomspace(1.0, 8.0, 31), 4))
"""The public grid of likelihood temperatures (1: the plain naive Bayes; larger: less confident)."""
SMOOTHING = 1.0  # pseudo-counts towards the pooled histogram, in noise scales (post-processing)
UTILITY = "owner rows classified correctly"
POST_PROCESSING = ("integer noisy leaf counts clamped at 0; inner counts are sums of their children; "
                   "leaves released as all 0 dropped")


# ------------------------------------------------------------------ public bins
@dataclass(frozen=True)
class HistogramBins:
    """The public bins of every attribute: a category each, or ``bins`` bins of a numeric public range.

    Numeric bins are equal-width on x, or on log(1 + x - low) where high - low >= 10^LOG_DECADES;
    an integer attribute's edges are rounded up to whole numbers (duplicates merged), so each bin
    holds at least one value. The outer bins extend to -inf and +inf so that every value is routed.
    """

    schema: Schema
    bins: int
    cuts: tuple[np.ndarray | None, ...]  # inner edges per numeric attribute (None: categorical)

    @classmethod
    def of(cls, schema: Schema, bins: int = BINS) -> HistogramBins:
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
            raise ValueError(f"bins must be an integer >= 2; got {bins!r}")
        cuts: list[np.ndarray | None] = []
        for attr in schema.attributes:
            if isinstance(attr, CategoricalAttribute):
                cuts.append(None)
                continue
            lo, hi = float(attr.low), float(attr.high)
            if hi <= lo:
                cuts.append(np.empty(0))
                continue
            if hi - lo >= 10**LOG_DECADES:
                edges = lo + np.expm1(np.linspace(0.0, np.log1p(hi - lo), bins + 1))
            else:
                edges = np.linspace(lo, hi, bins + 1)
            inner = edges[1:-1]
            if attr.integer:
                inner = np.unique(np.ceil(inner))
                inner = inner[(inner > lo) & (inner <= hi)]
            cuts.append(inner)
        return cls(schema, bins, tuple(cuts))

    def size(self, a: int) -> int:
        """The number of bins of attribute ``a``."""
        cut, attr = self.cuts[a], self.schema.attributes[a]
        if cut is None:
            assert isinstance(attr, CategoricalAttribute)
            return attr.size
        return cut.size + 1

    def codes(self, X: np.ndarray, a: int) -> np.ndarray:
        """Bin index of attribute ``a`` per encoded row."""
        cut = self.cuts[a]
        column = X[:, a]
        return column.astype(np.int64) if cut is None else np.searchsorted(cut, column, side="right")

    def constraints(self, a: int) -> tuple[Constraint, ...]:
        """The edge constraint of each bin of attribute ``a``, in bin order."""
        cut = self.cuts[a]
        if cut is None:
            return tuple(CategorySet(frozenset({v})) for v in range(self.size(a)))
        bounds = np.concatenate([[-math.inf], cut, [math.inf]])
        return tuple(Interval(float(lo), float(hi), bool(math.isfinite(lo)), False)
                     for lo, hi in zip(bounds[:-1], bounds[1:], strict=False))

    def values(self, a: int, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """An encoded value of attribute ``a`` per bin code: the category, or uniform in the bin's public part."""
        cut = self.cuts[a]
        if cut is None:
            return codes.astype(np.float64)
        attr = self.schema.attributes[a]
        assert isinstance(attr, NumericAttribute)
        top = attr.high + 1 if attr.integer else attr.high
        lo = np.concatenate([[attr.low], cut])[codes]
        hi = np.concatenate([cut, [top]])[codes]
        drawn = lo + rng.random(codes.size) * (hi - lo)
        values: np.ndarray = np.minimum(np.floor(drawn), attr.high) if attr.integer else np.minimum(drawn, attr.high)
        return values

    def histogram_attributes(self, root_attribute: int | None) -> tuple[int, ...]:
        """The attributes that get a histogram tree: every one but the root's split with at least two bins."""
        return tuple(a for a in range(self.schema.n_attributes) if a != root_attribute and self.size(a) >= 2)


# ------------------------------------------------------------------ the release's model
def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities: np.ndarray = shifted / shifted.sum(axis=1, keepdims=True)
    return probabilities


class NaiveBayesRelease:
    """The model a dpea-nb release describes, read from its trees and stated parameters alone.

    Per root leaf j and class c: P(c | j) from the root's released counts, and P(bin | j, c) per
    histogram attribute from its tree's counts, smoothed by ``smoothing`` noise scales of pseudo-counts
    towards the attribute's per-class histogram pooled over the leaves. A row no root leaf admits
    (a child the root dropped) gets no prior and no likelihood: the uniform posterior.
    """

    def __init__(self, trees: Sequence[Tree], parameters: Mapping[str, Any]) -> None:
        if not trees:
            raise ValueError("a dpea-nb release has at least its root tree")
        self.root = trees[0]
        self.schema = self.root.schema
        self.bins = HistogramBins.of(self.schema, int(parameters["bins"]))
        self.attributes = tuple(self.schema.index(name) for name in parameters["histogram_attributes"])
        if len(self.attributes) != len(trees) - 1:
            raise ValueError(f"the release states {len(self.attributes)} histogram attributes and carries "
                             f"{len(trees) - 1} histogram trees")
        self.temperature = float(parameters["temperature"])
        self.n_classes = self.schema.n_classes
        self.children = _root_children(self.root)
        leaf_counts = np.array([self.root.nodes[i].counts for i in self.children.values()]) + 1e-9
        self.log_prior = np.log(leaf_counts / leaf_counts.sum(axis=1, keepdims=True))
        strength = float(parameters["smoothing"]) * float(parameters["histogram_noise_scale"])
        self.histograms = [self._histogram(tree, a, strength)
                           for tree, a in zip(trees[1:], self.attributes, strict=False)]

    def _histogram(self, tree: Tree, a: int, strength: float) -> np.ndarray:
        """P(bin | root leaf, class) of attribute ``a``, shape (leaves, bins, classes), smoothed."""
        counts = histogram_counts(tree, self.children, self.bins.constraints(a), self.n_classes)
        pooled = counts.sum(axis=0) + 1e-9
        pooled /= pooled.sum(axis=0, keepdims=True)
        smoothed = counts + strength * pooled[None] + 1e-12
        histogram: np.ndarray = smoothed / smoothed.sum(axis=1, keepdims=True)
        return histogram

    def leaf_index(self, X: np.ndarray) -> np.ndarray:
        """Per row, the index of its root leaf, -1 where no leaf admits it."""
        return _leaf_index(self.root, self.children, X)

    def parts(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row and class: log P(class | root leaf) and sum over the attributes of log P(bin | leaf, class)."""
        X = np.asarray(X, dtype=np.float64)
        leaf = self.leaf_index(X)
        prior = np.zeros((X.shape[0], self.n_classes))
        lik = np.zeros((X.shape[0], self.n_classes))
        rows = leaf >= 0
        prior[rows] = self.log_prior[leaf[rows]]
        for a, table in zip(self.attributes, self.histograms, strict=False):
            lik[rows] += np.log(table[leaf[rows], self.bins.codes(X[rows], a)])
        return prior, lik

    def proba(self, X: np.ndarray, temperature: float | None = None) -> np.ndarray:
        """The calibrated posterior at ``temperature`` (None: the released one), shape (rows, classes)."""
        prior, lik = self.parts(X)
        return _softmax(prior + lik / (self.temperature if temperature is None else temperature))


def _root_children(root: Tree) -> dict[Constraint | None, int]:
    """The root's leaves by the constraint of their edge (None: the root is itself the only leaf)."""
    node = root.nodes[0]
    if node.is_leaf:
        return {None: 0}
    return {edge.constraint: edge.child for edge in node.edges}


def _leaf_index(root: Tree, children: Mapping[Constraint | None, int], X: np.ndarray) -> np.ndarray:
    """Per row, the index of its root leaf (the order of ``children``), -1 where no leaf admits it."""
    lookup = np.full(len(root.nodes), -1, dtype=np.int64)
    for j, i in enumerate(children.values()):
        lookup[i] = j
    leaf: np.ndarray = lookup[root.apply(X)]
    return leaf


def histogram_counts(tree: Tree, children: Mapping[Constraint | None, int], bins: Sequence[Constraint],
                     n_classes: int) -> np.ndarray:
    """A histogram tree's leaf counts as a table (root leaf, bin, class); absent leaves count 0.

    ValueError when the tree is not the root's split followed by one split on ``bins``.
    """
    order = {c: j for j, c in enumerate(children)}
    position = {c: b for b, c in enumerate(bins)}
    counts = np.zeros((len(children), len(bins), n_classes))
    top = tree.nodes[0]
    if top.is_leaf and not top.class_counts().any():
        return counts  # every count released as 0
    groups = [(None, 0)] if None in order else [(edge.constraint, edge.child) for edge in top.edges]
    for constraint, i in groups:
        if constraint not in order:
            raise ValueError(f"root child {constraint} is not one of the root tree's children")
        node = tree.nodes[i]
        if node.is_leaf:
            raise ValueError(f"node {i} under the root's split releases counts without splitting the attribute")
        for edge in node.edges:
            if edge.constraint not in position:
                raise ValueError(f"node {i} has a child {edge.constraint} outside the attribute's public bins")
            counts[order[constraint], position[edge.constraint]] = tree.nodes[edge.child].counts
    return counts


# ------------------------------------------------------------------ the mechanism
@dataclass(frozen=True)
class DpeaNb:
    """dpea-nb at total ``epsilon`` with its public defaults (module docstring)."""

    epsilon: float
    tree_share: float = TREE_SHARE
    histogram_share: float = HISTOGRAM_SHARE
    calibration_share: float = CALIBRATION_SHARE
    bins: int = BINS
    smoothing: float = SMOOTHING
    depth: int = 1

    def __post_init__(self) -> None:
        check_positive_real("epsilon", self.epsilon)
        shares = (self.tree_share, self.histogram_share, self.calibration_share)
        if any(not s > 0 for s in shares) or not math.isclose(sum(shares), 1.0, rel_tol=1e-9):
            raise ValueError(f"tree_share, histogram_share and calibration_share must be positive and sum to 1; "
                             f"got {shares}")
        if self.depth != 1:
            raise ValueError(f"dpea-nb releases a DPEA root of depth 1 (a deeper root leaves different attributes "
                             f"free per leaf, which its histogram trees do not carry); got depth {self.depth}")
        if self.smoothing < 0:
            raise ValueError(f"smoothing must be >= 0; got {self.smoothing!r}")

    def parameters(self, schema: Schema, root_parameters: Mapping[str, Any], attributes: Sequence[int],
                   temperature: float) -> dict[str, Any]:
        """What a release states (all public but the chosen temperature, an exponential-mechanism output)."""
        e_t, e_h, e_c = (self.epsilon * s for s in (self.tree_share, self.histogram_share, self.calibration_share))
        m = len(attributes)
        return {
            "epsilon": float(self.epsilon), "trees": 1, "depth": self.depth,
            "tree_share": self.tree_share, "histogram_share": self.histogram_share,
            "calibration_share": self.calibration_share, "epsilon_tree": e_t, "epsilon_histograms": e_h,
            "epsilon_calibration": e_c, "root": dict(root_parameters),
            "histogram_trees": m, "histogram_attributes": [schema.names[a] for a in attributes],
            "histogram_sensitivity": m, "histogram_noise_scale": (m / e_h) if m else 0.0,
            "bins": self.bins, "smoothing": self.smoothing,
            "temperatures": list(TEMPERATURES), "temperature": temperature, "utility": UTILITY,
            "utility_sensitivity": 1, "calibration_beta": e_c,
            "post_processing": POST_PROCESSING,
        }

    def fit(self, schema: Schema, X: np.ndarray, y: np.ndarray,
            rng: int | np.random.Generator | Randomness | None = None) -> tuple[list[Tree], dict[str, Any]]:
        """The released trees (root, then one histogram tree per free attribute) and the stated parameters."""
        from modelshare.common.trees.learners._data import check_xy  # scikit-learn on first use, as dpea

        X, y = check_xy(schema, X, y)
        randomness = Randomness.of(rng)
        e_t = self.epsilon * self.tree_share
        e_h = self.epsilon * self.histogram_share
        root_setting = dpea.registered_dpea(e_t, 1, self.depth, schema)
        root = root_setting.fit(schema, X, y, randomness).trees[0]
        root_parameters = {**root_setting.parameters(), "domain_rule": "compact"}
        bins = HistogramBins.of(schema, self.bins)
        attributes = bins.histogram_attributes(root.nodes[0].attribute)
        scale = len(attributes) / e_h if attributes else 0.0
        children = _root_children(root)
        row_leaf = _leaf_index(root, children, X)
        kept = row_leaf >= 0
        trees = [root] + [self._histogram_tree(schema, root, children, bins, a, row_leaf[kept], X[kept], y[kept],
                                               scale, randomness) for a in attributes]
        stated = self.parameters(schema, root_parameters, attributes, TEMPERATURES[0])
        model = NaiveBayesRelease(trees, stated)
        prior, lik = model.parts(X)
        utility = np.array([float((np.argmax(prior + lik / t, axis=1) == y).sum()) for t in TEMPERATURES])
        beta = self.epsilon * self.calibration_share / 1.0  # monotone utility of sensitivity 1 (module docstring)
        stated["temperature"] = TEMPERATURES[randomness.secret.exponential_index(beta * utility)]
        return trees, stated

    def noisy_histogram(self, true: np.ndarray, scale: float, noise: SecretNoise) -> np.ndarray:
        """``true`` histogram counts plus discrete Laplace(``scale``)
        noise, clamped at 0: the one place they get noise."""
        return noisy_counts(true, scale, noise)

    def _histogram_tree(self, schema: Schema, root: Tree, children: Mapping[Constraint | None, int],
                        bins: HistogramBins, a: int, row_leaf: np.ndarray, X: np.ndarray, y: np.ndarray, scale: float,
                        randomness: Randomness) -> Tree:
        """The root's split, then attribute ``a`` on its public bins, with noisy leaf class counts."""
        n_classes, size = schema.n_classes, bins.size(a)
        nodes: list[Node] = [Node(0, 0.0, 0.0)]
        leaves: list[int] = []
        for constraint in children:
            if constraint is None:
                parent = 0
            else:
                parent = len(nodes)
                nodes[0].attribute = root.nodes[0].attribute
                nodes[0].edges.append(Edge(constraint, parent))
                nodes.append(Node(0, 0.0, 0.0))
            nodes[parent].attribute = a
            for bin_constraint in bins.constraints(a):
                nodes[parent].edges.append(Edge(bin_constraint, len(nodes)))
                leaves.append(len(nodes))
                nodes.append(Node(0, 0.0, 0.0))
        cell = (row_leaf * size + bins.codes(X, a)) * n_classes + y
        true = np.bincount(cell, minlength=len(children) * size * n_classes).reshape(-1, n_classes)
        return release_leaf_counts(schema, nodes, leaves, self.noisy_histogram(true, scale, randomness.secret))


def train_dpea_nb(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
                  rng: Randomness) -> tuple[list[Tree], dict[str, Any]]:
    """The registry trainer of dpea-nb: ``dp:epsilon=E,trees=1`` (one root) at ``depth`` 1."""
    if requirement.trees != 1:
        raise ValueError(f"dpea-nb releases one DPEA root (with its histogram trees): the requirement says "
                         f"trees={requirement.trees}; use 'dp:epsilon={requirement.epsilon:g},trees=1'")
    return DpeaNb(requirement.epsilon, depth=depth).fit(schema, X, y, rng)


def release_shape(parameters: Mapping[str, Any], requirement: DP) -> tuple[int, float]:
    """(trees released, deepest tree) a dpea-nb release must have: the root and its histogram trees, one level deeper.

    ValueError when the stated parameters cannot say (the audit's parameter check then fails with it).
    """
    m, depth = numeric_parameter(parameters, "histogram_trees"), numeric_parameter(parameters, "depth")
    if m is None or not m.is_integer() or m < 0 or depth is None:
        raise ValueError(f"histogram_trees={parameters.get('histogram_trees')!r} and depth="
                         f"{parameters.get('depth')!r} do not give the release's trees")
    return requirement.trees + int(m), depth + 1


def decline_rows(requirement: DP, depth: int, schema: Schema) -> float:
    """The noisy class total below which an owner declines a dpea-nb release
    (`modelshare.common.mechanisms.class_prior`).

    Its budget goes mostly to the histograms: every class of every root leaf gets a histogram of each of the
    m = |A| - 1 other attributes, each count with noise of scale m / (`HISTOGRAM_SHARE` * eps). The rows
    needed are those that put `class_prior.DECLINE_SIGNAL` noise scales in each cell of an average attribute's
    histogram (its categories; a numeric attribute counted as 2 bins, the fewest): classes x 2^depth leaves x
    values x scale. Public: the requirement, the depth and the schema.
    """
    m = max(schema.n_attributes - 1, 1)
    values = float(np.mean([len(a.categories) if isinstance(a, CategoricalAttribute) else 2
                            for a in schema.attributes]))
    scale = m / (HISTOGRAM_SHARE * requirement.epsilon)
    return DECLINE_SIGNAL * schema.n_classes * 2.0 ** min(depth, 1000) * values * scale


# ------------------------------------------------------------------ audit
def audit_checks(trees: Sequence[Tree], report: PrivacyReport, requirement: DP) -> list[Check]:
    """dpea-nb's accounting re-derived from the release: budget, root, histogram trees, noise, counts, grid."""
    p = report.parameters
    checks = [_budget_check(p, requirement)]
    root = p.get("root")
    if not isinstance(root, Mapping):
        return checks + [Check("root's DPEA accounting", False, f"root={root!r} is not the root's stated setting")]
    checks.append(_root_check(trees, root, p))
    checks.append(_histogram_check(trees, p))
    checks.append(_noise_check(p))
    checks.append(_calibration_check(p))
    checks.append(integer_counts_check(trees, report, POST_PROCESSING))
    return checks


def _budget_check(p: Mapping[str, Any], requirement: DP) -> Check:
    name = "budget split recomputed (tree + histograms + calibration = epsilon)"
    stated = [numeric_parameter(p, k) for k in ("tree_share", "histogram_share", "calibration_share")]
    shares = [s for s in stated if s is not None and s > 0]
    if len(shares) != 3 or not math.isclose(sum(shares), 1.0, rel_tol=1e-9):
        return Check(name, False, f"shares {stated} are not positive numbers summing to 1")
    eps = requirement.epsilon
    parts = {"epsilon_tree": eps * shares[0], "epsilon_histograms": eps * shares[1],
             "epsilon_calibration": eps * shares[2]}
    wrong = recomputed(p, parts)
    return Check(name, not wrong, "; ".join(wrong) if wrong else
                 f"shares {shares[0]:g} + {shares[1]:g} + {shares[2]:g} of epsilon {eps:g}: "
                 + ", ".join(f"{key} {value:g}" for key, value in parts.items()))


def _root_check(trees: Sequence[Tree], root: Mapping[str, Any], p: Mapping[str, Any]) -> Check:
    """The root restates (epsilon_tree, 1 tree, the stated depth) and passes DPEA's own checks on its domain."""
    name = "root's DPEA accounting and domain"
    wrong = recomputed(root, {"epsilon": numeric_parameter(p, "epsilon_tree") or math.nan, "trees": 1,
                              "depth": numeric_parameter(p, "depth") or math.nan})
    wrong += dpea.accounting_errors(root)
    if wrong:
        return Check(name, False, "; ".join(wrong))
    for check in (dpea.exact_sampler_check(root), dpea.domain_check(trees[:1], root)):
        if not check.passed:
            return Check(name, False, check.detail)
    return Check(name, True, f"one DPEA tree at epsilon {root['epsilon']:g}, depth {root['depth']}, on its "
                             f"public domain (bins={root['bins']}, max_arity={root.get('max_arity')!r})")


def _histogram_check(trees: Sequence[Tree], p: Mapping[str, Any]) -> Check:
    """One histogram tree per free attribute, in schema order,
    each the root's split then the attribute's public bins."""
    name = "histogram trees: the root's split, then one free attribute's public bins"
    schema = trees[0].schema
    try:
        bins = HistogramBins.of(schema, int(p["bins"]))
    except (KeyError, TypeError, ValueError) as exc:
        return Check(name, False, f"the stated bins cannot be rebuilt: {exc}")
    expected = bins.histogram_attributes(trees[0].nodes[0].attribute)
    names = [schema.names[a] for a in expected]
    if p.get("histogram_attributes") != names or len(trees) - 1 != len(expected):
        return Check(name, False, f"the release states histogram attributes {p.get('histogram_attributes')!r} and "
                                  f"carries {len(trees) - 1} histogram trees; the root leaves {names} free")
    children = _root_children(trees[0])
    for t, (tree, a) in enumerate(zip(trees[1:], expected, strict=False), start=1):
        top = tree.nodes[0]
        if None not in children and not top.is_leaf and top.attribute != trees[0].nodes[0].attribute:
            root_split = trees[0].nodes[0].attribute
            return Check(name, False, f"tree {t} does not repeat the root's split on "
                                      f"{'no attribute' if root_split is None else repr(schema.names[root_split])}")
        splits = [] if top.is_leaf else ([0] if None in children else [e.child for e in top.edges])
        if any(tree.nodes[i].attribute != a for i in splits):
            return Check(name, False, f"tree {t} does not split {schema.names[a]!r} under the root's split")
        try:
            histogram_counts(tree, children, bins.constraints(a), schema.n_classes)
        except ValueError as exc:
            return Check(name, False, f"tree {t} ({schema.names[a]}): {exc}")
    return Check(name, True, f"{len(expected)} histogram trees, one per free attribute, on the public bins "
                             f"(bins={bins.bins})")


def _noise_check(p: Mapping[str, Any]) -> Check:
    name = "histogram noise scale recomputed (sensitivity = histogram trees)"
    m, e_h = numeric_parameter(p, "histogram_trees"), numeric_parameter(p, "epsilon_histograms")
    if m is None or e_h is None or not e_h > 0:
        return Check(name, False, f"histogram_trees={p.get('histogram_trees')!r}, epsilon_histograms="
                                  f"{p.get('epsilon_histograms')!r}")
    wrong = recomputed(p, {"histogram_sensitivity": m})
    if m:
        wrong += recomputed(p, {"histogram_noise_scale": m / e_h})
    return Check(name, not wrong, "; ".join(wrong) if wrong else
                 f"a row adds one count to each of {m:g} histogram trees: L1 sensitivity {m:g}, discrete Laplace "
                 f"scale {m:g} / {e_h:g} = {(m / e_h) if m else 0:.4g}")


def _calibration_check(p: Mapping[str, Any]) -> Check:
    name = "temperature from the public grid by the exponential mechanism"
    grid = p.get("temperatures")
    temperature = numeric_parameter(p, "temperature")
    wrong = []
    if not isinstance(grid, list) or [float(t) for t in grid] != list(TEMPERATURES):
        wrong.append(f"temperatures={grid!r} is not the public grid {list(TEMPERATURES)}")
    elif temperature not in TEMPERATURES:
        wrong.append(f"temperature={p.get('temperature')!r} is not in the grid")
    if p.get("utility") != UTILITY or numeric_parameter(p, "utility_sensitivity") != 1:
        wrong.append(f"utility={p.get('utility')!r} with sensitivity {p.get('utility_sensitivity')!r} "
                     f"(expected {UTILITY!r}, 1)")
    wrong += recomputed(p, {"calibration_beta": numeric_parameter(p, "epsilon_calibration") or math.nan})
    smoothing = numeric_parameter(p, "smoothing")
    if smoothing is None or smoothing < 0:
        wrong.append(f"smoothing={p.get('smoothing')!r} is not a number >= 0")
    return Check(name, not wrong, "; ".join(wrong) if wrong else
                 f"temperature {temperature:g} of {len(TEMPERATURES)} candidates; beta = epsilon_calibration / 1 "
                 "(a monotone utility of sensitivity 1)")
