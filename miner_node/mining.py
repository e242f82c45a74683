"""Mining a finished study: PGEN on every accepted model, pooling, global models, scores.

Deterministic for a given study: submissions are taken in owner-id order, owner ``i``'s PGEN
draws from a generator seeded by ``(study seed, i)`` and every global model by the study seed,
so the same study run by `modelshare simulate` or by separately started processes gives the
same results.

A single tree is regenerated as before (``pgen_scale`` times its tuples; exactly hit + miss per
path at scale 1). An ensemble (k-AnonToRdt) is regenerated from each tree's paths, sized by
`modelshare.miner_node.pgen.ensemble_rows` with the sampling rate its (re-audited) report states, so it
contributes about ``pgen_scale`` times its owner's table size; the global models train on the
union of every owner's rows. Under the study's ``off_path`` = ``marginal``, ``class`` or ``path``, the attributes a
path leaves free are drawn from the law every accepted tree's paths disclose (`modelshare.miner_node.offpath`,
estimated once per study from all of them); under ``on_path = "class"`` a category inside a path's allowed
set is drawn from the class law all accepted paths determine (`modelshare.miner_node.onpath`), and the results say
both. A model built from the releases
themselves (`modelshare.miner_node.global_models.RELEASE_MODELS`: the released trees' vote, a dpea-nb release's
calibrated naive Bayes) is built from every accepted release instead and trains on no pseudo row (its
results say 0 training rows). A dpea-nb release's pseudo rows are its own (`modelshare.miner_node.calibrated_nb`). Each
global model's hyperparameters are the study's setting (`modelshare.miner_node.selection`: cross-validated on the
pooled pseudo rows, one released tree's rows in one fold; or the fixed rule, under which the global
decision tree of a dp study gets a leaf-size floor, `modelshare.miner_node.dp_pgen`; or given values).

That is the ``local`` engine, the default. On the ``dask`` engine (``[mining] engine = "dask"``) each
owner's pseudo-data is instead streamed in chunks that fit the memory budget to Parquet files under
the study's directory (`modelshare.miner_node.pseudo_parquet`), never pooled in the miner, and the global models
are learned from those files on a Dask cluster (`modelshare.miner_node.dask_engine`), their settings chosen as on
the local engine (``"auto"`` on a bounded sample of the files) and mapped onto xgboost's parameters;
the results name the engine and the directory.

On either engine the results then carry what a reader of every release believes (`_read_releases`,
`modelshare.common.privacy.combining.read_study`): one combining reader fitted over every accepted single tree
released under a path requirement (k-anonymity, (c,l)-diversity), each owner's leaves judged with it
against that owner's own requirement. No owner can run it, since none sees the others' releases.
dp and dps ensembles (their guarantee composes; their noisy or sampled counts are not a partition
the reader may take at face value) and regression releases (no class to believe) are not read: the
results name a skipped classification release, and carry no reader when none was read.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from modelshare.common.audit.release import audit
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.wire import DecodedModel
from modelshare.common.privacy.combining import StudyReading, read_study
from modelshare.common.privacy.requirements import (
    CLDiversity,
    KAnonymity,
    PathRequirement,
    RequirementError,
    parse_requirement,
)
from modelshare.common.study import AUTO, ModelPlan, Study
from modelshare.common.trees.tree import Tree
from modelshare.miner_node.class_prior import NO_ROWS_FLOOR, study_floor
from modelshare.miner_node.config import MiningConfig
from modelshare.miner_node.global_models import RELEASE_MODELS, build_release_model
from modelshare.miner_node.pseudo_parquet import Sample, chunk_rows, sample, write_owner
from modelshare.miner_node.selection import Choice, choose, cv_rows, mode_of
from modelshare.miner_node.tasks import (
    RELEASE_STRIDE,
    ClassificationTask,
    Evaluation,
    Fitted,
    MiningTask,
    pool,
    pseudo_tree_chunks,
    task_for,
)

__all__ = ["AcceptedModel", "Evaluation", "mine", "load_evaluation"]

log = logging.getLogger("modelshare.miner")


@dataclass(frozen=True)
class AcceptedModel:
    """An accepted submission, decoded: whose it is and the model it carries."""

    owner_id: str
    model: DecodedModel


def load_evaluation(csv_bytes: bytes, schema: Schema | RegressionSchema) -> Evaluation:
    """Encode an evaluation table sent with a study (its task's columns); errors name the row and column."""
    return task_for(schema).load_evaluation(csv_bytes)


def mine(
    study: Study,
    accepted: list[AcceptedModel],
    evaluation: Evaluation | None,
    *,
    mining: MiningConfig | None = None,
    pseudo_dir: Path | None = None,
) -> fpb.StudyResults:
    """Regenerate, pool and learn; one result per global model, one summary per owner.

    Parameters
    ----------
    study:
        The study (its seed, ``pgen_scale``, class assignment and global models); its schema's type picks the
        task (`modelshare.miner_node.tasks.task_for`).
    accepted:
        The accepted, decoded submissions.
    evaluation:
        The encoded evaluation table (with each row's position in the file), or None when the study has none.
    mining:
        The engine and memory budget (``[mining]``); None is the local engine.
    pseudo_dir:
        Where the dask engine writes the study's Parquet pseudo-data (required with it).

    Returns
    -------
    fpb.StudyResults
        Per owner: its trees' mean released root count as ``tuples``, their leaves, its claim, the
        re-audit verdict, its pseudo rows and the released trees themselves; per model: the training
        rows (0 for a model built from the releases) and, with an evaluation table, its scores
        (accuracy and predictions, or RMSE, MAE and predicted values), with the evaluation rows' file
        positions and truth once for all models; the engine that learned them and, on dask, the
        pseudo-data's directory.
    """
    started = time.perf_counter()
    task = task_for(study.schema)
    results = fpb.StudyResults(study_id=study.study_id)
    owners = sorted(accepted, key=lambda a: a.owner_id)
    if mining is not None and mining.engine == "dask":
        if not isinstance(task, ClassificationTask) or pseudo_dir is None:
            raise ValueError("engine dask learns classification studies only; use engine local for regression")
        _mine_on_dask(study, task, owners, evaluation, mining, pseudo_dir, results)
    else:
        _mine_locally(study, task, owners, evaluation, results)
    if isinstance(task, ClassificationTask):  # a regression release has no class to believe
        _read_releases(study, owners, results)
    results.mining_seconds = time.perf_counter() - started
    return results


def _owner_entry(results: fpb.StudyResults, task: MiningTask, item: AcceptedModel, rows: int) -> None:
    """One owner's summary in the results: its size, claim, re-audit verdict, pseudo rows and released trees."""
    tuples, leaves = task.size(item.model)
    entry = results.owners.add(
        owner_id=item.owner_id,
        tuples=tuples,
        leaves=leaves,
        claim=_claim(item.model),
        audit_passed=audit(item.model.released, item.model.report, figures=False).passed,
        pseudo_rows=rows,
        learner=_chosen_learner(item.model),
    )
    task.released(entry, item.model)


def _chosen_learner(model: DecodedModel) -> str:
    """The learner a release states its owner chose
    (`modelshare.common.mechanisms.learner_choice`); empty when it chose none."""
    stated = model.report.parameters.get("learner") if model.report is not None else None
    return stated if isinstance(stated, str) else ""


def _claim(model: DecodedModel) -> str:
    """What a release claims: its requirement, else its guarantee in words ("none" without a report)."""
    report = model.report
    return (report.requirement or report.guarantee) if report is not None else "none"


def _path_requirement(model: DecodedModel) -> PathRequirement | None:
    """The path requirement a single-tree release claims; None for an ensemble, a dp/dps claim or no claim."""
    report = model.report
    if report is None or report.requirement is None or len(model.trees) != 1:
        return None
    try:
        requirement = parse_requirement(report.requirement)
    except RequirementError:  # the re-audit has already failed it (its owner's audit column says so)
        return None
    return requirement if isinstance(requirement, (KAnonymity, CLDiversity)) else None


def _read_releases(study: Study, owners: list[AcceptedModel], results: fpb.StudyResults) -> None:
    """What a reader of every path release believes (module docstring), into ``results.reader``."""
    releases: list[tuple[str, tuple[Tree, ...], PathRequirement]] = []
    skipped = []
    for item in owners:
        requirement = _path_requirement(item.model)
        if requirement is None:
            skipped.append(f"{item.owner_id} ({len(item.model.trees)} trees claiming {_claim(item.model)}: "
                           "not one tree under a path requirement)")
        else:
            releases.append((item.owner_id, item.model.trees, requirement))
    reading = read_study(releases, skipped)
    if reading is None:
        log.info("study %s: no release for a reader of every release to read (%d skipped)", study.study_id,
                 len(skipped), extra={"study": study.study_id})
        return
    results.reader.CopyFrom(_reader_pb(reading))


def _reader_pb(reading: StudyReading) -> fpb.StudyReader:
    """A `StudyReading` as the results carry it."""
    message = fpb.StudyReader(summary=reading.describe(), trees=reading.trees, largest_belief=reading.largest_belief,
                              smallest_group=reading.smallest_group, skipped=list(reading.skipped))
    if reading.cap is not None:
        message.cap = reading.cap
    if reading.confident_share is not None:
        message.confident_share = reading.confident_share
    for owner in reading.owners:
        v = owner.verdict
        entry = message.owners.add(owner_id=owner.owner, requirement=str(owner.requirement),
                                   largest_belief=v.largest_belief, persons=v.persons, leaves_beyond=len(v.findings))
        if v.requirement is not None:
            entry.confident_share = v.confident_share
    return message


def _record_evaluation(study: Study, task: MiningTask, evaluation: Evaluation | None,
                       results: fpb.StudyResults) -> None:
    """The evaluation table's size, dropped rows and truth, once for all models."""
    if evaluation is None:
        return
    results.evaluation_rows = int(evaluation.y.shape[0])
    results.evaluation_rows_dropped = evaluation.dropped
    if evaluation.dropped:
        log.warning("study %s: the evaluation table lost %d row(s) with a missing value; %d are scored",
                    study.study_id, evaluation.dropped, results.evaluation_rows, extra={"study": study.study_id})
    task.truth(results, evaluation)


def _mine_locally(study: Study, task: MiningTask, owners: list[AcceptedModel],
                  evaluation: Evaluation | None, results: fpb.StudyResults) -> None:
    """The local engine: every owner's PGEN rows pooled in memory, the global models fitted in this process."""
    results.engine = "local"
    parts = []
    law, results.pgen_off_path = task.off_path_law(study, [item.model for item in owners])
    on_path, results.pgen_on_path = task.on_path_law(study, [item.model for item in owners])
    for i, item in enumerate(owners):
        X, y = task.pseudo_data(item.model, study, np.random.default_rng([study.seed, i]), law, on_path)
        parts.append((X, y, task.sources(item.model, study, int(y.shape[0]))))
        _owner_entry(results, task, item, int(y.shape[0]))
    X, y, groups = pool(parts, study.schema.n_attributes, task.empty_labels())
    _record_evaluation(study, task, evaluation, results)
    releases = [(item.model.trees, item.model.report) for item in owners]
    trees = sum(len(released) for released, _ in releases)
    floor = study_floor([report for _, report in releases], task.schema.n_classes) if isinstance(
        task, ClassificationTask) else None
    for name in study.global_models:
        if name in RELEASE_MODELS:  # built from the released trees; it reads no pseudo row, so it trains on none
            entry = results.models.add(name=name, train_rows=0)
            if trees:
                try:
                    model = build_release_model(name, releases)
                except ValueError as exc:  # e.g. every dpea-nb owner declined: no naive Bayes to build
                    entry.selection = f"not built: {exc}"
                    continue
                task.score(entry, Fitted(model, Choice({}, f"built from the {trees} released trees")), evaluation)
            continue
        entry = results.models.add(name=name, train_rows=int(y.shape[0]))
        if y.shape[0] == 0:
            if floor is not None:  # every owner declined: the floor is what the study has
                task.score(entry, Fitted(floor, Choice({}, NO_ROWS_FLOOR, floor=True)), evaluation)
            continue
        task.score(entry, task.fit(name, study.model_plan, X, y, groups, floor), evaluation)


def _mine_on_dask(study: Study, task: ClassificationTask, owners: list[AcceptedModel],
                  evaluation: Evaluation | None, mining: MiningConfig, pseudo_dir: Path,
                  results: fpb.StudyResults) -> None:
    """The dask engine: every owner's PGEN rows streamed to Parquet in budget-sized chunks, the models learned on Dask.

    Each model's setting is chosen as on the local engine (`modelshare.miner_node.selection.choose`), ``"auto"`` on a
    bounded sample of the files (`_dask_choice`), and its parameters mapped onto xgboost's; a given
    parameter without a faithful equivalent fails the study before any pseudo-data is written.
    """
    from modelshare.miner_node.dask_engine import (  # dask only for studies on it
        DaskEngine,
        check_models,
        check_settings,
    )

    schema = task.schema
    check_models(study.global_models)
    check_settings(study.model_plan, schema.n_classes)
    results.engine, results.pseudo_data = "dask", str(pseudo_dir)
    rows_per_chunk = chunk_rows(schema, mining.memory_budget_mb)
    files: list[Path] = []
    owner_of_file: list[int] = []
    law, results.pgen_off_path = task.off_path_law(study, [item.model for item in owners])
    on_path, results.pgen_on_path = task.on_path_law(study, [item.model for item in owners])
    for i, item in enumerate(owners):
        rng = np.random.default_rng([study.seed, i])
        chunks = pseudo_tree_chunks(item.model.trees, item.model.report, study.pgen_scale, rng,
                                    # the ignore below: Study checked it
                                    study.class_assignment, rows_per_chunk, law, on_path)  # type: ignore[arg-type]
        written = write_owner(pseudo_dir, schema, item.owner_id, chunks)
        files.extend(written.files)
        owner_of_file.extend([i] * len(written.files))
        _owner_entry(results, task, item, written.rows)
    total = sum(o.pseudo_rows for o in results.owners)
    log.info("study %s: %d pseudo rows written to %s in chunks of at most %d rows", study.study_id, total,
             pseudo_dir, rows_per_chunk, extra={"study": study.study_id})
    _record_evaluation(study, task, evaluation, results)
    seed = study.seed % 2**31
    held: list[Sample] = []  # the sample "auto" cross-validates on, drawn once for all models
    floor = study_floor([item.model.report for item in owners], schema.n_classes)
    with DaskEngine(mining) as engine:
        for name in study.global_models:
            entry = results.models.add(name=name, train_rows=total)
            if total == 0:
                if floor is not None:  # every owner declined to release trees: the floor is what the study has
                    task.score(entry, Fitted(floor, Choice({}, NO_ROWS_FLOOR, floor=True)), evaluation)
                continue
            choice = _dask_choice(name, study.model_plan, schema, files, np.asarray(owner_of_file), total, held)
            model = engine.fit(name, schema, files, seed, choice.parameters)
            task.score(entry, Fitted(model, choice), evaluation)


def _dask_choice(name: str, plan: ModelPlan, schema: Schema, files: list[Path], owner_of_file: np.ndarray,
                 total: int, held: list[Sample]) -> Choice:
    """Model ``name``'s setting on the dask engine: chosen as
    the local engine chooses, reported in xgboost's parameters.

    ``"auto"`` cross-validates `modelshare.miner_node.dask_engine.DASK_GRIDS` with the engine's models trained in the
    miner (`LocalBooster`, or naive Bayes, whose count tables are exactly `MixedNaiveBayes`') on at most
    `cv_rows` rows sampled from the Parquet files (drawn once into ``held``; a dp study's many, as on the
    local engine), folds by released tree (owner and tree column); leaf shares become rows of all
    ``total`` rows. The other modes read no rows.
    """
    from modelshare.miner_node.dask_engine import DASK_DP_LEAF_FLOORS, DASK_GRIDS, LocalBooster, xgboost_parameters
    from modelshare.miner_node.global_models import MixedNaiveBayes

    seed = plan.seed % 2**31

    def build(params: dict[str, Any]) -> Any:
        return MixedNaiveBayes(schema, **params) if name == "naive-bayes" else LocalBooster(name, schema, params, seed)

    if mode_of(plan, name) != AUTO:  # fixed or given: no rows needed
        chosen = choose(name, plan, np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64), build,
                        regression=False, rows=total, grids=DASK_GRIDS, floors=DASK_DP_LEAF_FLOORS)
    else:
        if not held:
            held.append(sample(files, schema, cv_rows(plan), np.random.default_rng(seed)))
        rows = held[0]
        groups = owner_of_file[rows.file] * RELEASE_STRIDE + rows.tree
        chosen = choose(name, plan, rows.X, rows.y, build, regression=False, groups=groups, rows=total,
                        grids=DASK_GRIDS, floors=DASK_DP_LEAF_FLOORS)
    return Choice(xgboost_parameters(name, schema.n_classes, chosen.parameters), chosen.selection)
