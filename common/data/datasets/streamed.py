"""Read a table with a given schema straight into its encoded ``(X, y)``, a block of rows at a time.

`read_encoded` returns what `load_table` then `Schema.encode` return (the same float64 ``X``, int64 ``y`` and
dropped-row count) and raises the same `SchemaError`, without holding the table as text: a CSV/TSV (``.csv``,
``.csv.gz``, ``.tsv``) is parsed by pyarrow's streaming reader in blocks of `BLOCK_BYTES`, a Parquet file in
batches, and only the schema's columns and the class column are converted, stripped (Python's whitespace),
settled by the missing-value policy and encoded with pyarrow compute and numpy (codes by lookup, numbers by
pyarrow's parse, which agrees with pandas' wherever both read a number) into arrays allocated once for an upper
bound on the rows (a first pass over the bytes counts the lines, checks they are UTF-8 and looks for a quoted
field after spaces). A value that does not fit, a missing value the policy refuses and a table left without rows
are named once every block is read, with the loader's first column, row, value and count of rows; a file the
blocks cannot read exactly as the loader does (a header or row-width fault, bytes that are not UTF-8, a quoted
field after spaces, a row longer than two blocks, a Parquet column of another type, no data rows) is read again
by `load_table` itself, at its memory. `stream_encoded` is the streamed part alone (None where the whole-file
reader must decide), for a caller with its own whole-file path: the owner daemon.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from modelshare.common.data.datasets.loading import (
    MISSING_CATEGORY,
    MISSING_POLICIES,
    MissingPolicy,
    load_table,
    missing_value_error,
    no_row_left_error,
    sniff_delimiter,
    table_suffix,
    unlisted_missing_error,
)
from modelshare.common.data.schema import (
    MISSING_TOKENS,
    CategoricalAttribute,
    NumericAttribute,
    Schema,
    SchemaError,
    number_fault_reasons,
    unknown_value_reason,
)

__all__ = ["BLOCK_BYTES", "EncodedTable", "read_encoded", "stream_encoded"]

BLOCK_BYTES = 1 << 20
"""Bytes of text pyarrow parses per block (a Parquet batch holds about as many rows); larger blocks leave pyarrow
holding more memory (4 MiB: 150 MB more at 10^6 Adult-shaped rows) for no speed."""
_SNIFF_BYTES = 65536  # the sample the delimiter and the header are read from, as `load_table` reads it
_SCAN_BYTES = 1 << 22  # bytes per read of the line-counting pass
_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
               "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
"""Every character `str.strip` removes (those whose `str.isspace` is true), which the loader strips."""


@dataclass(frozen=True)
class EncodedTable:
    """A table encoded with its schema: ``X`` float64 (rows, attributes), ``y`` int64 class indices, the rows the
    missing-value policy dropped, the source label errors name, and the schema."""

    X: np.ndarray
    y: np.ndarray
    dropped_rows: int
    source: str
    schema: Schema


class _Unstreamable(Exception):
    """The file needs the whole-file reader: something the blocks do not settle exactly as `load_table` would."""


def read_encoded(path: str | Path, class_column: str, *, schema: Schema | str | Path, missing: MissingPolicy = "drop",
                 source: str | None = None, block_bytes: int = BLOCK_BYTES) -> EncodedTable:
    """``path`` encoded with ``schema``, as `load_table` then `Schema.encode` give it, read a block at a time.

    Parameters are `load_table`'s (a schema is required); ``block_bytes`` is the text parsed per block.

    Raises
    ------
    SchemaError
        Exactly what `load_table` (then `Schema.encode`) raises for the same file (module docstring).
    """
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {list(MISSING_POLICIES)}, not {missing!r}")
    label = source or str(path)
    given: Schema | None = None
    if isinstance(schema, Schema):
        given = schema
    else:
        try:
            given = Schema.load(schema)
        except SchemaError:  # the loader names a bad table before a bad schema file
            pass
    if given is not None:
        found = stream_encoded(path, given, class_column, missing=missing, source=label, block_bytes=block_bytes)
        if found is not None:
            return found
    table = load_table(path, class_column, schema=schema, missing=missing, source=label)
    X, y = table.schema.encode(table.frame, source=label)
    return EncodedTable(X, y, table.dropped_rows, label, table.schema)


def stream_encoded(path: str | Path, schema: Schema, class_column: str, *, missing: MissingPolicy = "drop",
                   source: str | None = None, block_bytes: int = BLOCK_BYTES) -> EncodedTable | None:
    """``path`` encoded block by block as `read_encoded` does, or None where the whole-file reader must decide.

    ``class_column`` is the file's name for the class column (it may differ from ``schema.class_name``, which
    errors name, as the owner daemon renames it). None means the file holds something the blocks do not settle
    themselves (module docstring): the caller reads it whole, which gives the result or the error.

    Raises
    ------
    SchemaError
        A value that does not fit the schema, a missing value the policy refuses, no row left (module docstring).
    """
    path = Path(path)
    label = source or str(path)
    wanted = [*schema.names, class_column]
    try:
        suffix = table_suffix(path, label)
        if len(set(wanted)) != len(wanted) or path.stat().st_size == 0:
            return None
        if suffix == ".parquet":
            capacity, blocks = _parquet_blocks(path, schema, wanted, block_bytes)
        else:
            capacity, blocks = _text_blocks(path, suffix, wanted, block_bytes)
        encoder = _Encoder(schema, missing, capacity)
        for columns in blocks:
            encoder.add(columns)
        fault = encoder.fault(label)
    except (_Unstreamable, SchemaError, OSError, EOFError, ValueError, pa.ArrowException):
        return None
    if fault is not None:
        raise fault
    return encoder.finish(label)


def _text_blocks(path: Path, suffix: str, wanted: Sequence[str],
                 block_bytes: int) -> tuple[int, Iterator[list[tuple[pa.Array, bool]]]]:
    """The upper bound on the data rows and the blocks of a CSV/TSV file: per wanted column (text, False).

    A block holds at least the header and twice the sample's longest line: pyarrow refuses a row longer
    than a block (such a file is left to the whole-file reader).
    """
    sample, sep, lines = _scan(path, suffix)
    header, header_bytes = _header(sample, sep)
    if len(set(header)) != len(header) or any(name not in header for name in wanted):
        raise _Unstreamable
    names = [f"f{i}" for i in range(len(header))]
    include = [names[header.index(name)] for name in wanted]
    stream = _open(path, suffix)  # a Python file: pyarrow's own file readers hold most of a file read ahead
    reader = pacsv.open_csv(
        stream,
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, use_threads=False, block_size=max(
            block_bytes, header_bytes, 2 * max(len(line) for line in sample.splitlines()))),
        parse_options=pacsv.ParseOptions(delimiter=sep, newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in include}, include_columns=include,
                                             strings_can_be_null=False, quoted_strings_can_be_null=False))

    def blocks() -> Iterator[list[tuple[pa.Array, bool]]]:
        with stream, reader:
            for batch in reader:
                yield [(batch.column(i), False) for i in range(len(include))]

    return lines + 1, blocks()


def _open(path: Path, suffix: str) -> io.BufferedIOBase:
    return gzip.open(path) if suffix == ".csv.gz" else path.open("rb")


def _scan(path: Path, suffix: str) -> tuple[bytes, str, int]:
    """The first `_SNIFF_BYTES` of the (decompressed) file, its delimiter and its line count, in one pass that
    checks the whole is UTF-8 and holds no quoted field after spaces (both the whole-file reader's to handle).

    Lines end at ``\n``, or at a lone ``\r`` in a file that has more of those than ``\n``.
    """
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    newlines = returns = 0
    carry = b""
    with _open(path, suffix) as stream:
        sample = stream.read(_SNIFF_BYTES)
        sep = "\t" if suffix == ".tsv" else sniff_delimiter(sample.decode("utf-8", "replace"))
        quoted = re.compile(re.escape(sep.encode()) + rb'[ \t]+"')
        tail = re.compile(re.escape(sep.encode()) + rb"[ \t]*\Z")
        chunk = sample
        while chunk:
            newlines += chunk.count(b"\n")
            returns += chunk.count(b"\r")
            if not (chunk.isascii() and decoder.getstate()[0] == b""):
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError:
                    raise _Unstreamable from None
            text = carry + chunk
            if b'"' in text and quoted.search(text):  # the loader reads such a file with the csv module
                raise _Unstreamable
            end = tail.search(text[-4096:])
            carry = end.group(0) if end else b""
            chunk = stream.read(_SCAN_BYTES)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise _Unstreamable from None
    return sample, sep, newlines if returns <= newlines else newlines + returns


def _header(sample: bytes, sep: str) -> tuple[list[str], int]:
    """The header's stripped names as `load_table` reads them, and the bytes up to its end; the header must end
    inside the sample (or the sample be the whole file)."""
    text = sample.decode("utf-8-sig", "ignore")
    stream = io.StringIO(text, newline="")
    reader = csv.reader(stream, delimiter=sep, skipinitialspace=True)
    first = next((row for row in reader if row), None)
    if first is None or (stream.tell() >= len(text) and len(sample) >= _SNIFF_BYTES):
        raise _Unstreamable
    return [name.strip() for name in first], len(text[:stream.tell()].encode("utf-8")) + 3


def _parquet_blocks(path: Path, schema: Schema, wanted: Sequence[str],
                    block_bytes: int) -> tuple[int, Iterator[list[tuple[pa.Array, bool]]]]:
    """The row count and the batches of a Parquet file: per wanted column (values, whether they are numbers).

    A column a number or text the loader reads the same way here: text for a categorical attribute and the
    class, text or a number (integer or floating point) for a numeric attribute.
    """
    parquet = pq.ParquetFile(path)
    fields = parquet.schema_arrow
    names = list(fields.names)
    metadata = fields.pandas_metadata or {}
    indexed = {str(c) for c in metadata.get("index_columns", ()) if isinstance(c, str)}
    if len(set(names)) != len(names) or any(name not in names or name in indexed for name in wanted):
        raise _Unstreamable
    numeric = {a.name for a in schema.attributes if a.kind == "numeric"}
    kinds = []
    for name in wanted:
        kind = fields.field(name).type
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        number = pa.types.is_integer(kind) or pa.types.is_floating(kind)
        if not (text or (number and name in numeric)):
            raise _Unstreamable
        kinds.append(number)
    rows = max(1, block_bytes // 64)

    def blocks() -> Iterator[list[tuple[pa.Array, bool]]]:
        for batch in parquet.iter_batches(batch_size=rows, columns=list(wanted)):
            yield [(batch.column(i), kinds[i]) for i in range(len(wanted))]

    return parquet.metadata.num_rows, blocks()


@dataclass
class _Fault:
    """One kind of fault in one column: how many rows hold it, and the first (0-based data row, value as read)."""

    count: int
    row: int
    value: object


class _Encoder:
    """Blocks of columns (the schema's attributes then the class) settled and encoded into preallocated X, y.

    A value that does not fit is not raised at once: `Schema.encode` names a column's first fault with the count of
    rows sharing it over the whole table, and the first column (in schema order) that has one; so every block is
    read and the faults counted, and `fault` gives the error the whole-file loader gives.
    """

    def __init__(self, schema: Schema, missing: MissingPolicy, capacity: int) -> None:
        self.schema = schema
        self.missing = missing
        self.X = np.empty((capacity, schema.n_attributes), dtype=np.float64)
        self.y = np.empty(capacity, dtype=np.int64)
        self.rows = 0
        self.kept = 0
        self.categories = [pa.array(a.categories, pa.string()) if isinstance(a, CategoricalAttribute) else None
                           for a in schema.attributes]
        self.classes = pa.array(schema.classes, pa.string())
        self.unlisted: dict[int, int] = {}  # missing="category": attribute without the category -> first missing row
        self.absent_rows = 0  # missing="error": rows with a missing value, and the first one with its column
        self.first_absent: tuple[int, int] | None = None
        self.faults: dict[tuple[int, int], _Fault] = {}  # (column, kind of fault) -> the rows that hold it

    def add(self, columns: Sequence[tuple[pa.Array, bool]]) -> None:
        """Settle one block's missing values and append its kept rows' codes and numbers (or count its faults)."""
        values = [column if number else pc.utf8_trim(column, _WHITESPACE) for column, number in columns]
        absent = [self._absent(value, number) for value, (_, number) in zip(values, columns, strict=True)]
        filled: dict[int, int] = {}  # attribute: the code of MISSING_CATEGORY its missing values become
        drop = np.zeros(len(values[-1]), dtype=bool)
        for j, gone in enumerate(absent):
            if not gone.any():
                continue
            attribute = self.schema.attributes[j] if j < self.schema.n_attributes else None
            if self.missing == "category" and isinstance(attribute, CategoricalAttribute):
                if MISSING_CATEGORY not in attribute.categories:
                    self.unlisted.setdefault(j, self.rows + int(np.argmax(gone)))
                else:
                    filled[j] = attribute.categories.index(MISSING_CATEGORY)
            else:
                drop |= gone
        if self.missing == "error" and drop.any():
            if self.first_absent is None:
                first = int(np.argmax(drop))
                self.first_absent = (self.rows + first, next(j for j, gone in enumerate(absent) if gone[first]))
            self.absent_rows += int(drop.sum())
        if not (self.unlisted or self.first_absent):
            self._encode(values, absent, filled, ~drop, columns)
        self.rows += len(drop)

    def _encode(self, values: list[pa.Array], absent: list[np.ndarray], filled: dict[int, int], kept: np.ndarray,
                columns: Sequence[tuple[pa.Array, bool]]) -> None:
        """Write the kept rows into X and y, or, once any value has not fitted, only count the faults."""
        rows = self.rows + np.flatnonzero(kept)  # the kept rows' 0-based data rows
        start, stop = self.kept, self.kept + rows.size
        if stop > self.X.shape[0]:
            self._grow(stop)
        mask = pa.array(kept)
        for j, attribute in enumerate(self.schema.attributes):
            if isinstance(attribute, NumericAttribute):
                numbers = self._numbers(values[j].filter(mask), attribute, j, rows, columns[j][1])
                if not self.faults:
                    self.X[start:stop, j] = numbers
                continue
            categories = self.categories[j]
            assert categories is not None
            codes = self._codes(values[j], categories)
            if j in filled:
                codes[absent[j]] = filled[j]
            codes = codes[kept]
            self._note(j, 0, codes < 0, rows, values[j], mask)
            if not self.faults:
                self.X[start:stop, j] = codes
        classes = self._codes(values[-1], self.classes)[kept]
        self._note(self.schema.n_attributes, 0, classes < 0, rows, values[-1], mask)
        if not self.faults:
            self.y[start:stop] = classes
        self.kept = stop

    def _note(self, column: int, kind: int, bad: np.ndarray, rows: np.ndarray, value: pa.Array,
              kept: pa.Array | None = None) -> None:
        """Count the kept rows where ``bad`` under ``(column, kind)``, keeping the first one's row and ``value``
        (the block's values of the kept rows, or of all its rows with ``kept`` their mask)."""
        if not bad.any():
            return
        first = int(np.argmax(bad))
        value = value if kept is None else value.filter(kept)
        fault = self.faults.setdefault((column, kind), _Fault(0, int(rows[first]), value[first].as_py()))
        fault.count += int(bad.sum())

    @staticmethod
    def _absent(value: pa.Array, number: bool) -> np.ndarray:
        """Where the block's column holds a missing value: a null, a missing token (text) or NaN (numbers)."""
        if number:
            found = pc.is_null(value, nan_is_null=True)
        else:
            found = pc.or_kleene(pc.is_null(value), pc.is_in(value, value_set=pa.array(MISSING_TOKENS, pa.string())))
        return np.asarray(pc.fill_null(found, True).to_numpy(zero_copy_only=False), dtype=bool)

    @staticmethod
    def _codes(value: pa.Array, domain: pa.Array) -> np.ndarray:
        """Each value's index in ``domain``, -1 where it is none of them."""
        return np.asarray(pc.fill_null(pc.index_in(value, value_set=domain), -1).to_numpy(zero_copy_only=False),
                          dtype=np.int64)

    def _numbers(self, value: pa.Array, attribute: NumericAttribute, column: int, rows: np.ndarray,
                 number: bool) -> np.ndarray:
        """The kept rows' numbers, text parsed as pandas parses it (pyarrow's parse, which agrees wherever both
        read a number; pandas' own where pyarrow refuses a value), its faults counted."""
        try:
            numbers = np.asarray(pc.cast(value, pa.float64(), safe=False).to_numpy(zero_copy_only=False),
                                 dtype=np.float64)
        except pa.ArrowInvalid:
            import pandas as pd

            numbers = pd.to_numeric(value.to_pandas(), errors="coerce").to_numpy(dtype=np.float64)
        finite = np.isfinite(numbers)
        with np.errstate(invalid="ignore"):
            faults = [~finite, finite & (numbers != np.round(numbers)) if attribute.integer else None,
                      finite & ((numbers < attribute.low) | (numbers > attribute.high))]
        for kind, bad in enumerate(faults):
            if bad is not None and bad.any():
                if number:  # a Parquet number: pandas shows it in the column's own dtype, which this does not know
                    raise _Unstreamable
                self._note(column, kind, bad, rows, value)
        return numbers

    def _grow(self, need: int) -> None:
        """Room for ``need`` kept rows (a lone carriage return the line count missed)."""
        size = max(need, 2 * self.X.shape[0])
        X = np.empty((size, self.X.shape[1]), dtype=np.float64)
        X[:self.kept] = self.X[:self.kept]
        y = np.empty(size, dtype=np.int64)
        y[:self.kept] = self.y[:self.kept]
        self.X, self.y = X, y

    def fault(self, label: str) -> SchemaError | None:
        """The error the whole-file loader (then `Schema.encode`) raises for what the blocks held, if any, in its
        order: an attribute missing a value without the category, a missing value under ``"error"``, no row left,
        then each column's first fault in schema order (the class last). A table without data rows is the
        whole-file reader's to refuse."""
        if self.rows == 0:
            raise _Unstreamable
        names = [*self.schema.names, self.schema.class_name]
        if self.unlisted:
            j = min(self.unlisted)
            return unlisted_missing_error(label, self.unlisted[j] + 1, names[j])
        if self.first_absent is not None:
            row, j = self.first_absent
            return missing_value_error(self.absent_rows, label, row + 1, names[j])
        if self.kept == 0:
            return no_row_left_error(self.rows, label)
        if not self.faults:
            return None
        (j, kind), fault = min(self.faults.items())
        attribute = self.schema.attributes[j] if j < self.schema.n_attributes else None
        if isinstance(attribute, NumericAttribute):
            why = number_fault_reasons(attribute)[kind]
        elif isinstance(attribute, CategoricalAttribute):
            why = unknown_value_reason(attribute.categories, "category")
        else:
            why = unknown_value_reason(self.schema.classes, "class")
        return SchemaError(f"{why}; {fault.count} row(s) affected", source=label, row=fault.row + 1, column=names[j],
                           value=fault.value)

    def finish(self, label: str) -> EncodedTable:
        """The encoded table, shrunk to the rows kept (`fault` having found nothing)."""
        self.X.resize((self.kept, self.X.shape[1]), refcheck=False)
        self.y.resize(self.kept, refcheck=False)
        return EncodedTable(self.X, self.y, self.rows - self.kept, label, self.schema)
