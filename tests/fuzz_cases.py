"""Hostile input for the miner and the model-file readers: hypothesis strategies and the harness.

Shared by ``tests/federation/test_fuzz.py`` (a short run in the suite) and ``bench/fuzz_soak.py`` (>= 100,000
cases). A case is a small frozen dataclass (so hypothesis prints a readable falsifying example):

* ``SubmitCase`` / ``RefuseCase``: a valid model or refusal, edited field by field (`Edit`s:
  cyclic and detached trees, very many or very deep nodes, NaN/inf intervals, negative or
  inconsistent counts, unknown enum values, schema mismatches, oversized fields, up to and past
  `modelshare.common.federation.wire.MAX_TREES` trees, lying reports) and/or byte by byte (truncated, bit-flipped,
  arbitrary payloads), then SIGNED by a legitimate owner so it passes the signature check and
  reaches the decoder and the auditor; or an envelope edited after signing.
* ``ChunkCase``: such a signed model sent by ``SubmitChunks`` in pieces of a few sizes, the stream
  intact or edited (wrong digest, declared size too small, too large or far over the limit, pieces
  repeated, swapped, skipped, empty or repeating the header, the last piece dropped, another study
  named, no piece at all).
* ``CallCase``: every other RPC (Poll, CreateStudy, GetStudy, ListStudies, GetResults, Health)
  with hostile fields, from the admin's or an owner's identity; ``RawCase``: arbitrary request
  bytes for any RPC.
* ``LocalCase`` / ``FileCase``: the same hostile models in process, through `check_model`,
  `decode_model`, `modelshare.common.audit.release.audit` and `modelshare.miner_node.pgen`, and through
  `modelshare.common.federation.model_io.read_model` as JSON model files.

`MinerTarget.run` sends one case over mutual TLS and returns an `Outcome`; its ``failure`` is
None when the property holds: a gRPC status that is not INTERNAL / UNKNOWN / UNAVAILABLE (no
unhandled exception, no lost server or verifier), an answer before the call's deadline, and
nothing stored unless the call succeeded (a success stores exactly what it should).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from hypothesis import strategies as st

from modelshare.common.federation.chunks import envelope_chunks
from modelshare.common.federation.model_io import read_model
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import model_pb2 as mpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import sign_payload
from modelshare.common.federation.wire import (
    MAX_TREES,
    WireError,
    decode_model,
    model_message,
    new_nonce,
    now_timestamp,
)
from modelshare.common.trees.learners import make_learner
from modelshare.common.trees.tree import TreeError
from modelshare.miner_node.pgen import pgen
from modelshare.miner_node.verify import Rejection, StudyTerms, check_model

OWNERS = ["site-a", "site-b", "absent"]  # "absent" never answers, so no fuzz study is ever mined
PARTIES = ("site-a", "site-b", "admin")
MAX_NODES = 200_000  # the miner's default `Limits.max_nodes`
BAD_CODES = {"INTERNAL", "UNKNOWN", "UNAVAILABLE"}
PGEN_MAX_ROWS = 200_000  # pgen fuzzing only generates from trees disclosing at most this many tuples

# ---------------------------------------------------------------- base models


@dataclass(frozen=True)
class Base:
    """A study template and a valid model for it (serialized ModelMessage without study or owner)."""

    kind: str
    spec: fpb.StudySpec
    message: bytes


def _spec(kind: str, **kw: Any) -> fpb.StudySpec:
    from tests.federation_helpers import study_spec

    return study_spec(kind, deadline_minutes=7 * 24 * 60, **kw)


@functools.lru_cache(maxsize=1)
def bases() -> dict[str, Base]:
    """Three valid releases: Car APT hit/miss, Wine-quality APT counts (intervals), Car k-AnonToRdt ensemble."""
    from modelshare.common.data.datasets import load_dataset
    from modelshare.common.federation.wire import disclosure_from_pb
    from modelshare.common.mechanisms.release import release as release_model

    found = {}
    car = load_dataset("car")
    X, y = car.schema.encode(car.frame)
    spec = _spec("car-hm")
    tree = make_learner("multiway", car.schema, random_state=0).fit(X[::2], y[::2]).tree_
    release = release_model("apt", tree=tree, requirement=spec.requirement,
                            disclosure=disclosure_from_pb(spec.disclosure, where="spec"))
    found["car-hm"] = Base("car-hm", spec, model_message(release).SerializeToString())

    wine = load_dataset("winequality")
    Xw, yw = wine.schema.encode(wine.frame)
    spec = _spec("wine-counts", dataset="winequality", disclosure="counts", requirement="k-anonymity:k=10")
    tree = make_learner("cart", wine.schema, random_state=0, max_depth=5, public_cuts=True).fit(Xw, yw).tree_
    release = release_model("apt", tree=tree, requirement=spec.requirement, disclosure="counts")
    found["wine-counts"] = Base("wine-counts", spec, model_message(release).SerializeToString())

    spec = _spec("car-dps", mechanism="kanon-rdt", requirement="dps:k=5,beta=0.5,epsilon=8,trees=4",
                 disclosure="counts", max_depth=3, global_models=("naive-bayes",))
    # secure noise: a seeded release fails the re-audit
    release = release_model("kanon-rdt", schema=car.schema, X=X, y=y, requirement=spec.requirement, max_depth=3)
    found["car-dps"] = Base("car-dps", spec, model_message(release).SerializeToString())
    return found


KINDS = ("car-hm", "wine-counts", "car-dps")

# ---------------------------------------------------------------- edits of a ModelMessage


def _pick(seq: Any, i: int) -> Any:
    return seq[i % len(seq)] if len(seq) else None


@dataclass(frozen=True)
class NodeField:
    """Set one field of one node: label, hit, miss, counts or attribute (None clears it)."""

    tree: int
    node: int
    field: str
    value: Any

    def apply(self, m: fpb.ModelMessage) -> None:
        t = _pick(m.trees, self.tree)
        n = None if t is None else _pick(t.nodes, self.node)
        if n is None:
            return
        if self.field == "counts":
            del n.counts[:]
            n.counts.extend(self.value)
        elif self.field == "attribute" and self.value is None:
            n.ClearField("attribute")
        else:
            setattr(n, self.field, self.value)


@dataclass(frozen=True)
class EdgeChild:
    """Point an edge at another node: out of range, the root, itself, its parent (cycles, shared children)."""

    tree: int
    node: int
    edge: int
    child: int | str

    def apply(self, m: fpb.ModelMessage) -> None:
        t = _pick(m.trees, self.tree)
        if t is None:
            return
        inner = [i for i, n in enumerate(t.nodes) if n.edges]
        if not inner:
            return
        i = _pick(inner, self.node)
        e = _pick(t.nodes[i].edges, self.edge)
        if self.child == "self":
            e.child = i
        elif self.child == "sibling":
            e.child = _pick(t.nodes[i].edges, self.edge + 1).child
        elif self.child == "parent":
            e.child = next((j for j, n in enumerate(t.nodes) if any(x.child == i for x in n.edges)), 0)
        else:
            e.child = int(self.child)


@dataclass(frozen=True)
class EdgeConstraint:
    """Replace an edge's constraint: a category set, an interval (NaN / inf / inverted ends) or none."""

    tree: int
    node: int
    edge: int
    kind: str
    codes: tuple[int, ...] = ()
    interval: tuple[float, float, bool, bool] = (0.0, 0.0, False, False)

    def apply(self, m: fpb.ModelMessage) -> None:
        t = _pick(m.trees, self.tree)
        if t is None:
            return
        inner = [n for n in t.nodes if n.edges]
        if not inner:
            return
        e = _pick(_pick(inner, self.node).edges, self.edge)
        if self.kind == "none":
            e.ClearField("constraint")
        elif self.kind == "categories":
            e.constraint.categories.codes[:] = list(self.codes)
        else:
            iv = e.constraint.interval
            iv.low, iv.high, iv.low_closed, iv.high_closed = self.interval


@dataclass(frozen=True)
class DetachedCycle:
    """Append ``size`` nodes that point at each other in a ring, with consistent statistics (a cycle off the root)."""

    tree: int
    size: int

    def apply(self, m: fpb.ModelMessage) -> None:
        t = _pick(m.trees, self.tree)
        if t is None or not len(t.nodes) or not t.nodes[0].edges:
            return
        root, leaf = t.nodes[0], next(n for n in t.nodes if not n.edges)
        first = len(t.nodes)
        for j in range(self.size):
            n = t.nodes.add()
            n.CopyFrom(leaf)
            n.attribute = root.attribute
            e = n.edges.add()
            e.CopyFrom(root.edges[0])
            e.child = first + (j + 1) % self.size


@dataclass(frozen=True)
class SetDisclosure:
    """An unknown or another disclosure enum value on one tree."""

    tree: int
    value: int

    def apply(self, m: fpb.ModelMessage) -> None:
        t = _pick(m.trees, self.tree)
        if t is not None:
            t.disclosure = self.value


@dataclass(frozen=True)
class ReportField:
    """Set (or, with None, clear) mechanism, guarantee or requirement of the report; 'report' clears it all."""

    field: str
    value: str | None

    def apply(self, m: fpb.ModelMessage) -> None:
        if self.field == "report":
            m.ClearField("report")
        elif self.value is None:
            m.report.ClearField(self.field)
        else:
            setattr(m.report, self.field, self.value)


@dataclass(frozen=True)
class ClaimEdit:
    """Drop, add or rewrite a per-path claim (a weaker, larger or misplaced claim)."""

    op: str
    index: int = 0
    leaf: int = 0
    tuples: float = 0.0
    requirement: str = ""
    tree: int = 0

    def apply(self, m: fpb.ModelMessage) -> None:
        claims = m.report.claims
        if self.op == "clear":
            del claims[:]
        elif self.op == "drop" and len(claims):
            del claims[self.index % len(claims)]
        elif self.op == "add":
            claims.add(leaf=self.leaf, tuples=self.tuples, requirement=self.requirement, tree=self.tree)
        elif self.op == "edit" and len(claims):
            c = claims[self.index % len(claims)]
            c.leaf, c.tuples, c.requirement, c.tree = self.leaf, self.tuples, self.requirement, self.tree


@dataclass(frozen=True)
class ParameterEdit:
    """Set or delete a report parameter (nested structs, NaN, huge numbers, wrong types)."""

    key: str
    value: Any
    delete: bool = False

    def apply(self, m: fpb.ModelMessage) -> None:
        if self.delete:
            if self.key in m.report.parameters.fields:
                del m.report.parameters[self.key]
        else:
            m.report.parameters.update({self.key: self.value})


@dataclass(frozen=True)
class AttackEdit:
    """Lie about attack counts, or drop them."""

    which: str
    leaves: int
    users: float

    def apply(self, m: fpb.ModelMessage) -> None:
        a = m.report.attacks
        if self.which == "clear":
            m.report.ClearField("attacks")
        elif self.which == "background":
            a.background.add(leaves=self.leaves, users=self.users)
        else:
            getattr(a, self.which).leaves, getattr(a, self.which).users = self.leaves, self.users


@dataclass(frozen=True)
class SchemaEdit:
    """A schema the study did not ask for, or a fingerprint that does not match."""

    op: str
    text: str = "x"

    def apply(self, m: fpb.ModelMessage) -> None:
        s = m.schema
        if self.op == "fingerprint":
            m.schema_fingerprint = self.text
        elif self.op == "clear":
            m.ClearField("schema")
        elif self.op == "add-class":
            s.classes.append(self.text)
        elif self.op == "duplicate-class" and len(s.classes):
            s.classes.append(s.classes[0])
        elif self.op == "rename" and len(s.attributes):
            s.attributes[0].name = self.text
        elif self.op == "no-domain" and len(s.attributes):
            s.attributes[-1].ClearField("domain")
        elif self.op == "numeric-nan" and len(s.attributes):
            s.attributes[-1].numeric.low = math.nan
        elif self.op == "drop-attribute" and len(s.attributes):
            del s.attributes[-1]
        elif self.op == "refingerprint":  # a changed schema with its own, matching fingerprint
            s.classes.append(self.text)
            try:
                from modelshare.common.federation.wire import schema_from_pb

                m.schema_fingerprint = schema_from_pb(s).fingerprint
            except WireError:
                pass


@dataclass(frozen=True)
class TreesEdit:
    """Many trees (up to and past MAX_TREES), none, an empty one, or a tree cut short."""

    op: str
    count: int = 1

    def apply(self, m: fpb.ModelMessage) -> None:
        if self.op == "clear":
            del m.trees[:]
        elif self.op == "replicate" and len(m.trees):
            first = m.trees[0].SerializeToString()
            while len(m.trees) < self.count:
                m.trees.add().MergeFromString(first)
        elif self.op == "empty":
            m.trees.add()
        elif self.op == "cut" and len(m.trees):
            del m.trees[0].nodes[max(1, self.count) % max(len(m.trees[0].nodes), 1):]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@dataclass(frozen=True)
class ManyNodes:
    """An extra tree of ``count`` empty nodes (10^6 fit the message size limit), built as raw bytes."""

    count: int

    def apply(self, m: fpb.ModelMessage) -> None:
        body = _varint(1 << 3) + _varint(1) + b"\x12\x00" * self.count  # disclosure=1, count empty nodes
        m.MergeFromString(_varint(7 << 3 | 2) + _varint(len(body)) + body)


@dataclass(frozen=True)
class DeepChain:
    """Replace a tree by a chain ``depth`` splits deep whose statistics are consistent (valid but deep)."""

    tree: int
    depth: int

    def apply(self, m: fpb.ModelMessage) -> None:
        t = _pick(m.trees, self.tree)
        if t is None or not len(t.nodes) or not t.nodes[0].edges:
            return
        root = mpb.Node()
        root.CopyFrom(t.nodes[0])
        edge = mpb.Edge()
        edge.CopyFrom(root.edges[0])
        del root.edges[:]
        root.ClearField("attribute")
        del t.nodes[:]
        for d in range(self.depth + 1):
            n = t.nodes.add()
            n.CopyFrom(root)
            if d < self.depth:
                n.attribute = _split_attribute(m, edge)
                e = n.edges.add()
                e.CopyFrom(edge)
                e.child = d + 1
                _widen(m, n, e)


def _split_attribute(m: fpb.ModelMessage, edge: mpb.Edge) -> int:
    """An attribute of the schema the edge's constraint fits: the first categorical or numeric one."""
    want = "categorical" if edge.constraint.WhichOneof("kind") == "categories" else "numeric"
    for i, a in enumerate(m.schema.attributes):
        if a.WhichOneof("domain") == want:
            return i
    return 0


def _widen(m: fpb.ModelMessage, n: mpb.Node, e: mpb.Edge) -> None:
    """Make the chain edge admit the whole domain, so the child holds all of its parent's tuples."""
    attr = m.schema.attributes[n.attribute]
    if e.constraint.WhichOneof("kind") == "categories":
        e.constraint.categories.codes[:] = list(range(len(attr.categorical.categories)))
    else:
        iv = e.constraint.interval
        iv.low, iv.high, iv.low_closed, iv.high_closed = -math.inf, math.inf, False, False


@dataclass(frozen=True)
class Oversized:
    """A field far larger than any real one: title-like strings, nonce bytes, a huge claim list."""

    field: str
    size: int

    def apply(self, m: fpb.ModelMessage) -> None:
        if self.field == "nonce":
            m.nonce = b"\x01" * self.size
        elif self.field == "mechanism":
            m.report.mechanism = "m" * self.size
        elif self.field == "requirement":
            m.report.requirement = "k-anonymity:k=" + "9" * self.size
        elif self.field == "claims":
            for i in range(self.size):
                m.report.claims.add(leaf=i, tuples=1.0, requirement="k-anonymity:k=5")
        elif self.field == "parameters":
            m.report.parameters.update({f"p{i}": "v" * 16 for i in range(self.size)})
        elif self.field == "category" and len(m.schema.attributes) and \
                m.schema.attributes[0].WhichOneof("domain") == "categorical":
            m.schema.attributes[0].categorical.categories.append("c" * self.size)


@dataclass(frozen=True)
class Stamp:
    """Timestamp and nonce: far past or future, nanos out of range, an empty or short nonce."""

    seconds_offset: int
    nanos: int = 0
    nonce: bytes | None = None

    def apply(self, m: Any) -> None:
        m.timestamp.seconds = max(min(m.timestamp.seconds + self.seconds_offset, 2**63 - 1), -(2**63))
        m.timestamp.nanos = self.nanos
        if self.nonce is not None:
            m.nonce = self.nonce


# ---------------------------------------------------------------- edits of bytes


@dataclass(frozen=True)
class Truncate:
    at: int

    def apply(self, data: bytes) -> bytes:
        return data[: self.at % max(len(data), 1)]


@dataclass(frozen=True)
class FlipBits:
    bits: tuple[int, ...]

    def apply(self, data: bytes) -> bytes:
        if not data:
            return data
        out = bytearray(data)
        for b in self.bits:
            b %= 8 * len(out)
            out[b // 8] ^= 1 << (b % 8)
        return bytes(out)


@dataclass(frozen=True)
class Append:
    data: bytes

    def apply(self, data: bytes) -> bytes:
        return data + self.data


@dataclass(frozen=True)
class Replace:
    data: bytes

    def apply(self, data: bytes) -> bytes:
        return self.data


@dataclass(frozen=True)
class EnvelopeEdit:
    """Alter a signed envelope: its signature, its payload after signing, its key id, or its raw bytes."""

    op: str
    bits: tuple[int, ...] = (0,)
    text: str = ""

    def apply(self, env: fpb.SignedEnvelope) -> fpb.SignedEnvelope | bytes:
        env = fpb.SignedEnvelope.FromString(env.SerializeToString())
        if self.op == "signature":
            env.signature = FlipBits(self.bits).apply(env.signature)
        elif self.op == "payload":
            env.payload = FlipBits(self.bits).apply(env.payload)
        elif self.op == "key-id":
            env.signer_key_id = self.text
        elif self.op == "strip-signature":
            env.ClearField("signature")
        elif self.op == "raw":
            return FlipBits(self.bits).apply(env.SerializeToString())
        return env


# ---------------------------------------------------------------- cases


@dataclass(frozen=True)
class SubmitCase:
    """A signed model for the current study of ``kind``: edited, serialized, byte-edited, signed, envelope-edited."""

    kind: str
    edits: tuple = ()
    byte_edits: tuple = ()
    envelope: EnvelopeEdit | None = None
    signer: str = "site-a"
    caller: str = "site-a"
    owner_field: str | None = None  # None: the signer's name
    study: str | None = None  # None: the current study of ``kind``

    rpc = "Submit"


@dataclass(frozen=True)
class RefuseCase:
    """A signed refusal, with hostile fields; sent to a study reserved for refusals."""

    study: str | None = None  # None: the current refusal study
    owner_field: str | None = None
    reason: str = "no"
    stamp: Stamp | None = None
    byte_edits: tuple = ()
    envelope: EnvelopeEdit | None = None
    signer: str = "site-a"
    caller: str = "site-a"

    rpc = "Refuse"


CHUNK_EDITS = ("none", "none", "digest", "declare-less", "declare-more", "declare-huge", "drop-last", "repeat", "swap",
               "skip", "empty", "header-again", "other-study", "nothing")


@dataclass(frozen=True)
class ChunkCase:
    """The envelope of ``submit`` sent by ``SubmitChunks`` in
    pieces of ``size`` bytes, the stream edited by ``edit``."""

    submit: SubmitCase
    size: int = 4096
    edit: str = "none"  # one of CHUNK_EDITS

    rpc = "SubmitChunks"

    def pieces(self, data: bytes, study_id: str) -> list[fpb.EnvelopeChunk]:
        """The stream: the envelope's pieces, edited."""
        pieces = list(envelope_chunks(data, study_id, self.size)) if data else []
        if not pieces or self.edit == "nothing":
            return []
        first, last = pieces[0], pieces[-1]
        if self.edit == "digest":
            first.sha256 = bytes(b ^ 1 for b in first.sha256)
        elif self.edit in ("declare-less", "declare-more", "declare-huge"):
            first.total_bytes = {"declare-less": first.total_bytes - 1, "declare-more": first.total_bytes + 1,
                                 "declare-huge": 2**64 - 1}[self.edit]
        elif self.edit == "drop-last":
            pieces.pop()
        elif self.edit == "repeat":
            pieces.insert(1, first)
        elif self.edit == "swap" and len(pieces) > 1:
            pieces[-2], pieces[-1] = last, pieces[-2]
        elif self.edit == "swap":  # one piece: it comes as the second
            first.index = 1
        elif self.edit == "skip":
            last.index += 1
        elif self.edit == "empty":
            pieces.append(fpb.EnvelopeChunk(index=len(pieces)))
        elif self.edit == "header-again":
            last.study_id = "again"
        elif self.edit == "other-study":
            first.study_id = "missing"
        return pieces


@dataclass(frozen=True)
class CallCase:
    """Any other RPC with a hostile request from ``caller``."""

    rpc: str
    caller: str
    fields: tuple = ()  # (name, value) pairs of the request, or spec edits for CreateStudy
    evaluation: bytes | tuple = b""  # CreateStudy: CSV bytes, or TextEdits of the first Car rows


@dataclass(frozen=True)
class RawCase:
    """Arbitrary request bytes for ``rpc``."""

    rpc: str
    caller: str
    data: bytes


@dataclass(frozen=True)
class LocalCase:
    """A hostile model checked in process: `check_model`, `decode_model`, `audit`, `pgen`."""

    kind: str
    edits: tuple = ()
    byte_edits: tuple = ()


@dataclass(frozen=True)
class FileCase:
    """A model file: a hostile model as protobuf JSON (signed or not), JSON text edits, or arbitrary JSON."""

    kind: str
    edits: tuple = ()
    signed: bool = False
    text_edits: tuple = ()
    document: Any = None  # arbitrary JSON instead of a model


RPCS = ("Submit", "SubmitChunks", "Refuse", "Poll", "CreateStudy", "GetStudy", "ListStudies", "GetResults", "Health")

# ---------------------------------------------------------------- strategies

SPECIAL_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, -1.0, 1e308, -1e308, 5e-324, 2.0**53, 0.5, 1e-9, 3.0]
hostile_floats = st.one_of(st.sampled_from(SPECIAL_FLOATS), st.floats(allow_nan=True, allow_infinity=True),
                           st.floats(min_value=0, max_value=1e4))
hostile_uint32 = st.one_of(st.integers(0, 8), st.sampled_from([2**31 - 1, 2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
small_index = st.integers(0, 64)
REQUIREMENT_NAMES = ["k-anonymity", "cl-diversity", "dps", "K-anonymity", "", "k-anonymity ", "nonsense"]
PARAM_VALUES = ["5", "0", "-1", "1e999", "nan", "inf", "2", "3.5", "99999999999999999999", "", "0x10", "1_0", " 5", "٥"]
hostile_text = st.one_of(st.text(max_size=40), st.sampled_from(["", "x" * 300, "\x00", "é" * 50, "\U0001f600" * 20]))


@st.composite
def requirement_texts(draw: st.DrawFn) -> str:
    """Requirement strings near the grammar: real names with hostile values, extra or missing parameters."""
    if draw(st.booleans()):
        return draw(hostile_text)
    name = draw(st.sampled_from(REQUIREMENT_NAMES))
    keys = draw(st.lists(st.sampled_from(["k", "c", "l", "beta", "epsilon", "trees", "x", ""]), max_size=5))
    body = ",".join(f"{k}={draw(st.sampled_from(PARAM_VALUES))}" for k in keys)
    return f"{name}:{body}" if draw(st.booleans()) else f"{name}{body}"


json_scalars = st.one_of(st.none(), st.booleans(), hostile_floats, st.integers(-(2**53), 2**53), hostile_text)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


def edit_strategy(big: bool) -> st.SearchStrategy:
    """One edit of a ModelMessage. ``big`` allows the expensive ones (10^6 nodes, deep chains, 64+ trees)."""
    tree, node, edge = small_index, st.integers(0, 10_000), small_index
    edits = [
        st.builds(NodeField, tree, node, st.just("label"), hostile_uint32),
        st.builds(NodeField, tree, node, st.sampled_from(["hit", "miss"]), hostile_floats),
        st.builds(NodeField, tree, node, st.just("counts"), st.lists(hostile_floats, max_size=9).map(tuple)),
        st.builds(NodeField, tree, node, st.just("attribute"), st.one_of(st.none(), hostile_uint32)),
        st.builds(EdgeChild, tree, node, edge, st.one_of(st.sampled_from(["self", "sibling", "parent", 0]),
                                                         hostile_uint32)),
        st.builds(EdgeConstraint, tree, node, edge, st.just("categories"),
                  st.lists(hostile_uint32, max_size=6).map(tuple)),
        st.builds(EdgeConstraint, tree, node, edge, st.just("interval"),
                  st.tuples(hostile_floats, hostile_floats, st.booleans(), st.booleans())),
        st.builds(EdgeConstraint, tree, node, edge, st.just("none")),
        st.builds(DetachedCycle, tree, st.integers(1, 5)),
        st.builds(SetDisclosure, tree, st.one_of(st.integers(-3, 5), st.integers(-(2**31), 2**31 - 1))),
        st.builds(ReportField, st.sampled_from(["mechanism", "guarantee", "requirement"]),
                  st.one_of(st.none(), requirement_texts(),
                            st.sampled_from(["apt", "kanon-rdt", "none", "prune-leaf"]))),
        st.builds(ReportField, st.just("report"), st.none()),
        st.builds(ClaimEdit, st.sampled_from(["clear", "drop", "add", "edit"]), small_index, hostile_uint32,
                  hostile_floats, requirement_texts(), hostile_uint32),
        st.builds(ParameterEdit, st.sampled_from(["k", "beta", "epsilon_total", "trees", "depth", "delta_total",
                                                  "epsilon_per_tree", "delta_per_tree", "disclosure", "x"]),
                  json_values, st.booleans()),
        st.builds(AttackEdit, st.sampled_from(["uniqueness", "homogeneity", "background", "clear"]), hostile_uint32,
                  hostile_floats),
        st.builds(SchemaEdit, st.sampled_from(["fingerprint", "clear", "add-class", "duplicate-class", "rename",
                                               "no-domain", "numeric-nan", "drop-attribute", "refingerprint"]),
                  st.text(min_size=1, max_size=70)),
        st.builds(TreesEdit, st.sampled_from(["clear", "replicate", "empty", "cut"]), st.integers(0, 8)),
        st.builds(Stamp, st.sampled_from([0, 0, -3600, 3600, -(2**40), 2**62]),
                  st.sampled_from([0, 999_999_999, -1, 2**31 - 1]), st.one_of(st.none(), st.binary(max_size=20))),
        st.builds(Oversized, st.sampled_from(["nonce", "mechanism", "requirement", "parameters", "category"]),
                  st.integers(1, 3000)),
    ]
    if big:
        edits += [
            st.builds(TreesEdit, st.just("replicate"), st.sampled_from([MAX_TREES - 1, MAX_TREES, MAX_TREES + 1, 200])),
            st.builds(ManyNodes, st.sampled_from([MAX_NODES - 10, MAX_NODES + 1, 10**6, 3 * 10**6])),
            st.builds(DeepChain, tree, st.sampled_from([1, 50, 2_000, 20_000])),
            st.builds(Oversized, st.sampled_from(["nonce", "mechanism", "claims"]), st.sampled_from([10**5, 10**6])),
        ]
    else:
        edits += [st.builds(DeepChain, tree, st.integers(1, 300)), st.builds(ManyNodes, st.integers(0, 300))]
    return st.one_of(edits)


def byte_edit_strategy() -> st.SearchStrategy:
    return st.one_of(
        st.builds(Truncate, st.integers(0, 10**6)),
        st.builds(FlipBits, st.lists(st.integers(0, 10**7), min_size=1, max_size=4).map(tuple)),
        st.builds(Append, st.one_of(st.binary(max_size=64), st.sampled_from([
            b"\x08", b"\xff" * 11, b"\x3a\x05", b"\xf8\xff\xff\xff\x0f\x01", b"\x92\x03\x00"]))),
        st.builds(Replace, st.binary(max_size=300)),
    )


def envelope_edit_strategy() -> st.SearchStrategy:
    bits = st.lists(st.integers(0, 10**6), min_size=1, max_size=3).map(tuple)
    return st.one_of(
        st.builds(EnvelopeEdit, st.sampled_from(["signature", "payload", "raw"]), bits),
        st.builds(EnvelopeEdit, st.just("key-id"),
                  text=st.one_of(hostile_text, st.text("0123456789abcdef", min_size=64, max_size=64))),
        st.builds(EnvelopeEdit, st.just("strip-signature")),
    )


def submit_cases(big: bool = False) -> st.SearchStrategy[SubmitCase]:
    """Signed hostile models for every kind of study; mostly reaching the decoder and the auditor."""
    edits = st.lists(edit_strategy(big), max_size=4).map(tuple)
    bytes_ = st.lists(byte_edit_strategy(), max_size=2).map(tuple)
    return st.one_of(
        st.builds(SubmitCase, st.sampled_from(KINDS), edits),  # field edits, signed
        st.builds(SubmitCase, st.sampled_from(KINDS), edits, bytes_),  # plus byte edits before signing
        st.builds(SubmitCase, st.sampled_from(KINDS), st.just(()), st.just(()), envelope_edit_strategy()),
        st.builds(SubmitCase, st.sampled_from(KINDS), edits, signer=st.sampled_from(PARTIES),
                  caller=st.sampled_from(PARTIES),
                  owner_field=st.one_of(st.none(), st.sampled_from(["site-b", "", "absent", "admin"])),
                  study=st.one_of(st.none(), st.sampled_from(["missing", "", "x" * 5000]))),
    )


def chunk_cases() -> st.SearchStrategy[ChunkCase]:
    """Signed hostile models sent in pieces, the stream intact or edited."""
    return st.builds(ChunkCase, submit_cases(), st.sampled_from([97, 4096, 1 << 20]), st.sampled_from(CHUNK_EDITS))


def refuse_cases() -> st.SearchStrategy[RefuseCase]:
    return st.builds(
        RefuseCase,
        study=st.one_of(st.none(), st.none(), hostile_text, st.just("s" * 20_000)),
        owner_field=st.one_of(st.none(), st.sampled_from(["site-b", "", "admin"])),
        reason=st.one_of(hostile_text, st.just("r" * 100_000)),
        stamp=st.one_of(st.none(), st.builds(Stamp, st.sampled_from([0, -3600, 2**40]), st.sampled_from([0, -5]),
                                             st.one_of(st.none(), st.just(b""), st.binary(max_size=20)))),
        byte_edits=st.lists(byte_edit_strategy(), max_size=1).map(tuple),
        envelope=st.one_of(st.none(), st.none(), envelope_edit_strategy()),
        signer=st.sampled_from(PARTIES),
        caller=st.sampled_from(PARTIES),
    )


@st.composite
def spec_edits(draw: st.DrawFn) -> tuple:
    """Edits of a valid StudySpec (field, value) pairs: unknown enums, schema mismatches, NaN scales, huge lists."""
    choices = [
        ("study_id", st.one_of(hostile_text, st.just("ok-id"), st.just("i" * 65))),
        ("title", st.one_of(hostile_text, st.just("t" * 50_000))),
        ("mechanism", st.sampled_from(["apt", "kanon-rdt", "none", "", "APT", "prune-parent"])),
        ("requirement", st.one_of(st.none(), requirement_texts())),
        ("disclosure", st.integers(-(2**31), 2**31 - 1)),
        ("learner", st.sampled_from(["cart", "multiway", "", "svm"])),
        ("max_depth", st.one_of(st.none(), hostile_uint32)),
        ("min_samples_leaf", hostile_uint32),
        ("global_models", st.lists(st.sampled_from(["decision-tree", "naive-bayes", "", "gpt"]), max_size=3)),
        ("pgen_scale", hostile_floats),
        ("class_assignment", st.sampled_from(["exact", "sample", "", "random"])),
        ("quorum", hostile_uint32),
        ("deadline", st.sampled_from([-(2**40), 0, 60, 3600, 2**40, 253402300799])),
        ("owners", st.lists(st.sampled_from(["site-a", "site-b", "absent", "admin", "miner",
                                             "stranger", ""]), max_size=4)),
        ("seed", st.integers(0, 2**64 - 1)),
        ("schema", st.sampled_from(["fingerprint", "add-class", "clear", "no-domain", "numeric-nan", "refingerprint"])),
    ]
    picked = draw(st.lists(st.sampled_from(range(len(choices))), max_size=4, unique=True))
    return tuple((choices[i][0], draw(choices[i][1])) for i in picked)


CSV_EDITS = [b"", b"\xff\xfe\x00", b"buying,maint\n", b"a;b;c\n1;2;3\n", b"\x00" * 50, b"class\n" + b"x\n" * 3]


def call_cases() -> st.SearchStrategy[CallCase]:
    """Every RPC but Submit/Refuse, from the admin's and the owners' identities, with hostile fields."""
    study_ids = st.one_of(st.sampled_from(["car-hm", "missing", "", "x" * 20_000]), hostile_text)
    csv_edits = st.lists(st.builds(TextEdit, st.integers(0, 5000),
                                   st.sampled_from(["", ",", "\n", ";", "\"", "9e999", "nan",
                                                                                 "unknown", "\x00", "é"]),
                                   st.integers(0, 30)), min_size=1, max_size=3).map(tuple)
    evaluation = st.one_of(st.just(b""), st.sampled_from(CSV_EDITS), st.binary(max_size=200),
                           st.just(b"evaluation"), csv_edits)
    return st.one_of(
        st.builds(CallCase, st.just("Poll"), st.sampled_from(PARTIES),
                  st.tuples(st.tuples(st.just("wait_seconds"), st.sampled_from([0, 0, 1, 2**32 - 1])))),
        st.builds(CallCase, st.just("CreateStudy"), st.sampled_from(["admin", "admin", "admin", "site-a"]),
                  spec_edits(), evaluation),
        st.builds(CallCase, st.sampled_from(["GetStudy", "GetResults"]), st.sampled_from(PARTIES),
                  st.tuples(st.tuples(st.just("study_id"), study_ids))),
        st.builds(CallCase, st.sampled_from(["ListStudies", "Health"]), st.sampled_from(PARTIES)),
    )


def raw_cases() -> st.SearchStrategy[RawCase]:
    return st.builds(RawCase, st.sampled_from(RPCS), st.sampled_from(PARTIES),
                     st.one_of(st.binary(max_size=200),
                               st.sampled_from([b"\xff", b"\x0a\x05\xc3\x28abc", b"\x0a\xff\xff\xff\xff\x0f",
                                                                         b"\x08" + b"\xff" * 10 + b"\x01"])))


def miner_cases(big: bool = False) -> st.SearchStrategy:
    """The mix sent to a running miner: mostly signed hostile models (whole or in pieces), then refusals, other RPCs,
    raw bytes."""
    return st.one_of(submit_cases(big), submit_cases(big), submit_cases(big), chunk_cases(), refuse_cases(),
                     call_cases(), raw_cases())


def local_cases() -> st.SearchStrategy[LocalCase]:
    edits = st.lists(edit_strategy(False), max_size=4).map(tuple)
    return st.one_of(st.builds(LocalCase, st.sampled_from(KINDS), edits),
                     st.builds(LocalCase, st.sampled_from(KINDS), edits,
                               st.lists(byte_edit_strategy(), min_size=1, max_size=2).map(tuple)))


@dataclass(frozen=True)
class TextEdit:
    """Cut or replace characters of a model file's JSON text."""

    at: int
    replacement: str
    cut: int = 0

    def apply(self, text: str) -> str:
        i = self.at % max(len(text), 1)
        return text[:i] + self.replacement + text[i + self.cut:]


def file_cases() -> st.SearchStrategy[FileCase]:
    edits = st.lists(edit_strategy(False), max_size=3).map(tuple)
    text_edits = st.lists(st.builds(TextEdit, st.integers(0, 10**6),
                                    st.sampled_from(["", "}", "{", '"', "[", "NaN", "-Infinity",
                                                                                      "1e999", "\\u0000",
                                                     "\ud800", ",", "null"]),
                                    st.integers(0, 20)), min_size=1, max_size=3).map(tuple)
    hostile_doc = st.one_of(
        json_values,
        st.dictionaries(st.sampled_from(["payload", "signer_key_id", "signature", "trees", "schema", "report", "nonce",
                                         "study_id", "timestamp", "schema_fingerprint", "x"]), json_values, max_size=5),
        st.fixed_dictionaries({"trees": st.lists(st.dictionaries(st.sampled_from(["nodes", "disclosure"]),
                                                                 json_values), max_size=3)}),
    )
    return st.one_of(
        st.builds(FileCase, st.sampled_from(KINDS), edits, st.booleans()),
        st.builds(FileCase, st.sampled_from(KINDS), edits, st.booleans(), text_edits),
        st.builds(FileCase, st.sampled_from(KINDS), document=hostile_doc),
    )


# ---------------------------------------------------------------- building requests


def build_message(case: SubmitCase | LocalCase | FileCase, study_id: str = "", owner: str = "") -> fpb.ModelMessage:
    base = bases()[case.kind]
    m = fpb.ModelMessage.FromString(base.message)
    m.study_id, m.owner_id, m.nonce = study_id, owner, new_nonce()
    m.timestamp.CopyFrom(now_timestamp())
    for edit in case.edits:
        try:
            edit.apply(m)
        except (IndexError, StopIteration):  # an edit that does not fit what earlier edits left (no schema, no leaf)
            pass
    return m


def _edit_bytes(data: bytes, edits: tuple) -> bytes:
    for edit in edits:
        data = edit.apply(data)
    return data


# ---------------------------------------------------------------- in-process properties


@dataclass
class Outcome:
    """What one case did: the RPC (or local target), its status code name, time taken, and a failure or None."""

    rpc: str
    code: str
    seconds: float
    failure: str | None = None

    @property
    def kind(self) -> str | None:
        """None, or what went wrong: crash, hang, rejected-but-stored,
        or inconsistent (accepted and stored wrongly, wrong PGEN)."""
        if self.failure is None:
            return None
        if "but the store changed" in self.failure:
            return "rejected-but-stored"
        if "past its" in self.failure or "did not answer within" in self.failure:
            return "hang"
        if " raised " in self.failure or any(f"answered {c}" in self.failure for c in BAD_CODES):
            return "crash"
        return "inconsistent"


def run_local(case: LocalCase) -> Outcome:
    """`check_model` raises only `Rejection`; `decode_model` only
    `WireError`; audit and pgen of what decodes do not crash."""
    started = time.perf_counter()
    base = bases()[case.kind]
    payload = _edit_bytes(build_message(case).SerializeToString(), case.byte_edits)
    try:
        message = fpb.ModelMessage.FromString(payload)
    except Exception as exc:  # noqa: BLE001 - the miner answers these with INVALID_ARGUMENT
        from google.protobuf.message import DecodeError

        ok = isinstance(exc, (DecodeError, RecursionError))
        return Outcome("local", "undecodable", time.perf_counter() - started, None if ok else f"parse raised {exc!r}")
    try:
        check_model(message, StudyTerms.of(study_from_pb(base.spec)), MAX_NODES)
        code = "OK"
    except Rejection as rej:
        code = rej.code.name
    except Exception as exc:  # noqa: BLE001
        return Outcome("local", "crash", time.perf_counter() - started, f"check_model raised {exc!r}")
    return Outcome("local", code, time.perf_counter() - started, _decode_audit_pgen(message))


def _decode_audit_pgen(message: fpb.ModelMessage) -> str | None:
    if sum(len(t.nodes) for t in message.trees) > MAX_NODES:
        return None
    try:
        model = decode_model(message)
    except WireError:
        return None
    except Exception as exc:  # noqa: BLE001
        return f"decode_model raised {exc!r}"
    for t, tree in enumerate(model.trees):
        if _reachable(tree) != len(tree.nodes):
            return f"decoded tree {t} has {len(tree.nodes) - _reachable(tree)} nodes not reachable from its root"
    return _audit_property(model.trees, model.report) or _pgen_property(model.trees)


def _audit_property(trees: tuple, report: Any) -> str | None:
    from modelshare.common.audit.release import audit

    try:
        result = audit(trees, report)
        assert isinstance(result.passed, bool)
        result.to_dict()
    except Exception as exc:  # noqa: BLE001
        return f"audit raised {exc!r}"
    return None


def _reachable(tree: Any) -> int:
    seen, stack = 0, [0]
    while stack and seen <= len(tree.nodes):
        seen += 1
        stack.extend(e.child for e in tree.nodes[stack.pop()].edges)
    return seen


def _pgen_property(trees: tuple) -> str | None:
    """PGEN on every decoded tree that discloses a tractable number of tuples: exact rows, classes and domains."""
    for tree in trees:
        totals = np.array([p.total for p in tree.paths()])
        if totals.sum() > PGEN_MAX_ROWS:
            continue
        try:
            X, y = pgen(tree, rng=np.random.default_rng(0))
        except ValueError:
            continue
        except Exception as exc:  # noqa: BLE001
            return f"pgen raised {exc!r}"
        if X.shape != (int(np.rint(totals).sum()), tree.schema.n_attributes) or y.shape != (X.shape[0],):
            return f"pgen made {X.shape} rows from paths of {np.rint(totals).sum()} tuples"
        if y.size and not (0 <= y.min() and y.max() < tree.schema.n_classes):
            return "pgen made a class outside the schema"
        if not np.isfinite(X).all():
            return "pgen made a non-finite value"
        paths = tree.paths()
        landed = np.bincount(tree.apply(X), minlength=len(tree.nodes))[[p.leaf for p in paths]]
        if not np.array_equal(landed, np.rint(totals).astype(np.int64)):
            return "pgen made rows that do not satisfy their own path"
    return None


def run_file(case: FileCase, path: Path) -> Outcome:
    """`read_model` on a hostile model file raises only `TreeError`
    (the project's error); what it reads audits and regenerates."""
    started = time.perf_counter()
    if case.document is not None:
        text = json.dumps(case.document, allow_nan=True)
    else:
        message = build_message(case)
        if case.signed:
            doc: Any = sign_payload(message.SerializeToString(), _file_key())
        else:
            doc = message
        try:
            text = json_format.MessageToJson(doc, preserving_proto_field_name=True)
        except json_format.SerializeToJsonError:  # a value JSON cannot spell (bad timestamp, inf in a Struct):
            doc = sign_payload(message.SerializeToString(), _file_key())  # the signed form carries it in binary
            text = json_format.MessageToJson(doc, preserving_proto_field_name=True)
        for edit in case.text_edits:
            text = edit.apply(text)
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        trees, report = read_model(path)
    except TreeError:
        return Outcome("read_model", "TreeError", time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001
        return Outcome("read_model", "crash", time.perf_counter() - started, f"read_model raised {exc!r}")
    failure = _audit_property(trees, report)
    return Outcome("read_model", "read", time.perf_counter() - started, failure or _pgen_property(trees))


@functools.lru_cache(maxsize=1)
def _file_key() -> Any:
    from modelshare.common.federation.signing import generate_signing_key

    return generate_signing_key()


# ---------------------------------------------------------------- the running miner


@dataclass(frozen=True)
class Rows:
    submissions: int
    nonces: int
    refusals: int
    studies: int


class MinerTarget:
    """Sends cases to a running miner of a `tests.federation_helpers.Federation` with owners `OWNERS`.

    Each kind of model gets an open study inviting every owner (one of whom never answers, so no
    study is mined); when a case is accepted the owner has answered that study, so a fresh one
    replaces it and later cases still reach the decoder. Refusals go to studies of their own.
    """

    def __init__(self, fed: Any, *, timeout: float = 10.0) -> None:
        self.fed = fed
        self.timeout = timeout
        self.stubs = {p: fed.stub(p) for p in PARTIES}
        self.channels = {p: fed.channels[i - len(PARTIES)] for i, p in enumerate(PARTIES)}
        self.keys = {p: fed.key(p) for p in PARTIES}
        self.current: dict[str, fpb.StudySpec] = {}
        self.serial = 0
        self.accepted = {"submissions": 0, "refusals": 0}
        self.start_rows = None
        self.db = sqlite3.connect(f"file:{fed.miner.config.state_dir / 'miner.sqlite'}?mode=ro", uri=True,
                                  check_same_thread=False)
        for kind in (*KINDS, "refuse"):
            self._rotate(kind)
        self.start_rows = self.rows()

    def close(self) -> None:
        self.db.close()

    def _rotate(self, kind: str) -> fpb.StudySpec:
        self.serial += 1
        template = bases()["car-hm" if kind == "refuse" else kind].spec
        spec = fpb.StudySpec()
        spec.CopyFrom(template)
        spec.study_id = f"{kind}-{self.serial}"
        spec.owners[:] = OWNERS
        status = self.stubs["admin"].CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=self.timeout)
        self.current[kind] = status.spec
        return status.spec

    def rows(self) -> Rows:
        q = self.db.execute
        return Rows(*(q(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                      for t in ("submissions", "nonces", "refusals", "studies")))

    def stored_only_accepted(self) -> bool:
        """The store holds exactly the submissions and refusals the miner acknowledged to this harness."""
        rows, start = self.rows(), self.start_rows
        assert start is not None  # set once __init__ has created the studies
        return (rows.submissions - start.submissions, rows.refusals - start.refusals) == \
            (self.accepted["submissions"], self.accepted["refusals"])

    def healthy(self) -> bool:
        reply = self.stubs["site-b"].Health(fpb.HealthRequest(), timeout=self.timeout)
        return reply.status == "serving"

    # -- building
    def _submit_request(self, case: SubmitCase) -> tuple[Any, fpb.ModelMessage | None]:
        spec = self.current[case.kind]
        study = spec.study_id if case.study is None else case.study
        owner = case.signer if case.owner_field is None else case.owner_field
        message = build_message(case, study, owner)
        payload = _edit_bytes(message.SerializeToString(), case.byte_edits)
        envelope = sign_payload(payload, self.keys[case.signer])
        request = envelope if case.envelope is None else case.envelope.apply(envelope)
        return request, message

    def _chunk_request(self, case: ChunkCase) -> tuple[tuple[bytes, list[fpb.EnvelopeChunk]], fpb.ModelMessage | None]:
        """The envelope's bytes and the stream of pieces that carries them."""
        request, message = self._submit_request(case.submit)
        data = request if isinstance(request, bytes) else request.SerializeToString()
        study = self.current[case.submit.kind].study_id if case.submit.study is None else case.submit.study
        return (data, case.pieces(data, study)), message

    def _refuse_request(self, case: RefuseCase) -> Any:
        study = self.current["refuse"].study_id if case.study is None else case.study
        refusal = fpb.OwnerRefusal(study_id=study, owner_id=case.signer if case.owner_field is None
                                   else case.owner_field, reason=case.reason, nonce=new_nonce())
        refusal.timestamp.CopyFrom(now_timestamp())
        if case.stamp is not None:
            case.stamp.apply(refusal)
        envelope = sign_payload(_edit_bytes(refusal.SerializeToString(), case.byte_edits), self.keys[case.signer])
        return envelope if case.envelope is None else case.envelope.apply(envelope)

    def _call_request(self, case: CallCase) -> Any:
        if case.rpc == "CreateStudy":
            self.serial += 1
            spec = fpb.StudySpec()
            spec.CopyFrom(bases()["car-hm"].spec)
            spec.study_id = f"made-{self.serial}"
            spec.owners[:] = ["site-a", "absent"]
            for name, value in case.fields:
                _edit_spec(spec, name, value)
            return fpb.CreateStudyRequest(spec=spec, evaluation_csv=_evaluation(case.evaluation))
        request = {"Poll": fpb.PollRequest, "GetStudy": fpb.StudyRef, "GetResults": fpb.StudyRef,
                   "ListStudies": fpb.ListStudiesRequest, "Health": fpb.HealthRequest}[case.rpc]()
        for name, value in case.fields:
            setattr(request, name, value)
        return request

    # -- running
    def run(self, case: Any) -> Outcome:
        """Send one case and check the properties (see the module docstring)."""
        before = self.rows()
        message = None
        if isinstance(case, SubmitCase):
            request, message = self._submit_request(case)
        elif isinstance(case, ChunkCase):
            request, message = self._chunk_request(case)
        elif isinstance(case, RefuseCase):
            request = self._refuse_request(case)
        elif isinstance(case, CallCase):
            request = self._call_request(case)
        else:
            request = case.data
        timeout = 1.0 if case.rpc == "Poll" else self.timeout
        started = time.monotonic()
        try:
            if isinstance(request, bytes):
                reply = self._raw_call(case, request, timeout)
            elif isinstance(case, ChunkCase):
                reply = self.stubs[case.submit.caller].SubmitChunks(iter(request[1]), timeout=timeout)
            else:
                reply = getattr(self.stubs[case.caller], case.rpc)(request, timeout=timeout)
            code, details = "OK", ""
        except grpc.RpcError as err:
            reply, code, details = None, err.code().name, err.details() or ""
        seconds = time.monotonic() - started
        after = self.rows()
        outcome = Outcome(case.rpc, code, seconds)
        outcome.failure = self._judge(case, code, details, seconds, timeout, before, after, reply, message, request)
        if code == "OK" and isinstance(case, (SubmitCase, ChunkCase)) and not reply.duplicate:
            self.accepted["submissions"] += 1
            self._rotate(case.kind if isinstance(case, SubmitCase) else case.submit.kind)
        if code == "OK" and isinstance(case, RefuseCase):
            self.accepted["refusals"] += 1
            self._rotate("refuse")
        return outcome

    def _raw_call(self, case: Any, request: bytes, timeout: float) -> Any:
        """``request`` as the request bytes of ``case.rpc`` (the one piece of a client stream, for ``SubmitChunks``)."""
        service = next(s for s in fpb.DESCRIPTOR.services_by_name.values() if case.rpc in s.methods_by_name)
        method = service.methods_by_name[case.rpc]
        path, reply_type = f"/{service.full_name}/{case.rpc}", getattr(fpb, method.output_type.name)
        channel = self.channels[case.caller]
        if method.client_streaming:
            streaming = channel.stream_unary(path, response_deserializer=reply_type.FromString)
            return streaming(iter([request]), timeout=timeout)
        return channel.unary_unary(path, response_deserializer=reply_type.FromString)(request, timeout=timeout)

    def _judge(self, case: Any, code: str, details: str, seconds: float, timeout: float, before: Rows, after: Rows,
               reply: Any, message: fpb.ModelMessage | None, request: Any) -> str | None:
        if code in BAD_CODES:
            return f"{case.rpc} answered {code}: {details[:300]}"
        if seconds > timeout + 2.0:
            return f"{case.rpc} answered after {seconds:.1f} s, past its {timeout:.0f} s deadline"
        if code == "DEADLINE_EXCEEDED" and case.rpc != "Poll":
            return f"{case.rpc} did not answer within {timeout:.0f} s"
        if code != "OK":
            if after != before:
                return f"{case.rpc} was rejected ({code}: {details[:200]}) but the store changed: {before} -> {after}"
            return None
        if isinstance(case, (SubmitCase, ChunkCase)):
            if isinstance(case, ChunkCase):
                request = request[0]
            if reply.duplicate:
                return None if after == before else f"a duplicate Submit changed the store: {before} -> {after}"
            want = dataclasses.replace(before, submissions=before.submissions + 1, nonces=before.nonces + 1)
            if after != want:
                return f"an accepted Submit stored {before} -> {after}"
            envelope = fpb.SignedEnvelope.FromString(request) if isinstance(request, bytes) else request
            signed = fpb.ModelMessage.FromString(envelope.payload)
            try:
                check_model(signed, StudyTerms.of(study_from_pb(self._spec_of(signed.study_id))), MAX_NODES)
            except Rejection as rej:
                return f"the miner accepted a model check_model rejects: {rej.message[:200]}"
            return None
        if isinstance(case, RefuseCase):
            want = dataclasses.replace(before, refusals=before.refusals + 1, nonces=before.nonces + 1)
            return None if after == want else f"an accepted Refuse stored {before} -> {after}"
        if case.rpc == "CreateStudy":
            want = dataclasses.replace(before, studies=before.studies + 1)
            return None if after == want else f"a created study stored {before} -> {after}"
        return None if after == before else f"{case.rpc} changed the store: {before} -> {after}"

    def _spec_of(self, study_id: str) -> fpb.StudySpec:
        row = self.db.execute("SELECT spec FROM studies WHERE study_id = ?", (study_id,)).fetchone()
        return fpb.StudySpec.FromString(row[0])


def _edit_spec(spec: fpb.StudySpec, name: str, value: Any) -> None:
    if name == "schema":
        holder = fpb.ModelMessage(schema=spec.schema, schema_fingerprint=spec.schema_fingerprint)
        SchemaEdit(value, "extra").apply(holder)
        spec.schema.CopyFrom(holder.schema)
        spec.schema_fingerprint = holder.schema_fingerprint
    elif name == "deadline":
        spec.deadline.seconds = int(time.time()) + value if abs(value) < 2**32 else value
    elif name in ("requirement", "max_depth") and value is None:
        spec.ClearField(name)
    elif name in ("global_models", "owners"):
        getattr(spec, name)[:] = value
    else:
        setattr(spec, name, value)


@functools.lru_cache(maxsize=1)
def _car_csv() -> bytes:
    from modelshare.common.data.datasets import load_dataset

    return load_dataset("car").frame.head(20).to_csv(index=False).encode()


def _evaluation(data: bytes | tuple) -> bytes:
    """The evaluation table of a CreateStudy case: given bytes, the first Car rows, or those rows with text edits."""
    if isinstance(data, tuple):
        text = _car_csv().decode()
        for edit in data:
            text = edit.apply(text)
        return text.encode("utf-8", errors="surrogatepass")
    return _car_csv() if data == b"evaluation" else data
