"""What mining depends on the study's task for: PGEN labels, global models, scores and the evaluation table.

A study is a *classification* study (a class column, trees with class counts) or a *regression*
study (a numeric target with public bounds, DiffPETs regression forests). `MiningTask` is the
one interface `modelshare.miner_node.mining.mine` reads; `task_for` picks the implementation from the
schema's type:

* **classification**: PGEN draws class labels from each path's counts (`pseudo_data`);
  the global models are `modelshare.miner_node.global_models.GLOBAL_MODELS`; a tree model's tree is kept in
  the results; the scores are accuracy, the predicted class indices and, for two classes, the ROC
  AUC of the predicted probabilities (left unset for a model without probabilities);
* **regression**: PGEN labels every row of a leaf with its released mean
  (`modelshare.miner_node.pgen.pgen_regression`); the global models are `REGRESSION_MODELS`; the scores are
  RMSE and MAE and the predicted values.

Either way each model's hyperparameters are the study's setting for it, chosen by `modelshare.miner_node.selection`
(cross-validation on the pseudo-data, the fixed rule with a dp study's leaf floor, or given values),
and the results say which and how.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
from sklearn.metrics import roc_auc_score

from modelshare.common.data.datasets.loading import load_table
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.data.task import load_regression_table
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import parameter_to_pb
from modelshare.common.federation.wire import DecodedModel, regression_tree_to_pb, tree_to_pb
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.registry import PseudoData
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.study import ModelPlan, Study
from modelshare.common.trees.metrics import accuracy, mae, rmse
from modelshare.common.trees.tree import Tree
from modelshare.miner_node.class_prior import ClassPriorModel, declined
from modelshare.miner_node.dp_pgen import dp_pgen_scale
from modelshare.miner_node.global_models import make_global_model, make_regression_model
from modelshare.miner_node.offpath import UNIFORM_OFF_PATH, OffPathTree, ReleasedLaw, redraw_off_path
from modelshare.miner_node.onpath import UNIFORM_ON_PATH, ClassSetLaw, OnPathTree, redraw_on_path
from modelshare.miner_node.pgen import ClassAssignment, ensemble_rows, pgen, pgen_chunks, pgen_ensemble, pgen_regression
from modelshare.miner_node.selection import Choice, choose

__all__ = ["RELEASE_STRIDE", "pool", "Evaluation", "Fitted", "MiningTask", "ClassificationTask", "RegressionTask",
           "task_for", "pseudo_data", "pseudo_sources", "pseudo_chunks", "pseudo_tree_chunks", "two_class_auc"]

_SEED_MODULUS = 2**31


class Evaluation(NamedTuple):
    """A study's encoded evaluation table: attributes ``X``, truth ``y``, and each row's 0-based data row in the file.

    ``rows`` lets the admin join predictions back to the evaluation file (rows with a missing
    value are dropped by the table readers, so a position in ``X`` is not a row of the file);
    ``dropped`` counts those rows, for the miner's log and the study's results (0 for a table not read
    from a file).
    """

    X: np.ndarray
    y: np.ndarray
    rows: np.ndarray
    dropped: int = 0


class Fitted(NamedTuple):
    """A fitted global model and the choice of its hyperparameters (what the results report)."""

    model: Any
    choice: Choice


class MiningTask(Protocol):
    """The task-dependent steps of mining one study."""

    name: str

    def load_evaluation(self, csv_bytes: bytes) -> Evaluation:
        """Encode the study's evaluation table; SchemaError naming the row and column on bad input."""
        ...

    def pseudo_data(self, model: DecodedModel, study: Study, rng: np.random.Generator,
                    law: ReleasedLaw | None = None,
                    on_path: ClassSetLaw | None = None) -> tuple[np.ndarray, np.ndarray]:
        """PGEN on one accepted model: encoded attributes and labels (or target values).

        ``law`` is the study's off-path law (`off_path_law`; classification only), None for uniform draws;
        ``on_path`` the study's on-path law (`on_path_law`; classification only), None for uniform draws.
        """
        ...

    def off_path_law(self, study: Study, models: Sequence[DecodedModel]) -> tuple[ReleasedLaw | None, str]:
        """The law PGEN draws free attributes from under the study's ``off_path`` (None: uniform), and that in words."""
        ...

    def on_path_law(self, study: Study, models: Sequence[DecodedModel]) -> tuple[ClassSetLaw | None, str]:
        """The law PGEN draws values inside allowed category sets
        from under the study's ``on_path``, and that in words."""
        ...

    def sources(self, model: DecodedModel, study: Study, rows: int) -> np.ndarray:
        """Per pseudo row of the model, the index of the released tree it was drawn from (0 where unknown)."""
        ...

    def size(self, model: DecodedModel) -> tuple[float, int]:
        """The model's mean released root count (its tuples) and its number of leaves."""
        ...

    def released(self, entry: fpb.OwnerResult, model: DecodedModel) -> None:
        """Copy the model's released trees into the owner's result (what a report draws)."""
        ...

    def fit(self, name: str, plan: ModelPlan, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None,
            floor: ClassPriorModel | None = None) -> Fitted:
        """Global model ``name`` of the study, its hyperparameters chosen and fitted on the pooled pseudo-data only.

        ``groups`` names each row's released tree (`modelshare.miner_node.selection`), None when unknown; ``floor`` is a
        dp study's class prior (`modelshare.miner_node.class_prior`),
        a candidate of an ``"auto"`` choice (classification only).
        """
        ...

    def score(self, entry: fpb.GlobalModelResult, fitted: Fitted, evaluation: Evaluation | None) -> None:
        """Fill ``entry`` with what the results carry of the model: its settings and scores on the evaluation table."""
        ...

    def truth(self, results: fpb.StudyResults, evaluation: Evaluation) -> None:
        """Record the evaluation rows' file positions and true classes or values in ``results``."""
        ...

    def empty_labels(self) -> np.ndarray:
        """The labels of an empty pooled table."""
        ...


def _pgen_rows(tree: Tree, scale: float) -> int | None:
    """Rows to generate from one tree: hit + miss per path at scale 1, else scale x its tuples."""
    return None if scale == 1.0 else int(round(scale * tree.root.total))


def _sampling_rate(report: PrivacyReport | None) -> float:
    """The per-tree sampling rate beta a dps release (kanon-rdt) states (checked by the audit); 1 otherwise."""
    if report is None or report.mechanism not in registry.names(family="dps"):
        return 1.0
    return float(report.parameters["beta"])


def _redraw(prepared: tuple[OffPathTree | None, OnPathTree | None], X: np.ndarray, y: np.ndarray,
            rng: np.random.Generator) -> np.ndarray:
    """One tree's PGEN rows with the study's on-path, then off-path redraws (each only when its law is given).

    The two touch different values: the on-path law the categories a path constrains to a set, the
    off-path law the attributes it leaves free.
    """
    off, on = prepared
    if on is not None:
        X = redraw_on_path(on, X, y, rng)
    if off is not None:
        X = redraw_off_path(off, X, y, rng)
    return X


def _prepare(tree: Tree, law: ReleasedLaw | None,
             on_path: ClassSetLaw | None) -> tuple[OffPathTree | None, OnPathTree | None]:
    """What `_redraw` needs of ``tree``, built once per tree."""
    return (None if law is None else OffPathTree.of(tree, law), None if on_path is None
            else OnPathTree.of(tree, on_path))


RELEASE_STRIDE = 1 << 16
"""Owner ``i``'s released trees are the cross-validation groups ``i * RELEASE_STRIDE + tree index``."""


def pool(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], n_attributes: int,
         empty_labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Every release's pseudo rows ``(X, y, tree of each row)``, in owner order, as one table and its CV groups.

    The one pooling of the miner (`modelshare.miner_node.mining`) and the in-process pipeline: a row's group is its
    owner's index times `RELEASE_STRIDE` plus the released tree it came from (`pseudo_sources`), so that
    `modelshare.miner_node.selection` holds out whole released trees; no release: an empty table and no groups.
    """
    if not parts:
        return np.empty((0, n_attributes)), empty_labels, None
    return (np.vstack([X for X, _, _ in parts]), np.concatenate([y for _, y, _ in parts]),
            np.concatenate([i * RELEASE_STRIDE + trees for i, (_, _, trees) in enumerate(parts)]))


def own_step(mechanism: str) -> PseudoData | None:
    """The mechanism's own pseudo-data step (its registry record's), or None for PGEN on the released paths."""
    return registry.get(mechanism).resolve_pseudo_data()


def pseudo_data(trees: Sequence[Tree], report: PrivacyReport | None, scale: float, rng: np.random.Generator,
                class_assignment: ClassAssignment, law: ReleasedLaw | None = None,
                on_path: ClassSetLaw | None = None) -> tuple[np.ndarray, np.ndarray]:
    """PGEN on one release: its single tree, or every tree of its ensemble (module docstring).

    A dp release yields at most `modelshare.miner_node.dp_pgen.MAX_DP_PGEN_ROWS` rows, whatever its noise adds up to,
    and one that declined to release trees none (its class histogram feeds the study's prior,
    `modelshare.miner_node.class_prior`). A release whose mechanism has its own pseudo-data step
    (`modelshare.common.mechanisms.registry.PseudoData`, such as
    dpea-nb's calibrated naive Bayes) gets that step's rows; neither ``law`` nor ``on_path`` applies to it.
    With ``law`` (the study's `modelshare.miner_node.offpath.ReleasedLaw`), each tree's rows have the attributes
    their path leaves free redrawn from it; with ``on_path`` (`modelshare.miner_node.onpath.ClassSetLaw`), their
    categories inside the path's allowed sets; without, they stay PGEN's uniform draws (the paper's).
    """
    if declined(report) is not None:  # its class histogram alone: the study's prior, not rows
        return np.empty((0, trees[0].schema.n_attributes)), np.empty(0, dtype=np.int64)
    if report is not None and (step := own_step(report.mechanism)) is not None:  # a model, not a partition
        return step.rows(trees, report, scale, rng, class_assignment)
    beta = _sampling_rate(report)
    if report is not None:
        scale = dp_pgen_scale(scale, report.mechanism, trees)
    single = len(trees) == 1 and beta == 1.0
    if law is None and on_path is None:
        if single:
            return pgen(trees[0], rows=_pgen_rows(trees[0], scale), rng=rng, class_assignment=class_assignment)
        return pgen_ensemble(trees, scale=scale, beta=beta, rng=rng, class_assignment=class_assignment)
    sizes = [_pgen_rows(trees[0], scale)] if single else [int(n) for n in ensemble_rows(trees, scale=scale, beta=beta)]
    parts = []
    for tree, rows in zip(trees, sizes, strict=False):
        X, y = pgen(tree, rows=rows, rng=rng, class_assignment=class_assignment)
        parts.append((_redraw(_prepare(tree, law, on_path), X, y, rng), y))
    return np.vstack([X for X, _ in parts]), np.concatenate([y for _, y in parts])


def pseudo_tree_chunks(trees: Sequence[Tree], report: PrivacyReport | None, scale: float, rng: np.random.Generator,
                       class_assignment: ClassAssignment, chunk_rows: int, law: ReleasedLaw | None = None,
                       on_path: ClassSetLaw | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """`pseudo_data`'s rows (the same sizes per tree, path and class)
    as chunks ``(X, y, tree)`` of at most ``chunk_rows`` rows.

    ``tree`` is the index of the released tree the chunk was drawn from (a chunk never spans two).
    What the Parquet writer (`modelshare.miner_node.pseudo_parquet`) streams, so that no owner's pseudo table is ever
    whole in memory; the values are other draws than `pseudo_data`'s from the same generator. With ``law``
    and ``on_path`` each chunk is redrawn from them, as `pseudo_data` does.
    """
    if declined(report) is not None:  # its class histogram alone (`pseudo_data`)
        return
    if report is not None and (step := own_step(report.mechanism)) is not None:  # drawn whole, then cut
        X, y = step.rows(trees, report, scale, rng, class_assignment)
        for start in range(0, len(y), chunk_rows):
            yield X[start:start + chunk_rows], y[start:start + chunk_rows], 0
        return
    beta = _sampling_rate(report)
    if report is not None:
        scale = dp_pgen_scale(scale, report.mechanism, trees)
    if len(trees) == 1 and beta == 1.0:
        sizes: list[int | None] = [_pgen_rows(trees[0], scale)]
    else:
        sizes = [int(rows) for rows in ensemble_rows(trees, scale=scale, beta=beta)]
    for index, (tree, rows) in enumerate(zip(trees, sizes, strict=False)):
        prepared = _prepare(tree, law, on_path)  # once per tree, used by every chunk
        for X, y in pgen_chunks(tree, rows=rows, rng=rng, class_assignment=class_assignment, chunk_rows=chunk_rows):
            yield _redraw(prepared, X, y, rng), y, index


def pseudo_chunks(trees: Sequence[Tree], report: PrivacyReport | None, scale: float, rng: np.random.Generator,
                  class_assignment: ClassAssignment, chunk_rows: int, law: ReleasedLaw | None = None,
                  on_path: ClassSetLaw | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """`pseudo_tree_chunks`' chunks without their tree (what bench/pgen_parquet.py times)."""
    for X, y, _ in pseudo_tree_chunks(trees, report, scale, rng, class_assignment, chunk_rows, law, on_path):
        yield X, y


def two_class_auc(model: Any, X: np.ndarray, y: np.ndarray, n_classes: int) -> float | None:
    """ROC AUC of class index 1 from ``model``'s predicted probabilities on ``X``.

    None unless the task has two classes, ``y`` holds both and the model predicts probabilities
    (a rule list does not); a model trained on one class scores every row alike (AUC 0.5).
    """
    if n_classes != 2 or not hasattr(model, "predict_proba") or np.unique(y).shape[0] != 2:
        return None
    proba = np.asarray(model.predict_proba(X), dtype=np.float64)
    classes = list(np.asarray(getattr(model, "classes_", np.arange(proba.shape[1]))).astype(np.int64))
    positive = proba[:, classes.index(1)] if 1 in classes else np.zeros(proba.shape[0])
    return float(roc_auc_score(y == 1, positive))


def _record_choice(entry: fpb.GlobalModelResult, choice: Choice) -> None:
    """The model's hyperparameters and how they were set, into its result."""
    entry.selection = choice.selection
    for key, value in choice.parameters.items():
        entry.parameters[key].CopyFrom(parameter_to_pb(value))


def pseudo_sources(trees: Sequence[Tree], report: PrivacyReport | None, scale: float, rows: int) -> np.ndarray:
    """The released tree each of `pseudo_data`'s ``rows`` rows was drawn from (its index; 0 for a single tree).

    `pseudo_data` stacks an ensemble's rows tree by tree, each tree's share sized by
    `modelshare.miner_node.pgen.ensemble_rows`;
    `modelshare.miner_node.selection` keeps the rows of one tree in one fold.
    """
    beta = _sampling_rate(report)
    if report is not None:
        scale = dp_pgen_scale(scale, report.mechanism, trees)
    if (len(trees) == 1 and beta == 1.0) or declined(report) is not None or (
            report is not None and own_step(report.mechanism) is not None):
        return np.zeros(rows, dtype=np.int64)
    return np.repeat(np.arange(len(trees)), ensemble_rows(trees, scale=scale, beta=beta))


def _evaluation_file(csv_bytes: bytes, read: Any) -> Any:
    """``read(path)`` on the evaluation table's bytes, written to a temporary file for the table readers."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "evaluation.csv"
        path.write_bytes(csv_bytes)
        return read(path)


class ClassificationTask:
    """Classification: class labels, accuracy, the classification global models."""

    name = "classification"

    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def load_evaluation(self, csv_bytes: bytes) -> Evaluation:
        table = _evaluation_file(csv_bytes, lambda path: load_table(path, self.schema.class_name, schema=self.schema,
                                                                     source="evaluation table"))
        X, y = self.schema.encode(table.frame, source="evaluation table")
        return Evaluation(X, y, table.frame.index.to_numpy(dtype=np.int64), table.dropped_rows)

    def pseudo_data(self, model: DecodedModel, study: Study, rng: np.random.Generator,
                    law: ReleasedLaw | None = None,
                    on_path: ClassSetLaw | None = None) -> tuple[np.ndarray, np.ndarray]:
        # the ignore below: Study checked it
        return pseudo_data(model.trees, model.report, study.pgen_scale, rng, study.class_assignment,  # type: ignore[arg-type]
                           law, on_path)

    def off_path_law(self, study: Study, models: Sequence[DecodedModel]) -> tuple[ReleasedLaw | None, str]:
        mode = study.off_path
        # its own rows (`pseudo_data`); `Study` refuses another mode
        if (step := own_step(study.mechanism)) is not None:
            return None, step.describe
        trees = [tree for model in models for tree in model.trees]
        if mode == "uniform" or not trees:
            return None, UNIFORM_OFF_PATH
        law = ReleasedLaw.from_trees(trees, mode)  # type: ignore[arg-type]  # Study checked off_path
        return law, law.describe()

    def on_path_law(self, study: Study, models: Sequence[DecodedModel]) -> tuple[ClassSetLaw | None, str]:
        if (step := own_step(study.mechanism)) is not None:  # its own rows (`pseudo_data`); `Study` refuses "class"
            return None, step.describe
        trees = [tree for model in models for tree in model.trees]
        if study.on_path == "uniform" or not trees:
            return None, UNIFORM_ON_PATH
        law = ClassSetLaw.from_trees(trees)
        return law, law.describe()

    def sources(self, model: DecodedModel, study: Study, rows: int) -> np.ndarray:
        return pseudo_sources(model.trees, model.report, study.pgen_scale, rows)

    def size(self, model: DecodedModel) -> tuple[float, int]:
        return float(np.mean([t.root.total for t in model.trees])), sum(t.n_leaves for t in model.trees)

    def released(self, entry: fpb.OwnerResult, model: DecodedModel) -> None:
        entry.trees.extend(tree_to_pb(t) for t in model.trees)

    def fit(self, name: str, plan: ModelPlan, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None,
            floor: ClassPriorModel | None = None) -> Fitted:
        seed = plan.seed % _SEED_MODULUS

        def build(params: dict[str, Any]) -> Any:
            return make_global_model(name, self.schema, random_state=seed, **params)

        choice = choose(name, plan, X, y, build, regression=False, groups=groups, floor=floor)
        return Fitted(floor if choice.floor and floor is not None else build(choice.parameters).fit(X, y), choice)

    def score(self, entry: fpb.GlobalModelResult, fitted: Fitted, evaluation: Evaluation | None) -> None:
        model = fitted.model
        _record_choice(entry, fitted.choice)
        tree = getattr(model, "tree_", None)
        if isinstance(tree, Tree):
            entry.tree.CopyFrom(tree_to_pb(tree))
        if evaluation is not None:
            pred = np.asarray(model.predict(evaluation.X), dtype=np.int64)
            entry.accuracy = accuracy(evaluation.y, pred)
            entry.predictions.extend(int(p) for p in pred)
            auc = two_class_auc(model, evaluation.X, evaluation.y, self.schema.n_classes)
            if auc is not None:
                entry.auc = auc

    def truth(self, results: fpb.StudyResults, evaluation: Evaluation) -> None:
        results.evaluation_row.extend(evaluation.rows.tolist())
        results.evaluation_class.extend(evaluation.y.astype(np.int64).tolist())

    def empty_labels(self) -> np.ndarray:
        return np.empty(0, dtype=np.int64)


class RegressionTask:
    """Regression: leaf means as targets, RMSE and MAE, the regression global models."""

    name = "regression"

    def __init__(self, schema: RegressionSchema) -> None:
        self.schema = schema

    def load_evaluation(self, csv_bytes: bytes) -> Evaluation:
        table = _evaluation_file(csv_bytes, lambda path: load_regression_table(
            path, self.schema.target.name, schema=self.schema, source="evaluation table"))
        return Evaluation(table.X, table.y, table.rows, table.dropped_rows)

    def pseudo_data(self, model: DecodedModel, study: Study, rng: np.random.Generator,
                    law: ReleasedLaw | None = None,
                    on_path: ClassSetLaw | None = None) -> tuple[np.ndarray, np.ndarray]:
        return pgen_regression(self._forest(model), scale=study.pgen_scale, rng=rng)

    def off_path_law(self, study: Study, models: Sequence[DecodedModel]) -> tuple[ReleasedLaw | None, str]:
        return None, UNIFORM_OFF_PATH  # a regression study's off_path is "uniform" (`modelshare.common.study.Study`)

    def on_path_law(self, study: Study, models: Sequence[DecodedModel]) -> tuple[ClassSetLaw | None, str]:
        return None, UNIFORM_ON_PATH  # a regression study's on_path is "uniform" (`modelshare.common.study.Study`)

    def sources(self, model: DecodedModel, study: Study, rows: int) -> np.ndarray:
        return np.zeros(rows, dtype=np.int64)  # a forest's rows are not told apart by tree: the owner is the group

    def size(self, model: DecodedModel) -> tuple[float, int]:
        forest = self._forest(model)
        return (float(np.mean([tree.nodes[0].count for tree in forest.trees])),
                sum(len(tree.leaves) for tree in forest.trees))

    def released(self, entry: fpb.OwnerResult, model: DecodedModel) -> None:
        entry.regression_trees.extend(regression_tree_to_pb(t) for t in self._forest(model).trees)

    def fit(self, name: str, plan: ModelPlan, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None,
            floor: ClassPriorModel | None = None) -> Fitted:
        seed = plan.seed % _SEED_MODULUS

        def build(params: dict[str, Any]) -> Any:
            return make_regression_model(name, random_state=seed, **params)

        choice = choose(name, plan, X, y, build, regression=True, groups=groups)
        return Fitted(build(choice.parameters).fit(X, y), choice)

    def score(self, entry: fpb.GlobalModelResult, fitted: Fitted, evaluation: Evaluation | None) -> None:
        model = fitted.model
        _record_choice(entry, fitted.choice)
        if evaluation is not None:
            predicted = np.asarray(model.predict(evaluation.X), dtype=np.float64)
            entry.rmse, entry.mae = rmse(evaluation.y, predicted), mae(evaluation.y, predicted)
            entry.values.extend(predicted.tolist())

    def truth(self, results: fpb.StudyResults, evaluation: Evaluation) -> None:
        results.evaluation_row.extend(evaluation.rows.tolist())
        results.evaluation_value.extend(evaluation.y.astype(np.float64).tolist())

    def empty_labels(self) -> np.ndarray:
        return np.empty(0)

    @staticmethod
    def _forest(model: DecodedModel) -> Any:
        """The model's regression forest; a classification model in a regression study is a miner bug."""
        if model.forest is None:
            raise ValueError("a regression study holds a classification model")
        return model.forest


def task_for(schema: Schema | RegressionSchema) -> ClassificationTask | RegressionTask:
    """The mining task of a study over ``schema``: regression for a `RegressionSchema`, classification otherwise."""
    return RegressionTask(schema) if isinstance(schema, RegressionSchema) else ClassificationTask(schema)
