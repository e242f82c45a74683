"""The in-process model-sharing pipeline: what Sharkey et al. §4 measure, as a Python API.

For each cross-validation fold: the training part is dealt into ``n_sources`` private tables
(stratified, seeded); each source trains a local tree, releases it through a mechanism, and the
miner regenerates pseudo-data from every released tree (each release is re-audited with
`modelshare.common.audit.release`, and the count that pass is recorded) (PGEN, and BASEGEN for comparison), pools
it, and trains the global models. BASIS models are trained on the pooled raw training part, their
hyperparameters set as the pseudo-data models' are (`PipelineConfig.model_settings`), so the two
differ in their rows only. Every global model is scored on the held-out fold: accuracy, class match
with the BASIS model of the same kind, and path match with the BASIS tree for tree models; each
record says how the model's hyperparameters were set (``selection``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedKFold

from modelshare.common.audit.release import audit
from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable
from modelshare.common.mechanisms.train_release import train_and_release
from modelshare.common.privacy.report import Release
from modelshare.common.privacy.requirements import parse_requirement
from modelshare.common.study import OFF_PATH_MODES, ON_PATH_MODES, ModelPlan
from modelshare.common.trees.metrics import accuracy, class_match, path_match
from modelshare.common.trees.tree import Disclosure, Tree
from modelshare.miner_node.class_prior import NO_ROWS_FLOOR, declined, study_floor
from modelshare.miner_node.global_models import GLOBAL_MODELS, make_global_model
from modelshare.miner_node.offpath import OffPathMode, ReleasedLaw
from modelshare.miner_node.onpath import ClassSetLaw
from modelshare.miner_node.pgen import ClassAssignment, basegen
from modelshare.miner_node.selection import Choice, choose, choose_basis
from modelshare.miner_node.tasks import pool, pseudo_data, pseudo_sources

__all__ = ["PipelineConfig", "stratified_parts", "fold_plan", "release_owners", "run_fold", "run_study",
           "summarize", "METHODS"]

METHODS = ("BASIS", "PGEN", "BASEGEN")


@dataclass(frozen=True)
class PipelineConfig:
    """Settings of one model-sharing study.

    Parameters
    ----------
    n_sources:
        Number of data owners the training data is dealt among (1-10 in the paper).
    folds, repeats:
        Cross-validation folds and how many times the whole cross-validation is repeated.
    learner, learner_params:
        The owners' local tree learner (``cart`` or ``multiway``) and its parameters.
    mechanism, requirement, disclosure:
        The release mechanism each owner applies, its requirement string (e.g.
        ``cl-diversity:c=5,l=3``; None for ``none``) and what the released tree discloses. An
        owner whose tree cannot meet the requirement releases nothing (the paper's empty tree).
    global_models:
        Registry names of the global models the miner learns.
    global_params:
        Per global model name, parameters that override its registry defaults (the same for
        BASIS, PGEN and BASEGEN, so they compare like with like).
    model_settings:
        Per global model name, how its hyperparameters are set, as a study's ``[global_models]``
        (``"auto"``: cross-validated; ``"fixed"``; or given parameters): on the PGEN and BASEGEN
        tables as the miner sets them (`modelshare.miner_node.selection.choose`, those rows alone), and on
        BASIS's raw training part by the same setting (`modelshare.miner_node.selection.choose_basis`: the same
        values or grid, ``"auto"`` on shuffled folds of the raw training rows, never the held-out
        fold). A model without one is fitted by its fixed rule with ``global_params`` on every table
        (the papers' reproductions). A model takes settings or parameters, not both.
    methods:
        Which of BASIS / PGEN / BASEGEN to run.
    class_assignment:
        PGEN's class assignment (``exact`` or ``sample``).
    off_path:
        PGEN's values for attributes a path leaves free (`modelshare.miner_node.offpath`): ``uniform`` (the paper's)
        or drawn from the fold's released paths' law, ``marginal`` or ``class``.
    on_path:
        PGEN's values inside a path's allowed category set (`modelshare.miner_node.onpath`): ``uniform`` (the paper's)
        or ``class``, drawn from the class law the fold's released paths determine (EM).
    pgen_scale:
        PGEN rows per released tree as a multiple of the tuples it discloses. 1 is the paper's
        hit + miss per path; the default 10 gives the global learner a far less noisy view of the
        same trees (EXPERIMENTS.md measures both). Tree models then need a leaf minimum that does
        not depend on the table size: none (fully grown) or a fraction of the training rows.
    random_state:
        Master seed; every random choice derives from it.
    """

    n_sources: int = 5
    folds: int = 10
    repeats: int = 1
    learner: str = "cart"
    learner_params: dict[str, Any] = field(default_factory=dict)
    mechanism: str = "none"
    requirement: str | None = None
    disclosure: Disclosure = "counts"
    global_models: tuple[str, ...] = ("decision-tree",)
    global_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    model_settings: dict[str, Any] = field(default_factory=dict)
    methods: tuple[str, ...] = METHODS
    class_assignment: ClassAssignment = "exact"
    off_path: OffPathMode = "uniform"
    on_path: str = "uniform"
    pgen_scale: float = 10.0
    random_state: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.n_sources <= 1000:
            raise ValueError(f"n_sources must be between 1 and 1000, got {self.n_sources}")
        if self.folds < 2:
            raise ValueError(f"folds must be at least 2, got {self.folds}")
        if not self.pgen_scale > 0:
            raise ValueError(f"pgen_scale must be positive, got {self.pgen_scale}")
        if self.off_path not in OFF_PATH_MODES:
            raise ValueError(f"off_path must be one of {list(OFF_PATH_MODES)}, got {self.off_path!r}")
        if self.on_path not in ON_PATH_MODES:
            raise ValueError(f"on_path must be one of {list(ON_PATH_MODES)}, got {self.on_path!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        unknown = [m for m in (*self.global_models, *self.global_params) if m not in GLOBAL_MODELS]
        if unknown:
            raise ValueError(f"unknown global models {unknown}; available: {sorted(GLOBAL_MODELS)}")
        record = registry.get(self.mechanism)  # ValueError naming the registered mechanisms
        if (self.requirement is None) == record.needs_requirement:
            raise ValueError(
                f"mechanism {self.mechanism!r} "
                + (f"needs a requirement {record.requirement_form}" if self.requirement is None
                   else "takes no requirement")
            )
        if self.requirement is not None:
            parse_requirement(self.requirement)
        unset = sorted(set(self.model_settings) - set(self.global_models))
        if unset:
            raise ValueError(f"model settings for {unset}, which are not among the global models "
                             f"{list(self.global_models)}")
        both = sorted(set(self.model_settings) & set(self.global_params))
        if both:
            raise ValueError(f"{both} have both model settings and global parameters; give one of the two")
        ModelPlan.checked(self.global_models, self.model_settings, seed=self.random_state,
                          mechanism=self.mechanism)  # ValueError on a bad setting
        bad = [m for m in self.methods if m not in METHODS]
        if bad or "BASIS" not in self.methods:
            raise ValueError(f"methods must include BASIS and come from {list(METHODS)}, got {list(self.methods)}")


def stratified_parts(y: np.ndarray, n_parts: int, rng: np.random.Generator) -> np.ndarray:
    """Assign each row a part in ``0..n_parts-1`` so that parts are equal-sized and class-balanced.

    Rows are shuffled, stably grouped by class, then dealt round-robin: every class is spread
    over the parts as evenly as its count allows, and part sizes differ by at most one. This deals
    a training table among owners (and `modelshare simulate`'s test rows); sorting works for a
    regression target too, where scikit-learn's stratified splitters need classes. The
    cross-validation folds are scikit-learn's (`fold_plan`).
    """
    order = rng.permutation(y.shape[0])
    order = order[np.argsort(y[order], kind="stable")]
    parts = np.empty(y.shape[0], dtype=np.int64)
    parts[order] = np.arange(y.shape[0]) % n_parts
    return parts


def _pooled(parts: list[tuple[np.ndarray, np.ndarray]], schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Stack per-owner pseudo tables; no owner released anything: an empty table."""
    if not parts:
        return np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64)
    return np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _fixed_choice(params: dict[str, Any]) -> Choice:
    """A model without a setting: ``global_params``' values (the same on every table), or the fixed rule without any."""
    return Choice(dict(params), "given" if params else "fixed")


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**31 - 1))


def fold_plan(y: np.ndarray, config: PipelineConfig) -> list[tuple[int, int, np.ndarray, int]]:
    """(repeat, fold, test mask, fold seed) for every fold of the repeated stratified K-fold study.

    Each repeat is scikit-learn's shuffled `StratifiedKFold` with a random state drawn from the
    study's seed, and each fold gets its own seed after it, so a fold's work is a pure function of
    (config, repeat, fold) and can run in any process and order.
    """
    if y.shape[0] < config.folds:
        raise ValueError(f"{y.shape[0]} rows cannot be split into {config.folds} folds")
    master = np.random.default_rng(config.random_state)
    rows = np.arange(y.shape[0])
    plan: list[tuple[int, int, np.ndarray, int]] = []
    for r in range(config.repeats):
        kfold = StratifiedKFold(n_splits=config.folds, shuffle=True, random_state=_seed(master))
        for f, (_, test) in enumerate(kfold.split(rows, y)):
            plan.append((r, f, np.isin(rows, test), _seed(master)))
    return plan


def release_owners(
    schema: Schema,
    X_train: np.ndarray,
    y_train: np.ndarray,
    config: PipelineConfig,
    rng: np.random.Generator,
) -> tuple[np.ndarray, dict[int, Release], int]:
    """Deal the training rows among the owners and release each owner's model; an owner that cannot meet
    the requirement releases nothing.

    Returns each row's owner, the releases by owner index, and how many of them pass the re-audit.
    """
    sources = stratified_parts(y_train, config.n_sources, rng)
    depth = config.learner_params.get("max_depth")
    released: dict[int, Release] = {}
    audited_ok = 0
    for s in range(config.n_sources):
        rows = sources == s
        seed = _seed(rng)  # one draw per owner: its learner's seed, or a whole-release mechanism's (seeded) noise
        try:
            found = train_and_release(config.mechanism, schema, X_train[rows], y_train[rows],
                                      requirement=config.requirement, disclosure=config.disclosure,
                                      learner=config.learner, learner_params=config.learner_params,
                                      max_depth=depth, seed=seed, noise=seed).release
        except RequirementUnsatisfiable:
            continue
        released[s] = found
        audited_ok += audit(found.trees, found.report, seeded_ok=True).passed  # seeded: reproducible runs
    return sources, released, audited_ok


def run_fold(
    schema: Schema,
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    config: PipelineConfig,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Run one fold: BASIS, the owners' releases, PGEN/BASEGEN, global models, and their scores."""
    sources, released, audited_ok = release_owners(schema, X_train, y_train, config, rng)
    tables: dict[str, tuple[np.ndarray, np.ndarray]] = {"BASIS": (X_train, y_train)}
    groups: dict[str, np.ndarray | None] = {}
    floor = study_floor([r.report for r in released.values()], schema.n_classes)  # a dp study's, as the miner's
    trees_released = sum(declined(r.report) is None for r in released.values())  # a decline is its histogram alone
    if "PGEN" in config.methods:
        trees = [tree for r in released.values() for tree in r.classification_trees]
        law = None if config.off_path == "uniform" or not trees else ReleasedLaw.from_trees(trees, config.off_path)
        on_path = None if config.on_path == "uniform" or not trees else ClassSetLaw.from_trees(trees)
        drawn = [pseudo_data(r.classification_trees, r.report, config.pgen_scale, rng,
                             config.class_assignment, law, on_path)
                 for r in released.values()]
        X_p, y_p, pooled_groups = pool([(X, y, pseudo_sources(r.classification_trees, r.report,
                                                              config.pgen_scale, y.shape[0]))
                                        for r, (X, y) in zip(released.values(), drawn, strict=False)],
                                       schema.n_attributes, np.empty(0, dtype=np.int64))
        tables["PGEN"] = (X_p, y_p)
        if config.model_settings and drawn:  # which release each row came from: the miner's CV holds out whole trees
            groups["PGEN"] = pooled_groups
    if "BASEGEN" in config.methods:
        parts = [basegen(r.classification_trees, rows=int((sources == s).sum()), rng=rng) for s, r in released.items()]
        tables["BASEGEN"] = _pooled(parts, schema)

    records: list[dict[str, Any]] = []
    basis: dict[str, tuple[Any, np.ndarray]] = {}
    model_seed = _seed(rng)
    plan = ModelPlan.checked(config.global_models, config.model_settings, seed=model_seed, mechanism=config.mechanism)
    for method, (X, y) in tables.items():
        for name in config.global_models:
            def build(params: dict[str, Any], name: str = name) -> Any:
                return make_global_model(name, schema, random_state=model_seed, **params)

            held = floor if method == "PGEN" else None  # the miner's floor holds its models, never BASIS's
            if y.shape[0] == 0 and held is not None:
                choice = Choice({}, NO_ROWS_FLOOR, floor=True)
            elif name in config.model_settings and y.shape[0] > 0:
                choice = (choose_basis(name, plan, X, y, build, regression=False) if method == "BASIS" else
                          choose(name, plan, X, y, build, regression=False, groups=groups.get(method), floor=held))
            else:
                choice = _fixed_choice(config.global_params.get(name, {}))
            model = held if choice.floor and held is not None else build(choice.parameters)
            record: dict[str, Any] = {
                "method": method,
                "model": name,
                "selection": choice.text if y.shape[0] > 0 or choice.floor else "",
                "train_rows": int(y.shape[0]),
                "owners_released": config.n_sources if method == "BASIS" else trees_released,
                "releases_audited_ok": audited_ok,
            }
            if y.shape[0] == 0 and not choice.floor:
                records.append({**record, "accuracy": np.nan, "class_match": np.nan, "path_match": np.nan})
                continue
            model.fit(X, y)
            pred = model.predict(X_test)
            if method == "BASIS":
                basis[name] = (model, pred)
            basis_model, basis_pred = basis[name]
            tree = getattr(model, "tree_", None)
            basis_tree = getattr(basis_model, "tree_", None)
            record["accuracy"] = accuracy(y_test, pred)
            record["class_match"] = class_match(pred, basis_pred)
            record["path_match"] = (
                path_match(tree, basis_tree, values=X_train) if isinstance(tree, Tree)
                and isinstance(basis_tree, Tree) else np.nan
            )
            records.append(record)
    return records


def run_study(
    schema: Schema,
    X: np.ndarray,
    y: np.ndarray,
    config: PipelineConfig,
    *,
    on_fold: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Repeated stratified k-fold study; one record per (repeat, fold, method, global model).

    ``on_fold(done, total)`` is called after each fold, for progress display.
    """
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    plan = fold_plan(y, config)
    records: list[dict[str, Any]] = []
    for done, (r, f, test, seed) in enumerate(plan, start=1):
        for rec in run_fold(schema, X[~test], y[~test], X[test], y[test], config, np.random.default_rng(seed)):
            records.append({"repeat": r, "fold": f, "n_sources": config.n_sources, **rec})
        if on_fold is not None:
            on_fold(done, len(plan))
    return pd.DataFrame.from_records(records)


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation of each score per (sources, method, global model)."""
    keys = ["n_sources", "model", "method"]
    scores = ["accuracy", "class_match", "path_match", "owners_released", "releases_audited_ok"]
    agg = results.groupby(keys, sort=False)[scores].agg(["mean", "std"])
    agg.columns = [f"{s}_{stat}" for s, stat in agg.columns]
    return agg.reset_index()
