"""Rebuilding an edited tree so that what it discloses derives from its released leaves alone.

Pruning removes or merges leaves. If inner nodes kept their trained statistics, a parent minus its
remaining children would re-expose a removed leaf, and under hit/miss disclosure an inner node's
exact hit would reveal how its children's misses are distributed. So every released tree is
rebuilt here: inner statistics are recomputed from the released leaves, exactly (class-by-class
sums) when leaves disclose counts, and by Sharkey et al.'s Eq. 1 when they disclose hit/miss, which
is what any reader of the leaves could compute anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.trees.tree import Disclosure, Edge, Node, Tree, TreeError

__all__ = ["eq1_counts", "merge_stats", "rebuild", "splice_single_children", "release_leaf_counts"]


def eq1_counts(labels: np.ndarray, hits: np.ndarray, misses: np.ndarray, n_classes: int) -> np.ndarray:
    """Sharkey et al. Eq. 1: estimated class counts of a node from its children's (class, hit, miss).

    ``hit_cj = sum(v.hit for v.class = cj) + sum(v.miss for v.class != cj) / (|C| - 1)``: a child
    contributes its hits to its own class and spreads its misses evenly over the other classes.
    """
    if n_classes < 2:
        raise ValueError(f"Eq. 1 needs at least two classes, got {n_classes}")
    labels = np.asarray(labels, dtype=np.int64)
    misses = np.asarray(misses, dtype=np.float64)
    estimate = np.bincount(labels, weights=np.asarray(hits, dtype=np.float64), minlength=n_classes)
    own_miss = np.bincount(labels, weights=misses, minlength=n_classes)
    counts: np.ndarray = estimate + (misses.sum() - own_miss) / (n_classes - 1)
    return counts


def merge_stats(parts: Sequence[Node], n_classes: int, disclosure: Disclosure) -> Node:
    """A leaf holding the tuples of ``parts``: exact sums under counts, Eq. 1 under hit/miss."""
    if not parts:
        raise ValueError("cannot merge zero nodes")
    if disclosure == "counts":
        return Node.from_counts(np.sum([p.class_counts() for p in parts], axis=0))
    if len(parts) == 1:
        p = parts[0]
        return Node(p.label, p.hit, p.miss)
    estimate = eq1_counts(
        np.array([p.label for p in parts]), np.array([p.hit for p in parts]),
        np.array([p.miss for p in parts]), n_classes
    )
    label = int(np.argmax(estimate))
    total = float(sum(p.total for p in parts))
    hit = float(estimate[label])
    return Node(label, hit, total - hit)


def rebuild(schema: Schema, nodes: Sequence[Node], disclosure: Disclosure, *,
            dropped: AbstractSet[int] = frozenset()) -> Tree:
    """The tree rooted at ``nodes[0]`` with empty subtrees dropped and inner stats recomputed from leaves.

    Nodes in ``dropped`` are removed with their tuples (Method 1 pruning), and so is an inner node
    whose every child was removed; nodes not reachable from the root are ignored. Leaves must carry counts when
    ``disclosure`` is ``counts``; under ``hit_miss`` leaves keep (class, hit, miss) and inner nodes
    get Eq. 1 estimates.

    Raises
    ------
    TreeError
        Every leaf was dropped (nothing is left to release), or counts are asked for but missing.
    """
    order: list[int] = []
    stack = [0]
    while stack:  # preorder; iterative, so no depth limit
        i = stack.pop()
        order.append(i)
        if i not in dropped:
            stack.extend(e.child for e in reversed(nodes[i].edges))
    built: dict[int, Node] = {}
    for i in reversed(order):  # children before parents
        node = nodes[i]
        if i in dropped:
            continue
        if node.is_leaf:
            if disclosure == "counts":
                if node.counts is None:
                    raise TreeError(f"node {i}: counts disclosure needs class counts at every leaf")
                built[i] = Node.from_counts(node.counts)
            else:
                built[i] = Node(node.label, node.hit, node.miss)
            continue
        kept = [e for e in node.edges if e.child in built]
        if kept:
            merged = merge_stats([built[e.child] for e in kept], schema.n_classes, disclosure)
            merged.attribute, merged.edges = node.attribute, kept  # child ids renumbered below
            built[i] = merged
    if 0 not in built:
        raise TreeError("no leaf is left: the whole tree was pruned")
    kept_order = [i for i in order if i in built]
    number = {i: k for k, i in enumerate(kept_order)}
    out = [built[i] for i in kept_order]
    for node in out:
        node.edges = [Edge(e.constraint, number[e.child]) for e in node.edges]
    return Tree(schema, out, disclosure)


def splice_single_children(tree: Tree) -> Tree:
    """``tree`` with every inner node that has one child replaced by that child, reached by the node's own edge.

    A single-child node shows where a pruned sibling was (``age <= 76.5`` kept on a one-edge node
    says someone older was deleted); its child's statistics equal its own, so splicing it out
    changes no released number: the child simply covers the node's whole region.
    """
    def through(i: int) -> int:
        while len(tree.nodes[i].edges) == 1:
            i = tree.nodes[i].edges[0].child
        return i

    order, stack = [], [through(0)]
    while stack:  # preorder of the spliced tree, in original node ids
        i = stack.pop()
        order.append(i)
        stack.extend(through(e.child) for e in reversed(tree.nodes[i].edges))
    number = {i: k for k, i in enumerate(order)}
    nodes = [replace(tree.nodes[i], edges=[Edge(e.constraint, number[through(e.child)]) for e in tree.nodes[i].edges])
             for i in order]
    return Tree(tree.schema, nodes, tree.disclosure)


def release_leaf_counts(schema: Schema, nodes: Sequence[Node], leaves: Sequence[int] | np.ndarray,
                        counts: np.ndarray) -> Tree:
    """A counts tree with ``counts[j]`` (post-processed noisy counts) at node ``leaves[j]`` of ``nodes``.

    Leaves whose counts are all 0 are not materialised and inner counts are recomputed from the
    leaves (`rebuild`); when every count is 0 the release is a zero root. All of it reads only the
    released counts, so it is post-processing: the shared last step of the eps-DP mechanisms.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if not counts.any():
        return Tree(schema, [Node.from_counts(np.zeros(schema.n_classes))], "counts")
    released = list(nodes)
    for i, leaf_counts in zip(leaves, counts, strict=False):
        released[i] = Node.from_counts(leaf_counts)
    dropped = {int(leaves[int(j)]) for j in np.flatnonzero(~counts.any(axis=1))}
    return rebuild(schema, released, "counts", dropped=dropped)
