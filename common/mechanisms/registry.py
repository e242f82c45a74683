"""The one registry of release mechanisms: what each is, what it meets, and how to train and audit it.

Every party asks this registry about a mechanism by name: the owner's trainer and site policy, the
study checks, the miner's re-audit and PGEN, the empirical DP audit, the CLI and the simulator. A
`Mechanism` record holds all of it:

* ``kind``: a *tree* mechanism post-processes one trained tree (``prune``); a *whole-release*
  mechanism trains its own trees from the rows (``train``, and ``train_regression`` for a numeric target);
* ``family``: the requirement family it meets: ``none``, ``path`` (``k-anonymity`` /
  ``cl-diversity`` on every released path), ``dps`` (``dps:k,beta,epsilon,trees``) or ``dp``
  (``dp:epsilon,trees``); ``accepts`` narrows the requirement classes (Methods 1 and 2 take k-anonymity only);
* ``audit_checks`` (and ``regression_audit_checks``): the checks that re-derive the mechanism's own
  accounting from the released numbers, run by `modelshare.common.audit.release` after the family's checks;
* ``release_shape``: ``(parameters, requirement) -> (trees, depth)``, the trees a release carries and
  the deepest of them, for a mechanism whose release is not ``requirement.trees`` trees of the stated
  depth (dpea-nb: one root and a histogram tree per free attribute, one level deeper); None: those;
* ``max_trees`` and ``max_depth``: the most trees its requirement may ask for and the deepest tree it
  trains (None: no bound of its own); `modelshare experiment dp` runs a mechanism at no more than these
  (dpea-nb: one root of depth 1), and its trainer refuses more with the reason;
* ``dp_audit_target``: the empirical DP audit's target factory (`modelshare.common.audit.dp`), as a
  ``"module:function"`` reference because the audit layer sits above this one;
* ``pseudo_data``: the miner's pseudo-data step for a release that describes a model rather than a
  partition (a `PseudoData`, or a ``"module:attribute"`` reference to one where it lives with the
  miner, as dpea-nb's does); None: PGEN on the released paths. A study's ``off_path`` and ``on_path``
  laws do not apply to such a step, so a study of the mechanism must leave them ``uniform``;
* ``release_model``: a global model built from this mechanism's releases alone (dpea-nb's
  ``calibrated-nb``), which only a study of this mechanism may list;
* ``decline_rows``: a ``dp`` mechanism's public rule ``(the trees' requirement, depth, schema) -> rows``, the
  noisy class total below which an owner releases its class histogram alone
  (`modelshare.common.mechanisms.class_prior`);
  None: `class_prior.default_decline_rows`, one noise scale per leaf and class of a full tree;
* the defaults a study or the CLI falls back to (requirement, tree depth), and the site-policy
  bounds that apply (`policy_bounds`, from the family).

Adding a mechanism is one module with its trainer and checks plus one `register` call. Mechanisms
outside this package come from plugins, loaded on first use of the registry in every process (so the
miner and owner processes of a federation, which are separate programs, know them too; other threads wait
for the loading): installed distributions that declare an entry point in the ``modelshare.mechanisms``
group (`ENTRY_POINT_GROUP`), each naming a `Mechanism` record or a sequence of them, and modules named in
the ``MODELSHARE_PLUGINS`` environment variable (comma-separated module names), whose
``MODELSHARE_MECHANISMS`` sequence is registered. A plugin that cannot be imported, names no record or takes a
registered name raises `PluginError`, naming the distribution and entry point (or module) and why, on every use of the
registry until it is fixed or removed. Installing a plugin is trusting its code; which mechanisms a site releases
with is still its ``[policy]``'s ``mechanisms`` list.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from modelshare.common.data.regression import REGRESSION_TASK, RegressionSchema
from modelshare.common.data.schema import CLASSIFICATION_TASK, Schema
from modelshare.common.mechanisms import class_prior, diffpets, dpea, dpea_nb, kanon_rdt, laplace_rdt, pruning
from modelshare.common.privacy.checks import Check
from modelshare.common.privacy.noise import Randomness
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.privacy.requirements import DP, DPS, CLDiversity, KAnonymity, PathRequirement, Requirement
from modelshare.common.trees.learner_options import AUTO_LEARNER
from modelshare.common.trees.regression import RegressionForest
from modelshare.common.trees.tree import Disclosure, Tree

__all__ = [
    "Family",
    "Mechanism",
    "PLUGINS_VARIABLE",
    "ENTRY_POINT_GROUP",
    "PluginError",
    "register",
    "unregister",
    "get",
    "names",
    "mechanisms",
    "regression_refusal",
    "requirement_form",
    "meeting",
    "default_learner",
]

Family = Literal["none", "path", "dps", "dp"]
Prune = Callable[[Tree, "PathRequirement | None", Disclosure], tuple[Tree, dict[str, Any]]]
Train = Callable[[Schema, np.ndarray, np.ndarray, Any, int, Randomness], tuple[list[Tree], dict[str, Any]]]
TrainRegression = Callable[[RegressionSchema, np.ndarray, np.ndarray, DP, int, Randomness],
                           tuple[RegressionForest, dict[str, Any]]]
AuditChecks = Callable[[Sequence[Tree], PrivacyReport, Any], list[Check]]
ReleaseShape = Callable[[Mapping[str, Any], Any], tuple[int, float]]
RegressionAuditChecks = Callable[[RegressionForest, PrivacyReport, DP], list[Check]]
DeclineRows = Callable[[DP, int, Schema], float]

PLUGINS_VARIABLE = "MODELSHARE_PLUGINS"
ENTRY_POINT_GROUP = "modelshare.mechanisms"


class PluginError(ImportError):
    """A plugin that cannot be loaded: the message names its distribution and entry point (or module) and why."""

_FAMILY_CLASSES: dict[str, tuple[type, ...]] = {
    "none": (), "path": (KAnonymity, CLDiversity), "dps": (DPS,), "dp": (DP,),
}
_FAMILY_FORMS = {
    "none": "no requirement", "path": "'k-anonymity:k=K' or 'cl-diversity:c=C,l=L'",
    "dps": "'dps:k=K,beta=B,epsilon=E,trees=T'", "dp": "'dp:epsilon=E,trees=T'",
}
# the [policy] bounds of an owner site that apply to a study of each family (`modelshare.owner_node.policy`)
_FAMILY_POLICY_BOUNDS: dict[str, tuple[str, ...]] = {
    "none": ("mix_dp_with_non_dp",), "path": ("min_k", "min_l", "max_c", "mix_dp_with_non_dp"),
    "dps": ("min_k", "max_beta", "max_epsilon", "max_delta", "lifetime_epsilon", "lifetime_delta",
            "mix_dp_with_non_dp"),
    "dp": ("max_epsilon", "lifetime_epsilon", "mix_dp_with_non_dp"),
}


@dataclass(frozen=True)
class PseudoData:
    """A mechanism's own pseudo-data step (the miner calls it in place of PGEN on the released paths).

    ``rows(trees, report, scale, rng, class_assignment)`` returns one release's pseudo rows ``(X, y)``,
    about ``scale`` times its released rows; ``describe`` is what a study's results say of them in place
    of the off-path and on-path rules, which do not apply.
    """

    rows: Callable[[Sequence[Tree], PrivacyReport, float, np.random.Generator, str], tuple[np.ndarray, np.ndarray]]
    describe: str


@dataclass(frozen=True)
class Mechanism:
    """One release mechanism's record (module docstring).

    Exactly one of ``prune`` (a tree mechanism) and ``train`` (a whole-release mechanism) is set.
    """

    name: str
    family: Family
    summary: str
    prune: Prune | None = None
    train: Train | None = None
    train_regression: TrainRegression | None = None
    accepts: tuple[type, ...] | None = None
    audit_checks: AuditChecks | None = None
    regression_audit_checks: RegressionAuditChecks | None = None
    dp_audit_target: str | Callable[..., Any] | None = None
    release_shape: ReleaseShape | None = None
    max_trees: int | None = None
    max_depth: int | None = None
    default_requirement: str | None = None
    default_max_depth: int | None = None
    disclosures: tuple[Disclosure, ...] | None = None
    pseudo_data: str | PseudoData | None = None
    release_model: str | None = None
    decline_rows: DeclineRows | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower() or " " in self.name:
            raise ValueError(f"mechanism name {self.name!r} must be a non-empty lower-case word")
        if self.family not in _FAMILY_CLASSES:
            raise ValueError(f"mechanism {self.name!r}: family {self.family!r} is not one of {sorted(_FAMILY_CLASSES)}")
        if (self.prune is None) == (self.train is None):
            raise ValueError(f"mechanism {self.name!r} needs exactly one of prune (a tree mechanism) and train "
                             "(a whole-release mechanism)")
        if self.prune is not None and self.family in ("dps", "dp"):
            raise ValueError(f"mechanism {self.name!r}: a tree mechanism meets a path requirement or none, "
                             f"not {self.family!r}")
        if self.train is not None and self.family in ("none", "path"):
            raise ValueError(f"mechanism {self.name!r}: a whole-release mechanism meets 'dps' or 'dp', "
                             f"not {self.family!r}")
        if self.train_regression is not None and self.family != "dp":
            raise ValueError(f"mechanism {self.name!r}: regression releases are 'dp' releases")
        if self.accepts is None:
            object.__setattr__(self, "accepts", _FAMILY_CLASSES[self.family])
        if self.disclosures is None:
            object.__setattr__(self, "disclosures", ("counts", "hit_miss") if self.prune is not None else ("counts",))

    @property
    def kind(self) -> Literal["tree", "whole-release"]:
        """``tree``: post-processes one trained tree; ``whole-release``: trains its own trees from the rows."""
        return "tree" if self.prune is not None else "whole-release"

    @property
    def whole_release(self) -> bool:
        return self.train is not None

    @property
    def needs_requirement(self) -> bool:
        return self.family != "none"

    @property
    def tasks(self) -> tuple[str, ...]:
        """The tasks it can release a model for: classification, and regression when it has a regression trainer."""
        return (CLASSIFICATION_TASK,) + ((REGRESSION_TASK,) if self.train_regression is not None else ())

    @property
    def requirement_form(self) -> str:
        """How its requirement is written, for error messages."""
        if self.accepts == (KAnonymity,):
            return "'k-anonymity:k=K'"
        return _FAMILY_FORMS[self.family]

    @property
    def policy_bounds(self) -> tuple[str, ...]:
        """The owner-site ``[policy]`` keys that bound a study of this mechanism."""
        return _FAMILY_POLICY_BOUNDS[self.family]

    def accepts_requirement(self, requirement: Requirement) -> bool:
        return isinstance(requirement, self.accepts or ())

    def resolve_dp_audit_target(self) -> Callable[..., Any] | None:
        """The empirical DP audit's target factory, imported on first use (None: not auditable empirically)."""
        target = self.dp_audit_target
        if target is None or callable(target):
            return target
        module, _, attribute = target.partition(":")
        factory: Callable[..., Any] = getattr(importlib.import_module(module), attribute)
        return factory

    def resolve_pseudo_data(self) -> PseudoData | None:
        """The mechanism's own pseudo-data step, imported on first use (None: PGEN on the released paths)."""
        step = self.pseudo_data
        if step is None or isinstance(step, PseudoData):
            return step
        module, _, attribute = step.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        if not isinstance(found, PseudoData):
            raise TypeError(f"mechanism {self.name!r}: pseudo_data {step!r} is not a PseudoData")
        return found

    def describe(self) -> dict[str, Any]:
        """The record as plain data: for ``--json`` listings and the docs."""
        return {"name": self.name, "kind": self.kind, "family": self.family, "summary": self.summary,
                "requirement": self.requirement_form, "tasks": list(self.tasks),
                "disclosures": list(self.disclosures or ()), "default_requirement": self.default_requirement,
                "default_max_depth": self.default_max_depth, "policy_bounds": list(self.policy_bounds),
                "empirical_dp_audit": self.dp_audit_target is not None}


_REGISTRY: dict[str, Mechanism] = {}
_lock = threading.Lock()
_plugins_loaded: set[str] = set()
_entry_points_loaded = False
_plugin_lock = threading.RLock()  # one thread loads plugins while others wait; re-entrant for a plugin that asks


def register(mechanism: Mechanism, *, replace: bool = False) -> Mechanism:
    """Add ``mechanism`` to the registry (ValueError when the name is taken, unless ``replace``)."""
    with _lock:
        if mechanism.name in _REGISTRY and not replace:
            raise ValueError(f"mechanism {mechanism.name!r} is already registered")
        _REGISTRY[mechanism.name] = mechanism
    return mechanism


def unregister(name: str) -> None:
    """Remove a mechanism registered at run time (tests and plugins); KeyError when it is unknown."""
    with _lock:
        del _REGISTRY[name]


def _register_plugin(records: object, source: str) -> None:
    """Register the plugin records ``records`` loaded from ``source`` (a phrase naming where they come from)."""
    found = (records,) if isinstance(records, Mechanism) else records
    if not isinstance(found, (list, tuple)) or not found or not all(isinstance(r, Mechanism) for r in found):
        raise PluginError(f"{source} must give a Mechanism record or a non-empty sequence of them, "
                          f"not {type(records).__name__}")
    for record in found:
        if _REGISTRY.get(record.name) is record:
            continue  # the same record reached by both ways (installed, and named in MODELSHARE_PLUGINS)
        try:
            register(record)
        except ValueError as exc:
            raise PluginError(f"{source}: {exc}") from exc


def _load_entry_points() -> None:
    """Register the records of every installed distribution's ``modelshare.mechanisms`` entry points, once."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True  # set first: a plugin's import may itself ask the registry
    try:
        for point in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
            dist = point.dist.name if point.dist is not None else "an unnamed distribution"
            source = f"plugin {point.name!r} = {point.value!r} (entry point group {ENTRY_POINT_GROUP!r} of {dist})"
            try:
                records = point.load()
            except Exception as exc:  # a plugin's import may fail in any way; say which plugin and why
                raise PluginError(f"{source} cannot be loaded: {type(exc).__name__}: {exc}; "
                                  "fix or uninstall that distribution") from exc
            _register_plugin(records, source)
    except BaseException:
        _entry_points_loaded = False  # the next use of the registry tries again, and says why again
        raise


def _load_plugins() -> None:
    """Register the installed plugins' records and those of each module named in ``MODELSHARE_PLUGINS``, once."""
    with _plugin_lock:
        _load_entry_points()
        _load_named_modules()


def _load_named_modules() -> None:
    """Register the ``MODELSHARE_MECHANISMS`` of each module named in ``MODELSHARE_PLUGINS``, once per module."""
    for name in filter(None, (m.strip() for m in os.environ.get(PLUGINS_VARIABLE, "").split(","))):
        if name in _plugins_loaded:
            continue
        source = f"plugin module {name!r} ({PLUGINS_VARIABLE})"
        _plugins_loaded.add(name)  # first: the module's import may itself ask the registry
        try:
            try:
                module = importlib.import_module(name)
            except Exception as exc:  # a plugin's import may fail in any way; say which plugin and why
                raise PluginError(f"{PLUGINS_VARIABLE} names module {name!r}, which cannot be imported: "
                                  f"{type(exc).__name__}: {exc}") from exc
            if not hasattr(module, "MODELSHARE_MECHANISMS"):
                raise PluginError(f"{source} must define MODELSHARE_MECHANISMS, a sequence of Mechanism records")
            _register_plugin(module.MODELSHARE_MECHANISMS, f"{source} MODELSHARE_MECHANISMS")
        except BaseException:
            _plugins_loaded.discard(name)  # the next use of the registry tries again, and says why again
            raise


def get(name: str) -> Mechanism:
    """The record of mechanism ``name``; ValueError naming the registered ones when it is unknown."""
    _load_plugins()
    found = _REGISTRY.get(name)
    if found is None:
        raise ValueError(f"unknown mechanism {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return found


def mechanisms() -> tuple[Mechanism, ...]:
    """Every registered record, in registration order."""
    _load_plugins()
    return tuple(_REGISTRY.values())


def names(*, kind: str | None = None, family: str | None = None, task: str | None = None) -> tuple[str, ...]:
    """Registered names, sorted, optionally only those of one ``kind``, ``family`` or supported ``task``."""
    return tuple(sorted(m.name for m in mechanisms() if (kind is None or m.kind == kind)
                        and (family is None or m.family == family) and (task is None or task in m.tasks)))


def meeting(requirement: Requirement) -> tuple[str, ...]:
    """The mechanisms whose family covers ``requirement`` (for error hints)."""
    return tuple(sorted(m.name for m in mechanisms() if m.accepts_requirement(requirement)))


def regression_refusal(mechanism: str, target: str) -> str | None:
    """Why ``mechanism`` cannot release a model of a regression table (numeric ``target``); None when it can."""
    able = names(task=REGRESSION_TASK)
    if mechanism in able:
        return None
    return (f"mechanism {mechanism!r} cannot release a model for task 'regression' (numeric target {target!r}); "
            f"only {' or '.join(repr(m) for m in able)} can")


def needs_public_cuts(mechanism: str) -> bool:
    """Whether a local tree released by ``mechanism`` must split numeric attributes at public cut points only.

    Every mechanism that claims privacy does (`modelshare.common.trees.learners.public_cuts`); ``none`` claims nothing.
    """
    return get(mechanism).family != "none"


def decline_threshold(mechanism: str, schema: Schema) -> class_prior.Threshold:
    """``(the trees' requirement, depth) -> rows``: the decline threshold of a ``mechanism`` release over ``schema``."""
    rule = get(mechanism).decline_rows or class_prior.default_decline_rows
    return lambda requirement, depth: rule(requirement, depth, schema)


def requirement_form(mechanism: str) -> str:
    """How the requirement of ``mechanism`` is written, for error messages."""
    return get(mechanism).requirement_form


# ---------------------------------------------------------------- the built-in mechanisms
for _record in (
    Mechanism("none", "none", "the tree as trained (the baseline a site policy can forbid); claims nothing",
              prune=pruning.release_unchanged),
    Mechanism("apt", "path", "anonymity-based tree pruning (Sharkey et al. Fig. 4) to k-anonymity or (c,l)-diversity",
              prune=pruning.release_apt, default_requirement="cl-diversity:c=5,l=2"),
    Mechanism("prune-leaf", "path", "Method 1 of Wakabayashi et al.: leaves below s = k - 1 pruned",
              prune=pruning.release_prune_leaf, accepts=(KAnonymity,), default_requirement="k-anonymity:k=5"),
    Mechanism("prune-parent", "path", "Method 2 of Wakabayashi et al.: parents of leaves below s = k - 1 pruned",
              prune=pruning.release_prune_parent, accepts=(KAnonymity,), default_requirement="k-anonymity:k=5"),
    Mechanism(kanon_rdt.MECHANISM, "dps", "k-AnonToRdt: random trees on Bernoulli(beta) samples, counts below k "
              "released as 0 (Waseda et al. 2024)", train=kanon_rdt.train_kanon_rdt,
              audit_checks=kanon_rdt.audit_checks, dp_audit_target="modelshare.common.audit.dp.rdt:kanon_rdt_target",
              default_requirement="dps:k=5,beta=0.1,epsilon=2,trees=10", default_max_depth=4),
    Mechanism(kanon_rdt.LOG_MECHANISM, "dps", "k-AnonToRdt with numeric thresholds uniform on log(1 + x - low) of "
              "the public range (spread over wide ranges' orders of magnitude)", train=kanon_rdt.train_kanon_rdt_log,
              audit_checks=kanon_rdt.audit_checks,
              dp_audit_target="modelshare.common.audit.dp.rdt:kanon_rdt_log_target",
              default_requirement="dps:k=5,beta=0.1,epsilon=2,trees=10", default_max_depth=4),
    Mechanism(laplace_rdt.MECHANISM, "dp", "random decision trees with Laplace noise on every leaf class count",
              train=laplace_rdt.train_laplace_rdt, audit_checks=laplace_rdt.audit_checks,
              dp_audit_target="modelshare.common.audit.dp.rdt:laplace_rdt_target",
              default_requirement="dp:epsilon=1,trees=10", default_max_depth=4),
    Mechanism(diffpets.MECHANISM, "dp", "DP ExtraTrees (Li, Chen and Xie 2020): exponential mechanism over random "
              "splits, noisy leaf histograms; also regression", train=diffpets.train_diffpets,
              train_regression=diffpets.train_diffpets_regression, audit_checks=diffpets.audit_checks,
              regression_audit_checks=diffpets.regression_audit_checks,
              dp_audit_target="modelshare.common.audit.dp.diffpets:diffpets_target",
              default_requirement="dp:epsilon=1,trees=10", default_max_depth=4),
    Mechanism(dpea.MECHANISM, "dp", "DPEA (Bai et al. 2017): exponential mechanism over whole d-step subtrees, "
              "noisy leaf counts", train=dpea.train_dpea, audit_checks=dpea.audit_checks,
              dp_audit_target="modelshare.common.audit.dp.dpea:dpea_target",
              default_requirement="dp:epsilon=1,trees=10", default_max_depth=4),
    Mechanism(dpea_nb.MECHANISM, "dp", "a depth-1 DPEA root, noisy per-leaf class histograms of every other "
              "attribute, a likelihood temperature chosen by the exponential mechanism (a calibrated naive Bayes)",
              train=dpea_nb.train_dpea_nb, audit_checks=dpea_nb.audit_checks, release_shape=dpea_nb.release_shape,
              dp_audit_target="modelshare.common.audit.dp.dpea_nb:dpea_nb_target", max_trees=1, max_depth=1,
              pseudo_data="modelshare.miner_node.calibrated_nb:PSEUDO_DATA", release_model=dpea_nb.RELEASE_MODEL,
              decline_rows=dpea_nb.decline_rows,
              default_requirement="dp:epsilon=1,trees=1", default_max_depth=1),
):
    register(_record)
del _record


def default_learner(mechanism: str) -> str:
    """The owners' local learner when none is named: ``admissible`` for a path requirement, ``auto`` without one.

    A tree grown to the requirement (`modelshare.common.trees.learners.admissible`) keeps what APT would prune
    to the root. Released as trained (``none``), the owner chooses its learner by cross-validation
    (``auto``, `modelshare.common.mechanisms.learner_choice`): no requirement shapes the tree, and the choice avoids
    the learner that fits a table worst (EXPERIMENTS.md, the owner's choice). ``multiway`` (the
    model-sharing paper's J48-like learner) and ``cart`` stay selectable, and the paper's experiments name
    theirs. A whole-release mechanism trains its own trees and ignores the learner (``multiway`` is
    returned for it, as for an unknown mechanism, which whoever checks the mechanism refuses).
    """
    try:
        family = get(mechanism).family
    except ValueError:
        return "multiway"
    if family == "path":
        return "admissible"
    return AUTO_LEARNER if family == "none" else "multiway"
