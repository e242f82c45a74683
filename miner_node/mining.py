"""Mining a finished study: PGEN on every accepted model, pooling, global models, scores.

Deterministic for a given study: submissions are taken in owner-id order, owner ``i``'s PGEN
draws from a generator seeded by ``(study seed, i)`` and every global model by the study seed,
so the same study run by `modelshare simulate` or by separately started processes gives the
same results.

A single tree is regenerated as before (``pgen_scale`` times its tuples; exactly hit + miss per
path at scale 1). An ensemble (k-AnonToRdt) is regenerated from each tree's paths, sized by
`miner_node.pgen.ensemble_rows` with the sampling rate its (re-audited) report states, so it
contributes about ``pgen_scale`` times its owner's table size; the global models train on the
union of every owner's rows. Under the study's ``off_path`` = ``marginal``, ``class`` or ``path``, the attributes a
path leaves free are drawn from the law every accepted tree's paths disclose (`miner_node.offpath`,
estimated once per study from all of them), and the results say so. Each global model's hyperparameters are the study's setting
(`miner_node.selection`: cross-validated on the pooled pseudo rows, one released tree's rows in one
fold; or the fixed rule, under which the global decision tree of a dp study gets a leaf-size floor,
`miner_node.dp_pgen`; or given values).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from common.audit.release import audit
from common.data.regression import RegressionSchema
from common.data.schema import Schema
from common.federation.pb import federation_pb2 as fpb
from common.federation.wire import DecodedModel
from miner_node.tasks import Evaluation, task_for

__all__ = ["AcceptedModel", "Evaluation", "mine", "load_evaluation"]

log = logging.getLogger("modelshare.miner")
_GROUP_STRIDE = 1 << 16  # owner i's released trees are the cross-validation groups i * stride + tree index


@dataclass(frozen=True)
class AcceptedModel:
    """An accepted submission, decoded: whose it is and the model it carries."""

    owner_id: str
    model: DecodedModel


def load_evaluation(csv_bytes: bytes, schema: Schema | RegressionSchema) -> Evaluation:
    """Encode an evaluation table sent with a study (its task's columns); errors name the row and column."""
    return task_for(schema).load_evaluation(csv_bytes)


def mine(
    spec: fpb.StudySpec,
    schema: Schema | RegressionSchema,
    accepted: list[AcceptedModel],
    evaluation: Evaluation | None,
) -> fpb.StudyResults:
    """Regenerate, pool and learn; one result per global model, one summary per owner.

    Parameters
    ----------
    spec:
        The study (its seed, ``pgen_scale``, class assignment and global models).
    schema:
        The study's schema; its type picks the task (`miner_node.tasks.task_for`).
    accepted:
        The accepted, decoded submissions.
    evaluation:
        The encoded evaluation table (with each row's position in the file), or None when the study has none.

    Returns
    -------
    fpb.StudyResults
        Per owner: its trees' mean released root count as ``tuples``, their leaves, its claim, the
        re-audit verdict, its pseudo rows and the released trees themselves; per model: the training
        rows and, with an evaluation table, its scores (accuracy and predictions, or RMSE, MAE and
        predicted values), with the evaluation rows' file positions and truth once for all models.
    """
    started = time.perf_counter()
    task = task_for(schema)
    results = fpb.StudyResults(study_id=spec.study_id)
    parts_X, parts_y, parts_groups = [], [], []
    ordered = sorted(accepted, key=lambda a: a.owner_id)
    law, results.pgen_off_path = task.off_path_law(spec, [item.model for item in ordered])
    for i, item in enumerate(ordered):
        report = item.model.report
        X, y = task.pseudo_data(item.model, spec, np.random.default_rng([int(spec.seed), i]), law)
        parts_X.append(X)
        parts_y.append(y)
        parts_groups.append(i * _GROUP_STRIDE + task.sources(item.model, spec, int(y.shape[0])))
        tuples, leaves = task.size(item.model)
        entry = results.owners.add(
            owner_id=item.owner_id,
            tuples=tuples,
            leaves=leaves,
            claim=(report.requirement or report.guarantee) if report is not None else "none",
            audit_passed=audit(item.model.released, report).passed,
            pseudo_rows=int(y.shape[0]),
        )
        task.released(entry, item.model)
    X = np.vstack(parts_X) if parts_X else np.empty((0, schema.n_attributes))
    y = np.concatenate(parts_y) if parts_y else task.empty_labels()
    groups = np.concatenate(parts_groups) if parts_groups else None
    if evaluation is not None:
        results.evaluation_rows = int(evaluation.y.shape[0])
        results.evaluation_rows_dropped = evaluation.dropped
        if evaluation.dropped:
            log.warning("study %s: the evaluation table lost %d row(s) with a missing value; %d are scored",
                        spec.study_id, evaluation.dropped, results.evaluation_rows, extra={"study": spec.study_id})
        task.truth(results, evaluation)
    for name in spec.global_models:
        entry = results.models.add(name=name, train_rows=int(y.shape[0]))
        if y.shape[0] == 0:
            continue
        task.score(entry, task.fit(name, spec, X, y, groups), evaluation)
    results.mining_seconds = time.perf_counter() - started
    return results
