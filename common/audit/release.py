"""Re-derive a release's privacy claims from the released trees alone (`modelshare audit`).

The audit trusts nothing the release computed. For every tree it checks that inner nodes disclose
nothing beyond the leaves (exact sums under counts, Sharkey et al.'s Eq. 1 under hit/miss, so no
pruned tuple can be recovered by subtraction), and it recomputes the attack counts to compare
with the reported ones. Then it parses the claimed requirement again and:

* for a path requirement (one tree): checks it on every released leaf's own statistics and checks
  that the claims cover exactly the released paths with their true sizes;
* for ``dps`` (a k-AnonToRdt ensemble): checks that no released nonzero (node, class) count of
  any tree is below k, that the parameters restate the requirement (k, beta, epsilon, trees, and
  as many trees as stated, none deeper than the stated depth), and recomputes delta per tree and
  composed (`modelshare.common.privacy.dps`) to compare with the stated ones and the guarantee text. The sampling
  itself cannot be seen in the release; what can be re-checked is that the release is a strongly
  safe k-anonymization of *some* sample and that the stated accounting follows from its setting;
* for ``dp`` (an eps-DP ensemble such as laplace-rdt): checks that the parameters restate the
  requirement (epsilon, trees, as many trees as stated, none deeper than the stated depth, the
  guarantee text) and the mechanism's own re-derivable accounting (laplace-rdt: the noise scale
  per count is trees * sensitivity / epsilon with sensitivity 1, and the counts are non-negative
  integers as its post-processing states). Whether noise was drawn at all cannot be seen in one
  release; `modelshare.common.audit.dp.estimate` tests that empirically. A dp release's class histogram
  (``class_prior``, `modelshare.common.mechanisms.class_prior`) is re-derived too: its share of the epsilon, scale,
  counts and decline threshold; the mechanism's own checks run at the trees' share, and a declined
  release must be the histogram alone.

A DiffPETs regression forest (a regression study) is audited by `audit` too: the same ``dp``
parameter checks on its trees' structure, the budget split recomputed with the -SSE utility's
sensitivity, its stated post-processing, and the target's public bounds against the schema's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import overload

import numpy as np

from modelshare.common.data.schema import DATA_DERIVED
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.class_prior import (
    PRIOR_PARAMETER,
    class_prior_checks,
    class_prior_of,
    default_decline_rows,
    tree_requirement,
)
from modelshare.common.privacy.attacks import AttackReport, ensemble_attack_report
from modelshare.common.privacy.checks import Check, misstated, numeric_parameter, public_cuts_check, single_child_check
from modelshare.common.privacy.combining import release_verdict
from modelshare.common.privacy.noise import SecureNoise, SeededNoise
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.privacy.requirements import (
    DP,
    DPS,
    CLDiversity,
    LeafStats,
    PathRequirement,
    RequirementError,
    leaf_stats,
    parse_requirement,
)
from modelshare.common.trees.regression import RegressionForest, RegressionTree
from modelshare.common.trees.tree import Tree, counts_match

__all__ = ["Check", "PathAudit", "AuditResult", "audit", "RegressionAuditResult"]


@dataclass(frozen=True)
class PathAudit:
    """One released path: its leaf, description, disclosed statistics, whether it meets the claim, its tree."""

    leaf: int
    path: str
    tuples: float
    hit: float
    miss: float
    passed: bool
    tree: int = 0


@dataclass(frozen=True)
class AuditResult:
    """Every check, the attack counts recomputed from the released statistics, and every path.

    ``stats`` and ``meets`` hold one entry per tree. ``paths`` (with a readable description each)
    is built on first use: the miner audits every submission and needs only the verdict.
    """

    checks: tuple[Check, ...]
    attacks: AttackReport
    trees: tuple[Tree, ...] = field(repr=False)
    stats: tuple[LeafStats, ...] = field(repr=False)
    meets: tuple[np.ndarray, ...] = field(repr=False)

    @cached_property
    def paths(self) -> tuple[PathAudit, ...]:
        found: list[PathAudit] = []
        for t, (tree, s, meets) in enumerate(zip(self.trees, self.stats, self.meets, strict=False)):
            descriptions = {p.leaf: p.describe(tree.schema) for p in tree.paths()}
            found.extend(
                PathAudit(int(i), descriptions[int(i)], float(n), float(h), float(m), bool(o), t)
                for i, n, h, m, o in zip(s.leaves, s.total, s.hit, s.miss, meets, strict=False)
            )
        return tuple(found)

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
        np.add.at(implied, parent, np.stack([tree.nodes[c].class_counts() for c in children]).reshape(-1, k))
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


def _inner_failure(tree: Tree) -> str | None:
    """Why an inner node of ``tree`` differs from what its children imply (exact sums, or Eq. 1), or None.

    Checked node by node against the node's own children (Eq. 1 as in `modelshare.common.trees.rebuild.eq1_counts`,
    applied per parent in one vectorised pass), so the node numbering does not matter; by induction every inner node
    then derives from the leaves alone. A tie between classes may be broken either way.
    """
    inner = np.array([not node.is_leaf for node in tree.nodes])
    if inner.any():
        implied = _implied_counts(tree)
        labels = np.array([node.label for node in tree.nodes])
        if tree.disclosure == "counts":
            disclosed = np.stack([node.class_counts() for node in tree.nodes])
            same = counts_match(implied, disclosed).all(axis=1)
        else:
            hit = np.array([node.hit for node in tree.nodes])
            own = implied[np.arange(labels.size), labels]
            same = counts_match(own, hit) & counts_match(own, implied.max(axis=1))
        bad = inner & ~same
        if bad.any():
            i = int(np.argmax(bad))
            node = tree.nodes[i]
            return (f"node {i} discloses class {node.label}, hit {node.hit:g}, miss {node.miss:g}; its children imply "
                    f"class counts {np.round(implied[i], 6).tolist()}")
    return None


def _inner_check(trees: Sequence[Tree]) -> Check:
    """Every tree's inner nodes derive from its leaves; a failure names the node (and the tree of an ensemble)."""
    name = "inner nodes derive from leaves"
    for t, tree in enumerate(trees):
        why = _inner_failure(tree)
        if why is not None:
            return Check(name, False, why if len(trees) == 1 else f"tree {t}: {why}")
    kinds = {tree.disclosure for tree in trees}
    how = " / ".join(
        "exact sums of the leaves' counts" if kind == "counts" else "Eq. 1 estimates from the leaves"
        for kind in sorted(kinds)
    )
    return Check(name, True, f"every inner node equals {how}" + (f" in all {len(trees)} trees"
                                                                 if len(trees) > 1 else ""))


def _claims_check(tree: Tree, report: PrivacyReport, stats_total: np.ndarray, leaves: np.ndarray) -> Check:
    claimed = {c.leaf: c for c in report.claims}
    missing = [int(i) for i in leaves if int(i) not in claimed]
    extra = sorted(set(claimed) - {int(i) for i in leaves})
    if missing or extra:
        return Check("claims cover the released paths", False,
                     f"paths without a claim: {missing[:10]}; claims without a path: {extra[:10]}")
    for leaf, total in zip(leaves, stats_total, strict=False):
        claim = claimed[int(leaf)]
        if not math.isclose(claim.tuples, float(total), abs_tol=1e-6) or claim.requirement != report.requirement:
            return Check(
                "claims cover the released paths",
                False,
                f"leaf {int(leaf)} claims {claim.tuples:g} tuples under {claim.requirement!r}; "
                f"it holds {float(total):g} and the report requires {report.requirement!r}",
            )
    return Check("claims cover the released paths", True, f"{len(leaves)} paths, each with its size")


def _path_check(stats: LeafStats, requirement: PathRequirement) -> tuple[Check, np.ndarray]:
    """A path requirement checked on every released leaf, and the per-leaf verdicts."""
    ok = requirement.check(stats)
    form = "exact counts" if stats.counts is not None else "hit/miss"
    bad = [int(i) for i in stats.leaves[~ok]]
    check = Check(
        f"every path meets {requirement} ({form})",
        not bad,
        f"{int(ok.sum())} of {ok.size} paths pass" + (f"; failing leaves {bad[:10]}" if bad else ""),
    )
    return check, ok


def _forest_failure(trees: Sequence[Tree], report: PrivacyReport, requirement: DP | DPS) -> str | None:
    """Why the trees do not match the stated count and depth (an integer >= 1 none exceeds), or None.

    A mechanism with a ``release_shape`` (dpea-nb) says from its stated parameters how many trees it
    releases and how deep they go; the others release ``requirement.trees`` trees of the stated depth.
    """
    depth = numeric_parameter(report.parameters, "depth")
    if depth is None or not depth.is_integer() or depth < 1:
        return f"depth={report.parameters.get('depth')!r} is not an integer >= 1"
    record = registry.get(report.mechanism) if report.mechanism in registry.names() else None
    n_trees, deepest, said = requirement.trees, depth, "the report states"
    if record is not None and record.release_shape is not None:
        try:
            n_trees, deepest = record.release_shape(report.parameters, requirement)
        except ValueError as exc:
            return str(exc)
        said = f"{report.mechanism} releases for the stated setting"
    if len(trees) != n_trees:
        return f"the model carries {len(trees)} trees; {said} {n_trees}"
    deep = [t for t, tree in enumerate(trees) if tree.depth > deepest]
    if deep:
        allowed = f"the stated depth {depth:g}" if deepest == depth else f"{deepest:g} (the stated depth {depth:g} + 1)"
        return f"trees {deep[:10]} are deeper than {allowed}"
    return None


def _parameter_check(trees: Sequence[Tree], report: PrivacyReport, requirement: DP | DPS) -> Check:
    """The stated setting restates the requirement (dps: k, beta, epsilon_total, trees; dp: epsilon, trees and
    the guarantee text) and the trees match the stated count and depth."""
    name = f"parameters restate {requirement}"
    if isinstance(requirement, DPS):
        wrong = misstated(report.parameters, {"k": requirement.k, "beta": requirement.beta,
                                               "epsilon_total": requirement.epsilon, "trees": requirement.trees})
        said = f"k={requirement.k}, beta={requirement.beta:g}, epsilon={requirement.epsilon:g}"
    else:
        wrong = misstated(report.parameters, {"epsilon": requirement.epsilon, "trees": requirement.trees})
        if report.guarantee != requirement.describe():
            wrong.append(f"guarantee {report.guarantee!r} (expected {requirement.describe()!r})")
        said = requirement.describe()
    if wrong:
        return Check(name, False, "the report states " + ", ".join(wrong))
    why = _forest_failure(trees, report, requirement)
    if why is not None:
        return Check(name, False, why)
    return Check(name, True, f"{len(trees)} trees of depth <= {report.parameters['depth']:g}, {said}")


def _dps_checks(
    trees: Sequence[Tree], stats: Sequence[LeafStats], report: PrivacyReport, requirement: DPS, seeded_ok: bool
) -> tuple[list[Check], tuple[np.ndarray, ...]]:
    """The checks of a ``dps`` claim; a leaf passes when none of its nonzero class counts is below k."""
    mechanism, record = _family_mechanism(report, "dps")
    claims = Check("claims", not report.claims,
                   "a dps guarantee covers the whole release; no per-path claims" if not report.claims
                   else f"the report makes {len(report.claims)} per-path claims; a dps release makes none")
    checks = [mechanism, _parameter_check(trees, report, requirement), _domain_check(trees, report),
              _noise_check(report, seeded_ok)]
    if record is not None and record.audit_checks is not None:
        checks += record.audit_checks(trees, report, requirement)
    checks.append(claims)
    meets = tuple(
        np.zeros(s.leaves.size, dtype=bool) if s.counts is None else _no_count_below(s.counts, requirement.k)
        for s in stats
    )
    return checks, meets


def _no_count_below(counts: np.ndarray, k: int) -> np.ndarray:
    """Per leaf (row of ``counts``), whether none of its nonzero class counts is below ``k``."""
    small: np.ndarray = np.any((counts > 0) & (counts < k), axis=1)
    return ~small


def _domain_check(trees: Sequence[Tree], report: PrivacyReport) -> Check:
    """A dp or dps guarantee holds only over a public domain: not one read off the rows (`Schema.data_derived`)."""
    derived = report.parameters.get("domain") == DATA_DERIVED or any(t.schema.data_derived for t in trees)
    return Check("public domain", not derived,
                 "the schema's ranges and categories were read from the private rows (domain: data-derived); they "
                 "disclose those rows, so the guarantee does not hold" if derived else
                 "the schema is stated publicly, not read from the rows")


def _noise_check(report: PrivacyReport, seeded_ok: bool) -> Check:
    """A dp or dps release's secret draws came from the secure samplers (`modelshare.common.privacy.noise.SecureNoise`).

    A seeded release can be replayed by whoever knows the seed (the noise subtracted, the samples
    named), so its guarantee holds against nobody who does; the report says which source was used.
    ``seeded_ok`` accepts a seeded source (an experiment's reproducible, never published release).
    """
    source = report.parameters.get("noise_source")
    secure = source == SecureNoise.source
    if seeded_ok and source == SeededNoise.source:
        return Check("secret draws from a secure sampler", True,
                     f"noise_source={source!r}, accepted for an experiment (seeded_ok): not for publication")
    return Check("secret draws from a secure sampler", secure,
                 f"noise and secret choices drawn by {source}" if secure else
                 f"noise_source={source!r}: the guarantee needs draws from {SecureNoise.source!r} "
                 "(a seeded release is reproducible by anyone who knows the seed; release without a seed)")


def _family_mechanism(report: PrivacyReport, family: str) -> tuple[Check, registry.Mechanism | None]:
    """The ``mechanism`` check of a whole-release claim: the report names a registered mechanism of ``family``."""
    proven = registry.names(family=family)
    record = registry.get(report.mechanism) if report.mechanism in registry.names() else None
    known = record is not None and record.family == family
    if family == "dps":
        said = ("is the mechanism the dps guarantee is proven for" if known
                else f"does not make dps releases; only {' or '.join(repr(m) for m in proven)} does")
    else:
        said = "is a mechanism with an eps-DP proof" if known else f"makes no dp releases; known: {list(proven)}"
    return Check("mechanism", known, f"{report.mechanism!r} {said}"), (record if known else None)


def _dp_checks(trees: Sequence[Tree], report: PrivacyReport, requirement: DP, seeded_ok: bool) -> list[Check]:
    """The checks of a ``dp`` claim: a known mechanism, its parameters and accounting, no per-path claims.

    A release with a class histogram (``class_prior``, `modelshare.common.mechanisms.class_prior`) gets its checks too,
    and the mechanism's own accounting is re-derived at the trees' share of the epsilon; a declined release
    (the histogram alone) has no trees of the mechanism to check.
    """
    mechanism, record = _family_mechanism(report, "dp")
    checks = [mechanism]
    if PRIOR_PARAMETER in report.parameters:
        schema = trees[0].schema
        threshold = (registry.decline_threshold(record.name, schema) if record is not None  # else: the mechanism fails
                     else lambda tree_claim, depth: default_decline_rows(tree_claim, depth, schema))
        checks += class_prior_checks(trees, report, requirement, threshold)
    prior = class_prior_of(report)
    if prior is not None and not 0.0 < prior.share < 1.0:  # its check has failed; no share of the epsilon to re-derive
        prior = None
    declined = prior is not None and prior.declined is not None
    if declined:
        wrong = misstated(report.parameters, {"epsilon": requirement.epsilon, "trees": requirement.trees})
        if report.guarantee != requirement.describe():
            wrong.append(f"guarantee {report.guarantee!r} (expected {requirement.describe()!r})")
        checks.append(Check(f"parameters restate {requirement}", not wrong,
                            "the report states " + ", ".join(wrong) if wrong else
                            f"{requirement.describe()}; declined: {prior.declined if prior else ''}"))
    else:
        checks.append(_parameter_check(trees, report, requirement))
    checks += [_domain_check(trees, report), _noise_check(report, seeded_ok)]
    if record is not None and record.audit_checks is not None and not declined:
        if prior is not None:  # the mechanism's accounting at the trees' share, as it stated it
            tree_claim = tree_requirement(requirement, prior)
            checks += record.audit_checks(
                trees, replace(report, parameters={**report.parameters, "epsilon": tree_claim.epsilon}), tree_claim)
        else:
            checks += record.audit_checks(trees, report, requirement)
    checks.append(Check("claims", not report.claims,
                        "a dp guarantee covers the whole release; no per-path claims" if not report.claims
                        else f"the report makes {len(report.claims)} per-path claims; a dp release makes none"))
    return checks


def _requirement_checks(
    trees: tuple[Tree, ...], stats: tuple[LeafStats, ...], report: PrivacyReport, text: str, seeded_ok: bool,
    figures: bool = True,
) -> tuple[list[Check], tuple[np.ndarray, ...] | None]:
    """The checks of the report's requirement ``text`` and per-tree leaf verdicts (None: no verdict per leaf)."""
    try:
        requirement = parse_requirement(text, n_classes=trees[0].schema.n_classes)
    except RequirementError as exc:
        checks = [Check("requirement", False, str(exc))]
        if len(trees) == 1:
            checks.append(_claims_check(trees[0], report, stats[0].total, stats[0].leaves))
        return checks, None
    if isinstance(requirement, DPS):
        return _dps_checks(trees, stats, report, requirement, seeded_ok)
    if isinstance(requirement, DP):
        return _dp_checks(trees, report, requirement, seeded_ok), None
    if len(trees) != 1:
        return [Check("requirement", False, f"{requirement} is claimed per path of one tree; "
                                            f"this model carries {len(trees)} trees")], None
    check, ok = _path_check(stats[0], requirement)
    structure = [single_child_check(trees), public_cuts_check(trees)]  # what the claims do not cover
    return [check, _claims_check(trees[0], report, stats[0].total, stats[0].leaves), *structure,
            reader_check(trees, requirement, figures=figures)], (ok,)


READER_CHECK = "a reader of the whole release"


def reader_check(trees: Sequence[Tree], requirement: PathRequirement, *, figures: bool = True) -> Check:
    """The release-level check (`modelshare.common.privacy.combining`): under (c,l)-diversity of the whole release no
    leaf lets the combining reader believe beyond the requirement; a per-leaf promise and k-anonymity are measured
    only, and with ``figures`` False (a caller that reads verdicts only) not even measured: that check passes either
    way."""
    if isinstance(requirement, CLDiversity) and not requirement.per_leaf:
        verdict = release_verdict(trees, requirement)
        worst = "; ".join(f.describe() for f in verdict.findings[:3])
        return Check(READER_CHECK, verdict.passed, verdict.describe() + (f"; e.g. {worst}" if worst else ""))
    scope = ("the release promises each leaf only (scope=leaf)" if isinstance(requirement, CLDiversity)
             else "k-anonymity bounds group sizes, not beliefs")
    if not figures:
        return Check(READER_CHECK, True, f"not required ({scope}); not measured")
    verdict = release_verdict(trees, requirement if isinstance(requirement, CLDiversity) else None)
    return Check(READER_CHECK, True, f"measured, not required ({scope}): {verdict.describe()}")


@overload
def audit(trees: Tree | Sequence[Tree], report: PrivacyReport | None, *, seeded_ok: bool = False,
          figures: bool = True) -> AuditResult: ...
@overload
def audit(trees: RegressionForest | Sequence[RegressionTree], report: PrivacyReport | None, *,
          seeded_ok: bool = False, figures: bool = True) -> RegressionAuditResult: ...


def audit(trees: Tree | Sequence[Tree] | RegressionForest | Sequence[RegressionTree],
          report: PrivacyReport | None, *, seeded_ok: bool = False,
          figures: bool = True) -> AuditResult | RegressionAuditResult:
    """Audit a release against its report (None: claims nothing): one tree, an ensemble, or regression trees.

    Classification trees get the structural checks, the requirement's checks and the attack
    counts (`AuditResult`, with a verdict per released path); a regression forest gets the checks
    of its ``dp`` claim (`RegressionAuditResult`; module docstring).

    ``seeded_ok`` accepts a dp or dps release whose secret draws came from a seed (an experiment's
    reproducible release, never to be published); by default such a release fails its claim.

    ``figures`` False leaves out what only measures and cannot fail (the combining reader's figures under
    k-anonymity or a per-leaf (c,l) promise, `reader_check`): the same checks with the same outcomes, for a
    caller that reads the verdict alone (the miner's verifier re-audits every submission).

    Returns
    -------
    AuditResult or RegressionAuditResult
        ``passed`` is False when any claim fails; the checks say which and why.
    """
    if isinstance(trees, RegressionForest):
        return _audit_regression(trees, report, seeded_ok)
    given = (trees,) if isinstance(trees, Tree) else tuple(trees)
    if not given:
        raise ValueError("audit needs at least one tree")
    regression = tuple(t for t in given if isinstance(t, RegressionTree))
    if len(regression) == len(given):
        return _audit_regression(RegressionForest(regression[0].schema, regression), report, seeded_ok)
    classification = tuple(t for t in given if isinstance(t, Tree))
    if len(classification) != len(given):
        kinds = sorted({type(t).__name__ for t in given})
        raise TypeError(f"a release is Trees or RegressionTrees, one kind; got {', '.join(kinds)}")
    trees = classification
    stats = tuple(leaf_stats(tree) for tree in trees)
    attacks = ensemble_attack_report(trees)
    checks = [_inner_check(trees)]
    meets: tuple[np.ndarray, ...] | None = None
    if report is None or report.requirement is None:
        checks.append(Check("requirement", True, "no privacy requirement is claimed"))
    else:
        found, meets = _requirement_checks(trees, stats, report, report.requirement, seeded_ok, figures)
        checks += found
    if report is not None and report.attacks is not None:
        same = report.attacks == attacks
        checks.append(
            Check(
                "reported attack counts",
                same,
                "match the released statistics" if same
                else f"reported {report.attacks.to_dict()}, recomputed {attacks.to_dict()}",
            )
        )
    if meets is None:
        meets = tuple(np.ones(s.leaves.size, dtype=bool) for s in stats)
    return AuditResult(tuple(checks), attacks, trees, stats, meets)


# ---------------------------------------------------------------- regression
@dataclass(frozen=True)
class RegressionAuditResult:
    """The checks of a regression release (a DiffPETs regression forest); no per-leaf verdicts or attack counts."""

    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "checks": [vars(c) for c in self.checks]}


def _regression_requirement_checks(forest: RegressionForest, report: PrivacyReport, text: str,
                                   seeded_ok: bool) -> list[Check]:
    """The checks of a regression release's claim ``text``: a ``dp`` requirement and its mechanism's accounting."""
    try:
        requirement = parse_requirement(text)
    except RequirementError as exc:
        return [Check("requirement", False, str(exc))]
    if not isinstance(requirement, DP):
        return [Check("requirement", False, f"{requirement} is not a guarantee a regression release can make; "
                                            "it claims 'dp:epsilon=E,trees=T'")]
    record = registry.get(report.mechanism) if report.mechanism in registry.names() else None
    known = record is not None and record.regression_audit_checks is not None
    able = registry.names(task="regression")
    mechanism = Check("mechanism", known, f"{report.mechanism!r} " + (
        "is a regression mechanism with an eps-DP proof" if known
        else f"makes no dp regression releases; known: {list(able)}"))
    trees = [tree.tree for tree in forest.trees]
    derived = report.parameters.get("domain") == DATA_DERIVED or forest.schema.data_derived
    domain = Check("public domain", not derived,
                   "the attributes' ranges and categories were read from the private rows "
                   "(domain: data-derived); the guarantee does not hold" if derived else
                   "the schema is stated publicly, not read from the rows")
    checks = [mechanism, _parameter_check(trees, report, requirement), domain, _noise_check(report, seeded_ok)]
    if known and record is not None and record.regression_audit_checks is not None:
        checks += record.regression_audit_checks(forest, report, requirement)
    checks.append(Check("claims", not report.claims,
                        "a dp guarantee covers the whole release; no per-path claims" if not report.claims
                        else f"the report makes {len(report.claims)} per-path claims; a dp release makes none"))
    return checks


def _audit_regression(forest: RegressionForest, report: PrivacyReport | None, seeded_ok: bool) -> RegressionAuditResult:
    """Audit a released regression forest against its report (None: claims nothing), as `audit` does for classes.

    Every tree's inner (count, sum) already equals the sum of its children's (`RegressionTree`
    refuses anything else when it is built or decoded). The claim must be ``dp``: the stated epsilon
    and trees, as many trees as stated and none deeper than the stated depth (`_parameter_check`
    on the trees' structure), the mechanism's budget split and sensitivities recomputed, its
    post-processing, and the target bounds equal to the schema's. A regression report carries no
    attack counts (they count class statistics); one that does fails.

    Returns
    -------
    RegressionAuditResult
        ``passed`` is False when any claim fails; the checks say which and why.
    """
    if report is None or report.requirement is None:
        checks = [Check("requirement", True, "no privacy requirement is claimed")]
    else:
        checks = _regression_requirement_checks(forest, report, report.requirement, seeded_ok)
    if report is not None and report.attacks is not None:
        checks.append(Check("reported attack counts", False,
                            "a regression release reports no attack counts (they count class statistics)"))
    return RegressionAuditResult(tuple(checks))
