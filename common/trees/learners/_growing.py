"""What the C4.5-style growers share: entropy arithmetic, the criterion's pick, and a grower's state.

The multiway learner (`modelshare.common.trees.learners.multiway`, the paper's J48) and the requirement-aware
`admissible` learner grow trees the same way: depth-first from the root over the column codes of
`modelshare.common.trees.learners._binned`, scoring candidate splits by information gain and split
information from each node's class tables, and taking C4.5's pick. They differ in which splits
are candidates and how a split partitions the rows, so each keeps its own ``_best_split`` and
``_partition``; what they would otherwise write twice lives here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.trees.learners._binned import Binned

__all__ = ["CRITERIA", "TIE_TOLERANCE", "GrowerBase", "best_cuts", "first_best", "gain_and_split_info",
           "midpoint", "xlog2x"]

CRITERIA: tuple[str, ...] = ("gain_ratio", "info_gain")

TIE_TOLERANCE = 1e-12
"""Gains and ratios that differ by less than this are treated as equal, so a tie between
attributes (or thresholds) whose scores differ only by rounding goes to the lowest index."""


def xlog2x(values: np.ndarray) -> np.ndarray:
    """Elementwise ``v * log2(v)`` with ``0 * log2(0) = 0``; the building block of entropies."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, values * np.log2(values), 0.0)


def gain_and_split_info(children: np.ndarray, n: int, parent_cells: float) -> tuple[np.ndarray, np.ndarray]:
    """Information gain and split information of candidate splits, in bits.

    Uses ``n * gain = n log n - sum_k C_k log C_k - sum_v n_v log n_v + sum_vk c_vk log c_vk``,
    which needs no per-child division and evaluates any number of candidates at once.

    Parameters
    ----------
    children:
        Class counts per child, shape ``(..., children, classes)``; the leading axes index
        candidate splits (e.g. every threshold of a numeric attribute).
    n:
        Rows at the node (the sum of each candidate's counts).
    parent_cells:
        ``sum_k C_k log2 C_k`` over the node's class counts ``C``.

    Returns
    -------
    gain, split_info:
        Arrays of the leading shape; gain is clipped at 0 to drop rounding noise.
    """
    n_log_n = n * math.log2(n)
    size_cells = xlog2x(children.sum(axis=-1)).sum(axis=-1)
    class_cells = xlog2x(children).sum(axis=(-2, -1))
    gain = np.maximum((n_log_n - parent_cells - size_cells + class_cells) / n, 0.0)
    split_info = (n_log_n - size_cells) / n
    return gain, split_info


def best_cuts(tables: Sequence[np.ndarray], n: int, parent_cells: float,
              admissible: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> list[tuple[int, float, float] | None]:
    """Per value-by-class table (rows in split order): its highest-gain two-way cut that ``admissible`` allows.

    ``admissible(left, right)`` says per candidate (rows: class counts of the two sides) whether the cut
    may be made. Each result is (last row index on the left, gain, split information), the lowest index
    on ties, or None where no cut is admissible. Every table's cuts are scored in one pass over their
    stacked rows, each with the same floats as alone (the counts are whole numbers).
    """
    if not tables:
        return []
    sizes = np.array([t.shape[0] for t in tables])
    ends = np.cumsum(sizes)
    owner = np.repeat(np.arange(len(tables)), sizes)
    cumulative = np.cumsum(np.concatenate(tables).astype(np.float64), axis=0)
    before = np.zeros((len(tables), cumulative.shape[1]))
    before[1:] = cumulative[ends[:-1] - 1]
    is_cut = np.ones(ends[-1], dtype=bool)
    is_cut[ends - 1] = False
    left = (cumulative - before[owner])[is_cut]
    table_of = owner[is_cut]
    at = (np.arange(ends[-1]) - (ends - sizes)[owner])[is_cut]
    right = (cumulative[ends - 1] - before)[table_of] - left
    positions = np.flatnonzero(admissible(left, right))
    found: list[tuple[int, float, float] | None] = [None] * len(tables)
    if positions.size == 0:
        return found
    gain, split_info = gain_and_split_info(np.stack([left[positions], right[positions]], axis=1), n, parent_cells)
    table_of = table_of[positions]
    top = np.full(len(tables), -np.inf)
    np.maximum.at(top, table_of, gain)
    tied = np.flatnonzero(gain >= top[table_of] - TIE_TOLERANCE)
    winners, first = np.unique(table_of[tied], return_index=True)
    for t, i in zip(winners, tied[first], strict=False):
        found[int(t)] = (int(at[positions[i]]), float(gain[i]), float(split_info[i]))
    return found


def first_best(scores: np.ndarray) -> int:
    """Index of the first score within the tie tolerance of the maximum (lowest index wins ties)."""
    return int(np.flatnonzero(scores >= scores.max() - TIE_TOLERANCE)[0])


def midpoint(low: float, high: float) -> float:
    """The threshold between consecutive distinct values ``low < high``: their midpoint, or ``low``
    when rounding between adjacent floats would put the midpoint outside ``[low, high)``."""
    threshold = low / 2 + high / 2
    return float(threshold) if low <= threshold < high else float(low)


class Scored(Protocol):
    """A candidate split as the criterion sees it."""

    @property
    def gain(self) -> float: ...

    @property
    def split_info(self) -> float: ...


S = TypeVar("S", bound=Scored)


class GrowerBase:
    """One fit's state shared by the growers: the binned rows, the stopping parameters and the criterion."""

    def __init__(self, schema: Schema, binned: Binned, criterion: str, max_depth: int | None,
                 min_gain: float) -> None:
        self.schema = schema
        self.binned = binned
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_gain = min_gain
        self.k = schema.n_classes
        self.categorical = schema.categorical_mask

    def _counts(self, rows: np.ndarray) -> np.ndarray:
        """Class counts of ``rows``."""
        return self.binned.counts(rows)

    def _pick(self, candidates: Sequence[S]) -> S | None:
        """The criterion's pick among ``candidates``, or None when there are none.

        ``info_gain``: the highest gain. ``gain_ratio`` (C4.5): gain ratio alone favours splits with
        tiny split information (e.g. one row split off), so only candidates with at least the
        average positive gain compete on gain / split information.
        """
        if not candidates:
            return None
        gains = np.array([s.gain for s in candidates])
        if self.criterion == "info_gain":
            return candidates[first_best(gains)]
        positive = gains > TIE_TOLERANCE
        eligible = gains >= gains[positive].mean() - TIE_TOLERANCE if positive.any() else np.ones_like(positive)
        ratios = np.array([s.gain / max(s.split_info, TIE_TOLERANCE) for s in candidates])
        return candidates[first_best(np.where(eligible, ratios, -np.inf))]
