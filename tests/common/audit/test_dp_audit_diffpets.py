"""The empirical DP audit of DiffPETs: the mechanism passes at its claim, split-leaking variants fail.

D is 20 rows of class 0 with x1 in [0, 0.25] and x2 in [0, 1] (public ranges [0, 1]); the audit adds
r = (1, 0) of class 1, alone in its region. One tree of depth 1, claimed epsilon 2.

Variants that read the data where DiffPETs must not (`tests.broken_mechanisms`, registered at run time
and audited through their registry trainers) (thresholds between the node's data minimum and
maximum; the paper's stopping rule "all labels equal" on the raw rows) can separate r from D only
when r is present, so the audit refutes them. Halving the leaf noise (really 1.75 epsilon here) or
dropping the exponential mechanism's 2 Delta q denominator (at most 1.75 epsilon) leaves too little
evidence on one pair to exceed the claim, so they are not tested here (the test would only pass by luck).
"""

from __future__ import annotations

import numpy as np
import pytest

from modelshare.common.audit.dp.diffpets import ISOLATED, DiffPetsTarget, adversarial_row
from modelshare.common.audit.dp.estimate import DPAuditResult, audit_dp
from modelshare.common.data.schema import NumericAttribute, Schema
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.diffpets import DiffPets
from modelshare.common.privacy.requirements import DP, parse_requirement
from tests import broken_mechanisms

TRIALS = 3000  # per table; the leaking variants give P[E|D] = 0 against about 0.4 under D'
EPSILON = 2.0


@pytest.fixture(scope="module")
def table():
    schema = Schema((NumericAttribute("x1", 0.0, 1.0), NumericAttribute("x2", 0.0, 1.0)), "label", ("a", "b"))
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(0.0, 0.25, 20), rng.uniform(0.0, 1.0, 20)])
    return schema, X, np.zeros(20, dtype=np.int64)


@pytest.fixture(scope="module", autouse=True)
def broken():
    """The split-leaking DiffPETs variants (`tests.broken_mechanisms`) registered for this module, and gone after it."""
    records = [r for r in broken_mechanisms.RECORDS if r.name in broken_mechanisms.DIFFPETS]
    for record in records:
        registry.register(record)
    yield
    for record in records:
        registry.unregister(record.name)


def _target(table, mechanism: str = "diffpets", epsilon: float = EPSILON, **options) -> DiffPetsTarget:
    dp = parse_requirement(f"dp:epsilon={epsilon},trees=1")
    assert isinstance(dp, DP)
    return DiffPetsTarget(dp, 1, *table, mechanism=mechanism, **options)


def _audit(mechanism: str, table) -> DPAuditResult:
    return audit_dp(_target(table, mechanism), TRIALS, np.random.default_rng(1))


def test_the_added_row_is_alone_at_the_far_end(table):
    schema, X, y = table
    row, label = adversarial_row(schema, X, y)
    assert row.tolist() == [1.0, 0.0] and label == 1
    target = _target(table)
    assert target.path.X1.shape == (21, 2) and target.path.y1[-1] == 1
    assert target.describe()["rows_of_r_class_in_D"] == 0
    with pytest.raises(ValueError, match="give both row and label"):
        _target(table, row=row)


def test_the_score_reads_isolation_and_the_excess_count(table):
    schema, X, y = table
    target = _target(table, epsilon=1e9)
    trees = DiffPets(1e9, 1, 1, n_candidates=1).fit(schema, target.path.X1, target.path.y1, rng=0).trees
    separated = not (trees[0].apply(X) == trees[0].apply(target.path.row[None, :])[0]).any()
    assert target.score(trees) == (ISOLATED + 1 if separated else 1)  # exact counts: r adds one of its class


def test_diffpets_passes_at_its_claimed_epsilon(table):
    result = _audit("diffpets", table)
    assert result.passed and result.epsilon_lower < EPSILON, result


@pytest.mark.parametrize("variant", sorted(broken_mechanisms.DIFFPETS))
def test_variants_that_split_on_the_data_fail(table, variant):
    result = _audit(variant, table)
    assert not result.passed and result.epsilon_lower > EPSILON + 1.5 and result.p_d == 0.0, result

