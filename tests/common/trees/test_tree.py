"""Tree model: paths with most specific constraints, vectorized predict, validation, JSON form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.federation.wire import tree_from_pb, tree_to_pb
from modelshare.common.trees.tree import CategorySet, Edge, Interval, Node, Tree, TreeError

SCHEMA = Schema(
    (CategoricalAttribute("A", ("a1", "a2", "a3")), NumericAttribute("X", 0.0, 100.0)),
    "cls",
    ("no", "yes"),
)


def leaf(*counts: float) -> Node:
    return Node.from_counts(np.array(counts, dtype=float))


def sample_tree() -> Tree:
    """Root splits A into {a1} / {a2, a3}; the right child splits X at 40, then X again at 20."""
    nodes = [
        leaf(10, 20),
        leaf(6, 1),
        leaf(4, 19),
        leaf(1, 15),  # X <= 40
        leaf(3, 4),  # X > 40
        leaf(0, 9),  # X <= 40 and X <= 20
        leaf(1, 6),  # X <= 40 and X > 20
    ]
    nodes[0].attribute, nodes[0].edges = 0, [Edge(CategorySet(frozenset({0})), 1),
                                             Edge(CategorySet(frozenset({1, 2})), 2)]
    nodes[2].attribute, nodes[2].edges = 1, [Edge(Interval(-math.inf, 40.0), 3),
                                             Edge(Interval(40.0, math.inf, False, False), 4)]
    nodes[3].attribute, nodes[3].edges = 1, [Edge(Interval(-math.inf, 20.0), 5),
                                             Edge(Interval(20.0, math.inf, False, False), 6)]
    return Tree(SCHEMA, nodes)


def test_paths_carry_most_specific_constraints():
    paths = {p.leaf: p for p in sample_tree().paths()}
    assert sorted(paths) == [1, 4, 5, 6]
    assert paths[1].constraints == ((0, CategorySet(frozenset({0}))),)
    # X appears once, as the intersection (20, 40] of X <= 40 and X > 20
    assert paths[6].constraints == ((0, CategorySet(frozenset({1, 2}))), (1, Interval(20.0, 40.0, False, True)))
    # numeric constraints are clipped to the schema range
    assert paths[5].constraint(1) == Interval(0.0, 20.0, True, True)
    assert paths[4].constraint(1) == Interval(40.0, 100.0, False, True)
    assert (paths[6].label, paths[6].hit, paths[6].miss) == (1, 6.0, 1.0)
    assert paths[6].describe(SCHEMA) == "A in {a2, a3} AND X in (20, 40]"


def test_predict_and_apply_route_rows_like_the_paths():
    tree = sample_tree()
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, 3, 5000), rng.uniform(0, 100, 5000)]).astype(float)
    X[:3, 1] = [20.0, 40.0, 0.0]  # boundaries belong to the closed side
    leaf_of = tree.apply(X)
    for p in tree.paths():
        assert np.array_equal(p.mask(X), leaf_of == p.leaf)
    assert leaf_of[0] == 5 and leaf_of[1] in (1, 6)
    labels = np.array([n.label for n in tree.nodes])
    assert np.array_equal(tree.predict(X), labels[leaf_of])


def test_row_no_edge_admits_stops_at_inner_node():
    tree = sample_tree()
    assert tree.apply(np.array([[7.0, 10.0]]))[0] == 0  # category 7 is not on any edge


def test_hit_miss_disclosure():
    hm = sample_tree().to_hit_miss()
    assert hm.disclosure == "hit_miss" and all(n.counts is None for n in hm.nodes)
    p = {p.leaf: p for p in hm.paths()}[1]
    assert (p.label, p.hit, p.miss, p.counts) == (0, 6.0, 1.0, None)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda n: n[2].edges.__setitem__(1, Edge(Interval(40.0, math.inf, False, False), 5)), "more than one parent"),
        (lambda n: n[2].edges.append(Edge(CategorySet(frozenset({0})), 9)), "does not exist"),
        (lambda n: n[2].edges.__setitem__(0, Edge(Interval(-math.inf, 40.0), 1.5)),  # type: ignore[arg-type]  # on purpose
         "does not exist"),
        (lambda n: n.__setitem__(5, Node.from_counts(np.array([-1.0, 10.0]))), "non-negative"),
        (lambda n: n.__setitem__(5, leaf(1, 8)), "children's counts sum"),
        (lambda n: n.__setitem__(5, leaf(0, 8)), "children hold 15 tuples, the node 16"),
        (lambda n: setattr(n[0], "attribute", 1), "needs interval edges"),
        (lambda n: n[0].edges.__setitem__(1, Edge(CategorySet(frozenset({1, 7})), 2)), "categories outside"),
        (lambda n: n[0].edges.__setitem__(1, Edge(CategorySet(frozenset({0, 2})), 2)), "overlap"),
        (lambda n: n[2].edges.__setitem__(1, Edge(Interval(150.0, math.inf, False, False), 4)),
         "outside the schema range"),
        (lambda n: n[2].edges.__setitem__(1, Edge(Interval(30.0, math.inf, False, False), 4)), "overlap"),
        (lambda n: setattr(n[1], "label", 1), "not a majority class"),
        (lambda n: setattr(n[1], "label", 5), "outside 0..1"),
        (lambda n: setattr(n[0], "attribute", 0.0), "not an attribute index"),
    ],
)
def test_validation_rejects_malformed_trees(mutate, message):
    nodes = sample_tree().nodes
    mutate(nodes)
    with pytest.raises(TreeError, match=message):
        Tree(SCHEMA, nodes)


def test_unreachable_nodes_rejected():
    nodes = sample_tree().nodes + [leaf(1, 1)]
    with pytest.raises(TreeError, match="not reachable"):
        Tree(SCHEMA, nodes)


def test_wire_round_trip_keeps_paths_and_counts():
    tree = sample_tree()
    back = tree_from_pb(tree_to_pb(tree), SCHEMA)
    assert [p.key for p in back.paths()] == [p.key for p in tree.paths()]
    assert [n.counts.tolist() for n in back.nodes] == [n.counts.tolist() for n in tree.nodes]
    hm = tree_from_pb(tree_to_pb(tree.to_hit_miss()), SCHEMA)
    assert hm.disclosure == "hit_miss" and hm.nodes[3].hit == 15


def test_shape_properties():
    tree = sample_tree()
    assert tree.n_leaves == 4 and tree.depth == 3 and tree.leaves == [1, 4, 5, 6]
