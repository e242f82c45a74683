"""Deliberately broken release mechanisms, each the real trainer with one flaw, for the empirical DP audit's tests.

Every record here is registered at run time by a test (and unregistered after it), under its own
name, with the real mechanism's audit target: the audit then runs the broken trainer through the
same registered release path as the real one, and must refute its claim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms.diffpets import DiffPets
from modelshare.common.mechanisms.dpea import DPEA, release_domain
from modelshare.common.mechanisms.dpea_nb import TEMPERATURES, DpeaNb
from modelshare.common.mechanisms.kanon_rdt import kanon_rdt
from modelshare.common.mechanisms.laplace_rdt import LaplaceRdt
from modelshare.common.mechanisms.registry import Family, Mechanism
from modelshare.common.privacy.noise import Randomness, SecretNoise
from modelshare.common.privacy.requirements import DP, DPS
from modelshare.common.trees.tree import Tree

Trained = tuple[list[Tree], dict[str, Any]]


class _NoEmptyNoise(LaplaceRdt):
    """laplace-rdt that releases an empty cell as an exact 0: its privacy loss is unbounded."""

    def noisy_counts(self, true: np.ndarray, noise: SecretNoise) -> np.ndarray:
        return np.where(np.asarray(true) == 0, 0.0, super().noisy_counts(true, noise))


class _HalfNoise(LaplaceRdt):
    """laplace-rdt drawing half the noise it claims: really 2 * epsilon-DP."""

    @property
    def scale(self) -> float:
        return super().scale / 2


class _DpeaNoEmptyNoise(DPEA):
    """DPEA that releases an empty leaf cell as an exact 0: its privacy loss is unbounded."""

    def noisy_counts(self, true: np.ndarray, noise: SecretNoise) -> np.ndarray:
        return np.where(np.asarray(true) == 0, 0.0, super().noisy_counts(true, noise))


class _DpeaNbNoEmptyNoise(DpeaNb):
    """dpea-nb that releases an empty histogram cell as an exact 0: its privacy loss is unbounded."""

    def noisy_histogram(self, true: np.ndarray, scale: float, noise: SecretNoise) -> np.ndarray:
        return np.where(np.asarray(true) == 0, 0.0, super().noisy_histogram(true, scale, noise))


@dataclasses.dataclass(frozen=True)
class _ArgmaxPicks:
    """Secret draws whose exponential-mechanism picks are noiseless (the largest logit's index); the rest as ``noise``.

    With ``only_options`` set, only the picks among that many options are noiseless (the temperature grid's).
    """

    noise: SecretNoise
    only_options: int | None = None

    @property
    def source(self) -> str:
        return self.noise.source

    def discrete_laplace(self, true: np.ndarray, scale: float) -> np.ndarray:
        return self.noise.discrete_laplace(true, scale)

    def exponential_index(self, logits: np.ndarray) -> int:
        if self.only_options is not None and len(logits) != self.only_options:
            return self.noise.exponential_index(logits)
        return int(np.argmax(logits))

    def bernoulli(self, p: float, size: int) -> np.ndarray:
        return self.noise.bernoulli(p, size)

    def numpy_generator(self) -> np.random.Generator:
        return self.noise.numpy_generator()


class _DpeaNbNoiselessPicks(DpeaNb):
    """dpea-nb whose root split and temperature are picked without noise (argmax): 19% of the budget unspent."""

    only_options: int | None = None

    def fit(self, schema: Schema, X: np.ndarray, y: np.ndarray,
            rng: int | np.random.Generator | Randomness | None = None) -> Trained:
        randomness = Randomness.of(rng)
        noiseless = _ArgmaxPicks(randomness.secret, self.only_options)
        return super().fit(schema, X, y, Randomness(randomness.public, noiseless))


class _DpeaNbNoiselessTemperature(_DpeaNbNoiselessPicks):
    """dpea-nb whose temperature alone is picked without noise (its 10% of the budget unspent)."""

    only_options = len(TEMPERATURES)


class _DataRangeThresholds(DiffPets):
    """DiffPETs with Geurts' ExtraTrees thresholds: uniform between the node's data minimum and maximum (A3)."""

    def _choose_split(self, task, region, Xn, yn, k, rng):
        if len(Xn):
            numeric = ~np.isnan(region.low)
            region = dataclasses.replace(region, low=np.where(numeric, Xn.min(axis=0), region.low),
                                         high=np.where(numeric, Xn.max(axis=0), region.high))
        return super()._choose_split(task, region, Xn, yn, k, rng)


class _RawPurityStop(DiffPets):
    """DiffPETs with the paper's stopping rule read literally: a node whose rows all share one label is a leaf (A4)."""

    def _choose_split(self, task, region, Xn, yn, k, rng):
        return None if np.unique(yn).size <= 1 else super()._choose_split(task, region, Xn, yn, k, rng)


def _laplace(cls: type[LaplaceRdt]) -> Callable[..., Trained]:
    """laplace-rdt's registry trainer with ``cls`` in place of `LaplaceRdt`."""
    def train(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
              rng: Randomness) -> Trained:
        mechanism = cls(requirement.epsilon, requirement.trees, depth)
        return mechanism.fit(schema, X, y, rng).trees, mechanism.parameters()
    return train


def _diffpets(cls: type[DiffPets]) -> Callable[..., Trained]:
    """DiffPETs' registry trainer with ``cls`` in place of `DiffPets`."""
    def train(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
              rng: Randomness) -> Trained:
        mechanism = cls(requirement.epsilon, requirement.trees, depth)
        return mechanism.fit(schema, X, y, rng).trees, mechanism.parameters(schema)
    return train


def _dpea(cls: type[DPEA]) -> Callable[..., Trained]:
    """DPEA's registry trainer with ``cls`` in place of `DPEA`."""
    def train(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
              rng: Randomness) -> Trained:
        bins, max_arity = release_domain(schema, depth, requirement.trees)
        mechanism = cls(requirement.epsilon, requirement.trees, depth, bins=bins, max_arity=max_arity)
        return mechanism.fit(schema, X, y, rng).trees, {**mechanism.parameters(), "domain_rule": "compact"}
    return train


def _dpea_nb(cls: type[DpeaNb]) -> Callable[..., Trained]:
    """dpea-nb's registry trainer with ``cls`` in place of `DpeaNb`."""
    def train(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DP, depth: int,
              rng: Randomness) -> Trained:
        return cls(requirement.epsilon, depth=depth).fit(schema, X, y, rng)
    return train


def _kanon(**flaw: Any) -> Callable[..., Trained]:
    """kanon-rdt's trainer (`kanon_rdt`) run with ``flaw`` (beta or k) overriding the claimed requirement."""
    def train(schema: Schema, X: np.ndarray, y: np.ndarray, requirement: DPS, depth: int,
              rng: Randomness) -> Trained:
        setting = {"k": requirement.k, "beta": requirement.beta, **flaw}
        forest = kanon_rdt(schema, X, y, depth=depth, n_trees=requirement.trees, rng=rng, **setting)
        return forest.trees, {}
    return train


def _record(name: str, family: Family, train: Callable[..., Trained], target: str) -> Mechanism:
    return Mechanism(name, family, "a deliberately broken variant (a test's)", train=train,
                     dp_audit_target=f"modelshare.common.audit.dp.{target}")


LAPLACE = {"laplace-rdt-no-empty-noise": _NoEmptyNoise, "laplace-rdt-half-noise": _HalfNoise}
DIFFPETS = {"diffpets-data-thresholds": _DataRangeThresholds, "diffpets-raw-purity": _RawPurityStop}
DPEA_ = {"dpea-no-empty-noise": _DpeaNoEmptyNoise}
DPEA_NB = {"dpea-nb-no-empty-noise": _DpeaNbNoEmptyNoise, "dpea-nb-noiseless-picks": _DpeaNbNoiselessPicks,
           "dpea-nb-noiseless-temperature": _DpeaNbNoiselessTemperature}
KANON: dict[str, dict[str, float]] = {"kanon-rdt-no-sampling": {"beta": 1.0}, "kanon-rdt-no-suppression": {"k": 0}}

RECORDS = (
    *(_record(name, "dp", _laplace(cls), "rdt:laplace_rdt_target") for name, cls in LAPLACE.items()),
    *(_record(name, "dp", _diffpets(cls), "diffpets:diffpets_target") for name, cls in DIFFPETS.items()),
    *(_record(name, "dp", _dpea(cls), "dpea:dpea_target") for name, cls in DPEA_.items()),
    *(_record(name, "dp", _dpea_nb(cls), "dpea_nb:dpea_nb_target") for name, cls in DPEA_NB.items()),
    *(_record(name, "dps", _kanon(**flaw), "rdt:kanon_rdt_target") for name, flaw in KANON.items()),
)
