"""Shared fixtures: small bundled tables in encoded form."""

from __future__ import annotations

import numpy as np
import pytest

from common.data.datasets import load_dataset
from common.data.schema import CategoricalAttribute, NumericAttribute, Schema


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
