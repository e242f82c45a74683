"""Model files on disk: the protobuf JSON mapping of a ModelMessage, signed or unsigned.

An unsigned file is a ``ModelMessage`` in JSON; a signed file is a ``SignedEnvelope`` in JSON
whose ``payload`` (base64) is the serialized ModelMessage, exactly the bytes that cross the wire.
Reading never trusts the file: the message is decoded and validated by `modelshare.common.federation.wire`, and any
fault names the file. Writes are atomic: a partial file never replaces a good one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.signing import sign_payload
from modelshare.common.federation.wire import MAX_TREES, DecodedModel, WireError, decode_model, model_message
from modelshare.common.files import atomic_write
from modelshare.common.privacy.report import PrivacyReport, Release
from modelshare.common.trees.tree import Tree, TreeError

__all__ = ["ModelFile", "read_model_file", "read_model", "read_tree", "write_message", "write_release", "write_tree"]

MAX_MODEL_FILE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ModelFile:
    """A model file's ModelMessage, its decoded model, and the envelope when the file is signed."""

    message: fpb.ModelMessage
    model: DecodedModel
    envelope: fpb.SignedEnvelope | None


def _parse(path: Path) -> tuple[fpb.ModelMessage, fpb.SignedEnvelope | None]:
    try:
        if path.stat().st_size > MAX_MODEL_FILE_BYTES:
            raise TreeError(f"{path}: larger than {MAX_MODEL_FILE_BYTES} bytes; not a model file")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TreeError(f"{path}: cannot read model file: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise TreeError(f"{path}: not a JSON model file: {exc}") from None
    if not isinstance(data, dict):
        raise TreeError(f"{path}: a model file holds a JSON object at top level")
    try:
        if "payload" in data:
            envelope = json_format.ParseDict(data, fpb.SignedEnvelope())
            return fpb.ModelMessage.FromString(envelope.payload), envelope
        return json_format.ParseDict(data, fpb.ModelMessage()), None
    except (json_format.ParseError, DecodeError, RecursionError, OverflowError, ValueError, TypeError) as exc:
        # protobuf's JSON parser lets some malformed values escape as Python errors (an enum given as
        # -Infinity raises OverflowError from int()); each is a file that is not a model
        raise TreeError(f"{path}: not a ModelMessage or SignedEnvelope: {exc}") from None


def read_model_file(path: str | Path, *, max_trees: int = MAX_TREES) -> ModelFile:
    """Read and validate a model file of 1 to ``max_trees`` trees; every failure raises `TreeError` naming the file."""
    path = Path(path)
    message, envelope = _parse(path)
    try:
        return ModelFile(message, decode_model(message, max_trees=max_trees), envelope)
    except WireError as exc:
        raise TreeError(f"{path}: {exc}") from None


def read_model(path: str | Path) -> tuple[tuple[Tree, ...], PrivacyReport | None]:
    """A model file's trees (one, or an ensemble) and its report (None when the file carries none).

    A regression forest (`read_model_file` decodes it) is refused with `TreeError`: it has no class trees.
    """
    model = read_model_file(path).model
    if model.forest is not None:
        raise TreeError(f"{path}: a regression forest (numeric target {model.schema.class_name!r}); "
                        "this needs a classification model file")
    return model.trees, model.report


def read_tree(path: str | Path) -> Tree:
    """The tree of a single-tree model file; `TreeError` naming the file for an ensemble."""
    trees = read_model(path)[0]
    if len(trees) != 1:
        raise TreeError(f"{path}: an ensemble of {len(trees)} trees; this needs a single-tree model file")
    return trees[0]


def write_message(message: Message, path: str | Path) -> None:
    """Write a ModelMessage or SignedEnvelope as protobuf JSON, atomically."""
    path = Path(path)
    text = json_format.MessageToJson(message, preserving_proto_field_name=True, indent=1)
    atomic_write(path, text + "\n")


def write_tree(tree: Tree, path: str | Path) -> None:
    """Write a bare tree (a ModelMessage without a report)."""
    write_message(model_message(tree), path)


def write_release(
    release: Release,
    path: str | Path,
    *,
    study_id: str = "",
    owner_id: str = "",
    signing_key: Ed25519PrivateKey | None = None,
) -> None:
    """Write a release as a ModelMessage, signed into a SignedEnvelope when a key is given."""
    message = model_message(release, study_id=study_id, owner_id=owner_id)
    if signing_key is None:
        write_message(message, path)
    else:
        write_message(sign_payload(message.SerializeToString(), signing_key), path)
