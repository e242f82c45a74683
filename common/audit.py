"""Re-derive a release's privacy claims from the released tree alone (`modelshare audit`).

The audit trusts nothing the release computed: it parses the claimed requirement again, checks it
on every released leaf's own statistics, checks that the claims cover exactly the released paths
with their true sizes, checks that inner nodes disclose nothing beyond the leaves (exact sums
under counts, Sharkey et al.'s Eq. 1 under hit/miss, so no pruned tuple can be recovered by
subtraction), and recomputes the attack counts to compare with the reported ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from common.anonymity import LeafStats, RequirementError, leaf_stats, parse_requirement
from common.attacks import AttackReport, attack_report
from common.report import PrivacyReport
from common.tree import Tree, counts_match

__all__ = ["Check", "PathAudit", "AuditResult", "audit"]


@dataclass(frozen=True)
class Check:
    """One audited claim: its name, whether it holds, and why."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class PathAudit:
    """One released path: its leaf, description, disclosed statistics and whether it meets the claim."""

    leaf: int
    path: str
    tuples: float
    hit: float
    miss: float
    passed: bool


@dataclass(frozen=True)
class AuditResult:
    """Every check, the attack counts recomputed from the released statistics, and every path.

    ``paths`` (with a readable description each) is built on first use: the miner audits every
    submission and needs only the verdict.
    """

    checks: tuple[Check, ...]
    attacks: AttackReport
    tree: Tree = field(repr=False)
    stats: LeafStats = field(repr=False)
    meets: np.ndarray = field(repr=False)

    @cached_property
    def paths(self) -> tuple[PathAudit, ...]:
        descriptions = {p.leaf: p.describe(self.tree.schema) for p in self.tree.paths()}
        s = self.stats
        return tuple(
            PathAudit(int(i), descriptions[int(i)], float(t), float(h), float(m), bool(o))
            for i, t, h, m, o in zip(s.leaves, s.total, s.hit, s.miss, self.meets)
        )

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "checks": [vars(c) for c in self.checks],
            "paths": [vars(p) for p in self.paths],
            "attacks": self.attacks.to_dict(),
        }


def _implied_counts(tree: Tree) -> np.ndarray:
    """Per node, the class counts its children imply: exact sums, or Eq. 1 estimates under hit/miss."""
    n, k = len(tree.nodes), tree.schema.n_classes
    children = np.arange(1, n)
    parent = tree.parents[children]
    if tree.disclosure == "counts":
        implied = np.zeros((n, k))
        np.add.at(implied, parent, np.stack([tree.nodes[c].counts for c in children]).reshape(-1, k))
        return implied
    labels = np.fromiter((tree.nodes[c].label for c in children), dtype=np.int64, count=n - 1)
    hit = np.fromiter((tree.nodes[c].hit for c in children), dtype=np.float64, count=n - 1)
    miss = np.fromiter((tree.nodes[c].miss for c in children), dtype=np.float64, count=n - 1)
    estimate = np.zeros((n, k))
    own_miss = np.zeros((n, k))
    np.add.at(estimate, (parent, labels), hit)
    np.add.at(own_miss, (parent, labels), miss)
    all_miss = np.bincount(parent, weights=miss, minlength=n)
    return estimate + (all_miss[:, None] - own_miss) / max(k - 1, 1)


def _inner_check(tree: Tree) -> Check:
    """Each inner node must equal what its children imply: exact sums, or Eq. 1 under hit/miss.

    Checked node by node against the node's own children (Eq. 1 as in `common.tree_rebuild.eq1_counts`,
    applied per parent in one vectorised pass), so the node numbering does not matter; by induction every inner node then
    derives from the leaves alone. A tie between classes may be broken either way.
    """
    name = "inner nodes derive from leaves"
    inner = np.array([not node.is_leaf for node in tree.nodes])
    if inner.any():
        implied = _implied_counts(tree)
        labels = np.array([node.label for node in tree.nodes])
        if tree.disclosure == "counts":
            disclosed = np.stack([node.counts for node in tree.nodes])
            same = counts_match(implied, disclosed).all(axis=1)
        else:
            hit = np.array([node.hit for node in tree.nodes])
            own = implied[np.arange(labels.size), labels]
            same = counts_match(own, hit) & counts_match(own, implied.max(axis=1))
        bad = inner & ~same
        if bad.any():
            i = int(np.argmax(bad))
            node = tree.nodes[i]
            return Check(
                name,
                False,
                f"node {i} discloses class {node.label}, hit {node.hit:g}, miss {node.miss:g}; its children imply "
                f"class counts {np.round(implied[i], 6).tolist()}",
            )
    how = "exact sums of the leaves' counts" if tree.disclosure == "counts" else "Eq. 1 estimates from the leaves"
    return Check(name, True, f"every inner node equals {how}")


def _claims_check(tree: Tree, report: PrivacyReport, stats_total: np.ndarray, leaves: np.ndarray) -> Check:
    claimed = {c.leaf: c for c in report.claims}
    missing = [int(i) for i in leaves if int(i) not in claimed]
    extra = sorted(set(claimed) - {int(i) for i in leaves})
    if missing or extra:
        return Check("claims cover the released paths", False, f"paths without a claim: {missing[:10]}; claims without a path: {extra[:10]}")
    for leaf, total in zip(leaves, stats_total):
        claim = claimed[int(leaf)]
        if not math.isclose(claim.tuples, float(total), abs_tol=1e-6) or claim.requirement != report.requirement:
            return Check(
                "claims cover the released paths",
                False,
                f"leaf {int(leaf)} claims {claim.tuples:g} tuples under {claim.requirement!r}; "
                f"it holds {float(total):g} and the report requires {report.requirement!r}",
            )
    return Check("claims cover the released paths", True, f"{len(leaves)} paths, each with its size")


def audit(tree: Tree, report: PrivacyReport | None) -> AuditResult:
    """Audit a released tree against its report (None: a bare tree that claims nothing).

    Returns
    -------
    AuditResult
        ``passed`` is False when any claim fails; the checks say which and why.
    """
    stats = leaf_stats(tree)
    attacks = attack_report(tree)
    checks = [_inner_check(tree)]
    ok = np.ones(stats.leaves.size, dtype=bool)
    if report is None or report.requirement is None:
        checks.append(Check("requirement", True, "no privacy requirement is claimed"))
    else:
        try:
            requirement = parse_requirement(report.requirement, n_classes=tree.schema.n_classes)
        except RequirementError as exc:
            checks.append(Check("requirement", False, str(exc)))
        else:
            ok = requirement.check(stats)
            form = "exact counts" if stats.counts is not None else "hit/miss"
            bad = [int(i) for i in stats.leaves[~ok]]
            checks.append(
                Check(
                    f"every path meets {requirement} ({form})",
                    not bad,
                    f"{int(ok.sum())} of {ok.size} paths pass" + (f"; failing leaves {bad[:10]}" if bad else ""),
                )
            )
        checks.append(_claims_check(tree, report, stats.total, stats.leaves))
    if report is not None and report.attacks is not None:
        same = report.attacks == attacks
        checks.append(
            Check(
                "reported attack counts",
                same,
                "match the released statistics" if same else f"reported {report.attacks.to_dict()}, recomputed {attacks.to_dict()}",
            )
        )
    return AuditResult(tuple(checks), attacks, tree, stats, ok)
