"""The `modelshare` command line: one entry point, one sub-command per task."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
from rich.markup import escape
from rich.table import Table

from common.data.datasets import describe_dataset, export_dataset, list_datasets
from common.data.schema import SchemaError
from common.data.table_io import write_table_chunks
from common.federation.model_io import read_tree
from common.privacy.requirements import RequirementError
from common.trees.tree import TreeError
from modelshare import (
    cli_dp_audit,
    cli_dps,
    cli_federation,
    cli_owner,
    cli_privacy,
    cli_provision,
    simulate,
)
from modelshare.cli_common import err, out, positive_int
from modelshare.experiments import dp as dp_experiment
from modelshare.experiments import dp_regression as dp_regression_experiment
from modelshare.experiments import privacy as privacy_experiment
from modelshare.experiments import pruning as pruning_experiment
from modelshare.experiments import rdt as rdt_experiment
from modelshare.experiments import sources as sources_experiment

__all__ = ["main", "build_parser"]


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
    sources_experiment.add_parser(ex_sub)

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
    privacy_experiment.add_parser(ex_sub)
    dp_experiment.add_parser(ex_sub)
    dp_regression_experiment.add_parser(ex_sub)
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
        err.print(f"[red]error:[/] {escape(str(message))}", highlight=False)  # "[release]" is not markup
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
