"""Off-path values from the released trees' own marginals, instead of PGEN's uniform draw.

PGEN (`modelshare.miner_node.pgen`) fills every attribute that a path leaves unconstrained uniformly over the
attribute's public domain. On a table like Adult that is far from the data's law (92 % of
capital-gain is 0 on a public range of 0-100,000; ages cluster in 20-60 of 17-90), and a global
model then sees noise where the real rows carry signal. The miner knows more than the domain:
every released path that *does* constrain an attribute says how many tuples (of each class) fall
in its interval or category set. `ReleasedLaw` pools that public information over all released
trees of a study and `redraw_off_path` draws the unconstrained attributes of each pseudo row
from it. Nothing but released numbers is read, so the privacy of the releases is untouched.

The estimate, per attribute ``j`` and class ``c`` (``mode="class"``; ``"marginal"`` pools the
classes): every path ``p`` that constrains ``j`` spreads its class-``c`` mass ``n_p * P_p(c)`` (its
counts, or hit with the miss spread evenly, as PGEN reads them) uniformly over the values its
constraint allows: the allowed categories, or the path's drawable interval. Overlapping intervals
from different trees and owners make a piecewise-constant density on the union of their end
points, finer than any one tree. An attribute no path constrains keeps the uniform draw; a class
with no mass on ``j`` falls back to the pooled classes. Values inside a path's constraint are not
touched: the law on a path's constrained attributes is PGEN's (a property the tests check), and
every pseudo row still satisfies its path, so its class distribution per path is unchanged.

``mode="path"`` draws a free attribute given the region the row's own path fixes: every pooled path
that constrains the attribute is weighted by its tuples times the share of it inside that region
(per attribute both constrain, the share of its set or interval inside the row path's, uniform
inside it as PGEN reads it; per attribute only the row's path constrains, the pooled law's mass of
the path's set or interval), one is chosen by weight and the value drawn inside its constraint. A
path of the same tree never overlaps the row's path, so only other trees (other owners, other trees
of an ensemble) inform it; where none reaches the region, the pooled law stands in.

Integer attributes use whole-number segments (a path interval becomes ``[ceil(low), floor(high) + 1)``
and a draw is floored), so draws stay whole, as PGEN's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.study import OFF_PATH_MODES
from modelshare.common.trees.tree import Tree
from modelshare.miner_node.pgen import PathTable

__all__ = ["OFF_PATH_MODES", "OffPathMode", "UNIFORM_OFF_PATH", "ReleasedLaw", "OffPathTree", "redraw_off_path",
           "class_mass", "leaf_paths", "row_paths"]

#: ``uniform``: the paper's PGEN; ``marginal``: each attribute's pooled released law; ``class``: its law given the
#: class; ``path``: its law given the region the row's path fixes.
OffPathMode = Literal["uniform", "marginal", "class", "path"]
#: What the results say of a study whose PGEN drew free attributes uniformly.
UNIFORM_OFF_PATH = "uniform: attributes a path leaves free drawn uniformly over the public domain (the paper's PGEN)"


@dataclass(frozen=True)
class _Categorical:
    """Per class, the probability of each category (rows sum to 1)."""

    probs: np.ndarray  # (classes, categories)


@dataclass(frozen=True)
class _Numeric:
    """Per class, the probability of each segment between consecutive ``edges`` (uniform within a segment)."""

    edges: np.ndarray  # (segments + 1,)
    probs: np.ndarray  # (classes, segments)
    integer: bool


def _constrained_numeric(table: PathTable, j: int) -> np.ndarray:
    """Paths whose drawable interval on numeric attribute ``j`` is narrower than the attribute's whole range."""
    attr = table.schema.attributes[j]
    assert isinstance(attr, NumericAttribute), f"attribute {j} is not numeric"
    whole = j in table.integer
    full_low = np.ceil(attr.low) if whole else attr.low
    full_high = np.floor(attr.high) if whole else attr.high
    narrower: np.ndarray = (table.low[j] > full_low) | (table.high[j] < full_high)
    return narrower


def class_mass(table: PathTable) -> np.ndarray:
    """(paths, classes): each path's released tuples shared by its class distribution (a noisy negative total: none)."""
    mass: np.ndarray = table.class_probs * np.clip(table.totals, 0, None)[:, None]
    return mass


def _normalise(mass: np.ndarray) -> np.ndarray | None:
    """Rows of ``mass`` as probabilities; a row without mass takes the pooled row; None when there is no mass at all."""
    pooled = mass.sum(axis=0)
    if pooled.sum() <= 0:
        return None
    pooled = pooled / pooled.sum()
    sums = mass.sum(axis=1, keepdims=True)
    return np.where(sums > 0, mass / np.where(sums > 0, sums, 1.0), pooled[None, :])


class ReleasedLaw:
    """Each attribute's law (given the class, or pooled) estimated from released paths that constrain it.

    Build with `from_trees` on every tree the miner accepted in a study; `laws` maps an attribute
    index to its estimate (attributes no path constrains are absent and stay uniform).
    """

    def __init__(self, schema: Schema, laws: dict[int, _Categorical | _Numeric], mode: OffPathMode,
                 pool: _PathPool | None = None) -> None:
        self.schema = schema
        self.laws = laws
        self.mode = mode
        self.pool = pool

    @classmethod
    def from_trees(cls, trees: Sequence[Tree], mode: OffPathMode = "class") -> ReleasedLaw:
        """Pool the constraining paths of ``trees`` (all on one schema) into per-attribute laws (module docstring)."""
        if mode not in ("marginal", "class", "path"):
            raise ValueError(f"mode is {mode!r}; expected 'marginal', 'class' or 'path'")
        if not trees:
            raise ValueError("a released law needs at least one released tree")
        schema = trees[0].schema
        tables = [PathTable.from_tree(tree) for tree in trees]
        laws: dict[int, _Categorical | _Numeric] = {}
        for j, attr in enumerate(schema.attributes):
            law = (_categorical_law(tables, j, attr.size) if isinstance(attr, CategoricalAttribute)
                   else _numeric_law(tables, j))
            if law is not None:
                laws[j] = law
        if mode != "class":
            laws = {j: _pooled(law) for j, law in laws.items()}
        return cls(schema, laws, mode, _PathPool.from_tables(tables, laws) if mode == "path" else None)

    def describe(self) -> str:
        """The law in words, for the study's results: the mode and which attributes it covers."""
        given = {"class": "given the class", "marginal": "pooled over the classes",
                 "path": "given the region the row's path fixes"}[self.mode]
        names = [a.name for j, a in enumerate(self.schema.attributes) if j in self.laws]
        rest = self.schema.n_attributes - len(names)
        uniform = f"; {rest} that no path constrains drawn uniformly" if rest else ""
        return (f"{self.mode}: attributes a path leaves free drawn from the released paths' law {given} "
                f"({', '.join(names) or 'none'}{uniform})")

    def sample(self, j: int, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Values of attribute ``j`` for rows of classes ``y``, drawn from its law (``j`` must be in `laws`)."""
        law = self.laws[j]
        k = np.empty(y.shape[0], dtype=np.int64)
        u = rng.random(len(y))
        for c in np.unique(y):
            rows = np.flatnonzero(y == c)
            cum = np.cumsum(law.probs[min(int(c), law.probs.shape[0] - 1)])
            k[rows] = np.minimum(np.searchsorted(cum, u[rows] * cum[-1], side="right"), cum.shape[0] - 1)
        if isinstance(law, _Categorical):
            return k.astype(np.float64)
        lo, hi = law.edges[k], law.edges[k + 1]
        values: np.ndarray = lo + rng.random(len(y)) * (hi - lo)
        if law.integer:
            values = np.minimum(np.floor(values), law.edges[-1] - 1)
        return values


def _pooled(law: _Categorical | _Numeric) -> _Categorical | _Numeric:
    """The same law with every class given the class-pooled probabilities (``mode="marginal"``)."""
    probs = np.repeat(law.probs.mean(axis=0, keepdims=True), law.probs.shape[0], axis=0)
    if isinstance(law, _Categorical):
        return _Categorical(probs)
    return _Numeric(law.edges, probs, law.integer)


def _categorical_law(tables: Sequence[PathTable], j: int, size: int) -> _Categorical | None:
    """Class-wise category probabilities: each constraining path's class mass spread over its allowed categories."""
    mass = np.zeros((tables[0].class_probs.shape[1], size))
    for table in tables:
        constrained = table.n_allowed[j] < size
        if not constrained.any():
            continue
        allowed = table.allowed[j][constrained]
        share = allowed / allowed.sum(axis=1, keepdims=True)
        mass += class_mass(table)[constrained].T @ share
    probs = _normalise(mass)
    return None if probs is None else _Categorical(probs)


def _numeric_law(tables: Sequence[PathTable], j: int) -> _Numeric | None:
    """Class-wise segment probabilities: each constraining path's class mass spread uniformly over its interval."""
    integer = j in tables[0].integer
    parts = []
    for table in tables:
        constrained = _constrained_numeric(table, j)
        if constrained.any():
            high = table.high[j][constrained] + (1.0 if integer else 0.0)
            parts.append((table.low[j][constrained], high, class_mass(table)[constrained]))
    if not parts:
        return None
    attr = tables[0].schema.attributes[j]
    assert isinstance(attr, NumericAttribute), f"attribute {j} is not numeric"
    lows, highs = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    mass = np.vstack([p[2] for p in parts])
    domain = (np.ceil(attr.low), np.floor(attr.high) + 1.0) if integer else (attr.low, attr.high)
    edges = np.unique(np.concatenate([lows, highs, domain]))
    # an open end is one float inside its cut point: merge such neighbours so that no segment is a float wide
    edges = np.concatenate([edges[:1], edges[1:][np.diff(edges) > 1e-9 * max(1.0, domain[1] - domain[0])]])
    if edges.size < 2:  # a one-point range: nothing to draw from but that point
        return None
    edges[-1] = domain[1]
    # overlap of each path's interval with each segment, as a share of the interval's length
    overlap = np.clip(np.minimum(highs[:, None], edges[None, 1:]) - np.maximum(lows[:, None], edges[None, :-1]),
                      0, None)
    length = highs - lows
    share = np.where(length[:, None] > 0, overlap / np.where(length > 0, length, 1.0)[:, None],
                     (edges[None, :-1] == lows[:, None]).astype(np.float64))
    probs = _normalise(mass.T @ share)
    return None if probs is None else _Numeric(edges, probs, integer)


_POOL_BLOCK = 1 << 22  # (paths x pooled paths) weights computed per block of about this many cells


def _mass_below(law: _Numeric, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Pooled numeric law's probability of each ``[low, high)`` (piecewise-uniform CDF)."""
    cdf = np.concatenate([[0.0], np.cumsum(law.probs[0])])
    mass: np.ndarray = np.interp(high, law.edges, cdf) - np.interp(low, law.edges, cdf)
    return mass


@dataclass(frozen=True)
class _PathPool:
    """Every released path of the study, attribute by attribute, for the law of a free attribute given a path.

    ``allowed[j]`` (paths, categories) and ``low[j]``/``high[j]`` (integer attributes: high + 1) are
    each pooled path's constraint, ``constrained[j]`` whether it constrains ``j`` at all, ``mass`` its
    released tuples, ``marginal`` the pooled laws (`ReleasedLaw.laws`). A categorical constraint is
    drawn from as PGEN draws it: ``codes[j]``, ``offset[j]`` and ``n_allowed[j]`` are the trees'
    `PathTable` draw tables, stacked (each tree's offsets moved past the codes before it).
    """

    allowed: dict[int, np.ndarray]
    codes: dict[int, np.ndarray]
    offset: dict[int, np.ndarray]
    n_allowed: dict[int, np.ndarray]
    low: dict[int, np.ndarray]
    high: dict[int, np.ndarray]
    constrained: dict[int, np.ndarray]
    mass: np.ndarray
    marginal: dict[int, _Categorical | _Numeric]

    @classmethod
    def from_tables(cls, tables: Sequence[PathTable], marginal: dict[int, _Categorical | _Numeric]) -> _PathPool:
        schema = tables[0].schema
        allowed, codes, offset, n_allowed, low, high, constrained = {}, {}, {}, {}, {}, {}, {}
        for j in marginal:
            if isinstance(schema.attributes[j], CategoricalAttribute):
                allowed[j] = np.vstack([t.allowed[j] for t in tables])
                codes[j] = np.concatenate([t.codes[j] for t in tables])
                before = np.cumsum([0] + [t.codes[j].size for t in tables[:-1]])
                offset[j] = np.concatenate([t.offset[j] + shift for t, shift in zip(tables, before, strict=False)])
                n_allowed[j] = np.concatenate([t.n_allowed[j] for t in tables])
                constrained[j] = n_allowed[j] < allowed[j].shape[1]
            else:
                low[j], high[j] = _bounds(tables, j)
                constrained[j] = np.concatenate([_constrained_numeric(t, j) for t in tables])
        return cls(allowed, codes, offset, n_allowed, low, high, constrained,
                   np.clip(np.concatenate([t.totals for t in tables]), 0, None), marginal)

    def weights(self, table: PathTable, rows: slice) -> np.ndarray:
        """(paths of ``table[rows]``, pooled paths): how much of each pooled path's mass lies in each path's region.

        Per attribute both constrain, the share of the pooled path's set or interval inside the
        path's (uniform inside the pooled path, as PGEN reads it); per attribute only the path
        constrains, the pooled law's mass of the path's set or interval; times the pooled path's tuples.
        """
        w = np.repeat(self.mass[None, :], rows.stop - rows.start, axis=0)
        for j in self.constrained:
            if j in self.allowed:
                mine = table.allowed[j][rows]
                narrowed = mine.sum(axis=1) < mine.shape[1]
                if not narrowed.any():
                    continue
                inside = mine.astype(np.float64) @ self.allowed[j].T.astype(np.float64) / self.n_allowed[j][None, :]
                outside = mine @ self.marginal[j].probs[0]
            else:
                lo, hi = _bounds([table], j)
                lo, hi = lo[rows], hi[rows]
                narrowed = _constrained_numeric(table, j)[rows]
                if not narrowed.any():
                    continue
                overlap = np.clip(np.minimum(hi[:, None], self.high[j][None, :])
                                  - np.maximum(lo[:, None], self.low[j][None, :]),
                                  0, None)
                length = self.high[j] - self.low[j]
                inside = overlap / np.where(length > 0, length, 1.0)[None, :]
                outside = _mass_below(self.marginal[j], lo, hi)  # type: ignore[arg-type]  # j is numeric here
            factor = np.where(self.constrained[j][None, :], inside, outside[:, None])
            w[narrowed] *= factor[narrowed]
        return w

    def draw(self, j: int, pooled: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A value of attribute ``j`` inside each given pooled path's constraint, uniformly (as PGEN draws)."""
        u = rng.random(pooled.shape[0])
        if j in self.allowed:
            n = self.n_allowed[j][pooled]
            k = np.minimum((u * n).astype(np.int64), n.astype(np.int64) - 1)
            codes: np.ndarray = self.codes[j][self.offset[j][pooled] + k]
            return codes
        lo, hi = self.low[j][pooled], self.high[j][pooled]
        values: np.ndarray = lo + u * (hi - lo)
        if j in self.marginal and isinstance(law := self.marginal[j], _Numeric) and law.integer:
            values = np.minimum(np.floor(values), hi - 1)
        return values


def _bounds(tables: Sequence[PathTable], j: int) -> tuple[np.ndarray, np.ndarray]:
    """Numeric attribute ``j``'s drawable bounds over the tables' paths (an integer attribute's high + 1)."""
    low = np.concatenate([t.low[j] for t in tables])
    high = np.concatenate([t.high[j] for t in tables]) + (1.0 if j in tables[0].integer else 0.0)
    return low, high


def _redraw_given_path(tree: OffPathTree, pid: np.ndarray, out: np.ndarray, rng: np.random.Generator) -> None:
    """``mode="path"``: each free value drawn inside a pooled path chosen by its overlap with the row's path.

    Paths are taken in blocks; within one, the rows of all its paths draw their pooled path at once
    (each path's cumulative weights offset by its position, so one `np.searchsorted` serves them all).
    A path whose region no pooled path constraining the attribute reaches falls back to the pooled law.
    """
    law, table = tree.law, tree.table
    pool = law.pool
    assert pool is not None
    order = np.argsort(pid, kind="stable")
    starts = np.searchsorted(pid[order], np.arange(table.n_paths + 1))
    block = _paths_per_block(pool)
    for first in range(0, table.n_paths, block):
        rows = slice(first, min(first + block, table.n_paths))
        weights = tree.weights if tree.weights is not None else pool.weights(table, rows)
        members = order[starts[rows.start]:starts[rows.stop]]
        for j, is_free in tree.free.items():
            pick = members[is_free[pid[members]]]
            if pick.size == 0:
                continue
            mine = pid[pick] - rows.start
            w = weights * pool.constrained[j][None, :]
            total = w.sum(axis=1)
            reached = total[mine] > 0
            cum = np.cumsum(w / np.where(total > 0, total, 1.0)[:, None], axis=1) + np.arange(w.shape[0])[:, None]
            u = np.minimum(rng.random(mine.shape[0]), np.nextafter(1.0, 0.0)) + mine
            pooled = np.minimum(np.searchsorted(cum.ravel(), u, side="right") - mine * w.shape[1], w.shape[1] - 1)
            values = law.sample(j, np.zeros(pick.shape[0], dtype=np.int64), rng)
            values[reached] = pool.draw(j, pooled[reached], rng)
            out[pick, j] = values


def _paths_per_block(pool: _PathPool) -> int:
    """How many of a tree's paths `_redraw_given_path` weighs at once against the pool (about `_POOL_BLOCK` cells)."""
    return max(1, _POOL_BLOCK // max(1, int(pool.mass.shape[0])))


@dataclass(frozen=True)
class OffPathTree:
    """One released tree prepared for redrawing its PGEN rows' free attributes from ``law``.

    Built once per tree (`of`) and handed to `redraw_off_path` for every chunk of that tree's rows,
    so that what does not depend on the rows is not computed again per chunk: the paths compiled
    (`PathTable`), each leaf's path index (-1: an inner node), each attribute's free paths, and, in
    ``mode="path"`` for a tree whose paths fit one block, the pooled paths' weights (`_PathPool.weights`).
    """

    tree: Tree
    law: ReleasedLaw
    table: PathTable
    leaf_to_path: np.ndarray
    free: dict[int, np.ndarray]
    weights: np.ndarray | None

    @classmethod
    def of(cls, tree: Tree, law: ReleasedLaw) -> OffPathTree:
        """Prepare ``tree`` (paths in `Tree.paths` order, the order `PathTable` keeps) for redraws from ``law``."""
        leaf_to_path = leaf_paths(tree)
        table = PathTable.from_tree(tree)
        free = {j: (table.n_allowed[j] == attr.size) if isinstance(attr, CategoricalAttribute)
                else ~_constrained_numeric(table, j) for j, attr in enumerate(tree.schema.attributes) if j in law.laws}
        pool = law.pool
        whole = pool is not None and table.n_paths <= _paths_per_block(pool)
        # the ignore below: whole: pool is set
        weights = pool.weights(table, slice(0, table.n_paths)) if whole else None  # type: ignore[union-attr]
        return cls(tree, law, table, leaf_to_path, free, weights)


def leaf_paths(tree: Tree) -> np.ndarray:
    """Per node of ``tree``, the index of the path it ends
    (`Tree.paths` order, the order `PathTable` keeps); -1: inner."""
    leaves = [p.leaf for p in tree.paths()]
    leaf_to_path = np.full(len(tree.nodes), -1, dtype=np.int64)
    leaf_to_path[leaves] = np.arange(len(leaves))
    return leaf_to_path


def row_paths(tree: Tree, leaf_to_path: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Each row's path index in ``tree`` (``leaf_to_path`` from `leaf_paths`), found by routing it down the tree.

    PGEN's rows satisfy their paths and a tree's paths partition the domain, so routing finds the
    path a row was drawn from; a row that ends on no leaf is not the tree's own and is refused.
    """
    pid: np.ndarray = leaf_to_path[tree.apply(X)]
    if np.any(pid < 0):
        raise ValueError("a pseudo row reaches no leaf of its tree; a redraw needs the tree's own PGEN rows")
    return pid


def redraw_off_path(tree: OffPathTree, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``X`` (PGEN rows of ``tree.tree``) with every attribute
    its row's path leaves unconstrained drawn from ``tree.law``.

    A row's path is found by routing it down the tree (PGEN's rows satisfy their paths, and a
    tree's paths partition the domain); values on constrained attributes are kept as drawn.
    """
    pid = row_paths(tree.tree, tree.leaf_to_path, X)
    out = np.array(X, dtype=np.float64, order="F", copy=True)
    if tree.law.pool is not None:
        _redraw_given_path(tree, pid, out, rng)
        return out
    for j, is_free in tree.free.items():
        rows = np.flatnonzero(is_free[pid])
        if rows.size:
            out[rows, j] = tree.law.sample(j, y[rows], rng)
    return out
