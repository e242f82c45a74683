"""`train_and_release`: the one train-then-release path of the owner's daemon, ``modelshare release`` and the pipeline.

A whole-release mechanism trains its own trees from the rows; a tree mechanism releases the tree of the
study's local learner, or, for the learner ``auto``, of the learner the owner chose by cross-validation on
its own rows (`modelshare.common.mechanisms.learner_choice`), which the release then states as its ``learner``
parameter. The papers' numbers are measured on this same path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms.class_prior import DEFAULT_PRIOR_SHARE
from modelshare.common.mechanisms.learner_choice import AUTO_LEARNER, Candidate, choose_learner, trained_params
from modelshare.common.mechanisms.registry import get
from modelshare.common.mechanisms.release import local_learner, release
from modelshare.common.privacy.noise import Randomness
from modelshare.common.privacy.report import Release
from modelshare.common.privacy.requirements import Requirement
from modelshare.common.trees.tree import Disclosure, Tree

__all__ = ["ADMISSIBLE_ONLY", "Trained", "train_and_release"]

ADMISSIBLE_ONLY = frozenset({"pairing", "category_split", "confidence"})
"""Training options only the admissible learner takes: under ``auto`` they go to its candidates alone."""


@dataclass(frozen=True)
class Trained:
    """What `train_and_release` made: the release, the local tree a tree mechanism released from (None else), and
    the learner the owner chose under ``auto`` (None else)."""

    release: Release
    tree: Tree | None
    chosen: Candidate | None = None


def train_and_release(mechanism: str, schema: Schema | RegressionSchema, X: np.ndarray, y: np.ndarray, *,
                      requirement: str | Requirement | None, disclosure: Disclosure, learner: str,
                      learner_params: Mapping[str, object], max_depth: int | None, seed: int | None,
                      noise: int | np.random.Generator | Randomness | None = None,
                      allow_data_derived_domain: bool = False, prior_share: float = DEFAULT_PRIOR_SHARE) -> Trained:
    """Train on an owner's rows and release as ``mechanism`` asks.

    A whole-release mechanism trains its own trees of depth ``max_depth`` (default: its record's) with
    ``noise`` (None, what owners use: fresh OS entropy) and, under ``dp``, ``prior_share`` of its epsilon on the
    class histogram (`release`); a tree mechanism trains ``learner``
    (`local_learner`, seeded by ``seed``) with ``learner_params`` and releases that tree. ``learner`` ``auto``
    first chooses among `learner_choice.CANDIDATES` by cross-validation of their releases on these rows.

    Raises
    ------
    RequirementUnsatisfiable, RequirementError, ValueError
        As `release` and `local_learner` raise them.
    """
    record = get(mechanism)
    if record.whole_release:
        depth = max_depth or record.default_max_depth
        return Trained(release(mechanism, requirement=requirement, schema=schema, X=X, y=y, max_depth=depth,
                               disclosure=disclosure, random_state=noise,
                               allow_data_derived_domain=allow_data_derived_domain, prior_share=prior_share), None)
    assert isinstance(schema, Schema)  # a regression schema has only whole-release mechanisms (the registry)
    if learner != AUTO_LEARNER:
        tree = local_learner(learner, schema, mechanism, requirement=requirement, disclosure=disclosure,
                             random_state=seed, **learner_params).fit(X, y).tree_
        return Trained(release(mechanism, tree=tree, requirement=requirement, disclosure=disclosure), tree)
    base = {k: v for k, v in learner_params.items() if k not in ADMISSIBLE_ONLY}
    admissible = {k: v for k, v in learner_params.items() if k in ADMISSIBLE_ONLY}
    chosen = choose_learner(mechanism, schema, X, y, requirement=requirement, disclosure=disclosure,
                            base_params=base, admissible_params=admissible, seed=seed)
    tree = local_learner(chosen.learner, schema, mechanism, requirement=requirement, disclosure=disclosure,
                         random_state=seed, **trained_params(chosen, base, admissible)).fit(X, y).tree_
    made = release(mechanism, tree=tree, requirement=requirement, disclosure=disclosure)
    stated = replace(made.report, parameters={**made.report.parameters, "learner": chosen.describe()})
    return Trained(replace(made, report=stated), tree, chosen)
