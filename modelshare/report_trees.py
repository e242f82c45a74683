"""Released trees drawn as inline SVG for `modelshare.report_html` (no graphviz, no external files).

A tree is laid out left to right, one column per level, because a page grows downwards and
released trees are wide (a categorical split has a child per category): every drawn node that has
no drawn children takes one row, a parent sits level with the middle of its children, and each
edge's condition is written above the child it leads to. A large tree is cut at the deepest level
(at most `MAX_LEVELS` columns, so it fits a page's width) whose frontier still fits `MAX_SLOTS`
rows; at least the root's children are drawn. A cut node is drawn dashed with the number of nodes
below it, and `DrawnTree` says how many were cut. Every text is escaped; a box too narrow for its
text shows it shortened, with the whole text as the box's tooltip.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.trees.readable import grouped, numeric_condition, plain_number
from modelshare.common.trees.regression import RegressionTree
from modelshare.common.trees.tree import CategorySet, Constraint, Interval, Tree

__all__ = ["DrawnTree", "MAX_SLOTS", "class_legend", "draw_tree"]

MAX_SLOTS = 40
"""Most frontier boxes drawn one above the other; deeper levels of a wider tree are cut."""
MAX_LEVELS = 6
"""Most levels drawn (columns: 6 fit a 1150-pixel page with room for the cut notes)."""

NODE_W, NODE_H = 140, 38
SLOT_H, LEVEL_W = 56, 168
MARGIN, CUT_NOTE_W = 12, 128
CHARS = 22  # characters of 11-12px text that fit a box
LABEL_CHARS = 27  # characters of 10px text that fit above a box and the gap to its right
PALETTE = ("#cfe3f7", "#fde2c4", "#d4efd0", "#f6d0d0", "#e4d7f2", "#f3e7b8", "#d0eeee", "#eddcd2")
INNER_FILL, CUT_FILL = "#f2f2f2", "#ffffff"


@dataclass(frozen=True)
class DrawnTree:
    """A tree's SVG and what of it was drawn: nodes drawn and in all, levels drawn and in all."""

    svg: str
    drawn: int
    total: int
    depth_drawn: int
    depth: int

    @property
    def cut(self) -> int:
        """Nodes below the drawn levels, not drawn."""
        return self.total - self.drawn


@dataclass(frozen=True)
class _Box:
    """One node as drawn: its text lines, its tooltip, its fill and whether a cut subtree hangs below it."""

    lines: tuple[str, ...]
    tooltip: str
    fill: str
    cut_below: int = 0


def _condition(constraint: Constraint, attribute: CategoricalAttribute | NumericAttribute) -> str:
    """An edge's condition without the attribute's name (the parent box names it): '= a', '∈ {a, b}', '≤ 3'."""
    if isinstance(constraint, CategorySet):
        assert isinstance(attribute, CategoricalAttribute)  # a category set constrains a categorical attribute
        names = [attribute.categories[c] for c in sorted(constraint.codes)]
        return f"= {names[0]}" if len(names) == 1 else "∈ {" + ", ".join(names) + "}"
    assert isinstance(constraint, Interval) and isinstance(attribute, NumericAttribute)
    return numeric_condition(constraint, attribute, symbols=True)


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _classification_box(tree: Tree, i: int) -> _Box:
    node, schema = tree.nodes[i], tree.schema
    if node.is_leaf:
        label = schema.classes[node.label]
        if node.counts is not None and len(node.counts) <= 4:
            stats = "counts " + " / ".join(grouped(c) for c in node.counts)
        else:
            stats = f"hit {grouped(node.hit)} · miss {grouped(node.miss)}"
        tip = f"leaf {i}: class {label}; hit {grouped(node.hit)}, miss {grouped(node.miss)}"
        if node.counts is not None:
            tip += "; counts " + ", ".join(f"{c}={grouped(v)}"
                                           for c, v in zip(schema.classes, node.counts, strict=False))
        return _Box((label, stats), tip, PALETTE[node.label % len(PALETTE)])
    assert node.attribute is not None  # not a leaf: it splits on an attribute
    name = schema.attributes[node.attribute].name
    return _Box((name, f"n = {grouped(node.total)}"), f"node {i}: split on {name}; {grouped(node.total)} tuples",
                INNER_FILL)


def _regression_box(tree: RegressionTree, i: int) -> _Box:
    node = tree.nodes[i]
    if node.attribute is None:
        value = float(tree.schema.unscale(np.array([node.value]))[0])
        target = tree.schema.target.name
        return _Box((f"{target} ≈ {plain_number(value)}", f"N' = {grouped(node.count)}"),
                    f"leaf {i}: predicts {target} {plain_number(value)}; noisy count N' {plain_number(node.count)}",
                    PALETTE[0])
    name = tree.schema.attributes[node.attribute].name
    return _Box((name, f"N' = {grouped(node.count)}"), f"node {i}: split on {name}; noisy count "
                f"{plain_number(node.count)}", INNER_FILL)


def _structure(tree: Tree | RegressionTree) -> tuple[Tree, list[_Box]]:
    """The tree whose edges are drawn (a regression tree's classification mirror) and one box per node."""
    if isinstance(tree, RegressionTree):
        return tree.tree, [_regression_box(tree, i) for i in range(len(tree.nodes))]
    return tree, [_classification_box(tree, i) for i in range(len(tree.nodes))]


def _depths(tree: Tree) -> np.ndarray:
    """Each node's level (the root's is 0), walked from the root: node order says nothing about depth."""
    depth = np.zeros(len(tree.nodes), dtype=np.int64)
    stack = [0]
    while stack:
        i = stack.pop()
        for edge in tree.nodes[i].edges:
            depth[edge.child] = depth[i] + 1
            stack.append(edge.child)
    return depth


def _cut_depth(tree: Tree, depth: np.ndarray, max_slots: int) -> int:
    """The deepest level (below `MAX_LEVELS`) whose frontier (nodes at it, leaves above it) fits ``max_slots``; >= 1."""
    leaf = np.array([n.is_leaf for n in tree.nodes])
    deepest = int(depth.max())
    for d in range(min(deepest, MAX_LEVELS - 1), 0, -1):
        if int(((depth == d) | (leaf & (depth < d))).sum()) <= max_slots:
            return d
    return min(1, deepest)


def _subtree_sizes(tree: Tree) -> np.ndarray:
    size = np.ones(len(tree.nodes), dtype=np.int64)
    order: list[int] = []
    stack = [0]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(e.child for e in tree.nodes[i].edges)
    for i in reversed(order):
        size[i] += sum(size[e.child] for e in tree.nodes[i].edges)
    return size


def _layout(tree: Tree, depth: np.ndarray, cut: int) -> dict[int, float]:
    """Each drawn node's row: frontier nodes take consecutive rows, a parent the middle of its children's."""
    x: dict[int, float] = {}
    slot = 0

    def place(i: int) -> float:
        nonlocal slot
        children = [e.child for e in tree.nodes[i].edges] if depth[i] < cut else []
        if not children:
            x[i] = float(slot)
            slot += 1
        else:
            xs = [place(c) for c in children]
            x[i] = (xs[0] + xs[-1]) / 2
        return x[i]

    place(0)
    return x


def _text(x: float, y: float, text: str, *, size: int, weight: str = "normal", anchor: str = "middle") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" font-weight="{weight}" text-anchor="{anchor}">'
            f"{html.escape(text)}</text>")


def _node_svg(left: float, top: float, box: _Box) -> str:
    dashed = ' stroke-dasharray="4 3"' if box.cut_below else ""
    cx = left + NODE_W / 2
    parts = [f"<g><title>{html.escape(box.tooltip)}</title>",
             f'<rect x="{left:.1f}" y="{top:.1f}" width="{NODE_W}" height="{NODE_H}" rx="5" '
             f'fill="{box.fill}" stroke="#555"{dashed}/>']
    for k, line in enumerate(box.lines):
        parts.append(_text(cx, top + 15 + 15 * k, _short(line, CHARS), size=12 if k == 0 else 11,
                           weight="bold" if k == 0 else "normal"))
    if box.cut_below:
        parts.append(_text(left + NODE_W + 8, top + NODE_H / 2 + 4, f"+{box.cut_below} nodes not drawn", size=11,
                           anchor="start"))
    parts.append("</g>")
    return "".join(parts)


def _edge_svg(parent: tuple[float, float], child: tuple[float, float], label: str, tooltip: str) -> str:
    """An elbow from the parent's right side to the child's left side, the condition above the child."""
    (px, py), (cx, cy) = parent, child
    x1, y1, y2, xm = px + NODE_W, py + NODE_H / 2, cy + NODE_H / 2, (px + NODE_W + cx) / 2
    return (f'<path d="M{x1:.1f},{y1:.1f} H{xm:.1f} V{y2:.1f} H{cx:.1f}" fill="none" stroke="#999"/>'
            f"<g><title>{html.escape(tooltip)}</title>"
            + _text(cx + 2, cy - 4, _short(label, LABEL_CHARS), size=10, anchor="start") + "</g>")


def draw_tree(tree: Tree | RegressionTree, *, max_slots: int = MAX_SLOTS) -> DrawnTree:
    """The tree as one ``<svg>`` element, cut below the deepest level that fits ``max_slots`` rows and the page."""
    structure, boxes = _structure(tree)
    depth = _depths(structure)
    cut = _cut_depth(structure, depth, max_slots)
    sizes = _subtree_sizes(structure)
    row = _layout(structure, depth, cut)
    place = {i: (MARGIN + depth[i] * LEVEL_W, MARGIN + 14 + r * SLOT_H) for i, r in row.items()}
    cut_any = False
    edges, nodes = [], []
    for i, (left, top) in place.items():
        node = structure.nodes[i]
        if depth[i] == cut and not node.is_leaf:
            boxes[i] = _Box(boxes[i].lines, boxes[i].tooltip, CUT_FILL, cut_below=int(sizes[i] - 1))
            cut_any = True
        nodes.append(_node_svg(left, top, boxes[i]))
        if depth[i] >= cut or node.is_leaf:
            continue
        assert node.attribute is not None  # not a leaf: it splits on an attribute
        attribute = structure.schema.attributes[node.attribute]
        for edge in node.edges:
            label = _condition(edge.constraint, attribute)
            edges.append(_edge_svg(place[i], place[edge.child], label, f"{attribute.name} {label}"))
    levels = int(max(depth[i] for i in row)) + 1
    width = int(2 * MARGIN + (levels - 1) * LEVEL_W + NODE_W + (CUT_NOTE_W if cut_any else 0))
    height = int(2 * MARGIN + 14 + (max(row.values()) + 1) * SLOT_H - (SLOT_H - NODE_H))
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" role="img">'
           + "".join(edges) + "".join(nodes) + "</svg>")
    return DrawnTree(svg, drawn=len(row), total=len(structure.nodes), depth_drawn=cut, depth=int(depth.max()))


def class_legend(schema: Schema) -> str:
    """An HTML legend of the leaf colours: one swatch per class."""
    items = (f'<span class="swatch" style="background:{PALETTE[k % len(PALETTE)]}"></span>{html.escape(name)}'
             for k, name in enumerate(schema.classes))
    return '<p class="legend">leaf colour = class: ' + " ".join(items) + "</p>"
