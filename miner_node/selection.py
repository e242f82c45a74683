"""How the miner sets a global model's hyperparameters: the study's values, the fixed rule, or cross-validation.

PGEN draws every attribute a released path does not constrain uniformly, so much of a pseudo row is
noise, and a model that fits it learns nothing that holds on real rows (a fully grown tree on the
Nursery ensemble's pseudo-data: 0.45-0.81 where naive Bayes reaches 0.88-0.91). How much to
regularise depends on the release (its depth, its ensemble, its noise) and cannot be fixed once
for all, so the miner can choose it (mode ``"auto"``, `modelshare.common.study.settings`):
it cross-validates each candidate of the model's grid (its record's ``grid``, `modelshare.miner_node.global_models`) on
the pooled pseudo-data it learns from — at most ``MAX_CV_ROWS`` of them (``MAX_DP_CV_ROWS`` in a dp study), drawn with
the study's seed — and refits the best
on all of it. Pseudo rows are not independent: the rows of one released tree share its paths,
so folds of shuffled rows reward a model that relearns each tree's own regions. A fold therefore
holds out whole released trees (an owner's tree, or one tree of an ensemble) wherever there are
at least `CV_FOLDS` of them, which scores a candidate by how well what it learned from some
releases predicts the rows of others. The evaluation table is never an argument here, so it only ever scores; no owner's
raw row reaches the miner at all.

Leaf sizes in the grids are *shares* of the training rows (a float in (0, 1)); `concrete` turns them
into rows. A share chosen on a sample means the same partition on the whole pseudo table only as
long as its leaves hold enough rows to average out PGEN's noise, which depends on their rows, not
their share. A dp release's pseudo rows are mostly noise (one DPEA tree over Adult at eps = 0.1:
about 200,000 rows for 30,162 real ones, most from the clamped noise of empty leaves), and on a
20,000-row sample leaves of 0.05 % hold 7 rows and fit it, where on the whole table they hold 100
and recover the release: the sample's CV preferred leaves of 1-2 % that lost 3-4 points on real
rows, the whole table's picks 0.05 % in every repeat and beats the dp floor (EXPERIMENTS.md,
"Issue 23: the auto tree at eps = 0.1"). A dp study therefore cross-validates on up to
``MAX_DP_CV_ROWS`` rows.

In a dp study whose releases carry class histograms, the study's class prior
(`modelshare.miner_node.class_prior`, from the histograms, never from a pseudo row) is one more candidate of
``"auto"``: scored on the same folds, it wins when it beats the grid's best, and the model then
predicts the prior's majority class, the floor a dp study's models are held to. Every candidate's
accuracy is then weighted to the prior (`prior_weights`): a row of class c counts as the prior's share of c
over the pseudo rows' share of c. The clamped noise of a dp release's counts inflates its rare classes in
the pseudo rows (randhie at eps = 0.1: 59 % of the pseudo rows in the class that holds 69 % of the real
ones), so unweighted folds undervalue the majority class, and with it the floor; the summed histograms
estimate the owners' class shares directly, at no further cost in privacy (a label-shift correction that
reads released values only).

The other modes: ``"fixed"`` is the rule the miner used before studies could choose (the models'
defaults; a dp study's decision tree and gradient boosting get the leaf floors of
each global model's record, `modelshare.miner_node.global_models`), and
``"given"`` is the study's values over those. A model without a setting gets `DEFAULT_MODES`'.

BASIS, the same model fitted on the owners' pooled raw training rows (which only a simulation or an
experiment holds), is set by the same study setting through `choose_basis`, so that a pseudo-data
model and its BASIS differ in their rows, not in their tuning: the same values, the same fixed
rule, or the same grid cross-validated on the raw training rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.model_selection import GroupKFold, KFold

from modelshare.common.mechanisms import registry
from modelshare.common.study import AUTO, FIXED, GIVEN, ModelPlan
from modelshare.miner_node.global_models import DP_LEAF_FLOORS, GRIDS, REGRESSION_GRIDS

__all__ = ["DEFAULT_MODES", "MAX_CV_ROWS", "MAX_DP_CV_ROWS", "CV_FOLDS", "Choice", "global_model_params", "concrete",
           "choose", "choose_basis", "cv_rows", "mode_of", "prior_weights"]

MAX_CV_ROWS = 20_000  # pseudo rows the cross-validation samples (the refit uses them all)
MAX_DP_CV_ROWS = 250_000  # the same in a dp study, whose pseudo rows are mostly noise (module docstring)
CV_FOLDS = 3

#: The mode of a model the study gives no setting for.
DEFAULT_MODES: dict[str, str] = {"decision-tree": AUTO}

@dataclass(frozen=True)
class Choice:
    """The hyperparameters a model is fitted with (in rows) and how they were set, as the results report them."""

    parameters: dict[str, Any]
    selection: str
    # the study's class prior beat every candidate: the model is `modelshare.miner_node.class_prior`'s
    floor: bool = False

    @property
    def text(self) -> str:
        """How they were set and their values in one phrase: ``auto``'s sentence names its values, else ``mode: k=v``
        (by name, whatever order the values came in)."""
        values = ", ".join(f"{k}={v}" for k, v in sorted(self.parameters.items()))
        if self.selection.startswith(AUTO):  # the chosen values are in its text
            return self.selection
        return f"{self.selection}: {values}" if values and self.selection else (values or self.selection)


def concrete(params: Mapping[str, Any], rows: int) -> dict[str, Any]:
    """``params`` with a leaf share (a float ``min_samples_leaf`` in (0, 1)) turned into rows of ``rows``."""
    out = dict(params)
    leaf = out.get("min_samples_leaf")
    if isinstance(leaf, float) and 0 < leaf < 1:
        out["min_samples_leaf"] = max(1, round(leaf * rows))
    return out


def _accuracy(y: np.ndarray, predicted: np.ndarray, weights: np.ndarray | None = None) -> float:
    return float(np.average(np.asarray(predicted) == y, weights=weights))


def _neg_mse(y: np.ndarray, predicted: np.ndarray, weights: np.ndarray | None = None) -> float:
    return -float(np.average((np.asarray(predicted, dtype=np.float64) - y) ** 2, weights=weights))


def prior_weights(y: np.ndarray, counts: Sequence[float] | np.ndarray) -> np.ndarray:
    """Each row's weight that gives the rows ``y`` the class shares of the prior ``counts`` (module docstring).

    The prior is smoothed by one count per class, as `ClassPriorModel.predict_proba` smooths it, so that a class
    its histograms clamped to 0 keeps a small weight; a class no row has needs none.
    """
    prior = np.asarray(counts, dtype=np.float64) + 1.0
    prior /= prior.sum()
    found = np.bincount(y, minlength=prior.shape[0]).astype(np.float64) / max(y.shape[0], 1)
    ratio = np.divide(prior, found, out=np.zeros_like(prior), where=found > 0)
    weights: np.ndarray = ratio[y]
    return weights


def _folds(X: np.ndarray, groups: np.ndarray | None, seed: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
    """`CV_FOLDS` folds keeping each released tree's rows together where there are enough trees, else shuffled rows."""
    if groups is not None and np.unique(groups).shape[0] >= CV_FOLDS:
        return list(GroupKFold(n_splits=CV_FOLDS).split(X, groups=groups)), "released trees"
    return list(KFold(n_splits=CV_FOLDS, shuffle=True, random_state=seed).split(X)), "rows"


def _cross_validate(build: Callable[[dict[str, Any]], Any], grid: Sequence[Mapping[str, Any]], X: np.ndarray,
                    y: np.ndarray, groups: np.ndarray | None, seed: int,
                    score: Callable[[np.ndarray, np.ndarray, np.ndarray | None], float],
                    max_rows: int, kind: str, floor: Any = None) -> tuple[dict[str, Any], float, str, float]:
    """The candidate of ``grid`` with the best mean ``score`` over `CV_FOLDS` folds of ``X, y`` (at most ``max_rows``),
    and the mean score of ``floor`` (a model fitted on nothing here; -inf without one) on the same folds.

    ``kind`` names the rows (``pseudo`` or ``raw``) in the sentence that says what was cross-validated.
    """
    rng = np.random.default_rng(seed)
    if X.shape[0] > max_rows:
        keep = np.sort(rng.choice(X.shape[0], max_rows, replace=False))
        X, y = X[keep], y[keep]
        groups = None if groups is None else groups[keep]
    folds, by = _folds(X, groups, seed)
    weights = None if floor is None else prior_weights(y, floor.counts)
    best, best_score = grid[0], -np.inf
    for candidate in grid:
        scores = [score(y[test], build(concrete(candidate, train.shape[0])).fit(X[train], y[train]).predict(X[test]),
                        None if weights is None else weights[test]) for train, test in folds]
        if (mean := float(np.mean(scores))) > best_score:
            best, best_score = candidate, mean
    floor_score = -np.inf if floor is None else float(np.mean([
        score(y[test], floor.predict(X[test]), None if weights is None else weights[test]) for _, test in folds]))
    rows = f"{X.shape[0]:,} {kind} rows" + (", weighted to the class prior" if weights is not None else "")
    return dict(best), best_score, f"{rows}, folds by {by}", floor_score


def global_model_params(name: str, mechanism: str, rows: int,
                        floors: Mapping[str, tuple[float, int]] = DP_LEAF_FLOORS) -> dict[str, Any]:
    """Hyperparameters of global model ``name`` learned from ``rows`` PGEN rows of a ``mechanism`` study.

    ``floors`` are the leaf floors a dp study's models get (an engine passes those it can honour).
    """
    if name in floors and mechanism in registry.names(family="dp"):
        share, fewest = floors[name]
        return {"min_samples_leaf": max(fewest, round(share * rows))}
    return {}


def cv_rows(plan: ModelPlan) -> int:
    """The most pseudo rows ``"auto"`` cross-validates on in the
    study: `MAX_DP_CV_ROWS` in a dp study, else `MAX_CV_ROWS`."""
    return MAX_DP_CV_ROWS if plan.mechanism in registry.names(family="dp") else MAX_CV_ROWS


def mode_of(plan: ModelPlan, name: str) -> str:
    """How the study sets model ``name``'s hyperparameters: its setting's mode, else `DEFAULT_MODES`' (else fixed)."""
    return plan.setting(name, DEFAULT_MODES.get(name, FIXED))[0]


def choose(name: str, plan: ModelPlan, X: np.ndarray, y: np.ndarray, build: Callable[[dict[str, Any]], Any],
           *, regression: bool, groups: np.ndarray | None = None, rows: int | None = None,
           grids: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
           floors: Mapping[str, tuple[float, int]] = DP_LEAF_FLOORS, kind: str = "pseudo", floor: Any = None) -> Choice:
    """The hyperparameters model ``name`` of the study is fitted with on the pseudo-data ``X, y``.

    ``build(params)`` returns a fresh model with ``params`` over its defaults; ``groups`` names
    each row's released tree (owner and tree), so that a fold holds out whole trees. Only the
    pseudo rows are read (module docstring); the result names the mode and, for ``"auto"``, the
    cross-validated score on pseudo rows. ``rows`` is how many rows the chosen model is fitted on
    when ``X, y`` is only a sample of them (the Dask engine's; leaf shares become rows of it), and
    ``grids`` an engine's own candidates (default `GRIDS` or `REGRESSION_GRIDS`), ``floors`` the dp
    leaf floors of the fixed rule that the engine can honour (`global_model_params`),
    ``kind`` what the rows are in the result's sentence (`choose_basis` passes ``raw``).
    ``floor`` is a dp study's class-prior model (`modelshare.miner_node.class_prior.ClassPriorModel`, built from the
    releases' noisy class histograms, so from no pseudo row): under ``"auto"`` it is scored on the same folds
    and, when it beats the grid's best, chosen (``Choice.floor``) — the model then predicts the prior.
    """
    mode, given = plan.setting(name, DEFAULT_MODES.get(name, FIXED))
    rows = int(y.shape[0]) if rows is None else rows
    if mode == GIVEN:
        return Choice(concrete(given, rows), GIVEN)
    if grids is None:
        grids = REGRESSION_GRIDS if regression else GRIDS
    if mode == AUTO and name in grids and y.shape[0] >= 2 * CV_FOLDS:
        score = _neg_mse if regression else _accuracy
        best, value, sampled, floor_value = _cross_validate(build, grids[name], X, y, groups, plan.seed % 2**31, score,
                                                            cv_rows(plan), kind, None if regression else floor)
        shown = f"MSE {-value:.4g}" if regression else f"accuracy {value:.4f}"
        picked = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in best.items())
        if floor_value > value:
            return Choice({}, f"auto: the class prior's majority class by {CV_FOLDS}-fold CV on {sampled} (accuracy "
                              f"{floor_value:.4f}; the grid's best, {picked}, {value:.4f})", floor=True)
        return Choice(concrete(best, rows), f"auto: {picked} by {CV_FOLDS}-fold CV on {sampled} ({shown})"
                      + (f"; the class prior's majority class {floor_value:.4f}" if floor is not None and not regression
                         else ""))
    fixed = {} if regression else global_model_params(name, plan.mechanism, rows, floors)
    return Choice(dict(fixed), FIXED)


def choose_basis(name: str, plan: ModelPlan, X: np.ndarray, y: np.ndarray, build: Callable[[dict[str, Any]], Any],
                 *, regression: bool) -> Choice:
    """The hyperparameters BASIS's model ``name`` is fitted with on the pooled raw training rows ``X, y``.

    The study's setting for ``name`` (`choose`), applied to the raw rows instead of the pseudo rows:
    ``"given"`` the same values and ``"fixed"`` the same rule (a leaf share, and a dp study's leaf
    floor, becomes rows of the raw table), ``"auto"`` the same grid, `CV_FOLDS` and row cap
    (`cv_rows`), cross-validated on ordinary shuffled folds of the raw training rows: those are
    independent draws, and there are no released trees to hold out. ``X, y`` are the training rows
    only; the caller holds the evaluation rows apart, and nothing here could tell them from
    training rows, so they must never be passed. The result says ``raw rows`` where the miner's says
    ``pseudo rows``.
    """
    return choose(name, plan, X, y, build, regression=regression, groups=None, kind="raw")
