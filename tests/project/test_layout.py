"""The code's layering and lint hold: the import-linter contracts in pyproject.toml, ruff's checks, mypy (strict
over the package, default with checked ignores over the tests), test modules that share helpers only through
helper modules (never by importing one another), and a quick loop (``-m "not slow"``) that starts no miner or
owner process."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    """The console script ``name`` installed beside this interpreter (the test extra installs it)."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; install the test extra: pip install '.[test]'")
    return found


def test_the_layer_contracts_hold():
    run = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_ruff_finds_nothing():
    run = subprocess.run([_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_mypy_strict_finds_nothing_in_the_typed_modules():
    """mypy --strict over the modules pyproject.toml's [tool.mypy] lists (the decoded Study and its readers)."""
    run = subprocess.run([_tool("mypy"), "--no-incremental"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_mypy_finds_nothing_in_the_tests():
    """mypy over ``tests/`` with the settings pyproject.toml's ``tests.*`` override gives them: default mypy (bodies of
    unannotated functions unchecked), and every ``# type: ignore`` must still be needed and name its error code."""
    run = subprocess.run([_tool("mypy"), "tests"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_no_test_module_imports_another():
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}: {n}" for n in names if n.rpartition(".")[2].startswith("test_")]
    assert offenders == [], "shared test helpers belong in tests/federation_helpers.py or conftest.py"


CROSS_CUTTING = {"federation": "owners and a miner together",
                 "project": "the repository: layout, packaging, docs, deploy",
                 "experiments": "the paper reproductions (experiments/)", "modelshare": "the composition root"}


def test_the_tests_mirror_the_package_tree():
    """Every test module sits in a folder named for what it tests: a package of modelshare (common/<layer>,
    owner_node, miner_node), or one of the cross-cutting folders; none at the top of tests/."""
    misplaced = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        area = path.parent.relative_to(ROOT / "tests").as_posix()
        if area in CROSS_CUTTING:
            continue
        if area == "." or not (ROOT / "modelshare" / area).is_dir():
            misplaced.append(path.relative_to(ROOT).as_posix())
    assert misplaced == [], f"test modules outside the package tree's folders: {misplaced}"


def test_a_test_without_the_slow_marker_cannot_start_a_miner_process():
    """The quick loop stays in process: conftest refuses `... serve` there (the process-level tests are `slow`)."""
    with pytest.raises(AssertionError, match="mark it @pytest.mark.slow"):
        subprocess.Popen([sys.executable, "-m", "modelshare.cli", "miner", "serve", "--config", "miner.toml"])


def test_the_architecture_document_names_every_package():
    """docs/architecture.md describes every package; a new one without a paragraph there fails here."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(str(p.parent.relative_to(ROOT))
                      for top in ("common", "owner_node", "miner_node", "modelshare", "experiments")
                      for p in (ROOT / top).rglob("__init__.py") if "pb" not in p.parent.parts)
    missing = [p for p in packages if f"`{p}`" not in text and f"{p}/" not in text]
    assert not missing, f"docs/architecture.md does not mention {missing}"
