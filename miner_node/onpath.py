"""On-path values: a categorical value inside a path's allowed set drawn from a class law, not uniformly.

PGEN (`modelshare.miner_node.pgen`) draws a categorical attribute that a path constrains to a set ``S``
uniformly within ``S`` (the paper's choice), and `modelshare.miner_node.offpath` redraws only the attributes a
path leaves free. Under (c,l)-diversity a learner (the admissible one) pairs a category with a
partner inside one leaf, e.g. Nursery's ``health = not_recom``, whose rows are all of class
``not_recom``, with different partners in different subtrees. A uniform draw inside
``{not_recom, partner}`` hides that, but the released paths together determine it: `ClassSetLaw`
estimates, per constrained categorical attribute ``j``, the class-conditional law ``theta_j[v, c]``
by EM over every released path of the study (each path's class mass spread over its allowed set in
proportion to ``theta``), and `redraw_on_path` draws each pseudo row's value of ``j`` inside its
path's set from ``theta_j[., class]`` restricted to that set. A path that leaves ``j`` free keeps
PGEN's value, which the study's ``off_path`` decides (`modelshare.miner_node.offpath`): redrawing free categories
from the class law too gained more on Nursery and Car with 10 owners but cost Adult's boosting up to
3 points at 1 and 5 owners and Car's 1.2 with one owner, where the constrained sets alone were level
with uniform (EXPERIMENTS.md, "The class law inside allowed sets").

The EM is `modelshare.common.privacy.combining.class_set_law`, the combining reader's own law (the reader a
(c,l)-diverse release is checked against), with ``A`` the paths' allowed masks and ``W`` their class
masses (`modelshare.miner_node.offpath.class_mass`, as PGEN reads them), ``EM_ITERATIONS`` times. Under a
guarded release the reader's belief inside a leaf stays within the requirement, but naive Bayes on
these pseudo rows applies the law to every attribute of a person; that is why ``class`` is a study's
explicit choice, never a default (docs/privacy.md, "A reader of the whole release"). Only released numbers are read
(allowed sets and class masses), so this is
post-processing of the releases and no privacy guarantee changes. Every pseudo row still satisfies
its path and each path's class counts are unchanged: only values inside allowed sets move. Numeric
attributes, categorical ones no released path constrains, and a path's free categories are not
touched; a path whose set is one category keeps it (its rows are not even drawn again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.privacy.combining import EM_ITERATIONS, class_set_law
from modelshare.common.trees.tree import Tree
from modelshare.miner_node.offpath import class_mass, leaf_paths, row_paths
from modelshare.miner_node.pgen import BLOCK_ROWS, PathTable

__all__ = ["UNIFORM_ON_PATH", "EM_ITERATIONS", "ClassSetLaw", "class_set_law",
           "OnPathTree", "redraw_on_path"]

#: What the results say of a study whose PGEN drew values inside allowed sets uniformly.
UNIFORM_ON_PATH = "uniform: values inside a path's allowed category set drawn uniformly (the paper's PGEN)"


@dataclass(frozen=True)
class ClassSetLaw:
    """Per categorical attribute some released path constrains, ``theta[j]`` (categories, classes) from `class_set_law`.

    Build with `from_trees` on every tree the miner accepted in a study (attributes no path
    constrains are absent: nothing on-path to redraw).
    """

    schema: Schema
    theta: dict[int, np.ndarray]
    iterations: int

    @classmethod
    def from_trees(cls, trees: Sequence[Tree], iterations: int = EM_ITERATIONS) -> ClassSetLaw:
        """Fit ``theta`` for each constrained categorical attribute over all paths of ``trees`` (all on one schema)."""
        if not trees:
            raise ValueError("a class law needs at least one released tree")
        schema = trees[0].schema
        tables = [PathTable.from_tree(tree) for tree in trees]
        mass = np.vstack([class_mass(t) for t in tables])
        theta = {}
        for j, attr in enumerate(schema.attributes):
            if not isinstance(attr, CategoricalAttribute):
                continue
            allowed = np.vstack([t.allowed[j] for t in tables])
            if allowed.all():
                continue
            theta[j] = class_set_law(allowed, mass, iterations)
        return cls(schema, theta, iterations)

    def describe(self) -> str:
        """The law in words, for the study's results: which attributes it covers and how it was fitted."""
        names = [a.name for j, a in enumerate(self.schema.attributes) if j in self.theta]
        return (f"class: values inside a path's allowed category set drawn from the class law all released paths "
                f"determine (EM, {self.iterations} iterations; {', '.join(names) or 'no attribute constrained'}); "
                "values a path leaves free as off_path says")


@dataclass(frozen=True)
class OnPathTree:
    """One released tree prepared for redrawing its PGEN rows' on-path categories from ``law``.

    Built once per tree (`of`) and handed to `redraw_on_path` for every chunk of its rows:
    ``leaf_to_path`` (`modelshare.miner_node.offpath.leaf_paths`), and per attribute of the law, which paths
    constrain it to a set of more than one category (``moves[j]``, paths) and the cumulative draw table ``cum[j]``
    (paths x classes, categories): ``A[p] * theta[:, c]`` normalised and summed up, exactly 1.0 from the
    set's last category on, so that a uniform number below 1 always lands on an allowed category.
    """

    tree: Tree
    law: ClassSetLaw
    leaf_to_path: np.ndarray
    moves: dict[int, np.ndarray]
    cum: dict[int, np.ndarray]

    @classmethod
    def of(cls, tree: Tree, law: ClassSetLaw) -> OnPathTree:
        """Prepare ``tree`` for redraws from ``law``."""
        table = PathTable.from_tree(tree)
        moves, cum = {}, {}
        for j, theta in law.theta.items():
            allowed = table.allowed[j]
            moves[j] = (table.n_allowed[j] > 1) & (table.n_allowed[j] < allowed.shape[1])  # a set, not all or one
            weights = allowed[:, None, :] * theta.T[None, :, :]  # (paths, classes, categories)
            running = np.cumsum(weights, axis=2).reshape(-1, allowed.shape[1])
            total = running[:, -1:]
            cum[j] = np.where(running >= total, 1.0, running / total)
        return cls(tree, law, leaf_paths(tree), moves, cum)


def redraw_on_path(tree: OnPathTree, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``X`` (PGEN rows of ``tree.tree``, classes ``y``) with each category of the law redrawn inside its path's set.

    The row's path is found by routing (`modelshare.miner_node.offpath.row_paths`); per attribute of the law,
    one uniform number per row whose path allows more than one category, compared with the row's (path, class)
    cumulative table in blocks of `modelshare.miner_node.pgen.BLOCK_ROWS` rows.
    """
    pid = row_paths(tree.tree, tree.leaf_to_path, X)
    out = np.array(X, dtype=np.float64, order="F", copy=True)
    n_classes = tree.law.schema.n_classes
    for j, moves in tree.moves.items():
        rows = np.flatnonzero(moves[pid])
        if rows.size == 0:
            continue
        group = pid[rows] * n_classes + y[rows].astype(np.int64)
        u = rng.random(rows.size)
        for start in range(0, rows.size, BLOCK_ROWS):
            block = slice(start, start + BLOCK_ROWS)
            out[rows[block], j] = (tree.cum[j][group[block]] <= u[block, None]).sum(axis=1)
    return out
