"""The mechanism registry: the built-in records, plugins found by entry point or ``MODELSHARE_PLUGINS`` (and a
clear error for one that cannot be loaded), and the example plugin (examples/plugin_mechanism) that every party
then knows without any module of modelshare changing, through a simulated federation once pip-installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import modelshare_toy_histogram as toy_mechanism  # examples/plugin_mechanism, on pytest's pythonpath
import numpy as np
import pytest

from modelshare.cli import main
from modelshare.common.audit.dp.estimate import DPAuditResult, audit_dp
from modelshare.common.audit.release import audit
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.model_io import read_model
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.registry import Mechanism
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.report import PrivacyReport, Release
from modelshare.common.privacy.requirements import DP
from modelshare.owner_node.policy import Policy
from tests.federation_helpers import study_spec

ROOT = Path(__file__).resolve().parents[3]


EXAMPLE = ROOT / "examples" / "plugin_mechanism"


@pytest.fixture
def toy():
    """The example plugin's mechanism registered for one test, and gone after it (unless installed here)."""
    installed = toy_mechanism.NAME in registry.names()  # a developer may have pip-installed the example
    if not installed:
        registry.register(toy_mechanism.RECORD)
    yield toy_mechanism.NAME
    if not installed:
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
        if record.name == toy_mechanism.NAME:
            continue  # the example plugin, when a developer has installed it here
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


def test_the_example_plugin_passes_the_empirical_dp_audit_and_a_quieter_variant_fails_it(toy):
    """Its record names an empirical DP audit target (the Laplace LLR of the released counts at the claimed scale):
    the plugin's claim stands, and a variant that draws a quarter of the claimed noise is refuted."""
    table = load_dataset("vote")
    X, y = table.schema.encode(table.frame)
    claim = DP(epsilon=0.5, trees=2)

    def audited(name: str, seed: int) -> DPAuditResult:
        factory = registry.get(name).resolve_dp_audit_target()
        assert factory is not None
        rng = np.random.default_rng(seed)
        return audit_dp(factory(claim, 1, table.schema, X, y, rng, mechanism=name), 1000, rng)

    assert audited(toy, 0).passed
    quieter = replace(toy_mechanism.RECORD, name="toy-histogram-quieter",
                      train=lambda schema, X, y, req, depth, randomness: toy_mechanism.train(
                          schema, X, y, DP(epsilon=4 * req.epsilon, trees=req.trees), depth, randomness))
    registry.register(quieter)
    try:
        refuted = audited(quieter.name, 0)
    finally:
        registry.unregister(quieter.name)
    assert not refuted.passed and refuted.epsilon_lower > claim.epsilon


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


def _distribution(site: Path, name: str, entry_point: str, module: str, *, module_name: str) -> None:
    """An installed distribution in ``site`` as pip leaves one: ``module`` (the source of ``module_name``) and a
    dist-info declaring one entry point."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{entry_point}\n")
    (site / f"{module_name}.py").write_text(module)


@pytest.mark.parametrize(("module", "why"), [
    ("raise RuntimeError('needs a licence server')\n", "cannot be loaded: RuntimeError: needs a licence server"),
    ("RECORD = 'toy-histogram'\n", "must give a Mechanism record or a non-empty sequence of them, not str"),
    ("from modelshare.common.mechanisms.pruning import release_unchanged\n"
     "from modelshare.common.mechanisms.registry import Mechanism\n"
     "RECORD = Mechanism('apt', 'none', 'another apt', prune=release_unchanged)\n",
     "mechanism 'apt' is already registered"),
], ids=["import-fails", "not-a-record", "name-taken"])
def test_an_installed_plugin_that_cannot_be_loaded_is_named_with_the_reason(tmp_path, monkeypatch, request, module,
                                                                            why):
    """A distribution's entry point that fails to import, names no record or takes a registered name stops every
    use of the registry with a PluginError naming the distribution and entry point, until it is removed."""
    name = "broken_plugin_" + request.node.callspec.id.replace("-", "_")  # a module of its own per case
    _distribution(tmp_path, "broken-plugin", f"broken = {name}:RECORD", module, module_name=name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    for _ in range(2):  # every use says why, not only the first
        with pytest.raises(registry.PluginError) as raised:
            registry.get("apt")
        message = str(raised.value)
        assert message.startswith(f"plugin 'broken' = '{name}:RECORD' (entry point group "
                                  "'modelshare.mechanisms' of broken-plugin)"), message
        assert why in message
    monkeypatch.undo()  # uninstalled: the registry loads again
    sys.modules.pop(name, None)
    assert registry.get("apt").summary.startswith("anonymity-based tree pruning")


def test_an_installed_plugin_is_registered_by_its_entry_point(tmp_path, monkeypatch):
    """An entry point naming one record registers it in this process on first use; one named in
    MODELSHARE_PLUGINS as well is the same record, registered once."""
    module = "from modelshare_toy_histogram import RECORD\n"
    _distribution(tmp_path, "toy-plugin", f"{toy_mechanism.NAME} = toy_plugin:RECORD", module, module_name="toy_plugin")
    if toy_mechanism.NAME in registry.names():
        pytest.skip("the example plugin is installed in this environment already")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    monkeypatch.setattr(registry, "_plugins_loaded", set())
    monkeypatch.setenv(registry.PLUGINS_VARIABLE, "modelshare_toy_histogram")
    try:
        assert registry.get(toy_mechanism.NAME) is toy_mechanism.RECORD
        assert registry.names(family="dp").count(toy_mechanism.NAME) == 1
    finally:
        registry.unregister(toy_mechanism.NAME)


def test_a_thread_asking_while_another_loads_the_plugins_waits_for_them(tmp_path, monkeypatch) -> None:
    """The miner's threads may ask the registry at once: one loads the installed plugins, the others wait for it
    rather than find the plugin's mechanism unknown."""
    if toy_mechanism.NAME in registry.names():
        pytest.skip("the example plugin is installed in this environment already")
    gate = SimpleNamespace(importing=threading.Event(), release=threading.Event())
    monkeypatch.setitem(sys.modules, "plugin_gate", gate)
    module = ("import sys\nsys.modules['plugin_gate'].importing.set()\nsys.modules['plugin_gate'].release.wait()\n"
              "from modelshare_toy_histogram import RECORD\n")
    _distribution(tmp_path, "slow-plugin", f"{toy_mechanism.NAME} = slow_plugin:RECORD", module,
                  module_name="slow_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    found: dict[str, object] = {}

    def ask(who: str) -> None:
        try:
            found[who] = registry.get(toy_mechanism.NAME)
        except ValueError as exc:
            found[who] = exc

    loader = threading.Thread(target=ask, args=("loader",))
    loader.start()
    assert gate.importing.wait(60)  # the loader is inside the plugin's import
    other = threading.Thread(target=ask, args=("other",))
    other.start()
    other.join(0.5)
    waited = other.is_alive()  # without the lock it would have answered "unknown mechanism" already
    gate.release.set()
    loader.join(60)
    other.join(60)
    try:
        assert waited and found == {"loader": toy_mechanism.RECORD, "other": toy_mechanism.RECORD}, found
    finally:
        registry.unregister(toy_mechanism.NAME)
        sys.modules.pop("slow_plugin", None)


def test_a_plugin_module_without_records_is_refused(tmp_path, monkeypatch):
    """MODELSHARE_PLUGINS naming a module without records, a missing module or one whose import fails is a
    PluginError naming the module and why."""
    (tmp_path / "failing_plugin_module.py").write_text("raise RuntimeError('needs a licence server')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.PLUGINS_VARIABLE, "failing_plugin_module")
    monkeypatch.setattr(registry, "_plugins_loaded", set())
    with pytest.raises(registry.PluginError, match="names module 'failing_plugin_module', which cannot be imported: "
                                                   "RuntimeError: needs a licence server"):
        registry.names()
    monkeypatch.setenv(registry.PLUGINS_VARIABLE, "json")
    monkeypatch.setattr(registry, "_plugins_loaded", set())
    with pytest.raises(registry.PluginError, match=r"plugin module 'json' \(MODELSHARE_PLUGINS\) must define "
                                                   "MODELSHARE_MECHANISMS"):
        registry.names()
    monkeypatch.setenv(registry.PLUGINS_VARIABLE, "no_such_plugin_module")
    with pytest.raises(registry.PluginError, match="names module 'no_such_plugin_module', which cannot be imported: "
                                                   "ModuleNotFoundError"):
        registry.names()


@pytest.mark.slow
def test_simulate_runs_a_federation_with_the_pip_installed_example_plugin(tmp_path):
    """The example plugin pip-installed as a site would (its own pyproject.toml, found by its entry point, not by
    MODELSHARE_PLUGINS): `modelshare simulate` in a fresh process runs a federation of separate miner and owner
    processes with it; the owners release and audit it, the miner re-audits it and runs its own pseudo-data step."""
    site, source = tmp_path / "site", tmp_path / "plugin_mechanism"  # built from a copy: the build leaves files
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                              "--target", str(site), str(source)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    assert (site / "modelshare_toy_histogram" / "__init__.py").is_file()
    env = {k: v for k, v in os.environ.items() if k != registry.PLUGINS_VARIABLE}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-m", "modelshare.cli", "simulate", "--dataset", "vote", "--owners", "2",
                          "--mechanism", toy_mechanism.NAME, "--seed", "1", "--json"], capture_output=True, text=True,
                         timeout=900, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["mechanism"] == toy_mechanism.NAME
    assert all(o["audit_passed"] and o["claim"] == "dp:epsilon=1,trees=2" for o in report["owners"])
    assert all(np.isfinite(m["accuracy"]) for m in report["models"])
    assert report["off_path"] == toy_mechanism.PSEUDO_ROWS  # the plugin's own pseudo-data step ran in the miner
