"""DPEA's compact public domain: the release fits 2 MB on the
wire, passes its audit, and the audit checks the domain."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.federation.wire import model_message
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.dpea import (
    DEFAULT_BINS,
    MESSAGE_BYTES,
    RELEASE_BYTES,
    Domain,
    accounting_errors,
    domain_check,
    finest_bins,
    release_domain,
)
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.report import Release
from modelshare.common.trees.tree import CategorySet


def _wide(rows: int, seed: int = 0) -> tuple[Schema, np.ndarray, np.ndarray]:
    """20 attributes: 10 numeric, 10 categorical of 2-40 categories; the class follows a numeric one."""
    rng = np.random.default_rng(seed)
    sizes = [2, 3, 5, 8, 12, 16, 20, 25, 30, 40]
    schema = Schema(tuple([NumericAttribute(f"x{i}", 0.0, 10.0 * (i + 1)) for i in range(10)]
                          + [CategoricalAttribute(f"c{i}", tuple(f"v{j}" for j in range(n)))
                             for i, n in enumerate(sizes)]),
                    "label", ("a", "b", "c"))
    X = np.hstack([rng.random((rows, 10)) * 10.0 * np.arange(1, 11),
                   np.column_stack([rng.integers(0, n, rows) for n in sizes])]).astype(np.float64)
    y = np.minimum((X[:, 0] // 4).astype(np.int64), 2)
    return schema, X, y


def _default_release(schema: Schema, X: np.ndarray, y: np.ndarray) -> Release:
    """DPEA's trees at its defaults: no class histogram (prior_share 0), whose decline would leave a few hundred
    rows without trees to measure."""
    record = registry.get("dpea")
    return release("dpea", requirement=record.default_requirement, schema=schema, X=X, y=y,
                   max_depth=record.default_max_depth, prior_share=0.0)


@pytest.fixture(scope="module")
def adult_release() -> Release:
    table = load_dataset("adult")
    X, y = table.schema.encode(table.frame.iloc[:400])
    return _default_release(table.schema, X, y)


def test_a_default_release_on_numeric_tables_fits_two_mb_on_the_wire_and_passes_its_audit(adult_release):
    wide = _default_release(*_wide(300))
    for released in (adult_release, wide):
        assert model_message(released).ByteSize() <= RELEASE_BYTES
        result = audit(list(released.trees), released.report)
        assert result.passed, [c for c in result.checks if not c.passed]
        assert released.report.parameters["domain_rule"] == "compact"


def test_the_worst_case_release_of_any_twenty_attribute_schema_fits_the_bound():
    """The bound is on the full structure (every leaf kept) and counts the codes of the widest group."""
    schema = _wide(10)[0]
    for depth, trees in ((4, 10), (3, 1), (6, 64)):
        bins, cap = release_domain(schema, depth, trees)
        space = Domain.of(schema, bins, cap)
        fits = trees * space.max_nodes(depth) * space.node_bytes() <= RELEASE_BYTES - MESSAGE_BYTES
        assert fits or (bins, cap) == (2, 2)
    assert release_domain(schema, 3, 1) == (DEFAULT_BINS, DEFAULT_BINS)
    assert release_domain(schema, 4, 10, "paper") == (finest_bins(schema, 4), None)


def test_the_node_bound_covers_the_wire_bytes_of_each_node():
    schema, X, y = _wide(200)
    released = release("dpea", requirement="dp:epsilon=1,trees=1", schema=schema, X=X, y=y, max_depth=2)
    space = Domain.of(schema, *release_domain(schema, 2, 1))
    assert len(released.trees[0].nodes) > 100
    assert model_message(released).ByteSize() <= len(released.trees[0].nodes) * space.node_bytes() + MESSAGE_BYTES


def test_categories_beyond_the_cap_form_public_groups_of_consecutive_categories():
    schema = Schema((CategoricalAttribute("c", tuple(f"v{i}" for i in range(41))), NumericAttribute("x", 0.0, 1.0)),
                    "label", ("a", "b"))
    space = Domain.of(schema, 6, 6)
    assert space.arity.tolist() == [6, 6]
    groups = [sorted(c.codes) for c in space.constraints(0)]
    assert sorted(code for g in groups for code in g) == list(range(41))
    assert {len(g) for g in groups} <= {6, 7} and all(g == list(range(g[0], g[-1] + 1)) for g in groups)
    codes = space.codes(np.array([[float(v), 0.5] for v in range(41)]))[:, 0]
    assert all(v in groups[code] for v, code in enumerate(codes))
    assert space.point(np.array([3, 0]))[0] == groups[3][0]
    assert Domain.of(schema, 6).constraints(0)[5] == CategorySet(frozenset({5}))  # no cap: the paper's domain


def _misstated(released: Release, **parameters) -> Release:
    report = dataclasses.replace(released.report, parameters={**released.report.parameters, **parameters})
    return Release(released.trees, report)


def _failed(released: Release) -> list[str]:
    return [c.name for c in audit(list(released.classification_trees), released.report).checks if not c.passed]


def test_the_audit_catches_a_misstated_domain(adult_release):
    parameters = adult_release.report.parameters
    assert parameters["bins"] == parameters["max_arity"] == 6
    name = "splits on the stated public domain"
    assert name in _failed(_misstated(adult_release, max_arity=8))  # the rule gives 6
    assert name in _failed(_misstated(adult_release, bins=8, max_arity=8, domain_rule="paper"))
    no_rule = {k: v for k, v in parameters.items() if k != "domain_rule"}
    stripped = Release(adult_release.trees, dataclasses.replace(adult_release.report, parameters=no_rule))
    assert _failed(stripped) == []  # held to its stated bins and max_arity, which its splits follow
    assert name in _failed(_misstated(stripped, max_arity=None))  # the groups are not single categories
    assert name in _failed(_misstated(adult_release, depth=1))  # splits below the stated depth
    assert accounting_errors({**parameters, "max_arity": 1})  # not a valid setting
    assert not domain_check(adult_release.trees, {**parameters, "domain_rule": "tiny"}).passed
