"""Checks of parameters given in code: learners' hyper-parameters, mechanisms' settings, CLI values.

One checker per kind of value, so every error has the same form: it names the parameter, what it
accepts and what it got (``n_trees must be an integer >= 1; got 0``). The learners follow
scikit-learn's convention: ``__init__`` stores its arguments untouched and ``fit`` validates them
here, so ``get_params``/``set_params``/``clone`` round-trip whatever was given and a bad value is
reported when it would be used. (Configuration files are validated by their pydantic models,
`modelshare.common.federation.config_file`.)

This module sits outside common's layers and imports nothing of the project: all may use it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Literal, overload

__all__ = ["ParameterError", "check_choice", "check_positive_int", "check_positive_real", "check_nonnegative_real"]


class ParameterError(ValueError, TypeError):
    """A hyper-parameter with a wrong type or value.

    Subclasses both `ValueError` and `TypeError` (as scikit-learn's ``InvalidParameterError``
    does) so callers catching either for a bad parameter keep working.
    """


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of the strings ``choices``, else raise `ParameterError`.

    Parameters
    ----------
    name:
        The parameter's name, quoted in the error.
    value:
        The value given.
    choices:
        The accepted strings, listed in the error.
    """
    if not isinstance(value, str) or value not in choices:
        raise ParameterError(f"{name} must be one of {list(choices)}; got {value!r}")
    return value


@overload
def check_positive_int(name: str, value: object, *, allow_none: Literal[False] = False) -> int: ...


@overload
def check_positive_int(name: str, value: object, *, allow_none: Literal[True]) -> int | None: ...


def check_positive_int(name: str, value: object, *, allow_none: bool = False) -> int | None:
    """Return ``value`` as an ``int`` if it is an integer >= 1 (or None when allowed).

    Booleans are rejected even though Python counts them as integers: ``max_depth=True`` is
    a mistake, not a depth of one.

    Parameters
    ----------
    name:
        The parameter's name, quoted in the error.
    value:
        The value given; Python and numpy integers are accepted.
    allow_none:
        Whether None (meaning "no limit") is accepted.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        accepted = "None or an integer >= 1" if allow_none else "an integer >= 1"
        raise ParameterError(f"{name} must be {accepted}; got {value!r}")
    return int(value)


def _finite_real(value: object) -> bool:
    """Whether ``value`` is a finite Python or numpy real; a boolean is not a number here."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def check_nonnegative_real(name: str, value: object) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number >= 0 (``name`` is quoted in the error)."""
    if not (_finite_real(value) and value >= 0):  # type: ignore[operator]  # _finite_real checked a real
        raise ParameterError(f"{name} must be a finite real number >= 0; got {value!r}")
    return float(value)  # type: ignore[arg-type]  # a finite real: checked above


def check_positive_real(name: str, value: object) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number > 0: an epsilon, a scale."""
    if not (_finite_real(value) and value > 0):  # type: ignore[operator]  # _finite_real checked a real
        raise ParameterError(f"{name} must be a positive finite number; got {value!r}")
    return float(value)  # type: ignore[arg-type]  # a finite real: checked above
