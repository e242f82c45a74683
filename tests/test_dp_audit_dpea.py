"""The empirical DP audit of DPEA: the exact mechanism at its claim, broken variants, the target's own law."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from common.datasets import load_dataset
from common.dp_audit import DPAuditResult, audit_dp
from common.dp_audit_dpea import DpeaTarget, tiny_table
from common.dpea import DPEA

# Per table. Vectorised, 10^6 trials take about half a second. The broken variants exceed their claim
# only on rare joint events (a selection the added row favours *and* a count in the noise's tail), so
# they need many trials. Bounds over audit seeds 1-6: halved noise 1.2-1.7 at 4000 trials, 1.9-2.1 at
# 2*10^4, 2.1-2.26 at 10^5 (claim 2); undivided selections 2.1-2.9, 3.1-3.8, 3.8-4.2 (claim 4); at
# 10^6 every seed fails both (2.32-2.35 and 4.24-4.45), and the correct mechanism stays below its
# exact loss (1.33-1.35 of 1.37, 2.08-2.11 of 2.15).
TRIALS = 1_000_000


class _HalfNoiseDPEA(DPEA):
    """DPEA drawing half the leaf noise it claims."""

    @property
    def noise_scale(self) -> float:
        return super().noise_scale / 2


class _UndividedSelectionDPEA(DPEA):
    """DPEA whose selections spend the tree's whole eps_t instead of eps' = eps_t / (ceil(D/d) + 1)."""

    @property
    def selection_beta(self) -> float:
        return self.epsilon_per_tree / (2 * self.score_sensitivity)


class _UndividedDPEA(DPEA):
    """DPEA that never divides: eps' = eps_t for the selections and for the leaf noise."""

    @property
    def epsilon_step(self) -> float:
        return self.epsilon_per_tree


class _NoFactorTwoDPEA(DPEA):
    """DPEA whose exponential mechanism lacks the 2 in exp(eps' score / (2 Δq'))."""

    @property
    def selection_beta(self) -> float:
        return self.epsilon_step / self.score_sensitivity


def _audit(mechanism: DPEA) -> tuple[DPAuditResult, DpeaTarget]:
    rng = np.random.default_rng(1)
    target = DpeaTarget(mechanism, *tiny_table(), rng)
    return audit_dp(target, TRIALS, rng), target


@pytest.mark.parametrize("epsilon, steps", [(2.0, 2), (4.0, 1)])
def test_dpea_passes_at_its_claimed_epsilon(epsilon, steps):
    result, target = _audit(DPEA(epsilon, 1, 2, embedding_depth=steps))
    assert result.passed and result.epsilon_lower <= target.exact_epsilon, result
    m = target.claimed  # monotone scores: each selection is eps'/2-DP, so the claim is loose
    assert target.exact_epsilon <= (m.rounds / 2 + 1) * m.epsilon_step < epsilon


def test_halved_leaf_noise_fails():
    """Whole tree (one round): true loss up to 2 eps' + eps'/2 = 1.25 eps; on this pair 2.37 against 2."""
    result, target = _audit(_HalfNoiseDPEA(2.0, 1, 2))
    assert target.exact_epsilon > 2.3
    assert not result.passed and result.epsilon_lower > 2.15, result


def test_selections_spending_the_undivided_budget_fail():
    """d = 1, D = 2 (two rounds): each selection gets eps_t; on this pair the loss is 4.65 against 4.

    With one round (d = D) the same mistake is no violation (eps_t / 2 + eps_t / 2 = eps_t for a
    monotone score), so the audit needs d < D.
    """
    result, target = _audit(_UndividedSelectionDPEA(4.0, 1, 2, embedding_depth=1))
    assert target.exact_epsilon > 4.5
    assert not result.passed and result.epsilon_lower > 4.1, result
    assert DpeaTarget(_UndividedSelectionDPEA(4.0, 1, 2), *tiny_table(), np.random.default_rng(1)).exact_epsilon <= 4


def test_a_budget_never_divided_fails():
    """Selections and leaves each spend eps_t: up to 1.5 eps_t in one round; 2.8 against 2 on this pair."""
    result, target = _audit(_UndividedDPEA(2.0, 1, 2))
    assert target.exact_epsilon > 2.7
    assert not result.passed and result.epsilon_lower > 2.5, result


@pytest.mark.parametrize("epsilon, steps", [(2.0, 2), (4.0, 1)])
def test_the_missing_factor_two_is_no_violation(epsilon, steps):
    """Not detectable because not broken: a monotone score makes exp(eps' score / Δq') eps'-DP already."""
    result, target = _audit(_NoFactorTwoDPEA(epsilon, 1, 2, embedding_depth=steps))
    assert target.exact_epsilon <= epsilon and result.passed, result


def test_the_targets_law_is_the_real_mechanisms():
    """2000 trees of `DPEA.fit` on D' (structures drawn by the exact sampler) against the law the target samples."""
    schema, X, y = tiny_table()
    target = DpeaTarget(DPEA(4.0, 1, 2, embedding_depth=1), schema, X, y, np.random.default_rng(1))
    X1, y1 = np.vstack([X, target.row]), np.append(y, target.label)
    drawn = DPEA(4.0 * 2000, 2000, 2, embedding_depth=1).fit(schema, X1, y1, np.random.default_rng(2)).structures
    index = {s: i for i, s in enumerate(target.structures)}
    observed = np.bincount([index[s] for s in drawn], minlength=len(index))
    assert (target.law[1] * len(drawn) >= 5).all()  # no cell too rare for the chi-square test
    assert chisquare(observed, target.law[1] * len(drawn)).pvalue > 1e-3


def test_the_target_describes_the_pair_and_refuses_what_it_cannot_list():
    _, target = _audit(DPEA(2.0, 1, 2))
    described = target.describe()
    assert described["added_row"] == {"a": "0", "b": "1", "c": "1", "label": "no"}  # contradicts class = c
    assert described["rows"] == 6 and described["structures"] == 12
    assert described["exact_epsilon"] == pytest.approx(target.exact_epsilon) and "claimed law" in described["score"]
    with pytest.raises(ValueError, match="sampler 'mcmc' claims no exact guarantee"):
        DpeaTarget(DPEA(2.0, 1, 2, sampler="mcmc"), *tiny_table(), np.random.default_rng(1))
    vote = load_dataset("vote")
    X, y = vote.schema.encode(vote.frame)
    with pytest.raises(ValueError, match="more than 20000; use a smaller depth"):
        DpeaTarget(DPEA(2.0, 1, 3), vote.schema, X, y, np.random.default_rng(1))
