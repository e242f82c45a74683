"""The admin's side of a federation: ``admin.toml`` and the calls that manage studies.

::

    [admin]
    name = "admin"
    miner = "localhost:50051"
    miner_name = "miner"
    signing_key = "signing.key"
    roster = "roster.json"
    [tls]
    ca = "ca.crt"
    cert = "tls.crt"
    key = "tls.key"
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

import grpc

from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.federation.config_file import ConfigModel, Text, load_config
from modelshare.common.federation.dial import dial_miner
from modelshare.common.federation.kit import TlsFiles, TlsTable
from modelshare.common.federation.model_io import write_message
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.common.federation.serde import parameter_from_pb, study_from_pb
from modelshare.common.federation.wire import WireError, model_message, tree_from_pb
from modelshare.miner_node.coordinator import DEADLINE_PASSED, QUORUM_UNREACHABLE
from modelshare.miner_node.selection import Choice

__all__ = ["AdminConfig", "AdminError", "admin_stub", "sites_dict", "status_dict", "study_headline", "answer_label",
           "results_dict", "reader_dict", "write_results", "auc_text", "settings_text", "global_tree_schema"]

CALL_TIMEOUT = 30.0


class AdminError(ValueError):
    """An admin config or call that failed; the message says which and why."""


class _AdminTable(ConfigModel):
    name: Text
    """The admin's party name (its TLS identity)."""
    miner: Text
    """The miner's address to dial, HOST:PORT."""
    miner_name: Text
    """The miner's TLS identity."""
    signing_key: Text = "signing.key"  # provisioned into every admin kit; not used by AdminConfig
    """The admin's Ed25519 signing key (provisioned into every admin kit)."""
    roster: Text = "roster.json"
    """Every party's public signing key, as provisioned."""


class _AdminFile(ConfigModel):
    """``admin.toml`` as written (module docstring)."""

    admin: _AdminTable
    tls: TlsTable


@dataclass(frozen=True)
class AdminConfig:
    name: str
    miner: str
    miner_name: str
    tls: TlsFiles

    @classmethod
    def load(cls, path: str | Path) -> AdminConfig:
        """Read and validate ``admin.toml``; every error names the file and the key at fault."""
        path = Path(path)
        file = load_config(path, _AdminFile, AdminError, "admin config")
        admin = file.admin
        return cls(name=admin.name, miner=admin.miner, miner_name=admin.miner_name, tls=file.tls.files(path.parent))


def admin_stub(config: AdminConfig) -> tuple[grpc.Channel, fgrpc.StudyAdminStub]:
    """A channel to the admin's miner and the study administration's stub on it (``fgrpc.MinerStub`` on the
    same channel asks ``Health``)."""
    channel = dial_miner(config.miner, config.tls, config.miner_name)
    return channel, fgrpc.StudyAdminStub(channel)


def _time(ts: Any) -> str | None:
    return ts.ToJsonString() if ts.seconds or ts.nanos else None


def status_dict(status: fpb.StudyStatus) -> dict[str, Any]:
    """A study's state as JSON-ready data: spec summary, state, reason, each owner's answer."""
    return {
        **study_from_pb(status.spec).describe(),
        "state": status.state,
        "reason": status.reason,
        "created_at": _time(status.created_at),
        "updated_at": _time(status.updated_at),
        "answers": [
            {"owner": o.owner_id, "state": o.state, "reason": o.reason, "at": _time(o.updated_at),
             "late": _late(status, o)} for o in status.owners
        ],
    }


def _late(status: fpb.StudyStatus, owner: fpb.OwnerState) -> bool:
    """True for an answer recorded after the study failed (it raced the deadline): it did not count."""
    answered = owner.state != "waiting"
    return (status.state == "failed" and answered
            and owner.updated_at.ToNanoseconds() > status.updated_at.ToNanoseconds())


def answer_label(answer: dict[str, Any]) -> str:
    """An owner's answer as the status table shows it: its state, or 'STATE late' when it did not count."""
    return f"{answer['state']} late" if answer.get("late") else answer["state"]


def study_headline(data: dict[str, Any]) -> str:
    """One line on a study (a `status_dict`): its state, a failure's cause, and who answered how.

    Who submitted, refused or never answered is read off ``data["answers"]``, the rows the status
    table prints, never off the failure reason the miner stored when the study closed: an answer
    that arrived while the study was failing would otherwise be "no answer from X" in the headline
    and "submitted" in the table.
    """
    groups: dict[str, list[str]] = {"submitted": [], "refused": [], "no answer": [], "answered after it failed": []}
    for a in data["answers"]:
        key = "answered after it failed" if a.get("late") else "no answer" if a["state"] == "waiting" else a["state"]
        groups[key].append(a["owner"])
    parts = [f"{key}: {', '.join(sorted(owners))}" for key, owners in groups.items() if owners]
    state = data["state"]
    if state == "failed":
        reason = data["reason"]
        cause = next((c for c in (DEADLINE_PASSED, QUORUM_UNREACHABLE) if reason.startswith(c)), None)
        if cause is None:  # mining failed, or a reason this client does not know: the miner's own words
            state = f"failed: {reason}" if reason else "failed"
        else:
            state = f"failed: {cause}: {len(groups['submitted'])} of the {data['quorum']} submissions needed"
    return f"study {data['id']}: {state}" + "".join(f"; {part}" for part in parts)


def sites_dict(reply: fpb.SiteList) -> dict[str, Any]:
    """Every site (``ListSites``) as JSON-ready data: owner, state, last poll, version, health, revoked_at."""
    return {"silent_after_seconds": reply.silent_after_seconds,
            "sites": [{"owner": s.owner_id, "state": s.state,
                       "last_poll_at": s.last_poll_at.ToJsonString() if s.HasField("last_poll_at") else None,
                       "version": s.version or None, "health": s.health or None, "revoked_at": s.revoked_at or None}
                      for s in reply.sites]}


def results_dict(results: fpb.StudyResults) -> dict[str, Any]:
    """A study's results as JSON-ready data (predictions and trees left to `write_results`)."""
    return {
        "study": results.study_id,
        "evaluation_rows": results.evaluation_rows,
        "evaluation_rows_dropped": results.evaluation_rows_dropped,
        "mining_seconds": results.mining_seconds,
        "engine": results.engine or "local",
        "pseudo_data": results.pseudo_data or None,
        "off_path": results.pgen_off_path,
        "on_path": results.pgen_on_path,
        "reader": reader_dict(results),
        "owners": [
            {"owner": o.owner_id, "tuples": o.tuples, "leaves": o.leaves, "claim": o.claim,
             "audit_passed": o.audit_passed, "pseudo_rows": o.pseudo_rows, "learner": o.learner or None}
            for o in results.owners
        ],
        "models": [
            {"model": m.name, "train_rows": m.train_rows, "accuracy": m.accuracy if m.HasField("accuracy") else None,
             "auc": m.auc if m.HasField("auc") else None,
             "parameters": {k: parameter_from_pb(v) for k, v in sorted(m.parameters.items())},
             "selection": m.selection,
             "tree_leaves": sum(1 for n in m.tree.nodes if not n.edges) if m.HasField("tree") else None,
             **({"rmse": m.rmse, "mae": m.mae} if m.HasField("rmse") else {})}  # a scored regression model
            for m in results.models
        ],
    }


def reader_dict(results: fpb.StudyResults) -> dict[str, Any] | None:
    """What a reader of every release believes
    (`modelshare.common.privacy.combining.read_study`), None when nothing was read."""
    if not results.HasField("reader"):
        return None
    r = results.reader
    return {
        "summary": r.summary, "trees": r.trees, "cap": r.cap if r.HasField("cap") else None,
        "largest_belief": r.largest_belief,
        "confident_share": r.confident_share if r.HasField("confident_share") else None,
        "smallest_group": r.smallest_group,
        "owners": [{"owner": o.owner_id, "requirement": o.requirement, "largest_belief": o.largest_belief,
                    "confident_share": o.confident_share if o.HasField("confident_share") else None,
                    "persons": o.persons, "leaves_beyond": o.leaves_beyond} for o in r.owners],
        "skipped": list(r.skipped),
    }


def auc_text(model: dict[str, Any]) -> str:
    """A two-class model's AUC as tables show it, "-" for a model without probabilities (a rule list)."""
    return "-" if model.get("auc") is None else f"{model['auc']:.4f}"


def settings_text(model: dict[str, Any]) -> str:
    """How a model's hyperparameters were set and their values, for a table cell (`Choice.text`)."""
    return Choice(dict(model.get("parameters") or {}), model.get("selection") or "").text


def _prediction_lines(results: fpb.StudyResults, schema: Schema | RegressionSchema,
                      scored: list[fpb.GlobalModelResult]) -> list[list[str]]:
    """``predictions.csv``'s rows: the evaluation file's 0-based data row, the truth, each model's prediction.

    A miner from before the results carried rows and truth sends neither; those cells are then empty.
    """
    if isinstance(schema, RegressionSchema):
        truth = [repr(v) for v in results.evaluation_value]
        predicted = [[repr(v) for v in m.values] for m in scored]
    else:
        truth = [schema.classes[c] for c in results.evaluation_class]
        predicted = [[schema.classes[p] for p in m.predictions] for m in scored]
    rows = [str(r) for r in results.evaluation_row]
    return [list(line) for line in zip_longest(rows, truth, *predicted, fillvalue="")]


def global_tree_schema(schema: Schema | RegressionSchema, model: str) -> Schema:
    """The schema of a global model's tree: a classification study's (a regression study's models carry no tree)."""
    if not isinstance(schema, Schema):
        raise WireError(f"global {model}: carries a classification tree, but the study is a regression study")
    return schema


def write_results(results: fpb.StudyResults, status: fpb.StudyStatus, out: Path) -> list[Path]:
    """``results.json``, one model file per learned tree, and ``predictions.csv`` when scored.

    ``predictions.csv`` has one line per evaluation row: ``row`` (its 0-based data row in the
    evaluation file, to join back on: rows with a missing value were dropped), the truth
    (``true_class``, or ``true_value`` in a regression study), then each scored model's prediction.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json"]
    written[0].write_text(json.dumps({"status": status_dict(status), **results_dict(results)}, indent=2) + "\n")
    schema = study_from_pb(status.spec).schema
    for m in results.models:
        if m.HasField("tree"):
            path = out / f"global-{m.name}.json"
            tree = tree_from_pb(m.tree, global_tree_schema(schema, m.name), where=f"global {m.name}")
            write_message(model_message(tree), path)
            written.append(path)
    scored = [m for m in results.models if len(m.predictions) or len(m.values)]
    if scored:
        path = out / "predictions.csv"
        truth = "true_value" if isinstance(schema, RegressionSchema) else "true_class"
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["row", truth, *(m.name for m in scored)])
        writer.writerows(_prediction_lines(results, schema, scored))
        path.write_text(text.getvalue())
        written.append(path)
    return written
