"""A local learner whose every leaf meets the release's path requirement by construction (kADET-style).

APT prunes a tree grown without regard to privacy: a pure leaf that breaks (c,l)-diversity is merged
with a whole sibling subtree into one leaf, and on binary trees this often climbs to the root. The
owner holds its rows, so it can instead grow a tree whose every leaf already satisfies the
requirement (Friedman, Wolff & Schuster 2008, "Providing k-anonymity in data mining", kADET): top
down, each node takes the best split (C4.5's gain ratio, or information gain) among the *admissible*
ones, those whose children all meet the requirement in the disclosure's form, and stays a leaf where
none exists. Beyond kADET:

* **category grouping**: a categorical split need not have one child per category. The categories
  are grouped greedily: the smallest inadmissible group joins the partner that makes it admissible
  at the least loss of information gain (or, when none does, that brings it closest), until every
  group is admissible. A split that is inadmissible category by category (a pure ``health =
  not_recom`` branch under (c,l)-diversity) becomes admissible by pairing that category with one
  whose rows are of other classes. Categories absent from the node's rows join the largest group,
  so every category of the path's domain still has a branch (no row falls off the tree, and no
  released path hides which categories exist). A grouped attribute may be split again deeper on
  the path, within the group.
* **deferred grouping** (``pairing="deferred"``, the default): a grouping that a failing category
  forces ties its partner's rows to that branch for the whole subtree. Where the criterion picks
  such a split, it is made only if no ungrouped split would let the leaves classify clearly more
  rows (`_DeferringGrower`), so the learner splits on other attributes first, groups anew in each
  subtree, and never groups where the levels agree on the class. Where two partners tie on loss
  (within a count's sampling noise), the one grouped least often with the category elsewhere in
  the tree is taken, so the partner changes from subtree to subtree instead of following the
  noise in the counts. On Nursery under hit/miss (5,2)-diversity it splits ``social`` first,
  pairs ``health = not_recom`` with ``recommended`` under one of ``nonprob`` and ``slightly_prob``
  and with ``priority`` under the other, and leaves ``health`` unsplit where ``social =
  problematic``; the pooled pseudo-data then still tie ``not_recom`` to its class.
  ``pairing="eager"`` keeps the earlier behaviour.
* **binary category splits** (``category_split``): under ``"grouped"`` (the default) a categorical
  split has a branch per category or group, which spends the rows fastest; ``"binary"`` cuts the
  categories in two instead, ordered by their share of the node's majority class (for two classes
  the order in which the best binary partition is a cut, Breiman et al. 1984), at the best admissible
  cut, as a numeric attribute is; ``"either"`` takes, per attribute, the better of the two by the
  criterion's ratio. A two-way branch leaves more rows below it for later splits, so under
  k-anonymity, where every leaf needs only k rows, the tree spends its leaves on more attributes
  (`modelshare.common.mechanisms.release.local_learner` asks for ``"either"`` there: EXPERIMENTS.md, Adult).
* **numeric attributes** are split in two at the best admissible threshold among all thresholds at
  once (cumulative class counts), and may be split again deeper on the path, so a run of adjacent
  intervals of the public cells forms a branch whenever both sides are admissible.

Wrapped in `OnPublicCuts` (``make_learner(..., public_cuts=True)``, what every privacy release
uses), numeric values are public cell indices, so every threshold maps to a public cut point. No
node gets exactly one child and no child is empty. The mechanism (APT, Methods 1 and 2) still runs
on the tree as the final guard, and finds nothing to prune in the leaves; the release audit then
re-checks every claim.

The learner sits below the privacy layer, so it takes the requirement as a `LeafRule` on class-count
vectors: `modelshare.common.privacy.requirements.path_rule` builds it from the requirement and the disclosure
(``hit_miss``: the majority count is the hit and the rest the miss; ``counts``: the exact class
counts), and `modelshare.common.mechanisms.release.local_learner` hands it to the learner an owner trains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Protocol

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from modelshare.common.data.schema import Schema
from modelshare.common.params import check_choice, check_nonnegative_real, check_positive_int
from modelshare.common.trees.learner_options import CATEGORY_SPLITS, PAIRINGS
from modelshare.common.trees.learners._binned import Binned, bin_rows, dense_ids, tuple_ids
from modelshare.common.trees.learners._data import check_x, check_xy
from modelshare.common.trees.learners._growing import (
    CRITERIA,
    TIE_TOLERANCE,
    GrowerBase,
    best_cuts,
    gain_and_split_info,
    midpoint,
    xlog2x,
)
from modelshare.common.trees.learners._params import check_schema
from modelshare.common.trees.tree import CategorySet, Constraint, Edge, Interval, Node, Tree, preorder

__all__ = ["AdmissibleTreeClassifier", "LeafRule", "group_categories"]

class LeafRule(Protocol):
    """What a leaf must satisfy, on class-count vectors
    (``modelshare.common.privacy.requirements.PathRule`` is the real one)."""

    def ok(self, counts: np.ndarray) -> np.ndarray:
        """Per row of ``counts`` (shape ``(n, classes)``): does a leaf with these counts pass?"""
        ...

    def deficit(self, counts: np.ndarray) -> np.ndarray:
        """Per row: 0 where `ok`, else a positive measure of how far from passing (what grouping shrinks)."""
        ...

    def fewest_rows(self) -> int:
        """A lower bound on the rows of a leaf that passes (a node with fewer than twice this is not split)."""
        ...


@dataclass(frozen=True)
class _Rule:
    """``rule`` (None: any leaf) and at least ``min_rows`` rows: the test every child of a split must pass."""

    rule: LeafRule | None
    min_rows: int

    def ok(self, counts: np.ndarray) -> np.ndarray:
        flat = counts.reshape(-1, counts.shape[-1])
        passed = flat.sum(axis=1) >= self.min_rows
        if self.rule is not None:
            passed &= self.rule.ok(flat)
        shaped: np.ndarray = passed.reshape(counts.shape[:-1])
        return shaped

    def fewest_rows(self) -> int:
        return max(self.min_rows, 1 if self.rule is None else self.rule.fewest_rows())

    def deficit(self, counts: np.ndarray) -> np.ndarray:
        flat = counts.reshape(-1, counts.shape[-1])
        short = np.maximum(self.min_rows - flat.sum(axis=1), 0.0)
        if self.rule is not None:
            short = np.maximum(short, self.rule.deficit(flat))
        shaped: np.ndarray = short.reshape(counts.shape[:-1])
        return shaped


def _merge_loss(groups: np.ndarray, b: int) -> np.ndarray:
    """Per group h: how much ``n * information gain`` drops when group ``b`` is merged into h (inf for h = b)."""
    merged = groups + groups[b]
    sizes = groups.sum(axis=1)
    size_term = xlog2x(merged.sum(axis=1)) - xlog2x(sizes) - xlog2x(sizes[b])
    class_term = xlog2x(merged).sum(axis=1) - xlog2x(groups).sum(axis=1) - xlog2x(groups[b]).sum()
    loss: np.ndarray = size_term - class_term
    loss[b] = np.inf
    return loss


def group_categories(table: np.ndarray, rule: LeafRule, together: np.ndarray | None = None) -> list[np.ndarray]:
    """Group the rows of a category-by-class ``table`` so that every group is admissible; lists of category indices.

    Categories with no rows are left out (the caller places them). Greedy: while some group fails,
    the one with the fewest rows joins the partner whose union passes with the least loss of
    information gain, or, when no union passes, the partner leaving the smallest deficit. Fewer
    than two groups back means no admissible split on this attribute.

    ``together`` (categories x categories): how often two categories were grouped elsewhere in the
    tree. Among partners tied on loss (within the square root of the least loss, in ``rows x bits``:
    a count's sampling noise on the scale of what is lost), the one grouped least often with the failing group's
    categories is taken, so that a category that may not stand
    alone is paired with different partners in different subtrees rather than by the sampling
    noise in the counts (on Nursery the two partners of ``health = not_recom`` tie to the row).
    """
    present = np.flatnonzero(table.sum(axis=1) > 0)
    members = [np.array([c]) for c in present]
    groups = table[present].astype(np.float64)
    failing = ~rule.ok(groups)
    while failing.any() and len(members) > 1:
        sizes = groups.sum(axis=1)
        b = int(np.flatnonzero(failing)[np.argmin(sizes[failing])])
        merged = groups + groups[b]
        deficit = rule.deficit(merged)
        deficit[b] = np.inf
        loss = _merge_loss(groups, b)
        best_deficit = deficit.min()
        near = deficit <= best_deficit + TIE_TOLERANCE
        h = int(np.flatnonzero(near)[np.argmin(loss[near])])
        if together is not None:
            tied = np.flatnonzero((deficit <= best_deficit + TIE_TOLERANCE)
                                  & (loss <= loss[h] + np.sqrt(max(loss[h], 0.0))))
            used = np.array([together[np.ix_(members[b], members[t])].sum() for t in tied])
            h = int(tied[np.flatnonzero(used == used.min())][np.argmin(loss[tied][used == used.min()])])
        members[h] = np.concatenate([members[h], members[b]])
        groups[h] = merged[h]
        keep = np.arange(len(members)) != b
        members = [m for m, k in zip(members, keep, strict=False) if k]
        groups = groups[keep]
        failing = ~rule.ok(groups)
    return members if len(members) > 1 else []


@dataclass(frozen=True)
class _Split:
    """A candidate split: attribute, quality, and either a threshold or groups of categories."""

    attribute: int
    gain: float
    split_info: float
    threshold: float | None = None
    groups: tuple[frozenset[int], ...] = ()
    forced: bool = False
    """True when a category that fails alone had to be grouped with another (what ``pairing`` may defer)."""


class AdmissibleTreeClassifier(ClassifierMixin, BaseEstimator):
    """Decision tree grown so that every leaf passes ``leaf_rule`` (module docstring).

    Parameters
    ----------
    schema:
        The schema the encoded rows and the tree refer to.
    leaf_rule:
        What every leaf must pass: the release's requirement in its disclosure's form
        (``modelshare.common.privacy.requirements.path_rule``); None admits every leaf of ``min_samples_leaf`` rows.
    criterion:
        ``gain_ratio`` (C4.5's rule among splits of at least average gain) or ``info_gain``.
    max_depth:
        Maximum depth (root = 0); None grows until no admissible split gains information.
    min_samples_leaf:
        Fewest rows a child may hold (on top of ``leaf_rule``).
    min_gain:
        A split gaining fewer bits is not made.
    pairing:
        ``deferred`` (a split that groups a failing category only where grouping pays, `_DeferringGrower`)
        or ``eager`` (grouped wherever the criterion picks the attribute: the earlier behaviour).
    category_split:
        ``grouped`` (a branch per category, failing ones grouped), ``binary`` (two groups cut on the
        categories ordered by the node's majority-class share) or ``either`` (per attribute, the one
        with the better gain ratio); module docstring.
    confidence:
        C4.5's pruning confidence (CF, default 0.25): after growing, a subtree whose pessimistic
        error estimate is no better than its root's as a leaf becomes that leaf (`prune_pessimistic`);
        None keeps the grown tree. Under a diversity requirement the admissible splits deep down
        mostly follow noise in mixed leaves, so pruning matters more here than for C4.5. The grown
        tree's many small leaves still carry per-attribute class frequencies that a naive Bayes
        model learned from its pseudo-data uses (Nursery, (5,2), one owner: 0.739 against 0.677),
        while the tree itself and tree models fitted to it lose far more (EXPERIMENTS.md,
        "Releasing the grown tree"), so 0.25 stays the default.

    Attributes
    ----------
    tree_ : Tree
        The fitted tree with ``counts`` disclosure (the release converts it to its disclosure).
    """

    def __init__(
        self,
        schema: Schema,
        *,
        leaf_rule: LeafRule | None = None,
        criterion: str = "gain_ratio",
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        min_gain: float = 1e-9,
        confidence: float | None = 0.25,
        pairing: str = "deferred",
        category_split: str = "grouped",
    ) -> None:
        self.schema = schema
        self.leaf_rule = leaf_rule
        self.confidence = confidence
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.min_gain = min_gain
        self.pairing = pairing
        self.category_split = category_split

    def fit(self, X: np.ndarray, y: np.ndarray) -> AdmissibleTreeClassifier:
        """Grow the tree on encoded rows and store it as ``tree_``.

        Raises
        ------
        ValueError
            A parameter is invalid (naming it) or ``X``/``y`` do not fit the schema.
        """
        self._settings()  # a bad parameter is named before a bad row
        X, y = check_xy(self.schema, X, y)
        return self.fit_binned(bin_rows(self.schema, X, y))

    def fit_binned(self, binned: Binned) -> AdmissibleTreeClassifier:
        """`fit` on rows already binned for ``schema``
        (`modelshare.common.trees.learners._binned.bin_rows` or `bin_cells`)."""
        rule, criterion, max_depth, min_gain, confidence, pairing, category_split = self._settings()
        grower = _DeferringGrower if pairing == "deferred" else _Grower
        nodes = grower(self.schema, binned, rule, criterion, max_depth, min_gain, category_split).grow()
        if confidence is not None:
            nodes = prune_pessimistic(nodes, float(confidence), rule)
        self.tree_ = Tree(self.schema, nodes, "counts")
        self.classes_ = np.arange(self.schema.n_classes, dtype=np.int64)
        self.n_features_in_ = self.schema.n_attributes
        return self

    def _settings(self) -> tuple[_Rule, str, int | None, float, float | None, str, str]:
        """The checked parameters: rule, criterion, max_depth, min_gain, confidence, pairing, category_split."""
        check_schema(self.schema)
        rule = _Rule(self.leaf_rule, check_positive_int("min_samples_leaf", self.min_samples_leaf))
        criterion = check_choice("criterion", self.criterion, CRITERIA)
        max_depth = check_positive_int("max_depth", self.max_depth, allow_none=True)
        min_gain = check_nonnegative_real("min_gain", self.min_gain)
        confidence = self.confidence
        if confidence is not None and not (isinstance(confidence, (int, float)) and 0.0 < confidence < 1.0):
            raise ValueError(f"confidence must lie strictly between 0 and 1 (or be None), got {confidence!r}")
        pairing = check_choice("pairing", self.pairing, PAIRINGS)
        category_split = check_choice("category_split", self.category_split, CATEGORY_SPLITS)
        return rule, criterion, max_depth, min_gain, confidence, pairing, category_split

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per row, from ``tree_``."""
        check_is_fitted(self, "tree_")
        return self.tree_.predict(check_x(self.schema, X))


def _added_errors(n: np.ndarray, e: np.ndarray, confidence: float) -> np.ndarray:
    """C4.5's pessimistic extra errors: the upper ``confidence``
    bound of e errors in n rows, minus e (as Weka's J48)."""
    z = NormalDist().inv_cdf(1.0 - confidence)
    n = np.maximum(n, 1.0)
    f = (e + 0.5) / n
    spread = z * np.sqrt(np.maximum(f / n - f * f / n + z * z / (4 * n * n), 0.0))
    upper = (f + z * z / (2 * n) + spread) / (1 + z * z / n)
    normal = upper * n - e
    base = n * (1.0 - confidence ** (1.0 / n))  # e < 1: interpolate from the exact bound at e = 0
    one = (lambda f1: (f1 + z * z / (2 * n) + z * np.sqrt(np.maximum(f1 / n - f1 * f1 / n + z * z / (4 * n * n), 0.0)))
           / (1 + z * z / n) * n - 1.0)(1.5 / n)
    small = base + e * (one - base)
    errors: np.ndarray = np.where(e < 1, small, np.where(e + 0.5 >= n, np.maximum(n - e, 0.0), normal))
    return errors


def prune_pessimistic(nodes: list[Node], confidence: float, rule: LeafRule) -> list[Node]:
    """C4.5's subtree replacement: a subtree no better than its root as a leaf, by pessimistic error, becomes that leaf.

    The new leaf holds the union of the subtree's rows; it is kept only if it passes ``rule`` (it
    does whenever its leaves did for k-anonymity and hit/miss diversity, and it is checked anyway).
    The root keeps its split: a root-only tree is no model, and the release would refuse it.
    Returns the reachable nodes renumbered in preorder (siblings stay consecutive).
    """
    counts = np.stack([node.class_counts() for node in nodes])
    n = counts.sum(axis=1)
    errors = n - counts.max(axis=1)
    as_leaf = errors + _added_errors(n, errors, confidence)
    passes = rule.ok(counts)
    order = preorder(nodes)
    estimate = as_leaf.copy()
    for i in reversed(order):  # children before parents; a loop over nodes, not rows
        node = nodes[i]
        if node.is_leaf:
            continue
        subtree = sum(estimate[e.child] for e in node.edges)
        if i != 0 and passes[i] and as_leaf[i] <= subtree + 0.1:
            node.attribute, node.edges = None, []
        else:
            estimate[i] = subtree
    return _renumbered(nodes)



def _renumbered(nodes: list[Node]) -> list[Node]:
    """The nodes reachable from the root, numbered breadth-first so each node's children are consecutive."""
    kept, new_index = [0], {0: 0}
    for i in kept:  # grows while iterating: breadth-first
        for e in nodes[i].edges:
            new_index[e.child] = len(kept)
            kept.append(e.child)
    return [Node(nodes[i].label, nodes[i].hit, nodes[i].miss, nodes[i].counts, nodes[i].attribute,
                 [Edge(e.constraint, new_index[e.child]) for e in nodes[i].edges]) for i in kept]


class _Grower(GrowerBase):
    """One fit's state: grows the node list depth-first with an explicit stack."""

    def __init__(self, schema: Schema, binned: Binned, rule: _Rule, criterion: str,
                 max_depth: int | None, min_gain: float, category_split: str = "grouped") -> None:
        super().__init__(schema, binned, criterion, max_depth, min_gain)
        self.rule = rule
        self.category_split = category_split
        self.splittable = 2 * rule.fewest_rows()
        """Fewer rows than this cannot make two admissible children: such a node is a leaf without a search."""

    def grow(self) -> list[Node]:
        """Build the nodes; node 0 is the root. Each stack entry carries the categories its path still allows."""
        rows = self.binned.all_rows()
        nodes = [Node.from_counts(self._counts(rows))]
        domains = {j: frozenset(range(a.size)) for j, a in enumerate(self.schema.attributes)  # type: ignore[union-attr]
                   if self.categorical[j]}
        stack: list[tuple[int, np.ndarray, int, dict[int, frozenset[int]]]] = [(0, rows, 0, domains)]
        while stack:
            index, rows, depth, allowed = stack.pop()
            node = nodes[index]
            if (np.count_nonzero(node.class_counts()) <= 1 or rows.size < self.splittable
                    or (self.max_depth is not None and depth >= self.max_depth)):
                continue
            split = self._best_split(rows, node.class_counts(), allowed)
            if split is None:
                continue
            self._made(split)
            node.attribute = split.attribute
            pending = []
            for constraint, child_rows in self._partition(split, rows, allowed):
                child = len(nodes)
                nodes.append(Node.from_counts(self._counts(child_rows)))
                node.edges.append(Edge(constraint, child))
                narrowed = allowed
                if isinstance(constraint, CategorySet):
                    narrowed = {**allowed, split.attribute: constraint.codes}
                pending.append((child, child_rows, depth + 1, narrowed))
            stack.extend(reversed(pending))
        return nodes

    def _made(self, split: _Split) -> None:
        """Note a split the tree makes (for the deferring grower's partner choice); nothing here."""

    def _together(self, j: int) -> np.ndarray | None:
        """How often attribute ``j``'s categories were grouped together so far (None: not tracked)."""
        return None

    def _partition(self, split: _Split, rows: np.ndarray,
                   allowed: dict[int, frozenset[int]]) -> list[tuple[Constraint, np.ndarray]]:
        """The split's edge constraints with the rows each child gets; absent categories join the largest group."""
        j = split.attribute
        codes = self.binned.codes(j, rows)
        if split.threshold is None:
            groups = [set(g) for g in split.groups]
            slot = np.full(self.binned.size(j), len(groups), dtype=np.int64)  # codes in no group: past the last
            for i, group in enumerate(groups):
                slot[list(group)] = i
            child = slot[codes]
            sizes = np.bincount(child, minlength=len(groups) + 1)
            absent = allowed[j] - frozenset().union(*split.groups)
            groups[int(np.argmax(sizes[:-1]))] |= absent
            order = np.argsort(child, kind="stable")
            parts = np.split(rows[order], np.cumsum(sizes)[:-1])[:len(groups)]  # rows in no group dropped
            return [(CategorySet(frozenset(g)), part) for g, part in zip(groups, parts, strict=False)]
        t = split.threshold
        left = codes <= np.searchsorted(self.binned.values[j], t, side="right") - 1
        return [(Interval(-math.inf, t, low_closed=False, high_closed=True), rows[left]),
                (Interval(t, math.inf, low_closed=False, high_closed=False), rows[~left])]

    def _best_split(self, rows: np.ndarray, counts: np.ndarray, allowed: dict[int, frozenset[int]]) -> _Split | None:
        """The criterion's pick among admissible splits gaining at least ``min_gain``, or None."""
        return self._pick(self._candidates(rows, counts, allowed))

    def _candidates(self, rows: np.ndarray, counts: np.ndarray, allowed: dict[int, frozenset[int]]) -> list[_Split]:
        """Every attribute's best admissible split gaining at least ``min_gain``.

        A categorical attribute splits as ``category_split`` asks: grouped branches (`_grouped_split`), two
        groups of its categories ordered by the node's majority-class share, or the better gain ratio of the
        two. The two-way cuts (every numeric attribute's, the categorical ones' two groups) are searched
        for all attributes at once (`best_cuts`).
        """
        n = rows.size
        parent_cells = float(xlog2x(counts).sum())
        majority = int(np.argmax(counts))
        tables = self.binned.node(rows)
        grouped: dict[int, _Split | None] = {}
        ordered: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # attribute: (its rows' codes or values in order, table)
        for j in range(self.schema.n_attributes):
            if not self.categorical[j]:
                values, table = tables.present(j)
                if values.size >= 2:
                    ordered[j] = values, table
                continue
            if len(allowed[j]) < 2:
                continue
            table = tables.table(j)
            if self.category_split != "binary":
                grouped[j] = self._grouped_split(j, table, n, parent_cells)
            if self.category_split != "grouped":
                present = np.flatnonzero(table.sum(axis=1) > 0)
                if present.size >= 2:
                    shown = table[present].astype(np.float64)
                    order = present[np.argsort(shown[:, majority] / shown.sum(axis=1), kind="stable")]
                    ordered[j] = order, table[order]
        cuts = dict(zip(ordered, best_cuts([table for _, table in ordered.values()], n, parent_cells,
                                           self._both_admissible), strict=False))
        candidates = []
        for j in range(self.schema.n_attributes):
            cut = cuts.get(j)
            split = self._two_way(j, *ordered[j], cut) if cut is not None else None
            if j in grouped:
                split = _better(grouped[j], split)
            if split is not None and split.gain >= self.min_gain:
                candidates.append(split)
        return candidates

    def _both_admissible(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Per candidate cut: do both sides pass the rule?"""
        both: np.ndarray = self.rule.ok(left) & self.rule.ok(right)
        return both

    def _two_way(self, j: int, order: np.ndarray, table: np.ndarray, cut: tuple[int, float, float]) -> _Split:
        """Attribute ``j`` split at ``cut`` (last position on the left, gain, split information) of its values or
        categories in ``order``, whose class counts are the rows of ``table``."""
        at, gain, split_info = cut
        if not self.categorical[j]:
            return _Split(j, gain, split_info, threshold=midpoint(order[at], order[at + 1]))
        groups = (frozenset(int(c) for c in order[:at + 1]), frozenset(int(c) for c in order[at + 1:]))
        fails_alone = ~self.rule.ok(table.astype(np.float64))
        return _Split(j, gain, split_info, groups=groups, forced=bool(fails_alone.any()))

    def _grouped_split(self, j: int, table: np.ndarray, n: int, parent_cells: float) -> _Split | None:
        """A branch per category, failing ones grouped into admissible branches (`group_categories`)."""
        members = group_categories(table, self.rule, self._together(j))
        if not members:
            return None
        grouped = np.stack([table[m].sum(axis=0) for m in members]).astype(np.float64)
        gain, split_info = gain_and_split_info(grouped, n, parent_cells)
        groups = tuple(frozenset(int(c) for c in m) for m in members)
        return _Split(j, float(gain), float(split_info), groups=groups, forced=any(len(m) > 1 for m in members))


def _better(grouped: _Split | None, binary: _Split | None) -> _Split | None:
    """``category_split="either"``: the better gain ratio of an attribute's two splits (two groups on a tie)."""
    if grouped is None or binary is None:
        return grouped or binary
    return binary if _ratio(binary) >= _ratio(grouped) else grouped


def _ratio(split: _Split) -> float:
    """A split's gain ratio (C4.5), what ``category_split="either"`` compares."""
    return split.gain / max(split.split_info, TIE_TOLERANCE)


def majority_cap(rule: _Rule, n_classes: int) -> float:
    """The largest majority share an admissible leaf may hold (5/6 under hit/miss (5,2)-diversity; 1 under k-anonymity).

    Found by bisection on a large leaf whose other rows are spread evenly over the other classes:
    the rule is opaque here (a `LeafRule`), and only this share is needed.
    """
    size = 1e6
    low, high = 0.0, 1.0

    def passes(share: float) -> bool:
        counts = np.full(n_classes, size * (1 - share) / max(n_classes - 1, 1))
        counts[0] = size * share
        return bool(rule.ok(counts[None])[0])

    if passes(high):
        return 1.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if passes(mid) else (low, mid)
    return low


class _DeferringGrower(_Grower):
    """``pairing="deferred"``: a split that groups a failing category is made only where grouping pays.

    Grouping a category that may not stand alone (a pure ``health = not_recom`` under (c,l)-diversity)
    with a partner ties the partner's rows to that branch for the whole subtree; where the partner
    and the remaining levels agree on the class in most columns, a leaf holding all of them is
    right more often than the paired branch ever can be. So where the criterion picks such a split,
    each alternative is scored by the rows its leaves could at best classify (`_reach`): for the
    grouped split, each group's column-wise majorities capped at the rule's majority share; for an
    ungrouped split, each child at the better of grouping there or never grouping (a one-level
    lookahead). An ungrouped split that reaches more, by more than the difference's sampling noise
    (the square root of the rows of the children where the two reach differently, `_deferral`;
    without a margin Car's small nodes deferred on noise and lost 4 points held out), is taken
    instead (the best by reach, ties to the criterion), so that the
    grouping is decided anew in each subtree, or never made where the levels agree. A *column* is
    one value tuple of the other attributes, and only columns holding every level present count
    (`_complete`). Where no column is complete (most numeric tables, small owners' samples) the
    criterion's pick stands, as under ``eager``.
    """

    def __init__(self, schema: Schema, binned: Binned, rule: _Rule, criterion: str,
                 max_depth: int | None, min_gain: float, category_split: str = "grouped") -> None:
        super().__init__(schema, binned, rule, criterion, max_depth, min_gain, category_split)
        self.cap = majority_cap(rule, self.k)
        self._columns: dict[int, np.ndarray] = {}
        self._grouped = {j: np.zeros((a.size, a.size)) for j, a in enumerate(schema.attributes)  # type: ignore[union-attr]
                         if self.categorical[j]}

    def _made(self, split: _Split) -> None:
        """Count the pairs of categories the split groups together (what partner choice spreads out)."""
        for group in split.groups:
            codes = np.array(sorted(group))
            self._grouped[split.attribute][np.ix_(codes, codes)] += 1.0

    def _together(self, j: int) -> np.ndarray | None:
        return self._grouped[j]

    def _column_ids(self, j: int) -> np.ndarray:
        """Per row: its column with respect to attribute ``j`` (the value tuple of every other attribute)."""
        if j not in self._columns:
            self._columns[j] = tuple_ids(self.binned, j)
        return self._columns[j]

    def _best_split(self, rows: np.ndarray, counts: np.ndarray, allowed: dict[int, frozenset[int]]) -> _Split | None:
        """The criterion's pick, unless it groups a failing category and an ungrouped split reaches more."""
        candidates = self._candidates(rows, counts, allowed)
        best = self._pick(candidates)
        free = [c for c in candidates if not c.forced]
        if best is None or not best.forced or not free or self.cap >= 1.0:
            return best
        j = best.attribute
        core = self._complete(rows, j)
        if core.size == 0:
            return best
        grouped = self._reach(core, j, best.groups)
        reaches, noise = np.array([self._deferral(s, core, j, best.groups, allowed) for s in free]).T
        clear = reaches > grouped + noise  # beyond the difference's sampling noise; else the criterion's pick stands
        if not clear.any():
            return best
        top = reaches[clear].max()
        return self._pick([s for s, r, ok in zip(free, reaches, clear, strict=False) if ok and r >= top - 1e-9])

    def _deferral(self, split: _Split, core: np.ndarray, j: int, groups: tuple[frozenset[int], ...],
                  allowed: dict[int, frozenset[int]]) -> tuple[float, float]:
        """The reach of ungrouped ``split`` on ``core`` (`_value` per child), and the sampling noise of its
        difference from grouping ``j`` by ``groups``: the square root of the rows of the children where the
        two differ.

        The two are compared on the same rows, so a child where both reach the same adds nothing to the
        difference and nothing to its noise (McNemar's principle). The square root of every row counted
        instead made the test a coin flip where the gain sits in one child: on a Nursery fold under hit/miss
        (20,3) or (10,2) (majority cap 10/11), splitting ``social`` first gains 93-98 rows of about 9,440, all
        under ``social = problematic`` (about 3,140 rows, noise 56), against a margin of 97 for every row, so
        1 fold in 10 deferred (EXPERIMENTS.md, "The bimodal cells").
        """
        reach, differing = 0.0, 0
        for _, child in self._partition(split, core, allowed):
            value = self._value(child, j)
            reach += value
            if abs(value - self._reach(child, j, groups)) > 1e-9:
                differing += child.size
        return reach, float(np.sqrt(differing))

    def _complete(self, rows: np.ndarray, j: int) -> np.ndarray:
        """The rows of ``rows`` in columns that hold every value of ``j`` present in ``rows``.

        Only there does a column show what grouping costs: a column missing a level (a sample of a
        full-factorial table) would count as classified whatever is grouped.
        """
        codes = self.binned.codes(j, rows)
        present = np.unique(codes)
        local = dense_ids(self._column_ids(j)[rows])
        seen = np.zeros((int(local.max()) + 1, self.binned.size(j)), dtype=np.bool_)
        seen[local, codes] = True
        complete = np.asarray(seen[:, present].all(axis=1))
        kept: np.ndarray = rows[complete[local]]
        return kept

    def _reach(self, rows: np.ndarray, j: int, groups: tuple[frozenset[int], ...]) -> float:
        """Rows that leaves splitting ``rows`` by ``groups`` of attribute ``j`` could at best classify correctly."""
        local = dense_ids(self._column_ids(j)[rows]).astype(np.int64)
        codes = self.binned.codes(j, rows)
        classes = self.binned.y[rows].astype(np.int64)
        total = 0.0
        for group in groups:
            inside = np.isin(codes, list(group))
            n = int(inside.sum())
            if n == 0:
                continue
            table = np.bincount(local[inside] * self.k + classes[inside], minlength=(local.max() + 1) * self.k)
            total += min(float(table.reshape(-1, self.k).max(axis=1).sum()), self.cap * n)
        return total

    def _value(self, rows: np.ndarray, j: int) -> float:
        """The better reach of ``rows``: never splitting ``j`` again, or grouping its categories here."""
        size = self.binned.size(j)
        whole = self._reach(rows, j, (frozenset(range(size)),))
        table = self.binned.table(j, rows)
        members = group_categories(table, self.rule)
        if not members:
            return whole
        return max(whole, self._reach(rows, j, tuple(frozenset(int(c) for c in m) for m in members)))
