"""What a release claims (`PrivacyReport`) and the released model it travels with (`Release`).

A report is made to be re-checked, not believed: it names the mechanism and its parameters, the
requirement it claims to meet, for path requirements one claim per released path (the path's leaf
and size), and the attack counts on the released statistics. `modelshare.common.audit.release` re-derives all of it
from the released trees alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from modelshare.common.privacy.attacks import AttackCounts, AttackReport
from modelshare.common.trees.regression import RegressionForest, RegressionTree
from modelshare.common.trees.tree import Tree

__all__ = ["PathClaim", "PrivacyReport", "Release"]


@dataclass(frozen=True)
class PathClaim:
    """One released path's claim: its leaf (node index), its size, and the requirement it meets."""

    leaf: int
    tuples: float
    requirement: str

    def to_dict(self) -> dict[str, Any]:
        return {"leaf": self.leaf, "tuples": self.tuples, "requirement": self.requirement}


@dataclass(frozen=True)
class PrivacyReport:
    """A release's claims.

    Parameters
    ----------
    mechanism:
        Registry name of the release mechanism.
    parameters:
        The mechanism's parameters (e.g. the pruning threshold ``s``).
    guarantee:
        The guarantee in words; ``"none"`` for the baseline.
    requirement:
        The requirement string the release claims to meet, or None when nothing is claimed: a
        path requirement every path meets, or a ``dps:`` guarantee of the whole ensemble.
    claims:
        One claim per released path under a path requirement; none under ``dps``, whose
        guarantee is about the ensemble (its audit re-checks the counts and recomputes delta).
    attacks:
        Attack counts on the released statistics, as the owner computed them (summed over the
        trees of an ensemble, `modelshare.common.privacy.attacks.ensemble_attack_report`).
    """

    mechanism: str
    parameters: dict[str, Any] = field(default_factory=dict)
    guarantee: str = "none"
    requirement: str | None = None
    claims: tuple[PathClaim, ...] = ()
    attacks: AttackReport | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "parameters": dict(self.parameters),
            "guarantee": self.guarantee,
            "requirement": self.requirement,
            "claims": [c.to_dict() for c in self.claims],
            "attacks": None if self.attacks is None else self.attacks.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyReport:
        """Parse the dictionary form; a missing or mistyped field raises ValueError naming it."""
        try:
            attacks = data.get("attacks")
            return cls(
                mechanism=str(data["mechanism"]),
                parameters=dict(data.get("parameters") or {}),
                guarantee=str(data.get("guarantee", "none")),
                requirement=None if data.get("requirement") is None else str(data["requirement"]),
                claims=tuple(
                    PathClaim(int(c["leaf"]), float(c["tuples"]), str(c["requirement"]))
                    for c in data.get("claims") or ()
                ),
                attacks=None if attacks is None else _attacks_from_dict(attacks),
            )
        except KeyError as exc:
            raise ValueError(f"privacy report: field {exc.args[0]!r} is missing") from None
        except (TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"privacy report: malformed field ({exc})") from None


def _counts(data: Mapping[str, Any]) -> AttackCounts:
    return AttackCounts(int(data["leaves"]), float(data["users"]))


def _attacks_from_dict(data: Mapping[str, Any]) -> AttackReport:
    return AttackReport(
        uniqueness=_counts(data["uniqueness"]),
        homogeneity=_counts(data["homogeneity"]),
        background=tuple(_counts(b) for b in data.get("background") or ()),
    )


@dataclass(frozen=True)
class Release:
    """A released model over one schema, and its privacy report.

    Tree mechanisms (APT, pruning) release one tree; the whole-release mechanisms release an
    ensemble; a regression release (a numeric target) releases `RegressionTree`s. All travel the
    same way (a ``ModelMessage`` carries the list, as ``trees`` or ``regression_trees``). A list is
    stored as a tuple. `tree` is the convenience for single-tree releases and refuses an ensemble;
    `classification_trees` and `forest` are the typed views of each kind and refuse the other.
    """

    trees: tuple[Tree, ...] | tuple[RegressionTree, ...]
    report: PrivacyReport

    def __post_init__(self) -> None:
        trees = tuple(self.trees) if isinstance(self.trees, (list, tuple)) else None
        if not trees or not (all(isinstance(t, Tree) for t in trees)
                             or all(isinstance(t, RegressionTree) for t in trees)):
            raise TypeError(f"Release.trees must be a non-empty sequence of Trees (or of RegressionTrees), "
                            f"got {self.trees!r:.80}")
        if any(t.schema != self.trees[0].schema for t in self.trees):
            raise ValueError("Release.trees must share one schema")
        object.__setattr__(self, "trees", trees)

    @property
    def task(self) -> str:
        """``classification`` or ``regression``: what the released trees predict."""
        return "regression" if isinstance(self.trees[0], RegressionTree) else "classification"

    @property
    def released_total(self) -> float:
        """The tuples the release discloses over all its trees: each root's total (a regression tree's
        clamped noisy counts). 0 means it carries nothing PGEN could regenerate rows from."""
        return math.fsum((t.tree if isinstance(t, RegressionTree) else t).root.total for t in self.trees)

    @property
    def tree(self) -> Tree:
        """The released tree of a single-tree classification release; ValueError for an ensemble."""
        if len(self.trees) != 1 or not isinstance(self.trees[0], Tree):
            raise ValueError(f"this release is an ensemble of {len(self.trees)} trees; use .trees")
        return self.trees[0]

    @property
    def classification_trees(self) -> tuple[Tree, ...]:
        """The released trees of a classification release (`trees`, typed); ValueError for a regression release."""
        trees = tuple(t for t in self.trees if isinstance(t, Tree))
        if len(trees) != len(self.trees):
            raise ValueError("this release holds regression trees; .forest is its view")
        return trees

    @property
    def forest(self) -> RegressionForest:
        """The released regression forest; ValueError for a classification release."""
        trees = tuple(t for t in self.trees if isinstance(t, RegressionTree))
        if len(trees) != len(self.trees):
            raise ValueError("this release holds classification trees; .forest is the view of a regression release")
        return RegressionForest(trees[0].schema, trees)
