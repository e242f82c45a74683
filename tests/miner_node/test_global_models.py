"""Global models registry, mixed naive Bayes, the rule learner and the comparison measures."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm
from sklearn.naive_bayes import CategoricalNB, GaussianNB

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.common.trees.metrics import accuracy, class_match, path_match
from modelshare.common.trees.tree import CategorySet, Edge, Interval, Node, Tree
from modelshare.miner_node import global_models
from modelshare.miner_node.global_models import (
    DEFAULT_TREE_PARAMS,
    GLOBAL_MODELS,
    MixedNaiveBayes,
    fit_global_models,
    make_global_model,
)
from modelshare.miner_node.rules import Rule, RuleListClassifier, generalize, laplace

# --------------------------------------------------------------------------- fixtures

MIXED = Schema(
    (
        CategoricalAttribute("color", ("red", "green", "blue")),
        NumericAttribute("size", 0.0, 10.0),
        CategoricalAttribute("noise", ("a", "b")),
        NumericAttribute("weight", 0.0, 1.0),
    ),
    "class",
    ("no", "yes", "maybe"),
)


def mixed_table(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `MIXED` labelled by a learnable rule: yes iff blue, or red and size > 5."""
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [rng.integers(0, 3, n), rng.uniform(0, 10, n), rng.integers(0, 2, n), rng.uniform(0, 1, n)]
    ).astype(np.float64)
    y = (((X[:, 0] == 0) & (X[:, 1] > 5)) | (X[:, 0] == 2)).astype(np.int64)
    return X, y


# ------------------------------------------------------------------- registry models


@pytest.mark.parametrize("name", sorted(GLOBAL_MODELS))
def test_registry_model_learns_a_mixed_rule(name: str) -> None:
    X, y = mixed_table(500, seed=1)
    X_test, y_test = mixed_table(300, seed=2)
    model = make_global_model(name, MIXED, random_state=0).fit(X, y)
    predictions = model.predict(X_test)
    assert predictions.shape == y_test.shape
    assert accuracy(y_test, predictions) >= 0.9


@pytest.mark.parametrize("name", sorted(GLOBAL_MODELS))
def test_registry_model_predicts_only_classes_seen_in_training(name: str) -> None:
    X, y = mixed_table(300, seed=3)
    y = np.where(y == 1, 2, 0)  # classes 0 and 2 of three; "yes" never occurs
    model = make_global_model(name, MIXED, random_state=0).fit(X, y)
    X_test, y_test = mixed_table(200, seed=4)
    predictions = model.predict(X_test)
    assert set(np.unique(predictions)) <= {0, 2}
    assert accuracy(np.where(y_test == 1, 2, 0), predictions) >= 0.9


def test_every_spec_has_a_one_line_description() -> None:
    for name, spec in GLOBAL_MODELS.items():
        assert spec.name == name
        assert spec.description and "\n" not in spec.description


def test_unknown_model_name_lists_known_names() -> None:
    with pytest.raises(ValueError) as excinfo:
        make_global_model("svm", MIXED, random_state=0)
    for name in GLOBAL_MODELS:
        assert name in str(excinfo.value)
    with pytest.raises(ValueError, match="decision-tree"):
        fit_global_models(["rules", "svm"], *mixed_table(50, seed=0), MIXED, random_state=0)


def test_decision_tree_takes_default_params_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = make_global_model("decision-tree", MIXED, random_state=7)
    assert isinstance(tree, CartTreeClassifier)
    assert tree.min_samples_leaf == DEFAULT_TREE_PARAMS.get("min_samples_leaf", 1)
    assert tree.random_state == 7
    overridden = make_global_model("decision-tree", MIXED, random_state=0, min_samples_leaf=11)
    assert isinstance(overridden, CartTreeClassifier) and overridden.min_samples_leaf == 11
    monkeypatch.setitem(global_models.DEFAULT_TREE_PARAMS, "max_depth", 3)
    capped = make_global_model("decision-tree", MIXED, random_state=0)
    assert isinstance(capped, CartTreeClassifier) and capped.max_depth == 3


def test_fit_global_models_fits_each_name_in_order() -> None:
    X, y = mixed_table(200, seed=5)
    fitted = fit_global_models(
        ["rules", "naive-bayes", "rules"], X, y, MIXED, random_state=0, params={"rules": {"max_depth": 2}}
    )
    assert list(fitted) == ["rules", "naive-bayes"]
    rules = fitted["rules"]
    assert isinstance(rules, RuleListClassifier) and rules.max_depth == 2
    assert all(m.predict(X).shape == y.shape for m in fitted.values())
    with pytest.raises(ValueError, match="random-forest"):
        fit_global_models(["rules"], X, y, MIXED, random_state=0, params={"random-forest": {}})


def test_models_reject_tables_that_do_not_fit_the_schema() -> None:
    X, y = mixed_table(20, seed=0)
    for name in ("decision-tree", "naive-bayes", "rules"):
        with pytest.raises(ValueError, match="X must have shape"):
            make_global_model(name, MIXED, random_state=0).fit(X[:, :3], y)
        with pytest.raises(ValueError, match="column .class.*class indices must be integers"):
            make_global_model(name, MIXED, random_state=0).fit(X, y + 5)


# ----------------------------------------------------------------- mixed naive Bayes


def test_mixed_naive_bayes_equals_categorical_nb_on_categorical_table() -> None:
    schema = Schema(
        (CategoricalAttribute("a", ("x", "y", "z")), CategoricalAttribute("b", ("p", "q"))), "c", ("n", "y")
    )
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, 2, 80), rng.integers(0, 2, 80)]).astype(np.float64)  # "z" unseen
    y = (X[:, 0] + rng.integers(0, 2, 80) > 1).astype(np.int64)
    X_test = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    ours = MixedNaiveBayes(schema).fit(X, y)
    reference = CategoricalNB(alpha=1.0, min_categories=np.array([3, 2])).fit(X, y)
    np.testing.assert_array_equal(ours.predict(X_test), reference.predict(X_test))
    np.testing.assert_array_equal(ours.predict_joint_log_proba(X_test), reference.predict_joint_log_proba(X_test))
    np.testing.assert_allclose(ours.predict_proba(X_test), reference.predict_proba(X_test), rtol=1e-12)


def test_mixed_naive_bayes_equals_gaussian_nb_on_numeric_table() -> None:
    schema = Schema((NumericAttribute("u", -5.0, 5.0), NumericAttribute("v", 0.0, 3.0)), "c", ("n", "y", "m"))
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 90)
    X = np.column_stack([rng.normal(y - 1.0, 1.0), rng.uniform(0, 3, 90)]).clip(-5, 5)
    ours = MixedNaiveBayes(schema).fit(X, y)
    reference = GaussianNB().fit(X, y)
    np.testing.assert_array_equal(ours.predict(X), reference.predict(X))
    np.testing.assert_array_equal(ours.predict_joint_log_proba(X), reference.predict_joint_log_proba(X))
    np.testing.assert_allclose(ours.predict_proba(X), reference.predict_proba(X), rtol=1e-9, atol=1e-15)


def test_mixed_naive_bayes_is_naive_bayes_over_all_columns() -> None:
    """The combined posterior equals prior times every column's likelihood, computed by hand."""
    X, y = mixed_table(150, seed=6)
    X_test, _ = mixed_table(40, seed=7)
    model = MixedNaiveBayes(MIXED).fit(X, y)
    cat, num = model.categorical_, model.gaussian_
    assert cat is not None and num is not None
    joint = np.tile(model.class_log_prior_, (len(X_test), 1))
    for k, column in enumerate((0, 2)):
        joint += cat.feature_log_prob_[k][:, X_test[:, column].astype(int)].T
    for k, column in enumerate((1, 3)):
        joint += norm.logpdf(X_test[:, [column]], num.theta_[:, k], np.sqrt(num.var_[:, k]))
    expected = joint - np.logaddexp.reduce(joint, axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict_log_proba(X_test), expected, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------- rule learner


def first_match(rules: list[Rule], default: int, X: np.ndarray) -> np.ndarray:
    """Reference prediction: for each row, the first rule whose mask admits it."""
    masks = np.array([rule.mask(X) for rule in rules]).reshape(len(rules), len(X))
    labels = np.array([rule.label for rule in rules] + [default])
    first = np.where(masks.any(axis=0), masks.argmax(axis=0), len(rules))
    return labels[first]


@pytest.mark.parametrize("seed", [0, 1])
def test_rule_list_predictions_are_first_matching_rule(seed: int) -> None:
    X, y = mixed_table(400, seed=seed)
    flip = np.random.default_rng(seed).random(len(y)) < 0.1  # noise so rules overlap and conflict
    y = np.where(flip, 1 - y, y)
    model = RuleListClassifier(MIXED, min_samples_leaf=3, random_state=0).fit(X, y)
    X_test, _ = mixed_table(300, seed=seed + 10)
    np.testing.assert_array_equal(model.predict(X_test), first_match(model.rules_, model.default_class_, X_test))
    laplaces = [rule.laplace for rule in model.rules_]
    assert laplaces == sorted(laplaces, reverse=True)
    keys = [tuple((a, c.canonical()) for a, c in rule.conditions) for rule in model.rules_]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generalization_never_lowers_laplace_and_stops_at_a_local_optimum(seed: int) -> None:
    X, y = mixed_table(300, seed=seed)
    y = np.where(np.random.default_rng(seed).random(len(y)) < 0.15, 1 - y, y)
    tree = CartTreeClassifier(MIXED, min_samples_leaf=3, random_state=0).fit(X, y).tree_
    n_classes = MIXED.n_classes

    def stats(conditions: tuple, label: int) -> tuple[int, int]:
        covered = Rule(conditions, label, 0, 0, 0.0).mask(X)
        return int(covered.sum()), int((covered & (y == label)).sum())

    shortened = 0
    for conditions, label in ((p.constraints, p.label) for p in tree.paths()):
        covered, correct = stats(conditions, label)
        rule = generalize(conditions, label, X, y, n_classes)
        shortened += len(rule.conditions) < len(conditions)
        assert set(rule.conditions) <= set(conditions) and rule.label == label
        assert (rule.covered, rule.correct) == stats(rule.conditions, label)
        assert rule.laplace == laplace(rule.correct, rule.covered, n_classes)
        assert rule.laplace >= laplace(correct, covered, n_classes)
        for dropped in rule.conditions:
            fewer = tuple(c for c in rule.conditions if c != dropped)
            wider_covered, wider_correct = stats(fewer, label)
            assert laplace(wider_correct, wider_covered, n_classes) < rule.laplace
    assert shortened > 0  # the noisy tree has conditions worth dropping, so the check is not vacuous


def test_tree_path_rules_cover_each_training_row_exactly_once() -> None:
    X, y = mixed_table(300, seed=8)
    tree = CartTreeClassifier(MIXED, min_samples_leaf=5, random_state=0).fit(X, y).tree_
    rules = [Rule(p.constraints, p.label, 0, 0, 0.0) for p in tree.paths()]
    masks = np.array([rule.mask(X) for rule in rules])
    np.testing.assert_array_equal(masks.sum(axis=0), 1)
    np.testing.assert_array_equal(first_match(rules, 0, X), tree.predict(X))


def test_rule_describe_is_readable() -> None:
    car = Schema(
        (
            CategoricalAttribute("safety", ("low", "med", "high")),
            CategoricalAttribute("persons", ("2", "4", "more")),
            NumericAttribute("price", 0.0, 100.0),
        ),
        "class",
        ("unacc", "acc"),
    )
    rule = Rule(((0, CategorySet(frozenset({0}))), (1, CategorySet(frozenset({1, 2})))), 0, 100, 97, 0.9706)
    assert rule.describe(car) == "IF safety = low AND persons in {4, more} THEN unacc (laplace 0.97)"
    bounded = Rule(((2, Interval(10.5, 20.0)),), 1, 3, 3, 0.8)
    assert bounded.describe(car) == "IF 10.5 < price <= 20 THEN acc (laplace 0.80)"
    assert Rule(((2, Interval(high=7.25)),), 1, 3, 3, 0.8).describe(car).startswith("IF price <= 7.25 THEN")
    assert Rule((), 0, 3, 3, 0.8).describe(car) == "IF TRUE THEN unacc (laplace 0.80)"


def test_rule_list_describe_ends_with_default() -> None:
    X, y = mixed_table(200, seed=9)
    model = RuleListClassifier(MIXED, random_state=0).fit(X, y)
    lines = model.describe().splitlines()
    assert len(lines) == len(model.rules_) + 1
    assert all(line.startswith("IF ") and " THEN " in line for line in lines[:-1])
    assert lines[-1] == f"ELSE {MIXED.classes[model.default_class_]}"


# --------------------------------------------------------------------------- metrics


def test_accuracy_and_class_match_hand_examples() -> None:
    assert accuracy(np.array([0, 1, 1, 2]), np.array([0, 1, 2, 2])) == 0.75
    assert class_match(np.array([0, 1, 2, 1, 0]), np.array([0, 2, 2, 1, 1])) == 0.6


def test_metrics_name_the_bad_argument() -> None:
    with pytest.raises(ValueError, match="y_pred"):
        accuracy(np.array([0, 1]), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="pred_a"):
        class_match(np.zeros((2, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="pred_b"):
        class_match(np.zeros(3), np.array([]))
    with pytest.raises(ValueError, match="tree_b"):
        path_match(tree_a(), "not a tree")  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=40))
def test_class_match_is_symmetric_fraction(pairs: list[tuple[int, int]]) -> None:
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    value = class_match(a, b)
    assert value == class_match(b, a)
    assert 0.0 <= value <= 1.0
    assert math.isclose(value * len(pairs), sum(p == q for p, q in pairs))
    assert class_match(a, a) == 1.0


# Hand-built trees over a small mixed schema for path match.
SMALL = Schema(
    (CategoricalAttribute("color", ("red", "green", "blue")), NumericAttribute("size", 0.0, 10.0)),
    "class",
    ("no", "yes"),
)


def leaf(no: float, yes: float) -> Node:
    return Node.from_counts(np.array([no, yes]))


def split(attribute: int, counts: tuple[float, float], edges: list[Edge]) -> Node:
    node = leaf(*counts)
    node.attribute, node.edges = attribute, edges
    return node


def color_then_size(red: tuple[float, float], threshold: float, small: tuple, large: tuple,
                    low: float = -math.inf) -> Tree:
    """color: red -> leaf; green/blue -> size <= threshold | size > threshold."""
    gb = (small[0] + large[0], small[1] + large[1])
    root = (red[0] + gb[0], red[1] + gb[1])
    return Tree(
        SMALL,
        [
            split(0, root, [Edge(CategorySet(frozenset({0})), 1), Edge(CategorySet(frozenset({1, 2})), 2)]),
            leaf(*red),
            split(1, gb, [Edge(Interval(low, threshold, low == 0.0, True), 3), Edge(Interval(threshold), 4)]),
            leaf(*small),
            leaf(*large),
        ],
    )


def tree_a() -> Tree:
    # paths: {red -> yes}, {green/blue, size in [0, 5] -> no}, {green/blue, size in (5, 10] -> yes}
    return color_then_size(red=(0, 3), threshold=5.0, small=(4, 0), large=(1, 2))


def test_path_match_of_a_tree_with_itself_is_one() -> None:
    assert path_match(tree_a(), tree_a()) == 1.0
    assert path_match(tree_a(), tree_a().to_hit_miss()) == 1.0


def test_path_match_of_trees_on_different_attributes_is_zero() -> None:
    by_size = Tree(SMALL, [split(1, (4, 5), [Edge(Interval(high=5.0), 1), Edge(Interval(5.0), 2)]),
                           leaf(4, 0), leaf(0, 5)])
    assert path_match(tree_a(), by_size) == 0.0
    assert path_match(by_size, tree_a()) == 0.0


def test_path_match_hand_computed_fractions() -> None:
    # Same constraints, but the red leaf now predicts "no": 2 shared paths of 4 distinct.
    other_class = color_then_size(red=(2, 1), threshold=5.0, small=(4, 0), large=(1, 2))
    assert path_match(tree_a(), other_class) == pytest.approx(2 / 4)
    # Threshold 4 instead of 5: only the red path is shared, 1 of 5 distinct.
    other_threshold = color_then_size(red=(0, 3), threshold=4.0, small=(4, 0), large=(1, 2))
    assert path_match(tree_a(), other_threshold) == pytest.approx(1 / 5)
    # (-inf, 5] and [0, 5] are the same constraint once clipped to the schema range.
    closed = color_then_size(red=(0, 3), threshold=5.0, small=(4, 0), large=(1, 2), low=0.0)
    assert path_match(tree_a(), closed) == 1.0


def test_path_match_compares_numeric_intervals_by_the_reference_values_they_admit() -> None:
    # Reference rows whose sizes are 1, 3, 5, 7, 9: size <= 5 and size <= 5.3 admit the same
    # sizes {1, 3, 5}, so a threshold moved within the gap (what re-learning from pseudo-data
    # does) leaves the path the same, while comparing bounds digit for digit shares only red.
    values = np.array([[0, 1.0], [1, 3.0], [2, 5.0], [0, 7.0], [1, 9.0]])
    moved = color_then_size(red=(0, 3), threshold=5.3, small=(4, 0), large=(1, 2))
    assert path_match(tree_a(), moved) == pytest.approx(1 / 5)
    assert path_match(tree_a(), moved, values=values) == 1.0
    assert path_match(tree_a(), tree_a(), values=values) == 1.0
    # Threshold 4: size <= 4 admits {1, 3}, not {1, 3, 5}; by hand, paths a = {red: yes,
    # gb & {1,3,5}: no, gb & {7,9}: yes}, b = {red: yes, gb & {1,3}: no, gb & {5,7,9}: yes}:
    # 1 shared of 5 distinct.
    crossed = color_then_size(red=(0, 3), threshold=4.0, small=(4, 0), large=(1, 2))
    assert path_match(tree_a(), crossed, values=values) == pytest.approx(1 / 5)
    # Moved within the gap and the red leaf's class flipped: 2 shared of 4 distinct.
    flipped = color_then_size(red=(2, 1), threshold=5.3, small=(4, 0), large=(1, 2))
    assert path_match(tree_a(), flipped, values=values) == pytest.approx(2 / 4)
    with pytest.raises(ValueError, match="2 columns"):
        path_match(tree_a(), moved, values=np.zeros((3, 3)))


def test_path_match_compares_integer_intervals_by_the_whole_numbers_they_admit() -> None:
    counted = Schema((SMALL.attributes[0], NumericAttribute("size", 0.0, 10.0, integer=True)), "class", SMALL.classes)

    def tree(threshold: float) -> Tree:
        return Tree(counted, [split(1, (4, 5), [Edge(Interval(high=threshold), 1), Edge(Interval(threshold), 2)]),
                              leaf(4, 0), leaf(0, 5)])

    # size <= 5, size <= 5.5 and size <= 5.9 all admit 0..5 (and the rest 6..10): the same two paths.
    assert path_match(tree(5.0), tree(5.5)) == 1.0
    assert path_match(tree(5.5), tree(5.9)) == 1.0
    # size <= 6.5 admits 0..6: no path shared, 0 of 4.
    assert path_match(tree(5.5), tree(6.5)) == 0.0


def test_path_match_rejects_trees_over_different_schemas() -> None:
    renamed = Schema(SMALL.attributes, "label", SMALL.classes)
    single = Tree(renamed, [leaf(1, 0)])
    with pytest.raises(ValueError, match="different schema"):
        path_match(tree_a(), single)
