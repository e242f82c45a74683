"""Wakabayashi et al.'s attack and pruning experiment (`modelshare experiment pruning`).

Their protocol (NOTES.md §3.4, §3.6): ``repeats`` random 80/20 train/test splits
(``train_test_split(..., random_state=seed + i)``, not stratified), a CART tree per depth, the
uniqueness and homogeneity attacks counted on the training tuples in the leaves (paper Tables 5
and 6), and at one depth Method 1 and Method 2 pruning for each threshold s (Table 7) with test
accuracy. Method 1 accuracy is reported two ways: rows reaching a pruned region take the parent's
remaining majority (the released tree's prediction), or count as errors (``acc_abstain``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from rich.table import Table
from sklearn.model_selection import train_test_split

from common.attacks import attack_report
from common.learners import make_learner
from common.pruning import RequirementUnsatisfiable, prune_leaves, prune_parents
from common.schema import CategoricalAttribute, Schema
from common.tree import Tree
from modelshare.cli_common import add_table_source, err, int_list, load_source, out

__all__ = ["PruningSettings", "run_pruning", "add_parser"]

METHODS: dict[str, Callable[[Tree, int], Tree]] = {"method1": prune_leaves, "method2": prune_parents}


@dataclass(frozen=True)
class PruningSettings:
    """Depths for the attack tables, the pruning depth and thresholds, and the split protocol."""

    depths: tuple[int, ...] = (3, 4, 5, 6, 7)
    depth: int = 7
    thresholds: tuple[int, ...] = (5, 10, 20, 30, 40, 50)
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


def run_pruning(
    schema: Schema,
    X: np.ndarray,
    y: np.ndarray,
    settings: PruningSettings,
    *,
    on_repeat: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """One record per (repeat, experiment, depth or method and s) with attack counts and accuracy."""
    records: list[dict[str, Any]] = []
    for i in range(settings.repeats):
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=settings.test_size, random_state=settings.seed + i)
        for depth in sorted({*settings.depths, settings.depth}):
            learner = make_learner("cart", schema, random_state=settings.seed + i, max_depth=depth).fit(X_tr, y_tr)
            if depth in settings.depths:
                records.append({"repeat": i, "table": "attacks", "depth": depth, **_scores(learner.tree_, X_te, y_te)})
            if depth != settings.depth:
                continue
            for method, prune in METHODS.items():
                records.append({"repeat": i, "table": "pruning", "method": method, "s": 0, **_scores(learner.tree_, X_te, y_te)})
                for s in settings.thresholds:
                    try:
                        pruned = prune(learner.tree_, s)
                    except RequirementUnsatisfiable:
                        records.append({"repeat": i, "table": "pruning", "method": method, "s": s, "leaves": 0})
                        continue
                    records.append({"repeat": i, "table": "pruning", "method": method, "s": s, **_scores(pruned, X_te, y_te)})
        if on_repeat is not None:
            on_repeat(i + 1, settings.repeats)
    return pd.DataFrame.from_records(records)


SCORES = ["leaves", "uniqueness", "homogeneity_leaves", "homogeneity_users", "acc", "acc_abstain"]


def summarize_pruning(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Means over repeats: the attack table by depth and the pruning table by (method, s)."""
    attacks = results[results["table"] == "attacks"].groupby("depth")[SCORES].mean().reset_index()
    pruning = results[results["table"] == "pruning"].groupby(["method", "s"])[SCORES].mean().reset_index()
    return attacks, pruning


def _reinfer(schema: Schema, frame: pd.DataFrame, order: str) -> Schema:
    """The table's schema with categories in ``order`` (numeric attributes stay numeric)."""
    categorical = [a.name for a in schema.attributes if isinstance(a, CategoricalAttribute)]
    return Schema.infer(frame, schema.class_name, categorical=categorical, category_order=order)


def cmd_pruning(args: argparse.Namespace) -> int:
    table = load_source(args)
    schema = table.schema if args.category_order == "schema" else _reinfer(table.schema, table.frame, args.category_order)
    X, y = schema.encode(table.frame, source=table.source)
    settings = PruningSettings(
        depths=args.depths, depth=args.depth, thresholds=args.thresholds, repeats=args.repeats,
        test_size=args.test_size, seed=args.seed,
    )
    results = run_pruning(schema, X, y, settings, on_repeat=lambda d, t: err.print(f"repeat {d}/{t} done"))
    attacks, pruning = summarize_pruning(results)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        results.to_csv(args.out / "results.csv", index=False)
    if args.json:
        print(json.dumps({
            "source": table.source, "rows": int(len(y)), "settings": settings.__dict__,
            "attacks": json.loads(attacks.to_json(orient="records")),
            "pruning": json.loads(pruning.to_json(orient="records")),
        }, indent=2))
        return 0
    _print(attacks, f"{Path(table.source).name}: attacks by depth (mean of {args.repeats})", ["depth"])
    _print(pruning, f"{Path(table.source).name}: depth {args.depth}, Method 1 / Method 2 (s = 0: unpruned)", ["method", "s"])
    return 0


HEADERS = {"uniqueness": "U", "homogeneity_leaves": "N_l", "homogeneity_users": "N_u", "acc_abstain": "acc (pruned=error)"}


def _cell(column: str, value: Any, keys: Sequence[str]) -> str:
    if column in keys:
        return str(value) if isinstance(value, str) else str(int(value))
    return f"{value:.4f}" if column.startswith("acc") else f"{value:.1f}"


def _print(frame: pd.DataFrame, title: str, keys: Sequence[str]) -> None:
    table = Table(title=title)
    for col in frame.columns:
        table.add_column(HEADERS.get(col, col), justify="left" if col in keys else "right")
    for row in frame.itertuples(index=False):
        table.add_row(*[_cell(k, v, keys) for k, v in zip(frame.columns, row)])
    out.print(table)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `experiment pruning`."""
    p = sub.add_parser("pruning", help="uniqueness/homogeneity attacks by depth; Method 1 vs Method 2 pruning")
    add_table_source(p, "nursery")
    p.add_argument("--category-order", choices=["schema", "appearance", "sorted"], default="schema",
                   help="ordinal codes of categories for CART: the schema's order, first appearance in the table "
                        "(pandas.factorize, as the paper's sklearn run), or sorted")
    p.add_argument("--depths", type=int_list(1), default=PruningSettings.depths, help="depths of the attack table (default 3,4,5,6,7)")
    p.add_argument("--depth", type=int, default=PruningSettings.depth, help="depth of the pruned trees (default 7)")
    p.add_argument("--thresholds", type=int_list(1), default=PruningSettings.thresholds,
                   help="pruning thresholds s = k - 1 (default 5,10,20,30,40,50)")
    p.add_argument("--repeats", type=int, default=PruningSettings.repeats, help="random splits (default 10)")
    p.add_argument("--test-size", type=float, default=PruningSettings.test_size, help="test share (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="split i uses random_state seed + i (default 0)")
    p.add_argument("--out", type=Path, default=None, help="directory for results.csv (per repeat)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=cmd_pruning)
