"""`modelshare experiment suite`: the unseen tables with their public schemas, a tiny subset run end to end,
and issue 33's conditions read off a summary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.suite import (
    NONE,
    done_conditions,
    order_risk,
    requirement_item,
    settings_for,
)
from experiments.suite_tables import DATA_DIR, SUITE, load_suite_table, schema_of
from modelshare.cli import build_parser, main
from modelshare.common.data.schema import NumericAttribute

TUNED_OR_RESERVED = {"nursery", "car", "adult", "vote", "winequality", "wine-quality", "mushroom", "cmc", "tictactoe"}


def test_eight_unseen_tables_of_both_kinds_each_within_its_public_schema():
    assert len(SUITE) >= 8 and not set(SUITE) & TUNED_OR_RESERVED
    sizes, classes, categorical = [], [], 0
    for name in SUITE:
        table = load_suite_table(name)  # every row checked against the bundled schema
        bundled = json.loads((DATA_DIR / f"{name}.schema.json").read_text())
        assert table.schema.fingerprint == schema_of(name).fingerprint and not table.schema.data_derived
        assert "domain" not in bundled  # public statements, not a draft read off the rows
        for attribute, written in zip(table.schema.attributes, bundled["attributes"], strict=False):
            if isinstance(attribute, NumericAttribute):
                assert written["source"], f"{name}.{attribute.name} has no public source for its bounds"
        sizes.append(len(table.frame))
        classes.append(table.schema.n_classes)
        categorical += any(a.kind == "categorical" for a in table.schema.attributes)
    assert min(sizes) < 500 and max(sizes) > 10_000
    assert 2 in classes and max(classes) > 2 and categorical >= 2
    assert (DATA_DIR / "NOTICE").read_text().count(".csv.gz") >= len(SUITE)


def test_requirements_name_their_releases_and_bad_ones_are_refused():
    assert [s.label for s in settings_for("k-anonymity:k=10", ["dpea-nb"])] == ["apt k-anonymity:k=10"]
    assert ([s.label for s in settings_for("kanon-rdt", ["dpea-nb"])]
            == ["kanon-rdt dps:k=5,beta=0.1,epsilon=2,trees=10"])
    dp = settings_for("dp:epsilon=0.10", ["dpea-nb", "laplace-rdt"])
    assert [(s.mechanism, s.requirement, s.item) for s in dp] == [
        ("dpea-nb", "dp:epsilon=0.1,trees=1", "dp:epsilon=0.1"),
        ("laplace-rdt", "dp:epsilon=0.1,trees=10", "dp:epsilon=0.1")]
    assert settings_for(NONE, [])[0].mechanism == "none"
    for bad in ("dp:epsilon=0", "k-anonymity:k=0", "dps:k=5,beta=0.1,epsilon=2,trees=10", "apt"):
        with pytest.raises(ValueError):
            requirement_item(bad)
    for argv in (["--tables", "nursery"], ["--requirements", "cl-diversity:c=5"], ["--dp-mechanisms", "apt"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["experiment", "suite", *argv])
    args = build_parser().parse_args(["experiment", "suite", "--requirements", "cl-diversity:c=5,l=2", "dp:epsilon=1"])
    assert args.requirements == ["cl-diversity:c=5,l=2", "dp:epsilon=1"] and args.owners == (1, 5, 10)


def test_a_tiny_subset_runs_end_to_end_and_two_runs_merge_into_one_table(tmp_path: Path, capsys):
    tiny = ["experiment", "suite", "--tables", "iris", "--owners", "2", "--folds", "2"]
    assert main([*tiny, "--requirements", "k-anonymity:k=10", "cl-diversity:c=5,l=2", "--out", str(tmp_path / "a"),
                 "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main([*tiny, "--requirements", "dp:epsilon=1", "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["experiment", "suite", "--merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                 str(tmp_path / "ab"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    summary = pd.DataFrame(doc["summary"])
    assert list(summary["setting"]) == [NONE, "apt k-anonymity:k=10", "apt cl-diversity:c=5,l=2",
                                        "dpea-nb dp:epsilon=1,trees=1"]
    assert (summary["folds"] == 2).all() and (summary["owners"] == 2).all()
    assert summary["majority"].between(0.3, 0.37).all()  # three balanced classes
    assert (summary["basis"] > 0.85).all() and summary["best"].between(0, 1).all()
    plain = summary.set_index("setting").loc[NONE, "best"]
    assert np.allclose(summary["none"], plain)  # every row's no-privacy column is the none federation's best
    # one cell, two runs
    assert plain == pytest.approx(pd.DataFrame(first["summary"]).set_index("setting").loc[NONE, "best"])
    bound = summary.set_index("setting")["bound"]
    assert 0 < bound["apt cl-diversity:c=5,l=2"] <= 1 and bound.drop("apt cl-diversity:c=5,l=2").isna().all()
    conditions = {(c["condition"].split(" at ")[0], c["table"]): c["holds"] for c in doc["conditions"]}
    assert conditions[("dp:epsilon=1", "iris")] is not None
    assert conditions[("k-anonymity:k=10", "median of 0")] is None  # 5 owners did not run
    raw = pd.read_csv(tmp_path / "ab" / "results.csv")
    assert set(raw["method"]) == {"BASIS", "PGEN"} and set(raw["model"]) == {"decision-tree", "naive-bayes"}
    assert len(raw) == 4 * 2 * 2 * 2  # releases x folds x methods x models: the none cell kept once
    text = (tmp_path / "ab" / "suite.md").read_text()
    assert all(command in text for command in doc["settings"]["commands"])
    assert "| iris | apt k-anonymity:k=10 | 2 |" in text
    reread = build_parser().parse_args(doc["settings"]["commands"][1].split()[1:])
    assert reread.tables == ("iris",) and reread.folds == 2 and reread.requirements == ["dp:epsilon=1"]
    assert main(["experiment", "suite", "--merge", str(tmp_path), "--out", str(tmp_path / "c")]) == 2
    assert "no suite results.json" in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_the_conditions_read_the_gap_at_five_owners_and_the_majority_under_dp():
    rows = [{"table": t, "setting": "apt k-anonymity:k=10", "requirement": "k-anonymity:k=10", "owners": 5,
             "best": best, "none": 0.9, "majority": 0.5} for t, best in (("a", 0.89), ("b", 0.84), ("c", 0.875))]
    rows += [{"table": "a", "setting": s, "requirement": "dp:epsilon=0.1", "owners": 5, "best": best, "none": 0.9,
              "majority": 0.5} for s, best in (("dpea-nb dp:epsilon=0.1,trees=1", 0.45), ("laplace-rdt", 0.55))]
    rows += [{"table": "b", "setting": "dpea-nb", "requirement": "dp:epsilon=1", "owners": 1, "best": 0.4, "none": 0.9,
              "majority": 0.5}]
    found = {(c["condition"][:45], c["table"]): c for c in done_conditions(pd.DataFrame(rows))}
    every = "k-anonymity:k=10 at 5 owners: best within 5 poi"
    median = "k-anonymity:k=10 at 5 owners: median within 2 p"
    assert found[(every[:45], "a")]["holds"] and not found[(every[:45], "b")]["holds"]
    assert found[(median[:45], "median of 3")]["value"] == pytest.approx(-0.025)
    assert found[(median[:45], "median of 3")]["holds"] is False
    dp = {c["table"]: c["holds"] for c in done_conditions(pd.DataFrame(rows)) if c["condition"].startswith("dp:")}
    assert dp == {"a": True, "b": False}  # the best dp mechanism run counts


def test_a_floor_equal_to_the_majority_holds_whatever_the_rounding():
    """The floor's accuracy and the majority class's are means of the same fold values summed in another order."""
    folds = [0.5841269841, 0.5841269841, 0.5828025478]
    best, majority = float(np.mean(folds)), sum(folds) / 3
    rows = [{"table": "t", "setting": "dpea-nb", "requirement": "dp:epsilon=1", "owners": 5, "best": best, "none": 0.9,
             "majority": majority + 1e-16}]
    [holds] = [c["holds"] for c in done_conditions(pd.DataFrame(rows)) if c["condition"].startswith("dp:")]
    assert holds


def test_order_risk_is_the_group_privacy_bound_and_a_laplace_histogram_does_not_beat_it():
    """No eps-DP study orders two near-equal classes reliably on both a table and its neighbour.

    The neighbour drops g + 1 rows of the larger class (g the gap), so its majority is the other class. The
    attack on the bound: the floor's own mechanism, a Laplace class histogram at eps read by its argmax.
    """
    y = np.repeat([0, 1, 2], [48, 40, 30])  # gap 8 between the two largest classes
    risk = order_risk(y, 3, "dp:epsilon=0.1")
    assert risk == pytest.approx(1 / (1 + np.exp(0.1 * 9)))
    assert np.isnan(order_risk(y, 3, "k-anonymity:k=10"))
    rng = np.random.default_rng(0)
    draws = 20_000
    for counts, right in ((np.array([48, 40, 30]), 0), (np.array([39, 40, 30]), 1)):
        noisy = counts + rng.laplace(scale=1 / 0.1, size=(draws, 3))
        wrong = float((noisy.argmax(axis=1) != right).mean())
        if wrong >= risk:
            return
    pytest.fail("a Laplace histogram named the right majority on both tables more often than eps-DP allows")


def test_a_path_release_can_name_its_learner_and_disclosure_and_the_others_keep_theirs():
    [path] = settings_for("k-anonymity:k=10", ("dpea-nb",), learner="cart", disclosure="counts")
    assert path.label == "apt k-anonymity:k=10 learner=cart disclosure=counts"
    from experiments.suite import SuiteSettings, pipeline_config

    suite = SuiteSettings((5,), (path,), ("decision-tree",), folds=3)
    config = pipeline_config(path, 5, suite)
    assert (config.learner, config.disclosure) == ("cart", "counts")
    [plain] = settings_for("k-anonymity:k=10", ("dpea-nb",))
    default = pipeline_config(plain, 5, suite)
    assert (default.learner, default.disclosure) == ("admissible", "hit_miss")
    [dp] = settings_for("dp:epsilon=1", ("dpea-nb",), learner="cart", disclosure="counts")
    assert dp.learner is None and dp.disclosure is None
