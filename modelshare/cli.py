"""The `modelshare` command line: one entry point, one sub-command per task."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from common.anonymity import RequirementError
from common.datasets import describe_dataset, export_dataset, list_datasets
from common.learners import LEARNERS
from common.model_io import read_tree
from common.schema import SchemaError
from common.table_io import write_table_chunks
from common.tree import TreeError
from miner_node.global_models import GLOBAL_MODELS
from modelshare import (
    cli_dp_audit,
    cli_dps,
    cli_federation,
    cli_owner,
    cli_privacy,
    cli_provision,
    simulate,
)
from modelshare.cli_common import (
    add_release_options,
    add_table_source,
    err,
    leaf_size,
    load_source,
    out,
    positive_int,
    tree_params,
)
from modelshare.experiments import pruning as pruning_experiment
from modelshare.experiments import rdt as rdt_experiment
from modelshare.pipeline import PipelineConfig, run_study, summarize

__all__ = ["main", "build_parser"]

# -------------------------------------------------------- experiment sources
def cmd_sources(args: argparse.Namespace) -> int:
    table = load_source(args)
    if table.dropped_rows:
        err.print(f"[yellow]{table.source}: dropped {table.dropped_rows} row(s) with missing values[/]")
    X, y = table.schema.encode(table.frame, source=table.source)
    config = PipelineConfig(
        n_sources=args.owners,
        folds=args.folds,
        repeats=args.repeats,
        learner=args.learner,
        learner_params=tree_params(args.max_depth, args.min_samples_leaf),
        mechanism=args.mechanism,
        requirement=args.requirement,
        disclosure=args.disclosure,
        global_models=tuple(args.models),
        global_params={
            name: tree_params(args.global_max_depth, args.global_min_samples_leaf)
            for name in ("decision-tree", "rules")
            if name in args.models
        },
        pgen_scale=args.pgen_scale,
        seed=args.seed,
    )
    results = _with_progress(f"{len(y)} rows, {args.owners} owners", lambda cb: run_study(table.schema, X, y, config, on_fold=cb))
    summary = summarize(results)
    if args.json:
        payload = {
            "source": table.source,
            "rows": int(len(y)),
            "dropped_rows": table.dropped_rows,
            "schema_fingerprint": table.schema.fingerprint,
            "config": {**config.__dict__, "global_models": list(config.global_models), "methods": list(config.methods)},
            "summary": json.loads(summary.to_json(orient="records")),
        }
        print(json.dumps(payload, indent=2))
        return 0
    claim = f" ({args.requirement})" if args.requirement else ""
    _print_summary(summary, f"{Path(table.source).name}: {args.owners} owners, mechanism {args.mechanism}{claim}, "
                            f"{args.folds}-fold CV x {args.repeats}")
    return 0


def _with_progress(label: str, work: Callable[[Callable[[int, int], None]], Any]) -> Any:
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        task = progress.add_task(f"folds ({label})", total=None)
        return work(lambda done, total: progress.update(task, completed=done, total=total))


def _print_summary(summary, title: str) -> None:
    table = Table(title=title)
    for col in ("global model", "method", "accuracy", "class match", "path match"):
        table.add_column(col, justify="left" if col in ("global model", "method") else "right", no_wrap=True)
    for row in summary.sort_values(["model"], kind="stable").itertuples(index=False):
        def fmt(mean: float, std: float) -> str:
            return "-" if np.isnan(mean) else f"{mean:.4f}±{0.0 if np.isnan(std) else std:.4f}"
        table.add_row(row.model, row.method, fmt(row.accuracy_mean, row.accuracy_std),
                      fmt(row.class_match_mean, row.class_match_std), fmt(row.path_match_mean, row.path_match_std))
    out.print(table)


# ------------------------------------------------------------------ datasets
def cmd_datasets(args: argparse.Namespace) -> int:
    if args.action == "list":
        infos = list_datasets()
        if args.json:
            print(json.dumps([i.__dict__ for i in infos], indent=2, default=list))
            return 0
        table = Table(title="bundled datasets")
        for col in ("name", "title", "rows", "attributes", "classes"):
            table.add_column(col)
        for i in infos:
            table.add_row(i.name, i.title, str(i.rows), str(i.n_attributes), ", ".join(map(str, i.classes)))
        out.print(table)
        return 0
    if not args.name:
        raise SchemaError(f"'datasets {args.action}' needs a dataset name")
    if args.action == "show":
        info = describe_dataset(args.name)
        if args.json:
            print(json.dumps(info, indent=2, default=str))
        else:
            out.print_json(json.dumps(info, default=str))
        return 0
    if args.out is None:
        raise SchemaError("'datasets export' needs --out FILE (.csv or .parquet)")
    export_dataset(args.name, args.out)
    err.print(f"wrote {args.out}")
    return 0


# ---------------------------------------------------------------------- pgen
def cmd_pgen(args: argparse.Namespace) -> int:
    from miner_node.pgen import pgen_chunks

    tree = read_tree(args.model)
    rng = np.random.default_rng(args.seed)
    chunks = pgen_chunks(tree, rows=args.rows, rng=rng, class_assignment=args.class_assignment,
                         chunk_rows=args.chunk_rows, shuffle=not args.grouped)
    n = write_table_chunks(tree.schema, chunks, args.out)
    err.print(f"wrote {n} pseudo rows to {args.out}")
    return 0


# -------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelshare", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("experiment", help="reproduce a paper's experiment on any table")
    ex_sub = ex.add_subparsers(dest="experiment", required=True)
    sim = ex_sub.add_parser("sources", help="in-process cross-validation of 1-10 sources: BASIS vs PGEN vs BASEGEN (Fig. 5/6)")
    add_table_source(sim, "nursery")
    sim.add_argument("--owners", type=positive_int, default=5, help="number of data owners (default 5)")
    add_release_options(sim)
    sim.add_argument("--learner", default="cart", choices=sorted(LEARNERS), help="owners' local learner (default cart)")
    sim.add_argument("--max-depth", type=positive_int, default=None, help="depth limit of the owners' local trees")
    sim.add_argument("--min-samples-leaf", type=positive_int, default=None,
                     help="minimum leaf size of the owners' local trees (default 1: fully grown)")
    sim.add_argument("--global-max-depth", type=positive_int, default=None,
                     help="depth limit of the miner's global tree models (BASIS, PGEN and BASEGEN alike)")
    sim.add_argument("--global-min-samples-leaf", type=leaf_size, default=None,
                     help="minimum leaf of the global tree models: rows, or a fraction of the training rows "
                          "(use a fraction with --pgen-scale > 1 so BASIS and PGEN trees are comparable)")
    sim.add_argument("--pgen-scale", type=float, default=PipelineConfig.pgen_scale,
                     help="PGEN rows per tree as a multiple of its tuples (default %(default)s; 1 = the paper's hit+miss)")
    sim.add_argument("--models", nargs="+", default=["decision-tree", "naive-bayes"], choices=sorted(GLOBAL_MODELS),
                     metavar="MODEL", help=f"global models (from {sorted(GLOBAL_MODELS)})")
    sim.add_argument("--folds", type=positive_int, default=10, help="cross-validation folds (default 10)")
    sim.add_argument("--repeats", type=positive_int, default=1, help="repeats of the cross-validation (default 1)")
    sim.add_argument("--seed", type=int, default=0, help="master random seed (default 0)")
    sim.add_argument("--json", action="store_true", help="print machine-readable JSON")
    sim.set_defaults(func=cmd_sources)

    ds = sub.add_parser("datasets", help="list, show or export the bundled datasets")
    ds.add_argument("action", choices=["list", "show", "export"])
    ds.add_argument("name", nargs="?")
    ds.add_argument("--out", type=Path, help="output file for export (.csv or .parquet)")
    ds.add_argument("--json", action="store_true")
    ds.set_defaults(func=cmd_datasets)

    pg = sub.add_parser("pgen", help="generate pseudo-data from a released model file (PGEN)")
    pg.add_argument("model", type=Path, help="model file (JSON)")
    pg.add_argument("--rows", type=int, default=None, help="total rows (default: hit+miss of every path)")
    pg.add_argument("--out", type=Path, required=True, help="output .csv, .csv.gz or .parquet")
    pg.add_argument("--seed", type=int, default=0)
    pg.add_argument("--class-assignment", choices=["exact", "sample"], default="exact")
    pg.add_argument("--chunk-rows", type=positive_int, default=1_000_000, help="rows generated per chunk")
    pg.add_argument("--grouped", action="store_true", help="keep rows grouped by path (default: shuffled per chunk)")
    pg.set_defaults(func=cmd_pgen)

    cli_privacy.add_parsers(sub)
    cli_dps.add_parsers(sub)
    cli_dp_audit.add_parsers(sub)
    cli_provision.add_parsers(sub)
    cli_federation.add_parsers(sub)
    cli_owner.add_parsers(sub)
    pruning_experiment.add_parser(ex_sub)
    rdt_experiment.add_parser(ex_sub)
    simulate.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (SchemaError, TreeError, RequirementError, ValueError, KeyError, OSError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        err.print(f"[red]error:[/] {message}", highlight=False)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
