"""The modelshare CLI, run in-process through its entry point."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.model_io import read_tree, write_tree
from modelshare.common.trees.learners import CartTreeClassifier


def test_simulate_json_on_bundled_data(tmp_path, capsys):
    assert main(["experiment", "sources", "--dataset", "car", "--owners", "2", "--folds", "3", "--seed", "1", "--json",
                 "--out", str(tmp_path)]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["rows"] == 1728 and payload["settings"]["owners"] == [2]
    methods = {(r["model"], r["method"]) for r in payload["summary"]}
    assert ("decision-tree", "PGEN") in methods and ("naive-bayes", "BASEGEN") in methods


def test_simulate_table_on_user_csv(tmp_path, capsys):
    table = load_dataset("car").frame.sample(400, random_state=0)
    path = tmp_path / "cars.csv"
    table.to_csv(path, index=False)
    assert main(["experiment", "sources", "--data", str(path), "--class-column", "class", "--owners", "3", "--folds",
                 "2", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "PGEN" in out and "BASEGEN" in out and "cars.csv: 3 owners" in out


def test_simulate_reports_bad_input_clearly(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,x\n2,y\n")
    assert main(["experiment", "sources", "--data", str(path), "--class-column", "nope"]) == 2
    err = capsys.readouterr().err
    assert "bad.csv" in err and "nope" in err
    assert main(["experiment", "sources", "--data", str(path)]) == 2
    assert "--class-column" in capsys.readouterr().err


def test_datasets_list_show_export(tmp_path, capsys):
    assert main(["datasets", "list", "--json"]) == 0
    names = {d["name"] for d in json.loads(capsys.readouterr().out)}
    assert {"nursery", "car", "adult", "vote", "winequality"} <= names
    assert main(["datasets", "show", "car", "--json"]) == 0
    assert "safety" in capsys.readouterr().out
    out = tmp_path / "car.csv"
    assert main(["datasets", "export", "car", "--out", str(out)]) == 0
    assert len(pd.read_csv(out)) == 1728
    assert main(["datasets", "show", "iris"]) == 2
    assert "nursery" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_pgen_command_writes_exact_rows(tmp_path, suffix):
    table = load_dataset("car")
    X, y = table.schema.encode(table.frame)
    tree = CartTreeClassifier(table.schema, min_samples_leaf=10, random_state=0).fit(X, y).tree_
    model = tmp_path / "model.json"
    write_tree(tree, model)
    assert read_tree(model).n_leaves == tree.n_leaves
    out = tmp_path / f"pseudo{suffix}"
    assert main(["pgen", str(model), "--rows", "5000", "--out", str(out), "--chunk-rows", "1234", "--seed", "2"]) == 0
    frame = pd.read_parquet(out) if suffix == ".parquet" else pd.read_csv(out, dtype=str)
    assert len(frame) == 5000 and list(frame.columns) == [*table.schema.names, "class"]
    Xp, _ = table.schema.encode(frame)
    leaf_of = tree.apply(Xp)
    assert set(np.unique(leaf_of)) <= set(tree.leaves)


def test_pgen_command_rejects_a_corrupt_model(tmp_path, capsys):
    model = tmp_path / "model.json"
    model.write_text('{"format": "modelshare.tree/1", "nodes": ')
    out = tmp_path / "x.csv"
    assert main(["pgen", str(model), "--out", str(out)]) == 2
    assert "model.json" in capsys.readouterr().err and not out.exists()
