"""What the miner makes of a dpea-nb release: its calibrated naive Bayes, and its pseudo rows.

A dpea-nb release (`modelshare.common.mechanisms.dpea_nb`) describes a model, not a partition: per root leaf, the
class counts and the class histograms of every other attribute, and the temperature the owner chose.

* ``calibrated-nb`` (`CalibratedNB`, a release model beside ``tree-vote``): each owner's
  `NaiveBayesRelease` posterior at its stated temperature, averaged over the owners. It reads no pseudo row.
* *PGEN for dpea-nb* (`nb_pseudo_data`): PGEN's rows of the root tree (its leaf counts, ``scale`` times
  their total, at most `modelshare.miner_node.dp_pgen.MAX_DP_PGEN_ROWS`), every histogram attribute redrawn from its
  leaf's class histogram (a bin, then a value inside it: `HistogramBins.values`), and each row labelled
  with the calibrated model's most probable class. Plain PGEN would draw those attributes uniformly
  and the global models would see only the root's partition. *Why the most probable class*: the
  temperature is chosen for accuracy, not for calibrated probabilities, so drawing labels from its
  posterior spreads the rows' classes more than the owner's rows are spread; on Adult at eps = 1
  (bench/dp_eps1_probe.py --calibration temperature, 5 seeds, pseudo rows x10) gradient boosting learned
  0.8465 from the argmax labels and 0.8440 from drawn ones (AUC 0.891 against 0.898: EXPERIMENTS.md).
  All of it is post-processing of the release.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import numpy as np

from modelshare.common.mechanisms.dpea_nb import MECHANISM as DPEA_NB
from modelshare.common.mechanisms.dpea_nb import RELEASE_MODEL, NaiveBayesRelease
from modelshare.common.mechanisms.registry import PseudoData
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.trees.learners._data import check_x
from modelshare.common.trees.tree import Tree
from modelshare.miner_node.dp_pgen import dp_pgen_scale
from modelshare.miner_node.pgen import ClassAssignment, pgen

__all__ = ["CALIBRATED_NB", "NB_PSEUDO_ROWS", "PSEUDO_DATA", "CalibratedNB", "OwnerRelease", "is_nb_release",
           "nb_model", "nb_pseudo_data"]

CALIBRATED_NB = RELEASE_MODEL
"""The release model's name among a classification study's global models."""

NB_PSEUDO_ROWS = ("dpea-nb: attributes the root leaves free drawn from each release's per-leaf class histograms, "
                  "rows labelled by its calibrated naive Bayes (the study's off_path does not apply)")
"""What a dpea-nb study's results say in place of the off-path rule (`nb_pseudo_data`)."""

OwnerRelease = tuple[Sequence[Tree], "PrivacyReport | None"]
"""One owner's released trees and the report that came with them."""


def is_nb_release(report: PrivacyReport | None) -> TypeGuard[PrivacyReport]:
    """True for a dpea-nb release: a model, not a partition, whose pseudo rows are `nb_pseudo_data`'s."""
    return report is not None and report.mechanism == DPEA_NB


def nb_model(trees: Sequence[Tree], report: PrivacyReport | None) -> NaiveBayesRelease:
    """The calibrated naive Bayes a dpea-nb release describes; ValueError naming the mechanism otherwise."""
    mechanism = None if report is None else report.mechanism
    if not is_nb_release(report):
        raise ValueError(f"{CALIBRATED_NB!r} is built from {DPEA_NB!r} releases; this one is from {mechanism!r}")
    return NaiveBayesRelease(trees, report.parameters)


class CalibratedNB:
    """The owners' calibrated naive Bayes posteriors, averaged; ``predict`` and ``predict_proba`` (module docstring)."""

    def __init__(self, releases: Sequence[OwnerRelease]) -> None:
        if not releases:
            raise ValueError(f"{CALIBRATED_NB!r} needs at least one {DPEA_NB!r} release")
        self.models = [nb_model(trees, report) for trees, report in releases]
        self.schema = self.models[0].schema
        self.classes_ = np.arange(self.schema.n_classes, dtype=np.int64)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Per row, the mean of the owners' calibrated posteriors; shape ``(rows, classes)``."""
        X = check_x(self.schema, X)
        proba: np.ndarray = np.mean([model.proba(X) for model in self.models], axis=0)
        return proba

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Per row, the most probable class (the lowest index on ties)."""
        labels: np.ndarray = np.argmax(self.predict_proba(X), axis=1).astype(np.int64)
        return labels


def nb_pseudo_data(trees: Sequence[Tree], report: PrivacyReport, scale: float, rng: np.random.Generator,
                   class_assignment: ClassAssignment = "exact") -> tuple[np.ndarray, np.ndarray]:
    """PGEN for a dpea-nb release: root rows, histogram attributes redrawn, calibrated labels (module docstring)."""
    model = nb_model(trees, report)
    root = model.root
    scale = dp_pgen_scale(scale, DPEA_NB, [root])
    X, y = pgen(root, rows=None if scale == 1.0 else int(round(scale * root.root.total)), rng=rng,
                class_assignment=class_assignment)
    leaf = model.leaf_index(X)
    rows = np.flatnonzero(leaf >= 0)
    for a, table in zip(model.attributes, model.histograms, strict=False):
        cumulative = np.cumsum(table[leaf[rows], :, y[rows]], axis=1)  # (rows, bins) for each row's class
        codes = np.minimum((rng.random(rows.size)[:, None] > cumulative).sum(axis=1), cumulative.shape[1] - 1)
        X[rows, a] = model.bins.values(a, codes, rng)
    return X, np.argmax(model.proba(X), axis=1).astype(np.int64)


# the ignore below: class_assignment: the study's str, checked
PSEUDO_DATA = PseudoData(nb_pseudo_data, NB_PSEUDO_ROWS)  # type: ignore[arg-type]
"""dpea-nb's pseudo-data step, which its registry record names (`modelshare.common.mechanisms.registry.PseudoData`)."""
