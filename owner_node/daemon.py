"""The owner daemon: dial out to the miner, answer each announced study, never answer one twice.

Sites sit behind firewalls, so the owner runs no server: it polls the miner over mutual TLS
(`Poll` holds the call until a study is waiting), checks each announced study against the
site's policy, and answers with exactly one signed envelope per study: a released model
(`Submit`, or `SubmitChunks` in 1 MiB pieces for one over `modelshare.common.federation.chunks.UNARY_MAX_BYTES`)
or a refusal (`Refuse`). A refusal carries a reason code and its data-independent
sentence (`modelshare.common.federation.refusal`); what made the owner refuse (a bad cell, the budget spent,
the policy's reasons in words) is logged here and never sent.

Durability: an answer is written to ``state_dir/outbox/<study_id>.bin`` (atomically, fsynced)
before it is first sent, and every retry, and every restart, sends exactly those bytes. A retry
after a lost acknowledgement is therefore the identical envelope, which the miner recognises
(same submission id, the SHA-256 of the bytes) instead of seeing a second, different answer.
Once the miner acknowledges (or answers ALREADY_EXISTS / FAILED_PRECONDITION: the answer is
final either way) the file moves to ``state_dir/sent/`` and a line is appended to
``state_dir/answers.jsonl``. One FAILED_PRECONDITION is not final: a stored answer the miner finds
older than its freshness window (the miner was down longer than the window) is signed again over
the same release with a fresh timestamp and nonce, replaces the stored bytes and is resent
(`modelshare.common.federation.freshness`); nothing is retrained and the budget is not charged again. When
the miner says this site's clock itself is off by more than the window, the answer stays in the
outbox and the status file shows the skew.

Health: the daemon keeps ``state_dir/status.json`` (`modelshare.owner_node.status.StatusFile`: pid, state, last contact
with the miner, consecutive failures, last answer), rewritten atomically after every poll and
answer, which ``modelshare owner status`` reads for a service manager.

A study can close while the owner trains (the admin cancels it, or its deadline passes): the owner
asks the miner once more, after training and before charging its budget ledger, whether the study
still waits for it, and drops the release unsent and uncharged if not. Answers to a cancelled study
are refused by the miner with FAILED_PRECONDITION and settled like any final answer.

Transient failures (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, and RESOURCE_EXHAUSTED from a miner at
its limit of concurrent calls) are retried with exponential backoff and full jitter; any other
status (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED, RESOURCE_EXHAUSTED for a message or an
answer over the miner's or the study's size limit or a model over the miner's node or tree limit, ...) gives up on the
study until the next restart, keeping its outbox file,
logging the miner's message and naming it under ``gave_up`` in the status file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Literal

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from modelshare.common.federation.chunks import STREAM_MIN_BYTES_PER_SECOND, TOO_LARGE, UNARY_MAX_BYTES, envelope_chunks
from modelshare.common.federation.dial import dial_miner
from modelshare.common.federation.freshness import SENT_AT, restamp, trailing_verdict
from modelshare.common.federation.kit import REVOKED, Roster
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fpb_grpc
from modelshare.common.federation.refusal import Refusal
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import key_id, load_signing_key, sign_payload
from modelshare.common.federation.wire import DEFAULT_MAX_MESSAGE_BYTES, OVER_MINER_LIMIT
from modelshare.common.files import atomic_write, fsync_dir
from modelshare.common.mechanisms.pruning import RequirementUnsatisfiable
from modelshare.common.study import STUDY_ID, Study, StudyError
from modelshare.owner_node.budget import Ledger
from modelshare.owner_node.config import OwnerConfig, OwnerConfigError
from modelshare.owner_node.status import StatusFile, utc_now
from modelshare.owner_node.training import (
    DataUnavailable,
    EmptyRelease,
    FailedAudit,
    LocalDataError,
    build_refusal,
    data_file_problem,
    fits_domain,
    load_local_table,
    prepare_submission,
)

__all__ = [
    "POLL_GRACE_SECONDS",
    "POLL_WAIT_SECONDS",
    "Backoff",
    "Outbox",
    "Outcome",
    "OwnerDaemon",
    "Signer",
    "StudyClosed",
    "deliver",
    "envelope_kind",
    "is_final_failure",
]

log = logging.getLogger("modelshare.owner")

POLL_WAIT_SECONDS = 10
try:
    SOFTWARE_VERSION = version("modelshare")  # sent in every Poll, for the admin's fleet view
except PackageNotFoundError:  # run from a source tree that was never installed
    SOFTWARE_VERSION = "unknown"
POLL_GRACE_SECONDS = 5  # the Poll deadline is its hold time plus this
SEND_TIMEOUT_SECONDS = 30
DATA_LAST_CALL_SECONDS = 60
"""A study whose local table is still unreadable this long before its deadline is refused (data-unavailable)."""
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL})
FINAL = frozenset({grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION})

Kind = Literal["submit", "refuse"]

class StudyClosed(Exception):
    """The miner no longer waits for this owner's answer to a study (cancelled, failed or mined meanwhile)."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: attempt n waits uniformly in [0, min(cap, base * 2**n)].

    The default cap of 4 s lets an owner reach a restarted miner within about 4 s of it serving again, while
    the jitter (a wait of 2 s on average per owner once capped) keeps owners from hammering a miner that is down."""

    base: float = 0.5
    cap: float = 4.0
    attempts: int = 8  # sends per study per round; a study still unsent stays in the outbox

    def ceiling(self, attempt: int) -> float:
        """The longest wait before retry ``attempt`` (0-based): ``min(cap, base * 2**attempt)``."""
        return min(self.cap, self.base * 2.0 ** min(attempt, 32))

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait before retry ``attempt`` (0-based); full jitter spreads retrying owners apart."""
        return rng.uniform(0.0, self.ceiling(attempt))


DATA_RETRY = Backoff(base=5.0, cap=120.0)
"""Waits between attempts to read a local table that could not be read (deterministic: `Backoff.ceiling`)."""


@dataclass(frozen=True)
class Outcome:
    """What became of one study in a round.

    ``outcome`` is ``submitted`` or ``refused`` (the miner holds the answer), ``deferred`` (not
    acknowledged yet; the outbox keeps it for the next round), ``gave-up`` (the miner rejected
    it; kept in the outbox until a restart) or ``skipped`` (already answered, or unusable id).
    """

    study_id: str
    outcome: str
    reason: str = ""
    submission_id: str = ""


def envelope_kind(data: bytes) -> Kind:
    """Whether stored envelope bytes carry a model (``submit``) or a refusal (``refuse``).

    A `ModelMessage` always carries at least one tree (field 7, or field 9 for a regression
    forest); an `OwnerRefusal` has neither field, so parsing the payload as a ModelMessage tells
    them apart without a side file.
    """
    payload = fpb.SignedEnvelope.FromString(data).payload
    message = fpb.ModelMessage.FromString(payload)
    return "submit" if message.trees or message.regression_trees else "refuse"


class Outbox:
    """Answers in ``state_dir``: ``outbox/`` (not yet acknowledged), ``sent/`` and ``answers.jsonl``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.pending_dir = self.state_dir / "outbox"
        self.sent_dir = self.state_dir / "sent"
        self.answers = self.state_dir / "answers.jsonl"
        for directory in (self.state_dir, self.pending_dir, self.sent_dir):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    @staticmethod
    def _name(study_id: str) -> str:
        if not STUDY_ID.fullmatch(study_id):
            raise ValueError(f"study id {study_id!r} is not usable as a file name ({STUDY_ID.pattern})")
        return f"{study_id}.bin"

    def path(self, study_id: str) -> Path:
        """Where the pending answer to ``study_id`` is kept."""
        return self.pending_dir / self._name(study_id)

    def put(self, study_id: str, data: bytes) -> Path:
        """Store an answer durably (temporary file, fsync, rename, fsync of the directory)."""
        path = self.path(study_id)
        atomic_write(path, data, mode=0o600)
        return path

    def read(self, study_id: str) -> bytes | None:
        """The pending answer's exact bytes, or None when there is none."""
        path = self.path(study_id)
        return path.read_bytes() if path.is_file() else None

    def pending(self) -> list[str]:
        """Study ids with an unacknowledged answer, sorted (temporary files are ignored)."""
        return sorted(p.stem for p in self.pending_dir.glob("*.bin") if STUDY_ID.fullmatch(p.stem))

    def is_sent(self, study_id: str) -> bool:
        """Whether the miner has already settled an answer to ``study_id`` (kept in ``sent/``)."""
        return (self.sent_dir / self._name(study_id)).is_file()

    def settle(self, study_id: str, *, outcome: str, submission_id: str, status: str) -> None:
        """Record the miner's acknowledgement, then move the answer to ``sent/``.

        The record is appended first: a crash in between resends the same bytes on restart and
        at worst repeats the record, but never loses it.
        """
        record = {"study_id": study_id, "outcome": outcome, "submission_id": submission_id,
                  "status": status, "time": datetime.now(timezone.utc).isoformat()}
        with open(self.answers, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(self.path(study_id), self.sent_dir / self._name(study_id))
        fsync_dir(self.sent_dir)


def _status(exc: grpc.RpcError) -> tuple[grpc.StatusCode | None, str]:
    """The status code and details of a failed call (errors raised by gRPC calls carry both)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return code, details or ""


def _code_name(code: grpc.StatusCode | None) -> str:
    """The name of a failed call's status code, for messages (an `RpcError` raised without a status has none)."""
    return code.name if code is not None else "no status"


def _trailers(exc: grpc.RpcError) -> tuple[tuple[str, str | bytes], ...]:
    """A failed call's trailing metadata as (key, value) pairs: grpc hands named tuples ``(key, value)`` whose
    value is a str, or bytes under a ``-bin`` key; an `RpcError` raised without a call has none."""
    trailers = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    return tuple((item.key, item.value) for item in trailers or ())


def _revoked_at(exc: grpc.RpcError) -> str | None:
    """When this site was revoked, if the miner refused the call because it was (its `REVOKED` trailer), else None."""
    for key, value in _trailers(exc):
        if key == REVOKED:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return None


def is_final_failure(code: grpc.StatusCode | None, details: str) -> bool:
    """Whether a failed send can never succeed by sending the same bytes again (so retrying is pointless).

    RESOURCE_EXHAUSTED is both: gRPC answers it for a message over the receiver's size limit
    ("Received message larger than max") and the miner for an answer over the study's limit
    (`modelshare.common.federation.chunks.TOO_LARGE`) or a model over its tree or node limit
    (`modelshare.common.federation.wire.OVER_MINER_LIMIT`), which no retry cures, and for a server at its limit of
    concurrent calls, which passes. Every status outside `RETRYABLE` is final.
    """
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return any(words in details for words in ("larger than max", TOO_LARGE, OVER_MINER_LIMIT))
    return code not in RETRYABLE


@dataclass(frozen=True)
class Signer:
    """What re-signing a stale answer needs: the owner's key and its clock (seconds since the epoch)."""

    key: Ed25519PrivateKey
    clock: Callable[[], float] = time.time


def _restamped(data: bytes, signer: Signer) -> bytes:
    """The stored envelope ``data`` signed again over the same answer with a fresh timestamp and nonce."""
    envelope = fpb.SignedEnvelope.FromString(data)
    payload = restamp(envelope.payload, now=signer.clock(), refusal=envelope_kind(data) == "refuse")
    return sign_payload(payload, signer.key).SerializeToString()


def deliver(
    stub: fpb_grpc.OwnerExchangeStub,
    outbox: Outbox,
    study_id: str,
    *,
    stop: threading.Event,
    backoff: Backoff = Backoff(),
    rng: random.Random | None = None,
    signer: Signer | None = None,
    on_skew: Callable[[float | None, str], None] | None = None,
) -> Outcome:
    """Send the outbox answer to ``study_id`` (exactly its stored bytes) until the miner settles it.

    Each call carries the owner's clock (`modelshare.common.federation.freshness.SENT_AT`). When the miner
    refuses the answer as ``stale`` (stored longer than its freshness window, e.g. through an
    outage), the same answer is signed again with a fresh timestamp and nonce by ``signer``,
    replaces the stored bytes, and is sent at once: the release is unchanged, so nothing is
    retrained or charged again. When it refuses it for ``clock-skew``, ``on_skew(skew, message)``
    is told and the study is deferred (resigning cannot help until the clock is set right).
    """
    data = outbox.read(study_id)
    if data is None:
        raise FileNotFoundError(f"no pending answer for study {study_id!r} in {outbox.pending_dir}")
    kind = envelope_kind(data)
    outcome = "submitted" if kind == "submit" else "refused"
    clock = signer.clock if signer is not None else time.time
    rng = rng or random.Random()
    restamped = False
    for attempt in range(backoff.attempts):
        if stop.is_set():
            break
        digest = hashlib.sha256(data).hexdigest()
        try:
            ack = _send(stub, kind, data, study_id, metadata=((SENT_AT, f"{clock():.3f}"),))
        except grpc.RpcError as exc:
            code, details = _status(exc)
            if stop.is_set():
                break
            verdict, skew = trailing_verdict(_trailers(exc))
            if verdict == "stale" and signer is not None and not restamped:
                data, restamped = _restamped(data, signer), True
                outbox.put(study_id, data)
                log.warning("study %s: the miner refused the stored %s as stale (%s); signed the same answer again "
                            "with a fresh timestamp and nonce, resending", study_id, kind, details,
                            extra={"study": study_id, "outcome": "restamped"})
                continue
            if verdict is not None:  # a skewed clock, or still stale after resigning: only time or an admin helps
                if on_skew is not None:
                    on_skew(skew, details)
                log.error("study %s: the miner refuses the %s: %s; the answer stays in %s", study_id, kind, details,
                          outbox.path(study_id), extra={"study": study_id, "outcome": f"deferred:{verdict}"})
                return Outcome(study_id, "deferred", f"{_code_name(code)}: {details}", digest)
            if code in FINAL:
                outbox.settle(study_id, outcome=outcome, submission_id=digest, status=code.name)
                log.info("study %s: %s; miner says %s: %s", study_id, outcome, code.name, details,
                         extra={"study": study_id, "outcome": f"{outcome}:{code.name}"})
                return Outcome(study_id, outcome, f"{code.name}: {details}", digest)
            if is_final_failure(code, details):
                log.error("study %s: giving up until restart; miner rejected the %s: %s: %s (kept in %s)",
                          study_id, kind, _code_name(code), details, outbox.path(study_id),
                          extra={"study": study_id, "outcome": "gave-up"})
                return Outcome(study_id, "gave-up", f"{_code_name(code)}: {details}", digest)
            if attempt + 1 < backoff.attempts:
                delay = backoff.delay(attempt, rng)
                log.warning("study %s: %s: %s; retry %d in %.1f s", study_id, _code_name(code),
                            details, attempt + 1, delay)
                stop.wait(delay)
            continue
        status = "duplicate" if ack.duplicate else "OK"
        outbox.settle(study_id, outcome=outcome, submission_id=ack.submission_id or digest, status=status)
        log.info("study %s: %s; acknowledged as %s (%s)", study_id, outcome, ack.submission_id, status,
                 extra={"study": study_id, "outcome": outcome})
        return Outcome(study_id, outcome, status, ack.submission_id or digest)
    why = "stop requested" if stop.is_set() else f"not acknowledged after {backoff.attempts} attempts"
    log.warning("study %s: %s; the answer stays in %s", study_id, why, outbox.path(study_id),
                extra={"study": study_id, "outcome": "deferred"})
    return Outcome(study_id, "deferred", why, hashlib.sha256(data).hexdigest())


def _send(stub: fpb_grpc.OwnerExchangeStub, kind: Kind, data: bytes, study_id: str,
          metadata: tuple[tuple[str, str], ...]) -> fpb.SubmitAck:
    """One attempt to send the stored envelope ``data``: a refusal, or a release of at most
    `UNARY_MAX_BYTES`, whole; a larger release in pieces (``SubmitChunks``), with a deadline that grows
    with its size. Either way the miner takes the same bytes down the same path."""
    if kind == "refuse":
        return stub.Refuse(fpb.SignedEnvelope.FromString(data), timeout=SEND_TIMEOUT_SECONDS, metadata=metadata)
    if len(data) <= UNARY_MAX_BYTES:
        return stub.Submit(fpb.SignedEnvelope.FromString(data), timeout=SEND_TIMEOUT_SECONDS, metadata=metadata)
    timeout = SEND_TIMEOUT_SECONDS + len(data) / STREAM_MIN_BYTES_PER_SECOND
    return stub.SubmitChunks(envelope_chunks(data, study_id), timeout=timeout, metadata=metadata)


def _check_roster(config: OwnerConfig, own_key_id: str) -> None:
    """The miner must be a current miner of the roster, and this owner's key the roster's key for it."""
    roster = Roster.load(config.roster)
    miner = roster.get(config.miner_name)
    if miner is None or miner.role != "miner" or miner.revoked:
        state = "absent" if miner is None else "revoked" if miner.revoked else f"a {miner.role}"
        raise OwnerConfigError(f"{config.path}: miner_name {config.miner_name!r} is {state} in roster {config.roster}")
    me = roster.get(config.name)
    if me is None or me.key_id != own_key_id:
        raise OwnerConfigError(
            f"{config.path}: signing_key {config.signing_key} is not the key roster {config.roster} "
            f"holds for owner {config.name!r}; the miner would reject every answer"
        )


class OwnerDaemon:
    """One owner's client of the miner: poll, decide per study, answer durably.

    Parameters
    ----------
    config:
        The validated ``owner.toml``.
    insecure:
        Dial in plaintext (``--insecure`` given on the command line); debugging only.
    backoff:
        Retry timing of sends and polls.
    clock:
        Seconds since the epoch: stamps the answers it signs again when the miner finds them stale.
    data_retry:
        Waits between attempts to read a local table that could not be read (`DataUnavailable`).
    """

    def __init__(self, config: OwnerConfig, *, insecure: bool = False, backoff: Backoff = Backoff(),
                 clock: Callable[[], float] = time.time, data_retry: Backoff = DATA_RETRY) -> None:
        if config.insecure and not insecure:
            raise OwnerConfigError(f"{config.path}: [owner] insecure = true takes effect only with --insecure "
                                   "on the command line; the config alone cannot turn TLS off")
        self.config = config
        self.insecure = insecure
        self.backoff = backoff
        self.clock = clock
        self.data_retry = data_retry
        self._data_waits: dict[str, tuple[int, float]] = {}  # study -> (attempts, monotonic time of the next)
        self.key = load_signing_key(config.signing_key)
        _check_roster(config, key_id(self.key.public_key()))
        self.outbox = Outbox(config.state_dir)
        self.ledger = Ledger(config.state_dir)
        self.status = StatusFile(config.state_dir, owner=config.name, miner=config.miner)
        self.watch_data_file()
        self._rng = random.Random()
        self._settled: set[str] = set()  # answered, or given up on, during this process
        self._channel = self._open_channel()
        self._stub = fpb_grpc.OwnerExchangeStub(self._channel)

    def _open_channel(self) -> grpc.Channel:
        if self.insecure:
            log.warning("dialling %s in PLAINTEXT (--insecure): no authentication, no confidentiality",
                        self.config.miner)
        return dial_miner(self.config.miner, None if self.insecure else self.config.tls, self.config.miner_name)

    def close(self) -> None:
        """Close the channel; an in-flight call ends with CANCELLED."""
        self._channel.close()

    def __enter__(self) -> OwnerDaemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- loop
    def run(self, stop: threading.Event) -> None:
        """Resend the outbox, then poll and answer until ``stop`` is set (which also ends a held Poll)."""
        threading.Thread(target=self._close_when, args=(stop,), name="owner-stop", daemon=True).start()
        try:
            self._serve(stop)
        except (grpc.RpcError, ValueError):  # a call cut short by the channel closing on stop
            if not stop.is_set():
                raise
        finally:
            if self.status.data.get("state") != "revoked":  # revoked is final: it stays what status shows
                self.status.update(state="stopped", study=None, pending=len(self.outbox.pending()))
        log.info("owner %s stopped", self.config.name)

    def _close_when(self, stop: threading.Event) -> None:
        stop.wait()
        self.close()

    def _serve(self, stop: threading.Event) -> None:
        self.resend_outbox(stop)
        failures = 0
        while not stop.is_set():
            try:
                outcomes = self.run_once(POLL_WAIT_SECONDS, stop)
            except grpc.RpcError as exc:
                if stop.is_set():
                    return
                code, details = _status(exc)
                if (revoked_at := _revoked_at(exc)) is not None:
                    log.error("the miner %s refuses this site: %s; revoked is final, the daemon stops polling "
                              "(a new kit is needed to take part again)", self.config.miner, details)
                    self.status.failure(f"poll: {_code_name(code)}: {details}", state="revoked")
                    self.status.update(revoked_at=revoked_at, study=None)
                    return
                delay = self.backoff.delay(failures, self._rng)
                failures += 1
                log.warning("poll of %s failed: %s: %s; retrying in %.1f s",
                            self.config.miner, _code_name(code), details, delay)
                self.status.failure(f"poll: {_code_name(code)}: {details}", state="backing-off")
                stop.wait(delay)
                continue
            failures = 0
            if outcomes and all(o.outcome == "skipped" for o in outcomes):
                stop.wait(POLL_WAIT_SECONDS)  # the miner keeps announcing studies already answered

    def resend_outbox(self, stop: threading.Event) -> list[Outcome]:
        """Send every answer left unacknowledged by an earlier run (exactly its stored bytes)."""
        outcomes = []
        for study_id in self.outbox.pending():
            if stop.is_set():
                break
            log.info("study %s: resending the stored answer", study_id)
            outcomes.append(self._deliver(study_id, stop))
        return outcomes

    def run_once(self, wait_seconds: int = POLL_WAIT_SECONDS, stop: threading.Event | None = None) -> list[Outcome]:
        """One Poll (held up to ``wait_seconds``) and an answer to every study it returned.

        Raises
        ------
        grpc.RpcError
            The Poll itself failed; `run` retries it with backoff.
        """
        stop = stop or threading.Event()
        reply = self._stub.Poll(self._poll_request(wait_seconds), timeout=wait_seconds + POLL_GRACE_SECONDS)
        self.status.contact(state="polling")
        self.watch_data_file()
        outcomes = []
        for announcement in reply.studies:
            if stop.is_set():
                break
            outcomes.append(self.answer(announcement.spec, stop))
        return outcomes

    def _poll_request(self, wait_seconds: int) -> fpb.PollRequest:
        """A Poll that tells the miner this site's software version and health (never a private detail: a missing
        data file is "waiting for its data file", without its path)."""
        health = "ok" if self.status.data.get("data_file") is None else "waiting for its data file"
        return fpb.PollRequest(wait_seconds=wait_seconds, version=SOFTWARE_VERSION, health=health)

    def watch_data_file(self) -> str | None:
        """Look whether the data file is there to read, and record the answer in the status file's ``data_file``.

        A missing or unreadable file does not stop the daemon: it keeps polling, a study announced meanwhile
        waits for the file (`_data_unavailable`), and ``owner status`` shows the wait. Returns the problem, or None.
        """
        problem = data_file_problem(self.config.data_path)
        previous = self.status.data.get("data_file")
        if problem is None:
            if previous is not None:
                log.info("the data file %s is readable again", self.config.data_path)
                self.status.update(data_file=None)
            return None
        if not isinstance(previous, dict) or previous.get("problem") != problem:
            log.warning("%s ([data] path of %s); waiting for it: studies announced meanwhile wait until %d s before "
                        "their deadline", problem, self.config.path, DATA_LAST_CALL_SECONDS)
            self.status.update(data_file={"path": str(self.config.data_path), "problem": problem, "since": utc_now()})
        return problem

    # ------------------------------------------------------------- answers
    def answer(self, spec: fpb.StudySpec, stop: threading.Event) -> Outcome:
        """Decide on ``spec`` (unless an answer is already stored) and deliver the answer."""
        study_id = spec.study_id
        if not STUDY_ID.fullmatch(study_id):
            log.warning("study %r: skipped; the id is not a valid study id (%s)", study_id, STUDY_ID.pattern)
            return Outcome(study_id, "skipped", "invalid study id")
        if study_id in self._settled:
            return Outcome(study_id, "skipped", "answered earlier in this run")
        if self.outbox.is_sent(study_id):
            self._settled.add(study_id)
            log.warning("study %s: skipped; already answered (%s)", study_id, self.outbox.sent_dir)
            return Outcome(study_id, "skipped", "already answered")
        if self.outbox.read(study_id) is None:
            waiting = self._data_waits.get(study_id)
            if waiting is not None and time.monotonic() < waiting[1]:
                return Outcome(study_id, "skipped", "waiting for the local table to become readable")
            self.status.update(state="answering", study=study_id)
            try:
                envelope, kind, reason = self._decide(spec)
            except DataUnavailable as exc:
                answer = self._data_unavailable(spec, exc)
                if answer is None:
                    return Outcome(study_id, "deferred", f"the local table cannot be read: {exc}")
                envelope, kind, reason = answer
            except StudyClosed:
                self._settled.add(study_id)
                self.status.update(state="polling", study=None)
                log.info("study %s: skipped; the miner no longer waits for it (cancelled or closed while this site "
                         "trained): nothing released, no budget charged", study_id,
                         extra={"study": study_id, "outcome": "skipped:closed"})
                return Outcome(study_id, "skipped", "the study was cancelled or closed; nothing released")
            self.outbox.put(study_id, envelope.SerializeToString())
            (log.warning if kind == "refuse" else log.info)("study %s: %s: %s", study_id, kind, reason)
            self._data_waits.pop(study_id, None)
            # the ignore below: the status record holds what this daemon wrote: a table
            problems = {k: v for k, v in dict(self.status.data.get("data_problems") or {}).items() if k != study_id}  # type: ignore[call-overload]
            self.status.update(last_decision={"study_id": study_id, "kind": kind, "detail": reason, "at": utc_now()},
                               data_problems=problems)
        return self._deliver(study_id, stop)

    def _data_unavailable(self, spec: fpb.StudySpec,
                          exc: DataUnavailable) -> tuple[fpb.SignedEnvelope, Kind, str] | None:
        """The local table cannot be read now: wait for it (None; retried with backoff), or, once the
        study's deadline is `DATA_LAST_CALL_SECONDS` away, refuse it (data-unavailable) so the miner learns why.

        A missing or unreadable file is often a passing state (a file being replaced, a mount that
        dropped); refusing at once would fail a study that needs every site's answer for good.
        """
        study_id = spec.study_id
        attempts = self._data_waits.get(study_id, (0, 0.0))[0] + 1
        left = spec.deadline.ToSeconds() - self.clock() - DATA_LAST_CALL_SECONDS
        if left <= 0:
            self._data_waits.pop(study_id, None)
            return self._refusal(study_id, Refusal("data-unavailable"), f"the local table stayed unreadable through "
                                                                  f"{attempts} attempt(s) until "
                                 f"the deadline neared: {exc}")
        delay = min(self.data_retry.ceiling(attempts - 1), left)
        self._data_waits[study_id] = (attempts, time.monotonic() + delay)
        retry_at = datetime.fromtimestamp(self.clock() + delay, timezone.utc).isoformat(timespec="seconds")
        # the ignore below: the status record holds what this daemon wrote: a table
        problems = dict(self.status.data.get("data_problems") or {})  # type: ignore[call-overload]
        problems[study_id] = {"error": str(exc), "attempts": attempts, "next_retry_at": retry_at}
        self.status.update(state="polling", study=None, data_problems=problems)
        log.warning("study %s: the local table cannot be read (attempt %d): %s; retrying in %.0f s, until %.0f s "
                    "before the deadline", study_id, attempts, exc, delay, DATA_LAST_CALL_SECONDS,
                    extra={"study": study_id, "outcome": "waiting-for-data"})
        return None

    def _deliver(self, study_id: str, stop: threading.Event) -> Outcome:
        self.status.update(state="answering", study=study_id)
        outcome = deliver(self._stub, self.outbox, study_id, stop=stop, backoff=self.backoff, rng=self._rng,
                          signer=Signer(self.key, self.clock), on_skew=self._clock_skew)
        if outcome.outcome != "deferred":
            self._settled.add(study_id)
        record = {"study_id": study_id, "outcome": outcome.outcome, "reason": outcome.reason, "at": utc_now()}
        changes: dict[str, object] = {"state": "polling", "study": None, "last_outcome": record,
                                      "pending": len(self.outbox.pending())}
        if outcome.outcome == "gave-up":
            # the ignore below: the status record holds what this daemon wrote: a table
            changes["gave_up"] = {**self.status.data.get("gave_up", {}), study_id: outcome.reason}  # type: ignore[dict-item]
        if outcome.outcome == "deferred" and not stop.is_set():
            self.status.failure(f"{study_id}: {outcome.reason}", **changes)
        elif outcome.outcome == "deferred":
            self.status.update(**changes)
        elif outcome.outcome == "gave-up":  # the miner answered, and no resend will change its mind
            self.status.contact(**changes)
        else:  # submitted or refused: the miner took it, so the clock is within its window
            self.status.contact(**changes, clock_skew_seconds=None)
        return outcome

    def _clock_skew(self, skew: float | None, message: str) -> None:
        """Record in the status file that the miner refuses this
        owner's timestamps, and by how much the clock is off."""
        self.status.update(clock_skew_seconds=None if skew is None else round(skew, 1))
        log.error("the miner refuses this owner's timestamps: %s", message)

    def _decide(self, spec: fpb.StudySpec) -> tuple[fpb.SignedEnvelope, Kind, str]:
        """The signed answer to ``spec``: a release if policy, budget, data and the mechanism allow it, else a refusal.

        The study is decoded here, once (`modelshare.common.federation.serde`); everything after takes the `Study`.
        The third element is the local account of the answer (for the log and the status file);
        for a refusal it holds the details the refusal itself does not send.
        """
        try:
            study = study_from_pb(spec, where="study")
        except StudyError as exc:
            return self._refusal(spec.study_id, Refusal("bad-study"), str(exc))
        return self._answer_study(study)

    def _answer_study(self, study: Study) -> tuple[fpb.SignedEnvelope, Kind, str]:
        """`_decide` for a decoded study."""
        policy = self.config.policy
        findings = policy.findings(study, self.config.miner_name, self.ledger)
        if findings:
            keys = tuple(key for finding in findings for key in finding.keys)
            return self._refusal(study.study_id, Refusal("policy", keys),
                                 "; ".join(finding.text for finding in findings))
        over = self.ledger.over_cap(study, policy.lifetime_epsilon, policy.lifetime_delta)
        if over is not None:
            return self._refusal(study.study_id, Refusal("budget"), over)
        try:
            table = load_local_table(self.config, study.schema, fit_domain=fits_domain(study.mechanism))
        except DataUnavailable:
            raise  # `answer` waits for it (it may pass) rather than refusing
        except LocalDataError as exc:
            return self._refusal(study.study_id, Refusal("bad-local-data"), f"local table: {exc}")
        X, y = table
        notes = f"; {table.dropped} row(s) with a missing value dropped" if table.dropped else ""
        if table.dropped:
            log.warning("study %s: dropped %d row(s) of %s with a missing value (the [data] missing policy is %r)",
                        study.study_id, table.dropped, self.config.data_path, self.config.missing)
        if table.fitted is not None and table.fitted.changed:  # the site's log and status only, never the answer
            notes += f"; fitted to the schema's domain: {table.fitted.describe()}"
            log.warning("study %s: fitted %s to the schema's public domain (a %s study refuses no row for it): %s",
                        study.study_id, self.config.data_path, study.mechanism, table.fitted.describe())
        try:
            submission = prepare_submission(study, X, y, owner_id=self.config.name, key=self.key)
        except FailedAudit as exc:  # before any charge: a correct mechanism never fails, and nothing was signed
            log.error("study %s: %s", study.study_id, exc)
            return self._refusal(study.study_id, Refusal("failed-audit"), str(exc))
        except RequirementUnsatisfiable as exc:
            return self._refusal(study.study_id, Refusal("unsatisfiable"), f"no pruning of the local tree meets "
                                                                 f"{study.requirement}: {exc}")
        except EmptyRelease as exc:
            # the dp/dps mechanism ran, and whether its output was empty is what the code tells the miner:
            # that answer is charged like a release, or repeated studies would learn it for free
            self._check_still_waiting(study.study_id)
            self.ledger.charge(study)
            return self._refusal(study.study_id, Refusal("empty-release"), str(exc))
        except ValueError as exc:  # RequirementError: the mechanism does not take the requirement; learner faults
            return self._refusal(study.study_id, Refusal("internal"), f"cannot release the local tree: {exc}")
        envelope = submission.envelope
        limit = study.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
        if (size := envelope.ByteSize()) > limit:
            # measured here, not learnt from RESOURCE_EXHAUSTED: no retries, and the cause stays at the site.
            # Which answer is sent depends on the computed release, so it is charged like one (see refusal)
            self._check_still_waiting(study.study_id)
            self.ledger.charge(study)
            return self._refusal(study.study_id, Refusal("too-large", limit_bytes=limit),
                                 f"the encoded {study.mechanism} release is {size} bytes; the "
                                 f"study's limit is {limit} bytes")
        self._check_still_waiting(study.study_id)
        declined = submission.declined
        # before the answer enters the outbox: no release leaves unrecorded; a declined one spent what it states
        self.ledger.charge(study, spent_epsilon=None if declined is None else declined.spent)
        if declined is not None:
            notes += f"; declined to release trees: {declined.declined}"
        claim = study.requirement_text
        reader = f"; {submission.account()}" if submission.account() else ""
        return envelope, "submit", f"{study.mechanism} release of {len(y)} local rows ({claim}){notes}{reader}"

    def _check_still_waiting(self, study_id: str) -> None:
        """Raise `StudyClosed` unless the miner still waits for this owner's answer to ``study_id``.

        Asked (a Poll that does not hold) after training and before the ledger is charged: a study
        the admin cancelled, or whose deadline closed it, while this site trained is answered by
        nobody and costs no budget. A cancellation after this check is refused by the miner
        (FAILED_PRECONDITION); the charge then stands, the conservative side.
        """
        reply = self._stub.Poll(fpb.PollRequest(wait_seconds=0), timeout=SEND_TIMEOUT_SECONDS)
        if not any(a.spec.study_id == study_id for a in reply.studies):
            raise StudyClosed(study_id)

    def _refusal(self, study_id: str, refusal: Refusal, detail: str) -> tuple[fpb.SignedEnvelope, Kind, str]:
        """The signed ``refusal`` (code and sentence only) and its local account ``code: detail``."""
        envelope = build_refusal(study_id, refusal, owner_id=self.config.name, key=self.key)
        return envelope, "refuse", f"{refusal.code}: {detail}"
