"""DiffPETs regression error against epsilon (`modelshare experiment dp-regression`).

Input: any table with a numeric target, ``--data FILE --target COLUMN --target-range LOW,HIGH``
(or a bundled ``--dataset`` with one of its numeric columns, or its class, as ``--target``).
``LOW,HIGH`` are the target's PUBLIC bounds: DiffPETs scales the target to [0, 1] by them and the
sensitivity of every leaf sum rests on them, so they must come from what is known about the
quantity (a 0-10 rating scale, counts >= 0 ...), never from the private rows; that is why the
option is required and never defaulted from the data. Values outside them are clipped by DiffPETs
(the errors are still measured against the raw values). The attributes' ranges and categories come
from ``--schema`` (a modelshare schema file; its class column, if it is not the target, becomes a
categorical attribute over its public classes), from the bundled schema with ``--dataset``, or,
without either, are inferred from the rows by `modelshare.common.data.datasets.load_table`: all-number columns
become numeric on their observed range, the rest categorical. Inferred ranges disclose the table's
extremes, so such a run says so on stderr and in ``results.json``: the releases are eps-DP only
if those ranges are taken as public.

Protocol (as `experiments.dp`): ``repeats`` random 80/20 splits
(``train_test_split(..., random_state=seed + i)``, not stratified: the target is numeric);
``--folds K`` runs shuffled K-fold cross-validation per repeat instead; with ``--test-data`` every
repeat trains on the whole table and tests on that separate table. Per split and total epsilon,
one `modelshare.common.mechanisms.diffpets.DiffPetsRegressor` forest of ``trees`` trees of depth ``depth`` is released
from the training rows and scored on the test rows twice over:

- ``forest``: the released forest's own prediction (the mean of its trees' leaf values);
- ``pgen->regression-tree``: a scikit-learn ``DecisionTreeRegressor`` learned from the forest's
  PGEN rows (`modelshare.miner_node.pgen.pgen_regression`, scale 1: about as many rows as the training part).
  Every tree contributes rows drawn uniformly in its leaves' regions, each carrying that leaf's
  mean with no spread, so where the trees' regions overlap, neighbouring pseudo rows carry
  different trees' means, and every attribute a shallow leaf does not constrain is uniform noise.
  A fully grown tree would split on that noise down to single rows and predict one tree's leaf
  value at random instead of the forest's average, so the tree gets a ``min_samples_leaf`` of
  `modelshare.miner_node.dp_pgen.PGEN_LEAF_SHARE` of the PGEN rows, the floor a dp study's global decision
  tree gets for the same reason; its leaves then average the trees' values over their regions.

Metrics: RMSE and MAE on the test rows, on the target's original scale. The non-private
references, per split: the training rows' mean as a constant predictor, and a depth-5
``DecisionTreeRegressor`` on the real training rows.

Defaults: epsilons 0.01, 0.1, 0.5, 1, 10; 10 trees (the DiffPETs paper's t for regression);
depth h = floor(k / 2) with k the table's dimension as the paper's Table 1 counts it for its
regression sets, attributes plus the target (``docs/paper-notes.md`` §1.10 A7): h = 6 for
White Wine (11 + 1) and Daily Demand (12 + 1).

Each (split, epsilon) is one task seeded from (seed, repeat, fold, a CRC of the setting's name),
so ``--jobs`` and the epsilon list never change a setting's numbers. Outputs: ``results.csv`` (one
row per split x epsilon x scored-as), ``summary.csv`` (mean and sd per epsilon x scored-as x
metric), ``results.json`` (with the references and the regression schema), and
``rmse_vs_epsilon.png`` / ``mae_vs_epsilon.png`` (log x axis, the references as flat lines).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table
from sklearn.tree import DecisionTreeRegressor

from experiments.dp import DEFAULT_EPSILONS, REFERENCE_DEPTH
from experiments.output import (
    PlotResult,
    Results,
    Series,
    Split,
    add_common_options,
    finish,
    held_out_or_separate,
    plot_lines,
    records,
    run_tasks,
    series_by,
    spread,
    task_seed,
)
from modelshare.cli.common import add_max_depth, err, float_list, note_dropped, out, positive_int
from modelshare.common.data.datasets import LoadedTable, load_dataset, read_frame
from modelshare.common.data.datasets import load_table as load_file
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import (
    Attribute,
    CategoricalAttribute,
    NumericAttribute,
    Schema,
    SchemaError,
)
from modelshare.common.mechanisms.diffpets import DiffPetsRegressor
from modelshare.common.trees.metrics import mae, rmse
from modelshare.common.trees.regression import RegressionForest
from modelshare.miner_node.dp_pgen import PGEN_LEAF_SHARE
from modelshare.miner_node.global_models import make_regression_model
from modelshare.miner_node.pgen import pgen_regression

__all__ = [
    "RegressionSettings",
    "RegressionTable",
    "default_depth",
    "load_regression",
    "run_dp_regression",
    "summarize_dp_regression",
    "references",
    "configure",
]

DEFAULT_TREES = 10
"""The DiffPETs paper's t for its regression experiments (NOTES §1.11)."""
FOREST = "forest"
PGEN_TREE = "pgen->regression-tree"
METRICS = {"rmse": "RMSE", "mae": "MAE"}
REFERENCE_NAMES = {"mean": "training mean (non-private)",
                   "tree": f"regression tree depth {REFERENCE_DEPTH} on the real rows (non-private)"}
INFERRED = "inferred from the rows (data-derived: discloses the table's extremes)"


def default_depth(schema: RegressionSchema) -> int:
    """floor(k / 2) with k = attributes + target, the dimension the paper's Table 1 gives its regression sets."""
    return max(1, (schema.n_attributes + 1) // 2)


@dataclass(frozen=True)
class RegressionSettings:
    """The epsilon grid at one forest shape, the split protocol, and where the public ranges came from."""

    target: str
    target_range: tuple[float, float]
    depth: int
    attribute_ranges: str
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    trees: int = DEFAULT_TREES
    folds: int = 1
    repeats: int = 3
    test_size: float = 0.2
    seed: int = 0
    test_data: str | None = None


# -------------------------------------------------------------------- input
@dataclass(frozen=True)
class RegressionTable:
    """A regression table encoded over its schema; ``table`` carries the frame and source for `Results`."""

    table: LoadedTable
    schema: RegressionSchema
    X: np.ndarray
    y: np.ndarray
    attribute_ranges: str


def _target_range(text: str) -> tuple[float, float]:
    """``--target-range LOW,HIGH``: two finite numbers with LOW < HIGH."""
    parts = text.split(",")
    try:
        low, high = (float(v) for v in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH (the target's two public bounds), got {text!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise argparse.ArgumentTypeError(f"the bounds must be finite numbers, got {text!r}")
    if not low < high:
        raise argparse.ArgumentTypeError(f"LOW must be below HIGH, got {text!r}")
    return low, high


def regression_attributes(schema: Schema, target: str, source: str) -> tuple[Attribute, ...]:
    """The attributes predicting ``target`` under a classification schema's public domains.

    The target is the schema's class (its class list is then unused) or one of its numeric
    attributes; in the latter case the class column becomes a categorical attribute over the
    schema's classes, which are public like every other category.
    """
    if target == schema.class_name:
        return schema.attributes
    if target not in schema.names:
        raise SchemaError(f"--target is neither the schema's class {schema.class_name!r} nor one of its attributes "
                          f"{list(schema.names)}", source=source, column=target)
    if not isinstance(schema.attributes[schema.index(target)], NumericAttribute):
        raise SchemaError("--target must be numeric; the schema makes it categorical", source=source, column=target)
    return (*(a for a in schema.attributes if a.name != target),
            CategoricalAttribute(schema.class_name, schema.classes))


def target_values(frame: pd.DataFrame, target: str, source: str) -> np.ndarray:
    """The target column as float64; SchemaError naming the first row whose value is not a finite number."""
    values: np.ndarray = pd.to_numeric(frame[target], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        label = frame.index[bad[0]]
        raise SchemaError(f"--target values must be finite numbers; {bad.size} row(s) are not", source=source,
                          row=int(label) + 1, column=target, value=frame[target].iloc[bad[0]])
    return values


def read_rows(path: Path, schema: RegressionSchema) -> tuple[pd.DataFrame, int]:
    """The schema's columns of a table file with rows missing any of them dropped, and how many were dropped."""
    source = str(path)
    frame = read_frame(path, source=source)
    columns = [*schema.features().names, schema.target.name]
    absent = [c for c in columns if c not in frame.columns]
    if absent:
        raise SchemaError(f"columns {absent} are missing; the table has {list(frame.columns)}", source=source,
                          column=absent[0])
    frame = frame[columns]
    kept = frame.dropna()
    if kept.empty:
        raise SchemaError(f"every one of the {len(frame)} row(s) has a missing value", source=source)
    return kept, len(frame) - len(kept)


def encode_rows(frame: pd.DataFrame, schema: RegressionSchema, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Encoded attributes (checked against the schema's domains) and the raw target values."""
    return schema.features().encode_attributes(frame, source=source), target_values(frame, schema.target.name, source)


def _source_attributes(args: argparse.Namespace) -> tuple[pd.DataFrame, tuple[Attribute, ...], str, int, str]:
    """(frame, attributes, source, dropped rows, where the ranges came from) of ``--dataset`` or ``--data``."""
    if (args.data is None) == (args.dataset is None):
        raise SchemaError("give exactly one input table: --dataset NAME or --data FILE")
    if args.dataset is not None:
        if args.schema is not None:
            raise SchemaError("--schema describes --data; a bundled --dataset has its own schema")
        loaded = load_dataset(args.dataset)
        note_dropped(loaded.source, loaded.dropped_rows)
        return (loaded.frame, regression_attributes(loaded.schema, args.target, loaded.source), loaded.source,
                loaded.dropped_rows, f"bundled schema of {args.dataset} (public)")
    source = str(args.data)
    if args.schema is not None:
        attributes = regression_attributes(Schema.load(args.schema), args.target, str(args.schema))
        target = NumericAttribute(args.target, *args.target_range)
        frame, dropped = read_rows(args.data, RegressionSchema(attributes, target))
        return frame, attributes, source, dropped, f"schema file {args.schema}"
    columns = list(read_frame(args.data, source=source).columns)
    if args.target not in columns:  # load_file would call it the class column
        raise SchemaError(f"--target column not found; the columns are {columns}", source=source, column=args.target)
    loaded = load_file(args.data, args.target)  # the target is read as the (text) class column: no attribute
    note_dropped(loaded.source, loaded.dropped_rows)
    return loaded.frame, loaded.schema.attributes, source, loaded.dropped_rows, INFERRED


def load_regression(args: argparse.Namespace) -> RegressionTable:
    """The input table of ``--dataset``/``--data`` with ``--target`` on ``--target-range``, warnings on stderr."""
    frame, attributes, source, dropped, ranges = _source_attributes(args)
    schema = RegressionSchema(attributes, NumericAttribute(args.target, *args.target_range))
    X, y = encode_rows(frame, schema, source)
    if dropped:
        err.print(f"[yellow]{source}: dropped {dropped} row(s) with missing values[/]", highlight=False)
    if ranges == INFERRED:
        err.print(f"[yellow]{source}: no --schema, so the attributes' ranges and categories were inferred from these "
                  "rows; they disclose the table's extremes, and the releases are eps-DP only if those ranges are "
                  "taken as public (give --schema FILE with public ranges for a real release)[/]", highlight=False)
    outside = int(np.count_nonzero((y < schema.target.low) | (y > schema.target.high)))
    if outside:
        err.print(f"[yellow]{source}: {outside} value(s) of {args.target!r} lie outside --target-range "
                  f"[{schema.target.low:g}, {schema.target.high:g}]; DiffPETs clips them to the bounds[/]",
                  highlight=False)
    return RegressionTable(LoadedTable(frame, schema.features(), source, dropped), schema, X, y, ranges)


# -------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class _Task:
    """One release at ``epsilon`` on one split, with its own seed."""

    split: Split
    epsilon: float
    seed: int


Context = tuple[RegressionSchema, np.ndarray, np.ndarray, np.ndarray, np.ndarray, RegressionSettings]
"""(schema, X, y, X_test, y_test, settings): a split's test indices point into X_test, y_test."""


def errors(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """RMSE and MAE of the predictions (`modelshare.common.trees.metrics`); a NaN prediction gives NaN for both."""
    if np.isnan(np.asarray(y_pred, dtype=np.float64)).any():
        return {"rmse": math.nan, "mae": math.nan}
    return {"rmse": rmse(y_true, y_pred), "mae": mae(y_true, y_pred)}


def pgen_tree_errors(forest: RegressionForest, X_test: np.ndarray, y_test: np.ndarray, rng: np.random.Generator,
                     seed: int) -> tuple[dict[str, float], int]:
    """Errors of a regression tree learned from the forest's PGEN rows (module docstring), and the PGEN row count.

    A forest whose noisy counts are all <= 0 yields no rows to learn from: NaN errors.
    """
    Xp, yp = pgen_regression(forest, scale=1.0, rng=rng)
    if not len(yp):
        return {name: math.nan for name in METRICS}, 0
    tree = make_regression_model("regression-tree", random_state=seed,
                                 min_samples_leaf=max(1, round(PGEN_LEAF_SHARE * len(yp))))  # the miner's learner
    return errors(y_test, tree.fit(Xp, yp).predict(X_test)), len(yp)


def _run_setting(context: Context, task: _Task) -> list[dict[str, Any]]:
    schema, X, y, X_eval, y_eval, settings = context
    X_te, y_te = X_eval[task.split.test], y_eval[task.split.test]
    rng = np.random.default_rng(task.seed)  # one stream: the release, then PGEN
    forest = DiffPetsRegressor(task.epsilon, settings.trees, settings.depth).fit(
        schema, X[task.split.train], y[task.split.train], rng)
    pgen_scores, pgen_rows = pgen_tree_errors(forest, X_te, y_te, rng, task.seed)
    scores = {FOREST: errors(y_te, forest.predict(X_te)), PGEN_TREE: pgen_scores}
    return [{"repeat": task.split.repeat, "fold": task.split.fold, "depth": settings.depth, "trees": settings.trees,
             "epsilon": task.epsilon, "scored_as": scored_as, **metrics, "pgen_rows": pgen_rows}
            for scored_as, metrics in scores.items()]




def run_dp_regression(schema: RegressionSchema, X: np.ndarray, y: np.ndarray, settings: RegressionSettings, *,
                      jobs: int = 1,
                      test: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The raw records (one per split x epsilon x scored-as) and the per-split references.

    ``test`` is a separate test table (X, y) over ``schema``; without it the splits hold out rows.
    """
    X_eval, y_eval = test if test is not None else (X, y)
    split_list = held_out_or_separate(y, None if test is None else y_eval.shape[0], folds=settings.folds,
                                      repeats=settings.repeats, seed=settings.seed, test_size=settings.test_size,
                                      stratify=False)
    tasks = [_Task(split, e, task_seed(settings.seed, split, f"diffpets-regression/{e!r}"))
             for split in split_list for e in settings.epsilons]
    context: Context = (schema, X, y, X_eval, y_eval, settings)
    rows = run_tasks(_run_setting, tasks, context=context, jobs=jobs,
                     label=f"releases x splits ({len(settings.epsilons)} epsilons)")
    raw = pd.DataFrame.from_records([r for task_rows in rows for r in task_rows])
    return raw, references(X, y, X_eval, y_eval, split_list, settings.seed)


def references(X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, y_eval: np.ndarray, split_list: Sequence[Split],
               seed: int) -> pd.DataFrame:
    """Per split, the non-private errors: the training mean and a depth-5 regression tree on the real rows."""
    frames: list[dict[str, Any]] = []
    for split in split_list:
        y_tr, y_te = y[split.train], y_eval[split.test]
        tree = DecisionTreeRegressor(max_depth=REFERENCE_DEPTH, random_state=(seed + split.repeat) % 2**32)
        predictions = {"mean": np.full(y_te.shape, y_tr.mean()),
                       "tree": tree.fit(X[split.train], y_tr).predict(X_eval[split.test])}
        frames.extend({"repeat": split.repeat, "fold": split.fold, "reference": name, **errors(y_te, pred)}
                      for name, pred in predictions.items())
    return pd.DataFrame.from_records(frames)


def summarize_dp_regression(raw: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over the splits per (scored-as, epsilon, metric)."""
    keys = ["depth", "trees", "scored_as", "epsilon"]
    long = raw.melt(id_vars=keys, value_vars=list(METRICS), var_name="metric")
    summary = long.groupby([*keys, "metric"], sort=False)["value"].agg(["mean", "std", "count"])
    summary.columns = ["mean", "std", "splits"]
    return summary.reset_index()


def reference_summary(refs: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per reference: its label and each metric's mean and sd over the splits (sd 0 for one split)."""
    stats = refs.groupby("reference")[list(METRICS)].agg(["mean", "std"])
    return {name: {"label": label, **{f"{m}_{s}": float(np.nan_to_num(stats.at[name, (m, s)]))
                                       for m in METRICS for s in ("mean", "std")}}
            for name, label in REFERENCE_NAMES.items()}


# ------------------------------------------------------------------ display
def _plots(summary: pd.DataFrame, refs: dict[str, dict[str, Any]], settings: RegressionSettings, source: str,
           out_dir: Path) -> list[PlotResult]:
    """Per metric, error against epsilon (log axis): a line per scorer, the references flat in grey."""
    plots = []
    n = len(settings.epsilons)
    colors = {REFERENCE_NAMES["mean"]: "lightgrey", REFERENCE_NAMES["tree"]: "dimgrey"}
    for metric, name in METRICS.items():
        lines = series_by(summary[summary["metric"] == metric], x="epsilon", mean="mean", std="std",
                          by=["scored_as"], label=lambda key: f"DiffPETs (D={settings.depth}) {key[0]}")
        flat = [Series(ref["label"], settings.epsilons, (ref[f"{metric}_mean"],) * n, (ref[f"{metric}_std"],) * n)
                for ref in refs.values()]
        plots.append(plot_lines(out_dir / f"{metric}_vs_epsilon.png", [*lines, *flat],
                                title=f"{source}: eps-DP DiffPETs regression, {settings.trees} trees "
                                      f"({spread(settings.folds, settings.repeats)})",
                                xlabel="total privacy budget ε of the release (log scale)",
                                ylabel=f"{name} of {settings.target!r} on the test rows", xscale="log", colors=colors))
    return plots


def _cell(mean: float, std: float) -> str:
    return "-" if np.isnan(mean) else f"{mean:.4g} ± {0.0 if np.isnan(std) else std:.3g}"


def _print(summary: pd.DataFrame, refs: dict[str, dict[str, Any]], settings: RegressionSettings, title: str) -> None:
    """One block per metric: a row per scorer, then the references (the same in every column)."""
    table = Table(title=title)
    table.add_column("metric: release scored as")
    for epsilon in settings.epsilons:
        table.add_column(f"ε={epsilon:g}", justify="right")
    for metric, name in METRICS.items():
        for scored_as, group in summary[summary["metric"] == metric].groupby("scored_as", sort=False):
            cells = group.set_index("epsilon")
            table.add_row(f"{name}: DiffPETs {scored_as}",
                          *[_cell(cells.at[e, "mean"], cells.at[e, "std"]) for e in settings.epsilons])
        for ref in refs.values():
            table.add_row(f"{name}: {ref['label']}",
                          *[_cell(ref[f"{metric}_mean"], ref[f"{metric}_std"])] * len(settings.epsilons))
        table.add_section()
    out.print(table)


# ---------------------------------------------------------------------- CLI
def cmd_dp_regression(args: argparse.Namespace) -> int:
    if any(e <= 0 for e in args.epsilons):
        raise ValueError(f"--epsilons must be positive, got {args.epsilons}")
    if args.test_data is not None and args.folds != 1:
        raise ValueError("--test-data replaces the held-out rows: use it with --folds 1")
    data = load_regression(args)
    test = None
    if args.test_data is not None:
        test_frame, _ = read_rows(args.test_data, data.schema)
        test = encode_rows(test_frame, data.schema, str(args.test_data))
    settings = RegressionSettings(target=args.target, target_range=args.target_range,
                                  depth=args.max_depth or default_depth(data.schema),
                                  attribute_ranges=data.attribute_ranges,
                                  epsilons=args.epsilons, trees=args.trees, folds=args.folds, repeats=args.repeats,
                                  test_size=args.test_fraction, seed=args.seed,
                                  test_data=None if args.test_data is None else str(args.test_data))
    raw, refs = run_dp_regression(data.schema, data.X, data.y, settings, jobs=args.jobs, test=test)
    summary = summarize_dp_regression(raw)
    ref_summary = reference_summary(refs)
    results = Results("dp-regression", data.table,
                      {**asdict(settings), "pgen_leaf_share": PGEN_LEAF_SHARE, "reference_depth": REFERENCE_DEPTH},
                      raw, summary, extra={"regression_schema": data.schema.to_dict(), "references": ref_summary,
                                           "references_raw": records(refs)})
    name = Path(data.table.source).name
    splits_run = len(refs) // len(REFERENCE_NAMES)
    return finish(args, results, lambda out_dir: _plots(summary, ref_summary, settings, name, out_dir),
                  lambda: _print(summary, ref_summary, settings,
                                 f"{name}: eps-DP DiffPETs regression of {args.target!r}, error on the test rows "
                                 f"(mean ± sd of {splits_run} splits)"))


def configure(p: argparse.ArgumentParser) -> None:
    """`experiment dp-regression`: the table and its target, the epsilons, the trees, the depth."""
    src = p.add_argument_group("input table (a bundled dataset, or your own file) and its numeric target")
    src.add_argument("--dataset", default=None, help="bundled dataset name (its schema gives the public domains)")
    src.add_argument("--data", type=Path, help="CSV or Parquet file of your own")
    src.add_argument("--schema", type=Path,
                     help="schema file (.json/.toml) for --data giving the attributes' public ranges and categories "
                          "(its class column, unless it is --target, becomes a categorical attribute); omitted: "
                          "inferred from the rows, which discloses their extremes (exploration only)")
    src.add_argument("--target", required=True, help="the numeric column to predict")
    src.add_argument("--target-range", type=_target_range, required=True, metavar="LOW,HIGH",
                     help="PUBLIC bounds of the target, e.g. 0,10 for a 0-10 rating: DiffPETs scales the target by "
                          "them and its privacy rests on them, so they must come from what is known about the "
                          "quantity, never from the private rows (values outside are clipped; write a negative LOW "
                          "as --target-range=-5,5)")
    p.add_argument("--test-data", type=Path, default=None,
                   help="a separate test table with the same columns; every repeat then trains on all rows of the "
                        "input table (needs --folds 1)")
    float_list(p, "--epsilons", default=DEFAULT_EPSILONS, metavar="EPS",
               help="total epsilons of a release (default 0.01 0.1 0.5 1 10)")
    p.add_argument("--trees", type=positive_int, default=DEFAULT_TREES,
                   help=f"trees per release (default {DEFAULT_TREES}, the DiffPETs paper's t)")
    add_max_depth(p, help="maximum leaf depth h (default floor((attributes + 1) / 2), the paper's h = k/2 with the "
                          "target counted in k)")
    p.set_defaults(func=cmd_dp_regression)
    add_common_options(p, name="dp-regression", default_folds=1, default_repeats=3, holdout=True)
