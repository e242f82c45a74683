"""Decision trees as released models: nodes with class counts, constrained edges, and paths.

A `Tree` is the unit an owner releases and the miner regenerates data from. Each node carries
what is disclosed about the training tuples that reach it: the full class-count vector
(`counts` disclosure) or only its majority class with hit and miss counts (`hit_miss`, the form of
Sharkey et al. Fig. 2). Each edge carries a constraint on the parent's split attribute: a set of
category indices or an interval. A root-to-leaf `Path` is the conjunction of the most specific
constraint per attribute on that path (Sharkey et al. §2.1); paths are what privacy is measured on
and what PGEN generates from.

Rows use the encoded form of `modelshare.common.data.schema` (categorical = category index, numeric = value).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema

__all__ = [
    "preorder",
    "TreeError",
    "CategorySet",
    "Interval",
    "Constraint",
    "Node",
    "Edge",
    "Path",
    "Tree",
    "Disclosure",
    "conjunction_mask",
    "counts_match",
]

Disclosure = Literal["counts", "hit_miss"]
DISCLOSURES: tuple[str, ...] = ("counts", "hit_miss")


class TreeError(ValueError):
    """A malformed tree: names the node and what is wrong with it."""


@dataclass(frozen=True)
class CategorySet:
    """Categorical constraint: the attribute's category index is one of ``codes``."""

    codes: frozenset[int]

    def mask(self, column: np.ndarray) -> np.ndarray:
        return np.isin(column, np.fromiter(self.codes, dtype=np.float64, count=len(self.codes)))

    def intersect(self, other: CategorySet) -> CategorySet:
        return CategorySet(self.codes & other.codes)

    @property
    def is_empty(self) -> bool:
        return not self.codes

    def describe(self, attribute: CategoricalAttribute) -> str:
        names = [attribute.categories[c] for c in sorted(self.codes)]
        return f"{attribute.name} = {names[0]}" if len(names) == 1 else f"{attribute.name} in {{{', '.join(names)}}}"

    def canonical(self) -> tuple[object, ...]:
        return ("in", tuple(sorted(self.codes)))


@dataclass(frozen=True)
class Interval:
    """Numeric constraint: ``low <(=) x <(=) high``; bounds may be infinite on edges."""

    low: float = -math.inf
    high: float = math.inf
    low_closed: bool = False
    high_closed: bool = True

    def mask(self, column: np.ndarray) -> np.ndarray:
        above = column >= self.low if self.low_closed else column > self.low
        below = column <= self.high if self.high_closed else column < self.high
        return above & below

    def intersect(self, other: Interval) -> Interval:
        if self.low > other.low or (self.low == other.low and not self.low_closed):
            low, low_closed = self.low, self.low_closed
        else:
            low, low_closed = other.low, other.low_closed
        if self.high < other.high or (self.high == other.high and not self.high_closed):
            high, high_closed = self.high, self.high_closed
        else:
            high, high_closed = other.high, other.high_closed
        return Interval(low, high, low_closed, high_closed)

    @property
    def is_empty(self) -> bool:
        return self.low > self.high or (self.low == self.high and not (self.low_closed and self.high_closed))

    def clip(self, attribute: NumericAttribute) -> Interval:
        """Intersect with the attribute's closed schema range."""
        return self.intersect(Interval(attribute.low, attribute.high, True, True))

    def describe(self, attribute: NumericAttribute) -> str:
        left = "[" if self.low_closed else "("
        right = "]" if self.high_closed else ")"
        return f"{attribute.name} in {left}{self.low:g}, {self.high:g}{right}"

    def canonical(self) -> tuple[object, ...]:
        return ("iv", float(self.low), float(self.high), self.low_closed, self.high_closed)


Constraint = CategorySet | Interval


def conjunction_mask(constraints: Sequence[tuple[int, Constraint]], X: np.ndarray) -> np.ndarray:
    """Rows of encoded ``X`` that satisfy every ``(attribute index, constraint)`` pair."""
    ok = np.ones(X.shape[0], dtype=bool)
    for a, c in constraints:
        ok &= c.mask(X[:, a])
    return ok


@dataclass(frozen=True)
class Edge:
    """An edge from a split node to ``child`` taken by rows that satisfy ``constraint``."""

    constraint: Constraint
    child: int


@dataclass(eq=False)
class Node:
    """A tree node and what is disclosed about the training tuples that reach it.

    ``counts`` is the class-count vector under `counts` disclosure and None under `hit_miss`;
    ``label`` is the predicted (majority) class; ``hit`` and ``miss`` are the tuples in and not
    in that class. ``attribute`` is the split attribute's index for inner nodes, None for leaves.
    """

    label: int
    hit: float
    miss: float
    counts: np.ndarray | None = None
    attribute: int | None = None
    edges: list[Edge] = field(default_factory=list)

    @classmethod
    def from_counts(cls, counts: np.ndarray, label: int | None = None) -> Node:
        """A node whose hit/miss derive from ``counts``; label is the first argmax unless given."""
        counts = np.asarray(counts, dtype=np.float64)
        if label is None:
            label = int(np.argmax(counts))
        total = float(counts.sum())
        hit = float(counts[label])
        return cls(label=label, hit=hit, miss=total - hit, counts=counts)

    @property
    def is_leaf(self) -> bool:
        return not self.edges

    @property
    def total(self) -> float:
        return self.hit + self.miss

    def class_counts(self) -> np.ndarray:
        """The class-count vector of a node that discloses it; TreeError for a hit/miss node, which has none."""
        if self.counts is None:
            raise TreeError("a hit/miss node discloses no class counts")
        return self.counts


@dataclass(frozen=True, eq=False)
class Path:
    """A root-to-leaf path: the most specific constraint per attribute plus the leaf's disclosure."""

    constraints: tuple[tuple[int, Constraint], ...]
    leaf: int
    label: int
    hit: float
    miss: float
    counts: np.ndarray | None

    @property
    def total(self) -> float:
        return self.hit + self.miss

    @property
    def attributes(self) -> tuple[int, ...]:
        return tuple(a for a, _ in self.constraints)

    def constraint(self, attribute: int) -> Constraint | None:
        for a, c in self.constraints:
            if a == attribute:
                return c
        return None

    @property
    def key(self) -> tuple[object, ...]:
        """Identity for path match: the path's constraints (canonical) and its class."""
        return (tuple((a, c.canonical()) for a, c in self.constraints), self.label)

    def mask(self, X: np.ndarray) -> np.ndarray:
        """Rows of ``X`` that satisfy every constraint of the path."""
        return conjunction_mask(self.constraints, X)

    def describe(self, schema: Schema) -> str:
        # the ignore below: an Interval's attribute is numeric, a CategorySet's categorical (checked at build)
        parts = [c.describe(schema.attributes[a]) for a, c in self.constraints]  # type: ignore[arg-type]
        return " AND ".join(parts) if parts else "(everything)"


def _intersect(a: Constraint, b: Constraint) -> Constraint:
    """Two constraints on one attribute together (both intervals, or both category sets: `validate` checks it)."""
    if isinstance(a, Interval) and isinstance(b, Interval):
        return a.intersect(b)
    if isinstance(a, CategorySet) and isinstance(b, CategorySet):
        return a.intersect(b)
    raise TreeError("an interval and a category set constrain the same attribute")


def preorder(nodes: Sequence[Node]) -> list[int]:
    """Node indices reachable from node 0, parents before children, siblings in edge order (no recursion)."""
    order, stack = [], [0]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(e.child for e in reversed(nodes[i].edges))
    return order


def counts_match(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: ``a`` equals ``b`` up to float noise in sums of counts (abs 1e-6, rel 1e-9).

    `np.isclose` with those tolerances, without its per-call overhead (the miner runs this for
    every received tree).
    """
    close: np.ndarray = np.abs(a - b) <= 1e-6 + 1e-9 * np.abs(b)
    return close


def _close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise `math.isclose` with its defaults (relative tolerance 1e-9, symmetric)."""
    close: np.ndarray = np.abs(a - b) <= 1e-9 * np.maximum(np.abs(a), np.abs(b))
    return close


class Tree:
    """A validated decision tree over a schema; node 0 is the root.

    Parameters
    ----------
    schema:
        The schema the tree's attributes and classes refer to.
    nodes:
        The nodes; edges refer to children by index into this list.
    disclosure:
        ``"counts"`` (every node has a class-count vector) or ``"hit_miss"``.
    """

    def __init__(self, schema: Schema, nodes: Sequence[Node], disclosure: Disclosure = "counts") -> None:
        self.schema = schema
        self.nodes = list(nodes)
        self.disclosure = disclosure
        self.validate()

    # ------------------------------------------------------------ validation
    def validate(self) -> None:
        """Reject malformed trees: bad references or cycles, bad counts, constraints off the schema or the path.

        Structure and constraints are checked node by node; the statistics (finite, non-negative,
        consistent with the label, children summing to their parent) in one vectorised pass, since
        the miner validates every tree it receives.
        """
        if self.disclosure not in DISCLOSURES:
            raise TreeError(f"disclosure is {self.disclosure!r}; expected one of {list(DISCLOSURES)}")
        if not self.nodes:
            raise TreeError("a tree needs at least a root node")
        self._parents = self._link_parents()
        for i, node in enumerate(self.nodes):
            self._validate_node(i, node)
        self._validate_paths()
        self._validate_stats()

    def _link_parents(self) -> np.ndarray:
        """Each node's parent index (-1 for the root); every node but the root has exactly one."""
        nodes = self.nodes
        parent = np.full(len(nodes), -1, dtype=np.int64)
        for i, node in enumerate(nodes):
            for edge in node.edges:
                c = edge.child
                if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < len(nodes):
                    raise TreeError(f"node {i}: edge to node {c!r}, which does not exist")
        for i, node in enumerate(nodes):
            for edge in node.edges:
                c = edge.child
                if c == 0 or parent[c] != -1:
                    raise TreeError(f"node {i}: node {c} has more than one parent (cycle or shared subtree)")
                parent[c] = i
        # Every node has one parent, but a ring of nodes off the root (1 -> 2 -> 1) has parents too: follow
        # parent links by pointer doubling (log2 n vectorised steps) and keep the nodes that arrive at the root.
        ancestor = np.where(parent < 0, np.arange(len(nodes)), parent)
        ancestor[0] = 0
        for _ in range(len(nodes).bit_length()):
            ancestor = ancestor[ancestor]
        unreachable = np.flatnonzero(ancestor != 0)
        if unreachable.size:
            raise TreeError(f"nodes {unreachable[:10].tolist()} are not reachable from the root")
        return parent

    def _validate_node(self, i: int, node: Node) -> None:
        """The node's label, split attribute and edge constraints against the schema."""
        schema = self.schema
        if (isinstance(node.label, bool) or not isinstance(node.label, (int, np.integer))
                or not 0 <= node.label < schema.n_classes):
            raise TreeError(f"node {i}: class index {node.label} is outside 0..{schema.n_classes - 1}")
        if self.disclosure == "counts":
            if node.counts is None or node.counts.shape != (schema.n_classes,):
                raise TreeError(f"node {i}: counts disclosure needs a vector of {schema.n_classes} class counts")
        elif node.counts is not None:
            raise TreeError(f"node {i}: hit_miss disclosure must not carry class counts")
        if node.is_leaf:
            if node.attribute is not None:
                raise TreeError(f"node {i}: a leaf must not name a split attribute")
            return
        if (
            node.attribute is None
            or isinstance(node.attribute, bool)
            or not isinstance(node.attribute, (int, np.integer))
            or not 0 <= node.attribute < schema.n_attributes
        ):
            raise TreeError(f"node {i}: split attribute {node.attribute} is not an attribute index of the schema")
        attr = schema.attributes[node.attribute]
        if isinstance(attr, CategoricalAttribute):
            seen: set[int] = set()
            for e in node.edges:
                if not isinstance(e.constraint, CategorySet):
                    raise TreeError(f"node {i}: categorical attribute {attr.name!r} needs category-set edges")
                if e.constraint.is_empty or not all(0 <= c < attr.size for c in e.constraint.codes):
                    raise TreeError(f"node {i}: edge to node {e.child} has categories outside {attr.name!r}")
                if seen & e.constraint.codes:
                    raise TreeError(f"node {i}: sibling edges overlap on {attr.name!r}")
                seen |= e.constraint.codes
        else:
            spans: list[Interval] = []
            for e in node.edges:
                iv = e.constraint
                if not isinstance(iv, Interval) or math.isnan(iv.low) or math.isnan(iv.high):
                    raise TreeError(f"node {i}: numeric attribute {attr.name!r} needs interval edges")
                if iv.clip(attr).is_empty:
                    raise TreeError(
                        f"node {i}: edge to node {e.child} on {attr.name!r} lies outside the schema range "
                        f"[{attr.low:g}, {attr.high:g}]"
                    )
                if any(not iv.intersect(other).is_empty for other in spans):
                    raise TreeError(f"node {i}: sibling intervals on {attr.name!r} overlap")
                spans.append(iv)

    def _validate_paths(self) -> None:
        """No edge contradicts an earlier split on its path: a path no tuple can satisfy is malformed."""
        schema = self.schema
        stack: list[tuple[int, dict[int, Constraint]]] = [(0, {})]
        while stack:
            i, constraints = stack.pop()
            node = self.nodes[i]
            if node.is_leaf:
                continue
            a = node.attribute
            attr = schema.attributes[a]  # type: ignore[index]  # an inner node: its attribute is set
            previous = constraints.get(a)  # type: ignore[arg-type]  # an inner node: its attribute is set
            for e in node.edges:
                # the ignore below: an Interval splits a numeric attribute
                here = e.constraint.clip(attr) if isinstance(e.constraint, Interval) else e.constraint  # type: ignore[arg-type]
                # the ignore below: one attribute: both constraints are of its kind
                merged = here if previous is None else previous.intersect(here)  # type: ignore[arg-type]
                if merged.is_empty:
                    raise TreeError(f"node {i}: edge to node {e.child} on {attr.name!r} admits no value "
                                    f"the path to node {i} allows")
                # the ignore below: an inner node: its attribute is set
                stack.append((e.child, {**constraints, a: merged}))  # type: ignore[dict-item]

    def _validate_stats(self) -> None:
        """Hit/miss finite and non-negative, counts consistent with them, children summing to parents."""
        n = len(self.nodes)
        hit = np.fromiter((node.hit for node in self.nodes), dtype=np.float64, count=n)
        miss = np.fromiter((node.miss for node in self.nodes), dtype=np.float64, count=n)
        bad = ~(np.isfinite(hit) & np.isfinite(miss) & (hit >= 0) & (miss >= 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise TreeError(f"node {i}: hit {hit[i]} and miss {miss[i]} must be finite and non-negative")
        total = hit + miss
        counts = None
        if self.disclosure == "counts":
            # the ignore below: under counts disclosure every node has its counts (checked in __init__)
            counts = np.stack([node.counts for node in self.nodes]).astype(np.float64, copy=False)  # type: ignore[misc]
            self._validate_counts(counts, hit, total)
        children = np.arange(1, n)
        inner = np.fromiter((bool(node.edges) for node in self.nodes), dtype=bool, count=n)
        child_total = np.bincount(self._parents[children], weights=total[children], minlength=n)
        bad = inner & ~counts_match(child_total, total)
        if bad.any():
            i = int(np.argmax(bad))
            raise TreeError(f"node {i}: children hold {child_total[i]:g} tuples, the node {total[i]:g}")
        if counts is not None:
            child_sum = np.zeros_like(counts)
            np.add.at(child_sum, self._parents[children], counts[children])
            bad = inner & ~counts_match(child_sum, counts).all(axis=1)
            if bad.any():
                i = int(np.argmax(bad))
                raise TreeError(
                    f"node {i}: children's counts sum to {child_sum[i].tolist()}, not the node's {counts[i].tolist()}"
                )

    def _validate_counts(self, counts: np.ndarray, hit: np.ndarray, total: np.ndarray) -> None:
        """Class counts finite, non-negative, with the label a majority class and hit/miss derived from them."""
        bad = ~(np.isfinite(counts).all(axis=1) & (counts >= 0).all(axis=1))
        if bad.any():
            i = int(np.argmax(bad))
            raise TreeError(f"node {i}: class counts {counts[i].tolist()} must be finite and non-negative")
        labels = np.fromiter((node.label for node in self.nodes), dtype=np.int64, count=len(self.nodes))
        own = counts[np.arange(len(labels)), labels]
        sums = counts.sum(axis=1)
        bad = (sums > 0) & (own < counts.max(axis=1))
        if bad.any():
            i = int(np.argmax(bad))
            raise TreeError(f"node {i}: label {labels[i]} is not a majority class of counts {counts[i].tolist()}")
        bad = ~(_close(hit, own) & _close(total, sums))
        if bad.any():
            i = int(np.argmax(bad))
            raise TreeError(f"node {i}: hit/miss disagree with counts {counts[i].tolist()}")

    @property
    def parents(self) -> np.ndarray:
        """Parent index of every node, -1 for the root (read-only)."""
        view: np.ndarray = self._parents.view()
        view.flags.writeable = False
        return view

    # ---------------------------------------------------------------- shape
    @property
    def root(self) -> Node:
        return self.nodes[0]

    @property
    def leaves(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.is_leaf]

    @property
    def n_leaves(self) -> int:
        return sum(1 for n in self.nodes if n.is_leaf)

    @property
    def depth(self) -> int:
        best, stack = 0, [(0, 0)]
        while stack:
            i, d = stack.pop()
            best = max(best, d)
            stack.extend((e.child, d + 1) for e in self.nodes[i].edges)
        return best

    # ---------------------------------------------------------- prediction
    def apply(self, X: np.ndarray) -> np.ndarray:
        """Index of the node where each row stops: its leaf, or the inner node no edge admits it from.

        Vectorized over rows: the loop runs over nodes, routing index arrays down the tree.
        """
        X = np.asarray(X, dtype=np.float64)
        out = np.zeros(X.shape[0], dtype=np.int64)
        stack: list[tuple[int, np.ndarray]] = [(0, np.arange(X.shape[0]))]
        while stack:
            i, rows = stack.pop()
            node = self.nodes[i]
            if node.is_leaf or rows.size == 0:
                out[rows] = i
                continue
            column = X[rows, node.attribute]
            unrouted = np.ones(rows.size, dtype=bool)
            for e in node.edges:
                hit = e.constraint.mask(column) & unrouted
                unrouted &= ~hit
                stack.append((e.child, rows[hit]))
            out[rows[unrouted]] = i
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index per row: the label of the node where the row stops."""
        labels = np.array([n.label for n in self.nodes], dtype=np.int64)
        predicted: np.ndarray = labels[self.apply(X)]
        return predicted

    # --------------------------------------------------------------- paths
    def paths(self) -> list[Path]:
        """Root-to-leaf paths in depth-first order, each with its most specific constraints."""
        result: list[Path] = []
        stack: list[tuple[int, dict[int, Constraint]]] = [(0, {})]
        while stack:
            i, constraints = stack.pop()
            node = self.nodes[i]
            if node.is_leaf:
                ordered = tuple(sorted(constraints.items()))
                result.append(Path(ordered, i, node.label, node.hit, node.miss, node.counts))
                continue
            attr_index = node.attribute
            assert attr_index is not None  # an inner node splits on an attribute (validate)
            attr = self.schema.attributes[attr_index]
            for e in reversed(node.edges):
                here = e.constraint
                if isinstance(here, Interval) and isinstance(attr, NumericAttribute):
                    here = here.clip(attr)
                previous = constraints.get(attr_index)
                merged = here if previous is None else _intersect(previous, here)
                stack.append((e.child, {**constraints, attr_index: merged}))
        return result

    # ----------------------------------------------------------- disclosure
    def to_hit_miss(self) -> Tree:
        """The same tree disclosing only majority class, hit and miss per node."""
        nodes = [Node(n.label, n.hit, n.miss, None, n.attribute, list(n.edges)) for n in self.nodes]
        return Tree(self.schema, nodes, "hit_miss")

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __repr__(self) -> str:
        return (f"Tree(nodes={len(self.nodes)}, leaves={self.n_leaves}, depth={self.depth}, "
                f"disclosure={self.disclosure!r})")
