"""Attacks on a released tree (Wakabayashi et al. §2.2, §3.1; docs/paper-notes.md §3.2).

A leaf reads like an anonymized QI-group: its path is the quasi-identifier and the class is the
sensitive value. Each attack counts the leaves it breaks and the training users it exposes:

* uniqueness: a leaf holding exactly one tuple exposes that user's class;
* homogeneity: a leaf whose tuples all share one class (z > 0 tuples, z >= ``min_size``) exposes all
  of them; every uniqueness leaf is also homogeneous at the default ``min_size=1``;
* background knowledge: an attacker who knows the classes of ``b`` co-members of a leaf sees the
  remaining counts; a leaf falls once ``b >= n - max_y n_y`` (its misses), exposing ``max_y n_y``
  users. ``b = 0`` is the homogeneity attack. This formalization is docs/paper-notes.md's choice; the paper
  gives only examples.

All three need only each leaf's size and largest class count, i.e. hit and miss, so they work on
either disclosure. The miner computes them from the released statistics; the owner can compute
them from its training table routed through the released tree (rows reaching no released leaf,
e.g. in a region Method 1 deleted, are exposed by no leaf).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from modelshare.common.privacy.requirements import leaf_stats
from modelshare.common.trees.tree import Tree

__all__ = ["AttackCounts", "AttackReport", "leaf_hit_miss", "attack_report", "ensemble_attack_report"]


@dataclass(frozen=True)
class AttackCounts:
    """Leaves an attack breaks and users it exposes."""

    leaves: int
    users: float


@dataclass(frozen=True)
class AttackReport:
    """The three attacks on one tree; ``background[b-1]`` is for an attacker knowing ``b`` co-members."""

    uniqueness: AttackCounts
    homogeneity: AttackCounts
    background: tuple[AttackCounts, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "uniqueness": asdict(self.uniqueness),
            "homogeneity": asdict(self.homogeneity),
            "background": [{"known": b + 1, **asdict(c)} for b, c in enumerate(self.background)],
        }


def leaf_hit_miss(tree: Tree, X: np.ndarray | None = None,
                  y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per leaf (in `Tree.leaves` order): the largest class count and the rest.

    From the released statistics when ``X`` is None; otherwise from the rows of ``(X, y)`` that
    reach each leaf of the released tree (the owner's view of its own training table).
    """
    if X is None:
        stats = leaf_stats(tree)
        return stats.hit, stats.miss
    if y is None or len(X) != len(y):
        raise ValueError("the owner's view needs X and y of the same length")
    leaves = np.array(tree.leaves, dtype=np.int64)
    position = np.full(len(tree.nodes), -1, dtype=np.int64)
    position[leaves] = np.arange(leaves.size)
    where = position[tree.apply(X)]
    inside = where >= 0
    n_classes = tree.schema.n_classes
    table = np.bincount(where[inside] * n_classes + np.asarray(y)[inside], minlength=leaves.size * n_classes)
    table = table.reshape(leaves.size, n_classes).astype(np.float64)
    hit = table.max(axis=1)
    return hit, table.sum(axis=1) - hit


def attack_report(
    tree: Tree,
    X: np.ndarray | None = None,
    y: np.ndarray | None = None,
    *,
    min_size: int = 1,
    max_known: int = 2,
) -> AttackReport:
    """Uniqueness, homogeneity and background-knowledge counts for ``tree``.

    Parameters
    ----------
    tree:
        The released tree.
    X, y:
        The owner's training table; None to attack the released statistics alone.
    min_size:
        Smallest homogeneous leaf counted (1 in Wakabayashi et al.; 2 in the kanon-rdt appendix).
    max_known:
        Background knowledge levels reported: ``b = 1 .. max_known`` known co-members.
    """
    hit, miss = leaf_hit_miss(tree, X, y)
    total = hit + miss
    unique = total == 1
    homogeneous = (miss == 0) & (total >= max(min_size, 1))
    background = []
    for b in range(1, max_known + 1):
        broken = (total > 0) & (miss <= b)
        background.append(AttackCounts(int(broken.sum()), float(hit[broken].sum())))
    return AttackReport(
        uniqueness=AttackCounts(int(unique.sum()), float(unique.sum())),
        homogeneity=AttackCounts(int(homogeneous.sum()), float(total[homogeneous].sum())),
        background=tuple(background),
    )


def _sum_counts(counts: Sequence[AttackCounts]) -> AttackCounts:
    return AttackCounts(sum(c.leaves for c in counts), float(sum(c.users for c in counts)))


def ensemble_attack_report(trees: Sequence[Tree]) -> AttackReport:
    """The attacks on every tree of a released ensemble, summed over the trees.

    Each tree is attacked on its own released statistics (an attacker may read any of them), so
    leaves add up; users add up too, which counts a user once per tree that exposes them (each
    k-AnonToRdt tree counts its own sample, so distinct users cannot be told apart from the
    release). For one tree this is `attack_report` of that tree.
    """
    reports = [attack_report(tree) for tree in trees]
    return AttackReport(
        uniqueness=_sum_counts([r.uniqueness for r in reports]),
        homogeneity=_sum_counts([r.homogeneity for r in reports]),
        background=tuple(_sum_counts(level) for level in zip(*(r.background for r in reports), strict=False)),
    )
