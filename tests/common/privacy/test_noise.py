"""The secret randomness of releases: exact integer noise, separate streams, and the floating-point leak closed."""

from __future__ import annotations

import numpy as np
import pytest

from modelshare.common.audit.release import audit
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import NumericAttribute
from modelshare.common.mechanisms.diffpets import TARGET_GRID, DiffPetsRegressor
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.noise import (
    Randomness,
    SecureNoise,
    SeededNoise,
    discrete_laplace_log_pmf,
    noisy_counts,
    to_grid,
)


@pytest.mark.parametrize("noise", [SeededNoise(np.random.default_rng(4)), SecureNoise()], ids=["seeded", "secure"])
@pytest.mark.parametrize("true, scale", [(0, 1.0), (5, 2.5)])
def test_noisy_counts_follow_the_clamped_discrete_laplace_law(noise, true, scale):
    draws = noisy_counts(np.full(50_000, true), scale, noise)
    assert np.array_equal(draws, np.rint(draws)) and draws.min() >= 0
    support = np.arange(0, true + 40 * scale)
    pmf = np.exp(discrete_laplace_log_pmf(support, np.full(support.size, true), scale))
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
    observed = np.bincount(draws.astype(np.int64), minlength=support.size)[: support.size] / draws.size
    assert np.abs(observed - pmf).max() < 6 * np.sqrt(pmf.max() / draws.size)


def test_discrete_laplace_refuses_non_integers():
    with pytest.raises(ValueError, match="public grid"):
        SecureNoise().discrete_laplace(np.array([0.5]), 1.0)


@pytest.mark.parametrize("noise", [SeededNoise(np.random.default_rng(5)), SecureNoise()], ids=["seeded", "secure"])
def test_secret_bernoulli_samples_have_the_stated_rate(noise):
    draws = noise.bernoulli(0.3, 40_000)
    assert draws.dtype == bool and abs(draws.mean() - 0.3) < 6 * np.sqrt(0.21 / 40_000)
    assert noise.bernoulli(1.0, 5).all() and not noise.bernoulli(0.0, 5).any()


def test_secret_draws_never_advance_the_public_stream() -> None:
    quiet, busy = Randomness.seeded(11), Randomness.seeded(11)
    busy.secret.discrete_laplace(np.zeros(1000, dtype=np.int64), 3.0)
    busy.secret.exponential_index(np.zeros(10))
    assert np.array_equal(quiet.public.random(5), busy.public.random(5))
    assert isinstance(Randomness.of(None).secret, SecureNoise)
    with pytest.raises(ValueError, match="random_state"):
        Randomness.of("seven")  # type: ignore[arg-type]


def test_the_grid_is_public_and_exact():
    units = to_grid(np.array([0.0, 0.3, 1.0, 1.7, -0.2]), TARGET_GRID)
    assert units.tolist() == [0, round(0.3 * TARGET_GRID), TARGET_GRID, TARGET_GRID, 0]
    assert all(float(u) / TARGET_GRID * TARGET_GRID == u for u in units)  # a power of two: exact division


# --------------------------------------------------- the floating-point membership attack (Mironov 2012)
def _neighbours() -> tuple[RegressionSchema, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """D and D' = D + one row at the top of the target range: one attribute, depth 1 (a root split, two leaves)."""
    schema = RegressionSchema((NumericAttribute("x", 0.0, 1.0),), NumericAttribute("t", 0.0, 1.0))
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 1.0, (40, 1))
    y = rng.uniform(0.0, 0.5, 40)
    return schema, X, y, np.vstack([X, [[0.5]]]), np.append(y, 1.0)


def test_released_regression_sums_decide_no_membership_with_certainty():
    """The old release wrote count + Laplace and sum + Laplace as raw float64: the exact bits of a value
    reachable from one table's true sum but not the other's decided membership in ~82% of releases at
    eps = 1. Now every released statistic is an integer (a sum: an integer number of 1/TARGET_GRID
    units) drawn by an exact sampler whose support is every integer, so the sum released at the added
    row's leaf has positive probability under both neighbours: its likelihood ratio is bounded by the
    leaf's budget, and no release decides membership with certainty."""
    schema, X, y, X1, y1 = _neighbours()
    regressor = DiffPetsRegressor(1.0, 1, 1, theta=-np.inf)
    units, units1 = (to_grid(schema.scale(t), TARGET_GRID) for t in (y, y1))
    scale_units = regressor.noise_scale * TARGET_GRID
    bound = TARGET_GRID / scale_units  # one row moves one leaf's sum by at most TARGET_GRID units
    certain = 0
    for trial in range(300):
        table = (X, y) if trial % 2 == 0 else (X1, y1)
        tree = regressor.fit(schema, *table, rng=Randomness(np.random.default_rng(trial), SecureNoise())).trees[0]
        for node in tree.nodes:
            assert node.count == round(node.count) and node.total * TARGET_GRID == round(node.total * TARGET_GRID)
        leaf = int(tree.apply(X1[-1:])[0])  # the added row's leaf: the split is public, so the attacker knows it
        released = tree.nodes[leaf].total * TARGET_GRID
        true_d = int(units[tree.apply(X) == leaf].sum())
        true_d1 = int(units1[tree.apply(X1) == leaf].sum())
        llr = (abs(released - true_d1) - abs(released - true_d)) / scale_units  # log P[S' | D] - log P[S' | D']
        certain += not np.isfinite(llr)
        assert abs(llr) <= bound + 1e-9
    assert certain == 0


def test_a_dp_release_states_its_noise_source_and_the_audit_checks_it():
    schema, X, y, _, _ = _neighbours()
    secure = release("diffpets", requirement="dp:epsilon=1,trees=1", schema=schema, X=X, y=y, max_depth=2)
    assert secure.report.parameters["noise_source"] == SecureNoise.source
    assert audit(secure.forest, secure.report).passed
    seeded = release("diffpets", requirement="dp:epsilon=1,trees=1", schema=schema, X=X, y=y, max_depth=2,
                     random_state=3)
    result = audit(seeded.forest, seeded.report)
    assert not result.passed
    assert [c.name for c in result.checks if not c.passed] == ["secret draws from a secure sampler"]
    assert audit(seeded.forest, seeded.report, seeded_ok=True).passed
