"""Mining a finished study: PGEN on every accepted model, pooling, global models, scores.

Deterministic for a given study: submissions are taken in owner-id order, owner ``i``'s PGEN
draws from a generator seeded by ``(study seed, i)`` and every global model by the study seed,
so the same study run by `modelshare simulate` or by separately started processes gives the
same results.

A single tree is regenerated as before (``pgen_scale`` times its tuples; exactly hit + miss per
path at scale 1). An ensemble (k-AnonToRdt) is regenerated from each tree's paths, sized by
`miner_node.pgen.ensemble_rows` with the sampling rate its (re-audited) report states, so it
contributes about ``pgen_scale`` times its owner's table size; the global models train on the
union of every owner's rows. The global decision tree of a dp study gets a leaf-size floor
(`miner_node.dp_pgen`).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.audit.release import audit
from common.data.datasets.loading import load_table
from common.data.schema import Schema
from common.federation.pb import federation_pb2 as fpb
from common.federation.wire import DecodedModel, tree_to_pb
from common.mechanisms.kanon_rdt import MECHANISM as KANON_RDT
from common.privacy.report import PrivacyReport
from common.trees.metrics import accuracy
from common.trees.tree import Tree
from miner_node.dp_pgen import dp_pgen_scale, global_model_params
from miner_node.global_models import make_global_model
from miner_node.pgen import ClassAssignment, pgen, pgen_ensemble

__all__ = ["AcceptedModel", "mine", "load_evaluation", "pseudo_table"]


@dataclass(frozen=True)
class AcceptedModel:
    """An accepted submission, decoded: whose it is and the model it carries."""

    owner_id: str
    model: DecodedModel


def load_evaluation(csv_bytes: bytes, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Encode an evaluation table sent with a study; errors name the row and column."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "evaluation.csv"
        path.write_bytes(csv_bytes)
        table = load_table(path, schema.class_name, schema=schema, source="evaluation table")
    return schema.encode(table.frame, source="evaluation table")


def _pgen_rows(tree: Tree, scale: float) -> int | None:
    """Rows to generate from one tree: hit + miss per path at scale 1, else scale x its tuples."""
    return None if scale == 1.0 else int(round(scale * tree.root.total))


def _sampling_rate(report: PrivacyReport | None) -> float:
    """The per-tree sampling rate beta a kanon-rdt report states (checked by the audit); 1 otherwise."""
    if report is None or report.mechanism != KANON_RDT:
        return 1.0
    return float(report.parameters["beta"])


def pseudo_table(model: DecodedModel, scale: float, rng: np.random.Generator,
                 class_assignment: ClassAssignment) -> tuple[np.ndarray, np.ndarray]:
    """PGEN on one accepted model: its single tree, or every tree of its ensemble (module docstring).

    ``modelshare pgen`` calls this too, so a model file regenerates as the miner regenerates it.

    A dp release yields at most `miner_node.dp_pgen.MAX_DP_PGEN_ROWS` rows, whatever its noise adds up to.
    """
    beta = _sampling_rate(model.report)
    if model.report is not None:
        scale = dp_pgen_scale(scale, model.report.mechanism, model.trees)
    if len(model.trees) == 1 and beta == 1.0:
        tree = model.trees[0]
        return pgen(tree, rows=_pgen_rows(tree, scale), rng=rng, class_assignment=class_assignment)
    return pgen_ensemble(model.trees, scale=scale, beta=beta, rng=rng, class_assignment=class_assignment)


def mine(
    spec: fpb.StudySpec,
    schema: Schema,
    accepted: list[AcceptedModel],
    evaluation: tuple[np.ndarray, np.ndarray] | None,
) -> fpb.StudyResults:
    """Regenerate, pool and learn; one result per global model, one summary per owner."""
    started = time.perf_counter()
    results = fpb.StudyResults(study_id=spec.study_id)
    parts_X, parts_y = [], []
    for i, item in enumerate(sorted(accepted, key=lambda a: a.owner_id)):
        trees, report = item.model.trees, item.model.report
        rng = np.random.default_rng([int(spec.seed), i])
        X, y = pseudo_table(item.model, spec.pgen_scale, rng, spec.class_assignment)  # type: ignore[arg-type]
        parts_X.append(X)
        parts_y.append(y)
        results.owners.add(
            owner_id=item.owner_id,
            tuples=float(np.mean([tree.root.total for tree in trees])),
            leaves=sum(tree.n_leaves for tree in trees),
            claim=(report.requirement or report.guarantee) if report is not None else "none",
            audit_passed=audit(trees, report).passed,
            pseudo_rows=int(y.shape[0]),
        )
    X = np.vstack(parts_X) if parts_X else np.empty((0, schema.n_attributes))
    y = np.concatenate(parts_y) if parts_y else np.empty(0, dtype=np.int64)
    if evaluation is not None:
        results.evaluation_rows = int(evaluation[1].shape[0])
    for name in spec.global_models:
        entry = results.models.add(name=name, train_rows=int(y.shape[0]))
        if y.shape[0] == 0:
            continue
        model = make_global_model(name, schema, random_state=int(spec.seed) % (2**31),
                                  **global_model_params(name, spec.mechanism, int(y.shape[0])))
        model.fit(X, y)
        tree = getattr(model, "tree_", None)
        if isinstance(tree, Tree):
            entry.tree.CopyFrom(tree_to_pb(tree))
        if evaluation is not None:
            pred = np.asarray(model.predict(evaluation[0]), dtype=np.int64)
            entry.accuracy = accuracy(evaluation[1], pred)
            entry.predictions.extend(int(p) for p in pred)
    results.mining_seconds = time.perf_counter() - started
    return results
