"""The in-process pipeline: sources, folds, BASIS vs PGEN vs BASEGEN, seeds."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from modelshare.miner_node.global_models import GRIDS
from modelshare.pipeline import PipelineConfig, fold_plan, run_fold, run_study, stratified_parts, summarize


def test_stratified_parts_are_balanced_and_seeded():
    y = np.array([0] * 50 + [1] * 30 + [2] * 7)
    parts = stratified_parts(y, 5, np.random.default_rng(0))
    assert np.bincount(parts).max() - np.bincount(parts).min() <= 1
    for c in range(3):
        per_part = np.bincount(parts[y == c], minlength=5)
        assert per_part.max() - per_part.min() <= 1
    assert np.array_equal(parts, stratified_parts(y, 5, np.random.default_rng(0)))


def test_fold_plan_is_seeded_stratified_k_fold_and_covers_every_row_once_per_repeat():
    y = np.array([0] * 50 + [1] * 30 + [2] * 10)
    plan = fold_plan(y, PipelineConfig(folds=5, repeats=2, random_state=3))
    assert [(r, f) for r, f, _, _ in plan] == [(r, f) for r in range(2) for f in range(5)]
    for r in range(2):
        masks = np.array([test for rr, _, test, _ in plan if rr == r])
        assert (masks.sum(axis=0) == 1).all()  # each row is tested exactly once per repeat
        assert all((np.bincount(y[m], minlength=3) == [10, 6, 2]).all() for m in masks)
    assert len({seed for *_, seed in plan}) == len(plan)
    again = fold_plan(y, PipelineConfig(folds=5, repeats=2, random_state=3))
    assert all(np.array_equal(a[2], b[2]) and a[3] == b[3] for a, b in zip(plan, again, strict=False))


def test_study_records_and_scores(car):
    schema, X, y = car
    config = PipelineConfig(n_sources=3, folds=3, global_models=("decision-tree", "naive-bayes"),
                            pgen_scale=1.0, random_state=1)
    results = run_study(schema, X, y, config)
    assert len(results) == 3 * 3 * 2
    assert set(results["method"]) == {"BASIS", "PGEN", "BASEGEN"}
    basis = results[results.method == "BASIS"]
    assert (basis.class_match == 1.0).all()
    assert (basis[basis.model == "decision-tree"].path_match == 1.0).all()
    assert basis.path_match[basis.model == "naive-bayes"].isna().all()
    pgen_rows = results[(results.method == "PGEN")].train_rows
    assert (pgen_rows == basis.train_rows.to_numpy()).all()  # hit + miss of every path = the training rows
    summary = summarize(results)
    assert set(summary.columns) >= {"accuracy_mean", "accuracy_std", "class_match_mean", "path_match_mean"}
    acc = summary.set_index(["model", "method"]).accuracy_mean
    assert acc["decision-tree", "BASIS"] > 0.9 and acc["decision-tree", "PGEN"] > 0.85


def test_one_source_pgen_matches_basis_on_nursery(nursery):
    """With one source and fully grown trees, PGEN is within half a point of BASIS."""
    schema, X, y = nursery
    summary = summarize(run_study(schema, X, y, PipelineConfig(n_sources=1, folds=5, random_state=0)))
    acc = summary.set_index("method").accuracy_mean
    assert abs(acc["PGEN"] - acc["BASIS"]) < 0.005


def test_pgen_scale_multiplies_rows(car):
    schema, X, y = car
    results = run_study(schema, X, y, PipelineConfig(n_sources=2, folds=2, pgen_scale=3.0, methods=("BASIS", "PGEN")))
    basis = results[results.method == "BASIS"].train_rows.to_numpy()
    assert np.array_equal(results[results.method == "PGEN"].train_rows.to_numpy(), 3 * basis)


def test_seed_makes_studies_reproducible(car):
    schema, X, y = car
    config = PipelineConfig(n_sources=2, folds=3, random_state=4)
    a = run_study(schema, X, y, config)
    b = run_study(schema, X, y, config)
    assert a.equals(b)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_sources": 0}, "n_sources"),
        ({"folds": 1}, "folds"),
        ({"global_models": ("svm",)}, "unknown global models"),
        ({"methods": ("PGEN",)}, "must include BASIS"),
        ({"pgen_scale": 0}, "pgen_scale"),
        ({"model_settings": {"naive-bayes": "auto"}}, "not among the global models"),
        ({"model_settings": {"decision-tree": "sometimes"}}, "decision-tree"),
        ({"model_settings": {"decision-tree": "auto"}, "global_params": {"decision-tree": {"max_depth": 3}}},
         "both model settings and global parameters"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PipelineConfig(**kwargs)


def test_the_pipeline_accepts_every_registered_mechanism_dp_ones_included(car):
    """A dp whole-release mechanism runs through the in-process study (it once raised 'unknown mechanism')."""
    schema, X, y = car
    config = PipelineConfig(n_sources=2, folds=2, mechanism="dpea", requirement="dp:epsilon=5,trees=2",
                            learner_params={"max_depth": 3}, random_state=0)
    summary = summarize(run_study(schema, X, y, config))
    for method in ("PGEN", "BASEGEN"):  # BASEGEN labels uniform rows with the ensemble's vote
        row = summary[summary.method == method]
        assert len(row) == 1 and row.owners_released_mean.iloc[0] == 2 and row.releases_audited_ok_mean.iloc[0] == 2
        assert row.accuracy_mean.iloc[0] > 0.7


def test_model_settings_reach_every_table_and_fixed_reproduces_the_fixed_rule(car):
    """``fixed`` through the miner's choice is the registry's rule (the same numbers); ``auto`` changes PGEN's
    and BASEGEN's tree and BASIS's too, each cross-validated on its own rows from the same grid (two owners'
    trees are too few to hold out by tree, so every table's folds are of rows)."""
    schema, X, y = car
    config = PipelineConfig(n_sources=2, folds=2, random_state=1)
    plain = run_study(schema, X, y, config)
    fixed = run_study(schema, X, y, replace(config, model_settings={"decision-tree": "fixed"}))
    assert plain.equals(fixed) and set(plain.selection) == {"fixed"}
    auto = run_study(schema, X, y, replace(config, model_settings={"decision-tree": "auto"}))
    basis = auto.method == "BASIS"
    assert not np.array_equal(auto[basis].accuracy.to_numpy(), plain[basis].accuracy.to_numpy())
    assert not np.array_equal(auto[~basis].accuracy.to_numpy(), plain[~basis].accuracy.to_numpy())
    shares = "|".join(re.escape(f"{g['min_samples_leaf']:g}") for g in GRIDS["decision-tree"])
    for method, rows in (("BASIS", "raw rows, folds by rows"), ("PGEN", "pseudo rows, folds by rows"),
                         ("BASEGEN", "pseudo rows, folds by rows")):
        for text in auto[auto.method == method].selection:
            assert re.fullmatch(rf"auto: min_samples_leaf=({shares}) by 3-fold CV on [\d,]+ "
                                rf"{rows} \(accuracy 0\.\d{{4}}\)",
                                text), (method, text)


@pytest.mark.parametrize("setting, selection", [
    ({"min_samples_leaf": 7, "max_depth": 4}, "given: max_depth=4, min_samples_leaf=7"),
    ("fixed", "fixed"),
])
def test_basis_gets_the_same_given_values_and_fixed_rule_as_pgen(car, setting, selection):
    schema, X, y = car
    config = PipelineConfig(n_sources=2, folds=2, random_state=1, global_models=("decision-tree", "naive-bayes"),
                            model_settings={"decision-tree": setting, "naive-bayes": {"alpha": 0.5}})
    results = run_study(schema, X, y, config)
    tree = results[results.model == "decision-tree"]
    assert set(tree.selection) == {selection} and set(tree.method) == {"BASIS", "PGEN", "BASEGEN"}
    assert set(results[results.model == "naive-bayes"].selection) == {"given: alpha=0.5"}


def test_basis_auto_reads_only_the_training_rows(car):
    """BASIS's ``auto`` choice is made on the training part: held-out rows with every label flipped, or other
    held-out rows altogether, leave its choice and its predictions' agreement with itself unchanged."""
    schema, X, y = car
    train = np.random.default_rng(0).permutation(y.shape[0]) % 3 != 0
    config = PipelineConfig(n_sources=2, global_models=("decision-tree",), methods=("BASIS",),
                            model_settings={"decision-tree": "auto"})
    runs = [run_fold(schema, X[train], y[train], X_test, y_test, config, np.random.default_rng(4))[0]
            for X_test, y_test in ((X[~train], y[~train]), (X[~train], (y[~train] + 1) % schema.n_classes),
                                   (X[~train][:50], y[~train][:50]))]
    assert runs[0]["selection"].startswith("auto: ") and "raw rows" in runs[0]["selection"]
    assert runs[0]["selection"] == runs[1]["selection"] == runs[2]["selection"]
    assert runs[0]["accuracy"] > 0.9 and runs[1]["accuracy"] < 0.1


def test_the_in_process_study_holds_the_miners_floor(car):
    """Where every owner declines, the in-process study (the suite's) scores the class prior's majority class, as
    the miner does, instead of reporting no model; where they release, the auto tree has the prior as a candidate."""
    schema, X, y = car
    rows = np.random.default_rng(0).permutation(len(y))[:300]
    declined = PipelineConfig(n_sources=3, folds=2, mechanism="laplace-rdt", requirement="dp:epsilon=0.5,trees=4",
                              learner_params={"max_depth": 3}, methods=("BASIS", "PGEN"), random_state=0,
                              model_settings={"decision-tree": "auto"})
    records = run_study(schema, X[rows], y[rows], declined)
    pgen = records[records.method == "PGEN"]
    assert len(pgen) > 0 and (pgen.train_rows == 0).all()
    assert pgen.selection.str.startswith("no pseudo rows (every owner declined").all()
    assert pgen.accuracy.notna().all() and (pgen.accuracy > 0.6).all()  # Car's majority class is 70 %
    released = replace(declined, requirement="dp:epsilon=8,trees=4")
    trees = run_study(schema, X[rows], y[rows], released)
    tree_rows = trees[(trees.method == "PGEN") & (trees.model == "decision-tree")]
    assert (tree_rows.train_rows > 0).all()
    assert tree_rows.selection.str.contains("class prior's majority class").all()
