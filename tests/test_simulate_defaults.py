"""`simulate` with its defaults (apt, cl-diversity:c=5,l=2, hit/miss, the admissible learner): every owner releases."""

from __future__ import annotations

import json

import pytest

from modelshare.cli import main
from modelshare.simulate import unsatisfiable_hint


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
