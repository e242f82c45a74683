"""DPEA: accounting, settings, the samplers' law (exact vs enumeration, MCMC kernel), released trees, PGEN."""

from __future__ import annotations

import math
import subprocess
import sys

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.signing import sign_payload
from modelshare.common.federation.wire import model_message
from modelshare.common.mechanisms.dpea import (
    DPEA,
    MECHANISM,
    POST_PROCESSING,
    SCORES,
    Domain,
    _Chain,
    accounting_errors,
    finest_bins,
    leaf_scores,
    score_sensitivity,
    train_dpea,
)
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.attacks import ensemble_attack_report
from modelshare.common.privacy.noise import SecureNoise
from modelshare.common.privacy.report import PrivacyReport, Release
from modelshare.common.privacy.requirements import DP
from modelshare.common.trees.learners._data import check_xy
from modelshare.common.trees.tree import CategorySet, Interval
from modelshare.miner_node.pgen import pgen, pgen_ensemble
from tests.federation_helpers import make_federation, study_spec


@pytest.fixture(scope="module")
def small():
    """40 rows over four categorical attributes (arities 2, 3, 2, 2): 54 subtrees of two levels."""
    schema = Schema(tuple(CategoricalAttribute(name, tuple("012"[:k]))
                          for name, k in zip("abcd", (2, 3, 2, 2), strict=False)),
                    "label", ("no", "yes"))
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, k, 40) for k in (2, 3, 2, 2)]).astype(np.float64)
    y = ((X[:, 0] + X[:, 1] > 1) ^ (rng.random(40) < 0.15)).astype(np.int64)
    return schema, X, y


@pytest.fixture(scope="module")
def vote():
    table = load_dataset("vote")
    X, y = table.schema.encode(table.frame)
    return table.schema, X, y


def _enumerated_law(mechanism: DPEA, small) -> tuple[list, np.ndarray]:
    """Alg. 2 literally: every root subtree, P ∝ exp(beta * score)."""
    found = mechanism.subtree_scores(*small)
    logits = mechanism.selection_beta * np.array([q for _, q in found])
    p = np.exp(logits - logits.max())
    return [s for s, _ in found], p / p.sum()


def _chi_square_p(observed: np.ndarray, p: np.ndarray) -> float:
    """Chi-square p-value of counts against probabilities, the
    cells expected below 5 pooled into one (there are some)."""
    expected = p * observed.sum()
    rare = expected < 5
    assert rare.any()
    f_obs = np.append(observed[~rare], observed[rare].sum())
    f_exp = np.append(expected[~rare], expected[rare].sum())
    return float(chisquare(f_obs, f_exp).pvalue)


# ------------------------------------------------------------------ accounting
def test_the_budget_is_split_over_rounds_plus_the_leaves():
    m = DPEA(2.0, 4, 5, embedding_depth=2)
    assert (m.steps, m.rounds, m.epsilon_per_tree) == (2, 3, 0.5)
    assert m.epsilon_step == pytest.approx(0.5 / 4) and m.noise_scale == pytest.approx(8.0)
    assert m.selection == "monotone" and m.selection_beta == pytest.approx(0.125)  # eps' / Δq'
    assert DPEA(2.0, 4, 5, embedding_depth=2, score="gini").selection_beta == pytest.approx(0.125 / 2)
    assert DPEA(2.0, 4, 5, embedding_depth=2, selection="paper").selection_beta == pytest.approx(0.125 / 2)
    whole = DPEA(1.0, 1, 4)
    assert (whole.steps, whole.rounds, whole.epsilon_step) == (4, 1, 0.5)
    assert DPEA(1.0, 1, 4, embedding_depth=3).rounds == 2  # ceil(4 / 3)
    stated = m.parameters()
    assert stated["epsilon"] == 2.0 and stated["trees"] == 4 and stated["depth"] == 5
    assert stated["embedding_depth"] == 2 and stated["epsilon_per_step"] == m.epsilon_step
    assert stated["selection"] == "monotone" and stated["selection_beta"] == m.selection_beta
    assert stated["sampler"] == "exact" and stated["guarantee_exact"] is True
    assert stated["post_processing"] == POST_PROCESSING and "buffer_size" not in stated
    mcmc = DPEA(1.0, 1, 4, sampler="mcmc").parameters()
    assert mcmc["sampler"] == "mcmc" and mcmc["guarantee_exact"] is False
    assert (mcmc["buffer_size"], mcmc["var_threshold"], mcmc["step_limit"]) == (100, 1.0, 5000)
    assert MECHANISM == "dpea"


def test_the_stated_accounting_is_recomputed_from_the_setting():
    stated = {"disclosure": "counts", **DPEA(1.0, 3, 4, embedding_depth=2, sampler="mcmc").parameters()}
    assert accounting_errors(stated) == []
    assert accounting_errors({**stated, "noise_scale": 4.5}) == ["noise_scale=4.5, recomputed 9.0"]
    assert accounting_errors({**stated, "guarantee_exact": True}) == ["guarantee_exact=True, recomputed False"]
    assert "not a valid dpea setting" in accounting_errors({**stated, "embedding_depth": 7})[0]
    paper = {**stated, "selection": "paper"}  # a sharper beta than the stated selection allows
    beta = stated["selection_beta"]
    assert accounting_errors(paper) == [f"selection_beta={beta!r}, recomputed {beta / 2!r}"]


@pytest.mark.parametrize("bad, name", [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": math.inf}, "epsilon"), ({"n_trees": 0}, "n_trees"),
    ({"depth": True}, "depth"), ({"embedding_depth": 4}, "embedding_depth"),
    ({"embedding_depth": 0}, "embedding_depth"),
    ({"score": "entropy"}, "score"), ({"sampler": "gibbs"}, "sampler"), ({"bins": 1}, "bins"),
    ({"selection": "sharp"}, "selection"),
    ({"buffer_size": 1}, "buffer_size"), ({"var_threshold": -1.0}, "var_threshold"),
    ({"var_threshold": math.inf}, "var_threshold"), ({"score": "infogain"}, "max_rows"),
    ({"max_rows": 100}, "max_rows"), ({"max_nodes": 0}, "max_nodes"),
])
def test_the_setting_is_validated(bad, name):
    with pytest.raises(ValueError, match=name):
        DPEA(**{"epsilon": 1.0, "n_trees": 1, "depth": 3, **bad})


def test_scores_and_their_leaf_terms():
    counts = np.array([[3.0, 1.0], [0.0, 0.0], [2.0, 2.0]])
    assert leaf_scores(counts, "max").tolist() == [3, 0, 2]
    assert leaf_scores(counts, "gini") == pytest.approx([10 / 4 - 4, 0, 2 - 4])
    assert leaf_scores(counts, "infogain") == pytest.approx([3 * math.log2(3 / 4) + math.log2(1 / 4), 0, -4])
    assert DPEA(1.0, 1, 2, score="infogain", max_rows=1023).score_sensitivity == pytest.approx(10 + 1 / math.log(2))


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(0, 60), min_size=2, max_size=5), cls=st.integers(0, 4),
       score=st.sampled_from(SCORES))
def test_every_score_is_monotone_with_its_sensitivity(counts, cls, score):
    """Adding a row moves a leaf term one way only (up for max, down for the impurities), by at most Δq'.

    What the monotone selection (beta = eps' / Δq') rests on: the whole subtree's score moves the
    same way for every candidate, since the row lands in one leaf of each.
    """
    before = np.array(counts, dtype=np.float64)
    after = before.copy()
    after[cls % before.size] += 1
    change = float(leaf_scores(after, score) - leaf_scores(before, score))
    bound = score_sensitivity(score, max_rows=int(after.sum()))
    assert (0 <= change <= bound + 1e-9) if score == "max" else (-bound - 1e-9 <= change <= 1e-12)


def test_importing_dpea_keeps_sklearn_and_scipy_out():
    code = "import sys, modelshare.common.mechanisms.dpea; print([m for m in ('sklearn', 'scipy') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ the law
@pytest.mark.parametrize("score", ["max", "gini"])
def test_the_exact_law_is_the_enumerated_exponential_mechanism(small, score):
    """Whole tree (one round): the sum-product log-probabilities equal Alg. 2's enumeration exactly."""
    mechanism = DPEA(4.0, 1, 2, score=score)
    structures, p = _enumerated_law(mechanism, small)
    assert len(structures) == 54 and p.max() / p.min() > 20  # far from uniform
    assert mechanism.structure_log_probs(*small, structures) == pytest.approx(np.log(p), abs=1e-9)


def _one_step_scores(X: np.ndarray, y: np.ndarray, attrs: list[int]) -> np.ndarray:
    """sum over the values of a of the majority count: the one-level max score, by plain loops."""
    return np.array([sum(np.bincount(y[X[:, a] == v], minlength=2).max() for v in np.unique(X[:, a])) for a in attrs])


def test_the_exact_law_composes_over_rounds(small):
    """d = 1, D = 2: the root's marginal and the law below it are one-step exponential mechanisms with eps'."""
    schema, X, y = small
    mechanism = DPEA(4.0, 1, 2, embedding_depth=1)
    beta = mechanism.selection_beta  # eps' = 4/3 over two rounds and the leaves
    structures = Domain.of(schema, 5).structures(2)
    p = np.exp(mechanism.structure_log_probs(schema, X, y, structures))
    assert p.sum() == pytest.approx(1.0)
    roots = np.array([s[0] for s in structures])
    root_law = np.exp(beta * _one_step_scores(X, y, [0, 1, 2, 3]))
    assert [p[roots == a].sum() for a in range(4)] == pytest.approx(root_law / root_law.sum())
    in_b = [i for i, s in enumerate(structures) if s[0] == 1]  # root b (arity 3): the attribute under b = 0
    under = np.array([structures[i][1][0][0] for i in in_b])
    conditional = [p[in_b][under == a].sum() / p[in_b].sum() for a in (0, 2, 3)]
    rows = X[:, 1] == 0
    law = np.exp(beta * _one_step_scores(X[rows], y[rows], [0, 2, 3]))
    assert conditional == pytest.approx(law / law.sum())


@pytest.mark.parametrize("sampler, steps", [("exact", 2), ("exhaustive", 2), ("exact", 1)])
def test_the_samplers_draw_the_exact_law(small, sampler, steps):
    """1000 trees drawn by `fit` against the exact law (chi-square), for one round and for two."""
    schema, X, y = small
    mechanism = DPEA(4.0 * 1000, 1000, 2, embedding_depth=steps, sampler=sampler)  # 4.0 per tree
    structures = Domain.of(schema, 5).structures(2)
    p = np.exp(DPEA(4.0, 1, 2, embedding_depth=steps).structure_log_probs(schema, X, y, structures))
    index = {s: i for i, s in enumerate(structures)}
    drawn = mechanism.fit(schema, X, y, np.random.default_rng(3)).structures
    observed = np.bincount([index[s] for s in drawn], minlength=len(structures))
    assert _chi_square_p(observed, p) > 1e-3


def test_the_mcmc_chain_converges_to_the_exponential_mechanism(small):
    """A long chain's occupancy against the exact law; without the Hastings ratio it is ~0.15 off in TV."""
    mechanism = DPEA(4.0, 1, 2)
    structures, p = _enumerated_law(mechanism, small)
    domain, data = mechanism._prepare(*small)  # the chain is internal; its kernel is what is tested
    chain = _Chain(data, np.arange(40), 2, domain.splittable, mechanism.selection_beta, np.random.default_rng(1))
    index = {s: i for i, s in enumerate(structures)}
    visits = np.zeros(len(structures))
    for _ in range(20_000):
        chain.step()
        visits[index[chain.state]] += 1
    assert 0.5 * np.abs(visits / visits.sum() - p).sum() < 0.06


class _Counting(_Chain):
    """A chain that counts its steps."""

    steps = 0

    def step(self) -> None:
        self.steps += 1
        super().step()


def test_the_mcmc_stops_on_a_settled_buffer_or_the_step_limit(small):
    domain, data = DPEA(1.0, 1, 3)._prepare(*small)
    greedy = _Counting(data, np.arange(40), 3, domain.splittable, 1e6, np.random.default_rng(0))
    walk = _Counting(data, np.arange(40), 3, domain.splittable, 0.0, np.random.default_rng(0))
    greedy.run(buffer_size=20, var_threshold=0.0, step_limit=300)
    walk.run(buffer_size=1000, var_threshold=0.0, step_limit=300)  # never a full buffer: the limit stops it
    assert 20 <= greedy.steps < 300 and walk.steps == 300


# ------------------------------------------------------------------ releases
@pytest.mark.parametrize("steps", [1, 2, 3])
def test_released_trees_are_valid_count_trees(vote, steps):
    schema, X, y = vote
    release = DPEA(1.0, 2, 3, embedding_depth=steps).fit(schema, X, y, np.random.default_rng(0))
    arity = Domain.of(schema, 5).arity
    for tree, structure in zip(release.trees, release.structures, strict=False):
        tree.validate()
        assert tree.disclosure == "counts" and tree.depth <= 3
        counts = np.stack([node.counts for node in tree.nodes])
        assert (counts >= 0).all() and (counts == np.rint(counts)).all()
        for path in tree.paths():  # each attribute at most once per path
            assert len(set(path.attributes)) == len(path.attributes)
        stack = [(structure, 0)]  # the full structure: every domain value has a child, to depth D (B1, B4)
        while stack:
            node, depth = stack.pop()
            if node is None:
                assert depth == 3
                continue
            assert len(node[1]) == arity[node[0]]
            stack.extend((c, depth + 1) for c in node[1])


def test_leaf_counts_get_laplace_noise_of_scale_one_over_eps_prime():
    """One attribute, D = 1: the structure is forced, so 1000 trees show the leaves' noise alone.

    eps_t = 2 and one round, so eps' = 1: rint(Laplace(1)) has variance 2 + 1/12 (Sheppard); the sample
    variance of 2000 draws has standard deviation sqrt(20/2000) = 0.1. The empty value's leaf is noised
    too: P[released >= 1] = P[L >= 0.5] = e^-0.5 / 2 per class, and it is dropped when both are 0.
    """
    schema = Schema((CategoricalAttribute("a", ("0", "1", "2")),), "label", ("no", "yes"))
    X = np.array([[0.0]] * 60 + [[1.0]] * 40)
    y = np.array([0] * 60 + [1] * 40)
    values = np.array([[0.0], [1.0], [2.0]])
    released = []
    for tree in DPEA(2000.0, 1000, 1).fit(schema, X, y, np.random.default_rng(0)).trees:
        reached = [tree.nodes[i] for i in tree.apply(values)]
        released.append([node.counts if node.is_leaf else np.zeros(2) for node in reached])
    counts = np.array(released)  # (trees, value, class)
    noise = np.concatenate([counts[:, 0, 0] - 60, counts[:, 1, 1] - 40])
    assert noise.var() == pytest.approx(2 + 1 / 12, abs=0.4) and abs(noise.mean()) < 0.15
    assert (counts[:, 2] >= 1).mean() == pytest.approx(math.exp(-0.5) / 2, abs=0.04)


def test_numeric_attributes_split_into_equal_width_bins_of_the_public_range(mixed):
    schema, X, y = mixed
    tree = DPEA(5.0, 1, 2, bins=5).fit(schema, X, y, np.random.default_rng(0)).trees[0]
    size = schema.attributes[1]
    seen = False
    for node in tree.nodes:
        if node.attribute == 1:  # size on [0, 10]: edges 2, 4, 6, 8
            seen = True
            highs = [e.constraint.high for e in node.edges if isinstance(e.constraint, Interval)]
            assert set(highs) <= {2.0, 4.0, 6.0, 8.0, math.inf} and size.low == 0.0
        elif node.attribute == 0:
            assert all(isinstance(e.constraint, CategorySet) for e in node.edges)
    assert seen  # size carries the learnable rule, so a 5-DP selection picks it
    assert (tree.predict(X) == y).mean() > 0.8


def test_pgen_regenerates_rows_from_a_release(nursery, mixed):
    for schema, X, y in (nursery, mixed):
        trees, stated = train_dpea(schema, X, y, DP(2.0, 2), 3, np.random.default_rng(0))
        assert len(trees) == 2 and stated["trees"] == 2 and stated["epsilon"] == 2.0 and stated["depth"] == 3
        rows, labels = pgen_ensemble(trees, scale=1.0, beta=1.0, rng=np.random.default_rng(1))
        assert len(y) <= len(labels) < 3 * len(y)  # clamped noise on the many empty leaves adds rows
        check_xy(schema, rows, labels)
        single, _ = pgen(trees[0], rng=np.random.default_rng(1))
        assert len(single) == round(trees[0].root.total)


def test_the_worst_case_structure_is_refused_before_reading_rows(nursery):
    schema, X, y = nursery
    with pytest.raises(ValueError, match=r"can have 346 nodes, more than max_nodes=300"):  # 1 + 5 + 5*4 + 5*4*4 + ...
        DPEA(1.0, 1, 4, max_nodes=300).fit(schema, X[:, :2], y)  # refused before the rows' shape is checked
    adult = load_dataset("adult").schema
    with pytest.raises(ValueError, match="more than max_nodes=100000"):
        DPEA(1.0, 1, 5).fit(adult, np.zeros((1, 14)), np.zeros(1))
    with pytest.raises(ValueError, match="exceeds max_subtrees=1000"):
        DPEA(1.0, 1, 2, sampler="exhaustive", max_subtrees=1000).fit(schema, X, y)
    with pytest.raises(ValueError, match="more than max_rows=100"):
        DPEA(1.0, 1, 2, score="infogain", max_rows=100).fit(schema, X, y)


def test_a_seed_replays_a_release(small):
    a = DPEA(1.0, 2, 3, embedding_depth=1).fit(*small, 7)
    b = DPEA(1.0, 2, 3, embedding_depth=1).fit(*small, 7)
    assert a.structures == b.structures
    assert all(np.array_equal(s.counts, t.counts) for x, y in zip(a.trees, b.trees, strict=False)
               for s, t in zip(x.nodes, y.nodes, strict=False))


# ------------------------------------------------------------------ the audit of the sampler
def _mcmc_release(schema, X, y, requirement: DP, depth: int) -> Release:
    """A DPEA release drawn by the MCMC sampler, its report as `release` would state it (guarantee_exact: False)."""
    mechanism = DPEA(requirement.epsilon, requirement.trees, depth, bins=finest_bins(schema, depth), sampler="mcmc")
    trees = mechanism.fit(schema, X, y).trees
    report = PrivacyReport(mechanism=MECHANISM, parameters={"disclosure": "counts", **mechanism.parameters(),
                                                            "noise_source": SecureNoise.source},
                           guarantee=requirement.describe(), requirement=str(requirement),
                           attacks=ensemble_attack_report(trees))
    return Release(tuple(trees), report)


def test_an_mcmc_release_fails_the_audit_of_a_dp_claim_and_an_exact_one_passes(vote):
    schema, X, y = vote
    requirement = DP(2.0, 2)
    exact = release(MECHANISM, requirement=str(requirement), schema=schema, X=X, y=y, max_depth=3)
    assert audit(exact.trees, exact.report).passed
    mcmc = _mcmc_release(schema, X, y, requirement, 3)
    assert mcmc.report.parameters["guarantee_exact"] is False and accounting_errors(mcmc.report.parameters) == []
    result = audit(mcmc.trees, mcmc.report)
    failed = [c for c in result.checks if not c.passed]
    assert not result.passed and [c.name for c in failed] == ["exact sampler"]
    assert "guarantee_exact=False (sampler 'mcmc')" in failed[0].detail
    assert "proves no dp claim" in failed[0].detail


def test_the_miner_refuses_an_mcmc_release_under_a_dp_study(tmp_path, vote):
    schema, X, y = vote
    spec = study_spec("dpea-mcmc", dataset="vote", mechanism=MECHANISM, requirement="dp:epsilon=2,trees=2",
                      disclosure="counts", max_depth=3)
    with make_federation(tmp_path, ["site-a"]) as fed:
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10).spec
        message = model_message(_mcmc_release(schema, X, y, DP(2.0, 2), 3), study_id=spec.study_id, owner_id="site-a")
        with pytest.raises(grpc.RpcError) as info:
            fed.stub("site-a").Submit(sign_payload(message.SerializeToString(), fed.key("site-a")), timeout=60)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ("re-audit of the claims failed: exact sampler: the release states guarantee_exact=False"
            in info.value.details())
