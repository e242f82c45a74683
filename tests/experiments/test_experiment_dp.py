"""`modelshare experiment dp`: accuracy against epsilon of every registered eps-DP mechanism, tiny runs."""

from __future__ import annotations

import json

import matplotlib.image
import pandas as pd
import pytest

from experiments.dp import DpSettings, _plot, summarize_dp
from modelshare.cli import main
from modelshare.common.mechanisms import registry

TINY = ["experiment", "dp", "--dataset", "vote", "--epsilons", "0.1", "10", "--trees", "2", "--repeats", "2",
        "--prior-share", "0"]  # the papers' mechanisms; test_the_class_prior_rows covers the default share
SCORERS = ["ensemble", "pgen->decision-tree"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny Vote run, serial, with its JSON document."""
    out_dir = tmp_path_factory.mktemp("dp")
    assert main([*TINY, "--out", str(out_dir), "--json"]) == 0
    return out_dir, json.loads((out_dir / "results.json").read_text())


def test_one_row_per_mechanism_epsilon_repeat_and_scorer(tiny_run):
    out_dir, _ = tiny_run
    raw = pd.read_csv(out_dir / "results.csv")
    assert list(raw.columns) == ["repeat", "fold", "mechanism", "steps", "depth", "trees", "epsilon", "scored_as",
                                 "accuracy", "auc", "pgen_rows", "selection"]
    assert len(raw) == len(registry.names(family="dp")) * 2 * 2 * len(SCORERS)
    assert set(raw["mechanism"]) == set(registry.names(family="dp")) and "kanon-rdt" not in set(raw["mechanism"])
    assert set(raw["scored_as"]) == set(SCORERS) and set(raw["epsilon"]) == {0.1, 10.0}
    nb = raw["mechanism"] == "dpea-nb"  # one root of depth 1 whatever --trees and --max-depth say
    assert raw["accuracy"].between(0, 1).all() and (raw["trees"][~nb] == 2).all()
    assert (raw["trees"][nb] == 1).all() and (raw["depth"][nb] == 1).all()
    assert raw["auc"].between(0, 1).all()  # Vote has two classes: every scorer reports its AUC
    pgen = raw[raw["scored_as"] == "pgen->decision-tree"]
    assert pgen["selection"].str.startswith("auto: min_samples_leaf=").all()  # the miner's default for the tree
    summary = pd.read_csv(out_dir / "summary.csv")
    assert len(summary) == len(registry.names(family="dp")) * 2 * len(SCORERS) and (summary["splits"] == 2).all()


def test_json_carries_settings_summary_and_references(tiny_run):
    _, document = tiny_run
    assert document["experiment"] == "dp" and document["settings"]["epsilons"] == [0.1, 10.0]
    assert len(document["raw"]) == len(registry.names(family="dp")) * 2 * 2 * len(SCORERS)
    assert document["settings"]["depths"]["diffpets"] == 8  # floor(16 attributes / 2)
    for name in ("majority", "tree"):
        assert 0 <= document["references"][name]["mean"] <= 1
    assert document["references"]["tree"]["mean"] > document["references"]["majority"]["mean"]
    assert len(document["references_raw"]) == 2


def test_png_is_valid_with_a_line_per_mechanism_and_scorer_plus_references(tiny_run):
    out_dir, _ = tiny_run
    path = out_dir / "accuracy_vs_epsilon.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(path).ndim == 3
    raw = pd.read_csv(out_dir / "results.csv")
    refs = pd.DataFrame.from_records(tiny_run[1]["references_raw"])
    settings = DpSettings(**{**tiny_run[1]["settings"], "epsilons": (0.1, 10.0)})
    [plot] = _plot(summarize_dp(raw), refs, settings, "vote", out_dir / "again")
    assert plot.series == len(registry.names(family="dp")) * len(SCORERS) + 2


def test_jobs_do_not_change_the_numbers(tiny_run, tmp_path):
    out_dir, _ = tiny_run
    assert main([*TINY, "--out", str(tmp_path), "--jobs", "2"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "results.csv"), pd.read_csv(out_dir / "results.csv"))


def test_depth_override_and_bad_input(tmp_path):
    assert main(["experiment", "dp", "--dataset", "car", "--epsilons", "1", "--trees", "1", "--repeats", "1",
                 "--max-depth", "laplace-rdt=2", "--global-models", "none", "--prior-share", "0",
                 "--out", str(tmp_path)]) == 0
    raw = pd.read_csv(tmp_path / "results.csv")
    assert set(raw.loc[raw["mechanism"] == "laplace-rdt", "depth"]) == {2} and set(raw["scored_as"]) == {"ensemble"}
    with pytest.raises(SystemExit):
        main(["experiment", "dp", "--max-depth", "kanon-rdt=3", "--out", str(tmp_path)])


def test_the_class_prior_rows(tmp_path):
    """With the default share every release is also scored by its class prior; a declined one has no ensemble, and
    its decision tree falls back to the prior; the floor never scores below the best row of its release."""
    assert main(["experiment", "dp", "--dataset", "car", "--epsilons", "0.05", "10", "--trees", "2", "--repeats", "1",
                 "--mechanisms", "laplace-rdt", "--out", str(tmp_path)]) == 0
    raw = pd.read_csv(tmp_path / "results.csv")
    assert set(raw["scored_as"]) == {"ensemble", "pgen->decision-tree", "class-prior"}
    prior = raw[raw["scored_as"] == "class-prior"].set_index("epsilon")["accuracy"]
    assert prior.between(0.6, 0.8).all()  # Car's majority class holds 70 % of the rows
    low = raw[raw["epsilon"] == 0.05].set_index("scored_as")
    assert pd.isna(low.at["ensemble", "accuracy"]) and low.at["pgen->decision-tree", "selection"].startswith("declined")
    assert low.at["pgen->decision-tree", "accuracy"] == low.at["class-prior", "accuracy"]
    high = raw[raw["epsilon"] == 10.0].set_index("scored_as")
    assert high.at["pgen->decision-tree", "accuracy"] > high.at["class-prior", "accuracy"]


def test_model_settings_are_the_miners_and_checked(tmp_path, capsys):
    """``--model-setting`` sets the global models as a study's [global_models] does; faults are refused up front."""
    assert main(["experiment", "dp", "--dataset", "car", "--epsilons", "1", "--trees", "2", "--repeats", "1",
                 "--global-models", "decision-tree", "naive-bayes", "--model-setting", "decision-tree=fixed",
                 "--model-setting", "naive-bayes:alpha=2.0", "--out", str(tmp_path)]) == 0
    raw = pd.read_csv(tmp_path / "results.csv", keep_default_na=False)
    assert set(raw.loc[raw["scored_as"] == "pgen->decision-tree", "selection"]) == {"fixed"}
    assert set(raw.loc[raw["scored_as"] == "pgen->naive-bayes", "selection"]) == {"given"}
    assert (raw["auc"] == "").all()  # Car has four classes: no AUC
    capsys.readouterr()
    assert main(["experiment", "dp", "--dataset", "car", "--model-setting", "naive-bayes=auto",
                 "--out", str(tmp_path / "refused")]) != 0
    assert "naive-bayes: the study does not learn 'naive-bayes'" in capsys.readouterr().err
    assert not (tmp_path / "refused" / "results.csv").exists()


def test_mechanisms_keeps_some_and_their_numbers_do_not_change(tiny_run, tmp_path):
    out_dir, _ = tiny_run
    assert main([*TINY, "--mechanisms", "dpea-nb", "--out", str(tmp_path)]) == 0
    alone = pd.read_csv(tmp_path / "results.csv")
    together = pd.read_csv(out_dir / "results.csv")
    assert set(alone["mechanism"]) == {"dpea-nb"}
    pd.testing.assert_frame_equal(alone.reset_index(drop=True),
                                  together[together["mechanism"] == "dpea-nb"].reset_index(drop=True))
