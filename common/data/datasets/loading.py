"""Read a user table (CSV, TSV or Parquet) into a checked frame plus its schema.

Formats are chosen by suffix: ``.csv``, ``.csv.gz``, ``.tsv`` and ``.parquet``. CSV files are
read as text with the delimiter sniffed among ``,``, ``;`` and tab, and whitespace around every
field is stripped; only the columns the schema calls numeric (or, when inferring, the columns
whose every present value is a finite number) are converted to numbers, so category names such
as ``"01"`` survive as written. The class column is always text.

Missing values: a field holding ``?`` or nothing (after stripping), or a null in Parquet, is
missing. Trees, PGEN and the encoded ``(X, y)`` form have no notion of a missing value, so the
loader settles it up front with one of two policies:

``missing="drop"`` (default)
    Drop every row with a missing value in the schema's columns or the class column and report
    how many went in ``LoadedTable.dropped_rows``.
``missing="error"``
    Raise `SchemaError` naming the first such row and column.

The returned frame keeps the file's 0-based data-row positions (header excluded) as its index,
also after dropping rows, so that the 1-based row numbers in `SchemaError` messages
(``index + 1``) point at the line a person would look at.
"""

from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import pandas as pd

from common.data.schema import MISSING_TOKENS, Schema, SchemaError

__all__ = ["LoadedTable", "MissingPolicy", "load_table", "read_frame"]

MissingPolicy = Literal["drop", "error"]
_DELIMITERS = ",;\t|"
_SNIFF_LINES = 50


@dataclass(frozen=True)
class LoadedTable:
    """A table checked against its schema.

    Attributes
    ----------
    frame:
        The schema's attribute columns then the class column; categorical columns and the class
        hold text, numeric columns numbers. The index is the 0-based data-row position in the
        file, so error row numbers stay meaningful after rows were dropped.
    schema:
        The schema the frame fits: the one given, or one inferred from the frame.
    source:
        Label of where the table came from (a file path or a bundled dataset name).
    dropped_rows:
        Rows removed by the missing-value policy.
    """

    frame: pd.DataFrame
    schema: Schema
    source: str
    dropped_rows: int


def _suffix(path: Path, label: str) -> str:
    name = path.name.lower()
    for suffix in (".csv.gz", ".csv", ".tsv", ".parquet"):
        if name.endswith(suffix):
            return suffix
    raise SchemaError("unsupported file type; expected .csv, .csv.gz, .tsv or .parquet", source=label)


def _sniff(path: Path, compressed: bool) -> str:
    """Pick the delimiter from the first lines; comma when the sample is ambiguous."""
    opener = gzip.open if compressed else open
    with opener(path, "rt", encoding="utf-8", newline="") as handle:
        sample = "".join(line for _, line in zip(range(_SNIFF_LINES), handle))
    try:
        return csv.Sniffer().sniff(sample, delimiters=_DELIMITERS).delimiter
    except csv.Error:
        return ","


def _read_text(path: Path, suffix: str) -> pd.DataFrame:
    sep = "\t" if suffix == ".tsv" else _sniff(path, compressed=suffix == ".csv.gz")
    frame = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, skipinitialspace=True)
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame.apply(lambda col: col.str.strip())


def _as_text(series: pd.Series) -> pd.Series:
    """Values as stripped text, nulls kept as NA."""
    return series.astype(str).str.strip().where(series.notna())


def _read_parquet(path: Path) -> pd.DataFrame:
    frame = pd.read_parquet(path).reset_index(drop=True)
    text = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    return frame.assign(**{c: _as_text(frame[c]) for c in text})


def read_frame(path: str | Path, *, source: str | None = None) -> pd.DataFrame:
    """Read a table file as is: text columns stripped, missing tokens turned into NA.

    Parameters
    ----------
    path:
        A ``.csv``, ``.csv.gz``, ``.tsv`` or ``.parquet`` file.
    source:
        Label used in errors instead of the path.

    Returns
    -------
    pandas.DataFrame
        One row per data row, indexed by its 0-based position in the file.

    Raises
    ------
    SchemaError
        The file is missing, unreadable, empty, or not a table in the format its suffix claims.
    """
    path = Path(path)
    label = source or str(path)
    suffix = _suffix(path, label)
    try:
        if path.stat().st_size == 0:
            raise pd.errors.EmptyDataError
        if suffix == ".parquet":
            frame = _read_parquet(path)
        else:
            frame = _read_text(path, suffix)
    except FileNotFoundError:
        raise SchemaError("file not found", source=label) from None
    except IsADirectoryError:
        raise SchemaError("is a directory, not a file", source=label) from None
    except OSError as exc:
        raise SchemaError(f"cannot read the file: {exc.strerror or exc}", source=label) from None
    except pd.errors.EmptyDataError:
        raise SchemaError("the file is empty", source=label) from None
    except EOFError:  # gzip stream cut short
        raise SchemaError("the compressed file is truncated (it ends before its end-of-stream marker)",
                          source=label) from None
    except ValueError as exc:  # parser errors, bad encodings, non-Parquet bytes
        raise SchemaError(f"cannot parse the file as {suffix.lstrip('.')}: {exc}", source=label) from None
    return frame.mask(frame.isin(MISSING_TOKENS))


def _apply_missing(frame: pd.DataFrame, policy: MissingPolicy, source: str) -> tuple[pd.DataFrame, int]:
    absent = frame.isna()
    rows = absent.any(axis=1).to_numpy()
    if not rows.any():
        return frame, 0
    if policy == "error":
        pos = int(np.argmax(rows))
        column = str(frame.columns[int(np.argmax(absent.iloc[pos].to_numpy()))])
        raise SchemaError(
            f"missing value; {int(rows.sum())} row(s) have one (use missing='drop' to drop them)",
            source=source,
            row=int(frame.index[pos]) + 1,
            column=column,
        )
    kept = frame[~rows]
    if kept.empty:
        raise SchemaError(f"every one of the {len(frame)} row(s) has a missing value", source=source)
    return kept, int(rows.sum())


def _numeric_columns(frame: pd.DataFrame, skip: Sequence[str]) -> list[str]:
    """Columns outside ``skip`` whose every value is a finite number."""
    numeric = []
    for col in frame.columns:
        if col in skip:
            continue
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
        if np.isfinite(values).all():
            numeric.append(col)
    return numeric


def load_table(
    path: str | Path,
    class_column: str,
    *,
    schema: Schema | str | Path | None = None,
    categorical: Sequence[str] = (),
    missing: MissingPolicy = "drop",
    source: str | None = None,
) -> LoadedTable:
    """Load a CSV, TSV or Parquet table, settle missing values and fit it to a schema.

    Parameters
    ----------
    path:
        The table file; the format follows the suffix (see the module docstring).
    class_column:
        Name of the class (label) column; it is always read as text.
    schema:
        A `Schema` or the path of a ``.json``/``.toml`` schema file. When given, every row is
        checked with `Schema.encode`, so a value outside the schema raises `SchemaError` naming
        file, row, column and value, and columns outside the schema are left out. When omitted,
        the schema is inferred from the table (`Schema.infer`), which is for exploration only:
        its ranges and categories disclose this table's extremes.
    categorical:
        Columns to treat as categorical even though all their values are numbers (inference only).
    missing:
        ``"drop"`` or ``"error"``; see the module docstring.
    source:
        Label used in errors and in the result instead of the path (e.g. a bundled dataset name).

    Returns
    -------
    LoadedTable

    Raises
    ------
    SchemaError
        Unreadable or empty file, missing class column, a missing value under
        ``missing="error"``, or a value that does not fit the schema.
    """
    if missing not in ("drop", "error"):
        raise ValueError(f"missing must be 'drop' or 'error', not {missing!r}")
    label = source or str(path)
    frame = read_frame(path, source=label)
    if class_column not in frame.columns:
        raise SchemaError(
            f"class column not found; the columns are {list(frame.columns)}", source=label, column=class_column
        )
    if frame.empty:
        raise SchemaError("the table has no data rows", source=label)
    if isinstance(schema, (str, Path)):
        schema = Schema.load(schema)
    if schema is None:
        frame, dropped = _apply_missing(frame, missing, label)
        text = [class_column, *(c for c in categorical if c in frame.columns)]
        numeric = _numeric_columns(frame, skip=text)
        frame = frame.assign(
            **{name: _as_text(frame[name]) for name in text}, **{name: pd.to_numeric(frame[name]) for name in numeric}
        )
        try:
            schema = Schema.infer(frame, class_column, categorical=categorical, source=label)
        except SchemaError as exc:  # Schema's own checks (e.g. a single class) carry no source
            if exc.source is not None:
                raise
            raise SchemaError(exc.why, source=label, column=exc.column) from None
        return LoadedTable(frame[[*schema.names, class_column]], schema, label, dropped)
    if schema.class_name != class_column:
        raise SchemaError(
            f"the schema's class column is {schema.class_name!r}, not {class_column!r}",
            source=label,
            column=class_column,
        )
    absent = [n for n in schema.names if n not in frame.columns]
    if absent:
        raise SchemaError(f"columns {absent} of the schema are missing from the table", source=label, column=absent[0])
    frame, dropped = _apply_missing(frame[[*schema.names, class_column]], missing, label)
    schema.encode(frame, source=label)
    numeric = [a.name for a in schema.attributes if a.kind == "numeric"]
    text = [a.name for a in schema.attributes if a.kind == "categorical"] + [class_column]
    frame = frame.assign(
        **{name: _as_text(frame[name]) for name in text}, **{name: pd.to_numeric(frame[name]) for name in numeric}
    )
    return LoadedTable(frame, schema, label, dropped)
