"""Off-path values from the released trees' own marginals, instead of PGEN's uniform draw.

PGEN (`miner_node.pgen`) fills every attribute that a path leaves unconstrained uniformly over the
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

Integer attributes use whole-number segments (a path interval becomes ``[ceil(low), floor(high) + 1)``
and a draw is floored), so draws stay whole, as PGEN's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from common.data.schema import CategoricalAttribute, Schema
from common.federation.study import OFF_PATH_MODES
from common.trees.tree import Tree
from miner_node.pgen import PathTable

__all__ = ["OFF_PATH_MODES", "OffPathMode", "UNIFORM_OFF_PATH", "ReleasedLaw", "redraw_off_path"]

#: ``uniform``: the paper's PGEN; ``marginal``: each attribute's pooled released law; ``class``: its law given the class.
OffPathMode = Literal["uniform", "marginal", "class"]
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
    whole = j in table.integer
    full_low = np.ceil(attr.low) if whole else attr.low
    full_high = np.floor(attr.high) if whole else attr.high
    return (table.low[j] > full_low) | (table.high[j] < full_high)


def _class_mass(table: PathTable) -> np.ndarray:
    """(paths, classes): each path's released tuples shared by its class distribution."""
    return table.class_probs * table.totals[:, None]


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

    def __init__(self, schema: Schema, laws: dict[int, _Categorical | _Numeric], mode: OffPathMode) -> None:
        self.schema = schema
        self.laws = laws
        self.mode = mode

    @classmethod
    def from_trees(cls, trees: Sequence[Tree], mode: OffPathMode = "class") -> "ReleasedLaw":
        """Pool the constraining paths of ``trees`` (all on one schema) into per-attribute laws (module docstring)."""
        if mode not in ("marginal", "class"):
            raise ValueError(f"mode is {mode!r}; expected 'marginal' or 'class'")
        if not trees:
            raise ValueError("a released law needs at least one released tree")
        schema = trees[0].schema
        tables = [PathTable.from_paths(schema, tree.paths()) for tree in trees]
        laws: dict[int, _Categorical | _Numeric] = {}
        for j, attr in enumerate(schema.attributes):
            law = (_categorical_law(tables, j, attr.size) if isinstance(attr, CategoricalAttribute)
                   else _numeric_law(tables, j))
            if law is not None:
                laws[j] = law
        if mode == "marginal":
            laws = {j: _pooled(law) for j, law in laws.items()}
        return cls(schema, laws, mode)

    def describe(self) -> str:
        """The law in words, for the study's results: the mode and which attributes it covers."""
        given = "given the class" if self.mode == "class" else "pooled over the classes"
        names = [a.name for j, a in enumerate(self.schema.attributes) if j in self.laws]
        rest = self.schema.n_attributes - len(names)
        return (f"{self.mode}: attributes a path leaves free drawn from the released paths' law {given} "
                f"({', '.join(names) or 'none'}; {rest} attribute(s) no path constrains drawn uniformly)")

    def sample(self, j: int, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Values of attribute ``j`` for rows of classes ``y``, drawn from its law (``j`` must be in `laws`)."""
        law = self.laws[j]
        k = np.empty(y.shape[0], dtype=np.int64)
        u = rng.random(y.shape[0])
        for c in np.unique(y):
            rows = np.flatnonzero(y == c)
            cum = np.cumsum(law.probs[min(int(c), law.probs.shape[0] - 1)])
            k[rows] = np.minimum(np.searchsorted(cum, u[rows] * cum[-1], side="right"), cum.shape[0] - 1)
        if isinstance(law, _Categorical):
            return k.astype(np.float64)
        lo, hi = law.edges[k], law.edges[k + 1]
        values = lo + rng.random(y.shape[0]) * (hi - lo)
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
        mass += _class_mass(table)[constrained].T @ share
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
            parts.append((table.low[j][constrained], high, _class_mass(table)[constrained]))
    if not parts:
        return None
    attr = tables[0].schema.attributes[j]
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
    overlap = np.clip(np.minimum(highs[:, None], edges[None, 1:]) - np.maximum(lows[:, None], edges[None, :-1]), 0, None)
    length = highs - lows
    share = np.where(length[:, None] > 0, overlap / np.where(length > 0, length, 1.0)[:, None],
                     (edges[None, :-1] == lows[:, None]).astype(np.float64))
    probs = _normalise(mass.T @ share)
    return None if probs is None else _Numeric(edges, probs, integer)


def redraw_off_path(tree: Tree, X: np.ndarray, y: np.ndarray, law: ReleasedLaw, rng: np.random.Generator) -> np.ndarray:
    """``X`` (PGEN rows of ``tree``) with every attribute its row's path leaves unconstrained drawn from ``law``.

    A row's path is found by routing it down ``tree`` (PGEN's rows satisfy their paths, and a
    tree's paths partition the domain); values on constrained attributes are kept as drawn.
    """
    paths = tree.paths()
    table = PathTable.from_paths(tree.schema, paths)
    leaf_to_path = np.full(len(tree.nodes), -1, dtype=np.int64)
    leaf_to_path[[p.leaf for p in paths]] = np.arange(len(paths))
    pid = leaf_to_path[tree.apply(X)]
    if np.any(pid < 0):
        raise ValueError("a pseudo row reaches no leaf of its tree; redraw_off_path needs the tree's own PGEN rows")
    out = np.array(X, dtype=np.float64, order="F", copy=True)
    for j, attr in enumerate(tree.schema.attributes):
        if j not in law.laws:
            continue
        if isinstance(attr, CategoricalAttribute):
            free = table.n_allowed[j] == attr.size
        else:
            free = ~_constrained_numeric(table, j)
        rows = np.flatnonzero(free[pid])
        if rows.size:
            out[rows, j] = law.sample(j, y[rows], rng)
    return out
