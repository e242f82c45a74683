"""Tests of the multiway C4.5-style learner: tree shape, counts, stopping rules, split choice.

The split choice is checked against hand-computed entropies on crafted tables and, on random
tables, against a plain-Python reference of the root split; prediction against a per-row walk.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone

from modelshare.common.data.schema import Attribute, CategoricalAttribute, NumericAttribute, Schema, SchemaError
from modelshare.common.federation.wire import tree_from_pb, tree_to_pb
from modelshare.common.trees.learners.multiway import MultiwayTreeClassifier
from modelshare.common.trees.tree import CategorySet, Interval, Tree


# ------------------------------------------------------------------ helpers
def entropy(labels: np.ndarray | list[int]) -> float:
    """Shannon entropy in bits of a list of labels (reference, plain Python)."""
    n = len(labels)
    return -sum(c / n * math.log2(c / n) for c in Counter(list(labels)).values()) if n else 0.0


def gain_and_split_info(y: np.ndarray, groups: list[np.ndarray]) -> tuple[float, float]:
    """Information gain and split information of partitioning ``y`` into ``groups`` (reference)."""
    n = len(y)
    gain = entropy(y) - sum(len(g) / n * entropy(g) for g in groups)
    split_info = -sum(len(g) / n * math.log2(len(g) / n) for g in groups if len(g))
    return gain, split_info


def split_paths(tree: Tree) -> Iterator[tuple[int, list[int]]]:
    """Each leaf with the split attributes on its path, root first."""
    stack: list[tuple[int, list[int]]] = [(0, [])]
    while stack:
        i, attrs = stack.pop()
        node = tree.nodes[i]
        if node.is_leaf:
            yield i, attrs
        for e in node.edges:
            assert node.attribute is not None
            stack.append((e.child, attrs + [node.attribute]))


def walk(tree: Tree, row: np.ndarray) -> int:
    """Predict one row by following edges one at a time (brute-force reference for predict)."""
    i = 0
    while True:
        node = tree.nodes[i]
        if node.is_leaf:
            return node.label
        value = row[node.attribute]
        for e in node.edges:
            c = e.constraint
            if isinstance(c, CategorySet):
                taken = value in {float(code) for code in c.codes}
            else:
                above = value > c.low or (c.low_closed and value == c.low)
                below = value < c.high or (c.high_closed and value == c.high)
                taken = bool(above and below)
            if taken:
                i = e.child
                break
        else:
            return node.label


def check_released_shape(model: MultiwayTreeClassifier, X: np.ndarray, y: np.ndarray) -> None:
    """Invariants every fitted tree must satisfy, whatever the data and parameters."""
    tree, schema = model.tree_, model.schema
    Tree(schema, tree.nodes, "counts")  # validation passes on the released nodes
    k = schema.n_classes
    stops = tree.apply(X)
    assert all(tree.nodes[i].is_leaf for i in np.unique(stops)), "every training row must reach a leaf"
    for i, node in enumerate(tree.nodes):
        if node.is_leaf:
            np.testing.assert_array_equal(node.counts, np.bincount(y[stops == i], minlength=k))
    leaf_sum = np.sum([tree.nodes[i].class_counts() for i in tree.leaves], axis=0)
    np.testing.assert_array_equal(leaf_sum, tree.root.counts)
    np.testing.assert_array_equal(tree.root.counts, np.bincount(y, minlength=k))
    for _, attrs in split_paths(tree):
        categorical = [a for a in attrs if schema.categorical_mask[a]]
        assert len(categorical) == len(set(categorical)), f"categorical attribute split twice on a path: {attrs}"
    msl = model.min_samples_leaf
    for node in tree.nodes:
        if node.is_leaf:
            continue
        assert node.total >= 2 * msl
        sizes = [tree.nodes[e.child].total for e in node.edges]
        assert node.attribute is not None
        attr = schema.attributes[node.attribute]
        if isinstance(attr, CategoricalAttribute):
            assert [e.constraint for e in node.edges] == [CategorySet(frozenset({c})) for c in range(attr.size)]
            assert sum(s >= msl for s in sizes) >= 2
            for e in node.edges:
                child = tree.nodes[e.child]
                if child.total == 0:
                    assert child.is_leaf and child.label == node.label
        else:
            left, right = (e.constraint for e in node.edges)
            assert isinstance(left, Interval) and isinstance(right, Interval)
            assert (left.low, left.high, left.low_closed, left.high_closed) == (-math.inf, right.low, False, True)
            assert (right.high, right.low_closed) == (math.inf, False)
            assert attr.low <= left.high < attr.high
            assert min(sizes) >= msl


def reference_root_choice(
    schema: Schema, X: np.ndarray, y: np.ndarray, criterion: str, msl: int, min_gain: float
) -> tuple[int, float | None] | None:
    """The root split C4.5 (as specified for the learner) picks, computed per row in plain Python.

    Returns the attribute and, for numeric attributes, the threshold; None when the root is a leaf.
    """
    n = len(y)
    if n < 2 * msl or len(set(y.tolist())) <= 1:
        return None
    candidates = []  # (attribute, gain, split info, threshold)
    for j, attr in enumerate(schema.attributes):
        column = X[:, j]
        if isinstance(attr, CategoricalAttribute):
            groups = [y[column == c] for c in range(attr.size)]
            if sum(len(g) >= msl for g in groups) >= 2:
                candidates.append((j, *gain_and_split_info(y, groups), None))
            continue
        best = None
        values = sorted(set(column.tolist()))
        for low, high in zip(values, values[1:], strict=False):
            t = (low + high) / 2
            groups = [y[column <= t], y[column > t]]
            if min(len(g) for g in groups) < msl:
                continue
            gain, split_info = gain_and_split_info(y, groups)
            if best is None or gain > best[1] + 1e-12:
                best = (j, gain, split_info, t)
        if best is not None:
            candidates.append(best)
    candidates = [c for c in candidates if c[1] >= min_gain]
    if not candidates:
        return None
    if criterion == "info_gain":
        scores = [c[1] for c in candidates]
    else:
        positive = [c[1] for c in candidates if c[1] > 1e-12]
        average = sum(positive) / len(positive) if positive else -math.inf
        scores = [c[1] / c[2] if c[1] >= average - 1e-12 else -math.inf for c in candidates]
    top = max(scores)
    chosen = next(c for c, s in zip(candidates, scores, strict=False) if s >= top - 1e-12)
    return chosen[0], chosen[3]


# ------------------------------------------------------------------ fixtures
def small_categorical() -> tuple[Schema, np.ndarray, np.ndarray]:
    """A weather-like table: ``play`` is yes unless (sunny and humid) or (rainy and windy)."""
    schema = Schema(
        (
            CategoricalAttribute("outlook", ("overcast", "rainy", "sunny", "snowy")),
            CategoricalAttribute("humidity", ("high", "normal")),
            CategoricalAttribute("windy", ("no", "yes")),
        ),
        "play",
        ("no", "yes"),
    )
    rows = [(o, h, w) for o in range(3) for h in range(2) for w in range(2)] * 2  # "snowy" never occurs
    X = np.array(rows, dtype=np.float64)
    no = ((X[:, 0] == 2) & (X[:, 1] == 0)) | ((X[:, 0] == 1) & (X[:, 2] == 1))
    return schema, X, np.where(no, 0, 1).astype(np.int64)


def mixed_table(n: int = 300, seed: int = 0) -> tuple[Schema, np.ndarray, np.ndarray]:
    """Categorical and numeric attributes with a deterministic rule mixing both."""
    schema = Schema(
        (
            CategoricalAttribute("color", ("red", "green", "blue")),
            NumericAttribute("size", 0.0, 10.0),
            CategoricalAttribute("shape", ("circle", "square")),
            NumericAttribute("weight", -5.0, 5.0),
        ),
        "class",
        ("a", "b", "c"),
    )
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [
            rng.integers(0, 3, n),
            np.round(rng.uniform(0, 10, n), 1),
            rng.integers(0, 2, n),
            np.round(rng.uniform(-5, 5, n), 2),
        ]
    ).astype(np.float64)
    y = np.where((X[:, 0] == 0) & (X[:, 1] > 4), 1, 0)
    y = np.where((X[:, 2] == 1) & (X[:, 3] <= -1.5), 2, y)
    return schema, X, y.astype(np.int64)


# --------------------------------------------------------------------- tests
def test_small_categorical_table_gives_valid_tree_with_empty_category_leaves() -> None:
    schema, X, y = small_categorical()
    model = MultiwayTreeClassifier(schema, min_samples_leaf=1).fit(X, y)
    check_released_shape(model, X, y)
    assert np.array_equal(model.predict(X), y)
    assert model.tree_.root.attribute == 0  # outlook decides most of the class
    snowy = model.tree_.nodes[model.tree_.root.edges[3].child]
    assert snowy.is_leaf and snowy.total == 0 and snowy.label == model.tree_.root.label
    np.testing.assert_array_equal(snowy.counts, [0.0, 0.0])
    np.testing.assert_array_equal(model.classes_, [0, 1])
    assert tree_to_pb(tree_from_pb(tree_to_pb(model.tree_), schema)) == tree_to_pb(model.tree_)


def test_mixed_table_gives_valid_tree_and_fits_training_rows() -> None:
    schema, X, y = mixed_table()
    model = MultiwayTreeClassifier(schema, min_samples_leaf=1).fit(X, y)
    check_released_shape(model, X, y)
    assert np.array_equal(model.predict(X), y)
    split_on = {model.tree_.nodes[i].attribute for i in range(len(model.tree_.nodes))} - {None}
    assert {1, 3} <= split_on  # both numeric attributes are used
    for path in model.tree_.paths():  # numeric constraints come out clipped to the schema range
        for a, c in path.constraints:
            if isinstance(c, Interval):
                attribute = schema.attributes[a]
                assert isinstance(attribute, NumericAttribute)
                assert attribute.low <= c.low and c.high <= attribute.high


def test_numeric_attribute_may_be_split_again_on_a_path() -> None:
    schema = Schema((NumericAttribute("x", 0.0, 10.0),), "class", ("a", "b"))
    X = np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])
    y = np.array([0, 0, 1, 1, 0, 0])
    model = MultiwayTreeClassifier(schema, criterion="info_gain", min_samples_leaf=1).fit(X, y)
    check_released_shape(model, X, y)
    assert np.array_equal(model.predict(X), y)
    assert max(len(attrs) for _, attrs in split_paths(model.tree_)) == 2
    first = model.tree_.root.edges[0].constraint
    assert isinstance(first, Interval)
    assert first.high == 2.5  # lowest of the equal-gain thresholds 2.5, 4.5


def test_car_fully_grown_tree_is_exact_and_uses_each_attribute_once_per_path(car) -> None:
    schema, X, y = car
    for criterion in ("gain_ratio", "info_gain"):
        model = MultiwayTreeClassifier(schema, criterion=criterion, min_samples_leaf=1).fit(X, y)
        check_released_shape(model, X, y)
        assert model.score(X, y) == 1.0
        assert model.tree_.root.attribute == schema.index("safety")


@pytest.mark.parametrize("min_samples_leaf", [1, 5, 40])
@pytest.mark.parametrize("max_depth", [None, 1, 3])
def test_stopping_rules_are_respected(car, min_samples_leaf: int, max_depth: int | None) -> None:
    schema, X, y = car
    model = MultiwayTreeClassifier(schema, max_depth=max_depth, min_samples_leaf=min_samples_leaf).fit(X, y)
    check_released_shape(model, X, y)
    if max_depth is not None:
        assert model.tree_.depth <= max_depth


def test_min_gain_stops_splits_that_gain_too_little() -> None:
    schema, X, y = small_categorical()
    model = MultiwayTreeClassifier(schema, min_samples_leaf=1, min_gain=1.5).fit(X, y)
    assert model.tree_.root.is_leaf


def test_gain_and_gain_ratio_choose_differently() -> None:
    # Class 0 0 0 0 1 1 1 1 over three attributes (hand-computed, bits):
    #   id  (8 values, one row each): gain 1,      split info 3,      ratio 0.333
    #   b   groups (4+,1-) (0+,3-):   gain 0.5488, split info 0.9544, ratio 0.5750
    #   c   groups (2,1) (2,3):       gain 0.0488  (pulls the average gain down to 0.5325)
    # info_gain takes `id`; gain_ratio takes `b`, whose gain clears the average.
    schema = Schema(
        (
            CategoricalAttribute("id", tuple("abcdefgh")),
            CategoricalAttribute("b", ("x", "y")),
            CategoricalAttribute("c", ("x", "y")),
        ),
        "class",
        ("n", "p"),
    )
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    X = np.column_stack([np.arange(8), [0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 0, 1, 1, 1]]).astype(np.float64)
    scores = [gain_and_split_info(y, [y[X[:, j] == v] for v in np.unique(X[:, j])]) for j in range(3)]
    assert [round(g, 4) for g, _ in scores] == [1.0, 0.5488, 0.0488]
    assert [round(g / s, 4) for g, s in scores] == [0.3333, 0.575, 0.0511]
    by_gain = MultiwayTreeClassifier(schema, criterion="info_gain", min_samples_leaf=1).fit(X, y)
    by_ratio = MultiwayTreeClassifier(schema, criterion="gain_ratio", min_samples_leaf=1).fit(X, y)
    assert by_gain.tree_.root.attribute == 0
    assert by_ratio.tree_.root.attribute == 1


def test_gain_ratio_ignores_attributes_below_average_gain() -> None:
    # Classes 0 x5, 1 x5. `d` splits one row off: gain 0.1080, ratio 0.2303 (the highest ratio);
    # `b` has four groups (2,1) (1,2) (2,0) (0,2): gain 0.4490, ratio 0.2278. The average gain is
    # 0.2785, so `d` may not compete on ratio and `b` is chosen.
    schema = Schema(
        (CategoricalAttribute("d", ("x", "y")), CategoricalAttribute("b", tuple("wxyz"))), "class", ("n", "p")
    )
    y = np.array([0] * 5 + [1] * 5)
    X = np.column_stack([[0] * 9 + [1], [0, 0, 1, 2, 2, 0, 1, 1, 3, 3]]).astype(np.float64)
    (gd, sd), (gb, sb) = (gain_and_split_info(y, [y[X[:, j] == v] for v in np.unique(X[:, j])]) for j in range(2))
    assert gd / sd > gb / sb and gd < (gd + gb) / 2 <= gb
    model = MultiwayTreeClassifier(schema, criterion="gain_ratio", min_samples_leaf=1, max_depth=1).fit(X, y)
    assert model.tree_.root.attribute == 1


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"criterion": "gini"}, "criterion"),
        ({"criterion": None}, "criterion"),
        ({"max_depth": 0}, "max_depth"),
        ({"max_depth": 2.5}, "max_depth"),
        ({"max_depth": True}, "max_depth"),
        ({"min_samples_leaf": 0}, "min_samples_leaf"),
        ({"min_samples_leaf": "3"}, "min_samples_leaf"),
        ({"min_gain": -0.1}, "min_gain"),
        ({"min_gain": math.nan}, "min_gain"),
    ],
)
def test_invalid_parameters_are_named(params: dict, name: str) -> None:
    schema, X, y = small_categorical()
    model = MultiwayTreeClassifier(schema, **params)  # stored as given, checked in fit
    assert model.get_params()[name] is params[name]
    with pytest.raises(ValueError, match=name) as info:
        model.fit(X, y)
    assert "must be" in str(info.value)


def test_schema_parameter_must_be_a_schema() -> None:
    _, X, y = small_categorical()
    with pytest.raises(ValueError, match="schema"):
        MultiwayTreeClassifier({"attributes": []}).fit(X, y)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("column", "value", "name"),
    [(0, 4.0, "outlook"), (1, 0.5, "humidity"), (2, -1.0, "windy"), (0, math.nan, "outlook")],
)
def test_bad_categorical_codes_name_the_column(column: int, value: float, name: str) -> None:
    schema, X, y = small_categorical()
    X = X.copy()
    X[3, column] = value
    with pytest.raises(SchemaError, match=f"row 4, column '{name}'"):
        MultiwayTreeClassifier(schema).fit(X, y)


@pytest.mark.parametrize("value", [math.nan, math.inf, 11.0])
def test_bad_numeric_values_name_the_column(value: float) -> None:
    schema, X, y = mixed_table(20)
    X[7, 1] = value
    with pytest.raises(SchemaError, match="column 'size'"):
        MultiwayTreeClassifier(schema).fit(X, y)


def test_bad_shapes_and_classes_are_rejected() -> None:
    schema, X, y = small_categorical()
    with pytest.raises(ValueError, match=r"shape \(rows, 3\)"):
        MultiwayTreeClassifier(schema).fit(X[:, :2], y)
    with pytest.raises(ValueError, match="no rows"):
        MultiwayTreeClassifier(schema).fit(X[:0], y[:0])
    with pytest.raises(ValueError, match="y must have shape"):
        MultiwayTreeClassifier(schema).fit(X, y[:-1])
    bad = y.copy()
    bad[0] = 2
    with pytest.raises(SchemaError, match="column 'play'"):
        MultiwayTreeClassifier(schema).fit(X, bad)
    model = MultiwayTreeClassifier(schema).fit(X, y)
    with pytest.raises(ValueError, match=r"shape \(rows, 3\)"):
        model.predict(X[:, :2])


def test_predict_matches_row_by_row_walk(car) -> None:
    for schema, X, y in (car, mixed_table()):
        model = MultiwayTreeClassifier(schema, min_samples_leaf=3).fit(X[::2], y[::2])
        rng = np.random.default_rng(1)
        rows = np.column_stack(
            [
                rng.integers(0, a.size, 400).astype(np.float64)
                if isinstance(a, CategoricalAttribute)
                else rng.uniform(a.low, a.high, 400)
                for a in schema.attributes
            ]
        )
        expected = [walk(model.tree_, row) for row in rows]
        assert model.predict(rows).tolist() == expected


def test_fit_is_deterministic_and_clone_friendly() -> None:
    schema, X, y = mixed_table()
    model = MultiwayTreeClassifier(schema, criterion="info_gain", max_depth=4)
    first = tree_to_pb(model.fit(X, y).tree_)
    again = tree_to_pb(clone(model).fit(X, y).tree_)
    assert first == again


@st.composite
def random_tables(draw: st.DrawFn) -> tuple[Schema, np.ndarray, np.ndarray]:
    """Small tables mixing categorical and numeric attributes, with many ties and absent categories."""
    kinds = draw(st.lists(st.sampled_from(["cat", "num"]), min_size=1, max_size=4))
    n = draw(st.integers(1, 40))
    n_classes = draw(st.integers(2, 3))
    attributes: list[Attribute] = []
    columns = []
    for j, kind in enumerate(kinds):
        if kind == "cat":
            size = draw(st.integers(1, 4))
            attributes.append(CategoricalAttribute(f"c{j}", tuple(f"v{i}" for i in range(size))))
            columns.append(draw(st.lists(st.integers(0, size - 1), min_size=n, max_size=n)))
        else:
            attributes.append(NumericAttribute(f"x{j}", -3.0, 3.0))
            columns.append(draw(st.lists(st.sampled_from([-3.0, -1.5, 0.0, 0.25, 2.0, 3.0]), min_size=n, max_size=n)))
    y = draw(st.lists(st.integers(0, n_classes - 1), min_size=n, max_size=n))
    schema = Schema(tuple(attributes), "class", tuple(f"k{i}" for i in range(n_classes)))
    return schema, np.array(columns, dtype=np.float64).T.reshape(n, len(kinds)), np.array(y, dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(
    table=random_tables(),
    criterion=st.sampled_from(["gain_ratio", "info_gain"]),
    min_samples_leaf=st.integers(1, 3),
    min_gain=st.sampled_from([0.0, 1e-9, 0.05]),
)
def test_random_tables_give_valid_trees_with_the_reference_root_split(
    table: tuple[Schema, np.ndarray, np.ndarray], criterion: str, min_samples_leaf: int, min_gain: float
) -> None:
    schema, X, y = table
    model = MultiwayTreeClassifier(
        schema, criterion=criterion, min_samples_leaf=min_samples_leaf, min_gain=min_gain
    ).fit(X, y)
    check_released_shape(model, X, y)
    root = model.tree_.root
    choice = reference_root_choice(schema, X, y, criterion, min_samples_leaf, min_gain)
    if choice is None:
        assert root.is_leaf
    else:
        attribute, threshold = choice
        assert root.attribute == attribute
        if threshold is not None:
            first = root.edges[0].constraint
            assert isinstance(first, Interval)
            assert first.high == threshold
