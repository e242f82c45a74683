"""Privacy pruning: Eq. 1, APT (Sharkey et al. Fig. 4) and Methods 1 and 2 (Wakabayashi et al.)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.federation.wire import tree_from_pb, tree_to_pb
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable, apt, prune_leaves, prune_parents
from modelshare.common.privacy.requirements import CLDiversity, KAnonymity
from modelshare.common.trees.rebuild import eq1_counts
from modelshare.common.trees.tree import CategorySet, Disclosure, Edge, Interval, Node, Tree

# ----------------------------------------------------------------- helpers


def cats(n_attributes: int, n_categories: int, n_classes: int) -> Schema:
    return Schema(
        tuple(CategoricalAttribute(f"A{i}", tuple(f"v{j}" for j in range(n_categories))) for i in range(n_attributes)),
        "cls",
        tuple(f"c{j}" for j in range(n_classes)),
    )


SCHEMA2 = cats(3, 4, 2)
SCHEMA3 = cats(3, 4, 3)


def cs(*codes: int) -> CategorySet:
    return CategorySet(frozenset(codes))


def build(schema: Schema, spec) -> Tree:
    """A tree from a nested spec: a leaf is a tuple of counts, an inner node is
    ``(attribute, [(constraint, child spec), ...])``; inner counts are the sums of their leaves.
    Nodes are numbered in preorder."""
    nodes: list[Node] = []

    def grow(s) -> np.ndarray:
        i = len(nodes)
        nodes.append(None)  # type: ignore[arg-type]  # holds node i's place (preorder) until its children are grown
        if isinstance(s[1], list):
            attribute, children = s
            edges, total = [], np.zeros(schema.n_classes)
            for constraint, child in children:
                edges.append(Edge(constraint, len(nodes)))
                total = total + grow(child)
            node = Node.from_counts(total)
            node.attribute, node.edges = attribute, edges
            nodes[i] = node
            return total
        counts = np.array(s, dtype=float)
        nodes[i] = Node.from_counts(counts)
        return counts

    grow(spec)
    return Tree(schema, nodes)


def child_map(tree: Tree, i: int = 0) -> dict:
    """``{constraint: node}`` for the children of node ``i``."""
    return {e.constraint: tree.nodes[e.child] for e in tree.nodes[i].edges}


def my_eq1(children: list[Node], n_classes: int) -> np.ndarray:
    """Eq. 1 written out class by class."""
    out = []
    for j in range(n_classes):
        own = sum(v.hit for v in children if v.label == j)
        spread = sum(v.miss for v in children if v.label != j) / (n_classes - 1)
        out.append(own + spread)
    return np.array(out)


def assert_inner_nodes_derive_from_children(tree: Tree) -> None:
    """Counts: exact class-by-class sums; hit/miss: Eq. 1 of the children. Nothing else is disclosed."""
    for node in tree.nodes:
        if node.is_leaf:
            continue
        children = [tree.nodes[e.child] for e in node.edges]
        if tree.disclosure == "counts":
            assert node.counts is not None
            np.testing.assert_array_equal(node.counts - np.sum([c.class_counts() for c in children], axis=0), 0.0)
        else:
            assert node.counts is None
            estimate = my_eq1(children, tree.schema.n_classes)
            assert node.label == int(np.argmax(estimate))
            assert math.isclose(node.hit, estimate.max(), abs_tol=1e-9)
            assert math.isclose(node.total, sum(c.total for c in children), abs_tol=1e-9)


def satisfies(node: Node, requirement, disclosure: str) -> bool:
    """Independent check of one released leaf in the form its disclosure allows."""
    if isinstance(requirement, KAnonymity):
        return node.hit + node.miss >= requirement.k
    c, l = requirement.c, requirement.l  # noqa: E741 (the paper's l)
    if disclosure == "counts":
        ranked = sorted(node.class_counts().tolist(), reverse=True)
        return ranked[0] < c * sum(ranked[l - 1 :])
    return node.miss + 1 >= l and node.hit < c * node.miss / (l - 1)


# ---------------------------------------------------------------- Eq. 1


def test_eq1_hand_example():
    # children (class 0, hit 10, miss 4) and (class 1, hit 6, miss 2) over 3 classes:
    # class 0: 10 + 2/2 = 11; class 1: 6 + 4/2 = 8; class 2: 0 + (4 + 2)/2 = 3.
    got = eq1_counts(np.array([0, 1]), np.array([10.0, 6.0]), np.array([4.0, 2.0]), 3)
    np.testing.assert_allclose(got, [11.0, 8.0, 3.0])
    assert got.sum() == 22.0  # the estimate keeps every tuple
    children = [Node(0, 10.0, 4.0), Node(1, 6.0, 2.0)]
    np.testing.assert_allclose(got, my_eq1(children, 3))


def test_eq1_two_children_of_one_class_and_two_classes():
    # two children of class 0 (hit 3, miss 1) and (hit 5, miss 0) over 2 classes: exact
    got = eq1_counts(np.array([0, 0]), np.array([3.0, 5.0]), np.array([1.0, 0.0]), 2)
    np.testing.assert_allclose(got, [8.0, 1.0])
    with pytest.raises(ValueError, match="two classes"):
        eq1_counts(np.array([0]), np.array([1.0]), np.array([0.0]), 1)


# --------------------------------------------------------------------- APT


def test_apt_categorical_merges_fewest_with_smallest_sibling():
    tree = build(SCHEMA2, (0, [(cs(0), (5, 5)), (cs(1), (1, 0)), (cs(2), (20, 20)), (cs(3), (1, 1))]))
    out = apt(tree, KAnonymity(3))
    # {1} (1 tuple) violates and is the smallest violator; on a categorical split any sibling is
    # admissible, and the smallest is {3} (2 tuples): one leaf {1,3} with (2, 1).
    got = {c: n.counts.tolist() for c, n in child_map(out).items()}
    assert got == {cs(0): [5.0, 5.0], cs(2): [20.0, 20.0], cs(1, 3): [2.0, 1.0]}
    assert out.n_leaves == 3 and out.root.counts.tolist() == [27.0, 26.0]
    assert all(satisfies(out.nodes[i], KAnonymity(3), "counts") for i in out.leaves)


def test_apt_numeric_merges_only_interval_neighbours():
    schema = Schema((NumericAttribute("X", 0.0, 100.0),), "cls", ("no", "yes"))
    spans = [
        Interval(-math.inf, 10.0),
        Interval(10.0, 20.0, False, True),
        Interval(20.0, 30.0, False, True),
        Interval(30.0, math.inf, False, False),
    ]
    tree = build(schema, (0, list(zip(spans, [(5, 5), (1, 0), (20, 20), (1, 1)], strict=False))))
    out = apt(tree, KAnonymity(3))
    # (10,20] (1 tuple) is merged with its smaller neighbour (-inf,10], not with (30,inf) which is
    # smaller but not adjacent: (-inf,20] with (6,5). Then (30,inf) (2 tuples) can only merge with
    # its neighbour (20,30]: (20,inf) with (21,21).
    got = {c: n.counts.tolist() for c, n in child_map(out).items()}
    assert got == {
        Interval(-math.inf, 20.0, False, True): [6.0, 5.0],
        Interval(20.0, math.inf, False, False): [21.0, 21.0],
    }
    # the released tree routes rows like the merged intervals
    X = np.array([[0.0], [10.0], [15.0], [20.0], [25.0], [100.0]])
    leaf_of = out.apply(X)
    assert len(set(leaf_of[:4])) == 1 and len(set(leaf_of[4:])) == 1 and leaf_of[0] != leaf_of[5]


def test_apt_node_left_with_one_child_becomes_a_leaf():
    spec = (
        0,
        [
            (cs(0), (10, 10)),
            (cs(1), (1, [(cs(0), (2, 1)), (cs(1, 2, 3), (1, 2))])),
            (cs(2, 3), (3, 3)),
        ],
    )
    tree = build(SCHEMA2, spec)
    out = apt(tree, KAnonymity(4))
    # both children of the A=v1 node hold 3 < 4 tuples: merged into one child, so that node
    # becomes a leaf with (3, 3), which satisfies k=4 at the root's level.
    assert out.depth == 1 and out.n_leaves == 3
    got = {c: n.counts.tolist() for c, n in child_map(out).items()}
    assert got == {cs(0): [10.0, 10.0], cs(1): [3.0, 3.0], cs(2, 3): [3.0, 3.0]}
    assert all(out.nodes[i].attribute is None for i in out.leaves)


def test_apt_collapsed_node_is_checked_again_above():
    spec = (
        0,
        [
            (cs(0), (10, 10)),
            (cs(1), (1, [(cs(0), (1, 0)), (cs(1, 2, 3), (0, 1))])),
            (cs(2, 3), (3, 3)),
        ],
    )
    out = apt(build(SCHEMA2, spec), KAnonymity(4))
    # the A=v1 node collapses to a leaf (1, 1) that still violates k=4; at the root it is the
    # violator and merges with its smallest sibling {2,3} (6 tuples).
    got = {c: n.counts.tolist() for c, n in child_map(out).items()}
    assert got == {cs(0): [10.0, 10.0], cs(1, 2, 3): [4.0, 4.0]}


@pytest.mark.parametrize("requirement", [KAnonymity(5), CLDiversity(3.0, 2)])
def test_apt_root_only_outcome_raises(requirement):
    tree = build(SCHEMA2, (0, [(cs(0), (1, 1)), (cs(1, 2, 3), (2, 0))]))
    with pytest.raises(RequirementUnsatisfiable, match="root"):
        apt(tree, requirement)
    with pytest.raises(RequirementUnsatisfiable):
        apt(tree, requirement, disclosure="hit_miss")


def test_apt_leaves_a_satisfying_tree_untouched():
    tree = build(SCHEMA2, (0, [(cs(0), (5, 5)), (cs(1), (1, [(cs(0), (4, 2)), (cs(1, 2, 3), (3, 3))])),
                               (cs(2, 3), (9, 1))]))
    out = apt(tree, KAnonymity(5))
    assert [p.key for p in out.paths()] == [p.key for p in tree.paths()]
    assert [n.counts.tolist() for n in out.nodes] == [n.counts.tolist() for n in tree.nodes]


def test_apt_under_hit_miss_discloses_eq1_at_inner_nodes():
    # three classes; {2} holds one tuple and merges with the smallest sibling {1} (8 tuples)
    tree = build(SCHEMA3, (0, [(cs(0), (10, 4, 0)), (cs(1), (2, 6, 0)), (cs(2), (0, 0, 1))]))
    out = apt(tree, KAnonymity(3), disclosure="hit_miss")
    assert out.disclosure == "hit_miss" and all(n.counts is None for n in out.nodes)
    got = {c: (n.label, n.hit, n.miss) for c, n in child_map(out).items()}
    # merged leaf: exact counts (2, 6, 1) are known to the owner -> class 1, hit 6, miss 3
    assert got == {cs(0): (0, 10.0, 4.0), cs(1, 2): (1, 6.0, 3.0)}
    # root by Eq. 1: class 0: 10 + 3/2 = 11.5; class 1: 6 + 4/2 = 8; class 2: (4 + 3)/2 = 3.5
    assert (out.root.label, out.root.hit, out.root.miss) == (0, 11.5, 11.5)
    assert_inner_nodes_derive_from_children(out)
    # the exact root (12, 6, 1) would say hit 12: not disclosed
    assert out.root.hit != tree.root.hit


def test_apt_hit_miss_input_merges_by_eq1():
    tree = build(SCHEMA3, (0, [(cs(0), (10, 4, 0)), (cs(1), (2, 6, 0)), (cs(2), (0, 1, 1))])).to_hit_miss()
    out = apt(tree, KAnonymity(3))
    assert out.disclosure == "hit_miss"
    merged = child_map(out)[cs(1, 2)]
    # Eq. 1 of (class 1, hit 6, miss 2) and (class 1, hit 1, miss 1) over 3 classes:
    # class 0: 3/2 = 1.5; class 1: 7; class 2: 1.5
    assert (merged.label, merged.hit, merged.miss) == (1, 7.0, 3.0)
    assert_inner_nodes_derive_from_children(out)


def test_apt_cl_diversity_counts_and_hit_miss_differ():
    # the (10, 9, 1) leaf passes (3,3)-diversity by hit/miss but not exactly
    spec = (0, [(cs(0), (10, 9, 1)), (cs(1), (5, 5, 5)), (cs(2, 3), (4, 4, 4))])
    requirement = CLDiversity(3.0, 3)
    tree = build(SCHEMA3, spec)
    hm = apt(tree, requirement, disclosure="hit_miss")
    assert hm.n_leaves == 3
    exact = apt(tree, requirement, disclosure="counts")
    got = {c: n.counts.tolist() for c, n in child_map(exact).items()}
    # (10,9,1) merges with the smallest sibling (4,4,4): (14,13,5) -> 14 < 3*5 passes
    assert got == {cs(1): [5.0, 5.0, 5.0], cs(0, 2, 3): [14.0, 13.0, 5.0]}
    for out in (hm, exact):
        assert all(satisfies(out.nodes[i], requirement, out.disclosure) for i in out.leaves)


def test_apt_refuses_counts_from_a_hit_miss_tree():
    tree = build(SCHEMA2, (0, [(cs(0), (5, 5)), (cs(1), (5, 5))])).to_hit_miss()
    with pytest.raises(ValueError, match="hit/miss"):
        apt(tree, KAnonymity(2), disclosure="counts")


# ------------------------------------------------------ APT property test

N_CATEGORIES = 4
MAX_DEPTH = 4


@st.composite
def random_trees(draw) -> Tree:
    n_classes = draw(st.integers(2, 4))
    schema = cats(MAX_DEPTH, N_CATEGORIES, n_classes)
    max_depth = draw(st.integers(1, MAX_DEPTH))
    nodes: list[Node] = []

    def grow(depth: int) -> np.ndarray:
        i = len(nodes)
        nodes.append(None)  # type: ignore[arg-type]  # holds node i's place until its children are grown
        if depth == max_depth or (depth > 0 and draw(st.booleans())):
            counts = np.array(draw(st.lists(st.integers(0, 12), min_size=n_classes, max_size=n_classes)), float)
            nodes[i] = Node.from_counts(counts)
            return counts
        branching = draw(st.integers(2, 4))
        order = draw(st.permutations(range(N_CATEGORIES)))
        groups = [{order[g]} for g in range(branching)]
        for code in order[branching:]:
            groups[draw(st.integers(0, branching - 1))].add(code)
        edges, total = [], np.zeros(n_classes)
        for g in groups:
            edges.append(Edge(CategorySet(frozenset(g)), len(nodes)))
            total = total + grow(depth + 1)
        node = Node.from_counts(total)
        node.attribute, node.edges = depth, edges
        nodes[i] = node
        return total

    grow(0)
    return Tree(schema, nodes)


@st.composite
def requirements(draw, n_classes: int):
    if draw(st.booleans()):
        return KAnonymity(draw(st.integers(1, 30)))
    return CLDiversity(float(draw(st.integers(1, 10))), draw(st.integers(2, n_classes)))


def representative_row(path, n_attributes: int) -> np.ndarray:
    """One row inside a path's region (the smallest category of every constraint, 0 elsewhere)."""
    row = np.zeros(n_attributes)
    for a, c in path.constraints:
        row[a] = min(c.codes)
    return row


def check_apt(tree: Tree, requirement, disclosure: Disclosure) -> None:
    try:
        out = apt(tree, requirement, disclosure=disclosure)
    except RequirementUnsatisfiable:
        # never when the input already meets the requirement (no pruning is needed then)
        assert not all(satisfies(tree.nodes[i], requirement, disclosure) for i in tree.leaves)
        return
    assert out.disclosure == disclosure
    assert not out.root.is_leaf
    for i in out.leaves:
        assert satisfies(out.nodes[i], requirement, disclosure), (i, out.nodes[i])
    assert math.isclose(out.root.total, tree.root.total, abs_tol=1e-9)
    assert math.isclose(sum(out.nodes[i].total for i in out.leaves), tree.root.total, abs_tol=1e-9)
    assert out.n_leaves <= tree.n_leaves
    Tree(out.schema, out.nodes, out.disclosure)  # validates
    tree_from_pb(tree_to_pb(out), out.schema)  # survives the wire
    assert_inner_nodes_derive_from_children(out)
    # every original leaf's region lies inside one released leaf, whose size is the sum of the
    # original leaves it took in (class by class when the input has counts)
    rows = np.array([representative_row(p, tree.schema.n_attributes) for p in tree.paths()])
    originals = [tree.nodes[p.leaf] for p in tree.paths()]
    where = out.apply(rows)
    assert set(where.tolist()) == set(out.leaves)
    for leaf in out.leaves:
        taken = [o for o, w in zip(originals, where, strict=False) if w == leaf]
        assert math.isclose(out.nodes[leaf].total, sum(o.total for o in taken), abs_tol=1e-9)
        if disclosure == "counts":
            np.testing.assert_array_equal(out.nodes[leaf].counts, np.sum([o.class_counts() for o in taken], axis=0))
    if all(satisfies(tree.nodes[i], requirement, disclosure) for i in tree.leaves):
        assert [p.key for p in out.paths()] == [p.key for p in tree.paths()]


@settings(max_examples=250, deadline=None, derandomize=True)
@given(data=st.data(), tree=random_trees(), disclosure=st.sampled_from(["counts", "hit_miss"]))
def test_apt_property_on_counts_trees(data, tree, disclosure):
    requirement = data.draw(requirements(tree.schema.n_classes))
    check_apt(tree, requirement, disclosure)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data(), tree=random_trees())
def test_apt_property_on_hit_miss_trees(data, tree):
    requirement = data.draw(requirements(tree.schema.n_classes))
    hm = tree.to_hit_miss()
    try:
        out = apt(hm, requirement)
    except RequirementUnsatisfiable:
        return
    assert out.disclosure == "hit_miss" and not out.root.is_leaf
    for i in out.leaves:
        assert satisfies(out.nodes[i], requirement, "hit_miss")
    assert math.isclose(out.root.total, tree.root.total, abs_tol=1e-9)
    Tree(out.schema, out.nodes, out.disclosure)
    assert_inner_nodes_derive_from_children(out)


# ------------------------------------------------------------- Method 1


def method1_tree() -> Tree:
    """root on A0: v0 -> P on A1: {(3,0), (1,5), (3,1)}; v1 -> Q on A1: {(0,2), (1,1)}; v2,v3 -> (10,2)."""
    return build(
        SCHEMA2,
        (
            0,
            [
                (cs(0), (1, [(cs(0), (3, 0)), (cs(1), (1, 5)), (cs(2, 3), (3, 1))])),
                (cs(1), (1, [(cs(0), (0, 2)), (cs(1, 2, 3), (1, 1))])),
                (cs(2, 3), (10, 2)),
            ],
        ),
    )


@pytest.mark.parametrize("disclosure", ["counts", "hit_miss"])
def test_prune_leaves_removes_small_leaves_and_their_tuples(disclosure):
    tree = method1_tree()
    assert tree.root.total == 29
    out = prune_leaves(tree, 3, disclosure=disclosure)
    assert out.disclosure == disclosure
    # pruned: (3,0) under P and both leaves of Q (so Q goes too): 3 + 4 tuples
    assert all(out.nodes[i].total > 3 for i in out.leaves)
    assert sorted((out.nodes[i].label, out.nodes[i].hit, out.nodes[i].miss) for i in out.leaves) == [
        (0, 3.0, 1.0),
        (0, 10.0, 2.0),
        (1, 5.0, 1.0),
    ]
    assert sorted(out.nodes[i].total for i in out.leaves) == [4.0, 6.0, 12.0]
    assert out.root.total == 29 - 3 - 4
    assert set(child_map(out)) == {cs(0), cs(2, 3)}  # the edge to Q is gone
    assert set(child_map(out, next(e.child for e in out.root.edges if e.constraint == cs(0)))) == {cs(1), cs(2, 3)}
    assert_inner_nodes_derive_from_children(out)
    if disclosure == "counts":
        assert out.root.counts.tolist() == [14.0, 8.0]  # (1,5) + (3,1) + (10,2)


def test_prune_leaves_has_no_back_door():
    tree = method1_tree()
    out = prune_leaves(tree, 3)
    pruned = 3 + 2 + 2
    for node in out.nodes:
        if node.is_leaf:
            continue
        released_children = np.sum([out.nodes[e.child].counts for e in node.edges], axis=0)
        # parent minus released children is exactly zero: no pruned count can be derived
        np.testing.assert_array_equal(node.counts - released_children, [0.0, 0.0])
    assert out.root.total == tree.root.total - pruned
    # the trained root (14+3, 8+4) is not what is released
    assert out.root.counts.tolist() != tree.root.counts.tolist()


def test_prune_leaves_routes_pruned_regions_to_the_parents_remaining_majority():
    tree = method1_tree()
    out = prune_leaves(tree, 3)
    # A0=v0, A1=v0 reached the pruned (3,0) leaf: the trained tree says class 0 there
    # A0=v1 reached the pruned Q subtree
    X = np.array([[0, 0, 0], [0, 1, 0], [0, 2, 0], [1, 0, 0], [1, 3, 0], [2, 0, 0]], dtype=float)
    assert tree.predict(X).tolist() == [0, 1, 0, 1, 0, 0]
    stops = out.apply(X)
    p = next(e.child for e in out.root.edges if e.constraint == cs(0))
    assert stops[0] == p and not out.nodes[p].is_leaf  # stops at its parent
    assert stops[3] == 0 and stops[4] == 0  # Q is gone: stops at the root
    # P's remaining counts are (1,5) + (3,1) = (4,6): class 1, although the trained P (7,6) said 0
    assert out.nodes[p].counts.tolist() == [4.0, 6.0] and tree.nodes[1].label == 0
    # the root's remaining counts are (14, 8): class 0
    assert out.predict(X).tolist() == [1, 1, 0, 0, 0, 0]


def test_prune_leaves_keeps_a_tree_without_small_leaves_and_refuses_an_empty_one():
    tree = method1_tree()
    out = prune_leaves(tree, 0)
    assert [n.counts.tolist() for n in out.nodes] == [n.counts.tolist() for n in tree.nodes]
    with pytest.raises(RequirementUnsatisfiable, match="every leaf"):
        prune_leaves(tree, 12)  # the largest leaf holds 12
    single = prune_leaves(tree, 11, splice=False)  # the paper's Fig. 5: one path left under one-child nodes
    assert [single.nodes[i].counts.tolist() for i in single.leaves] == [[10.0, 2.0]]
    with pytest.raises(RequirementUnsatisfiable, match="root-only"):
        prune_leaves(tree, 11)  # spliced, that path is the root alone


def test_prune_leaves_root_only_tree():
    root = Tree(SCHEMA2, [Node.from_counts(np.array([3.0, 2.0]))])
    assert prune_leaves(root, 4, splice=False).root.counts.tolist() == [3.0, 2.0]
    with pytest.raises(RequirementUnsatisfiable, match="root-only"):
        prune_leaves(root, 4)
    with pytest.raises(RequirementUnsatisfiable):
        prune_leaves(root, 5)


@pytest.mark.parametrize("s", [-1, 1.5, True, "3"])
def test_thresholds_must_be_non_negative_integers(s):
    with pytest.raises(ValueError, match="threshold"):
        prune_leaves(method1_tree(), s)
    with pytest.raises(ValueError, match="threshold"):
        prune_parents(method1_tree(), s)


def test_prune_leaves_refuses_counts_from_a_hit_miss_tree_with_the_right_error():
    hm = method1_tree().to_hit_miss()
    with pytest.raises(ValueError) as info:
        prune_leaves(hm, 1, disclosure="counts")
    assert not isinstance(info.value, RequirementUnsatisfiable)
    assert "counts" in str(info.value)


# ------------------------------------------------------------- Method 2


def fixpoint_tree() -> Tree:
    """root on A0: v0 -> (15,5); else -> P on A1: v0 -> R on A2: {(1,0), (0,1)}; else -> (4,6)."""
    return build(
        SCHEMA2,
        (
            0,
            [
                (cs(0), (15, 5)),
                (cs(1, 2, 3), (1, [(cs(0), (2, [(cs(0), (1, 0)), (cs(1, 2, 3), (0, 1))])), (cs(1, 2, 3), (4, 6))])),
            ],
        ),
    )


@pytest.mark.parametrize("disclosure", ["counts", "hit_miss"])
def test_prune_parents_runs_to_a_fixpoint(disclosure):
    tree = fixpoint_tree()
    # One pass with s=3 turns R into a leaf (1,1) of 2 <= 3 tuples; the fixpoint goes on and turns
    # P into a leaf (5,7).
    out = prune_parents(tree, 3, disclosure=disclosure)
    assert all(out.nodes[i].total > 3 for i in out.leaves)
    assert out.depth == 1 and out.n_leaves == 2
    got = {c: (n.label, n.hit, n.miss) for c, n in child_map(out).items()}
    assert got == {cs(0): (0, 15.0, 5.0), cs(1, 2, 3): (1, 7.0, 5.0)}
    assert out.root.total == tree.root.total == 32  # no tuple is lost
    assert_inner_nodes_derive_from_children(out)
    X = np.array([[1, 0, 0], [1, 0, 1], [1, 2, 2], [0, 3, 3]], dtype=float)
    assert out.predict(X).tolist() == [1, 1, 1, 0]


def test_prune_parents_single_pass_is_not_enough():
    """A leaf of at most s tuples after one pass exists: R's merged leaf below P."""
    tree = fixpoint_tree()
    one_pass = prune_parents(tree, 1)  # s=1 collapses R only: (1,1) holds 2 > 1, a fixpoint
    merged = [one_pass.nodes[i] for i in one_pass.leaves if one_pass.nodes[i].counts.tolist() == [1.0, 1.0]]
    assert len(merged) == 1 and one_pass.depth == 2
    # the same first step at s=3 leaves that 2-tuple leaf, which the fixpoint then removes
    fixed = prune_parents(tree, 3)
    assert all(fixed.nodes[i].total > 3 for i in fixed.leaves)
    assert [1.0, 1.0] not in [fixed.nodes[i].counts.tolist() for i in fixed.leaves]


@pytest.mark.parametrize("disclosure", ["counts", "hit_miss"])
def test_prune_parents_root_only_result(disclosure):
    tree = build(SCHEMA2, (0, [(cs(0), (1, 0)), (cs(1, 2, 3), (0, 2))]))
    out = prune_parents(tree, 2, disclosure=disclosure)
    assert out.root.is_leaf and len(out.nodes) == 1
    assert (out.root.label, out.root.hit, out.root.miss) == (1, 2.0, 1.0)
    with pytest.raises(RequirementUnsatisfiable, match="3 <= s=3"):
        prune_parents(tree, 3)


def test_prune_parents_keeps_a_tree_without_small_leaves():
    tree = fixpoint_tree()
    out = prune_parents(tree, 0)
    assert [n.counts.tolist() for n in out.nodes] == [n.counts.tolist() for n in tree.nodes]


def test_pruning_a_very_deep_tree_needs_no_recursion() -> None:
    """A 2000-deep chain (beyond Python's recursion limit) prunes and rebuilds."""
    depth = 2000
    schema = Schema((NumericAttribute("x", 0.0, float(depth + 1)),), "c", ("a", "b"))
    nodes: list[Node] = []
    for d in range(depth):
        inner = Node.from_counts(np.array([depth - d + 1.0, 1.0]))
        inner.attribute = 0
        inner.edges = [
            Edge(Interval(-math.inf, float(d), False, True), len(nodes) + 1),
            Edge(Interval(float(d), math.inf, False, True), len(nodes) + 2),
        ]
        nodes += [inner, Node.from_counts(np.array([1.0, 0.0]))]
    nodes.append(Node.from_counts(np.array([1.0, 1.0])))
    tree = Tree(schema, nodes)
    assert tree.depth == depth
    pruned = prune_leaves(tree, 1, splice=False)
    assert pruned.n_leaves == 1 and pruned.root.total == 2  # only the deepest leaf (1, 1) holds > 1
    with pytest.raises(RequirementUnsatisfiable, match="root-only"):
        prune_leaves(tree, 1)  # splicing the 2000 one-child nodes leaves the root alone
    collapsed = prune_parents(tree, 1)
    assert collapsed.root.is_leaf and collapsed.root.total == tree.root.total
