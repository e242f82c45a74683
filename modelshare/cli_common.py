"""Pieces shared by the `modelshare` sub-commands: consoles, table input options, learner options."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Collection

from rich.console import Console

from common.data.datasets import LoadedTable, load_dataset, load_table
from common.data.schema import SchemaError
from common.mechanisms import registry
from common.params import ParameterError, check_positive_int

__all__ = [
    "err",
    "out",
    "positive_int",
    "add_table_source",
    "load_source",
    "tree_params",
    "leaf_size",
    "add_release_options",
]

err = Console(stderr=True, emoji=False, soft_wrap=True)
out = Console(emoji=False)


def positive_int(text: str) -> int:
    """An argparse type for an integer >= 1 (argparse itself reports text that is no integer)."""
    try:
        return check_positive_int("the value", int(text))
    except ParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def int_list(minimum: int) -> Callable[[str], tuple[int, ...]]:
    """An argparse type for comma-separated integers, each at least ``minimum`` (e.g. ``--depths 3,4,5``)."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(v) for v in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
        if any(v < minimum for v in values):
            raise argparse.ArgumentTypeError(f"values must be >= {minimum}, got {text!r}")
        return values

    return parse


def float_list(text: str) -> tuple[float, ...]:
    """An argparse type for comma-separated numbers (e.g. ``--betas 0.01,0.1``)."""
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_table_source(p: argparse.ArgumentParser, default_dataset: str | None) -> None:
    src = p.add_argument_group("input table (a bundled dataset, or your own file)")
    src.add_argument("--dataset", default=None, help=f"bundled dataset name (default: {default_dataset})")
    src.add_argument("--data", type=Path, help="CSV or Parquet file of your own")
    src.add_argument("--class-column", help="class column of --data")
    src.add_argument("--schema", type=Path, help="schema file (.json/.toml) for --data; inferred if omitted")
    src.set_defaults(default_dataset=default_dataset)


def load_source(args: argparse.Namespace) -> LoadedTable:
    if args.data is not None:
        if args.dataset is not None:
            raise SchemaError("give either --dataset or --data, not both")
        if not args.class_column:
            raise SchemaError("--data needs --class-column", source=str(args.data))
        return load_table(args.data, args.class_column, schema=args.schema)
    name = args.dataset or args.default_dataset
    if name is None:
        raise SchemaError("no input table: give --dataset NAME or --data FILE --class-column COLUMN")
    return load_dataset(name)


def tree_params(max_depth: int | None, min_samples_leaf: int | float | None) -> dict[str, Any]:
    """Tree learner keyword arguments for the limits a user gave (none given: the learner's defaults)."""
    params: dict[str, Any] = {}
    if max_depth is not None:
        params["max_depth"] = max_depth
    if min_samples_leaf is not None:
        params["min_samples_leaf"] = min_samples_leaf
    return params


def leaf_size(text: str) -> int | float:
    """An integer >= 1 (rows) or a float in (0, 1) (fraction of the training rows)."""
    try:
        value: int | float = int(text)
    except ValueError:
        value = float(text)
    if (isinstance(value, int) and value >= 1) or (isinstance(value, float) and 0 < value < 1):
        return value
    raise argparse.ArgumentTypeError(f"must be an integer >= 1 or a fraction in (0, 1), got {text}")


def add_release_options(p: argparse.ArgumentParser, mechanisms: Collection[str] | None = None) -> None:
    """--mechanism (one of ``mechanisms``, default the registry's tree mechanisms), --requirement and --disclosure."""
    mechanisms = registry.names(kind="tree") if mechanisms is None else mechanisms
    p.add_argument("--mechanism", default="none", choices=sorted(mechanisms), help="release mechanism (default none)")
    p.add_argument("--requirement", default=None,
                   help="privacy requirement of the mechanism: 'k-anonymity:k=K' or 'cl-diversity:c=C,l=L'"
                        + "".join(f" ({m.name}: {m.requirement_form})" for m in registry.mechanisms()
                                  if m.whole_release and m.name in mechanisms))
    p.add_argument("--disclosure", default="counts", choices=["counts", "hit_miss"],
                   help="what released trees disclose per node (default counts; hit_miss is the model-sharing paper's)")
