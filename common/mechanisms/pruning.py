"""Privacy pruning of a trained tree: APT (Sharkey et al. Fig. 4) and Methods 1 and 2 (Wakabayashi et al.).

Every function returns a new tree rebuilt by `modelshare.common.trees.rebuild.rebuild`, so the released inner
nodes disclose nothing beyond the released leaves, and raises `RequirementUnsatisfiable` instead of
returning a tree that does not meet what was asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from modelshare.common.privacy.checks import public_cuts_check
from modelshare.common.privacy.combining import release_verdict
from modelshare.common.privacy.requirements import (
    CLDiversity,
    KAnonymity,
    LeafStats,
    PathRequirement,
    RequirementError,
    leaf_stats,
)
from modelshare.common.trees.rebuild import merge_stats, rebuild, splice_single_children
from modelshare.common.trees.tree import CategorySet, Constraint, Disclosure, Edge, Interval, Node, Tree, preorder

__all__ = ["RequirementUnsatisfiable", "apt", "prune_leaves", "prune_parents", "release_unchanged", "release_apt",
           "release_prune_leaf", "release_prune_parent", "check_public_thresholds", "release_guard"]


class RequirementUnsatisfiable(ValueError):
    """The requirement cannot be met by any pruning of this tree (the paper's empty-tree result)."""


def _satisfies(node: Node, requirement: PathRequirement) -> bool:
    """Whether one node, as a leaf, meets the requirement in the form its statistics allow."""
    counts = None if node.counts is None else node.counts[None, :]
    stats = LeafStats(
        np.zeros(1, np.int64),
        np.array([node.label]),
        np.array([node.hit]),
        np.array([node.miss]),
        counts,
        "hit_miss" if counts is None else "counts",
    )
    return bool(requirement.check(stats)[0])


def _working_copy(tree: Tree) -> list[Node]:
    """Mutable node copies; under hit/miss the inner stats are re-estimated bottom-up with Eq. 1.

    This is APT's depth-first pass (Fig. 4, lines 2-4): exact sums when counts are known (a trained
    tree already holds them), Eq. 1 when only hit/miss is.
    """
    nodes = [replace(n, edges=list(n.edges)) for n in tree.nodes]
    if tree.disclosure == "hit_miss":
        for i in reversed(preorder(nodes)):
            if not nodes[i].is_leaf:
                est = merge_stats([nodes[e.child] for e in nodes[i].edges], tree.schema.n_classes, "hit_miss")
                nodes[i].label, nodes[i].hit, nodes[i].miss = est.label, est.hit, est.miss
    return nodes



def _depths(nodes: Sequence[Node]) -> dict[int, int]:
    depth, stack = {0: 0}, [0]
    while stack:
        i = stack.pop()
        for e in nodes[i].edges:
            depth[e.child] = depth[i] + 1
            stack.append(e.child)
    return depth


def _output_disclosure(tree: Tree, disclosure: Disclosure | None) -> Disclosure:
    """The released disclosure (default: the input's); counts cannot be made up from hit/miss."""
    disclosure = disclosure or tree.disclosure
    if disclosure == "counts" and tree.disclosure != "counts":
        raise ValueError("a hit/miss tree cannot be released with counts disclosure")
    return disclosure


def _union(a: Constraint, b: Constraint) -> Constraint:
    """The constraint covering two sibling edges: the union of category sets, the hull of intervals."""
    if isinstance(a, CategorySet) and isinstance(b, CategorySet):
        return CategorySet(a.codes | b.codes)
    assert isinstance(a, Interval) and isinstance(b, Interval)
    lo = a if (a.low, not a.low_closed) <= (b.low, not b.low_closed) else b
    hi = a if (a.high, a.high_closed) >= (b.high, b.high_closed) else b
    return Interval(lo.low, hi.high, lo.low_closed, hi.high_closed)


def _candidates(edges: list[Edge], b: int) -> list[int]:
    """Siblings edge ``b`` may merge with: any for categories, the interval neighbours for numbers.

    Interval neighbours keep the merged edge one interval (the hull of two adjacent siblings
    covers only the gap between them, never another sibling).
    """
    if isinstance(edges[b].constraint, CategorySet):
        return [j for j in range(len(edges)) if j != b]
    # the ignore below: not a CategorySet: Intervals
    order = sorted(range(len(edges)), key=lambda j: edges[j].constraint.low)  # type: ignore[union-attr]
    at = order.index(b)
    return [order[j] for j in (at - 1, at + 1) if 0 <= j < len(order)]


def apt(tree: Tree, requirement: PathRequirement, *, disclosure: Disclosure | None = None) -> Tree:
    """Anonymity-based tree pruning (Sharkey et al. §3.2, Fig. 4).

    Bottom-up, level by level from the second-deepest level, every node with a child that violates
    ``requirement`` merges that child with siblings until all its children satisfy it; a node left
    with one child becomes a leaf (and is checked in turn at the level above).

    Merge rule (the paper leaves it open): repeatedly take the violating child with the fewest
    tuples and merge it with the admissible sibling (any sibling on a categorical split, an
    adjacent interval on a numeric one) whose subtree has the fewest leaves, then the fewest
    tuples; both subtrees are replaced by one new leaf, as the paper prescribes. This is the tree
    analogue of minimal generalization: a merge destroys as few paths as it can, and the small
    groups are generalized first. Merging all siblings at once would collapse every multiway node
    on its first violation.

    Parameters
    ----------
    tree:
        The trained tree. Counts are merged exactly when it has them, by Eq. 1 otherwise.
    requirement:
        Checked per leaf in the form the output disclosure allows (see `modelshare.common.privacy.requirements`).
    disclosure:
        What the released tree discloses; defaults to the input tree's.

    Raises
    ------
    RequirementUnsatisfiable
        Pruning reached the root: the paper's algorithm then returns an empty tree, since a
        root-only tree is no model (|T'| > 2 is required).
    """
    disclosure = _output_disclosure(tree, disclosure)
    nodes = _working_copy(tree)
    n_classes = tree.schema.n_classes

    def ok(node: Node) -> bool:
        shown = node if disclosure == "counts" else replace(node, counts=None)
        return _satisfies(shown, requirement)

    passes: dict[int, bool] = {}  # node index: does it pass as a leaf (a leaf's statistics never change)

    def fails(child: int) -> bool:
        if child not in passes:
            passes[child] = ok(nodes[child])
        return not passes[child]

    depth = _depths(nodes)
    leaves: dict[int, int] = {}  # leaves below each node processed so far (deepest first: a parent's children are)
    for parent in sorted((i for i in depth if not nodes[i].is_leaf), key=lambda i: -depth[i]):
        node = nodes[parent]
        edges = node.edges
        for e in edges:
            if nodes[e.child].is_leaf:
                leaves[e.child] = 1
        while len(edges) > 1:
            bad = [j for j, e in enumerate(edges) if nodes[e.child].is_leaf and fails(e.child)]
            if not bad:
                break
            b = min(bad, key=lambda j: nodes[edges[j].child].total)
            s = min(_candidates(edges, b), key=lambda j: (leaves[edges[j].child], nodes[edges[j].child].total))
            merged = merge_stats([nodes[edges[b].child], nodes[edges[s].child]], n_classes, tree.disclosure)
            nodes.append(merged)
            leaves[len(nodes) - 1] = 1
            keep = [e for j, e in enumerate(edges) if j not in (b, s)]
            edges = [*keep, Edge(_union(edges[b].constraint, edges[s].constraint), len(nodes) - 1)]
        if len(edges) == 1:
            collapsed = merge_stats([nodes[e.child] for e in edges], n_classes, tree.disclosure)
            nodes[parent] = collapsed
            passes.pop(parent, None)
            leaves[parent] = 1
        else:
            node.edges = edges
            leaves[parent] = sum(leaves[e.child] for e in edges)
    if nodes[0].is_leaf:
        verdict = "the root alone satisfies it" if ok(nodes[0]) else "not even the whole table satisfies it"
        raise RequirementUnsatisfiable(
            f"APT cannot meet {requirement}: pruning reached the root and {verdict}; "
            "a root-only tree is no model, so nothing is released"
        )
    return rebuild(tree.schema, nodes, disclosure)


def _check_threshold(s: int) -> int:
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
        raise ValueError(f"pruning threshold s must be an integer >= 0, got {s!r}")
    return int(s)


def prune_leaves(tree: Tree, s: int, *, disclosure: Disclosure | None = None, splice: bool = True) -> Tree:
    """Method 1 (Wakabayashi et al. Fig. 5): delete every leaf holding at most ``s`` tuples.

    Deleted tuples are gone from the released model: inner statistics are recomputed from the
    remaining leaves, and a row reaching a deleted leaf's region stops at its parent and takes the
    parent's remaining majority (docs/paper-notes.md §3.3's fallback).

    A node left with one child would show where its deleted sibling was (a one-edge ``age <= 76.5``
    locates a pruned person), so by default (``splice``) it is replaced by its child, which then
    covers the node's whole region (`splice_single_children`); ``splice=False`` is the paper's Fig. 5
    as written, kept for the reproduction (`modelshare experiment pruning`). A multiway node that
    keeps two or more children still shows which of its categories lost their leaves: that the
    method cannot avoid.

    Raises
    ------
    RequirementUnsatisfiable
        No leaf holds more than ``s`` tuples, or (``splice``) only one path is left: a root-only tree
        is no model.
    """
    s = _check_threshold(s)
    disclosure = _output_disclosure(tree, disclosure)
    nodes = _working_copy(tree)
    deleted = {i for i, n in enumerate(nodes) if n.is_leaf and n.total <= s}
    if len(deleted) == tree.n_leaves:
        raise RequirementUnsatisfiable(f"every leaf holds at most s={s} tuples; nothing is left to release")
    pruned = rebuild(tree.schema, nodes, disclosure, dropped=deleted)
    if not splice:
        return pruned
    spliced = splice_single_children(pruned)
    if spliced.root.is_leaf:
        raise RequirementUnsatisfiable(f"only one leaf holds more than s={s} tuples; a root-only tree is no model, "
                                       "so nothing is released")
    return spliced


def prune_parents(tree: Tree, s: int, *, disclosure: Disclosure | None = None) -> Tree:
    """Method 2 (Wakabayashi et al. Fig. 6), applied to a fixpoint.

    Every node with a leaf child of at most ``s`` tuples becomes a leaf holding all its tuples;
    this repeats until no leaf other than the root holds ``s`` or fewer (a single pass can leave a
    merged leaf that small; the fixpoint reproduces the paper's Nursery numbers, docs/paper-notes.md §3.3).

    Raises
    ------
    RequirementUnsatisfiable
        The tree collapsed to its root and the root itself holds at most ``s`` tuples.
    """
    s = _check_threshold(s)
    disclosure = _output_disclosure(tree, disclosure)
    nodes = _working_copy(tree)
    while True:
        small = [
            i for i in preorder(nodes) if any(nodes[e.child].is_leaf and nodes[e.child].total <= s
                                              for e in nodes[i].edges)
        ]
        if not small:
            break
        for i in small:
            nodes[i] = replace(nodes[i], attribute=None, edges=[])
    if nodes[0].total <= s:
        raise RequirementUnsatisfiable(f"the whole table holds {nodes[0].total:g} <= s={s} tuples")
    return rebuild(tree.schema, nodes, disclosure)


# ---------------------------------------------------------------- registry releases
# (tree, requirement, disclosure) -> (released tree, the parameters the report adds): the registry's
# ``prune`` of each tree mechanism (`modelshare.common.mechanisms.registry`).
def release_unchanged(tree: Tree, requirement: PathRequirement | None,
                      disclosure: Disclosure) -> tuple[Tree, dict[str, Any]]:
    """``none``: the tree as trained, rebuilt so that it discloses ``disclosure``."""
    return rebuild(tree.schema, tree.nodes, disclosure), {}


def release_apt(tree: Tree, requirement: PathRequirement | None, disclosure: Disclosure) -> tuple[Tree, dict[str, Any]]:
    """``apt``: anonymity-based tree pruning to the path requirement, then (for (c,l)-diversity of the whole
    release, the default) `release_guard`; the parameters say how many leaves the guard pruned away."""
    assert requirement is not None
    pruned = apt(tree, requirement, disclosure=disclosure)
    if not isinstance(requirement, CLDiversity) or requirement.per_leaf:
        return pruned, {}
    guarded = release_guard(pruned, requirement)
    return guarded, {"guard_pruned_leaves": pruned.n_leaves - guarded.n_leaves}


def _threshold(requirement: PathRequirement | None, mechanism: str) -> int:
    """Methods 1 and 2 prune at s = k - 1 from ``k-anonymity:k=K``."""
    if not isinstance(requirement, KAnonymity):
        raise RequirementError(str(requirement), f"{mechanism} takes 'k-anonymity:k=K' (threshold s = K - 1)")
    return requirement.k - 1


def release_prune_leaf(tree: Tree, requirement: PathRequirement | None,
                       disclosure: Disclosure) -> tuple[Tree, dict[str, Any]]:
    """``prune-leaf``: Method 1 with threshold s = k - 1."""
    s = _threshold(requirement, "prune-leaf")
    return prune_leaves(tree, s, disclosure=disclosure), {"s": s}


def release_prune_parent(tree: Tree, requirement: PathRequirement | None,
                         disclosure: Disclosure) -> tuple[Tree, dict[str, Any]]:
    """``prune-parent``: Method 2 with threshold s = k - 1."""
    s = _threshold(requirement, "prune-parent")
    return prune_parents(tree, s, disclosure=disclosure), {"s": s}


def check_public_thresholds(tree: Tree, mechanism: str) -> None:
    """Refuse to prune a tree with a numeric threshold off the schema's public cut points (naming it).

    The released structure is the trained one minus pruning, so its thresholds must already be
    public: train the local tree with ``public_cuts`` (`modelshare.common.trees.learners.make_learner`).
    """
    found = public_cuts_check([tree])
    if not found.passed:
        raise ValueError(f"{mechanism}: "
                         f"{found.detail.replace('tree 0 ', 'the trained tree ')}; train the local tree on "
                         "the schema's public cut points (make_learner(..., public_cuts=True))")


def _subtree_leaves(tree: Tree) -> list[int]:
    """Per node of ``tree``: the leaves of its subtree."""
    leaves = [0] * len(tree.nodes)
    for i in reversed(preorder(tree.nodes)):
        node = tree.nodes[i]
        leaves[i] = 1 if node.is_leaf else sum(leaves[e.child] for e in node.edges)
    return leaves


def _guard_cost(tree: Tree, leaf: int, leaves: Sequence[int]) -> tuple[int, int | None]:
    """The least destructive coarsening that changes ``leaf``'s path: (leaves lost, the sibling edge it merges with).

    Under a parent with more than two children the leaf merges with the sibling whose subtree has the
    fewest leaves (``leaves``, per node; an interval only with a neighbour), as APT merges; under a binary
    parent (sibling None) the parent becomes a leaf.
    """
    parent = int(tree.parents[leaf])
    edges = tree.nodes[parent].edges
    if len(edges) > 2:
        b = next(j for j, e in enumerate(edges) if e.child == leaf)
        s = min(_candidates(edges, b), key=lambda j: (leaves[edges[j].child], tree.nodes[edges[j].child].total))
        return leaves[edges[s].child], s
    return leaves[parent] - 1, None


def _guard_step(tree: Tree, leaf: int, sibling: int | None) -> list[Node]:
    """The node list of `_guard_cost`'s coarsening; merged or collapsed nodes keep their released statistics
    (Eq. 1 under hit/miss)."""
    nodes = [replace(n, edges=list(n.edges)) for n in tree.nodes]
    parent = int(tree.parents[leaf])
    edges = nodes[parent].edges
    if sibling is None:
        nodes[parent] = replace(nodes[parent], attribute=None, edges=[])
        return nodes
    b = next(j for j, e in enumerate(edges) if e.child == leaf)
    merged = merge_stats([nodes[leaf], nodes[edges[sibling].child]], tree.schema.n_classes, tree.disclosure)
    nodes.append(merged)
    keep = [e for j, e in enumerate(edges) if j not in (b, sibling)]
    nodes[parent].edges = [*keep, Edge(_union(edges[b].constraint, edges[sibling].constraint), len(nodes) - 1)]
    return nodes


def release_guard(tree: Tree, requirement: CLDiversity) -> Tree:
    """Coarsen a released tree until the combining reader's beliefs meet ``requirement``
    (`modelshare.common.privacy.combining`).

    Each round reads the whole release as the combining reader does (`release_verdict`), and of the
    leaves where some person's belief breaks the requirement (or that fail it on their own statistics)
    coarsens the one whose change loses the fewest leaves (`_guard_cost`, `_guard_step`): fewer paths tell the grouped
    categories apart, so the reader's law flattens, and the root alone believes only the table's shares.

    Raises
    ------
    RequirementUnsatisfiable
        Coarsening reached the root.
    """
    current = tree
    while True:
        verdict = release_verdict([current], requirement)
        stats = leaf_stats(current)
        bad = {f.leaf for f in verdict.findings} | {int(i) for i in stats.leaves[~requirement.check(stats)]}
        if not bad:
            return current
        leaves = _subtree_leaves(current)
        leaf, (_, sibling) = min(((leaf, _guard_cost(current, leaf, leaves)) for leaf in sorted(bad)),
                                 key=lambda step: step[1][0])
        current = rebuild(current.schema, _guard_step(current, leaf, sibling), current.disclosure)
        if current.root.is_leaf:
            raise RequirementUnsatisfiable(
                f"APT cannot meet {requirement} for a reader of the whole release: coarsening reached the root; "
                "a root-only tree is no model, so nothing is released")
