"""Deliberately broken mechanisms (`tests.broken_mechanisms`), registered at run time, fail the empirical DP audit.

Each variant is the real trainer with one flaw, registered under its own name with the real
mechanism's audit target; the audit runs it through the registered release path as a black box, as
`modelshare privacy audit-dp NAME` would, and its lower bound must exceed the claim at a fixed seed.
The real mechanisms must pass at the same settings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from modelshare.common.audit.dp.dpea import tiny_table
from modelshare.common.audit.dp.estimate import DPAuditResult, audit_dp
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.mechanisms import registry
from modelshare.common.privacy.requirements import parse_requirement
from tests import broken_mechanisms

KANON = "dps:k=3,beta=0.5,epsilon=2,trees=2"
# (table, claim, depth, trials per table, target options): the laplace-rdt halved noise needs the most
# evidence (about 13 s for 2000 trials per table of one tree of depth 3 on 300 rows); the others fail
# with P[E|D] = 0 at a few hundred trials
SETTINGS: dict[str, tuple[str, str, int, int, dict[str, Any]]] = {
    "laplace": ("nursery", "dp:epsilon=1,trees=1", 3, 2000, {}),
    "laplace-light": ("nursery", "dp:epsilon=1,trees=2", 3, 400, {}),
    "kanon-threshold": ("nursery", KANON, 2, 400, {}),
    "kanon-sparse": ("nursery", KANON, 2, 400, {"aim": "sparse"}),
    "diffpets": ("corner", "dp:epsilon=2,trees=1", 1, 1000, {}),
    "dpea": ("tiny", "dp:epsilon=2,trees=1", 2, 300, {}),
    "dpea-nb": ("nursery", "dp:epsilon=1,trees=1", 1, 300, {}),
    "dpea-nb-tie": ("tie", "dp:epsilon=1,trees=1", 1, 400, {}),
}
BROKEN = [  # variant, setting, the lower bound it must exceed (its claim, or more)
    ("laplace-rdt-no-empty-noise", "laplace-light", 3.0),
    ("laplace-rdt-half-noise", "laplace", 1.0),
    ("kanon-rdt-no-sampling", "kanon-threshold", 2.0),
    ("kanon-rdt-no-suppression", "kanon-sparse", 2.0),
    ("diffpets-data-thresholds", "diffpets", 3.5),
    ("diffpets-raw-purity", "diffpets", 3.0),
    ("dpea-no-empty-noise", "dpea", 2.5),
    ("dpea-nb-no-empty-noise", "dpea-nb", 2.0),
    ("dpea-nb-noiseless-picks", "dpea-nb-tie", 2.0),
    ("dpea-nb-noiseless-temperature", "dpea-nb-tie", 1.5),
]
REAL = {"laplace": "laplace-rdt", "laplace-light": "laplace-rdt", "kanon-threshold": "kanon-rdt",
        "kanon-sparse": "kanon-rdt", "diffpets": "diffpets", "dpea": "dpea",
        "dpea-nb": "dpea-nb", "dpea-nb-tie": "dpea-nb"}


@pytest.fixture(scope="module")
def tables(nursery):
    """The audits' D: 300 rows of Nursery, 20 rows in one corner of [0, 1]^2 (DiffPETs' isolated-row pair),
    DPEA's six-row table whose structures the target lists, and dpea-nb's tie: 200 rows whose class is both a
    and b (so a one-row r decides the root's most likely split, and which temperature classifies the most rows)."""
    schema, X, y = nursery
    rows = np.random.default_rng(0).choice(len(y), 300, replace=False)
    corner = Schema((NumericAttribute("x1", 0.0, 1.0), NumericAttribute("x2", 0.0, 1.0)), "label", ("a", "b"))
    rng = np.random.default_rng(0)
    X2 = np.column_stack([rng.uniform(0.0, 0.25, 20), rng.uniform(0.0, 1.0, 20)])
    tie = Schema(tuple(CategoricalAttribute(name, size) for name, size in (("a", ("0", "1")), ("b", ("0", "1")),
                                                                         ("c", ("0", "1", "2")))),
                 "label", ("no", "yes"))
    halves = np.repeat([0, 1], 100)
    X3 = np.column_stack([halves, halves, rng.integers(0, 3, 200)]).astype(np.float64)
    return {"nursery": (schema, X[rows], y[rows]), "corner": (corner, X2, np.zeros(20, dtype=np.int64)),
            "tiny": tiny_table(), "tie": (tie, X3, halves.astype(np.int64))}


@pytest.fixture(scope="module", autouse=True)
def broken():
    """Every broken variant registered for this module, and gone after it."""
    for record in broken_mechanisms.RECORDS:
        registry.register(record)
    yield
    for record in broken_mechanisms.RECORDS:
        registry.unregister(record.name)


def _audit(name: str, setting: str, tables) -> DPAuditResult:
    """The registered target of ``name`` at ``setting``, audited at seed 1 (what the CLI builds)."""
    table, claim, depth, trials, options = SETTINGS[setting]
    schema, X, y = tables[table]
    rng = np.random.default_rng(1)
    factory = registry.get(name).resolve_dp_audit_target()
    assert factory is not None
    target = factory(parse_requirement(claim), depth, schema, X, y, rng, mechanism=name, **options)
    return audit_dp(target, trials, rng)


@pytest.mark.parametrize("name, setting, above", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_variant_fails(name, setting, above, tables):
    result = _audit(name, setting, tables)
    assert not result.passed and result.epsilon_lower > above, result
    assert result.neighbours["release_path"] == f"registry trainer of {name!r}"


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_the_real_mechanism_passes_at_the_same_setting(setting, tables):
    result = _audit(REAL[setting], setting, tables)
    assert result.passed and result.epsilon_lower < result.epsilon, result
