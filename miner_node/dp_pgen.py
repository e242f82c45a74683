"""How the miner learns from the PGEN rows of a noise-based eps-DP release: how many rows, and the global tree.

*How many rows.* PGEN draws as many rows as a tree's released counts add up to (times the study's
``pgen_scale``), and a DP release's counts carry clamped Laplace noise on every leaf, empty ones
included. At a small epsilon that noise dwarfs the table: a DPEA tree over Adult has about 25,000
leaves, and at eps = 0.01 over 10 trees each class count gets noise of scale 2,000, whose clamped
mean is about 1,000, so the counts add up to some 50 million rows for a table of 30,000 (an
estimate; `experiment dp --dataset adult` grew to 6 GB per worker before the cap, and
`tests/miner_node/test_dp_pgen.py` shows a 2,000-row table's release at eps = 0.01 stating over 100,000). The rows
are drawn in proportion to the counts, so fewer of them follow the same law; a dp release therefore yields at
most ``MAX_DP_PGEN_ROWS`` rows (`dp_pgen_scale`), which bounds the miner's memory and time
whatever epsilon the owners chose, and changes nothing at the budgets where the release is useful.

*The global tree.* PGEN draws every attribute a leaf does not constrain uniformly, and DP trees are shallow (few
levels, coarse leaves), so most of a pseudo row is uniform noise. A fully grown tree on such rows
isolates single rows on those noise columns and predicts close to chance where a leaf's classes
are mixed (`tests/miner_node/test_dp_pgen.py`: 0.71 against 0.81 with the floor, on a table with 25 % label
noise; a scratch run on Adult gave 0.58, below the majority class's 0.754). The global
``decision-tree`` of a dp study therefore gets ``min_samples_leaf`` = ``PGEN_LEAF_SHARE`` of its
training rows, which reads only the pseudo rows, so it costs no privacy. APT and pruning studies
keep the fully grown tree of the model-sharing paper, whose deep trees leave little uniform noise.
This is the *fixed* rule (`global_model_params`); a study's decision tree is by default set by
cross-validation on the pseudo-data instead (`modelshare.miner_node.selection`, "auto"), which chose leaves of
5 % on Nursery's DPEA releases and beat the floor by 20 points (EXPERIMENTS.md).

*Gradient boosting* (fixed by default) fits the same noise in another way: most PGEN rows of a
DP release at a small epsilon come from the clamped noise of nearly empty leaves, whose classes
are a coin toss, and boosting's default leaves of 20 rows chase them. A dp study's
``gradient-boosting`` therefore gets leaves of at least ``PGEN_BOOSTING_LEAF_SHARE`` (2 %) of its
rows, never fewer than scikit-learn's own 20 (on a table of a few hundred pseudo rows a share of
them would *lower* the floor: Vote lost 4 points that way). On Adult (one DPEA tree of depth 3,
adult.data to adult.test, the same 5 releases each) that raised boosting from 0.818 ± 0.007 to
0.829 ± 0.004 at eps = 0.1 (AUC 0.80 -> 0.82) and from 0.831 to 0.832 at eps = 1; shares of 0.5 %
and 1 % did less, 5 % lost (EXPERIMENTS.md, "Issue 23 at eps = 0.1"). Its leaf size has no faithful
equivalent on the Dask engine (`modelshare.miner_node.dask_engine`), which keeps boosting's fixed parameters (the floor
xgboost could guarantee scored lower there: bench/dask_dp_boosting.py).

Considered and left out: zeroing leaf counts below a few noise scales before PGEN, to drop the
rows that the clamped noise of empty leaves adds. It helped on Adult (30,000 rows) but cost 3
points on a 2,000-row table whose real leaves are as small as the noise, so it is no default.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from sklearn.ensemble import HistGradientBoostingClassifier

from modelshare.common.mechanisms import registry
from modelshare.common.trees.tree import Tree

__all__ = ["BOOSTING_LEAF_ROWS", "MAX_DP_PGEN_ROWS", "PGEN_LEAF_SHARE", "PGEN_BOOSTING_LEAF_SHARE", "dp_pgen_scale"]

PGEN_LEAF_SHARE = 0.005  # min_samples_leaf of a dp study's global decision tree, as a share of its rows
PGEN_BOOSTING_LEAF_SHARE = 0.02  # min_samples_leaf of a dp study's gradient boosting, as a share of its rows
BOOSTING_LEAF_ROWS: int = inspect.signature(HistGradientBoostingClassifier).parameters["min_samples_leaf"].default
"""scikit-learn's own leaf size for gradient boosting (20), which the share never lowers."""

MAX_DP_PGEN_ROWS = 1_000_000  # pseudo rows one dp release yields at most


def dp_pgen_scale(scale: float, mechanism: str, trees: Sequence[Tree]) -> float:
    """``scale``, lowered for a dp release whose counts would yield more than ``MAX_DP_PGEN_ROWS`` rows.

    The rows of an ensemble are ``scale`` times its trees' mean released total (`pgen.ensemble_rows`),
    those of one tree ``scale`` times its total, so the mean total is what the cap divides.
    """
    mean_total = sum(float(tree.root.total) for tree in trees) / max(len(trees), 1)
    if mechanism not in registry.names(family="dp") or scale * mean_total <= MAX_DP_PGEN_ROWS:
        return scale
    return MAX_DP_PGEN_ROWS / mean_total


