"""Release mechanisms: what an owner does to a trained tree before it leaves the site.

One registry name per mechanism. Each returns the released model with a `PrivacyReport` whose
claims `common.audit` can re-check from the released tree alone:

``none``
    the tree as trained (the baseline a site policy can forbid); claims nothing.
``apt``
    anonymity-based tree pruning (Sharkey et al. Fig. 4) to ``k-anonymity:k=K`` or
    ``cl-diversity:c=C,l=L``.
``prune-leaf`` / ``prune-parent``
    Method 1 / Method 2 of Wakabayashi et al. with threshold ``s = k - 1``, from
    ``k-anonymity:k=K``; every released path then holds at least k tuples.
"""

from __future__ import annotations

from typing import Callable

from common.anonymity import (
    KAnonymity,
    Requirement,
    RequirementError,
    parse_requirement,
)
from common.attacks import attack_report
from common.pruning import RequirementUnsatisfiable, apt, prune_leaves, prune_parents
from common.report import PathClaim, PrivacyReport, Release
from common.tree import Disclosure, Tree
from common.tree_rebuild import rebuild

__all__ = ["MECHANISMS", "PrivacyReport", "Release", "RequirementUnsatisfiable", "release_tree"]

Mechanism = Callable[[Tree, "Requirement | None", Disclosure], tuple[Tree, dict]]


def _none(tree: Tree, requirement: Requirement | None, disclosure: Disclosure) -> tuple[Tree, dict]:
    return rebuild(tree.schema, tree.nodes, disclosure), {}


def _apt(tree: Tree, requirement: Requirement | None, disclosure: Disclosure) -> tuple[Tree, dict]:
    assert requirement is not None
    return apt(tree, requirement, disclosure=disclosure), {}


def _k_for_threshold(requirement: Requirement | None, mechanism: str) -> int:
    if not isinstance(requirement, KAnonymity):
        raise RequirementError(str(requirement), f"{mechanism} takes 'k-anonymity:k=K' (threshold s = K - 1)")
    return requirement.k


def _prune_leaf(tree: Tree, requirement: Requirement | None, disclosure: Disclosure) -> tuple[Tree, dict]:
    s = _k_for_threshold(requirement, "prune-leaf") - 1
    return prune_leaves(tree, s, disclosure=disclosure), {"s": s}


def _prune_parent(tree: Tree, requirement: Requirement | None, disclosure: Disclosure) -> tuple[Tree, dict]:
    s = _k_for_threshold(requirement, "prune-parent") - 1
    return prune_parents(tree, s, disclosure=disclosure), {"s": s}


MECHANISMS: dict[str, Mechanism] = {
    "none": _none,
    "apt": _apt,
    "prune-leaf": _prune_leaf,
    "prune-parent": _prune_parent,
}
NEEDS_REQUIREMENT = frozenset({"apt", "prune-leaf", "prune-parent"})


def release_tree(
    tree: Tree,
    mechanism: str = "none",
    *,
    requirement: str | None = None,
    disclosure: Disclosure = "counts",
) -> Release:
    """Apply the named release mechanism to a trained tree.

    Parameters
    ----------
    tree:
        The owner's trained tree (with counts).
    mechanism:
        A name from `MECHANISMS`.
    requirement:
        The requirement string (``k-anonymity:k=10``, ``cl-diversity:c=5,l=3``); required by every
        mechanism but ``none``, which refuses one (it could not honour it).
    disclosure:
        ``counts`` or ``hit_miss``: what the released tree discloses.

    Raises
    ------
    ValueError
        Unknown mechanism or disclosure, or a requirement missing where needed.
    RequirementError
        A malformed requirement, or one the mechanism does not take.
    RequirementUnsatisfiable
        No pruning of this tree meets the requirement; nothing is released.
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; available: {sorted(MECHANISMS)}")
    if disclosure not in ("counts", "hit_miss"):
        raise ValueError(f"disclosure is {disclosure!r}; expected 'counts' or 'hit_miss'")
    parsed: Requirement | None = None
    if mechanism in NEEDS_REQUIREMENT:
        if requirement is None:
            raise ValueError(f"mechanism {mechanism!r} needs a requirement, e.g. 'k-anonymity:k=10'")
        parsed = parse_requirement(requirement, n_classes=tree.schema.n_classes)
    elif requirement is not None:
        raise ValueError(f"mechanism {mechanism!r} releases the tree as trained and cannot meet {requirement!r}")
    released, extra = MECHANISMS[mechanism](tree, parsed, disclosure)
    claims: tuple[PathClaim, ...] = ()
    if parsed is not None:
        claims = tuple(PathClaim(i, released.nodes[i].total, str(parsed)) for i in released.leaves)
    guarantee = "none" if parsed is None else f"every released path meets {parsed}"
    report = PrivacyReport(
        mechanism=mechanism,
        parameters={"disclosure": disclosure, **extra},
        guarantee=guarantee,
        requirement=None if parsed is None else str(parsed),
        claims=claims,
        attacks=attack_report(released),
    )
    return Release(released, report)
