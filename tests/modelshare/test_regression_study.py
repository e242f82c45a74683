"""A DiffPETs regression study through the whole pipeline: schema, release, wire, miner, re-audit, PGEN, RMSE/MAE."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import grpc
import numpy as np
import pytest

from modelshare.admin import results_dict, write_results
from modelshare.cli import build_parser, main
from modelshare.common.audit.release import audit
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema, SchemaError
from modelshare.common.data.task import load_regression_table, load_schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import sign_payload
from modelshare.common.federation.study import StudyError, load_study_file, spec_from_mapping
from modelshare.common.federation.wire import WireError, decode_model, model_message
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.report import PrivacyReport, Release
from modelshare.common.trees.metrics import mae, rmse
from modelshare.miner_node.dp_pgen import PGEN_LEAF_SHARE
from modelshare.miner_node.global_models import make_regression_model
from modelshare.owner_node.budget import Ledger
from modelshare.owner_node.daemon import OwnerDaemon
from modelshare.owner_node.training import build_submission
from modelshare.report_html import study_report, write_report
from modelshare.simulate import prepare
from tests.federation_helpers import REGRESSION_SCHEMA as SCHEMA
from tests.federation_helpers import Federation, make_federation, regression_rows

DP = "dp:epsilon=1000,trees=2"  # large epsilon: the noise is negligible, the structure is what is tested
DEPTH = 4
def _release(seed: int = 0, requirement: str = DP) -> Release:
    X, y = regression_rows(150, seed)
    return release("diffpets", schema=SCHEMA, X=X, y=y, requirement=requirement, max_depth=DEPTH)  # secure noise


def _spec(tmp: Path, study_id: str, *, mechanism: str = "diffpets", owners: list[str] | None = None,
          models: tuple[str, ...] = ("regression-tree", "random-forest")) -> fpb.StudySpec:
    SCHEMA.save(tmp / "schema.json")
    data = {"study": {"id": study_id, "owners": owners or [], "deadline_minutes": 10},
            "schema": {"file": "schema.json"},
            "release": {"mechanism": mechanism, "requirement": DP},
            "training": {"max_depth": DEPTH}, "mining": {"global_models": list(models), "pgen_scale": 10}}
    return spec_from_mapping(data, base=tmp).spec


# --------------------------------------------------------------- declaration
def test_a_schema_file_declares_the_task_and_the_targets_public_bounds(tmp_path):
    (tmp_path / "r.toml").write_text('task = "regression"\ntarget = {name = "y", low = 0, high = 10}\n'
                                     '[[attributes]]\nname = "x1"\ntype = "numeric"\nlow = 0\nhigh = 1\n')
    schema = load_schema(tmp_path / "r.toml")
    assert isinstance(schema, RegressionSchema) and schema.target == NumericAttribute("y", 0.0, 10.0)
    SCHEMA.save(tmp_path / "r.json")
    assert load_schema(tmp_path / "r.json") == SCHEMA
    with pytest.raises(SchemaError, match="r.json: the schema declares task = 'regression'; a classification schema"):
        Schema.load(tmp_path / "r.json")
    (tmp_path / "bad.json").write_text(json.dumps({**SCHEMA.to_dict(), "target": {"name": "y", "low": 0}}))
    with pytest.raises(SchemaError, match="bad.json: field 'target' needs name, low and high"):
        load_schema(tmp_path / "bad.json")
    car = tmp_path / "car.json"
    Schema((CategoricalAttribute("a", ("x", "y")),), "class", ("p", "q")).save(car)
    assert isinstance(load_schema(car), Schema)  # a file without a task stays a classification schema
    assert SCHEMA.fingerprint != SCHEMA.features().fingerprint


def test_a_regression_study_states_its_task_and_refuses_every_other_mechanism(tmp_path):
    spec = _spec(tmp_path, "r1")
    study_from_pb(spec)
    assert study_from_pb(spec).describe()["task"] == "regression" and study_from_pb(spec).describe()["class"] == "y"
    assert spec.schema.HasField("target") and not spec.schema.classes
    for mechanism in ("apt", "laplace-rdt"):
        with pytest.raises(StudyError, match=f"mechanism '{mechanism}' cannot release a model for task 'regression' "
                                             "\\(numeric target 'y'\\); only 'diffpets' can"):
            _spec(tmp_path, "r2", mechanism=mechanism)
    spec.mechanism = "dpea"  # a study made elsewhere: the owner refuses it before touching its rows
    X, y = regression_rows(50, 0)
    with pytest.raises(ValueError, match="mechanism 'dpea' cannot release a model for task 'regression'"):
        build_submission(study_from_pb(spec), X, y, owner_id="o", key=None)
    with pytest.raises(ValueError, match="mechanism 'laplace-rdt' cannot release a model for task 'regression'"):
        release("laplace-rdt", schema=SCHEMA, X=X, y=y, requirement=DP, max_depth=2)


# -------------------------------------------------------------------- wire
def test_the_wire_round_trip_of_a_regression_forest_is_exact():
    release = _release()
    message = model_message(release, study_id="s", owner_id="o")
    decoded = decode_model(fpb.ModelMessage.FromString(message.SerializeToString()))
    assert decoded.trees == () and decoded.schema == SCHEMA and message.schema_fingerprint == SCHEMA.fingerprint
    assert decoded.report == release.report  # the target's bounds come back as a table
    assert len(decoded.forest.trees) == len(release.forest.trees) == 2
    for sent, received in zip(release.forest.trees, decoded.forest.trees, strict=False):
        assert received.nodes == sent.nodes  # counts, sums, split attributes and edges, bit for bit
    X, _ = regression_rows(200, 9)
    assert np.array_equal(decoded.forest.predict(X), release.forest.predict(X))


@pytest.mark.parametrize("mutate, message", [
    (lambda m: setattr(m.regression_trees[0].nodes[2], "count", math.nan),
     "regression tree 0: node 2: field 'count' is nan; a released statistic must be finite"),
    (lambda m: setattr(m.regression_trees[1].nodes[1], "total", math.inf),
     "regression tree 1: node 1: field 'total' is inf"),
    (lambda m: setattr(m.regression_trees[0].nodes[0], "count", m.regression_trees[0].nodes[0].count + 5),
     "regression tree 0: node 0: count and sum .* are not the sums of its children's"),
    (lambda m: setattr(m.regression_trees[0].nodes[0].edges[0], "child", 999), "regression tree 0: .*999"),
    (lambda m: m.regression_trees[0].nodes[0].edges[0].ClearField("constraint"),
     "regression tree 0: node 0, edge 0: edge has no constraint"),
    (lambda m: m.trees.add(), "trees: the schema is a regression schema \\(target 'y'\\)"),
    (lambda m: m.ClearField("regression_trees"), "regression_trees: a model carries 1 to 64 trees, this one 0"),
    (lambda m: m.schema.ClearField("target"), "schema: .*needs at least two classes"),
])
def test_a_malformed_regression_tree_is_refused_naming_node_and_field(mutate, message):
    msg = model_message(_release(), study_id="s", owner_id="o")
    mutate(msg)
    with pytest.raises(WireError, match=message):
        decode_model(msg)


# ----------------------------------------------------------------- re-audit
def test_the_reaudit_recomputes_the_budget_split_and_the_target_bounds():
    release = _release()
    assert audit(release.forest, release.report).passed
    for change, fragment in (({"epsilon_per_node": 1000.0}, "epsilon_per_node=1000"),
                             ({"utility_sensitivity": 1}, "utility_sensitivity=1"),
                             ({"bootstrap": True}, "bootstrap=True"),
                             ({"depth": 2}, "deeper than the stated depth 2"),
                             ({"target": {**SCHEMA.target.to_dict(), "high": 100.0}}, "the schema's is")):
        report = dataclasses.replace(release.report, parameters={**release.report.parameters, **change})
        result = audit(release.forest, report)
        assert not result.passed and any(fragment in c.detail for c in result.checks if not c.passed), change
    laplace = dataclasses.replace(release.report, mechanism="laplace-rdt")
    assert "makes no dp regression releases" in audit(release.forest, laplace).to_dict()["checks"][0]["detail"]
    path_claim = PrivacyReport("diffpets", release.report.parameters, requirement="k-anonymity:k=5")
    assert not audit(release.forest, path_claim).passed


# ------------------------------------------------------------- the miner
@pytest.fixture()
def fed(tmp_path):
    with make_federation(tmp_path, ["o1", "o2"]) as federation:
        yield federation


def _signed(fed: Federation, owner: str, release: Release, study_id: str, mutate=None) -> fpb.SignedEnvelope:
    message = model_message(release, study_id=study_id, owner_id=owner)
    if mutate is not None:
        mutate(message)
    return sign_payload(message.SerializeToString(), fed.key(owner))


def test_the_miner_refuses_a_tampered_or_misstated_regression_release_and_keeps_serving(fed, tmp_path):
    admin = fed.stub("admin")
    admin.CreateStudy(fpb.CreateStudyRequest(spec=_spec(tmp_path, "r-miner")), timeout=10)
    stub = fed.stub("o1")
    release = _release()
    nan_total = lambda m: setattr(m.regression_trees[0].nodes[1], "total", math.nan)  # noqa: E731
    with pytest.raises(grpc.RpcError) as info:
        stub.Submit(_signed(fed, "o1", release, "r-miner", nan_total), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed model: regression tree 0: node 1: field 'total' is nan" in info.value.details()
    misstated = dataclasses.replace(release, report=dataclasses.replace(
        release.report, parameters={**release.report.parameters, "epsilon_per_node": 1.0}))
    with pytest.raises(grpc.RpcError) as info:
        stub.Submit(_signed(fed, "o1", misstated, "r-miner"), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "re-audit of the claims failed: budget split recomputed from (epsilon, trees, depth): " \
           "epsilon_per_node=1, recomputed" in info.value.details()
    assert stub.Submit(_signed(fed, "o1", release, "r-miner"), timeout=30).owner_id == "o1"  # still serving
    for spec, wrong in ((_spec(tmp_path, "r-nb", models=("naive-bayes",)), "available to a regression study"),):
        with pytest.raises(grpc.RpcError, match=wrong):
            admin.CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)


def test_a_regression_study_runs_end_to_end_and_charges_every_owners_ledger(tmp_path):
    owners = ["site-a", "site-b"]
    X, y = regression_rows(300, 1)
    test = np.arange(len(y)) % 5 == 0
    data = {}
    for i, owner in enumerate(owners):
        rows = ~test & (np.arange(len(y)) % 2 == i)
        SCHEMA.decode(X[rows], y[rows]).to_csv(tmp_path / f"{owner}.csv", index=False)
        data[owner] = (str(tmp_path / f"{owner}.csv"), "y")
    SCHEMA.decode(X[test], y[test]).to_csv(tmp_path / "test.csv", index=False)
    fed = make_federation(tmp_path, owners, owner_data=data,
                          policy={"mechanisms": ["diffpets"], "max_epsilon": 1000, "miners": ["miner"]})
    fed.start()
    daemons = [OwnerDaemon(fed.owner_config(o)) for o in owners]
    try:
        request = fpb.CreateStudyRequest(spec=_spec(tmp_path, "reg"),
                                         evaluation_csv=(tmp_path / "test.csv").read_bytes())
        fed.stub("admin").CreateStudy(request, timeout=10)
        assert [o.outcome for d in daemons for o in d.run_once(wait_seconds=5)] == ["submitted"] * 2
        status = fed.wait_study("reg")
        assert status.state == "done", status.reason
        results = fed.stub("admin").GetResults(fpb.StudyRef(study_id="reg"), timeout=10)
    finally:
        for d in daemons:
            d.close()
        fed.close()
    assert [o.owner_id for o in results.owners] == owners
    assert all(o.audit_passed and o.claim == DP and o.pseudo_rows > 0 for o in results.owners)
    far_off = float(np.sqrt(np.mean(np.square(y[test] - SCHEMA.target.low))))  # always predict the lower bound
    mean = float(np.sqrt(np.mean(np.square(y[test] - y[~test].mean()))))  # always predict the training mean
    for model in results_dict(results)["models"]:
        assert model["accuracy"] is None and math.isfinite(model["rmse"]) and math.isfinite(model["mae"])
        assert model["rmse"] < mean < far_off and model["mae"] <= model["rmse"], model
    assert results.evaluation_rows == int(test.sum()) and len(results.models[0].values) == int(test.sum())
    written = write_results(results, status, tmp_path / "out")  # what `modelshare study results` writes
    predictions = (tmp_path / "out" / "predictions.csv").read_text().splitlines()
    assert tmp_path / "out" / "predictions.csv" in written
    assert predictions[0] == "row,true_value,regression-tree,random-forest"
    row, true, predicted = predictions[1].split(",")[:3]
    assert len(predictions) == 1 + int(test.sum()) and float(predicted) == results.models[0].values[0]
    assert int(row) == 0 and float(true) == y[test][0]  # the first evaluation row is the file's first data row
    page = write_report(study_report(status, results, made_by="test"), tmp_path / "out").read_text()
    assert page.count("<svg") == 2 * len(owners) and "RMSE" in page and "not known" in page  # 2 trees per forest
    for owner in owners:  # charged exactly like a classification dp study
        charge = Ledger(fed.kits[owner] / "state").charged("reg")
        assert charge is not None and (charge.mechanism, charge.epsilon, charge.delta) == ("diffpets", 1000.0, 0.0)


# ---------------------------------------------------------------- simulate
@pytest.mark.slow
def test_simulate_runs_a_regression_study_and_reports_rmse_and_mae(tmp_path, capsys):
    X, y = regression_rows(300, 2)
    SCHEMA.decode(X, y).to_csv(tmp_path / "table.csv", index=False)
    table = load_regression_table(tmp_path / "table.csv", "y", target_range=(0, 10))
    assert table.X.shape == (300, 3) and np.allclose(table.y, y)
    flags = ["simulate", "--data", str(tmp_path / "table.csv"), "--target", "y", "--owners", "2",
             "--requirement", DP, "--json"]
    # without a schema the attributes' ranges would be read off the rows: a dp study refuses that
    assert main([*flags, "--task", "regression", "--target-range", "0,10"]) == 2
    assert "needs a public domain" in json.loads(capsys.readouterr().out)["error"]["message"]
    SCHEMA.save(tmp_path / "schema.json")
    assert main([*flags, "--task", "regression", "--schema", str(tmp_path / "schema.json")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "regression" and report["mechanism"] == "diffpets" and report["disclosure"] == "counts"
    assert all(o["audit_passed"] and o["claim"] == DP for o in report["owners"])
    assert [m["model"] for m in report["models"]] == ["regression-tree", "random-forest"]
    far_off = float(np.sqrt(np.mean(np.square(y - SCHEMA.target.low))))
    for m in report["models"]:
        assert 0 < m["mae"] <= m["rmse"] < far_off / 3 and math.isfinite(m["basis_rmse"]) and m["basis_mae"] > 0
        assert m["selection"] == m["basis_selection"] == "fixed", "BASIS set by the study's setting, as the miner's"


@pytest.mark.parametrize("extra, message", [
    (["--class-column", "y", "--target-range", "0,10"],
     "--target-range gives a regression target's public bounds; it needs --task regression"),
    (["--task", "classification", "--target", "y"], "--target names a regression target; it needs --task regression"),
    (["--task", "regression", "--class-column", "y"], "--class-column names a class; a regression table names its "
                                                      "numeric target with --target"),
    (["--target", "y"], "needs the target's public bounds from exactly one of --target-range"),
    (["--target", "y", "--target-range", "0,10", "--mechanism", "apt"],
     "--mechanism: mechanism 'apt' cannot release a model for task 'regression' \\(numeric target 'y'\\)"),
    (["--target", "y", "--target-range", "0,10", "--global-models", "naive-bayes"],
     "--global-models: \\['naive-bayes'\\] are not regression models; choose from regression-tree, random-forest"),
    (["--target", "y", "--target-range", "0,1"], "row 1, column 'y', value .*: outside the schema range \\[0, 1\\]"),
    (["--target", "y", "--target-range", "10,0"], "argument --target-range: expected LOW,HIGH with LOW < HIGH"),
])
def test_simulate_names_the_flag_or_column_at_fault(tmp_path, capsys, extra, message):
    X, y = regression_rows(20, 3)
    SCHEMA.decode(X, y).to_csv(tmp_path / "table.csv", index=False)
    try:
        code = main(["simulate", "--data", str(tmp_path / "table.csv"), *extra])
    except SystemExit as exit:  # argparse refuses a malformed flag value itself
        code = exit.code
    assert code == 2 and re.search(message, capsys.readouterr().err), message


def test_a_regression_schema_file_makes_simulate_prepare_a_regression_study(tmp_path):
    X, y = regression_rows(40, 4)
    SCHEMA.decode(X, y).to_csv(tmp_path / "table.csv", index=False)
    SCHEMA.save(tmp_path / "schema.json")
    args = build_parser().parse_args(["simulate", "--data", str(tmp_path / "table.csv"), "--target", "y",
                                      "--schema", str(tmp_path / "schema.json"), "--owners", "2"])
    schema, data = prepare(args, tmp_path / "run")
    spec = load_study_file(tmp_path / "run" / "study.toml").spec
    assert schema == SCHEMA and data["task"] == "regression" and spec.schema_fingerprint == SCHEMA.fingerprint
    diffpets = registry.get("diffpets")
    assert (spec.mechanism, spec.requirement, spec.max_depth) == ("diffpets", diffpets.default_requirement,
                                                                  diffpets.default_max_depth)
    assert list(spec.global_models) == ["regression-tree", "random-forest"]


def test_regression_metrics_and_models_are_named_and_checked():
    assert rmse(np.array([1.0, 3.0]), np.array([2.0, 5.0])) == pytest.approx(math.sqrt(2.5))
    assert mae(np.array([1.0, 3.0]), np.array([2.0, 5.0])) == 1.5
    with pytest.raises(ValueError, match="y_true has 2 labels but y_pred has 1"):
        rmse(np.array([1.0, 2.0]), np.array([1.0]))
    assert make_regression_model("regression-tree", random_state=0).min_samples_leaf == PGEN_LEAF_SHARE
    with pytest.raises(ValueError, match="unknown regression global model 'naive-bayes'; known models: "
                                         "regression-tree, random-forest"):
        make_regression_model("naive-bayes", random_state=0)
