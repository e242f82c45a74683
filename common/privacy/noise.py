"""The randomness of a release, in two streams that never mix: public choices and secret noise.

A release draws two kinds of randomness. *Public choices* (random-tree structure seeds, DiffPETs'
candidate thresholds and category subsets, bootstrap indices) depend on no row and may be shown;
*secret draws* (noise added to counts, the exponential mechanism's pick, k-AnonToRdt's Bernoulli
samples) are what the guarantee rests on: anyone who can replay them can subtract the noise.
`Randomness` carries both, and nothing draws secret values from the public stream.

Secret draws go through `SecretNoise`, one small interface with two implementations:

* `SecureNoise` (the default of every release, `Randomness.fresh`): the OpenDP library's samplers,
  which are exact and floating-point safe, drawing from the operating system's CSPRNG. Both
  constructors used, ``make_laplace`` and ``make_noisy_max``, are in OpenDP's ``contrib`` feature:
  OpenDP documents those as functions whose proofs of correctness have not completed its vetting
  process, and they run only after ``enable_features("contrib")`` (`_opendp_laplace`,
  `_opendp_gumbel_max`). They are maintained, exact samplers, not vetted ones.
  Counts get discrete Laplace noise (``make_laplace`` on 64-bit integers: P[Z = z] proportional to
  exp(-|z| / scale), Canonne, Kamath & Steinke 2020), so a released count is an integer whose bits say
  nothing beyond its value; the floating-point attack on continuous Laplace outputs (Mironov 2012)
  has nothing to read. The exponential mechanism's pick is OpenDP's report-noisy-max with Gumbel noise
  (``make_noisy_max`` under zCDP): the index of max(logit_k + Gumbel(1)) has exactly the law
  P[k] = exp(logit_k) / sum_j exp(logit_j), sampled with exact arithmetic. Bernoulli(p) samples
  compare 64 bits of `os.urandom` with floor(p * 2^64) (p is public; the error is below 2^-64).
* `SeededNoise` (`Randomness.seeded`): the same laws from a numpy Generator, for reproducible
  experiments, tests and the empirical audits' many trials. A seeded release is reproducible by
  anyone who knows the seed, so it must never be published; its report says so (`source`).

Real-valued statistics (DiffPETs regression sums) are put on a public integer grid before noise is
added (`to_grid`), so every noisy value is an integer times a public power of two.

`discrete_laplace_log_pmf` is the exact law of a count released as max(0, true + Z), the shape every
mechanism here releases; the empirical audits score likelihood ratios with it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

__all__ = [
    "SecretNoise",
    "SecureNoise",
    "SeededNoise",
    "Randomness",
    "noisy_counts",
    "discrete_laplace_log_pmf",
    "to_grid",
    "log_sum_exp",
]

class SecretNoise(Protocol):
    """The secret draws of one release (module docstring); ``source`` is stated in its report."""

    @property
    def source(self) -> str:
        """Where the draws come from, as the release's report states it (read only: a wrapper may derive it)."""
        ...

    def discrete_laplace(self, true: np.ndarray, scale: float) -> np.ndarray:
        """``true`` (integers, any shape) plus independent discrete Laplace(``scale``) noise, as int64."""
        ...

    def exponential_index(self, logits: np.ndarray) -> int:
        """An index k drawn with probability exp(logits[k]) / sum_j exp(logits[j]) (-inf: never)."""
        ...

    def bernoulli(self, p: float, size: int) -> np.ndarray:
        """``size`` independent Bernoulli(``p``) draws, as booleans."""
        ...

    def numpy_generator(self) -> np.random.Generator:
        """A numpy Generator (PCG64) for the secret draws that have no OpenDP sampler here: DPEA's MCMC and
        DiffPETs' bootstrap, both of which void the stated guarantee anyway (audits refuse them)."""
        ...


def _checked_integers(true: np.ndarray) -> np.ndarray:
    """``true`` as int64, refusing values that are not whole numbers (noise is added on the integers)."""
    values = np.asarray(true)
    as_int: np.ndarray = np.rint(values).astype(np.int64)
    if values.size and not np.array_equal(as_int, values):
        raise ValueError("discrete Laplace noise is added to integers; got non-integer values "
                         "(put real-valued statistics on a public grid first: to_grid)")
    return as_int


@lru_cache(maxsize=64)
def _opendp_laplace(scale: float) -> Any:
    """OpenDP's discrete Laplace measurement on int64 vectors at ``scale`` (built once per scale)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")
    return dp.m.make_laplace(*space, scale=float(scale))


@lru_cache(maxsize=1)
def _opendp_gumbel_max() -> Any:
    """OpenDP's report-noisy-max with Gumbel(1) noise on float vectors: the exponential mechanism's law."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
    return dp.m.make_noisy_max(*space, dp.zero_concentrated_divergence(), scale=1.0)


def _finite_logits(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The finite logits and their indices (an index whose logit is -inf is never drawn)."""
    logits = np.asarray(logits, dtype=np.float64).ravel()
    keep = np.flatnonzero(np.isfinite(logits))
    if keep.size == 0 or np.isposinf(logits).any() or np.isnan(logits).any():
        raise ValueError("the exponential mechanism needs at least one finite logit and no +inf or nan")
    return logits[keep], keep


class SecureNoise:
    """Secret draws from OpenDP's exact samplers and the OS CSPRNG: what a published release uses."""

    source = "opendp discrete laplace and gumbel noisy-max, os csprng"

    def discrete_laplace(self, true: np.ndarray, scale: float) -> np.ndarray:
        values = _checked_integers(true)
        if values.size == 0:
            empty: np.ndarray = values.copy()
            return empty
        noisy = _opendp_laplace(float(scale))(values.ravel().tolist())
        noised: np.ndarray = np.asarray(noisy, dtype=np.int64).reshape(values.shape)
        return noised

    def exponential_index(self, logits: np.ndarray) -> int:
        finite, index = _finite_logits(logits)
        if finite.size == 1:
            return int(index[0])
        return int(index[int(_opendp_gumbel_max()(finite.tolist()))])

    def bernoulli(self, p: float, size: int) -> np.ndarray:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"a Bernoulli probability must lie in [0, 1]; got {p!r}")
        if p == 1.0:
            return np.ones(size, dtype=bool)
        words = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
        draws: np.ndarray = words < np.uint64(min(math.floor(p * 2.0**64), 2**64 - 1))
        return draws

    def numpy_generator(self) -> np.random.Generator:
        return np.random.default_rng()  # seeded from OS entropy; PCG64 is not a CSPRNG (see the docstring)


@dataclass
class SeededNoise:
    """The laws of `SecureNoise` from a numpy Generator: reproducible, so never for a published release."""

    generator: np.random.Generator
    source = "seeded numpy generator (reproducible: not for publication)"

    def discrete_laplace(self, true: np.ndarray, scale: float) -> np.ndarray:
        values = _checked_integers(true)
        # The difference of two iid geometric variables with success 1 - exp(-1/scale) is discrete Laplace.
        p = -math.expm1(-1.0 / float(scale))
        noise = self.generator.geometric(p, values.shape) - self.generator.geometric(p, values.shape)
        return values + noise.astype(np.int64)

    def exponential_index(self, logits: np.ndarray) -> int:
        finite, index = _finite_logits(logits)
        return int(index[int(np.argmax(finite + self.generator.gumbel(size=finite.size)))])

    def bernoulli(self, p: float, size: int) -> np.ndarray:
        return self.generator.random(size) < p

    def numpy_generator(self) -> np.random.Generator:
        return self.generator


@dataclass
class Randomness:
    """The public stream and the secret noise of one release (module docstring)."""

    public: np.random.Generator
    secret: SecretNoise

    @classmethod
    def fresh(cls) -> Randomness:
        """Public choices from OS entropy, secret draws from `SecureNoise`: what a release needs."""
        return cls(np.random.default_rng(), SecureNoise())

    @classmethod
    def seeded(cls, seed: int | np.random.Generator) -> Randomness:
        """Both streams from ``seed``, split so the public stream never yields a secret draw."""
        sequence = np.random.SeedSequence(int(seed.integers(0, 2**63)) if isinstance(seed, np.random.Generator)
                                          else int(seed))
        public, secret = sequence.spawn(2)
        return cls(np.random.default_rng(public), SeededNoise(np.random.default_rng(secret)))

    @classmethod
    def of(cls, random_state: int | np.random.Generator | Randomness | None) -> Randomness:
        """``random_state`` as `Randomness`: None is `fresh`, a seed or Generator is `seeded`."""
        if isinstance(random_state, Randomness):
            return random_state
        if random_state is None:
            return cls.fresh()
        if isinstance(random_state, (bool, np.bool_)) or not isinstance(random_state, (int, np.integer,
                                                                                         np.random.Generator)):
            raise ValueError(f"random_state must be None, an integer seed, a numpy Generator or Randomness; "
                             f"got {random_state!r}")
        return cls.seeded(random_state)


def noisy_counts(true: np.ndarray, scale: float, noise: SecretNoise) -> np.ndarray:
    """Integer counts plus discrete Laplace(``scale``) noise, clamped at 0 (post-processing), as float64."""
    clamped: np.ndarray = np.maximum(noise.discrete_laplace(true, scale), 0).astype(np.float64)
    return clamped


def discrete_laplace_log_pmf(released: np.ndarray, true: np.ndarray, scale: float) -> np.ndarray:
    """log P[max(0, true + Z) = released] for Z discrete Laplace(``scale``), elementwise (integers; true >= 0).

    With a = exp(-1/scale): P[Z = z] = (1 - a)/(1 + a) * a^|z|, and P[true + Z <= 0] = a^true / (1 + a).
    """
    released = np.asarray(released, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    log_a = -1.0 / scale
    log_one_plus_a = math.log1p(math.exp(log_a))
    log_norm = math.log(-math.expm1(log_a)) - log_one_plus_a
    positive = log_norm + log_a * np.abs(released - true)
    zero = log_a * true - log_one_plus_a
    return np.where(released == 0, zero, positive)


def to_grid(values: np.ndarray, cells: int) -> np.ndarray:
    """Values in [0, 1] as integers on the public grid {0, 1/cells, ..., 1}: round(values * cells), as int64."""
    return np.rint(np.clip(np.asarray(values, dtype=np.float64), 0.0, 1.0) * cells).astype(np.int64)


def log_sum_exp(values: np.ndarray) -> float:
    """log(sum(exp(values))), computed without overflow."""
    top = float(np.max(values))
    return top + math.log(float(np.exp(np.asarray(values) - top).sum()))
