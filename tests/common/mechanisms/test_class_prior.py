"""The floor for small noisy releases: a dp release's charged
class histogram, its audit, the decline, the miner's prior."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from modelshare.common.audit.release import audit
from modelshare.common.federation.serde import study_from_pb, study_to_pb
from modelshare.common.federation.study import StudyError, spec_from_mapping
from modelshare.common.federation.wire import decode_model, model_message
from modelshare.common.mechanisms.class_prior import (
    DEFAULT_PRIOR_SHARE,
    PRIOR_PARAMETER,
    class_prior_of,
    decline_threshold,
)
from modelshare.common.mechanisms.dpea_nb import decline_rows
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.privacy.requirements import DP
from modelshare.miner_node.class_prior import CLASS_PRIOR, ClassPriorModel
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine
from modelshare.owner_node.budget import Ledger

DP_MECHANISMS = (("laplace-rdt", 4, 3), ("dpea", 4, 3), ("diffpets", 4, 3), ("dpea-nb", 1, 1))


def _release(car, mechanism="laplace-rdt", epsilon=1.0, trees=4, depth=3, rows=None, share=DEFAULT_PRIOR_SHARE, seed=0):
    schema, X, y = car
    rows = len(y) if rows is None else rows
    return release(mechanism, schema=schema, X=X[:rows], y=y[:rows],
                   requirement=f"dp:epsilon={epsilon:g},trees={trees}",
                   max_depth=depth, random_state=seed, prior_share=share)


def _failed(found, report: PrivacyReport) -> list[str]:
    return [c.name for c in audit(found.trees, report, seeded_ok=True).checks if not c.passed]


def _with_prior(report: PrivacyReport, **changes) -> PrivacyReport:
    prior = {**report.parameters[PRIOR_PARAMETER], **changes}
    return dataclasses.replace(report, parameters={**report.parameters, PRIOR_PARAMETER: prior})


@pytest.mark.parametrize("mechanism,trees,depth", DP_MECHANISMS)
def test_every_dp_mechanism_charges_the_histogram_and_its_audit_rederives_it(car, mechanism, trees, depth):
    found = _release(car, mechanism, trees=trees, depth=depth)
    prior = class_prior_of(found.report)
    assert prior is not None and prior.declined is None
    assert prior.epsilon == pytest.approx(0.1) and prior.tree_epsilon == pytest.approx(0.9)
    assert prior.noise_scale == pytest.approx(10.0) and len(prior.counts) == car[0].n_classes
    assert found.report.parameters["epsilon"] == 1.0 and found.report.requirement == f"dp:epsilon=1,trees={trees}"
    result = audit(found.trees, found.report, seeded_ok=True)
    assert result.passed, [(c.name, c.detail) for c in result.checks if not c.passed]
    detail = next(c.detail for c in result.checks if c.name == "class histogram accounted")
    assert "sequential composition" in detail and "0.9 more on the trees: 1 in total" in detail


def test_the_trees_get_the_rest_of_the_budget(car):
    """laplace-rdt's per-count scale is trees / (0.9 eps) with the histogram, trees / eps in the paper's version."""
    ours, paper = _release(car), _release(car, share=0.0)
    assert ours.report.parameters["noise_scale"] == pytest.approx(4 / 0.9)
    assert paper.report.parameters["noise_scale"] == pytest.approx(4.0)
    assert PRIOR_PARAMETER not in paper.report.parameters
    assert audit(paper.trees, paper.report, seeded_ok=True).passed  # the paper's mechanism, unchanged
    # a release that states the trees' noise at the whole epsilon while spending a share on the histogram fails
    lying = dataclasses.replace(ours.report, parameters={**ours.report.parameters, "noise_scale": 4.0,
                                                         "epsilon_per_tree": 0.25})
    assert "noise scale recomputed from (epsilon, trees)" in _failed(ours, lying)


@pytest.mark.parametrize("changes", [{"epsilon": 0.01}, {"share": 0.5}, {"tree_epsilon": 1.0}, {"noise_scale": 1.0},
                                     {"counts": [1.0, 2.0]}, {"counts": [1.5, 2.0, 3.0, 4.0]}, {"sensitivity": 0.5}])
def test_the_audit_rejects_a_wrong_histogram_claim(car, changes):
    found = _release(car)
    assert "class histogram accounted" in _failed(found, _with_prior(found.report, **changes))


def test_the_audit_rejects_a_wrong_threshold_or_a_decline_it_does_not_recompute(car):
    found = _release(car)  # 1,728 rows >> the threshold at eps 1
    assert "decline threshold recomputed" in _failed(found, _with_prior(found.report, decline_threshold=1e9))
    assert "decline threshold recomputed" in _failed(found, _with_prior(found.report, declined="too few rows"))
    small = _release(car, rows=60)
    assert class_prior_of(small.report).declined is not None
    undeclared = dict(small.report.parameters[PRIOR_PARAMETER])
    del undeclared["declined"]
    report = dataclasses.replace(small.report, parameters={**small.report.parameters, PRIOR_PARAMETER: undeclared})
    assert "class histogram accounted" in _failed(small, report)  # a second draw is a decline's alone
    del undeclared["refined_counts"]
    report = dataclasses.replace(small.report, parameters={**small.report.parameters, PRIOR_PARAMETER: undeclared})
    assert "decline threshold recomputed" in _failed(small, report)


def test_below_the_threshold_the_owner_releases_its_histogram_alone(car):
    schema = car[0]
    threshold = decline_threshold(0.9, 4, 3, schema.n_classes)
    assert threshold == pytest.approx(4 * 8 * 4 / 0.9)  # classes x 2^depth leaves x one noise scale trees / eps_trees
    found = _release(car, rows=60)
    prior = class_prior_of(found.report)
    assert prior is not None and prior.total < threshold
    assert len(found.trees) == 1 and found.trees[0].nodes[0].is_leaf
    assert found.trees[0].nodes[0].counts.tolist() == list(prior.refined)  # the second draw, at the trees' epsilon
    assert prior.declined.startswith("the noisy class total")
    assert "only the class histogram is released" in prior.declined
    assert prior.spent == pytest.approx(1.0) and "epsilon 1 spent" in prior.declined
    weights = np.array([0.1 ** 2, 0.9 ** 2])
    assert prior.estimate == pytest.approx((weights[0] * np.array(prior.counts) + weights[1] * np.array(prior.refined))
                                           / weights.sum())
    result = audit(found.trees, found.report, seeded_ok=True)
    assert result.passed and "1 in total" in next(c.detail for c in result.checks
                                                  if c.name == "class histogram accounted")
    # a decline from before the second draw existed (one histogram, the share spent) still audits, as that
    once = {k: v for k, v in found.report.parameters[PRIOR_PARAMETER].items() if k != "refined_counts"}
    old_form = _without_refined(found, once)
    assert audit(old_form.trees, old_form.report, seeded_ok=True).passed
    assert class_prior_of(old_form.report).spent == pytest.approx(0.1)
    # a declined claim carrying trees fails the audit
    other = _release(car)
    forged = dataclasses.replace(other.report, parameters={**other.report.parameters,
                                                           PRIOR_PARAMETER: found.report.parameters[PRIOR_PARAMETER]})
    assert "a declined release is its histogram alone" in _failed(other, forged)
    # above the threshold the trees are released
    assert class_prior_of(_release(car).report).declined is None


def _without_refined(found, prior: dict):
    """``found``'s declined release as it was made before the second draw: the first histogram in its root."""
    from modelshare.common.privacy.attacks import ensemble_attack_report
    from modelshare.common.privacy.report import Release
    from modelshare.common.trees.tree import Node, Tree

    tree = Tree(found.trees[0].schema, [Node.from_counts(np.asarray(prior["counts"]))], "counts")
    report = dataclasses.replace(found.report, parameters={**found.report.parameters, PRIOR_PARAMETER: prior},
                                 attacks=ensemble_attack_report([tree]))
    return Release((tree,), report)


def test_the_second_draw_names_the_majority_class_where_the_share_alone_does_not(car):
    """The attack on the floor: at eps 0.1, 60 rows of Car, the share's histogram (noise scale 100) names the
    majority class in about a third of the draws; with the second draw at 0.09 (scale 11) nearly always."""
    schema, X, y = car
    majority = int(np.bincount(y[:60]).argmax())
    first = second = 0
    for seed in range(40):
        prior = class_prior_of(_release(car, epsilon=0.1, rows=60, seed=seed).report)
        assert prior.declined is not None
        first += int(np.argmax(prior.counts) == majority)
        second += int(np.argmax(prior.estimate) == majority)
    assert second >= 36 and second > first + 10, (first, second)


def test_dpea_nb_declines_by_its_histograms_noise(car):
    """dpea-nb's budget goes to per-leaf histograms of every other attribute, and its threshold counts them:
    at eps = 0.1 all of Car (1,728 rows) is below it, at eps = 1 it is not."""
    schema = car[0]
    rows = decline_rows(DP(0.09, 1), 1, schema)
    assert rows == pytest.approx(4 * 2 * 3.5 * 5 / (0.72 * 0.09))  # classes x leaves x mean categories x noise scale
    low = _release(car, "dpea-nb", epsilon=0.1, trees=1, depth=1)
    assert class_prior_of(low.report).declined is not None and audit(low.trees, low.report, seeded_ok=True).passed
    assert class_prior_of(_release(car, "dpea-nb", epsilon=1, trees=1, depth=1).report).declined is None


def test_the_histogram_travels_in_the_signed_model(car):
    found = _release(car, rows=60)
    decoded = decode_model(model_message(found, study_id="s", owner_id="o"))
    assert class_prior_of(decoded.report) == class_prior_of(found.report)
    assert audit(decoded.trees, decoded.report, seeded_ok=True).passed


def test_the_share_is_the_studys_public_setting():
    data = {"study": {"id": "s1"}, "schema": {"dataset": "car"}, "training": {"max_depth": 3},
            "release": {"mechanism": "dpea", "requirement": "dp:epsilon=1,trees=4", "disclosure": "counts"}}
    default = spec_from_mapping(data)
    assert default.spec.prior_share == DEFAULT_PRIOR_SHARE
    assert study_from_pb(default.spec).prior_share == DEFAULT_PRIOR_SHARE
    paper = spec_from_mapping({**data, "release": {**data["release"], "prior_share": 0}})
    assert study_from_pb(paper.spec).prior_share == 0.0 and study_to_pb(study_from_pb(paper.spec)).prior_share == 0.0
    with pytest.raises(StudyError, match="prior_share"):
        spec_from_mapping({**data, "release": {**data["release"], "prior_share": 1}})
    spec = default.spec
    spec.prior_share = 1.5
    with pytest.raises(StudyError, match=r"prior_share must be a number in \[0, 1\)"):
        study_from_pb(spec)


def test_the_ledger_charges_what_a_declined_release_spent(tmp_path):
    data = {"study": {"id": "s1"}, "schema": {"dataset": "car"}, "training": {"max_depth": 3},
            "release": {"mechanism": "dpea", "requirement": "dp:epsilon=1,trees=4", "disclosure": "counts"}}
    study = study_from_pb(spec_from_mapping(data).spec)
    ledger = Ledger(tmp_path)
    assert ledger.charge(study, spent_epsilon=0.1).epsilon == pytest.approx(0.1)
    assert Ledger(tmp_path).spent == (pytest.approx(0.1), 0.0)
    other = dataclasses.replace(study, study_id="s2")
    assert ledger.charge(other, spent_epsilon=5.0).epsilon == 1.0  # never more than the study's cost
    assert ledger.charge(dataclasses.replace(study, study_id="s3")).epsilon == 1.0


def _dp_study(mechanism="laplace-rdt", requirement="dp:epsilon=0.05,trees=4", depth=3,
              models=("decision-tree", CLASS_PRIOR)):
    data = {"study": {"id": "s1", "seed": 1}, "schema": {"dataset": "car"}, "training": {"max_depth": depth},
            "release": {"mechanism": mechanism, "requirement": requirement, "disclosure": "counts"},
            "mining": {"global_models": list(models), "pgen_scale": 1}}
    return study_from_pb(spec_from_mapping(data).spec)


def test_at_a_small_epsilon_the_floor_wins_the_miners_choice(car):
    """Five DPEA owners at eps = 0.3 release trees (above the threshold), and the auto decision tree's
    cross-validation on their pseudo rows prefers the class prior, which scores the majority class."""
    schema, X, y = car
    study = _dp_study("dpea", "dp:epsilon=0.3,trees=1", depth=2)
    parts = np.array_split(np.random.default_rng(0).permutation(len(y)), 5)
    accepted = []
    for i, rows in enumerate(parts):
        found = release("dpea", schema=schema, X=X[rows], y=y[rows], requirement="dp:epsilon=0.3,trees=1",
                        max_depth=2, random_state=i)
        assert class_prior_of(found.report).declined is None
        accepted.append(AcceptedModel(f"site-{i}",
                                      decode_model(model_message(found, study_id="s1", owner_id=f"site-{i}"))))
    evaluation = Evaluation(X, y, np.arange(len(y)))
    results = mine(study, accepted, evaluation)
    tree, floor = results.models
    majority = float(np.mean(y == np.bincount(y).argmax()))
    assert floor.name == CLASS_PRIOR and floor.accuracy == pytest.approx(majority)
    assert tree.selection.startswith("auto: the class prior's majority class by 3-fold CV on"), tree.selection
    assert tree.accuracy == pytest.approx(majority)
    # chosen on the pseudo rows alone: another evaluation table changes nothing of the choice
    flipped = mine(study, accepted, Evaluation(X[:100], (y[:100] + 1) % schema.n_classes, np.arange(100)))
    assert flipped.models[0].selection == tree.selection


def test_declined_releases_feed_the_prior_and_no_pseudo_rows(car):
    schema, X, y = car
    study = _dp_study()
    accepted = []
    for i in range(3):
        rows = np.arange(i * 40, (i + 1) * 40)
        found = release("laplace-rdt", schema=schema, X=X[rows], y=y[rows], requirement="dp:epsilon=0.05,trees=4",
                        max_depth=3, random_state=i)
        assert class_prior_of(found.report).declined is not None
        accepted.append(AcceptedModel(f"site-{i}",
                                      decode_model(model_message(found, study_id="s1", owner_id=f"site-{i}"))))
    results = mine(study, accepted, Evaluation(X, y, np.arange(len(y))))
    assert [o.pseudo_rows for o in results.owners] == [0, 0, 0]
    tree, floor = results.models
    assert tree.train_rows == 0 and "every owner declined" in tree.selection
    assert tree.accuracy == floor.accuracy


def test_the_floor_model_predicts_the_prior():
    model = ClassPriorModel([3.0, 10.0, 0.0])
    assert model.predict(np.zeros((4, 2))).tolist() == [1, 1, 1, 1]
    assert model.predict_proba(np.zeros((1, 2)))[0] == pytest.approx([4 / 16, 11 / 16, 1 / 16])


def test_owners_below_the_threshold_decline_over_the_wire_and_spend_the_rest_on_their_histograms(tmp_path, caplog):
    """Two owners of Car's rows at eps = 0.1: each draws its histogram, is below the threshold, releases it alone
    drawn once more with the rest of the budget, is charged 0.1 (the threshold of 10 trees of depth 3, 3,556 rows, is
    about 9 noise standard deviations above their noisy totals), and
    the miner accepts both and scores its models at the prior."""
    import logging
    import threading

    from modelshare.common.federation.pb import federation_pb2 as fpb
    from modelshare.owner_node.daemon import OwnerDaemon
    from tests.federation_helpers import car_tables, make_federation, study_spec

    caplog.set_level(logging.INFO)
    owners = ["site-a", "site-b"]
    fed = make_federation(tmp_path, owners, owner_data=car_tables(tmp_path, owners),
                          policy={"mechanisms": ["laplace-rdt"], "miners": ["miner"]})
    fed.start()
    stop = threading.Event()
    daemons = [OwnerDaemon(fed.owner_config(o)) for o in owners]
    try:
        spec = study_spec("floor", mechanism="laplace-rdt", requirement="dp:epsilon=0.1,trees=10", disclosure="counts",
                          max_depth=3, global_models=("decision-tree", CLASS_PRIOR))
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
        assert [o.outcome for d in daemons for o in d.run_once(wait_seconds=5, stop=stop)] == ["submitted"] * 2
        status = fed.wait_study("floor")
        assert status.state == "done", status.reason
        results = fed.stub("admin").GetResults(fpb.StudyRef(study_id="floor"), timeout=10)
        assert [o.pseudo_rows for o in results.owners] == [0, 0] and all(o.audit_passed for o in results.owners)
        tree, floor = results.models
        assert tree.selection.startswith("no pseudo rows (every owner declined")
        assert "declined to release trees: the noisy class total" in caplog.text
        for daemon in daemons:
            [charge] = daemon.ledger.charges
            assert charge.epsilon == pytest.approx(0.1) and charge.requirement == "dp:epsilon=0.1,trees=10"
    finally:
        for d in daemons:
            d.close()
        fed.close()


def test_the_miner_refuses_a_release_whose_share_is_not_the_studys(car):
    import grpc

    from modelshare.miner_node.verify import Rejection, StudyTerms, check_model

    study = _dp_study()
    terms = StudyTerms.of(study)
    assert terms.prior_share == DEFAULT_PRIOR_SHARE
    secure = [release("laplace-rdt", schema=car[0], X=car[1], y=car[2], requirement="dp:epsilon=0.05,trees=4",
                      max_depth=3, prior_share=share) for share in (DEFAULT_PRIOR_SHARE, 0.0, 0.2)]
    check_model(model_message(secure[0], study_id="s1", owner_id="o"), terms, 10**6)  # the study's share
    for other, share in zip(secure[1:], (0, 0.2), strict=False):
        with pytest.raises(Rejection, match=f"spends a share {share:g} of its epsilon on its class histogram; "
                                            "the study's prior_share is 0.1") as caught:
            check_model(model_message(other, study_id="s1", owner_id="o"), terms, 10**6)
        assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize("value", ["abc", 5, {"share": float("nan")}, {"share": 7.0}, {"counts": [float("inf")] * 4},
                                   {"decline_threshold": "x"}, {"declined": 3}])
def test_a_hostile_histogram_claim_fails_the_audit_without_raising(car, value):
    found = _release(car)
    prior = value if not isinstance(value, dict) else {**found.report.parameters[PRIOR_PARAMETER], **value}
    report = dataclasses.replace(found.report, parameters={**found.report.parameters, PRIOR_PARAMETER: prior})
    assert not audit(found.trees, report, seeded_ok=True).passed


def test_calibrated_nb_falls_back_to_the_prior_when_every_owner_declined(car):
    schema, X, y = car
    releases = [release("dpea-nb", schema=schema, X=X[i * 50:(i + 1) * 50], y=y[i * 50:(i + 1) * 50],
                        requirement="dp:epsilon=0.1,trees=1", max_depth=1, random_state=i) for i in range(2)]
    assert all(class_prior_of(r.report).declined for r in releases)
    from modelshare.miner_node.global_models import build_release_model

    model = build_release_model("calibrated-nb", [(r.trees, r.report) for r in releases])
    assert isinstance(model, ClassPriorModel)
    assert model.counts.tolist() == np.sum([class_prior_of(r.report).estimate for r in releases], axis=0).tolist()


def test_the_choice_weighs_pseudo_rows_to_the_prior():
    """Clamped noise makes a dp release's pseudo rows more balanced than the owners' rows. Pseudo rows whose
    labels are a coin toss, under a prior of 70/30: unweighted, the floor scores a coin toss too and a tree
    fitted to the noise can win; weighted to the prior, the floor scores about 0.7 and wins."""
    from sklearn.tree import DecisionTreeClassifier

    from modelshare.common.study import ModelPlan
    from modelshare.miner_node.selection import choose, prior_weights

    rng = np.random.default_rng(0)
    X, y = rng.random((3000, 3)), rng.integers(0, 2, 3000)
    weights = prior_weights(y, [699.0, 299.0])
    assert np.sum(weights[y == 0]) / weights.sum() == pytest.approx(0.7, abs=1e-9)
    floor = ClassPriorModel([699.0, 299.0])
    plan = ModelPlan.checked(("decision-tree",), {"decision-tree": "auto"}, seed=0, mechanism="dpea")
    choice = choose("decision-tree", plan, X, y, lambda p: DecisionTreeClassifier(random_state=0, **p),
                    regression=False, groups=rng.integers(0, 5, 3000), floor=floor)
    assert choice.floor and "weighted to the class prior" in choice.text, choice.text
    assert re.search(r"accuracy 0\.(69|70|71)", choice.text), choice.text
