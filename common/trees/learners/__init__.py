"""Local tree learners an owner trains on its private table, by registry name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.params import check_choice
from modelshare.common.trees.learners.admissible import CATEGORY_SPLITS, PAIRINGS, AdmissibleTreeClassifier, LeafRule
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

AUTO_LEARNER = "auto"
"""Not a learner: the name that asks the owner to choose one by cross-validation of its releases
(`modelshare.common.mechanisms.learner_choice`); the admissible options then apply to its admissible candidates."""

LEARNER_NAMES: tuple[str, ...] = (*sorted(LEARNERS), AUTO_LEARNER)
"""Every name a study or command may give as its learner."""

#: Learners that grow to the release's requirement and so take a ``leaf_rule`` (the others ignore it).
REQUIREMENT_AWARE: frozenset[str] = frozenset({"admissible"})

#: The admissible learner's category-grouping parameters and their values (`AdmissibleTreeClassifier`).
GROUPING_PARAMETERS: dict[str, tuple[str, ...]] = {"pairing": PAIRINGS, "category_split": CATEGORY_SPLITS}

UNPRUNED = "none"
"""The ``confidence`` a user writes for an admissible tree released as grown (the learner's ``confidence=None``)."""


def admissible_params(learner: str, *, pairing: str | None = None, category_split: str | None = None,
                      confidence: float | str | None = None, spell: Callable[[str], str] = str) -> dict[str, Any]:
    """The admissible learner's options that are set (not None), checked, as its keyword arguments.

    ``pairing`` and ``category_split`` are checked against `GROUPING_PARAMETERS`; ``confidence`` is C4.5's
    pruning confidence strictly between 0 and 1, or `UNPRUNED` for the grown tree (the requirement holds
    by construction either way; APT and the audit re-check it). Only the ``admissible`` learner takes them,
    so setting one for another learner is an error rather than a setting silently ignored. ``spell`` says a
    parameter's name as the caller's user wrote it (a command-line flag, a config key).

    Raises
    ------
    ValueError
        A value not among its choices or out of range, or an option set for another learner.
    """
    chosen: dict[str, Any] = {key: check_choice(spell(key), value, GROUPING_PARAMETERS[key])
                              for key, value in (("pairing", pairing), ("category_split", category_split))
                              if value is not None}
    if confidence == UNPRUNED:
        chosen["confidence"] = None
    elif confidence is not None:
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
            raise ValueError(f"{spell('confidence')} must lie strictly between 0 and 1, or be {UNPRUNED!r}, "
                             f"got {confidence!r}")
        chosen["confidence"] = float(confidence)
    if chosen and learner not in ("admissible", AUTO_LEARNER):
        said = " and ".join(spell(key) for key in chosen)
        raise ValueError(f"{said} {'applies' if len(chosen) == 1 else 'apply'} to the admissible learner only, "
                         f"not to learner {learner!r}")
    return chosen


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
