"""The samplers the mechanisms draw their secret randomness through, written once.

* `laplace`: independent Laplace noise of a given shape (DiffPETs' noisy histograms and sums,
  which it post-processes itself).
* `noisy_counts`: counts plus `laplace` noise, clamped at 0 and rounded to integers
  (laplace-rdt's and DPEA's leaf counts; the clamping and rounding are post-processing).
* `exponential_draw`: the exponential mechanism's draw, an index with probability proportional to
  ``exp(logits)``, by inverse CDF from one uniform draw (DiffPETs' split choice, DPEA's subtree
  selection). The largest logit is subtracted first, so large utilities do not overflow.

Keeping them here means a change of sampler (a discrete, floating-point-safe one) is one change.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["laplace", "noisy_counts", "log_sum_exp", "exponential_draw"]


def laplace(shape: tuple[int, ...], scale: float, rng: np.random.Generator) -> np.ndarray:
    """Independent Laplace(0, ``scale``) draws of the given shape."""
    return rng.laplace(0.0, scale, shape)


def noisy_counts(true: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``true`` plus independent Laplace(``scale``) noise per entry, clamped at 0 and rounded (any shape)."""
    true = np.asarray(true, dtype=np.float64)
    return np.maximum(np.rint(true + laplace(true.shape, scale, rng)), 0.0)


def log_sum_exp(values: np.ndarray) -> float:
    """log(sum(exp(values))), computed without overflow."""
    top = float(np.max(values))
    return top + math.log(float(np.exp(np.asarray(values) - top).sum()))


def exponential_draw(logits: np.ndarray, rng: np.random.Generator, log_total: float | None = None) -> int:
    """An index drawn with probability exp(logits[k] - log_total), by inverse CDF from one ``rng.random()``.

    ``log_total`` (`log_sum_exp` of ``logits``) may be passed when it is already known.
    """
    logits = np.asarray(logits, dtype=np.float64)
    shift = float(logits.max()) if log_total is None else log_total
    cdf = np.cumsum(np.exp(logits - shift))
    return min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), cdf.size - 1)
