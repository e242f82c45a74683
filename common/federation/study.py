"""Study specifications: what a miner asks of the owners, read from ``study.toml``.

A study names the schema every owner encodes its table with, the release (mechanism,
requirement, disclosure), how owners train, what the miner learns, the quorum and the deadline.
The same `StudySpec` message is created by the admin, stored by the miner, announced to the
owners and checked against each owner's local policy, so there is one parser for all of them.

``study.toml``::

    [study]
    id = "nursery-ppgen"             # optional; letters, digits, '.', '_' and '-'
    title = "PPGEN on Nursery"       # optional
    owners = ["site-a", "site-b"]    # optional; default: every owner on the miner's roster
    quorum = 2                       # optional; default: every invited owner
    deadline_minutes = 30            # or: deadline = 2026-11-23T12:00:00Z
    seed = 0

    [schema]
    dataset = "nursery"              # a bundled dataset's schema, or
    # file = "schema.json"           # a schema file (JSON or TOML), relative to study.toml; one that
                                     # says task = "regression" (`common.data.task`) makes a regression study

    [release]                        # required: a study without it, or without a mechanism, is refused
    mechanism = "apt"                # or "prune-leaf", "prune-parent", "kanon-rdt", "laplace-rdt", "none"
    requirement = "cl-diversity:c=5,l=3"   # kanon-rdt: "dps:k=5,beta=0.01,epsilon=2,trees=10"
                                     # laplace-rdt: "dp:epsilon=1,trees=10"
    disclosure = "hit_miss"          # or "counts" (kanon-rdt, laplace-rdt: "counts" only)

    [training]
    learner = "admissible"           # or "multiway", "cart"; kanon-rdt and the dp mechanisms train their own trees
    max_depth = 10                   # optional; kanon-rdt, dp mechanisms: required, the depth of every tree
    min_samples_leaf = 1
    category_split = "either"        # optional, admissible only: "grouped", "binary" or "either"
    pairing = "deferred"             # optional, admissible only: "deferred" or "eager"
    confidence = 0.25                # optional, admissible only: C4.5 pruning, or "none" for the grown tree

A ``dps`` requirement goes with mechanism ``kanon-rdt`` (or its ``kanon-rdt-log`` variant) and no
other, a ``dp`` requirement with the noise-based mechanisms (`common.mechanisms.registry`), and either asks for at most
`common.federation.wire.MAX_TREES` trees (what a miner decodes).

A regression study (its schema has a numeric ``target`` with public bounds) releases with a
mechanism of `common.mechanisms.registry` with a regression trainer only (``diffpets`` and a ``dp:``
requirement): owners release DiffPETs regression forests, and the miner learns regression global
models (``regression-tree``, ``random-forest``) scored by RMSE and MAE.

    [mining]
    global_models = ["decision-tree", "naive-bayes"]  # regression: ["regression-tree", "random-forest"]
    pgen_scale = 10
    class_assignment = "exact"       # or "sample"
    off_path = "uniform"             # or "marginal", "class", "path": attributes a path leaves free drawn from
                                     # the released paths' own law (`miner_node.offpath`)
    on_path = "uniform"              # the paper's, and the default; or "class": values inside a path's allowed
                                     # category set drawn from the class law all released paths determine
                                     # (`miner_node.onpath`), the inference across leaves the owners meant to hide
    evaluation = "test.csv"          # optional held-out table, sent to the miner (never to owners)

    [global_models]                  # optional: how the miner sets each global model's hyperparameters
    decision-tree = "auto"           # cross-validated on the pseudo-data (never on raw or evaluation rows)
    naive-bayes = "fixed"            # the built-in rule (a dp study's decision tree: its leaf floor)
    random-forest = { min_samples_leaf = 0.001 }   # given values (`common.federation.global_model_settings`)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import AwareDatetime, Field, model_validator

from common.data.regression import RegressionSchema
from common.data.schema import Schema, SchemaError
from common.federation.config_file import ConfigModel, at_key, read_toml, validate_config
from common.federation.global_model_settings import check_settings, describe_settings, settings_to_pb
from common.federation.pb import federation_pb2 as fpb
from common.federation.wire import (
    MAX_TREES,
    WireError,
    disclosure_from_pb,
    disclosure_to_pb,
    schema_from_pb,
    schema_to_pb,
)
from common.mechanisms import registry
from common.mechanisms.dpea_nb import MECHANISM as DPEA_NB
from common.mechanisms.dpea_nb import RELEASE_MODEL as DPEA_NB_MODEL
from common.mechanisms.registry import regression_refusal
from common.mechanisms.release import default_learner
from common.privacy.requirements import DP, DPS, Requirement, RequirementError, parse_requirement
from common.trees.learners import CATEGORY_SPLITS, PAIRINGS, UNPRUNED, admissible_params
from common.trees.learners import LEARNERS as TREE_LEARNERS

__all__ = [
    "StudyError",
    "StudyFile",
    "STUDY_ID",
    "load_study_file",
    "spec_from_mapping",
    "spec_schema",
    "spec_requirement",
    "spec_admissible",
    "spec_on_path",
    "spec_learner_options",
    "describe_spec",
    "new_study_id",
    "check_spec",
]

STUDY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LEARNERS = tuple(sorted(TREE_LEARNERS))
CLASS_ASSIGNMENTS = ("exact", "sample")
#: PGEN's values for attributes a path leaves free (`miner_node.offpath`): the paper's uniform draw, or the
#: law the released paths that constrain the attribute disclose: pooled, given the class, or given the path's region.
OFF_PATH_MODES = ("uniform", "marginal", "class", "path")
#: PGEN's values inside a path's allowed category set (`miner_node.onpath`): the paper's uniform draw, or the
#: class-conditional law every released path together determines (EM).
ON_PATH_MODES = ("uniform", "class")


class StudyError(ValueError):
    """A study file or spec that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class StudyFile:
    """A parsed study file: the spec and the local evaluation table to send along (if any)."""

    spec: fpb.StudySpec
    evaluation: Path | None


def new_study_id() -> str:
    """A fresh study id, ``study-`` plus the UTC time and 6 random hex digits."""
    import secrets

    return f"study-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


class _StudyTable(ConfigModel):
    id: str = ""
    """The study id (letters, digits, '.', '_' and '-'); default: a fresh one."""
    title: str = ""
    """A title for people."""
    owners: list[str] = []
    """Invited owners; default: every owner on the miner's roster."""
    quorum: Annotated[int, Field(ge=0)] = 0
    """Answers needed to mine; 0: every invited owner."""
    deadline: Annotated[AwareDatetime | None, Field(
        description="a TOML datetime with a time zone, e.g. 2026-11-23T12:00:00Z")] = None
    """When the study stops waiting (or give `deadline_minutes`)."""
    deadline_minutes: Annotated[float | None, Field(gt=0, allow_inf_nan=False)] = None
    """Minutes from creation until the deadline (default 30)."""
    seed: Annotated[int, Field(ge=0)] = 0
    """The study's public seed: learners' tie-breaking, PGEN and the global models (never a mechanism's secret noise)."""

    @model_validator(mode="after")
    def _one_deadline(self) -> _StudyTable:
        if self.deadline is not None and self.deadline_minutes is not None:
            raise ValueError("sets deadline and deadline_minutes; give one of them")
        return self

    def deadline_at(self, now: datetime) -> datetime:
        """The deadline: the one given, else ``deadline_minutes`` (default 30) after ``now``."""
        return self.deadline or now + timedelta(minutes=self.deadline_minutes or 30)


class _SchemaTable(ConfigModel):
    dataset: str | None = None
    """A bundled dataset's schema (give this or `file`)."""
    file: str | None = None
    """A schema file (JSON or TOML), relative to study.toml; `task = "regression"` in it makes a regression study."""

    @model_validator(mode="after")
    def _one_source(self) -> _SchemaTable:
        if (self.dataset is None) == (self.file is None):
            raise ValueError("needs exactly one of dataset = NAME or file = PATH")
        return self

    def load(self, base: Path, where: str) -> Schema | RegressionSchema:
        """The bundled dataset's schema, or the schema file's (relative to ``base``)."""
        from common.data.datasets import bundled_schema
        from common.data.task import load_schema

        try:
            return bundled_schema(self.dataset) if self.dataset is not None else load_schema(base / str(self.file))
        except (SchemaError, KeyError, ValueError) as exc:
            raise StudyError(f"{where} [schema]: {exc}") from None


class _ReleaseTable(ConfigModel):
    mechanism: str  # which mechanisms exist is `check_spec`'s (and the registry's) to say
    """The release mechanism (the registry's names: `modelshare release --help`); required: no mechanism is chosen for a study (`none` releases the trained tree unprotected)."""
    requirement: str | None = None
    """The requirement it must meet, e.g. `cl-diversity:c=5,l=3`, `dps:k=5,beta=0.1,epsilon=2,trees=10`, `dp:epsilon=1,trees=10`."""
    disclosure: Literal["counts", "hit_miss"] = "counts"
    """What released trees disclose per node; whole-release mechanisms release `counts` only."""


class _TrainingTable(ConfigModel):
    learner: str | None = None
    """The owners' local learner (`admissible`, `multiway` or `cart`); default `admissible` (grown to the requirement) for the path mechanisms, `multiway` otherwise; whole-release mechanisms train their own trees."""
    max_depth: Annotated[int | None, Field(ge=1)] = None
    """Depth limit of the owners' trees; required by whole-release mechanisms (the depth of every tree)."""
    min_samples_leaf: Annotated[int, Field(ge=1)] = 1
    """Minimum leaf size of the owners' trees."""
    category_split: Literal[CATEGORY_SPLITS] | None = None  # type: ignore[valid-type]
    """The admissible learner only: a categorical split is a branch per (grouped) category (`grouped`), two groups (`binary`) or the better of the two by gain ratio (`either`); default `either` under k-anonymity, `grouped` otherwise."""
    pairing: Literal[PAIRINGS] | None = None  # type: ignore[valid-type]
    """The admissible learner only: where a category that may not stand alone is grouped, `deferred` (only where grouping pays, the partner chosen per subtree; the default) or `eager` (at the first node whose criterion picks its attribute)."""
    confidence: Annotated[float, Field(gt=0, lt=1)] | Literal["none"] | None = None
    """The admissible learner only: C4.5's pruning confidence (0 < CF < 1; default 0.25, no pruning under k-anonymity), or "none" to release the grown tree (every leaf meets the requirement by construction; APT and the audit still check it)."""


class _MiningTable(ConfigModel):
    global_models: list[str] | None = None  # None: the task's default
    """Global models the miner learns from the pooled pseudo-data; default: the task's. A classification study may
    also list "tree-vote", the released trees' vote, which the miner builds from the releases themselves, and a
    dpea-nb study "calibrated-nb", the releases' calibrated naive Bayes."""
    pgen_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 10.0
    """PGEN rows per disclosed tuple (1: the paper's hit + miss per path)."""
    class_assignment: str = "exact"
    """PGEN's class assignment: `exact` (each path's counts reproduced) or `sample`."""
    off_path: str = "uniform"
    """PGEN's values for attributes a path leaves free: `uniform` over the public domain (the paper's), or drawn from the law the released paths that constrain the attribute disclose, `marginal` (pooled), `class` (given the row's class) or `path` (given the region the row's path fixes, the other paths weighted by their overlap with it); classification only."""
    on_path: str | None = None
    """PGEN's values of a categorical attribute inside the category set a path allows (default `uniform`): `uniform` in the set (the paper's), or `class`, drawn from the attribute's class-conditional law estimated by EM over every released path and restricted to the set (values a path leaves free follow off_path); classification only, not for dpea-nb; `class` carries into the global models the inference across leaves and owners that (c,l)-diversity is meant to hide."""
    evaluation: str | None = None
    """A held-out table sent to the miner (never to owners) to score the global models."""


class _StudyFile(ConfigModel):
    """``study.toml`` as written (module docstring)."""

    study: _StudyTable = _StudyTable()
    schema_: Annotated[_SchemaTable, Field(alias="schema")]
    release: _ReleaseTable
    """How each owner's model is made safe; required, so that no study releases under a mechanism nobody chose."""
    training: _TrainingTable = _TrainingTable()
    mining: _MiningTable = _MiningTable()
    global_models: Annotated[dict[str, Any], Field(
        description='a table: MODEL = "auto", "fixed" or { PARAMETER = VALUE, ... }')] = {}  # checked by check_settings
    """How the miner sets each global model's hyperparameters: "auto" (cross-validated on the pseudo-data; the decision tree's default), "fixed" (the built-in rule; other models' default) or given values. Parameters: decision-tree and rules min_samples_leaf (rows, or a share < 1), max_depth, criterion; naive-bayes alpha; random-forest min_samples_leaf, max_depth, n_estimators; gradient-boosting min_samples_leaf, max_depth, learning_rate, max_iter, max_leaf_nodes, l2_regularization; regression-tree min_samples_leaf, max_depth. On a miner's dask engine the parameters map onto xgboost's; there gradient-boosting min_samples_leaf and a criterion other than gini have no equivalent and fail the study (docs/scale-out.md)."""

    @model_validator(mode="before")
    @classmethod
    def _release_named(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "release" not in data:
            raise ValueError("has no [release] table: name the mechanism (and its requirement) that makes each "
                             "owner's model safe, e.g. mechanism = \"apt\", requirement = \"cl-diversity:c=5,l=2\", "
                             "disclosure = \"hit_miss\" (what `modelshare simulate` uses); `modelshare study init` "
                             "writes a study.toml with them")
        return data


def spec_from_mapping(data: Mapping[str, Any], *, base: Path = Path("."), where: str = "study", now: datetime | None = None) -> StudyFile:
    """Build and check a StudySpec from the parsed TOML tables of a study file."""
    file = validate_config(data, _StudyFile, StudyError, where=where)
    study, release, training, mining = file.study, file.release, file.training, file.mining
    schema = file.schema_.load(base, where)
    spec = fpb.StudySpec(
        study_id=study.id or new_study_id(),
        title=study.title,
        schema=schema_to_pb(schema),
        schema_fingerprint=schema.fingerprint,
        mechanism=release.mechanism,
        disclosure=disclosure_to_pb(release.disclosure),
        learner=training.learner or default_learner(release.mechanism),
        min_samples_leaf=training.min_samples_leaf,
        pgen_scale=mining.pgen_scale,
        class_assignment=mining.class_assignment,
        pgen_off_path=mining.off_path,
        pgen_on_path=mining.on_path or "",
        quorum=study.quorum,
        seed=study.seed,
        owners=study.owners,
    )
    if release.requirement is not None:
        spec.requirement = release.requirement
    if training.max_depth is not None:
        spec.max_depth = training.max_depth
    if training.category_split is not None:
        spec.category_split = training.category_split
    if training.pairing is not None:
        spec.pairing = training.pairing
    if training.confidence == UNPRUNED:
        spec.unpruned = True
    elif training.confidence is not None:
        spec.confidence = training.confidence
    default_models = ["regression-tree"] if isinstance(schema, RegressionSchema) else ["decision-tree"]
    spec.global_models.extend(default_models if mining.global_models is None else mining.global_models)
    try:
        settings = settings_to_pb(file.global_models)
    except ValueError as exc:
        raise StudyError(f"{where}: {exc}") from None
    for name, setting in settings.items():
        spec.global_model_settings[name].CopyFrom(setting)
    spec.deadline.FromDatetime(study.deadline_at(now or datetime.now(timezone.utc)))
    check_spec(spec, where=where)
    return StudyFile(spec, None if mining.evaluation is None else _evaluation_file(base, mining.evaluation, where))


def _evaluation_file(base: Path, value: str, where: str) -> Path:
    """The evaluation table ``[mining] evaluation`` names (relative to the study file); it must be a file."""
    path = base / value
    if not path.is_file():
        why = "is a directory, not a file" if path.is_dir() else "no such file"
        raise StudyError(f"{at_key(where, ('mining', 'evaluation'))} = {value!r}: {why} ({path})")
    return path


def load_study_file(path: str | Path) -> StudyFile:
    """Read ``study.toml``; every error names the file and the field."""
    path = Path(path)
    data = read_toml(path, "study file", StudyError)
    return spec_from_mapping(data, base=path.parent, where=str(path))


def spec_schema(spec: fpb.StudySpec) -> Schema | RegressionSchema:
    """The study's schema (a `RegressionSchema` for a regression study), checked against the spec's fingerprint."""
    try:
        schema = schema_from_pb(spec.schema, where="study schema")
    except WireError as exc:
        raise StudyError(str(exc)) from None
    if schema.fingerprint != spec.schema_fingerprint:
        raise StudyError("study schema_fingerprint does not match its schema")
    return schema


def spec_requirement(spec: fpb.StudySpec, schema: Schema | RegressionSchema | None = None) -> Requirement | None:
    """The study's parsed requirement (None when it asks for none)."""
    if not spec.HasField("requirement"):
        return None
    n_classes = schema.n_classes if isinstance(schema, Schema) else None
    try:
        return parse_requirement(spec.requirement, n_classes=n_classes)
    except RequirementError as exc:
        raise StudyError(f"study requirement: {exc}") from None


def spec_on_path(spec: fpb.StudySpec) -> str:
    """The study's on-path mode: its ``on_path`` if set, else ``"uniform"`` (the paper's PGEN).

    ``"class"`` is a study's explicit choice, never a default: its gain is the class law that every
    released path together determines, the inference across leaves and across owners a (c,l)-diverse
    release is meant to hide (docs/privacy.md, "A reader of the whole release"; EXPERIMENTS.md measures
    what it recovers from guarded releases).
    """
    return spec.pgen_on_path or "uniform"


def spec_admissible(spec: fpb.StudySpec) -> dict[str, str | float]:
    """The admissible learner's options the study sets, as study.toml's [training] writes them (unchecked)."""
    options: dict[str, str | float] = {key: getattr(spec, key) for key in ("pairing", "category_split")
                                       if spec.HasField(key)}
    pruning = spec.WhichOneof("pruning")
    if pruning is not None:
        options["confidence"] = UNPRUNED if pruning == "unpruned" else spec.confidence
    return options


def spec_learner_options(spec: fpb.StudySpec) -> dict[str, Any]:
    """`spec_admissible` checked and as the learner's keyword arguments (`common.trees.learners.admissible_params`).

    Raises
    ------
    ValueError
        A value out of its range, or an option set for a learner other than ``admissible``.
    """
    return admissible_params(spec.learner, **spec_admissible(spec))  # type: ignore[arg-type]


def check_spec(spec: fpb.StudySpec, *, where: str = "study") -> None:
    """Field-level checks every party can make without the release registry or the roster."""
    if not STUDY_ID.match(spec.study_id):
        raise StudyError(f"{where}: study id {spec.study_id!r} must match {STUDY_ID.pattern}")
    try:
        schema = spec_schema(spec)
        requirement = spec_requirement(spec, schema)
        disclosure_from_pb(spec.disclosure, where="disclosure")
    except (StudyError, WireError) as exc:
        raise StudyError(f"{where}: {exc}") from None
    if isinstance(schema, RegressionSchema) and (why := regression_refusal(spec.mechanism, schema.target.name)):
        raise StudyError(f"{where}: {why}")
    _check_whole_release(spec, requirement, where)
    if spec.learner not in LEARNERS:
        raise StudyError(f"{where}: learner must be one of {list(LEARNERS)}, got {spec.learner!r}")
    try:
        spec_learner_options(spec)
    except ValueError as exc:
        raise StudyError(f"{where} [training]: {exc}") from None
    if spec.class_assignment not in CLASS_ASSIGNMENTS:
        raise StudyError(f"{where}: class_assignment must be one of {list(CLASS_ASSIGNMENTS)}, got {spec.class_assignment!r}")
    if spec.pgen_off_path not in ("", *OFF_PATH_MODES):
        raise StudyError(f"{where}: off_path must be one of {list(OFF_PATH_MODES)}, got {spec.pgen_off_path!r}")
    if isinstance(schema, RegressionSchema) and spec.pgen_off_path not in ("", "uniform"):
        raise StudyError(f"{where}: off_path {spec.pgen_off_path!r} needs class labels; a regression study's PGEN "
                         "draws uniformly (off_path = \"uniform\")")
    if spec.pgen_on_path not in ("", *ON_PATH_MODES):
        raise StudyError(f"{where}: on_path must be one of {list(ON_PATH_MODES)}, got {spec.pgen_on_path!r}")
    if isinstance(schema, RegressionSchema) and spec.pgen_on_path not in ("", "uniform"):
        raise StudyError(f"{where}: on_path {spec.pgen_on_path!r} needs class labels; a regression study's PGEN "
                         "draws uniformly (on_path = \"uniform\")")
    if spec.min_samples_leaf < 1 or (spec.HasField("max_depth") and spec.max_depth < 1):
        raise StudyError(f"{where}: min_samples_leaf and max_depth must be at least 1")
    if not spec.pgen_scale > 0:
        raise StudyError(f"{where}: pgen_scale must be positive, got {spec.pgen_scale}")
    if not spec.global_models or not all(isinstance(m, str) and m for m in spec.global_models):
        raise StudyError(f"{where}: global_models must list at least one model name")
    if spec.mechanism == DPEA_NB and spec.pgen_off_path not in ("", "uniform"):
        raise StudyError(f"{where}: off_path {spec.pgen_off_path!r} does not apply to {DPEA_NB!r} releases, whose pseudo "
                         "rows draw the free attributes from the released class histograms; leave off_path unset")
    if spec.mechanism == DPEA_NB and spec.pgen_on_path not in ("", "uniform"):
        raise StudyError(f"{where}: on_path {spec.pgen_on_path!r} does not apply to {DPEA_NB!r} releases, whose pseudo "
                         "rows come from the released class histograms; leave on_path unset")
    if DPEA_NB_MODEL in spec.global_models and spec.mechanism != DPEA_NB:
        raise StudyError(f"{where}: global model {DPEA_NB_MODEL!r} is built from {DPEA_NB!r} releases; this study's "
                         f"mechanism is {spec.mechanism!r}")
    faults = check_settings(spec)
    if faults:
        raise StudyError("\n".join(f"{where}: {fault}" for fault in faults))
    if len(set(spec.owners)) != len(spec.owners):
        raise StudyError(f"{where}: owners lists a name twice")
    if spec.owners and spec.quorum > len(spec.owners):
        raise StudyError(f"{where}: quorum {spec.quorum} exceeds the {len(spec.owners)} invited owners")


def _check_whole_release(spec: fpb.StudySpec, requirement: Requirement | None, where: str) -> None:
    """A ``dps`` or ``dp`` requirement and its mechanisms go together (their `common.mechanisms.registry` family),
    with counts disclosure, a tree depth and few enough trees."""
    if isinstance(requirement, (DPS, DP)) and spec_schema(spec).data_derived:
        raise StudyError(f"{where}: requirement {requirement} needs a public domain; the study's schema was read from a "
                         "table (domain: data-derived). Review it (`modelshare schema infer` drafts say what came "
                         "from the data) and remove its `domain` line once its bounds are public")
    if isinstance(requirement, (DPS, DP)):
        meets = registry.meeting(requirement)
        if spec.mechanism not in meets:
            raise StudyError(f"{where}: requirement {requirement} is met only by mechanism "
                             f"{' or '.join(repr(m) for m in meets)}, not {spec.mechanism!r}")
    if spec.mechanism not in registry.names(kind="whole-release"):
        return
    record = registry.get(spec.mechanism)
    if requirement is None or not record.accepts_requirement(requirement):
        raise StudyError(f"{where}: mechanism {spec.mechanism!r} needs a requirement {record.requirement_form}")
    assert isinstance(requirement, (DPS, DP))
    if requirement.trees > MAX_TREES:
        raise StudyError(f"{where}: requirement {requirement} asks for {requirement.trees} trees; "
                         f"a miner accepts at most {MAX_TREES} per model")
    if record.max_trees is not None and requirement.trees > record.max_trees:
        raise StudyError(f"{where}: mechanism {spec.mechanism!r} releases at most {record.max_trees} tree(s) of its "
                         f"own; requirement {requirement} asks for {requirement.trees}")
    if record.max_depth is not None and spec.HasField("max_depth") and spec.max_depth > record.max_depth:
        raise StudyError(f"{where}: mechanism {spec.mechanism!r} trains trees of depth at most {record.max_depth}; "
                         f"[training] max_depth is {spec.max_depth}")
    if spec.disclosure != disclosure_to_pb("counts"):
        raise StudyError(f"{where}: mechanism {spec.mechanism!r} discloses class counts; set disclosure = \"counts\"")
    if not spec.HasField("max_depth"):
        raise StudyError(f"{where}: mechanism {spec.mechanism!r} needs [training] max_depth, the depth of its trees")


def describe_spec(spec: fpb.StudySpec) -> dict[str, Any]:
    """A JSON-ready summary of a spec (the schema by fingerprint only)."""
    return {
        "id": spec.study_id,
        "title": spec.title,
        "schema_fingerprint": spec.schema_fingerprint,
        "task": "regression" if spec.schema.HasField("target") else "classification",
        "class": spec.schema.target.name if spec.schema.HasField("target") else spec.schema.class_name,
        "mechanism": spec.mechanism,
        "requirement": spec.requirement if spec.HasField("requirement") else None,
        "disclosure": disclosure_from_pb(spec.disclosure, where="disclosure"),
        "learner": spec.learner,
        "max_depth": spec.max_depth if spec.HasField("max_depth") else None,
        "min_samples_leaf": spec.min_samples_leaf,
        **spec_admissible(spec),
        "global_models": list(spec.global_models),
        "global_model_settings": describe_settings(spec),
        "pgen_scale": spec.pgen_scale,
        "off_path": spec.pgen_off_path or "uniform",
        "on_path": spec_on_path(spec),
        "owners": list(spec.owners),
        "quorum": spec.quorum,
        "deadline": spec.deadline.ToDatetime(tzinfo=timezone.utc).isoformat(),
        "seed": spec.seed,
    }
