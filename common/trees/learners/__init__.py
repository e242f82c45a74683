"""Local tree learners an owner trains on its private table, by registry name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.trees.learner_options import (
    AUTO_LEARNER,
    CATEGORY_SPLITS,
    GROUPING_PARAMETERS,
    LEARNER_NAMES,
    PAIRINGS,
    REQUIREMENT_AWARE,
    UNPRUNED,
    admissible_params,
)
from modelshare.common.trees.learners.admissible import AdmissibleTreeClassifier, LeafRule
from modelshare.common.trees.learners.cart import CartTreeClassifier
from modelshare.common.trees.learners.multiway import MultiwayTreeClassifier
from modelshare.common.trees.learners.public_cuts import OnPublicCuts
from modelshare.common.trees.tree import Tree

__all__ = ["AdmissibleTreeClassifier", "CartTreeClassifier", "MultiwayTreeClassifier", "OnPublicCuts", "TreeLearner",
           "LEARNERS", "AUTO_LEARNER", "LEARNER_NAMES",
           "REQUIREMENT_AWARE", "CATEGORY_SPLITS", "PAIRINGS", "GROUPING_PARAMETERS", "UNPRUNED",
           "admissible_params",
           "make_learner"]

LEARNERS: dict[str, Callable[..., Any]] = {"admissible": AdmissibleTreeClassifier, "cart": CartTreeClassifier,
                                           "multiway": MultiwayTreeClassifier}

class TreeLearner(Protocol):
    """What every local learner is: ``fit`` on encoded rows, then the trained `Tree` as ``tree_``."""

    tree_: Tree

    def fit(self, X: np.ndarray, y: np.ndarray) -> Any: ...

    def predict(self, X: np.ndarray) -> np.ndarray: ...


def make_learner(name: str, schema: Schema, *, random_state: int | None = None, public_cuts: bool = False,
                 leaf_rule: LeafRule | None = None, **params: Any) -> TreeLearner:
    """Build the named local learner; ``random_state`` is passed to learners that use one.

    ``public_cuts`` splits numeric attributes only at the schema's public cut points
    (`OnPublicCuts`): what a tree released under a privacy requirement needs. ``leaf_rule`` is
    what every leaf of a requirement-aware learner (`REQUIREMENT_AWARE`) must pass; build it with
    `modelshare.common.privacy.requirements.path_rule`, or let
    `modelshare.common.mechanisms.release.local_learner` do it.
    """
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; available: {sorted(LEARNERS)}")

    def build(on: Schema) -> TreeLearner:
        if name == "cart":
            return CartTreeClassifier(on, random_state=random_state, **params)
        if name == "admissible":
            return AdmissibleTreeClassifier(on, leaf_rule=leaf_rule, **params)
        return MultiwayTreeClassifier(on, **params)

    return OnPublicCuts(build, schema) if public_cuts else build(schema)
