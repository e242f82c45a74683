"""Uniqueness, homogeneity and background-knowledge attacks on released trees."""

from __future__ import annotations

import numpy as np
import pytest

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.privacy.attacks import (
    AttackCounts,
    AttackReport,
    attack_report,
    ensemble_attack_report,
    leaf_hit_miss,
)
from modelshare.common.trees.tree import CategorySet, Edge, Node, Tree

# classes in schema order: index 0 = "no" (healthy), 1 = "yes"
SCHEMA = Schema(
    (CategoricalAttribute("height", ("h0", "h1", "h2", "h3", "h4")), CategoricalAttribute("age", ("young", "old"))),
    "disease",
    ("no", "yes"),
)


def flat_tree(*leaves: tuple[float, float]) -> Tree:
    """Root on ``height`` with one leaf per category 0..len(leaves)-1; counts are (no, yes)."""
    counts = [np.array(c, dtype=float) for c in leaves]
    nodes = [Node.from_counts(np.sum(counts, axis=0))] + [Node.from_counts(c) for c in counts]
    nodes[0].attribute = 0
    nodes[0].edges = [Edge(CategorySet(frozenset({i})), i + 1) for i in range(len(leaves))]
    return Tree(SCHEMA, nodes)


def table4() -> Tree:
    """Wakabayashi et al. Table 4: leaves (yes 2, no 1), (no 2), (yes 1), (yes 1, no 2)."""
    return flat_tree((1, 2), (2, 0), (0, 1), (2, 1))


def test_table4_by_hand():
    report = attack_report(table4())
    # leaf sizes n = 3, 2, 1, 3; largest class = 2, 2, 1, 2; misses = 1, 0, 0, 1
    # uniqueness: only (yes 1) holds one tuple -> 1 leaf, 1 user
    assert report.uniqueness == AttackCounts(1, 1.0)
    # homogeneity (z > 0): (no 2) and (yes 1) -> 2 leaves, 2 + 1 = 3 users
    assert report.homogeneity == AttackCounts(2, 3.0)
    # b = 1: every leaf has at most one miss -> all 4 leaves fall, exposing 2 + 2 + 1 + 2 = 7 users
    # b = 2: nothing more to break -> still 4 leaves, 7 users
    assert report.background == (AttackCounts(4, 7.0), AttackCounts(4, 7.0))


def test_table4_min_size_excludes_singletons_from_homogeneity():
    report = attack_report(table4(), min_size=2)
    assert report.homogeneity == AttackCounts(1, 2.0)  # only (no 2)
    assert report.uniqueness == AttackCounts(1, 1.0)  # uniqueness is unaffected
    assert report.background == (AttackCounts(4, 7.0), AttackCounts(4, 7.0))
    # min_size 0 or 1 is the paper's z > 0
    assert attack_report(table4(), min_size=0).homogeneity == AttackCounts(2, 3.0)
    # min_size 3: no homogeneous leaf is that large
    assert attack_report(table4(), min_size=3).homogeneity == AttackCounts(0, 0.0)


def test_background_levels_separate_by_misses():
    # sizes 3, 2, 1, 3, 5; misses 1, 0, 0, 1, 2; largest class 2, 2, 1, 2, 3; one empty leaf
    report = attack_report(flat_tree((1, 2), (2, 0), (0, 1), (2, 1), (2, 3)), max_known=3)
    # b = 1: the first four leaves (7 users); the (2, 3) leaf needs two known co-members
    # b = 2 and b = 3: all five leaves, 7 + 3 = 10 users
    assert report.background == (AttackCounts(4, 7.0), AttackCounts(5, 10.0), AttackCounts(5, 10.0))
    assert report.homogeneity == AttackCounts(2, 3.0)
    assert attack_report(table4(), max_known=0).background == ()


def test_empty_leaf_exposes_nobody():
    report = attack_report(flat_tree((0, 0), (3, 4)))
    assert report.uniqueness == AttackCounts(0, 0.0)
    assert report.homogeneity == AttackCounts(0, 0.0)
    assert report.background == (AttackCounts(0, 0.0), AttackCounts(0, 0.0))


def test_disclosures_give_the_same_counts():
    tree = table4()
    assert attack_report(tree.to_hit_miss()) == attack_report(tree)
    hit, miss = leaf_hit_miss(tree.to_hit_miss())
    assert hit.tolist() == [2.0, 2.0, 1.0, 2.0] and miss.tolist() == [1.0, 0.0, 0.0, 1.0]


def test_to_dict_form():
    assert attack_report(table4()).to_dict() == {
        "uniqueness": {"leaves": 1, "users": 1.0},
        "homogeneity": {"leaves": 2, "users": 3.0},
        "background": [{"known": 1, "leaves": 4, "users": 7.0}, {"known": 2, "leaves": 4, "users": 7.0}],
    }


# -------------------------------------------------------------- owner view


def owner_tree() -> Tree:
    """Leaves for height h0, h1, h2 only; rows with h3 or h4 stop at the root.

    The released statistics are large and mixed, so every count below comes from the rows."""
    return flat_tree((10, 10), (5, 5), (7, 7))


def owner_table() -> tuple[np.ndarray, np.ndarray]:
    rows = [
        (0, [0, 0, 0, 1, 1]),  # h0: 3 no, 2 yes -> miss 2
        (1, [1]),  # h1: one tuple -> unique and homogeneous
        (2, [0, 0]),  # h2: 2 no -> homogeneous
        (3, [1, 1, 1, 1, 1]),  # h3: no edge admits it -> stops at the root, counts for no leaf
        (4, [0]),  # h4: likewise
    ]
    X, y = [], []
    for height, labels in rows:
        for i, label in enumerate(labels):
            X.append([height, i % 2])
            y.append(label)
    return np.array(X, dtype=float), np.array(y, dtype=np.int64)


def test_owner_view_counts_the_actual_rows():
    tree = owner_tree()
    X, y = owner_table()
    stops = tree.apply(X)
    assert (stops[y.size - 6 :] == 0).all()  # the h3 and h4 rows stop at the root
    hit, miss = leaf_hit_miss(tree, X, y)
    assert hit.tolist() == [3.0, 1.0, 2.0] and miss.tolist() == [2.0, 0.0, 0.0]
    report = attack_report(tree, X, y)
    # uniqueness: h1 -> 1 leaf, 1 user (the h4 singleton reaches no leaf)
    assert report.uniqueness == AttackCounts(1, 1.0)
    # homogeneity: h1 (1) and h2 (2) -> 2 leaves, 3 users (the 5 homogeneous h3 rows count for nothing)
    assert report.homogeneity == AttackCounts(2, 3.0)
    # b = 1: h1, h2 (1 + 2 users); b = 2: also h0 whose 2 misses are known (+3 users)
    assert report.background == (AttackCounts(2, 3.0), AttackCounts(3, 6.0))
    # the released statistics alone expose nobody
    released = attack_report(tree)
    assert released == AttackReport(AttackCounts(0, 0.0), AttackCounts(0, 0.0),
                                    (AttackCounts(0, 0.0), AttackCounts(0, 0.0)))


def test_owner_view_rows_stopping_at_an_inner_node():
    """A two-level tree: rows that reach the inner node but no edge below it count for no leaf."""
    nodes = [
        Node.from_counts(np.array([4.0, 4.0])),
        Node.from_counts(np.array([2.0, 2.0])),  # inner on age, only 'young' has an edge
        Node.from_counts(np.array([2.0, 2.0])),
        Node.from_counts(np.array([2.0, 2.0])),
    ]
    nodes[0].attribute, nodes[0].edges = 0, [Edge(CategorySet(frozenset({0})), 1),
                                             Edge(CategorySet(frozenset({1, 2, 3, 4})), 3)]
    nodes[1].attribute, nodes[1].edges = 1, [Edge(CategorySet(frozenset({0})), 2)]
    tree = Tree(SCHEMA, nodes)
    X = np.array([[0, 0], [0, 1], [0, 1], [2, 0]], dtype=float)
    y = np.array([1, 0, 0, 1])
    assert tree.apply(X).tolist() == [2, 1, 1, 3]
    report = attack_report(tree, X, y)
    # leaves 2 and 3 each get one row: two unique users; the two old h0 rows count for nothing
    assert report.uniqueness == AttackCounts(2, 2.0)
    assert report.homogeneity == AttackCounts(2, 2.0)
    assert report.background[0] == AttackCounts(2, 2.0)


def test_owner_view_needs_matching_x_and_y():
    X, y = owner_table()
    with pytest.raises(ValueError, match="same length"):
        attack_report(owner_tree(), X, None)
    with pytest.raises(ValueError, match="same length"):
        attack_report(owner_tree(), X, y[:-1])


def test_owner_view_of_a_trained_tree_equals_the_released_statistics(car):
    """For the training table itself, routing rows gives back the leaf counts."""
    from modelshare.common.trees.learners import make_learner

    schema, X, y = car
    tree = make_learner("cart", schema, random_state=0, max_depth=6).fit(X, y).tree_
    assert attack_report(tree, X, y) == attack_report(tree)


def test_an_ensemble_is_attacked_tree_by_tree_and_the_counts_add_up(car):
    from modelshare.common.trees.learners import make_learner

    schema, X, y = car
    a = make_learner("cart", schema, random_state=0, max_depth=4).fit(X, y).tree_
    b = make_learner("cart", schema, random_state=0, max_depth=6).fit(X, y).tree_
    assert ensemble_attack_report([a]) == attack_report(a)
    both, ra, rb = ensemble_attack_report([a, b]), attack_report(a), attack_report(b)
    assert both.homogeneity == AttackCounts(ra.homogeneity.leaves + rb.homogeneity.leaves,
                                            ra.homogeneity.users + rb.homogeneity.users)
    assert [c.leaves for c in both.background] == [x.leaves + z.leaves
                                                   for x, z in zip(ra.background, rb.background, strict=False)]
