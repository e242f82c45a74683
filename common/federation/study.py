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
                                     # says task = "regression" (`modelshare.common.data.task`) makes a regression study

    [release]                        # required: a study without it, or without a mechanism, is refused
    mechanism = "apt"                # or "prune-leaf", "prune-parent", "kanon-rdt", "laplace-rdt", "none"
    requirement = "cl-diversity:c=5,l=3"   # kanon-rdt: "dps:k=5,beta=0.01,epsilon=2,trees=10"
                                     # laplace-rdt: "dp:epsilon=1,trees=10"
    disclosure = "hit_miss"          # or "counts" (kanon-rdt, laplace-rdt: "counts" only)

    [training]
    learner = "admissible"           # or "multiway", "cart", "auto" (each owner chooses by cross-validation);
                                     # kanon-rdt and the dp mechanisms train their own trees
    max_depth = 10                   # optional; kanon-rdt, dp mechanisms: required, the depth of every tree
    min_samples_leaf = 1
    category_split = "either"        # optional, admissible only: "grouped", "binary" or "either"
    pairing = "deferred"             # optional, admissible only: "deferred" or "eager"
    confidence = 0.25                # optional, admissible only: C4.5 pruning, or "none" for the grown tree

A ``dps`` requirement goes with mechanism ``kanon-rdt`` (or its ``kanon-rdt-log`` variant) and no
other, a ``dp`` requirement with the noise-based mechanisms (`modelshare.common.mechanisms.registry`), and either asks
for at most `modelshare.common.federation.wire.MAX_TREES` trees (what a miner decodes).

A regression study (its schema has a numeric ``target`` with public bounds) releases with a
mechanism of `modelshare.common.mechanisms.registry` with a regression trainer only (``diffpets`` and a ``dp:``
requirement): owners release DiffPETs regression forests, and the miner learns regression global
models (``regression-tree``, ``random-forest``) scored by RMSE and MAE.

    [mining]
    global_models = ["decision-tree", "naive-bayes"]  # regression: ["regression-tree", "random-forest"]
    pgen_scale = 10
    class_assignment = "exact"       # or "sample"
    off_path = "uniform"             # or "marginal", "class", "path": attributes a path leaves free drawn from
                                     # the released paths' own law (`modelshare.miner_node.offpath`)
    on_path = "uniform"              # the paper's, and the default; or "class": values inside a path's allowed
                                     # category set drawn from the class law all released paths determine
                                     # (`modelshare.miner_node.onpath`), the inference across leaves the owners
                                     # meant to hide
    evaluation = "test.csv"          # optional held-out table, sent to the miner (never to owners)

    [global_models]                  # optional: how the miner sets each global model's hyperparameters
    decision-tree = "auto"           # cross-validated on the pseudo-data (never on raw or evaluation rows)
    naive-bayes = "fixed"            # the built-in rule (a dp study's decision tree: its leaf floor)
    random-forest = { min_samples_leaf = 0.001 }   # given values (`modelshare.common.study.settings`)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field, model_validator

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema, SchemaError
from modelshare.common.federation.config_file import ConfigModel, at_key, read_toml, validate_config
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_to_pb
from modelshare.common.mechanisms.class_prior import DEFAULT_PRIOR_SHARE
from modelshare.common.mechanisms.registry import default_learner
from modelshare.common.privacy.requirements import RequirementError, parse_requirement
from modelshare.common.study import Study, StudyError, Training, settings_from_mapping
from modelshare.common.trees.learner_options import CATEGORY_SPLITS, PAIRINGS

__all__ = ["StudyError", "StudyFile", "load_study_file", "spec_from_mapping", "new_study_id"]


@dataclass(frozen=True)
class StudyFile:
    """A parsed study file: the study and the local evaluation table to send along (if any)."""

    study: Study
    evaluation: Path | None

    @property
    def spec(self) -> fpb.StudySpec:
        """The study as the admin sends it (`modelshare.common.federation.serde.study_to_pb`)."""
        return study_to_pb(self.study)


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
    """The study's public seed: learners' tie-breaking, PGEN
    and the global models (never a mechanism's secret noise)."""

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
        from modelshare.common.data.datasets import bundled_schema
        from modelshare.common.data.task import load_schema

        try:
            return bundled_schema(self.dataset) if self.dataset is not None else load_schema(base / str(self.file))
        except (SchemaError, KeyError, ValueError) as exc:
            raise StudyError(f"{where} [schema]: {exc}") from None


class _ReleaseTable(ConfigModel):
    mechanism: str  # which mechanisms exist is the registry's to say
    """The release mechanism (the registry's names: `modelshare release --help`); required: no mechanism is chosen for a
    study (`none` releases the trained tree unprotected)."""
    requirement: str | None = None
    """The requirement it must meet, e.g. `cl-diversity:c=5,l=3`,
    `dps:k=5,beta=0.1,epsilon=2,trees=10`, `dp:epsilon=1,trees=10`."""
    disclosure: Literal["counts", "hit_miss"] = "counts"
    """What released trees disclose per node; whole-release mechanisms release `counts` only."""
    prior_share: Annotated[float, Field(ge=0, lt=1)] = DEFAULT_PRIOR_SHARE
    """dp mechanisms only: the share of epsilon each owner spends on a noisy class histogram (the miner's class-prior
    floor; below a public threshold of its noisy total the owner releases the
    histogram alone); the trees get the rest. 0: the papers' mechanisms unchanged."""


class _TrainingTable(ConfigModel):
    learner: str | None = None
    """The owners' local learner (`admissible`, `multiway` or `cart`, or `auto`: each owner chooses among them, with and
    without a leaf floor of 5, by cross-validating their releases on its own rows, and its release states the choice);
    default `admissible` (grown to the requirement) for the path mechanisms,
    `multiway` otherwise; whole-release mechanisms train their own trees."""
    max_depth: Annotated[int | None, Field(ge=1)] = None
    """Depth limit of the owners' trees; required by whole-release mechanisms (the depth of every tree)."""
    min_samples_leaf: Annotated[int, Field(ge=1)] = 1
    """Minimum leaf size of the owners' trees."""
    # the ignore below: pydantic reads the tuple; mypy wants literal values
    category_split: Literal[CATEGORY_SPLITS] | None = None  # type: ignore[valid-type]
    """The admissible learner only: a categorical split is a branch per (grouped) category (`grouped`), two groups
    (`binary`) or the better of the two by gain ratio (`either`);
    default `either` under k-anonymity, `grouped` otherwise."""
    # the ignore below: pydantic reads the tuple; mypy wants literal values
    pairing: Literal[PAIRINGS] | None = None  # type: ignore[valid-type]
    """The admissible learner only: where a category that may not stand alone is grouped, `deferred` (only where
    grouping pays, the partner chosen per subtree; the default) or
    `eager` (at the first node whose criterion picks its attribute)."""
    confidence: Annotated[float, Field(gt=0, lt=1)] | Literal["none"] | None = None
    """The admissible learner only: C4.5's pruning confidence (0 < CF < 1; default 0.25, no pruning under k-anonymity),
    or "none" to release the grown tree (every leaf meets the
    requirement by construction; APT and the audit still check it)."""


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
    """PGEN's values for attributes a path leaves free: `uniform` over the public domain (the paper's), or drawn from
    the law the released paths that constrain the attribute disclose, `marginal` (pooled), `class` (given the row's
    class) or `path` (given the region the row's path fixes, the other
    paths weighted by their overlap with it); classification only."""
    on_path: str | None = None
    """PGEN's values of a categorical attribute inside the category set a path allows (default `uniform`): `uniform` in
    the set (the paper's), or `class`, drawn from the attribute's class-conditional law estimated by EM over every
    released path and restricted to the set (values a path leaves free follow off_path); classification only, not for
    dpea-nb; `class` carries into the global models the inference
    across leaves and owners that (c,l)-diversity is meant to hide."""
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
    """How the miner sets each global model's hyperparameters: "auto" (cross-validated on the pseudo-data; the decision
    tree's default), "fixed" (the built-in rule; other models' default) or given values. Parameters: decision-tree and
    rules min_samples_leaf (rows, or a share < 1), max_depth, criterion; naive-bayes alpha; random-forest
    min_samples_leaf, max_depth, n_estimators; gradient-boosting min_samples_leaf, max_depth, learning_rate, max_iter,
    max_leaf_nodes, l2_regularization; regression-tree min_samples_leaf, max_depth. On a miner's dask engine the
    parameters map onto xgboost's; there gradient-boosting min_samples_leaf and a criterion other than gini have no
    equivalent and fail the study (docs/scale-out.md)."""

    @model_validator(mode="before")
    @classmethod
    def _release_named(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "release" not in data:
            raise ValueError("has no [release] table: name the mechanism (and its requirement) that makes each "
                             "owner's model safe, e.g. mechanism = \"apt\", requirement = \"cl-diversity:c=5,l=2\", "
                             "disclosure = \"hit_miss\" (what `modelshare simulate` uses); `modelshare study init` "
                             "writes a study.toml with them")
        return data


def spec_from_mapping(data: Mapping[str, Any], *, base: Path = Path("."), where: str = "study",
                      now: datetime | None = None) -> StudyFile:
    """Build and check a `Study` from the parsed TOML tables of a study file, its miner's side included."""
    file = validate_config(data, _StudyFile, StudyError, where=where)
    study, release, training, mining = file.study, file.release, file.training, file.mining
    schema = file.schema_.load(base, where)
    requirement = None
    if release.requirement is not None:
        n_classes = schema.n_classes if isinstance(schema, Schema) else None
        try:
            requirement = parse_requirement(release.requirement, n_classes=n_classes)
        except RequirementError as exc:
            raise StudyError(f"{where}: study requirement: {exc}") from None
    default_models = ("regression-tree",) if isinstance(schema, RegressionSchema) else ("decision-tree",)
    try:
        settings = settings_from_mapping(file.global_models)
        decoded = Study(
            study_id=study.id or new_study_id(),
            title=study.title,
            schema=schema,
            mechanism=release.mechanism,
            requirement=requirement,
            disclosure=release.disclosure,
            prior_share=release.prior_share,
            training=Training(learner=training.learner or default_learner(release.mechanism),
                              min_samples_leaf=training.min_samples_leaf, max_depth=training.max_depth,
                              pairing=training.pairing, category_split=training.category_split,
                              confidence=training.confidence),
            global_models=default_models if mining.global_models is None else tuple(mining.global_models),
            model_settings=settings,
            pgen_scale=mining.pgen_scale,
            class_assignment=mining.class_assignment,
            off_path=mining.off_path,
            on_path=mining.on_path or "uniform",
            owners=tuple(study.owners),
            quorum=study.quorum,
            deadline=study.deadline_at(now or datetime.now(timezone.utc)),
            seed=study.seed,
        )
    except (StudyError, ValueError) as exc:
        raise StudyError(f"{where}: {exc}") from None
    if faults := decoded.mining_faults():
        raise StudyError("\n".join(f"{where}: {fault}" for fault in faults))
    return StudyFile(decoded, None if mining.evaluation is None else _evaluation_file(base, mining.evaluation, where))


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
