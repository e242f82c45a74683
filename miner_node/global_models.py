"""The global learners a study can ask for, by name, and the mixed naive Bayes among them.

The miner regenerates pseudo-data from the released trees and learns "global" models on it; the
study then compares each with the same kind of model learned on the raw data (Sharkey et al.
2008, §4). Studies name the learners they want (``"decision-tree"``, ``"naive-bayes"``,
``"random-forest"``, ``"rules"``, ``"gradient-boosting"``); this registry turns a name into a fresh,
unfitted estimator. How the miner sets their hyperparameters (the study's setting, cross-validation
on the pseudo-data, or the fixed rule) is `modelshare.miner_node.selection`'s.

Every model works on the encoded form of `modelshare.common.data.schema`: ``fit(X, y)`` with ``X`` float64
(rows, attributes), categorical columns holding category indices, and ``y`` int64 class indices
into ``schema.classes``; ``predict(X)`` returns such class indices. A model only ever predicts
classes it saw in training.

A regression study (a numeric target, `modelshare.common.data.regression.RegressionSchema`) learns from the PGEN
table of DiffPETs regression forests with the models of `REGRESSION_MODELS` instead
(``"regression-tree"``, ``"random-forest"``, ``"gradient-boosting"``): ``y`` is the float64 target and ``predict``
returns target values (`make_regression_model`).

A classification study may also name a model the miner builds from the released trees themselves
rather than fits on pseudo-data: `RELEASE_MODELS` (``"tree-vote"``, `modelshare.miner_node.tree_vote`;
``"calibrated-nb"``; ``"class-prior"``, the dp releases' summed class histograms, `modelshare.miner_node.class_prior`),
built by `build_release_model`. They sit beside `GLOBAL_MODELS`, not in it, because nothing fits them on rows:
the papers' experiments, the pipeline and the hyperparameter settings work on `GLOBAL_MODELS` alone.
`CLASSIFICATION_MODELS` is every name a classification study may list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.ensemble import (
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.naive_bayes import CategoricalNB, GaussianNB
from sklearn.tree import DecisionTreeRegressor
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.common.trees.learners._data import check_x, check_xy
from modelshare.miner_node.calibrated_nb import CALIBRATED_NB, CalibratedNB, OwnerRelease
from modelshare.miner_node.class_prior import CLASS_PRIOR, ClassPriorModel, build_class_prior, declined
from modelshare.miner_node.dp_pgen import BOOSTING_LEAF_ROWS, PGEN_BOOSTING_LEAF_SHARE, PGEN_LEAF_SHARE
from modelshare.miner_node.rules import RuleListClassifier
from modelshare.miner_node.tree_vote import TREE_VOTE, TreeVote

__all__ = [
    "CLASSIFICATION_MODELS",
    "DEFAULT_TREE_PARAMS",
    "DEFAULT_FOREST_PARAMS",
    "DEFAULT_BOOSTING_PARAMS",
    "GLOBAL_MODELS",
    "GlobalModel",
    "GlobalModelSpec",
    "GradientBoostingClassifier",
    "GradientBoostingRegressor",
    "MixedNaiveBayes",
    "RELEASE_MODELS",
    "ReleaseModelSpec",
    "build_release_model",
    "fit_global_models",
    "make_global_model",
    "DEFAULT_REGRESSION_TREE_PARAMS",
    "DEFAULT_REGRESSION_FOREST_PARAMS",
    "REGRESSION_MODELS",
    "RegressionModelSpec",
    "make_regression_model",
]

#: Hyperparameters of the ``decision-tree`` global model beyond `CartTreeClassifier`'s defaults
#: (a fully grown CART, like the owners' default local trees); override per call through
#: `make_global_model`'s keyword arguments.
DEFAULT_TREE_PARAMS: dict[str, Any] = {}

#: Hyperparameters of the ``random-forest`` global model (single-threaded so studies that run
#: many trials in parallel processes do not oversubscribe the CPUs).
DEFAULT_FOREST_PARAMS: dict[str, Any] = {"n_estimators": 100, "n_jobs": 1}

#: Hyperparameters of the ``gradient-boosting`` global models beyond scikit-learn's defaults: up to
#: 200 boosting rounds, stopped early on a held-out tenth of the (pseudo) training rows, and an L2
#: penalty on leaf values (without it a class of a few rows, Nursery's ``recommend``, makes the
#: multi-class fit diverge: 0.72 instead of 0.999 on Nursery's raw rows).
DEFAULT_BOOSTING_PARAMS: dict[str, Any] = {"max_iter": 200, "early_stopping": True, "l2_regularization": 1.0}

_MAX_BINS = 255  # HistGradientBoosting's bins: a categorical attribute with more categories is boosted as ordinal codes


class GlobalModel(Protocol):
    """What a study needs from a global model: fit on and predict for encoded tables."""

    def fit(self, X: np.ndarray, y: np.ndarray) -> Any: ...

    def predict(self, X: np.ndarray) -> np.ndarray: ...


class MixedNaiveBayes(ClassifierMixin, BaseEstimator):
    """Naive Bayes over mixed attributes: categorical NB on category codes, Gaussian NB on numbers.

    Under the naive independence assumption the categorical and numeric columns are independent
    given the class, so ``log P(c|x) ∝ log P(c|x_cat) + log P(c|x_num) − log P(c)``. Each part is
    taken from scikit-learn's public ``predict_joint_log_proba`` (``log P(c) + log P(x_part|c)``),
    so the sum minus one log prior is the joint log likelihood of the whole row. With only one
    kind of column the model is exactly the corresponding scikit-learn model.

    Parameters
    ----------
    schema:
        Schema of the encoded tables; says which columns are categorical and how many categories
        each has (passed as ``min_categories`` so a code unseen in training never breaks it).
    alpha:
        Additive (Laplace) smoothing of the categorical likelihoods.

    Attributes
    ----------
    classes_ : numpy.ndarray
        Class indices seen in training; predictions are drawn from these.
    class_log_prior_ : numpy.ndarray
        Empirical log prior of each class in ``classes_``.
    categorical_ : CategoricalNB or None
        The model of the categorical columns, None when the schema has none.
    gaussian_ : GaussianNB or None
        The model of the numeric columns, None when the schema has none.
    """

    def __init__(self, schema: Schema, *, alpha: float = 1.0) -> None:
        self.schema = schema
        self.alpha = alpha

    def fit(self, X: np.ndarray, y: np.ndarray) -> MixedNaiveBayes:
        """Fit the categorical and numeric parts on their columns and the empirical class prior."""
        X, y = check_xy(self.schema, X, y)
        if X.shape[0] == 0:
            raise ValueError("X has no rows; naive Bayes needs training tuples")
        categorical = self.schema.categorical_mask
        self.categorical_: CategoricalNB | None = None
        self.gaussian_: GaussianNB | None = None
        if categorical.any():
            sizes = np.array([a.size for a in self.schema.attributes if isinstance(a, CategoricalAttribute)])
            self.categorical_ = CategoricalNB(alpha=self.alpha, min_categories=sizes).fit(X[:, categorical], y)
        if not categorical.all():
            self.gaussian_ = GaussianNB().fit(X[:, ~categorical], y)
        self.classes_, counts = np.unique(y, return_counts=True)
        self.class_log_prior_ = np.log(counts / counts.sum())
        return self

    def predict_joint_log_proba(self, X: np.ndarray) -> np.ndarray:
        """``log P(c) + log P(x|c)`` per row and class in ``classes_``, shape (rows, classes)."""
        check_is_fitted(self, "classes_")
        X = check_x(self.schema, X)
        categorical = self.schema.categorical_mask
        parts: list[np.ndarray] = []  # scikit-learn's joint log likelihoods, (rows, classes) each
        if self.categorical_ is not None:
            parts.append(self.categorical_.predict_joint_log_proba(X[:, categorical]))
        if self.gaussian_ is not None:
            parts.append(self.gaussian_.predict_joint_log_proba(X[:, ~categorical]))
        if len(parts) == 1:
            return parts[0]
        joint: np.ndarray = parts[0] + parts[1] - self.class_log_prior_
        return joint

    def predict_log_proba(self, X: np.ndarray) -> np.ndarray:
        """Normalized log posterior per row and class in ``classes_``."""
        joint = self.predict_joint_log_proba(X)
        normalised: np.ndarray = joint - logsumexp(joint, axis=1, keepdims=True)
        return normalised

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Posterior probability per row and class in ``classes_``."""
        proba: np.ndarray = np.exp(self.predict_log_proba(X))
        return proba

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Most probable class index (into ``schema.classes``) per row."""
        labels: np.ndarray = self.classes_[np.argmax(self.predict_joint_log_proba(X), axis=1)]
        return labels


def _decision_tree(schema: Schema, random_state: int | None, params: Mapping[str, Any]) -> GlobalModel:
    return CartTreeClassifier(schema, **{**DEFAULT_TREE_PARAMS, **params}, random_state=random_state)


def _naive_bayes(schema: Schema, random_state: int | None, params: Mapping[str, Any]) -> GlobalModel:
    return MixedNaiveBayes(schema, **params)  # deterministic: no random state to pass


def _random_forest(schema: Schema, random_state: int | None, params: Mapping[str, Any]) -> GlobalModel:
    forest: GlobalModel = RandomForestClassifier(**{**DEFAULT_FOREST_PARAMS, **params}, random_state=random_state)
    return forest


def _rules(schema: Schema, random_state: int | None, params: Mapping[str, Any]) -> GlobalModel:
    return RuleListClassifier(schema, **params, random_state=random_state)


class GradientBoostingClassifier(HistGradientBoostingClassifier):
    """scikit-learn's histogram gradient boosting, single-threaded, whose early stopping survives a class of one row.

    Early stopping holds out a stratified tenth of the training rows, which scikit-learn refuses
    when a class has a single row (Nursery's ``recommend``); such a fit runs all ``max_iter``
    rounds instead of failing. OpenMP is held to one thread, as the forests' ``n_jobs=1``: on a
    busy two-CPU machine its threads spun for 120 s on a fit that takes 1 s on one.
    """

    early_stopping: Literal["auto"] | bool  # scikit-learn's parameter, set by its __init__

    def fit(self, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None) -> GradientBoostingClassifier:
        """Fit; early stopping off when some class of ``y`` has fewer than two rows."""
        if self.early_stopping is not False and np.unique(y, return_counts=True)[1].min() < 2:
            self.early_stopping = False
        with threadpool_limits(limits=1):
            super().fit(X, y, sample_weight=sample_weight)
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities per row, on one thread."""
        with threadpool_limits(limits=1):
            proba: np.ndarray = super().predict_proba(X)
        return proba

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per row, on one thread."""
        with threadpool_limits(limits=1):
            labels: np.ndarray = super().predict(X)
        return labels


class GradientBoostingRegressor(HistGradientBoostingRegressor):
    """scikit-learn's histogram gradient boosting regressor, single-threaded (`GradientBoostingClassifier`)."""

    def fit(self, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None) -> GradientBoostingRegressor:
        """Fit on one thread."""
        with threadpool_limits(limits=1):
            super().fit(X, y, sample_weight=sample_weight)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Target value per row, on one thread."""
        with threadpool_limits(limits=1):
            values: np.ndarray = super().predict(X)
        return values


def _gradient_boosting(schema: Schema, random_state: int | None, params: Mapping[str, Any]) -> GlobalModel:
    """Histogram gradient boosting; categorical attributes (up to 255 categories) split as categories, not codes."""
    categorical = np.array([isinstance(a, CategoricalAttribute) and a.size <= _MAX_BINS for a in schema.attributes])
    return GradientBoostingClassifier(**{**DEFAULT_BOOSTING_PARAMS, **params},
                                          categorical_features=categorical if categorical.any() else None,
                                          random_state=random_state)


@dataclass(frozen=True)
class GlobalModelSpec:
    """A named global learner.

    Attributes
    ----------
    name:
        The name studies use to ask for it.
    description:
        One line saying what the model is.
    build:
        ``build(schema, random_state, params)`` returns a fresh, unfitted estimator, with
        ``params`` overriding the model's default hyperparameters.
    grid:
        The candidates ``"auto"`` cross-validates (`modelshare.miner_node.selection`), simplest first (ties keep the
        earlier one); leaf sizes below 1 are shares of the rows.
    dp_leaf_floor:
        The fixed rule's leaf floor in a dp study: (share of the PGEN rows, fewest rows); None: none.

    The parameters a study may set are `modelshare.common.study.MODEL_PARAMETERS`' (the admin checks them without
    the miner's code); a test keeps the two in step.
    """

    name: str
    description: str
    build: Callable[[Schema, int | None, Mapping[str, Any]], GlobalModel]
    grid: tuple[Mapping[str, Any], ...]
    dp_leaf_floor: tuple[float, int] | None = None


_LEAF_SHARES: tuple[int | float, ...] = (0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 0.0005, 1)  # most regularised first
_BOOSTING_GRID = tuple({"max_leaf_nodes": n, "min_samples_leaf": s} for n in (15, 31, 63) for s in (0.005, 20))

GLOBAL_MODELS: dict[str, GlobalModelSpec] = {
    spec.name: spec
    for spec in (
        GlobalModelSpec(
            "decision-tree",
            "CART (scikit-learn) converted to a modelshare Tree, categoricals as ordinal codes (DEFAULT_TREE_PARAMS)",
            _decision_tree,
            tuple({"min_samples_leaf": s} for s in _LEAF_SHARES),
            dp_leaf_floor=(PGEN_LEAF_SHARE, 1),
        ),
        GlobalModelSpec(
            "naive-bayes",
            "mixed naive Bayes: categorical NB (alpha=1) on categories, Gaussian NB on numbers",
            _naive_bayes,
            tuple({"alpha": a} for a in (10.0, 1.0, 0.1)),
        ),
        GlobalModelSpec(
            "random-forest",
            "scikit-learn random forest of 100 trees (DEFAULT_FOREST_PARAMS)",
            _random_forest,
            tuple({"min_samples_leaf": s} for s in (0.005, 0.001, 1)),
        ),
        GlobalModelSpec(
            "rules",
            "C4.5rules-style ordered rule list read off a tree, generalized by Laplace accuracy",
            _rules,
            tuple({"min_samples_leaf": s} for s in (0.01, 0.002, 5)),
        ),
        GlobalModelSpec(
            "gradient-boosting",
            "scikit-learn HistGradientBoostingClassifier, categorical splits, early stopping (DEFAULT_BOOSTING_PARAMS)",
            _gradient_boosting,
            _BOOSTING_GRID,
            dp_leaf_floor=(PGEN_BOOSTING_LEAF_SHARE, BOOSTING_LEAF_ROWS),
        ),
    )
}


#: Candidates of ``"auto"`` per classification model (each record's ``grid``).
GRIDS: dict[str, list[Mapping[str, Any]]] = {name: list(spec.grid) for name, spec in GLOBAL_MODELS.items()}

#: Per classification model, the fixed rule's leaf floor in a dp study (each record's ``dp_leaf_floor``).
DP_LEAF_FLOORS: dict[str, tuple[float, int]] = {name: spec.dp_leaf_floor for name, spec in GLOBAL_MODELS.items()
                                                 if spec.dp_leaf_floor is not None}


class ReleaseModel(Protocol):
    """A model built from released trees: it only predicts (classes and their probabilities)."""

    def predict(self, X: np.ndarray) -> np.ndarray: ...

    def predict_proba(self, X: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class ReleaseModelSpec:
    """A named global model the miner builds from the released trees themselves, never fitted on rows.

    Attributes
    ----------
    name:
        The name classification studies use to ask for it.
    description:
        One line saying what the model is.
    build:
        ``build(releases)`` returns the model of every accepted owner's release (at least one), each
        its released trees and its report (`modelshare.miner_node.calibrated_nb.OwnerRelease`).
    """

    name: str
    description: str
    build: Callable[[Sequence[OwnerRelease]], ReleaseModel]


def _tree_vote(releases: Sequence[OwnerRelease]) -> TreeVote:
    return TreeVote([tree for trees, _ in releases for tree in trees])


def _calibrated_nb(releases: Sequence[OwnerRelease]) -> CalibratedNB | ClassPriorModel:
    """dpea-nb's model of the releases that carry one (a declined release is its class histogram alone); when every
    owner declined, the calibrated fallback: the class prior their histograms sum to."""
    kept = [(trees, report) for trees, report in releases if declined(report) is None]
    return CalibratedNB(kept) if kept or not releases else build_class_prior(releases)


RELEASE_MODELS: dict[str, ReleaseModelSpec] = {
    spec.name: spec
    for spec in (
        ReleaseModelSpec(
            TREE_VOTE,
            "the released trees' vote: every tree's leaf class distribution summed, the largest predicted",
            _tree_vote,
        ),
        ReleaseModelSpec(
            CALIBRATED_NB,
            "dpea-nb releases' calibrated naive Bayes (root leaf counts, class histograms, the chosen temperature), "
            "averaged over owners",
            _calibrated_nb,
        ),
        ReleaseModelSpec(
            CLASS_PRIOR,
            "the floor: the majority class of the dp releases' noisy class histograms summed "
            "(probabilities: the prior)",
            build_class_prior,
        ),
    )
}

#: Every global model a classification study may list: those fitted on pseudo-data, then those built from releases.
CLASSIFICATION_MODELS: tuple[str, ...] = (*GLOBAL_MODELS, *RELEASE_MODELS)


def build_release_model(name: str, releases: Sequence[OwnerRelease]) -> ReleaseModel:
    """The release model ``name`` (a key of `RELEASE_MODELS`) built from the owners' ``releases``.

    Raises
    ------
    ValueError
        If ``name`` is not a release model (the message lists them), ``releases`` is empty, or the
        model cannot be built from them (``calibrated-nb`` from anything but dpea-nb releases).
    """
    try:
        spec = RELEASE_MODELS[name]
    except KeyError:
        raise ValueError(f"{name!r} is not built from releases; those are: {', '.join(RELEASE_MODELS)}") from None
    return spec.build(releases)


def _spec(name: str) -> GlobalModelSpec:
    """The spec registered as ``name``; a ValueError listing the known names otherwise."""
    if name in RELEASE_MODELS:
        raise ValueError(f"global model {name!r} is built from the released trees, not fitted on rows "
                         "(build_release_model)")
    try:
        return GLOBAL_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown global model {name!r}; known models: {', '.join(GLOBAL_MODELS)}") from None


def make_global_model(name: str, schema: Schema, *, random_state: int | None, **params: Any) -> GlobalModel:
    """A fresh, unfitted global model of kind ``name``.

    Parameters
    ----------
    name:
        A key of `GLOBAL_MODELS`.
    schema:
        Schema of the encoded tables the model will see.
    random_state:
        Seed for the model's randomness (ignored by deterministic models), for reproducible trials.
    **params:
        Hyperparameters overriding the model's defaults, e.g. ``min_samples_leaf=10`` for
        ``decision-tree``.

    Raises
    ------
    ValueError
        If ``name`` is not registered; the message lists the known names.
    """
    return _spec(name).build(schema, random_state, params)


def fit_global_models(
    names: Iterable[str],
    X: np.ndarray,
    y: np.ndarray,
    schema: Schema,
    *,
    random_state: int | None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, GlobalModel]:
    """Fit one global model per name on the same encoded table.

    Parameters
    ----------
    names:
        Keys of `GLOBAL_MODELS`; all are checked before anything is fitted, and a repeated name
        is fitted once.
    X, y:
        The encoded training table (typically pseudo-data regenerated from released trees).
    schema:
        Its schema.
    random_state:
        Seed passed to every model.
    params:
        Optional hyperparameter overrides per model name.

    Returns
    -------
    dict
        Fitted model per name, in the order given.

    Raises
    ------
    ValueError
        For an unknown name (listing the known ones), overrides for a model not in ``names``, or
        an ``X``/``y`` that does not fit ``schema``.
    """
    names = list(dict.fromkeys(names))
    specs = [_spec(name) for name in names]
    overrides = dict(params or {})
    unused = sorted(set(overrides) - set(names))
    if unused:
        raise ValueError(f"params given for models {unused} that are not in names {names}")
    X, y = check_xy(schema, X, y)
    fitted: dict[str, GlobalModel] = {}
    for spec in specs:
        model = spec.build(schema, random_state, overrides.get(spec.name, {}))
        model.fit(X, y)
        fitted[spec.name] = model
    return fitted


# ---------------------------------------------------------------- regression
# The regression models learn from PGEN of DiffPETs regression forests: every row of one released
# leaf carries that leaf's mean and lies uniformly in its region, and the leaves of the T trees (and
# of the owners) overlap. Below the scale of a released leaf a split can only separate the rows of
# one tree from those of another by where PGEN happened to draw them, which is noise; a fully grown
# tree fits it (on White Wine it then does worse than predicting the mean). Every leaf therefore
# holds at least `modelshare.miner_node.dp_pgen.PGEN_LEAF_SHARE` of the rows, the floor of a dp study's global
# decision tree, so that it pools rows of several trees and predicts the average of their means,
# as the forest itself does (on White Wine, shares from 0.5 % to 5 % did about equally well).

#: Hyperparameters of the ``regression-tree`` global model (scikit-learn's CART regressor).
DEFAULT_REGRESSION_TREE_PARAMS: dict[str, Any] = {"min_samples_leaf": PGEN_LEAF_SHARE}

#: Hyperparameters of the regression ``random-forest`` (single-threaded, as `DEFAULT_FOREST_PARAMS`).
DEFAULT_REGRESSION_FOREST_PARAMS: dict[str, Any] = {**DEFAULT_FOREST_PARAMS, "min_samples_leaf": PGEN_LEAF_SHARE}


@dataclass(frozen=True)
class RegressionModelSpec:
    """A named regression global learner.

    Attributes
    ----------
    name:
        The name regression studies use to ask for it.
    description:
        One line saying what the model is.
    build:
        ``build(random_state, params)`` returns a fresh, unfitted regressor, with ``params``
        overriding the model's default hyperparameters.
    grid:
        The candidates ``"auto"`` cross-validates, simplest first.
    """

    name: str
    description: str
    build: Callable[[int | None, Mapping[str, Any]], GlobalModel]
    grid: tuple[Mapping[str, Any], ...]


REGRESSION_MODELS: dict[str, RegressionModelSpec] = {
    spec.name: spec
    for spec in (
        RegressionModelSpec(
            "regression-tree",
            "CART regressor (scikit-learn), categoricals as ordinal codes, leaves of >= PGEN_LEAF_SHARE of the rows",
            lambda random_state, params: DecisionTreeRegressor(
                **{**DEFAULT_REGRESSION_TREE_PARAMS, **params}, random_state=random_state),
            tuple({"min_samples_leaf": s} for s in _LEAF_SHARES),
        ),
        RegressionModelSpec(
            "random-forest",
            "scikit-learn random forest regressor of 100 trees, leaves of >= PGEN_LEAF_SHARE of the rows",
            lambda random_state, params: RandomForestRegressor(
                **{**DEFAULT_REGRESSION_FOREST_PARAMS, **params}, random_state=random_state),
            tuple({"min_samples_leaf": s} for s in (0.02, 0.005, 0.001)),
        ),
        RegressionModelSpec(
            "gradient-boosting",
            "scikit-learn HistGradientBoostingRegressor on ordinal codes, early stopping (DEFAULT_BOOSTING_PARAMS)",
            lambda random_state, params: GradientBoostingRegressor(
                **{**DEFAULT_BOOSTING_PARAMS, **params}, random_state=random_state),
            _BOOSTING_GRID,
        ),
    )
}


#: Candidates of ``"auto"`` per regression model (each record's ``grid``).
REGRESSION_GRIDS: dict[str, list[Mapping[str, Any]]] = {name: list(spec.grid)
                                                        for name, spec in REGRESSION_MODELS.items()}


def make_regression_model(name: str, *, random_state: int | None, **params: Any) -> GlobalModel:
    """A fresh, unfitted regression global model of kind ``name``.

    Parameters
    ----------
    name:
        A key of `REGRESSION_MODELS`.
    random_state:
        Seed of the model's randomness, for reproducible studies.
    **params:
        Hyperparameters overriding the model's defaults, e.g. ``min_samples_leaf=5``.

    Raises
    ------
    ValueError
        If ``name`` is not a regression model; the message lists the known ones.
    """
    try:
        spec = REGRESSION_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown regression global model {name!r}; known models: "
                         f"{', '.join(REGRESSION_MODELS)}") from None
    return spec.build(random_state, params)
