"""The in-process pipeline: sources, folds, BASIS vs PGEN vs BASEGEN, seeds."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from modelshare.pipeline import PipelineConfig, fold_plan, run_study, stratified_parts, summarize


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
    assert all(np.array_equal(a[2], b[2]) and a[3] == b[3] for a, b in zip(plan, again))


def test_study_records_and_scores(car):
    schema, X, y = car
    config = PipelineConfig(n_sources=3, folds=3, global_models=("decision-tree", "naive-bayes"), pgen_scale=1.0, random_state=1)
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


def test_model_settings_reach_pgen_and_basegen_and_fixed_reproduces_the_fixed_rule(car):
    """``fixed`` through the miner's choice is the registry's rule (the same numbers); ``auto`` changes
    PGEN's and BASEGEN's tree only, never BASIS, the reference on the raw rows."""
    schema, X, y = car
    config = PipelineConfig(n_sources=2, folds=2, random_state=1)
    plain = run_study(schema, X, y, config)
    fixed = run_study(schema, X, y, replace(config, model_settings={"decision-tree": "fixed"}))
    assert plain.equals(fixed)
    auto = run_study(schema, X, y, replace(config, model_settings={"decision-tree": "auto"}))
    basis = auto.method == "BASIS"
    assert auto[basis].equals(plain[basis])
    assert not np.array_equal(auto[~basis].accuracy.to_numpy(), plain[~basis].accuracy.to_numpy())
