"""The common output layer of `modelshare experiment`: files, plots, parallel determinism."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from experiments import output, pruning, rdt, sources
from experiments.output import (
    Series,
    plot_bars,
    plot_lines,
    run_tasks,
    series_by,
)
from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.pipeline import PipelineConfig, run_study

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Tiny configurations: (experiment arguments, raw columns, raw rows, {plot: (series, paper markers)}).
SOURCES = (["sources", "--dataset", "car", "--owners", "1", "2", "--folds", "2", "--global-models", "decision-tree"],
           {"repeat", "fold", "n_sources", "method", "model", "selection", "train_rows", "owners_released",
            "releases_audited_ok", "accuracy", "class_match", "path_match"},
           2 * 2 * 3,  # owners x folds x methods
           {"accuracy_decision-tree.png": (3, 0), "class_match_decision-tree.png": (2, 0),
            "path_match_decision-tree.png": (2, 0)})
PRUNING = (["pruning", "--dataset", "nursery", "--max-depths", "3", "7", "--max-depth", "7", "--thresholds", "5",
            "10", "--repeats", "2"],
           {"repeat", "fold", "table", "depth", "method", "s", "leaves", "uniqueness", "homogeneity_leaves",
            "homogeneity_users", "acc", "acc_abstain"},
           2 * (2 + 2 * 3),  # splits x (depths + methods x (unpruned + thresholds))
           {"accuracy_vs_s.png": (3, 6), "homogeneity_users_vs_s.png": (2, 6), "homogeneity_leaves_vs_s.png": (2, 6),
            "homogeneity_users_by_depth.png": (1, 2), "attacked_leaves_by_depth.png": (2, 4)})
RDT = (["rdt", "--dataset", "nursery", "--max-depths", "3", "--ks", "0", "5", "--trees", "8", "9", "--folds", "2",
        "--repeats", "1", "--global-models", "naive-bayes"],
       {"repeat", "fold", "depth", "k", "trees", "beta", "total_delta", "acc_ensemble", "sampled_rows",
        "acc_pgen_naive-bayes", "pgen_rows"},
       2 * 2 * 2,  # folds x k x trees
       {"accuracy_ensemble.png": (2, 4), "accuracy_pgen_naive-bayes.png": (2, 0)})


@pytest.fixture
def plots(monkeypatch) -> dict[str, output.PlotResult]:
    """Every plot an experiment draws, by file name, as the plot functions reported it."""
    drawn: dict[str, output.PlotResult] = {}

    def recording(fn):
        def wrapper(*args, **kwargs):
            result = fn(*args, **kwargs)
            drawn[result.path.name] = result
            return result
        return wrapper

    for module in (sources, pruning, rdt):
        for name in ("plot_lines", "plot_bars"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, recording(getattr(module, name)))
    return drawn


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


@pytest.mark.parametrize("argv, columns, n_rows, expected", [SOURCES, PRUNING, RDT], ids=["sources", "pruning", "rdt"])
def test_experiment_writes_results_and_plots(tmp_path, capsys, plots, argv, columns, n_rows, expected):
    assert main(["experiment", *argv, "--out", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)  # the progress bar went to stderr
    raw = pd.read_csv(tmp_path / "results.csv")
    assert set(raw.columns) == columns and len(raw) == n_rows
    document = json.loads((tmp_path / "results.json").read_text())
    assert document == printed
    assert document["experiment"] == argv[0] and document["source"].startswith("bundled:")
    assert document["settings"]["seed"] == 0 and len(document["raw"]) == n_rows
    assert len(document["summary"]) == len(pd.read_csv(tmp_path / "summary.csv")) > 0
    assert {name: (p.series, p.references) for name, p in plots.items()} == expected
    for name in expected:
        assert_png(tmp_path / name)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary files


@pytest.mark.parametrize("argv", [
    SOURCES[0],
    ["rdt", "--dataset", "car", "--max-depths", "3", "--ks", "5", "--trees", "3", "--folds", "2", "--repeats", "2"],
], ids=["sources", "rdt"])
def test_jobs_do_not_change_results(tmp_path, argv):
    for jobs in ("1", "2"):
        assert main(["experiment", *argv, "--jobs", jobs, "--out", str(tmp_path / jobs)]) == 0
    assert (tmp_path / "1" / "results.csv").read_bytes() == (tmp_path / "2" / "results.csv").read_bytes()


def test_one_owner_count_reproduces_run_study(car):
    """The parallel fold plan draws folds and seeds exactly as `run_study` (EXPERIMENTS.md's numbers)."""
    schema, X, y = car
    config = PipelineConfig(n_sources=2, folds=3, repeats=2, global_models=("decision-tree",),
                            pgen_scale=1.0, random_state=3)
    assert sources.run_sources(schema, X, y, config, [2]).equals(run_study(schema, X, y, config))


def test_pruning_keeps_the_paper_protocol_and_its_table_shape(tmp_path, capsys):
    """One 80/20 split per repeat (random_state seed + i) as before; --json keeps its attacks/pruning tables."""
    argv = ["experiment", "pruning", "--dataset", "car", "--max-depths", "3", "--max-depth", "3", "--thresholds", "5",
            "--repeats", "2", "--out", str(tmp_path), "--json"]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["depth"] for r in payload["attacks"]] == [3]
    assert {r["table"] for r in payload["summary"]} == {"attacks", "pruning"}
    raw = pd.read_csv(tmp_path / "results.csv")
    assert set(raw["fold"]) == {0} and set(raw["repeat"]) == {0, 1}


@pytest.fixture
def user_csv(tmp_path) -> Path:
    """A table no experiment has seen: 400 rows, two categorical and two numeric attributes."""
    rng = np.random.default_rng(5)
    n = 400
    frame = pd.DataFrame({
        "colour": rng.choice(["red", "green", "blue"], n),
        "size": rng.uniform(0, 10, n).round(2),
        "shape": rng.choice(["round", "square"], n),
        "weight": rng.integers(1, 100, n),
    })
    frame["label"] = np.where((frame["colour"] == "red") ^ (frame["size"] > 5), "yes", "no")
    path = tmp_path / "mine.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("argv, n_rows", [
    (["sources", "--owners", "1", "2", "--folds", "2", "--global-models", "decision-tree",
      "naive-bayes"], 2 * 2 * 3 * 2),
    (["pruning", "--max-depths", "2", "3", "--max-depth", "3", "--thresholds", "5", "--repeats", "1"], 2 + 2 * 2),
    (["rdt", "--max-depths", "2", "--ks", "0", "5", "--trees", "3", "--repeats", "1"], 2),
], ids=["sources", "pruning", "rdt"])
def test_a_user_csv_works(tmp_path, user_csv, capsys, plots, argv, n_rows):
    out_dir = tmp_path / "out"
    assert main(["experiment", *argv, "--data", str(user_csv), "--class-column", "label", "--out", str(out_dir)]) == 0
    assert "mine.csv" in capsys.readouterr().out
    assert len(pd.read_csv(out_dir / "results.csv")) == n_rows
    assert plots and all(p.series > 0 and p.references == 0 for p in plots.values())  # the paper never saw it
    for name in plots:
        assert_png(out_dir / name)


def test_rdt_table7_plots_accuracy_against_beta_with_the_papers_values(tmp_path, plots):
    """One number of trees and several betas: the x axis is beta; Table 7 (3-class Nursery) marks it."""
    frame = load_dataset("nursery").frame
    path = tmp_path / "nursery3.csv"
    frame[~frame["class"].isin(["recommend", "very_recom"])].to_csv(path, index=False)
    argv = ["experiment", "rdt", "--data", str(path), "--class-column", "class", "--max-depths", "2", "--ks", "0", "5",
            "--trees", "10", "--betas", "0.1", "0.4", "--total-epsilon", "2", "--repeats", "1", "--global-models",
            "none", "--reference", "nursery3", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    result = plots["accuracy_ensemble.png"]
    assert (result.series, result.references) == (2, 3)  # k = 0 at beta 1; k = 5 at beta 0.1 and 0.4
    assert_png(result.path)


def test_rdt_refuses_a_reference_of_the_other_table(tmp_path, capsys):
    argv = ["experiment", "rdt", "--reference", "nursery3", "--max-depths", "2", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "nursery3" in capsys.readouterr().err and not (tmp_path / "results.csv").exists()


def _square(offset: int, task: int) -> int:
    return offset + task * task


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_tasks_keeps_task_order(jobs):
    assert (run_tasks(_square, list(range(7)), context=100, jobs=jobs, label="squares")
            == [100 + t * t for t in range(7)])


def test_plots_count_series_and_skip_unmeasured_ones(tmp_path):
    summary = pd.DataFrame({"x": [1, 2, 1, 2], "group": ["a", "a", "b", "b"], "m": [0.5, 0.6, np.nan, np.nan],
                            "m_std": [0.1, np.nan, np.nan, np.nan]})
    series = series_by(summary, x="x", mean="m", std="m_std", by=["group"], label=lambda key: key[0],
                       reference=lambda key: {2: 0.7, 3: 0.9})
    assert series == [Series("a", (1, 2), (0.5, 0.6), (0.1, 0.0), ((2, 0.7),))]  # b was never measured; x=3 not run
    two = [*series, Series("c", (1, 2), (0.4, 0.3), (0.0, 0.0))]
    for plot, name in ((plot_lines, "lines.png"), (plot_bars, "bars.png")):
        result = plot(tmp_path / name, two, title="t", xlabel="x (units)", ylabel="y (units)")
        assert (result.series, result.references) == (2, 1)
        assert_png(result.path)
