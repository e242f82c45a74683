"""Numbers for people (`modelshare.common.trees.readable`): integer thresholds that admit exactly the same values, no
scientific notation, thousands separators, whole-number count axes; and report.html on Adult reads that way."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import NumericAttribute
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.wire import tree_to_pb
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.common.trees.readable import grouped, integer_span, numeric_condition, plain_number
from modelshare.common.trees.tree import Interval
from modelshare.report_html import _count_axis, _figure, study_report, write_report
from tests.federation_helpers import study_spec

AGE = NumericAttribute("age", 0.0, 120.0, integer=True)
RATIO = NumericAttribute("ratio", 0.0, 10.0)


@pytest.mark.parametrize("interval, text", [
    (Interval(-math.inf, 30.47, False, True), "<= 30"),
    (Interval(30.47, math.inf, False, False), "> 30"),
    (Interval(30.0, math.inf, True, False), "> 29"),
    (Interval(-math.inf, 31.0, False, False), "<= 30"),
    (Interval(30.5, 40.5, False, True), "in [31, 40]"),
    (Interval(30.5, 31.5, False, True), "= 31"),
    (Interval(30.2, 30.8, False, True), "in (30.2, 30.8]"),  # admits no whole number: written as it is
])
def test_an_integer_attributes_condition_names_the_whole_numbers_it_admits(interval, text):
    assert numeric_condition(interval, AGE) == text


def test_the_whole_number_condition_admits_exactly_what_the_split_admits():
    values = np.arange(-2.0, 123.0)
    for cut, low_closed, high_closed in itertools.product(np.linspace(-0.5, 120.5, 97), (True, False), (True, False)):
        for interval in (Interval(-math.inf, cut, False, high_closed), Interval(cut, math.inf, low_closed, False),
                         Interval(cut, cut + 7.3, low_closed, high_closed)):
            admitted = values[interval.mask(values)]
            low, high = integer_span(interval)
            span = values[((low is None) | (values >= (low or 0))) & ((high is None) | (values <= (high or 0)))]
            assert np.array_equal(admitted, span), (interval, low, high)


def test_other_attributes_keep_their_threshold_without_an_exponent():
    assert numeric_condition(Interval(-math.inf, 14063.7, False, True), RATIO) == "<= 14063.7"
    assert numeric_condition(Interval(0.5, 2.0, False, True), RATIO) == "in (0.5, 2]"
    assert numeric_condition(Interval(0.5, math.inf, True, False), RATIO, symbols=True) == "≥ 0.5"
    assert [plain_number(v) for v in (14063.7, 1.406e4, 30.47, 0.000012345, 2.0, -3.25)] == [
        "14063.7", "14060", "30.47", "0.00001234", "2", "-3.25"]
    assert [grouped(v) for v in (361770, 12.5, 12345.67, 0)] == ["361,770", "12.5", "12,345.7", "0"]


def test_a_count_axis_has_whole_number_ticks_with_separators():
    figure = _figure(3, 2)
    ax = figure.add_subplot()
    ax.bar([0, 1], [1, 3])
    ax.set_ylim(0, 3.5)
    _count_axis(ax)
    figure.canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_yticks())
    ax.set_ylim(0, 400000)
    figure.canvas.draw()
    labels = [label.get_text() for label in ax.get_yticklabels() if label.get_text()]
    assert "120,000" in labels and not any("e" in label for label in labels)


def test_report_html_on_adult_writes_whole_thresholds_no_exponents_and_gaps_in_points(tmp_path: Path):
    table = load_dataset("adult")
    X, y = table.schema.encode(table.frame)
    trees = [CartTreeClassifier(table.schema, max_depth=4, random_state=0).fit(X[i::2], y[i::2]).tree_
             for i in range(2)]
    spec = study_spec("adult-1", dataset="adult", owners=["site-a", "site-b"])
    status = fpb.StudyStatus(spec=spec, state="done")
    results = fpb.StudyResults(study_id="adult-1", evaluation_rows=2, evaluation_row=[0, 1], evaluation_class=[0, 1])
    for owner, tree in zip(["site-a", "site-b"], trees, strict=False):
        status.owners.add(owner_id=owner, state="submitted")
        results.owners.add(owner_id=owner, tuples=tree.root.total, leaves=tree.n_leaves, claim="k-anonymity:k=5",
                           audit_passed=True, pseudo_rows=361770, trees=[tree_to_pb(tree)])
    model = results.models.add(name="decision-tree", train_rows=361770, accuracy=0.6332, predictions=[0, 1])
    model.tree.CopyFrom(tree_to_pb(trees[0]))
    basis = [{"model": "decision-tree", "basis_accuracy": 0.85, "class_match": 0.8, "path_match": 0.25}]
    page = write_report(study_report(status, results, made_by="modelshare simulate", basis=basis,
                                     rows={"site-a": 24421, "site-b": 24421}), tmp_path).read_text()
    thresholds = re.findall(r"(?:≤|&lt;|&gt;|≥|<|>) (-?[\d.,]+)", page) + re.findall(r"∈ \[([\d.,]+), ", page)
    assert thresholds and all("." not in t for t in thresholds), thresholds  # Adult's numeric attributes are integer
    assert re.search(r"age</text>", page) and re.search(r"[≤>] \d+<", page)
    assert not re.search(r"\de[+-]\d", page), "no scientific notation"
    assert "361,770" in page and "24,421" in page
    assert "gap (accuracy points)" in page and ">21.7<" in page
    assert "The release cost decision-tree 21.7 accuracy points against BASIS" in page
