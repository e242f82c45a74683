"""laplace-rdt: the dp requirement, the noise (scale, post-processing, law), release, audit, CLI."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from modelshare.cli import main
from modelshare.common.audit.release import audit
from modelshare.common.federation.model_io import read_model, write_release
from modelshare.common.federation.wire import tree_to_pb
from modelshare.common.mechanisms.laplace_rdt import (
    POST_PROCESSING,
    LaplaceRdt,
    leaf_class_counts,
)
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.noise import SecretNoise, SecureNoise, SeededNoise, discrete_laplace_log_pmf
from modelshare.common.privacy.report import PathClaim, Release
from modelshare.common.privacy.requirements import (
    DP,
    RequirementError,
    parse_requirement,
)
from modelshare.common.trees.learners.random_tree import random_structure
from modelshare.common.trees.rebuild import rebuild
from modelshare.common.trees.tree import Node, Tree

REQUIREMENT = "dp:epsilon=1,trees=4"
DEPTH = 2


@pytest.fixture(scope="module")
def forest(nursery) -> Release:
    schema, X, y = nursery
    # the paper's mechanism (no class histogram: tests/common/mechanisms/test_class_prior.py covers the default share)
    return release("laplace-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH, prior_share=0.0)


def failing(result) -> list:
    return [c for c in result.checks if not c.passed]


# ------------------------------------------------------------ the requirement
def test_dp_requirements_parse_to_a_canonical_string():
    parsed = parse_requirement(" dp: trees=10, epsilon=1.0 ")
    assert parsed == DP(1.0, 10) and str(parsed) == "dp:epsilon=1,trees=10"
    assert parse_requirement(str(parsed)) == parsed
    assert str(parse_requirement("dp:epsilon=0.25,trees=3")) == "dp:epsilon=0.25,trees=3"
    assert parsed.describe() == "1-DP (add/remove one row)"


# ------------------------------------------------------------------ the noise
def test_the_mechanism_validates_its_setting():
    for bad, name in (({"epsilon": 0.0}, "epsilon"), ({"epsilon": math.nan}, "epsilon"), ({"n_trees": 0}, "n_trees"),
                      ({"depth": 0}, "depth"), ({"max_nodes": True}, "max_nodes")):
        with pytest.raises(ValueError, match=name):
            LaplaceRdt(**{"epsilon": 1.0, "n_trees": 2, "depth": 2, **bad})
    assert LaplaceRdt(0.5, 10, 3).scale == 20.0


@pytest.mark.parametrize("true, scale", [(0, 0.5), (0, 4.0), (3, 1.0), (40, 2.0)])
def test_discrete_laplace_log_pmf_is_the_law_of_a_released_count(true, scale):
    support = np.arange(0, true + 60 * scale + 10)
    pmf = np.exp(discrete_laplace_log_pmf(support, np.full(support.size, true), scale))
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
    draws = LaplaceRdt(1 / scale, 1, 1).noisy_counts(np.full(200_000, float(true)),
                                                     SeededNoise(np.random.default_rng(1)))
    observed = np.bincount(draws.astype(np.int64), minlength=support.size)[: support.size] / draws.size
    assert np.abs(observed - pmf).max() < 5 * np.sqrt(pmf.max() / draws.size)


def test_discrete_laplace_log_pmf_stays_finite_in_the_far_tails():
    values = discrete_laplace_log_pmf(np.array([0, 1, 1000, 0]), np.array([1000, 0, 0, 0]), 1.0)
    assert np.isfinite(values).all() and values[2] < -990 and values[0] < -990


def _noise(release_trees: list[Tree], structure_seed: int, schema, X, y) -> tuple[np.ndarray, np.ndarray]:
    """(released - true) at every (leaf, class) cell of a leaf holding a row, and those cells' true counts.

    A row of each non-empty structure leaf is routed through the released tree, which keeps that
    leaf unless all its released counts are 0 (then it stops above it and reads 0 here).
    """
    diffs, trues = [], []
    for t, released in enumerate(release_trees):
        structure = random_structure(schema, DEPTH, structure_seed, t)
        true = leaf_class_counts(structure, X, y)
        node = structure.apply(X)
        leaves, first = np.unique(node, return_index=True)
        reached = released.apply(X[first])
        counts = np.stack([released.nodes[i].counts if released.nodes[i].is_leaf else np.zeros(schema.n_classes)
                           for i in reached])
        diffs.append((counts - true[leaves]).ravel())
        trues.append(true[leaves].ravel())
    return np.concatenate(diffs), np.concatenate(trues)


def test_the_noise_has_the_stated_scale_and_reaches_empty_cells(nursery):
    """Var(rint(L)) = 2b^2 + 1/12 (Sheppard) for Laplace(b) and counts far from 0 (no clamping).

    The sample variance of n Laplace draws has variance (mu4 - sigma^4)/n = 20 b^4/n, so it must lie
    within 4 standard deviations of 2b^2 + 1/12; a halved scale (variance b^2/2) is 30 of them away.
    Empty cells must be noised too: P[released >= 1 | true 0] = P[L >= 0.5] = e^(-0.5/b)/2.
    """
    schema, X, y = nursery
    mechanism = LaplaceRdt(1.0, 4, DEPTH)
    b = mechanism.scale
    far, empty = [], []
    for seed in range(15):
        fitted = mechanism.fit(schema, X, y, seed)
        diff, true = _noise(fitted.trees, fitted.structure_seed, schema, X, y)
        far.append(diff[true >= 15 * b])
        empty.append(diff[true == 0] >= 1)
    noise, nonzero = np.concatenate(far), np.concatenate(empty)
    assert noise.size > 1000 and nonzero.size > 500
    expected = 2 * b**2 + 1 / 12
    assert abs(noise.var() - expected) < 4 * math.sqrt(20 * b**4 / noise.size)
    assert abs(noise.mean()) < 4 * math.sqrt(expected / noise.size)
    p = 0.5 * math.exp(-0.5 / b)
    assert abs(nonzero.mean() - p) < 4 * math.sqrt(p * (1 - p) / nonzero.size)


def test_the_structure_never_reads_the_rows(nursery):
    schema, X, y = nursery
    mechanism = LaplaceRdt(1.0, 2, 3)
    a, b = mechanism.fit(schema, X, y, 3), mechanism.fit(schema, X[:100], y[:100], 3)
    assert a.structure_seed == b.structure_seed
    for t, tree in enumerate(a.trees):
        full = random_structure(schema, 3, a.structure_seed, t)
        assert {n.attribute for n in tree.nodes} <= {n.attribute for n in full.nodes}


def test_a_structure_too_large_to_noise_is_refused(nursery):
    schema, X, y = nursery
    with pytest.raises(ValueError, match="more than max_nodes=50"):
        LaplaceRdt(1.0, 1, 4, max_nodes=50).fit(schema, X, y, 0)


def test_a_tree_whose_counts_all_round_to_zero_is_a_bare_root(nursery):
    class Silent(LaplaceRdt):
        def noisy_counts(self, true: np.ndarray, noise: SecretNoise) -> np.ndarray:
            return np.zeros_like(true)

    schema, X, y = nursery
    [tree] = Silent(1.0, 1, 2).fit(schema, X, y, 0).trees
    assert len(tree.nodes) == 1 and tree.root.total == 0.0


# --------------------------------------------------------- release and audit
def test_the_release_states_its_setting_and_passes_its_audit(forest, nursery, tmp_path):
    schema, X, y = nursery
    report = forest.report
    assert report.mechanism == "laplace-rdt" and report.requirement == REQUIREMENT
    assert report.guarantee == "1-DP (add/remove one row)"
    assert report.parameters == {
        "disclosure": "counts", "epsilon": 1.0, "trees": 4, "depth": DEPTH, "epsilon_per_tree": 0.25,
        "sensitivity": 1, "noise_scale": 4.0, "post_processing": POST_PROCESSING, "noise_source": SecureNoise.source,
    }
    assert report.claims == ()
    assert len(forest.trees) == 4 and all(t.depth <= DEPTH and t.disclosure == "counts" for t in forest.trees)
    assert all(abs(t.root.total - len(y)) < 400 for t in forest.trees)  # noise of sd ~6 on ~100 cells
    result = audit(forest.trees, report)
    assert result.passed, failing(result)
    assert [c.name for c in result.checks] == [
        "inner nodes derive from leaves", "mechanism", f"parameters restate {REQUIREMENT}",
        "public domain", "secret draws from a secure sampler", "noise scale recomputed from (epsilon, trees)",
        "counts post-processed as stated", "claims", "reported attack counts",
    ]
    noise = next(c for c in result.checks if c.name.startswith("noise scale"))
    assert "Laplace scale 4 per count" in noise.detail and "cannot be seen in the release" in noise.detail
    path = tmp_path / "forest.json"
    write_release(forest, path)
    trees, back = read_model(path)
    assert back == report and [tree_to_pb(t) for t in trees] == [tree_to_pb(t) for t in forest.trees]
    assert audit(trees, back).passed


def test_the_noise_is_secret_unless_a_seed_is_given(nursery):
    schema, X, y = nursery
    a, b = (release("laplace-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH) for _ in range(2))
    assert [tree_to_pb(t) for t in a.trees] != [tree_to_pb(t) for t in b.trees]
    c, d = (release("laplace-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH, random_state=7)
            for _ in range(2))
    assert [tree_to_pb(t) for t in c.trees] == [tree_to_pb(t) for t in d.trees]


def test_the_release_refuses_other_requirements_and_hit_miss(nursery):
    schema, X, y = nursery
    with pytest.raises(RequirementError, match="laplace-rdt takes 'dp:epsilon=E,trees=T'"):
        release("laplace-rdt", schema=schema, X=X, y=y, requirement="dps:k=5,beta=0.3,epsilon=4,trees=4", max_depth=2)
    with pytest.raises(ValueError, match="disclosure 'hit_miss' is refused"):
        release("laplace-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=2, disclosure="hit_miss")
    with pytest.raises(ValueError, match="mechanism 'apt' prunes a trained tree; pass tree="):
        release("apt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=2)
    with pytest.raises(ValueError, match="depth"):
        release("laplace-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=0)
    tree = release("none", tree=Tree(schema, [Node.from_counts(np.ones(schema.n_classes))])).tree
    with pytest.raises(RequirementError,
                       match="a dp guarantee is met by mechanism 'diffpets' or 'dpea' or 'dpea-nb' or 'laplace-rdt'"):
        release("apt", tree=tree, requirement=REQUIREMENT)
    with pytest.raises(ValueError, match="'laplace-rdt' trains its own trees from the rows; pass schema="):
        release("laplace-rdt", tree=tree, requirement=REQUIREMENT)


def test_the_audit_recomputes_the_scale_and_checks_the_setting(forest):
    def with_params(**changes):
        return dataclasses.replace(forest.report, parameters={**forest.report.parameters, **changes})

    [bad] = failing(audit(forest.trees, with_params(noise_scale=2.0)))
    assert bad.name == "noise scale recomputed from (epsilon, trees)" and "noise_scale=2.0, recomputed 4" in bad.detail
    [bad] = failing(audit(forest.trees, with_params(sensitivity=0.5)))
    assert "sensitivity=0.5" in bad.detail
    [bad] = failing(audit(forest.trees, with_params(epsilon=0.5)))
    assert bad.name == f"parameters restate {REQUIREMENT}" and "epsilon=0.5 (expected 1)" in bad.detail
    [bad] = failing(audit(forest.trees, with_params(depth=1)))
    assert "deeper than the stated depth 1" in bad.detail
    [bad] = failing(audit(forest.trees, with_params(post_processing="none")))
    assert bad.name == "counts post-processed as stated"
    boasting = dataclasses.replace(forest.report, guarantee="0.01-DP (add/remove one row)")
    [bad] = failing(audit(forest.trees, boasting))
    assert "guarantee '0.01-DP (add/remove one row)'" in bad.detail
    three = audit(forest.trees[:3], forest.report)
    assert "the model carries 3 trees; the report states 4" in failing(three)[0].detail
    kanon = dataclasses.replace(forest.report, mechanism="kanon-rdt")
    [bad] = failing(audit(forest.trees, kanon))
    assert bad.name == "mechanism" and "makes no dp releases" in bad.detail
    claims = dataclasses.replace(forest.report, claims=(PathClaim(0, 1.0, REQUIREMENT),))
    assert [c.name for c in failing(audit(forest.trees, claims))] == ["claims"]


def test_the_audit_catches_fractional_counts(forest):
    tree = forest.trees[0]
    leaf = next(i for i in tree.leaves if tree.nodes[i].total > 0)
    nodes = [dataclasses.replace(n, edges=list(n.edges)) for n in tree.nodes]
    nodes[leaf] = dataclasses.replace(Node.from_counts(tree.nodes[leaf].counts + 0.5), attribute=None, edges=[])
    bent = [rebuild(tree.schema, nodes, "counts"), *forest.trees[1:]]
    report = dataclasses.replace(forest.report, attacks=audit(bent, None).attacks)
    [bad] = failing(audit(bent, report))
    assert bad.name == "counts post-processed as stated" and "not whole numbers" in bad.detail


# ---------------------------------------------------------------------- CLI
def test_cli_release_then_audit_and_a_hand_edited_file_fails(tmp_path, capsys):
    model = tmp_path / "m.json"
    assert main(["release", "--mechanism", "laplace-rdt", "--requirement", "dp:epsilon=1,trees=10", "--max-depth", "4",
                 "--dataset", "car", "--out", str(model), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trees"] == 10 and summary["report"]["guarantee"] == "1-DP (add/remove one row)"
    assert summary["released_depth"] <= 4
    assert main(["audit", str(model)]) == 0
    assert "PASS" in capsys.readouterr().out
    text = json.loads(model.read_text())
    text["report"]["parameters"]["noise_scale"] = 1.0
    model.write_text(json.dumps(text))
    assert main(["audit", str(model), "--json"]) == 1
    checks = {c["name"]: c["passed"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["noise scale recomputed from (epsilon, trees)"] is False
    assert main(["release", "--mechanism", "laplace-rdt", "--requirement", "dp:epsilon=1,trees=10",
                 "--dataset", "car", "--out", str(model)]) == 2
    assert "needs --requirement 'dp:epsilon=E,trees=T' and --max-depth D" in capsys.readouterr().err
    assert main(["release", "--mechanism", "apt", "--requirement", "dp:epsilon=1,trees=10", "--dataset", "car",
                 "--out", str(model)]) == 2
    assert ("a dp guarantee is met by mechanism 'diffpets' or 'dpea' or 'dpea-nb' or 'laplace-rdt'"
            in capsys.readouterr().err)


def test_auditors_do_not_import_the_random_tree_code():
    """The miner's verifier processes import `modelshare.common.audit.release`;
    laplace-rdt must not make them load scikit-learn."""
    code = "import sys, modelshare.common.audit.release; sys.exit('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
