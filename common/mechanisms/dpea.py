"""DPEA (Bai et al. 2017): differential privacy embedded in d-step subtree selection of a decision tree.

A tree of maximal depth D is grown in rounds. Each round picks, at every frontier node, a whole
subtree of d levels of splits (fewer in the last round) with the exponential mechanism, and the
leaves of the finished tree release noisy class counts. d = 1 is Friedman and Schuster's one-step
selection, d = D selects the whole tree at once. The paper's body text is not available; the
project's notes (``docs/paper-notes.md`` §2) fix what it leaves open, and this module follows
them:

* *Structure (B1, B2, B4).* Splits are multiway: a child for every value of the attribute,
  values absent from the node's rows included, and an attribute is used at most once on a path.
  A numeric attribute is cut into ``bins`` equal-width bins over its public schema range and then
  treated as categorical (an attribute with one category, or a numeric one with an empty range,
  cannot split and is never chosen). The notes suggest b = 5; the default is ``DEFAULT_BINS`` = 24
  because equal-width bins of a skewed public range put almost every row in one bin (Adult's
  capital-gain's public range is 0-100,000, and its informative cut lies near 5,000): 5-fold cross-validation on
  adult.data (eps 0.1, 1, 10, then on the data-derived range 0-99,999) put b = 5 1-3 points below every b in 16-32,
  among which 24 was best on average (EXPERIMENTS.md, measured by a script: no command exposes ``bins``). A node is
  a leaf iff it is at depth D or no attribute is left on its path: stopping never reads the rows.
* *Compact domain (``max_arity``, the registry trainer's ``domain`` rule).* Every leaf of the full
  structure is released, so a tree can have as many leaves as the product of the D largest arities:
  on Adult at the registry's default (10 trees of depth 4) the paper's domain released 600,000 nodes,
  34 MB on the wire. A categorical attribute with more than ``max_arity`` categories is therefore
  split into ``max_arity`` public groups of consecutive categories (schema order, sizes differing by
  at most one), and the registry trainer (`train_dpea`, `release_domain`) uses ``domain="compact"``:
  the largest cap A in 2..`DEFAULT_BINS` with bins = max_arity = A such that T worst-case full
  structures fit `RELEASE_BYTES` = 2 MB on the wire (`Domain.node_bytes`, a per-node bound of the
  protobuf encoding; A = 2 makes every split binary, 2^(D+1) - 1 nodes a tree). ``domain="paper"``
  (no cap; the finest b <= 24 whose worst-case structure fits ``max_nodes``, `finest_bins`) is kept
  for the reproductions (``experiment dp --dpea-domain paper``). *Accounting.* The domain is a
  function of the schema, D and T only, so it is public: the structures the exponential mechanism
  ranges over, the leaf cells and the proof below are those of the paper on a different public
  partition of the attribute values; a row still lies in exactly one child of every split, one
  leaf of every structure and one (leaf, class) cell, so Δq', the composition over rounds and the
  count sensitivity 1 are unchanged. The release states ``bins``, ``max_arity`` and ``domain_rule``;
  the audit recomputes the cap from the rule and checks that every split has only the stated
  domain's children (`domain_check`), since a split on data-chosen values would not be private.
* *Score (§2.4).* ``score(subtree) = sum over its leaves of f(leaf's class counts)``: ``max``
  (the majority count, Δq' = 1, the default), ``gini`` (minus the total Gini impurity, Δq' = 2)
  or ``infogain`` (minus the total entropy in bits, Δq' = log2(N + 1) + 1/ln 2 for a public bound
  N on the rows, ``max_rows``). One row lies in exactly one leaf, so Δq' of the sum is that of f.
* *Budget (§2.2).* Each of the ``n_trees`` trees gets eps_t = epsilon / n_trees (sequential
  composition). Within a tree eps' = eps_t / (ceil(D/d) + 1): a root-to-leaf path crosses at most
  ceil(D/d) selections, each an eps'-DP exponential mechanism P(st) ∝ exp(beta score(st)), plus
  one discrete Laplace(1/eps') release of its leaf's class counts (B6). Selections and leaves of one round
  sit on disjoint rows (parallel composition); a path that stops early spends less.
* *Selection (a deliberate departure, ``selection``).* The paper's exponential mechanism has
  beta = eps' / (2 Δq'). Every score here is monotone: adding a row never lowers ``max`` and never
  raises ``gini`` or ``infogain`` (each total impurity is non-decreasing, `leaf_scores`), for every
  subtree at once. For such a score beta = eps' / Δq' is already eps'-DP (McSherry and Talwar
  2007; Dwork and Roth, Thm. 3.10 remark): with D' = D + r, exp(beta (q' - q)) <= exp(eps') and
  Z'/Z in [1, exp(eps')] move in opposite directions, so neither ratio of probabilities exceeds
  exp(eps'). ``"monotone"`` (the default) uses it: twice the paper's selection sharpness at the same
  claim, which on Adult at eps = 1 is worth several points of accuracy (EXPERIMENTS.md).
  ``"paper"`` keeps the paper's beta; its claim is then loose by the factor 2. The empirical audit
  (`modelshare.common.audit.dp.dpea`: the registered trainer end to end, and an exact-law fast path for
  large trial counts) computes the exact loss of both and fails a selection sharper than either claims.
* *Samplers (§2.5, §2.6).* ``exact`` (default) samples the exponential mechanism exactly by a
  sum-product recursion over the DAG of nodes (a node is a set of (attribute, value) constraints,
  so paths that differ only in order share it), in the log domain (a node two steps above the
  leaves is solved in one bincount over every (child, attribute) pair, `_ExactSelection._two_steps`,
  its children's laws kept with it); a node without rows has
  f = 0 everywhere below it, so its partition function only counts subtrees and is memoised on
  (steps, attributes left). ``exhaustive`` enumerates every subtree literally (the paper's
  Alg. 2; a test oracle, refused beyond ``max_subtrees``). ``mcmc`` is the paper's Alg. 3 for
  rounds of 3 or more steps (rounds of at most 2 use the exact sampler, B7): Metropolis-Hastings
  with the Hastings ratio of §2.6, stopped when the variance of the last ``buffer_size`` scores
  drops to ``var_threshold`` or after ``step_limit`` steps. A finite chain is only approximately
  distributed as the exponential mechanism and its stopping rule reads the data, so an mcmc
  release states ``guarantee_exact: False``, and the audit fails such a release under a ``dp:`` claim
  (`exact_sampler_check`): the miner refuses it.
* *Leaves and post-processing.* Every leaf of the full structure, empty or not, gets
  count + discrete Laplace(1/eps') per class (an integer from OpenDP's exact sampler,
  `modelshare.common.privacy.noise`); each count is clamped at 0, the label is the
  released argmax, inner counts are sums of their children, and leaves whose released counts are
  all 0 are dropped with any inner node left without children. All of that is a function of the
  released structure and counts alone, so it costs no privacy; a row reaching a dropped subtree
  is predicted at the inner node above it, as a zero count would predict it.

Why the full structure is materialised: every leaf must get noise, so a schema whose worst-case
full structure (the D largest arities multiplied out) exceeds ``max_nodes`` is refused before
any row is read; the check is data-independent, so the refusal discloses nothing.

Auditors (`modelshare.common.audit.release`) import this module for its constants, so the row checks (and with them
scikit-learn) are imported on first use in `DPEA.fit`.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.params import check_positive_int, check_positive_real
from modelshare.common.privacy.checks import Check, integer_counts_check
from modelshare.common.privacy.noise import Randomness, SecretNoise, log_sum_exp, noisy_counts
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.trees.rebuild import release_leaf_counts
from modelshare.common.trees.tree import CategorySet, Constraint, Edge, Interval, Node, Tree

if TYPE_CHECKING:
    from modelshare.common.privacy.requirements import DP

__all__ = [
    "MECHANISM",
    "SCORES",
    "SAMPLERS",
    "SELECTIONS",
    "POST_PROCESSING",
    "Structure",
    "DEFAULT_BINS",
    "Domain",
    "DPEA",
    "DpeaRelease",
    "accounting_errors",
    "exact_sampler_check",
    "finest_bins",
    "DOMAINS",
    "RELEASE_BYTES",
    "domain_check",
    "registered_dpea",
    "release_domain",
    "leaf_scores",
    "score_sensitivity",
    "train_dpea",
]

MECHANISM = "dpea"  # the release mechanism's registry name in reports, studies and policies
SCORES: tuple[str, ...] = ("max", "gini", "infogain")
SAMPLERS: tuple[str, ...] = ("exact", "exhaustive", "mcmc")
SELECTIONS: tuple[str, ...] = ("monotone", "paper")  # beta = eps' / Δq' (monotone scores) or the paper's eps' / (2 Δq')
POST_PROCESSING = ("integer noisy leaf counts clamped at 0; inner counts are sums of their "
                   "children; leaves released as all 0 dropped")
DEFAULT_BINS = 24  # equal-width bins per numeric attribute (module docstring)
MCMC_EXACT_STEPS = 2  # rounds of at most this many steps use the exact sampler under sampler="mcmc" (B7)

# A subtree: None is a leaf; (attribute, children) splits on the attribute, one child per value (code) in order.
Structure = None | tuple[int, tuple["Structure", ...]]
Key = frozenset[tuple[int, int]]  # a node of the subtree DAG: the (attribute, value) constraints below the round's root


# ------------------------------------------------------------------ the public, discretised domain
@dataclass(frozen=True)
class Domain:
    """The schema as finite codes: numeric attributes as ``bins`` equal-width bins, categories as they are or grouped.

    Bins cover the public range ``[low, high]`` in ``bins`` intervals (low, high] of equal width; the
    outer two extend to -inf and +inf so that every value is routed. A categorical attribute with more
    than ``max_arity`` categories (None: no cap, the paper's domain) is split into ``max_arity``
    public groups of consecutive categories in schema order, sizes differing by at most one
    (category v is in group v * max_arity // size). ``arity[a]`` is the number of codes (children
    of a split) of attribute ``a``; an attribute with arity 1 cannot split.
    """

    schema: Schema
    bins: int
    arity: np.ndarray
    edges: tuple[np.ndarray, ...]  # inner bin edges per attribute (empty for categorical ones)
    groups: tuple[np.ndarray | None, ...]  # per categorical attribute with a cap: category -> group code
    max_arity: int | None = None
    splits: tuple[tuple[Constraint, ...], ...] = ()  # per attribute, the edge constraints of a split on it

    @classmethod
    def of(cls, schema: Schema, bins: int, max_arity: int | None = None) -> Domain:
        """The domain of ``schema`` with ``bins`` bins per numeric attribute (an empty range gets one)."""
        arity: list[int] = []
        edges: list[np.ndarray] = []
        groups: list[np.ndarray | None] = []
        for attr in schema.attributes:
            group: np.ndarray | None = None
            if isinstance(attr, CategoricalAttribute):
                if max_arity is not None and attr.size > max_arity:
                    group = np.arange(attr.size, dtype=np.int64) * max_arity // attr.size
                    arity.append(max_arity)
                else:
                    arity.append(attr.size)
                edges.append(np.empty(0))
            elif attr.high > attr.low:
                arity.append(bins)
                edges.append(np.linspace(attr.low, attr.high, bins + 1)[1:-1])
            else:
                arity.append(1)
                edges.append(np.empty(0))
            groups.append(group)
        splits = tuple(_split_constraints(attr, n, e, g)
                       for attr, n, e, g in zip(schema.attributes, arity, edges, groups, strict=False))
        return cls(schema, bins, np.array(arity, dtype=np.int64), tuple(edges), tuple(groups), max_arity, splits)

    @property
    def splittable(self) -> tuple[int, ...]:
        """The attributes a node may split on (arity >= 2), in schema order."""
        return tuple(int(a) for a in np.flatnonzero(self.arity >= 2))

    def codes(self, X: np.ndarray) -> np.ndarray:
        """Encoded rows as codes, int64 of X's shape: category (or its group) index, or bin index of a numeric value."""
        Z = np.empty(X.shape, dtype=np.int64)
        for j, attr in enumerate(self.schema.attributes):
            if isinstance(attr, CategoricalAttribute):
                Z[:, j] = X[:, j].astype(np.int64)
                group = self.groups[j]
                if group is not None:
                    Z[:, j] = group[Z[:, j]]
            else:
                Z[:, j] = np.searchsorted(self.edges[j], X[:, j], side="left")
        return Z

    def point(self, codes: np.ndarray) -> np.ndarray:
        """An encoded row with the given codes: a group's first category, or the middle of a numeric attribute's bin."""
        row = codes.astype(np.float64)
        for j, attr in enumerate(self.schema.attributes):
            if isinstance(attr, CategoricalAttribute):
                if self.groups[j] is not None:
                    row[j] = float(np.flatnonzero(self.groups[j] == codes[j])[0])
            else:
                width = (attr.high - attr.low) / self.arity[j]
                row[j] = attr.low + (codes[j] + 0.5) * width
        return row

    def constraints(self, a: int) -> tuple[Constraint, ...]:
        """The edge constraints of a split on attribute ``a``, one per code in order."""
        return self.splits[a]

    def structures(self, depth: int) -> list[Structure]:
        """Every full structure of ``depth`` levels of splits (fewer where attributes run out), in a fixed order."""
        return _structures(self.arity, depth, self.splittable)

    def log_structure_count(self, depth: int) -> float:
        """log of the number of full structures of ``depth``: how long `structures` would be, without listing them."""
        return _EmptyLaw(self.arity).log_count(depth, self.splittable)

    def max_nodes(self, depth: int) -> int:
        """Nodes of the largest full structure of ``depth``: sum over levels of the products of the largest arities."""
        arities = np.sort(self.arity[self.arity >= 2])[::-1][:depth]
        return int(1 + sum(math.prod(int(x) for x in arities[:j]) for j in range(1, arities.size + 1)))

    def node_bytes(self) -> int:
        """A bound on one released node's bytes on the wire
        (`modelshare.common.federation.wire.tree_to_pb`), edge to it included.

        protobuf fields, each with its tag: the node's entry (4: tag, length up to 3 bytes), label (6),
        hit and miss (9 each), the class counts (3 + 8 per class, packed doubles), the attribute (6);
        the edge to it in its parent's entry (2), its child index (6), the constraint (2) holding an
        interval (2 + two doubles 18 + two flags 4) or a group's codes (4 + up to 3 bytes per code).
        """
        group = max((int(np.bincount(g).max()) for g in self.groups if g is not None), default=1)
        return 4 + 6 + 18 + 3 + 8 * self.schema.n_classes + 6 + 2 + 6 + 2 + max(24, 4 + 3 * group)


def _split_constraints(attr: CategoricalAttribute | NumericAttribute, arity: int, edges: np.ndarray,
                       group: np.ndarray | None) -> tuple[Constraint, ...]:
    """The children's constraints of a split on ``attr``: a category or group each, or a bin each."""
    if isinstance(attr, CategoricalAttribute):
        if group is None:
            return tuple(CategorySet(frozenset({v})) for v in range(arity))
        return tuple(CategorySet(frozenset(int(c) for c in np.flatnonzero(group == v))) for v in range(arity))
    bounds = np.concatenate([[-math.inf], edges, [math.inf]])
    return tuple(Interval(float(lo), float(hi), False, bool(math.isfinite(hi)))
                 for lo, hi in zip(bounds[:-1], bounds[1:], strict=False))


def _structures(arity: np.ndarray, k: int, avail: tuple[int, ...]) -> list[Structure]:
    k = min(k, len(avail))
    if k == 0:
        return [None]
    found: list[Structure] = []
    for a in avail:
        below = _structures(arity, k - 1, _without(avail, a))
        found.extend((a, combo) for combo in itertools.product(below, repeat=int(arity[a])))
    return found


# ------------------------------------------------------------------------------ scores
def leaf_scores(counts: np.ndarray, score: str) -> np.ndarray:
    """The per-leaf term f of ``score`` for class counts ``counts`` (last axis: classes); 0 for empty leaves.

    ``max``: the majority count. ``gini``: -total * Gini impurity = sum_c n_c^2 / n - n.
    ``infogain``: -total entropy in bits = sum_c n_c log2(n_c / n).
    """
    counts = np.asarray(counts, dtype=np.float64)
    term: np.ndarray
    if score == "max":
        term = counts.max(axis=-1)
        return term
    total = counts.sum(axis=-1)
    if score == "gini":
        squares = (counts**2).sum(axis=-1)
        term = np.divide(squares, total, out=np.zeros_like(total), where=total > 0) - total
        return term
    if score == "infogain":
        term = _xlog2x(counts).sum(axis=-1) - _xlog2x(total)
        return term
    raise ValueError(f"score must be one of {list(SCORES)}; got {score!r}")


def _xlog2x(values: np.ndarray) -> np.ndarray:
    """Elementwise v log2 v with 0 log2 0 = 0."""
    out = np.zeros_like(values)
    np.multiply(values, np.log2(values, out=np.zeros_like(values), where=values > 0), out=out, where=values > 0)
    return out


def score_sensitivity(score: str, max_rows: int | None = None) -> float:
    """Δq' of ``score`` under adding or removing one row (``max_rows``: infogain's public bound on rows)."""
    if score == "max":
        return 1.0
    if score == "gini":
        return 2.0
    if score == "infogain":
        if max_rows is None:
            raise ValueError("score 'infogain' needs max_rows, a public bound on the number of rows")
        return math.log2(max_rows + 1) + 1 / math.log(2)
    raise ValueError(f"score must be one of {list(SCORES)}; got {score!r}")


def _without(avail: tuple[int, ...], a: int) -> tuple[int, ...]:
    """``avail`` (sorted attributes, containing ``a``) without ``a``."""
    i = avail.index(a)
    return avail[:i] + avail[i + 1:]


# -------------------------------------------------------------------- the rows, as codes
@dataclass(frozen=True)
class _Rows:
    """One fit's data in code form, with the score's f: what every sampler counts on."""

    codes: np.ndarray  # (rows, attributes) int64
    y: np.ndarray
    n_classes: int
    arity: np.ndarray
    score: str
    cells: np.ndarray = field(init=False)  # codes * n_classes + y: a row's (value, class) cell per attribute
    _layouts: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, int, np.ndarray]] = field(
        init=False, default_factory=dict)  # avail -> one_step's bincount layout

    def __post_init__(self) -> None:
        object.__setattr__(self, "cells", self.codes * self.n_classes + self.y[:, None])

    def f(self, rows: np.ndarray) -> float:
        """The score's leaf term on ``rows``."""
        return float(leaf_scores(np.bincount(self.y[rows], minlength=self.n_classes), self.score))

    def partition(self, rows: np.ndarray, a: int) -> list[np.ndarray]:
        """``rows`` split by their code of attribute ``a``, one (possibly empty) array per code."""
        if rows.size == 0:
            return [rows] * int(self.arity[a])
        codes = self.codes[rows, a]
        ordered = rows[np.argsort(codes, kind="stable")]
        ends = np.cumsum(np.bincount(codes, minlength=int(self.arity[a]))).tolist()
        return [ordered[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=False)]

    def _layout(self, avail: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
        """Attributes, cell offsets, table size and per-attribute value offsets of `one_step` over ``avail``."""
        found = self._layouts.get(avail)
        if found is None:
            attrs = np.array(avail, dtype=np.int64)
            arity = self.arity[attrs]
            offsets = np.concatenate([[0], np.cumsum(arity)[:-1]])
            found = self._layouts[avail] = (attrs, offsets * self.n_classes, int(arity.sum()) * self.n_classes, offsets)
        return found

    def one_step(self, rows: np.ndarray, avail: tuple[int, ...]) -> np.ndarray:
        """Per attribute of ``avail``: the score of the one-split subtree on it, all at once (one bincount)."""
        attrs, cell_offsets, size, offsets = self._layout(avail)
        counts = np.bincount((self.cells[rows][:, attrs] + cell_offsets).ravel(), minlength=size)
        return np.add.reduceat(leaf_scores(counts.reshape(-1, self.n_classes), self.score), offsets)

    def two_step(self, rows: np.ndarray, avail: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """`one_step` over ``avail`` at every child of every split
        of ``rows`` on an attribute of ``avail``, in one bincount.

        Children are numbered as `one_step`'s values (attribute offset + value). Returns the scores,
        shape (children, len(avail)) (a child's column of its own attribute is meaningless), and the
        rows per child.
        """
        attrs, cell_offsets, size, offsets = self._layout(avail)
        cells = self.cells[rows][:, attrs] + cell_offsets  # (row, attribute) -> (child * n_classes + class)
        child = cells // self.n_classes
        width = size // self.n_classes
        flat = (child[:, :, None] * size + cells[:, None, :]).ravel()
        counts = np.bincount(flat, minlength=width * size).reshape(width, width, self.n_classes)
        scores = np.add.reduceat(leaf_scores(counts, self.score), offsets, axis=1)
        return scores, np.bincount(child.ravel(), minlength=width)

    def subtree_score(self, rows: np.ndarray, structure: Structure) -> float:
        """score(structure) on ``rows``: the sum of f over its leaves."""
        if structure is None:
            return self.f(rows)
        a, children = structure
        if all(c is None for c in children):
            return float(self.one_step(rows, (a,))[0])
        return sum(self.subtree_score(r, c) for r, c in zip(self.partition(rows, a), children, strict=False))

    def rows_at(self, rows: np.ndarray, structure: Structure, address: tuple[int, ...]) -> np.ndarray:
        """The rows reaching the node at ``address`` (child indices from the root) of ``structure``."""
        for v in address:
            a, children = structure  # type: ignore[misc]  # an inner node's structure is its (attribute, children) pair
            rows = rows[self.codes[rows, a] == v]
            structure = children[v]
        return rows


# ----------------------------------------------------------------- the exponential mechanism
@dataclass(frozen=True)
class _Entry:
    """A DAG node's choice: log weight of each available attribute (in order) and their log-sum (its log-partition)."""

    log_weights: np.ndarray
    log_total: float


class _EmptyLaw:
    """The exponential mechanism below a node without rows: f = 0 everywhere, so uniform over subtrees.

    ``entry(k, avail)``: an attribute's log weight is arity * log(#subtrees of k - 1 steps below it),
    so log_total is log(#subtrees of k steps over ``avail``). Memoised per (k, avail); data-independent.
    """

    def __init__(self, arity: np.ndarray) -> None:
        self.arity = arity
        self._memo: dict[tuple[int, tuple[int, ...]], _Entry] = {}

    def log_count(self, k: int, avail: tuple[int, ...]) -> float:
        """log of the number of subtrees with ``k`` steps over ``avail`` (k capped at len(avail))."""
        k = min(k, len(avail))
        return 0.0 if k == 0 else self.entry(k, avail).log_total

    def entry(self, k: int, avail: tuple[int, ...]) -> _Entry:
        found = self._memo.get((k, avail))
        if found is None:
            weights = np.array([self.arity[a] * self.log_count(k - 1, _without(avail, a)) for a in avail])
            found = self._memo[(k, avail)] = _Entry(weights, log_sum_exp(weights))
        return found

    def draw(self, k: int, avail: tuple[int, ...], noise: SecretNoise) -> Structure:
        k = min(k, len(avail))
        if k == 0:
            return None
        entry = self.entry(k, avail)
        a = avail[noise.exponential_index(entry.log_weights)]
        rest = _without(avail, a)
        return a, tuple(self.draw(k - 1, rest, noise) for _ in range(int(self.arity[a])))


class _ExactSelection:
    """One round's exponential mechanism P(st) ∝ exp(beta score(st)), solved by sum-product (NOTES §2.5).

    The root's log-partition is log sum_st exp(beta score(st)) over every subtree of ``k`` steps rooted
    at ``rows`` with attributes ``avail``; `sample` draws a subtree with exactly that law and `log_prob`
    gives a subtree's log-probability. A node of the DAG is the set of (attribute, value) pairs
    below the round's root, so subtrees reaching the same node by different orders share its work.
    """

    def __init__(self, data: _Rows, rows: np.ndarray, k: int, avail: tuple[int, ...], beta: float,
                 empty: _EmptyLaw) -> None:
        self.data, self.beta, self.empty = data, beta, empty
        self.k, self.avail = min(k, len(avail)), avail
        self._entries: dict[Key, _Entry] = {}
        self._log_probs: dict[tuple[Key, Structure], float] = {}  # structures share most of their subtrees
        self._below: dict[Key, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # `_two_steps`' children's laws
        if self.k and rows.size:  # without rows (or steps) the law is the empty one, which needs no solving
            self._solve(frozenset(), rows, self.k, avail)

    def _solve(self, key: Key, rows: np.ndarray, k: int, avail: tuple[int, ...]) -> float:
        """log Z of the non-empty node ``key`` (its rows, steps left, attributes left); fills its entry."""
        found = self._entries.get(key)
        if found is not None:
            return found.log_total
        if k == 1:
            weights = self.beta * self.data.one_step(rows, avail)
        elif k == 2:
            weights = self._two_steps(key, rows, avail)
        else:
            weights = np.array([self._children(key, rows, k, avail, a) for a in avail])
        entry = self._entries[key] = _Entry(weights, log_sum_exp(weights))
        return entry.log_total

    def _children(self, key: Key, rows: np.ndarray, k: int, avail: tuple[int, ...], a: int) -> float:
        """Sum of the children's log Z when ``key`` splits on ``a`` (empty children from the memo)."""
        rest = _without(avail, a)
        empty = self.empty.log_count(k - 1, rest)
        return sum(empty if part.size == 0 else self._solve(key | {(a, v)}, part, k - 1, rest)
                   for v, part in enumerate(self.data.partition(rows, a)))

    def _two_steps(self, key: Key, rows: np.ndarray, avail: tuple[int, ...]) -> np.ndarray:
        """A node two steps above the leaves: per attribute, the sum of its children's log Z, from one bincount.

        The hot path of the sampler. The children's one-step laws are kept with the node
        (`_below`) rather than as entries of their own: `_child_entry` reads them when sampling.
        """
        scores, sizes = self.data.two_step(rows, avail)
        arity = self.data.arity[np.array(avail)]
        own = np.repeat(np.arange(len(avail)), arity)  # each child's own split attribute (no reuse on a path)
        weights = self.beta * scores
        weights[np.arange(own.size), own] = -np.inf
        top = weights.max(axis=1)
        totals = top + np.log(np.exp(weights - top[:, None]).sum(axis=1))
        empty = np.array([self.empty.log_count(1, _without(avail, a)) for a in avail])[own]
        self._below[key] = (weights, totals, sizes)
        return np.add.reduceat(np.where(sizes > 0, totals, empty), np.concatenate([[0], np.cumsum(arity)[:-1]]))

    def _child_entry(self, key: Key, k: int, avail: tuple[int, ...], a: int, v: int) -> _Entry | None:
        """The entry of child ``v`` of ``key``'s split on ``a`` when `_two_steps` solved ``key``, else None."""
        below = self._below.get(key) if k == 2 else None
        if below is None:
            return None
        weights, totals, sizes = below
        i = avail.index(a)
        child = int(self.data.arity[np.array(avail[:i], dtype=np.int64)].sum()) + v
        if sizes[child] == 0:
            return self.empty.entry(1, _without(avail, a))
        return _Entry(np.delete(weights[child], i), float(totals[child]))

    def _entry(self, key: Key, k: int, avail: tuple[int, ...]) -> _Entry:
        found = self._entries.get(key)
        return self.empty.entry(k, avail) if found is None else found  # not solved: the node has no rows

    def sample(self, noise: SecretNoise) -> Structure:
        """A subtree drawn from the exponential mechanism."""
        return self._sample(frozenset(), self.k, self.avail, noise)

    def _sample(self, key: Key, k: int, avail: tuple[int, ...], noise: SecretNoise,
                entry: _Entry | None = None) -> Structure:
        if k == 0:
            return None
        if entry is None:
            if key not in self._entries:
                return self.empty.draw(k, avail, noise)
            entry = self._entries[key]
        a = avail[noise.exponential_index(entry.log_weights)]
        rest = _without(avail, a)
        return a, tuple(self._sample(key | {(a, v)}, k - 1, rest, noise, self._child_entry(key, k, avail, a, v))
                        for v in range(int(self.data.arity[a])))

    def log_prob(self, structure: Structure) -> float:
        """log P(structure) under the mechanism; ValueError when it is not a subtree of this round."""
        return self._log_prob(frozenset(), self.k, self.avail, structure)

    def _log_prob(self, key: Key, k: int, avail: tuple[int, ...], structure: Structure,
                  entry: _Entry | None = None) -> float:
        if k == 0 or structure is None:
            if k or structure is not None:
                raise ValueError(f"structure {structure!r} does not have {self.k} levels of splits over "
                                 f"attributes {list(self.avail)}")
            return 0.0
        found = self._log_probs.get((key, structure))
        if found is not None:
            return found
        a, children = structure
        if a not in avail or len(children) != self.data.arity[a]:
            raise ValueError(f"structure splits on attribute {a!r} with {len(children)} children where "
                             f"attributes {list(avail)} are available")
        entry = self._entry(key, k, avail) if entry is None else entry
        rest = _without(avail, a)
        found = self._log_probs[(key, structure)] = (
            float(entry.log_weights[avail.index(a)]) - entry.log_total
            + sum(self._log_prob(key | {(a, v)}, k - 1, rest, c, self._child_entry(key, k, avail, a, v))
                  for v, c in enumerate(children)))
        return found


def _enumerate(data: _Rows, rows: np.ndarray, k: int, avail: tuple[int, ...]) -> list[tuple[Structure, float]]:
    """Every subtree of ``k`` steps over ``avail`` rooted at ``rows``, with its score (Alg. 2's list ST)."""
    k = min(k, len(avail))
    if k == 0:
        return [(None, data.f(rows))]
    found: list[tuple[Structure, float]] = []
    for a in avail:
        rest = _without(avail, a)
        options = [_enumerate(data, part, k - 1, rest) for part in data.partition(rows, a)]
        for combo in itertools.product(*options):
            found.append(((a, tuple(s for s, _ in combo)), sum(q for _, q in combo)))
    return found


# ------------------------------------------------------------------------------------ MCMC
class _Chain:
    """Metropolis-Hastings over one round's subtrees with stationary law ∝ exp(beta score) (NOTES §2.6).

    Proposal: pick uniformly an inner node v with at least two available attributes, a new attribute
    a' != a(v) uniformly among them, and rebuild v's descendants with uniformly random attributes.
    q(st -> st') = 1/|I(st)| * 1/(|avail(v)| - 1) * prod over new inner nodes u below v of 1/|avail(u)|,
    so the acceptance probability is min(1, exp(beta (score' - score)) q(st' -> st) / q(st -> st')).
    """

    def __init__(self, data: _Rows, rows: np.ndarray, k: int, avail: tuple[int, ...], beta: float,
                 rng: np.random.Generator) -> None:
        self.data, self.rows, self.avail, self.beta, self.rng = data, rows, avail, beta, rng
        self.k = min(k, len(avail))
        self.state, _ = self._random(avail, self.k)
        self.score = data.subtree_score(rows, self.state)

    def _random(self, avail: tuple[int, ...], k: int) -> tuple[Structure, float]:
        """A subtree with uniformly random attributes, and the log-probability of drawing it."""
        if k == 0:
            return None, 0.0
        a = avail[int(self.rng.integers(len(avail)))]
        rest = _without(avail, a)
        children = [self._random(rest, k - 1) for _ in range(int(self.data.arity[a]))]
        return (a, tuple(c for c, _ in children)), -math.log(len(avail)) + sum(q for _, q in children)

    def _draw_log_q(self, structure: Structure, avail: tuple[int, ...]) -> float:
        """log-probability that `_random` builds ``structure`` below its root (the root's choice excluded)."""
        a, children = structure  # type: ignore[misc]  # an inner node's structure is its (attribute, children) pair
        rest = _without(avail, a)
        return sum(-math.log(len(rest)) + self._draw_log_q(c, rest) for c in children if c is not None)

    @staticmethod
    def _movable(structure: Structure, avail: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(address, avail) of the inner nodes a proposal may change: those with >= 2 attributes available."""
        found: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        stack: list[tuple[tuple[int, ...], Structure, tuple[int, ...]]] = [((), structure, avail)]
        while stack:
            address, node, av = stack.pop()
            if node is None:
                continue
            if len(av) >= 2:
                found.append((address, av))
            rest = _without(av, node[0])
            stack.extend((address + (v,), c, rest) for v, c in enumerate(node[1]))
        return found

    @staticmethod
    def _replace(structure: Structure, address: tuple[int, ...], new: Structure) -> Structure:
        if not address:
            return new
        a, children = structure  # type: ignore[misc]  # an inner node's structure is its (attribute, children) pair
        v = address[0]
        return a, children[:v] + (_Chain._replace(children[v], address[1:], new),) + children[v + 1:]

    def step(self) -> None:
        """One proposal, accepted with the Metropolis-Hastings probability."""
        movable = self._movable(self.state, self.avail)  # never empty: the chain runs on rounds of >= 2 attributes
        address, av = movable[int(self.rng.integers(len(movable)))]
        old = self.state
        for v in address:
            old = old[1][v]  # type: ignore[index]  # an address runs through inner nodes only
        choices = _without(av, old[0])  # type: ignore[index]  # a movable address names an inner node
        a = choices[int(self.rng.integers(len(choices)))]
        rest = _without(av, a)
        built = [self._random(rest, self.k - len(address) - 1) for _ in range(int(self.data.arity[a]))]
        new: Structure = (a, tuple(c for c, _ in built))
        proposal = self._replace(self.state, address, new)
        log_q_forward = -math.log(len(movable)) + sum(q for _, q in built)
        log_q_back = -math.log(len(self._movable(proposal, self.avail))) + self._draw_log_q(old, av)
        rows = self.data.rows_at(self.rows, self.state, address)
        delta = self.data.subtree_score(rows, new) - self.data.subtree_score(rows, old)
        if math.log(self.rng.random()) < self.beta * delta + log_q_back - log_q_forward:
            self.state, self.score = proposal, self.score + delta

    def run(self, buffer_size: int, var_threshold: float, step_limit: int) -> Structure:
        """Alg. 3's loop: step while the last ``buffer_size`` scores
        vary more than the threshold, at most ``step_limit``."""
        buffer = np.empty(buffer_size)
        variance, t = math.inf, 0
        while variance > var_threshold and t < step_limit:
            buffer[t % buffer_size] = self.score
            if t + 1 >= buffer_size:
                variance = float(buffer.var())
            self.step()
            t += 1
        return self.state


# --------------------------------------------------------------------------- the mechanism
@dataclass(frozen=True)
class DpeaRelease:
    """The output of `DPEA.fit`: the released trees, and each tree's full structure (for tests, not released)."""

    trees: list[Tree]
    structures: list[Structure]


@dataclass(frozen=True)
class DPEA:
    """The DPEA mechanism at one setting: total ``epsilon`` over ``n_trees`` trees of maximal ``depth`` D.

    ``embedding_depth`` is d, the levels of splits chosen by one exponential mechanism (None: d = D,
    the whole tree in one selection). ``score``, ``sampler``, ``selection``, ``bins`` and ``max_arity`` (None: every
    category its own child) are described in the module docstring; ``buffer_size``, ``var_threshold`` and ``step_limit``
    are the MCMC's (NOTES §2.6 defaults); ``max_rows`` is infogain's public bound on the rows (required by it, refused
    otherwise). ``max_nodes`` bounds the worst-case full structure and ``max_subtrees`` the
    exhaustive sampler's enumeration; both are checked before any row is read.
    """

    epsilon: float
    n_trees: int
    depth: int
    embedding_depth: int | None = None
    score: str = "max"
    sampler: str = "exact"
    selection: str = "monotone"
    bins: int = DEFAULT_BINS
    max_arity: int | None = None
    max_nodes: int = 100_000
    max_subtrees: int = 100_000
    buffer_size: int = 100
    var_threshold: float = 1.0
    step_limit: int = 5000
    max_rows: int | None = None

    def __post_init__(self) -> None:
        check_positive_real("epsilon", self.epsilon)
        for name in ("n_trees", "depth", "max_nodes", "max_subtrees", "step_limit"):
            check_positive_int(name, getattr(self, name))
        if (self.embedding_depth is not None
                and not 1 <= check_positive_int("embedding_depth", self.embedding_depth) <= self.depth):
            raise ValueError(f"embedding_depth must be None or an integer in 1..depth={self.depth}; "
                             f"got {self.embedding_depth!r}")
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {list(SCORES)}; got {self.score!r}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {list(SAMPLERS)}; got {self.sampler!r}")
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {list(SELECTIONS)}; got {self.selection!r}")
        if check_positive_int("bins", self.bins) < 2:
            raise ValueError(f"bins must be an integer >= 2; got {self.bins!r}")
        if self.max_arity is not None and check_positive_int("max_arity", self.max_arity) < 2:
            raise ValueError(f"max_arity must be None or an integer >= 2; got {self.max_arity!r}")
        if check_positive_int("buffer_size", self.buffer_size) < 2:
            raise ValueError(f"buffer_size must be an integer >= 2; got {self.buffer_size!r}")
        threshold = self.var_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0 <= threshold < math.inf:
            raise ValueError(f"var_threshold must be a finite real number >= 0; got {threshold!r}")
        if (self.score == "infogain") != (self.max_rows is not None):
            raise ValueError(f"max_rows (a public bound on the rows) is required by score 'infogain' and only by it; "
                             f"got max_rows={self.max_rows!r} with score {self.score!r}")
        if self.max_rows is not None:
            check_positive_int("max_rows", self.max_rows)

    # ------------------------------------------------------------------ accounting
    @property
    def steps(self) -> int:
        """d, the levels of splits one selection chooses."""
        return self.depth if self.embedding_depth is None else self.embedding_depth

    @property
    def rounds(self) -> int:
        """ceil(D / d): the most selections a root-to-leaf path crosses."""
        return -(-self.depth // self.steps)

    @property
    def epsilon_per_tree(self) -> float:
        return self.epsilon / self.n_trees

    @property
    def epsilon_step(self) -> float:
        """eps' = eps_t / (ceil(D/d) + 1): the budget of one selection and of the leaf counts."""
        return self.epsilon_per_tree / (self.rounds + 1)

    @property
    def score_sensitivity(self) -> float:
        return score_sensitivity(self.score, self.max_rows)

    @property
    def selection_beta(self) -> float:
        """The exponential mechanism's beta, P(st) ∝ exp(beta score(st)): eps' / Δq', or eps' / (2 Δq') for "paper"."""
        return self.epsilon_step / ((1 if self.selection == "monotone" else 2) * self.score_sensitivity)

    @property
    def noise_scale(self) -> float:
        """Discrete Laplace scale per leaf class count: 1 / eps' (a row changes one count by 1)."""
        return 1.0 / self.epsilon_step

    def parameters(self) -> dict[str, Any]:
        """What a release states about this setting (all data-independent)."""
        stated: dict[str, Any] = {
            "epsilon": float(self.epsilon), "trees": self.n_trees, "depth": self.depth,
            "embedding_depth": self.steps, "rounds": self.rounds, "epsilon_per_tree": self.epsilon_per_tree,
            "epsilon_per_step": self.epsilon_step, "score": self.score, "score_sensitivity": self.score_sensitivity,
            "selection": self.selection, "selection_beta": self.selection_beta,
            "noise_scale": self.noise_scale, "sensitivity": 1, "bins": self.bins, "max_arity": self.max_arity,
            "sampler": self.sampler,
            "guarantee_exact": self.sampler != "mcmc", "post_processing": POST_PROCESSING,
        }
        if self.sampler == "mcmc":
            stated.update(buffer_size=self.buffer_size, var_threshold=float(self.var_threshold),
                          step_limit=self.step_limit)
        if self.max_rows is not None:
            stated["max_rows"] = self.max_rows
        return stated

    # ------------------------------------------------------------------------ fit
    def fit(self, schema: Schema, X: np.ndarray, y: np.ndarray,
            rng: int | np.random.Generator | Randomness | None = None) -> DpeaRelease:
        """Grow and release ``n_trees`` trees, each with its own eps_t (module docstring).

        Parameters
        ----------
        schema, X, y:
            The schema and the encoded rows (checked against the schema).
        rng:
            `Randomness` (or a seed or Generator for `Randomness.seeded`): selections and noise are
            secret draws; None is `Randomness.fresh`, which a release needs (anyone who knows a seed
            can replay the selections and subtract the noise).

        Raises
        ------
        ValueError
            Rows that do not fit the schema (naming the column and row), a worst-case structure
            larger than ``max_nodes``, an exhaustive enumeration beyond ``max_subtrees``, or more
            rows than infogain's ``max_rows``.
        """
        domain, data = self._prepare(schema, X, y)
        noise = Randomness.of(rng).secret
        grower = _Grower(self, data, _EmptyLaw(domain.arity), noise)
        rows = np.arange(data.y.size)
        structures = [grower.grow(rows, 0, domain.splittable, frozenset()) for _ in range(self.n_trees)]
        return DpeaRelease([self._tree(domain, data, s, noise) for s in structures], structures)

    def _prepare(self, schema: Schema, X: np.ndarray, y: np.ndarray) -> tuple[Domain, _Rows]:
        """The checked rows as codes, after the data-independent size checks."""
        from modelshare.common.trees.learners._data import check_xy  # see the module docstring

        domain = Domain.of(schema, self.bins, self.max_arity)
        worst = domain.max_nodes(self.depth)
        if worst > self.max_nodes:
            raise ValueError(f"a full multiway structure of depth {self.depth} over this "
                             f"schema can have {worst} nodes, "
                             f"more than max_nodes={self.max_nodes}; lower the depth or the bins, or raise max_nodes")
        X, y = check_xy(schema, X, y)
        if self.max_rows is not None and y.size > self.max_rows:
            raise ValueError(f"the table has {y.size} rows, more than max_rows={self.max_rows}, the public bound "
                             f"infogain's sensitivity rests on")
        return domain, _Rows(domain.codes(X), y, schema.n_classes, domain.arity, self.score)

    def _round_steps(self, depth: int, avail: tuple[int, ...]) -> int:
        """Steps of the selection at a node of ``depth``: d, fewer when D or the attributes run out (B1, B7)."""
        return min(self.steps, self.depth - depth, len(avail))

    def subtree_scores(self, schema: Schema, X: np.ndarray, y: np.ndarray) -> list[tuple[Structure, float]]:
        """Every subtree the first round can select at the root, with its score: Alg. 2's list ST, enumerated.

        The test oracle of the samplers: P(st) = exp(beta score) / sum exp(beta score) over this list.
        Refused beyond ``max_subtrees`` subtrees (counted before any row is read).
        """
        domain, data = self._prepare(schema, X, y)
        avail = domain.splittable
        steps = self._round_steps(0, avail)
        self._check_enumerable(_EmptyLaw(domain.arity), steps, avail)
        return _enumerate(data, np.arange(data.y.size), steps, avail)

    def _check_enumerable(self, empty: _EmptyLaw, k: int, avail: tuple[int, ...]) -> None:
        count = empty.log_count(k, avail)
        if count > math.log(self.max_subtrees):
            raise ValueError(f"exhaustive search over about {math.exp(count):.3g} subtrees of {k} steps exceeds "
                             f"max_subtrees={self.max_subtrees}; use sampler 'exact'")

    def noisy_counts(self, true: np.ndarray, noise: SecretNoise) -> np.ndarray:
        """``true`` plus independent discrete Laplace(`noise_scale`) noise per entry, clamped at 0 (any shape)."""
        return noisy_counts(true, self.noise_scale, noise)

    def _tree(self, domain: Domain, data: _Rows, structure: Structure, noise: SecretNoise) -> Tree:
        """The released tree: noisy counts at every leaf of ``structure``, zero leaves dropped, inner sums."""
        n_classes = data.n_classes
        nodes: list[Node] = []
        leaves: list[int] = []
        leaf_of = np.empty(data.y.size, dtype=np.int64)  # each row's position in ``leaves``
        stack: list[tuple[Structure, np.ndarray, int, Constraint | None]] = [
            (structure, np.arange(data.y.size), -1, None)]
        while stack:  # preorder; a node's edge is added when the node is reached, so edges keep code order
            node, rows, parent, constraint = stack.pop()
            i = len(nodes)
            nodes.append(Node(0, 0.0, 0.0))  # statistics are set below (leaves) or by `rebuild` (inner nodes)
            if parent >= 0:
                # the ignore below: a node with a parent has its edge's constraint
                nodes[parent].edges.append(Edge(constraint, i))  # type: ignore[arg-type]
            if node is None:
                leaf_of[rows] = len(leaves)
                leaves.append(i)
                continue
            a, children = node
            nodes[i].attribute = a
            parts = zip(children, data.partition(rows, a), domain.constraints(a), strict=False)
            stack.extend(reversed([(c, part, i, con) for c, part, con in parts]))
        true = np.bincount(leaf_of * n_classes + data.y, minlength=len(leaves) * n_classes)
        noisy = self.noisy_counts(true.reshape(len(leaves), n_classes), noise)
        return release_leaf_counts(domain.schema, nodes, leaves, noisy)

    # --------------------------------------------------------------- the exact law
    def structure_log_probs(self, schema: Schema, X: np.ndarray, y: np.ndarray,
                            structures: Sequence[Structure]) -> np.ndarray:
        """log P(structure) of one tree's full structure under this setting's exact law, per structure.

        The law of the ``exact`` and ``exhaustive`` samplers: the sum over rounds of the selected
        subtree's log-probability at its round's root. Selections are shared among the structures
        (cached per round root), so scoring every structure of a small schema is cheap.

        Raises
        ------
        ValueError
            A structure this setting cannot produce (wrong depth, attributes reused or unknown).
        """
        domain, data = self._prepare(schema, X, y)
        empty = _EmptyLaw(domain.arity)
        selections: dict[Key, _ExactSelection] = {}
        parts: dict[tuple[Key, int], list[np.ndarray]] = {}
        done: dict[tuple[Key, Structure], float] = {}  # structures share their lower rounds

        def split(key: Key, rows: np.ndarray, a: int) -> list[np.ndarray]:
            if (key, a) not in parts:
                parts[(key, a)] = data.partition(rows, a)
            return parts[(key, a)]

        def log_prob(structure: Structure, key: Key, rows: np.ndarray, depth: int, avail: tuple[int, ...]) -> float:
            steps = self._round_steps(depth, avail)
            if steps == 0:
                if structure is not None:
                    raise ValueError(f"structure splits below depth {depth}, where this setting stops")
                return 0.0
            if (key, structure) in done:
                return done[(key, structure)]
            if key not in selections:
                selections[key] = _ExactSelection(data, rows, steps, avail, self.selection_beta, empty)
            if steps == min(self.depth - depth, len(avail)):  # the last round (always when d = D)
                total = selections[key].log_prob(structure)
            else:
                total = selections[key].log_prob(_truncate(structure, steps))
                for sub, sub_key, sub_rows, sub_avail in _frontier(split, structure, key, rows, avail, steps):
                    total += log_prob(sub, sub_key, sub_rows, depth + steps, sub_avail)
            done[(key, structure)] = total
            return total

        rows, root = np.arange(data.y.size), domain.splittable
        return np.array([log_prob(s, frozenset(), rows, 0, root) for s in structures])


class _Grower:
    """One fit's growing state: the rows, the empty law, the solved selections and the secret draws.

    A selection's law depends only on its node (the (attribute, value) constraints from the root, which
    fix its rows, depth and attributes), so exact selections are solved once per node and shared by
    the fit's trees: each tree still draws independently from the same law.
    """

    def __init__(self, mechanism: DPEA, data: _Rows, empty: _EmptyLaw, noise: SecretNoise) -> None:
        self.mechanism, self.data, self.empty, self.noise = mechanism, data, empty, noise
        self.selections: dict[Key, _ExactSelection] = {}

    def grow(self, rows: np.ndarray, depth: int, avail: tuple[int, ...], key: Key) -> Structure:
        """The structure below a frontier node: one selection, then the next round at each of its leaves."""
        steps = self.mechanism._round_steps(depth, avail)
        if steps == 0:
            return None
        return self._graft(self._select(rows, steps, avail, key), rows, depth, avail, key)

    def _graft(self, chosen: Structure, rows: np.ndarray, depth: int, avail: tuple[int, ...], key: Key) -> Structure:
        if chosen is None:
            return self.grow(rows, depth, avail, key)
        a, children = chosen
        rest = _without(avail, a)
        return a, tuple(self._graft(c, part, depth + 1, rest, key | {(a, v)})
                        for v, (c, part) in enumerate(zip(children, self.data.partition(rows, a), strict=False)))

    def _select(self, rows: np.ndarray, k: int, avail: tuple[int, ...], key: Key) -> Structure:
        """One selection of a k-step subtree at node ``key`` with the configured sampler."""
        mechanism, beta = self.mechanism, self.mechanism.selection_beta
        if mechanism.sampler == "exhaustive":
            mechanism._check_enumerable(self.empty, k, avail)
            found = _enumerate(self.data, rows, k, avail)
            logits = beta * np.array([q for _, q in found])
            return found[self.noise.exponential_index(logits)][0]
        if mechanism.sampler == "mcmc" and k > MCMC_EXACT_STEPS and rows.size:  # no rows: the chain's target is uniform
            chain = _Chain(self.data, rows, k, avail, beta, self.noise.numpy_generator())
            return chain.run(mechanism.buffer_size, mechanism.var_threshold, mechanism.step_limit)
        if key not in self.selections:
            self.selections[key] = _ExactSelection(self.data, rows, k, avail, beta, self.empty)
        return self.selections[key].sample(self.noise)


def _truncate(structure: Structure, steps: int) -> Structure:
    """``structure`` cut after ``steps`` levels of splits."""
    if structure is None or steps == 0:
        return None
    a, children = structure
    return a, tuple(_truncate(c, steps - 1) for c in children)


def _frontier(split: Callable[[Key, np.ndarray, int], list[np.ndarray]], structure: Structure, key: Key,
              rows: np.ndarray, avail: tuple[int, ...],
              steps: int) -> list[tuple[Structure, Key, np.ndarray, tuple[int, ...]]]:
    """The subtrees hanging ``steps`` levels below the root, with their node key, rows and attributes left.

    ``split(key, rows, a)`` partitions a node's rows by attribute ``a`` (cached by the caller).
    """
    if steps == 0 or structure is None:
        return [(structure, key, rows, avail)] if steps == 0 else []
    a, children = structure
    rest = _without(avail, a)
    return [found for v, (c, part) in enumerate(zip(children, split(key, rows, a), strict=False))
            for found in _frontier(split, c, key | {(a, v)}, part, rest, steps - 1)]


_SETTING_KEYS = {"epsilon": "epsilon", "trees": "n_trees", "depth": "depth", "embedding_depth": "embedding_depth",
                 "score": "score", "sampler": "sampler", "selection": "selection", "bins": "bins",
                 "max_arity": "max_arity", "buffer_size": "buffer_size",
                 "var_threshold": "var_threshold", "step_limit": "step_limit", "max_rows": "max_rows"}


def accounting_errors(parameters: Mapping[str, Any]) -> list[str]:
    """What a dpea release's stated parameters get wrong about its own accounting; empty when consistent.

    The setting (epsilon, trees, depth, embedding_depth, score, sampler, selection, bins, MCMC constants,
    max_rows) is read back from ``parameters`` and every derived value `DPEA.parameters` states
    (rounds, epsilon_per_tree, epsilon_per_step, score_sensitivity, noise_scale, guarantee_exact,
    post_processing, ...) is recomputed and compared: what `modelshare.common.audit.release` can check without the rows.
    """
    stated = {field: parameters[key] for key, field in _SETTING_KEYS.items() if key in parameters}
    try:
        expected = DPEA(**stated).parameters()
    except (TypeError, ValueError) as exc:
        return [f"the stated setting is not a valid dpea setting: {exc}"]
    wrong = []
    for key, value in expected.items():
        have = parameters.get(key)
        same = (math.isclose(have, value, rel_tol=1e-9) if isinstance(value, float) and isinstance(have, (int, float))
                and not isinstance(have, bool) else have == value)
        if not same:
            wrong.append(f"{key}={have!r}, recomputed {value!r}")
    return wrong


def finest_bins(schema: Schema, depth: int, max_nodes: int = DPEA.max_nodes, most: int = DEFAULT_BINS) -> int:
    """The most bins (at most ``most``, at least 2) whose worst-case structure of ``depth`` fits ``max_nodes``.

    Read from the schema alone, so the choice discloses nothing; when even 2 bins do not fit (the
    categorical attributes alone are too wide), 2 is returned and `DPEA.fit` refuses with the reason.
    """
    return next((b for b in range(most, 1, -1) if Domain.of(schema, b).max_nodes(depth) <= max_nodes), 2)


DOMAINS: tuple[str, ...] = ("compact", "paper")  # the registry trainer's public domain rules (`release_domain`)
RELEASE_BYTES = 2_000_000  # a compact release's bound on the wire, every tree and the message around them
MESSAGE_BYTES = 64_000  # of which the message around the trees (schema, privacy report, signature) may take


def release_domain(schema: Schema, depth: int, trees: int, domain: str = "compact") -> tuple[int, int | None]:
    """(bins, max_arity) of the registry trainer's public domain
    for ``trees`` trees of ``depth``, from the schema alone.

    ``"compact"`` (the default): the largest cap A in 2..`DEFAULT_BINS` such that ``trees`` worst-case
    full structures over A bins per numeric attribute and at most A groups per categorical one fit
    `RELEASE_BYTES` on the wire (`Domain.node_bytes`, less `MESSAGE_BYTES`); at A = 2 every split is
    binary and a tree has at most 2^(D+1) - 1 nodes. ``"paper"``: no arity cap and the finest bins
    whose worst-case tree fits ``DPEA.max_nodes`` (`finest_bins`), the domain of the paper's
    reproductions, which can be hundreds of MB. Either is a function of public inputs, so the choice
    costs no privacy; the audit recomputes it (`domain_check`).
    """
    if domain == "paper":
        return finest_bins(schema, depth), None
    if domain != "compact":
        raise ValueError(f"domain must be one of {list(DOMAINS)}; got {domain!r}")
    budget = RELEASE_BYTES - MESSAGE_BYTES
    for cap in range(DEFAULT_BINS, 1, -1):
        space = Domain.of(schema, cap, cap)
        if trees * space.max_nodes(depth) * space.node_bytes() <= budget:
            return cap, cap
    return 2, 2


def train_dpea(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
               rng: Randomness, domain: str = "compact") -> tuple[list[Tree], dict[str, Any]]:
    """The registry trainer of DPEA: ``requirement.trees`` trees of depth ``depth``, whole-tree embedding.

    The public domain (bins per numeric attribute, groups per categorical one) is `release_domain`'s
    ``domain`` rule, stated as ``domain_rule`` so that the audit can recompute it.
    """
    mechanism = registered_dpea(requirement.epsilon, requirement.trees, depth, schema, domain)
    return mechanism.fit(schema, X, y, rng).trees, {**mechanism.parameters(), "domain_rule": domain}


def registered_dpea(epsilon: float, trees: int, depth: int, schema: Schema, domain: str = "compact",
                    **setting: Any) -> DPEA:
    """DPEA as the registry trainer runs it (whole-tree embedding
    unless ``setting`` says otherwise) on `release_domain`."""
    bins, max_arity = release_domain(schema, depth, trees, domain)
    return DPEA(epsilon, trees, depth, bins=bins, max_arity=max_arity, **setting)


def domain_check(trees: Sequence[Tree], parameters: Mapping[str, Any]) -> Check:
    """Whether the release's splits lie on the public domain its stated rule gives for its schema, depth and trees.

    A structure is data-independent only on a public domain: the check recomputes (bins, max_arity)
    from the stated ``domain_rule`` (`release_domain`; a release without one is held to the stated
    bins and max_arity) and requires every split to have only that domain's children, at most
    ``depth`` levels deep. A misstated bins or max_arity, or a data-chosen cut, fails it.
    """
    name = "splits on the stated public domain"
    if not trees:
        return Check(name, False, "the release has no trees")
    schema = trees[0].schema
    try:
        bins, max_arity = int(parameters["bins"]), parameters.get("max_arity")
        depth = int(parameters["depth"])
        if "domain_rule" in parameters:
            expected = release_domain(schema, depth, int(parameters["trees"]), str(parameters["domain_rule"]))
            if (bins, max_arity) != expected:
                return Check(name, False, f"the release states bins={bins}, max_arity={max_arity!r}; the "
                                          f"{parameters['domain_rule']!r} rule gives bins={expected[0]}, "
                             f"max_arity={expected[1]!r} "
                                          f"for this schema at depth {depth} and {parameters['trees']} trees")
        space = Domain.of(schema, bins, max_arity)
    except (KeyError, TypeError, ValueError) as exc:
        return Check(name, False, f"the stated domain cannot be rebuilt: {exc}")
    allowed = {a: set(space.constraints(a)) for a in space.splittable}
    for t, tree in enumerate(trees):
        stack = [(0, 0)]
        while stack:
            i, level = stack.pop()
            node = tree.nodes[i]
            if node.is_leaf:
                continue
            wrong = (level >= depth or node.attribute not in allowed
                     or any(edge.constraint not in allowed[node.attribute] for edge in node.edges))
            if wrong:
                return Check(name, False, f"tree {t} node {i} splits on attribute {node.attribute!r} at level {level} "
                                          f"with children outside the public domain (bins={bins}, "
                                          f"max_arity={max_arity!r}, depth {depth})")
            stack.extend((edge.child, level + 1) for edge in node.edges)
    return Check(name, True, f"every split has only children of the public domain (bins={bins}, "
                             f"max_arity={max_arity!r}"
                             f"{', rule ' + repr(parameters['domain_rule']) if 'domain_rule' in parameters else ''})")


def exact_sampler_check(parameters: Mapping[str, Any]) -> Check:
    """Whether the release states ``guarantee_exact: true``: only an exact sampler's release is eps-DP.

    The ``mcmc`` sampler's finite chain is only approximately the exponential mechanism and its
    stopping rule reads the data, so its release (which states ``guarantee_exact: false``, and is
    consistent in its accounting) carries no proof of the ``dp:`` claim it would make.
    """
    stated = parameters.get("guarantee_exact")
    if stated is True:
        return Check("exact sampler", True, f"sampler {parameters.get('sampler')!r} draws the exponential "
                                            "mechanism exactly (guarantee_exact: true)")
    return Check("exact sampler", False,
                 f"the release states guarantee_exact={stated!r} (sampler {parameters.get('sampler')!r}): an MCMC "
                 "chain only approximates the exponential mechanism and its stopping rule reads the data, so it "
                 "proves no dp claim; release with sampler 'exact' or 'exhaustive'")


def audit_checks(trees: Sequence[Tree], report: PrivacyReport, requirement: DP) -> list[Check]:
    """DPEA's budget eps / T / (ceil(D/d) + 1) per step, score sensitivity and leaf noise, recomputed,
    and an exact sampler (`exact_sampler_check`): a ``dp`` claim needs both."""
    wrong = accounting_errors(report.parameters)
    budget = Check("budget recomputed from (epsilon, trees, depth, embedding_depth)", not wrong,
                   "; ".join(wrong) if wrong else
                   f"epsilon_per_step {report.parameters.get('epsilon_per_step')!r} and the stated noise scale and "
                   "score sensitivity follow from the requirement; that the draws happened cannot be seen in the "
                   "release (modelshare privacy audit-dp tests it)")
    return [budget, exact_sampler_check(report.parameters), domain_check(trees, report.parameters),
            integer_counts_check(trees, report, POST_PROCESSING)]
