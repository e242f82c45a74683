"""Tests of random decision trees and k-AnonToRdt (Waseda, Nojima & Wang 2024, Alg. 1-3).

Structure is checked against `random_structure` (the whole tree a seed defines) on data that
differ; released counts against a brute-force count over each path's rows; prediction against
Alg. 2 recomputed from path masks; sampling against a binomial confidence interval.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.mechanisms.kanon_rdt import LowCount, counts_below_k, kanon_rdt
from modelshare.common.params import ParameterError
from modelshare.common.trees.learners.random_tree import RandomDecisionTrees, ThresholdScale, random_structure
from modelshare.common.trees.tree import CategorySet, Interval, Node, Tree

MIXED = Schema(
    (
        CategoricalAttribute("colour", ("red", "green", "blue")),
        NumericAttribute("size", 0.0, 10.0),
        CategoricalAttribute("shape", ("round", "square")),
        NumericAttribute("weight", -5.0, 5.0),
    ),
    "label",
    ("no", "yes", "maybe"),
)
CATEGORICAL = Schema(
    (
        CategoricalAttribute("a", ("a0", "a1", "a2")),
        CategoricalAttribute("b", ("b0", "b1")),
        CategoricalAttribute("c", ("c0", "c1", "c2", "c3")),
    ),
    "cls",
    ("x", "y"),
)


# ------------------------------------------------------------------ helpers
def random_rows(schema: Schema, n: int, rng: np.random.Generator) -> np.ndarray:
    """Encoded rows drawn uniformly over the schema's categories and ranges."""
    columns = [
        rng.integers(0, a.size, n) if isinstance(a, CategoricalAttribute) else rng.uniform(a.low, a.high, n)
        for a in schema.attributes
    ]
    return np.column_stack(columns).astype(np.float64)


def splits(tree: Tree) -> dict[tuple, tuple]:
    """Each inner node, keyed by the edge constraints from the root: its attribute and edge constraints."""
    out: dict[tuple, tuple] = {}
    stack: list[tuple[int, tuple]] = [(0, ())]
    while stack:
        i, path = stack.pop()
        node = tree.nodes[i]
        if node.is_leaf:
            continue
        out[path] = (node.attribute, tuple(e.constraint.canonical() for e in node.edges))
        stack.extend((e.child, path + ((node.attribute, e.constraint.canonical()),)) for e in node.edges)
    return out


def assert_part_of(fitted: Tree, full: Tree) -> None:
    """Every split of ``fitted`` is the split at the same path of ``full``, with a subset of its edges."""
    full_splits = splits(full)
    for path, (attribute, edges) in splits(fitted).items():
        assert path in full_splits
        full_attribute, full_edges = full_splits[path]
        assert attribute == full_attribute
        assert set(edges) <= set(full_edges)


def walk_splits(tree: Tree) -> Iterator[tuple[Node, tuple[int, ...], dict[int, Interval]]]:
    """Each inner node with the attributes split on above it and its path's numeric intervals."""
    stack: list[tuple[int, tuple[int, ...], dict[int, Interval]]] = [(0, (), {})]
    while stack:
        i, above, intervals = stack.pop()
        node = tree.nodes[i]
        if node.is_leaf:
            continue
        attribute = node.attribute
        assert attribute is not None, f"inner node {i} names no attribute"
        yield node, above, intervals
        for e in node.edges:
            narrowed = dict(intervals)
            if isinstance(e.constraint, Interval):
                previous = intervals.get(attribute, Interval(-math.inf, math.inf))
                narrowed[attribute] = previous.intersect(e.constraint)
            stack.append((e.child, above + (attribute,), narrowed))


def region(path) -> tuple:
    """A leaf's region, comparable across trees: its most specific constraints in canonical form."""
    return tuple((a, c.canonical()) for a, c in path.constraints)


def brute_counts(tree: Tree, X: np.ndarray, y: np.ndarray, n_classes: int) -> dict[tuple, np.ndarray]:
    """Per leaf region of ``tree``, the class counts of the rows satisfying its path (plain masks)."""
    return {region(p): np.bincount(y[p.mask(X)], minlength=n_classes).astype(float) for p in tree.paths()}


# ---------------------------------------------------------------- structure
def test_structure_is_a_function_of_the_seed_not_the_data() -> None:
    rng = np.random.default_rng(1)
    X1, X2 = random_rows(MIXED, 400, rng), random_rows(MIXED, 300, rng)
    X2[:, 1] = rng.uniform(0.0, 1.0, 300)  # the second table sits in a corner of the "size" range
    y1, y2 = rng.integers(0, 3, 400), (X2[:, 0] == 0).astype(np.int64)
    a = RandomDecisionTrees(MIXED, depth=4, n_trees=5, random_state=42).fit(X1, y1)
    b = RandomDecisionTrees(MIXED, depth=4, n_trees=5, k=3, beta=0.5, random_state=42).fit(X2, y2)
    assert a.structure_seed_ == b.structure_seed_
    for i, (ta, tb) in enumerate(zip(a.trees_, b.trees_, strict=False)):
        full = random_structure(MIXED, 4, a.structure_seed_, i)
        assert_part_of(ta, full)
        assert_part_of(tb, full)
    other = RandomDecisionTrees(MIXED, depth=4, n_trees=5, random_state=43).fit(X1, y1)
    assert [splits(t) for t in other.trees_] != [splits(t) for t in a.trees_]


def test_dense_data_materialises_the_whole_structure() -> None:
    cells = np.array(list(itertools.product(range(3), range(2), range(4))), dtype=np.float64)
    X = np.repeat(cells, 2, axis=0)
    for y in (np.zeros(len(X), dtype=np.int64), np.arange(len(X)) % 2):
        model = RandomDecisionTrees(CATEGORICAL, depth=3, n_trees=4, random_state=5).fit(X, y)
        for i, tree in enumerate(model.trees_):
            assert splits(tree) == splits(random_structure(CATEGORICAL, 3, model.structure_seed_, i))


@pytest.mark.parametrize("thresholds", ["uniform", "log"])
@pytest.mark.parametrize("numeric_reuse", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_splits_stay_in_public_ranges_and_categoricals_once(seed: int, numeric_reuse: bool,
                                                            thresholds: ThresholdScale) -> None:
    tree = random_structure(MIXED, 6, seed * 7919, seed, numeric_reuse=numeric_reuse, thresholds=thresholds)
    tree.validate()
    assert tree.depth <= 6
    for node, above, intervals in walk_splits(tree):
        assert node.attribute is not None
        attr = MIXED.attributes[node.attribute]
        if isinstance(attr, CategoricalAttribute) or not numeric_reuse:
            assert node.attribute not in above
        if isinstance(attr, CategoricalAttribute):
            assert [e.constraint for e in node.edges] == [CategorySet(frozenset({c})) for c in range(attr.size)]
            continue
        left, right = (e.constraint for e in node.edges)
        assert isinstance(left, Interval)
        t = left.high
        assert left == Interval(-math.inf, t, False, True) and right == Interval(t, math.inf, False, False)
        path = intervals.get(node.attribute, Interval(-math.inf, math.inf)).clip(attr)
        assert attr.low < t < attr.high
        assert path.low < t < path.high


def root_thresholds(schema: Schema, thresholds: ThresholdScale, seeds: int = 400) -> np.ndarray:
    """The root threshold of every structure seed whose root splits a numeric attribute."""
    roots = (random_structure(schema, 1, seed, thresholds=thresholds).root for seed in range(seeds))
    firsts = (node.edges[0].constraint for node in roots)
    return np.array([first.high for first in firsts if isinstance(first, Interval)])


def test_log_thresholds_spread_over_a_wide_range_and_leave_a_narrow_one_near_uniform() -> None:
    wide = Schema((NumericAttribute("gain", 0.0, 100_000.0),), "c", ("x", "y"))
    uniform, log = root_thresholds(wide, "uniform"), root_thresholds(wide, "log")
    assert np.mean(uniform < 1_000) < 0.03  # 1 % of the range
    assert 0.5 < np.mean(log < 1_000) < 0.7  # log(1001) / log(100001) = 0.60 of the log range
    assert 0.05 < np.mean(log < 10) < 0.35  # 0.21: the thresholds reach the values near 0 too
    narrow = Schema((NumericAttribute("ph", 3.0, 3.5),), "c", ("x", "y"))
    t = np.sort(root_thresholds(narrow, "log"))
    expected = 3.0 + np.expm1(np.linspace(0, 1, t.size) * np.log1p(0.5))
    assert np.abs(t - expected).max() < 0.06  # the log of 1 + (0 .. 0.5) is nearly linear
    assert np.array_equal(root_thresholds(wide, "uniform"), uniform)  # the paper's rule is unchanged by the option
    for seed in range(20):  # no numeric attribute: the same structure under both rules
        assert (splits(random_structure(CATEGORICAL, 3, seed, thresholds="log"))
                == splits(random_structure(CATEGORICAL, 3, seed)))


def test_log_structure_is_a_function_of_the_seed_not_the_data() -> None:
    rng = np.random.default_rng(2)
    X1, X2 = random_rows(MIXED, 400, rng), random_rows(MIXED, 300, rng)
    X2[:, 3] = rng.uniform(4.0, 5.0, 300)
    y1, y2 = rng.integers(0, 3, 400), (X2[:, 1] > 5).astype(np.int64)
    a = RandomDecisionTrees(MIXED, depth=4, n_trees=3, thresholds="log", random_state=7).fit(X1, y1)
    b = RandomDecisionTrees(MIXED, depth=4, n_trees=3, k=3, beta=0.5, thresholds="log", random_state=7).fit(X2, y2)
    for i, (ta, tb) in enumerate(zip(a.trees_, b.trees_, strict=False)):
        full = random_structure(MIXED, 4, a.structure_seed_, i, thresholds="log")
        assert_part_of(ta, full)
        assert_part_of(tb, full)
    assert splits(full) != splits(random_structure(MIXED, 4, a.structure_seed_, 2))


def test_a_node_with_nothing_left_to_split_is_a_leaf() -> None:
    schema = Schema((CategoricalAttribute("a", ("p", "q")), CategoricalAttribute("b", ("r", "s"))), "c", ("x", "y"))
    tree = random_structure(schema, 5, 11)
    assert tree.depth == 2 and tree.n_leaves == 4
    constant = Schema((NumericAttribute("u", 3.0, 3.0),), "c", ("x", "y"))
    assert random_structure(constant, 3, 11).n_leaves == 1


def test_random_structure_refuses_a_tree_beyond_max_nodes() -> None:
    with pytest.raises(ValueError, match="max_nodes=10"):
        random_structure(CATEGORICAL, 3, 0, max_nodes=10)


# ------------------------------------------------------------ counts (Alg. 3)
@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 150),
    k=st.integers(0, 8),
    beta=st.floats(0.05, 1.0),
    depth=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_no_released_count_is_below_k(n: int, k: int, beta: float, depth: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    X, y = random_rows(MIXED, n, rng), rng.integers(0, 3, n)
    release = kanon_rdt(MIXED, X, y, k=k, beta=beta, depth=depth, n_trees=3, rng=seed)
    assert counts_below_k(release.trees, k) == []
    for tree, size in zip(release.trees, release.sample_sizes, strict=False):
        tree.validate()
        assert tree.depth <= depth
        assert tree.root.total <= size
        assert all(n.total > 0 for n in tree.nodes[1:])  # only nonempty parts are released
        if k <= 1:
            assert tree.root.total == size


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), k=st.integers(0, 6), seed=st.integers(0, 2**32 - 1))
def test_leaf_counts_are_the_suppressed_path_counts(n: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    X, y = random_rows(MIXED, n, rng), rng.integers(0, 3, n)
    model = RandomDecisionTrees(MIXED, depth=3, n_trees=2, k=k, random_state=seed).fit(X, y)
    for i, tree in enumerate(model.trees_):
        full = random_structure(MIXED, 3, model.structure_seed_, i)
        suppressed = {r: np.where(c >= k, c, 0.0) for r, c in brute_counts(full, X, y, 3).items()}
        expected = {r: tuple(c) for r, c in suppressed.items() if c.sum() > 0}
        released = {region(p): tuple(p.counts) for p in tree.paths() if p.total > 0}  # type: ignore[arg-type]
        assert released == expected
        assert tree.n_leaves == max(len(expected), 1)  # no empty leaf besides a bare, empty root


def test_sampling_rate_is_within_a_binomial_interval() -> None:
    rng = np.random.default_rng(3)
    n, n_trees, beta = 4000, 10, 0.3
    X, y = random_rows(MIXED, n, rng), rng.integers(0, 3, n)
    release = kanon_rdt(MIXED, X, y, k=0, beta=beta, depth=2, n_trees=n_trees, rng=9)
    total = sum(release.sample_sizes)
    ci = binomtest(total, n * n_trees, beta).proportion_ci(confidence_level=0.999)
    assert ci.low <= beta <= ci.high
    assert [t.root.total for t in release.trees] == list(release.sample_sizes)
    assert len(set(release.sample_sizes)) > 1  # a fresh sample per tree


def test_beta_one_and_k_zero_is_alg_1() -> None:
    rng = np.random.default_rng(4)
    X, y = random_rows(MIXED, 300, rng), rng.integers(0, 3, 300)
    release = kanon_rdt(MIXED, X, y, k=0, beta=1.0, depth=3, n_trees=3, rng=1)
    assert release.sample_sizes == (300, 300, 300)
    assert all(np.array_equal(t.root.class_counts(), np.bincount(y, minlength=3)) for t in release.trees)


def test_kanon_rdt_is_reproducible_from_its_seed() -> None:
    rng = np.random.default_rng(5)
    X, y = random_rows(MIXED, 500, rng), rng.integers(0, 3, 500)
    first = kanon_rdt(MIXED, X, y, k=3, beta=0.4, depth=3, n_trees=4, rng=77)
    again = kanon_rdt(MIXED, X, y, k=3, beta=0.4, depth=3, n_trees=4, rng=77)
    assert first.sample_sizes == again.sample_sizes
    released = [[(region(p), tuple(p.counts)) for p in t.paths()] for t in first.trees]  # type: ignore[arg-type]
    assert released == [[(region(p), tuple(p.counts)) for p in t.paths()] for t in again.trees]  # type: ignore[arg-type]


def test_counts_below_k_finds_every_low_count() -> None:
    rng = np.random.default_rng(6)
    X, y = random_rows(MIXED, 200, rng), rng.integers(0, 3, 200)
    trees = kanon_rdt(MIXED, X, y, k=0, beta=1.0, depth=3, n_trees=2, rng=2).trees
    found = counts_below_k(trees, 4)
    expected = [
        LowCount(t, i, c, float(node.class_counts()[c]))
        for t, tree in enumerate(trees)
        for i, node in enumerate(tree.nodes)
        for c in range(3)
        if 0 < node.class_counts()[c] < 4
    ]
    assert found == expected and found
    with pytest.raises(ValueError, match="hit_miss"):
        counts_below_k([trees[0].to_hit_miss()], 4)


# ------------------------------------------------------------ prediction (Alg. 2)
def test_predict_proba_sums_counts_over_trees_then_normalises() -> None:
    rng = np.random.default_rng(8)
    X, y = random_rows(MIXED, 600, rng), rng.integers(0, 3, 600)
    model = RandomDecisionTrees(MIXED, depth=3, n_trees=4, k=4, beta=0.5, random_state=3).fit(X, y)
    X_new = random_rows(MIXED, 300, rng)
    summed = np.zeros((300, 3))
    for tree in model.trees_:
        for path in tree.paths():
            summed[path.mask(X_new)] += path.counts
    empty = summed.sum(axis=1) == 0
    summed[empty] = np.sum([t.root.class_counts() for t in model.trees_], axis=0)
    expected = summed / summed.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict_proba(X_new), expected)
    np.testing.assert_array_equal(model.predict(X_new), np.argmax(expected, axis=1))


def test_all_suppressed_predicts_uniformly() -> None:
    rng = np.random.default_rng(9)
    X, y = random_rows(MIXED, 50, rng), rng.integers(0, 3, 50)
    model = RandomDecisionTrees(MIXED, depth=2, n_trees=3, k=1000, random_state=0).fit(X, y)
    assert all(t.n_leaves == 1 and t.root.total == 0 for t in model.trees_)
    np.testing.assert_allclose(model.predict_proba(X), np.full((50, 3), 1 / 3))


def test_beats_the_majority_class_on_a_learnable_table(mixed) -> None:
    schema, X, y = mixed
    train, test = slice(0, 1500), slice(1500, None)
    model = RandomDecisionTrees(schema, depth=3, n_trees=10, random_state=0).fit(X[train], y[train])
    majority = np.bincount(y[test]).max() / y[test].size
    assert model.score(X[test], y[test]) > majority + 0.2


def test_nursery_accuracy(nursery) -> None:
    schema, X, y = nursery
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[: int(0.8 * len(y))], order[int(0.8 * len(y)) :]
    model = RandomDecisionTrees(schema, depth=4, n_trees=10, k=0, beta=1.0, random_state=0).fit(X[train], y[train])
    accuracy = model.score(X[test], y[test])
    majority = np.bincount(y[test]).max() / test.size
    assert majority < 0.35 and accuracy > 0.8  # the paper reports 0.84 (Table 6a, 10 trees, d = 4)


# ------------------------------------------------------------- parameters
@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"depth": 0}, "depth"),
        ({"n_trees": 0}, "n_trees"),
        ({"k": -1}, "k"),
        ({"k": 2.5}, "k"),
        ({"beta": 0.0}, "beta"),
        ({"beta": 1.5}, "beta"),
        ({"numeric_reuse": "yes"}, "numeric_reuse"),
        ({"thresholds": "quantile"}, "thresholds"),
        ({"random_state": "seed"}, "random_state"),
    ],
)
def test_bad_parameters_are_named(params: dict, name: str) -> None:
    X, y = random_rows(MIXED, 10, np.random.default_rng(0)), np.zeros(10, dtype=np.int64)
    with pytest.raises(ParameterError, match=f"^{name} must"):
        RandomDecisionTrees(MIXED, **params).fit(X, y)
