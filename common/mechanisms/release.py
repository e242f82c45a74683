"""`release`: the one entry point that makes a model safe to publish, for every registered mechanism.

A *tree* mechanism (``none``, ``apt``, ``prune-leaf``, ``prune-parent``) post-processes the owner's
trained tree (``tree=``) to a per-path requirement; a *whole-release* mechanism (``kanon-rdt``, the
eps-DP ``laplace-rdt``, ``diffpets``, ``dpea``) trains its own trees from the rows (``schema``,
``X``, ``y`` and ``max_depth``). A regression table (a `RegressionSchema`) is released by the
mechanisms with a regression trainer (``diffpets``). What each mechanism is, meets and states comes
from its `modelshare.common.mechanisms.registry` record; every release carries a `PrivacyReport` whose claims
`modelshare.common.audit.release.audit` re-derives from the released numbers alone.
"""

from __future__ import annotations

import numpy as np

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import DATA_DERIVED, Schema
from modelshare.common.mechanisms.class_prior import (
    DEFAULT_PRIOR_SHARE,
    PRIOR_PARAMETER,
    check_prior_share,
    draw_class_prior,
)
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable, check_public_thresholds
from modelshare.common.mechanisms.registry import (
    Mechanism,
    decline_threshold,
    get,
    meeting,
    needs_public_cuts,
    regression_refusal,
)
from modelshare.common.privacy.attacks import attack_report, ensemble_attack_report
from modelshare.common.privacy.noise import Randomness
from modelshare.common.privacy.report import PathClaim, PrivacyReport, Release
from modelshare.common.privacy.requirements import (
    DP,
    DPS,
    CLDiversity,
    KAnonymity,
    PathRequirement,
    Requirement,
    RequirementError,
    as_requirement,
    path_rule,
)
from modelshare.common.trees.learners import REQUIREMENT_AWARE, TreeLearner, make_learner
from modelshare.common.trees.tree import DISCLOSURES, Disclosure, Node, Tree

__all__ = ["release", "local_learner", "DataDerivedDomain"]


class DataDerivedDomain(ValueError):
    """A dp or dps release asked over a schema read off the rows, without allowing it; nothing is released."""


def release(
    mechanism: str,
    *,
    requirement: str | Requirement | None = None,
    tree: Tree | None = None,
    schema: Schema | RegressionSchema | None = None,
    X: np.ndarray | None = None,
    y: np.ndarray | None = None,
    max_depth: int | None = None,
    disclosure: Disclosure = "counts",
    random_state: int | np.random.Generator | Randomness | None = None,
    allow_data_derived_domain: bool = False,
    prior_share: float = DEFAULT_PRIOR_SHARE,
) -> Release:
    """Release a model with the named mechanism and its privacy report.

    Parameters
    ----------
    mechanism:
        A registered mechanism name (`modelshare.common.mechanisms.registry.names`).
    requirement:
        The requirement string: ``k-anonymity:k=K`` or ``cl-diversity:c=C,l=L`` for the tree
        mechanisms, ``dps:k=K,beta=B,epsilon=E,trees=T`` for ``kanon-rdt``, ``dp:epsilon=E,trees=T``
        for the eps-DP ones; ``none`` takes none (it could not honour one).
    tree:
        The owner's trained tree (with its counts): what a tree mechanism prunes.
    schema, X, y:
        The schema and the encoded rows: what a whole-release mechanism trains on (the schema's
        type says the task: a `RegressionSchema` asks for a regression release).
    max_depth:
        Depth of every tree a whole-release mechanism trains, an integer >= 1.
    disclosure:
        ``counts`` or ``hit_miss``: what the released tree discloses. Whole-release mechanisms
        release counts only.
    random_state:
        `Randomness` of a whole-release mechanism (public structure choices and secret draws), or
        a seed or Generator for `Randomness.seeded`; None (the default, and what owners use) is
        `Randomness.fresh`: OpenDP's exact samplers on the OS CSPRNG. Anyone who knows a seed can
        subtract the noise or tell which rows were sampled, so a seeded release states
        ``noise_source`` as seeded and its audit fails: a fixed seed is for experiments only.
    allow_data_derived_domain:
        Release a dp or dps model over a schema read off the rows (`Schema.data_derived`) anyway.
        Its ranges and categories then disclose the rows they came from, so the report states
        ``domain: data-derived`` and the audit fails the claim; without this a dp or dps release
        over such a schema is refused. Tree mechanisms state the domain the same way and proceed.
    prior_share:
        The share of a ``dp`` classification release's epsilon spent on a noisy class histogram
        (`modelshare.common.mechanisms.class_prior`; default `DEFAULT_PRIOR_SHARE`), the rest on the mechanism's trees;
        below the histogram's public threshold the release is the histogram alone. 0 releases the
        papers' mechanisms unchanged. Other families take no histogram and ignore it.

    Returns
    -------
    Release
        The released tree(s) (regression trees for a regression table) and the report: mechanism, parameters,
        guarantee, canonical requirement, per-path claims (path requirements only) and attack counts
        (class statistics only).

    Raises
    ------
    ValueError
        An unknown mechanism or disclosure, missing inputs, a missing requirement, a bad depth, or
        rows that do not fit the schema; `DataDerivedDomain` for a dp or dps release over a
        data-derived schema that ``allow_data_derived_domain`` does not allow.
    RequirementError
        A malformed requirement, or one the mechanism does not meet.
    RequirementUnsatisfiable
        No pruning of the tree meets the requirement; nothing is released.
    """
    record = get(mechanism)
    if disclosure not in DISCLOSURES:
        raise ValueError(f"disclosure is {disclosure!r}; expected 'counts' or 'hit_miss'")
    if record.prune is not None:
        if tree is None:
            raise ValueError(f"mechanism {mechanism!r} prunes a trained tree; pass tree=")
        return _release_tree(record, tree, requirement, disclosure)
    if schema is None or X is None or y is None or max_depth is None:
        raise ValueError(f"mechanism {mechanism!r} trains its own trees from the rows; pass schema=, X=, y= and "
                         "max_depth=" + (" (it does not take a trained tree)" if tree is not None else ""))
    if schema.data_derived and not allow_data_derived_domain:
        raise DataDerivedDomain(f"mechanism {mechanism!r} makes a {record.family} release, whose "
                                "guarantee needs a public "
                         "domain; this schema's ranges and categories were read from the rows (data-derived). Give a "
                         "schema of public bounds (draft one with `modelshare schema infer`, then review it), or "
                         "allow a data-derived domain and lose the guarantee")
    if isinstance(schema, RegressionSchema):
        return _release_regression(record, schema, X, y, requirement, max_depth, random_state)
    return _release_whole(record, schema, X, y, requirement, max_depth, disclosure, random_state,
                          check_prior_share(prior_share))


def local_learner(name: str, schema: Schema, mechanism: str, *, requirement: str | Requirement | None,
                  disclosure: Disclosure, random_state: int | None = None, **params: object) -> TreeLearner:
    """The local learner an owner trains before the tree ``mechanism`` releases its tree.

    Numeric splits sit on the schema's public cut points whenever the mechanism claims privacy
    (`modelshare.common.mechanisms.registry.needs_public_cuts`). A requirement-aware learner (``admissible``)
    grows to the release's path requirement in its disclosure's form; under ``none`` (no
    requirement) it grows unconstrained.

    Under k-anonymity the learner does not prune afterwards unless ``confidence`` is given: the leaf
    floor of k rows regularises already, and the shallower pruned trees cost the global models
    accuracy (EXPERIMENTS.md, requirement-aware local trees). There it also cuts a categorical
    attribute in two where that beats a branch per category (``category_split="either"`` unless
    given): two branches spend fewer of the rows each leaf needs, and the global models gain
    (EXPERIMENTS.md, Adult under k-anonymity). A requirement the mechanism cannot take (a dp one for ``apt``) is left to
    `release`, which refuses it naming the mechanisms that meet it.

    Raises
    ------
    RequirementError
        A malformed requirement string.
    """
    rule = None
    if name in REQUIREMENT_AWARE and requirement is not None and get(mechanism).family == "path":
        parsed = as_requirement(requirement, n_classes=schema.n_classes)
        if isinstance(parsed, (KAnonymity, CLDiversity)):
            rule = path_rule(parsed, disclosure)
        if isinstance(parsed, KAnonymity):
            # k rows per leaf already regularise; pruning further leaves more attributes off-path (EXPERIMENTS.md)
            params.setdefault("confidence", None)
            params.setdefault("category_split", "either")
    return make_learner(name, schema, random_state=random_state, public_cuts=needs_public_cuts(mechanism),
                        leaf_rule=rule, **params)


def _domain(schema: Schema | RegressionSchema) -> dict[str, str]:
    """``{"domain": "data-derived"}`` for a schema read off the rows (what the audit checks), else nothing."""
    return {"domain": DATA_DERIVED} if schema.data_derived else {}


def _noise(record: Mechanism, randomness: Randomness) -> dict[str, str]:
    """Where a dp or dps release's secret draws came from (`modelshare.common.privacy.noise`): the audit checks it."""
    return {"noise_source": randomness.secret.source} if record.family in ("dp", "dps") else {}


def _hint(requirement: Requirement) -> str:
    """Which mechanisms meet ``requirement``: the hint of a refusal."""
    family = "dp" if isinstance(requirement, DP) else "dps"
    return f"a {family} guarantee is met by mechanism {' or '.join(repr(m) for m in meeting(requirement))}"


def _release_tree(record: Mechanism, tree: Tree, requirement: str | Requirement | None,
                  disclosure: Disclosure) -> Release:
    """A tree mechanism: the trained tree pruned to a per-path requirement (or released as trained)."""
    assert record.prune is not None
    parsed: PathRequirement | None = None
    if record.needs_requirement:
        if requirement is None:
            raise ValueError(f"mechanism {record.name!r} needs a requirement, e.g. 'k-anonymity:k=10'")
        found = as_requirement(requirement, n_classes=tree.schema.n_classes)
        if not isinstance(found, (KAnonymity, CLDiversity)):
            raise RequirementError(str(requirement), f"{record.name} prunes to a per-path requirement; {_hint(found)}")
        parsed = found
    elif requirement is not None:
        raise ValueError(f"mechanism {record.name!r} releases the tree as trained and cannot meet {requirement!r}")
    if record.family != "none":
        check_public_thresholds(tree, record.name)
    if parsed is not None and tree.nodes[0].is_leaf:
        raise RequirementUnsatisfiable(
            f"{record.name} cannot meet {parsed}: the trained tree is its root alone (its learner found no split, "
            "e.g. a requirement-aware learner found none whose branches all meet the requirement); a root-only tree "
            "is no model, so nothing is released")
    released, extra = record.prune(tree, parsed, disclosure)
    claims: tuple[PathClaim, ...] = ()
    if parsed is not None:
        claims = tuple(PathClaim(i, released.nodes[i].total, str(parsed)) for i in released.leaves)
    report = PrivacyReport(
        mechanism=record.name,
        parameters={"disclosure": disclosure, **extra, **_domain(tree.schema)},
        guarantee="none" if parsed is None else _path_guarantee(parsed),
        requirement=None if parsed is None else str(parsed),
        claims=claims,
        attacks=attack_report(released),
    )
    return Release((released,), report)


def _path_guarantee(requirement: PathRequirement) -> str:
    """A path requirement's guarantee in words, saying whom (c,l)-diversity holds against."""
    said = f"every released path meets {requirement}"
    if isinstance(requirement, CLDiversity):
        return said + ("; per leaf only: a reader who combines the leaves is not bounded" if requirement.per_leaf
                       else ", and a reader who combines every released path believes no person's class beyond it")
    return said


def _whole_requirement(record: Mechanism, requirement: str | Requirement | None, n_classes: int | None,
                       what: str = "") -> DP | DPS:
    """The parsed requirement of a whole-release mechanism; RequirementError when it is not of its family."""
    if requirement is None:
        raise ValueError(f"mechanism {record.name!r} needs a requirement {record.requirement_form}")
    parsed = as_requirement(requirement, n_classes=n_classes)
    if not record.accepts_requirement(parsed):
        raise RequirementError(str(requirement), f"{record.name}{what} takes {record.requirement_form}")
    assert isinstance(parsed, (DP, DPS))
    return parsed


def _release_whole(record: Mechanism, schema: Schema, X: np.ndarray, y: np.ndarray,
                   requirement: str | Requirement | None,
                   depth: int, disclosure: Disclosure, random_state: int | np.random.Generator | Randomness | None,
                   prior_share: float = 0.0) -> Release:
    """A whole-release mechanism: its own trees trained from the rows, with the guarantee of its family.

    A ``dp`` release with ``prior_share`` > 0 first draws its noisy class histogram
    (`modelshare.common.mechanisms.class_prior`); the trees then get the rest of the epsilon, or, when the owner
    declines, the release is the histogram as one root-only tree. The report states the study's epsilon,
    and ``class_prior`` the split.
    """
    assert record.train is not None
    if disclosure not in (record.disclosures or ()):
        raise ValueError(f"{record.name} releases class counts (its audit re-checks them); "
                         f"disclosure {disclosure!r} is refused")
    parsed = _whole_requirement(record, requirement, schema.n_classes)
    randomness = Randomness.of(random_state)
    prior = None
    if isinstance(parsed, DP) and prior_share > 0:
        from modelshare.common.trees.learners._data import check_xy  # the rows are checked before any noise is drawn

        X, y = check_xy(schema, X, y)
        prior = draw_class_prior(y, schema.n_classes, parsed, prior_share, depth, randomness.secret,
                                 decline_threshold(record.name, schema))
    if prior is not None and prior.declined is not None:
        held = prior.counts if prior.refined is None else prior.refined
        trees = [Tree(schema, [Node.from_counts(np.asarray(held))], "counts")]
        parameters: dict[str, object] = {"epsilon": float(parsed.epsilon), "trees": parsed.trees, "depth": depth}
    else:
        tree_requirement = parsed if prior is None else DP(prior.tree_epsilon, parsed.trees)
        trees, parameters = record.train(schema, X, y, tree_requirement, depth, randomness)
        if prior is not None:
            parameters = {**parameters, "epsilon": float(parsed.epsilon)}
    if prior is not None:
        parameters[PRIOR_PARAMETER] = prior.to_parameters()
    report = PrivacyReport(
        mechanism=record.name,
        parameters={"disclosure": "counts", **parameters, **_domain(schema), **_noise(record, randomness)},
        guarantee=parsed.guarantee().describe() if isinstance(parsed, DPS) else parsed.describe(),
        requirement=str(parsed),
        attacks=ensemble_attack_report(trees),
    )
    return Release(tuple(trees), report)


def _release_regression(record: Mechanism, schema: RegressionSchema, X: np.ndarray, y: np.ndarray,
                        requirement: str | Requirement | None, depth: int,
                        random_state: int | np.random.Generator | Randomness | None) -> Release:
    """A regression release: the mechanism's regression trainer, a ``dp`` guarantee, no attack counts."""
    why = regression_refusal(record.name, schema.target.name)
    if why is not None or record.train_regression is None:
        raise ValueError(why)
    parsed = _whole_requirement(record, requirement, None, " regression")
    if not isinstance(parsed, DP):
        raise RequirementError(str(parsed), f"{record.name} releases regression trees under a dp requirement only")
    randomness = Randomness.of(random_state)
    forest, parameters = record.train_regression(schema, X, y, parsed, depth, randomness)
    report = PrivacyReport(mechanism=record.name, parameters={**parameters, **_domain(schema),
                                                              **_noise(record, randomness)},
                           guarantee=parsed.describe(), requirement=str(parsed))
    return Release(forest.trees, report)
