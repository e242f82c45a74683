"""A public domain read off the private rows (issue: privacy hardening, defect 2).

The attack: a release over an inferred schema carries one person's exact maximum and a rare
category in its public domain, next to an unqualified DP claim. Now a dp or dps release refuses a
data-derived domain unless asked; if asked, it is marked and its audit fails the claim; a study
refuses such a schema; simulate refuses before starting any process.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pytest

from modelshare.common.audit.release import audit
from modelshare.common.data.schema import Schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.study import StudyError, spec_from_mapping
from modelshare.common.federation.wire import decode_model, model_message, schema_from_pb, schema_to_pb
from modelshare.common.mechanisms.release import release
from modelshare.simulate import prepare


@pytest.fixture
def outlier_table():
    """400 ordinary incomes and one person's 987654, with a category only that person has."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"income": np.append(rng.integers(1000, 90000, 400), 987654).astype(float),
                          "region": np.append(rng.choice(["north", "south"], 400), "zz-rare"),
                          "label": np.append(rng.choice(["yes", "no"], 400), "yes")})
    schema = Schema.infer(frame, "label")
    X, y = schema.encode(frame)
    return schema, X, y


def test_the_inferred_schema_carries_the_outlier_and_says_it_is_data_derived(outlier_table):
    schema, _, _ = outlier_table
    assert schema.data_derived and schema.to_dict()["domain"] == "data-derived"
    assert schema.attributes[0].high == 987654 and "zz-rare" in schema.attributes[1].categories
    assert schema_from_pb(schema_to_pb(schema)) == schema  # the mark travels


@pytest.mark.parametrize("mechanism, requirement", [
    ("laplace-rdt", "dp:epsilon=1,trees=2"), ("dpea", "dp:epsilon=1,trees=1"), ("diffpets", "dp:epsilon=1,trees=2"),
    ("kanon-rdt", "dps:k=3,beta=0.5,epsilon=4,trees=2"),
])
def test_a_dp_or_dps_release_refuses_a_data_derived_domain_and_fails_its_audit_when_forced(
        outlier_table, mechanism, requirement):
    schema, X, y = outlier_table
    with pytest.raises(ValueError, match="needs a public domain"):
        release(mechanism, requirement=requirement, schema=schema, X=X, y=y, max_depth=2)
    forced = release(mechanism, requirement=requirement, schema=schema, X=X, y=y, max_depth=2,
                     allow_data_derived_domain=True)
    assert forced.report.parameters["domain"] == "data-derived"
    result = audit(forced.trees, forced.report)
    assert not result.passed and {c.name for c in result.checks if not c.passed} == {"public domain"}
    decoded = decode_model(fpb.ModelMessage.FromString(model_message(forced).SerializeToString()))
    assert not audit(decoded.trees, decoded.report).passed  # what a miner re-audits fails too
    public = Schema(schema.attributes, schema.class_name, schema.classes)  # the same bounds stated publicly
    assert audit(*_release_over(public, X, y, mechanism, requirement)).passed


def _release_over(schema, X, y, mechanism, requirement):
    found = release(mechanism, requirement=requirement, schema=schema, X=X, y=y, max_depth=2)
    return found.trees, found.report


def test_a_dp_study_refuses_a_data_derived_schema(tmp_path, outlier_table):
    schema, _, _ = outlier_table
    schema.save(tmp_path / "schema.json")
    data = {"study": {"id": "s"}, "schema": {"file": "schema.json"},
            "release": {"mechanism": "laplace-rdt", "requirement": "dp:epsilon=1,trees=2", "disclosure": "counts"},
            "training": {"max_depth": 2}}
    with pytest.raises(StudyError, match="needs a public domain; the study's schema was read from a table"):
        spec_from_mapping(data, base=tmp_path)
    data["release"] = {"mechanism": "apt", "requirement": "k-anonymity:k=5", "disclosure": "hit_miss"}
    study_from_pb(spec_from_mapping(data, base=tmp_path).spec)  # anonymity studies only warn (at the CLI)


def test_simulate_refuses_a_dp_study_on_a_table_without_a_schema(tmp_path, capsys) -> None:
    from modelshare.cli import build_parser

    path = tmp_path / "t.csv"
    pd.DataFrame({"a": np.arange(60.0), "c": ["x", "y"] * 30}).to_csv(path, index=False)
    args: argparse.Namespace = build_parser(("simulate",)).parse_args(
        ["simulate", "--data", str(path), "--class-column", "c", "--mechanism", "laplace-rdt", "--owners", "2"])
    with pytest.raises(ValueError, match="needs a public domain, and --data has no --schema"):
        prepare(args, tmp_path / "run")
    assert not (tmp_path / "run" / "kits").exists()  # refused before provisioning anything


def test_a_draft_schema_still_marked_data_derived_is_named_with_the_line_to_delete(tmp_path, capsys) -> None:
    from modelshare.cli import build_parser, main

    path = tmp_path / "t.csv"
    pd.DataFrame({"a": np.arange(60.0), "c": ["x", "y"] * 30}).to_csv(path, index=False)
    draft = tmp_path / "draft.toml"
    assert main(["schema", "infer", str(path), "--class-column", "c", "--out", str(draft)]) == 0
    args: argparse.Namespace = build_parser(("simulate",)).parse_args(
        ["simulate", "--data", str(path), "--class-column", "c", "--schema", str(draft), "--mechanism", "laplace-rdt"])
    with pytest.raises(ValueError, match="draft.toml is still marked domain = \"data-derived\"") as refusal:
        prepare(args, tmp_path / "run")
    assert "has no --schema" not in str(refusal.value)
    assert 'delete its line domain = "data-derived"' in str(refusal.value)
    capsys.readouterr()
    assert main(["release", "--data", str(path), "--class-column", "c", "--schema", str(draft), "--mechanism", "apt",
                 "--requirement", "k-anonymity:k=5", "--out", str(tmp_path / "m.json")]) == 0
    warned = " ".join(capsys.readouterr().err.split())
    assert "draft.toml is still marked domain = \"data-derived\"" in warned and "has no --schema" not in warned
    assert 'delete its line domain = "data-derived"' in warned


def test_a_regression_table_read_with_only_its_target_range_is_data_derived_and_refused(tmp_path):
    from modelshare.common.data.regression import RegressionSchema
    from modelshare.common.data.task import load_regression_table

    rng = np.random.default_rng(1)
    pd.DataFrame({"x": np.append(rng.uniform(0, 10, 200), 987654.0), "y": rng.uniform(0, 5, 201)}).to_csv(
        tmp_path / "r.csv", index=False)
    table = load_regression_table(tmp_path / "r.csv", "y", target_range=(0, 5))
    assert table.schema.data_derived and table.schema.attributes[0].high == 987654.0
    assert RegressionSchema.from_dict(table.schema.to_dict()) == table.schema
    assert schema_from_pb(schema_to_pb(table.schema)) == table.schema
    with pytest.raises(ValueError, match="needs a public domain"):
        release("diffpets", requirement="dp:epsilon=1,trees=2", schema=table.schema, X=table.X, y=table.y,
                max_depth=2)
    forced = release("diffpets", requirement="dp:epsilon=1,trees=2", schema=table.schema, X=table.X, y=table.y,
                     max_depth=2, allow_data_derived_domain=True)
    result = audit(forced.forest, forced.report)
    assert not result.passed and {c.name for c in result.checks if not c.passed} == {"public domain"}
