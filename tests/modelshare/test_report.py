"""report.html (`modelshare.report_html`, `modelshare.report_trees`) and predictions.csv of `study results`.

The writer is run on hand-built miner messages (a status with a refusal, results carrying released
trees); `simulate --report` runs a small real federation (slow). Pages are checked by parsing them
with the standard library's HTML parser.
"""

from __future__ import annotations

import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from modelshare.admin import global_tree_schema, write_results
from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import NumericAttribute, Schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.refusal import Refusal
from modelshare.common.federation.wire import WireError, tree_to_pb
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.common.trees.tree import Tree
from modelshare.miner_node.tasks import ClassificationTask
from modelshare.report_html import study_report, write_report
from modelshare.report_trees import draw_tree
from tests.federation_helpers import study_spec


class Page(HTMLParser):
    """What a test looks for in a page: its text, its images' sources, its SVG elements, its tags' nesting."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.images: list[str] = []
        self.svgs = 0
        self.open: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")
        elif tag == "svg":
            self.svgs += 1
        if tag not in ("img", "meta", "rect", "path", "br"):
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def words(self) -> str:
        return " ".join(self.text)


def _car_trees(n: int, depth: int | None) -> tuple[Schema, list[Tree]]:
    table = load_dataset("car")
    X, y = table.schema.encode(table.frame)
    parts = np.arange(len(y)) % n
    return table.schema, [CartTreeClassifier(table.schema, max_depth=depth, random_state=0)
                          .fit(X[parts == i], y[parts == i]).tree_ for i in range(n)]


def _messages(tree_count: int = 2) -> tuple[fpb.StudyStatus, fpb.StudyResults]:
    """A done study of three invited owners: two released (trees attached), one refused, a <script> in a reason."""
    schema, trees = _car_trees(tree_count, depth=3)
    spec = study_spec("rep-1", owners=["site-a", "site-b", "site-<c>"])
    status = fpb.StudyStatus(spec=spec, state="done")
    results = fpb.StudyResults(study_id="rep-1", evaluation_rows=4, evaluation_row=[0, 1, 3, 5],
                               evaluation_class=[0, 1, 0, 2])
    for owner, tree in zip(["site-a", "site-b"], trees, strict=False):
        status.owners.add(owner_id=owner, state="submitted")
        results.owners.add(owner_id=owner, tuples=tree.root.total, leaves=tree.n_leaves, claim="k-anonymity:k=5",
                           audit_passed=True, pseudo_rows=int(tree.root.total), trees=[tree_to_pb(tree)])
    status.owners.add(owner_id="site-<c>", state="refused", reason=str(Refusal("unsatisfiable")) + " <script>")
    model = results.models.add(name="decision-tree", train_rows=100, accuracy=0.75, predictions=[0, 1, 1, 2])
    model.tree.CopyFrom(tree_to_pb(trees[0]))
    results.models.add(name="naive-bayes", train_rows=100, accuracy=0.5, predictions=[0, 0, 0, 0])
    assert schema.classes[:3] == ("unacc", "acc", "good")
    return status, results


def test_report_of_study_results_names_every_owner_and_says_basis_is_not_known(tmp_path: Path) -> None:
    status, results = _messages()
    path = write_report(study_report(status, results, made_by="modelshare study results"), tmp_path / "out")
    text = path.read_text()
    page = Page(text)
    assert page.open == [], "every element is closed"
    assert all(o in page.words for o in ("site-a", "site-b", "site-<c>")), "every owner is named, escaped"
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "unsatisfiable" in page.words and "no release of this site's table" in page.words
    assert "not known" in page.words and "k-anonymity:k=5" in page.words
    assert status.spec.schema_fingerprint in page.words
    assert len(page.images) == 2 and all(src.startswith("data:image/png;base64,") for src in page.images)
    assert page.svgs == 3, "two released trees and the global decision tree"
    assert "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', ""), "no external resource"


def test_report_with_basis_shows_the_gap_and_each_owners_rows(tmp_path: Path) -> None:
    status, results = _messages()
    basis = [{"model": "decision-tree", "basis_accuracy": 0.95, "class_match": 0.8, "path_match": 0.25},
             {"model": "naive-bayes", "basis_accuracy": 0.85, "class_match": 0.6, "path_match": None}]
    report = study_report(status, results, made_by="modelshare simulate", rows={"site-a": 864, "site-b": 864,
                                                                             "site-<c>": 10}, basis=basis)
    page = Page(write_report(report, tmp_path).read_text())
    assert "0.9500" in page.words and "gap (accuracy points)" in page.words and "20.0" in page.words, \
        "BASIS accuracy and its gap to PPGEN, in the accuracy points the command line says"
    assert "not known" not in page.words and "864" in page.words
    assert "The release cost naive-bayes 35.0 accuracy points against BASIS" in page.words


def test_a_large_tree_is_cut_and_says_how_many_nodes_were_cut() -> None:
    _, [tree] = _car_trees(1, depth=None)
    drawn = draw_tree(tree)
    assert drawn.total == len(tree.nodes) and drawn.drawn < drawn.total and drawn.cut == drawn.total - drawn.drawn
    assert drawn.depth_drawn < drawn.depth and "nodes not drawn" in drawn.svg
    small = draw_tree(_car_trees(1, depth=2)[1][0])
    assert small.cut == 0 and small.drawn == small.total


def test_predictions_csv_carries_the_evaluation_row_and_the_true_class(tmp_path: Path) -> None:
    status, results = _messages()
    write_results(results, status, tmp_path)
    with open(tmp_path / "predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["row", "true_class", "decision-tree", "naive-bayes"]
    assert [r["row"] for r in rows] == ["0", "1", "3", "5"]
    assert [r["true_class"] for r in rows] == ["unacc", "acc", "unacc", "good"]
    assert [r["decision-tree"] for r in rows] == ["unacc", "acc", "acc", "good"]


def test_a_global_tree_in_a_regression_studys_results_is_refused_naming_the_model() -> None:
    """A regression study's global models carry no tree (the miner's regression task sets none): one that does is
    refused by name, not decoded against the regression schema."""
    regression = RegressionSchema((NumericAttribute("x", 0.0, 1.0),), NumericAttribute("t", 2.0, 4.0))
    with pytest.raises(WireError, match="global regression-tree: carries a classification tree, but the study is a "
                                        "regression study"):
        global_tree_schema(regression, "regression-tree")
    schema, _ = _car_trees(1, depth=2)
    assert global_tree_schema(schema, "decision-tree") is schema


def test_the_miner_keeps_each_evaluation_rows_position_in_the_file() -> None:
    """A row with a missing value is dropped from the evaluation table; the others keep their file rows."""
    table = load_dataset("car")
    frame = table.frame.head(5).copy().astype(object)
    frame.iloc[2, 0] = None
    evaluation = ClassificationTask(table.schema).load_evaluation(frame.to_csv(index=False).encode())
    assert evaluation.rows.tolist() == [0, 1, 3, 4] and len(evaluation.y) == 4


@pytest.mark.slow
def test_simulate_writes_a_report_that_embeds_the_plots_and_the_trees(tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    assert main(["simulate", "--dataset", "car", "--owners", "2", "--seed", "1", "--json", "--report", str(out)]) == 0
    simulated = json.loads(capsys.readouterr().out)
    page = Page((out / "report.html").read_text())
    assert page.open == []
    assert all(o["owner"] in page.words for o in simulated["owners"] + simulated["refusals"])
    assert page.images and all(src.startswith("data:image/png;base64,") for src in page.images)
    assert page.svgs >= len(simulated["owners"]) + 1, "every release and the global decision tree drawn"
    assert "BASIS accuracy" in page.words and f"{simulated['models'][0]['basis_accuracy']:.4f}" in page.words
    tree = simulated["models"][0]  # the decision tree, auto by default: BASIS's grid cross-validated on raw rows
    assert tree["selection"].startswith("auto: ") and " pseudo rows, " in tree["selection"]
    assert tree["basis_selection"].startswith("auto: ") and " raw rows, " in tree["basis_selection"]
    assert "BASIS hyperparameters" in page.words and tree["basis_selection"] in page.words
    assert sorted(p.name for p in out.iterdir()) == ["report.html"], "the plots are embedded, not separate files"


def test_the_models_table_shows_auc_and_how_the_miner_set_each_model(tmp_path: Path) -> None:
    status, results = _messages()
    results.models[0].auc = 0.8125
    results.models[0].selection = "auto: min_samples_leaf=20 by 3-fold CV on the pseudo-data"
    basis = [{"model": "decision-tree", "basis_accuracy": 0.95, "basis_auc": 0.9375}]
    page = Page(write_report(study_report(status, results, made_by="modelshare simulate", basis=basis), tmp_path)
                .read_text())
    assert "PPGEN AUC" in page.words and "0.8125" in page.words and "0.9375" in page.words
    assert "hyperparameters" in page.words and "min_samples_leaf=20" in page.words
