"""The owner learners and the APT release give the same trees, bit for bit, as the implementation they replaced.

`tests/fixtures/learner_trees.json` holds a fingerprint (SHA-256 of every node's label, statistics,
attribute and edges, floats by their exact ``repr``) of each case's tree, written by the learners as
they were before they grew on binned column codes; a case is a bundled table (Adult sampled with a
seed), a learner with its options and, for the release cases, APT with its requirement. Regenerate
only on purpose: ``python tests/common/trees/test_learner_equivalence.py --write``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from modelshare.common.data.datasets import load_dataset
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable
from modelshare.common.mechanisms.release import local_learner, release
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.tree import CategorySet, Disclosure, Tree

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "learner_trees.json"

# (table, learner, mechanism for local_learner or None for make_learner, requirement, disclosure, options)
CASES: dict[str, tuple[str, str, str | None, str | None, Disclosure, dict[str, Any]]] = {
    "car-multiway-raw": ("car", "multiway", None, None, "counts", {}),
    "nursery-multiway-raw": ("nursery", "multiway", None, None, "counts", {}),
    "vote-multiway-raw": ("vote", "multiway", None, None, "counts", {}),
    "adult:3000:0-multiway-raw": ("adult:3000:0", "multiway", None, None, "counts", {}),
    "adult:20000:6-multiway-raw-depth8": ("adult:20000:6", "multiway", None, None, "counts", {"max_depth": 8}),
    "adult:3000:1-multiway-infogain-depth6": ("adult:3000:1", "multiway", None, None, "counts",
                                              {"criterion": "info_gain", "max_depth": 6, "min_samples_leaf": 5}),
    "adult:8000:2-multiway-apt-k10": ("adult:8000:2", "multiway", "apt", "k-anonymity:k=10", "counts", {}),
    "nursery-multiway-apt-cl52": ("nursery", "multiway", "apt", "cl-diversity:c=5,l=2", "hit_miss", {}),
    "car-multiway-apt-k5": ("car", "multiway", "apt", "k-anonymity:k=5", "counts", {}),
    "adult:8000:0-admissible-apt-k10": ("adult:8000:0", "admissible", "apt", "k-anonymity:k=10", "counts", {}),
    "adult:6000:3-admissible-apt-cl52": ("adult:6000:3", "admissible", "apt", "cl-diversity:c=5,l=2", "hit_miss", {}),
    "adult:6000:4-admissible-apt-cl52-counts-binary": ("adult:6000:4", "admissible", "apt", "cl-diversity:c=5,l=2",
                                                       "counts", {"category_split": "binary"}),
    "nursery-admissible-apt-cl52": ("nursery", "admissible", "apt", "cl-diversity:c=5,l=2", "hit_miss", {}),
    "nursery-admissible-apt-cl102-either": ("nursery", "admissible", "apt", "cl-diversity:c=10,l=2", "hit_miss",
                                            {"category_split": "either"}),
    "nursery-admissible-apt-cl52-eager": ("nursery", "admissible", "apt", "cl-diversity:c=5,l=2", "hit_miss",
                                          {"pairing": "eager"}),
    "nursery-admissible-apt-k20-grouped": ("nursery", "admissible", "apt", "k-anonymity:k=20", "counts",
                                           {"category_split": "grouped", "pairing": "eager"}),
    "car-admissible-apt-cl32": ("car", "admissible", "apt", "cl-diversity:c=3,l=2", "hit_miss", {}),
    "car-admissible-apt-k5-unpruned": ("car", "admissible", "apt", "k-anonymity:k=5", "counts", {}),
    "vote-admissible-apt-cl32": ("vote", "admissible", "apt", "cl-diversity:c=3,l=2", "hit_miss", {}),
    "vote-admissible-apt-k3-either": ("vote", "admissible", "apt", "k-anonymity:k=3", "counts", {}),
    "adult:20000:7-admissible-raw-depth6": ("adult:20000:7", "admissible", None, None, "counts",
                                            {"max_depth": 6, "min_samples_leaf": 20}),
    "adult:3000:5-admissible-raw-infogain": ("adult:3000:5", "admissible", None, None, "counts",
                                             {"criterion": "info_gain", "min_samples_leaf": 5, "max_depth": 8}),
    "car-admissible-none": ("car", "admissible", "none", None, "counts", {"confidence": 0.1}),
}


@cache
def _table(name: str) -> tuple[Any, np.ndarray, np.ndarray]:
    """A bundled table's schema and encoded rows; ``adult:N:SEED`` is N rows of Adult drawn with SEED."""
    base, *sample = name.split(":")
    table = load_dataset(base)
    X, y = table.schema.encode(table.frame, source=table.source)
    if sample:
        n, seed = int(sample[0]), int(sample[1])
        rows = np.sort(np.random.default_rng(seed).choice(len(y), size=n, replace=False))
        X, y = X[rows], y[rows]
    return table.schema, X, y


def fingerprint(tree: Tree) -> str:
    """SHA-256 of the tree's disclosure and every node: label, hit, miss, counts, attribute, edges (exact floats)."""
    parts: list[Any] = [tree.disclosure]
    for node in tree.nodes:
        counts = None if node.counts is None else [repr(float(c)) for c in node.counts]
        edges = [[sorted(e.constraint.codes) if isinstance(e.constraint, CategorySet)
                  else [repr(float(e.constraint.low)), repr(float(e.constraint.high)),
                        e.constraint.low_closed, e.constraint.high_closed], e.child] for e in node.edges]
        parts.append([node.label, repr(float(node.hit)), repr(float(node.miss)), counts, node.attribute, edges])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def run_case(case: str) -> dict[str, Any]:
    """The case's trained tree (and released tree, for a mechanism) as fingerprints and leaf counts."""
    table, learner, mechanism, requirement, disclosure, options = CASES[case]
    schema, X, y = _table(table)
    if mechanism is None:
        trained = make_learner(learner, schema, **options).fit(X, y).tree_
        return {"trained": fingerprint(trained), "trained_leaves": trained.n_leaves}
    model = local_learner(learner, schema, mechanism, requirement=requirement, disclosure=disclosure, **options)
    trained = model.fit(X, y).tree_
    found = {"trained": fingerprint(trained), "trained_leaves": trained.n_leaves}
    try:
        released = release(mechanism, tree=trained, requirement=requirement, disclosure=disclosure)
    except RequirementUnsatisfiable as refused:
        return {**found, "refused": str(refused)}
    return {"trained": fingerprint(trained), "trained_leaves": trained.n_leaves,
            "released": fingerprint(released.tree), "released_leaves": released.tree.n_leaves,
            "report": hashlib.sha256(json.dumps(released.report.to_dict(), sort_keys=True).encode()).hexdigest()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_trees_as_before(case: str) -> None:
    expected = json.loads(FIXTURE.read_text())[case]
    assert run_case(case) == expected


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps({case: run_case(case) for case in sorted(CASES)}, indent=1, sort_keys=True) + "\n")
