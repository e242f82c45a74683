"""The Python API a notebook needs: load a table, train a local tree, release, audit, PGEN, global models, a study.

``import modelshare as ms`` gives these names (`modelshare.__init__` re-exports them lazily, so the
command line does not pay for them). They are thin, documented doors onto the same code the
owner daemon, the miner and the CLI run: `release` is `modelshare.common.mechanisms.release.release`, `mine`
is the miner's mining of a study (`modelshare.miner_node.mining.mine`: every release regenerated, pooled and
learned from, with the study's PGEN laws), `pgen` the plain PGEN of one release on its own,
`fit_global_model` one of the miner's global models, `deal` the split `modelshare simulate` makes,
`run_study` the in-process cross-validated model-sharing study. Every random choice takes
``random_state`` (an int, a `numpy.random.Generator`, or None for fresh OS entropy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from modelshare.common.audit.release import AuditResult, RegressionAuditResult
from modelshare.common.audit.release import audit as _audit
from modelshare.common.data.datasets import LoadedTable
from modelshare.common.data.datasets import load_dataset as _load_dataset
from modelshare.common.data.datasets import load_table as _load_table
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.federation.model_io import read_model, write_release
from modelshare.common.federation.serde import parameter_from_pb
from modelshare.common.federation.study import load_study_file
from modelshare.common.federation.wire import DecodedModel
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.registry import default_learner
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.report import Release
from modelshare.common.privacy.requirements import parse_requirement, path_rule
from modelshare.common.study import Study, Training
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.tree import Disclosure, Tree
from modelshare.miner_node.global_models import make_global_model, make_regression_model
from modelshare.miner_node.mining import AcceptedModel
from modelshare.miner_node.mining import mine as _mine
from modelshare.miner_node.pgen import ClassAssignment, pgen_regression
from modelshare.miner_node.tasks import Evaluation, pseudo_data
from modelshare.pipeline import PipelineConfig, stratified_parts, summarize
from modelshare.pipeline import run_study as _run_study

__all__ = [
    "load_dataset", "load_table", "deal", "train_tree", "release", "audit", "mine", "pgen", "fit_global_model",
    "run_study", "mechanisms", "read_release", "write_release", "Mined", "PipelineConfig", "Release", "Schema", "Tree",
]


def load_dataset(name: str) -> LoadedTable:
    """Load a bundled dataset, checked against its bundled schema.

    Parameters
    ----------
    name:
        ``adult``, ``car``, ``nursery``, ``vote`` or ``winequality`` (``modelshare datasets list``).

    Returns
    -------
    LoadedTable
        ``frame`` (the table), ``schema`` (its public domain) and ``source``; ``table.schema.encode(table.frame)``
        gives the encoded ``(X, y)`` every other function takes.
    """
    return _load_dataset(name)


def load_table(path: str | Path, class_column: str, *, schema: Schema | str | Path | None = None) -> LoadedTable:
    """Load a CSV, TSV or Parquet table and fit it to a schema.

    Parameters
    ----------
    path:
        The table file.
    class_column:
        The class column's name.
    schema:
        A `Schema` or a schema file (JSON or TOML) fixing the public domain. Without one the domain
        is inferred from the rows, which is for exploration only: a release's public parameters must
        not come from its private rows.

    Returns
    -------
    LoadedTable
        The checked table, its schema and its source. Bad input raises `SchemaError` naming the
        file, row, column and value.
    """
    return _load_table(path, class_column, schema=schema)


def deal(y: np.ndarray, owners: int = 5, *, test_fraction: float = 0.2,
         random_state: int | np.random.Generator | None = 0) -> tuple[np.ndarray, list[np.ndarray]]:
    """Split a table's rows as ``modelshare simulate`` does: a held-out part, the rest dealt among owners.

    Parameters
    ----------
    y:
        The encoded labels (or target values) of every row.
    owners:
        How many owners to deal the training rows to.
    test_fraction:
        The held-out share (simulate's ``--test-fraction``): every ``round(1 / test_fraction)``-th row of a
        class-sorted shuffle.
    random_state:
        Seed or Generator; simulate's ``--seed`` (default 0) gives simulate's split.

    Returns
    -------
    (test, parts)
        The held-out rows' indices and one index array per owner, class-balanced and of sizes that
        differ by at most one.
    """
    if owners < 1 or not 0.0 < test_fraction < 1.0:
        raise ValueError(f"deal needs owners >= 1 and 0 < test_fraction < 1, got {owners} and {test_fraction}")
    rng = np.random.default_rng(random_state)
    test = stratified_parts(y, round(1 / test_fraction), rng) == 0
    train = np.flatnonzero(~test)
    parts = stratified_parts(y[train], owners, rng)
    return np.flatnonzero(test), [train[parts == i] for i in range(owners)]


def train_tree(schema: Schema, X: np.ndarray, y: np.ndarray, *, learner: str = "cart", max_depth: int | None = None,
               min_samples_leaf: int = 1, random_state: int | None = 0, public_cuts: bool = True,
               requirement: str | None = None, disclosure: Disclosure = "hit_miss") -> Tree:
    """Train an owner's local decision tree (with its class counts), as the owner daemon does.

    Parameters
    ----------
    schema, X, y:
        The schema and the encoded rows.
    learner:
        ``cart`` (scikit-learn's CART, converted exactly), ``multiway`` (one child per category) or
        ``admissible`` (grown so that every leaf meets ``requirement`` in the ``disclosure`` form).
    max_depth, min_samples_leaf:
        The tree's limits (None: unlimited depth).
    random_state:
        Seed of CART's tie-breaking.
    public_cuts:
        Split numeric attributes only at the schema's public cut points (declared ``cuts`` or the
        even grid), as every privacy mechanism requires; False gives midpoints of training values,
        for a tree released with mechanism ``none`` or never released.
    requirement, disclosure:
        What an ``admissible`` tree's leaves must meet (``k-anonymity:k=K`` or ``cl-diversity:c=C,l=L``)
        and in which form (``hit_miss`` or ``counts``); the other learners ignore them.

    Returns
    -------
    Tree
        The trained tree, ready for a tree mechanism (`release`).
    """
    params: dict[str, Any] = {"min_samples_leaf": min_samples_leaf}
    if max_depth is not None:
        params["max_depth"] = max_depth
    rule = path_rule(requirement, disclosure, n_classes=schema.n_classes) if requirement is not None else None
    trained = make_learner(learner, schema, random_state=random_state, public_cuts=public_cuts,
                           leaf_rule=rule, **params)
    trained.fit(X, y)
    return trained.tree_


def audit(released: Release, report: Any = None, *, seeded_ok: bool = False) -> AuditResult | RegressionAuditResult:
    """Re-derive a release's privacy claims from its released numbers alone (what `modelshare audit` runs).

    Parameters
    ----------
    released:
        A `Release` (its report is used), or trees (or a regression forest) with ``report``.
    report:
        The `PrivacyReport` when ``released`` is not a `Release`; None claims nothing.
    seeded_ok:
        Accept a dp or dps release drawn from a seed (a reproducible experiment's, never to be
        published); by default its claim fails.

    Returns
    -------
    AuditResult or RegressionAuditResult
        ``passed``, and every check with why it holds or fails.
    """
    if isinstance(released, Release):
        return _audit(released.trees, released.report, seeded_ok=seeded_ok)
    return _audit(released, report, seeded_ok=seeded_ok)


def pgen(released: Release, *, scale: float = 10.0, class_assignment: ClassAssignment = "exact",
         random_state: int | np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Plain PGEN of one release on its own: the miner's generator, without what the miner learns across releases.

    The rows are drawn as the miner draws them under a study's defaults (``off_path`` and ``on_path``
    ``uniform``, the paper's PGEN) and from this release alone, with this function's own generator: a
    study's miner pools every owner's release, can fit off-path and on-path laws over all of them
    (study.toml's ``off_path``, ``on_path``) and seeds each owner's draws from the study's seed. To get
    what the miner of a study gets, releases pooled, laws fitted and global models learned and scored,
    call `mine`.

    Parameters
    ----------
    released:
        A `Release`: one tree, an ensemble (its stated sampling rate is honoured) or regression trees.
    scale:
        Pseudo rows per disclosed tuple; 1 is the paper's hit + miss per path.
    class_assignment:
        ``exact`` (each path's class counts reproduced) or ``sample``.
    random_state:
        Seed or Generator of the draws.

    Returns
    -------
    (X, y)
        Encoded pseudo rows and their labels (or target values for a regression release).
    """
    rng = np.random.default_rng(random_state)
    if released.task == "regression":
        return pgen_regression(released.forest, scale=scale, rng=rng)
    return pseudo_data(released.classification_trees, released.report, scale, rng, class_assignment)


@dataclass(frozen=True)
class Mined:
    """What the miner learned from a study's releases (`mine`).

    ``scores`` has one row per global model: ``model``, ``train_rows`` (pooled pseudo rows; 0 for a model
    built from the releases themselves), ``accuracy`` and ``auc`` (``rmse`` and ``mae`` for a regression
    study) on the evaluation rows (NaN without them), ``parameters`` and ``selection`` (the hyperparameters
    the model was fitted with and how they were set). ``off_path`` and ``on_path`` say in words how PGEN
    drew the values a path leaves free and those inside a path's category sets; ``study`` is the study
    mined; ``results`` the miner's ``StudyResults`` message itself (the learned trees, the predictions,
    each owner's re-audit and what a reader of every release believes).
    """

    scores: pd.DataFrame
    off_path: str
    on_path: str
    study: Study
    results: Any


def _study_for(releases: Sequence[Release], study: Study | str | Path | None, seed: int) -> Study:
    """The study to mine ``releases`` under: the one given (a `Study` or a study.toml), else simulate's defaults."""
    if not releases:
        raise ValueError("mine needs at least one release")
    schema = releases[0].trees[0].schema
    if any(r.trees[0].schema.fingerprint != schema.fingerprint for r in releases):
        raise ValueError("mine: the releases are over different schemas; a study has one")
    if study is not None:
        found = study if isinstance(study, Study) else load_study_file(study).study
        if found.schema.fingerprint != schema.fingerprint:
            raise ValueError(f"mine: the releases' schema ({schema.fingerprint[:12]}) is not study "
                             f"{found.study_id}'s ({found.schema.fingerprint[:12]})")
        return found
    from modelshare.simulate import DEFAULT_MODELS, DEFAULT_OFF_PATH  # simulate's defaults, as `study init` writes them

    task = "regression" if isinstance(schema, RegressionSchema) else "classification"
    report = releases[0].report
    if any((r.report.mechanism, r.report.requirement) != (report.mechanism, report.requirement) for r in releases):
        raise ValueError("mine: the releases differ in mechanism or requirement; a study asks every owner for the same")
    n_classes = schema.n_classes if isinstance(schema, Schema) else None
    requirement = None if report.requirement is None else parse_requirement(report.requirement, n_classes=n_classes)
    record = registry.get(report.mechanism)
    depth = (report.parameters.get("depth") or record.default_max_depth) if record.whole_release else None
    return Study(study_id="api", schema=schema, mechanism=report.mechanism, requirement=requirement,
                 disclosure=report.parameters.get("disclosure", "counts"),
                 training=Training(learner=default_learner(report.mechanism), max_depth=depth),
                 global_models=tuple(DEFAULT_MODELS[task]), off_path=DEFAULT_OFF_PATH[task], seed=seed)


def mine(releases: Sequence[Release], evaluation: tuple[np.ndarray, np.ndarray] | None = None, *,
         study: Study | str | Path | None = None, global_models: Sequence[str] | None = None,
         off_path: str | None = None, on_path: str | None = None, pgen_scale: float | None = None,
         seed: int = 0) -> Mined:
    """Mine releases as a study's miner does: PGEN on every release, pooled, global models learned and scored.

    This runs the miner's own mining (`modelshare.miner_node.mining.mine`): owner ``i``'s release (in the given
    order, named ``owner-1``, ``owner-2``, ...) is regenerated with a generator seeded by ``(seed, i)``,
    the off-path and on-path laws are fitted over all releases when the study asks for them, the pooled
    rows train each global model with its setting (``auto``: cross-validated with one release's rows per
    fold), and each release is re-audited. Releases made as a study's owners make them
    (`deal`, `train_tree`, `release`) give the numbers ``modelshare simulate`` prints for that study.

    Parameters
    ----------
    releases:
        One `Release` per owner, over one schema.
    evaluation:
        Encoded held-out rows ``(X, y)`` to score the global models on; None scores nothing.
    study:
        The study whose mining to run: a `Study` or a study.toml file (its schema must be the releases').
        None: the defaults ``modelshare simulate`` and ``modelshare study init`` use (decision tree and
        naive Bayes, or the regression models; ``pgen_scale`` 10; uniform off-path and on-path draws;
        each model's default setting), with the releases' mechanism and requirement.
    global_models, off_path, on_path, pgen_scale, seed:
        Overrides of the study's ``[mining]`` values and seed (``off_path``: ``uniform``, ``marginal``,
        ``class`` or ``path``; ``on_path``: ``uniform`` or ``class``); None keeps the study's. ``seed`` is
        used only when ``study`` is None.

    Returns
    -------
    Mined
        The scores per global model, the PGEN laws used, the study and the miner's results message.
    """
    from dataclasses import replace

    base = _study_for(releases, study, seed)
    overrides: dict[str, Any] = {"global_models": None if global_models is None else tuple(global_models),
                                 "off_path": off_path, "on_path": on_path, "pgen_scale": pgen_scale}
    chosen = replace(base, **{key: value for key, value in overrides.items() if value is not None})
    if faults := chosen.mining_faults():
        raise ValueError("mine: " + "; ".join(faults))
    accepted = [AcceptedModel(f"owner-{i + 1}", DecodedModel(
        r.trees[0].schema, () if r.task == "regression" else r.classification_trees, r.report,
        r.forest if r.task == "regression" else None)) for i, r in enumerate(releases)]
    scored = None
    if evaluation is not None:
        X, y = evaluation
        scored = Evaluation(np.asarray(X), np.asarray(y), np.arange(len(y)))
    results = _mine(chosen, accepted, scored)
    regression = chosen.regression
    rows = []
    for model in results.models:
        row: dict[str, Any] = {"model": model.name, "train_rows": int(model.train_rows)}
        fields = ("rmse", "mae") if regression else ("accuracy", "auc")
        row |= {f: getattr(model, f) if model.HasField(f) else float("nan") for f in fields}
        row["parameters"] = {k: parameter_from_pb(v) for k, v in sorted(model.parameters.items())}
        row["selection"] = model.selection
        rows.append(row)
    return Mined(pd.DataFrame(rows), results.pgen_off_path, results.pgen_on_path, chosen, results)


def fit_global_model(name: str, schema: Schema | RegressionSchema, X: np.ndarray, y: np.ndarray, *,
                     random_state: int | None = 0, **params: Any) -> Any:
    """Fit one of the miner's global models on (pseudo-)data.

    Parameters
    ----------
    name:
        A classification model (``decision-tree``, ``naive-bayes``, ``random-forest``, ...) or, for a
        `RegressionSchema`, a regression model (``regression-tree``, ``random-forest``).
    schema, X, y:
        The schema and the encoded rows.
    random_state:
        Seed of the model's randomness.
    params:
        Overrides of the model's defaults (e.g. ``min_samples_leaf``).

    Returns
    -------
    The fitted model (``predict``; tree models expose their `Tree` as ``tree_``).
    """
    if isinstance(schema, RegressionSchema):
        return make_regression_model(name, random_state=random_state, **params).fit(X, y)
    return make_global_model(name, schema, random_state=random_state, **params).fit(X, y)


def run_study(schema: Schema, X: np.ndarray, y: np.ndarray, config: PipelineConfig | None = None, *,
              on_fold: Callable[[int, int], None] | None = None, summary: bool = True) -> pd.DataFrame:
    """The in-process model-sharing study: owners, releases, PGEN, global models, cross-validated.

    Parameters
    ----------
    schema, X, y:
        The schema and the encoded rows (dealt among ``config.n_sources`` owners per fold).
    config:
        The study's settings (`PipelineConfig`; its ``seed`` is the master random state). Every
        registered mechanism is accepted, the eps-DP ones included.
    on_fold:
        Called with (done, total) after each fold.
    summary:
        True: mean and standard deviation per (sources, method, model); False: one row per fold.

    Returns
    -------
    pandas.DataFrame
        Accuracy, class match and path match of BASIS, PGEN (and BASEGEN) global models.
    """
    results = _run_study(schema, X, y, config or PipelineConfig(), on_fold=on_fold)
    return summarize(results) if summary else results


def mechanisms() -> pd.DataFrame:
    """Every registered release mechanism: kind, requirement family and form, tasks, defaults."""
    return pd.DataFrame([m.describe() for m in registry.mechanisms()])


def read_release(path: str | Path) -> Release:
    """Read a model file written by `write_release` or ``modelshare release`` (classification trees)."""
    trees, report = read_model(path)
    if report is None:
        raise ValueError(f"{path}: the model file carries no privacy report; it is a bare tree, not a release")
    return Release(trees, report)


