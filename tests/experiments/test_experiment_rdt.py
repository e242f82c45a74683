"""`modelshare experiment rdt`: the k-AnonToRdt accuracy grid on a tiny configuration."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from experiments.rdt import RdtSettings, run_rdt
from modelshare.cli import main
from modelshare.common.data.schema import Schema
from modelshare.common.privacy.dps import compose


def test_nursery_grid_has_one_row_per_setting_with_sane_scores(tmp_path, capsys):
    code = main(["experiment", "rdt", "--max-depths", "3", "--ks", "0", "5", "--trees", "3", "--betas", "0.4",
                 "--total-epsilon", "2", "--repeats", "1", "--out", str(tmp_path), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert [(r["depth"], r["k"], r["trees"], r["beta"]) for r in summary] == [(3, 0, 3, 1.0), (3, 5, 3, 0.4)]
    for row in summary:
        for name in ("acc_ensemble", "acc_pgen_decision-tree", "acc_pgen_naive-bayes"):
            assert 0.0 <= row[f"{name}_mean"] <= 1.0
        assert row["acc_ensemble_mean"] > 0.5  # majority class of Nursery is 0.33
    assert summary[0]["total_delta"] is None  # k = 0 claims nothing
    assert summary[1]["total_delta"] == compose(5, 0.4, 2.0, 3).delta_total
    per_split = pd.read_csv(tmp_path / "results.csv")
    assert len(per_split) == 2 and (tmp_path / "summary.csv").exists() and (tmp_path / "results.json").exists()


def test_a_table_the_experiment_has_never_seen(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.choice(["x", "y", "z"], 600), "b": rng.uniform(0, 10, 600)})
    frame["label"] = np.where((frame["a"] == "x") | (frame["b"] > 7), "yes", "no")
    schema = Schema.infer(frame, "label")
    X, y = schema.encode(frame)
    results = run_rdt(schema, X, y, RdtSettings(depths=(2,), ks=(0, 5), trees=(4,), betas=(0.5,), total_epsilon=None,
                                                repeats=2, global_models=("naive-bayes",)))
    assert len(results) == 4 and results["total_delta"].isna().all()
    baseline = max(np.mean(y), 1 - np.mean(y))
    assert results["acc_ensemble"].mean() > baseline
