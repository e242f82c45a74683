"""k-AnonToRdt accuracy (`modelshare experiment rdt`): Waseda et al. Tables 6 and 7 on any table.

Protocol: ``repeats`` random 80/20 splits (``train_test_split(..., random_state=seed + i)``,
stratified; ``--folds K`` runs stratified K-fold cross-validation per repeat instead); per split
and setting, one k-AnonToRdt release (Alg. 3) of ``trees`` random trees of depth ``d`` from the
training rows, scored on the test rows: the released ensemble itself (Alg. 2, summed leaf
counts), and each global model (``--global-models``, built exactly as the miner builds them)
learned from the ensemble's PGEN pseudo-data, which is what a federation study would produce.
The paper's k = 0 ("original decision tree without pruning") is run with beta = 1: no sampling,
no suppression, so it is the plain random-tree baseline. Table 7 mode (``--total-epsilon``) adds
the composed delta of Corollary 1 for each (k, beta); out-of-range settings are marked, not run
differently.

Each (split, setting) is one task seeded with ``(seed + repeat) * 1_000_003 + its index in the
repeat``, a pure function of (seed, repeat, fold, setting), so ``--jobs`` does not change the
numbers (and a single split per repeat reproduces the earlier serial runs exactly). Plots, one
PNG per scorer: accuracy against the number of trees per (d, k, beta), or against beta per (d, k)
when one number of trees and several betas were run (Table 7); the ensemble's plot marks the
paper's Table 6 (or, with ``--total-epsilon``, Table 7) values.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table

from experiments.output import (
    ACCURACY,
    PlotResult,
    Results,
    Split,
    add_common_options,
    finish,
    plot_lines,
    reference_name,
    run_tasks,
    series_by,
    splits,
    spread,
)
from modelshare.cli.common import add_global_models, add_max_depths, float_list, int_list, out
from modelshare.cli.inputs import add_table_source, load_source
from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms.kanon_rdt import kanon_rdt
from modelshare.common.privacy.dps import DPSError, compose
from modelshare.common.trees.learners.random_tree import ensemble_predict_proba
from modelshare.miner_node.global_models import GLOBAL_MODELS, make_global_model
from modelshare.miner_node.pgen import pgen_ensemble

__all__ = ["RdtSettings", "configure", "run_rdt", "summarize_rdt"]

# Waseda et al. 2024, Table 6: accuracy of the released ensemble with beta = 0.4 (k = 0: the
# plain random trees, our beta = 1) for 8, 9, 10 and 11 trees; per dataset and (depth, k).
PAPER_TABLE6_TREES = (8, 9, 10, 11)
PAPER_TABLE6: dict[str, dict[tuple[int, int], tuple[float, float, float, float]]] = {
    "nursery": {(3, 0): (0.748, 0.807, 0.815, 0.832), (3, 5): (0.788, 0.798, 0.808, 0.836),
                (3, 10): (0.749, 0.808, 0.816, 0.830), (4, 0): (0.832, 0.819, 0.841, 0.847),
                (4, 5): (0.818, 0.843, 0.841, 0.847), (4, 10): (0.782, 0.775, 0.801, 0.818),
                (5, 0): (0.854, 0.867, 0.860, 0.868), (5, 5): (0.783, 0.816, 0.818, 0.823),
                (5, 10): (0.598, 0.626, 0.673, 0.663)},
    "adult": {(7, 0): (0.781, 0.789, 0.795, 0.786), (7, 5): (0.781, 0.789, 0.795, 0.786),
              (7, 10): (0.794, 0.804, 0.786, 0.793), (8, 0): (0.806, 0.813, 0.791, 0.807),
              (8, 5): (0.807, 0.813, 0.791, 0.807), (8, 10): (0.801, 0.812, 0.803, 0.797),
              (9, 0): (0.814, 0.817, 0.816, 0.818), (9, 5): (0.811, 0.817, 0.816, 0.817),
              (9, 10): (0.814, 0.813, 0.813, 0.813)},
    "mushroom": {(3, 0): (0.935, 0.940, 0.957, 0.944), (3, 5): (0.935, 0.940, 0.957, 0.944),
                 (3, 10): (0.903, 0.854, 0.957, 0.921), (4, 0): (0.964, 0.967, 0.972, 0.973),
                 (4, 5): (0.964, 0.967, 0.972, 0.973), (4, 10): (0.964, 0.963, 0.949, 0.968),
                 (5, 0): (0.979, 0.980, 0.978, 0.978), (5, 5): (0.979, 0.980, 0.978, 0.978),
                 (5, 10): (0.974, 0.978, 0.975, 0.977)},
    # the LendingClub table, class not.fully.paid
    "loan": {(4, 0): (0.838, 0.839, 0.841, 0.844), (4, 5): (0.843, 0.839, 0.836, 0.839),
             (4, 10): (0.838, 0.839, 0.841, 0.844), (5, 0): (0.843, 0.839, 0.846, 0.841),
             (5, 5): (0.843, 0.839, 0.841, 0.841), (5, 10): (0.845, 0.839, 0.846, 0.841),
             (6, 0): (0.838, 0.842, 0.835, 0.840), (6, 5): (0.840, 0.842, 0.839, 0.840),
             (6, 10): (0.838, 0.840, 0.835, 0.840)},
}

# Waseda et al. 2024, Table 7: accuracy of the released ensemble of 10 trees at Nt * eps = 2.0
# (depth not given), per dataset and (k, beta); the paper prints k = 0 under every beta with one
# value, our k = 0 runs with beta = 1. "nursery3" is Nursery without its two rarest classes.
PAPER_TABLE7_TREES = 10
PAPER_TABLE7: dict[str, dict[tuple[int, float], float]] = {
    "nursery3": {(0, 1.0): 0.971, (5, 0.01): 0.942, (5, 0.1): 0.958, (5, 0.4): 0.972, (10, 0.01): 0.774,
                 (10, 0.1): 0.969, (10, 0.4): 0.971, (20, 0.01): 0.383, (20, 0.1): 0.965, (20, 0.4): 0.963},
    "mushroom": {(0, 1.0): 0.945, (5, 0.01): 0.900, (5, 0.1): 0.942, (5, 0.4): 0.914, (10, 0.01): 0.833,
                 (10, 0.1): 0.930, (10, 0.4): 0.933, (20, 0.01): 0.631, (20, 0.1): 0.913, (20, 0.4): 0.932},
}
PAPER_BETA = 0.4


@dataclass(frozen=True)
class RdtSettings:
    """The grid (depths x k x number of trees x beta), the split protocol and the PGEN option."""

    depths: tuple[int, ...] = (3, 4, 5)
    ks: tuple[int, ...] = (0, 5, 10)
    trees: tuple[int, ...] = (8, 9, 10, 11)
    betas: tuple[float, ...] = (0.4,)
    total_epsilon: float | None = None
    folds: int = 1
    repeats: int = 3
    test_size: float = 0.2
    seed: int = 0
    global_models: tuple[str, ...] = ("decision-tree", "naive-bayes")
    pgen_scale: float = 1.0
    tree_params: dict[str, Any] = field(default_factory=dict)

    @property
    def grid(self) -> list[tuple[int, int, int, float]]:
        """Every (depth, k, trees, beta) setting, in the order the records list them."""
        return [(d, k, t, b) for d in self.depths for k in self.ks for t in self.trees for b in self.betas]


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


@dataclass(frozen=True)
class _Task:
    """Setting ``index`` of the grid on one split, with its own seed."""

    split: Split
    index: int
    seed: int


def _run_setting(context: tuple[Schema, np.ndarray, np.ndarray, RdtSettings], task: _Task) -> dict[str, Any]:
    schema, X, y, settings = context
    depth, k, n_trees, beta = settings.grid[task.index]
    train, test = task.split.train, task.split.test
    scores = _score_one(schema, X[train], y[train], X[test], y[test], k, beta, depth, n_trees, settings, task.seed)
    return {"repeat": task.split.repeat, "fold": task.split.fold, "depth": depth, "k": k, "trees": n_trees,
            "beta": 1.0 if k == 0 else beta, "total_delta": composed_delta(k, beta, settings.total_epsilon, n_trees),
            **scores}


def run_rdt(schema: Schema, X: np.ndarray, y: np.ndarray, settings: RdtSettings, *, jobs: int = 1) -> pd.DataFrame:
    """One record per (repeat, fold, depth, k, trees, beta) with the accuracies and Nt * delta."""
    grid = settings.grid
    tasks = [_Task(split, j, (settings.seed + split.repeat) * 1_000_003 + split.fold * len(grid) + j)
             for split in splits(y, folds=settings.folds, repeats=settings.repeats, seed=settings.seed,
                                 test_size=settings.test_size, stratify=True)
             for j in range(len(grid))]
    return pd.DataFrame.from_records(run_tasks(_run_setting, tasks, context=(schema, X, y, settings), jobs=jobs,
                                               label=f"settings x splits ({len(grid)} settings)"))


def summarize_rdt(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over the splits (repeats x folds) per setting."""
    keys = ["depth", "k", "trees", "beta"]
    scores = [c for c in results.columns if c.startswith("acc_")]
    grouped = results.groupby(keys, sort=True)
    summary = grouped[scores].agg(["mean", "std"])
    summary.columns = [f"{a}_{b}" for a, b in summary.columns]
    summary["total_delta"] = grouped["total_delta"].first()
    return summary.reset_index()


def paper_accuracy(name: str | None, table7: bool, depth: int, k: int, trees: int, beta: float) -> float | None:
    """The paper's ensemble accuracy for one setting, or None where it prints no number.

    Table 6 has beta = 0.4 only (its k = 0 is our beta = 1) and 8-11 trees; Table 7 has 10 trees
    and no depth, so its value applies at every depth.
    """
    if table7:
        return PAPER_TABLE7.get(name or "", {}).get((k, beta)) if trees == PAPER_TABLE7_TREES else None
    row = PAPER_TABLE6.get(name or "", {}).get((depth, k))
    if row is None or beta != (1.0 if k == 0 else PAPER_BETA) or trees not in PAPER_TABLE6_TREES:
        return None
    return row[PAPER_TABLE6_TREES.index(trees)]


def _plots(summary: pd.DataFrame, settings: RdtSettings, paper: str | None, source: str,
           out_dir: Path) -> list[PlotResult]:
    """Accuracy per (d, k): against the number of trees (one series per beta), or, when one number
    of trees and several betas were run (Table 7), against beta. The ensemble, then each PGEN model.
    """
    table7 = settings.total_epsilon is not None
    betas = sorted(set(summary["beta"]))
    over_beta = len(settings.trees) == 1 and len(settings.betas) > 1
    by = ["depth", "k"] if over_beta else ["depth", "k", "beta"]

    def label(key: tuple[Any, ...]) -> str:
        depth, k, *beta = key
        if k == 0:
            return f"d={depth}, k=0 (no sampling, β=1)"
        return f"d={depth}, k={k}" + (f", β={beta[0]:g}" if beta and len(settings.betas) > 1 else "")

    def reference(key: tuple[Any, ...]) -> dict[Any, float]:
        depth, k, *beta = key
        points = ({b: paper_accuracy(paper, table7, depth, k, settings.trees[0], b) for b in betas} if over_beta else
                  {t: paper_accuracy(paper, table7, depth, k, t, beta[0]) for t in settings.trees})
        return {x: v for x, v in points.items() if v is not None}

    plots: list[PlotResult] = []
    for column in [c[: -len("_mean")] for c in summary.columns if c.startswith("acc_") and c.endswith("_mean")]:
        scorer = "released ensemble" if column == "acc_ensemble" else "PGEN -> " + column[len("acc_pgen_"):]
        fixed = f", {settings.trees[0]} trees" if over_beta else ""
        plots.append(plot_lines(
            out_dir / f"accuracy_{column[len('acc_'):]}.png",
            series_by(summary, x="beta" if over_beta else "trees", mean=f"{column}_mean", std=f"{column}_std", by=by,
                      label=label, reference=reference if column == "acc_ensemble" else None),
            title=f"{source}: k-AnonToRdt, {scorer}{fixed} ({spread(settings.folds, settings.repeats)})",
            xlabel="sampling rate β (fraction of training rows per tree)" if over_beta
            else "number of random trees Nt (trees)",
            ylabel=ACCURACY, xscale="log" if over_beta else "linear",
            reference_label=f"Waseda et al. Table {7 if table7 else 6} ({paper})"
                            + (", depth not given" if table7 else ""),
        ))
    return plots


def cmd_rdt(args: argparse.Namespace) -> int:
    papers = PAPER_TABLE7 if args.total_epsilon is not None else PAPER_TABLE6
    paper = reference_name(args, papers)
    if paper is not None and paper not in papers:
        raise ValueError(f"--reference {paper}: Waseda et al. give no Table {7 if papers is PAPER_TABLE7 else 6} "
                         f"values for it{' (Table 7 needs --total-epsilon)' if paper in PAPER_TABLE7 else ''}; "
                         f"choose from {', '.join(sorted(papers))}")
    table = load_source(args)
    X, y = table.schema.encode(table.frame, source=table.source)
    if any(not 0 < b <= 1 for b in args.betas):
        raise ValueError(f"--betas must lie in (0, 1], got {args.betas}")
    settings = RdtSettings(depths=args.max_depths, ks=args.ks, trees=args.trees, betas=args.betas,
                           total_epsilon=args.total_epsilon, folds=args.folds, repeats=args.repeats,
                           test_size=args.test_fraction, seed=args.seed, global_models=args.global_models,
                           pgen_scale=args.pgen_scale,
                           tree_params={} if args.tree_min_samples_leaf is None else
                           {"min_samples_leaf": args.tree_min_samples_leaf})
    raw = run_rdt(table.schema, X, y, settings, jobs=args.jobs)
    summary = summarize_rdt(raw)
    results = Results("rdt", table, asdict(settings), raw, summary)
    name = Path(table.source).name
    splits_run = settings.folds * settings.repeats
    return finish(args, results, lambda out_dir: _plots(summary, settings, paper, name, out_dir),
                  lambda: _print(summary, f"{name}: k-AnonToRdt accuracy (mean ± sd of {splits_run} splits)",
                                 with_delta=settings.total_epsilon is not None))


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
    scores: Sequence[str] = [c[: -len("_mean")] for c in summary.columns if c.startswith("acc_")
                             and c.endswith("_mean")]
    for name in scores:
        label = "ensemble" if name == "acc_ensemble" else "PGEN -> " + name[len("acc_pgen_"):]
        table.add_column(f"{label} acc", justify="right")
    if with_delta:
        table.add_column("Nt·delta", justify="right")
    for row in summary.to_dict(orient="records"):
        cells = [str(int(row["depth"])), str(int(row["k"])), str(int(row["trees"])), f"{row['beta']:g}"]
        cells += [f"{row[f'{c}_mean']:.3f} ± {0.0 if np.isnan(row[f'{c}_std']) else row[f'{c}_std']:.3f}"
                  for c in scores]
        if with_delta:
            cells.append("-" if row["k"] == 0 else _delta_cell(row["total_delta"]))
        table.add_row(*cells)
    out.print(table)


def configure(p: argparse.ArgumentParser) -> None:
    """`experiment rdt`: the table, the grid (depths x k x trees x beta), PGEN and its global models."""
    add_table_source(p, "nursery")
    add_max_depths(p, default=RdtSettings.depths, help="depths of the random trees (default 3 4 5)")
    int_list(p, "--ks", minimum=0, default=RdtSettings.ks, metavar="K",
             help="k values; 0 = no sampling or suppression (default 0 5 10)")
    int_list(p, "--trees", minimum=1, default=RdtSettings.trees, help="numbers of trees (default 8 9 10 11)")
    float_list(p, "--betas", default=RdtSettings.betas, metavar="BETA", help="sampling rates (default 0.4)")
    p.add_argument("--total-epsilon", type=float, default=None,
                   help="Nt*eps for the delta column (Table 7 uses 2.0); default: no delta column")
    add_global_models(p, choices=GLOBAL_MODELS, default=RdtSettings.global_models, allow_none=True,
                      help="global models learned from the ensemble's PGEN data")
    p.add_argument("--pgen-scale", type=float, default=1.0, help="PGEN rows per estimated real row (default 1)")
    p.add_argument("--tree-min-samples-leaf", type=int, default=None,
                   help="min_samples_leaf of the decision-tree global model (default: the miner's, fully grown)")
    add_common_options(p, name="rdt", default_folds=RdtSettings.folds, default_repeats=RdtSettings.repeats,
                       holdout=True, references={
                           "nursery": "Table 6", "adult": "Table 6", "loan": "Table 6, LendingClub not.fully.paid",
                           "mushroom": "Table 6, or Table 7 with --total-epsilon",
                           "nursery3": "Table 7 with --total-epsilon, Nursery without its two rarest classes"})
    p.set_defaults(func=cmd_rdt)
