"""The empirical DP audit: its statistics, laplace-rdt and
kanon-rdt at their claims through the registered trainers, CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom

from modelshare.cli import main
from modelshare.common.audit.dp.estimate import audit_dp, clopper_pearson
from modelshare.common.audit.dp.rdt import KAnonRdtTarget, LaplaceRdtTarget, kanon_rdt_log_target
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.mechanisms import registry
from modelshare.common.privacy.requirements import DP, DPS, parse_requirement
from modelshare.common.trees.tree import Tree
from tests import broken_mechanisms

# per table; every trial runs the registered trainer (broken variants: tests/common/audit/test_dp_audit_broken.py)
TRIALS = 400
KANON = "dps:k=3,beta=0.5,epsilon=2,trees=2"


@pytest.fixture(scope="module")
def small(nursery):
    """300 rows of Nursery: the audits' D."""
    schema, X, y = nursery
    rows = np.random.default_rng(0).choice(len(y), 300, replace=False)
    return schema, X[rows], y[rows]


# ------------------------------------------------------------------ statistics
def test_clopper_pearson_matches_the_closed_forms():
    n, alpha = 50, 0.05
    low, high = clopper_pearson(np.array([0, n, 20]), n, alpha)
    assert low[0] == 0.0 and high[0] == pytest.approx(1 - (alpha / 2) ** (1 / n))
    assert high[1] == 1.0 and low[1] == pytest.approx((alpha / 2) ** (1 / n))
    assert binom.sf(19, n, low[2]) == pytest.approx(alpha / 2) and binom.cdf(20, n, high[2]) == pytest.approx(alpha / 2)


class _RandomisedResponse:
    """A target with an exactly known privacy loss: one bit, kept with probability e^eps / (1 + e^eps).

    With ``leak`` > 0, D' also outputs the bit 2 with that probability (never under D): an
    (eps, leak)-DP mechanism that is not (eps, delta)-DP for delta < leak.
    """

    mechanism = "randomised-response"

    def __init__(self, true_epsilon: float, claimed: float, delta: float = 0.0, leak: float = 0.0) -> None:
        self.keep = math.exp(true_epsilon) / (1 + math.exp(true_epsilon))
        self.epsilon, self.delta, self.leak = claimed, delta, leak

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        on_d = (rng.random(trials) > self.keep).astype(float)
        on_d1 = (rng.random(trials) < self.keep).astype(float)
        on_d1[rng.random(trials) < self.leak] = 2.0
        return on_d, on_d1

    def describe(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("true, claimed, passes", [(1.0, 1.0, True), (1.0, 0.5, False), (2.0, 1.0, False)])
def test_the_bound_sits_below_a_known_epsilon_and_above_a_false_claim(true, claimed, passes):
    result = audit_dp(_RandomisedResponse(true, claimed), 20_000, np.random.default_rng(0))
    assert result.passed is passes
    assert true - 0.15 < result.epsilon_lower <= true


def test_delta_is_subtracted():
    claim = _RandomisedResponse(0.5, 0.5, delta=0.06, leak=0.05)
    assert audit_dp(claim, 20_000, np.random.default_rng(0)).passed
    too_small = _RandomisedResponse(0.5, 0.5, delta=0.01, leak=0.05)
    result = audit_dp(too_small, 20_000, np.random.default_rng(0))
    assert not result.passed and result.threshold == 2.0 and result.p_d == 0.0


class _TwoScores(_RandomisedResponse):
    """Randomised response reported as a second score beside a first that says nothing (the same law on D and D')."""

    score_names = ("noise", "bit")

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        on_d, on_d1 = super().sample(trials, rng)
        return (np.column_stack([rng.normal(size=trials), on_d]), np.column_stack([rng.normal(size=trials), on_d1]))


def test_the_event_is_chosen_over_every_score_of_a_release():
    result = audit_dp(_TwoScores(2.0, 1.0), 4000, np.random.default_rng(0))
    assert not result.passed and result.score == "bit" and result.bounds[0].event.startswith("bit ")
    assert result.to_dict()["score"] == "bit" and 1.5 < result.epsilon_lower <= 2.0
    with pytest.raises(ValueError, match=r"expected \(100,\) or \(100, k\) each"):
        audit_dp(_Mismatched(1.0, 1.0), 100, np.random.default_rng(0))


class _Mismatched(_RandomisedResponse):
    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        on_d, on_d1 = super().sample(trials, rng)
        return on_d[:, None], np.column_stack([on_d1, on_d1])


def test_the_audit_refuses_too_few_trials_and_a_bad_alpha():
    with pytest.raises(ValueError, match="trials must be an integer >= 100"):
        audit_dp(_RandomisedResponse(1, 1), 99, np.random.default_rng(0))
    with pytest.raises(ValueError, match="alpha must lie strictly between 0 and 1; got 1.5"):
        audit_dp(_RandomisedResponse(1, 1), 1000, np.random.default_rng(0), alpha=1.5)


# ------------------------------------------------------------------ laplace-rdt
Table = tuple[Schema, np.ndarray, np.ndarray]


def _laplace(small: Table, requirement: str = "dp:epsilon=1,trees=2") -> LaplaceRdtTarget:
    dp = parse_requirement(requirement)
    assert isinstance(dp, DP)
    return LaplaceRdtTarget(dp, 3, *small, np.random.default_rng(1))


def test_laplace_rdt_passes_at_its_claimed_epsilon(small):
    target = _laplace(small)
    result = audit_dp(target, TRIALS, np.random.default_rng(2))
    assert result.passed and 0.2 < result.epsilon_lower < 1.0, result
    assert result.neighbours["cell_counts_in_D"] == [0, 0, 0]  # alone in its leaf in every sampled structure
    assert result.neighbours["release_path"] == "registry trainer of 'laplace-rdt'"
    assert result.to_dict()["passed"] is True and len(result.to_dict()["bounds"]) == 4


def test_the_laplace_target_runs_the_registered_trainer_and_reads_r_alone(small: Table,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Every trial calls the registry's trainer (the owners'
    release path); r's cell in each release holds no row of D."""
    schema, X, y = small
    target = _laplace(small)
    calls: list[tuple[Any, ...]] = []
    real = registry.get("laplace-rdt")
    train = real.train
    assert train is not None

    def counting_train(*a: Any) -> tuple[list[Tree], dict[str, Any]]:
        calls.append(a)
        return train(*a)

    counting = dataclasses.replace(real, train=counting_train)
    monkeypatch.setitem(registry._REGISTRY, "laplace-rdt", counting)
    path = _laplace(small).path
    trees = path.release(True, np.random.default_rng(3))
    assert len(calls) == 1 and calls[0][1].shape == (301, schema.n_attributes) and calls[0][4] == 3
    cells = path.cells(trees)
    assert cells.same_class.tolist() == [0, 0] and (cells.released >= 0).all()
    assert target.describe()["score"].startswith("log-likelihood ratio")


# --------------------------------------------------------------------- kanon-rdt
def test_kanon_rdt_passes_with_its_delta(small: Table) -> None:
    dps = parse_requirement(KANON)
    assert isinstance(dps, DPS)
    rng = np.random.default_rng(1)
    result = audit_dp(KAnonRdtTarget(dps, 2, *small, rng), 400, rng)
    assert result.delta == pytest.approx(0.25, abs=0.005) and result.p_d == 0.0
    assert 0.0 < result.p_d1 < 0.25  # r's cell reaches k only under D' (at most delta, as Theorem 1 allows)
    assert result.passed and result.neighbours["aim"] == "threshold", result
    with pytest.raises(ValueError, match="aim must be 'threshold' or 'sparse'"):
        KAnonRdtTarget(dps, 2, *small, rng, aim="dense")  # type: ignore[arg-type]


def test_kanon_rdt_log_passes_with_its_delta(mixed):
    """The log-threshold variant's registered target: its trainer end to end, r chosen on log-scale structures."""
    schema, X, y = mixed
    dps = parse_requirement(KANON)
    assert isinstance(dps, DPS)
    rng = np.random.default_rng(1)
    target = registry.get("kanon-rdt-log").resolve_dp_audit_target()(dps, 2, schema, X[:300], y[:300], rng)
    assert target.mechanism == "kanon-rdt-log" and isinstance(target, KAnonRdtTarget)
    result = audit_dp(target, 400, rng)
    assert result.passed and result.delta == pytest.approx(0.25, abs=0.005), result
    assert kanon_rdt_log_target is registry.get("kanon-rdt-log").resolve_dp_audit_target()


# ---------------------------------------------------------------------------- CLI
def _cli(*argv: str) -> int:
    return main(["privacy", "audit-dp", *argv, "--trials", str(TRIALS), "--seed", "1", "--max-depth",
                 "3", "--trees", "2"])


def test_cli_exit_codes(small, tmp_path, capsys):
    schema, X, y = small
    data, schema_file = tmp_path / "small.csv", tmp_path / "small.schema.json"
    schema.decode(X, y).to_csv(data, index=False)
    schema.save(schema_file)
    source = ["--data", str(data), "--class-column", schema.class_name, "--schema", str(schema_file)]
    assert _cli("laplace-rdt", *source, "--epsilon", "1", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["passed"] and result["rows"] == 300 and result["seed"] == 1 and result["epsilon_lower"] < 1
    assert _cli("kanon-rdt", *source, "--epsilon", "2", "--k", "3", "--beta", "0.5") == 0
    assert "PASS" in capsys.readouterr().out
    assert _cli("kanon-rdt", *source, "--epsilon", "2", "--k", "3", "--beta", "0.5", "--aim", "sparse", "--json") == 0
    assert json.loads(capsys.readouterr().out)["neighbours"]["aim"] == "sparse"
    assert _cli("laplace-rdt", "--dataset", "vote", "--epsilon", "1", "--aim", "sparse") == 2
    assert "laplace-rdt takes no --aim (kanon-rdt's choice of the added row)" in capsys.readouterr().err
    broken = {r.name: r for r in broken_mechanisms.RECORDS}  # registered at run time, audited by name
    claims = {"laplace-rdt-no-empty-noise": ["--epsilon", "1"],
              "kanon-rdt-no-suppression": ["--epsilon", "2", "--k", "3", "--beta", "0.5", "--aim", "sparse"]}
    for name, claim in claims.items():
        registry.register(broken[name])
        try:
            assert _cli(name, *source, *claim) == 1, name
        finally:
            registry.unregister(name)
        captured = capsys.readouterr()
        assert "FAIL" in captured.out and "seed 1 (--seed replays this audit)" in captured.err
    assert _cli("kanon-rdt", "--dataset", "vote", "--epsilon", "2", "--k", "3") == 2
    assert "kanon-rdt needs --k and --beta" in capsys.readouterr().err
    assert _cli("laplace-rdt", "--dataset", "vote", "--epsilon", "1", "--beta", "0.5") == 2
    assert "laplace-rdt takes no --beta" in capsys.readouterr().err
    assert _cli("kanon-rdt", "--dataset", "vote", "--epsilon", "0.1", "--k", "3", "--beta", "0.5") == 2
    assert "below -ln(1 - beta)" in capsys.readouterr().err
    assert main(["privacy", "audit-dp", "laplace-rdt", "--dataset", "vote", "--epsilon", "1", "--trials", "10"]) == 2
    assert "at least 100 trials" in capsys.readouterr().err


def test_the_cli_never_shows_a_row_of_the_table(tmp_path, capsys):
    """kanon-rdt's target may add a copy of a real row (here: a row alone in its cells); text and JSON describe it
    by where it was chosen and its cells' sizes, never by its values or class."""
    rng = np.random.default_rng(5)
    schema = Schema((NumericAttribute("income", 0.0, 1000.0),
                     CategoricalAttribute("colour", ("ochre", "teal", "umber")),
                     NumericAttribute("height", 100.0, 220.0)), "label", ("no_label", "yes_label"))
    X = np.column_stack([np.round(rng.uniform(0, 1000, 10), 4), rng.integers(0, 3, 10),
                         np.round(rng.uniform(100, 220, 10), 4)])
    y = rng.integers(0, 2, 10)
    data, schema_file = tmp_path / "owner.csv", tmp_path / "owner.schema.json"
    frame = schema.decode(X, y)
    frame.to_csv(data, index=False)
    schema.save(schema_file)
    argv = ["privacy", "audit-dp", "kanon-rdt", "--data", str(data), "--class-column", "label", "--schema",
            str(schema_file), "--epsilon", "2", "--k", "2", "--beta", "0.5", "--trees", "2", "--max-depth", "3",
            "--trials", "100", "--seed", "1"]
    assert main([*argv, "--json"]) == 0
    as_json = capsys.readouterr()
    added = json.loads(as_json.out)["neighbours"]["added_row"]
    assert added.startswith("a copy of one row of the table, where its cells")
    assert main(argv) == 0
    as_text = capsys.readouterr()
    shown = as_json.out + as_json.err + as_text.out + as_text.err
    assert "a copy of one row of the table" in as_text.err and "r's cell counts in D: [1, 1, 4]" in as_text.err
    values = {str(v) for v in frame[["income", "height"]].to_numpy().ravel()} | {*schema.attributes[1].categories,
                                                                                  *schema.classes}
    assert not [v for v in values if v in shown]
