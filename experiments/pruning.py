"""Wakabayashi et al.'s attack and pruning experiment (`modelshare experiment pruning`).

Their protocol (docs/paper-notes.md §3.4, §3.6): ``repeats`` random 80/20 train/test splits
(``train_test_split(..., random_state=seed + i)``, not stratified; ``--folds K`` runs K-fold
cross-validation per repeat instead), a CART tree per depth, the uniqueness and homogeneity
attacks counted on the training tuples in the leaves (paper Tables 5 and 6), and at one depth
Method 1 and Method 2 pruning for each threshold s (Table 7) with test accuracy. Method 1 accuracy
is reported two ways: rows reaching a pruned region take the parent's remaining majority (the
released tree's prediction), or count as errors (``acc_abstain``). Every split is one task whose
randomness is ``seed + repeat``, so ``--jobs`` does not change the numbers.

Plots: accuracy against s, homogeneity-exposed users and leaves against s (Table 7), and the
attack counts by depth (Tables 5-6), with the paper's values as markers for its datasets.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table

from experiments.output import (
    ACCURACY,
    PlotResult,
    Results,
    Series,
    Split,
    add_common_options,
    finish,
    plot_bars,
    plot_lines,
    records,
    reference_name,
    run_tasks,
    series_by,
    splits,
    spread,
)
from modelshare.cli.common import add_max_depth, add_max_depths, int_list, out
from modelshare.cli.inputs import add_table_source, load_source
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable, prune_leaves, prune_parents
from modelshare.common.privacy.attacks import attack_report
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.tree import Tree

__all__ = ["PruningSettings", "configure", "run_pruning", "summarize_pruning"]

METHODS: dict[str, Callable[[Tree, int], Tree]] = {  # the paper's Fig. 5 as written (no splicing of one-child nodes)
    "method1": functools.partial(prune_leaves, splice=False), "method2": prune_parents}
LABELS = {"method1": "Method 1 (prune small leaves)", "method2": "Method 2 (collapse the parent)"}

# Wakabayashi et al., Table 7 (tree depth 7; s = k - 1, s = 0 is the paper's "original", the
# unpruned tree): per dataset, method and s, the paper's (U, N_u, N_l, ACC). "loan" is the
# paper's Loan table (5,000 records, 12 features).
PAPER_DEPTH = 7
PAPER_TABLE7_COLUMNS = ("uniqueness", "homogeneity_users", "homogeneity_leaves", "acc")
PAPER_TABLE7: dict[str, dict[str, dict[int, tuple[float, float, float, float]]]] = {
    "nursery": {
        "method1": {0: (0, 7863.9, 24, 0.9370), 5: (0, 7863, 24, 0.9370), 10: (0, 7863, 24, 0.9370),
                    20: (0, 7863, 24, 0.9370), 30: (0, 7861, 23.9, 0.9363), 40: (0, 7777, 21.7, 0.9333),
                    50: (0, 7696, 19.8, 0.9324)},
        "method2": {0: (0, 7863.9, 24, 0.9370), 5: (0, 7863.9, 24, 0.9370), 10: (0, 7860.2, 23.9, 0.9370),
                    20: (0, 7654, 19.6, 0.9373), 30: (0, 7601.5, 18.5, 0.9363), 40: (0, 7571.1, 17.7, 0.9355),
                    50: (0, 7528.5, 17.3, 0.9348)},
    },
    "loan": {
        "method1": {0: (6, 3837, 27, 0.9809), 5: (0, 3803.5, 11, 0.9815), 10: (0, 3784.5, 8.5, 0.9599),
                    20: (0, 3752.3, 6.1, 0.9469), 30: (0, 3743.7, 5.8, 0.9294), 40: (0, 3711.8, 4.9, 0.9294),
                    50: (0, 3684.5, 4.3, 0.9277)},
        "method2": {0: (6.7, 3838.3, 27, 0.9810), 5: (0, 3763.9, 7.8, 0.9813), 10: (0, 3648.2, 5.5, 0.9820),
                    20: (0, 3555.5, 3.9, 0.9809), 30: (0, 3169.5, 3.1, 0.9792), 40: (0, 3159.1, 2.9, 0.9791),
                    50: (0, 3108, 2.7, 0.9774)},
    },
    "adult": {
        "method1": {0: (11, 1918.9, 34.4, 0.8545), 5: (0, 1881.5, 14.7, 0.8120), 10: (0, 1854.3, 11.4, 0.8072),
                    20: (0, 1811.5, 8.6, 0.7954), 30: (0, 1750, 6.1, 0.7926), 40: (0, 1735.9, 5.7, 0.7921),
                    50: (0, 1693.7, 4.8, 0.7900)},
        "method2": {0: (11, 1918.9, 34.4, 0.8544), 5: (0, 1269.1, 10, 0.8548), 10: (0, 673.1, 3.5, 0.8542),
                    20: (0, 673.1, 3.5, 0.8535), 30: (0, 652, 2.6, 0.8535), 40: (0, 676.1, 2.2, 0.8530),
                    50: (0, 551.7, 1.2, 0.8527)},
    },
}

# Wakabayashi et al., Table 5 (U) and Table 6 (N_l, N_u), unpruned trees: per dataset and depth.
PAPER_BY_DEPTH_COLUMNS = ("uniqueness", "homogeneity_leaves", "homogeneity_users")
PAPER_BY_DEPTH: dict[str, dict[int, tuple[float, float, float]]] = {
    "nursery": {3: (0, 1, 3448), 4: (0, 1, 3448), 5: (0, 3, 5057), 6: (0, 11.2, 6822), 7: (0, 24, 7863)},
    "loan": {3: (0, 3.8, 3653), 4: (0, 4.8, 3303), 5: (0, 7.9, 3729), 6: (3.7, 16.7, 3746), 7: (6, 27, 3837)},
    "adult": {3: (0, 0.3, 0.7), 4: (0.5, 2.4, 210), 5: (1.8, 7.3, 830), 6: (5.1, 19, 1623), 7: (11, 34.4, 1918)},
}


@dataclass(frozen=True)
class PruningSettings:
    """Depths for the attack tables, the pruning depth and thresholds, and the split protocol."""

    depths: tuple[int, ...] = (3, 4, 5, 6, 7)
    depth: int = PAPER_DEPTH
    thresholds: tuple[int, ...] = (5, 10, 20, 30, 40, 50)
    folds: int = 1
    repeats: int = 10
    test_size: float = 0.2
    seed: int = 0


def _scores(tree: Tree, X_test: np.ndarray, y_test: np.ndarray) -> dict[str, Any]:
    attacks = attack_report(tree)
    stops = tree.apply(X_test)
    correct = tree.predict(X_test) == y_test
    at_leaf = np.isin(stops, tree.leaves)
    return {
        "leaves": tree.n_leaves,
        "uniqueness": attacks.uniqueness.leaves,
        "homogeneity_leaves": attacks.homogeneity.leaves,
        "homogeneity_users": attacks.homogeneity.users,
        "acc": float(correct.mean()),
        "acc_abstain": float((correct & at_leaf).mean()),
    }


def _run_split(context: tuple[Schema, np.ndarray, np.ndarray, PruningSettings], split: Split) -> list[dict[str, Any]]:
    """The attack table's and the pruning table's records of one train/test split."""
    schema, X, y, settings = context
    X_tr, X_te, y_tr, y_te = X[split.train], X[split.test], y[split.train], y[split.test]
    head = {"repeat": split.repeat, "fold": split.fold}
    records: list[dict[str, Any]] = []
    for depth in sorted({*settings.depths, settings.depth}):
        learner = make_learner("cart", schema, random_state=settings.seed + split.repeat,
                               max_depth=depth).fit(X_tr, y_tr)
        if depth in settings.depths:
            records.append({**head, "table": "attacks", "depth": depth, **_scores(learner.tree_, X_te, y_te)})
        if depth != settings.depth:
            continue
        for method, prune in METHODS.items():
            records.append({**head, "table": "pruning", "method": method, "s": 0, **_scores(learner.tree_, X_te, y_te)})
            for s in settings.thresholds:
                try:
                    pruned = prune(learner.tree_, s)
                except RequirementUnsatisfiable:
                    records.append({**head, "table": "pruning", "method": method, "s": s, "leaves": 0})
                    continue
                records.append({**head, "table": "pruning", "method": method, "s": s, **_scores(pruned, X_te, y_te)})
    return records


def run_pruning(schema: Schema, X: np.ndarray, y: np.ndarray, settings: PruningSettings, *,
                jobs: int = 1) -> pd.DataFrame:
    """One record per (repeat, fold, experiment, depth or method and s) with attack counts and accuracy."""
    tasks = splits(y, folds=settings.folds, repeats=settings.repeats, seed=settings.seed,
                   test_size=settings.test_size, stratify=False)
    chunks = run_tasks(_run_split, tasks, context=(schema, X, y, settings), jobs=jobs, label="train/test splits")
    return pd.DataFrame.from_records([record for chunk in chunks for record in chunk])


SCORES = ["leaves", "uniqueness", "homogeneity_leaves", "homogeneity_users", "acc", "acc_abstain"]


def summarize_pruning(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The attack table by depth and the pruning table by (method, s) over the splits.

    Each score's mean keeps the score's name (as the paper's tables print it); its standard
    deviation is ``<score>_std``.
    """
    def table(rows: pd.DataFrame, keys: list[str], whole: str) -> pd.DataFrame:
        grouped = rows.astype({whole: int}).groupby(keys)[SCORES]  # int: the other table's rows made it float
        return grouped.mean().join(grouped.std().add_suffix("_std")).reset_index()

    return (table(results[results["table"] == "attacks"], ["depth"], "depth"),
            table(results[results["table"] == "pruning"], ["method", "s"], "s"))


def _reinfer(schema: Schema, frame: pd.DataFrame, order: str) -> Schema:
    """The table's schema with categories in ``order`` (numeric attributes stay numeric)."""
    categorical = [a.name for a in schema.attributes if isinstance(a, CategoricalAttribute)]
    return Schema.infer(frame, schema.class_name, categorical=categorical, category_order=order)


def paper_over_s(name: str | None, depth: int, method: str, score: str) -> dict[int, float]:
    """Table 7's ``score`` per s for ``method`` on the paper's table ``name`` (none at another depth)."""
    if depth != PAPER_DEPTH:
        return {}
    column = PAPER_TABLE7_COLUMNS.index(score)
    return {s: row[column] for s, row in PAPER_TABLE7.get(name or "", {}).get(method, {}).items()}


def paper_by_depth(name: str | None, score: str) -> dict[int, float]:
    """Tables 5-6's ``score`` per depth on the paper's table ``name``."""
    column = PAPER_BY_DEPTH_COLUMNS.index(score)
    return {depth: row[column] for depth, row in PAPER_BY_DEPTH.get(name or "", {}).items()}


def _plots(attacks: pd.DataFrame, pruning: pd.DataFrame, settings: PruningSettings, paper: str | None,
           source: str, out_dir: Path) -> list[PlotResult]:
    """Accuracy, N_u and N_l against s (Table 7); N_u, and U with N_l, by depth (Tables 5-6)."""
    note = spread(settings.folds, settings.repeats)
    reference_label = f"Wakabayashi et al. ({paper})"
    s_axis = "pruning threshold s = k − 1 (tuples per leaf; 0 = unpruned)"

    def s_tick(s: Any) -> str:
        return "0 (unpruned)" if s == 0 else str(s)

    def by_method(score: str) -> list[Series]:
        return series_by(pruning, x="s", mean=score, std=f"{score}_std", by=["method"],
                         label=lambda key: LABELS[key[0]],
                         reference=lambda key: paper_over_s(paper, settings.depth, key[0], score))

    def by_depth(score: str, label: str) -> list[Series]:
        return series_by(attacks, x="depth", mean=score, std=f"{score}_std", by=[], label=lambda key: label,
                         reference=lambda key: paper_by_depth(paper, score))

    abstain = series_by(pruning[pruning["method"] == "method1"], x="s", mean="acc_abstain", std="acc_abstain_std",
                        by=[], label=lambda key: "Method 1, rows of pruned leaves = errors")
    pruned = f"{source}: CART depth {settings.depth} ({note})"
    unpruned = f"{source}: unpruned CART ({note})"
    users = "users exposed to the homogeneity attack (training tuples)"
    return [
        plot_lines(out_dir / "accuracy_vs_s.png", by_method("acc") + abstain, title=pruned, xlabel=s_axis,
                   ylabel=ACCURACY, reference_label=reference_label),
        plot_bars(out_dir / "homogeneity_users_vs_s.png", by_method("homogeneity_users"), title=pruned,
                  xlabel=s_axis, ylabel=users, tick=s_tick, reference_label=reference_label),
        plot_bars(out_dir / "homogeneity_leaves_vs_s.png", by_method("homogeneity_leaves"), title=pruned,
                  xlabel=s_axis, ylabel="homogeneous leaves (leaves)", tick=s_tick, reference_label=reference_label),
        plot_bars(out_dir / "homogeneity_users_by_depth.png", by_depth("homogeneity_users", "homogeneity attack N_u"),
                  title=unpruned, xlabel="tree depth (levels)", ylabel=users, reference_label=reference_label),
        plot_bars(out_dir / "attacked_leaves_by_depth.png",
                  by_depth("uniqueness", "uniqueness attack U")
                  + by_depth("homogeneity_leaves", "homogeneity attack N_l"),
                  title=unpruned, xlabel="tree depth (levels)", ylabel="leaves open to the attack (leaves)",
                  reference_label=reference_label),
    ]


def cmd_pruning(args: argparse.Namespace) -> int:
    table = load_source(args)
    if args.category_order != "schema":
        table = replace(table, schema=_reinfer(table.schema, table.frame, args.category_order))
    X, y = table.schema.encode(table.frame, source=table.source)
    settings = PruningSettings(depths=args.max_depths, depth=args.max_depth, thresholds=args.thresholds,
                               folds=args.folds, repeats=args.repeats, test_size=args.test_fraction, seed=args.seed)
    raw = run_pruning(table.schema, X, y, settings, jobs=args.jobs)
    attacks, pruning = summarize_pruning(raw)
    summary = pd.concat([attacks.assign(table="attacks"), pruning.assign(table="pruning")], ignore_index=True)
    keys = ["table", "depth", "method", "s"]
    summary = summary[[*keys, *summary.columns.drop(keys)]].astype({"depth": "Int64", "s": "Int64"})
    results = Results("pruning", table, asdict(settings), raw, summary, extra={
        # the summary split by table, as the command printed it before results.json existed
        "attacks": records(attacks), "pruning": records(pruning)})
    name = Path(table.source).name
    paper = reference_name(args, PAPER_BY_DEPTH)

    def show() -> None:
        _print(attacks, f"{name}: attacks by depth (mean of {settings.folds * settings.repeats} splits)", ["depth"])
        _print(pruning, f"{name}: depth {settings.depth}, Method 1 / Method 2 (s = 0: unpruned)", ["method", "s"])

    return finish(args, results, lambda out_dir: _plots(attacks, pruning, settings, paper, name, out_dir), show)


HEADERS = {"uniqueness": "U", "homogeneity_leaves": "N_l", "homogeneity_users": "N_u",
           "acc_abstain": "acc (pruned=error)"}


def _cell(column: str, value: Any, keys: Sequence[str]) -> str:
    if column in keys:
        return str(value) if isinstance(value, str) else str(int(value))
    return f"{value:.4f}" if column.startswith("acc") else f"{value:.1f}"


def _print(frame: pd.DataFrame, title: str, keys: Sequence[str]) -> None:
    """The means of ``frame`` as the paper's tables print them."""
    table = Table(title=title)
    columns = [*keys, *SCORES]
    for col in columns:
        table.add_column(HEADERS.get(col, col), justify="left" if col in keys else "right")
    for row in frame[columns].itertuples(index=False):
        table.add_row(*[_cell(k, v, keys) for k, v in zip(columns, row, strict=False)])
    out.print(table)


def configure(p: argparse.ArgumentParser) -> None:
    """`experiment pruning`: the table, the category order, the depths, the pruned depth and the thresholds."""
    add_table_source(p, "nursery")
    p.add_argument("--category-order", choices=["schema", "appearance", "sorted"], default="schema",
                   help="ordinal codes of categories for CART: the schema's order, first appearance in the table "
                        "(pandas.factorize, as the paper's sklearn run), or sorted")
    add_max_depths(p, default=PruningSettings.depths, help="depths of the attack table (default 3 4 5 6 7)")
    add_max_depth(p, default=PruningSettings.depth, help="depth of the pruned trees (default 7)")
    int_list(p, "--thresholds", minimum=1, default=PruningSettings.thresholds, metavar="S",
             help="pruning thresholds s = k - 1 (default 5 10 20 30 40 50)")
    add_common_options(p, name="pruning", default_folds=PruningSettings.folds, default_repeats=PruningSettings.repeats,
                       holdout=True, references={"nursery": "Tables 5-7", "adult": "Tables 5-7",
                                                 "loan": "Tables 5-7, the paper's 5,000-row Loan table"})
    p.set_defaults(func=cmd_pruning)
