"""PGEN and BASEGEN: constraints and counts exact, Proposition 1 in spirit, seeds, chunks."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.trees.learners import CartTreeClassifier, MultiwayTreeClassifier
from modelshare.common.trees.tree import CategorySet, Edge, Interval, Node, Tree
from modelshare.miner_node.pgen import PathTable, _generate, allocate_rows, basegen, pgen, pgen_chunks, uniform_rows


def rows_per_path(tree, X):
    leaf_of = tree.apply(X)
    return {p.leaf: p.mask(X) for p in tree.paths()}, leaf_of


def assert_exact(tree, X, y, expected_rows=None):
    """Every row satisfies exactly one path; per-path rows and class counts are exact."""
    masks, _ = rows_per_path(tree, X)
    stacked = np.array(list(masks.values()))
    assert np.array_equal(stacked.sum(axis=0), np.ones(len(y)))
    for p in tree.paths():
        m = masks[p.leaf]
        want = round(p.total) if expected_rows is None else expected_rows[p.leaf]
        assert m.sum() == want
        if p.counts is not None and expected_rows is None:
            assert np.array_equal(np.bincount(y[m], minlength=tree.schema.n_classes), np.rint(p.counts))


@pytest.mark.parametrize("learner", ["cart", "multiway"])
def test_pgen_satisfies_paths_and_counts_exactly(car, learner):
    schema, X, y = car
    model = (CartTreeClassifier(schema, min_samples_leaf=5, random_state=0) if learner == "cart"
             else MultiwayTreeClassifier(schema, min_samples_leaf=5))
    tree = model.fit(X, y).tree_
    Xp, yp = pgen(tree, rng=np.random.default_rng(0))
    assert Xp.shape == (len(y), schema.n_attributes)
    assert_exact(tree, Xp, yp)


def test_numeric_values_inside_intervals_and_schema_range(mixed):
    schema, X, y = mixed
    tree = CartTreeClassifier(schema, random_state=0).fit(X, y).tree_
    Xp, yp = pgen(tree, rng=np.random.default_rng(1))
    assert_exact(tree, Xp, yp)
    for j, attr in enumerate(schema.attributes):
        if isinstance(attr, NumericAttribute):
            assert Xp[:, j].min() >= attr.low and Xp[:, j].max() <= attr.high


def test_requested_size_is_shared_by_largest_remainder(car):
    schema, X, y = car
    tree = CartTreeClassifier(schema, min_samples_leaf=10, random_state=0).fit(X, y).tree_
    paths = tree.paths()
    n = 10_007
    share = allocate_rows(np.array([p.total for p in paths]), n)
    Xp, yp = pgen(tree, rows=n, rng=np.random.default_rng(2))
    assert len(yp) == n == share.sum()
    assert_exact(tree, Xp, yp, expected_rows={p.leaf: s for p, s in zip(paths, share, strict=False)})
    exact = np.array([p.total for p in paths]) * n / len(y)
    assert np.all(np.abs(share - exact) < 1)


def test_allocate_rows_properties():
    assert allocate_rows(np.array([1.0, 1.0, 1.0]), 10).tolist() == [4, 3, 3]
    assert allocate_rows(np.array([0.0, 0.0]), 0).tolist() == [0, 0]
    with pytest.raises(ValueError, match="disclose no tuples"):
        allocate_rows(np.array([0.0, 0.0]), 5)
    two = allocate_rows(np.array([[7.0, 3.0], [1.0, 1.0]]), np.array([10, 3]))
    assert two.tolist() == [[7, 3], [2, 1]]


def test_hit_miss_spreads_miss_uniformly():
    schema = Schema((CategoricalAttribute("a", ("p", "q")),), "c", ("x", "y", "z"))
    X = np.array([[0.0]] * 10 + [[1.0]] * 10)
    y = np.array([0] * 7 + [1] * 3 + [2] * 10)
    tree = CartTreeClassifier(schema, random_state=0).fit(X, y).tree_.to_hit_miss()
    Xp, yp = pgen(tree, rows=2000, rng=np.random.default_rng(0))
    left = Xp[:, 0] == 0
    # majority x gets hit/(hit+miss) = 0.7; the miss share 0.3 is spread over y and z equally
    assert np.bincount(yp[left], minlength=3).tolist() == [700, 150, 150]
    assert np.bincount(yp[~left], minlength=3).tolist() == [0, 0, 1000]


def test_sample_assignment_follows_the_distribution(car):
    schema, X, y = car
    tree = CartTreeClassifier(schema, max_depth=1, random_state=0).fit(X, y).tree_
    Xp, yp = pgen(tree, rows=200_000, rng=np.random.default_rng(5), class_assignment="sample")
    for p in tree.paths():
        m = p.mask(Xp)
        freq = np.bincount(yp[m], minlength=schema.n_classes) / m.sum()
        assert np.allclose(freq, p.counts / p.total, atol=0.01)


def test_chunks_concatenate_to_exact_counts(car):
    schema, X, y = car
    tree = CartTreeClassifier(schema, min_samples_leaf=5, random_state=0).fit(X, y).tree_
    chunks = list(pgen_chunks(tree, rng=np.random.default_rng(0), chunk_rows=100))
    assert all(len(c[1]) <= 100 for c in chunks) and len(chunks) == -(-len(y) // 100)
    Xp = np.vstack([c[0] for c in chunks])
    yp = np.concatenate([c[1] for c in chunks])
    assert_exact(tree, Xp, yp)


def test_seeds_make_runs_reproducible(car):
    schema, X, y = car
    tree = CartTreeClassifier(schema, random_state=0).fit(X, y).tree_
    a = pgen(tree, rng=np.random.default_rng(11))
    b = pgen(tree, rng=np.random.default_rng(11))
    c = pgen(tree, rng=np.random.default_rng(12))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("dataset", ["nursery", "mixed"])
def test_proposition_1_tree_from_pgen_reproduces_the_tree(request, dataset):
    """A tree learned from PGEN data of a fully grown tree predicts like it on a uniform sample."""
    schema, X, y = request.getfixturevalue(dataset)
    h = CartTreeClassifier(schema, random_state=0).fit(X, y).tree_
    Xp, yp = pgen(h, rng=np.random.default_rng(0))
    h2 = CartTreeClassifier(schema, random_state=0).fit(Xp, yp).tree_
    probe = uniform_rows(schema, 50_000, np.random.default_rng(9))
    agreement = np.mean(h.predict(probe) == h2.predict(probe))
    assert agreement >= 0.95, agreement


def test_basegen_is_uniform_and_labelled_by_the_tree(car):
    schema, X, y = car
    tree = CartTreeClassifier(schema, random_state=0).fit(X, y).tree_
    Xb, yb = basegen(tree, rng=np.random.default_rng(0))
    assert len(yb) == len(y) and np.array_equal(yb, tree.predict(Xb))
    Xb, _ = basegen(tree, rows=60_000, rng=np.random.default_rng(0))
    freq = np.bincount(Xb[:, 0].astype(int)) / 60_000
    assert np.allclose(freq, 0.25, atol=0.01)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(5, 200),
    n_cat=st.integers(1, 5),
    depth=st.one_of(st.none(), st.integers(1, 6)),
    hit_miss=st.booleans(),
)
def test_property_pgen_rows_always_satisfy_their_path(seed, n, n_cat, depth, hit_miss):
    rng = np.random.default_rng(seed)
    schema = Schema(
        (CategoricalAttribute("c", tuple(f"v{i}" for i in range(n_cat))), NumericAttribute("x", -3.0, 3.0)),
        "k",
        ("a", "b", "c"),
    )
    X = np.column_stack([rng.integers(0, n_cat, n), rng.uniform(-3, 3, n).round(1)]).astype(float)
    y = rng.integers(0, 3, n)
    tree = CartTreeClassifier(schema, max_depth=depth, random_state=0).fit(X, y).tree_
    if hit_miss:
        tree = tree.to_hit_miss()
    Xp, yp = pgen(tree, rng=rng)
    masks, leaf_of = rows_per_path(tree, Xp)
    for p in tree.paths():
        assert masks[p.leaf].sum() == round(p.total)
        assert np.array_equal(masks[p.leaf], leaf_of == p.leaf)


def test_rejects_bad_arguments(car):
    schema, X, y = car
    tree = CartTreeClassifier(schema, max_depth=2, random_state=0).fit(X, y).tree_
    with pytest.raises(ValueError, match="class_assignment"):
        pgen(tree, rng=np.random.default_rng(0), class_assignment="majority")
    with pytest.raises(ValueError, match="rows must be non-negative"):
        pgen(tree, rows=-1, rng=np.random.default_rng(0))


def _hand_tree(colours: tuple[int, ...] = (0, 1, 2, 3, 4)) -> Tree:
    """Five paths over a categorical, a real and an integer attribute; colour is split twice on one path.

    Paths (in `Tree.paths` order): colour in {0,1} & size <= 3.5; colour in {0,1} & size > 3.5;
    colour in {2,3,4} & count <= 7.5 & colour = 2; ... & colour in {3,4}; colour in {2,3,4} & count > 7.5.
    ``colours`` renames colour c to ``colours[c]``: the identity keeps every set a run of consecutive
    categories, `SCATTERED` makes the sets of two or more colours gaps (PGEN's two ways to draw a category).
    """

    def colour(*codes: int) -> CategorySet:
        return CategorySet(frozenset(colours[c] for c in codes))

    schema = Schema(
        (CategoricalAttribute("colour", tuple("abcde")), NumericAttribute("size", 0.0, 10.0),
         NumericAttribute("count", 0.0, 20.0, integer=True)),
        "k",
        ("x", "y"),
    )
    leaf = {i: Node.from_counts(np.array(c, dtype=float)) for i, c in
            {3: (30, 10), 4: (5, 25), 7: (12, 8), 8: (9, 1), 6: (20, 20)}.items()}

    def inner(attribute: int, edges: list[Edge], *children: int) -> Node:
        node = Node.from_counts(np.sum([nodes[c].class_counts() for c in children], axis=0))
        node.attribute, node.edges = attribute, edges
        return node

    nodes: dict[int, Node] = dict(leaf)
    nodes[5] = inner(0, [Edge(colour(2), 7), Edge(colour(3, 4), 8)], 7, 8)
    nodes[2] = inner(2, [Edge(Interval(high=7.5), 5), Edge(Interval(low=7.5), 6)], 5, 6)
    nodes[1] = inner(1, [Edge(Interval(high=3.5), 3), Edge(Interval(low=3.5), 4)], 3, 4)
    nodes[0] = inner(0, [Edge(colour(0, 1), 1), Edge(colour(2, 3, 4), 2)], 1, 2)
    return Tree(schema, [nodes[i] for i in range(9)], "counts")


SCATTERED = (0, 2, 4, 1, 3)  # {0,1} -> {0,2}, {2,3,4} -> {1,3,4}, {3,4} -> {1,3}: no longer runs


@pytest.mark.parametrize("colours", [(0, 1, 2, 3, 4), SCATTERED], ids=["runs", "scattered"])
def test_values_follow_pgens_law_on_every_path(colours):
    """Chi-square and KS checks, per path: on-path values uniform within the path's category set,
    interval or whole numbers; off-path values uniform over the public domain; classes exact.
    Category sets that are runs of consecutive categories and sets with gaps are drawn differently
    (`PathTable.first`); both follow the law."""
    tree = _hand_tree(colours)
    assert (0 in PathTable.from_tree(tree).first) == (colours != SCATTERED)
    rows = 120_000
    X, y = pgen(tree, rows=rows, rng=np.random.default_rng(20))
    paths = tree.paths()
    share = allocate_rows(np.array([p.total for p in paths]), rows)
    alpha = 1e-4  # fixed seed: the test is deterministic; alpha only says how strict it is
    for p, n_rows in zip(paths, share, strict=False):
        m = p.mask(X)
        assert m.sum() == n_rows
        assert np.array_equal(np.bincount(y[m], minlength=2), allocate_rows(p.counts, n_rows))
        colour = p.constraint(0)
        allowed = sorted(colour.codes) if colour is not None else list(range(5))
        observed = np.bincount(X[m, 0].astype(int), minlength=5)
        assert observed[[c for c in range(5) if c not in allowed]].sum() == 0
        if len(allowed) > 1:
            assert stats.chisquare(observed[allowed]).pvalue > alpha, p.describe(tree.schema)
        size = p.constraint(1)
        lo, hi = (0.0, 10.0) if size is None else (max(size.low, 0.0), min(size.high, 10.0))
        assert stats.kstest(X[m, 1], stats.uniform(lo, hi - lo).cdf).pvalue > alpha, p.describe(tree.schema)
        count = p.constraint(2)
        lo, hi = (0, 20) if count is None else (int(np.ceil(max(count.low, 0.0))), int(np.floor(min(count.high, 20.0))))
        values = X[m, 2]
        assert np.array_equal(values, np.floor(values)) and values.min() >= lo and values.max() <= hi
        whole = np.bincount(values.astype(int) - lo, minlength=hi - lo + 1)
        assert stats.chisquare(whole).pvalue > alpha, p.describe(tree.schema)


@pytest.mark.parametrize("colours", [(0, 1, 2, 3, 4), SCATTERED], ids=["runs", "scattered"])
def test_shuffled_rows_follow_the_same_law(colours):
    """Shuffling permutes rows only: same per-path counts and classes, and uniform values on a path."""
    tree = _hand_tree(colours)
    X, y = pgen(tree, rows=60_000, rng=np.random.default_rng(21), shuffle=True)
    assert_exact(tree, X, y, expected_rows={p.leaf: s for p, s in zip(
        tree.paths(), allocate_rows(np.array([p.total for p in tree.paths()]), 60_000), strict=False)})
    first = tree.paths()[0]
    m = first.mask(X)
    assert stats.kstest(X[m, 1], stats.uniform(0.0, 3.5).cdf).pvalue > 1e-4
    assert stats.chisquare(np.bincount(X[m, 2].astype(int), minlength=21)).pvalue > 1e-4
    assert np.all(np.diff(np.flatnonzero(m)) > 0) and not np.all(np.diff(np.flatnonzero(m)) == 1)


def test_integer_draws_stay_whole_and_in_range_beyond_exact_floats():
    """Past 2**53 not every whole number is a float (PGEN clamps such draws at ``high``); draws stay in range."""
    top = 2.0**60
    schema = Schema((NumericAttribute("big", top - 2.0**12, top, integer=True),), "k", ("x", "y"))
    X = np.array([[top - 2.0**11], [top]])
    tree = CartTreeClassifier(schema, random_state=0).fit(X, np.array([0, 1])).tree_
    Xp, yp = pgen(tree, rows=20_000, rng=np.random.default_rng(0))
    assert Xp.min() >= top - 2.0**12 and Xp.max() <= top and np.array_equal(Xp, np.floor(Xp))
    share = allocate_rows(np.array([p.total for p in tree.paths()]), 20_000)
    assert_exact(tree, Xp, yp, expected_rows={p.leaf: s for p, s in zip(tree.paths(), share, strict=False)})


def _reference_bounds(interval: Interval | None, attr: NumericAttribute) -> tuple[float, float]:
    """The drawable closed bounds of a path's interval, one scalar at a time (open ends one float inward)."""
    if interval is None:
        return attr.low, attr.high
    low = interval.low if interval.low_closed else math.nextafter(interval.low, math.inf)
    high = interval.high if interval.high_closed else math.nextafter(interval.high, -math.inf)
    return max(low, attr.low), min(high, attr.high)


def _trees(car, mixed) -> list[Tree]:
    """Trees whose category sets are runs (ordinal CART, multiway), gaps (one-hot CART, `SCATTERED`) or both."""
    trees = [_hand_tree(), _hand_tree(SCATTERED)]
    for schema, X, y in (car, mixed):
        for encoding in ("ordinal", "onehot"):
            tree = CartTreeClassifier(schema, min_samples_leaf=3, random_state=0,
                                      categorical_encoding=encoding).fit(X, y).tree_
            trees += [tree, tree.to_hit_miss()]
        trees.append(MultiwayTreeClassifier(schema, min_samples_leaf=3).fit(X, y).tree_)
    return trees


def test_path_table_matches_the_trees_paths(car, mixed):
    """The vectorized compile gives each path (`Tree.paths` order) its most specific constraints' sets and bounds."""
    for tree in _trees(car, mixed):
        table, paths = PathTable.from_tree(tree), tree.paths()
        assert table.n_paths == len(paths)
        assert np.array_equal(table.totals, [p.total for p in paths])
        for j, attr in enumerate(tree.schema.attributes):
            for p, path in enumerate(paths):
                constraint = path.constraint(j)
                if isinstance(attr, CategoricalAttribute):
                    codes = sorted(constraint.codes) if constraint is not None else list(range(attr.size))
                    assert np.flatnonzero(table.allowed[j][p]).tolist() == codes, (path.describe(tree.schema), j)
                    if j in table.first:
                        assert table.first[j][p] == codes[0] and codes == list(range(codes[0], codes[0] + len(codes)))
                elif not attr.integer:
                    assert (table.low[j][p], table.high[j][p]) == _reference_bounds(constraint, attr)
            if isinstance(attr, CategoricalAttribute) and j not in table.first:
                assert not all(np.ptp(np.flatnonzero(row)) + 1 == row.sum() for row in table.allowed[j])


def test_runs_of_categories_draw_what_the_code_lookup_draws(car, mixed):
    """Drawing a run's category as ``first + floor(u * n)``
    gives, uniform for uniform, the category the lookup gives."""
    for tree in _trees(car, mixed):
        table = PathTable.from_tree(tree)
        cells = allocate_rows(table.totals, 50_000)
        for shuffle in (False, True):
            fast = _generate(table, cells, "sample", np.random.default_rng(3), shuffle)
            looked_up = _generate(dataclasses.replace(table, first={}), cells, "sample",
                                  np.random.default_rng(3), shuffle)
            assert np.array_equal(fast[0], looked_up[0]) and np.array_equal(fast[1], looked_up[1])


def test_a_path_without_drawable_values_is_named():
    """An open interval between two adjacent floats holds no float: the compile names that path's interval."""
    schema = Schema((NumericAttribute("x", 0.0, 10.0),), "k", ("a", "b"))
    gap = math.nextafter(1.0, math.inf)
    nodes = [Node.from_counts(np.array([3.0, 3.0]), label=0)] + [Node.from_counts(np.array([1.0, 1.0]), label=0)
                                                                 for _ in range(3)]
    nodes[0].attribute = 0
    nodes[0].edges = [Edge(Interval(high=1.0), 1), Edge(Interval(1.0, gap, False, False), 2),
                      Edge(Interval(gap, low_closed=True), 3)]
    tree = Tree(schema, nodes, "counts")
    with pytest.raises(ValueError, match=r"path interval x in \(1, 1\) holds no drawable value in \[0, 10\]"):
        PathTable.from_tree(tree)
