"""The mechanism registry: the built-in records, and a toy mechanism registered at run time that
every party then knows without any other module changing (`tests.toy_mechanism`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from modelshare.cli import main
from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.model_io import read_model
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.registry import Mechanism
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.report import PrivacyReport, Release
from modelshare.owner_node.policy import Policy
from tests import toy_mechanism
from tests.federation_helpers import study_spec

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def toy():
    """The toy mechanism registered for one test, and gone after it."""
    registry.register(toy_mechanism.RECORD)
    yield toy_mechanism.NAME
    registry.unregister(toy_mechanism.NAME)


def test_the_built_in_mechanisms_and_their_families():
    assert registry.names(kind="tree") == ("apt", "none", "prune-leaf", "prune-parent")
    assert set(registry.names(family="dp")) >= {"diffpets", "dpea", "laplace-rdt"}
    assert registry.names(family="dps") == ("kanon-rdt", "kanon-rdt-log")
    assert registry.names(task="regression") == ("diffpets",)
    assert registry.get("prune-leaf").requirement_form == "'k-anonymity:k=K'"
    assert registry.get("kanon-rdt").policy_bounds[:2] == ("min_k", "max_beta")
    for record in registry.mechanisms():
        assert record.describe()["name"] == record.name
        if record.family in ("dp", "dps"):
            assert record.audit_checks is not None and record.resolve_dp_audit_target() is not None


def test_an_unknown_name_and_a_malformed_record_are_refused():
    with pytest.raises(ValueError, match="unknown mechanism 'nope'; available: apt, "):
        registry.get("nope")
    with pytest.raises(ValueError, match="exactly one of prune"):
        Mechanism("both-ways", "dp", "x")
    with pytest.raises(ValueError, match="a whole-release mechanism meets 'dps' or 'dp'"):
        Mechanism("odd", "path", "x", train=toy_mechanism.train)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("apt"))


def test_a_toy_mechanism_is_released_and_audited_through_the_one_entry_point(toy):
    table = load_dataset("vote")
    X, y = table.schema.encode(table.frame)
    found = release(toy_mechanism.NAME, requirement="dp:epsilon=1,trees=2", schema=table.schema, X=X, y=y,
                    max_depth=1)
    assert isinstance(found, Release) and len(found.trees) == 2
    assert found.report.guarantee == "1-DP (add/remove one row)"
    result = audit(found.trees, found.report)
    assert result.passed, [c for c in result.checks if not c.passed]
    assert "noise scale recomputed" in {c.name for c in result.checks}
    lying = PrivacyReport(**{**vars(found.report), "parameters": {**found.report.parameters, "noise_scale": 0.5}})
    failed = {c.name for c in audit(found.trees, lying).checks if not c.passed}
    assert failed == {"noise scale recomputed"}
    with pytest.raises(ValueError, match="trains its own trees from the rows"):
        release(toy_mechanism.NAME, requirement="dp:epsilon=1,trees=2", tree=found.trees[0])


def test_a_toy_mechanism_through_the_cli_release_and_audit(toy, tmp_path, capsys):
    out = tmp_path / "toy.json"
    assert main(["release", "--dataset", "vote", "--mechanism", toy_mechanism.NAME, "--requirement",
                 "dp:epsilon=2,trees=3", "--max-depth", "1", "--out", str(out)]) == 0
    trees, report = read_model(out)
    assert report is not None and report.mechanism == toy_mechanism.NAME and len(trees) == 3
    capsys.readouterr()
    assert main(["audit", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"]


def test_a_toy_mechanism_in_studies_and_site_policies(toy):
    spec = study_spec("toy", mechanism=toy_mechanism.NAME, requirement="dp:epsilon=1,trees=2", disclosure="counts",
                      max_depth=1)
    study_from_pb(spec)
    allowing = Policy.from_mapping({"mechanisms": [toy_mechanism.NAME], "max_epsilon": 0.5}, "owner.toml [policy]")
    assert any("at most epsilon=0.5" in r for r in allowing.check(study_from_pb(spec), "miner"))
    refusing = Policy.from_mapping({"mechanisms": ["apt"]}, "owner.toml [policy]")
    assert any(toy_mechanism.NAME in r for r in refusing.check(study_from_pb(spec), "miner"))


@pytest.mark.slow
def test_simulate_runs_a_federation_with_a_plugin_mechanism(tmp_path, capsys, monkeypatch):
    """Separate miner and owner processes learn the toy from MODELSHARE_PLUGINS; the miner re-audits it."""
    monkeypatch.setenv(registry.PLUGINS_VARIABLE, "tests.toy_mechanism")
    monkeypatch.setattr(registry, "_plugins_loaded", set())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    try:
        assert main(["simulate", "--dataset", "vote", "--owners", "2", "--mechanism", toy_mechanism.NAME,
                     "--seed", "1", "--json"]) == 0
    finally:
        if toy_mechanism.NAME in registry.names():
            registry.unregister(toy_mechanism.NAME)  # this process loaded the plugin too
    report = json.loads(capsys.readouterr().out)
    assert report["mechanism"] == toy_mechanism.NAME
    assert all(o["audit_passed"] and o["claim"] == "dp:epsilon=1,trees=2" for o in report["owners"])
    assert all(np.isfinite(m["accuracy"]) for m in report["models"])
    assert report["off_path"] == toy_mechanism.PSEUDO_ROWS  # the plugin's own pseudo-data step ran in the miner
