"""`release`, `audit`, `experiment pruning` and PPGEN in `simulate`, run in-process through the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.pruning import (
    PruningSettings,
    _reinfer,
    run_pruning,
    summarize_pruning,
)
from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.model_io import read_tree
from modelshare.pipeline import PipelineConfig, run_study


def _release(tmp_path, *extra: str) -> tuple[int, str]:
    path = tmp_path / "model.json"
    code = main(["release", "--dataset", "car", "--learner", "multiway", "--out", str(path), *extra])
    return code, str(path)


def test_release_then_audit_passes(tmp_path, capsys):
    code, path = _release(tmp_path, "--mechanism", "apt", "--requirement", "k-anonymity:k=5", "--json")
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["report"]["requirement"] == "k-anonymity:k=5"
    assert summary["released_leaves"] < summary["trained_leaves"]
    assert summary["owner_attacks"]["uniqueness"]["leaves"] == 0
    assert json.loads(open(path).read())["report"]["mechanism"] == "apt"
    assert main(["audit", path, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["passed"] and all(p["tuples"] >= 5 for p in result["paths"])
    assert main(["audit", path]) == 0
    assert "PASS" in capsys.readouterr().out


def test_audit_fails_a_tampered_model(tmp_path, capsys):
    code, path = _release(tmp_path, "--mechanism", "prune-parent", "--requirement", "k-anonymity:k=20")
    assert code == 0
    data = json.loads(open(path).read())
    data["report"]["requirement"] = "k-anonymity:k=100000"
    for claim in data["report"]["claims"]:
        claim["requirement"] = "k-anonymity:k=100000"
    open(path, "w").write(json.dumps(data))
    capsys.readouterr()
    assert main(["audit", path, "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    failed = [c for c in result["checks"] if not c["passed"]]
    assert failed and "k-anonymity:k=100000" in failed[0]["name"]


def test_release_errors_are_specific(tmp_path, capsys):
    assert _release(tmp_path, "--mechanism", "apt", "--requirement", "cl-diversity:c=5")[0] == 2
    assert "cl-diversity:c=C,l=L" in capsys.readouterr().err
    assert _release(tmp_path, "--mechanism", "apt", "--requirement", "cl-diversity:c=1,l=4")[0] == 2
    assert "nothing is released" in capsys.readouterr().err
    assert _release(tmp_path, "--mechanism", "apt")[0] == 2
    assert "needs a requirement" in capsys.readouterr().err
    assert main(["release", "--mechanism", "apt", "--out", str(tmp_path / "x.json")]) == 2
    assert "--dataset NAME or --data FILE" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
    assert _release(tmp_path, "--mechanism", "apt", "--requirement", "k-anonymity:k=5", "--pairing", "eager")[0] == 2
    assert "--pairing applies to the admissible learner only, not to learner 'multiway'" in capsys.readouterr().err
    assert not (tmp_path / "model.json").exists()


def test_release_takes_the_admissible_learners_category_split(tmp_path, capsys):
    path = tmp_path / "binary.json"
    assert main(["release", "--dataset", "car", "--learner", "admissible", "--mechanism", "apt", "--requirement",
                 "k-anonymity:k=10", "--disclosure", "counts", "--category-split", "binary", "--out", str(path)]) == 0
    tree = read_tree(path)
    assert all(len(node.edges) == 2 for node in tree.nodes if not node.is_leaf)


def test_simulate_ppgen_audits_every_release(capsys, tmp_path):
    args = ["experiment", "sources", "--dataset", "car", "--owners", "2", "--folds", "2", "--learner", "multiway",
            "--json", "--out", str(tmp_path)]
    assert main([*args, "--mechanism", "apt", "--requirement", "cl-diversity:c=5,l=2", "--disclosure", "hit_miss"]) == 0
    rows = json.loads(capsys.readouterr().out)["summary"]
    pgen = [r for r in rows if r["method"] == "PGEN"]
    assert pgen and all(r["releases_audited_ok_mean"] == r["owners_released_mean"] for r in pgen)


def test_owners_that_cannot_meet_the_requirement_release_nothing(car):
    schema, X, y = car
    config = PipelineConfig(
        n_sources=2, folds=2, mechanism="apt", requirement="k-anonymity:k=100000", global_models=("decision-tree",)
    )
    results = run_study(schema, X, y, config)
    pgen = results[results["method"] == "PGEN"]
    assert (pgen["owners_released"] == 0).all() and (pgen["train_rows"] == 0).all()
    assert pgen["accuracy"].isna().all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mechanism": "apt"}, "needs a requirement"),
        ({"mechanism": "none", "requirement": "k-anonymity:k=2"}, "takes no requirement"),
        ({"mechanism": "apt", "requirement": "k-anon:k=2"}, "unknown requirement"),
        ({"mechanism": "magic"}, "unknown mechanism"),
    ],
)
def test_pipeline_checks_the_release_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PipelineConfig(**kwargs)


# Wakabayashi et al., Nursery: Table 6 (depth: N_l, N_u) and Table 7 Method 2 (s: N_u, N_l, accuracy)
PAPER_TABLE6 = {3: (1, 3448), 4: (1, 3448), 5: (3, 5057), 6: (11.2, 6822), 7: (24, 7863)}
PAPER_TABLE7_M2 = {
    5: (7863.9, 24, 0.9370),
    10: (7860.2, 23.9, 0.9370),
    20: (7654, 19.6, 0.9373),
    30: (7601.5, 18.5, 0.9363),
    40: (7571.1, 17.7, 0.9355),
    50: (7528.5, 17.3, 0.9348),
}


def test_pruning_experiment_reproduces_the_attacks_paper_on_nursery():
    """The paper's protocol (10 splits, factorize codes) gives its Nursery Tables 6 and 7 exactly."""
    table = load_dataset("nursery")
    schema = _reinfer(table.schema, table.frame, "appearance")
    X, y = schema.encode(table.frame)
    attacks, pruning = summarize_pruning(run_pruning(schema, X, y, PruningSettings()))
    by_depth = attacks.set_index("depth")
    for depth, (leaves, users) in PAPER_TABLE6.items():
        assert by_depth.loc[depth, "homogeneity_leaves"] == pytest.approx(leaves, abs=0.05)
        assert int(by_depth.loc[depth, "homogeneity_users"]) == users  # the paper truncates
        assert by_depth.loc[depth, "uniqueness"] == 0
    m2 = pruning[pruning["method"] == "method2"].set_index("s")
    for s, (users, leaves, acc) in PAPER_TABLE7_M2.items():
        assert m2.loc[s, "homogeneity_users"] == pytest.approx(users, abs=0.15)
        assert m2.loc[s, "homogeneity_leaves"] == pytest.approx(leaves, abs=0.05)
        assert m2.loc[s, "acc"] == pytest.approx(acc, abs=5e-5)
    m1 = pruning[pruning["method"] == "method1"].set_index("s")
    assert m1.loc[50, "homogeneity_users"] == pytest.approx(7696.4, abs=0.05)
    assert (m1["acc_abstain"] <= m1["acc"] + 1e-12).all()


def test_experiment_pruning_cli_prints_both_tables(capsys, tmp_path):
    argv = ["experiment", "pruning", "--dataset", "car", "--max-depths", "3", "4", "--max-depth", "4", "--thresholds",
            "5", "--repeats", "2", "--json", "--out", str(tmp_path)]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["depth"] for r in payload["attacks"]] == [3, 4]
    assert {(r["method"], r["s"]) for r in payload["pruning"]} == {("method1", 0), ("method1", 5),
                                                                   ("method2", 0), ("method2", 5)}
    assert all(0 <= r["acc"] <= 1 for r in payload["pruning"])
    assert np.isfinite([r["homogeneity_users"] for r in payload["attacks"]]).all()
