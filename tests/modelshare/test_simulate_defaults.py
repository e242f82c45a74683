"""`simulate` with its defaults (apt, cl-diversity:c=5,l=2, hit/miss, the admissible learner): every owner releases."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelshare.cli import main
from modelshare.common.privacy.requirements import path_rule
from modelshare.simulate_hints import unsatisfiable_hint, whole_table_hints


@pytest.mark.slow  # a miner and ten owner processes per dataset
@pytest.mark.parametrize("dataset", ["car", "nursery"])
def test_simulate_with_its_defaults_releases_at_every_owner(dataset, capsys):
    assert main(["simulate", "--dataset", dataset, "--owners", "10", "--seed", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mechanism"] == "apt" and report["requirement"] == "cl-diversity:c=5,l=2"
    assert report["refusals"] == [] and report["hints"] == []
    assert len(report["owners"]) == 10 and all(o["audit_passed"] for o in report["owners"])
    bound = report["requirement_bound"]  # the requirement's price on the pooled training rows
    assert bound["computed_on"] == "pooled training rows" and 0 < bound["accuracy"] <= 5 / 6


def test_the_unsatisfiable_hint_names_the_requirement_why_and_a_weaker_one():
    grown = unsatisfiable_hint("admissible", "apt", "cl-diversity:c=5,l=3", "hit_miss")
    assert "no split of their tables has children that all meet cl-diversity:c=5,l=3 with hit_miss" in grown
    assert "--requirement cl-diversity:c=5,l=2" in grown
    pruned = unsatisfiable_hint("multiway", "prune-leaf", "k-anonymity:k=50", "counts")
    assert "prune-leaf pruned their multiway trees to the root" in pruned and "--learner admissible" in pruned
    assert "--requirement k-anonymity:k=25" in pruned
    assert "too strict" in unsatisfiable_hint(None, None, None, None)


def test_whole_table_hints_name_the_owners_whose_table_fails_and_the_nearest_setting_that_passes():
    y = np.array([0] * 90 + [1] * 10 + [0] * 50 + [1] * 50)
    parts = np.array([0] * 100 + [1] * 100)
    [hint] = whole_table_hints("cl-diversity:c=5,l=2", "hit_miss", y, parts, ["site-a", "site-b"], 2)
    assert hint.startswith("site-a: the whole table already fails cl-diversity:c=5,l=2 with hit_miss")
    assert "site-a's largest class is 90 of its 100 rows (90.0%)" in hint
    assert "--requirement cl-diversity:c=10,l=2" in hint  # 90 < c * 10 first holds at c = 10
    assert whole_table_hints("cl-diversity:c=10,l=2", "hit_miss", y, parts, ["site-a", "site-b"], 2) == []
    [small] = whole_table_hints("k-anonymity:k=150", "counts", y, parts, ["site-a", "site-b"], 2)
    assert small.startswith("site-a, site-b:") and "has only 100 rows" in small
    assert whole_table_hints("dp:epsilon=1,trees=1", "counts", y, parts, ["site-a", "site-b"], 2) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=4),
       st.sampled_from([2, 3]), st.integers(1, 8), st.sampled_from(["hit_miss", "counts"]))
def test_no_split_meets_a_requirement_its_whole_table_fails(children, l, c, disclosure):  # noqa: E741
    """What the whole-table hint claims: if the union of children fails, some child fails too."""
    rule = path_rule(f"cl-diversity:c={c},l={l}", disclosure, n_classes=3)
    counts = np.array(children, dtype=float)
    counts = counts[counts.sum(axis=1) > 0]
    if counts.size and not rule.ok(counts.sum(axis=0, keepdims=True))[0]:
        assert not rule.ok(counts).all()
