"""DiffPETs: parameters and accounting, utilities, splits, released trees, PGEN, regression and its PGEN."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import bundled_schema
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema, SchemaError
from modelshare.common.mechanisms.diffpets import (
    BOOTSTRAP_CAVEAT,
    GINI_SENSITIVITY,
    POST_PROCESSING,
    TARGET_GRID,
    DiffPets,
    DiffPetsRegressor,
    _Region,
    exponential_choice,
    gini_utility,
    train_diffpets,
    variance_utility,
)
from modelshare.common.privacy.noise import SecureNoise, SeededNoise
from modelshare.common.privacy.requirements import DP
from modelshare.common.trees.regression import RegressionForest, RegressionNode, RegressionTree
from modelshare.common.trees.tree import CategorySet, Edge, Interval, Node, Tree, TreeError
from modelshare.miner_node.pgen import pgen_ensemble, pgen_regression, pgen_regression_tree

WINE = "common/data/datasets/data/winequality.csv.gz"


@pytest.fixture(scope="module")
def nursery_split(nursery):
    schema, X, y = nursery
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[: len(y) * 4 // 5], order[len(y) * 4 // 5:]
    return schema, X[train], y[train], X[test], y[test]


@pytest.fixture(scope="module")
def wine():
    """White Wine Quality as a regression table: 11 numeric attributes (bundled public ranges), quality on 0..10."""
    frame = pd.read_csv(WINE)
    frame = frame[frame["color"] == "white"]
    attributes = tuple(a for a in bundled_schema("winequality").attributes if a.name != "color")
    schema = RegressionSchema(attributes, NumericAttribute("quality", 0.0, 10.0))
    return schema, frame[[a.name for a in attributes]].to_numpy(np.float64), frame["quality"].to_numpy(np.float64)


def leaf_depths(tree: Tree) -> list[int]:
    depths, stack = [], [(0, 0)]
    while stack:
        i, d = stack.pop()
        if tree.nodes[i].is_leaf:
            depths.append(d)
        stack.extend((e.child, d + 1) for e in tree.nodes[i].edges)
    return depths


# ---------------------------------------------------------- parameters, budget
@pytest.mark.parametrize("kwargs, fragment", [
    ({"epsilon": 0}, "epsilon must be a positive finite number; got 0"),
    ({"epsilon": math.inf}, "epsilon must be a positive finite number; got inf"),
    ({"epsilon": True}, "epsilon must be a positive finite number; got True"),
    ({"n_trees": 0}, "n_trees must be an integer >= 1; got 0"),
    ({"max_depth": 0}, "max_depth must be an integer >= 1; got 0"),
    ({"max_depth": 2.5}, "max_depth must be an integer >= 1; got 2.5"),
    ({"n_candidates": 0}, "n_candidates must be an integer >= 1; got 0"),
    ({"theta": math.nan}, "theta must be None, a real number or -inf; got nan"),
    ({"theta": math.inf}, "theta must be None, a real number or -inf; got inf"),
    ({"bootstrap": "no"}, "bootstrap must be True or False; got 'no'"),
])
def test_bad_parameters_are_named(kwargs, fragment):
    settings = {"epsilon": 1.0, "n_trees": 2, "max_depth": 3, **kwargs}
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        DiffPets(**settings)


def test_budget_split_and_stated_parameters(nursery):
    schema, _, _ = nursery
    mechanism = DiffPets(1.0, 5, 4)
    eps2 = 1.0 / 5 / (2 * 5)
    assert mechanism.epsilon_per_tree == 0.2 and mechanism.epsilon_per_node == pytest.approx(eps2)
    assert mechanism.noise_scale == pytest.approx(1 / eps2)
    assert mechanism.em_coefficient == pytest.approx(eps2 / (2 * GINI_SENSITIVITY))
    stated = mechanism.parameters(schema)
    assert stated["candidates"] == 3  # ceil(sqrt(8))
    assert stated["theta"] == pytest.approx(math.sqrt(2) * 5 / eps2)  # sqrt(2) |C| / eps2
    assert {k: stated[k] for k in ("epsilon", "trees", "depth", "utility", "utility_sensitivity", "bootstrap")} == {
        "epsilon": 1.0, "trees": 5, "depth": 4, "utility": "gini", "utility_sensitivity": 2, "bootstrap": False}
    assert stated["leaf_noise_scale"] == pytest.approx(50.0) and stated["post_processing"] == POST_PROCESSING
    json.dumps(stated)  # what a report carries
    assert DiffPets(1.0, 5, 4, theta=-math.inf).parameters(schema)["theta"] is None
    with pytest.raises(ValueError, match="n_candidates=9 exceeds the schema's 8 attributes"):
        DiffPets(1.0, 5, 4, n_candidates=9).parameters(schema)


def test_bootstrap_is_stated_as_voiding_the_guarantee(nursery):
    schema, X, y = nursery
    mechanism = DiffPets(1.0, 2, 2, bootstrap=True)
    assert mechanism.parameters(schema)["guarantee_caveat"] == BOOTSTRAP_CAVEAT
    assert len(mechanism.fit(schema, X[:500], y[:500], rng=0).trees) == 2


# ---------------------------------------------------------------- utilities
def _gini_reference(left: np.ndarray, y: np.ndarray, n_classes: int) -> np.ndarray:
    out = []
    for mask in left:
        q = 0.0
        for side in (y[mask], y[~mask]):
            if side.size:
                p = np.bincount(side, minlength=n_classes) / side.size
                q -= side.size * (1 - np.sum(p ** 2))
        out.append(q)
    return np.array(out)


def test_gini_utility_matches_a_loop_and_moves_by_at_most_its_sensitivity():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n, k, c = int(rng.integers(0, 30)), int(rng.integers(1, 6)), int(rng.integers(2, 5))
        y, left = rng.integers(0, c, n), rng.random((k, n)) < 0.5
        q = gini_utility(left, y, c)
        assert np.allclose(q, _gini_reference(left, y, c))
        added = gini_utility(np.column_stack([left, rng.random(k) < 0.5]), np.append(y, rng.integers(0, c)), c)
        assert np.all(np.abs(added - q) <= GINI_SENSITIVITY + 1e-9)


def test_variance_utility_is_minus_the_sse_and_moves_by_at_most_one():
    rng = np.random.default_rng(1)
    for _ in range(50):
        n, k = int(rng.integers(0, 30)), int(rng.integers(1, 6))
        y, left = rng.random(n), rng.random((k, n)) < 0.5
        reference = [-sum(((s - s.mean()) ** 2).sum() for s in (y[m], y[~m]) if s.size) for m in left]
        q = variance_utility(left, y)
        assert np.allclose(q, reference)
        added = variance_utility(np.column_stack([left, rng.random(k) < 0.5]), np.append(y, rng.random()))
        assert np.all(np.abs(added - q) <= 1 + 1e-9)  # the tighter bound; the mechanism uses 2


@pytest.mark.parametrize("noise", [SeededNoise(np.random.default_rng(2)), SecureNoise()], ids=["seeded", "secure"])
def test_exponential_choice_follows_the_softmax_without_overflow(noise):
    utility = np.array([1e6, 1e6 - 1.0, 1e6 - 3.0])
    draws = np.bincount([exponential_choice(utility, 0.5, noise) for _ in range(20_000)], minlength=3) / 20_000
    expected = np.exp(0.5 * (utility - utility.max()))
    assert np.allclose(draws, expected / expected.sum(), atol=0.015)


def test_random_splits_stay_inside_the_region_and_subsets_are_uniform():
    attributes = (NumericAttribute("x", 0.0, 1.0), CategoricalAttribute("c", ("a", "b", "c", "d")))
    region = _Region.root(attributes)
    rng = np.random.default_rng(3)
    (left, narrowed), _ = region.children(region.draw_split(0, rng))
    assert isinstance(left, Interval) and 0 < left.high < 1 and narrowed.high[0] == left.high
    seen = {}
    for _ in range(7000):
        split = region.draw_split(1, rng)
        key = tuple(np.flatnonzero(split.subset))
        seen[key] = seen.get(key, 0) + 1
    assert len(seen) == 14 and max(seen.values()) / min(seen.values()) < 1.4  # 2^4 - 2 non-empty proper subsets
    allowed = region.allowed[1].copy()
    allowed[[0, 1, 2]] = False  # one category left: not splittable any more
    assert _Region(region.low, np.array([0.0, np.nan]), (None, allowed)).splittable().size == 0


# ------------------------------------------------------------------ releases
def test_released_trees_validate_and_respect_depth_and_post_processing(nursery_split):
    schema, X, y, _, _ = nursery_split
    release = DiffPets(1.0, 4, 4).fit(schema, X, y, rng=0)
    assert len(release.trees) == 4
    for tree in release.trees:
        Tree(schema, tree.nodes, "counts")  # validates again
        counts = np.stack([n.counts for n in tree.nodes])
        assert tree.depth <= 4 and np.all(counts >= 0) and np.all(counts == np.rint(counts))
        assert all(tree.nodes[i].counts.sum() > 0 for i in tree.leaves)  # zero leaves dropped
    again = DiffPets(1.0, 4, 4).fit(schema, X, y, rng=0)
    assert all(len(a.nodes) == len(b.nodes) and np.array_equal(a.root.counts, b.root.counts)
               for a, b in zip(release.trees, again.trees, strict=False))


def test_splits_use_public_ranges_and_allowed_categories(mixed):
    schema, X, y = mixed
    release = DiffPets(50.0, 2, 5, theta=-math.inf).fit(schema, X, y, rng=1)
    for tree in release.trees:
        for path in tree.paths():
            for a, constraint in path.constraints:
                attr = schema.attributes[a]
                if isinstance(constraint, CategorySet):
                    assert 0 < len(constraint.codes) < attr.size
                else:
                    assert not constraint.clip(attr).is_empty
        assert set(leaf_depths(tree)) == {5}  # theta = -inf: only the depth stops (numeric x is always splittable)


def test_with_a_huge_budget_the_leaves_hold_the_true_counts(mixed):
    schema, X, y = mixed
    tree = DiffPets(1e9, 1, 3).fit(schema, X, y, rng=2).trees[0]
    leaf = tree.apply(X)
    for i in tree.leaves:
        assert np.array_equal(tree.nodes[i].counts, np.bincount(y[leaf == i], minlength=2))
    assert np.array_equal(tree.root.counts, np.bincount(y, minlength=2))


def test_a_tiny_budget_stops_at_the_root(nursery):
    schema, X, y = nursery
    for tree in DiffPets(1e-4, 2, 3).fit(schema, X, y, rng=0).trees:  # theta is about 10^6 rows
        assert len(tree.nodes) == 1


def test_accuracy_on_nursery_is_well_above_the_majority_class(nursery_split) -> None:
    schema, X, y, X_test, y_test = nursery_split
    release = DiffPets(1.0, 10, 4).fit(schema, X, y, rng=0)
    majority = np.bincount(y_test).max() / y_test.size
    for voting in ("majority", "soft"):
        assert (release.predict(X_test, voting) == y_test).mean() > majority + 0.3, voting
    assert np.allclose(release.predict_proba(X_test).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="voting is 'mean'"):
        release.predict(X_test, "mean")  # type: ignore[arg-type]


def test_the_dp_trainer_and_pgen_on_the_release(nursery):
    schema, X, y = nursery
    trees, parameters = train_diffpets(schema, X, y, DP(1.0, 5), 3, np.random.default_rng(0))
    assert len(trees) == 5 and parameters["epsilon"] == 1.0 and parameters["trees"] == 5 and parameters["depth"] == 3
    Xp, yp = pgen_ensemble(trees, scale=1.0, beta=1.0, rng=np.random.default_rng(1))
    assert abs(len(yp) - len(y)) < 0.1 * len(y) and Xp.shape[1] == schema.n_attributes
    assert set(np.unique(yp)) <= set(range(schema.n_classes))


def test_importing_the_module_loads_neither_sklearn_nor_scipy():
    code = ("import sys, modelshare.common.mechanisms.diffpets; "
            "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


# ---------------------------------------------------------------- regression
def test_regression_schema_scales_by_public_bounds():
    schema = RegressionSchema((NumericAttribute("x", 0, 1),), NumericAttribute("t", 2.0, 4.0))
    assert np.allclose(schema.scale(np.array([1.0, 3.0, 5.0])), [0.0, 0.5, 1.0])  # clipped
    assert np.allclose(schema.unscale(np.array([0.25])), [2.5])
    with pytest.raises(SchemaError, match="row 2, column 't'.*finite"):
        schema.scale(np.array([3.0, np.nan]))
    with pytest.raises(SchemaError, match="must have low < high"):
        RegressionSchema((NumericAttribute("x", 0, 1),), NumericAttribute("t", 1.0, 1.0))
    with pytest.raises(SchemaError, match="class column is also listed"):
        RegressionSchema((NumericAttribute("t", 0, 1),), NumericAttribute("t", 0.0, 1.0))
    assert RegressionSchema.from_dict(json.loads(json.dumps(schema.to_dict()))) == schema
    sourced = schema.to_dict()
    sourced["target"]["source"] = "a 0-10 sensory score"
    sourced["attributes"][0]["source"] = "a stated bound"
    assert RegressionSchema.from_dict(sourced) == schema
    assert RegressionSchema.from_dict(sourced).fingerprint == schema.fingerprint
    sourced["target"]["source"] = 10
    with pytest.raises(SchemaError, match=r"'target'\.source must be text"):
        RegressionSchema.from_dict(sourced)


def test_regression_defaults_and_parameters(wine):
    schema, _, _ = wine
    mechanism = DiffPetsRegressor(10.0, 2, 3)
    stated = mechanism.parameters(schema)
    assert stated["candidates"] == 11 and stated["theta"] == pytest.approx(math.sqrt(2) / mechanism.epsilon_per_node)
    assert stated["utility_sensitivity"] == 2 and stated["target"] == {"name": "quality", "type": "numeric",
                                                                       "low": 0.0, "high": 10.0}


def test_regression_trees_release_noisy_count_and_sum(wine):
    schema, X, y = wine
    exact = DiffPetsRegressor(1e9, 1, 3).fit(schema, X, y, rng=0).trees[0]
    leaf = exact.apply(X)
    for i in exact.leaves:  # the target is summed on the public grid of 1/TARGET_GRID: within half a unit per row
        rows = leaf == i
        assert exact.nodes[i].count == rows.sum()
        assert exact.nodes[i].total == pytest.approx(schema.scale(y[rows]).sum(), abs=rows.sum() / (2 * TARGET_GRID))
        assert exact.nodes[i].total * TARGET_GRID == round(exact.nodes[i].total * TARGET_GRID)
    assert np.allclose(exact.predict(X[:5]), [y[leaf == leaf[r]].mean() for r in range(5)], atol=0.01)
    forest = DiffPetsRegressor(0.5, 3, 4).fit(schema, X, y, rng=1)
    predictions = forest.predict(X)
    assert predictions.min() >= 0.0 and predictions.max() <= 10.0


def test_regression_forest_round_trips_through_json(wine):
    schema, X, y = wine
    forest = DiffPetsRegressor(1.0, 2, 3).fit(schema, X, y, rng=2)
    text = json.dumps(forest.to_dict(), allow_nan=False)  # infinite interval ends are written as null
    again = RegressionForest.from_dict(json.loads(text))
    assert np.array_equal(again.predict(X), forest.predict(X))
    assert [len(t.nodes) for t in again.trees] == [len(t.nodes) for t in forest.trees]


def test_malformed_regression_trees_are_refused():
    schema = RegressionSchema((NumericAttribute("x", 0, 1),), NumericAttribute("t", 0.0, 1.0))
    edges = (Edge(Interval(-math.inf, 0.5), 1), Edge(Interval(0.5, math.inf, False, False), 2))
    leaves = [RegressionNode(3.0, 1.0), RegressionNode(4.0, 2.0)]
    RegressionTree(schema, [RegressionNode(7.0, 3.0, 0, edges), *leaves])
    with pytest.raises(TreeError, match="node 0: count and sum .* not the sums of its children's"):
        RegressionTree(schema, [RegressionNode(8.0, 3.0, 0, edges), *leaves])
    with pytest.raises(TreeError, match="node 1: count and sum .* must be finite"):
        RegressionTree(schema, [RegressionNode(7.0, 3.0, 0, edges), RegressionNode(math.nan, 1.0), leaves[1]])
    with pytest.raises(TreeError, match="lies outside the schema range"):
        RegressionTree(schema, [RegressionNode(7.0, 3.0, 0, (Edge(Interval(2.0, 3.0), 1), edges[1])), *leaves])


def test_audit_refuses_a_release_mixing_classification_and_regression_trees():
    """A release is one kind of tree: `audit` names a mix instead of failing inside one of its checks."""
    schema = RegressionSchema((NumericAttribute("x", 0, 1),), NumericAttribute("t", 0.0, 1.0))
    edges = (Edge(Interval(-math.inf, 0.5), 1), Edge(Interval(0.5, math.inf, False, False), 2))
    regression = RegressionTree(schema, [RegressionNode(7.0, 3.0, 0, edges), RegressionNode(3.0, 1.0),
                                         RegressionNode(4.0, 2.0)])
    classes = Schema((NumericAttribute("x", 0, 1),), "label", ("a", "b", "c"))
    classification = Tree(classes, [Node.from_counts(np.array([1.0, 2.0, 3.0]))], disclosure="counts")
    with pytest.raises(TypeError, match="one kind; got RegressionTree, Tree"):
        audit([classification, regression], None)


def test_regression_pgen_draws_rows_in_the_leaves_with_their_means(wine):
    schema, X, y = wine
    forest = DiffPetsRegressor(10.0, 2, 3).fit(schema, X, y, rng=3)
    tree = forest.trees[0]
    Xp, yp = pgen_regression_tree(tree, rows=1000, rng=np.random.default_rng(0))
    leaf = tree.apply(Xp)
    assert len(yp) == 1000 and np.allclose(yp, schema.unscale(tree.values[leaf]))  # the leaf mean, no spread
    assert all(tree.nodes[i].count > 0 for i in np.unique(leaf))  # no row from a leaf with N' <= 0
    assert all(attr.low <= Xp[:, j].min() and Xp[:, j].max() <= attr.high for j, attr in enumerate(schema.attributes))
    _, yf = pgen_regression(forest, scale=2.0, rng=np.random.default_rng(0))
    assert abs(len(yf) - 2 * len(y)) < 0.05 * len(y)
    with pytest.raises(ValueError, match="rows must be non-negative"):
        pgen_regression_tree(tree, rows=-1, rng=np.random.default_rng(0))


def test_a_tree_learned_from_regression_pgen_beats_the_mean_at_epsilon_10(wine):
    """Three random 80/20 splits: CART (depth 5) on the PGEN table of a 2-tree, depth-3 DiffPETs forest."""
    schema, X, y = wine
    ours, mean = [], []
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(y))
        train, test = order[: len(y) * 4 // 5], order[len(y) * 4 // 5:]
        forest = DiffPetsRegressor(10.0, 2, 3).fit(schema, X[train], y[train], rng=seed)
        Xp, yp = pgen_regression(forest, scale=1.0, rng=np.random.default_rng(seed))
        cart = DecisionTreeRegressor(max_depth=5, random_state=0).fit(Xp, yp)
        ours.append(np.sqrt(np.mean((cart.predict(X[test]) - y[test]) ** 2)))
        mean.append(np.sqrt(np.mean((y[train].mean() - y[test]) ** 2)))
    assert np.mean(ours) < np.mean(mean), (ours, mean)
