"""(beta, eps, delta)-DPS accounting of k-AnonToRdt (Waseda, Nojima, Wang 2024, Thm 1, Cor. 1, Table 5).

k-AnonToRdt trains every random decision tree on its own Bernoulli(beta) sample of the rows, then
sets every leaf/label count below k to 0. Each tree is therefore a *strongly safe k-anonymization*
(Definition 3: a data-independent map g from rows to cells, counts per cell, counts < k zeroed)
preceded by beta-sampling, and Theorem 1 (Theorem 5 of Li, Qardaji and Su, "On sampling,
anonymization, and differential privacy", ASIACCS 2012) gives its (beta, eps, delta)-DPS guarantee:
for 0 < beta < 1 and eps >= -ln(1 - beta),

    delta = d(k, beta, eps) = max_{n >= ceil(k/gamma - 1)}  sum_{j > gamma*n}^{n} f(j; n, beta),
    gamma = (e^eps - 1 + beta) / e^eps,            (Theorem 1, eq. (3); Corollary 1 repeats it, eq. (6))

with f(j; n, beta) the Binomial(n, beta) probability mass, so the inner sum is the upper tail
P[Bin(n, beta) > gamma*n]. (The paper's text extraction lost the symbols; this reading is the one
of Li et al.'s Theorem 5 and reproduces the paper's Table 5, see tests/common/privacy/test_dps.py.) Corollary 1 composes
the Nt independently sampled trees (Theorem 2,
basic composition): the forest is (beta, Nt*eps, Nt*delta)-DPS, i.e. a total budget eps_total
gives every tree eps = eps_total / Nt and the forest delta_total = Nt * d(k, beta, eps).

Settings outside the theorem's range raise :class:`DPSError` (a ``ValueError``) naming the
parameter and the condition it breaks; the module never extrapolates the formula beyond them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np
from scipy.stats import binom

__all__ = [
    "DPSError",
    "min_epsilon",
    "dps_delta",
    "DPSGuarantee",
    "compose",
    "Table5",
    "TABLE5_K",
    "TABLE5_BETA",
    "TABLE5_EPSILON_TOTAL",
    "TABLE5_TREES",
    "table5",
]

# Table 5 of the paper: Nt*delta for k in {5, 10, 20}, beta in {0.01, 0.1, 0.4}, Nt*eps = 1..9, Nt = 10.
TABLE5_K: tuple[int, ...] = (5, 10, 20)
TABLE5_BETA: tuple[float, ...] = (0.01, 0.1, 0.4)
TABLE5_EPSILON_TOTAL: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
TABLE5_TREES = 10

_MAX_THRESHOLDS = 10**8  # safety stop of the search below; unreachable for sane parameters
_LOG_TINIEST = math.log(math.ulp(0.0))  # log of the smallest positive double (~ -744.4)


class DPSError(ValueError):
    """A setting outside the range where Theorem 1 / Corollary 1 give a guarantee."""


def min_epsilon(beta: float) -> float:
    """-ln(1 - beta): the smallest per-tree eps for which Theorem 1 holds at sampling rate beta."""
    _check_beta(beta)
    return -math.log1p(-beta)


def _check_k(k: Any) -> None:
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise DPSError(f"k = {k!r}: the anonymity threshold must be an integer >= 1 (counts below k are zeroed)")


def _check_beta(beta: Any) -> None:
    if isinstance(beta, bool) or not isinstance(beta, Real) or not 0.0 < float(beta) < 1.0:
        raise DPSError(f"beta = {beta!r}: the sampling probability must lie strictly between 0 and 1 "
                       f"(Theorem 1 requires 0 < beta < 1)")


def _check_epsilon(beta: float, epsilon: Any, label: str = "epsilon") -> None:
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real) or not math.isfinite(epsilon):
        raise DPSError(f"{label} = {epsilon!r}: must be a finite number")
    floor = -math.log1p(-beta)
    if epsilon < floor:
        raise DPSError(f"{label} = {epsilon:g} is below -ln(1 - beta) = {floor:.4g} for beta = {beta:g}: "
                       f"Theorem 1 only holds for epsilon >= -ln(1 - beta)")


def _check_trees(trees: Any) -> None:
    if isinstance(trees, bool) or not isinstance(trees, Integral) or trees < 1:
        raise DPSError(f"trees = {trees!r}: the number of trees Nt must be an integer >= 1")


def _sup_tail(k: int, beta: float, epsilon: float) -> tuple[float, int]:
    """(d(k, beta, eps), an n attaining it); the arguments must already be validated.

    Write T(n) = P[Bin(n, beta) > gamma*n] = P[Bin(n, beta) >= floor(gamma*n) + 1], so
    d = sup_{n >= n0} T(n) with n0 = ceil(k/gamma - 1) = ceil(k/gamma) - 1. We search over the
    threshold t = floor(gamma*n) + 1 instead of over n, and the search is complete:

    1. *Only the last n of each threshold matters.* For n >= n0 we have gamma*n >= k - gamma > k - 1,
       so t >= k. Fix t >= k; the n with floor(gamma*n) + 1 = t form an interval of integers
       ending at n_t = ceil(t/gamma) - 1 (the largest n with gamma*n < t), and on it T(n) =
       P[Bin(n, beta) >= t] grows with n (more trials, same bar). The interval is never empty
       (for t > k it is [(t-1)/gamma, t/gamma), of length 1/gamma > 1), and n_t >= n_k = n0. So
       d = sup_{t >= k} P[Bin(n_t, beta) >= t]; for t = k, n_k = n0 is the theorem's lower limit.
    2. *The terms beyond the searched thresholds are bounded.* eps >= -ln(1 - beta) > 0 gives
       gamma - beta = (1 - beta)(1 - e^-eps) > 0. Chernoff-Hoeffding: P[Bin(n, beta) >= a*n] <=
       exp(-n * KL(a || beta)) for a >= beta, and KL(a || beta) grows with a >= beta. Since
       t/n_t > gamma, every threshold t > T satisfies
       P[Bin(n_t, beta) >= t] <= exp(-n_t * KL(gamma || beta)) <= exp(-n_{T+1} * KL(gamma || beta)),
       because n_t is non-decreasing in t. Once that bound is <= the best term found so far (or
       below the smallest positive double, when every term underflows), no unsearched term can
       exceed it, so the maximum over the searched t is the supremum, and it is attained.

    KL(gamma || beta) has the closed form gamma*ln(gamma/beta) - eps*(1 - beta)*e^-eps, because
    1 - gamma = (1 - beta)*e^-eps. n_t is computed as t - 1 + ceil(t*(1 - gamma)/gamma), which
    equals ceil(t/gamma) - 1 but stays right when gamma rounds to 1.0 (large eps). The thresholds
    are evaluated in vectorised, doubling chunks.
    """
    q = (1.0 - beta) * math.exp(-epsilon)  # 1 - gamma, without the cancellation of 1 - gamma
    gamma = -math.expm1(-epsilon) + beta * math.exp(-epsilon)  # = (e^eps - 1 + beta) / e^eps
    kl = gamma * math.log(gamma / beta) - epsilon * q
    best, best_n = -1.0, 0
    start, size = k, 64
    while True:
        t = np.arange(start, start + size, dtype=np.int64)
        # ceil(t/gamma) - 1, as t/gamma = t + t*q/gamma; q > 0, so the ceil is >= 1 even if q underflowed
        n = t - 1 + np.maximum(np.ceil(t * (q / gamma)), 1).astype(np.int64)
        terms = binom.sf(t - 1, n, beta)  # P[Bin(n_t, beta) >= t]
        i = int(np.argmax(terms))
        if terms[i] > best:
            best, best_n = float(terms[i]), int(n[i])
        start += size
        next_n = start - 1 + max(math.ceil(start * (q / gamma)), 1)
        if -next_n * kl <= max(math.log(best) if best > 0 else -math.inf, _LOG_TINIEST):
            return best, best_n
        if start > _MAX_THRESHOLDS:  # pragma: no cover - would need KL ~ 1e-8
            raise DPSError(f"k = {k}, beta = {beta:g}, epsilon = {epsilon:g}: the supremum over n did not "
                           f"settle within {_MAX_THRESHOLDS} thresholds (KL(gamma||beta) = {kl:.3g} too small)")
        size *= 2


def dps_delta(k: int, beta: float, epsilon: float) -> float:
    """Single-tree delta = d(k, beta, epsilon) of Theorem 1 (see the module docstring).

    Raises :class:`DPSError` unless k >= 1 is an integer, 0 < beta < 1 and
    epsilon >= -ln(1 - beta), the range in which the theorem holds.

    d is non-increasing in k (a larger k only raises the lower limit n0 of the sup) and in
    epsilon (tests/common/privacy/test_dps.py proves it), but *not* monotone in beta: a larger beta raises
    gamma, which can lower n0 = ceil(k/gamma) - 1 by one and drop the peak term, e.g.
    d(5, 0.100, 0.5) = 2.75e-3 but d(5, 0.101, 0.5) = 1.71e-3.
    """
    _check_k(k)
    _check_beta(beta)
    _check_epsilon(beta, epsilon)
    return _sup_tail(int(k), float(beta), float(epsilon))[0]


@dataclass(frozen=True)
class DPSGuarantee:
    """The forest's (beta, epsilon_total, delta_total)-DPS guarantee from Corollary 1."""

    k: int
    beta: float
    epsilon_total: float
    trees: int
    epsilon_per_tree: float
    delta_per_tree: float
    delta_total: float

    @property
    def meaningful(self) -> bool:
        """Whether delta_total < 1; a delta of 1 or more bounds nothing ("no guarantee")."""
        return self.delta_total < 1.0

    def describe(self) -> str:
        """``(beta, Nt*eps, Nt*delta)-DPS``, delta to 3 significant digits: how a release states it."""
        return f"({self.beta:g}, {self.epsilon_total:g}, {self.delta_total:.3g})-DPS"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "meaningful": self.meaningful}


def compose(k: int, beta: float, epsilon_total: float, trees: int) -> DPSGuarantee:
    """Corollary 1: a forest of `trees` trees with total budget epsilon_total.

    Each tree gets epsilon_total / trees, which must itself satisfy Theorem 1's
    eps >= -ln(1 - beta); the forest's delta is trees * d(k, beta, epsilon_total / trees).
    """
    _check_k(k)
    _check_beta(beta)
    _check_trees(trees)
    if isinstance(epsilon_total, bool) or not isinstance(epsilon_total, Real) or not math.isfinite(epsilon_total):
        raise DPSError(f"epsilon_total = {epsilon_total!r}: must be a finite number")
    per_tree = float(epsilon_total) / int(trees)
    _check_epsilon(beta, per_tree, f"epsilon per tree (epsilon_total {epsilon_total:g} / {trees} trees)")
    delta = _sup_tail(int(k), float(beta), per_tree)[0]
    return DPSGuarantee(k=int(k), beta=float(beta), epsilon_total=float(epsilon_total), trees=int(trees),
                        epsilon_per_tree=per_tree, delta_per_tree=delta, delta_total=int(trees) * delta)


@dataclass(frozen=True)
class Table5:
    """The grid of the paper's Table 5, computed: Nt*delta per (k, beta, Nt*eps) for Nt = `trees`.

    `cells[(k, beta, epsilon_total)]` is the composed guarantee, or None where the per-tree
    epsilon is below -ln(1 - beta) (outside Theorem 1; `reasons` holds the DPSError message).
    """

    k_values: tuple[int, ...]
    betas: tuple[float, ...]
    epsilon_totals: tuple[float, ...]
    trees: int
    cells: dict[tuple[int, float, float], DPSGuarantee | None]
    reasons: dict[tuple[int, float, float], str]

    def delta_total(self, k: int, beta: float, epsilon_total: float) -> float | None:
        cell = self.cells[(k, beta, epsilon_total)]
        return None if cell is None else cell.delta_total


def table5(k_values: tuple[int, ...] = TABLE5_K, betas: tuple[float, ...] = TABLE5_BETA,
           epsilon_totals: tuple[float, ...] = TABLE5_EPSILON_TOTAL, trees: int = TABLE5_TREES) -> Table5:
    """Recompute Table 5 (by default the paper's axes); out-of-range cells are None, not errors."""
    cells: dict[tuple[int, float, float], DPSGuarantee | None] = {}
    reasons: dict[tuple[int, float, float], str] = {}
    for k in k_values:
        for beta in betas:
            for eps in epsilon_totals:
                try:
                    cells[(k, beta, eps)] = compose(k, beta, eps, trees)
                except DPSError as exc:
                    cells[(k, beta, eps)] = None
                    reasons[(k, beta, eps)] = str(exc)
    return Table5(tuple(k_values), tuple(betas), tuple(epsilon_totals), trees, cells, reasons)
