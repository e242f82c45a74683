"""Pseudo-data generation from released trees: PGEN (Sharkey et al. 2008, Fig. 3) and BASEGEN.

PGEN turns each root-to-leaf path into tuples: attributes on the path take values allowed by the
path's most specific constraint, attributes off the path take values from their whole domain, and
the class follows the path's disclosed counts. Choices where the paper leaves room:

* Values: categorical attributes are drawn uniformly from the allowed category set, numeric ones
  uniformly on the path's interval intersected with the schema's closed range (open ends are moved
  one float inward, so every tuple satisfies its path exactly). Uniform draws keep the class purity
  of non-split attributes low, which is the paper's heuristic for making a learner re-select the
  split attributes.
* Rows per path: ``hit + miss`` (rounded) by default; with a requested table size, the size is
  shared among paths in proportion to ``hit + miss`` by largest remainders, so the per-path
  counts are exact integers that sum to the request.
* Class: ``class_assignment="exact"`` (default) gives each path's rows classes in exact proportion
  to its disclosed distribution (largest remainders), so a path with counts (7, 3) yields exactly
  7 and 3 tuples; ``"sample"`` draws each row's class independently, as the paper's line 10 reads.
  Exact assignment removes sampling noise that a learner would otherwise fit (see EXPERIMENTS.md).
  The distribution is the count vector under `counts` disclosure; under `hit_miss` it is the
  majority with ``hit / (hit + miss)`` and the miss share spread uniformly over the other classes,
  as in the paper's experiments.

Everything is vectorized over rows: the Python-level loops run over the tree's edges and depth
levels (once, to compile the paths into arrays, `PathTable`) and over attributes and blocks of
rows. Rows come grouped by path, so each path's parameters (its interval, its category set) are
spread over its run of rows with `np.repeat` instead of being gathered row by row; shuffled rows
gather them. A category set that is a run of consecutive categories (ordinal and single-category
splits, whole domains) is drawn like a whole-number interval, without a table lookup; the draw is
the same category the lookup would give for the same uniform.
Large outputs stream in chunks of whole rows (`pgen_chunks`), optionally shuffled within a chunk.

An ensemble (k-AnonToRdt) is regenerated tree by tree from each tree's own paths (`pgen_ensemble`);
`ensemble_rows` says how the pseudo-table's size is shared among the trees, and why.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.trees.regression import RegressionForest, RegressionTree
from modelshare.common.trees.tree import CategorySet, Interval, Node, Tree, preorder

__all__ = ["PathTable", "allocate_rows", "ensemble_rows", "leaf_class_distributions", "pgen", "pgen_ensemble",
           "pgen_chunks", "basegen", "uniform_rows", "pgen_regression", "pgen_regression_tree"]

ClassAssignment = Literal["exact", "sample"]
DEFAULT_CHUNK_ROWS = 1_000_000
BLOCK_ROWS = 1 << 15


def allocate_rows(weights: np.ndarray, total: int | np.ndarray) -> np.ndarray:
    """Split ``total`` into integers proportional to ``weights`` by largest remainders.

    Ties among remainders go to the lower index, so the result is deterministic. Each row of a
    2-D ``weights`` is allocated its own ``total`` (an array with one total per row). A positive
    total over weights that are all zero has no proportional split and raises ValueError.
    """
    weights = np.asarray(weights, dtype=np.float64)
    totals = np.asarray(total, dtype=np.int64)
    two_d = weights.ndim == 2
    w = weights if two_d else weights[None, :]
    t = totals.reshape(-1) if two_d else totals.reshape(1)
    sums = w.sum(axis=1)
    if np.any((sums <= 0) & (t > 0)):
        raise ValueError("cannot share rows among paths that disclose no tuples (all weights are zero)")
    share = np.divide(w * t[:, None], sums[:, None], out=np.zeros_like(w), where=sums[:, None] > 0)
    base = np.floor(share).astype(np.int64)
    left = t - base.sum(axis=1)
    order = np.argsort(-(share - base), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(w.shape[1])[None, :].repeat(w.shape[0], axis=0), axis=1)
    base += rank < left[:, None]
    rows: np.ndarray = base if two_d else base[0]
    return rows


@dataclass(frozen=True)
class PathTable:
    """A tree's paths compiled into arrays, one row per path, ready for vectorized generation.

    ``allowed[j]`` is a (paths, categories) boolean mask for categorical attribute ``j``. Paths
    share few distinct allowed sets, so the draw tables are per set, small enough to stay in
    cache: ``codes[j]`` lists each set's allowed category indices first, flattened, so the k-th
    allowed category of path p is at ``offset[j][p] + k``, and ``n_allowed[j]`` counts them.
    ``low[j]``/``high[j]`` are the drawable closed bounds for numeric attribute ``j``;
    ``class_probs`` is (paths, classes); ``totals`` is each path's hit + miss; ``constant`` holds
    the attributes that every path draws from the same set or interval (no per-path parameters).
    ``first[j]`` is each path's lowest allowed category, for the categorical attributes on which
    every path allows a run of consecutive categories (ordinal and single-category splits, whole
    domains): there the k-th allowed category is ``first + k``, so a draw needs no `codes` lookup.

    An integer attribute (`NumericAttribute.integer`) is in ``integer``: its bounds are the least
    and greatest whole numbers of each path's interval and ``span`` counts the whole numbers, so a
    draw is a whole number. A path interval between two whole numbers (possible only with cut
    points that are not whole) draws its lower bound, a value the path allows. ``unclamped`` are
    the integer attributes whose schema range lies within +-2**53, where every whole number is a
    float and a draw needs no clamp at ``high`` (`_numeric_column`).
    """

    schema: Schema
    allowed: dict[int, np.ndarray]
    codes: dict[int, np.ndarray]
    offset: dict[int, np.ndarray]
    n_allowed: dict[int, np.ndarray]
    low: dict[int, np.ndarray]
    high: dict[int, np.ndarray]
    span: dict[int, np.ndarray]
    class_probs: np.ndarray
    totals: np.ndarray
    integer: frozenset[int] = frozenset()
    unclamped: frozenset[int] = frozenset()
    constant: frozenset[int] = frozenset()
    first: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_tree(cls, tree: Tree) -> PathTable:
        """Compile ``tree``'s root-to-leaf paths, in `Tree.paths` order, into per-path arrays."""
        schema = tree.schema
        leaves, low, high, allowed = _walk_paths(tree)
        codes: dict[int, np.ndarray] = {}
        offset: dict[int, np.ndarray] = {}
        for j, mask in allowed.items():
            sets, set_of = _distinct_rows(mask)
            codes[j] = np.argsort(~sets, axis=1, kind="stable").astype(np.float64).ravel()
            offset[j] = (set_of * mask.shape[1]).astype(np.int32)
        n_allowed = {j: m.sum(axis=1).astype(np.float64) for j, m in allowed.items()}
        first = {}
        for j, mask in allowed.items():
            lowest, highest = mask.argmax(axis=1), mask.shape[1] - 1 - mask[:, ::-1].argmax(axis=1)
            if np.array_equal(highest - lowest + 1, n_allowed[j]):  # every set is a run of consecutive categories
                first[j] = lowest.astype(np.float64)
        span = {j: high[j] - low[j] for j in low}
        integer = frozenset(j for j in low if getattr(schema.attributes[j], "integer", False))
        for j in integer:
            whole_low, whole_high = np.ceil(low[j]), np.floor(high[j])
            holds = whole_low <= whole_high
            low[j] = np.where(holds, whole_low, low[j])
            high[j] = np.where(holds, whole_high, high[j])
            span[j] = np.where(holds, whole_high - whole_low + 1, 0.0)
        # the ignore below: integer: numeric attributes
        unclamped = frozenset(j for j in integer if max(abs(schema.attributes[j].low),  # type: ignore[union-attr]
                                                        # the ignore below: as above
                                                        abs(schema.attributes[j].high)) < 2.0**53)  # type: ignore[union-attr]
        constant = frozenset(j for j, m in allowed.items() if m.all()) | frozenset(
            j for j in low if np.all(low[j] == low[j][0]) and np.all(high[j] == high[j][0]))
        return cls(schema, allowed, codes, offset, n_allowed, low, high, span, _class_probs(schema, leaves),
                   np.array([leaf.total for leaf in leaves]), integer, unclamped, constant, first)

    @property
    def n_paths(self) -> int:
        return int(self.totals.shape[0])


def _distinct_rows(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a boolean matrix and each row's index among them.

    Rows are packed to bytes and compared as one opaque value each, far faster than
    `np.unique` with ``axis=0`` on a matrix of thousands of paths.
    """
    packed = np.ascontiguousarray(np.packbits(mask, axis=1))
    keys = packed.view(f"V{packed.shape[1]}").ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return mask[first], inverse.reshape(-1)


def _walk_paths(tree: Tree) -> tuple[list[Node], dict[int, np.ndarray], dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Each path's leaf, drawable numeric bounds and allowed categories, vectorized over the tree's nodes.

    Returns the leaves in `Tree.paths` order (depth first, edges in order), ``low[j]``/``high[j]``
    per numeric attribute and ``allowed[j]`` (paths, categories) per categorical one. One pass
    over the edges records what each edge imposes on its child: drawable bounds on its numeric
    attribute (`_edge_bounds`), an allowed-category mask on its categorical one. The constraints
    then flow from the root down one depth level at a time (`_flow_down`): a node keeps the
    tightest of its parent's and its edge's bounds and the intersection of their categories. The
    floats that satisfy every interval on a path are exactly those that satisfy their
    intersection, so a leaf's bounds are the intersection's drawable bounds without building
    interval objects. A numeric attribute that a path leaves no drawable value is a malformed path
    (ValueError naming its interval).
    """
    schema = tree.schema
    attrs = schema.attributes
    numeric = [j for j, attr in enumerate(attrs) if not isinstance(attr, CategoricalAttribute)]
    categorical = [j for j, attr in enumerate(attrs) if isinstance(attr, CategoricalAttribute)]
    slot = {j: k for k, j in enumerate(numeric)} | {j: k for k, j in enumerate(categorical)}
    sizes = [attrs[j].size for j in categorical]  # type: ignore[union-attr]  # categorical attributes
    block = np.cumsum([0, *sizes])  # categorical attribute k owns mask columns block[k]:block[k + 1]
    numeric_edges: list[tuple[int, int, float, float, bool, bool]] = []  # child, slot, the interval
    category_edges: list[tuple[int, int, int]] = []  # child, slot, how many codes
    category_codes: list[int] = []  # every categorical edge's codes, edge after edge
    for i, node in enumerate(tree.nodes):
        if not node.edges:
            continue
        # the ignore below: an inner node: its attribute is set
        attr, k = attrs[node.attribute], slot[node.attribute]  # type: ignore[index]
        for e in node.edges:
            constraint = e.constraint  # a category set under a categorical split, an interval under a numeric one
            if isinstance(attr, CategoricalAttribute):
                assert isinstance(constraint, CategorySet), f"node {i}: a categorical split with an interval edge"
                category_edges.append((e.child, k, len(constraint.codes)))
                category_codes.extend(constraint.codes)
            else:
                assert isinstance(constraint, Interval), f"node {i}: a numeric split with a category edge"
                numeric_edges.append((e.child, k, constraint.low, constraint.high,
                                      constraint.low_closed, constraint.high_closed))
    n_nodes = len(tree.nodes)
    low = np.full((n_nodes, len(numeric)), -np.inf)
    high = np.full((n_nodes, len(numeric)), np.inf)
    low[0] = [attrs[j].low for j in numeric]  # type: ignore[union-attr]  # the root: each schema range
    high[0] = [attrs[j].high for j in numeric]  # type: ignore[union-attr]  # numeric attributes
    if numeric_edges:
        child, at, edge_low, edge_high, low_closed, high_closed = (np.array(c)
                                                                   for c in zip(*numeric_edges, strict=True))
        low[child, at], high[child, at] = _edge_bounds(edge_low, edge_high, low_closed, high_closed,
                                                       low[0, at], high[0, at])
    allowed = np.ones((n_nodes, int(block[-1])), dtype=bool)
    if category_edges:
        child, at, count = (np.array(c, dtype=np.int64) for c in zip(*category_edges, strict=True))
        width = block[at + 1] - block[at]
        allowed[np.repeat(child, width), np.repeat(block[at], width) + _ranks(width)] = False
        allowed[np.repeat(child, count), np.repeat(block[at], count) + np.array(category_codes, dtype=np.int64)] = True
    _flow_down(tree.parents, low, high, allowed)
    leaf_ids = [i for i in preorder(tree.nodes) if not tree.nodes[i].edges]
    low, high, allowed = low[leaf_ids], high[leaf_ids], allowed[leaf_ids]
    for k, j in enumerate(numeric):
        empty = np.flatnonzero(low[:, k] > high[:, k])
        if empty.size:
            raise _undrawable(tree, int(empty[0]), j)
    return ([tree.nodes[i] for i in leaf_ids],
            {j: low[:, k].copy() for k, j in enumerate(numeric)},
            {j: high[:, k].copy() for k, j in enumerate(numeric)},
            {j: allowed[:, block[k]: block[k + 1]].copy() for k, j in enumerate(categorical)})


def _edge_bounds(low: np.ndarray, high: np.ndarray, low_closed: np.ndarray, high_closed: np.ndarray,
                 range_low: np.ndarray, range_high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closed bounds of the floats in the schema range ``[range_low, range_high]`` that satisfy each interval.

    An open end moves one float inward; an end outside the range becomes the range's closed end.
    """
    drawable_low = np.where(low_closed, low, np.nextafter(low, np.inf))
    drawable_high = np.where(high_closed, high, np.nextafter(high, -np.inf))
    return np.maximum(drawable_low, range_low), np.minimum(drawable_high, range_high)


def _ranks(lengths: np.ndarray) -> np.ndarray:
    """``0 .. length - 1`` for each length, concatenated."""
    ends = np.cumsum(lengths)
    ranks: np.ndarray = np.arange(int(ends[-1]) if ends.size else 0) - np.repeat(ends - lengths, lengths)
    return ranks


def _flow_down(parents: np.ndarray, low: np.ndarray, high: np.ndarray, allowed: np.ndarray) -> None:
    """Turn per-edge constraints (row i: what the edge into node i imposes) into per-node ones, in place.

    A node's bounds become the tightest of its parent's and its own, its allowed categories the
    intersection; depths come from the parent links by pointer doubling (log2 of the node count in
    vectorized steps), then each depth level is one vectorized step, parents before children.
    """
    n = parents.size
    has_parent = parents >= 0
    up = np.where(has_parent, parents, np.arange(n))  # the root points at itself
    depth = has_parent.astype(np.int64)  # distance to ``up``
    for _ in range(max(n - 1, 1).bit_length()):
        depth = depth + depth[up]
        up = up[up]
    by_depth = np.argsort(depth, kind="stable")
    starts = np.searchsorted(depth[by_depth], np.arange(1, int(depth.max()) + 2))
    for begin, end in zip(starts[:-1], starts[1:], strict=True):
        nodes = by_depth[begin:end]
        above = parents[nodes]
        low[nodes] = np.maximum(low[above], low[nodes])
        high[nodes] = np.minimum(high[above], high[nodes])
        allowed[nodes] = allowed[above] & allowed[nodes]


def _undrawable(tree: Tree, path_index: int, j: int) -> ValueError:
    """The error for a path whose interval on numeric attribute ``j`` holds no float of the schema range."""
    attr = tree.schema.attributes[j]
    interval = tree.paths()[path_index].constraint(j)
    # the ignore below: a numeric attribute
    return ValueError(f"path interval {interval.describe(attr)} holds no drawable value "  # type: ignore[union-attr,arg-type]
                      f"in [{attr.low:g}, {attr.high:g}]")  # type: ignore[union-attr]  # a numeric attribute


def leaf_class_distributions(tree: Tree) -> np.ndarray:
    """Per node of ``tree``, the class distribution PGEN draws its
    leaf's rows from (`_class_probs`); zeros at inner nodes."""
    table = np.zeros((len(tree.nodes), tree.schema.n_classes))
    table[tree.leaves] = _class_probs(tree.schema, [tree.nodes[i] for i in tree.leaves])
    return table


def _class_probs(schema: Schema, leaves: Sequence[Node]) -> np.ndarray:
    """Per-path class distribution from its leaf's counts, or from hit/miss with the miss spread uniformly."""
    c = schema.n_classes
    n = len(leaves)
    disclosed = [p for p, leaf in enumerate(leaves) if leaf.counts is not None]
    probs = np.zeros((n, c))
    if disclosed:
        probs[disclosed] = np.array([leaves[p].counts for p in disclosed], dtype=np.float64)
    if len(disclosed) < n:
        hit_miss = [p for p, leaf in enumerate(leaves) if leaf.counts is None]
        hit = np.array([leaves[p].hit for p in hit_miss], dtype=np.float64)
        miss = np.array([leaves[p].miss for p in hit_miss], dtype=np.float64)
        label = np.array([leaves[p].label for p in hit_miss], dtype=np.int64)
        probs[hit_miss] = (miss / (c - 1))[:, None]
        probs[hit_miss, label] = hit
    sums = probs.sum(axis=1, keepdims=True)
    normalised: np.ndarray = np.divide(probs, sums, out=np.full_like(probs, 1.0 / c), where=sums > 0)
    return normalised


def pgen(
    tree: Tree,
    *,
    rows: int | None = None,
    rng: np.random.Generator,
    class_assignment: ClassAssignment = "exact",
    shuffle: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Generate a pseudo table ``(X, y)`` from a tree's paths in one piece.

    Parameters
    ----------
    tree:
        The released tree.
    rows:
        Total rows to generate, shared among paths in proportion to hit + miss; None generates
        exactly round(hit + miss) rows per path.
    rng:
        The random generator; equal seeds give equal tables.
    class_assignment:
        ``"exact"`` (class shares follow the disclosed distribution exactly) or ``"sample"``.
    shuffle:
        Shuffle the rows; by default they come grouped by path (and class), which the global
        learners do not mind and which saves a full permutation. Files for people are shuffled.
    """
    chunks = list(pgen_chunks(tree, rows=rows, rng=rng, class_assignment=class_assignment,
                              chunk_rows=None, shuffle=shuffle))
    return chunks[0]


def ensemble_rows(trees: Sequence[Tree], *, scale: float, beta: float) -> np.ndarray:
    """Rows to generate from each tree of an ensemble: ``scale`` pseudo rows per estimated real row.

    Each k-AnonToRdt tree counts its own Bernoulli(beta) sample of the same table, so a tree's
    released root total estimates beta * n (less what suppression zeroed), and every tree is a
    view of the same n rows, not of n more. The ensemble therefore yields
    ``round(scale * sum_i total_i / (beta * Nt))`` rows in all: the mean released total undone
    for the sampling, about ``scale * n``. That keeps ``pgen_scale`` meaning what it means for a
    single APT tree (pseudo rows per real row), weighs owners in the pooled table by their table
    sizes whatever beta each used, and does not multiply the table by Nt. Generating only
    ``scale * total_i / Nt`` per tree would shrink an owner's share by beta (to 1 % at the paper's
    beta = 0.01) and starve the global learners. The total is shared among the trees in
    proportion to their released totals by largest remainders (`allocate_rows`), so the counts
    are exact integers; a tree whose counts were all suppressed contributes nothing.

    Parameters
    ----------
    trees:
        The released trees.
    scale:
        Pseudo rows per (estimated) real row, > 0.
    beta:
        The per-tree sampling rate the release states, in (0, 1]; 1 for trees that count every row.
    """
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    if not 0 < beta <= 1:
        raise ValueError(f"beta must lie in (0, 1], got {beta}")
    totals = np.array([tree.root.total for tree in trees], dtype=np.float64)
    return allocate_rows(totals, int(round(scale * totals.sum() / (beta * len(trees)))))


def pgen_ensemble(
    trees: Sequence[Tree],
    *,
    scale: float,
    beta: float,
    rng: np.random.Generator,
    class_assignment: ClassAssignment = "exact",
) -> tuple[np.ndarray, np.ndarray]:
    """PGEN on an ensemble: each tree's share of `ensemble_rows` drawn from its own paths, stacked in tree order."""
    parts = [pgen(tree, rows=int(rows), rng=rng, class_assignment=class_assignment)
             for tree, rows in zip(trees, ensemble_rows(trees, scale=scale, beta=beta), strict=False)]
    return np.vstack([X for X, _ in parts]), np.concatenate([y for _, y in parts])


def pgen_chunks(
    tree: Tree,
    *,
    rows: int | None = None,
    rng: np.random.Generator,
    class_assignment: ClassAssignment = "exact",
    chunk_rows: int | None = DEFAULT_CHUNK_ROWS,
    shuffle: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Generate PGEN rows as a stream of ``(X, y)`` chunks of at most ``chunk_rows`` rows.

    The concatenated stream has exactly the per-path row counts and (under exact assignment)
    per-path class counts of a single `pgen` call; rows are grouped by path across chunks and,
    with ``shuffle``, shuffled within each chunk. ``chunk_rows=None`` yields one chunk (possibly empty).
    """
    if class_assignment not in ("exact", "sample"):
        raise ValueError(f"class_assignment is {class_assignment!r}; expected 'exact' or 'sample'")
    if rows is not None and rows < 0:
        raise ValueError(f"rows must be non-negative, got {rows}")
    if chunk_rows is not None and chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    table = PathTable.from_tree(tree)
    per_path = np.rint(table.totals).astype(np.int64) if rows is None else allocate_rows(table.totals, rows)
    if class_assignment == "exact":
        cells = allocate_rows(table.class_probs, per_path).ravel()  # (path, class) row-major
    else:
        cells = per_path
    n_total = int(per_path.sum())
    step = n_total if chunk_rows is None else chunk_rows
    bounds = np.cumsum(np.concatenate([[0], cells]))
    start = 0
    while True:
        end = min(start + step, n_total)
        overlap = np.clip(np.minimum(bounds[1:], end) - np.maximum(bounds[:-1], start), 0, None)
        yield _generate(table, overlap, class_assignment, rng, shuffle)
        start = end
        if start >= n_total:
            break


class _RowPaths:
    """Which path each row of a block of rows comes from, and per-path parameters spread over those rows.

    Unshuffled rows come in runs, one per path (``runs``: a slice of paths and their run lengths), so a per-path
    array is spread with `np.repeat`, a sequential fill; shuffled rows carry one path id each
    (``pid``) and are gathered with `np.take`. Both read only small per-path tables.
    """

    def __init__(self, pid: np.ndarray | None = None, runs: tuple[slice, np.ndarray] | None = None) -> None:
        self.pid = pid
        self.runs = runs

    def spread(self, per_path: np.ndarray) -> np.ndarray:
        """``per_path`` (one value per path) as one value per row of the block."""
        if self.runs is not None:
            paths, lengths = self.runs
            return np.repeat(per_path[paths], lengths)
        assert self.pid is not None, "a block of rows carries its runs or its rows' path ids"
        per_row: np.ndarray = np.take(per_path, self.pid, mode="clip")
        return per_row


def _generate(
    table: PathTable, cells: np.ndarray, class_assignment: ClassAssignment, rng: np.random.Generator, shuffle: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Rows for the given per-(path, class) or per-path counts, vectorized over rows.

    Rows are i.i.d. given their path, so shuffling the (path, class) index vector before drawing
    values shuffles the table without moving the value matrix. Values are drawn in blocks of
    `BLOCK_ROWS` rows so that temporaries stay in cache, into a column-major array; attributes that
    every path draws alike skip the per-path parameters.
    """
    schema = table.schema
    c = schema.n_classes
    pid: np.ndarray | None = None  # one path id per row, only when rows are shuffled
    if class_assignment == "exact":
        if shuffle:  # one int32 cell index (path * classes + class) per row, shuffled in place
            cell = np.repeat(np.arange(table.n_paths * c, dtype=np.int32), cells)
            rng.shuffle(cell)
            pid, y = np.divmod(cell, np.int32(c))
            y = y.astype(np.int64)
        else:
            y = np.repeat(np.tile(np.arange(c, dtype=np.int64), table.n_paths), cells)
        path_rows = cells.reshape(table.n_paths, c).sum(axis=1)
    else:
        row_pid = np.repeat(np.arange(table.n_paths, dtype=np.int32), cells)
        if shuffle:
            rng.shuffle(row_pid)
            pid = row_pid
        cum = np.cumsum(table.class_probs, axis=1)
        y = (rng.random(row_pid.size)[:, None] >= cum[row_pid, :-1]).sum(axis=1).astype(np.int64)
        path_rows = cells
    n = y.size
    path_ends = np.cumsum(path_rows)
    X = np.empty((n, schema.n_attributes), order="F")
    u = np.empty(min(n, BLOCK_ROWS))
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        rows = _RowPaths(pid=pid[start:stop]) if pid is not None else _RowPaths(runs=_runs(path_ends, start, stop))
        block_u = u[: stop - start]
        for j in range(schema.n_attributes):
            column = X[start:stop, j]
            if j in table.first:
                rng.random(out=column)
                _category_run_column(table, j, rows, column)
            elif j in table.allowed:
                rng.random(out=block_u)
                _categorical_column(table, j, rows, block_u, column)
            else:
                rng.random(out=column)
                _numeric_column(table, j, rows, column)
    return X, y


def _runs(path_ends: np.ndarray, start: int, stop: int) -> tuple[slice, np.ndarray]:
    """The paths (a slice) and run lengths of rows ``start:stop`` when
    rows are grouped by path (``path_ends``: cumulative counts)."""
    first = int(np.searchsorted(path_ends, start, side="right"))
    last = int(np.searchsorted(path_ends, stop, side="left"))
    ends = np.minimum(path_ends[first: last + 1], stop)
    return slice(first, last + 1), np.diff(ends, prepend=start)


def _category_run_column(table: PathTable, j: int, rows: _RowPaths, values: np.ndarray) -> None:
    """Turn uniforms on [0, 1) in ``values`` into uniform categories of each row's run of allowed categories, in place.

    The category is ``first + floor(u * n_allowed)``: the one the `codes` lookup of
    `_categorical_column` picks for the same uniform, computed in three passes and no gather.
    """
    if j in table.constant:  # every path allows every category
        values *= table.allowed[j].shape[1]
        np.floor(values, out=values)
        return
    values *= rows.spread(table.n_allowed[j])
    np.floor(values, out=values)
    values += rows.spread(table.first[j])


def _categorical_column(table: PathTable, j: int, rows: _RowPaths, u: np.ndarray, out: np.ndarray) -> None:
    """Uniform category index among each row's allowed set, written into ``out``."""
    u *= rows.spread(table.n_allowed[j])
    k = u.astype(np.int32)
    k += rows.spread(table.offset[j])
    np.take(table.codes[j], k, out=out, mode="clip")


def _numeric_column(table: PathTable, j: int, rows: _RowPaths, values: np.ndarray) -> None:
    """Turn uniforms on [0, 1) in ``values`` into uniform values on each row's drawable interval, in place.

    An integer attribute draws ``low + floor(u * span)``, a uniform whole number. Within +-2**53
    (``table.unclamped``) it needs no clamp: for u < 1 and a whole ``span`` the rounded product
    stays below ``span``, so the draw is at most ``high``, exactly. A real draw ``low + u * span``
    can round past ``high`` and is clamped. Transforming the uniforms where they were drawn saves
    a pass over a scratch array.
    """
    integer, clamp = j in table.integer, j not in table.unclamped
    if j in table.constant:  # the same interval on every path
        values *= table.span[j][0]
        if integer:
            np.floor(values, out=values)
        values += table.low[j][0]
        if clamp:
            np.minimum(values, table.high[j][0], out=values)
        return
    values *= rows.spread(table.span[j])
    if integer:
        np.floor(values, out=values)
    values += rows.spread(table.low[j])
    if clamp:
        np.minimum(values, rows.spread(table.high[j]), out=values)


def uniform_rows(schema: Schema, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows drawn uniformly from the whole domain: categories uniformly, numerics on their range."""
    X = np.empty((n, schema.n_attributes))
    for j, attr in enumerate(schema.attributes):
        if isinstance(attr, CategoricalAttribute):
            X[:, j] = rng.integers(0, attr.size, size=n)
        elif attr.integer:
            X[:, j] = rng.integers(math.ceil(attr.low), math.floor(attr.high) + 1, size=n)
        else:
            X[:, j] = rng.uniform(attr.low, attr.high, size=n) if attr.high > attr.low else attr.low
    return X


def basegen(tree: Tree | Sequence[Tree], *, rows: int | None = None,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BASEGEN: uniform tuples from the data space labelled by the released model (Sharkey et al. §4).

    ``tree`` is one tree, or an ensemble whose label is its Alg. 2 vote (summed leaf counts,
    `modelshare.common.trees.learners.random_tree.ensemble_predict_proba`). ``rows`` defaults to the number of
    training tuples the (first) tree discloses at its root.
    """
    trees = (tree,) if isinstance(tree, Tree) else tuple(tree)
    n = int(round(trees[0].root.total)) if rows is None else rows
    if n < 0:
        raise ValueError(f"rows must be non-negative, got {n}")
    X = uniform_rows(trees[0].schema, n, rng)
    if len(trees) == 1:
        return X, trees[0].predict(X)
    from modelshare.common.trees.learners.random_tree import ensemble_predict_proba  # scikit-learn only when needed

    return X, ensemble_predict_proba(trees, X).argmax(axis=1)


# ---------------------------------------------------------------- regression
# PGEN for released DiffPETs regression forests: pseudo rows (X, y) from every leaf's region and mean.
#
# The classification PGEN (`modelshare.miner_node.pgen`) already turns a tree's paths into rows that satisfy
# them exactly; a `modelshare.common.trees.regression.RegressionTree` exposes its structure as such a tree (its
# classification mirror, `RegressionTree.tree`, whose leaves disclose max(N', 0) rows), so the
# attributes are generated by `pgen` itself and only the target is added here:
#
# * Rows: like `modelshare.miner_node.pgen.pgen_ensemble` with beta = 1 (every DiffPETs tree reads the whole
#   table): ``round(scale * mean_t sum_leaves max(N'_leaf, 0))`` rows in all, about ``scale * n``,
#   shared among the trees in proportion to their released totals and, within a tree, among its
#   leaves in proportion to max(N', 0), both by largest remainders (`ensemble_rows`, `pgen`). A leaf
#   whose noisy count is not positive yields no rows. Clamping at 0 biases the total upwards by the
#   positive part of the noise of the small leaves, a few rows per leaf at the budgets in use.
# * Attributes: uniform on the leaf's region, as `pgen` draws them (categorical: uniform over the
#   allowed categories; numeric: uniform on the path's interval within the public range).
# * Target: every row of a leaf gets the leaf's released mean, clip(S' / max(N', 1), 0, 1), on the
#   original scale, with no spread. The release says nothing about the spread inside a leaf (no
#   budget was spent on it), so any spread would be invented; squared-error learners estimate
#   conditional means, which a zero-spread table hands them exactly, while invented noise would only
#   blur the leaves' means. The price: the pseudo table's target variance is too small, so it is
#   fit for mean regression, not for estimating the target's distribution.


def pgen_regression_tree(tree: RegressionTree, *, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` pseudo rows from one regression tree, shared among its leaves by max(N', 0).

    Parameters
    ----------
    tree:
        The released tree.
    rows:
        How many rows to generate (>= 0).
    rng:
        The random generator; equal seeds give equal tables.

    Returns
    -------
    (X, y)
        Encoded attributes satisfying each row's leaf path exactly, and the leaf's mean on the
        target's original scale.

    Raises
    ------
    ValueError
        Negative ``rows``, or rows asked of a tree whose leaves all have N' <= 0.
    """
    if rows < 0:
        raise ValueError(f"rows must be non-negative, got {rows}")
    X, _ = pgen(tree.tree, rows=rows, rng=rng)
    return X, tree.predict(X)


def pgen_regression(forest: RegressionForest, *, scale: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """PGEN on a regression forest: each tree's share of the pseudo table, stacked in tree order.

    Parameters
    ----------
    forest:
        The released forest.
    scale:
        Pseudo rows per (estimated) real row, > 0.
    rng:
        The random generator.

    Returns
    -------
    (X, y)
        About ``scale * n`` rows (module docstring).
    """
    mirrors = [tree.tree for tree in forest.trees]
    parts = [pgen_regression_tree(tree, rows=int(rows), rng=rng)
             for tree, rows in zip(forest.trees, ensemble_rows(mirrors, scale=scale, beta=1.0), strict=False)]
    return np.vstack([X for X, _ in parts]), np.concatenate([y for _, y in parts])
