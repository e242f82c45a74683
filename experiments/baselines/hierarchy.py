"""Generalisation hierarchies of attributes, for full-domain generalisation (the LD baseline).

A hierarchy gives an attribute levels ``0 .. height``: level 0 is the raw value, each higher level
partitions the values into coarser groups that *nest* (every group of level i lies inside one
group of level i + 1), and the top level is one group, ``*``. Generalising a column to a level
replaces each value by the id of its group; ids are ordered like the values they cover, so a
learner that splits on ordinal codes still sees the schema's order.

Hierarchies come from the public `modelshare.common.data.schema.Schema`, never from private rows:

* numeric attributes: interval halving of the public range ``[low, high]``. Level 1 cuts it into
  ``2**splits`` equal intervals (``splits`` = `DEFAULT_NUMERIC_SPLITS` = 4, i.e. 16 intervals:
  fine enough to keep the shape of a distribution, few enough that the lattice stays searchable),
  each further level merges neighbouring pairs, and level ``splits + 1`` is ``*``. Intervals are
  half-open ``[a, b)`` except the last, which is closed at ``high``.
* categorical attributes: ordered grouping in the schema's category order; level i groups
  ``2**i`` consecutive categories, and the first level where one group holds every category is
  ``*`` (so height ``ceil(log2(size))``, at least 1).
* files, ARX-style, for categorical attributes (`read_hierarchy`): one CSV per attribute, ``;`` or
  ``,`` separated, no header, each row ``value;level1;level2;...;*``. Numeric attributes always
  use interval halving: a file lists values, and a numeric column holds values no list can name.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema, SchemaError

__all__ = [
    "TOP",
    "DEFAULT_NUMERIC_SPLITS",
    "HierarchyError",
    "CategoricalHierarchy",
    "NumericHierarchy",
    "Hierarchy",
    "derive_hierarchy",
    "read_hierarchy",
    "schema_hierarchies",
]

#: Label of the top level's single group.
TOP = "*"

#: Level 1 of a derived numeric hierarchy cuts the public range into ``2**DEFAULT_NUMERIC_SPLITS``
#: equal intervals.
DEFAULT_NUMERIC_SPLITS = 4


class HierarchyError(SchemaError):
    """A hierarchy that cannot be built or applied; names the file, row, column and value at fault."""


def _check_level(level: int, height: int, name: str) -> None:
    """Refuse a level outside ``0 .. height`` of attribute ``name``'s hierarchy."""
    if not 0 <= level <= height:
        raise HierarchyError(f"level {level} is outside the hierarchy's levels 0..{height}", column=name)


def _raise_first_bad(ok: np.ndarray, values: np.ndarray, why: str, name: str) -> None:
    """Raise a `HierarchyError` naming the first row (1-based) where ``ok`` is False, if any."""
    bad = np.flatnonzero(~ok)
    if bad.size:
        first = int(bad[0])
        raise HierarchyError(f"{why}; {bad.size} row(s) affected", row=first + 1, column=name,
                             value=values[first].item())


@dataclass(frozen=True, eq=False)
class CategoricalHierarchy:
    """Levels of a categorical attribute as code-to-group maps (build with `derive_hierarchy`/`read_hierarchy`).

    Attributes
    ----------
    attribute:
        The schema attribute.
    maps:
        ``maps[i][code]`` is the group id of category ``code`` at level i; ``maps[0]`` is the
        identity and ``maps[-1]`` is all zeros (``*``).
    labels:
        ``labels[i][g]`` names group g of level i: the category at level 0, ``{a,b}`` (or a file's
        label) in between, ``*`` at the top.
    """

    attribute: CategoricalAttribute
    maps: tuple[np.ndarray, ...]
    labels: tuple[tuple[str, ...], ...]

    @property
    def height(self) -> int:
        """The top level (``*``)."""
        return len(self.maps) - 1

    def group_ids(self, column: np.ndarray, level: int) -> np.ndarray:
        """Group id (int64) of each category code in ``column`` at ``level``; codes are checked."""
        _check_level(level, self.height, self.attribute.name)
        column = np.asarray(column, dtype=np.float64)
        ok = (column == np.floor(column)) & (column >= 0) & (column < self.attribute.size)
        _raise_first_bad(ok, column, f"category codes must be integers in 0..{self.attribute.size - 1}",
                         self.attribute.name)
        return self.maps[level][column.astype(np.int64)]

    def group_labels(self, level: int) -> tuple[str, ...]:
        """The label of each group id at ``level``."""
        _check_level(level, self.height, self.attribute.name)
        return self.labels[level]


@dataclass(frozen=True, eq=False)
class NumericHierarchy:
    """Interval halving of a numeric attribute's public range; level 0 is the raw number.

    Attributes
    ----------
    attribute:
        The schema attribute; its ``[low, high]`` is the range cut.
    splits:
        Level 1 holds ``2**splits`` equal intervals, level i ``2**(splits + 1 - i)``; the height is
        ``splits + 1``.
    """

    attribute: NumericAttribute
    splits: int

    @property
    def height(self) -> int:
        """The top level (``*``)."""
        return self.splits + 1

    def _edges(self, level: int) -> np.ndarray:
        """Interval edges at ``level`` >= 1, taken from the finest edges so that levels nest exactly."""
        finest = np.linspace(self.attribute.low, self.attribute.high, 2**self.splits + 1)
        return finest[:: 2 ** (level - 1)]

    def _check_grouped_level(self, level: int) -> None:
        """Refuse level 0, which keeps raw numbers and so has no groups."""
        _check_level(level, self.height, self.attribute.name)
        if level == 0:
            raise HierarchyError("level 0 of a numeric attribute is the raw number; it has no group ids",
                                 column=self.attribute.name)

    def group_ids(self, column: np.ndarray, level: int) -> np.ndarray:
        """Interval id (int64) of each value in ``column`` at ``level`` >= 1; values must lie in the range."""
        self._check_grouped_level(level)
        attr = self.attribute
        column = np.asarray(column, dtype=np.float64)
        ok = np.isfinite(column) & (column >= attr.low) & (column <= attr.high)
        _raise_first_bad(ok, column, f"values must be finite numbers in the schema range [{attr.low:g}, {attr.high:g}]",
                         attr.name)
        finest = np.searchsorted(self._edges(1)[1:-1], column, side="right").astype(np.int64)
        return finest >> (level - 1)

    def group_labels(self, level: int) -> tuple[str, ...]:
        """``[a, b)`` per interval at ``level`` >= 1 (the last one ``[a, high]``), ``*`` at the top."""
        self._check_grouped_level(level)
        if level == self.height:
            return (TOP,)
        edges = [float(e) for e in self._edges(level)]
        closing = [")"] * (len(edges) - 2) + ["]"]
        return tuple(f"[{a!r}, {b!r}{close}" for a, b, close in zip(edges[:-1], edges[1:], closing, strict=False))


Hierarchy = CategoricalHierarchy | NumericHierarchy


def _ordered_grouping(attribute: CategoricalAttribute) -> CategoricalHierarchy:
    """Level i groups ``2**i`` consecutive categories; the first level with one group is ``*``."""
    size = attribute.size
    height = max(1, math.ceil(math.log2(size)))
    codes = np.arange(size, dtype=np.int64)
    maps = tuple(codes >> level for level in range(height + 1))
    labels: list[tuple[str, ...]] = [attribute.categories]
    for level in range(1, height):
        step = 2**level
        labels.append(tuple("{" + ",".join(attribute.categories[s : s + step]) + "}" for s in range(0, size, step)))
    labels.append((TOP,))
    return CategoricalHierarchy(attribute, maps, tuple(labels))


def derive_hierarchy(
    attribute: CategoricalAttribute | NumericAttribute, *, numeric_splits: int = DEFAULT_NUMERIC_SPLITS
) -> Hierarchy:
    """The hierarchy of ``attribute`` derived from its schema entry (see the module docstring).

    ``numeric_splits`` (>= 0) sets the number of level-1 intervals of a numeric attribute,
    ``2**numeric_splits``; a range with ``low == high`` gets a single interval.
    """
    if isinstance(attribute, CategoricalAttribute):
        return _ordered_grouping(attribute)
    if numeric_splits < 0:
        raise HierarchyError(f"numeric_splits must be >= 0, got {numeric_splits}", column=attribute.name)
    return NumericHierarchy(attribute, numeric_splits if attribute.high > attribute.low else 0)


def _read_rows(path: Path) -> list[tuple[int, list[str]]]:
    """Non-blank rows of a ``;``- or ``,``-separated file with their 1-based line numbers, cells stripped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise HierarchyError(f"cannot read hierarchy file: {exc.strerror}", source=str(path)) from None
    except UnicodeDecodeError:
        raise HierarchyError("hierarchy file is not UTF-8 text", source=str(path)) from None
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    delimiter = ";" if ";" in first else ","
    rows = [(number, [cell.strip() for cell in cells])
            for number, cells in enumerate(csv.reader(lines, delimiter=delimiter), start=1)
            if any(cell.strip() for cell in cells)]
    if not rows:
        raise HierarchyError("hierarchy file has no rows", source=str(path))
    return rows


def _check_rows(rows: list[tuple[int, list[str]]], attribute: CategoricalAttribute, source: str) -> None:
    """Every row has the first row's width (>= 2) and no empty cell, and names a new schema category."""
    width = len(rows[0][1])
    if width < 2:
        raise HierarchyError("each row needs the value and at least the top level, e.g. 'a;*'",
                             source=source, row=rows[0][0], value=rows[0][1][0])
    seen: dict[str, int] = {}
    for number, cells in rows:
        if len(cells) != width:
            raise HierarchyError(f"row has {len(cells) - 1} level(s) where the first row has {width - 1}",
                                 source=source, row=number, value=cells[0])
        empty = [j for j, cell in enumerate(cells) if not cell]
        if empty:
            raise HierarchyError(f"missing value at level {empty[0]}", source=source, row=number,
                                 column=f"level {empty[0]}", value=cells[0] or None)
        value = cells[0]
        if value not in attribute.categories:
            raise HierarchyError(f"not a category of attribute {attribute.name!r} "
                                 f"(its categories are {list(attribute.categories)})",
                                 source=source, row=number, column="level 0", value=value)
        if value in seen:
            raise HierarchyError(f"value listed twice (first at row {seen[value]})", source=source, row=number,
                                 column="level 0", value=value)
        seen[value] = number
    missing = [c for c in attribute.categories if c not in seen]
    if missing:
        raise HierarchyError(f"categories {missing} of attribute {attribute.name!r} have no row", source=source)


def _check_nesting(rows: list[tuple[int, list[str]]], source: str) -> None:
    """Each group of a level lies in one group of the next level, and the top level is one group."""
    width = len(rows[0][1])
    for level in range(1, width - 1):
        parent: dict[str, tuple[str, int]] = {}
        for number, cells in rows:
            group, up = cells[level], cells[level + 1]
            first_up, first_row = parent.setdefault(group, (up, number))
            if up != first_up:
                raise HierarchyError(
                    f"group {group!r} of level {level} is split across groups {first_up!r} (row {first_row}) "
                    f"and {up!r} of level {level + 1}; a group must lie in one group of the next level",
                    source=source, row=number, column=f"level {level}", value=cells[0])
    top_number, top_cells = rows[0]
    for number, cells in rows:
        if cells[-1] != top_cells[-1]:
            raise HierarchyError(
                f"the top level must be one group such as {TOP!r}; found {top_cells[-1]!r} (row {top_number}) "
                f"and {cells[-1]!r}", source=source, row=number, column=f"level {width - 1}", value=cells[0])


def read_hierarchy(path: str | Path, attribute: CategoricalAttribute | NumericAttribute) -> CategoricalHierarchy:
    """Read an ARX-style hierarchy file for a categorical attribute.

    Each non-blank row is ``value;level1;...;top`` (``,`` is accepted when the first row holds no
    ``;``), one row per category of ``attribute``. A level's groups are named by their labels; ids
    are assigned in schema order of each group's first category.

    Raises
    ------
    HierarchyError
        Naming the file, row, level and value: unreadable or empty file, a row with another number
        of levels than the first, an empty cell, a value that is not a category (or is listed
        twice), a category without a row, a group split across two groups of the next level, or a
        top level of more than one group.
    """
    path = Path(path)
    source = str(path)
    if not isinstance(attribute, CategoricalAttribute):
        raise HierarchyError("hierarchy files are read for categorical attributes only; numeric attributes "
                             "use interval halving of the public range", source=source, column=attribute.name)
    rows = _read_rows(path)
    _check_rows(rows, attribute, source)
    _check_nesting(rows, source)
    table = pd.DataFrame([cells for _, cells in rows])
    table.index = pd.Index(attribute.categories).get_indexer(table[0])
    table = table.sort_index()
    maps, labels = [], []
    for level in table.columns:
        ids, uniques = pd.factorize(table[level])
        maps.append(ids.astype(np.int64))
        labels.append(tuple(str(u) for u in uniques))
    return CategoricalHierarchy(attribute, tuple(maps), tuple(labels))


def schema_hierarchies(
    schema: Schema,
    files: Mapping[str, str | Path] | None = None,
    *,
    numeric_splits: int = DEFAULT_NUMERIC_SPLITS,
) -> dict[str, Hierarchy]:
    """One hierarchy per attribute of ``schema``: read from ``files[name]`` where given, else derived."""
    files = dict(files or {})
    unknown = sorted(set(files) - set(schema.names))
    if unknown:
        raise HierarchyError(f"hierarchy files given for attributes {unknown} that are not in the schema "
                             f"(its attributes are {list(schema.names)})", source=str(files[unknown[0]]))
    return {
        attr.name: read_hierarchy(files[attr.name], attr) if attr.name in files
        else derive_hierarchy(attr, numeric_splits=numeric_splits)
        for attr in schema.attributes
    }
