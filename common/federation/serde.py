"""A study on the wire: `modelshare.common.study.Study` to and from the ``StudySpec`` message.

The one place the study's protobuf form is read or written, as Flower keeps its messages in
``common/serde.py``: the admin encodes the study it read from ``study.toml``, the miner stores the
message and decodes it to mine, and an owner decodes each announced study once, so everything past
this edge takes the decoded `Study`. Decoding trusts nothing: the schema is checked against its
fingerprint, the requirement parsed with the schema's class count, and `Study`'s own checks run;
any fault raises `StudyError` naming the field.
"""

from __future__ import annotations

from datetime import datetime, timezone

from modelshare.common.data.schema import Schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.wire import (
    WireError,
    disclosure_from_pb,
    disclosure_to_pb,
    schema_from_pb,
    schema_to_pb,
)
from modelshare.common.privacy.requirements import RequirementError, parse_requirement
from modelshare.common.study import ModelSetting, ParameterValue, Study, StudyError, Training
from modelshare.common.trees.learner_options import UNPRUNED

__all__ = ["parameter_from_pb", "parameter_to_pb", "study_from_pb", "study_to_pb"]


def parameter_to_pb(value: ParameterValue) -> fpb.ModelParameter:
    """A parameter value on the wire (bool before int: TOML's true is no integer)."""
    if isinstance(value, bool):
        return fpb.ModelParameter(bool_value=value)
    if isinstance(value, int):
        return fpb.ModelParameter(int_value=value)
    if isinstance(value, float):
        return fpb.ModelParameter(float_value=value)
    if isinstance(value, str):
        return fpb.ModelParameter(string_value=value)
    return fpb.ModelParameter()  # None: the oneof unset


def parameter_from_pb(message: fpb.ModelParameter) -> ParameterValue:
    """The value a `ModelParameter` carries (None when it carries none)."""
    kind = message.WhichOneof("value")
    return None if kind is None else getattr(message, kind)


def _training_from_pb(spec: fpb.StudySpec) -> Training:
    pruning = spec.WhichOneof("pruning")
    confidence = None if pruning is None else (UNPRUNED if pruning == "unpruned" else spec.confidence)
    return Training(
        learner=spec.learner,
        min_samples_leaf=int(spec.min_samples_leaf),
        max_depth=int(spec.max_depth) if spec.HasField("max_depth") else None,
        pairing=spec.pairing if spec.HasField("pairing") else None,
        category_split=spec.category_split if spec.HasField("category_split") else None,
        confidence=confidence,
    )


def _deadline(spec: fpb.StudySpec) -> datetime:
    try:
        return spec.deadline.ToDatetime(tzinfo=timezone.utc)
    except (ValueError, OverflowError) as exc:
        raise StudyError(f"deadline: {exc}") from None


def study_from_pb(spec: fpb.StudySpec, *, where: str = "study") -> Study:
    """The `Study` a ``StudySpec`` message carries, decoded and checked.

    Raises
    ------
    StudyError
        Any field that does not decode or check, named, prefixed with ``where``.
    """
    try:
        schema = schema_from_pb(spec.schema, where="study schema")
        if schema.fingerprint != spec.schema_fingerprint:
            raise StudyError("study schema_fingerprint does not match its schema")
        requirement = None
        if spec.HasField("requirement"):
            n_classes = schema.n_classes if isinstance(schema, Schema) else None
            try:
                requirement = parse_requirement(spec.requirement, n_classes=n_classes)
            except RequirementError as exc:
                raise StudyError(f"study requirement: {exc}") from None
        return Study(
            study_id=spec.study_id,
            title=spec.title,
            schema=schema,
            mechanism=spec.mechanism,
            requirement=requirement,
            disclosure=disclosure_from_pb(spec.disclosure, where="disclosure"),
            training=_training_from_pb(spec),
            global_models=tuple(spec.global_models),
            model_settings={name: ModelSetting(s.mode, {k: parameter_from_pb(v) for k, v in s.parameters.items()})
                            for name, s in spec.global_model_settings.items()},
            pgen_scale=spec.pgen_scale,
            class_assignment=spec.class_assignment,
            off_path=spec.pgen_off_path or "uniform",
            on_path=spec.pgen_on_path or "uniform",
            owners=tuple(spec.owners),
            quorum=int(spec.quorum),
            deadline=_deadline(spec),
            seed=int(spec.seed),
            max_message_bytes=int(spec.max_message_bytes),
            **({"prior_share": spec.prior_share} if spec.HasField("prior_share") else {}),
        )
    except (StudyError, WireError) as exc:
        raise StudyError(f"{where}: {exc}") from None


def study_to_pb(study: Study) -> fpb.StudySpec:
    """``study`` as the ``StudySpec`` message (the requirement in its canonical form)."""
    training = study.training
    spec = fpb.StudySpec(
        study_id=study.study_id,
        title=study.title,
        schema=schema_to_pb(study.schema),
        schema_fingerprint=study.schema.fingerprint,
        mechanism=study.mechanism,
        disclosure=disclosure_to_pb(study.disclosure),
        learner=training.learner,
        min_samples_leaf=training.min_samples_leaf,
        global_models=list(study.global_models),
        pgen_scale=study.pgen_scale,
        class_assignment=study.class_assignment,
        pgen_off_path=study.off_path,
        pgen_on_path=study.on_path,
        quorum=study.quorum,
        owners=list(study.owners),
        seed=study.seed,
        max_message_bytes=study.max_message_bytes,
    )
    if study.requirement is not None:
        spec.requirement = str(study.requirement)
    if study.family == "dp":
        spec.prior_share = study.prior_share
    if training.max_depth is not None:
        spec.max_depth = training.max_depth
    if training.pairing is not None:
        spec.pairing = training.pairing
    if training.category_split is not None:
        spec.category_split = training.category_split
    if training.confidence == UNPRUNED:
        spec.unpruned = True
    elif training.confidence is not None:
        spec.confidence = float(training.confidence)
    for name, setting in study.model_settings.items():
        spec.global_model_settings[name].CopyFrom(fpb.GlobalModelSetting(
            mode=setting.mode, parameters={k: parameter_to_pb(v) for k, v in setting.parameters.items()}))
    spec.deadline.FromDatetime(study.deadline)
    return spec
