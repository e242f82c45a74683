"""Release mechanisms: what an owner does to a trained tree before it leaves the site.

Each mechanism has one registry name and returns the released model with a `PrivacyReport`
describing what it claims. The anonymity issue adds `apt`, `prune-leaf` and `prune-parent`; the
DP issues add the random-tree mechanisms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from common.tree import Disclosure, Tree

__all__ = ["PrivacyReport", "Release", "MECHANISMS", "release_tree"]


@dataclass(frozen=True)
class PrivacyReport:
    """What a release claims: the mechanism, its parameters, and the guarantee in words."""

    mechanism: str
    parameters: dict[str, Any] = field(default_factory=dict)
    guarantee: str = "none"


@dataclass(frozen=True)
class Release:
    """A released model and its privacy report."""

    tree: Tree
    report: PrivacyReport


def _release_none(tree: Tree, disclosure: Disclosure) -> Release:
    """Release the tree as trained: the no-privacy baseline that a site policy can forbid."""
    released = tree if disclosure == "counts" else tree.to_hit_miss()
    return Release(released, PrivacyReport("none", {"disclosure": disclosure}, "none"))


MECHANISMS: dict[str, Callable[[Tree, Disclosure], Release]] = {"none": _release_none}


def release_tree(tree: Tree, mechanism: str = "none", *, disclosure: Disclosure = "counts") -> Release:
    """Apply the named release mechanism to a trained tree."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; available: {sorted(MECHANISMS)}")
    if disclosure not in ("counts", "hit_miss"):
        raise ValueError(f"disclosure is {disclosure!r}; expected 'counts' or 'hit_miss'")
    return MECHANISMS[mechanism](tree, disclosure)
