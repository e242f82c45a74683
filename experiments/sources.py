"""Sharkey et al.'s PGEN vs BASIS vs BASEGEN experiment (`modelshare experiment sources`), Figs. 5-6.

For each number of data owners in ``--owners`` and each cross-validation fold, the training part
is dealt among the owners, each owner releases a tree, and the miner's global models learned from
PGEN and BASEGEN pseudo-data are compared with BASIS (the same models on the raw training part);
see `modelshare.pipeline`. Plots: accuracy, class match and (tree models) path match against the
number of owners, one PNG per global model. The paper gives Figs. 5 and 6 only as charts, with no
number in its text, so the plots carry no paper markers.

Folds are the pipeline's: repeat ``r``'s fold assignment and each fold's seed are drawn exactly
as `run_study` draws them, before any task runs, so a task's seed depends only on (seed, repeat,
fold), every owner count sees the same folds, any ``--jobs`` gives the same numbers, and a single
``--owners N`` reproduces `run_study` (and EXPERIMENTS.md) exactly.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
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
    add_common_options,
    finish,
    plot_lines,
    run_tasks,
    selections,
    series_by,
    spread,
)
from modelshare.cli.common import (
    add_global_models,
    add_max_depth,
    add_off_path,
    add_on_path,
    add_owners,
    deprecated_alias,
    leaf_size,
    out,
    positive_int,
    tree_params,
)
from modelshare.cli.inputs import (
    DEFAULT_LEARNER,
    DEFAULT_MECHANISM,
    add_admissible_options,
    add_learner,
    add_release_options,
    add_table_source,
    learner_params,
    load_source,
    resolve_disclosure,
    resolve_requirement,
)
from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms import registry
from modelshare.miner_node.global_models import GLOBAL_MODELS
from modelshare.pipeline import PipelineConfig, fold_plan, run_fold, summarize

__all__ = ["FoldTask", "configure", "run_sources"]

DEFAULT_OWNERS = (1, 2, 5, 10)
METHOD_COLORS = {"BASIS": "tab:blue", "PGEN": "tab:orange", "BASEGEN": "tab:green"}


@dataclass(frozen=True)
class FoldTask:
    """One fold of one repeat for one number of owners, with the fold's own seed."""

    owners: int
    repeat: int
    fold: int
    test: np.ndarray
    seed: int


def _run_fold(context: tuple[Schema, np.ndarray, np.ndarray, PipelineConfig], task: FoldTask) -> list[dict[str, Any]]:
    schema, X, y, config = context
    train = ~task.test
    records = run_fold(schema, X[train], y[train], X[task.test], y[task.test], replace(config, n_sources=task.owners),
                       np.random.default_rng(task.seed))
    return [{"repeat": task.repeat, "fold": task.fold, "n_sources": task.owners, **rec} for rec in records]


def run_sources(schema: Schema, X: np.ndarray, y: np.ndarray, config: PipelineConfig, owners: Sequence[int], *,
                jobs: int = 1) -> pd.DataFrame:
    """One record per (owners, repeat, fold, method, global model), as `run_study` records them."""
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    for n in owners:
        replace(config, n_sources=n)  # validates each owner count before anything runs
    tasks = [FoldTask(n, r, f, test, seed) for n in owners for r, f, test, seed in fold_plan(y, config)]
    chunks = run_tasks(_run_fold, tasks, context=(schema, X, y, config), jobs=jobs,
                       label=f"folds ({len(y)} rows, owners {_owners(owners)})")
    return pd.DataFrame.from_records([record for chunk in chunks for record in chunk])


def _owners(owners: Sequence[int]) -> str:
    return ",".join(map(str, owners))


def _plots(summary: pd.DataFrame, config: PipelineConfig, source: str, out_dir: Path) -> list[PlotResult]:
    """Per global model: accuracy, class match and (tree models) path match against the owners."""
    plots: list[PlotResult] = []
    note = spread(config.folds, config.repeats)
    for model in config.global_models:
        rows = summary[summary["model"] == model]
        derived = rows[rows["method"] != "BASIS"]  # BASIS matches itself: 1.0 by definition
        panels = [("accuracy", rows, ACCURACY),
                  ("class_match", derived, "class match with BASIS (fraction of test rows)")]
        if rows["path_match_mean"].notna().any():
            panels.append(("path_match", derived, "path match with the BASIS tree (shared / all paths)"))
        for metric, frame, ylabel in panels:
            plots.append(plot_lines(
                out_dir / f"{metric}_{model}.png",
                series_by(frame, x="n_sources", mean=f"{metric}_mean", std=f"{metric}_std", by=["method"],
                          label=lambda key: str(key[0])),
                title=f"{source}: global {model}, mechanism {config.mechanism} ({note})",
                xlabel="number of data owners (sources)", ylabel=ylabel, colors=METHOD_COLORS,
            ))
    return plots


def _show(summary: pd.DataFrame, raw: pd.DataFrame, title: str, *, with_owners: bool) -> None:
    """Accuracy, class match and path match per (owners,) global model and method; then how each method's
    hyperparameters were set over the folds (from the ``raw`` rows)."""
    table = Table(title=title)
    columns = (["N"] if with_owners else []) + ["global model", "method", "accuracy", "class match", "path match"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("global model", "method") else "right", no_wrap=True)

    def fmt(mean: float, std: float) -> str:
        return "-" if np.isnan(mean) else f"{mean:.4f}±{0.0 if np.isnan(std) else std:.4f}"

    for row in summary.sort_values(["n_sources", "model"], kind="stable").itertuples(index=False):
        cells = [row.model, row.method, fmt(row.accuracy_mean, row.accuracy_std),
                 fmt(row.class_match_mean, row.class_match_std), fmt(row.path_match_mean, row.path_match_std)]
        table.add_row(*([str(row.n_sources)] if with_owners else []), *cells)
    out.print(table)
    for model, rows in raw.groupby("model", sort=False):
        chosen = "; ".join(f"{method} {selections(list(by.selection))}"
                           for method, by in rows.groupby("method", sort=False))
        out.print(f"{model} hyperparameters over the folds: {chosen}", highlight=False)


def cmd_sources(args: argparse.Namespace) -> int:
    """Run the sweep with the owners' release as the flags say
    (the requirement and disclosure defaulted as simulate's)."""
    args.requirement = resolve_requirement(args.mechanism, args.requirement)
    args.disclosure = resolve_disclosure(args.mechanism, args.disclosure)
    table = load_source(args)
    X, y = table.schema.encode(table.frame, source=table.source)
    config = PipelineConfig(
        n_sources=args.owners[0],
        folds=args.folds,
        repeats=args.repeats,
        learner=args.learner,
        learner_params=learner_params(args),
        mechanism=args.mechanism,
        requirement=args.requirement,
        disclosure=args.disclosure,
        global_models=tuple(args.global_models),
        global_params={
            name: tree_params(args.global_max_depth, args.global_min_samples_leaf)
            for name in ("decision-tree", "rules")
            if name in args.global_models
        },
        pgen_scale=args.pgen_scale,
        off_path=args.off_path,
        on_path=args.on_path,
        random_state=args.seed,
    )
    raw = run_sources(table.schema, X, y, config, args.owners, jobs=args.jobs)
    summary = summarize(raw)
    # the settings as every experiment's results.json states them (the CLI's --seed is the config's random_state)
    settings = {("seed" if key == "random_state" else key): value for key, value in asdict(config).items()
                if key != "n_sources"}
    results = Results("sources", table, {"owners": list(args.owners), **settings}, raw, summary)
    name = Path(table.source).name
    claim = f" ({args.requirement})" if args.requirement else ""
    title = (f"{name}: {_owners(args.owners)} owners, mechanism {args.mechanism}{claim}, "
             f"{args.folds}-fold CV x {args.repeats}")
    return finish(args, results, lambda out_dir: _plots(summary, config, name, out_dir),
                  lambda: _show(summary, raw, title, with_owners=len(args.owners) > 1))


def configure(p: argparse.ArgumentParser) -> None:
    """`experiment sources`: the table, the owner counts, the owners' release, PGEN, the global models."""
    add_table_source(p, "nursery")
    add_owners(p, default=DEFAULT_OWNERS, several=True,
               help=f"numbers of data owners: the plots' x axis (default {' '.join(map(str, DEFAULT_OWNERS))}; one "
                    "value, e.g. 5, runs that count only)")
    add_release_options(p, registry.names(), mechanism_default=DEFAULT_MECHANISM,
                        mechanism_help=f"the owners' release mechanism (default {DEFAULT_MECHANISM}: PPGEN, as "
                                       "simulate; none is the paper's plain PGEN)",
                        requirement_help="privacy requirement of the mechanism: 'k-anonymity:k=K' or "
                                         "'cl-diversity:c=C,l=L', or a whole-release mechanism's (default: the "
                                         "mechanism's own, " + "; ".join(f"{m.name} {m.default_requirement}"
                                                                         for m in registry.mechanisms()
                                                                         if m.default_requirement) + ")")
    add_learner(p, help="owners' local learner", default=DEFAULT_LEARNER)
    add_max_depth(p, help="depth limit of the owners' local trees")
    p.add_argument("--min-samples-leaf", type=positive_int, default=None,
                   help="minimum leaf size of the owners' local trees (default 1: fully grown)")
    add_admissible_options(p)
    p.add_argument("--global-max-depth", type=positive_int, default=None,
                   help="depth limit of the miner's global tree models (BASIS, PGEN and BASEGEN alike)")
    p.add_argument("--global-min-samples-leaf", type=leaf_size, default=None,
                   help="minimum leaf of the global tree models: rows, or a fraction of the training rows "
                        "(use a fraction with --pgen-scale > 1 so BASIS and PGEN trees are comparable)")
    p.add_argument("--pgen-scale", type=float, default=PipelineConfig.pgen_scale,
                   help="PGEN rows per tree as a multiple of its tuples "
                        "(default %(default)s; 1 = the paper's hit+miss)")
    add_off_path(p, default=PipelineConfig.off_path)
    add_on_path(p, default=PipelineConfig.on_path)
    models = add_global_models(p, choices=GLOBAL_MODELS, default=("decision-tree", "naive-bayes"),
                               help="global models learned from BASIS, PGEN and BASEGEN data")
    deprecated_alias(p, "--models", models)
    add_common_options(p, name="sources", default_folds=10, default_repeats=1)
    p.set_defaults(func=cmd_sources)
