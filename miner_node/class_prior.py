"""The study's class prior: the owners' noisy class histograms summed, and the floor model that predicts it.

Every dp release that spent a share of its epsilon on a class histogram carries it in its report
(`modelshare.common.mechanisms.class_prior`); a release that declined to release trees carries nothing else. The
miner sums the histograms into the study's prior (`study_prior`; reading released numbers only, so it
is post-processing) and offers `ClassPriorModel` as a model: ``predict`` is the prior's majority class,
``predict_proba`` the prior itself (+1 smoothed, so a class no owner reported keeps a small probability).
It is the floor a dp study's models are held to: the ``class-prior`` release model a study may list,
and a candidate of every ``auto`` choice (`modelshare.miner_node.selection.choose`), where it wins when it beats
the grid's best on the same cross-validation folds of the pseudo rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from modelshare.common.mechanisms.class_prior import ClassPrior, class_prior_of
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.trees.tree import Tree

__all__ = ["CLASS_PRIOR", "ClassPriorModel", "declined", "study_prior", "build_class_prior"]

CLASS_PRIOR = "class-prior"


def declined(report: PrivacyReport | None) -> ClassPrior | None:
    """The class prior of a release that declined to release trees (its histogram alone), else None."""
    prior = class_prior_of(report)
    return prior if prior is not None and prior.declined is not None else None


def study_prior(reports: Sequence[PrivacyReport | None], n_classes: int) -> np.ndarray | None:
    """The sum of the releases' noisy class histograms; None when no release carries one of ``n_classes`` counts."""
    found = [prior.estimate for prior in map(class_prior_of, reports) if prior is not None
             and len(prior.counts) == n_classes
             and (prior.refined is None or len(prior.refined) == n_classes)]
    return np.sum(np.asarray(found, dtype=np.float64), axis=0) if found else None


NO_ROWS_FLOOR = "no pseudo rows (every owner declined to release trees): the class prior's majority class"
"""What a study's model is, and what its results say, when every owner declined and its releases carry histograms."""


class ClassPriorModel(ClassifierMixin, BaseEstimator):
    """The floor: every row gets the prior's majority class (the lowest index on ties), probabilities the prior."""

    def __init__(self, counts: Sequence[float] | np.ndarray) -> None:
        self.counts = counts

    @property
    def classes_(self) -> np.ndarray:
        return np.arange(len(self.counts), dtype=np.int64)

    @property
    def majority(self) -> int:
        return int(np.argmax(np.asarray(self.counts, dtype=np.float64)))

    def fit(self, X: np.ndarray, y: np.ndarray) -> ClassPriorModel:
        """Nothing to learn from rows: the prior comes from the released histograms."""
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(np.asarray(X).shape[0], self.majority, dtype=np.int64)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        smoothed = np.asarray(self.counts, dtype=np.float64) + 1.0
        return np.tile(smoothed / smoothed.sum(), (np.asarray(X).shape[0], 1))


def study_floor(reports: Sequence[PrivacyReport | None], n_classes: int) -> ClassPriorModel | None:
    """The floor of a study whose releases are ``reports``: the
    model of their summed class histograms, None without any."""
    prior = study_prior(reports, n_classes)
    return None if prior is None else ClassPriorModel(prior)


def build_class_prior(releases: Sequence[tuple[Sequence[Tree], PrivacyReport | None]]) -> ClassPriorModel:
    """The ``class-prior`` release model of the owners' releases; ValueError when none carries a class histogram."""
    if not releases:
        raise ValueError(f"{CLASS_PRIOR!r} needs at least one release")
    n_classes = releases[0][0][0].schema.n_classes
    counts = study_prior([report for _, report in releases], n_classes)
    if counts is None:
        raise ValueError(f"{CLASS_PRIOR!r} is built from dp releases' class histograms; no release carries one "
                         "(a study with prior_share 0, or not a dp study)")
    return ClassPriorModel(counts)
