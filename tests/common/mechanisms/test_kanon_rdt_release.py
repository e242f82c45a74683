"""k-AnonToRdt as a release mechanism: the dps requirement, release, audit, wire, PGEN, owner, miner, CLI."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any

import grpc
import numpy as np
import pytest

from modelshare.cli import main
from modelshare.common.audit.release import audit
from modelshare.common.federation.model_io import read_model, read_tree, write_release
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import sign_payload
from modelshare.common.federation.study import StudyError, spec_from_mapping
from modelshare.common.federation.wire import MAX_TREES, WireError, decode_model, model_message, tree_to_pb
from modelshare.common.mechanisms.kanon_rdt import counts_below_k
from modelshare.common.mechanisms.release import release as release_model
from modelshare.common.privacy.attacks import ensemble_attack_report
from modelshare.common.privacy.dps import compose
from modelshare.common.privacy.noise import SecureNoise
from modelshare.common.privacy.report import PathClaim, Release
from modelshare.common.privacy.requirements import (
    DPS,
    RequirementError,
    parse_requirement,
)
from modelshare.common.trees.rebuild import rebuild
from modelshare.common.trees.tree import Node, Tree, TreeError
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine
from modelshare.miner_node.pgen import ensemble_rows, pgen_ensemble
from modelshare.miner_node.verify import Rejection, StudyTerms, check_model
from modelshare.owner_node.training import build_submission
from tests.federation_helpers import deal, make_federation, signed_model, study_spec

REQUIREMENT = "dps:k=5,beta=0.3,epsilon=4,trees=4"
DEPTH = 3


@pytest.fixture(scope="module")
def forest(nursery) -> Release:
    schema, X, y = nursery
    return release_model("kanon-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH)


def failing(result) -> list:
    return [c for c in result.checks if not c.passed]


# ------------------------------------------------------------ the requirement
def test_dps_requirements_parse_to_a_canonical_string():
    parsed = parse_requirement(" dps: trees=10, epsilon=2.0, beta=0.010, k=5 ")
    assert parsed == DPS(5, 0.01, 2.0, 10)
    assert str(parsed) == "dps:k=5,beta=0.01,epsilon=2,trees=10"
    assert parse_requirement(str(parsed)) == parsed
    assert parsed.guarantee() == compose(5, 0.01, 2.0, 10)


# ------------------------------------------------------- release and audit
def test_the_release_states_its_setting_and_passes_its_audit(forest, nursery, tmp_path):
    schema, X, y = nursery
    g = compose(5, 0.3, 4, 4)
    report = forest.report
    assert report.mechanism == "kanon-rdt" and report.requirement == REQUIREMENT
    assert report.guarantee == "(0.3, 4, 0.0452)-DPS" == g.describe()
    assert report.parameters == {
        "disclosure": "counts", "k": 5, "beta": 0.3, "epsilon_total": 4.0, "trees": 4, "depth": DEPTH,
        "epsilon_per_tree": 1.0, "delta_per_tree": g.delta_per_tree, "delta_total": g.delta_total,
        "noise_source": SecureNoise.source,
    }
    assert report.claims == () and report.attacks == ensemble_attack_report(forest.trees)
    assert len(forest.trees) == 4 and all(t.disclosure == "counts" and t.depth <= DEPTH for t in forest.trees)
    assert counts_below_k(forest.trees, 5) == []
    roots = [t.root.total for t in forest.trees]
    assert all(0.25 * len(y) < r <= 0.3 * len(y) * 1.05 for r in roots)  # a 30 % sample, minus suppressed counts
    result = audit(forest.trees, report)
    assert result.passed, failing(result)
    assert [c.name for c in result.checks] == [
        "inner nodes derive from leaves", "mechanism", f"parameters restate {REQUIREMENT}",
        "public domain", "secret draws from a secure sampler", "delta recomputed from (k, beta, epsilon, trees)",
        "numeric threshold rule is the mechanism's", "no released nonzero count below k=5",
        "claims",
        "reported attack counts",
    ]
    assert {p.tree for p in result.paths} == {0, 1, 2, 3} and all(p.passed for p in result.paths)
    path = tmp_path / "forest.json"
    write_release(forest, path)
    trees, back = read_model(path)
    assert back == report and [tree_to_pb(t) for t in trees] == [tree_to_pb(t) for t in forest.trees]
    assert audit(trees, back).passed
    with pytest.raises(TreeError, match="an ensemble of 4 trees"):
        read_tree(path)


def test_the_log_variant_states_its_thresholds_and_passes_the_same_audit(mixed):
    """kanon-rdt-log: the log-scale thresholds stated among the parameters, kanon-rdt's checks all pass."""
    schema, X, y = mixed
    log = release_model("kanon-rdt-log", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH)
    plain = release_model("kanon-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH)
    assert log.report.mechanism == "kanon-rdt-log" and log.report.parameters["thresholds"] == "log"
    assert {k: v for k, v in log.report.parameters.items() if k != "thresholds"} == plain.report.parameters
    assert counts_below_k(log.trees, 5) == []
    result = audit(log.trees, log.report)
    assert result.passed, failing(result)
    assert [c.name for c in result.checks] == [c.name for c in audit(plain.trees, plain.report).checks]


def test_the_audit_fails_a_release_whose_threshold_rule_is_not_its_mechanisms(mixed):
    """A report that names one variant and states the other's threshold rule fails that check alone."""
    schema, X, y = mixed
    log = release_model("kanon-rdt-log", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH)
    plain = release_model("kanon-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH)
    rule = "numeric threshold rule is the mechanism's"
    dropped = dataclasses.replace(log.report, parameters=plain.report.parameters)
    [bad] = failing(audit(log.trees, dropped))
    assert bad.name == rule and "thresholds='uniform' stated, but kanon-rdt-log draws them 'log'" in bad.detail
    claimed = dataclasses.replace(plain.report, parameters=log.report.parameters)
    [bad] = failing(audit(plain.trees, claimed))
    assert bad.name == rule and "thresholds='log' stated, but kanon-rdt draws them 'uniform'" in bad.detail
    stated = dataclasses.replace(plain.report, parameters={**plain.report.parameters, "thresholds": "uniform"})
    assert audit(plain.trees, stated).passed  # the paper's rule, said explicitly, is the paper's rule


def test_the_sampling_is_secret_unless_a_seed_is_given(nursery):
    schema, X, y = nursery
    a, b = (release_model("kanon-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=2) for _ in range(2))
    assert [tree_to_pb(t) for t in a.trees] != [tree_to_pb(t) for t in b.trees]
    c = release_model("kanon-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=2, random_state=7)
    d = release_model("kanon-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=2, random_state=7)
    assert [tree_to_pb(t) for t in c.trees] == [tree_to_pb(t) for t in d.trees]


def test_the_release_refuses_hit_miss_and_other_requirements(nursery, car):
    schema, X, y = nursery
    with pytest.raises(ValueError, match="disclosure 'hit_miss' is refused"):
        release_model("kanon-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=DEPTH,
                      disclosure="hit_miss")
    with pytest.raises(RequirementError, match="kanon-rdt takes 'dps:"):
        release_model("kanon-rdt", schema=schema, X=X, y=y, requirement="k-anonymity:k=5", max_depth=DEPTH)
    with pytest.raises(ValueError, match="depth"):
        release_model("kanon-rdt", schema=schema, X=X, y=y, requirement=REQUIREMENT, max_depth=0)
    tree = release_model("none", tree=Tree(schema, [Node.from_counts(np.ones(schema.n_classes))])).tree
    with pytest.raises(RequirementError, match="a dps guarantee is met by mechanism 'kanon-rdt'"):
        release_model("apt", tree=tree, requirement=REQUIREMENT)
    with pytest.raises(ValueError, match="'kanon-rdt' trains its own trees from the rows; pass schema="):
        release_model("kanon-rdt", tree=tree, requirement=REQUIREMENT)


def _with_count(tree: Tree, node: int, label: int, count: float) -> Tree:
    """``tree`` with one leaf count changed and every inner node honestly re-summed."""
    nodes = copy.deepcopy(tree.nodes)
    changed = nodes[node].counts
    assert changed is not None
    counts = changed.copy()
    counts[label] = count
    nodes[node] = dataclasses.replace(Node.from_counts(counts), attribute=nodes[node].attribute,
                                      edges=nodes[node].edges)
    return rebuild(tree.schema, nodes, "counts")


def test_the_audit_catches_a_count_below_k(forest):
    tree = forest.trees[1]
    leaf = next(i for i in tree.leaves if np.count_nonzero(tree.nodes[i].counts) >= 2)
    label = int(np.flatnonzero(tree.nodes[leaf].counts)[-1])
    lowered = [forest.trees[0], _with_count(tree, leaf, label, 2.0), *forest.trees[2:]]
    report = dataclasses.replace(forest.report, attacks=ensemble_attack_report(lowered))  # an honest-looking liar
    result = audit(lowered, report)
    [bad] = failing(result)
    assert bad.name == "no released nonzero count below k=5" and "tree 1 node" in bad.detail and ": 2" in bad.detail
    assert [p.tree for p in result.paths if not p.passed] == [1]


def test_the_audit_recomputes_delta_and_refuses_settings_outside_the_theorem(forest):
    wrong = dataclasses.replace(forest.report, parameters={**forest.report.parameters, "delta_total": 1e-9})
    [bad] = failing(audit(forest.trees, wrong))
    assert bad.name == "delta recomputed from (k, beta, epsilon, trees)"
    assert "delta_total=1e-09, recomputed 0.0451688" in bad.detail
    boasting = dataclasses.replace(forest.report, guarantee="(0.3, 4, 1e-09)-DPS")
    [bad] = failing(audit(forest.trees, boasting))
    assert "guarantee '(0.3, 4, 1e-09)-DPS', recomputed '(0.3, 4, 0.0452)-DPS'" in bad.detail
    outside = dataclasses.replace(forest.report, requirement="dps:k=5,beta=0.3,epsilon=1,trees=4")
    [bad] = failing(audit(forest.trees, outside))
    assert bad.name == "requirement" and "below -ln(1 - beta)" in bad.detail


def test_the_audit_checks_the_parameters_mechanism_and_claims(forest):
    three = audit(forest.trees[:3], forest.report)
    names = [c.name for c in failing(three)]
    # the attack counts differ too unless the dropped tree added no attack (the release's draws are fresh)
    assert names[0] == f"parameters restate {REQUIREMENT}" and set(names[1:]) <= {"reported attack counts"}
    assert "the model carries 3 trees; the report states 4" in failing(three)[0].detail
    bigger_k = dataclasses.replace(forest.report, parameters={**forest.report.parameters, "k": 2})
    assert "k=2 (expected 5)" in failing(audit(forest.trees, bigger_k))[0].detail
    shallow = dataclasses.replace(forest.report, parameters={**forest.report.parameters, "depth": 1})
    assert "deeper than the stated depth 1" in failing(audit(forest.trees, shallow))[0].detail
    apt = dataclasses.replace(forest.report, mechanism="apt")
    assert [c.name for c in failing(audit(forest.trees, apt))] == ["mechanism"]
    claims = dataclasses.replace(forest.report, claims=(PathClaim(0, 1.0, REQUIREMENT),))
    assert [c.name for c in failing(audit(forest.trees, claims))] == ["claims"]
    k_claim = dataclasses.replace(forest.report, requirement="k-anonymity:k=5")
    [bad] = failing(audit(forest.trees, k_claim))
    assert "claimed per path of one tree; this model carries 4 trees" in bad.detail


# --------------------------------------------------------------------- wire
def test_a_multi_tree_model_round_trips_over_the_wire(forest):
    msg = fpb.ModelMessage.FromString(model_message(forest, study_id="s", owner_id="o").SerializeToString())
    assert len(msg.trees) == 4
    model = decode_model(msg)
    assert model.report == forest.report
    assert [tree_to_pb(t) for t in model.trees] == [tree_to_pb(t) for t in forest.trees]
    with pytest.raises(WireError, match="1 to 2 trees, this one 4"):
        decode_model(msg, max_trees=2)
    too_many = fpb.ModelMessage()
    too_many.CopyFrom(msg)
    too_many.trees.extend([msg.trees[0]] * (MAX_TREES + 1 - 4))
    with pytest.raises(WireError, match=f"1 to {MAX_TREES} trees, this one {MAX_TREES + 1}"):
        decode_model(too_many)


def test_a_release_holds_trees_over_one_schema(forest: Release, car) -> None:
    with pytest.raises(ValueError, match="ensemble of 4 trees; use .trees"):
        forest.tree  # noqa: B018
    assert Release(list(forest.trees), forest.report).trees == forest.trees  # type: ignore[arg-type]  # made a tuple
    with pytest.raises(TypeError, match="non-empty sequence of Trees"):
        Release(forest.trees[0], forest.report)  # type: ignore[arg-type]  # one Tree, not a sequence
    with pytest.raises(TypeError, match="non-empty sequence of Trees"):
        Release((), forest.report)
    other = Tree(car[0], [Node.from_counts(np.ones(car[0].n_classes))])
    with pytest.raises(ValueError, match="share one schema"):
        Release((forest.classification_trees[0], other), forest.report)


# ---------------------------------------------------------------- the study
def kanon_study(requirement: str = REQUIREMENT, **overrides: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, dict[str, Any]] = {"study": {"id": "k1"}, "schema": {"dataset": "nursery"},
            "release": {"mechanism": "kanon-rdt", "requirement": requirement, "disclosure": "counts"},
            "training": {"max_depth": DEPTH}, "mining": {"pgen_scale": 1, "global_models": ["decision-tree"]}}
    for section, values in overrides.items():
        data[section] = {**data[section], **values}
    return data


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"release": {"requirement": "k-anonymity:k=5"}}, "needs a requirement 'dps:"),
        ({"release": {"mechanism": "apt"}},
         f"requirement {REQUIREMENT} is met only by mechanism 'kanon-rdt' or 'kanon-rdt-log', not 'apt'"),
        ({"release": {"disclosure": "hit_miss"}}, 'set disclosure = "counts"'),
        ({"release": {"requirement": "dps:k=20,beta=0.01,epsilon=65,trees=65"}},
         "asks for 65 trees; a miner accepts at most 64"),
    ],
)
def test_a_kanon_rdt_study_needs_dps_counts_a_depth_and_few_trees(overrides, fragment):
    assert spec_from_mapping(kanon_study()).spec.max_depth == DEPTH
    with pytest.raises(StudyError, match=re.escape(fragment)):
        spec_from_mapping(kanon_study(**overrides))
    data = kanon_study()
    del data["training"]["max_depth"]
    with pytest.raises(StudyError, match=r"needs \[training\] max_depth"):
        spec_from_mapping(data)


# --------------------------------------------------------------------- PGEN
def test_pgen_shares_the_table_among_the_trees_and_undoes_the_sampling(forest):
    totals = np.array([t.root.total for t in forest.trees])
    rows = ensemble_rows(forest.trees, scale=2.0, beta=0.3)
    assert rows.sum() == round(2.0 * totals.sum() / (0.3 * 4))  # about 2 x the owner's 12960 rows
    assert 0.95 * 2 * 12960 < rows.sum() <= 2 * 12960 * 1.05
    assert np.all(np.abs(rows - rows.sum() * totals / totals.sum()) < 1)  # in proportion to each tree's total
    X, y = pgen_ensemble(forest.trees, scale=2.0, beta=0.3, rng=np.random.default_rng(0))
    assert X.shape[0] == y.shape[0] == rows.sum()
    start = 0
    for tree, n in zip(forest.trees, rows, strict=False):  # each tree's share lies in its own nonempty leaves
        leaves = tree.apply(X[start:start + n])
        assert all(tree.nodes[i].total > 0 for i in np.unique(leaves))
        start += n
    assert ensemble_rows(forest.trees, scale=1.0, beta=1.0).sum() == round(totals.mean())
    with pytest.raises(ValueError, match="beta must lie in"):
        ensemble_rows(forest.trees, scale=1.0, beta=0.0)


def test_mining_an_ensemble_trains_global_models_on_its_pseudo_rows(forest, nursery):
    schema, X, y = nursery
    mining = {"pgen_scale": 2, "global_models": ["decision-tree", "naive-bayes"]}
    spec = spec_from_mapping(kanon_study(mining=mining)).spec
    model = decode_model(model_message(forest))
    results = mine(study_from_pb(spec), [AcceptedModel("site-a", model)], Evaluation(X, y, np.arange(len(y))))
    [owner] = results.owners
    expected = int(ensemble_rows(forest.trees, scale=2.0, beta=0.3).sum())
    assert owner.pseudo_rows == expected and owner.audit_passed and owner.claim == REQUIREMENT
    assert owner.leaves == sum(t.n_leaves for t in forest.trees)
    assert owner.tuples == pytest.approx(np.mean([t.root.total for t in forest.trees]))
    assert len(owner.trees) == len(forest.trees)  # the released ensemble travels with the results, for reports
    assert list(results.evaluation_row) == list(range(len(y))) and list(results.evaluation_class) == y.tolist()
    assert [m.train_rows for m in results.models] == [expected, expected]
    # naive Bayes on the pooled pseudo rows, far above the majority class (0.33): the forest comes from fresh entropy
    # (the audit refuses a seeded one), and over 21 draws it scored 0.70-0.90, mean 0.87
    assert results.models[1].accuracy > 0.55


# -------------------------------------------------------- owner and verifier
def test_an_owner_submission_for_a_kanon_rdt_study_passes_the_miner_checks(nursery, tmp_path):
    from modelshare.common.federation.signing import generate_signing_key

    schema, X, y = nursery
    key = generate_signing_key()
    spec = spec_from_mapping(kanon_study()).spec
    message = fpb.ModelMessage.FromString(
        build_submission(study_from_pb(spec), X, y, owner_id="site-a", key=key).payload)
    assert len(message.trees) == 4
    check_model(message, StudyTerms.of(study_from_pb(spec)), max_nodes=100_000)
    nodes = sum(len(t.nodes) for t in message.trees)
    with pytest.raises(Rejection, match=f"the model has {nodes} nodes in 4 trees; this miner accepts at most 10"):
        check_model(message, StudyTerms.of(study_from_pb(spec)), max_nodes=10)
    log_spec = spec_from_mapping(kanon_study(release={"mechanism": "kanon-rdt-log"})).spec
    log_message = fpb.ModelMessage.FromString(
        build_submission(study_from_pb(log_spec), X, y, owner_id="site-a", key=key).payload)
    # the variant's study and submission pass the same checks
    check_model(log_message, StudyTerms.of(study_from_pb(log_spec)), max_nodes=100_000)
    with pytest.raises(Rejection, match="released with 'kanon-rdt'; the study requires 'kanon-rdt-log'"):
        check_model(message, StudyTerms.of(study_from_pb(log_spec)), max_nodes=100_000)
    stricter = spec_from_mapping(kanon_study("dps:k=5,beta=0.2,epsilon=4,trees=4")).spec
    with pytest.raises(Rejection, match="weaker than the study requires: .* allows at most beta=0.2"):
        check_model(message, StudyTerms.of(study_from_pb(stricter)), max_nodes=100_000)
    k_study = study_spec("k2", dataset="nursery", mechanism="kanon-rdt", requirement=REQUIREMENT, disclosure="counts",
                         max_depth=DEPTH)
    k_study.mechanism, k_study.requirement = "apt", "k-anonymity:k=5"
    with pytest.raises(Rejection, match="released with 'kanon-rdt'; the study requires 'apt'"):
        check_model(message, StudyTerms.of(study_from_pb(k_study)), max_nodes=100_000)


# -------------------------------------------------------- the real miner
OWNERS = ["site-a", "site-b"]
STUDY_REQUIREMENT = "dps:k=5,beta=0.5,epsilon=8,trees=4"


@pytest.fixture()
def fed(tmp_path):
    with make_federation(tmp_path, OWNERS) as federation:
        yield federation


def _rejection(fed, party: str, envelope: fpb.SignedEnvelope) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        fed.stub(party).Submit(envelope, timeout=30)
    details = info.value.details()
    assert details is not None
    return info.value.code(), details


def test_the_miner_accepts_kanon_rdt_submissions_and_rejects_weaker_ones(fed, car):
    schema, X, y = car
    tables = deal(X, y, OWNERS)
    spec = study_spec("r1", mechanism="kanon-rdt", requirement=STUDY_REQUIREMENT, disclosure="counts", max_depth=3,
                      global_models=("decision-tree", "naive-bayes"))
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10).spec
    Xa, ya = tables["site-a"]

    weaker = fpb.StudySpec()
    weaker.CopyFrom(spec)
    weaker.requirement = "dps:k=5,beta=0.6,epsilon=8,trees=4"
    code, why = _rejection(fed, "site-a", build_submission(study_from_pb(weaker), Xa, ya, owner_id="site-a",
                                                           key=fed.key("site-a")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "weaker than the study requires" in why and "beta=0.5" in why

    code, why = _rejection(fed, "site-a", signed_model(fed, "site-a", spec, Xa, ya, mechanism="apt",
                                                       requirement="k-anonymity:k=5"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "the study requires 'kanon-rdt'" in why

    release = release_model("kanon-rdt", schema=schema, X=Xa, y=ya, requirement=STUDY_REQUIREMENT, max_depth=3)
    lying = model_message(release, study_id="r1", owner_id="site-a")
    lying.report.parameters["delta_total"] = 1e-12
    code, why = _rejection(fed, "site-a", sign_payload(lying.SerializeToString(), fed.key("site-a")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "re-audit of the claims failed" in why and "delta_total" in why

    submitted = {}
    for owner in OWNERS:
        envelope = build_submission(study_from_pb(spec), *tables[owner], owner_id=owner, key=fed.key(owner))
        assert fed.stub(owner).Submit(envelope, timeout=30).owner_id == owner
        submitted[owner] = decode_model(fpb.ModelMessage.FromString(envelope.payload))
    assert fed.wait_study("r1").state == "done"
    results = fed.stub("admin").GetResults(fpb.StudyRef(study_id="r1"), timeout=10)
    for result in results.owners:
        model = submitted[result.owner_id]
        assert result.audit_passed and result.claim == STUDY_REQUIREMENT
        assert result.pseudo_rows == ensemble_rows(model.trees, scale=1.0, beta=0.5).sum()
    pooled = sum(o.pseudo_rows for o in results.owners)
    assert 0.5 * len(y) < pooled <= 1.1 * len(y)  # scale 1: the owners' rows, less the counts suppressed below k
    assert [m.name for m in results.models] == ["decision-tree", "naive-bayes"]
    assert all(m.train_rows == pooled for m in results.models)


# ---------------------------------------------------------------------- CLI
def test_cli_release_then_audit_and_a_hand_edited_file_fails(tmp_path, capsys):
    from modelshare.common.data.datasets import load_dataset

    data = tmp_path / "nursery.csv"
    load_dataset("nursery").frame.to_csv(data, index=False)
    model = tmp_path / "m.json"
    flags = ["release", "--mechanism", "kanon-rdt", "--requirement", "dps:k=5,beta=0.01,epsilon=2,trees=10",
             "--max-depth", "4", "--data", str(data), "--class-column", "class", "--out", str(model)]
    assert main(flags) == 2  # no --schema: the domain would be read from the rows
    assert "needs a public domain" in capsys.readouterr().err
    assert main([*flags, "--data-derived-domain"]) == 0  # given up explicitly: marked, and the audit fails it
    assert json.loads(model.read_text())["report"]["parameters"]["domain"] == "data-derived"
    capsys.readouterr()
    assert main(["audit", str(model), "--json"]) == 1
    assert {c["name"]: c["passed"] for c in json.loads(capsys.readouterr().out)["checks"]}["public domain"] is False
    schema_file = tmp_path / "nursery.schema.json"
    load_dataset("nursery").schema.save(schema_file)
    assert main([*flags, "--schema", str(schema_file), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trees"] == 10 and summary["report"]["guarantee"] == "(0.01, 2, 5.52e-05)-DPS"
    assert main(["audit", str(model)]) == 0
    assert "audit of" in capsys.readouterr().out
    text = json.loads(model.read_text())
    text["report"]["parameters"]["delta_total"] = 5e-06
    model.write_text(json.dumps(text))
    assert main(["audit", str(model), "--json"]) == 1
    checks = {c["name"]: c["passed"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["delta recomputed from (k, beta, epsilon, trees)"] is False
    assert main(["release", "--mechanism", "kanon-rdt", "--requirement", "dps:k=5,beta=0.01,epsilon=2,trees=10",
                 "--data", str(data), "--class-column", "class", "--schema", str(schema_file),
                 "--out", str(model)]) == 2
    assert "needs --requirement 'dps:k=K,beta=B,epsilon=E,trees=T' and --max-depth D" in capsys.readouterr().err


def test_cli_audit_fails_a_file_with_a_count_below_k(forest, tmp_path, capsys):
    tree = forest.trees[0]
    leaf = next(i for i in tree.leaves if tree.nodes[i].total > 0)
    label = int(np.flatnonzero(tree.nodes[leaf].counts)[0])
    lowered = (_with_count(tree, leaf, label, 4.0), *forest.trees[1:])
    report = dataclasses.replace(forest.report, attacks=ensemble_attack_report(lowered))
    path = tmp_path / "low.json"
    write_release(Release(lowered, report), path)
    assert main(["audit", str(path), "--json"]) == 1
    failed = [c["name"] for c in json.loads(capsys.readouterr().out)["checks"] if not c["passed"]]
    assert failed == ["no released nonzero count below k=5"]
    assert main(["audit", str(path)]) == 1
    assert "FAIL" in capsys.readouterr().out
