"""Table schemas: ordered attributes, the class attribute, a stable fingerprint, and encoding.

Every table, tree and message in modelshare is interpreted through a `Schema`. A schema is
public knowledge shared by the federation: its numeric ranges and category lists bound every
constraint a tree may carry and every value PGEN may draw, so they must never be read from one
owner's private rows in a deployment (``Schema.infer`` exists for exploration and simulation).

Encoded form: a table becomes a float64 matrix ``X`` of shape (rows, attributes) where a
categorical column holds the category's index in the schema's ordered category list and a
numeric column holds its value, plus an int64 vector ``y`` of class indices. Trees, PGEN and the
global models all work on this form, which keeps the hot paths in numpy.

Every attribute table in a schema file may carry an optional ``source`` text saying where its public
bounds or categories come from (``"source": "hours in a week"``). It documents the file for the
people who review it; `Schema.from_dict` checks that it is text and then leaves it out of the
schema, so it never changes a fingerprint or what travels on the wire. Other unknown keys are
ignored as before.

A schema file may state ``task = "classification"`` (the default, and the only task `Schema`
reads); a regression schema (``task = "regression"``, a numeric target with public bounds) is a
`modelshare.common.data.regression.RegressionSchema`, and `modelshare.common.data.task.load_schema` reads either kind.

pandas is imported by the methods that take or make tables, not with the module: the owner's
health probe (``modelshare owner status``) reads its config, and with it this module, and must
start fast.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

__all__ = [
    "DEFAULT_CELLS",
    "number_fault_reasons",
    "unknown_value_reason",
    "SchemaError",
    "CategoricalAttribute",
    "NumericAttribute",
    "Attribute",
    "Schema",
    "CLASSIFICATION_TASK",
    "ATTRIBUTE_SOURCE",
    "fingerprint_of",
    "read_schema_file",
]


class SchemaError(ValueError):
    """Input that does not fit a schema, with where it happened and why.

    Parameters
    ----------
    why:
        What is wrong, phrased so a person can act on it.
    source, row, column, value:
        Where the problem is: the file (or other source label), the 1-based data row (header
        excluded), the column name and the offending value. Any of them may be unknown.
    """

    def __init__(
        self,
        why: str,
        *,
        source: str | None = None,
        row: int | None = None,
        column: str | None = None,
        value: Any = None,
    ) -> None:
        self.why = why
        self.source = source
        self.row = row
        self.column = column
        self.value = value
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.source is not None:
            where.append(str(self.source))
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        if self.value is not None:
            value = self.value.item() if isinstance(self.value, np.generic) else self.value
            where.append(f"value {value!r}")
        prefix = ", ".join(where)
        return f"{prefix}: {self.why}" if prefix else self.why


@dataclass(frozen=True)
class CategoricalAttribute:
    """An attribute whose values come from an ordered, finite list of category names."""

    name: str
    categories: tuple[str, ...]

    kind = "categorical"

    def __post_init__(self) -> None:
        if not self.categories:
            raise SchemaError("a categorical attribute needs at least one category", column=self.name)
        if len(set(self.categories)) != len(self.categories):
            dup = sorted({c for c in self.categories if self.categories.count(c) > 1})
            raise SchemaError(f"duplicate categories {dup}", column=self.name)

    @property
    def size(self) -> int:
        """Number of categories."""
        return len(self.categories)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": "categorical", "categories": list(self.categories)}


@dataclass(frozen=True)
class NumericAttribute:
    """A real-valued attribute on the closed, public range ``[low, high]``.

    ``integer`` declares that every value is a whole number (a count, an age in years): a table's
    non-whole value is then refused, and PGEN draws whole numbers for it. A schema without the
    flag keeps its dictionary form, and so its fingerprint.

    ``cuts`` are the public cut points a released tree may split this attribute at (``x <= c``),
    increasing and strictly inside the range; without them `cut_points` is the even grid of
    `DEFAULT_CELLS` cells over ``[low, high]``. A tree released under a privacy requirement splits
    only there, never at a midpoint of two private values (`modelshare.common.trees.learners.public_cuts`).
    """

    name: str
    low: float
    high: float
    integer: bool = False
    cuts: tuple[float, ...] | None = None

    kind = "numeric"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise SchemaError(f"range [{self.low}, {self.high}] must be finite", column=self.name)
        if self.low > self.high:
            raise SchemaError(f"range low {self.low} exceeds high {self.high}", column=self.name)
        if self.integer and math.floor(self.high) < math.ceil(self.low):
            raise SchemaError(f"integer attribute: range [{self.low:g}, {self.high:g}] holds no whole number",
                              column=self.name)
        if self.cuts is not None:
            cuts = np.asarray(self.cuts, dtype=np.float64)
            if cuts.ndim != 1 or not np.isfinite(cuts).all() or (np.diff(cuts) <= 0).any() \
                    or (cuts.size and (cuts[0] <= self.low or cuts[-1] >= self.high)):
                raise SchemaError(f"cuts {list(self.cuts)} must be finite, strictly increasing and strictly inside "
                                  f"the range ({self.low:g}, {self.high:g})", column=self.name)

    def cut_points(self) -> np.ndarray:
        """The public cut points: the declared ``cuts``, or the even grid of `DEFAULT_CELLS` cells over the range."""
        if self.cuts is not None:
            return np.asarray(self.cuts, dtype=np.float64)
        if self.high == self.low:
            return np.empty(0)
        return self.low + (self.high - self.low) * np.arange(1, DEFAULT_CELLS) / DEFAULT_CELLS

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"name": self.name, "type": "numeric", "low": float(self.low), "high": float(self.high)}
        if self.integer:
            found["integer"] = True
        if self.cuts is not None:
            found["cuts"] = [float(c) for c in self.cuts]
        return found


Attribute = CategoricalAttribute | NumericAttribute

CLASSIFICATION_TASK = "classification"  # what a schema file without a ``task`` field declares
# cells of the even grid of public cut points of a numeric attribute without declared cuts (docs/privacy.md)
DEFAULT_CELLS = 256
PUBLIC = "public"  # a schema file's ``domain`` when it says nothing: its bounds were stated, not read off rows
ATTRIBUTE_SOURCE = "source"  # optional per-attribute text: where the public bounds come from; not in the fingerprint
DATA_DERIVED = "data-derived"  # ``domain`` of a schema whose ranges and categories were read from a table


def fingerprint_of(data: Mapping[str, Any]) -> str:
    """SHA-256 of a schema's dictionary form as canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def read_schema_file(path: str | Path) -> Mapping[str, Any]:
    """The top-level table of a ``.toml`` or ``.json`` (any other suffix) schema file.

    Raises
    ------
    SchemaError
        The file cannot be read, is not UTF-8, does not parse, or holds no table at top level.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SchemaError(f"cannot read schema file: {exc.strerror}", source=str(path)) from None
    except UnicodeDecodeError:
        raise SchemaError("schema file is not UTF-8 text", source=str(path)) from None
    try:
        data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise SchemaError(f"not valid {path.suffix.lstrip('.').upper() or 'JSON'}: {exc}", source=str(path)) from None
    if not isinstance(data, Mapping):
        raise SchemaError("the schema file must hold a table at top level", source=str(path))
    return data

def unknown_value_reason(domain: Sequence[str], what: str) -> str:
    """Why a value outside ``domain`` (the schema's categories or classes, ``what`` naming which) does not fit."""
    shown = list(domain) if len(domain) <= 12 else [*domain[:12], "..."]
    return f"unknown {what} (expected one of {shown})"


def number_fault_reasons(attr: NumericAttribute) -> tuple[str, str, str]:
    """Why a value of ``attr`` does not fit, in the order `Schema.encode` checks: not a finite number, not whole
    (an integer attribute only), outside the range."""
    return ("not a finite number", "not a whole number, and the schema declares the attribute integer",
            f"outside the schema range [{attr.low:g}, {attr.high:g}]")


MISSING_TOKENS = ("?", "")


def _natural_sort(values: Iterable[str]) -> list[str]:
    """Sort numerically where every value is a number, lexically otherwise (stable, deterministic)."""
    values = list(values)
    try:
        return sorted(values, key=float)
    except ValueError:
        return sorted(values)


@dataclass(frozen=True)
class Schema:
    """Ordered attributes plus the class attribute and its classes.

    Parameters
    ----------
    attributes:
        The predictive attributes, in column order.
    class_name:
        Name of the class (label) column.
    classes:
        The class labels, in a fixed order; class index ``i`` means ``classes[i]``.
    data_derived:
        True when the ranges and categories were read off a table (`infer`, or a file that says
        ``domain = "data-derived"``, as `modelshare schema infer` drafts do until reviewed) rather
        than stated publicly. It travels with the schema (file, wire, fingerprint): a dp or dps
        release refuses such a domain unless asked, its audit then fails the claim, and a study
        refuses it (the ranges would disclose the rows they were read from).
    """

    attributes: tuple[Attribute, ...]
    class_name: str
    classes: tuple[str, ...]
    data_derived: bool = False

    def __post_init__(self) -> None:
        names = [a.name for a in self.attributes]
        if not names:
            raise SchemaError("a schema needs at least one attribute besides the class")
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SchemaError(f"duplicate attribute names {dup}")
        if self.class_name in names:
            raise SchemaError("the class column is also listed as an attribute", column=self.class_name)
        if len(self.classes) < 2:
            raise SchemaError("a classification schema needs at least two classes", column=self.class_name)
        if len(set(self.classes)) != len(self.classes):
            raise SchemaError("duplicate class labels", column=self.class_name)

    # ------------------------------------------------------------------ shape
    @property
    def names(self) -> tuple[str, ...]:
        """Attribute names in column order (class excluded)."""
        return tuple(a.name for a in self.attributes)

    @property
    def n_attributes(self) -> int:
        return len(self.attributes)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def index(self, name: str) -> int:
        """Column index of attribute ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise SchemaError("no such attribute in the schema", column=name) from None

    @property
    def categorical_mask(self) -> np.ndarray:
        """Boolean vector, True where the attribute is categorical."""
        return np.array([isinstance(a, CategoricalAttribute) for a in self.attributes])

    # -------------------------------------------------------- serialization
    def to_dict(self) -> dict[str, Any]:
        found = {
            "class": self.class_name,
            "classes": list(self.classes),
            "attributes": [a.to_dict() for a in self.attributes],
        }
        return {**found, "domain": DATA_DERIVED} if self.data_derived else found

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON form: equal iff names, order, domains and classes are equal."""
        return fingerprint_of(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> Schema:
        """Build a schema from its dictionary form, naming the field at fault on bad input.

        An attribute's optional ``source`` (text: where its public bounds or categories come from)
        is checked and dropped: it is documentation, not part of the schema or its fingerprint.
        """

        def need(mapping: Mapping[str, Any], key: str, where: str) -> Any:
            if key not in mapping:
                raise SchemaError(f"missing field {key!r} in {where}", source=source)
            return mapping[key]

        task = data.get("task", CLASSIFICATION_TASK)
        if task != CLASSIFICATION_TASK:
            known = f"{CLASSIFICATION_TASK!r} or 'regression'"
            raise SchemaError(f"the schema declares task = {task!r}; a classification schema is needed here"
                              if task == "regression" else f"field 'task' is {task!r}; expected {known}", source=source)
        class_name = need(data, "class", "the schema")
        classes = need(data, "classes", "the schema")
        raw_attrs = need(data, "attributes", "the schema")
        if not isinstance(classes, list) or not classes:
            raise SchemaError("field 'classes' must be a non-empty list", source=source)
        if not isinstance(raw_attrs, list):
            raise SchemaError("field 'attributes' must be a list of tables", source=source)
        attributes: list[Attribute] = []
        for i, raw in enumerate(raw_attrs):
            where = f"attributes[{i}]"
            if not isinstance(raw, Mapping):
                raise SchemaError(f"{where} must be a table", source=source)
            name = str(need(raw, "name", where))
            kind = need(raw, "type", where)
            if not isinstance(raw.get(ATTRIBUTE_SOURCE, ""), str):
                raise SchemaError(f"{where}.{ATTRIBUTE_SOURCE} must be text (where the bounds come from)",
                                  source=source, column=name)
            try:
                if kind == "categorical":
                    cats = need(raw, "categories", where)
                    if not isinstance(cats, list):
                        raise SchemaError(f"{where}.categories must be a list", source=source, column=name)
                    attributes.append(CategoricalAttribute(name, tuple(str(c) for c in cats)))
                elif kind == "numeric":
                    integer = raw.get("integer", False)
                    if not isinstance(integer, bool):
                        raise SchemaError(f"{where}.integer must be true or false", source=source, column=name)
                    cuts = raw.get("cuts")
                    if cuts is not None and (not isinstance(cuts, list)
                                             or not all(isinstance(c, (int, float)) and not isinstance(c, bool)
                                                        for c in cuts)):
                        raise SchemaError(f"{where}.cuts must be a list of numbers (public cut points)",
                                          source=source, column=name)
                    attributes.append(NumericAttribute(name, float(need(raw, "low", where)),
                                                       float(need(raw, "high", where)), integer,
                                                       None if cuts is None else tuple(float(c) for c in cuts)))
                else:
                    raise SchemaError(
                        f"{where}.type is {kind!r}; expected 'categorical' or 'numeric'", source=source, column=name
                    )
            except SchemaError as exc:
                if exc.source is None:
                    raise SchemaError(exc.why, source=source, column=exc.column or name) from None
                raise
            except (TypeError, ValueError) as exc:
                raise SchemaError(f"{where}: {exc}", source=source, column=name) from None
        domain = data.get("domain", PUBLIC)
        if domain not in (PUBLIC, DATA_DERIVED):
            raise SchemaError(f"field 'domain' is {domain!r}; expected {PUBLIC!r} or {DATA_DERIVED!r}", source=source)
        try:
            return cls(tuple(attributes), str(class_name), tuple(str(c) for c in classes), domain == DATA_DERIVED)
        except SchemaError as exc:
            raise SchemaError(exc.why, source=source, column=exc.column) from None

    @classmethod
    def load(cls, path: str | Path) -> Schema:
        """Read a schema from a ``.json`` or ``.toml`` file."""
        return cls.from_dict(read_schema_file(path), source=str(path))

    def save(self, path: str | Path) -> None:
        """Write the schema as JSON."""
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    # ------------------------------------------------------------- inference
    @classmethod
    def infer(
        cls,
        frame: pd.DataFrame,
        class_column: str,
        *,
        categorical: Sequence[str] = (),
        category_order: str = "sorted",
        source: str | None = None,
    ) -> Schema:
        """Infer a schema from a table: numeric dtypes become numeric attributes on their observed range.

        Columns named in ``categorical`` are forced categorical. Categories and classes are sorted
        (numerically when every value is a number), or with ``category_order="appearance"`` kept in
        the order they first appear in the table (what ``pandas.factorize`` does; it decides the
        ordinal codes a CART learner splits on, so reproducing a published sklearn run can need it). Observed ranges
        come from the data, which is fine for simulation but discloses
        the extremes: a federation should publish a schema file.
        """
        if class_column not in frame.columns:
            raise SchemaError(
                f"class column not found; the columns are {list(map(str, frame.columns))}",
                source=source,
                column=class_column,
            )
        unknown = [c for c in categorical if c not in frame.columns]
        if unknown:
            raise SchemaError(f"columns {unknown} named as categorical are not in the table", source=source)
        if len(frame) == 0:
            raise SchemaError("the table has no rows", source=source)
        if category_order not in ("sorted", "appearance"):
            raise ValueError(f"category_order must be 'sorted' or 'appearance', got {category_order!r}")
        try:
            return cls._infer(frame, class_column, categorical, category_order == "sorted")
        except SchemaError as exc:
            raise SchemaError(exc.why, source=source, column=exc.column) from None

    @classmethod
    def _infer(cls, frame: pd.DataFrame, class_column: str, categorical: Sequence[str], sort: bool) -> Schema:
        import pandas as pd

        order = _natural_sort if sort else list
        attributes: list[Attribute] = []
        for col in frame.columns:
            if col == class_column:
                continue
            series = frame[col]
            name = str(col)
            if (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
                    and col not in categorical):
                values = series.to_numpy(dtype=float)
                if not np.isfinite(values).any():
                    raise SchemaError("a numeric column needs at least one finite value", column=name)
                attributes.append(NumericAttribute(name, float(np.nanmin(values)), float(np.nanmax(values))))
            else:
                cats = order(series.dropna().astype(str).unique())
                attributes.append(CategoricalAttribute(name, tuple(cats)))
        classes = order(frame[class_column].dropna().astype(str).unique())
        return cls(tuple(attributes), str(class_column), tuple(classes), data_derived=True)

    # -------------------------------------------------------------- encoding
    def encode(self, frame: pd.DataFrame, *, source: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Encode a table into ``(X, y)``; rows are checked against the schema, vectorized.

        Row numbers in errors are the frame's index plus one, i.e. the 1-based data row of the
        file the loaders read (they keep the original row positions as the index).
        """
        X = self.encode_attributes(frame, source=source)
        if self.class_name not in frame.columns:
            raise SchemaError("class column is missing from the table", source=source, column=self.class_name)
        y = self._codes(frame[self.class_name], self.classes, self.class_name, source, "class")
        return X, y

    def encode_attributes(self, frame: pd.DataFrame, *, source: str | None = None) -> np.ndarray:
        """Encode only the attribute columns (the class column may be absent)."""
        missing = [n for n in self.names if n not in frame.columns]
        if missing:
            raise SchemaError(
                f"columns {missing} of the schema are missing from the table", source=source, column=missing[0]
            )
        X = np.empty((len(frame), self.n_attributes), dtype=np.float64)
        for j, attr in enumerate(self.attributes):
            series = frame[attr.name]
            if isinstance(attr, CategoricalAttribute):
                X[:, j] = self._codes(series, attr.categories, attr.name, source, "category")
            else:
                X[:, j] = self._numbers(series, attr, source)
        return X

    def _codes(
        self, series: pd.Series, categories: tuple[str, ...], column: str, source: str | None, what: str
    ) -> np.ndarray:
        import pandas as pd

        as_text = series.astype(str).where(series.notna(), None)
        codes: np.ndarray = pd.Index(list(categories)).get_indexer(as_text).astype(np.int64)
        bad = np.flatnonzero(codes < 0)
        if bad.size:
            pos = bad[0]
            value = series.iloc[pos]
            raise SchemaError(
                f"{unknown_value_reason(categories, what)}; {bad.size} row(s) affected",
                source=source,
                row=self._row_number(series, pos),
                column=column,
                value=None if pd.isna(value) else value,
            )
        return codes

    def _numbers(self, series: pd.Series, attr: NumericAttribute, source: str | None) -> np.ndarray:
        """The column as float64; SchemaError at the first row that is not a finite number, not whole (for
        an integer attribute) or outside the range, saying how many rows share the fault."""
        import pandas as pd

        values: np.ndarray = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
        finite = np.isfinite(values)
        not_number, not_whole, outside = number_fault_reasons(attr)
        faults = [(~finite, not_number)]
        if attr.integer:
            faults.append((finite & (values != np.round(values)), not_whole))
        with np.errstate(invalid="ignore"):
            faults.append((finite & ((values < attr.low) | (values > attr.high)), outside))
        for mask, why in faults:
            bad = np.flatnonzero(mask)
            if bad.size:
                raise SchemaError(f"{why}; {bad.size} row(s) affected", source=source,
                                  row=self._row_number(series, bad[0]), column=attr.name, value=series.iloc[bad[0]])
        return values

    @staticmethod
    def _row_number(series: pd.Series, pos: int) -> int:
        label = series.index[pos]
        return int(label) + 1 if isinstance(label, (int, np.integer)) else pos + 1

    def decode(self, X: np.ndarray, y: np.ndarray | None = None) -> pd.DataFrame:
        """Turn encoded rows back into a table with category names and class labels (integer attributes as integers)."""
        import pandas as pd

        columns: dict[str, Any] = {}
        for j, attr in enumerate(self.attributes):
            if isinstance(attr, CategoricalAttribute):
                columns[attr.name] = pd.Categorical.from_codes(X[:, j].astype(np.int64),
                                                               categories=list(attr.categories))
            else:
                columns[attr.name] = np.rint(X[:, j]).astype(np.int64) if attr.integer else X[:, j]
        if y is not None:
            columns[self.class_name] = pd.Categorical.from_codes(np.asarray(y, dtype=np.int64),
                                                                 categories=list(self.classes))
        return pd.DataFrame(columns)
