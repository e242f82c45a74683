"""`modelshare experiment dp-regression`: DiffPETs regression error against epsilon, tiny runs on a generated table."""

from __future__ import annotations

import json

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from modelshare.cli import main

EPSILONS = (0.1, 10.0)
SCORERS = {"forest", "pgen->regression-tree"}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """300 rows with a strong signal: y = 2 x + 5 [group = b] + 1 + N(0, 0.3), clipped to the public 0..30.

    ``group`` is a text column (inferred categorical), ``code`` a small integer column (inferred
    numeric, as Daily Demand's week and day columns are) and ``noise`` carries nothing.
    """
    rng = np.random.default_rng(0)
    n = 300
    x, group = rng.uniform(0, 10, n), rng.choice(["a", "b", "c"], n)
    y = np.clip(2 * x + 5 * (group == "b") + 1 + rng.normal(0, 0.3, n), 0, 30)
    path = tmp_path_factory.mktemp("table") / "signal.csv"
    pd.DataFrame({"x": x.round(3), "group": group, "code": rng.integers(1, 4, n), "noise": rng.uniform(-1, 1, n),
                  "y": y.round(3)}).to_csv(path, index=False)
    return path


def tiny(table, out_dir, *extra: str) -> list[str]:
    return ["experiment", "dp-regression", "--data", str(table), "--target", "y", "--target-range", "0,30",
            "--epsilons", *map(str, EPSILONS), "--trees", "2", "--repeats", "2", "--out", str(out_dir),
            *extra]


@pytest.fixture(scope="module")
def tiny_run(table, tmp_path_factory):
    """One tiny serial run with its JSON document."""
    out_dir = tmp_path_factory.mktemp("dpreg")
    assert main(tiny(table, out_dir, "--json")) == 0
    return out_dir, json.loads((out_dir / "results.json").read_text())


def test_one_row_per_split_epsilon_and_scorer(tiny_run):
    out_dir, _ = tiny_run
    raw = pd.read_csv(out_dir / "results.csv")
    assert list(raw.columns) == ["repeat", "fold", "depth", "trees", "epsilon", "scored_as", "rmse", "mae",
                                 "pgen_rows"]
    assert len(raw) == 2 * len(EPSILONS) * len(SCORERS)
    assert set(raw["scored_as"]) == SCORERS and set(raw["epsilon"]) == set(EPSILONS)
    assert (raw["depth"] == 2).all()  # floor((4 attributes + target) / 2)
    assert (raw["rmse"] >= raw["mae"]).all() and (raw["mae"] > 0).all()
    summary = pd.read_csv(out_dir / "summary.csv")
    assert list(summary.columns) == ["depth", "trees", "scored_as", "epsilon", "metric", "mean", "std", "splits"]
    assert len(summary) == len(EPSILONS) * len(SCORERS) * 2 and (summary["splits"] == 2).all()


def test_json_carries_settings_schema_and_references(tiny_run):
    _, document = tiny_run
    assert document["experiment"] == "dp-regression" and document["rows"] == 300
    settings = document["settings"]
    assert settings["target"] == "y" and settings["target_range"] == [0.0, 30.0] and settings["trees"] == 2
    assert settings["attribute_ranges"].startswith("inferred from the rows")
    schema = document["regression_schema"]
    assert schema["target"] == {"name": "y", "type": "numeric", "low": 0.0, "high": 30.0}
    assert {a["name"]: a["type"] for a in schema["attributes"]} == {"x": "numeric", "group": "categorical",
                                                                     "code": "numeric", "noise": "numeric"}
    refs = document["references"]
    assert refs["tree"]["rmse_mean"] < refs["mean"]["rmse_mean"] and len(document["references_raw"]) == 2 * 2


def test_large_epsilon_beats_the_constant_predictor(tiny_run):
    _, document = tiny_run
    summary = pd.DataFrame.from_records(document["summary"])
    rmse = summary[(summary["metric"] == "rmse") & (summary["epsilon"] == 10.0)].set_index("scored_as")["mean"]
    assert (rmse < document["references"]["mean"]["rmse_mean"]).all(), rmse


def test_pngs_are_valid(tiny_run):
    out_dir, _ = tiny_run
    for name in ("rmse_vs_epsilon.png", "mae_vs_epsilon.png"):
        path = out_dir / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert matplotlib.image.imread(path).ndim == 3


def test_jobs_do_not_change_the_numbers(table, tiny_run, tmp_path):
    out_dir, _ = tiny_run
    assert main(tiny(table, tmp_path, "--jobs", "2")) == 0
    assert (tmp_path / "results.csv").read_bytes() == (out_dir / "results.csv").read_bytes()


@pytest.mark.parametrize("arguments, message", [
    ((), "the following arguments are required: --target-range"),
    (("--target-range", "30,0"), "argument --target-range: LOW must be below HIGH, got '30,0'"),
    (("--target-range", "5,5"), "argument --target-range: LOW must be below HIGH, got '5,5'"),
    (("--target-range", "0"), "argument --target-range: expected LOW,HIGH"),
])
def test_target_range_is_required_and_checked(table, tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit):
        main(["experiment", "dp-regression", "--data", str(table), "--target", "y", *arguments,
              "--out", str(tmp_path)])
    assert message in capsys.readouterr().err


def test_bad_target_columns_are_named(table, tmp_path, capsys):
    base = ["experiment", "dp-regression", "--data", str(table), "--target-range", "0,30", "--out", str(tmp_path)]
    assert main([*base, "--target", "nope"]) == 2
    assert "column 'nope': --target column not found" in capsys.readouterr().err
    assert main([*base, "--target", "group"]) == 2
    assert "row 1, column 'group', value 'b': --target values must be finite numbers" in capsys.readouterr().err
