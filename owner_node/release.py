"""Release mechanisms: what an owner does to a trained tree before it leaves the site.

One registry name per mechanism. Each returns the released model with a `PrivacyReport` whose
claims `common.audit.release` can re-check from the released tree alone:

``none``
    the tree as trained (the baseline a site policy can forbid); claims nothing.
``apt``
    anonymity-based tree pruning (Sharkey et al. Fig. 4) to ``k-anonymity:k=K`` or
    ``cl-diversity:c=C,l=L``.
``prune-leaf`` / ``prune-parent``
    Method 1 / Method 2 of Wakabayashi et al. with threshold ``s = k - 1``, from
    ``k-anonymity:k=K``; every released path then holds at least k tuples.

These four post-process one trained tree (`MECHANISMS`, `release_tree`). ``kanon-rdt``
(k-AnonToRdt, Waseda et al. 2024) trains its own ensemble from the rows instead, so it has its
own entry point, `release_random_trees`, from ``dps:k=K,beta=B,epsilon=E,trees=T``.

The noise-based eps-DP mechanisms also train their own trees, from ``dp:epsilon=E,trees=T``,
through `release_dp` and the `DP_MECHANISMS` registry (one `DPTrainer` per name):

``laplace-rdt``
    random decision trees with Laplace noise on every leaf class count (`common.mechanisms.laplace_rdt`).
``diffpets``
    DP ExtraTrees (Li, Chen and Xie 2020): noisy stopping counts, the exponential mechanism
    with the Gini utility over random candidate splits, noisy leaf histograms (`common.mechanisms.diffpets`).
``dpea``
    DPEA (Bai et al. 2017): the exponential mechanism over whole d-step multiway subtrees, sampled
    exactly, then Laplace noise on the leaf class counts (`common.mechanisms.dpea`); d = the depth here.

A regression table (a `common.data.regression.RegressionSchema`: a numeric target with public bounds)
is released by ``diffpets`` alone, as a DiffPETs regression forest (noisy count and noisy target
sum per leaf), through `release_regression`; every other mechanism is refused for it.

`RELEASE_MECHANISMS` names them all: what a study, a site policy or the CLI may ask for.
`common.mechanisms.registry` names the whole-release ones (and their requirement families) for the
parties that must not import the training code.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from common.data.regression import RegressionSchema
from common.data.schema import Schema
from common.mechanisms.diffpets import MECHANISM as DIFFPETS
from common.mechanisms.diffpets import DiffPetsRegressor, train_diffpets
from common.mechanisms.dpea import MECHANISM as DPEA
from common.mechanisms.dpea import train_dpea
from common.mechanisms.kanon_rdt import MECHANISM as KANON_RDT
from common.mechanisms.kanon_rdt import kanon_rdt
from common.mechanisms.laplace_rdt import MECHANISM as LAPLACE_RDT
from common.mechanisms.laplace_rdt import LaplaceRdt
from common.mechanisms.pruning import RequirementUnsatisfiable, apt, prune_leaves, prune_parents
from common.mechanisms.registry import regression_refusal
from common.privacy.attacks import attack_report, ensemble_attack_report
from common.privacy.report import PathClaim, PrivacyReport, RegressionRelease, Release
from common.privacy.requirements import (
    DP,
    DPS,
    CLDiversity,
    KAnonymity,
    PathRequirement,
    RequirementError,
    parse_requirement,
)
from common.trees.rebuild import rebuild
from common.trees.tree import Disclosure, Tree

__all__ = [
    "MECHANISMS",
    "RELEASE_MECHANISMS",
    "NEEDS_REQUIREMENT",
    "DP_MECHANISMS",
    "DPTrainer",
    "PrivacyReport",
    "Release",
    "RequirementUnsatisfiable",
    "release_tree",
    "release_random_trees",
    "release_dp",
    "release_regression",
]

Mechanism = Callable[[Tree, "PathRequirement | None", Disclosure], tuple[Tree, dict]]


def _none(tree: Tree, requirement: PathRequirement | None, disclosure: Disclosure) -> tuple[Tree, dict]:
    return rebuild(tree.schema, tree.nodes, disclosure), {}


def _apt(tree: Tree, requirement: PathRequirement | None, disclosure: Disclosure) -> tuple[Tree, dict]:
    assert requirement is not None
    return apt(tree, requirement, disclosure=disclosure), {}


def _k_for_threshold(requirement: PathRequirement | None, mechanism: str) -> int:
    if not isinstance(requirement, KAnonymity):
        raise RequirementError(str(requirement), f"{mechanism} takes 'k-anonymity:k=K' (threshold s = K - 1)")
    return requirement.k


def _prune_leaf(tree: Tree, requirement: PathRequirement | None, disclosure: Disclosure) -> tuple[Tree, dict]:
    s = _k_for_threshold(requirement, "prune-leaf") - 1
    return prune_leaves(tree, s, disclosure=disclosure), {"s": s}


def _prune_parent(tree: Tree, requirement: PathRequirement | None, disclosure: Disclosure) -> tuple[Tree, dict]:
    s = _k_for_threshold(requirement, "prune-parent") - 1
    return prune_parents(tree, s, disclosure=disclosure), {"s": s}


MECHANISMS: dict[str, Mechanism] = {
    "none": _none,
    "apt": _apt,
    "prune-leaf": _prune_leaf,
    "prune-parent": _prune_parent,
}
NEEDS_REQUIREMENT = frozenset({"apt", "prune-leaf", "prune-parent", KANON_RDT})

# (schema, X, y, requirement, depth, rng) -> (released trees, the parameters the report states)
DPTrainer = Callable[[Schema, np.ndarray, np.ndarray, DP, int, np.random.Generator], tuple[list[Tree], dict[str, Any]]]


def _laplace_rdt(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
                 rng: np.random.Generator) -> tuple[list[Tree], dict[str, Any]]:
    mechanism = LaplaceRdt(requirement.epsilon, requirement.trees, depth)
    return mechanism.fit(schema, X, y, rng).trees, mechanism.parameters()


DP_MECHANISMS: dict[str, DPTrainer] = {LAPLACE_RDT: _laplace_rdt, DIFFPETS: train_diffpets, DPEA: train_dpea}
RELEASE_MECHANISMS: frozenset[str] = frozenset(MECHANISMS) | {KANON_RDT} | frozenset(DP_MECHANISMS)


def _whole_release_hint(requirement: DP | DPS) -> str:
    """Which mechanism meets a whole-release requirement: the error hint of the tree mechanisms."""
    if isinstance(requirement, DP):
        return f"a dp guarantee is met by mechanism {' or '.join(repr(m) for m in sorted(DP_MECHANISMS))}"
    return f"a dps guarantee is met by mechanism {KANON_RDT!r}"


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
    if mechanism == KANON_RDT:
        raise ValueError(f"{KANON_RDT!r} trains its own random trees from the rows; use release_random_trees")
    if mechanism in DP_MECHANISMS:
        raise ValueError(f"{mechanism!r} trains its own noisy trees from the rows; use release_dp")
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; available: {sorted(MECHANISMS)}")
    if disclosure not in ("counts", "hit_miss"):
        raise ValueError(f"disclosure is {disclosure!r}; expected 'counts' or 'hit_miss'")
    parsed: PathRequirement | None = None
    if mechanism in NEEDS_REQUIREMENT:
        if requirement is None:
            raise ValueError(f"mechanism {mechanism!r} needs a requirement, e.g. 'k-anonymity:k=10'")
        found = parse_requirement(requirement, n_classes=tree.schema.n_classes)
        if not isinstance(found, (KAnonymity, CLDiversity)):
            raise RequirementError(requirement, f"{mechanism} prunes to a per-path requirement; "
                                                f"{_whole_release_hint(found)}")
        parsed = found
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
    return Release((released,), report)


def release_random_trees(
    schema: Schema,
    X: np.ndarray,
    y: np.ndarray,
    *,
    requirement: str,
    depth: int,
    seed: int | np.random.Generator | None = None,
    disclosure: Disclosure = "counts",
) -> Release:
    """Train and release a k-AnonToRdt ensemble (mechanism ``kanon-rdt``) meeting a ``dps`` requirement.

    ``requirement`` (``dps:k=K,beta=B,epsilon=E,trees=T``) fixes the training: T random trees of
    depth ``depth``, each counting its own Bernoulli(B) sample of the rows, every (leaf, class)
    count below K released as 0. The report states the mechanism, the parameters {disclosure, k,
    beta, epsilon_total, trees, depth, epsilon_per_tree, delta_per_tree, delta_total}, the
    guarantee ``(beta, Nt*eps, Nt*delta)-DPS`` and the canonical requirement. It makes no
    per-path claims: the guarantee is about the whole release, and what `common.audit.release` re-checks
    is the counts against K and delta against the setting. Attack counts are summed over the trees.

    Parameters
    ----------
    schema, X, y:
        The schema and the encoded rows.
    requirement:
        The ``dps:`` requirement string.
    depth:
        Depth d of every tree (splits on a path), an integer >= 1.
    seed:
        Seed of the structure and of the samples; None (the default, and what owners use) draws
        fresh OS entropy. The privacy of sampling rests on the sample being unknown: anyone who
        knows the seed and the other rows can tell whether a row was sampled, so a fixed seed is
        for experiments only.
    disclosure:
        Must be ``counts``: the audit re-checks every released (leaf, class) count against k,
        which hit/miss disclosure would hide.

    Raises
    ------
    RequirementError
        A malformed requirement, one outside Theorem 1's range, or not a ``dps`` one.
    ValueError
        ``hit_miss`` disclosure, a bad depth, or rows that do not fit the schema.
    """
    if disclosure != "counts":
        raise ValueError(f"{KANON_RDT} releases class counts (the audit re-checks each count against k); "
                         f"disclosure {disclosure!r} is refused")
    parsed = parse_requirement(requirement, n_classes=schema.n_classes)
    if not isinstance(parsed, DPS):
        raise RequirementError(requirement, f"{KANON_RDT} takes 'dps:k=K,beta=B,epsilon=E,trees=T'")
    forest = kanon_rdt(schema, X, y, k=parsed.k, beta=parsed.beta, depth=depth, n_trees=parsed.trees, rng=seed)
    g = parsed.guarantee()
    parameters = {
        "disclosure": "counts", "k": parsed.k, "beta": parsed.beta, "epsilon_total": parsed.epsilon,
        "trees": parsed.trees, "depth": int(depth), "epsilon_per_tree": g.epsilon_per_tree,
        "delta_per_tree": g.delta_per_tree, "delta_total": g.delta_total,
    }
    report = PrivacyReport(
        mechanism=KANON_RDT,
        parameters=parameters,
        guarantee=g.describe(),
        requirement=str(parsed),
        attacks=ensemble_attack_report(forest.trees),
    )
    return Release(tuple(forest.trees), report)


def release_dp(
    schema: Schema,
    X: np.ndarray,
    y: np.ndarray,
    *,
    mechanism: str,
    requirement: str,
    depth: int,
    seed: int | np.random.Generator | None = None,
    disclosure: Disclosure = "counts",
) -> Release:
    """Train and release an eps-DP ensemble (a `DP_MECHANISMS` entry) meeting ``dp:epsilon=E,trees=T``.

    The report states the mechanism, its parameters (``disclosure`` plus what the mechanism states,
    e.g. laplace-rdt's epsilon, trees, depth, epsilon_per_tree, sensitivity, noise_scale,
    post_processing), the guarantee ``E-DP (add/remove one row)`` and the canonical requirement; it
    makes no per-path claims. Attack counts are computed on the released (noisy) counts.

    Parameters
    ----------
    schema, X, y:
        The schema and the encoded rows.
    mechanism:
        A name from `DP_MECHANISMS`.
    requirement:
        The ``dp:`` requirement string.
    depth:
        Depth of every tree, an integer >= 1.
    seed:
        Seed of the structure and of the noise; None (the default, and what owners use) draws
        fresh OS entropy. Anyone who knows the seed can subtract the noise, so a fixed seed is for
        experiments only.
    disclosure:
        Must be ``counts``: the noisy class counts are what is released.

    Raises
    ------
    RequirementError
        A malformed requirement, or not a ``dp`` one.
    ValueError
        An unknown mechanism, ``hit_miss`` disclosure, a bad depth, or rows that do not fit the schema.
    """
    if mechanism not in DP_MECHANISMS:
        raise ValueError(f"unknown DP mechanism {mechanism!r}; available: {sorted(DP_MECHANISMS)}")
    if disclosure != "counts":
        raise ValueError(f"{mechanism} releases noisy class counts; disclosure {disclosure!r} is refused")
    parsed = parse_requirement(requirement, n_classes=schema.n_classes)
    if not isinstance(parsed, DP):
        raise RequirementError(requirement, f"{mechanism} takes 'dp:epsilon=E,trees=T'")
    trees, parameters = DP_MECHANISMS[mechanism](schema, X, y, parsed, depth, np.random.default_rng(seed))
    report = PrivacyReport(
        mechanism=mechanism,
        parameters={"disclosure": "counts", **parameters},
        guarantee=parsed.describe(),
        requirement=str(parsed),
        attacks=ensemble_attack_report(trees),
    )
    return Release(tuple(trees), report)


def release_regression(
    schema: RegressionSchema,
    X: np.ndarray,
    y: np.ndarray,
    *,
    mechanism: str,
    requirement: str,
    depth: int,
    seed: int | np.random.Generator | None = None,
) -> RegressionRelease:
    """Train and release an eps-DP DiffPETs regression forest meeting ``dp:epsilon=E,trees=T``.

    T trees of leaf depth <= ``depth`` spend epsilon / T each (`common.mechanisms.diffpets.DiffPetsRegressor`);
    every leaf releases its noisy row count N' and the noisy sum S' of the target scaled to [0, 1] by
    the schema's public bounds. The report states the mechanism, the regressor's parameters (budget
    split, sensitivities, K, theta, post-processing and the target's public bounds), the guarantee
    ``E-DP (add/remove one row)`` and the canonical requirement; it makes no per-path claims and no
    attack counts (those are about class statistics). It is charged to the owner's ledger like any
    ``dp`` release, since the study states the same requirement.

    Parameters
    ----------
    schema, X, y:
        The regression schema, the encoded attributes and the numeric target.
    mechanism:
        Must be a `common.mechanisms.registry.REGRESSION_MECHANISMS` name (``diffpets``).
    requirement:
        The ``dp:`` requirement string.
    depth:
        Maximum leaf depth of every tree, an integer >= 1.
    seed:
        Seed of the candidates and the noise; None (what owners use) draws fresh OS entropy.

    Raises
    ------
    ValueError
        Another mechanism (the message names it and the task), a bad depth, or rows that do not fit.
    RequirementError
        A malformed requirement, or not a ``dp`` one.
    """
    why = regression_refusal(mechanism, schema.target.name)
    if why is not None:
        raise ValueError(why)
    parsed = parse_requirement(requirement)
    if not isinstance(parsed, DP):
        raise RequirementError(requirement, f"{mechanism} regression takes 'dp:epsilon=E,trees=T'")
    regressor = DiffPetsRegressor(parsed.epsilon, parsed.trees, depth)
    forest = regressor.fit(schema, X, y, seed)
    report = PrivacyReport(mechanism=mechanism, parameters=regressor.parameters(schema),
                           guarantee=parsed.describe(), requirement=str(parsed))
    return RegressionRelease(forest, report)
