"""`simulate --global-models tree-vote`: the vote's BASIS (the owners' trees without the mechanism), its row in the
tables and `--json`, the legend, the report page and `study results`; one real federation (slow)."""

from __future__ import annotations

import argparse
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from modelshare import simulate
from modelshare.admin import results_dict, status_dict
from modelshare.cli import main
from modelshare.cli.common import out
from modelshare.cli.federation import results_renderables
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.study import spec_from_mapping
from modelshare.common.federation.wire import decode_model, tree_to_pb
from modelshare.legend import LEGEND, legend_lines
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine
from modelshare.miner_node.tree_vote import TREE_VOTE
from modelshare.owner_node.training import build_submission
from modelshare.pipeline import stratified_parts
from modelshare.report_html import study_report, write_report

OWNERS = 3


def _args(mechanism: str, learner: str, disclosure: str) -> argparse.Namespace:
    """The simulate flags `compare` and `basis_model` read."""
    return argparse.Namespace(mechanism=mechanism, learner=learner, disclosure=disclosure, min_samples_leaf=1,
                              max_depth=None, seed=0, owners=OWNERS, models=[TREE_VOTE], admissible={})


@pytest.fixture(scope="module")
def none_study():
    """The vote table dealt to three owners as simulate deals it, each owner's real `--mechanism none` submission,
    and the study the miner mines from them: (schema, simulate's data, spec, results)."""
    table = load_dataset("vote")
    schema = table.schema
    X, y = schema.encode(table.frame, source=table.source)
    rng = np.random.default_rng(0)
    test = stratified_parts(y, 5, rng) == 0
    parts = stratified_parts(y[~test], OWNERS, rng)
    data = {"X_train": X[~test], "y_train": y[~test], "X_test": X[test], "y_test": y[test], "parts": parts}
    spec = spec_from_mapping({"study": {"id": "vote-none", "seed": 0}, "schema": {"dataset": "vote"},
                              "release": {"mechanism": "none", "disclosure": "counts"},
                              "training": {"learner": "multiway"}, "mining": {"global_models": [TREE_VOTE]}}).spec
    key = Ed25519PrivateKey.generate()
    accepted = []
    for i in range(OWNERS):
        rows = parts == i
        envelope = build_submission(study_from_pb(spec), data["X_train"][rows], data["y_train"][rows],
                                    owner_id=f"owner-{i + 1}", key=key)
        accepted.append(AcceptedModel(f"owner-{i + 1}", decode_model(fpb.ModelMessage.FromString(envelope.payload))))
    results = mine(study_from_pb(spec), accepted, Evaluation(data["X_test"], data["y_test"],
                                                             np.arange(int(test.sum()))))
    return schema, data, spec, results


def test_without_a_mechanism_the_votes_basis_is_exactly_the_vote_the_miner_builds(none_study):
    schema, data, _, results = none_study
    [row] = simulate.compare(schema, data, results, _args("none", "multiway", "counts"))
    assert row["model"] == TREE_VOTE and row["class_match"] == 1.0 and row["path_match"] is None
    assert row["basis_accuracy"] == pytest.approx(row["accuracy"]) and row["basis_auc"] == pytest.approx(row["auc"])
    assert row["train_rows"] == 0 and row["selection"] == f"built from the {OWNERS} released trees"
    assert legend_lines({"task": "classification", "mechanism": "none", "requirement": None, "models": [row]}) == [
        LEGEND["basis"], LEGEND["pgen"], LEGEND["class"], LEGEND["vote"], LEGEND["vote-basis"]]


def test_under_a_path_requirement_the_votes_basis_trees_are_the_learners_with_no_requirement(none_study):
    schema, data, _, _ = none_study
    basis = simulate.basis_model(TREE_VOTE, schema, data, _args("apt", "admissible", "hit_miss"))
    assert len(basis.trees) == OWNERS, "one tree per owner, trained on its raw rows"
    assert all(tree.nodes[leaf].counts is not None for tree in basis.trees for leaf in tree.leaves), "full counts"
    unprotected = simulate.basis_model(TREE_VOTE, schema, data, _args("none", "admissible", "hit_miss"))
    assert [tree_to_pb(t) for t in basis.trees] == [tree_to_pb(t) for t in unprotected.trees], \
        "what --mechanism none with the same learner releases"
    multiway = simulate.basis_model(TREE_VOTE, schema, data, _args("apt", "multiway", "hit_miss"))
    assert [tree_to_pb(t) for t in multiway.trees] != [tree_to_pb(t) for t in basis.trees], "the study's learner"


def test_under_a_whole_release_mechanism_the_vote_has_no_basis_and_every_output_says_why(none_study, tmp_path, capsys):
    schema, data, spec, results = none_study
    assert simulate.basis_model(TREE_VOTE, schema, data, _args("kanon-rdt", "multiway", "counts")) is None
    [row] = simulate.compare(schema, data, results, _args("kanon-rdt", "multiway", "counts"))
    assert row["basis_accuracy"] is None and row["basis_auc"] is None and row["class_match"] is None
    assert row["accuracy"] is not None and row["auc"] is not None
    report = {"source": "vote.csv", "task": "classification", "mechanism": "kanon-rdt", "hints": [], "refusals": [],
              "requirement": "dps:k=5,beta=0.1,epsilon=2,trees=10", "disclosure": "counts", "owners": [],
              "models": [row], "test_rows": len(data["y_test"]), "off_path": "", "wall_seconds": 1.0}
    assert legend_lines(report)[-2:] == [LEGEND["vote"], LEGEND["vote-no-basis"]], "and no cost sentence"
    simulate._print(report)
    printed = capsys.readouterr().out
    assert re.search(r"tree-vote\s+│\s+-\s+│\s+\d\.\d{4}", printed), "BASIS shown as -"
    status = fpb.StudyStatus(spec=spec, state="done")
    for owner in results.owners:
        status.owners.add(owner_id=owner.owner_id, state="submitted")
    page = _words(write_report(study_report(status, results, made_by="modelshare simulate", basis=[row]), tmp_path))
    assert LEGEND["vote"] in page and LEGEND["vote-no-basis"] in page


def test_study_results_show_the_vote_built_from_the_releases_on_no_pseudo_row(none_study, tmp_path):
    _, _, spec, results = none_study
    status = fpb.StudyStatus(spec=spec, state="done")
    for owner in results.owners:
        status.owners.add(owner_id=owner.owner_id, state="submitted")
    with out.capture() as captured:
        for renderable in results_renderables(status_dict(status), results_dict(results)):
            out.print(renderable)
    assert re.search(rf"tree-vote\s+│\s+0\s+│\s+\d\.\d{{4}}\s+│\s+\d\.\d{{4}}\s+│\s+built from the {OWNERS} released",
                     captured.get())
    page = _words(write_report(study_report(status, results, made_by="modelshare study results"), tmp_path))
    assert LEGEND["vote"] in page and "not known" in page and LEGEND["vote-basis"] not in page


@pytest.mark.slow  # a miner and three owner processes
def test_simulate_compares_the_vote_with_its_basis_end_to_end(tmp_path, capsys):
    argv = ["simulate", "--dataset", "vote", "--owners", "3", "--requirement", "k-anonymity:k=10",
            "--global-models", TREE_VOTE, "naive-bayes", "--json", "--report", str(tmp_path)]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    vote = next(m for m in report["models"] if m["model"] == TREE_VOTE)
    assert vote["train_rows"] == 0 and vote["selection"] == "built from the 3 released trees" and not vote["parameters"]
    assert all(0.5 < vote[key] <= 1.0 for key in ("basis_accuracy", "accuracy", "basis_auc", "auc", "class_match"))
    assert vote["path_match"] is None
    page = _words(tmp_path / "report.html")
    assert LEGEND["vote"] in page and LEGEND["vote-basis"] in page


def _words(page: Path) -> str:
    """A report page's text, tags dropped and whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text())).split())
