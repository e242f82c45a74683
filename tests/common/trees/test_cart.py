"""CART via scikit-learn converts exactly into a modelshare Tree."""

from __future__ import annotations

import numpy as np
import pytest

from modelshare.common.data.schema import SchemaError
from modelshare.common.params import ParameterError
from modelshare.common.trees.learners import CartTreeClassifier, make_learner


@pytest.mark.parametrize("encoding", ["ordinal", "onehot"])
@pytest.mark.parametrize("params", [{}, {"max_depth": 4}, {"min_samples_leaf": 20}])
def test_converted_tree_predicts_like_sklearn_on_every_row(nursery, encoding, params):
    schema, X, y = nursery
    model = CartTreeClassifier(schema, categorical_encoding=encoding, random_state=0, **params).fit(X, y)
    expected = model.estimator_.predict(model.features(X))
    assert np.array_equal(model.predict(X), expected)
    assert model.tree_.n_leaves == model.estimator_.get_n_leaves()


def test_exact_on_mixed_numeric_data_and_uniform_probes(mixed):
    schema, X, y = mixed
    model = CartTreeClassifier(schema, random_state=0).fit(X, y)
    rng = np.random.default_rng(1)
    probe = np.column_stack([rng.integers(0, 3, 20000), rng.uniform(0, 10, 20000), rng.uniform(-1, 1, 20000)])
    probe = np.vstack([X, probe.astype(float)])
    assert np.array_equal(model.predict(probe), model.estimator_.predict(probe))


def test_leaf_counts_are_the_training_rows_per_leaf(car):
    schema, X, y = car
    model = CartTreeClassifier(schema, min_samples_leaf=3, random_state=0).fit(X, y)
    leaf_of = model.tree_.apply(X)
    for i in model.tree_.leaves:
        counts = np.bincount(y[leaf_of == i], minlength=schema.n_classes)
        assert np.array_equal(model.tree_.nodes[i].counts, counts)
    assert model.tree_.root.total == len(y)


def test_categorical_edges_hold_only_reachable_categories(car):
    schema, X, y = car
    tree = CartTreeClassifier(schema, random_state=0).fit(X, y).tree_
    for path in tree.paths():
        rows = path.mask(X)
        for j, constraint in path.constraints:
            if j in np.flatnonzero(schema.categorical_mask):
                # every category the path allows is one the edge chain allowed; never empty
                assert constraint.codes and set(np.unique(X[rows, j]).astype(int)) <= set(constraint.codes)


def test_absent_classes_get_zero_counts(car):
    schema, X, y = car
    keep = y != 3
    tree = CartTreeClassifier(schema, random_state=0).fit(X[keep], y[keep]).tree_
    assert tree.root.counts[3] == 0 and tree.root.total == keep.sum()


def test_parameters_validated_with_their_names(car):
    schema, X, y = car
    with pytest.raises(ParameterError, match="max_depth"):
        CartTreeClassifier(schema, max_depth=0).fit(X, y)
    with pytest.raises(ParameterError, match="categorical_encoding"):
        CartTreeClassifier(schema, categorical_encoding="binary").fit(X, y)
    with pytest.raises(SchemaError, match="column 'buying'"):
        CartTreeClassifier(schema).fit(np.where(X == 0, 9, X), y)
    with pytest.raises(ValueError, match="unknown learner"):
        make_learner("c5", schema)


def test_seeded_fit_is_reproducible(nursery):
    schema, X, y = nursery
    a = CartTreeClassifier(schema, random_state=3).fit(X, y).tree_
    b = CartTreeClassifier(schema, random_state=3).fit(X, y).tree_
    assert [p.key for p in a.paths()] == [p.key for p in b.paths()]
