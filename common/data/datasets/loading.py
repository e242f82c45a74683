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
``missing="category"``
    Keep a missing value of a categorical attribute as the category `MISSING_CATEGORY`
    (``"(missing)"``), which a given schema must list among that attribute's categories (an
    inferred one gets it from the rows); a row missing a numeric attribute or its class is still
    dropped and counted, since a number has no "missing" value a tree could split on.

Every caller reports ``dropped_rows`` (the command line on stderr, the owner in its log and status,
the miner in its log and the study's results): rows never disappear without a word.

The returned frame keeps the file's 0-based data-row positions (header excluded) as its index,
also after dropping rows, so that the 1-based row numbers in `SchemaError` messages
(``index + 1``) point at the line a person would look at.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import MISSING_TOKENS, Schema, SchemaError

__all__ = ["MISSING_CATEGORY", "MISSING_POLICIES", "LoadedTable", "MissingPolicy", "RowsRead", "load_table",
           "missing_value_error", "no_row_left_error", "read_frame", "read_rows", "settle_missing", "sniff_delimiter",
           "table_suffix", "unlisted_missing_error"]

MissingPolicy = Literal["drop", "error", "category"]
MISSING_POLICIES: tuple[MissingPolicy, ...] = ("drop", "error", "category")
MISSING_CATEGORY = "(missing)"
"""The category a missing categorical value becomes under ``missing="category"``."""
_DELIMITERS = ",;\t|"
_SNIFF_LINES = 50
_FEW_NUMBERS = 10  # more distinct numbers than this, and a column with a word among them is refused


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
    non_numbers:
        ``(data row index, column, value)`` of the words read as missing in otherwise numeric columns
        (``load_table(..., non_numbers="missing")`` only); their rows are among ``dropped_rows`` (a row
        missing a number is dropped under every missing-value policy).
    """

    frame: pd.DataFrame
    schema: Schema
    source: str
    dropped_rows: int
    non_numbers: tuple[tuple[int, str, str], ...] = ()


def table_suffix(path: Path, label: str) -> str:
    """The format of ``path`` by its suffix: ``.csv.gz``, ``.csv``, ``.tsv`` or ``.parquet`` (else SchemaError)."""
    name = path.name.lower()
    for suffix in (".csv.gz", ".csv", ".tsv", ".parquet"):
        if name.endswith(suffix):
            return suffix
    raise SchemaError("unsupported file type; expected .csv, .csv.gz, .tsv or .parquet", source=label)


def sniff_delimiter(sample: str) -> str:
    """Pick the delimiter from the first lines; comma when the sample is ambiguous."""
    head = "".join(line for _, line in zip(range(_SNIFF_LINES), io.StringIO(sample), strict=False))
    try:
        return csv.Sniffer().sniff(head, delimiters=_DELIMITERS).delimiter
    except csv.Error:
        return ","


def _fields(line: str, sep: str) -> list[str]:
    """One line's fields as the csv module reads them; split on ``sep`` when it cannot (a stray carriage return)."""
    try:
        return next(csv.reader([line], delimiter=sep), [])
    except csv.Error:
        return line.split(sep)


def _undecodable(data: bytes, exc: UnicodeDecodeError, sep: str, label: str) -> SchemaError:
    """The error for a byte that is not UTF-8: the data row, the column and the field as written (bytes escaped)."""
    line = data.count(b"\n", 0, exc.start) + 1
    begin = data.rfind(b"\n", 0, exc.start) + 1
    end = data.find(b"\n", exc.start)
    fields = _fields(data[begin:None if end < 0 else end].decode("utf-8", "backslashreplace"), sep)
    header = _fields(data.split(b"\n", 1)[0].decode("utf-8", "replace"), sep)
    index = next((j for j, field in enumerate(fields) if "\\x" in field), None)
    column = header[index].strip() if index is not None and index < len(header) and line > 1 else None
    value = fields[index].strip() if index is not None else None
    row = line - 1 if line > 1 else None
    what = "the header" if line == 1 else f"line {line}"
    return SchemaError(f"{what} holds bytes that are not UTF-8 ({exc.reason}); save the file as UTF-8",
                       source=label, row=row, column=column, value=value)


def _ragged(rows: list[list[str]], header: list[str], label: str) -> None:
    """Refuse the first data row whose number of fields differs from the header's, naming row, column and value."""
    width = len(header)
    bad = next((i for i, row in enumerate(rows) if len(row) != width), None)
    if bad is None:
        return
    row = rows[bad]
    if len(row) < width:
        after = width - len(row) - 1
        raise SchemaError(f"the row has {len(row)} field(s), the header {width}: no value for this column"
                          + (f" nor the {after} after it" if after else "")
                          + " (a missing value is written as an empty field or '?')",
                          source=label, row=bad + 1, column=header[len(row)])
    raise SchemaError(f"the row has {len(row)} fields, the header {width}: the value after the last column "
                      f"{header[-1]!r} has no column (an unquoted delimiter inside a value?)",
                      source=label, row=bad + 1, column=f"#{width + 1} (beyond the header)", value=row[width].strip())


def _decoded(path: Path, suffix: str, label: str) -> tuple[str, str]:
    """The text file's content, decoded from UTF-8 (a byte that is not is named), and its delimiter."""
    data = gzip.open(path).read() if suffix == ".csv.gz" else path.read_bytes()
    sep = "\t" if suffix == ".tsv" else sniff_delimiter(data[:65536].decode("utf-8", "replace"))
    try:
        return data.decode("utf-8-sig"), sep
    except UnicodeDecodeError as exc:
        raise _undecodable(data, exc, sep, label) from None


def _read_text(path: Path, suffix: str, label: str) -> pd.DataFrame:
    """Parse a delimited text file strictly: UTF-8, and every data row as wide as the header.

    pyarrow parses (fast); a row of the wrong width is only noticed there, so the rare file that
    has one is read again with the `csv` module to name the row. Blank lines are skipped; the
    frame's index counts the data rows that remain, from 0.
    """
    text, sep = _decoded(path, suffix, label)
    first = next(_rows(text, sep), None)
    if first is None:
        raise pd.errors.EmptyDataError
    header = [name.strip() for name in first]
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise SchemaError(f"the header names column(s) {twice} more than once", source=label, column=twice[0])
    if re.search(re.escape(sep) + r'[ \t]+"', text):  # a quoted field after spaces: pyarrow would keep the quotes
        rows = list(_rows(text, sep))
        _ragged(rows[1:], header, label)
        frame = pd.DataFrame(rows[1:], columns=header, dtype=str) if len(rows) > 1 else pd.DataFrame(columns=header)
    else:
        frame = _parse_fast(text, sep, header, label)
    return frame.apply(lambda col: col.astype(str).str.strip())


def _rows(text: str, sep: str) -> Iterator[list[str]]:
    """The non-blank rows of ``text`` as the `csv` module reads them (spaces before a quoted field skipped)."""
    return (row for row in csv.reader(io.StringIO(text, newline=""), delimiter=sep, skipinitialspace=True) if row)


def _parse_fast(text: str, sep: str, header: list[str], label: str) -> pd.DataFrame:
    """The data rows parsed by pyarrow as text; a row of the wrong width is named by `_ragged` from a second read."""
    ragged: list[object] = []

    def note(row: object) -> str:
        ragged.append(row)
        return "skip"

    names = [f"f{i}" for i in range(len(header))]  # the header may hold names pyarrow would read differently
    table = pacsv.read_csv(
        io.BytesIO(text.encode("utf-8")),
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=1),
        parse_options=pacsv.ParseOptions(delimiter=sep, newlines_in_values=True, invalid_row_handler=note),
        convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=False,
                                             quoted_strings_can_be_null=False))
    if ragged:
        _ragged(list(_rows(text, sep))[1:], header, label)
        raise SchemaError(f"a row's number of fields differs from the header's ({len(header)}): "
                          f"{getattr(ragged[0], 'text', '')!r}", source=label)
    frame = table.to_pandas()
    frame.columns = header
    return frame


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
    suffix = table_suffix(path, label)
    with _reading(path, suffix, label):
        frame = _read_parquet(path) if suffix == ".parquet" else _read_text(path, suffix, label)
    return frame.mask(frame.isin(MISSING_TOKENS))


@contextmanager
def _reading(path: Path, suffix: str, label: str) -> Iterator[None]:
    """Turn what reading ``path`` raises (absent, unreadable, empty, unparsable) into a `SchemaError` naming it."""
    try:
        if path.stat().st_size == 0:
            raise pd.errors.EmptyDataError
        yield
    except SchemaError:
        raise
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


@dataclass(frozen=True)
class RowsRead:
    """A table read to report every problem in it (`modelshare schema check`) rather than stop at the first.

    Attributes
    ----------
    frame:
        The data rows as wide as the header, as `read_frame` gives them, indexed by the 0-based data-row
        position (a row of the wrong width keeps its number, so the rows after it keep theirs).
    lines:
        The file line each data row starts on (index -> line), or None for a Parquet file. It counts
        blank lines and values that span lines, which data-row numbers do not.
    ragged:
        One `SchemaError` per data row whose number of fields differs from the header's.
    """

    frame: pd.DataFrame
    lines: Mapping[int, int] | None
    ragged: tuple[SchemaError, ...]


def read_rows(path: str | Path, *, source: str | None = None) -> RowsRead:
    """Read a table as `read_frame` does, except that a row of the wrong width is listed, not refused.

    Raises
    ------
    SchemaError
        The file is missing, unreadable, empty, not UTF-8, or its header names a column twice.
    """
    path = Path(path)
    label = source or str(path)
    suffix = table_suffix(path, label)
    if suffix == ".parquet":
        return RowsRead(read_frame(path, source=label), None, ())
    with _reading(path, suffix, label):
        text, sep = _decoded(path, suffix, label)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, skipinitialspace=True)
    header: list[str] | None = None
    rows: dict[int, list[str]] = {}
    lines: dict[int, int] = {}
    ragged: list[SchemaError] = []
    start = 1
    for fields in reader:
        line, start = start, reader.line_num + 1
        if not fields:
            continue
        if header is None:
            header = [name.strip() for name in fields]
            continue
        index = len(lines)
        lines[index] = line
        try:
            _ragged([fields], header, label)
        except SchemaError as exc:
            ragged.append(SchemaError(exc.why, source=label, row=index + 1, column=exc.column, value=exc.value))
            continue
        rows[index] = fields
    if header is None:
        raise SchemaError("the file is empty", source=label)
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise SchemaError(f"the header names column(s) {twice} more than once", source=label, column=twice[0])
    frame = pd.DataFrame(list(rows.values()), index=list(rows), columns=header, dtype=str)
    frame = frame.apply(lambda col: col.astype(str).str.strip())
    return RowsRead(frame.mask(frame.isin(MISSING_TOKENS)), lines, tuple(ragged))


def _apply_missing(frame: pd.DataFrame, policy: Literal["drop", "error"], source: str) -> tuple[pd.DataFrame, int]:
    absent = frame.isna()
    rows = absent.any(axis=1).to_numpy()
    if not rows.any():
        return frame, 0
    if policy == "error":
        pos = int(np.argmax(rows))
        column = str(frame.columns[int(np.argmax(absent.iloc[pos].to_numpy()))])
        raise missing_value_error(int(rows.sum()), source, int(frame.index[pos]) + 1, column)
    kept = frame[~rows]
    if kept.empty:
        raise no_row_left_error(len(frame), source)
    return kept, int(rows.sum())


def missing_value_error(rows: int, source: str, row: int, column: str) -> SchemaError:
    """``missing="error"``'s refusal: ``rows`` rows miss a value, the first at 1-based ``row`` in ``column``."""
    return SchemaError(f"missing value; {rows} row(s) have one (use missing='drop' to drop them)",
                       source=source, row=row, column=column)


def no_row_left_error(rows: int, source: str) -> SchemaError:
    """The refusal of a table whose ``rows`` rows all miss a value (none left once they are dropped)."""
    return SchemaError(f"every one of the {rows} row(s) has a missing value", source=source)


def unlisted_missing_error(source: str, row: int, column: str) -> SchemaError:
    """``missing="category"``'s refusal of a missing value (1-based ``row``) in an attribute whose schema does not
    list `MISSING_CATEGORY`."""
    return SchemaError(f"missing='category' keeps a missing value as the category {MISSING_CATEGORY!r}, which "
                       "the schema does not list for this attribute: add it to its categories",
                       source=source, row=row, column=column)


def _missing_as_category(frame: pd.DataFrame, columns: Sequence[str], source: str,
                         categories: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """``columns`` with every missing value replaced by `MISSING_CATEGORY`.

    With ``categories`` (a given schema's), a column that has a missing value must list the
    category: the schema is the public domain, and a value outside it is refused, not added.
    """
    filled = {}
    for column in columns:
        absent = frame[column].isna().to_numpy()
        if not absent.any():
            continue
        if categories is not None and MISSING_CATEGORY not in categories[column]:
            raise unlisted_missing_error(source, int(frame.index[int(np.argmax(absent))]) + 1, column)
        filled[column] = frame[column].fillna(MISSING_CATEGORY)
    return frame.assign(**filled)


def settle_missing(frame: pd.DataFrame, schema: Schema | RegressionSchema, policy: MissingPolicy,
                   source: str) -> tuple[pd.DataFrame, int]:
    """``frame`` (the schema's columns and the class or target) with missing values settled by ``policy``.

    Returns the frame and the number of rows dropped (see the module docstring).
    """
    if policy not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {list(MISSING_POLICIES)}, not {policy!r}")
    if policy == "category":
        categorical = [a for a in schema.attributes if a.kind == "categorical"]
        frame = _missing_as_category(frame, [a.name for a in categorical], source,
                                     # the ignore below: kind categorical
                                     {a.name: a.categories for a in categorical})  # type: ignore[union-attr]
    return _apply_missing(frame, "error" if policy == "error" else "drop", source)


def _stray_words(frame: pd.DataFrame, skip: Sequence[str]) -> list[tuple[int, str, str]]:
    """``(index, column, value)`` of every value that is not a number in a column `_numeric_columns` would refuse
    for it: more than half its values numbers, more than `_FEW_NUMBERS` distinct ones."""
    found = []
    for col in frame.columns:
        if col in skip:
            continue
        present = frame[col].dropna()
        values = pd.to_numeric(present, errors="coerce").to_numpy(dtype=np.float64)
        finite = np.isfinite(values)
        if not finite.all() and 2 * int(finite.sum()) > len(finite) and np.unique(values[finite]).size > _FEW_NUMBERS:
            found += [(int(present.index[i]), str(col), str(present.iloc[i])) for i in np.flatnonzero(~finite)]
    return found


def _numeric_columns(frame: pd.DataFrame, skip: Sequence[str], source: str) -> list[str]:
    """Columns outside ``skip`` whose every value is a finite number.

    A column whose values are mostly numbers, more than `_FEW_NUMBERS` distinct ones, but not all
    numbers is refused rather than read as categorical: one stray string would otherwise turn a
    numeric column into as many categories as it has distinct numbers, silently. The error names
    the first such value. A column of a few numbers and some words (``2, 3, 4, 5more``) reads
    as categorical, which the inferred schema's categories show.
    """
    numeric = []
    for col in frame.columns:
        if col in skip:
            continue
        present = frame[col].dropna()  # under missing="category" the missing values are still here
        values = pd.to_numeric(present, errors="coerce").to_numpy(dtype=np.float64)
        finite = np.isfinite(values)
        if finite.all():
            numeric.append(col)
        elif 2 * int(finite.sum()) > len(finite) and np.unique(values[finite]).size > _FEW_NUMBERS:
            pos = int(np.argmin(finite))
            raise SchemaError(
                f"{int(finite.sum())} of the column's {len(finite)} values are numbers but this one is not, so the "
                "inferred schema can call it neither numeric nor categorical: correct the value, write it as missing "
                "('?' or an empty field), or declare the column categorical (`modelshare schema infer --categorical "
                f"{col}`, then --schema)", source=source, row=int(present.index[pos]) + 1, column=str(col),
                value=present.iloc[pos])
    return numeric


def load_table(
    path: str | Path,
    class_column: str,
    *,
    schema: Schema | str | Path | None = None,
    categorical: Sequence[str] = (),
    missing: MissingPolicy = "drop",
    source: str | None = None,
    non_numbers: Literal["refuse", "missing"] = "refuse",
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
        ``"drop"``, ``"error"`` or ``"category"``; see the module docstring.
    source:
        Label used in errors and in the result instead of the path (e.g. a bundled dataset name).
    non_numbers:
        Inference only: a word among the numbers of a numeric column is refused (``"refuse"``, naming it),
        or read as a missing value and listed in `LoadedTable.non_numbers` (``"missing"``: what
        ``modelshare schema infer`` does, so that one stray word does not stop a draft).

    Returns
    -------
    LoadedTable

    Raises
    ------
    SchemaError
        Unreadable or empty file, missing class column, a missing value under
        ``missing="error"``, or a value that does not fit the schema.
    """
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {list(MISSING_POLICIES)}, not {missing!r}")
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
        strays = _stray_words(frame, skip=[class_column, *categorical]) if non_numbers == "missing" else []
        if strays:
            stray = pd.DataFrame(False, index=frame.index, columns=frame.columns)
            for index, column, _ in strays:
                stray.loc[index, column] = True
            frame = frame.mask(stray)
        if missing != "category":
            frame, dropped = _apply_missing(frame, missing, label)
        text = [class_column, *(c for c in categorical if c in frame.columns)]
        numeric = _numeric_columns(frame, skip=text, source=label)
        if missing == "category":
            kept = [c for c in frame.columns if c not in numeric and c != class_column]
            frame, dropped = _apply_missing(_missing_as_category(frame, kept, label), "drop", label)
        frame = frame.assign(
            **{name: _as_text(frame[name]) for name in text}, **{name: pd.to_numeric(frame[name]) for name in numeric}
        )
        try:
            schema = Schema.infer(frame, class_column, categorical=categorical, source=label)
        except SchemaError as exc:  # Schema's own checks (e.g. a single class) carry no source
            if exc.source is not None:
                raise
            raise SchemaError(exc.why, source=label, column=exc.column) from None
        return LoadedTable(frame[[*schema.names, class_column]], schema, label, dropped, tuple(strays))
    if schema.class_name != class_column:
        raise SchemaError(
            f"the schema's class column is {schema.class_name!r}, not {class_column!r}",
            source=label,
            column=class_column,
        )
    absent = [n for n in schema.names if n not in frame.columns]
    if absent:
        raise SchemaError(f"columns {absent} of the schema are missing from the table", source=label, column=absent[0])
    frame, dropped = settle_missing(frame[[*schema.names, class_column]], schema, missing, label)
    schema.encode(frame, source=label)
    numeric = [a.name for a in schema.attributes if a.kind == "numeric"]
    text = [a.name for a in schema.attributes if a.kind == "categorical"] + [class_column]
    frame = frame.assign(
        **{name: _as_text(frame[name]) for name in text}, **{name: pd.to_numeric(frame[name]) for name in numeric}
    )
    return LoadedTable(frame, schema, label, dropped)
