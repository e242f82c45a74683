"""What an audit check is, and the small re-derivations every mechanism's checks share.

A `Check` is one audited claim of a release: its name, whether it holds, and why. Each mechanism
states the checks that re-derive its own accounting from the released numbers alone (its registry
record's ``audit_checks``, `modelshare.common.mechanisms.registry`); `modelshare.common.audit.release` runs them beside
the checks every release gets. The helpers here compare a report's stated parameters with the values
recomputed from the requirement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelshare.common.data.schema import NumericAttribute
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.trees.tree import Tree

__all__ = ["Check", "numeric_parameter", "misstated", "recomputed", "integer_counts_check", "single_child_check",
           "public_cuts_check"]


@dataclass(frozen=True)
class Check:
    """One audited claim: its name, whether it holds, and why."""

    name: str
    passed: bool
    detail: str


def numeric_parameter(parameters: Mapping[str, Any], name: str) -> float | None:
    """A numeric report parameter, or None when it is missing or not a number."""
    value = parameters.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def misstated(parameters: Mapping[str, Any], expected: Mapping[str, float]) -> list[str]:
    """``name=stated (expected value)`` for each numeric parameter that does not equal its expected value."""
    return [f"{key}={parameters.get(key)!r} (expected {want:g})" for key, want in expected.items()
            if numeric_parameter(parameters, key) != float(want)]


def recomputed(parameters: Mapping[str, Any], expected: Mapping[str, float]) -> list[str]:
    """Each stated numeric parameter that differs from its recomputed value, said as ``key=stated, recomputed v``."""
    wrong = []
    for key, value in expected.items():
        stated = numeric_parameter(parameters, key)
        if stated is None or not math.isclose(stated, value, rel_tol=1e-9, abs_tol=0.0):
            wrong.append(f"{key}={parameters.get(key)!r}, recomputed {value:.6g}")
    return wrong


def integer_counts_check(trees: Sequence[Tree], report: PrivacyReport, post_processing: str) -> Check:
    """The release states ``post_processing`` and every count of every tree is a whole number (clamped, rounded)."""
    name = "counts post-processed as stated"
    if report.parameters.get("post_processing") != post_processing:
        return Check(name, False, f"post_processing={report.parameters.get('post_processing')!r}, "
                                  f"expected {post_processing!r}")
    for t, tree in enumerate(trees):
        if tree.disclosure != "counts":
            return Check(name, False,
                         f"tree {t} discloses {tree.disclosure!r}; {report.mechanism} releases class counts")
        counts = np.stack([node.class_counts() for node in tree.nodes])
        bad = np.flatnonzero((counts != np.rint(counts)).any(axis=1))
        if bad.size:
            i = int(bad[0])
            return Check(name, False, f"tree {t} node {i} has counts {counts[i].tolist()}, not whole numbers")
    return Check(name, True, f"every count of the {len(trees)} trees is a non-negative integer")


def single_child_check(trees: Sequence[Tree]) -> Check:
    """No inner node has exactly one child: such a node shows where a pruned sibling's rows were."""
    name = "no inner node with one child"
    for t, tree in enumerate(trees):
        lonely = [i for i, node in enumerate(tree.nodes) if len(node.edges) == 1]
        if lonely:
            node = tree.nodes[lonely[0]]
            attribute = tree.schema.attributes[node.attribute].name if node.attribute is not None else "?"
            return Check(name, False, f"tree {t} node {lonely[0]} splits {attribute!r} into one child only: its edge "
                                      "shows where pruned rows were (collapse it into its parent's region)")
    return Check(name, True, "every inner node has two or more children")


def public_cuts_check(trees: Sequence[Tree]) -> Check:
    """Every numeric threshold is one of the schema's public cut points (`NumericAttribute.cut_points`)."""
    name = "numeric thresholds on public cut points"
    for t, tree in enumerate(trees):
        for i, node in enumerate(tree.nodes):
            attribute = None if node.attribute is None else tree.schema.attributes[node.attribute]
            if not isinstance(attribute, NumericAttribute):
                continue
            cuts = attribute.cut_points()
            for edge in node.edges:
                ends = [getattr(edge.constraint, end) for end in ("low", "high")]
                off = [e for e in ends if math.isfinite(e) and not np.isin(e, cuts)]
                if off:
                    return Check(name, False,
                                 f"tree {t} node {i} splits {attribute.name!r} at {off[0]!r}, which is not "
                                              "a public cut point of the schema (a threshold between two private "
                                              "values discloses them)")
    return Check(name, True, "every numeric threshold is a public cut point of the schema (declared cuts or its even "
                             "grid), not a value read from the rows")
