"""LD: publishing a (c,l)-diversified table by full-domain generalisation (Sharkey et al. 2008, §4.2).

The model-sharing paper compares PPGEN (pseudo-data from a privacy-pruned tree) with LD, which
publishes the data itself after (c,l)-diversification: every quasi-identifier (QI) is generalised
to one level of its hierarchy (`experiments.baselines.hierarchy`) for *all* rows, rows with equal generalised QIs
form an equivalence class (EC), and every published EC must be (c,l)-diverse in the class, the
sensitive attribute. The check is the project's own, `modelshare.common.privacy.requirements.cl_diverse_exact`
(recursive (c,l)-diversity ``r1 < c * (r_l + ... + r_m)`` over the sorted class counts, the ``counts`` form
of `CLDiversity`), so LD and PPGEN are judged by one definition.

Suppression: ECs that fail may be removed whole, as long as at most ``max_suppression`` of the rows
(`DEFAULT_MAX_SUPPRESSION` = 2%, a common budget in the generalisation literature) are removed.

Search: a node of the lattice is a vector of levels, one per QI; its height is their sum. Nodes are
visited breadth-first by height, Incognito-style, and the search stops after the first height
holding a node that qualifies; among the qualifying nodes of that height the one of least
*discernibility* wins, ``C_DM = sum over published ECs of |EC|**2 + (suppressed rows) * (rows)``
(Bayardo & Agrawal 2005), ties going to the lexicographically smallest node.

Monotonicity: without suppression, recursive (c,l)-diversity is monotone under generalisation:
merging two diverse ECs r and s gives t with t1 <= r1 + s1 and, since the sum of the m - l + 1
smallest counts is superadditive, tail(t) >= tail(r) + tail(s), so t1 < c * tail(t). With EC
suppression it is *not*: for c = 2, l = 2 and a 10-row budget, ECs (1, 1) (diverse) and (10, 0)
(suppressed) qualify, but generalising them into one EC (11, 1) fails and costs 12 rows. So no
node is marked as qualifying unchecked: every node of height below the answer, and every node of
the answer's height, is evaluated (exhaustive up to the answer), bounded by ``max_nodes``. One
sound shortcut is taken: the published rows of any qualifying node form a diverse union of
diverse ECs, obtained by removing at most B (the budget) rows, so the whole table's sorted class
counts r must satisfy ``r1 - B < c * (r_l + ... + r_m)`` (removing rows lowers the largest count by
at most B and never raises the tail). When they do not, no node qualifies and LD yields no data
without a search.

Training on LD data: a QI generalised to level >= 1 becomes a categorical attribute whose
categories are its group labels (``{a,b}``, ``[0.0, 25.0)``, ``*``) and whose code is the group id,
ordered like the values it covers; a QI at level 0 and every non-QI attribute keep their schema
attribute and raw encoding. `LDResult.generalised_schema` is that schema, `LDResult.transform` maps
raw encoded rows (e.g. a test fold) into it, and `fit_ld_model` trains one of the miner's global
models on it. All global models take category codes directly (CART splits them as ordinals, which
respects the group order), so no one-hot encoding is needed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from experiments.baselines.hierarchy import Hierarchy, NumericHierarchy, schema_hierarchies
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.privacy.requirements import CLDiversity, cl_diverse_exact, parse_requirement

if TYPE_CHECKING:
    from modelshare.miner_node.global_models import GlobalModel

__all__ = [
    "DEFAULT_MAX_SUPPRESSION",
    "DEFAULT_MAX_NODES",
    "LDError",
    "LDResult",
    "LDModel",
    "diversify",
    "check_cl_diversity",
    "fit_ld_model",
]

#: Share of the rows that suppression may remove.
DEFAULT_MAX_SUPPRESSION = 0.02

#: Lattice nodes the search may evaluate before it gives up (Nursery's whole lattice has 5,832).
DEFAULT_MAX_NODES = 100_000


class LDError(ValueError):
    """A diversification that cannot run as asked, or a use of LD output that does not exist."""


@dataclass(frozen=True, eq=False)
class LDResult:
    """The outcome of `diversify`: the chosen node and the published table, or no data.

    Attributes
    ----------
    schema, hierarchies:
        The input schema and the hierarchy of every attribute.
    qi:
        The quasi-identifiers, in schema order.
    requirement:
        The (c,l)-diversity every published EC meets.
    max_suppression:
        The share of rows suppression could remove.
    node:
        Level per QI of the chosen node, None when no node qualifies (no data).
    candidates:
        Every qualifying node of the minimal height, best (least discernibility) first.
    kept:
        Boolean mask over the input rows: True where the row is published.
    X, y:
        The published rows, encoded under `generalised_schema`, and their class indices.
    equivalence_classes:
        Number of published ECs.
    discernibility:
        ``C_DM`` of the chosen node (0 when there is no data).
    nodes_evaluated:
        Lattice nodes the search evaluated.
    """

    schema: Schema
    hierarchies: Mapping[str, Hierarchy]
    qi: tuple[str, ...]
    requirement: CLDiversity
    max_suppression: float
    node: tuple[int, ...] | None
    candidates: tuple[tuple[int, ...], ...]
    kept: np.ndarray
    X: np.ndarray
    y: np.ndarray
    equivalence_classes: int
    discernibility: int
    nodes_evaluated: int

    @property
    def has_data(self) -> bool:
        """Did some node qualify?"""
        return self.node is not None

    @property
    def suppressed(self) -> int:
        """Rows not published (every row when there is no data)."""
        return int(self.kept.size - np.count_nonzero(self.kept))

    @property
    def levels(self) -> dict[str, int]:
        """Level of every attribute: the chosen node's for QIs, 0 for the rest (and for all without data)."""
        levels = dict.fromkeys(self.schema.names, 0)
        levels.update(zip(self.qi, self.node or (), strict=False))
        return levels

    @cached_property
    def generalised_schema(self) -> Schema:
        """The schema of `X`: generalised QIs as categorical attributes over their group labels."""
        levels = self.levels
        attributes = tuple(
            CategoricalAttribute(a.name, self.hierarchies[a.name].group_labels(levels[a.name])) if levels[a.name] else a
            for a in self.schema.attributes
        )
        return Schema(attributes, self.schema.class_name, self.schema.classes)

    @property
    def frame(self) -> pd.DataFrame:
        """The published table: a column per attribute (group ids for generalised QIs) and the class index."""
        frame = pd.DataFrame(self.X, columns=list(self.schema.names))
        generalised = [a.name for a in self.generalised_schema.attributes if isinstance(a, CategoricalAttribute)]
        frame[generalised] = frame[generalised].astype(np.int64)
        frame[self.schema.class_name] = self.y
        return frame

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Raw encoded rows (under `schema`) in the published encoding, e.g. to score a test fold.

        Raises `LDError` when there is no data, `HierarchyError` for a value a hierarchy cannot place.
        """
        if not self.has_data:
            raise LDError(f"LD yielded no data for {self.requirement}; there is no generalisation to apply")
        return _generalise(np.asarray(X, dtype=np.float64), self.schema, self.hierarchies, self.levels)


def _generalise(X: np.ndarray, schema: Schema, hierarchies: Mapping[str, Hierarchy],
                levels: Mapping[str, int]) -> np.ndarray:
    """``X`` with every attribute at a level >= 1 replaced by its group ids."""
    if X.ndim != 2 or X.shape[1] != schema.n_attributes:
        raise LDError(f"X must have shape (rows, {schema.n_attributes}), one column per schema attribute; "
                      f"got {X.shape}")
    out: np.ndarray = X.copy()
    for j, name in enumerate(schema.names):
        if levels[name]:
            out[:, j] = hierarchies[name].group_ids(X[:, j], levels[name])
    return out


def _level_codes(hierarchy: Hierarchy, column: np.ndarray, level: int) -> tuple[np.ndarray, int]:
    """Group id per row at ``level`` and the number of ids; raw
    numbers (level 0) get the ids of their distinct values."""
    if level == 0 and isinstance(hierarchy, NumericHierarchy):
        uniques, ids = np.unique(column, return_inverse=True)
        return ids.astype(np.int64), len(uniques)
    return hierarchy.group_ids(column, level), len(hierarchy.group_labels(level))


def _compact(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Renumber ids densely from 0, in order."""
    uniques, dense = np.unique(ids, return_inverse=True)
    return dense.astype(np.int64), len(uniques)


def _equivalence_ids(columns: Sequence[np.ndarray], sizes: Sequence[int]) -> tuple[np.ndarray, int]:
    """EC id per row (the mixed-radix combination of its group ids) and a bound on the ids.

    Ids are renumbered densely whenever the bound would pass a few times the row count, which keeps
    `np.bincount` small and the arithmetic far from int64 overflow.
    """
    rows = len(columns[0])
    limit = max(4 * rows, 4096)
    ids, bound = np.zeros(rows, dtype=np.int64), 1
    for codes, size in zip(columns, sizes, strict=False):
        if bound * size > limit:
            ids, bound = _compact(ids)
        ids, bound = ids * size + codes, bound * size
    return _compact(ids) if bound > limit else (ids, bound)


def _class_counts(ids: np.ndarray, bound: int, y: np.ndarray, n_classes: int) -> np.ndarray:
    """Class counts per EC id, shape (bound, classes); ids holding no row get a row of zeros."""
    return np.bincount(ids * n_classes + y, minlength=bound * n_classes).reshape(bound, n_classes)


def _assess(counts: np.ndarray, requirement: CLDiversity, budget: int) -> int | None:
    """C_DM of a node with EC class counts ``counts`` once its non-diverse ECs are suppressed; None past ``budget``."""
    sizes = counts.sum(axis=1)
    counts, sizes = counts[sizes > 0], sizes[sizes > 0]
    diverse = cl_diverse_exact(counts, requirement.c, requirement.l)
    suppressed = int(sizes[~diverse].sum())
    if suppressed > budget:
        return None
    return int((sizes[diverse] ** 2).sum()) + suppressed * int(sizes.sum())


def _any_node_can_qualify(y: np.ndarray, n_classes: int, requirement: CLDiversity, budget: int) -> bool:
    """Necessary condition for any node to qualify: ``r1 - budget < c * (r_l + ... + r_m)`` on the whole table."""
    ranked = np.sort(np.bincount(y, minlength=n_classes))[::-1]
    return bool(ranked[0] - budget < requirement.c * ranked[requirement.l - 1 :].sum())


def _nodes_at_height(heights: Sequence[int], height: int) -> Iterator[tuple[int, ...]]:
    """Level vectors bounded componentwise by ``heights`` whose levels sum to ``height``, lexicographically."""
    if not heights:
        if height == 0:
            yield ()
        return
    rest = sum(heights[1:])
    for first in range(max(0, height - rest), min(heights[0], height) + 1):
        for tail in _nodes_at_height(heights[1:], height - first):
            yield (first, *tail)


def _check_inputs(
    X: np.ndarray, y: np.ndarray, schema: Schema, qi: Sequence[str], hierarchies: Mapping[str, Hierarchy],
    max_suppression: float,
) -> None:
    """Refuse a table, QI list, hierarchy or budget that LD cannot work with, naming what is wrong."""
    if X.ndim != 2 or X.shape[1] != schema.n_attributes or X.shape[0] == 0:
        raise LDError(f"X must have shape (rows > 0, {schema.n_attributes}); got {X.shape}")
    if y.shape != (X.shape[0],) or not np.all((y >= 0) & (y < schema.n_classes)):
        raise LDError(f"y must hold one class index in 0..{schema.n_classes - 1} per row of X")
    unknown = [name for name in qi if name not in schema.names]
    if unknown or not qi or len(set(qi)) != len(qi):
        raise LDError(f"quasi-identifiers {list(qi)} must be distinct attributes of the schema "
                      f"{list(schema.names)}, at least one (unknown: {unknown})")
    if not 0.0 <= max_suppression < 1.0:
        raise LDError(f"max_suppression must lie in [0, 1), got {max_suppression}")
    for name in qi:
        if name not in hierarchies or hierarchies[name].attribute != schema.attributes[schema.index(name)]:
            raise LDError(f"quasi-identifier {name!r} has no hierarchy built for its schema attribute "
                          f"{schema.attributes[schema.index(name)]}")


def diversify(
    X: np.ndarray,
    y: np.ndarray,
    schema: Schema,
    *,
    c: float,
    l: int,  # noqa: E741 - the papers' name
    qi: Sequence[str] | None = None,
    hierarchies: Mapping[str, Hierarchy] | None = None,
    max_suppression: float = DEFAULT_MAX_SUPPRESSION,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> LDResult:
    """(c,l)-diversify an encoded table by full-domain generalisation and EC suppression (see the module docstring).

    Parameters
    ----------
    X, y:
        The encoded table (`Schema.encode`); the class is the sensitive attribute.
    schema:
        Its schema.
    c, l:
        The (c,l)-diversity requirement, as in ``cl-diversity:c=C,l=L``.
    qi:
        Quasi-identifiers; every attribute by default.
    hierarchies:
        Hierarchy per attribute; `experiments.baselines.hierarchy.schema_hierarchies` of ``schema`` by default.
    max_suppression:
        Share of the rows that suppression may remove, in [0, 1).
    max_nodes:
        Lattice nodes the search may evaluate.

    Raises
    ------
    RequirementError
        For ``c`` or ``l`` outside the range of ``cl-diversity:c=C,l=L`` (c > 0, integer l >= 2).
    LDError
        For bad input, or when the search reaches ``max_nodes`` before the answer's height is
        complete (the message gives the lattice size; use fewer QIs or coarser hierarchies).
    """
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)
    hierarchies = dict(hierarchies) if hierarchies is not None else schema_hierarchies(schema)
    _check_inputs(X, y, schema, schema.names if qi is None else list(qi), hierarchies, max_suppression)
    qi = tuple(name for name in schema.names if qi is None or name in qi)
    requirement = cast(CLDiversity, parse_requirement(f"cl-diversity:c={float(c)!r},l={l}"))
    budget = int(np.floor(max_suppression * len(y)))
    setting = dict(schema=schema, hierarchies=hierarchies, qi=qi, requirement=requirement,
                   max_suppression=max_suppression)
    if not _any_node_can_qualify(y, schema.n_classes, requirement, budget):
        return _no_data(len(y), 0, **setting)
    found, evaluated = _search(X, y, schema, hierarchies, qi, requirement, budget, max_nodes)
    if not found:
        return _no_data(len(y), evaluated, **setting)
    return _publish(X, y, found, evaluated, **setting)


def _search(
    X: np.ndarray, y: np.ndarray, schema: Schema, hierarchies: Mapping[str, Hierarchy], qi: tuple[str, ...],
    requirement: CLDiversity, budget: int, max_nodes: int,
) -> tuple[list[tuple[int, tuple[int, ...]]], int]:
    """Breadth-first by height: the qualifying nodes of the first height that has any, with their C_DM."""
    heights = [hierarchies[name].height for name in qi]
    codes = [[_level_codes(hierarchies[name], X[:, schema.index(name)], level) for level in range(h + 1)]
             for name, h in zip(qi, heights, strict=False)]
    lattice = int(np.prod([h + 1 for h in heights], dtype=np.float64))
    evaluated = 0
    for height in range(sum(heights) + 1):
        found = []
        for node in _nodes_at_height(heights, height):
            evaluated += 1
            if evaluated > max_nodes:
                raise LDError(f"the search reached max_nodes={max_nodes} at height {height} of a lattice of "
                              f"{lattice} nodes over QIs {list(qi)}; use fewer quasi-identifiers, coarser "
                              f"hierarchies or a larger max_nodes")
            ids, bound = _equivalence_ids(*zip(*(codes[j][level] for j, level in enumerate(node)), strict=False))
            discernibility = _assess(_class_counts(ids, bound, y, schema.n_classes), requirement, budget)
            if discernibility is not None:
                found.append((discernibility, node))
        if found:
            return sorted(found), evaluated
    return [], evaluated


def _no_data(rows: int, evaluated: int, **setting: Any) -> LDResult:
    """The result of a diversification where no node qualifies; ``setting`` holds the input fields of `LDResult`."""
    width = setting["schema"].n_attributes
    return LDResult(node=None, candidates=(), kept=np.zeros(rows, dtype=bool), X=np.empty((0, width)),
                    y=np.empty(0, dtype=np.int64), equivalence_classes=0, discernibility=0,
                    nodes_evaluated=evaluated, **setting)


def _publish(X: np.ndarray, y: np.ndarray, found: list[tuple[int, tuple[int, ...]]], evaluated: int,
             **setting: Any) -> LDResult:
    """Generalise the table to the best qualifying node and drop the rows of its non-diverse ECs."""
    schema, hierarchies, requirement, qi = (setting[k] for k in ("schema", "hierarchies", "requirement", "qi"))
    discernibility, node = found[0]
    levels = dict.fromkeys(schema.names, 0)
    levels.update(zip(qi, node, strict=False))
    generalised = _generalise(X, schema, hierarchies, levels)
    columns = [_level_codes(hierarchies[name], X[:, schema.index(name)], level)
               for name, level in zip(qi, node, strict=False)]
    ids, bound = _equivalence_ids(*zip(*columns, strict=False))
    counts = _class_counts(ids, bound, y, schema.n_classes)
    kept = cl_diverse_exact(counts, requirement.c, requirement.l)[ids]
    return LDResult(node=node, candidates=tuple(n for _, n in found), kept=kept, X=generalised[kept], y=y[kept],
                    equivalence_classes=int(np.unique(ids[kept]).size), discernibility=discernibility,
                    nodes_evaluated=evaluated, **setting)


def check_cl_diversity(
    table: pd.DataFrame, qi_columns: Sequence[str], class_column: str, c: float, l: int  # noqa: E741
) -> pd.DataFrame:
    """Per equivalence class of ``table`` (rows equal on ``qi_columns``): its size and whether it is (c,l)-diverse.

    Written with a pandas groupby, independently of the LD search, to verify its output; the
    predicate is the project's `cl_diverse_exact`. Returns one row per EC, indexed by the QI values,
    with columns ``size`` and ``diverse``.
    """
    missing = [name for name in [*qi_columns, class_column] if name not in table.columns]
    if missing or not qi_columns:
        raise ValueError(f"columns {missing} are not in the table (columns {list(table.columns)}), "
                         f"or no QI column was given")
    counts = table.groupby(list(qi_columns), observed=True)[class_column].value_counts().unstack(fill_value=0)
    return pd.DataFrame({"size": counts.sum(axis=1), "diverse": cl_diverse_exact(counts.to_numpy(), c, l)},
                        index=counts.index)


@dataclass(frozen=True, eq=False)
class LDModel:
    """A global model trained on LD data; `predict` takes raw encoded rows and generalises them first."""

    result: LDResult
    model: GlobalModel

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per raw encoded row of ``X`` (under the input schema)."""
        return self.model.predict(self.result.transform(X))


def fit_ld_model(result: LDResult, name: str, *, random_state: int | None = None, **params: Any) -> LDModel:
    """Train the global model ``name`` (`modelshare.miner_node.global_models.GLOBAL_MODELS`) on LD's published table.

    The model sees `LDResult.generalised_schema`; ``params`` override its hyperparameters. The
    miner's registry is imported here, on use, because `common` sits below `miner_node`.
    """
    from modelshare.miner_node.global_models import make_global_model

    if not result.has_data:
        raise LDError(f"LD yielded no data for {result.requirement}; no model can be trained")
    model = make_global_model(name, result.generalised_schema, random_state=random_state, **params)
    model.fit(result.X, result.y)
    return LDModel(result, model)
