"""The global decision tree and boosting a dp study learns from PGEN rows, and DPEA's schema-only choice of bins."""

from __future__ import annotations

import numpy as np
import pytest

from modelshare.common.mechanisms.dpea import DEFAULT_BINS, DPEA, Domain, finest_bins
from modelshare.common.study import ModelPlan
from modelshare.miner_node import dp_pgen
from modelshare.miner_node.dask_engine import DASK_DP_LEAF_FLOORS
from modelshare.miner_node.dp_pgen import PGEN_BOOSTING_LEAF_SHARE, PGEN_LEAF_SHARE
from modelshare.miner_node.global_models import make_global_model
from modelshare.miner_node.pgen import pgen_ensemble
from modelshare.miner_node.selection import choose, global_model_params


def test_a_dp_studys_global_tree_gets_a_leaf_floor_and_others_do_not():
    assert global_model_params("decision-tree", "dpea", 30_000) == {"min_samples_leaf": round(PGEN_LEAF_SHARE * 30_000)}
    assert global_model_params("decision-tree", "laplace-rdt", 10) == {"min_samples_leaf": 1}
    assert global_model_params("decision-tree", "apt", 30_000) == {}
    assert global_model_params("naive-bayes", "dpea", 30_000) == {}


def test_a_dp_studys_boosting_gets_a_leaf_floor_never_below_its_default(mixed):
    share = PGEN_BOOSTING_LEAF_SHARE
    assert global_model_params("gradient-boosting", "dpea", 200_000) == {"min_samples_leaf": round(share * 200_000)}
    assert global_model_params("gradient-boosting", "diffpets", 300) == {"min_samples_leaf": 20}  # 2 % would be 6
    assert make_global_model("gradient-boosting", mixed[0], random_state=0).min_samples_leaf == 20  # the default kept
    assert global_model_params("gradient-boosting", "apt", 200_000) == {}
    # the Dask engine cannot map boosting's leaf size (its hessians vary after round one): fixed parameters there
    assert global_model_params("gradient-boosting", "dpea", 200_000, DASK_DP_LEAF_FLOORS) == {}
    assert global_model_params("decision-tree", "dpea", 200_000, DASK_DP_LEAF_FLOORS) == {
        "min_samples_leaf": round(PGEN_LEAF_SHARE * 200_000)}


def test_the_miner_fits_a_dp_studys_fixed_boosting_with_the_floor():
    plan = ModelPlan(("gradient-boosting",), {}, seed=0, mechanism="dpea")
    rows = np.zeros((5_000, 1)), np.zeros(5_000, dtype=np.int64)
    choice = choose("gradient-boosting", plan, *rows, lambda params: None, regression=False)
    assert choice.selection == "fixed" and choice.parameters == {"min_samples_leaf": 100}


def test_the_floor_keeps_the_global_tree_off_the_uniform_pgen_columns(mixed):
    """Labels flipped for 25% of rows: PGEN leaves are mixed, and a fully grown tree fits their uniform draws."""
    schema, X, y = mixed
    flipped = y ^ (np.random.default_rng(5).random(y.size) < 0.25)
    trees = DPEA(2.0, 1, 2).fit(schema, X, flipped, np.random.default_rng(3)).trees
    Xp, yp = pgen_ensemble(trees, scale=1.0, beta=1.0, rng=np.random.default_rng(1))
    accuracy = {}
    for mechanism in ("apt", "dpea"):  # apt: the fully grown tree of the model-sharing paper
        params = global_model_params("decision-tree", mechanism, yp.size)
        model = make_global_model("decision-tree", schema, random_state=0, **params).fit(Xp, yp)
        accuracy[mechanism] = float((model.predict(X) == y).mean())  # against the rule itself
    assert accuracy["dpea"] > accuracy["apt"] + 0.04, accuracy  # 0.80 against 0.74


def test_the_trainer_bins_as_finely_as_the_depth_allows(mixed, nursery):
    schema = mixed[0]
    assert finest_bins(schema, 2) == DEFAULT_BINS
    deep = finest_bins(schema, 3, max_nodes=1000)
    assert 2 <= deep < DEFAULT_BINS
    assert Domain.of(schema, deep).max_nodes(3) <= 1000 < Domain.of(schema, deep + 1).max_nodes(3)
    assert finest_bins(nursery[0], 4) == DEFAULT_BINS  # no numeric attribute: nothing to lower
    with pytest.raises(ValueError, match="more than max_nodes"):  # even 2 bins too many: refused with the reason
        DPEA(1.0, 1, 3, bins=finest_bins(schema, 3, max_nodes=20), max_nodes=20).fit(*mixed)



def test_a_dp_release_yields_at_most_the_row_cap(mixed, monkeypatch):
    """eps = 0.01 on a depth-3 DPEA tree: clamped noise of scale 200 on ~1,700 leaves adds up to far more rows."""
    schema, X, y = mixed
    trees = DPEA(0.01, 1, 3).fit(schema, X, y, np.random.default_rng(0)).trees
    assert trees[0].root.total > 50 * y.size  # what PGEN would draw uncapped
    monkeypatch.setattr(dp_pgen, "MAX_DP_PGEN_ROWS", 10 * y.size)  # the real cap, 10^6, would take seconds
    scale = dp_pgen.dp_pgen_scale(1.0, "dpea", trees)
    assert scale < 1
    assert pgen_ensemble(trees, scale=scale, beta=1.0, rng=np.random.default_rng(1))[1].size == 10 * y.size
    assert dp_pgen.dp_pgen_scale(1.0, "apt", trees) == 1.0  # only dp releases are capped
    assert dp_pgen.dp_pgen_scale(2.0, "dpea", DPEA(5.0, 1, 2).fit(*mixed, 0).trees) == 2.0  # under the cap: unchanged
