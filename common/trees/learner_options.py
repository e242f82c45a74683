"""The names and options of the owners' tree learners: what a study, a command or a config may say, checked
without importing the learners themselves (the study's decoder and the miner's verifier need the names, not
scikit-learn)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from modelshare.common.params import check_choice

__all__ = ["AUTO_LEARNER", "CATEGORY_SPLITS", "GROUPING_PARAMETERS", "LEARNER_NAMES", "PAIRINGS", "REQUIREMENT_AWARE",
           "UNPRUNED", "admissible_params"]

CATEGORY_SPLITS = ("grouped", "binary", "either")
"""How a categorical attribute is split: a branch per (grouped) category, two groups, or the better of the two."""

PAIRINGS = ("deferred", "eager")
"""``eager``: a failing category is grouped at the first node whose criterion picks that attribute;
``deferred``: such a grouping only where no ungrouped split
lets the leaves classify clearly more (`_DeferringGrower`)."""

AUTO_LEARNER = "auto"
"""Not a learner: the name that asks the owner to choose one by cross-validation of its releases
(`modelshare.common.mechanisms.learner_choice`); the admissible options then apply to its admissible candidates."""

LEARNER_NAMES: tuple[str, ...] = ("admissible", "cart", "multiway", AUTO_LEARNER)
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
