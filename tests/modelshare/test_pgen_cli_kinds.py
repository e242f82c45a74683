"""`modelshare pgen` on every kind of release over a schema with integer attributes: CSV and Parquet
keep the integer columns integer, and ``--json`` prints one object (rows written, file, release kind)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Attribute, NumericAttribute, Schema
from modelshare.common.federation.model_io import write_release
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.report import Release
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.tree import Disclosure

#: Adult's schema with its whole-number attributes declared integer (the bundled one leaves them real).
INTEGER_COLUMNS = ("age", "education-num", "hours-per-week")


def _integer(attribute: Attribute) -> Attribute:
    """``attribute`` declared integer when it is one of `INTEGER_COLUMNS` (all numeric), else unchanged."""
    if attribute.name not in INTEGER_COLUMNS:
        return attribute
    assert isinstance(attribute, NumericAttribute), attribute
    return dataclasses.replace(attribute, integer=True)


@pytest.fixture(scope="module")
def adult() -> tuple[Schema, np.ndarray, np.ndarray]:
    table = load_dataset("adult")
    schema = table.schema
    schema = Schema(tuple(_integer(a) for a in schema.attributes), schema.class_name, schema.classes)
    frame = table.frame.sample(1500, random_state=0)
    X, y = schema.encode(frame)
    return schema, X, y


TREE_KINDS: list[tuple[str, str | None, Disclosure]] = [
    ("none", None, "counts"), ("apt", "k-anonymity:k=10", "hit_miss"),
    ("prune-leaf", "k-anonymity:k=10", "counts"), ("prune-parent", "k-anonymity:k=10", "counts")]
WHOLE_KINDS = [("kanon-rdt", "dps:k=5,beta=0.5,epsilon=4,trees=3"), ("laplace-rdt", "dp:epsilon=2,trees=3"),
               ("diffpets", "dp:epsilon=2,trees=3"), ("dpea", "dp:epsilon=2,trees=2")]


def _release(kind: str, requirement: str | None, disclosure: Disclosure, data) -> Release:
    schema, X, y = data
    if kind in dict(WHOLE_KINDS):
        return release(kind, requirement=requirement, schema=schema, X=X, y=y, max_depth=3, random_state=1)
    tree = make_learner("cart", schema, max_depth=5, random_state=0, public_cuts=True).fit(X, y).tree_
    return release(kind, tree=tree, requirement=requirement, disclosure=disclosure)


def _pgen_json(model, out, capsys) -> dict:
    capsys.readouterr()
    assert main(["pgen", str(model), "--out", str(out), "--json"]) == 0
    printed = capsys.readouterr().out
    return json.loads(printed)  # exactly one object: json.loads refuses anything after it


def _assert_integer_columns(frame: pd.DataFrame, csv_text: list[str] | None, columns) -> None:
    for name in columns:
        assert pd.api.types.is_integer_dtype(frame[name]), (name, frame[name].dtype)
    if csv_text is not None:
        header = csv_text[0].split(",")
        for line in csv_text[1:50]:
            cells = dict(zip(header, line.split(","), strict=False))
            assert all("." not in cells[name] for name in columns), line


@pytest.mark.parametrize("kind, requirement, disclosure",
                         TREE_KINDS + [(k, r, "counts") for k, r in WHOLE_KINDS],
                         ids=[k for k, *_ in TREE_KINDS] + [k for k, _ in WHOLE_KINDS])
def test_pgen_writes_every_release_kind_with_integer_columns_integer(tmp_path, capsys, adult, kind, requirement,
                                                                     disclosure):
    model = tmp_path / "model.json"
    write_release(_release(kind, requirement, disclosure, adult), model)
    for suffix in (".csv", ".parquet"):
        out = tmp_path / f"pseudo{suffix}"
        report = _pgen_json(model, out, capsys)
        assert report["out"] == str(out) and report["model"] == str(model) and report["mechanism"] == kind
        assert report["kind"] == ("tree" if kind in dict((k, 0) for k, *_ in TREE_KINDS) else "ensemble of 3 trees"
                                  if kind != "dpea" else "ensemble of 2 trees")
        frame = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
        assert report["rows"] == len(frame) > 0
        _assert_integer_columns(frame, out.read_text().splitlines() if suffix == ".csv" else None, INTEGER_COLUMNS)
        assert list(frame.columns) == [*adult[0].names, adult[0].class_name]


def test_pgen_writes_a_regression_release_with_integer_columns_integer(tmp_path, capsys):
    schema = RegressionSchema((NumericAttribute("x", 0.0, 1.0), NumericAttribute("visits", 0.0, 20.0, integer=True)),
                              NumericAttribute("y", 0.0, 10.0))
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.uniform(0, 1, 400), rng.integers(0, 21, 400)]).astype(np.float64)
    y = np.clip(2 + 6 * X[:, 0] + X[:, 1] / 10, 0, 10)
    model = tmp_path / "forest.json"
    write_release(release("diffpets", schema=schema, X=X, y=y, requirement="dp:epsilon=10,trees=2", max_depth=3,
                          random_state=1), model)
    for suffix in (".csv", ".parquet"):
        out = tmp_path / f"pseudo{suffix}"
        report = _pgen_json(model, out, capsys)
        assert report["kind"] == "regression forest of 2 trees" and report["mechanism"] == "diffpets"
        frame = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
        assert report["rows"] == len(frame) > 0
        _assert_integer_columns(frame, out.read_text().splitlines() if suffix == ".csv" else None, ["visits"])
        assert not pd.api.types.is_integer_dtype(frame["x"])


def test_pgen_json_on_a_bad_model_is_one_error_object(tmp_path, capsys):
    model = tmp_path / "model.json"
    model.write_text("{not json")
    assert main(["pgen", str(model), "--out", str(tmp_path / "p.csv"), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert "error" in error
