"""examples/ runs: the Python API scripts end to end, the federation by hand and the regression study (slow:
separate processes), study.toml is what `modelshare study init` writes, docs/python-api.md's mining
example gives the numbers `modelshare simulate` prints for the same study, and the plugin example declares the
entry point the registry reads and documents every field its
record sets (tests/common/mechanisms/test_registry.py runs it)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import modelshare_toy_histogram  # examples/plugin_mechanism, on pytest's pythonpath
import pytest

from modelshare.cli.study_init import study_template
from modelshare.common.federation.study import load_study_file
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.registry import Mechanism

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DOC = EXAMPLES.parent / "docs" / "python-api.md"


def test_the_api_example_runs_and_prints_each_step():
    run = subprocess.run([sys.executable, str(EXAMPLES / "api_pipeline.py")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["owner 1", "owner 2", "owner 3"]
    assert all(line.endswith("audit passed") for line in lines[:3])
    assert lines[3].startswith("global tree from ") and "accuracy points apart" in lines[3]


@pytest.mark.slow
def test_the_api_mining_example_is_within_2_points_of_simulate_on_the_same_study(tmp_path, capsys) -> None:
    namespace: dict = {"__name__": "python_api_example"}
    mining = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)[0]
    exec(compile(mining, str(DOC), "exec"), namespace)
    capsys.readouterr()
    api = dict(zip(namespace["mined"].scores["model"], namespace["mined"].scores["accuracy"], strict=False))
    run = subprocess.run([sys.executable, "-m", "modelshare.cli", "simulate", "--json", "--timeout", "300"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    simulated = {m["model"]: m["accuracy"] for m in report["models"]}
    assert set(api) == set(simulated) == {"decision-tree", "naive-bayes"}
    for model, accuracy in simulated.items():
        assert abs(api[model] - accuracy) <= 0.02, (model, api[model], accuracy)


def test_the_example_study_is_what_study_init_writes_and_a_valid_study():
    assert (EXAMPLES / "study.toml").read_text() == study_template(dataset="nursery")
    spec = load_study_file(EXAMPLES / "study.toml").spec
    assert (spec.mechanism, spec.requirement, spec.learner) == ("apt", "cl-diversity:c=5,l=2", "admissible")


def test_the_dp_example_releases_audits_and_mines():
    run = subprocess.run([sys.executable, str(EXAMPLES / "dp_study.py")], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 5 and all("diffpets release of 10 trees" in line and line.endswith("audit passed")
                                   for line in lines[:3])
    assert lines[3].startswith("decision-tree: accuracy ") and lines[4].startswith("naive-bayes: accuracy ")


def _script(name: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Run an example shell script as a user would, with this environment's `modelshare` first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", str(EXAMPLES / name)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PATH": path, "WORK": str(tmp_path), **env})


@pytest.mark.slow
def test_the_federation_by_hand_runs_a_study_to_its_results(tmp_path):
    with socket.socket() as probe:  # a free loopback port for the miner
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = _script("federation.sh", tmp_path, PORT=str(port))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert {o["owner"] for o in results["owners"]} == {"site-a", "site-b", "site-c"}
    assert {m["model"]: m["accuracy"] > 0.5 for m in results["models"]} == {"decision-tree": True, "naive-bayes": True}
    assert (tmp_path / "results" / "report.html").is_file()


@pytest.mark.slow
def test_the_regression_example_runs_a_dp_regression_study(tmp_path):
    run = _script("regression_study.sh", tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "regression-tree" in run.stdout and "random-forest" in run.stdout and "RMSE" in run.stdout


def test_the_plugin_example_declares_its_entry_point_and_documents_every_field_its_record_sets():
    plugin = EXAMPLES / "plugin_mechanism"
    project = tomllib.loads((plugin / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    points = project["entry-points"][registry.ENTRY_POINT_GROUP]
    assert points == {"toy-histogram": "modelshare_toy_histogram:RECORD"}
    module, _, attribute = points["toy-histogram"].partition(":")
    assert module == modelshare_toy_histogram.__name__
    record = getattr(modelshare_toy_histogram, attribute)
    assert isinstance(record, Mechanism) and record.name == "toy-histogram"
    assert modelshare_toy_histogram.MODELSHARE_MECHANISMS == (record,)
    defaults = Mechanism("x", "dp", "x", train=record.train)  # what an unset field becomes
    set_here = [f.name for f in fields(Mechanism) if getattr(record, f.name) != getattr(defaults, f.name)]
    assert {"name", "summary", "audit_checks", "pseudo_data", "dp_audit_target"} <= set(set_here)
    for doc in (plugin / "README.md", EXAMPLES.parent / "docs" / "how-to" / "mechanism-plugin.md"):
        text = doc.read_text(encoding="utf-8")
        missing = [name for name in set_here + ["family", "train"] if f"`{name}`" not in text]
        assert missing == [], f"{doc.name} does not explain {missing}"
    assert "plugin_mechanism/" in (EXAMPLES / "README.md").read_text(encoding="utf-8")
