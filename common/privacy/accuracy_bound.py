"""The price of (c,l)-diversity in hit/miss form: an upper bound on any admissible tree's accuracy.

A tree release meets ``cl-diversity:c=C,l=L`` in hit/miss form when every leaf, with hit ``h``
(its majority count) and miss ``m`` (the rest of its ``n = h + m`` rows), has ``m >= L - 1`` and
``h < C m / (L - 1)``. The second condition is ``(L - 1 + C) h < C n``: no class may hold a share
``C / (C + L - 1)`` or more of a leaf. A leaf classifies at most ``h`` of its rows correctly, and a
tree is a partition of the table into leaves, so the best accuracy any admissible tree reaches on a
table is at most the best total hit over the partitions of the table into admissible cells that a
tree could form. `cl_hit_miss_bound` computes an upper bound on that, by linear programming over a
relaxation that keeps the structure that matters (docs/privacy.md, "The price of (c,l)-diversity").

The relaxation, for a set ``A`` of one or two categorical attributes (``A`` may be empty):

* a *column* is one distinct value tuple of the other attributes, and a *cell* one value tuple of
  ``A``; every row lies in one (column, cell) pair;
* a tree leaf is a conjunction of per-attribute tests, so it is ``S x R``: a subset ``S`` of ``A``'s
  values, and a set ``R`` of columns (the leaf's test on the other
  attributes, relaxed to *any* set of columns). In each column of ``R`` it holds every row whose
  cell is in ``S``, and the leaves of a tree cover each cell of each column exactly once;
* the leaves with the same ``(S, k)``, ``k`` the class they are credited with, are pooled: summing
  each leaf's constraints gives the pool's, so the pool may do anything the leaves could. A column
  may also be split fractionally between pools (the linear-programming relaxation).

Each step only removes constraints, so the program's optimum is >= the accuracy of every
admissible tree, for every ``A``; the bound reported is the least over the candidate sets. Where
the program is small it is solved with integer variables: its linear optimum rounded down (the
objective counts whole rows), then HiGHS's dual bound if lower (still an upper bound when the
time limit stops it early, which the rounding makes short); with ``A`` equal to a table's only attribute this is exact,
since every grouping of one categorical attribute's values is a tree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, linprog, milp

from modelshare.common.data.schema import CategoricalAttribute, Schema

__all__ = ["AccuracyBound", "cl_hit_miss_bound", "DEFAULT_MAX_SUBSETS"]

DEFAULT_MAX_SUBSETS = 64
"""Largest number of value-subset products ``S`` a candidate attribute set may have (a 6-valued
attribute has 63; two 3-valued ones 49): the program has one variable per (column type, S, class)."""

_INTEGER_VARIABLES = 4000
"""Programs with at most this many variables are solved with integer variables (tighter)."""

_TIME_LIMIT = 1.0
"""Seconds HiGHS may spend on one linear program."""

_INTEGER_TIME_LIMIT = 0.25
"""Seconds HiGHS may spend on one integer program before its dual bound is taken."""

_ROUNDING_SLACK = 1e-6
"""Relative slack before a linear optimum is rounded down, so that solver round-off never drops a whole row."""

_SMALL_TABLE = 2000
"""Tables of at most this many rows get the integer program on every candidate, not only the best."""

_SOLVER_SLACK = 1e-6
"""Share of the rows by which a skipping floor must clear the bound found, for the solver's optimality tolerance."""

_MAX_CELLS = 20_000_000
"""Largest (columns x cells x classes) count tensor a candidate may build."""


@dataclass(frozen=True)
class AccuracyBound:
    """An upper bound on the accuracy of any tree whose every leaf meets a hit/miss (c,l) requirement.

    ``accuracy`` is ``correct / rows``: the share of the table's rows the best admissible tree could
    classify correctly, at most. ``attributes`` names the attribute set whose relaxation gave it
    (empty: finest cells only), ``candidates`` every set tried with its bound, ``integer`` whether
    that bound came from the integer program, ``skipped`` the sets whose program was not solved
    because a lower bound on its optimum (given) already reached the least bound found.
    """

    requirement: str
    accuracy: float
    correct: float
    rows: int
    attributes: tuple[str, ...]
    integer: bool
    candidates: dict[str, float]
    skipped: dict[str, float]

    def to_dict(self) -> dict[str, object]:
        """The bound as JSON-ready fields (what ``--json`` prints)."""
        return {"requirement": self.requirement, "accuracy": self.accuracy, "correct_rows": self.correct,
                "rows": self.rows, "attributes": list(self.attributes), "integer": self.integer,
                "candidates": dict(self.candidates), "skipped": dict(self.skipped)}


def _check(X: np.ndarray, y: np.ndarray, schema: Schema, c: float, l: int) -> None:  # noqa: E741
    """Refuse inputs the bound cannot be computed on, naming what is wrong."""
    if X.ndim != 2 or X.shape[1] != schema.n_attributes:
        raise ValueError(f"X must have shape (rows, {schema.n_attributes}) for the schema's attributes, "
                         f"got {X.shape}")
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have one class per row of X ({X.shape[0]}), got shape {y.shape}")
    if X.shape[0] == 0:
        raise ValueError("the bound needs at least one row")
    if not (c > 0 and math.isfinite(c)) or l < 2:
        raise ValueError(f"(c,l)-diversity needs c > 0 and integer l >= 2, got c={c}, l={l}")
    if y.min() < 0 or y.max() >= schema.n_classes:
        raise ValueError(f"y holds class indices outside 0..{schema.n_classes - 1}")


def _strict_margin(c: float) -> float:
    """How far below 0 ``(l-1+c) h - c n`` must lie for integer h, n: 1/q for c = p/q, else 0 (non-strict)."""
    frac = Fraction(c)
    return 1.0 / frac.denominator if frac.denominator <= 1_000_000 else 0.0


def _subset_products(sizes: Sequence[int]) -> np.ndarray:
    """Membership (products x cells) of every product of non-empty value subsets of the attributes."""
    per_attribute = []
    for size in sizes:
        masks = np.arange(1, 2 ** size)
        per_attribute.append((masks[:, None] >> np.arange(size)[None, :]) & 1)
    member = np.ones((1, 1), dtype=np.int64)
    for m in per_attribute:
        member = (member[:, None, :, None] * m[None, :, None, :]).reshape(member.shape[0] * m.shape[0], -1)
    return member.astype(np.float64)


def _column_types(X: np.ndarray, y: np.ndarray, attrs: tuple[int, ...], sizes: Sequence[int],
                  n_classes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Distinct (cells x classes) count matrices of the columns, with how many columns have each.

    None when the count tensor would be too large to build.
    """
    n, d = X.shape
    rest = [j for j in range(d) if j not in attrs]
    if rest:
        _, column = np.unique(X[:, rest], axis=0, return_inverse=True)
        column = column.reshape(-1)
    else:
        column = np.zeros(n, dtype=np.int64)
    n_cells = int(np.prod(sizes)) if sizes else 1
    cell = np.zeros(n, dtype=np.int64)
    for j, size in zip(attrs, sizes, strict=False):
        cell = cell * size + X[:, j].astype(np.int64)
    n_columns = int(column.max()) + 1
    if n_columns * n_cells * n_classes > _MAX_CELLS:
        return None
    flat = (column * n_cells + cell) * n_classes + y
    counts = np.bincount(flat, minlength=n_columns * n_cells * n_classes).reshape(n_columns, n_cells * n_classes)
    types, multiplicity = np.unique(counts, axis=0, return_counts=True)
    return types.reshape(-1, n_cells, n_classes).astype(np.float64), multiplicity.astype(np.float64)


def _solve(types: np.ndarray, multiplicity: np.ndarray, member: np.ndarray, c: float, l: int,  # noqa: E741
           integer: bool) -> tuple[float, bool] | None:
    """The relaxation's optimum (most correct rows) over the column types; see the module docstring.

    Variables: ``u[t, s, k]`` (columns of type t whose piece in product s is pooled with label k)
    and ``z[s, k]`` (the pool is used). Returns the bound and whether it bounds the integer program (its
    linear optimum rounded down, or its dual bound if lower),
    or None when no solver finished in time (the candidate is then left out, which keeps the bound valid).
    """
    T, n_cells, K = types.shape
    P = member.shape[0]
    pieces = np.einsum("pa,tak->tpk", member, types)  # (T, P, K) class counts of each piece
    sizes = pieces.sum(axis=2)  # (T, P)
    present = types.sum(axis=2) > 0  # (T, cells)
    usable = sizes > 0  # a product missing every present cell of a column adds nothing
    t_idx, p_idx = np.nonzero(usable)
    n_u = t_idx.size * K
    k_idx = np.tile(np.arange(K), t_idx.size)
    t_u, p_u = np.repeat(t_idx, K), np.repeat(p_idx, K)
    n_var = n_u + P * K
    z_col = n_u + p_u * K + k_idx  # the z of each u's pool

    objective = np.zeros(n_var)
    objective[:n_u] = -pieces[t_u, p_u, k_idx]

    # cover: every present cell of every column type covered exactly `multiplicity` times
    cover_t, cover_a = np.nonzero(present)
    row_of = -np.ones((T, n_cells), dtype=np.int64)
    row_of[cover_t, cover_a] = np.arange(cover_t.size)
    hits = member[p_u][:, :] * present[t_u]  # (n_u, cells): cells of its column the variable covers
    var_i, cell_i = np.nonzero(hits)
    cover = sparse.csr_matrix((np.ones(var_i.size), (row_of[t_u[var_i], cell_i], var_i)),
                              shape=(cover_t.size, n_var))
    need = multiplicity[cover_t]

    # per pool (p, k) and class j: (l-1+c) V_j - c N + margin z <= 0 and N - V_j - (l-1) z >= 0
    pool = p_u * K + k_idx
    j_all = np.arange(K)
    rows = (pool[:, None] * K + j_all[None, :]).reshape(-1)
    cols = np.repeat(np.arange(n_u), K)
    v = pieces[t_u, p_u][:, :].reshape(-1)
    n_piece = np.repeat(sizes[t_u, p_u], K)
    z_rows = np.arange(P * K * K)
    z_cols = n_u + z_rows // K
    cap = sparse.csr_matrix((np.concatenate([(l - 1 + c) * v - c * n_piece, np.full(z_rows.size, _strict_margin(c))]),
                             (np.concatenate([rows, z_rows]), np.concatenate([cols, z_cols]))),
                            shape=(P * K * K, n_var))
    floor = sparse.csr_matrix((np.concatenate([n_piece - v, np.full(z_rows.size, -(l - 1.0))]),
                               (np.concatenate([rows, z_rows]), np.concatenate([cols, z_cols]))),
                              shape=(P * K * K, n_var))
    # z of a pool is 1 once any column joins it: u / multiplicity <= z
    link = sparse.csr_matrix((np.concatenate([1.0 / multiplicity[t_u], -np.ones(n_u)]),
                              (np.concatenate([np.arange(n_u), np.arange(n_u)]),
                               np.concatenate([np.arange(n_u), z_col]))),
                             shape=(n_u, n_var))
    upper = np.concatenate([multiplicity[t_u], np.ones(P * K)])
    inequalities = sparse.vstack([cap, -floor, link]).tocsr()
    relaxed = _relaxation(objective, inequalities, cover, need, upper)
    if relaxed is None:
        return None
    best = -float(relaxed.fun)
    if not integer or n_var > _INTEGER_VARIABLES:
        return best, False
    # every objective coefficient is a row count and every variable an integer, so the integer optimum is a
    # whole number: the linear optimum rounded down bounds it, and the solver need only beat that
    whole = float(math.floor(best + _ROUNDING_SLACK * max(1.0, best)))
    result = milp(objective, constraints=[LinearConstraint(cover, need, need),
                                          LinearConstraint(inequalities, -np.inf, 0.0)],
                  bounds=Bounds(np.zeros(n_var), upper), integrality=np.ones(n_var),
                  options={"time_limit": _INTEGER_TIME_LIMIT})
    dual = getattr(result, "mip_dual_bound", None)  # proven even when the time limit stops it: never the incumbent
    if dual is not None and np.isfinite(dual):
        return min(whole, -float(dual)), True
    return whole, True


def _relaxation(objective: np.ndarray, inequalities: sparse.csr_matrix, cover: sparse.csr_matrix, need: np.ndarray,
                upper: np.ndarray) -> OptimizeResult | None:
    """The linear program solved to optimality, or None if no HiGHS method does so within its time limit.

    Both methods are tried because these programs are degenerate: on some the simplex stalls and on
    others the interior-point method does.
    """
    for method in ("highs-ds", "highs-ipm"):
        result = linprog(objective, A_ub=inequalities, b_ub=np.zeros(inequalities.shape[0]), A_eq=cover, b_eq=need,
                         bounds=np.column_stack([np.zeros(objective.size), upper]), method=method,
                         options={"time_limit": _TIME_LIMIT})
        if result.status == 0:
            return result
    return None


def _categories(schema: Schema, j: int) -> int:
    """The number of categories of attribute ``j``, which the bound's attribute sets only ever name if categorical."""
    attr = schema.attributes[j]
    assert isinstance(attr, CategoricalAttribute), f"attribute {j} is not categorical"
    return attr.size


def _bound_for(X: np.ndarray, y: np.ndarray, schema: Schema, attrs: tuple[int, ...], c: float, l: int,  # noqa: E741
               integer: bool) -> tuple[float, bool] | None:
    """The relaxation's bound (correct rows) for one attribute set, or None if too large to build."""
    sizes = [_categories(schema, j) for j in attrs]
    built = _column_types(X, y, attrs, sizes, schema.n_classes)
    if built is None:
        return None
    types, multiplicity = built
    return _solve(types, multiplicity, _subset_products(sizes), c, l, integer)


def cl_hit_miss_bound(X: np.ndarray, y: np.ndarray, schema: Schema, c: float, l: int, *,  # noqa: E741
                      max_subsets: int = DEFAULT_MAX_SUBSETS, integer: bool = True) -> AccuracyBound:
    """An upper bound on the accuracy, on these rows, of any tree whose leaves all meet hit/miss (c,l).

    Tries the empty attribute set (finest cells) and every categorical attribute with at most
    ``max_subsets`` non-empty value subsets as linear programs, then the integer program on the
    one with the least bound (on every one for tables of at most 2,000 rows), and reports the least bound (every one is
    valid; see the module docstring). A program no solver finishes within its time limit is left out.
    """
    X = np.asarray(X)
    y = np.asarray(y, dtype=np.int64)
    _check(X, y, schema, c, l)
    names = schema.names
    rows = int(y.shape[0])
    # every leaf's hit is below c/(c+l-1) of its rows, so the whole tree's is: always valid
    found: dict[tuple[int, ...] | None, tuple[float, bool]] = {None: (c / (c + l - 1) * rows, False)}
    small = X.shape[0] <= _SMALL_TABLE
    empty = _bound_for(X, y, schema, (), c, l, integer and small)
    if empty is not None:
        found[()] = empty
    singles = [j for j, a in enumerate(schema.attributes)
               if isinstance(a, CategoricalAttribute) and 2 ** a.size - 1 <= max_subsets and a.size >= 2]
    if small:  # every candidate gets its integer program, so none may be skipped on a linear value
        floors = {j: -math.inf for j in singles}
    else:
        floors = {j: _whole_columns(X, y, schema, j, c, l) for j in singles}
    skipped: dict[tuple[int, ...], float] = {}
    for j in sorted(singles, key=lambda j: floors[j]):
        if floors[j] - _SOLVER_SLACK * rows >= min(value for value, _ in found.values()):
            skipped[(j,)] = floors[j]  # its program's optimum is at least this: it cannot lower the bound
            continue
        value = _bound_for(X, y, schema, (j,), c, l, integer and small)
        if value is not None:
            found[(j,)] = value
    ranked = sorted(found, key=lambda key: found[key][0])
    best = ranked[0]
    if integer and not small and best is not None:  # the integer program on the most telling set only
        tighter = _bound_for(X, y, schema, best, c, l, True)
        if tighter is not None:
            found[best] = min(found[best], tighter)
    correct = min(found[best][0], float(rows))
    return AccuracyBound(
        requirement=f"cl-diversity:c={c:g},l={l}", accuracy=correct / rows, correct=correct, rows=rows,
        attributes=() if best is None else tuple(names[j] for j in best), integer=found[best][1],
        candidates={_label(key, names): value / rows for key, (value, _) in found.items()},
        skipped={_label(key, names): value / rows for key, value in skipped.items()})


def _whole_columns(X: np.ndarray, y: np.ndarray, schema: Schema, j: int, c: float, l: int) -> float:  # noqa: E741
    """A lower bound on attribute ``j``'s linear program: its optimum when every leaf takes all of ``j``'s values.

    Every solution of that restricted program (the finest-cells program on the table without column
    ``j``: each leaf takes whole columns) is a solution of ``j``'s, with ``S`` the full value set, so
    ``j``'s optimum is at least this. -inf when no solver finishes (nothing may then be skipped).
    """
    value = _bound_for(np.delete(X, j, axis=1), y, schema, (), c, l, False)
    return -math.inf if value is None else value[0]


def _label(key: tuple[int, ...] | None, names: Sequence[str]) -> str:
    """How a candidate is named in `AccuracyBound.candidates`."""
    if key is None:
        return "(leaf share cap)"
    return "+".join(names[j] for j in key) or "(finest cells)"
