"""Fit a table's values into its schema's public domain, row by row, for a dp or dps release (`fit_to_domain`).

A path release refuses a table with a value outside the schema (`Schema.encode` names the file,
row, column and value): the owner learns that its data and the federation's schema disagree. Under a
dp or dps study that refusal would be a bit read off the rows and charged to no budget (docs/privacy.md,
"Known limits" 8). So an owner answering such a study first maps every row into the public domain
by a fixed rule that reads that row alone:

* a numeric value (attribute or regression target) below or above the public range is *clamped* to
  the nearer bound, as DiffPETs' regression scaling clips its target (`RegressionSchema.scale`); for
  an ``integer`` attribute the bounds are the range's outermost whole numbers;
* a non-whole value of an ``integer`` attribute is *rounded* to the nearest whole number (halves to
  even, `numpy.round`), then clamped;
* a row whose categorical attribute or class is not one of the schema's, or whose numeric value is
  not a number at all, is *dropped*: no point of the domain is nearer than another, and mapping it to
  a chosen category would invent a row the owner does not hold.

Each rule sends one row to one row or to none, so tables that differ by one added or removed row
still do after the fit, and the mechanism's add/remove-one-row guarantee holds for the fitted table
as for the raw one. The counts (`DomainFit`) are for the owner's own log and ``modelshare owner
check``; nothing built from them is sent. Missing values are settled before this, by the site's
``missing`` policy (`modelshare.common.data.datasets.loading.settle_missing`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import NumericAttribute, Schema, SchemaError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DomainFit", "fit_to_domain"]


@dataclass(frozen=True)
class DomainFit:
    """What `fit_to_domain` changed, per column (only columns with a change are listed).

    ``clamped``: numeric values moved to the nearer public bound; ``rounded``: non-whole values of an
    integer attribute rounded; ``dropped``: rows dropped, each counted once under the first of its
    columns (in schema order, then the class or target) that holds an unknown category or class or
    a value that is not a number.
    """

    clamped: dict[str, int] = field(default_factory=dict)
    rounded: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def dropped_rows(self) -> int:
        return sum(self.dropped.values())

    @property
    def changed(self) -> bool:
        """Whether any value was clamped or rounded or any row dropped."""
        return bool(self.clamped or self.rounded or self.dropped)

    def describe(self) -> str:
        """One sentence for the owner's log, e.g. ``clamped 2 value(s) to the public range (age 2)``."""

        def per_column(counts: dict[str, int]) -> str:
            return ", ".join(f"{column} {n}" for column, n in counts.items())

        parts = []
        if self.clamped:
            parts.append(f"clamped {sum(self.clamped.values())} value(s) to the public range "
                         f"({per_column(self.clamped)})")
        if self.rounded:
            parts.append(f"rounded {sum(self.rounded.values())} non-whole value(s) of integer attributes "
                         f"({per_column(self.rounded)})")
        if self.dropped:
            parts.append(f"dropped {self.dropped_rows} row(s) with an unknown category or class or a value that is "
                         f"not a number ({per_column(self.dropped)})")
        return "; ".join(parts) if parts else "every value within the schema's domain"


def _numeric(frame: pd.DataFrame, column: str) -> np.ndarray:
    import pandas as pd

    values: np.ndarray = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    return values


def _outside(frame: pd.DataFrame, column: str, domain: NumericAttribute | tuple[str, ...]) -> np.ndarray:
    """Rows whose value in ``column`` has no nearest point of ``domain`` (categories, or a numeric attribute)."""
    import pandas as pd

    series = frame[column]
    if isinstance(domain, NumericAttribute):
        missing: np.ndarray = ~np.isfinite(_numeric(frame, column))
        return missing
    as_text = series.astype(str).where(series.notna(), None)
    unknown: np.ndarray = pd.Index(list(domain)).get_indexer(as_text) < 0
    return unknown


def fit_to_domain(frame: pd.DataFrame, schema: Schema | RegressionSchema, *,
                  source: str | None = None) -> tuple[pd.DataFrame, DomainFit]:
    """``frame`` (the schema's columns and its class or target column) with every row fitted into the domain.

    Returns the fitted frame, which `Schema.encode` (or `RegressionSchema.encode`) then accepts, its
    index kept from ``frame``, and the counts of what changed (module docstring).

    Raises
    ------
    SchemaError
        A column of the schema, or its class or target column, is absent (naming it and ``source``).
    """
    domains: list[tuple[str, NumericAttribute | tuple[str, ...]]] = [
        (a.name, a if isinstance(a, NumericAttribute) else a.categories) for a in schema.attributes]
    domains.append((schema.class_name, schema.target if isinstance(schema, RegressionSchema) else schema.classes))
    absent = [name for name, _ in domains if name not in frame.columns]
    if absent:
        raise SchemaError("the table lacks a column of the schema", source=source, column=absent[0])
    keep = np.ones(len(frame), dtype=bool)
    clamped: dict[str, int] = {}
    rounded: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for name, domain in domains:
        bad = keep & _outside(frame, name, domain)
        if bad.any():
            dropped[name] = int(bad.sum())
            keep &= ~bad
    fitted = frame[keep].copy()
    for name, domain in domains:
        if not isinstance(domain, NumericAttribute):
            continue
        values = _numeric(fitted, name)
        low, high = domain.low, domain.high
        if domain.integer:
            whole = np.round(values)
            if (changed := int(np.count_nonzero(whole != values))):
                rounded[name] = changed
            values, low, high = whole, float(math.ceil(low)), float(math.floor(high))
        if (moved := int(np.count_nonzero((values < low) | (values > high)))):
            clamped[name] = moved
        fitted[name] = np.clip(values, low, high)
    return fitted, DomainFit(clamped, rounded, dropped)
