"""A pruned release's structure discloses no private value:
no one-child node, no threshold off the public cut points."""

from __future__ import annotations

import math

import numpy as np
import pytest

from modelshare.common.audit.release import audit
from modelshare.common.data.schema import DEFAULT_CELLS, CategoricalAttribute, NumericAttribute, Schema, SchemaError
from modelshare.common.mechanisms.pruning import prune_leaves
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.checks import public_cuts_check, single_child_check
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.learners.public_cuts import index_schema, to_cells

SCHEMA = Schema((NumericAttribute("age", 0.0, 120.0, integer=True), CategoricalAttribute("sex", ("f", "m"))),
                "income", ("low", "high"))


@pytest.fixture(scope="module")
def outlier_table() -> tuple[np.ndarray, np.ndarray]:
    """400 people aged 18-60 whose income follows age, plus one person aged 93 with a high income."""
    rng = np.random.default_rng(7)
    age = rng.integers(18, 61, 400).astype(float)
    sex = rng.integers(0, 2, 400).astype(float)
    y = (age > 40).astype(np.int64) ^ (rng.random(400) < 0.1)
    return np.vstack([np.column_stack([age, sex]), [[93.0, 1.0]]]), np.append(y, 1)


def _thresholds(tree) -> list[float]:
    return sorted({end for node in tree.nodes if node.attribute == 0 for e in node.edges
                   for end in (e.constraint.low, e.constraint.high) if math.isfinite(end)})


def test_the_old_release_located_the_outlier_and_the_audit_now_fails_it(outlier_table):
    """The attack on the old shape: midpoint thresholds of a fully grown tree, Method 1 without splicing,
    leave a one-edge node whose thresholds bracket the pruned person's age."""
    X, y = outlier_table
    trained = make_learner("cart", SCHEMA, random_state=0).fit(X, y).tree_
    old = prune_leaves(trained, 4, splice=False)
    lonely = [n for n in old.nodes if len(n.edges) == 1]
    assert lonely and any(not float(t).is_integer() for t in _thresholds(old))  # e.g. age <= 76.5: between 60 and 93
    report = PrivacyReport(mechanism="prune-leaf", parameters={"disclosure": "counts", "s": 4},
                           guarantee="5-anonymity", requirement="k-anonymity:k=5")
    failed = {c.name for c in audit(old, report).checks if not c.passed}
    assert {"no inner node with one child", "numeric thresholds on public cut points"} <= failed


@pytest.mark.parametrize("mechanism", ["prune-leaf", "prune-parent", "apt"])
def test_a_release_of_the_outlier_table_has_no_one_child_node_and_no_data_midpoint(outlier_table, mechanism):
    X, y = outlier_table
    trained = make_learner("cart", SCHEMA, random_state=0, public_cuts=True).fit(X, y).tree_
    found = release(mechanism, tree=trained, requirement="k-anonymity:k=5", disclosure="counts")
    assert all(len(node.edges) != 1 for node in found.tree.nodes)
    cuts = SCHEMA.attributes[0].cut_points()
    assert all(t in cuts for t in _thresholds(found.tree))  # multiples of 120/256, never 76.5
    assert single_child_check(found.trees).passed and public_cuts_check(found.trees).passed
    assert audit(found.trees, found.report).passed


def test_release_refuses_a_tree_trained_on_midpoints(outlier_table):
    X, y = outlier_table
    trained = make_learner("cart", SCHEMA, random_state=0).fit(X, y).tree_
    with pytest.raises(ValueError, match="public cut point.*public_cuts=True"):
        release("prune-leaf", tree=trained, requirement="k-anonymity:k=5")
    release("none", tree=trained)  # claims nothing, so a midpoint tree may be released as trained


def test_public_cuts_route_every_row_as_the_index_tree_does(outlier_table):
    """Training on cell indices and mapping thresholds back keeps every training row in its node: exact counts."""
    X, y = outlier_table
    learner = make_learner("cart", SCHEMA, random_state=0, public_cuts=True).fit(X, y)
    assert np.array_equal(learner.tree_.apply(X), learner.learner_.tree_.apply(to_cells(SCHEMA, X)))
    leaves = learner.tree_.apply(X)
    for i in learner.tree_.leaves:
        assert np.array_equal(np.bincount(y[leaves == i], minlength=2), learner.tree_.nodes[i].counts)
    assert index_schema(SCHEMA).attributes[0].high == DEFAULT_CELLS - 1


def test_declared_cuts_are_the_only_thresholds_and_are_checked():
    declared = NumericAttribute("age", 0.0, 120.0, cuts=(18.0, 30.0, 45.0, 65.0))
    schema = Schema((declared,), "c", ("a", "b"))
    assert declared.cut_points().tolist() == [18.0, 30.0, 45.0, 65.0]
    assert Schema.from_dict(schema.to_dict()).attributes[0] == declared
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 120, (500, 1))
    y = (X[:, 0] > 50).astype(np.int64)
    tree = make_learner("multiway", schema, public_cuts=True).fit(X, y).tree_
    assert set(_thresholds(tree)) <= {18.0, 30.0, 45.0, 65.0} and _thresholds(tree)
    for bad in [(30.0, 18.0), (0.0, 50.0), (50.0, 120.0)]:
        with pytest.raises(ValueError, match="strictly"):
            NumericAttribute("age", 0.0, 120.0, cuts=bad)


def _shape(node) -> tuple[object, ...]:
    """A node's label, statistics, attribute and edges, comparable with ``==``."""
    counts = None if node.counts is None else node.counts.tolist()
    return (node.label, node.hit, node.miss, counts, node.attribute,
            [(e.constraint.canonical(), e.child) for e in node.edges])


@pytest.mark.parametrize("learner", ["admissible", "multiway", "cart"])
def test_a_table_fed_in_chunks_grows_the_tree_of_the_whole_table(outlier_table, learner):
    """`fit_chunks` keeps only each chunk's cell codes (or, for a learner on float rows, its cells) and grows
    the tree `fit` grows on the rows stacked; a bad value names its row in the whole table."""
    X, y = outlier_table
    whole = make_learner(learner, SCHEMA, public_cuts=True, random_state=0).fit(X, y).tree_
    chunked = make_learner(learner, SCHEMA, public_cuts=True, random_state=0)
    chunked.fit_chunks((X[start:start + 64], y[start:start + 64]) for start in range(0, X.shape[0], 64))
    assert [_shape(node) for node in chunked.tree_.nodes] == [_shape(node) for node in whole.nodes]
    bad = X.copy()
    bad[130, 0] = 121.0  # outside age's public range [0, 120], in the third chunk
    with pytest.raises(SchemaError, match="schema range") as raised:
        make_learner(learner, SCHEMA, public_cuts=True).fit_chunks(
            (bad[start:start + 64], y[start:start + 64]) for start in range(0, X.shape[0], 64))
    assert (raised.value.row, raised.value.column) == (131, "age")
    with pytest.raises(ValueError, match="no row"):
        make_learner(learner, SCHEMA, public_cuts=True).fit_chunks(iter(()))
