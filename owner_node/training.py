"""Answer a study locally: read the private table, train, release safely, sign; or sign a refusal.

Everything here runs inside the owner's process and returns a `SignedEnvelope` whose payload is
the only thing that leaves the site: a released model (`ModelMessage`) or a refusal
(`OwnerRefusal`). Raw rows never appear in either. Errors about the local table come as
`LocalDataError`, whose message (file, row, column and the offending value) is for the site's own
log and ``modelshare owner check`` only: a refusal carries a reason code and its fixed sentence
(`modelshare.common.federation.refusal`), never a fact read off the table.

A dp or dps study (`fits_domain`) does not refuse a row for a value outside the schema's public
domain: `load_local_table` clamps it, or drops its row, by the fixed per-row rules of
`modelshare.common.data.domain_fit`, and counts what changed for the site's log only (`LocalTable.fitted`);
such a refusal would be a data-dependent answer outside the mechanism's accounting. A path study
still refuses with `LocalDataError`, naming file, row, column and value.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from modelshare.common.audit.release import audit
from modelshare.common.data.datasets.loading import read_frame, settle_missing
from modelshare.common.data.datasets.streamed import stream_encoded
from modelshare.common.data.domain_fit import DomainFit, fit_to_domain
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema, SchemaError
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.refusal import Refusal, refusal_message
from modelshare.common.federation.signing import sign_payload
from modelshare.common.federation.wire import model_message
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.class_prior import ClassPrior, class_prior_of
from modelshare.common.mechanisms.train_release import train_and_release
from modelshare.common.privacy.combining import ReaderFigures, owner_readers
from modelshare.common.privacy.report import Release
from modelshare.common.study import Study
from modelshare.owner_node.config import OwnerConfig

__all__ = ["DataUnavailable", "EmptyRelease", "FailedAudit", "LocalDataError", "LocalTable", "SignedRelease",
           "build_refusal", "build_submission", "data_file_problem", "fits_domain", "prepare_submission",
           "load_local_table"]

_SEED_MODULUS = 2**32  # scikit-learn seeds are 32-bit; a study's seed is a uint64


class LocalDataError(ValueError):
    """The local table does not fit the study's schema; the message (file, row, column, value) stays at the site."""


class DataUnavailable(LocalDataError):
    """The local table cannot be read at all right now (absent, unreadable): a condition that may pass.

    The daemon retries such a study with backoff until its deadline nears instead of refusing it
    at once (a file being replaced, a network mount that dropped); a table that reads but does not
    fit the schema is a `LocalDataError`, which no waiting cures.
    """


class EmptyRelease(ValueError):
    """The release carries no rows (every tree's released total is 0): nothing to submit; the caller refuses."""


class FailedAudit(ValueError):
    """The owner's own audit (`modelshare.common.audit.release.audit`,
    what the miner re-runs) failed: nothing is signed.

    A correct mechanism never gets here; the message names the failing checks and stays at the site.
    """


@dataclass(frozen=True)
class SignedRelease:
    """A signed release envelope and what the owner alone learns of it: the readers on its own rows (never sent)."""

    envelope: fpb.SignedEnvelope
    readers: tuple[ReaderFigures, ...]
    declined: ClassPrior | None = None  # a dp release that is its class histogram alone (class_prior)

    def account(self) -> str:
        """The readers' figures in words for the owner's log, or '' when the release has no (c,l) leaves to read."""
        return "; ".join(reader.describe() for reader in self.readers)


def _select(frame: pd.DataFrame, schema: Schema | RegressionSchema, class_column: str, path: Path) -> pd.DataFrame:
    """The schema's columns then the class (or regression target) column, renamed to the schema's name for it."""
    absent = [name for name in (*schema.names, class_column) if name not in frame.columns]
    if absent:
        hint = ""
        if len(frame.columns) == 1:
            hint = ("; the header was read as one single column: is the file delimited by something other than "
                    "comma, semicolon, tab or '|'?")
        raise SchemaError(f"the table lacks columns {absent} (the study schema's attributes and the class "
                          f"column){hint}",
                          source=str(path), column=absent[0])
    return frame[[*schema.names, class_column]].rename(columns={class_column: schema.class_name})


def _unavailable(path: Path, exc: SchemaError) -> bool:
    """Whether the table failed to read for a reason that may pass by itself.

    That is: the file is absent, not readable by this process or empty (being replaced, a mount
    that dropped), or reading it failed with an operating-system error (not a corrupt gzip
    stream, which stays corrupt).
    """
    cause = exc.__context__
    if isinstance(cause, OSError) and not isinstance(cause, gzip.BadGzipFile):
        return True
    try:
        return not path.is_file() or not os.access(path, os.R_OK) or path.stat().st_size == 0
    except OSError:
        return True


def data_file_problem(path: Path) -> str | None:
    """Why the data file ``path`` cannot be read now, as a sentence naming it (missing, a directory, not readable
    by this process), or None when it is there to read.

    A cheap look at the file system only (the file is not opened): the daemon makes it at its start and after
    every poll, so that ``owner status`` shows a site waiting for its data file before any study needs it.
    """
    try:
        if not path.exists():
            return f"the data file {path} is missing"
        if path.is_dir():
            return f"the data file {path} is a directory, not a file"
        if not os.access(path, os.R_OK):
            return f"the data file {path} is not readable by this process"
    except OSError as exc:
        return f"the data file {path} cannot be looked at: {exc.strerror or exc}"
    return None


@dataclass(frozen=True)
class LocalTable:
    """The site's table encoded with a study's schema, how many rows the missing-value policy dropped, and
    (dp and dps studies only, else None) what fitting the rows into the public domain changed.

    It unpacks as ``X, y``. Both counts are for the site's log, never for a message.
    """

    X: np.ndarray
    y: np.ndarray
    dropped: int
    fitted: DomainFit | None = None

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.X, self.y))


def fits_domain(mechanism: str) -> bool:
    """Whether a study of ``mechanism`` fits the local rows into the schema's domain rather than refusing them.

    True for the mechanisms with an add/remove-one-row guarantee (families ``dp`` and ``dps``), whose
    guarantee the per-row fit keeps (`modelshare.common.data.domain_fit`); a path or ``none`` study refuses.
    """
    return registry.get(mechanism).family in ("dp", "dps")


def load_local_table(config: OwnerConfig, schema: Schema | RegressionSchema, *,
                     fit_domain: bool = False) -> LocalTable:
    """Read ``config.data_path`` and encode it with the study's schema.

    The class column is ``config.class_column`` or, by default, the schema's class name; for a
    regression schema it is the numeric target (``y`` float64 within its public bounds). Missing
    values are settled by ``config.missing`` (`modelshare.common.data.datasets.loading.settle_missing`: drop
    the row, the default, or keep a categorical one as its own category); a table left empty is an
    error. With ``fit_domain`` (a dp or dps study, `fits_domain`) a value outside the schema's domain
    is clamped, or its row dropped (`modelshare.common.data.domain_fit.fit_to_domain`), and the table left
    without a row is the error; without it such a value is a `LocalDataError`. A file that cannot be
    read at all (absent, unreadable) raises `DataUnavailable`, which may pass; any other read or
    schema error becomes `LocalDataError`.

    A classification study that does not fit the domain reads the file a block at a time straight into
    ``(X, y)`` (`modelshare.common.data.datasets.streamed.stream_encoded`, which names a value that does not fit
    as this path does); a file the blocks leave to the whole-file reader, a regression schema and a dp or dps
    study read it whole here.
    """
    path = config.data_path
    class_column = config.class_column or schema.class_name
    if isinstance(schema, Schema) and not fit_domain:
        try:
            streamed = stream_encoded(path, schema, class_column, missing=config.missing)
        except SchemaError as exc:
            raise LocalDataError(str(exc)) from None
        if streamed is not None:
            return LocalTable(streamed.X, streamed.y, streamed.dropped_rows)
    try:
        frame = read_frame(path)
    except SchemaError as exc:
        if _unavailable(path, exc):
            raise DataUnavailable(data_file_problem(path) or str(exc)) from None
        raise LocalDataError(str(exc)) from None
    try:
        frame, dropped = settle_missing(_select(frame, schema, class_column, path), schema, config.missing, str(path))
        if frame.empty:
            raise SchemaError("no row to learn from: the table has a header and no data rows", source=str(path))
        fitted = None
        if fit_domain:
            frame, fitted = fit_to_domain(frame, schema, source=str(path))
            if frame.empty:
                raise SchemaError(f"no row to learn from: every row was dropped ({fitted.describe()})",
                                  source=str(path))
        X, y = schema.encode(frame, source=str(path))
    except SchemaError as exc:
        raise LocalDataError(str(exc)) from None
    return LocalTable(X, y, dropped, fitted)


def _release(study: Study, X: np.ndarray, y: np.ndarray) -> Release:
    """The release the study asks for: k-AnonToRdt or eps-DP trees, or the study's learner's tree made safe.

    A regression study (its schema has a numeric target) is answered by a DiffPETs regression
    forest (the `Study` refuses any other mechanism for it). The whole-release mechanisms draw their
    structure, samples and noise from fresh OS entropy, never from the study's public seed: their
    privacy rests on nobody knowing which rows each tree sampled or what noise was added.
    """
    training = study.training
    return train_and_release(study.mechanism, study.schema, X, y,
                             requirement=study.requirement,
                             disclosure=study.disclosure, learner=training.learner,
                             learner_params=training.learner_params(), max_depth=training.max_depth,
                             seed=study.seed % _SEED_MODULUS, prior_share=study.prior_share).release


def build_submission(
    study: Study, X: np.ndarray, y: np.ndarray, *, owner_id: str, key: Ed25519PrivateKey
) -> fpb.SignedEnvelope:
    """The signed envelope of `prepare_submission`."""
    return prepare_submission(study, X, y, owner_id=owner_id, key=key).envelope


def prepare_submission(
    study: Study, X: np.ndarray, y: np.ndarray, *, owner_id: str, key: Ed25519PrivateKey
) -> SignedRelease:
    """Train on ``(X, y)`` and release as the study asks (`_release`), audit the release as the miner will, and sign it.

    The audit runs before anything is signed (and, in the daemon, before the budget is charged);
    the combining reader's figures on the owner's own rows come back for its log only.

    Raises
    ------
    RequirementUnsatisfiable
        No pruning of the local tree meets the requirement; the caller refuses the study.
    EmptyRelease
        The release carries no rows (e.g. k-AnonToRdt suppressed every count of a small table):
        it would pass the audit yet give the miner nothing to mine; the caller refuses the study.
    FailedAudit
        The owner's own audit of the release failed (a broken mechanism); nothing is signed.
    RequirementError, ValueError
        The mechanism does not take the study's requirement (or similar spec faults).
    """
    release = _release(study, X, y)
    if release.released_total <= 0:
        raise EmptyRelease(f"the {study.mechanism} release of {len(y)} local rows carries no rows "
                           f"({len(release.trees)} tree(s), every released total 0)")
    result = audit(release.forest if release.task == "regression" else release.trees, release.report, figures=False)
    if not result.passed:
        failed = "; ".join(f"{c.name}: {c.detail}" for c in result.checks if not c.passed)
        raise FailedAudit(f"the {study.mechanism} release fails the owner's own audit: {failed}")
    message = model_message(release, study_id=study.study_id, owner_id=owner_id)
    prior = class_prior_of(release.report)
    return SignedRelease(sign_payload(message.SerializeToString(), key),
                         owner_readers(release.trees, X, y, release.report.requirement),
                         prior if prior is not None and prior.declined is not None else None)


def build_refusal(study_id: str, refusal: Refusal, *, owner_id: str, key: Ed25519PrivateKey) -> fpb.SignedEnvelope:
    """A signed `OwnerRefusal` of study ``study_id``: ``refusal``'s code and data-independent sentence, a fresh
    nonce, the time."""
    message = refusal_message(refusal, study_id=study_id, owner_id=owner_id)
    return sign_payload(message.SerializeToString(), key)
