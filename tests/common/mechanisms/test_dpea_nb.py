"""dpea-nb: the release (root + one histogram tree per free
attribute + a chosen temperature), its audit, its DP audit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from modelshare.common.audit.dp.dpea_nb import SCORES
from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.study import StudyError, spec_from_mapping
from modelshare.common.federation.wire import decode_model, model_message
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.dpea_nb import (
    MECHANISM,
    TEMPERATURES,
    DpeaNb,
    HistogramBins,
    NaiveBayesRelease,
    release_shape,
)
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.attacks import ensemble_attack_report
from modelshare.common.privacy.report import PrivacyReport, Release
from modelshare.common.privacy.requirements import DP
from modelshare.common.trees.tree import Interval, Tree
from modelshare.legend import LEGEND, legend_lines
from modelshare.miner_node.calibrated_nb import CALIBRATED_NB, NB_PSEUDO_ROWS
from modelshare.miner_node.global_models import build_release_model, make_global_model
from modelshare.miner_node.tasks import ClassificationTask, pseudo_data, pseudo_sources

REQUIREMENT = "dp:epsilon=1,trees=1"


@pytest.fixture(scope="module")
def adult():
    table = load_dataset("adult")
    X, y = table.schema.encode(table.frame.iloc[:4000])
    return table.schema, X, y


@pytest.fixture(scope="module")
def released(adult) -> Release:
    schema, X, y = adult
    # the mechanism as designed (no class histogram:
    # tests/common/mechanisms/test_class_prior.py covers the default share)
    return release(MECHANISM, schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=1, random_state=0,
                   prior_share=0.0)


def _failing(result) -> list[str]:
    return [c.name for c in result.checks if not c.passed]


def _edited(released: Release, **changes) -> PrivacyReport:
    return dataclasses.replace(released.report, parameters={**released.report.parameters, **changes})


def test_the_release_is_a_root_and_a_histogram_tree_per_free_attribute_and_passes_its_audit(adult, released):
    schema, X, y = adult
    p = released.report.parameters
    root_attribute = released.trees[0].nodes[0].attribute
    assert root_attribute is not None and released.trees[0].depth == 1
    free = [a for a in range(schema.n_attributes) if a != root_attribute]
    assert p["histogram_attributes"] == [schema.names[a] for a in free] and len(released.trees) == 1 + len(free)
    assert p["histogram_noise_scale"] == pytest.approx(len(free) / 0.72) and p["temperature"] in TEMPERATURES
    assert p["epsilon_tree"] + p["epsilon_histograms"] + p["epsilon_calibration"] == pytest.approx(1.0)
    for tree, a in zip(released.trees[1:], free, strict=False):
        assert tree.nodes[0].attribute == root_attribute and tree.depth == 2
        assert {tree.nodes[e.child].attribute for e in tree.nodes[0].edges} == {a}
    assert release_shape(p, DP(1.0, 1)) == (1 + len(free), 2)
    result = audit(list(released.trees), released.report, seeded_ok=True)
    assert result.passed, _failing(result)
    decoded = decode_model(model_message(released))  # the wire carries it unchanged, the audit still passes
    assert audit(list(decoded.trees), decoded.report, seeded_ok=True).passed
    model = NaiveBayesRelease(decoded.trees, decoded.report.parameters)
    proba = model.proba(X)
    assert proba.shape == (len(y), 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert (proba.argmax(axis=1) == y).mean() > 0.8  # the calibrated naive Bayes on its own training rows


@pytest.mark.parametrize("changes, check", [
    ({"histogram_noise_scale": "half"}, "histogram noise scale recomputed (sensitivity = histogram trees)"),
    ({"tree_share": 0.28, "histogram_share": 0.62},
     "budget split recomputed (tree + histograms + calibration = epsilon)"),
    ({"temperature": 2.5}, "temperature from the public grid by the exponential mechanism"),
    ({"calibration_beta": 0.2}, "temperature from the public grid by the exponential mechanism"),
    ({"bins": 8}, "histogram trees: the root's split, then one free attribute's public bins"),
])
def test_an_edited_accounting_fails_exactly_its_check(released, changes, check):
    if changes.get("histogram_noise_scale") == "half":
        changes = {"histogram_noise_scale": released.report.parameters["histogram_noise_scale"] / 2}
    result = audit(list(released.trees), _edited(released, **changes), seeded_ok=True)
    assert _failing(result) == [check]


def test_a_histogram_tree_on_a_non_public_bin_fails_the_histogram_check(adult, released):
    schema, _, _ = adult
    p = released.report.parameters
    t = 1 + p["histogram_attributes"].index("age")
    tree = released.trees[t]
    nodes = [dataclasses.replace(n, edges=list(n.edges)) for n in tree.nodes]
    under = nodes[tree.nodes[0].edges[0].child]
    edge = under.edges[1]
    assert isinstance(edge.constraint, Interval)
    shifted = Interval(edge.constraint.low + 0.5, edge.constraint.high, True, False)  # a cut read off the rows
    under.edges[1] = dataclasses.replace(edge, constraint=shifted)
    under.edges[0] = dataclasses.replace(under.edges[0], constraint=Interval(-np.inf, shifted.low, False, False))
    trees = list(released.trees)
    trees[t] = Tree(schema, nodes, "counts")
    assert _failing(audit(trees, released.report, seeded_ok=True)) == [
        "histogram trees: the root's split, then one free attribute's public bins"]


def test_a_missing_attribute_fails_the_histogram_check_even_with_consistent_accounting(released):
    p = released.report.parameters
    m = p["histogram_trees"] - 1
    report = _edited(released, histogram_trees=m, histogram_sensitivity=m,
                     histogram_attributes=p["histogram_attributes"][1:],
                     histogram_noise_scale=m / p["epsilon_histograms"])
    trees = [released.trees[0], *released.trees[2:]]
    report = dataclasses.replace(report, attacks=ensemble_attack_report(trees))  # counted over the trees kept
    assert _failing(audit(trees, report, seeded_ok=True)) == [
        "histogram trees: the root's split, then one free attribute's public bins"]


def test_an_extra_tree_or_a_deeper_one_fails_the_parameter_check(released):
    name = f"parameters restate {DP(1.0, 1)}"
    assert _failing(audit([*released.trees, released.trees[1]], released.report, seeded_ok=True))[0] == name
    root = released.trees[0]
    for report in (_edited(released, depth=0), _edited(released, histogram_trees="all")):
        assert name in _failing(audit(list(released.trees), report, seeded_ok=True))
    assert root.depth == 1


def test_the_root_restates_its_dpea_accounting(released):
    root = {**released.report.parameters["root"], "noise_scale": 1.0}
    assert _failing(audit(list(released.trees), _edited(released, root=root), seeded_ok=True)) == [
        "root's DPEA accounting and domain"]


def test_requirements_it_does_not_support_are_refused_with_the_reason(adult):
    schema, X, y = adult
    with pytest.raises(ValueError, match="one DPEA root .* trees=2; use 'dp:epsilon=1,trees=1'"):
        release(MECHANISM, schema=schema, X=X, y=y, requirement="dp:epsilon=1,trees=2", max_depth=1, random_state=0,
                prior_share=0.0)
    with pytest.raises(ValueError, match="a DPEA root of depth 1 .* got depth 2"):
        release(MECHANISM, schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=2, random_state=0)
    with pytest.raises(ValueError, match="must be positive and sum to 1"):
        DpeaNb(1.0, tree_share=0.5)


def test_the_bins_are_public_and_route_every_value(adult):
    schema, X, _ = adult
    bins = HistogramBins.of(schema)
    for a in range(schema.n_attributes):
        codes = bins.codes(X, a)
        constraints = bins.constraints(a)
        assert len(constraints) == bins.size(a) and codes.max() < bins.size(a)
        for b in np.unique(codes)[:3]:  # a value's bin constraint admits it
            assert constraints[b].mask(X[codes == b, a]).all()
        drawn = bins.values(a, codes, np.random.default_rng(0))
        assert (bins.codes(drawn[:, None].repeat(schema.n_attributes, axis=1), a) == codes).all()
    again = HistogramBins.of(schema)  # a function of the schema alone
    assert all((c is None and d is None) or np.array_equal(c, d) for c, d in zip(bins.cuts, again.cuts, strict=False))


def test_a_large_epsilon_chooses_the_temperature_the_rows_favour(adult):
    schema, X, y = adult
    trees, p = DpeaNb(1000.0).fit(schema, X, y, 0)
    model = NaiveBayesRelease(trees, p)
    prior, lik = model.parts(X)
    utility = [int((np.argmax(prior + lik / t, axis=1) == y).sum()) for t in TEMPERATURES]
    assert utility[TEMPERATURES.index(p["temperature"])] >= max(utility) - 2


def test_the_empirical_dp_audit_runs_the_registered_trainer(adult):
    schema, X, y = adult
    factory = registry.get(MECHANISM).resolve_dp_audit_target()
    target = factory(DP(1.0, 1), 1, schema, X[:300], y[:300], np.random.default_rng(0))
    on_d, on_d1 = target.sample(3, np.random.default_rng(1))
    assert on_d.shape == on_d1.shape == (3, len(SCORES)) and np.isfinite(on_d).all()
    assert target.score_names == SCORES == ("LLR of the release", "LLR of the root split", "LLR of the temperature")
    assert "the root's split, r's root and histogram-tree cells" in target.describe()["score"]
    assert "temperature" in target.describe()["score"]


# ------------------------------------------------------------------ the miner: release model and PGEN
def test_the_calibrated_nb_release_model_is_the_releases_own_posterior(adult, released):
    schema, X, y = adult
    model = build_release_model(CALIBRATED_NB, [(released.trees, released.report)])
    own = NaiveBayesRelease(released.trees, released.report.parameters).proba(X)
    assert np.allclose(model.predict_proba(X), own) and (model.predict(X) == own.argmax(axis=1)).all()
    other = release(MECHANISM, schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=1, random_state=1)
    pooled = build_release_model(CALIBRATED_NB, [(released.trees, released.report), (other.trees, other.report)])
    mean = (own + NaiveBayesRelease(other.trees, other.report.parameters).proba(X)) / 2
    assert np.allclose(pooled.predict_proba(X), mean)
    dpea = release("dpea", schema=schema, X=X[:500], y=y[:500], requirement="dp:epsilon=1,trees=1", max_depth=2,
                   random_state=0)
    with pytest.raises(ValueError, match="'calibrated-nb' is built from 'dpea-nb' releases; this one is from 'dpea'"):
        build_release_model(CALIBRATED_NB, [(dpea.trees, dpea.report)])


def test_pgen_of_a_release_draws_free_attributes_from_its_histograms_and_labels_by_its_model(adult, released):
    schema, X, y = adult
    rng = np.random.default_rng(0)
    Xp, yp = pseudo_data(released.trees, released.report, 3.0, rng, "exact")
    root = released.trees[0]
    assert len(yp) == round(3 * root.root.total) and Xp.shape[1] == schema.n_attributes
    model = NaiveBayesRelease(released.trees, released.report.parameters)
    assert (yp == model.proba(Xp).argmax(axis=1)).all()
    age = schema.index("age")  # drawn from the histograms, not uniformly over the public range 0-120
    assert abs(np.median(Xp[:, age]) - np.median(X[:, age])) < 8 and Xp[:, age].min() >= 0
    assert (pseudo_sources(released.trees, released.report, 3.0, len(yp)) == 0).all()
    learned = make_global_model("gradient-boosting", schema, random_state=0).fit(Xp, yp)
    assert (learned.predict(X) == y).mean() > 0.8


def test_a_study_refuses_what_dpea_nb_cannot_release_and_calibrated_nb_without_it():
    def spec(**changes):
        data = {"study": {"id": "nb"}, "schema": {"dataset": "adult"},
                "release": {"mechanism": MECHANISM, "requirement": REQUIREMENT, "disclosure": "counts"},
                "training": {"max_depth": 1}, "mining": {"global_models": [CALIBRATED_NB, "gradient-boosting"]}}
        for key, value in changes.items():
            data[key] = {**data[key], **value}
        return spec_from_mapping(data).spec

    assert spec().mechanism == MECHANISM
    with pytest.raises(StudyError, match="'dpea-nb' releases at most 1 tree"):
        spec(release={"requirement": "dp:epsilon=1,trees=3"})
    with pytest.raises(StudyError, match="'dpea-nb' trains trees of depth at most 1; \\[training\\] max_depth is 3"):
        spec(training={"max_depth": 3})
    with pytest.raises(StudyError,
                       match="'calibrated-nb' is built from 'dpea-nb' releases; this study's mechanism is 'dpea'"):
        spec(release={"mechanism": "dpea", "requirement": "dp:epsilon=1,trees=1"}, training={"max_depth": 3})
    with pytest.raises(StudyError, match="off_path 'marginal' does not apply to 'dpea-nb' releases"):
        spec(mining={"off_path": "marginal"})
    assert spec(mining={"off_path": "uniform"}).pgen_off_path == "uniform"


def test_the_results_say_where_dpea_nb_pseudo_rows_come_from_and_the_legend_explains_calibrated_nb():
    """The off-path line names the histograms, not PGEN's uniform draws; simulate's legend names calibrated-nb."""
    spec = spec_from_mapping({"study": {"id": "nb"}, "schema": {"dataset": "adult"},
                              "release": {"mechanism": MECHANISM, "requirement": REQUIREMENT, "disclosure": "counts"},
                              "training": {"max_depth": 1}}).study
    schema = load_dataset("adult").schema
    law, said = ClassificationTask(schema).off_path_law(spec, [])
    assert law is None and said == NB_PSEUDO_ROWS
    report = {"mechanism": MECHANISM, "task": "classification", "requirement": REQUIREMENT,
              "models": [{"model": CALIBRATED_NB, "basis_accuracy": None, "accuracy": 0.84, "path_match": None}]}
    assert LEGEND["calibrated-nb"] in legend_lines(report)
