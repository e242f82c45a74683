"""`modelshare datasets list | show NAME | export NAME --out FILE`: the bundled datasets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from modelshare.cli.common import add_json, err, out, titled_table
from modelshare.common.data.datasets import describe_dataset, export_dataset, list_datasets
from modelshare.common.data.schema import SchemaError
from modelshare.common.trees.readable import grouped

__all__ = ["cmd_datasets", "configure"]


def cmd_datasets(args: argparse.Namespace) -> int:
    if args.action == "list":
        infos = list_datasets()
        if args.json:
            print(json.dumps([i.__dict__ for i in infos], indent=2, default=list))
            return 0
        table = titled_table("bundled datasets")
        for col in ("name", "title", "rows", "attributes"):
            table.add_column(col, no_wrap=col != "title")
        table.add_column("classes", overflow="fold")
        for i in infos:
            table.add_row(i.name, i.title, grouped(i.rows), str(i.n_attributes), ", ".join(map(str, i.classes)))
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
    if args.json:
        print(json.dumps({"dataset": args.name, "out": str(args.out)}, indent=2))
    else:
        err.print(f"wrote {args.out}")
    return 0


def configure(p: argparse.ArgumentParser) -> None:
    """`datasets ACTION [NAME]`."""
    p.add_argument("action", choices=["list", "show", "export"])
    p.add_argument("name", nargs="?")
    p.add_argument("--out", type=Path, help="output file for export (.csv or .parquet)")
    add_json(p, "the datasets (list), the dataset's description (show) or what was written (export)")
    p.set_defaults(func=cmd_datasets)
