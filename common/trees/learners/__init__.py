"""Local tree learners an owner trains on its private table, by registry name."""

from __future__ import annotations

from typing import Any, Callable

from common.data.schema import Schema
from common.trees.learners.cart import CartTreeClassifier
from common.trees.learners.multiway import MultiwayTreeClassifier
from common.trees.learners.public_cuts import OnPublicCuts

__all__ = ["CartTreeClassifier", "MultiwayTreeClassifier", "OnPublicCuts", "LEARNERS", "make_learner"]

LEARNERS: dict[str, Callable[..., Any]] = {"cart": CartTreeClassifier, "multiway": MultiwayTreeClassifier}


def make_learner(name: str, schema: Schema, *, random_state: int | None = None, public_cuts: bool = False,
                 **params: Any):
    """Build the named local learner; ``random_state`` is passed to learners that use one.

    ``public_cuts`` splits numeric attributes only at the schema's public cut points
    (`OnPublicCuts`): what a tree released under a privacy requirement needs.
    """
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; available: {sorted(LEARNERS)}")

    def build(on: Schema):
        if name == "cart":
            return CartTreeClassifier(on, random_state=random_state, **params)
        return MultiwayTreeClassifier(on, **params)

    return OnPublicCuts(build, schema) if public_cuts else build(schema)
