"""`modelshare schema infer` and `schema check`: write a schema for one's own table, and test a table against one.

A schema is the federation's public description of a table: every numeric range and category list
in it bounds what a released tree may say and what PGEN may draw, so in a deployment none of it
may be read off one owner's private rows. `schema infer` therefore only drafts one for review: it
reads the table, rounds every numeric range outward to round bounds, marks the columns whose
values are all whole numbers, and writes a commented TOML file whose header says which parts came
from the data and must be checked (and replaced by bounds a data owner could state without looking)
before any release. A word among the numbers of an otherwise numeric column (``forty`` in a column
of ages) does not stop the draft: it is read as a missing value (its row is left out, as rows with a
missing value are), and named with its data row and file line on stderr and in the draft's header,
so that one stray cell neither turns the column categorical nor refuses the table. `schema check`
reports every problem of a table against a schema (missing, unknown category or class, non-number,
out of range, a row with more or fewer fields than the header), one line per problem, each with its
file line and its data row (they differ by the header, blank lines and values that span lines),
instead of stopping at the first; it exits 1 when any row does not fit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import tomli_w
from rich.table import Table

from modelshare.cli.common import add_json, err, note_dropped, out, target_range
from modelshare.common.data.datasets import load_table
from modelshare.common.data.datasets.loading import read_rows
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import DATA_DERIVED, MISSING_TOKENS, CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.data.task import load_regression_table
from modelshare.common.files import atomic_write

__all__ = ["configure_infer", "configure_check", "round_outward", "problems"]

MAX_SHOWN = 50  # problems printed as a table; --json lists them all


def round_outward(low: float, high: float) -> tuple[float, float]:
    """``[low, high]`` widened to multiples of the power of ten
    below its width (0..987654 -> 0..1000000, 17..90 -> 10..100).

    A drafted bound is then a round number a person would state and never a row's exact value
    (a bound that is already round moves one step further; 0 stays), though it still says roughly
    where the data lie: the header of the drafted file asks for public bounds.
    """
    width = high - low
    step = 10.0 ** math.floor(math.log10(width)) if width > 0 else 10.0 ** math.floor(math.log10(abs(high) or 1.0))
    rounded_low, rounded_high = math.floor(low / step) * step, math.ceil(high / step) * step
    # strictly outward, so that a bound is not a row's exact value (0, a natural bound, stays)
    if rounded_low == low and low != 0:
        rounded_low -= step
    if rounded_high == high and high != 0:
        rounded_high += step
    return rounded_low, rounded_high


def _number(value: float) -> str:
    """A bound as a person writes it: 1,000,000 rather than 1e+06."""
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _drafted_attributes(schema: Schema | RegressionSchema,
                        frame: pd.DataFrame) -> tuple[list[dict[str, Any]], list[str]]:
    """The attribute tables (ranges rounded outward, whole-number
    columns marked integer) and what came from the data."""
    attributes, notes = [], []
    for attr in schema.attributes:
        if isinstance(attr, CategoricalAttribute):
            attributes.append(attr.to_dict())
            notes.append(f"{attr.name}: the {attr.size} categories seen in the data")
            continue
        low, high = round_outward(attr.low, attr.high)
        values = pd.to_numeric(frame[attr.name]).to_numpy(dtype=np.float64)
        whole = bool(np.all(values == np.round(values)))
        attributes.append({"name": attr.name, "type": "numeric", "low": low, "high": high,
                           **({"integer": True} if whole else {})})
        notes.append(f"{attr.name}: data range [{_number(attr.low)}, {_number(attr.high)}] rounded outward to "
                     f"[{_number(low)}, {_number(high)}]"
                     + ("; integer: every value is a whole number" if whole else ""))
    return attributes, notes


def _where(row: int, lines: Mapping[int, int] | None) -> str:
    """A 0-based data row as a person finds it: ``data row 121 (file line 122)`` (Parquet: the data row alone)."""
    line = None if lines is None else lines.get(row)
    return f"data row {row + 1}" + ("" if line is None else f" (file line {line})")


def _non_number_notes(data: Path, found: Sequence[tuple[int, str, str]]) -> list[str]:
    """The draft's notes on words read as missing in numeric columns (each also said on stderr)."""
    if not found:
        return []
    lines = read_rows(data).lines
    notes = [f"{column}: {value!r} at {_where(row, lines)} is not a number; read as missing (its row left out "
             f"of the draft), so {column} stays numeric: correct the value, or declare the column with --categorical"
             for row, column, value in found]
    for note in notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    return notes


def _draft(args: argparse.Namespace) -> tuple[dict[str, Any], list[str], int]:
    """The drafted schema file's tables, what came from the data, and the rows read.

    A classification draft names the class and the classes seen; a regression draft (``--target``)
    states the target's public bounds as given (``--target-range``), never read from the rows.
    """
    if args.target is None:
        if args.class_column is None:
            raise ValueError("schema infer needs --class-column (a classification table) or --target with "
                             "--target-range (a regression table)")
        table = load_table(args.data, args.class_column, categorical=args.categorical, non_numbers="missing")
        note_dropped(table.source, table.dropped_rows)
        attributes, notes = _drafted_attributes(table.schema, table.frame)
        notes += _non_number_notes(args.data, table.non_numbers)
        notes.append(f"{table.schema.class_name} (the class): the {table.schema.n_classes} classes seen in the data")
        body: dict[str, Any] = {"class": table.schema.class_name, "classes": list(table.schema.classes),
                                "domain": DATA_DERIVED,
                "attributes": attributes}
        Schema.from_dict(body, source=str(args.data))  # the draft must itself be a valid schema
        return body, notes, len(table.frame)
    if args.class_column is not None or args.target_range is None:
        raise ValueError("a regression draft (--target) needs --target-range LOW,HIGH, the target's public bounds, "
                         "and takes no --class-column")
    numeric = load_regression_table(args.data, args.target, target_range=args.target_range)
    note_dropped(numeric.source, numeric.dropped_rows)
    attributes, notes = _drafted_attributes(numeric.schema, numeric.schema.decode(numeric.X))
    notes.append(f"{args.target} (the target): the public bounds given, [{_number(args.target_range[0])}, "
                 f"{_number(args.target_range[1])}]")
    body = {"task": "regression", "target": numeric.schema.target.to_dict(), "domain": DATA_DERIVED,
            "attributes": attributes}
    RegressionSchema.from_dict(body, source=str(args.data))
    return body, notes, len(numeric.y)


def cmd_infer(args: argparse.Namespace) -> int:
    body, notes, rows = _draft(args)
    header = [
        f"Schema drafted by `modelshare schema infer` from {args.data} ({rows} rows) on "
        f"{datetime.date.today().isoformat()}.",
        "REVIEW BEFORE ANY RELEASE: everything below was read from the data (data-derived). A release whose",
        "public domain comes from private rows discloses them (one person's maximum, a rare category).",
        "Replace each numeric range by bounds a data owner could state without looking (age 0-120, hours",
        "0-168, money rounded outward to a power of ten), and each category list by the public code list;",
        "then delete the line domain = \"data-derived\": until then dp and dps releases and studies refuse it.",
        "",
        *notes,
    ]
    text = "".join(f"# {line}\n" if line else "#\n" for line in header) + "\n" + tomli_w.dumps(body)
    if args.out is not None:
        atomic_write(args.out, text.encode("utf-8"), mode=0o644)
    if args.json:
        print(json.dumps({"data": str(args.data), "rows": rows, "out": None if args.out is None
                          else str(args.out), "data_derived": notes, "schema": body}, indent=2))
    elif args.out is None:
        print(text, end="")
    else:
        err.print(f"wrote {args.out}: {len(body['attributes'])} attributes and the "
                  + (f"class {body['class']!r}; " if "class" in body else f"target {args.target!r}; ") +
                  "review it before any release (its header says what came from the data)", highlight=False)
    return 0


def problems(schema: Schema, frame: pd.DataFrame, lines: Mapping[int, int] | None = None) -> list[dict[str, Any]]:
    """Every cell of ``frame`` that does not fit ``schema``: row (1-based data row: the frame's index + 1), line (the
    file line, from ``lines``; None without), column, value, why.

    Vectorised per column; missing columns are one problem each (row None).
    """
    found: list[dict[str, Any]] = []
    columns = [*schema.attributes, CategoricalAttribute(schema.class_name, schema.classes)]
    for attr in columns:
        if attr.name not in frame.columns:
            found.append({"row": None, "line": None, "column": attr.name, "value": None, "why": "column is missing"})
            continue
        raw = frame[attr.name]
        text = raw.astype(str).str.strip()
        missing = raw.isna().to_numpy() | text.isin(MISSING_TOKENS).to_numpy()
        bad = [(missing, "missing value")]
        if isinstance(attr, NumericAttribute):
            numbers = pd.to_numeric(raw.where(~missing), errors="coerce").to_numpy(dtype=np.float64)
            not_number = ~missing & ~np.isfinite(numbers)
            bad.append((not_number, "not a finite number"))
            with np.errstate(invalid="ignore"):
                outside = ~missing & ~not_number & ((numbers < attr.low) | (numbers > attr.high))
            bad.append((outside, f"outside the range [{attr.low:g}, {attr.high:g}]"))
        else:
            unknown = ~missing & ~text.isin(attr.categories).to_numpy()
            what = "class" if attr.name == schema.class_name else "category"
            bad.append((unknown, f"not a {what} of the schema"))
        for mask, why in bad:
            for i in np.flatnonzero(mask):
                index = int(frame.index[i])
                found.append({"row": index + 1, "line": None if lines is None else lines.get(index),
                              "column": attr.name, "value": None if missing[i] else str(raw.iloc[i]), "why": why})
    return sorted(found, key=lambda p: (p["row"] or 0, p["column"]))


def cmd_check(args: argparse.Namespace) -> int:
    schema = Schema.load(args.schema)
    read = read_rows(args.data)
    ragged = [{"row": e.row, "line": None if read.lines is None else read.lines.get(e.row - 1), "column": e.column,
               "value": None if e.value is None else str(e.value), "why": e.why} for e in read.ragged if e.row]
    found = sorted(problems(schema, read.frame, read.lines) + ragged, key=lambda p: (p["row"] or 0, p["column"]))
    rows = len(read.frame) + len(ragged)
    if args.json:
        print(json.dumps({"data": str(args.data), "schema": str(args.schema), "rows": rows,
                          "fits": not found, "problems": found}, indent=2))
    elif not found:
        err.print(f"{args.data}: all {rows:,} rows fit {args.schema}", highlight=False)
    else:
        table = Table(title=f"{args.data}: {len(found):,} problems against {args.schema}")
        for col in ("file line", "data row", "column", "value", "why"):
            table.add_column(col)
        for p in found[:MAX_SHOWN]:
            table.add_row("-" if p["line"] is None else str(p["line"]), "-" if p["row"] is None else str(p["row"]),
                          p["column"], "" if p["value"] is None else p["value"], p["why"])
        out.print(table)
        if len(found) > MAX_SHOWN:
            err.print(f"... and {len(found) - MAX_SHOWN} more (--json lists every one)", highlight=False)
    return 1 if found else 0


def configure_infer(p: argparse.ArgumentParser) -> None:
    """`schema infer DATA --class-column C [--out schema.toml]`."""
    p.add_argument("data", type=Path, help="the table (CSV, TSV or Parquet)")
    p.add_argument("--class-column", default=None, help="the class column (a classification table)")
    p.add_argument("--target", default=None, metavar="COLUMN", help="the numeric target (a regression table)")
    p.add_argument("--target-range", type=target_range, default=None, metavar="LOW,HIGH",
                   help="the regression target's public bounds (stated, never read off the rows), e.g. 0,10")
    p.add_argument("--categorical", nargs="+", default=(), metavar="COLUMN",
                   help="columns to treat as categorical although every value is a number")
    p.add_argument("--out", type=Path, default=None, help="the schema file to write (TOML); default: stdout")
    add_json(p, "the drafted schema and what in it came from the data")
    p.set_defaults(func=cmd_infer)


def configure_check(p: argparse.ArgumentParser) -> None:
    """`schema check DATA --schema S`."""
    p.add_argument("data", type=Path, help="the table (CSV, TSV or Parquet)")
    p.add_argument("--schema", type=Path, required=True, help="the schema file (JSON or TOML)")
    add_json(p, "every problem (row, column, value, why)")
    p.set_defaults(func=cmd_check)
