"""The code's layering and lint hold: the import-linter contracts in pyproject.toml and ruff's checks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
