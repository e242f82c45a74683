"""Auditing a release from the released tree alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from modelshare.common.audit.release import audit
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.federation.model_io import read_model, write_release
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable
from modelshare.common.mechanisms.release import release as release_model
from modelshare.common.privacy.attacks import AttackCounts, attack_report
from modelshare.common.privacy.report import PathClaim, PrivacyReport, Release
from modelshare.common.privacy.requirements import GRAMMAR, parse_requirement
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.rebuild import rebuild
from modelshare.common.trees.tree import CategorySet, Edge, Node, Tree

# ----------------------------------------------------------------- helpers

SCHEMA2 = Schema((CategoricalAttribute("A", ("a0", "a1", "a2")), CategoricalAttribute("B", ("b0", "b1"))),
                 "cls", ("no", "yes"))
SCHEMA3 = Schema((CategoricalAttribute("A", ("a0", "a1", "a2")),), "cls", ("x", "y", "z"))


def flat(schema: Schema, *leaves) -> Tree:
    """Root on attribute 0 with one leaf per category, in preorder."""
    counts = [np.array(c, dtype=float) for c in leaves]
    nodes = [Node.from_counts(np.sum(counts, axis=0))] + [Node.from_counts(c) for c in counts]
    nodes[0].attribute = 0
    nodes[0].edges = [Edge(CategorySet(frozenset({i})), i + 1) for i in range(len(leaves))]
    return Tree(schema, nodes)


def honest_report(tree: Tree, requirement: str | None, mechanism: str = "apt") -> PrivacyReport:
    """What an honest owner would claim for ``tree`` (mirrors modelshare.common.mechanisms.release.release)."""
    claims = () if requirement is None else tuple(PathClaim(i, tree.nodes[i].total, requirement) for i in tree.leaves)
    return PrivacyReport(
        mechanism=mechanism,
        parameters={"disclosure": tree.disclosure},
        guarantee="none" if requirement is None else f"every released path meets {requirement}",
        requirement=requirement,
        claims=claims,
        attacks=attack_report(tree),
    )


def failing(result) -> list:
    return [c for c in result.checks if not c.passed]


# ------------------------------------------------------- releases pass audit


@pytest.fixture(scope="module")
def car_tree(car):
    schema, X, y = car
    return make_learner("cart", schema, random_state=0).fit(X, y).tree_


@pytest.fixture(scope="module")
def car_subset_tree(car):
    """Car without the rows of safety=low or persons=2, which are all 'unacc'.

    On the full table CART's first split isolates 576 'unacc' rows in a pure leaf next to the rest
    of the tree, so no (c,l)-diversity is reachable without collapsing to the root (see
    test_full_car_cannot_be_made_diverse)."""
    schema, X, y = car
    keep = (X[:, schema.index("safety")] != 0) & (X[:, schema.index("persons")] != 0)
    return make_learner("cart", schema, random_state=0).fit(X[keep], y[keep]).tree_


RELEASES = [
    ("apt", "k-anonymity:k=10", "car_tree"),
    ("apt", "cl-diversity:c=10,l=2", "car_subset_tree"),
    ("prune-leaf", "k-anonymity:k=10", "car_tree"),
    ("prune-parent", "k-anonymity:k=10", "car_tree"),
]


@pytest.mark.parametrize("disclosure", ["counts", "hit_miss"])
@pytest.mark.parametrize("mechanism, requirement, fixture", RELEASES)
def test_releases_pass_audit(request, tmp_path, mechanism, requirement, fixture, disclosure):
    tree = request.getfixturevalue(fixture)
    release = release_model(mechanism, tree=tree, requirement=requirement, disclosure=disclosure)
    released = release.tree
    assert released.disclosure == disclosure
    assert 1 < released.n_leaves < tree.n_leaves  # something was pruned, something is left
    assert release.report.requirement == requirement
    assert {c.leaf for c in release.report.claims} == set(released.leaves)
    parsed = parse_requirement(requirement)
    if mechanism != "apt":
        assert all(released.nodes[i].total >= parsed.k for i in released.leaves)
        assert release.report.parameters["s"] == parsed.k - 1
    result = audit(released, release.report)
    assert result.passed, failing(result)
    assert len(result.checks) == 7 and all(c.passed for c in result.checks)
    assert [p.leaf for p in result.paths] == released.leaves and all(p.passed for p in result.paths)
    assert result.attacks == release.report.attacks
    assert result.to_dict()["passed"] is True
    # and again from the release file
    path = tmp_path / "release.json"
    write_release(release, path)
    (tree_back,), report_back = read_model(path)
    assert audit(tree_back, report_back).passed


def test_full_car_cannot_be_made_diverse(car_tree):
    with pytest.raises(RequirementUnsatisfiable, match="root"):
        release_model("apt", tree=car_tree, requirement="cl-diversity:c=10,l=2")


def test_none_release_and_bare_tree_claim_nothing(car_tree):
    release = release_model("none", tree=car_tree)
    result = audit(release.tree, release.report)
    assert result.passed
    assert [c.name for c in result.checks] == ["inner nodes derive from leaves", "requirement",
                                               "reported attack counts"]
    assert "no privacy requirement" in result.checks[1].detail
    bare = audit(car_tree, None)
    assert bare.passed and len(bare.checks) == 2
    assert bare.attacks == attack_report(car_tree)


# ------------------------------------------------------------ audit catches


def test_leaf_violating_the_claimed_requirement():
    tree = flat(SCHEMA2, (2, 1), (10, 10), (6, 6))  # leaf 1 holds 3 tuples
    result = audit(tree, honest_report(tree, "k-anonymity:k=10"))
    assert not result.passed
    [bad] = failing(result)
    assert bad.name == "every path meets k-anonymity:k=10 (exact counts)"
    assert "2 of 3 paths pass" in bad.detail and "failing leaves [1]" in bad.detail
    assert [p.passed for p in result.paths] == [False, True, True]
    assert result.paths[0].tuples == 3.0 and result.paths[0].path == "A = a0"


def test_hit_miss_leaf_violating_cl_diversity():
    tree = flat(SCHEMA3, (10, 1, 1), (5, 5, 5)).to_hit_miss()
    # leaf 1: hit 10, miss 2 -> 10 < 5 * 2 / 2 = 5 fails; leaf 2: 5 < 5 * 10 / 2 passes
    result = audit(tree, honest_report(tree, "cl-diversity:c=5,l=3"))
    bad, reader = failing(result)  # the leaf fails on its own, and so does the reader's belief in it
    assert bad.name == "every path meets cl-diversity:c=5,l=3 (hit/miss)"
    assert reader.name == "a reader of the whole release"
    assert "failing leaves [1]" in bad.detail


def test_claims_missing_a_leaf_or_with_a_wrong_size():
    tree = flat(SCHEMA2, (6, 5), (10, 10))
    good = honest_report(tree, "k-anonymity:k=10")
    assert audit(tree, good).passed

    missing = dataclasses.replace(good, claims=good.claims[:1])
    [bad] = failing(audit(tree, missing))
    assert bad.name == "claims cover the released paths"
    assert "paths without a claim: [2]" in bad.detail

    extra = dataclasses.replace(good, claims=(*good.claims, PathClaim(7, 11.0, "k-anonymity:k=10")))
    [bad] = failing(audit(tree, extra))
    assert "claims without a path: [7]" in bad.detail

    wrong_size = dataclasses.replace(good, claims=(PathClaim(1, 12.0, "k-anonymity:k=10"), good.claims[1]))
    [bad] = failing(audit(tree, wrong_size))
    assert bad.name == "claims cover the released paths"
    assert "leaf 1 claims 12 tuples" in bad.detail and "it holds 11" in bad.detail

    wrong_requirement = dataclasses.replace(good, claims=(good.claims[0], PathClaim(2, 20.0, "k-anonymity:k=5")))
    [bad] = failing(audit(tree, wrong_requirement))
    assert "leaf 2" in bad.detail and "'k-anonymity:k=5'" in bad.detail


def test_hit_miss_inner_node_disclosing_its_exact_hit():
    # leaves (class x, hit 10, miss 4) and (class y, hit 6, miss 2); the exact root is (12, 10, 0)
    # but Eq. 1 of the leaves gives x: 10 + 2/2 = 11, y: 6 + 4/2 = 8, z: 3 -> hit 11, miss 11
    leaky = flat(SCHEMA3, (10, 4, 0), (2, 6, 0)).to_hit_miss()
    assert (leaky.root.hit, leaky.root.miss) == (12.0, 10.0)
    result = audit(leaky, honest_report(leaky, "k-anonymity:k=5"))
    assert not result.passed
    [bad] = failing(result)
    assert bad.name == "inner nodes derive from leaves"
    assert "node 0 discloses class 0, hit 12, miss 10" in bad.detail
    assert "imply class counts [11.0, 8.0, 3.0]" in bad.detail
    # the same tree rebuilt from its leaves passes
    fixed = rebuild(leaky.schema, leaky.nodes, "hit_miss")
    assert (fixed.root.hit, fixed.root.miss) == (11.0, 11.0)
    assert audit(fixed, honest_report(fixed, "k-anonymity:k=5")).passed


def test_tampered_attack_counts():
    tree = flat(SCHEMA2, (6, 0), (10, 10))  # leaf 1 is homogeneous: 1 leaf, 6 users
    good = honest_report(tree, "k-anonymity:k=5")
    assert good.attacks.homogeneity == AttackCounts(1, 6.0)
    tampered = dataclasses.replace(good, attacks=dataclasses.replace(good.attacks, homogeneity=AttackCounts(0, 0.0)))
    result = audit(tree, tampered)
    [bad] = failing(result)
    assert bad.name == "reported attack counts"
    assert "'homogeneity': {'leaves': 0, 'users': 0.0}" in bad.detail
    assert "recomputed" in bad.detail and "'homogeneity': {'leaves': 1, 'users': 6.0}" in bad.detail
    shorter = dataclasses.replace(good, attacks=dataclasses.replace(good.attacks,
                                                                    background=good.attacks.background[:1]))
    assert not audit(tree, shorter).passed


@pytest.mark.parametrize("requirement", ["k-anonymity:k=ten", "k-anon:k=5", "cl-diversity:c=5,l=3"])
def test_malformed_requirement_in_the_report(requirement):
    tree = flat(SCHEMA2, (6, 5), (10, 10))
    result = audit(tree, honest_report(tree, requirement))
    assert not result.passed
    check = next(c for c in result.checks if c.name == "requirement")
    assert not check.passed
    assert GRAMMAR in check.detail and repr(requirement) in check.detail
    if requirement.startswith("cl-"):
        assert "exceeds the 2 classes" in check.detail  # l=3 over a 2-class schema


def test_bare_tree_numbered_in_preorder_passes():
    assert audit(flat(SCHEMA2, (6, 5), (10, 10)), None).passed


def bfs_numbered_tree() -> Tree:
    """A valid tree whose nodes are numbered level by level: 0; 1, 2; 3, 4 (under 1); 5, 6 (under 2)."""

    def leaf(*c):
        return Node.from_counts(np.array(c, dtype=float))

    nodes = [leaf(6, 4), leaf(4, 1), leaf(2, 3), leaf(3, 0), leaf(1, 1), leaf(2, 0), leaf(0, 3)]
    nodes[0].attribute, nodes[0].edges = 0, [Edge(CategorySet(frozenset({0})), 1),
                                             Edge(CategorySet(frozenset({1, 2})), 2)]
    nodes[1].attribute, nodes[1].edges = 1, [Edge(CategorySet(frozenset({0})), 3), Edge(CategorySet(frozenset({1})), 4)]
    nodes[2].attribute, nodes[2].edges = 1, [Edge(CategorySet(frozenset({0})), 5), Edge(CategorySet(frozenset({1})), 6)]
    return Tree(SCHEMA2, nodes)


def test_bfs_numbered_tree_is_honest():
    """Every inner node of the BFS tree is the exact sum of its leaves (the premise of the next test)."""
    tree = bfs_numbered_tree()
    for node in tree.nodes:
        if not node.is_leaf:
            assert np.array_equal(node.counts, np.sum([tree.nodes[e.child].counts for e in node.edges], axis=0))
    renumbered = rebuild(tree.schema, tree.nodes, tree.disclosure)
    assert audit(renumbered, None).passed


@pytest.mark.parametrize("disclosure", ["counts", "hit_miss"])
def test_audit_does_not_depend_on_node_numbering(disclosure):
    tree = bfs_numbered_tree()
    if disclosure == "hit_miss":
        tree = tree.to_hit_miss()  # with two classes Eq. 1 is exact, so this tree is honest too
    result = audit(tree, None)
    assert result.passed, failing(result)


def test_audit_of_a_bare_multiway_tree(car):
    schema, X, y = car
    tree = make_learner("multiway", schema).fit(X, y).tree_
    assert audit(rebuild(tree.schema, tree.nodes, tree.disclosure), None).passed  # honest once renumbered
    result = audit(tree, None)
    assert result.passed, failing(result)


def test_release_with_a_fine_c_passes_its_own_audit():
    tree = flat(SCHEMA2, (2, 1), (1, 2))
    release = release_model("apt", tree=tree, requirement="cl-diversity:c=2.0000001,l=2")
    assert release.tree.n_leaves == 2  # no pruning was needed at c=2.0000001
    result = audit(release.tree, release.report)
    assert result.passed, failing(result)


def test_release_round_trip_keeps_audit_verdicts(tmp_path):
    """A failing release still fails after a trip through the file."""
    tree = flat(SCHEMA2, (2, 1), (10, 10))
    path = tmp_path / "bad.json"
    write_release(Release((tree,), honest_report(tree, "k-anonymity:k=10")), path)
    assert not audit(*read_model(path)).passed


def test_a_single_tree_audits_the_same_alone_or_in_a_sequence():
    tree = flat(SCHEMA2, (2, 1), (10, 10), (6, 6))
    report = honest_report(tree, "k-anonymity:k=10")
    alone, listed = audit(tree, report), audit([tree], report)
    assert alone.checks == listed.checks and alone.paths == listed.paths
    assert {p.tree for p in alone.paths} == {0}
    with pytest.raises(ValueError, match="at least one tree"):
        audit([], report)


def test_a_parsed_requirement_of_the_wrong_family_is_named_as_written():
    """A refusal quotes a `Requirement` object in the grammar's text, as it would the string, never its repr."""
    tree = flat(SCHEMA2, (2, 1), (10, 10), (6, 6))
    with pytest.raises(ValueError, match="bad requirement 'dp:epsilon=1,trees=1'") as refused:
        release_model("apt", tree=tree, requirement=parse_requirement("dp:epsilon=1,trees=1"))
    assert "DP(" not in str(refused.value)
