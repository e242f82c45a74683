"""The schema of a regression table: attributes plus a numeric target with public bounds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from modelshare.common.data.schema import (
    ATTRIBUTE_SOURCE,
    DATA_DERIVED,
    PUBLIC,
    Attribute,
    NumericAttribute,
    Schema,
    SchemaError,
    fingerprint_of,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["REGRESSION_TASK", "RegressionSchema"]

REGRESSION_TASK = "regression"  # the ``task`` a regression schema file declares (`RegressionSchema`)


@dataclass(frozen=True)
class RegressionSchema:
    """The attributes and the numeric target of a regression table, all public.

    ``target.low`` and ``target.high`` are the public bounds the target is scaled from (to [0, 1],
    clipped): they must not be read from the private rows. A schema file declares one with
    ``task = "regression"`` and a ``target`` table next to the usual ``attributes`` (`from_dict`);
    it travels as a ``Schema`` message whose ``target`` field is set (`modelshare.common.federation.wire`), and it
    offers what the table readers and writers of a classification `Schema` use (`names`, `class_name`,
    `encode`, `decode`, `save`, `fingerprint`), so owners read their tables the same way for either task.
    ``data_derived`` marks attributes read off a table (as `Schema.data_derived` does; the target's
    bounds are always given): a dp release refuses such a schema unless asked.
    """

    attributes: tuple[Attribute, ...]
    target: NumericAttribute
    data_derived: bool = False

    def __post_init__(self) -> None:
        if not self.target.high > self.target.low:
            raise SchemaError(f"target range [{self.target.low:g}, {self.target.high:g}] must have low < high",
                              column=self.target.name)
        self.features()  # the attribute checks of Schema (names, duplicates, the target not an attribute)

    @property
    def n_attributes(self) -> int:
        return len(self.attributes)

    def features(self) -> Schema:
        """The attributes as a classification `Schema` with two placeholder classes.

        It lets the classification machinery (row checks, `Tree` validation and routing, paths,
        PGEN) serve the regression structure; the classes mean nothing.
        """
        return Schema(self.attributes, self.target.name, ("leaf", "none"))

    def scale(self, y: np.ndarray) -> np.ndarray:
        """The target mapped to [0, 1] by the public bounds, clipped; ValueError on non-finite values."""
        y = np.asarray(y, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(y))
        if bad.size:
            raise SchemaError("target values must be finite numbers", row=int(bad[0]) + 1,
                              column=self.target.name, value=float(y[bad[0]]))
        low, high = self.target.low, self.target.high
        return np.clip((y - low) / (high - low), 0.0, 1.0)

    def unscale(self, value: np.ndarray) -> np.ndarray:
        """Values in [0, 1] back on the target's scale."""
        return self.target.low + np.asarray(value, dtype=np.float64) * (self.target.high - self.target.low)

    @property
    def names(self) -> tuple[str, ...]:
        """Attribute names in column order (target excluded)."""
        return tuple(a.name for a in self.attributes)

    @property
    def class_name(self) -> str:
        """The target's column name: where table readers that take a class column look for the label."""
        return self.target.name

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the canonical `to_dict` form (with its task): equal iff attributes and target bounds are equal.

        No classification schema shares it, since their dictionaries have other keys.
        """
        return fingerprint_of(self.to_dict())

    def encode(self, frame: pd.DataFrame, *, source: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Encode a table into ``(X, y)``: the attributes as `Schema.encode_attributes` does, y float64.

        The target is checked like a numeric attribute: a value that is not a finite number or lies
        outside the public bounds raises `SchemaError` naming the row and column. (The mechanism
        would clip it; refusing it tells the owner that its data and the federation's bounds disagree.)
        """
        features = self.features()
        X = features.encode_attributes(frame, source=source)
        if self.target.name not in frame.columns:
            raise SchemaError("target column is missing from the table", source=source, column=self.target.name)
        return X, features._numbers(frame[self.target.name], self.target, source)

    def decode(self, X: np.ndarray, y: np.ndarray | None = None) -> pd.DataFrame:
        """Encoded rows back into a table (category names), with the target column when ``y`` is given."""
        frame = self.features().decode(X)
        return frame if y is None else frame.assign(**{self.target.name: np.asarray(y, dtype=np.float64)})

    def to_dict(self) -> dict[str, Any]:
        """The schema-file form: ``task = "regression"``, the ``target`` and the ``attributes``."""
        found = {"task": REGRESSION_TASK, "target": self.target.to_dict(),
                 "attributes": [a.to_dict() for a in self.attributes]}
        return {**found, "domain": DATA_DERIVED} if self.data_derived else found

    def save(self, path: str | Path) -> None:
        """Write the schema as JSON (`to_dict`), readable by `modelshare.common.data.task.load_schema`."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> RegressionSchema:
        """Inverse of `to_dict` (``task`` may be left out); SchemaError naming the field and ``source`` on bad input.

        The target is a table ``{name, low, high}`` (``type``, if given, must be ``"numeric"``; ``source``, if
        given, is text saying where the bounds come from, checked and left out as for every attribute).
        """
        if data.get("task", REGRESSION_TASK) != REGRESSION_TASK:
            raise SchemaError(f"field 'task' is {data.get('task')!r}; a regression schema states {REGRESSION_TASK!r}",
                              source=source)
        target, attributes = data.get("target"), data.get("attributes")
        if not isinstance(target, Mapping) or target.get("type", "numeric") != "numeric":
            raise SchemaError("field 'target' must be a numeric attribute table {name, low, high}", source=source)
        if not isinstance(target.get(ATTRIBUTE_SOURCE, ""), str):
            raise SchemaError(f"field 'target'.{ATTRIBUTE_SOURCE} must be text (where the bounds come from)",
                              source=source)
        try:
            numeric = NumericAttribute(str(target["name"]), float(target["low"]), float(target["high"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"field 'target' needs name, low and high: {exc}", source=source) from None
        view = Schema.from_dict({"class": numeric.name, "classes": ["leaf", "none"], "attributes": attributes,
                                 "domain": data.get("domain", PUBLIC)}, source=source)
        try:
            return cls(view.attributes, numeric, view.data_derived)
        except SchemaError as exc:
            raise SchemaError(exc.why, source=source, column=exc.column) from None
