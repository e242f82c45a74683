"""A study's [global_models] settings: validation, the wire,
the miner's choice on pseudo-data, gradient boosting, AUC."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from rich.console import Console
from sklearn.tree import DecisionTreeClassifier

from modelshare.admin import results_dict
from modelshare.cli.common import model_setting
from modelshare.cli.federation import results_renderables
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import parameter_from_pb, study_from_pb
from modelshare.common.federation.study import StudyError, spec_from_mapping
from modelshare.common.federation.wire import decode_model, model_message
from modelshare.common.mechanisms.release import release as release_model
from modelshare.common.study import MODEL_PARAMETERS, ModelPlan
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.miner_node.global_models import (
    DP_LEAF_FLOORS,
    GLOBAL_MODELS,
    GRIDS,
    REGRESSION_GRIDS,
    REGRESSION_MODELS,
    make_regression_model,
)
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine
from modelshare.miner_node.selection import DEFAULT_MODES, MAX_CV_ROWS, MAX_DP_CV_ROWS, choose


def _on(schema, spec):
    """The study ``spec`` asks for, over the table ``schema`` these rows were encoded with."""
    return dataclasses.replace(study_from_pb(spec), schema=schema)


def study(settings: dict | None = None, models: tuple[str, ...] = ("decision-tree", "naive-bayes")) -> dict:
    data = {"study": {"id": "s1"}, "schema": {"dataset": "car"},
            "release": {"mechanism": "none", "disclosure": "counts"}, "mining": {"global_models": list(models)}}
    if settings is not None:
        data["global_models"] = settings
    return data


# ------------------------------------------------------------------ study.toml
def test_settings_travel_in_the_spec_and_its_summary():
    spec = spec_from_mapping(study({"decision-tree": {"min_samples_leaf": 50, "max_depth": 8},
                                    "naive-bayes": "auto"})).spec
    tree = spec.global_model_settings["decision-tree"]
    assert tree.mode == "given"
    assert {k: parameter_from_pb(v) for k, v in tree.parameters.items()} == {"min_samples_leaf": 50, "max_depth": 8}
    assert spec.global_model_settings["naive-bayes"].mode == "auto"
    again = fpb.StudySpec.FromString(spec.SerializeToString())  # as the miner and the owners receive it
    assert study_from_pb(again).describe()["global_model_settings"] == {
        "decision-tree": {"max_depth": 8, "min_samples_leaf": 50}, "naive-bayes": "auto"}
    assert not spec_from_mapping(study()).spec.global_model_settings  # none given: the miner's defaults


@pytest.mark.parametrize("settings, message", [
    ({"decison-tree": "auto"}, "[global_models] decison-tree: unknown global model 'decison-tree'; known models:"),
    ({"tree-vote": "fixed"}, "[global_models] tree-vote: tree-vote is built from the released trees and has no "
                             "hyperparameters; drop its setting"),
    ({"decision-tree": {"min_sample_leaf": 5}},
     "[global_models] decision-tree: unknown parameter 'min_sample_leaf'; allowed parameters of decision-tree: "
     "min_samples_leaf, max_depth, criterion"),
    ({"decision-tree": {"max_depth": 0}}, "[global_models] decision-tree: max_depth must be an integer >= 1, got 0"),
    ({"decision-tree": {"min_samples_leaf": 1.5}}, "min_samples_leaf must be an integer >= 1 (rows) or a number in"),
    ({"decision-tree": {"max_depth": True}}, "max_depth must be an integer >= 1, got True"),
    ({"naive-bayes": "autox"}, '[global_models] naive-bayes: must be "auto", "fixed" or a table of parameters, '
                               "got 'autox'"),
    ({"naive-bayes": ["auto"]}, "[global_models] naive-bayes: must be \"auto\", \"fixed\" or a table"),
    ({"random-forest": "auto"}, "[global_models] random-forest: the study does not learn 'random-forest'"),
    ({"naive-bayes": {"alpha": [1]}}, "[global_models] naive-bayes: alpha must be a number, a string or true/false"),
])
def test_a_bad_setting_is_an_error_naming_the_model_and_key(settings, message):
    with pytest.raises(StudyError, match=re.escape(message)) as caught:
        spec_from_mapping(study(settings), where="study.toml")
    assert str(caught.value).startswith("study.toml: ")


def test_every_model_the_miner_learns_has_its_parameters_declared_and_a_grid():
    assert set(MODEL_PARAMETERS) == set(GLOBAL_MODELS) | set(REGRESSION_MODELS)
    assert set(GRIDS) == set(GLOBAL_MODELS) and set(REGRESSION_GRIDS) == set(REGRESSION_MODELS)
    for grids in (GRIDS, REGRESSION_GRIDS):
        for name, grid in grids.items():
            assert grid and all(set(candidate) <= set(MODEL_PARAMETERS[name]) for candidate in grid), name
    assert all("min_samples_leaf" in MODEL_PARAMETERS[name] for name in DP_LEAF_FLOORS)  # the floor is a leaf size
    assert DEFAULT_MODES == {"decision-tree": "auto"}


def test_simulate_reads_model_settings_as_the_study_file_writes_them():
    assert model_setting("decision-tree=auto") == ("decision-tree", "auto")
    assert model_setting("decision-tree:min_samples_leaf=50,max_depth=8,criterion=entropy") == (
        "decision-tree", {"min_samples_leaf": 50, "max_depth": 8, "criterion": "entropy"})
    assert model_setting("random-forest:min_samples_leaf=0.001") == ("random-forest", {"min_samples_leaf": 0.001})
    with pytest.raises(ValueError, match="expected MODEL=auto"):
        model_setting("decision-tree")


# ------------------------------------------------------------------ the miner
def _spec(models: tuple[str, ...], settings: dict[str, str | dict] | None = None) -> fpb.StudySpec:
    data = {"study": {"id": "s1", "seed": 3}, "schema": {"dataset": "car"},
            "release": {"mechanism": "none", "disclosure": "counts"},
            "mining": {"global_models": list(models), "pgen_scale": 5}}
    if settings:
        data["global_models"] = settings
    return spec_from_mapping(data).spec


def _accepted(schema, X, y) -> list[AcceptedModel]:
    """Three owners' trees released without a mechanism (PGEN then draws their unconstrained attributes uniformly)."""
    models = []
    for owner, rows in zip(("site-a", "site-b", "site-c"), np.array_split(np.arange(X.shape[0]), 3), strict=False):
        tree = CartTreeClassifier(schema, min_samples_leaf=5, random_state=0).fit(X[rows], y[rows]).tree_
        models.append(AcceptedModel(owner, decode_model(model_message(release_model("none", tree=tree)))))
    return models


def _evaluation(X, y) -> Evaluation:
    return Evaluation(X, y, np.arange(y.shape[0]))


def test_auto_chooses_by_cross_validation_on_pseudo_rows_and_reports_it(mixed):
    schema, X, y = mixed
    spec = _spec(("decision-tree", "naive-bayes", "rules"), {"naive-bayes": "fixed", "rules": {"min_samples_leaf": 7}})
    results = mine(_on(schema, spec), _accepted(schema, X, y), _evaluation(X, y))
    tree, bayes, rules = results.models
    assert re.fullmatch(r"auto: min_samples_leaf=\S+ by 3-fold CV on [\d,]+ pseudo rows, folds by released "
                        r"trees \(accuracy 0\.\d{4}\)",
                        tree.selection)  # the decision tree's default mode
    assert parameter_from_pb(tree.parameters["min_samples_leaf"]) >= 1  # a share turned into rows
    assert bayes.selection == "fixed" and not bayes.parameters
    assert rules.selection == "given" and parameter_from_pb(rules.parameters["min_samples_leaf"]) == 7
    shown = results_dict(results)["models"]
    assert shown[0]["selection"] == tree.selection and shown[2]["parameters"] == {"min_samples_leaf": 7}
    console = Console(width=200, record=True)
    for renderable in results_renderables({"id": "s1", "state": "done", "reason": "", "answers": [],
                                           "quorum": 2}, results_dict(results)):
        console.print(renderable)
    text = console.export_text()
    assert "AUC" in text and "auto: min_samples_leaf=" in text and "given: min_samples_leaf=7" in text


def test_the_choice_never_reads_the_evaluation_rows(mixed):
    schema, X, y = mixed
    spec = _spec(("decision-tree", "naive-bayes", "gradient-boosting"),
                 {"naive-bayes": "auto", "gradient-boosting": "auto"})
    accepted = _accepted(schema, X, y)
    flipped = _evaluation(X[:300], 1 - y[:300])  # another evaluation table, every class wrong
    first = mine(_on(schema, spec), accepted, _evaluation(X, y))
    second = mine(_on(schema, spec), accepted, flipped)
    none = mine(_on(schema, spec), accepted, None)
    for a, b, c in zip(first.models, second.models, none.models, strict=False):
        assert a.selection.startswith("auto: ")
        assert a.selection == b.selection == c.selection and a.parameters == b.parameters == c.parameters
    assert first.models[0].accuracy > 0.9 and second.models[0].accuracy < 0.1


def test_gradient_boosting_trains_and_scores(car, mixed):
    schema, X, y = car
    results = mine(_on(schema, _spec(("gradient-boosting",))), _accepted(schema, X, y), _evaluation(X, y))
    [boosted] = results.models
    assert boosted.selection == "fixed" and boosted.accuracy > 0.85 and len(boosted.predictions) == y.shape[0]
    assert not boosted.HasField("auc")  # four classes: no AUC
    rng = np.random.default_rng(0)
    Xr = rng.uniform(0, 1, (500, 3))
    target = 3 * Xr[:, 0] + rng.normal(0, 0.1, 500)
    regressor = make_regression_model("gradient-boosting", random_state=0).fit(Xr, target)
    assert np.sqrt(np.mean((regressor.predict(Xr) - target) ** 2)) < 0.3


def test_auc_for_two_classes_from_probabilities_and_dash_without_them(mixed, car):
    schema, X, y = mixed
    results = mine(_on(schema, _spec(("decision-tree", "naive-bayes", "gradient-boosting", "rules"))),
                   _accepted(schema, X, y), _evaluation(X, y))
    by_name = {m.name: m for m in results.models}
    assert by_name["decision-tree"].auc > 0.9 and by_name["gradient-boosting"].auc > 0.9
    assert 0 <= by_name["naive-bayes"].auc <= 1
    assert not by_name["rules"].HasField("auc")  # a rule list has no probabilities
    rows = {m["model"]: m for m in results_dict(results)["models"]}
    assert rows["rules"]["auc"] is None and rows["naive-bayes"]["auc"] == by_name["naive-bayes"].auc
    schema, X, y = car
    multi = mine(_on(schema, _spec(("decision-tree",))), _accepted(schema, X, y), _evaluation(X, y))
    assert not multi.models[0].HasField("auc")


def test_folds_hold_out_whole_released_trees_when_there_are_enough(mixed):
    schema, X, y = mixed
    spec = _spec(("decision-tree",))

    def build(params):
        return CartTreeClassifier(schema, random_state=0, **params)

    trees = np.repeat(np.arange(4), X.shape[0] // 4)
    plan = study_from_pb(spec).model_plan
    assert "folds by released trees" in choose("decision-tree", plan, X, y, build, regression=False,
                                               groups=trees).selection
    two = np.repeat(np.arange(2), X.shape[0] // 2)
    assert "folds by rows" in choose("decision-tree", plan, X, y, build, regression=False, groups=two).selection
    assert "folds by rows" in choose("decision-tree", plan, X, y, build, regression=False).selection
    [owner] = _accepted(schema, X, y)[:1]
    single = mine(_on(schema, spec), [owner], None)  # one owner, one tree: nothing to group by
    assert "folds by rows" in single.models[0].selection


def test_a_dp_study_cross_validates_on_more_pseudo_rows() -> None:
    """A dp study's auto tree is cross-validated on up to MAX_DP_CV_ROWS pseudo rows, others on MAX_CV_ROWS."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 4, (MAX_CV_ROWS + 5000, 3)).astype(np.float64)
    y = (X[:, 0] >= 2).astype(np.int64)
    for mechanism, rows in (("dpea", MAX_CV_ROWS + 5000), ("apt", MAX_CV_ROWS)):
        choice = choose("decision-tree", ModelPlan((), {}, seed=1, mechanism=mechanism), X, y,
                        lambda p: DecisionTreeClassifier(random_state=0, **p), regression=False)
        assert f"CV on {rows:,} pseudo rows" in choice.selection
    assert MAX_DP_CV_ROWS > MAX_CV_ROWS + 5000
