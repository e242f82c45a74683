"""``toy-histogram``: an example release mechanism shipped as a plugin distribution, and everything it needs.

The mechanism releases T one-leaf trees, each the owner's class histogram plus discrete Laplace(T / eps)
noise per count from the secret stream (sensitivity 1 under add/remove one row, T-fold sequential
composition: eps-DP), clamped at 0. Its contract with modelshare is the one `RECORD`: the trainer
(`train`), the checks `modelshare audit` and the miner re-run on every release (`audit_checks`: the
stated noise scale is T / eps, counts are whole and clamped as stated), and its own pseudo-data step
(`pseudo_rows`), which the miner runs in place of PGEN because a histogram describes no partition of the
attribute space. The distribution's entry point (``modelshare.mechanisms``, pyproject.toml) registers
`RECORD` in every process where it is installed; `MODELSHARE_MECHANISMS` lets a checkout that does not
install it name the module in ``MODELSHARE_PLUGINS`` instead. Nothing in modelshare names this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms.registry import Mechanism, PseudoData
from modelshare.common.privacy.checks import Check, integer_counts_check, recomputed
from modelshare.common.privacy.noise import Randomness, noisy_counts
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.privacy.requirements import DP
from modelshare.common.trees.rebuild import release_leaf_counts
from modelshare.common.trees.tree import Node, Tree

NAME = "toy-histogram"
POST_PROCESSING = "integer noisy class histogram clamped at 0"


def train(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
          randomness: Randomness) -> tuple[list[Tree], dict[str, Any]]:
    """T noisy one-leaf trees: the class histogram plus discrete Laplace(T / eps) per count (the secret stream)."""
    scale = requirement.trees / requirement.epsilon
    true = np.bincount(np.asarray(y, dtype=np.int64), minlength=schema.n_classes)
    root = [Node.from_counts(np.zeros(schema.n_classes))]
    trees = [release_leaf_counts(schema, root, [0], noisy_counts(true, scale, randomness.secret)[None, :])
             for _ in range(requirement.trees)]
    return trees, {"epsilon": requirement.epsilon, "trees": requirement.trees, "depth": max(int(depth), 1),
                   "noise_scale": scale, "post_processing": POST_PROCESSING}


def audit_checks(trees: Sequence[Tree], report: PrivacyReport, requirement: DP) -> list[Check]:
    """The noise scale recomputed from (epsilon, trees), and whole-number counts."""
    wrong = recomputed(report.parameters, {"noise_scale": requirement.trees / requirement.epsilon})
    return [Check("noise scale recomputed", not wrong, "; ".join(wrong) or "trees / epsilon"),
            integer_counts_check(trees, report, POST_PROCESSING)]


PSEUDO_ROWS = "toy-histogram: rows drawn from the averaged noisy class histogram, attributes uniform on the domain"


def pseudo_rows(trees: Sequence[Tree], report: PrivacyReport, scale: float, rng: np.random.Generator,
                class_assignment: str) -> tuple[np.ndarray, np.ndarray]:
    """Its own pseudo-data step: ``scale`` times the mean released total, classes by the mean histogram.

    The histogram says nothing about the attributes, so they are drawn uniformly over the schema's public
    domain (the miner's `uniform_rows`, imported here because only the miner's process runs this step).
    """
    from modelshare.miner_node.pgen import uniform_rows

    histograms = [tree.root.counts for tree in trees]
    if any(h is None for h in histograms):  # the miner re-audited the release, so this is a release of another kind
        raise ValueError("a toy-histogram release states its class counts (disclosure 'counts')")
    counts = np.mean(np.asarray(histograms, dtype=np.float64), axis=0)
    n = max(int(round(scale * counts.sum())), 1)
    share = counts / counts.sum() if counts.sum() > 0 else np.full(counts.shape, 1 / counts.size)
    return uniform_rows(trees[0].schema, n, rng), rng.choice(counts.size, size=n, p=share).astype(np.int64)


RECORD = Mechanism(NAME, "dp", "a noisy class histogram per tree (the example plugin)", train=train,
                   audit_checks=audit_checks, default_requirement="dp:epsilon=1,trees=2", default_max_depth=1,
                   dp_audit_target="modelshare.common.audit.dp.rdt:laplace_rdt_target",
                   pseudo_data=PseudoData(pseudo_rows, PSEUDO_ROWS))
MODELSHARE_MECHANISMS = (RECORD,)
