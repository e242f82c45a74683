"""How a study sets its global models' hyperparameters: study.toml's ``[global_models]`` table and its wire form.

Each global model a study learns (``[mining] global_models``) may get one setting::

    [global_models]
    decision-tree = "auto"                       # chosen by cross-validation on the pseudo-data
    naive-bayes = "fixed"                        # the miner's built-in rule (the paper's models)
    random-forest = { min_samples_leaf = 0.001, n_estimators = 200 }   # these values ("given")

A model without a setting gets the miner's default for it (`miner_node.selection.DEFAULT_MODES`).
``"auto"`` never reads anyone's raw rows nor the evaluation table: the miner cross-validates on the
pooled pseudo-data it learns from. (A simulation's or experiment's BASIS, which alone holds the raw
training rows, gets the same setting on them: `miner_node.selection.choose_basis`.) The parameters a study may give are those of `MODEL_PARAMETERS`,
each with the values it accepts; anything else is an error naming the model and the parameter.
Both the admin (reading study.toml) and the miner (checking a spec it is sent) run `check_settings`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from common.federation.pb import federation_pb2 as fpb

__all__ = ["AUTO", "FIXED", "GIVEN", "MODES", "MODEL_PARAMETERS", "WITHOUT_SETTINGS", "ParameterValue", "check_settings",
           "parameter_to_pb", "parameter_from_pb", "settings_to_pb", "describe_settings"]

AUTO, FIXED, GIVEN = "auto", "fixed", "given"
MODES = (AUTO, FIXED, GIVEN)

ParameterValue = int | float | str | bool | None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "leaf": ("an integer >= 1 (rows) or a number in (0, 1) (a share of the rows)",
             lambda v: (_is_int(v) and v >= 1) or (isinstance(v, float) and 0 < v < 1)),
    "depth": ("an integer >= 1", lambda v: _is_int(v) and v >= 1),
    "count": ("an integer >= 1", lambda v: _is_int(v) and v >= 1),
    "nodes": ("an integer >= 2", lambda v: _is_int(v) and v >= 2),
    "positive": ("a positive number", lambda v: _is_number(v) and v > 0),
    "nonnegative": ("a number >= 0", lambda v: _is_number(v) and v >= 0),
    "criterion": ("'gini', 'entropy' or 'log_loss'", lambda v: v in ("gini", "entropy", "log_loss")),
}

_TREE = {"min_samples_leaf": "leaf", "max_depth": "depth"}

#: Per global model (classification and regression names alike), the parameters a study may set and their kind.
MODEL_PARAMETERS: dict[str, dict[str, str]] = {
    "decision-tree": {**_TREE, "criterion": "criterion"},
    "naive-bayes": {"alpha": "positive"},
    "random-forest": {**_TREE, "n_estimators": "count"},
    "rules": {**_TREE, "criterion": "criterion"},
    "gradient-boosting": {**_TREE, "learning_rate": "positive", "max_iter": "count", "max_leaf_nodes": "nodes",
                          "l2_regularization": "nonnegative"},
    "regression-tree": dict(_TREE),
}

#: Global models a study may list that have no setting: built from the releases, never fitted on rows
#: (`miner_node.global_models.RELEASE_MODELS`, whose test keeps the two in step).
WITHOUT_SETTINGS: tuple[str, ...] = ("tree-vote", "calibrated-nb")


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


def settings_to_pb(settings: Mapping[str, Any]) -> dict[str, fpb.GlobalModelSetting]:
    """study.toml's ``[global_models]`` as the spec's ``global_model_settings``: a mode, or given parameters.

    Raises ValueError naming the model (and parameter) whose value is neither a string nor a table
    of numbers, strings and booleans; whether the names and values make sense is `check_settings`'.
    """
    out = {}
    for name, value in settings.items():
        where = f"[global_models] {name}"
        if isinstance(value, str):
            out[name] = fpb.GlobalModelSetting(mode=value)
            continue
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: must be \"auto\", \"fixed\" or a table of parameters, got {value!r}")
        for key, item in value.items():
            if not isinstance(item, (bool, int, float, str)):
                raise ValueError(f"{where}: {key} must be a number, a string or true/false, got {item!r}")
        out[name] = fpb.GlobalModelSetting(mode=GIVEN, parameters={k: parameter_to_pb(v) for k, v in value.items()})
    return out


def check_settings(spec: fpb.StudySpec) -> list[str]:
    """What is wrong with a spec's global-model settings, one sentence per fault naming the model and key."""
    faults = []
    for name in sorted(spec.global_model_settings):
        setting = spec.global_model_settings[name]
        where = f"[global_models] {name}"
        if name in WITHOUT_SETTINGS:
            faults.append(f"{where}: {name} is built from the released trees and has no hyperparameters; drop its "
                          "setting")
            continue
        if name not in MODEL_PARAMETERS:
            faults.append(f"{where}: unknown global model {name!r}; known models: {', '.join(MODEL_PARAMETERS)}")
            continue
        if name not in spec.global_models:
            faults.append(f"{where}: the study does not learn {name!r} (global models: "
                          f"{', '.join(spec.global_models)}); add it to [mining] global_models or drop its setting")
        if setting.mode not in MODES:
            faults.append(f"{where}: must be \"auto\", \"fixed\" or a table of parameters, got {setting.mode!r}")
            continue
        if setting.mode != GIVEN and setting.parameters:
            faults.append(f"{where}: mode {setting.mode!r} takes no parameters")
        allowed = MODEL_PARAMETERS[name]
        for key in sorted(setting.parameters):
            value = parameter_from_pb(setting.parameters[key])
            if key not in allowed:
                faults.append(f"{where}: unknown parameter {key!r}; allowed parameters of {name}: {', '.join(allowed)}")
                continue
            text, ok = _KINDS[allowed[key]]
            if not ok(value):
                faults.append(f"{where}: {key} must be {text}, got {value!r}")
    return faults


def describe_settings(spec: fpb.StudySpec) -> dict[str, Any]:
    """The settings as JSON-ready data: a mode, or the given parameters."""
    return {name: (s.mode if s.mode != GIVEN else {k: parameter_from_pb(v) for k, v in s.parameters.items()})
            for name, s in sorted(spec.global_model_settings.items())}
