"""Empirical differential-privacy audit: a statistical lower bound on what a mechanism's epsilon must be.

A mechanism M is (eps, delta)-DP when for all neighbouring tables D, D' and every event E,
P[M(D') in E] <= e^eps P[M(D) in E] + delta, and the same with D and D' swapped. The audit runs the
mechanism many times on one adversarially chosen pair (D, D' = D plus one row; an `AuditTarget`
builds the pair, runs the mechanism's registered release path per trial (`modelshare.common.audit.dp.blackbox`)
and reduces each release to a real *score* read from the released trees) and turns the observed
frequencies of an event into a lower bound on eps that holds with confidence 1 - alpha:

1. *Event choice on held-out trials.* The trials of each table are split in halves. On the first
   half every threshold t of the pooled scores is tried for the events {score >= t} and its
   complement in both directions, and the t whose bound (step 3, on the first half) is largest is
   kept. Choosing on data the bound never sees keeps the bound honest. A target may reduce a
   release to several scores (one column each, e.g. one per part of the release, named by its
   ``score_names``): the choice then runs over every column and threshold, still on the first half
   only, so the bound needs no correction for it.
2. *Clopper-Pearson intervals.* On the second half, p = P[E|D] and p' = P[E|D'] get exact two-sided
   binomial intervals (scipy.stats.beta) at level 1 - alpha/2 each, so both hold together with
   probability >= 1 - alpha (Bonferroni).
3. *Four bounds.* Inside those intervals, the DP inequality forces
   eps >= ln((p'_low - delta) / p_high) (E more likely under D'), ln((p_low - delta) / p'_high),
   and the same two for the complement event (1 - p' and 1 - p). All four are valid at once, so
   their maximum is the reported lower bound; a numerator <= 0 gives no evidence (-inf).

The audit fails when the lower bound exceeds the claimed eps. A correct mechanism fails with
probability at most alpha (less in practice: Bonferroni is conservative and the bound is below the
true privacy loss of the chosen event). A passing audit proves nothing about other pairs or
events; a failing one is evidence, at confidence 1 - alpha, that the claim is false.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from scipy.stats import beta as beta_distribution

__all__ = ["AuditTarget", "EventBound", "DPAuditResult", "clopper_pearson", "audit_dp", "MIN_TRIALS"]

MIN_TRIALS = 100  # per table: 50 to choose the event, 50 to bound it
_MAX_THRESHOLDS = 1000  # candidate thresholds tried on the first half (quantiles beyond that)


class AuditTarget(Protocol):
    """A mechanism under audit on one neighbouring pair, its claim, and the score of a release."""

    mechanism: str
    epsilon: float  # the claimed (total) epsilon
    delta: float  # the claimed delta (0 for pure eps-DP)

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Scores of ``trials`` independent releases on D and of as many on D': two float arrays of shape
        ``(trials,)``, or ``(trials, k)`` for k scores per release (`score_names` names them when k > 1)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The neighbouring pair and the score, as JSON-ready values."""
        ...


@dataclass(frozen=True)
class EventBound:
    """One of the four lower bounds: the event, which table it favours, and the bound (-inf: none)."""

    event: str
    ratio: str
    epsilon: float

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.event, "ratio": self.ratio, "epsilon": _finite_or_none(self.epsilon)}


@dataclass(frozen=True)
class DPAuditResult:
    """The outcome of `audit_dp`: the claim, the chosen event, its frequencies and the bounds."""

    mechanism: str
    epsilon: float
    delta: float
    trials: int
    alpha: float
    threshold: float
    p_d: float
    p_d1: float
    interval_d: tuple[float, float]
    interval_d1: tuple[float, float]
    bounds: tuple[EventBound, ...]
    neighbours: dict[str, Any] = field(default_factory=dict)
    score: str = "score"  # the score the event thresholds (a column's name when the target gives several)

    @property
    def epsilon_lower(self) -> float:
        """The empirical lower bound on eps: the largest of the four bounds (-inf when none has evidence)."""
        return max(b.epsilon for b in self.bounds)

    @property
    def passed(self) -> bool:
        """Whether the claimed eps is at least the empirical lower bound."""
        return self.epsilon_lower <= self.epsilon

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism, "epsilon": self.epsilon, "delta": self.delta, "trials": self.trials,
            "alpha": self.alpha, "passed": self.passed, "epsilon_lower": _finite_or_none(self.epsilon_lower),
            "score": self.score, "threshold": self.threshold, "p_d": self.p_d, "p_d1": self.p_d1,
            "interval_d": list(self.interval_d), "interval_d1": list(self.interval_d1),
            "bounds": [b.to_dict() for b in self.bounds], "neighbours": self.neighbours,
        }


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def clopper_pearson(successes: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided (1 - alpha) binomial confidence interval(s) for ``successes`` out of ``n``."""
    x = np.asarray(successes, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lower = np.where(x > 0, beta_distribution.ppf(alpha / 2, x, n - x + 1), 0.0)
        upper = np.where(x < n, beta_distribution.ppf(1 - alpha / 2, x + 1, n - x), 1.0)
    return lower, upper


_EVENTS = ((">=", "P[E|D'] / P[E|D]"), (">=", "P[E|D] / P[E|D']"), ("<", "P[E|D'] / P[E|D]"), ("<", "P[E|D] / P[E|D']"))


def _bounds(interval_d: tuple[np.ndarray, np.ndarray], interval_d1: tuple[np.ndarray, np.ndarray],
            delta: float) -> np.ndarray:
    """The four lower bounds (last axis, in `_EVENTS` order) from the intervals of P[E|D] and P[E|D']."""
    (low, high), (low1, high1) = interval_d, interval_d1
    numerators = np.stack([low1, low, 1 - high1, 1 - high], axis=-1) - delta
    denominators = np.stack([high, high1, 1 - low, 1 - low1], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(numerators > 0, np.log(numerators / denominators), -np.inf)


def _at_least(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """How many scores are >= each threshold."""
    return scores.size - np.searchsorted(np.sort(scores), thresholds, side="left")


def _thresholds(scores: np.ndarray) -> np.ndarray:
    """The distinct scores, or `_MAX_THRESHOLDS` quantiles of them when there are more."""
    distinct = np.unique(scores)
    if distinct.size <= _MAX_THRESHOLDS:
        return distinct
    return np.unique(np.quantile(scores, np.linspace(0.0, 1.0, _MAX_THRESHOLDS)))


def audit_dp(target: AuditTarget, trials: int, rng: np.random.Generator, *, alpha: float = 0.05) -> DPAuditResult:
    """Run ``trials`` releases on each table of ``target``'s pair and bound eps from below (module docstring).

    Raises
    ------
    ValueError
        ``trials`` below `MIN_TRIALS` or ``alpha`` outside (0, 1), naming the value.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < MIN_TRIALS:
        raise ValueError(f"trials must be an integer >= {MIN_TRIALS} (half choose the event, half bound it); "
                         f"got {trials!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1; got {alpha!r}")
    scores_d, scores_d1 = (np.asarray(s, dtype=np.float64) for s in target.sample(trials, rng))
    if scores_d.ndim == 1 and scores_d1.ndim == 1:
        scores_d, scores_d1 = scores_d[:, None], scores_d1[:, None]
    if scores_d.ndim != 2 or scores_d.shape != scores_d1.shape or scores_d.shape[0] != trials:
        raise ValueError(f"{target.mechanism}: the target returned scores of shapes {scores_d.shape} and "
                         f"{scores_d1.shape}; expected ({trials},) or ({trials}, k) each")
    names = tuple(getattr(target, "score_names", ())) if scores_d.shape[1] > 1 else ("score",)
    if len(names) != scores_d.shape[1]:
        names = tuple(f"score[{j}]" for j in range(scores_d.shape[1]))
    half = trials // 2
    best = (-math.inf, 0, 0.0)  # (bound on the first half, column, threshold)
    for j in range(scores_d.shape[1]):
        choose_d, choose_d1 = scores_d[:half, j], scores_d1[:half, j]
        candidates = _thresholds(np.concatenate([choose_d, choose_d1]))
        chosen = _bounds(clopper_pearson(_at_least(choose_d, candidates), half, alpha / 2),
                         clopper_pearson(_at_least(choose_d1, candidates), half, alpha / 2), target.delta).max(axis=1)
        i = int(np.argmax(chosen))
        if j == 0 or chosen[i] > best[0]:
            best = (float(chosen[i]), j, float(candidates[i]))
    _, column, threshold = best
    bound_d, bound_d1 = scores_d[half:, column], scores_d1[half:, column]
    n = trials - half
    hits_d = int(_at_least(bound_d, np.array([threshold]))[0])
    hits_d1 = int(_at_least(bound_d1, np.array([threshold]))[0])
    (low, high), (low1, high1) = (clopper_pearson(np.array(hits), n, alpha / 2) for hits in (hits_d, hits_d1))
    bounds = _bounds((low, high), (low1, high1), target.delta)
    return DPAuditResult(
        mechanism=target.mechanism, epsilon=float(target.epsilon), delta=float(target.delta), trials=trials,
        alpha=alpha, threshold=threshold, p_d=hits_d / n, p_d1=hits_d1 / n,
        interval_d=(float(low), float(high)), interval_d1=(float(low1), float(high1)),
        bounds=tuple(EventBound(f"{names[column]} {op} {threshold:.6g}", ratio, float(b))
                     for (op, ratio), b in zip(_EVENTS, bounds, strict=False)),
        neighbours=target.describe(), score=names[column],
    )
