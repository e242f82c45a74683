"""Reading the TOML files (owner, miner, admin, study, project) against declarative pydantic models.

Each file kind is a `ConfigModel`: unknown keys are errors (a typo such as ``requirment =`` must
never silently drop a setting) and values are not coerced (the string ``"5"`` is not the integer
5, ``true`` is not 1). `load_config` parses a file and validates it; `validate_config` validates
tables already parsed. Either raises the file kind's own error type with one line per fault, each
naming the file, the key and why::

    study.toml: unknown key 'release.requirment'; allowed keys in [release]: mechanism, requirement, disclosure
    owner.toml [policy]: min_k must be an integer >= 1, got 'five'
    project.toml [parties[1]]: name is required

What a wrong value is told it must be comes from the field's declaration: its ``description``
when it has one (``"a list of names"``), else its type and constraints (``int`` with ``ge=1`` is
"an integer >= 1", ``float`` with ``gt=0``, ``le=1`` and ``allow_inf_nan=False`` is "a positive
finite number at most 1"). A validator's ``ValueError`` is quoted after the key, so it reads as a
predicate (``"names ['kanon'], which are not among [...]"``).
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["ConfigModel", "Text", "load_config", "read_toml", "validate_config", "at_key", "describe_expected",
           "field_model", "model_keys"]

M = TypeVar("M", bound=BaseModel)


class ConfigModel(BaseModel):
    """A table of a config file: no unknown keys, no coercion, immutable once read."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Text = Annotated[str, Field(pattern=r"\S", description="a non-empty string")]
"""A string with something in it (not empty, not blank): a name, a path, an address."""


def read_toml(path: Path, what: str, error: type[Exception]) -> dict[str, Any]:
    """Parse ``path``; raise ``error`` naming the file, what it should be (``what``) and why not."""
    try:
        parsed: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        return parsed
    except FileNotFoundError:
        raise error(f"{path}: {what} does not exist") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not a TOML {what}: {exc}") from None


def load_config(path: str | Path, model: type[M], error: type[Exception], what: str,
                context: Mapping[str, Any] | None = None) -> M:
    """Read the TOML file ``path`` (a ``what``, e.g. "study file") and validate it as ``model``."""
    path = Path(path)
    return validate_config(read_toml(path, what, error), model, error, where=str(path), context=context)


def validate_config(data: Mapping[str, Any], model: type[M], error: type[Exception], *, where: str,
                    context: Mapping[str, Any] | None = None) -> M:
    """Validate parsed tables as ``model``; ``error`` lists every fault, each prefixed by ``where``.

    ``context`` reaches the model's validators (`pydantic.ValidationInfo.context`).
    """
    try:
        return model.model_validate(data, context=dict(context or {}))
    except ValidationError as exc:
        raise error("\n".join(_describe(model, e, where) for e in exc.errors())) from None


def at_key(where: str, loc: Sequence[str | int]) -> str:
    """``where`` and the table of the key at ``loc``, as errors name them: ``owner.toml [tls]: key``."""
    table, key = _split(loc)
    return f"{where} [{table}]: {key}" if table else f"{where}: {key}"


# ------------------------------------------------------------------ describing a fault
def _path(loc: Sequence[str | int]) -> str:
    """A location as a dotted key, list indices in brackets: ``parties[1].hosts[0]``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _split(loc: Sequence[str | int]) -> tuple[str, str]:
    """(table, key): the key is the last name of ``loc`` with any list indices after it."""
    names = [i for i, part in enumerate(loc) if isinstance(part, str)]
    if not names:
        return "", _path(loc)
    last = names[-1]
    return _path(loc[:last]), _path(loc[last:])


def _unwrap(annotation: Any) -> Any:
    """The annotation without ``Optional``/``| None``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def field_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, directly, optionally or as list items."""
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) in (list, tuple, Sequence):
        annotation = _unwrap(typing.get_args(annotation)[0])
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def model_keys(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields by the key a file writes (the alias, where a name would shadow pydantic's)."""
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _field_at(model: type[BaseModel], loc: Sequence[str | int]) -> FieldInfo | None:
    """The field of the key at ``loc`` (list indices skipped); None where ``loc`` leaves the models."""
    holder: type[BaseModel] | None = model
    field: FieldInfo | None = None
    for part in loc:
        if isinstance(part, int):
            continue
        keys = {} if holder is None else model_keys(holder)
        if part not in keys:
            return None
        field = keys[part]
        holder = field_model(field.annotation)
    return field


def _table_model(model: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The model of the table at ``loc`` (``model`` itself at the top)."""
    if not loc:
        return model
    field = _field_at(model, loc)
    return None if field is None else field_model(field.annotation)


def _noun(annotation: Any) -> str:
    """What a value of the annotated type is, in words."""
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " or ".join(repr(v) for v in typing.get_args(annotation))
    if origin in (list, tuple, Sequence):
        return f"a list of {_noun(typing.get_args(annotation)[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is typing.Annotated:
        return _noun(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a table"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            datetime: "a TOML datetime"}.get(annotation, getattr(annotation, "__name__", str(annotation)))


def describe_expected(field: FieldInfo) -> str:
    """What a field accepts, from its description or its type and constraints."""
    if field.description:
        return field.description
    noun = _noun(field.annotation)
    meta = field.metadata
    if any(isinstance(m, annotated_types.MinLen) and m.min_length >= 1 for m in meta):
        noun = {"a string": "a non-empty string"}.get(noun, f"a non-empty {noun.removeprefix('a ')}")
    if noun == "a number":
        positive = any(isinstance(m, annotated_types.Gt) and m.gt == 0 for m in meta)
        finite = any(getattr(m, "allow_inf_nan", None) is False for m in meta)
        noun = "a " + "positive " * positive + "finite " * finite + "number"
    for m in meta:
        if isinstance(m, annotated_types.Ge):
            noun += f" >= {m.ge}"
        elif isinstance(m, annotated_types.Gt) and not (noun.startswith("a positive") and m.gt == 0):
            noun += f" > {m.gt}"
        elif isinstance(m, annotated_types.Le):
            noun += f" at most {m.le:g}"
    return noun


def _describe(model: type[BaseModel], error: Mapping[str, Any], where: str) -> str:
    """One line for one pydantic error: the file, the key and what is wrong with it."""
    loc, kind = tuple(error["loc"]), error["type"]
    if kind == "extra_forbidden":
        holder = _table_model(model, loc[:-1])
        allowed = ", ".join(model_keys(holder)) if holder is not None else "none"
        table = _path(loc[:-1])
        scope = f" in [{table}]" if table else ""
        return f"{where}: unknown key '{_path(loc)}'; allowed keys{scope}: {allowed}"
    if kind == "missing":
        return f"{at_key(where, loc)} is required"
    if kind in ("value_error", "assertion_error"):
        reason = str(error["ctx"]["error"])
        return f"{at_key(where, loc)} {reason}" if loc else f"{where}: {reason}"
    field = _field_at(model, loc)
    if field is None:
        expected = error["msg"][0].lower() + error["msg"][1:]
    elif isinstance(loc[-1], int):  # an item of a list
        expected = _noun(typing.get_args(_unwrap(field.annotation))[0])
    else:
        expected = describe_expected(field)
    return f"{at_key(where, loc)} must be {expected}, got {error['input']!r}"
