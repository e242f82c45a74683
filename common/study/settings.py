"""How a study sets its global models' hyperparameters: study.toml's ``[global_models]`` table, decoded.

Each global model a study learns (``[mining] global_models``) may get one setting::

    [global_models]
    decision-tree = "auto"                       # chosen by cross-validation on the pseudo-data
    naive-bayes = "fixed"                        # the miner's built-in rule (the paper's models)
    random-forest = { min_samples_leaf = 0.001, n_estimators = 200 }   # these values ("given")

A model without a setting gets the miner's default for it (`modelshare.miner_node.selection.DEFAULT_MODES`).
``"auto"`` never reads anyone's raw rows nor the evaluation table: the miner cross-validates on the
pooled pseudo-data it learns from (BASIS gets the same setting on the raw training rows:
`modelshare.miner_node.selection.choose_basis`). The parameters a study may give are those of
`MODEL_PARAMETERS`, each with the values it accepts; `check_settings` names every fault. The
settings are the miner's business: the admin (reading study.toml) and the miner (at ``CreateStudy``)
check them, never an owner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AUTO", "FIXED", "GIVEN", "MODES", "MODEL_PARAMETERS", "WITHOUT_SETTINGS", "ModelPlan", "ModelSetting",
           "ParameterValue", "check_settings", "settings_from_mapping"]

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
#: (`modelshare.miner_node.global_models.RELEASE_MODELS`, whose test keeps the two in step).
WITHOUT_SETTINGS: tuple[str, ...] = ("tree-vote", "calibrated-nb", "class-prior")


@dataclass(frozen=True)
class ModelSetting:
    """One global model's setting: a mode, and for ``"given"`` its parameter values."""

    mode: str
    parameters: Mapping[str, ParameterValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", dict(self.parameters))

    def describe(self) -> str | dict[str, ParameterValue]:
        """JSON-ready: the mode, or the given parameters."""
        return dict(self.parameters) if self.mode == GIVEN else self.mode


def settings_from_mapping(settings: Mapping[str, Any]) -> dict[str, ModelSetting]:
    """study.toml's ``[global_models]`` as settings: a mode, or given parameters.

    Raises ValueError naming the model (and parameter) whose value is neither a string nor a table
    of numbers, strings and booleans; whether the names and values make sense is `check_settings`'.
    """
    out = {}
    for name, value in settings.items():
        where = f"[global_models] {name}"
        if isinstance(value, str):
            out[name] = ModelSetting(value)
            continue
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: must be \"auto\", \"fixed\" or a table of parameters, got {value!r}")
        for key, item in value.items():
            if not isinstance(item, (bool, int, float, str)):
                raise ValueError(f"{where}: {key} must be a number, a string or true/false, got {item!r}")
        out[name] = ModelSetting(GIVEN, dict(value))
    return out


def check_settings(models: tuple[str, ...] | list[str], settings: Mapping[str, ModelSetting]) -> list[str]:
    """What is wrong with a study's global-model settings, one sentence per fault naming the model and key."""
    faults = []
    for name in sorted(settings):
        setting = settings[name]
        where = f"[global_models] {name}"
        if name in WITHOUT_SETTINGS:
            faults.append(f"{where}: {name} is built from the released trees and has no hyperparameters; drop its "
                          "setting")
            continue
        if name not in MODEL_PARAMETERS:
            faults.append(f"{where}: unknown global model {name!r}; known models: {', '.join(MODEL_PARAMETERS)}")
            continue
        if name not in models:
            faults.append(f"{where}: the study does not learn {name!r} (global models: "
                          f"{', '.join(models)}); add it to [mining] global_models or drop its setting")
        if setting.mode not in MODES:
            faults.append(f"{where}: must be \"auto\", \"fixed\" or a table of parameters, got {setting.mode!r}")
            continue
        if setting.mode != GIVEN and setting.parameters:
            faults.append(f"{where}: mode {setting.mode!r} takes no parameters")
        allowed = MODEL_PARAMETERS[name]
        for key in sorted(setting.parameters):
            value = setting.parameters[key]
            if key not in allowed:
                faults.append(f"{where}: unknown parameter {key!r}; allowed parameters of {name}: {', '.join(allowed)}")
                continue
            text, ok = _KINDS[allowed[key]]
            if not ok(value):
                faults.append(f"{where}: {key} must be {text}, got {value!r}")
    return faults


@dataclass(frozen=True)
class ModelPlan:
    """What the miner's model choice reads of a study: its global models, their settings, its seed and mechanism.

    A `modelshare.common.study.Study` gives its own (`Study.model_plan`); the in-process pipeline and the experiments
    build one directly, so that they choose hyperparameters by the same code as the miner.
    """

    models: tuple[str, ...]
    settings: Mapping[str, ModelSetting]
    seed: int
    mechanism: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", tuple(self.models))
        object.__setattr__(self, "settings", dict(self.settings))

    @classmethod
    def checked(cls, models: tuple[str, ...] | list[str], settings: Mapping[str, Any], *, seed: int,
                mechanism: str) -> ModelPlan:
        """A plan from study.toml-form settings; raises ValueError naming every fault, as a study's check would."""
        decoded = settings_from_mapping(settings)
        if faults := check_settings(tuple(models), decoded):
            raise ValueError("; ".join(faults))
        return cls(tuple(models), decoded, seed, mechanism)

    def setting(self, name: str, default_mode: str) -> tuple[str, Mapping[str, ParameterValue]]:
        """Model ``name``'s mode and given parameters; a model without a setting gets ``default_mode``."""
        setting = self.settings.get(name)
        return (default_mode, {}) if setting is None else (setting.mode, setting.parameters)

    def describe(self) -> dict[str, Any]:
        """The settings as JSON-ready data: per model, a mode or the given parameters."""
        return {name: self.settings[name].describe() for name in sorted(self.settings)}
