"""The owner's choice of local learner: cross-validation on its own rows, each candidate scored after its release.

An owner whose study names the learner ``auto`` (`AUTO_LEARNER`) tries every candidate of a small public
grid (`CANDIDATES`: the admissible, multiway and CART learners, with and without a leaf floor) on
``folds`` stratified folds of its rows (at most ``max_rows`` of them, drawn with the study's public
seed). Each candidate is trained on the other folds, released by the study's tree mechanism with its
requirement and disclosure (so what is scored is what would be published, pruning and checks
included), and scored by the released tree's accuracy on the held-out fold; a candidate the mechanism
cannot release in a fold scores zero there. The best mean wins, ties going to the earlier candidate
(the mechanism's default learner comes first). Only the choice leaves the owner: the release states it
(``learner`` in its report's parameters), never a score.

Contract: tree mechanisms only (a whole-release mechanism trains its own trees); the grid is public and
the same for every table; the same rows, seed and study give the same choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.model_selection import StratifiedKFold

from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable
from modelshare.common.mechanisms.registry import default_learner
from modelshare.common.mechanisms.release import local_learner, release
from modelshare.common.privacy.requirements import Requirement
from modelshare.common.trees.learner_options import AUTO_LEARNER
from modelshare.common.trees.tree import Disclosure, Tree

__all__ = ["AUTO_LEARNER", "CANDIDATES", "CV_FOLDS", "CV_MAX_ROWS", "Candidate", "choose_learner"]

CV_FOLDS = 3
"""Folds of the owner's cross-validation."""

CV_MAX_ROWS = 30_000
"""At most this many of the owner's rows (a seeded stratified draw) take part in the choice; the chosen
learner then trains on all of them."""


@dataclass(frozen=True)
class Candidate:
    """One learner and the options it is tried with (on top of the study's own training options)."""

    learner: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """``cart`` or ``cart(min_samples_leaf=5)``: what a release states it was trained with."""
        options = ", ".join(f"{key}={value}" for key, value in sorted(self.params.items()))
        return f"{self.learner}({options})" if options else self.learner


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("admissible"),
    Candidate("multiway"),
    Candidate("cart"),
    Candidate("cart", {"min_samples_leaf": 5}),
    Candidate("multiway", {"min_samples_leaf": 5}),
)
"""The public grid an owner chooses from; `choose_learner` puts the mechanism's default learner first."""


def _subsample(y: np.ndarray, max_rows: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted row indices of a uniform draw of at most ``max_rows`` rows (all rows when there are fewer)."""
    if len(y) <= max_rows:
        return np.arange(len(y))
    keep = rng.permutation(len(y))[:max_rows]
    return np.sort(keep)


def _folds(y: np.ndarray, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified folds where every class has enough rows, plain shuffled folds otherwise."""
    present = np.bincount(y)
    smallest = int(present[present > 0].min()) if present.any() else 0
    if smallest >= folds:
        splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
        return list(splitter.split(np.zeros(len(y)), y))
    order = np.random.default_rng(seed).permutation(len(y))
    parts = np.array_split(order, folds)
    return [(np.sort(np.concatenate(parts[:i] + parts[i + 1:])), np.sort(parts[i])) for i in range(folds)]


def _ordered(candidates: tuple[Candidate, ...], first: str) -> tuple[Candidate, ...]:
    """``candidates`` with those of learner ``first`` (the mechanism's default) moved to the front, order kept."""
    return tuple(sorted(candidates, key=lambda c: c.learner != first))


def choose_learner(mechanism: str, schema: Schema, X: np.ndarray, y: np.ndarray, *,
                   requirement: str | Requirement | None, disclosure: Disclosure, base_params: Mapping[str, Any],
                   admissible_params: Mapping[str, Any], seed: int | None,
                   candidates: tuple[Candidate, ...] = CANDIDATES, folds: int = CV_FOLDS,
                   max_rows: int = CV_MAX_ROWS) -> Candidate:
    """The candidate whose released tree scores best in cross-validation on the owner's rows.

    Parameters
    ----------
    mechanism, requirement, disclosure:
        The study's tree mechanism and what it releases to: every candidate is released exactly so.
    schema, X, y:
        The owner's schema and encoded rows.
    base_params:
        The study's training options every candidate takes (``min_samples_leaf``, ``max_depth``); a
        candidate's own ``min_samples_leaf`` is a floor on top of the study's.
    admissible_params:
        The study's grouping and pruning options, applied to the admissible candidates only.
    seed:
        The study's public seed: the folds, the subsample and the learners' tie-breaking.

    Returns
    -------
    Candidate
        The chosen learner with the options it adds (the study's own options come on top when it trains).

    Raises
    ------
    ValueError
        ``folds`` below 2, or fewer rows than folds.
    """
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    if len(y) < folds:
        raise ValueError(f"choosing a learner by {folds}-fold cross-validation needs at least {folds} rows, "
                         f"got {len(y)}")
    seed = 0 if seed is None else int(seed)
    rows = _subsample(y, max_rows, np.random.default_rng(seed))
    Xs, ys = X[rows], y[rows]
    splits = _folds(ys, folds, seed)
    ordered = _ordered(candidates, default_learner(mechanism))
    best, best_score = ordered[0], -1.0
    for candidate in ordered:
        params = trained_params(candidate, base_params, admissible_params)
        scores = []
        for train, test in splits:
            tree = local_learner(candidate.learner, schema, mechanism, requirement=requirement, disclosure=disclosure,
                                 random_state=seed, **params).fit(Xs[train], ys[train]).tree_
            try:
                released = release(mechanism, tree=tree, requirement=requirement, disclosure=disclosure).tree
            except RequirementUnsatisfiable:
                scores.append(0.0)
                continue
            scores.append(_score(released, Xs[test], ys[test]))
        score = float(np.mean(scores))
        if score > best_score:
            best, best_score = candidate, score
    return best


def _score(tree: Tree, X: np.ndarray, y: np.ndarray) -> float:
    """Mean probability the released tree gives each held-out row's true class: its leaf's class shares (under
    hit/miss, the hit share for the leaf's class and the miss share spread over the others), what PGEN draws."""
    n_classes = tree.schema.n_classes
    shares = np.zeros((len(tree.nodes), n_classes))
    for i, node in enumerate(tree.nodes):
        total = node.total
        if total <= 0:
            shares[i] = 1.0 / n_classes
        elif node.counts is not None:
            shares[i] = node.counts / total
        else:
            shares[i] = node.miss / total / max(n_classes - 1, 1)
            shares[i, node.label] = node.hit / total
    return float(shares[tree.apply(X), y].mean())


def trained_params(candidate: Candidate, base_params: Mapping[str, Any],
                   admissible_params: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``candidate`` trains with: the study's options, its own leaf floor on top."""
    params = dict(base_params)
    if candidate.learner == "admissible":
        params.update(admissible_params)
    floor = candidate.params.get("min_samples_leaf")
    if floor is not None:
        params["min_samples_leaf"] = max(int(floor), int(params.get("min_samples_leaf", 1)))
    params.update({k: v for k, v in candidate.params.items() if k != "min_samples_leaf"})
    return params
