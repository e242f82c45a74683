"""Shared fixtures (small bundled tables in encoded form) and the rule that keeps the quick loop quick.

The quick loop, in process only (about 1.5 minutes on two cores)::

    python -m pytest -q -x -m "not slow"

The process-level tests, marked ``slow`` (separate ``modelshare miner serve`` / ``owner serve`` /
``simulate`` processes, network namespaces, tmpfs mounts)::

    python -m pytest -q -m slow

A test that is not marked ``slow`` and starts a miner or owner process (``... serve``) or touches a
network namespace fails, naming the marker it lacks. Federation helpers (a miner in this process or
as a process on port 0, `wait_until`) are in ``tests/federation_helpers.py``.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema


def _encoded(name: str) -> tuple[Schema, np.ndarray, np.ndarray]:
    table = load_dataset(name)
    X, y = table.schema.encode(table.frame)
    return table.schema, X, y


@pytest.fixture(scope="session")
def nursery():
    return _encoded("nursery")


@pytest.fixture(scope="session")
def car():
    return _encoded("car")


@pytest.fixture(scope="session")
def mixed():
    """A synthetic mixed table with a learnable rule: class = (colour == red) xor (size > 5)."""
    schema = Schema(
        (CategoricalAttribute("colour", ("red", "green", "blue")), NumericAttribute("size", 0.0, 10.0),
         NumericAttribute("noise", -1.0, 1.0)),
        "label",
        ("no", "yes"),
    )
    rng = np.random.default_rng(7)
    n = 2000
    X = np.column_stack([rng.integers(0, 3, n), rng.uniform(0, 10, n), rng.uniform(-1, 1, n)]).astype(float)
    y = ((X[:, 0] == 0) ^ (X[:, 1] > 5)).astype(np.int64)
    return schema, X, y


@pytest.fixture(autouse=True)
def _processes_only_in_slow_tests(request, monkeypatch):
    """Refuse ``... serve`` and ``ip netns`` subprocesses in tests without the ``slow`` marker."""
    if request.node.get_closest_marker("slow") is not None:
        return
    start = subprocess.Popen.__init__

    def guarded(self, args, *rest, **kwargs):
        words = [str(w) for w in args] if isinstance(args, (list, tuple)) else str(args).split()
        if "serve" in words or "netns" in words:
            raise AssertionError(f"{request.node.nodeid} starts `{' '.join(words)}`: mark it @pytest.mark.slow")
        start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
