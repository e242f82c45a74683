"""The wire codec: schemas, trees and privacy reports to and from the protobuf contract.

``protos/modelshare/v1`` is the single source of truth for what crosses a site boundary; this
module is the only place that maps it onto the library's objects. Decoding trusts nothing: every
index, count and interval is checked (by `Tree`'s validation and here), and any fault raises
`WireError` naming the field, so a server can answer a hostile message with a status instead of
an exception.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from google.protobuf import struct_pb2, timestamp_pb2

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema, SchemaError
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import model_pb2 as mpb
from modelshare.common.privacy.attacks import AttackCounts, AttackReport
from modelshare.common.privacy.report import PathClaim, PrivacyReport, Release
from modelshare.common.study import MAX_TREES
from modelshare.common.trees.regression import RegressionForest, RegressionNode, RegressionTree
from modelshare.common.trees.tree import CategorySet, Disclosure, Edge, Interval, Node, Tree, TreeError

__all__ = [
    "WireError",
    "DecodedModel",
    "schema_to_pb",
    "schema_from_pb",
    "tree_to_pb",
    "tree_from_pb",
    "regression_tree_to_pb",
    "regression_tree_from_pb",
    "report_to_pb",
    "report_from_pb",
    "disclosure_to_pb",
    "disclosure_from_pb",
    "model_message",
    "decode_model",
    "MAX_TREES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "new_nonce",
    "now_timestamp",
]

NONCE_BYTES = 16
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The miner's default ``max_message_bytes`` (gRPC's own default); the limit of a study that names none."""
OVER_MINER_LIMIT = "this miner accepts at most"
"""The words of every miner refusal of a model for its trees or nodes: a fixed limit of the miner, so the
owner treats the refusal as final (sending the same model again cannot pass)."""
# MAX_TREES (most trees one ModelMessage may carry) is the study's rule: `modelshare.common.study.MAX_TREES`.


class WireError(ValueError):
    """A message that does not decode into a valid model; the text names the field at fault."""


_DISCLOSURES: dict[str, mpb.Disclosure] = {"counts": mpb.DISCLOSURE_COUNTS, "hit_miss": mpb.DISCLOSURE_HIT_MISS}


def disclosure_to_pb(disclosure: Disclosure) -> mpb.Disclosure:
    return _DISCLOSURES[disclosure]


def disclosure_from_pb(value: int, *, where: str) -> Disclosure:
    for name, code in _DISCLOSURES.items():
        if code == value:
            return name  # type: ignore[return-value]  # the keys of _DISCLOSURES are the Disclosure literals
    raise WireError(f"{where}: disclosure {value} is not one of {sorted(_DISCLOSURES)}")


# ------------------------------------------------------------------ schema
def schema_to_pb(schema: Schema | RegressionSchema) -> mpb.Schema:
    """A classification schema as class_name and classes, a regression schema as its ``target`` (no classes)."""
    if isinstance(schema, RegressionSchema):
        msg = mpb.Schema(data_derived=schema.data_derived)
        msg.target.name, msg.target.numeric.low, msg.target.numeric.high = (
            schema.target.name, schema.target.low, schema.target.high)
    else:
        msg = mpb.Schema(class_name=schema.class_name, classes=list(schema.classes), data_derived=schema.data_derived)
    for attr in schema.attributes:
        entry = msg.attributes.add(name=attr.name)
        if isinstance(attr, CategoricalAttribute):
            entry.categorical.categories.extend(attr.categories)
        else:
            entry.numeric.low, entry.numeric.high, entry.numeric.integer = attr.low, attr.high, attr.integer
    return msg


def schema_from_pb(msg: mpb.Schema, *, where: str = "schema") -> Schema | RegressionSchema:
    """Decode a schema: a `RegressionSchema` when ``target`` is set, else a classification `Schema`."""
    attributes: list[CategoricalAttribute | NumericAttribute] = []
    try:
        for i, raw in enumerate(msg.attributes):
            kind = raw.WhichOneof("domain")
            if kind == "categorical":
                attributes.append(CategoricalAttribute(raw.name, tuple(raw.categorical.categories)))
            elif kind == "numeric":
                attributes.append(NumericAttribute(raw.name, raw.numeric.low, raw.numeric.high, raw.numeric.integer))
            else:
                raise WireError(f"{where}: attribute {i} ({raw.name!r}) has no domain")
        if msg.HasField("target"):
            return _regression_schema(msg, tuple(attributes), where)
        return Schema(tuple(attributes), msg.class_name, tuple(msg.classes), msg.data_derived)
    except SchemaError as exc:
        raise WireError(f"{where}: {exc}") from None


def _regression_schema(msg: mpb.Schema, attributes: tuple[CategoricalAttribute | NumericAttribute, ...],
                       where: str) -> RegressionSchema:
    """The regression schema of a message with a ``target``: numeric, and no class_name or classes beside it."""
    target = msg.target
    if msg.class_name or len(msg.classes):
        raise WireError(f"{where}: a regression schema (target {target.name!r}) carries no class_name or classes")
    if target.WhichOneof("domain") != "numeric":
        raise WireError(f"{where}: target {target.name!r} needs a numeric domain (its public bounds low, high)")
    return RegressionSchema(attributes, NumericAttribute(target.name, target.numeric.low, target.numeric.high),
                            msg.data_derived)


# -------------------------------------------------------------------- tree
def _edges_to_pb(target: Any, edges: Sequence[Edge]) -> None:
    """Append ``edges`` to a node message's repeated ``edges`` field (classification or regression node)."""
    for edge in edges:
        e = target.add(child=int(edge.child))
        c = edge.constraint
        if isinstance(c, CategorySet):
            e.constraint.categories.codes.extend(sorted(int(k) for k in c.codes))
        else:
            iv = e.constraint.interval
            iv.low, iv.high, iv.low_closed, iv.high_closed = c.low, c.high, c.low_closed, c.high_closed


def tree_to_pb(tree: Tree) -> mpb.Tree:
    msg = mpb.Tree(disclosure=disclosure_to_pb(tree.disclosure))
    for node in tree.nodes:
        entry = msg.nodes.add(label=int(node.label), hit=float(node.hit), miss=float(node.miss))
        if node.counts is not None:
            entry.counts.extend(float(c) for c in node.counts)
        if node.attribute is not None:
            entry.attribute = int(node.attribute)
        _edges_to_pb(entry.edges, node.edges)
    return msg


def _edge_from_pb(raw: mpb.Edge, where: str) -> Edge:
    kind = raw.constraint.WhichOneof("kind")
    if kind == "categories":
        return Edge(CategorySet(frozenset(int(k) for k in raw.constraint.categories.codes)), int(raw.child))
    if kind == "interval":
        iv = raw.constraint.interval
        if math.isnan(iv.low) or math.isnan(iv.high):
            raise WireError(f"{where}: interval bound is NaN")
        return Edge(Interval(iv.low, iv.high, iv.low_closed, iv.high_closed), int(raw.child))
    raise WireError(f"{where}: edge has no constraint")


def tree_from_pb(msg: mpb.Tree, schema: Schema, *, where: str = "tree") -> Tree:
    """Decode and validate a tree over ``schema``; any fault raises `WireError` naming the node."""
    disclosure = disclosure_from_pb(msg.disclosure, where=where)
    nodes: list[Node] = []
    for i, raw in enumerate(msg.nodes):
        counts: np.ndarray | None = None
        hit, miss = raw.hit, raw.miss
        if disclosure == "counts":
            # np.fromiter: 3x np.asarray's speed on a repeated field
            counts = np.fromiter(raw.counts, dtype=np.float64, count=len(raw.counts))
            if counts.shape != (schema.n_classes,):
                raise WireError(f"{where}: node {i} carries {counts.size} class counts; the schema has "
                                f"{schema.n_classes} classes")
        elif len(raw.counts):
            raise WireError(f"{where}: node {i} carries class counts under hit_miss disclosure")
        attribute = raw.attribute if raw.HasField("attribute") else None
        edges = [_edge_from_pb(e, f"{where}: node {i}, edge {j}") for j, e in enumerate(raw.edges)]
        nodes.append(Node(int(raw.label), float(hit), float(miss), counts, attribute, edges))
    try:
        return Tree(schema, nodes, disclosure)
    except TreeError as exc:
        raise WireError(f"{where}: {exc}") from None


# --------------------------------------------------------- regression tree
def regression_tree_to_pb(tree: RegressionTree) -> mpb.RegressionTree:
    """Every node's released (N', S') and split; the leaf value is left for the reader to derive."""
    msg = mpb.RegressionTree()
    for node in tree.nodes:
        entry = msg.nodes.add(count=float(node.count), total=float(node.total))
        if node.attribute is not None:
            entry.attribute = int(node.attribute)
        _edges_to_pb(entry.edges, node.edges)
    return msg


def regression_tree_from_pb(msg: mpb.RegressionTree, schema: RegressionSchema, *,
                            where: str = "regression tree") -> RegressionTree:
    """Decode and validate a regression tree over ``schema``; any fault raises `WireError` naming node and field.

    Each node's ``count`` and ``total`` must be finite; the structure obeys every rule of `Tree`
    and each inner node's (count, total) must be the sum of its children's (`RegressionTree`).
    """
    nodes: list[RegressionNode] = []
    for i, raw in enumerate(msg.nodes):
        for name in ("count", "total"):
            value = getattr(raw, name)
            if not math.isfinite(value):
                raise WireError(f"{where}: node {i}: field {name!r} is {value}; a released statistic must be finite")
        attribute = raw.attribute if raw.HasField("attribute") else None
        edges = tuple(_edge_from_pb(e, f"{where}: node {i}, edge {j}") for j, e in enumerate(raw.edges))
        nodes.append(RegressionNode(float(raw.count), float(raw.total), attribute, edges))
    try:
        return RegressionTree(schema, nodes)
    except TreeError as exc:
        raise WireError(f"{where}: {exc}") from None


# ------------------------------------------------------------------ report
def _struct_value(value: Any) -> Any:
    """Struct numbers come back as floats; integral ones become ints again (parameters like ``s``).

    Nested tables (a regression release's ``target``) and lists come back as dicts and lists, converted alike.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, struct_pb2.Struct):
        return {key: _struct_value(item) for key, item in value.items()}
    if isinstance(value, struct_pb2.ListValue):
        return [_struct_value(item) for item in value]
    return value


def report_to_pb(report: PrivacyReport) -> mpb.PrivacyReport:
    msg = mpb.PrivacyReport(mechanism=report.mechanism, guarantee=report.guarantee)
    params = struct_pb2.Struct()
    params.update(dict(report.parameters))
    msg.parameters.CopyFrom(params)
    if report.requirement is not None:
        msg.requirement = report.requirement
    for claim in report.claims:
        msg.claims.add(leaf=claim.leaf, tuples=claim.tuples, requirement=claim.requirement)
    if report.attacks is not None:
        a = report.attacks
        msg.attacks.uniqueness.leaves, msg.attacks.uniqueness.users = a.uniqueness.leaves, a.uniqueness.users
        msg.attacks.homogeneity.leaves, msg.attacks.homogeneity.users = a.homogeneity.leaves, a.homogeneity.users
        for b in a.background:
            msg.attacks.background.add(leaves=b.leaves, users=b.users)
    return msg


def report_from_pb(msg: mpb.PrivacyReport) -> PrivacyReport:
    def counts(c: mpb.AttackCounts) -> AttackCounts:
        return AttackCounts(int(c.leaves), float(c.users))

    if not msg.mechanism:
        raise WireError("report: mechanism is empty")
    attacks = None
    if msg.HasField("attacks"):
        attacks = AttackReport(
            counts(msg.attacks.uniqueness), counts(msg.attacks.homogeneity),
            tuple(counts(b) for b in msg.attacks.background)
        )
    return PrivacyReport(
        mechanism=msg.mechanism,
        parameters={k: _struct_value(v) for k, v in msg.parameters.items()},
        guarantee=msg.guarantee,
        requirement=msg.requirement if msg.HasField("requirement") else None,
        claims=tuple(PathClaim(int(c.leaf), float(c.tuples), c.requirement) for c in msg.claims),
        attacks=attacks,
    )


# ------------------------------------------------------------------ messages
def new_nonce() -> bytes:
    """16 fresh random bytes (a replay of a message reuses its nonce; a new message never does)."""
    return secrets.token_bytes(NONCE_BYTES)


def now_timestamp() -> timestamp_pb2.Timestamp:
    """The current time as a protobuf Timestamp."""
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(datetime.now(timezone.utc))
    return ts


def model_message(
    release: Release | Tree,
    *,
    study_id: str = "",
    owner_id: str = "",
    nonce: bytes | None = None,
) -> fpb.ModelMessage:
    """A ModelMessage for a release's trees and report, or for one bare tree without a report.

    A regression release travels as ``regression_trees`` over its regression schema, never as ``trees``.
    """
    trees = release.trees if isinstance(release, Release) else (release,)
    schema: Schema | RegressionSchema = trees[0].schema
    msg = fpb.ModelMessage(
        study_id=study_id,
        owner_id=owner_id,
        schema_fingerprint=schema.fingerprint,
        nonce=new_nonce() if nonce is None else nonce,
        schema=schema_to_pb(schema),
    )
    msg.timestamp.CopyFrom(now_timestamp())
    if isinstance(release, Release) and release.task == "regression":
        msg.regression_trees.extend(regression_tree_to_pb(tree) for tree in release.forest.trees)
    else:
        # the ignore below: not a regression release: classification trees
        msg.trees.extend(tree_to_pb(tree) for tree in trees)  # type: ignore[arg-type]
    if isinstance(release, Release):
        msg.report.CopyFrom(report_to_pb(release.report))
    return msg


@dataclass(frozen=True)
class DecodedModel:
    """A decoded ModelMessage: its schema, its trees, and its report (None when it carries none).

    A regression model (its schema a `RegressionSchema`) has no classification ``trees``; its
    regression trees are ``forest``, which is None for a classification model.
    """

    schema: Schema | RegressionSchema
    trees: tuple[Tree, ...]
    report: PrivacyReport | None
    forest: RegressionForest | None = None

    @property
    def released(self) -> tuple[Tree, ...] | RegressionForest:
        """What was released, for `modelshare.common.audit.release.audit`: the regression forest, or the trees."""
        return self.trees if self.forest is None else self.forest


def decode_model(msg: fpb.ModelMessage, *, max_trees: int = MAX_TREES) -> DecodedModel:
    """Decode and validate a ModelMessage of 1 to ``max_trees`` trees; its fingerprint must match its own schema.

    The schema decides the kind: a classification schema takes ``trees``, a regression schema
    ``regression_trees``; a message with the other field filled is refused.
    """
    schema = schema_from_pb(msg.schema)
    if msg.schema_fingerprint and msg.schema_fingerprint != schema.fingerprint:
        raise WireError("schema_fingerprint does not match the schema the message carries")
    regression = isinstance(schema, RegressionSchema)
    if regression and len(msg.trees):
        raise WireError(f"trees: the schema is a regression schema (target {schema.class_name!r}); "
                        "its trees travel as regression_trees")
    if not regression and len(msg.regression_trees):
        raise WireError("regression_trees: the schema is a classification schema (no target); "
                        "regression trees need a regression schema")
    field, count = ("regression_trees", len(msg.regression_trees)) if regression else ("trees", len(msg.trees))
    if not 1 <= count <= max_trees:
        raise WireError(f"{field}: a model carries 1 to {max_trees} trees, this one {count}")
    forest: RegressionForest | None = None
    trees: tuple[Tree, ...] = ()
    if isinstance(schema, RegressionSchema):
        forest = RegressionForest(schema, tuple(regression_tree_from_pb(t, schema, where=f"regression tree {i}")
                                                for i, t in enumerate(msg.regression_trees)))
    else:
        trees = tuple(tree_from_pb(t, schema, where=f"tree {i}") for i, t in enumerate(msg.trees))
    report = report_from_pb(msg.report) if msg.HasField("report") else None
    return DecodedModel(schema, trees, report, forest)
