"""The learners' ``schema`` parameter check; the generic parameter checks are `modelshare.common.params`."""

from __future__ import annotations

from modelshare.common.data.schema import Schema
from modelshare.common.params import ParameterError

__all__ = ["check_schema"]


def check_schema(value: object) -> Schema:
    """The learner's ``schema`` parameter, which must be a `modelshare.common.data.schema.Schema`."""
    if not isinstance(value, Schema):
        raise ParameterError(f"schema must be a modelshare.common.data.schema.Schema; got {type(value).__name__}")
    return value
