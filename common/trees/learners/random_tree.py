"""Random decision trees (Fan et al.), trained as in k-AnonToRdt (Waseda, Nojima & Wang 2024).

The structure of a random decision tree is drawn without looking at the data (Alg. 1,
``BuildTreeStructure``): every node splits on a random attribute, and only the leaf class counts
``n_i(leaf(y))`` are learned (``UpdateStatistics``). k-AnonToRdt (Alg. 3) changes the training in
two ways: each tree counts a Bernoulli(``beta``) sample of the rows drawn for that tree alone, and
every leaf count ``n_i(leaf(y)) < k`` is set to 0. Alg. 1 is the case ``beta = 1``, ``k = 0``.

Choices where the paper leaves room (its words quoted):

* Split attribute: uniform among the attributes still available on the path (``F ∈ X``). A
  categorical attribute has one child per category of the schema (``|F| = c`` children) and is
  then removed from the path (``X − F``). A numeric attribute splits into ``x <= t`` and
  ``x > t`` at a threshold drawn uniformly inside the schema's public range narrowed by the
  path's earlier splits on it (for Adult the paper says "a threshold t was chosen randomly from its
  domain, and two children for ≤t and >t were produced"). By default a numeric attribute stays
  available below its own split, as in Fan et al.'s random trees, which the narrowing makes
  meaningful; ``numeric_reuse=False`` removes it like a categorical one, Alg. 1 read literally.
  A numeric attribute whose narrowed range leaves no float strictly inside is not available.
* Threshold scale (beyond the paper): ``thresholds="uniform"`` (the default, the paper's) draws
  the threshold uniformly on the narrowed range. ``thresholds="log"`` draws it uniformly on
  ``log(1 + x - low)``, ``low`` the schema's public lower bound: on a range of a few units that is
  close to uniform, while on a wide one (money, counts: Adult's capital-gain on 0-100,000) the
  thresholds spread over its orders of magnitude instead of almost all falling above the values
  most rows hold. It reads the public range only, so the structure still ignores the data.
* Depth: Alg. 1 recurses until ``X`` is empty; the experiments bound the depth ``d``. A node is a
  leaf at depth ``d`` or earlier when no attribute is available on its path.
* Size: with one child per category a full tree explodes (Adult at ``d = 9``, with 41 countries
  and 16 education levels, has on the order of 10^8 nodes); the paper does not say how it stored
  them. The split of every node is a hash of (seed, tree index, path from the root), so the whole
  structure is fixed by the seed and never depends on the data, but only the nodes on paths to a
  leaf with a nonzero *released* count are materialised. Dropping the rest is a function of the
  released counts and the public structure, so it discloses nothing more than zero counts would;
  `random_structure` materialises a whole tree for small schemas.
* Prediction (Alg. 2): ``sum_i n_i(leaf(y)) / sum_y sum_i n_i(leaf(y))``, i.e. the class counts of
  the leaves summed over the trees and normalised once (not an average of per-tree
  distributions), so a leaf holding more rows weighs more. An empty leaf (nothing sampled, or every
  count suppressed; also a row stopping at an inner node whose child was not materialised) adds
  nothing. A row whose leaves are empty in every tree gets the class distribution of the released
  root counts summed over the trees, and the uniform distribution if those are all zero too.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.params import ParameterError, check_positive_int
from modelshare.common.trees.learners._data import check_x, check_xy
from modelshare.common.trees.learners._params import check_schema
from modelshare.common.trees.tree import CategorySet, Constraint, Edge, Interval, Node, Tree

__all__ = ["THRESHOLD_SCALES", "RandomDecisionTrees", "ensemble_predict_proba", "random_structure"]

ThresholdScale = Literal["uniform", "log"]
THRESHOLD_SCALES: tuple[ThresholdScale, ...] = ("uniform", "log")  # how a numeric split's threshold is drawn

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ATTRIBUTE_SALT = np.uint64(0x243F6A8885A308D3)
_THRESHOLD_SALT = np.uint64(0x13198A2E03707344)
_MAX_SEED = 2**64


# --------------------------------------------------------------- hashing
def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise: a bijective scramble of 64-bit keys (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    mixed: np.ndarray = z ^ (z >> np.uint64(31))
    return mixed


def _child_keys(keys: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Keys of the children reached from nodes ``keys`` through edge indices ``edges``."""
    return _mix(keys + (edges.astype(np.uint64) + np.uint64(1)) * _GOLDEN)


def _uniform(keys: np.ndarray, salt: np.uint64) -> np.ndarray:
    """A uniform draw in [0, 1) per key, one independent stream per ``salt``."""
    draws: np.ndarray = (_mix(keys ^ salt) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return draws


def _root_key(seed: int, tree_index: int) -> np.ndarray:
    """The root key of tree ``tree_index``: the tree index acts as an edge from a seed node."""
    return _child_keys(_mix(np.array([seed], dtype=np.uint64)), np.array([tree_index]))


# ------------------------------------------------------------- structure
@dataclass(frozen=True)
class _Space:
    """What the structure draws from: the schema's attribute kinds, branchings and public ranges.

    ``log`` says whether thresholds are uniform on ``log(1 + x - low)`` rather than on ``x`` (module docstring).
    """

    categorical: np.ndarray
    branches: np.ndarray
    low: np.ndarray
    high: np.ndarray
    numeric_reuse: bool
    log: bool = False

    @classmethod
    def of(cls, schema: Schema, numeric_reuse: bool, thresholds: ThresholdScale = "uniform") -> _Space:
        attrs = schema.attributes
        categorical = schema.categorical_mask
        branches = np.array([a.size if isinstance(a, CategoricalAttribute) else 2 for a in attrs], dtype=np.int64)
        low = np.array([0.0 if isinstance(a, CategoricalAttribute) else a.low for a in attrs])
        high = np.array([0.0 if isinstance(a, CategoricalAttribute) else a.high for a in attrs])
        return cls(categorical, branches, low, high, numeric_reuse, thresholds == "log")

    def threshold(self, attribute: np.ndarray, lo: np.ndarray, hi: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The threshold at uniform draw ``u`` in [0, 1) on the path's range ``(lo, hi]`` of ``attribute``."""
        if not self.log:
            linear: np.ndarray = lo + u * (hi - lo)
            return linear
        base = self.low[attribute]
        start, stop = np.log1p(lo - base), np.log1p(hi - base)
        logarithmic: np.ndarray = base + np.expm1(start + u * (stop - start))
        return logarithmic


@dataclass(frozen=True)
class _Level:
    """The materialised nodes at one depth, as parallel arrays (one entry per node).

    ``parent`` indexes the previous level (-1 at the root) and ``edge`` is the edge taken from it;
    ``used`` marks attributes no longer available on the path; ``low``/``high`` bound each numeric
    attribute on the path (values in ``(low, high]``, closed at the schema's low end);
    ``attribute`` is the split attribute (-1 for a leaf) and ``threshold`` the numeric threshold.
    """

    parent: np.ndarray
    edge: np.ndarray
    key: np.ndarray
    used: np.ndarray
    low: np.ndarray
    high: np.ndarray
    attribute: np.ndarray
    threshold: np.ndarray

    def __len__(self) -> int:
        return int(self.key.size)


def _draw_splits(
    space: _Space, key: np.ndarray, used: np.ndarray, low: np.ndarray, high: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each node's split attribute (uniform among the available ones, -1 if none) and threshold.

    The threshold of a numeric split is drawn on the path's range at the space's scale
    (`_Space.threshold`) and kept strictly inside it, so both children can hold values; it is NaN
    for categorical splits and leaves.
    """
    available = ~used & (space.categorical | (np.nextafter(low, np.inf) < high))
    count = available.sum(axis=1)
    pick = np.floor(_uniform(key, _ATTRIBUTE_SALT) * count).astype(np.int64)
    attribute = np.argmax(np.cumsum(available, axis=1) > pick[:, None], axis=1)
    attribute[count == 0] = -1
    nodes = np.arange(key.size)
    lo, hi = low[nodes, attribute], high[nodes, attribute]
    numeric = (attribute >= 0) & ~space.categorical[attribute]
    t = space.threshold(attribute, lo, hi, _uniform(key, _THRESHOLD_SALT))
    t = np.clip(t, np.nextafter(lo, np.inf), np.nextafter(hi, -np.inf))
    return attribute, np.where(numeric, t, np.nan)


def _make_level(
    space: _Space,
    parent: np.ndarray,
    edge: np.ndarray,
    key: np.ndarray,
    used: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    last: bool,
) -> _Level:
    """A level whose splits are drawn from the nodes' keys and paths; all leaves when ``last``."""
    if last:
        attribute, threshold = np.full(key.size, -1, dtype=np.int64), np.full(key.size, np.nan)
    else:
        attribute, threshold = _draw_splits(space, key, used, low, high)
    return _Level(parent, edge, key, used, low, high, attribute, threshold)


def _root_level(space: _Space, key: np.ndarray, last: bool) -> _Level:
    """The root: nothing used, every numeric attribute on its schema range."""
    used = np.zeros((1, space.categorical.size), dtype=bool)
    low, high = space.low[None, :].copy(), space.high[None, :].copy()
    return _make_level(space, np.array([-1]), np.array([-1]), key, used, low, high, last)


def _child_level(space: _Space, level: _Level, parent: np.ndarray, edge: np.ndarray, last: bool) -> _Level:
    """The children ``(parent, edge)`` of ``level``'s nodes, with their paths narrowed by the edge."""
    a, t = level.attribute[parent], level.threshold[parent]
    nodes = np.arange(parent.size)
    used, low, high = level.used[parent], level.low[parent], level.high[parent]
    used[nodes, a] |= space.categorical[a] | (not space.numeric_reuse)
    numeric = ~space.categorical[a]
    left, right = numeric & (edge == 0), numeric & (edge == 1)
    high[nodes[left], a[left]] = t[left]
    low[nodes[right], a[right]] = t[right]
    return _make_level(space, parent, edge, _child_keys(level.key[parent], edge), used, low, high, last)


def _route(space: _Space, root: np.ndarray, depth: int, X: np.ndarray) -> tuple[list[_Level], np.ndarray]:
    """Materialise the nodes the rows of ``X`` reach; return the levels and each row's leaf.

    Leaves are numbered globally, level after level. Within a level, children are ordered by
    (parent, edge), so a parent's edges come out in edge order.
    """
    width = int(space.branches.max())
    level = _root_level(space, root, depth == 0)
    levels = [level]
    leaf = np.empty(X.shape[0], dtype=np.int64)
    rows, node, offset = np.arange(X.shape[0]), np.zeros(X.shape[0], dtype=np.int64), 0
    while True:
        a = level.attribute[node]
        stop = a < 0
        leaf[rows[stop]] = offset + node[stop]
        rows, node, a = rows[~stop], node[~stop], a[~stop]
        if rows.size == 0:
            return levels, leaf
        values = X[rows, a]
        edge = np.where(space.categorical[a], values, values > level.threshold[node]).astype(np.int64)
        pairs, node = np.unique(node * width + edge, return_inverse=True)
        offset += len(level)
        level = _child_level(space, level, pairs // width, pairs % width, len(levels) == depth)
        levels.append(level)


def _expand(space: _Space, root: np.ndarray, depth: int, max_nodes: int) -> list[_Level]:
    """Materialise every node of the tree with root key ``root``; ValueError beyond ``max_nodes``."""
    level = _root_level(space, root, depth == 0)
    levels, total = [level], 1
    while True:
        inner = np.flatnonzero(level.attribute >= 0)
        if inner.size == 0:
            return levels
        branches = space.branches[level.attribute[inner]]
        parent = np.repeat(inner, branches)
        total += parent.size
        if total > max_nodes:
            raise ValueError(f"the tree has more than max_nodes={max_nodes} nodes; lower the depth or raise max_nodes")
        edge = np.arange(parent.size) - np.repeat(np.cumsum(branches) - branches, branches)
        level = _child_level(space, level, parent, edge, len(levels) == depth)
        levels.append(level)


# -------------------------------------------------------------- assembly
def _edge_constraint(categorical: bool, threshold: float, edge: int) -> Constraint:
    """The constraint of edge ``edge``: the category itself, or ``x <= t`` (0) / ``x > t`` (1)."""
    if categorical:
        return CategorySet(frozenset({edge}))
    if edge == 0:
        return Interval(-math.inf, threshold, low_closed=False, high_closed=True)
    return Interval(threshold, math.inf, low_closed=False, high_closed=False)


def _sum_up(levels: list[_Level], counts: np.ndarray) -> np.ndarray:
    """Add every node's counts into its parent's, deepest level first, so inner nodes hold sums."""
    offsets = np.cumsum([0] + [len(level) for level in levels])
    for d in range(len(levels) - 1, 0, -1):
        np.add.at(counts, offsets[d - 1] + levels[d].parent, counts[offsets[d] : offsets[d + 1]])
    return counts


def _to_tree(schema: Schema, space: _Space, levels: list[_Level], counts: np.ndarray, keep: np.ndarray) -> Tree:
    """The `Tree` of the nodes in ``keep`` (closed under parents, root included), counts disclosed.

    A kept node whose children are all dropped becomes a leaf.
    """
    offsets = np.cumsum([0] + [len(level) for level in levels])
    parent = np.concatenate(
        [np.where(lv.parent >= 0, lv.parent + offsets[max(d - 1, 0)], -1) for d, lv in enumerate(levels)]
    )
    edge = np.concatenate([lv.edge for lv in levels])
    attribute = np.concatenate([lv.attribute for lv in levels])
    threshold = np.concatenate([lv.threshold for lv in levels])
    kept = np.flatnonzero(keep)
    number = np.cumsum(keep) - 1
    nodes = [Node.from_counts(counts[i]) for i in kept]
    for i in kept[1:]:
        p = int(parent[i])
        a = int(attribute[p])
        owner = nodes[number[p]]
        owner.attribute = a
        constraint = _edge_constraint(bool(space.categorical[a]), float(threshold[p]), int(edge[i]))
        owner.edges.append(Edge(constraint, int(number[i])))
    return Tree(schema, nodes, "counts")


def _grow_tree(
    schema: Schema, space: _Space, root: np.ndarray, depth: int, X: np.ndarray, y: np.ndarray, k: int
) -> Tree:
    """One tree of Alg. 3: leaf counts of the given (sampled) rows, counts below ``k`` set to 0.

    Only nodes with a nonzero count after suppression are released (see the module docstring).
    """
    levels, leaf = _route(space, root, depth, X)
    n_nodes, n_classes = sum(len(level) for level in levels), schema.n_classes
    counts = np.bincount(leaf * n_classes + y, minlength=n_nodes * n_classes).reshape(n_nodes, n_classes)
    counts = counts.astype(np.float64)
    counts[counts < k] = 0.0
    counts = _sum_up(levels, counts)
    keep = counts.sum(axis=1) > 0
    keep[0] = True
    return _to_tree(schema, space, levels, counts, keep)


def random_structure(
    schema: Schema, depth: int, seed: int, tree_index: int = 0, *, numeric_reuse: bool = True,
    thresholds: ThresholdScale = "uniform", max_nodes: int = 100_000,
) -> Tree:
    """The whole random structure of one tree, with zero counts at every node.

    This is the tree `RandomDecisionTrees` draws for ``structure_seed_ = seed`` and tree
    ``tree_index`` before any data is seen; a fitted tree is the part of it on paths to leaves with
    nonzero released counts. It exists to inspect and test that structure, so it refuses trees
    larger than ``max_nodes`` rather than run out of memory.

    Parameters
    ----------
    schema:
        The schema whose attributes and public ranges the splits are drawn from.
    depth:
        Maximum number of splits on a path (an integer >= 1).
    seed:
        The structure seed, an integer in ``[0, 2**64)``.
    tree_index:
        Which tree of the ensemble (an integer >= 0).
    numeric_reuse:
        Whether a numeric attribute stays available below a split on it.
    thresholds:
        The scale numeric thresholds are drawn on, one of `THRESHOLD_SCALES` (module docstring).
    max_nodes:
        Largest number of nodes materialised.

    Returns
    -------
    Tree
        The full tree, ``counts`` disclosure, all counts zero.
    """
    depth = check_positive_int("depth", depth)
    max_nodes = check_positive_int("max_nodes", max_nodes)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < _MAX_SEED:
        raise ParameterError(f"seed must be an integer in [0, 2**64); got {seed!r}")
    if isinstance(tree_index, bool) or not isinstance(tree_index, numbers.Integral) or tree_index < 0:
        raise ParameterError(f"tree_index must be an integer >= 0; got {tree_index!r}")
    space = _Space.of(schema, _check_bool("numeric_reuse", numeric_reuse), _check_thresholds(thresholds))
    levels = _expand(space, _root_key(int(seed), int(tree_index)), depth, max_nodes)
    n_nodes = sum(len(level) for level in levels)
    return _to_tree(schema, space, levels, np.zeros((n_nodes, schema.n_classes)), np.ones(n_nodes, dtype=bool))


# ------------------------------------------------------------- parameters
def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def _check_thresholds(value: object) -> ThresholdScale:
    if value not in THRESHOLD_SCALES:
        raise ParameterError(f"thresholds must be one of {', '.join(THRESHOLD_SCALES)}; got {value!r}")
    return value


def _check_k(value: object) -> int:
    """``k`` as an int >= 0; 0 (and 1) suppress nothing, Table 6's "original decision tree"."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ParameterError(f"k must be an integer >= 0; got {value!r}")
    return int(value)


def _check_beta(value: object) -> float:
    """``beta`` as a float in (0, 1]: the per-tree sampling probability of a row."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < float(value) <= 1.0:
        raise ParameterError(f"beta must be a real number in (0, 1]; got {value!r}")
    return float(value)


def _check_random_state(value: object) -> np.random.Generator:
    try:
        return np.random.default_rng(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParameterError(
            f"random_state must be None, an integer >= 0 or a numpy Generator; got {value!r}"
        ) from None


# -------------------------------------------------------------- estimator
class RandomDecisionTrees(ClassifierMixin, BaseEstimator):
    """An ensemble of random decision trees; with ``k`` and ``beta`` it is k-AnonToRdt (Alg. 3).

    Parameters
    ----------
    schema:
        Schema of the encoded rows; splits are drawn from its attributes and public ranges.
    depth:
        Maximum number of splits on a path, ``d`` in the paper (which suggests half the number of
        attributes).
    n_trees:
        Number of trees, ``N_t`` (the paper's rule of thumb is 10).
    k:
        Leaf class counts below ``k`` are released as 0. ``k = 0`` (or 1) suppresses nothing;
        the paper's Table 6 uses ``k = 0`` for the "original decision tree without pruning".
    beta:
        Each tree counts each row independently with this probability (1 counts every row).
    numeric_reuse:
        Whether a numeric attribute may be split again below a split on it (on a narrower range).
    thresholds:
        The scale numeric thresholds are drawn on, one of `THRESHOLD_SCALES`: ``"uniform"`` (the
        paper's) or ``"log"`` (module docstring).
    random_state:
        Seed (or numpy Generator) of the structure seed, and of the per-tree samples unless
        ``sampler`` is given.
    sampler:
        ``sampler(beta, n)`` returns n independent Bernoulli(beta) draws (booleans): the per-tree
        samples. k-AnonToRdt passes a secret sampler (`modelshare.common.privacy.noise`) so the samples never
        come from the stream that draws the public structure seed; None draws them from
        ``random_state``.

    Attributes
    ----------
    trees_ : list[Tree]
        The released trees, ``counts`` disclosure, inner counts the sums of their children's.
    sample_sizes_ : numpy.ndarray
        Rows each tree counted (its Bernoulli sample), before suppression.
    structure_seed_ : int
        The seed of the structure: tree ``i`` is part of ``random_structure(schema, depth,
        structure_seed_, i)``.
    classes_ : numpy.ndarray
        Class indices ``0 .. n_classes - 1``.
    n_features_in_ : int
        Number of attributes of the schema.
    """

    def __init__(
        self,
        schema: Schema,
        *,
        depth: int = 4,
        n_trees: int = 10,
        k: int = 0,
        beta: float = 1.0,
        numeric_reuse: bool = True,
        thresholds: ThresholdScale = "uniform",
        random_state: int | np.random.Generator | None = None,
        sampler: Callable[[float, int], np.ndarray] | None = None,
    ) -> None:
        self.schema = schema
        self.depth = depth
        self.n_trees = n_trees
        self.k = k
        self.beta = beta
        self.numeric_reuse = numeric_reuse
        self.thresholds = thresholds
        self.random_state = random_state
        self.sampler = sampler

    def fit(self, X: np.ndarray, y: np.ndarray) -> RandomDecisionTrees:
        """Draw the structures, then count each tree's own sample of the rows (Alg. 3).

        Parameters
        ----------
        X:
            Encoded attributes, shape ``(rows, schema.n_attributes)``.
        y:
            Class indices, shape ``(rows,)``.

        Returns
        -------
        RandomDecisionTrees
            ``self``, fitted.

        Raises
        ------
        ValueError
            A parameter is invalid (`ParameterError`, naming it), or ``X``/``y`` do not fit the
            schema (`SchemaError` naming the column and the first offending row).
        """
        check_schema(self.schema)
        depth = check_positive_int("depth", self.depth)
        n_trees = check_positive_int("n_trees", self.n_trees)
        k, beta = _check_k(self.k), _check_beta(self.beta)
        space = _Space.of(self.schema, _check_bool("numeric_reuse", self.numeric_reuse),
                          _check_thresholds(self.thresholds))
        rng = _check_random_state(self.random_state)
        X, y = check_xy(self.schema, X, y)

        seed = int(rng.integers(0, _MAX_SEED, dtype=np.uint64))
        draw = self.sampler if self.sampler is not None else (lambda p, n: rng.random(n) < p)
        trees, sizes = [], []
        for i in range(n_trees):
            sample = np.asarray(draw(beta, X.shape[0]), dtype=bool)  # Alg. 3 line 6, drawn afresh for every tree
            sizes.append(int(sample.sum()))
            trees.append(_grow_tree(self.schema, space, _root_key(seed, i), depth, X[sample], y[sample], k))
        self.trees_ = trees
        self.sample_sizes_ = np.array(sizes, dtype=np.int64)
        self.structure_seed_ = seed
        self.classes_ = np.arange(self.schema.n_classes, dtype=np.int64)
        self.n_features_in_ = self.schema.n_attributes
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Alg. 2: leaf class counts summed over the trees, normalised per row.

        Uses the released trees only, so it is what any holder of ``trees_`` computes. Rows whose
        leaves are empty in every tree get the summed root distribution (module docstring).

        Parameters
        ----------
        X:
            Encoded attributes, shape ``(rows, schema.n_attributes)``.

        Returns
        -------
        numpy.ndarray
            Shape ``(rows, n_classes)``; each row sums to 1.
        """
        check_is_fitted(self, "trees_")
        return ensemble_predict_proba(self.trees_, X)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per row: the most probable class of `predict_proba` (lowest index on ties)."""
        predicted: np.ndarray = self.classes_[np.argmax(self.predict_proba(X), axis=1)]
        return predicted


def ensemble_predict_proba(trees: Sequence[Tree], X: np.ndarray) -> np.ndarray:
    """Alg. 2 on released ``counts`` trees over one schema: summed leaf counts, normalised per row.

    What `RandomDecisionTrees.predict_proba` computes, for anyone holding only the trees (the
    module docstring says how empty leaves are handled). Shape ``(rows, n_classes)``.
    """
    schema = trees[0].schema
    X = check_x(schema, X)
    total = np.zeros((X.shape[0], schema.n_classes))
    for tree in trees:
        total += _leaf_counts(tree)[tree.apply(X)]
    prior = np.sum([tree.root.class_counts() for tree in trees], axis=0)
    if prior.sum() == 0:
        prior = np.ones(schema.n_classes)
    empty = total.sum(axis=1) == 0
    total[empty] = prior
    proba: np.ndarray = total / total.sum(axis=1, keepdims=True)
    return proba


def _leaf_counts(tree: Tree) -> np.ndarray:
    """Per node, its class counts if it is a leaf and zeros otherwise, shape ``(nodes, classes)``."""
    table = np.array([node.counts for node in tree.nodes], dtype=np.float64)
    table[[not node.is_leaf for node in tree.nodes]] = 0.0
    return table
