"""The Python API a notebook needs: load a table, train a local tree, release, audit, PGEN, global models, a study.

``import modelshare as ms`` gives these names (`modelshare.__init__` re-exports them lazily, so the
command line does not pay for them). They are thin, documented doors onto the same code the
owner daemon, the miner and the CLI run: `release` is `common.mechanisms.release.release`, `pgen`
is the miner's PGEN of one release, `fit_global_model` the miner's global models, `run_study` the
in-process cross-validated model-sharing study. Every random choice takes ``random_state`` (an
int, a `numpy.random.Generator`, or None for fresh OS entropy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from common.audit.release import AuditResult, RegressionAuditResult
from common.audit.release import audit as _audit
from common.data.datasets import LoadedTable
from common.data.datasets import load_dataset as _load_dataset
from common.data.datasets import load_table as _load_table
from common.data.regression import RegressionSchema
from common.data.schema import Schema
from common.federation.model_io import read_model, write_release
from common.mechanisms import registry
from common.mechanisms.release import release
from common.privacy.report import Release
from common.privacy.requirements import path_rule
from common.trees.learners import make_learner
from common.trees.tree import Tree
from miner_node.global_models import make_global_model, make_regression_model
from miner_node.pgen import ClassAssignment, pgen_regression
from miner_node.tasks import pseudo_data
from modelshare.pipeline import PipelineConfig, summarize
from modelshare.pipeline import run_study as _run_study

__all__ = [
    "load_dataset", "load_table", "train_tree", "release", "audit", "pgen", "fit_global_model", "run_study",
    "mechanisms", "read_release", "write_release", "PipelineConfig", "Release", "Schema", "Tree",
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


def train_tree(schema: Schema, X: np.ndarray, y: np.ndarray, *, learner: str = "cart", max_depth: int | None = None,
               min_samples_leaf: int = 1, random_state: int | None = 0, public_cuts: bool = True,
               requirement: str | None = None, disclosure: str = "hit_miss") -> Tree:
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
    rule = path_rule(requirement, disclosure, n_classes=schema.n_classes) if requirement is not None else None  # type: ignore[arg-type]
    return make_learner(learner, schema, random_state=random_state, public_cuts=public_cuts, leaf_rule=rule,
                        **params).fit(X, y).tree_


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
    """Pseudo-data from one release, exactly as the miner makes it (PGEN).

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
    return pseudo_data(released.trees, released.report, scale, rng, class_assignment)  # type: ignore[arg-type]


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


