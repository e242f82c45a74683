"""Local tree learners an owner trains on its private table, by registry name."""

from __future__ import annotations

from typing import Any, Callable

from common.data.schema import Schema
from common.trees.learners.cart import CartTreeClassifier
from common.trees.learners.multiway import MultiwayTreeClassifier

__all__ = ["CartTreeClassifier", "MultiwayTreeClassifier", "LEARNERS", "make_learner"]

LEARNERS: dict[str, Callable[..., Any]] = {"cart": CartTreeClassifier, "multiway": MultiwayTreeClassifier}


def make_learner(name: str, schema: Schema, *, random_state: int | None = None, **params: Any):
    """Build the named local learner; ``random_state`` is passed to learners that use one."""
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; available: {sorted(LEARNERS)}")
    if name == "cart":
        return CartTreeClassifier(schema, random_state=random_state, **params)
    return MultiwayTreeClassifier(schema, **params)
