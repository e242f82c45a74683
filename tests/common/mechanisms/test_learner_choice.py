"""The owner's choice of local learner (learner ``auto``): cross-validated on its rows after the release, stated."""

from __future__ import annotations

import numpy as np
import pytest

from modelshare.common.audit.release import audit
from modelshare.common.federation.study import StudyError, spec_from_mapping
from modelshare.common.federation.wire import DecodedModel
from modelshare.common.mechanisms.learner_choice import CANDIDATES, Candidate, choose_learner, trained_params
from modelshare.common.mechanisms.release import local_learner, release
from modelshare.common.mechanisms.train_release import train_and_release
from modelshare.common.study import Training
from modelshare.miner_node.mining import _chosen_learner
from modelshare.report_html import OwnerRow, StudyReport, _owners_table


def _released_accuracy(candidate: Candidate, schema, X, y, mechanism: str, requirement: str | None) -> float:
    """The candidate's released tree, trained on the first two thirds, scored on the rest (a plain hold-out)."""
    cut = 2 * len(y) // 3
    tree = local_learner(candidate.learner, schema, mechanism, requirement=requirement, disclosure="counts",
                         random_state=0, **trained_params(candidate, {"min_samples_leaf": 1}, {})).fit(X[:cut], y[:cut])
    released = release(mechanism, tree=tree.tree_, requirement=requirement, disclosure="counts").tree
    return float(np.mean(released.predict(X[cut:]) == y[cut:]))


def test_on_car_without_privacy_the_owner_leaves_the_multiway_learner_for_a_better_one(car):
    """The default multiway learner costs Car about 4.5 PGEN points against CART (issue 33); the choice avoids it."""
    schema, X, y = car
    chosen = choose_learner("none", schema, X, y, requirement=None, disclosure="counts",
                            base_params={"min_samples_leaf": 1}, admissible_params={}, seed=0)
    assert chosen.learner != "multiway"
    order = np.random.default_rng(1).permutation(len(y))
    Xs, ys = X[order], y[order]
    multiway = _released_accuracy(Candidate("multiway"), schema, Xs, ys, "none", None)
    assert _released_accuracy(chosen, schema, Xs, ys, "none", None) > multiway


def test_the_choice_is_the_same_for_the_same_rows_and_seed(car):
    schema, X, y = car
    kwargs = dict(requirement="k-anonymity:k=10", disclosure="hit_miss", base_params={"min_samples_leaf": 1},
                  admissible_params={}, seed=3)
    assert choose_learner("apt", schema, X, y, **kwargs) == choose_learner("apt", schema, X, y, **kwargs)


def test_an_auto_release_states_its_choice_and_passes_the_audit(car):
    schema, X, y = car
    made = train_and_release("apt", schema, X, y, requirement="k-anonymity:k=10", disclosure="hit_miss",
                             learner="auto", learner_params={"min_samples_leaf": 1}, max_depth=None, seed=0)
    assert made.chosen is not None and made.chosen in CANDIDATES
    assert made.release.report.parameters["learner"] == made.chosen.describe()
    assert audit(made.release.trees, made.release.report).passed
    assert _chosen_learner(DecodedModel(schema, made.release.trees, made.release.report)) == made.chosen.describe()


def test_a_named_learner_states_nothing(car):
    schema, X, y = car
    made = train_and_release("apt", schema, X, y, requirement="k-anonymity:k=10", disclosure="hit_miss",
                             learner="admissible", learner_params={"min_samples_leaf": 1}, max_depth=None, seed=0)
    assert made.chosen is None and "learner" not in made.release.report.parameters


def test_the_studys_options_reach_every_candidate_and_the_admissible_ones_only_the_admissible_learner():
    base, admissible = {"min_samples_leaf": 3, "max_depth": 6}, {"category_split": "binary"}
    assert trained_params(Candidate("cart"), base, admissible) == {"min_samples_leaf": 3, "max_depth": 6}
    assert trained_params(Candidate("cart", {"min_samples_leaf": 5}), base, admissible)["min_samples_leaf"] == 5
    assert trained_params(Candidate("multiway", {"min_samples_leaf": 2}), base, admissible)["min_samples_leaf"] == 3
    assert trained_params(Candidate("admissible"), base, admissible)["category_split"] == "binary"


def _study_file(learner: str) -> dict:
    return {"study": {"id": f"choice-{learner}", "seed": 3}, "schema": {"dataset": "car"},
            "release": {"mechanism": "apt", "requirement": "k-anonymity:k=10"}, "training": {"learner": learner}}


def test_a_study_may_ask_for_auto_with_admissible_options():
    assert Training(learner="auto", category_split="binary").learner_params()["category_split"] == "binary"
    assert spec_from_mapping(_study_file("auto")).study.training.learner == "auto"
    with pytest.raises(StudyError, match="learner"):
        spec_from_mapping(_study_file("best"))


def test_too_few_rows_for_the_folds_is_a_clear_error(car):
    schema, X, y = car
    with pytest.raises(ValueError, match="at least 3 rows"):
        choose_learner("none", schema, X[:2], y[:2], requirement=None, disclosure="counts", base_params={},
                       admissible_params={}, seed=0)


def test_the_report_page_shows_each_owners_choice(car):
    schema, _, _ = car
    owners = (OwnerRow("owner-1", "submitted", 10, 3, 10.0, "k-anonymity:k=10", True, 100, learner="cart"),
              OwnerRow("owner-2", "refused", 5, code="unsatisfiable", reason="no release meets it"))
    report = StudyReport.__new__(StudyReport)
    object.__setattr__(report, "owners", owners)
    page = _owners_table(report)
    assert "learner (the owner&#x27;s choice)" in page and "<td>cart" in page
