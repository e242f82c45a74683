"""The miner's tree-vote model: the released trees' summed leaf
class distributions, built in mining, no pseudo row read."""

from __future__ import annotations

import numpy as np
import pytest

from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.study import spec_from_mapping
from modelshare.common.federation.wire import decode_model, model_message
from modelshare.common.mechanisms.release import local_learner, release
from modelshare.common.study import WITHOUT_SETTINGS
from modelshare.common.trees.metrics import accuracy
from modelshare.miner_node.dask_engine import EngineError, check_models
from modelshare.miner_node.global_models import (
    CLASSIFICATION_MODELS,
    GLOBAL_MODELS,
    RELEASE_MODELS,
    build_release_model,
    make_global_model,
)
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine
from modelshare.miner_node.pgen import leaf_class_distributions
from modelshare.miner_node.tree_vote import TREE_VOTE, TreeVote


@pytest.fixture(scope="module")
def adult():
    table = load_dataset("adult")
    X, y = table.schema.encode(table.frame.iloc[:4000], source=table.source)
    return table.schema, X, y


def _released(schema, X, y, owners: int = 3) -> list:
    """Each owner's k-anonymous hit/miss release of its part of the rows (the study's real path)."""
    out = []
    for rows in np.array_split(np.arange(3000), owners):
        tree = local_learner("admissible", schema, "apt", requirement="k-anonymity:k=25",
                             disclosure="hit_miss").fit(X[rows], y[rows]).tree_
        out.append(release("apt", tree=tree, requirement="k-anonymity:k=25", disclosure="hit_miss"))
    return out


def test_the_vote_sums_each_trees_leaf_distribution_with_the_miss_spread_as_pgen_does(adult):
    schema, X, y = adult
    trees = [r.tree for r in _released(schema, X, y)]
    test = X[3000:]
    by_hand = np.zeros((test.shape[0], 2))
    for tree in trees:
        for row, leaf in enumerate(tree.apply(test)):
            node = tree.nodes[leaf]
            by_hand[row, node.label] += node.hit / (node.hit + node.miss)
            by_hand[row, 1 - node.label] += node.miss / (node.hit + node.miss)
    voted = TreeVote(trees)
    assert np.allclose(voted.predict_proba(test), by_hand / by_hand.sum(axis=1, keepdims=True))
    assert (voted.predict(test) == np.argmax(by_hand, axis=1)).all()
    assert not leaf_class_distributions(trees[0])[0].any()  # an inner node carries no distribution


def test_a_study_mines_the_vote_from_the_released_trees_and_scores_it(adult):
    schema, X, y = adult
    releases = _released(schema, X, y)
    accepted = [AcceptedModel(f"site-{i}", decode_model(model_message(r))) for i, r in enumerate(releases)]
    spec = spec_from_mapping({"study": {"id": "s1", "seed": 3}, "schema": {"dataset": "adult"},
                              "release": {"mechanism": "none", "disclosure": "counts"},
                              "mining": {"global_models": [TREE_VOTE, "naive-bayes"], "pgen_scale": 2}}).spec
    results = mine(study_from_pb(spec), accepted, Evaluation(X[3000:], y[3000:], np.arange(1000)))
    vote = next(m for m in results.models if m.name == TREE_VOTE)
    expected = TreeVote([r.tree for r in releases]).predict(X[3000:])
    assert vote.accuracy == pytest.approx(accuracy(y[3000:], expected))
    assert list(vote.predictions) == expected.tolist()
    assert vote.selection == "built from the 3 released trees" and not vote.parameters
    assert vote.train_rows == 0, "the vote reads no pseudo row"
    assert 0.5 < vote.auc <= 1.0


def test_the_vote_needs_a_released_tree():
    with pytest.raises(ValueError, match="at least one released tree"):
        TreeVote([])


def test_the_dask_engine_refuses_the_vote_by_name(capsys):
    with pytest.raises(EngineError, match="no 'tree-vote' global model.*use engine local"):
        check_models(["gradient-boosting", TREE_VOTE])
    assert main(["simulate", "--dataset", "vote", "--global-models", TREE_VOTE, "--engine", "dask"]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "--global-models with --engine dask: the dask engine has no 'tree-vote' global model" in said


def test_the_vote_is_registered_as_built_from_releases_not_fitted_on_rows():
    assert TREE_VOTE in RELEASE_MODELS and TREE_VOTE in CLASSIFICATION_MODELS and TREE_VOTE not in GLOBAL_MODELS
    assert WITHOUT_SETTINGS == tuple(RELEASE_MODELS), "a study's [global_models] refuses a setting for each"
    assert RELEASE_MODELS[TREE_VOTE].name == TREE_VOTE and "\n" not in RELEASE_MODELS[TREE_VOTE].description
    with pytest.raises(ValueError, match="'tree-vote' is built from the released trees, not fitted on rows"):
        make_global_model(TREE_VOTE, load_dataset("car").schema, random_state=0)
    with pytest.raises(ValueError, match="'naive-bayes' is not built from releases; those are: tree-vote"):
        build_release_model("naive-bayes", [])
