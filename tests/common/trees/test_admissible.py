"""The requirement-aware learner: every leaf meets the requirement in the disclosure's form, public thresholds,
no one-child node, and the release (APT as the final guard) passes the audit unchanged."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelshare.cli.common import LEARNER_DEFAULT, pruning_confidence
from modelshare.cli.inputs import learner_params
from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import Attribute, CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable
from modelshare.common.mechanisms.registry import default_learner
from modelshare.common.mechanisms.release import local_learner, release
from modelshare.common.privacy.checks import public_cuts_check, single_child_check
from modelshare.common.privacy.requirements import CLDiversity, KAnonymity, RequirementError, leaf_stats, path_rule
from modelshare.common.trees.learner_options import CATEGORY_SPLITS, PAIRINGS
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.learners.admissible import _Rule, group_categories, majority_cap


def _schema(sizes: list[int], n_classes: int) -> Schema:
    attributes: list[Attribute] = [CategoricalAttribute(f"c{j}", tuple(f"v{i}" for i in range(size)))
                                   for j, size in enumerate(sizes)]
    attributes.append(NumericAttribute("x", 0.0, 100.0))
    return Schema(tuple(attributes), "y", tuple(f"k{i}" for i in range(n_classes)))


@st.composite
def _cases(draw):
    """A small random table over 1-3 categorical attributes and one numeric one, and a path requirement."""
    n_classes = draw(st.integers(2, 4))
    sizes = draw(st.lists(st.integers(2, 5), min_size=1, max_size=3))
    n = draw(st.integers(5, 120))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.integers(0, s, n) for s in sizes] + [np.round(rng.uniform(0, 100, n), 1)]).astype(float)
    # classes follow the first attribute in part, so that splits gain something
    y = np.where(rng.random(n) < 0.6, X[:, 0].astype(np.int64) % n_classes, rng.integers(0, n_classes, n))
    if draw(st.booleans()):
        requirement = str(KAnonymity(draw(st.integers(1, 8))))
    else:
        requirement = str(CLDiversity(draw(st.sampled_from([1.0, 1.5, 2.0, 3.0, 5.0])),
                                      draw(st.integers(2, n_classes))))
    disclosure = draw(st.sampled_from(["hit_miss", "counts"]))
    return _schema(sizes, n_classes), X, y.astype(np.int64), requirement, disclosure


@pytest.mark.parametrize("pairing, category_split",
                         [(p, "grouped") for p in PAIRINGS] + [("deferred", s) for s in CATEGORY_SPLITS[1:]])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_every_leaf_meets_the_requirement_and_the_release_passes_the_audit(pairing, category_split, case):
    schema, X, y, requirement, disclosure = case
    tree = local_learner("admissible", schema, "apt", requirement=requirement, disclosure=disclosure,
                         pairing=pairing, category_split=category_split).fit(X, y).tree_
    assert single_child_check([tree]).passed
    assert public_cuts_check([tree]).passed
    assert all(node.total > 0 for node in tree.nodes)
    if tree.root.is_leaf:
        return  # no admissible split: APT refuses a root-only tree, nothing is released
    shown = tree if disclosure == "counts" else tree.to_hit_miss()
    rule = path_rule(requirement, disclosure)
    assert rule.requirement.check(leaf_stats(shown)).all()
    per_leaf = requirement + ",scope=leaf" if requirement.startswith("cl-diversity") else requirement
    found = release("apt", tree=tree, requirement=per_leaf, disclosure=disclosure)
    assert found.tree.n_leaves == tree.n_leaves  # APT had nothing to prune per leaf
    assert audit(found.trees, found.report).passed
    try:  # the default promise holds for the whole release: the guard may prune, and what it releases passes
        guarded = release("apt", tree=tree, requirement=requirement, disclosure=disclosure)
    except RequirementUnsatisfiable:
        return
    assert guarded.tree.n_leaves <= tree.n_leaves
    assert audit(guarded.trees, guarded.report).passed


def test_numeric_thresholds_sit_on_public_cut_points_of_a_real_table():
    table = load_dataset("adult")
    X, y = table.schema.encode(table.frame.iloc[:3000], source=table.source)
    tree = local_learner("admissible", table.schema, "apt", requirement="k-anonymity:k=10",
                         disclosure="hit_miss").fit(X, y).tree_
    numeric = {j for j, a in enumerate(table.schema.attributes) if isinstance(a, NumericAttribute)}
    assert any(node.attribute in numeric for node in tree.nodes)  # the check below is not vacuous
    assert public_cuts_check([tree]).passed and single_child_check([tree]).passed
    assert leaf_stats(tree).total.min() >= 10


def test_grouping_pairs_a_pure_category_with_another_so_the_split_becomes_admissible():
    rule = path_rule("cl-diversity:c=2,l=2", "counts")
    table = np.array([[30, 0], [0, 20], [10, 10], [0, 0]])  # category 0 and 1 pure, 3 absent
    groups = group_categories(table, rule)
    assert len(groups) == 2 and sorted(len(g) for g in groups) == [1, 2]
    grouped = np.stack([table[g].sum(axis=0) for g in groups])
    assert rule.ok(grouped).all()
    assert 3 not in np.concatenate(groups)  # absent categories are placed by the caller


def test_a_categorical_split_covers_every_category_of_the_path():
    schema = _schema([4], 2)
    X = np.array([[0, 1.0], [0, 2.0], [1, 3.0], [1, 4.0], [2, 5.0], [2, 6.0]] * 5)
    y = np.array([0, 0, 1, 1, 0, 1] * 5)
    tree = make_learner("admissible", schema, leaf_rule=path_rule("k-anonymity:k=4", "counts")).fit(X, y).tree_
    root = tree.root
    assert root.attribute == 0
    assert frozenset().union(*(e.constraint.codes for e in root.edges)) == frozenset(range(4))  # v3 never seen


def test_nursery_diversity_releases_more_than_apt_on_a_multiway_tree():
    """The case APT handles worst: a pure third of the table under (5,2)-diversity. The grown tree keeps
    both other health levels apart and releases, where APT on the multiway tree keeps far fewer paths."""
    table = load_dataset("nursery")
    X, y = table.schema.encode(table.frame, source=table.source)
    grown = local_learner("admissible", table.schema, "apt", requirement="cl-diversity:c=5,l=2",
                          disclosure="hit_miss").fit(X, y).tree_
    found = release("apt", tree=grown, requirement="cl-diversity:c=5,l=2,scope=leaf", disclosure="hit_miss")
    assert found.tree.n_leaves == grown.n_leaves and audit(found.trees, found.report, seeded_ok=True).passed
    assert (found.tree.predict(X) == y).mean() > 0.55
    whole = release("apt", tree=grown, requirement="cl-diversity:c=5,l=2", disclosure="hit_miss")
    assert whole.tree.n_leaves < grown.n_leaves and audit(whole.trees, whole.report).passed
    assert (whole.tree.predict(X) == y).mean() > 0.55


def test_deferred_pairing_keeps_agreeing_health_levels_together_and_classifies_more_of_nursery():
    """Eager grouping pairs health = not_recom with one level everywhere, and that level's rows are lost;
    deferred grouping leaves health unsplit where recommended and priority agree (social = problematic),
    so some leaf holds all three levels, and more rows are classified, every leaf still admissible."""
    table = load_dataset("nursery")
    X, y = table.schema.encode(table.frame, source=table.source)
    health = table.schema.names.index("health")
    fitted = {pairing: local_learner("admissible", table.schema, "apt", requirement="cl-diversity:c=5,l=2",
                                     disclosure="hit_miss", pairing=pairing).fit(X, y).tree_ for pairing in PAIRINGS}
    accuracy = {pairing: (tree.predict(X) == y).mean() for pairing, tree in fitted.items()}
    assert accuracy["deferred"] > accuracy["eager"] + 0.005
    deferred = fitted["deferred"]
    assert any(all(j != health for j, _ in path.constraints) for path in deferred.paths())
    found = release("apt", tree=deferred, requirement="cl-diversity:c=5,l=2,scope=leaf", disclosure="hit_miss")
    assert found.tree.n_leaves == deferred.n_leaves and audit(found.trees, found.report, seeded_ok=True).passed


def test_a_tied_partner_grouped_less_often_elsewhere_is_taken():
    """Category 2 (pure) may pair with 0 or 1 at the same loss; the one already grouped with it loses the tie."""
    rule = path_rule("cl-diversity:c=5,l=2", "hit_miss")
    table = np.array([[20, 10, 0], [10, 20, 0], [0, 0, 30]])

    def grouped(table: np.ndarray, together: np.ndarray | None) -> list[list[int]]:
        return sorted(sorted(g.tolist()) for g in group_categories(table, rule, together))

    assert grouped(table, None) == [[0, 2], [1]]  # the lowest index on a tie
    together = np.zeros((3, 3))
    together[0, 2] = together[2, 0] = 1.0
    assert grouped(table, together) == [[0], [1, 2]]
    uneven = np.array([[20, 10, 0], [40, 80, 0], [0, 0, 30]])  # pairing with 1 loses 108 bits, with 0 only 60
    assert grouped(uneven, together) == [[0, 2], [1]]


def test_deferred_pairing_pairs_not_recom_with_different_levels_in_different_subtrees() -> None:
    """On a fold of Nursery both partners of health = not_recom tie on loss; the tree pairs it with one
    level under social = nonprob and with the other under slightly_prob, not by the counts' noise."""
    table = load_dataset("nursery")
    X, y = table.schema.encode(table.frame, source=table.source)
    keep = np.random.default_rng(1).random(y.size) < 0.9
    names = table.schema.names
    social, health = names.index("social"), names.index("health")
    tree = local_learner("admissible", table.schema, "apt", requirement="cl-diversity:c=5,l=2",
                         disclosure="hit_miss").fit(X[keep], y[keep]).tree_
    assert tree.root.attribute == social
    health_attribute = table.schema.attributes[health]
    assert isinstance(health_attribute, CategoricalAttribute)
    not_recom = health_attribute.categories.index("not_recom")
    partners = []
    for edge in tree.root.edges[:2]:
        node = tree.nodes[edge.child]
        assert node.attribute == health
        group = next(e.constraint.codes for e in node.edges if not_recom in e.constraint.codes)
        partners.append(group - {not_recom})
    assert len(partners[0]) == 1 and partners[0] != partners[1]


def test_deferral_at_a_majority_cap_of_ten_elevenths_is_not_decided_by_noise():
    """Under hit/miss (20,3) (cap 10/11) deferring health gains about 95 rows of 9,400, all under social =
    problematic; against every row's noise (97) that was a coin flip, against the differing child's (56) it is not."""
    table = load_dataset("nursery")
    X, y = table.schema.encode(table.frame, source=table.source)
    social = table.schema.names.index("social")
    for seed in (1, 2):
        keep = np.random.default_rng(seed).random(y.size) < 0.9
        tree = local_learner("admissible", table.schema, "apt", requirement="cl-diversity:c=20,l=3",
                             disclosure="hit_miss", confidence=None).fit(X[keep], y[keep]).tree_
        assert tree.root.attribute == social


def test_the_majority_cap_is_the_largest_share_a_leaf_may_hold():
    assert majority_cap(_Rule(path_rule("cl-diversity:c=5,l=2", "hit_miss"), 1), 3) == pytest.approx(5 / 6, abs=1e-6)
    assert majority_cap(_Rule(path_rule("k-anonymity:k=5", "hit_miss"), 1), 2) == 1.0


def test_a_binary_category_split_cuts_the_categories_ordered_by_class_share_in_two():
    """Four categories with shares of class 0 of 0.9, 0.1, 0.8, 0.2: two branches, {0, 2} against {1, 3}."""
    schema = _schema([5], 2)
    shares = [0.9, 0.1, 0.8, 0.2]
    X = np.array([[c, float(i)] for c in range(4) for i in range(20)])
    y = np.array([0 if i < 20 * shares[c] else 1 for c in range(4) for i in range(20)])
    rule = path_rule("k-anonymity:k=10", "counts")
    tree = make_learner("admissible", schema, leaf_rule=rule, category_split="binary",
                        max_depth=1).fit(X, y).tree_
    root = tree.root
    assert root.attribute == 0 and len(root.edges) == 2
    sides = sorted(sorted(e.constraint.codes - {4}) for e in root.edges)
    assert sides == [[0, 2], [1, 3]]
    assert frozenset().union(*(e.constraint.codes for e in root.edges)) == frozenset(range(5))  # v4, absent, too
    grouped = make_learner("admissible", schema, leaf_rule=rule, max_depth=1).fit(X, y).tree_
    assert len(grouped.root.edges) == 4  # the default: a branch per category


def test_either_keeps_every_leaf_at_k_on_adult_and_the_owner_learner_uses_it_under_k_anonymity():
    table = load_dataset("adult")
    X, y = table.schema.encode(table.frame.iloc[:3000], source=table.source)
    built = local_learner("admissible", table.schema, "apt", requirement="k-anonymity:k=50", disclosure="hit_miss")
    assert built.build(table.schema).category_split == "either"
    tree = built.fit(X, y).tree_
    assert leaf_stats(tree).total.min() >= 50
    assert any(len(node.edges) == 2 and node.attribute is not None
               and isinstance(table.schema.attributes[node.attribute], CategoricalAttribute) for node in tree.nodes)
    found = release("apt", tree=tree, requirement="k-anonymity:k=50", disclosure="hit_miss")
    assert found.tree.n_leaves == tree.n_leaves and audit(found.trees, found.report).passed
    diverse = local_learner("admissible", table.schema, "apt", requirement="cl-diversity:c=5,l=2",
                            disclosure="hit_miss")
    assert diverse.build(table.schema).category_split == "grouped"


def test_the_commands_pass_category_split_to_the_admissible_learner_only():
    flags = {"max_depth": None, "min_samples_leaf": None, "pairing": None, "category_split": "grouped",
             "confidence": LEARNER_DEFAULT}
    assert learner_params(argparse.Namespace(learner="admissible", **flags))["category_split"] == "grouped"
    with pytest.raises(ValueError, match="--category-split applies to the admissible learner only"):
        learner_params(argparse.Namespace(learner="multiway", **flags))


def test_the_commands_pass_the_pruning_confidence_to_the_admissible_learner_only():
    flags = {"max_depth": None, "min_samples_leaf": None, "pairing": None, "category_split": None,
             "confidence": pruning_confidence("none")}
    assert learner_params(argparse.Namespace(learner="admissible", **flags)) == {"confidence": None}
    assert learner_params(argparse.Namespace(learner="admissible", **{**flags, "confidence": LEARNER_DEFAULT})) == {}
    with pytest.raises(ValueError, match="--confidence applies to the admissible learner only"):
        learner_params(argparse.Namespace(learner="multiway", **flags))
    assert pruning_confidence("0.5") == 0.5 and pruning_confidence("default") == LEARNER_DEFAULT
    with pytest.raises(argparse.ArgumentTypeError, match="strictly between 0 and 1"):
        pruning_confidence("1.5")


def test_an_unknown_category_split_is_refused_by_name():
    schema = _schema([3], 2)
    with pytest.raises(ValueError, match="category_split"):
        make_learner("admissible", schema, category_split="ternary").fit(np.array([[0, 1.0], [1, 2.0]]),
                                                                         np.array([0, 1]))


def test_an_unknown_pairing_is_refused_by_name():
    schema = _schema([3], 2)
    with pytest.raises(ValueError, match="pairing"):
        make_learner("admissible", schema, pairing="lazy").fit(np.array([[0, 1.0], [1, 2.0]]), np.array([0, 1]))


def test_the_default_learner_follows_the_mechanism_family():
    assert default_learner("apt") == default_learner("prune-leaf") == default_learner("prune-parent") == "admissible"
    assert default_learner("none") == "auto"
    assert default_learner("laplace-rdt") == "multiway"  # trains its own trees: the learner is not used
    assert default_learner("no-such-mechanism") == "multiway"


def test_a_whole_release_requirement_is_refused_by_name():
    with pytest.raises(RequirementError, match="per-path requirement"):
        path_rule("dp:epsilon=1,trees=10", "counts")


def test_without_a_requirement_the_learner_grows_unconstrained():
    schema = _schema([3], 2)
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, 3, 200), rng.uniform(0, 100, 200)]).astype(float)
    y = (X[:, 0] == 1).astype(np.int64)
    tree = local_learner("admissible", schema, "none", requirement=None, disclosure="counts").fit(X, y).tree_
    assert (tree.predict(X) == y).all()


def test_under_k_anonymity_the_owner_learner_does_not_prune_unless_asked():
    schema = _schema([3], 2)
    built = local_learner("admissible", schema, "apt", requirement="k-anonymity:k=5", disclosure="hit_miss")
    assert built.build(schema).confidence is None
    diverse = local_learner("admissible", schema, "apt", requirement="cl-diversity:c=5,l=2", disclosure="hit_miss")
    assert diverse.build(schema).confidence == 0.25
    asked = local_learner("admissible", schema, "prune-leaf", requirement="k-anonymity:k=5", disclosure="counts",
                          confidence=0.1)
    assert asked.build(schema).confidence == 0.1


def test_a_table_with_no_admissible_split_is_refused_as_such_not_as_pruned_to_the_root():
    """Owners and simulate tell a learner that found no split from APT pruning to the root."""
    schema = _schema([3], 2)
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.integers(0, 3, 30), rng.uniform(0, 100, 30)]).astype(float)
    y = (X[:, 0] == 1).astype(np.int64)
    requirement = "k-anonymity:k=40"  # more rows than the table has: no branch can meet it
    tree = local_learner("admissible", schema, "apt", requirement=requirement, disclosure="hit_miss").fit(X, y).tree_
    assert tree.nodes[0].is_leaf
    with pytest.raises(RequirementUnsatisfiable, match="root alone .* found no split"):
        release("apt", requirement=requirement, tree=tree, disclosure="hit_miss")
