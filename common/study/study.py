"""A study, decoded: the one value every party reads a study from, checked once when it is built.

The miner's admin writes a study in ``study.toml`` (`modelshare.common.federation.study`); it travels as the
``StudySpec`` wire message (`modelshare.common.federation.serde` decodes it); owners, the miner, the in-process
pipeline and the experiments all take the `Study` it decodes into, so the schema is decoded and its
fingerprint checked once, and the requirement is parsed once, with the schema's class count.

`Study` validates on construction what every party can check without the roster or the miner's
models (`Study.__post_init__`); what only the miner's side needs, its global models and their
settings, is `Study.mining_faults`, run by the admin and at ``CreateStudy``, never by an owner.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.class_prior import DEFAULT_PRIOR_SHARE, check_prior_share
from modelshare.common.privacy.requirements import DP, DPS, Requirement
from modelshare.common.study.settings import ModelPlan, ModelSetting, check_settings
from modelshare.common.trees.learner_options import LEARNER_NAMES, admissible_params
from modelshare.common.trees.tree import Disclosure

__all__ = ["CLASS_ASSIGNMENTS", "LEARNERS", "MAX_TREES", "OFF_PATH_MODES", "ON_PATH_MODES", "STUDY_ID", "Study",
           "StudyError", "Training"]

STUDY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LEARNERS = LEARNER_NAMES
CLASS_ASSIGNMENTS = ("exact", "sample")
#: PGEN's values for attributes a path leaves free (`modelshare.miner_node.offpath`): the paper's uniform draw, or the
#: law the released paths that constrain the attribute disclose: pooled, given the class, or given the path's region.
OFF_PATH_MODES = ("uniform", "marginal", "class", "path")
#: PGEN's values inside a path's allowed category set (`modelshare.miner_node.onpath`): the paper's uniform draw, or the
#: class-conditional law every released path together determines (EM).
ON_PATH_MODES = ("uniform", "class")
MAX_TREES = 64
"""Most trees one released model may carry: the miner decodes with this limit, and a study may not ask
for more. The miner's node limit applies to the sum over all trees."""


class StudyError(ValueError):
    """A study that cannot be used; the message names the file or message and the field."""


@dataclass(frozen=True)
class Training:
    """How owners train their local trees (study.toml's ``[training]``); the admissible options are that learner's."""

    learner: str
    min_samples_leaf: int = 1
    max_depth: int | None = None
    pairing: str | None = None
    category_split: str | None = None
    confidence: float | str | None = None  # C4.5's pruning confidence, or UNPRUNED

    def admissible(self) -> dict[str, str | float]:
        """The admissible learner's options the study sets, as study.toml writes them."""
        options = {"pairing": self.pairing, "category_split": self.category_split, "confidence": self.confidence}
        return {key: value for key, value in options.items() if value is not None}

    def learner_params(self) -> dict[str, Any]:
        """The learner's keyword arguments: its limits and (admissible only) its checked grouping and pruning options.

        Raises ValueError for a value out of its range, or an option set for a learner other than ``admissible``.
        """
        params: dict[str, Any] = {"min_samples_leaf": self.min_samples_leaf,
                                  # the ignore below: admissible() holds its keywords
                                  **admissible_params(self.learner, **self.admissible())}  # type: ignore[arg-type]
        if self.max_depth is not None:
            params["max_depth"] = self.max_depth
        return params


@dataclass(frozen=True)
class Study:
    """One study, decoded and checked: what to release, how owners train, how the miner mines, who answers by when."""

    study_id: str
    schema: Schema | RegressionSchema
    mechanism: str
    requirement: Requirement | None
    disclosure: Disclosure
    training: Training
    global_models: tuple[str, ...]
    model_settings: Mapping[str, ModelSetting] = field(default_factory=dict)
    pgen_scale: float = 10.0
    class_assignment: str = "exact"
    off_path: str = "uniform"
    on_path: str = "uniform"
    title: str = ""
    owners: tuple[str, ...] = ()
    quorum: int = 0
    deadline: datetime = datetime.fromtimestamp(0, timezone.utc)
    seed: int = 0
    max_message_bytes: int = 0  # set by the miner at creation (its config); 0: not yet set
    prior_share: float = DEFAULT_PRIOR_SHARE  # a dp release's share of epsilon on its class histogram (class_prior)

    def __post_init__(self) -> None:
        object.__setattr__(self, "global_models", tuple(self.global_models))
        object.__setattr__(self, "owners", tuple(self.owners))
        object.__setattr__(self, "model_settings", dict(self.model_settings))
        self._check()

    # ------------------------------------------------------------------ reading
    @property
    def regression(self) -> bool:
        """Whether the study's schema has a numeric target (a DiffPETs regression study)."""
        return isinstance(self.schema, RegressionSchema)

    @property
    def record(self) -> registry.Mechanism:
        """The study's mechanism's registry record."""
        return registry.get(self.mechanism)

    @property
    def family(self) -> str | None:
        """The mechanism's requirement family (None for a mechanism the registry does not know)."""
        return self.record.family if self.mechanism in registry.names() else None

    @property
    def model_plan(self) -> ModelPlan:
        """What the miner's model choice reads of the study (`modelshare.miner_node.selection`)."""
        return ModelPlan(self.global_models, self.model_settings, self.seed, self.mechanism)

    @property
    def requirement_text(self) -> str:
        """The requirement as a string, or ``no requirement``."""
        return "no requirement" if self.requirement is None else str(self.requirement)

    def mining_faults(self) -> list[str]:
        """What is wrong with the miner's side of the study (its global models' settings), one sentence each."""
        return check_settings(self.global_models, self.model_settings)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (the schema by fingerprint only)."""
        return {
            "id": self.study_id,
            "title": self.title,
            "schema_fingerprint": self.schema.fingerprint,
            "task": "regression" if self.regression else "classification",
            "class": self.schema.target.name if isinstance(self.schema, RegressionSchema) else self.schema.class_name,
            "mechanism": self.mechanism,
            "requirement": None if self.requirement is None else str(self.requirement),
            "disclosure": self.disclosure,
            **({"prior_share": self.prior_share} if self.family == "dp" else {}),
            "learner": self.training.learner,
            "max_depth": self.training.max_depth,
            "min_samples_leaf": self.training.min_samples_leaf,
            **self.training.admissible(),
            "global_models": list(self.global_models),
            "global_model_settings": self.model_plan.describe(),
            "pgen_scale": self.pgen_scale,
            "off_path": self.off_path,
            "on_path": self.on_path,
            "owners": list(self.owners),
            "quorum": self.quorum,
            "deadline": self.deadline.isoformat(),
            "seed": self.seed,
        }

    # ------------------------------------------------------------------ checks
    def _own_pseudo_data(self) -> bool:
        """Whether the study's mechanism has its own pseudo-data step (its registry record's ``pseudo_data``)."""
        return self.mechanism in registry.names() and self.record.pseudo_data is not None

    def _check(self) -> None:
        """Raise `StudyError` for the first field no party could use (each message names the field)."""
        if not STUDY_ID.match(self.study_id):
            raise StudyError(f"study id {self.study_id!r} must match {STUDY_ID.pattern}")
        try:
            object.__setattr__(self, "prior_share", check_prior_share(self.prior_share))
        except ValueError as exc:
            raise StudyError(str(exc)) from None
        if self.disclosure not in ("counts", "hit_miss"):
            raise StudyError(f"disclosure must be 'counts' or 'hit_miss', got {self.disclosure!r}")
        if isinstance(self.schema, RegressionSchema) and (
                why := registry.regression_refusal(self.mechanism, self.schema.target.name)):
            raise StudyError(why)
        self._check_whole_release()
        self._check_training()
        self._check_pgen()
        if not self.global_models or not all(isinstance(m, str) and m for m in self.global_models):
            raise StudyError("global_models must list at least one model name")
        for record in registry.mechanisms():
            if record.release_model in self.global_models and self.mechanism != record.name:
                raise StudyError(f"global model {record.release_model!r} is built from {record.name!r} releases; "
                                 f"this study's mechanism is {self.mechanism!r}")
        if len(set(self.owners)) != len(self.owners):
            raise StudyError("owners lists a name twice")
        if self.owners and self.quorum > len(self.owners):
            raise StudyError(f"quorum {self.quorum} exceeds the {len(self.owners)} invited owners")

    def _check_training(self) -> None:
        training = self.training
        if training.learner not in LEARNERS:
            raise StudyError(f"learner must be one of {list(LEARNERS)}, got {training.learner!r}")
        if training.min_samples_leaf < 1 or (training.max_depth is not None and training.max_depth < 1):
            raise StudyError("min_samples_leaf and max_depth must be at least 1")
        try:
            training.learner_params()
        except ValueError as exc:
            raise StudyError(f"[training]: {exc}") from None

    def _check_pgen(self) -> None:
        if self.class_assignment not in CLASS_ASSIGNMENTS:
            raise StudyError(f"class_assignment must be one of {list(CLASS_ASSIGNMENTS)}, "
                             f"got {self.class_assignment!r}")
        if self.off_path not in OFF_PATH_MODES:
            raise StudyError(f"off_path must be one of {list(OFF_PATH_MODES)}, got {self.off_path!r}")
        if self.on_path not in ON_PATH_MODES:
            raise StudyError(f"on_path must be one of {list(ON_PATH_MODES)}, got {self.on_path!r}")
        for key, value in (("off_path", self.off_path), ("on_path", self.on_path)):
            if self.regression and value != "uniform":
                raise StudyError(f"{key} {value!r} needs class labels; a regression study's PGEN draws uniformly "
                                 f"({key} = \"uniform\")")
            if value != "uniform" and self._own_pseudo_data():
                raise StudyError(f"{key} {value!r} does not apply to {self.mechanism!r} releases, whose pseudo rows "
                                 f"come from the mechanism's own pseudo-data step; leave {key} unset")
        if not self.pgen_scale > 0:
            raise StudyError(f"pgen_scale must be positive, got {self.pgen_scale}")

    def _check_whole_release(self) -> None:
        """A ``dps`` or ``dp`` requirement and its mechanisms go together (their registry family), with counts
        disclosure, a tree depth and few enough trees."""
        requirement = self.requirement
        if isinstance(requirement, (DPS, DP)) and self.schema.data_derived:
            raise StudyError(f"requirement {requirement} needs a public domain; the study's schema was read from a "
                             "table (domain: data-derived). Review it (`modelshare schema infer` drafts say what came "
                             "from the data) and remove its `domain` line once its bounds are public")
        if isinstance(requirement, (DPS, DP)):
            meets = registry.meeting(requirement)
            if self.mechanism not in meets:
                raise StudyError(f"requirement {requirement} is met only by mechanism "
                                 f"{' or '.join(repr(m) for m in meets)}, not {self.mechanism!r}")
        if self.mechanism not in registry.names(kind="whole-release"):
            return
        record = self.record
        if requirement is None or not record.accepts_requirement(requirement):
            raise StudyError(f"mechanism {self.mechanism!r} needs a requirement {record.requirement_form}")
        assert isinstance(requirement, (DPS, DP))
        depth = self.training.max_depth
        if requirement.trees > MAX_TREES:
            raise StudyError(f"requirement {requirement} asks for {requirement.trees} trees; "
                             f"a miner accepts at most {MAX_TREES} per model")
        if record.max_trees is not None and requirement.trees > record.max_trees:
            raise StudyError(f"mechanism {self.mechanism!r} releases at most {record.max_trees} tree(s) of its "
                             f"own; requirement {requirement} asks for {requirement.trees}")
        if record.max_depth is not None and depth is not None and depth > record.max_depth:
            raise StudyError(f"mechanism {self.mechanism!r} trains trees of depth at most {record.max_depth}; "
                             f"[training] max_depth is {depth}")
        if self.disclosure != "counts":
            raise StudyError(f"mechanism {self.mechanism!r} discloses class counts; set disclosure = \"counts\"")
        if depth is None:
            raise StudyError(f"mechanism {self.mechanism!r} needs [training] max_depth, the depth of its trees")

