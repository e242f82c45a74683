"""Anonymity requirements: the requirement grammar of every family, their order, and the two forms of
(c,l)-diversity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.privacy.requirements import (
    GRAMMAR,
    CLDiversity,
    KAnonymity,
    LeafStats,
    RequirementError,
    cl_diverse_exact,
    cl_diverse_hit_miss,
    leaf_stats,
    parse_requirement,
    weaker_than,
)
from modelshare.common.trees.tree import CategorySet, Edge, Node, Tree

# ----------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, expected",
    [
        ("k-anonymity:k=10", KAnonymity(10)),
        ("k-anonymity:k=1", KAnonymity(1)),
        ("cl-diversity:c=5,l=3", CLDiversity(5.0, 3)),
        ("cl-diversity:c=2.5,l=2", CLDiversity(2.5, 2)),
        ("cl-diversity:l=3,c=5", CLDiversity(5.0, 3)),  # parameter order is free
        ("  k-anonymity : k = 10  ", KAnonymity(10)),
        ("\tcl-diversity:  c = 5 ,  l = 3\n", CLDiversity(5.0, 3)),
    ],
)
def test_parse_requirement_accepts_the_grammar(text, expected):
    parsed = parse_requirement(text)
    assert parsed == expected
    assert type(parsed) is type(expected)
    assert isinstance(parsed.k if isinstance(parsed, KAnonymity) else parsed.l, int)


def test_parsed_types_are_int_and_float():
    cl = parse_requirement("cl-diversity:c=5,l=3")
    assert isinstance(cl.c, float) and cl.c == 5.0 and isinstance(cl.l, int) and cl.l == 3
    k = parse_requirement("k-anonymity:k=10")
    assert isinstance(k.k, int) and k.k == 10


@pytest.mark.parametrize(
    "requirement, text",
    [
        (KAnonymity(10), "k-anonymity:k=10"),
        (KAnonymity(1), "k-anonymity:k=1"),
        (CLDiversity(5.0, 3), "cl-diversity:c=5,l=3"),
        (CLDiversity(2.5, 2), "cl-diversity:c=2.5,l=2"),
        (CLDiversity(0.75, 4), "cl-diversity:c=0.75,l=4"),
    ],
)
def test_str_round_trips(requirement, text):
    assert str(requirement) == text
    assert parse_requirement(str(requirement)) == requirement


@pytest.mark.parametrize("c", [2.0000001, 1234567.0])
def test_str_round_trips_every_c(c):
    requirement = CLDiversity(c, 3)
    assert parse_requirement(str(requirement)) == requirement


MALFORMED = [
    "k-anonymity",  # no NAME: prefix
    "k-anonymity:k=",  # no value
    "k-anonymity:k=0",  # k >= 1
    "k-anonymity:k=-3",
    "k-anonymity:k=2.5",  # k is an integer
    "k-anonymity:k=ten",
    "k-anonymity:",  # no parameters
    "k-anonymity:k=10,",  # dangling comma
    "cl-diversity:c=5",  # l missing
    "cl-diversity:c=-1,l=3",  # c > 0
    "cl-diversity:c=0,l=3",
    "cl-diversity:c=nan,l=3",
    "cl-diversity:c=inf,l=3",
    "cl-diversity:c=five,l=3",
    "cl-diversity:c=5,l=1",  # l >= 2
    "cl-diversity:c=5,l=2.5",
    "cl-diversity:c=5,l=3,k=2",  # unexpected parameter
    "foo:k=1",  # unknown requirement
    "k-anonymity:k=1,k=2",  # parameter twice
    "k-anonymity:q=3",  # wrong parameter name
    "",
    "   ",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_requirements_raise_with_the_grammar(text):
    with pytest.raises(RequirementError) as info:
        parse_requirement(text)
    message = str(info.value)
    assert GRAMMAR in message
    assert repr(text) in message  # names what was typed
    assert info.value.text == text
    assert info.value.why and info.value.why in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("k-anonymity:k=0", "at least 1"),
        ("cl-diversity:c=5,l=1", "at least 2"),
        ("k-anonymity:k=1,k=2", "twice"),
        ("foo:k=1", "unknown requirement 'foo'"),
        ("k-anonymity:q=3", "expected parameters ['k']"),
        ("k-anonymity:k=2.5", "not an integer"),
        ("cl-diversity:c=-1,l=3", "positive"),
        # dps (k-AnonToRdt)
        ("dps:k=0,beta=0.01,epsilon=2,trees=10", "k=0 must be at least 1"),
        ("dps:k=5,beta=1,epsilon=2,trees=10", "beta=1 must lie strictly between 0 and 1"),
        ("dps:k=5,beta=0.01,epsilon=two,trees=10", "epsilon='two' is not a number"),
        ("dps:k=5,beta=0.01,epsilon=inf,trees=10", "epsilon=inf must be finite"),
        ("dps:k=5,beta=0.01,epsilon=-1,trees=10", "epsilon=-1 must be positive"),
        ("dps:k=5,beta=0.01,epsilon=2,trees=0", "trees=0 must be at least 1"),
        ("dps:k=5,beta=0.01,epsilon=2", "expected parameters ['beta', 'epsilon', 'k', 'trees']"),
        ("dps:k=5,beta=0.3,epsilon=1,trees=4",
         "epsilon per tree (epsilon_total 1 / 4 trees) = 0.25 is below -ln(1 - beta)"),
        ("dps:k=1,beta=0.5,epsilon=7,trees=10", "composed delta 5 is >= 1 and bounds nothing"),
        # dp (the noise-based mechanisms)
        ("dp:epsilon=0,trees=10", "epsilon=0 must be positive"),
        ("dp:epsilon=-1,trees=10", "epsilon=-1 must be positive"),
        ("dp:epsilon=inf,trees=10", "epsilon=inf must be finite"),
        ("dp:epsilon=one,trees=10", "epsilon='one' is not a number"),
        ("dp:epsilon=1,trees=0", "trees=0 must be at least 1"),
        ("dp:epsilon=1,trees=2.5", "trees='2.5' is not an integer"),
        ("dp:epsilon=1", "expected parameters ['epsilon', 'trees']"),
        ("dp:epsilon=1,trees=2,delta=0", "expected parameters ['epsilon', 'trees']"),
    ],
)
def test_a_bad_requirement_of_any_family_says_why_and_shows_the_grammar(text, fragment):
    with pytest.raises(RequirementError) as info:
        parse_requirement(text)
    assert fragment in info.value.why and GRAMMAR in str(info.value)


def test_non_string_requirement_is_refused() -> None:
    with pytest.raises(RequirementError, match="string"):
        parse_requirement(10)  # type: ignore[arg-type]


def test_l_above_the_number_of_classes_is_refused_only_when_classes_are_known():
    assert parse_requirement("cl-diversity:c=5,l=3") == CLDiversity(5.0, 3)
    assert parse_requirement("cl-diversity:c=5,l=3", n_classes=3) == CLDiversity(5.0, 3)
    with pytest.raises(RequirementError) as info:
        parse_requirement("cl-diversity:c=5,l=3", n_classes=2)
    assert "l=3" in info.value.why and "2 classes" in info.value.why
    assert GRAMMAR in str(info.value)
    # k-anonymity has no l: n_classes does not matter
    assert parse_requirement("k-anonymity:k=50", n_classes=2) == KAnonymity(50)


# ------------------------------------------------------- (c,l)-diversity forms


def test_paper_example_is_5_3_diverse():
    """Sharkey et al. §3.1: hit 14, miss 6 over three classes: 14 < 5 * 6 / 2 = 15, so (5,3)-diverse."""
    assert cl_diverse_hit_miss(np.array([14.0]), np.array([6.0]), 5.0, 3).tolist() == [True]
    # (4,3): 14 < 4 * 6 / 2 = 12 fails
    assert cl_diverse_hit_miss(np.array([14.0]), np.array([6.0]), 4.0, 3).tolist() == [False]
    # the inequality is strict: 15 < 5 * 6 / 2 = 15 fails
    assert cl_diverse_hit_miss(np.array([15.0]), np.array([6.0]), 5.0, 3).tolist() == [False]
    # the exact form on the even split the paper assumes (14, 3, 3): 14 < 5 * 3
    assert cl_diverse_exact(np.array([[14.0, 3.0, 3.0]]), 5.0, 3).tolist() == [True]
    assert cl_diverse_exact(np.array([[15.0, 3.0, 3.0]]), 5.0, 3).tolist() == [False]


def test_hit_miss_form_is_vectorized_and_needs_l_minus_1_misses():
    hit = np.array([14.0, 1.0, 1.0, 2.0, 0.0, 4.0])
    miss = np.array([6.0, 1.0, 2.0, 2.0, 0.0, 4.0])
    got = cl_diverse_hit_miss(hit, miss, 100.0, 3)
    # miss=1 < l-1=2 fails however large c is; miss=2 is enough for l=3 with a large c;
    # a leaf without tuples fails (0 < 0 is false)
    assert got.tolist() == [True, False, True, True, False, True]
    # c=2, l=3: hit < 2 * miss / 2 = miss
    assert cl_diverse_hit_miss(hit, miss, 2.0, 3).tolist() == [False, False, True, False, False, False]


def test_exact_form_hand_cases():
    counts = np.array(
        [
            [4.0, 3.0, 3.0],  # sorted (4,3,3)
            [3.0, 3.0, 4.0],  # the same multiset in another order
            [5.0, 5.0, 0.0],  # only two classes present
            [5.0, 5.0, 1.0],
            [0.0, 0.0, 0.0],  # no tuples
        ]
    )
    # l=2: r1 < c * (r2 + r3)
    assert cl_diverse_exact(counts, 2.0, 2).tolist() == [True, True, True, True, False]
    # l=3, c=2: r1 < 2 * r3
    assert cl_diverse_exact(counts, 2.0, 3).tolist() == [True, True, False, False, False]
    # l=3, c=1: 4 < 3 fails, and 5 < 1 fails
    assert cl_diverse_exact(counts, 1.0, 3).tolist() == [False, False, False, False, False]
    # l=3 with only two classes present fails whatever c is
    assert cl_diverse_exact(counts[2:3], 1e9, 3).tolist() == [False]
    assert cl_diverse_exact(counts[3:4], 6.0, 3).tolist() == [True]


def test_exact_form_with_l_above_the_number_of_columns_fails():
    assert cl_diverse_exact(np.array([[5.0, 5.0], [1.0, 1.0]]), 1e9, 3).tolist() == [False, False]


def test_exact_form_needs_a_matrix():
    with pytest.raises(ValueError, match="matrix"):
        cl_diverse_exact(np.array([10.0, 9.0, 1.0]), 3.0, 3)


def test_forms_disagree_in_both_directions():
    # (10, 9, 1), c=3, l=3: hit 10, miss 10 -> 10 < 3 * 10 / 2 = 15 passes hit/miss;
    # exact: 10 < 3 * 1 = 3 fails.
    assert cl_diverse_hit_miss(np.array([10.0]), np.array([10.0]), 3.0, 3).tolist() == [True]
    assert cl_diverse_exact(np.array([[10.0, 9.0, 1.0]]), 3.0, 3).tolist() == [False]
    # (10, 1, 1, 1, 1), c=4, l=3: hit 10, miss 4 -> 10 < 4 * 4 / 2 = 8 fails hit/miss;
    # exact: 10 < 4 * (1 + 1 + 1) = 12 passes.
    assert cl_diverse_hit_miss(np.array([10.0]), np.array([4.0]), 4.0, 3).tolist() == [False]
    assert cl_diverse_exact(np.array([[10.0, 1.0, 1.0, 1.0, 1.0]]), 4.0, 3).tolist() == [True]


THREE = Schema((CategoricalAttribute("A", ("a0", "a1")),), "cls", ("x", "y", "z"))


def _two_leaf_tree(left, right) -> Tree:
    lc, rc = np.array(left, float), np.array(right, float)
    nodes = [Node.from_counts(lc + rc), Node.from_counts(lc), Node.from_counts(rc)]
    nodes[0].attribute = 0
    nodes[0].edges = [Edge(CategorySet(frozenset({0})), 1), Edge(CategorySet(frozenset({1})), 2)]
    return Tree(THREE, nodes)


def test_cl_diversity_check_uses_the_form_the_disclosure_allows():
    tree = _two_leaf_tree((10, 9, 1), (1, 9, 10))
    requirement = CLDiversity(3.0, 3)
    counts_stats = leaf_stats(tree)
    assert counts_stats.counts is not None and counts_stats.leaves.tolist() == [1, 2]
    assert requirement.check(counts_stats).tolist() == [False, False]  # exact: 10 < 3 fails
    hm_stats = leaf_stats(tree.to_hit_miss())
    assert hm_stats.counts is None and hm_stats.disclosure == "hit_miss"
    assert hm_stats.hit.tolist() == [10.0, 10.0] and hm_stats.miss.tolist() == [10.0, 10.0]
    assert requirement.check(hm_stats).tolist() == [True, True]  # hit/miss: 10 < 15 passes
    assert KAnonymity(20).check(counts_stats).tolist() == [True, True]
    assert KAnonymity(21).check(hm_stats).tolist() == [False, False]


# ------------------------------------------------------------- properties

count_matrices = st.integers(2, 5).flatmap(
    lambda m: st.lists(st.lists(st.integers(0, 40), min_size=m, max_size=m), min_size=1, max_size=12)
)


def _stats(rows: list[list[int]], with_counts: bool) -> LeafStats:
    counts = np.array(rows, dtype=np.float64)
    hit = counts.max(axis=1)
    return LeafStats(
        leaves=np.arange(len(rows)),
        label=counts.argmax(axis=1),
        hit=hit,
        miss=counts.sum(axis=1) - hit,
        counts=counts if with_counts else None,
        disclosure="counts" if with_counts else "hit_miss",
    )


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=count_matrices, k=st.integers(1, 100), with_counts=st.booleans())
def test_k_anonymity_is_total_at_least_k(rows, k, with_counts):
    got = KAnonymity(k).check(_stats(rows, with_counts))
    assert got.tolist() == [sum(r) >= k for r in rows]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=count_matrices, c=st.integers(1, 10), l=st.integers(2, 5))
def test_exact_form_matches_a_reference(rows, c, l):  # noqa: E741 (the paper's l)
    expected = []
    for r in rows:
        ranked = sorted(r, reverse=True)
        expected.append(ranked[0] < c * sum(ranked[l - 1 :]))
    assert cl_diverse_exact(np.array(rows, dtype=float), float(c), l).tolist() == expected
    assert CLDiversity(float(c), l).check(_stats(rows, True)).tolist() == expected


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=count_matrices, c=st.integers(1, 10), l=st.integers(2, 5))
def test_hit_miss_form_matches_a_reference(rows, c, l):  # noqa: E741 (the paper's l)
    expected = []
    for r in rows:
        hit = max(r)
        miss = sum(r) - hit
        expected.append(miss >= l - 1 and hit < c * miss / (l - 1))
    assert CLDiversity(float(c), l).check(_stats(rows, False)).tolist() == expected


@pytest.mark.parametrize(
    "claimed, required, weaker",
    [
        ("k-anonymity:k=10", "k-anonymity:k=10", False),
        ("k-anonymity:k=12", "k-anonymity:k=10", False),
        ("k-anonymity:k=9", "k-anonymity:k=10", True),
        ("cl-diversity:c=5,l=3", "k-anonymity:k=3", False),
        ("cl-diversity:c=5,l=3", "k-anonymity:k=4", True),
        ("k-anonymity:k=100", "cl-diversity:c=5,l=2", True),
        ("cl-diversity:c=4,l=3", "cl-diversity:c=5,l=3", False),
        ("cl-diversity:c=6,l=3", "cl-diversity:c=5,l=3", True),
        ("cl-diversity:c=5,l=2", "cl-diversity:c=5,l=3", True),
        ("cl-diversity:c=5,l=4", "cl-diversity:c=5,l=3", False),
    ],
)
def test_weaker_than_orders_requirements(claimed, required, weaker):
    reason = weaker_than(parse_requirement(claimed), parse_requirement(required))
    assert (reason is not None) == weaker


@pytest.mark.parametrize(
    "claimed, required, fragment",
    [
        # dps: beta, total epsilon and composed delta; no other family implies or is implied by it
        ("dps:k=5,beta=0.01,epsilon=2,trees=10", "dps:k=5,beta=0.01,epsilon=2,trees=10", None),
        ("dps:k=10,beta=0.005,epsilon=1.5,trees=5", "dps:k=5,beta=0.01,epsilon=2,trees=10", None),
        ("dps:k=3,beta=0.01,epsilon=2,trees=10", "dps:k=5,beta=0.01,epsilon=2,trees=10", "needs k >= 5"),
        ("dps:k=5,beta=0.1,epsilon=2,trees=10", "dps:k=5,beta=0.01,epsilon=2,trees=10", "at most beta=0.01"),
        ("dps:k=5,beta=0.01,epsilon=3,trees=10", "dps:k=5,beta=0.01,epsilon=2,trees=10", "at most 2"),
        # more trees on the same budget: a smaller epsilon per tree and a larger composed delta
        ("dps:k=5,beta=0.01,epsilon=2,trees=20", "dps:k=5,beta=0.01,epsilon=2,trees=10", "composed delta 0.00216"),
        # d is not monotone in beta: the smaller beta has the larger delta
        ("dps:k=5,beta=0.1,epsilon=0.5,trees=1", "dps:k=5,beta=0.101,epsilon=0.5,trees=1", "composed delta 0.00275"),
        ("k-anonymity:k=50", "dps:k=5,beta=0.01,epsilon=2,trees=10", "gives no (beta, epsilon, delta)-DPS guarantee"),
        ("dps:k=50,beta=0.01,epsilon=2,trees=10", "k-anonymity:k=5", "not of every path"),
        ("dps:k=50,beta=0.01,epsilon=2,trees=10", "cl-diversity:c=5,l=2", "not of every path"),
        # dp: the total epsilon alone (trees say how it is spent, not how much)
        ("dp:epsilon=1,trees=10", "dp:epsilon=1,trees=10", None),
        ("dp:epsilon=0.5,trees=3", "dp:epsilon=1,trees=10", None),  # trees say how, not how much
        ("dp:epsilon=2,trees=10", "dp:epsilon=1,trees=10",
         "spends epsilon=2 in total; dp:epsilon=1,trees=10 allows at most 1"),
        ("k-anonymity:k=50", "dp:epsilon=1,trees=10", "gives no eps-differential privacy"),
        ("dps:k=5,beta=0.01,epsilon=0.5,trees=1", "dp:epsilon=1,trees=10", "gives no eps-differential privacy"),
        ("dp:epsilon=0.1,trees=10", "k-anonymity:k=5", "does not imply k-anonymity:k=5"),
        ("dp:epsilon=0.1,trees=10", "cl-diversity:c=5,l=2", "does not imply cl-diversity"),
        ("dp:epsilon=0.1,trees=10", "dps:k=5,beta=0.01,epsilon=2,trees=10", "does not imply dps:"),
    ],
)
def test_weaker_than_orders_dps_and_dp_claims_and_says_why(claimed, required, fragment):
    reason = weaker_than(parse_requirement(claimed), parse_requirement(required))
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason


@given(
    counts=st.lists(st.integers(0, 30), min_size=3, max_size=5),
    c=st.floats(0.5, 10), l=st.integers(2, 3), dc=st.floats(0, 5), dl=st.integers(0, 1),
)
def test_a_stronger_diversity_claim_implies_the_weaker_on_every_path(counts, c, l, dc, dl):  # noqa: E741
    """weaker_than's ordering agrees with both check forms on arbitrary leaves."""
    strong, weak = CLDiversity(c, l + dl), CLDiversity(c + dc, l)
    assert weaker_than(strong, weak) is None
    arr = np.array([counts], dtype=float)
    assert not (cl_diverse_exact(arr, strong.c, strong.l) & ~cl_diverse_exact(arr, weak.c, weak.l)).any()
    hit = arr.max(axis=1)
    miss = arr.sum(axis=1) - hit
    passes_strong = cl_diverse_hit_miss(hit, miss, strong.c, strong.l)
    assert not (passes_strong & ~cl_diverse_hit_miss(hit, miss, weak.c, weak.l)).any()


@pytest.mark.parametrize("text", ["k-anonymity:k=" + "9" * 722, "dps:k=9007199254740993,beta=0.1,epsilon=2,trees=10",
                                  "cl-diversity:c=5,l=" + "9" * 40])
def test_integers_beyond_exact_float_comparison_are_refused(text):
    with pytest.raises(RequirementError, match=r"at most 2\*\*53"):
        parse_requirement(text)
    assert parse_requirement("k-anonymity:k=9007199254740992").k == 2**53
