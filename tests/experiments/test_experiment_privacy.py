"""`modelshare experiment privacy`: PPGEN vs LD over a tiny (c,l) grid on Car."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from experiments.privacy import (
    PrivacySettings,
    plot_privacy,
    run_privacy,
    summarize_privacy,
)
from modelshare.cli import main

GRID = ["--dataset", "car", "--folds", "2", "--ls", "2", "4", "--cs", "5"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> Path:
    """One serial run of the tiny grid, shared by the tests (each run trains 4 x 3 sets of global models)."""
    out_dir = tmp_path_factory.mktemp("privacy") / "serial"
    assert main(["experiment", "privacy", *GRID, "--jobs", "1", "--out", str(out_dir)]) == 0
    return out_dir


def test_files_rows_and_plots(serial):
    raw = pd.read_csv(serial / "results.csv")
    assert len(raw) == 2 * 2 * 1 * 2  # folds x ls x cs x global models
    for column in ("repeat", "fold", "l", "c", "model", "basis_accuracy", "ppgen_accuracy", "ld_accuracy",
                   "ppgen_yields_data", "ld_yields_data", "ld_suppressed_rows", "ld_equivalence_classes"):
        assert column in raw.columns
    assert set(raw["model"]) == {"decision-tree", "naive-bayes"}
    weak = raw[raw["l"] == 2]
    assert weak["ppgen_yields_data"].all() and weak["ppgen_accuracy"].between(0, 1).all()
    assert (raw["ppgen_releases_audited_ok"] == raw["ppgen_owners_released"]).all()  # every release re-audited
    # the requirement's price beside PPGEN: at most the leaf share cap c / (c + l - 1)
    assert (raw["bound_accuracy"] <= 5 / (5 + raw["l"] - 1) + 1e-9).all() and (raw["bound_accuracy"] > 0).all()

    summary = pd.read_csv(serial / "summary.csv")
    assert len(summary) == 4
    assert {"ppgen_accuracy_mean", "bound_accuracy_mean", "ld_accuracy_std", "ld_yields_data_mean",
            "ppgen_minus_ld_mean"} <= set(summary.columns)
    document = json.loads((serial / "results.json").read_text())
    assert document["experiment"] == "privacy" and document["settings"]["ls"] == [2, 4]
    assert len(document["summary"]) == 4 and len(document["raw"]) == len(raw)

    for model in ("decision-tree", "naive-bayes"):
        path = serial / f"accuracy_vs_l_{model}.png"
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        assert imread(path).ndim == 3


def test_one_line_per_method_and_c_with_data(serial, tmp_path):
    summary = summarize_privacy(pd.read_csv(serial / "results.csv"))
    plots = plot_privacy(summary, PrivacySettings(ls=(2, 4), cs=(5.0,), folds=2), "car", tmp_path)
    assert [p.path.name for p in plots] == ["accuracy_vs_l_decision-tree.png", "accuracy_vs_l_naive-bayes.png"]
    assert [p.series for p in plots] == [3, 3]  # BASIS, PPGEN c=5 and LD c=5 (LD has data at l = 2)
    assert all(p.references == 0 for p in plots)  # the paper prints no Fig. 7 values


def test_ld_without_data_is_nan_and_flagged(serial):
    raw = pd.read_csv(serial / "results.csv")
    # Car's rarest class holds 65 of 1,728 rows: c = 5, l = 4 needs r1 < 5 * r4, which no generalisation meets.
    no_data = raw[raw["l"] == 4]
    assert not no_data["ld_yields_data"].any() and no_data["ld_accuracy"].isna().all()
    assert (no_data["ld_suppressed_rows"] > 0).all() and (no_data["ld_equivalence_classes"] == 0).all()
    with_data = raw[raw["l"] == 2]
    assert with_data["ld_yields_data"].all() and with_data["ld_accuracy"].between(0, 1).all()


def test_jobs_do_not_change_the_numbers(serial, tmp_path, capsys):
    assert main(["experiment", "privacy", *GRID, "--jobs", "2", "--out", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    pd.testing.assert_frame_equal(pd.read_csv(serial / "results.csv"), pd.read_csv(tmp_path / "results.csv"))
    assert printed["raw"] == json.loads((serial / "results.json").read_text())["raw"]


def test_several_learners_share_folds_ld_and_the_bound(serial, tmp_path):
    """--learner multiway admissible: one row per learner; multiway's rows are the single-learner run's,
    and LD and the bound (computed once per fold and requirement) are the same on both learners' rows."""
    argv = ["--dataset", "car", "--folds", "2", "--ls", "2", "--cs", "5", "--learner", "multiway", "admissible"]
    assert main(["experiment", "privacy", *argv, "--jobs", "1", "--out", str(tmp_path)]) == 0
    raw = pd.read_csv(tmp_path / "results.csv")
    assert sorted(set(raw["learner"])) == ["admissible", "multiway"] and len(raw) == 2 * 2 * 2
    alone = pd.read_csv(serial / "results.csv")
    alone = alone[alone["l"] == 2].reset_index(drop=True)
    multiway = raw[raw["learner"] == "multiway"].reset_index(drop=True)
    pd.testing.assert_frame_equal(multiway, alone)
    keys = ["fold", "model"]
    shared = ["bound_accuracy", "ld_accuracy", "basis_accuracy", "ld_suppressed_rows"]
    admissible = raw[raw["learner"] == "admissible"].set_index(keys)[shared]
    pd.testing.assert_frame_equal(admissible, multiway.set_index(keys)[shared])
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert len(summary) == 2 * 2 and set(summary["learner"]) == {"admissible", "multiway"}
    assert [p.name for p in sorted(tmp_path.glob("*.png"))] == ["accuracy_vs_l_decision-tree.png",
                                                                "accuracy_vs_l_naive-bayes.png"]


def test_the_pruning_confidence_reaches_the_admissible_learner_only() -> None:
    """--confidence none: the admissible learner releases its grown tree; a grid without it refuses the flag."""
    settings = PrivacySettings(learners=("multiway", "admissible"), confidence=None)
    assert settings.pipeline("admissible").learner_params == {"confidence": None}
    assert settings.pipeline("multiway").learner_params == {}
    assert PrivacySettings(learners=("admissible",)).pipeline().learner_params == {}
    with pytest.raises(ValueError, match="admissible learner only"):
        run_privacy(None, np.zeros((2, 1)), np.zeros(2), PrivacySettings(confidence=0.5))  # type: ignore[arg-type]


def test_model_settings_set_ppgen_ld_and_basis_models_alike(serial, tmp_path, capsys):
    """--model-setting decision-tree=fixed reproduces the grid; =auto changes PPGEN's, LD's and BASIS's tree, not
    naive Bayes, and the rows and the printout say how BASIS and PPGEN were set."""
    argv = ["--dataset", "car", "--folds", "2", "--ls", "2", "--cs", "5", "--learner", "admissible"]
    runs = {}
    for mode in ("fixed", "auto"):
        out_dir = tmp_path / mode
        assert main(["experiment", "privacy", *argv, "--model-setting", f"decision-tree={mode}", "--jobs", "1",
                     "--out", str(out_dir)]) == 0
        runs[mode] = pd.read_csv(out_dir / "results.csv")
    assert main(["experiment", "privacy", *argv, "--jobs", "1", "--out", str(tmp_path / "plain")]) == 0
    pd.testing.assert_frame_equal(runs["fixed"], pd.read_csv(tmp_path / "plain" / "results.csv"))
    nb = runs["auto"]["model"] == "naive-bayes"
    pd.testing.assert_frame_equal(runs["auto"][nb], runs["fixed"][nb])
    tree = runs["auto"][~nb]
    assert not (tree["ppgen_accuracy"].to_numpy() == runs["fixed"][~nb]["ppgen_accuracy"].to_numpy()).all()
    assert not (tree["basis_accuracy"].to_numpy() == runs["fixed"][~nb]["basis_accuracy"].to_numpy()).all()
    selected = r"auto: min_samples_leaf=\S+ by 3-fold CV on [\d,]+ {} rows, .*"
    assert tree["basis_selection"].str.fullmatch(selected.format("raw")).all()
    assert tree["ppgen_selection"].str.fullmatch(selected.format("pseudo")).all()
    assert set(runs["fixed"]["basis_selection"]) == set(runs["fixed"]["ppgen_selection"]) == {"fixed"}
    printed = capsys.readouterr().out
    assert "decision-tree hyperparameters over the folds: BASIS auto: min_samples_leaf=" in printed
    assert "naive-bayes hyperparameters over the folds: BASIS fixed (2x); PPGEN fixed (2x)" in printed
