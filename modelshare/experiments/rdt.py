"""k-AnonToRdt accuracy (`modelshare experiment rdt`): Waseda et al. Tables 6 and 7 on any table.

Protocol: ``repeats`` random 80/20 splits (``train_test_split(..., random_state=seed + i)``,
stratified); per split and setting, one k-AnonToRdt release (Alg. 3) of ``trees`` random trees of
depth ``d`` from the training rows, scored on the test rows: the released ensemble itself (Alg. 2,
summed leaf counts), and each global model (``--global-models``, built exactly as the miner
builds them) learned from the ensemble's PGEN pseudo-data, which is what a federation study
would produce. The paper's k = 0
("original decision tree without pruning") is run with beta = 1: no sampling, no suppression, so
it is the plain random-tree baseline. Table 7 mode (``--total-epsilon``) adds the composed delta
of Corollary 1 for each (k, beta); out-of-range settings are marked, not run differently.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from rich.table import Table
from sklearn.model_selection import train_test_split

from common.dps import DPSError, compose
from common.kanon_rdt import kanon_rdt
from common.learners.random_tree import ensemble_predict_proba
from common.schema import Schema
from miner_node.global_models import GLOBAL_MODELS, make_global_model
from miner_node.pgen import pgen_ensemble
from modelshare.cli_common import (
    add_table_source,
    err,
    float_list,
    int_list,
    load_source,
    out,
)

__all__ = ["RdtSettings", "run_rdt", "add_parser"]


@dataclass(frozen=True)
class RdtSettings:
    """The grid (depths x k x number of trees x beta), the split protocol and the PGEN option."""

    depths: tuple[int, ...] = (3, 4, 5)
    ks: tuple[int, ...] = (0, 5, 10)
    trees: tuple[int, ...] = (8, 9, 10, 11)
    betas: tuple[float, ...] = (0.4,)
    total_epsilon: float | None = None
    repeats: int = 3
    test_size: float = 0.2
    seed: int = 0
    global_models: tuple[str, ...] = ("decision-tree", "naive-bayes")
    pgen_scale: float = 1.0
    tree_params: dict[str, Any] = field(default_factory=dict)


def composed_delta(k: int, beta: float, total_epsilon: float | None, trees: int) -> float | None:
    """Nt * delta of Corollary 1 for the setting, NaN outside Theorem 1's range, None without an epsilon."""
    if total_epsilon is None or k == 0:
        return None
    try:
        return compose(k, beta, total_epsilon, trees).delta_total
    except DPSError:
        return float("nan")


def _score_one(schema: Schema, X_tr: np.ndarray, y_tr: np.ndarray, X_te: np.ndarray, y_te: np.ndarray,
               k: int, beta: float, depth: int, n_trees: int, settings: RdtSettings, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    beta = 1.0 if k == 0 else beta
    release = kanon_rdt(schema, X_tr, y_tr, k=k, beta=beta, depth=depth, n_trees=n_trees, rng=rng)
    proba = ensemble_predict_proba(release.trees, X_te)
    record: dict[str, Any] = {"acc_ensemble": float((proba.argmax(axis=1) == y_te).mean()),
                              "sampled_rows": float(np.mean(release.sample_sizes))}
    if settings.global_models:
        Xp, yp = pgen_ensemble(release.trees, scale=settings.pgen_scale, beta=beta, rng=rng)
        for name in settings.global_models:
            acc = float("nan")
            if len(yp):
                params = settings.tree_params if name == "decision-tree" else {}
                model = make_global_model(name, schema, random_state=seed, **params).fit(Xp, yp)
                acc = float((model.predict(X_te) == y_te).mean())
            record[f"acc_pgen_{name}"] = acc
        record["pgen_rows"] = int(len(yp))
    return record


def run_rdt(schema: Schema, X: np.ndarray, y: np.ndarray, settings: RdtSettings, *,
            on_step: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """One record per (repeat, depth, k, trees, beta) with the accuracies and Nt * delta."""
    grid = [(d, k, t, b) for d in settings.depths for k in settings.ks for t in settings.trees for b in settings.betas]
    total = settings.repeats * len(grid)
    records: list[dict[str, Any]] = []
    for i in range(settings.repeats):
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=settings.test_size, random_state=settings.seed + i,
                                                  stratify=y)
        for j, (depth, k, n_trees, beta) in enumerate(grid):
            seed = (settings.seed + i) * 1_000_003 + j
            scores = _score_one(schema, X_tr, y_tr, X_te, y_te, k, beta, depth, n_trees, settings, seed)
            records.append({"repeat": i, "depth": depth, "k": k, "trees": n_trees, "beta": 1.0 if k == 0 else beta,
                            "total_delta": composed_delta(k, beta, settings.total_epsilon, n_trees), **scores})
            if on_step is not None:
                on_step(i * len(grid) + j + 1, total)
    return pd.DataFrame.from_records(records)


def summarize_rdt(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over repeats per setting."""
    keys = ["depth", "k", "trees", "beta"]
    scores = [c for c in results.columns if c.startswith("acc_")]
    grouped = results.groupby(keys, sort=True)
    summary = grouped[scores].agg(["mean", "std"])
    summary.columns = [f"{a}_{b}" for a, b in summary.columns]
    summary["total_delta"] = grouped["total_delta"].first()
    return summary.reset_index()


def _names(text: str) -> tuple[str, ...]:
    names = () if text == "none" else tuple(n.strip() for n in text.split(","))
    unknown = [n for n in names if n not in GLOBAL_MODELS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown global models {unknown}; available: {', '.join(GLOBAL_MODELS)}")
    return names


def cmd_rdt(args: argparse.Namespace) -> int:
    table = load_source(args)
    X, y = table.schema.encode(table.frame, source=table.source)
    if any(not 0 < b <= 1 for b in args.betas):
        raise ValueError(f"--betas must lie in (0, 1], got {args.betas}")
    settings = RdtSettings(depths=args.depths, ks=args.ks, trees=args.trees, betas=args.betas,
                           total_epsilon=args.total_epsilon, repeats=args.repeats, test_size=args.test_size,
                           seed=args.seed, global_models=args.global_models, pgen_scale=args.pgen_scale,
                           tree_params={} if args.tree_min_samples_leaf is None else
                           {"min_samples_leaf": args.tree_min_samples_leaf})
    results = run_rdt(table.schema, X, y, settings, on_step=lambda d, t: err.print(f"\r{d}/{t} settings", end=""))
    err.print()
    summary = summarize_rdt(results)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        results.to_csv(args.out / "results.csv", index=False)
        summary.to_csv(args.out / "summary.csv", index=False)
        (args.out / "results.json").write_text(_json(table.source, len(y), settings, summary) + "\n")
    if args.json:
        print(_json(table.source, len(y), settings, summary))
        return 0
    _print(summary, f"{Path(table.source).name}: k-AnonToRdt accuracy (mean ± sd of {settings.repeats} splits)",
           with_delta=settings.total_epsilon is not None)
    return 0


def _json(source: str, rows: int, settings: RdtSettings, summary: pd.DataFrame) -> str:
    return json.dumps({"source": source, "rows": rows, "settings": asdict(settings),
                       "summary": json.loads(summary.to_json(orient="records"))}, indent=2)


def _delta_cell(value: Any) -> str:
    """Nt * delta as the paper prints it: '-' without one, 'no guarantee' from 1 up."""
    if value is None:
        return "-"
    if isinstance(value, float) and np.isnan(value):
        return "out of range"
    return "no guarantee" if value >= 1 else f"{value:.3g}"


def _print(summary: pd.DataFrame, title: str, *, with_delta: bool) -> None:
    table = Table(title=title)
    for name in ("depth", "k", "trees", "beta"):
        table.add_column(name)
    scores: Sequence[str] = [c[: -len("_mean")] for c in summary.columns if c.startswith("acc_") and c.endswith("_mean")]
    for name in scores:
        label = "ensemble" if name == "acc_ensemble" else "PGEN -> " + name[len("acc_pgen_"):]
        table.add_column(f"{label} acc", justify="right")
    if with_delta:
        table.add_column("Nt·delta", justify="right")
    for row in summary.to_dict(orient="records"):
        cells = [str(int(row["depth"])), str(int(row["k"])), str(int(row["trees"])), f"{row['beta']:g}"]
        cells += [f"{row[f'{c}_mean']:.3f} ± {0.0 if np.isnan(row[f'{c}_std']) else row[f'{c}_std']:.3f}" for c in scores]
        if with_delta:
            cells.append("-" if row["k"] == 0 else _delta_cell(row["total_delta"]))
        table.add_row(*cells)
    out.print(table)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `experiment rdt`."""
    p = sub.add_parser("rdt", help="k-AnonToRdt accuracy by depth, k, trees and beta (Waseda et al. Tables 6-7)")
    add_table_source(p, "nursery")
    p.add_argument("--depths", type=int_list(1), default=RdtSettings.depths, help="tree depths (default 3,4,5)")
    p.add_argument("--ks", type=int_list(0), default=RdtSettings.ks, help="k values; 0 = no sampling or suppression (default 0,5,10)")
    p.add_argument("--trees", type=int_list(1), default=RdtSettings.trees, help="numbers of trees (default 8,9,10,11)")
    p.add_argument("--betas", type=float_list, default=RdtSettings.betas, help="sampling rates (default 0.4)")
    p.add_argument("--total-epsilon", type=float, default=None,
                   help="Nt*eps for the delta column (Table 7 uses 2.0); default: no delta column")
    p.add_argument("--repeats", type=int, default=RdtSettings.repeats, help="random splits (default 3)")
    p.add_argument("--test-size", type=float, default=RdtSettings.test_size, help="test share (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="split i uses random_state seed + i (default 0)")
    p.add_argument("--global-models", type=_names, default=RdtSettings.global_models,
                   help=f"global models learned from the ensemble's PGEN data, comma-separated, or 'none' "
                        f"(default decision-tree,naive-bayes; available: {','.join(GLOBAL_MODELS)})")
    p.add_argument("--pgen-scale", type=float, default=1.0, help="PGEN rows per estimated real row (default 1)")
    p.add_argument("--tree-min-samples-leaf", type=int, default=None,
                   help="min_samples_leaf of the decision-tree global model (default: the miner's, fully grown)")
    p.add_argument("--out", type=Path, default=None, help="directory for results.csv, summary.csv and results.json")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=cmd_rdt)
