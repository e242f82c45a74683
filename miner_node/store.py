"""The miner's durable store: studies, accepted envelopes, nonces, refusals, results, audit log.

SQLite in WAL mode with ``synchronous=FULL``: a submission is acknowledged only after the
transaction that stores its exact envelope bytes (and its nonce, and its audit-log entry) has
committed, so a miner killed at any point loses nothing it acknowledged. SQLite is the embedded
default because one miner per federation is the deployment unit; everything goes through this
class, so a server database can replace it.

The audit log is hash-chained: entry ``n`` stores ``sha256(hash[n-1] || canonical JSON of entry
n)``, so editing or deleting an entry breaks the chain. After every commit the head (last seq
and hash) is also written to ``audit.head`` beside the database (off the acknowledgement path,
at most every `HEAD_INTERVAL` seconds, and always on close); `verify_log` checks the chain
and that the log still reaches that head, which detects a truncated history.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelshare.common.files import atomic_write

__all__ = ["GENESIS", "LOCK_NAME", "LogVerdict", "StateDirInUse", "StateLock", "Store", "StoreError", "StudyRow",
           "Submission", "SubmitView", "verify_log"]

log = logging.getLogger("modelshare.miner")
GENESIS = "0" * 64
DB_NAME = "miner.sqlite"
HEAD_NAME = "audit.head"
LOCK_NAME = "miner.lock"
HEAD_INTERVAL = 0.2  # seconds between head-file rewrites while commits stream in

_SCHEMA = """
CREATE TABLE IF NOT EXISTS studies (
    study_id TEXT PRIMARY KEY,
    spec BLOB NOT NULL,
    evaluation BLOB,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS submissions (
    study_id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    submission_id TEXT NOT NULL,
    envelope BLOB NOT NULL,
    accepted_at REAL NOT NULL,
    PRIMARY KEY (study_id, owner_id)
);
CREATE TABLE IF NOT EXISTS refusals (
    study_id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (study_id, owner_id)
);
CREATE TABLE IF NOT EXISTS nonces (
    nonce BLOB PRIMARY KEY,
    owner_id TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    study_id TEXT PRIMARY KEY,
    results BLOB NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sites (
    owner_id TEXT PRIMARY KEY,
    last_poll_at REAL NOT NULL,
    version TEXT NOT NULL,
    health TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_log (
    seq INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    event TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
"""


class StoreError(RuntimeError):
    """The store cannot be opened or written (disk full, read-only, corrupt); nothing was acknowledged."""


class StateDirInUse(StoreError):
    """Another miner process holds the state directory's lock."""


class StateLock:
    """An exclusive `fcntl.flock` on ``state_dir/miner.lock``, held for the miner's lifetime, with its pid inside.

    Two miners on one state directory would both serve while only one can write (the second fails
    every append to the audit log), so the second refuses to start, naming the directory and the
    holder's pid. The kernel drops the lock when the holder exits, also on SIGKILL, so a stale
    lock file never blocks a restart.
    """

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        path = self.dir / LOCK_NAME
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot write to the miner store directory {self.dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirInUse(f"the miner state directory {self.dir} is in use by another miner (pid {holder}); "
                                "stop that miner first, or give this one its own state_dir") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"cannot write to the miner store directory {self.dir}: {exc.strerror or exc}") from None
        self._fd: int | None = fd

    def release(self) -> None:
        """Unlock (closing the file drops the lock); the file stays, the next miner overwrites its pid."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_STUDY_COLUMNS = "study_id, spec, state, reason, created_at, updated_at"
_SUBMIT_VIEW = ("SELECT s.study_id, s.spec, s.state, s.reason, s.created_at, s.updated_at, "
                "(SELECT submission_id FROM submissions WHERE study_id = ?1 AND owner_id = ?2), "
                "EXISTS (SELECT 1 FROM nonces WHERE nonce = ?3) FROM (SELECT 1) LEFT JOIN studies s ON s.study_id = ?1")


@dataclass(frozen=True)
class StudyRow:
    study_id: str
    spec: bytes
    state: str
    reason: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class SubmitView:
    """What a submission's checks read before its model is verified, in one read: the study (None when there is
    none), the id of the owner's stored submission to it (None when there is none), and whether the nonce is spent.
    The commit (`Store.accept`) checks the last two again inside its transaction."""

    study: StudyRow | None
    previous_id: str | None
    nonce_seen: bool


@dataclass(frozen=True)
class Submission:
    study_id: str
    owner_id: str
    submission_id: str
    envelope: bytes
    accepted_at: float


def entry_hash(prev_hash: str, seq: int, at: float, event: str) -> str:
    """The chained hash of one log entry (the canonical form the verifier recomputes)."""
    body = json.dumps({"seq": seq, "at": at, "event": event}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((prev_hash + body).encode("utf-8")).hexdigest()


class _Abandon(Exception):
    """Raised inside a write to undo its own changes and return ``value`` (e.g. an id already taken)."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


@dataclass(eq=False)
class _Write:
    """One queued write: the function to run inside the shared transaction and its outcome."""

    fn: Callable[[sqlite3.Connection], Any]
    done: bool = False
    result: Any = None
    error: BaseException | None = None


def _check_writable(directory: Path) -> None:
    """Refuse a store directory the miner cannot write (read-only filesystem, permissions, full disk).

    SQLite opens a read-only database without complaint and fails later with "unable to open
    database file" or "attempt to write a readonly database"; creating and syncing a probe file
    names the real cause (EROFS, EACCES, ENOSPC) at start-up instead.
    """
    probe = directory / ".write-probe"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as exc:
        raise StoreError(f"cannot write to the miner store directory {directory}: {exc.strerror or exc}") from None


class Store:
    """One SQLite database in ``state_dir``; thread-safe.

    Writes are group-committed: concurrent writers queue their work, the first becomes the leader
    and runs the whole queue in one transaction (each write in its own savepoint, so one failed
    write undoes only itself), commits once and writes the head file once; every writer returns
    only after that commit. This keeps the one-fsync-per-commit cost from capping ingest while
    the acknowledgement still follows durability. Reads use one read-only connection per thread,
    which WAL lets proceed while a commit is being synced.
    """

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            _check_writable(self.dir)
            self._db = sqlite3.connect(self.dir / DB_NAME, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the miner store in {self.dir}: {exc}") from None
        self._cv = threading.Condition()
        self._queue: list[_Write] = []
        self._writing = False
        self._closed = False
        self._readers: list[sqlite3.Connection] = []
        self._local = threading.local()
        self._head = self._read_head()
        self._tx_head = self._head
        self._head_changed = threading.Event()
        self._closing = threading.Event()
        self._head_writer = threading.Thread(target=self._keep_head_file, name="miner-audit-head", daemon=True)
        self._head_writer.start()

    # ------------------------------------------------------------ plumbing
    def close(self) -> None:
        """Finish the write in progress, bring the head file up to date and close every connection."""
        with self._cv:
            while self._writing:
                self._cv.wait()
            self._closed = True
        self._closing.set()
        self._head_changed.set()
        self._head_writer.join()
        with self._cv:
            for conn in [self._db, *self._readers]:
                conn.close()

    def _read_head(self) -> tuple[int, str]:
        row = self._db.execute("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
        return (0, GENESIS) if row is None else (int(row[0]), str(row[1]))

    def _reader(self) -> sqlite3.Connection:
        """This thread's read-only connection (opened on first use)."""
        conn = getattr(self._local, "db", None)
        if conn is None:
            with self._cv:
                if self._closed:
                    raise StoreError("the miner store is closed")
                conn = sqlite3.connect(self.dir / DB_NAME, check_same_thread=False, isolation_level=None)
                conn.execute("PRAGMA query_only=ON")
                self._readers.append(conn)
            self._local.db = conn
        return conn

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._reader().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the miner store: {exc}") from None

    def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` in a committed transaction (group-committed with concurrent writes); its result."""
        job = _Write(fn)
        with self._cv:
            if self._closed:
                raise StoreError("the miner store is closed")
            self._queue.append(job)
            while self._writing and not job.done:
                self._cv.wait()
            batch: list[_Write] = []
            if not job.done:
                batch, self._queue = self._queue, []
                if self._closed:
                    self._fail(batch, StoreError("the miner store is closed"))
                    batch = []
                else:
                    self._writing = True
        if batch:
            try:
                self._commit(batch)
            finally:
                self._fail([j for j in batch if not j.done], StoreError("the write was interrupted"))
                with self._cv:
                    self._writing = False
                    self._cv.notify_all()
        if job.error is not None:
            raise job.error
        return job.result

    def _commit(self, batch: list[_Write]) -> None:
        """One transaction for the batch: a savepoint per write, one COMMIT, one head-file write.

        SQLite rolls the whole transaction back by itself on some errors (a full disk, I/O
        errors), after which the savepoints are gone: then every write of the batch failed, and
        each writer gets the `StoreError`, never the ``no such savepoint`` that undoing it raises.
        """
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._fail(batch, StoreError(f"cannot write the miner store: {exc}"))
            return
        self._tx_head = self._head
        current: _Write | None = None
        try:
            for current in batch:
                self._run_one(db, current)
            current = None
            db.execute("COMMIT")
        except sqlite3.Error as err:
            self._abandon_transaction(db)
            # the error of the write that lost the transaction says why ("disk is full"), not the failed undo
            cause = current.error if current is not None and isinstance(current.error, StoreError) else None
            self._fail(batch, cause or StoreError(f"cannot commit to the miner store: {err}"))
            return
        if self._tx_head != self._head:
            self._head = self._tx_head
            self._head_changed.set()
        for job in batch:
            job.done = True

    @staticmethod
    def _abandon_transaction(db: sqlite3.Connection) -> None:
        """Roll back what is left of a failed transaction (SQLite may have rolled it back already)."""
        if db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _run_one(self, db: sqlite3.Connection, job: _Write) -> None:
        """Run one write in its own savepoint; on any failure undo just that write.

        Raises `sqlite3.Error` when the savepoint itself cannot be set, undone or released (the
        transaction is lost): `_commit` then fails the whole batch.
        """
        head = self._tx_head
        db.execute("SAVEPOINT one_write")
        try:
            job.result = job.fn(db)
        except Exception as exc:  # handed back to the writer's own thread
            if isinstance(exc, _Abandon):
                job.result = exc.value
            elif isinstance(exc, sqlite3.Error):
                job.error = StoreError(f"cannot write the miner store: {exc}")
            else:
                job.error = exc
            self._tx_head = head
            db.execute("ROLLBACK TO one_write")
        db.execute("RELEASE one_write")

    @staticmethod
    def _fail(batch: list[_Write], error: StoreError) -> None:
        for job in batch:
            job.result, job.error, job.done = None, error, True

    def _append_log(self, db: sqlite3.Connection, event: dict[str, Any]) -> None:
        """Append one chained entry inside the open transaction."""
        seq, prev = self._tx_head
        seq += 1
        at = time.time()
        text = json.dumps(event, sort_keys=True, separators=(",", ":"))
        digest = entry_hash(prev, seq, at, text)
        db.execute("INSERT INTO audit_log VALUES (?, ?, ?, ?, ?)", (seq, at, text, prev, digest))
        self._tx_head = (seq, digest)

    def _keep_head_file(self) -> None:
        """Write the latest committed head to ``audit.head`` after commits, off the acknowledgement path.

        The head only has to trail the log (verify-log tolerates a lagging head; it detects a log
        shorter than the head), so while commits stream in it is rewritten at most every
        `HEAD_INTERVAL` seconds and its fsync does not compete with the commits' own; `close`
        writes the final head.
        """
        while True:
            self._head_changed.wait()
            self._head_changed.clear()
            closing = self._closed  # once closed, no commit follows: this write is the final head
            try:
                self._write_head()
            except OSError as exc:
                log.warning("cannot update %s (%s); the log itself is committed", self.dir / HEAD_NAME, exc)
            if closing:
                return
            self._closing.wait(HEAD_INTERVAL)

    def _write_head(self) -> None:
        seq, digest = self._head
        atomic_write(self.dir / HEAD_NAME, json.dumps({"seq": seq, "hash": digest}) + "\n")

    # ---------------------------------------------------------------- sites
    def record_poll(self, owner: str, at: float, version: str, health: str) -> None:
        """Keep ``owner``'s last poll: when, the version and the health it sent (the admin's fleet view)."""

        def write(db: sqlite3.Connection) -> None:
            db.execute("INSERT INTO sites VALUES (?, ?, ?, ?) ON CONFLICT(owner_id) DO UPDATE SET "
                       "last_poll_at = excluded.last_poll_at, version = excluded.version, health = excluded.health",
                       (owner, at, version, health))

        self._write(write)

    def sites(self) -> dict[str, tuple[float, str, str]]:
        """owner -> (last poll time, version, health) of every owner that ever polled."""
        return {o: (at, v, h)
                for o, at, v, h in self._rows("SELECT owner_id, last_poll_at, version, health FROM sites")}

    # -------------------------------------------------------------- studies
    def create_study(self, study_id: str, spec: bytes, evaluation: bytes | None, *, by: str) -> bool:
        """Store a new open study; False if the id is taken (nothing changes)."""

        def write(db: sqlite3.Connection) -> bool:
            if db.execute("SELECT 1 FROM studies WHERE study_id = ?", (study_id,)).fetchone():
                raise _Abandon(False)
            now = time.time()
            db.execute("INSERT INTO studies VALUES (?, ?, ?, 'open', '', ?, ?)", (study_id, spec, evaluation, now, now))
            self._append_log(db, {"kind": "study-created", "study": study_id, "by": by})
            return True

        return bool(self._write(write))

    def transition(self, study_id: str, old: str, new: str, reason: str = "") -> bool:
        """Move a study from state ``old`` to ``new`` and log it; False (nothing changes) if it is no longer ``old``.

        Compare-and-set, because an admin may cancel a study between the lifecycle's read of its
        state and this write: the cancellation must stand.
        """

        def write(db: sqlite3.Connection) -> bool:
            changed = db.execute("UPDATE studies SET state = ?, reason = ?, updated_at = ? WHERE "
                                 "study_id = ? AND state = ?",
                                 (new, reason, time.time(), study_id, old)).rowcount
            if not changed:
                raise _Abandon(False)
            self._append_log(db, {"kind": "study-state", "study": study_id, "state": new, "reason": reason})
            return True

        return bool(self._write(write))

    def cancel(self, study_id: str, *, by: str, reason: str) -> str:
        """Cancel an open or mining study: its state becomes ``cancelled``, with who did it in the log.

        Returns ``"cancelled"``; or, changing nothing, ``"already"`` (cancelled before),
        ``"missing"`` (no such study) or the final state it ended in (``"done"``, ``"failed"``).
        """

        def write(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT state FROM studies WHERE study_id = ?", (study_id,)).fetchone()
            state = "missing" if row is None else str(row[0])
            if state not in ("open", "mining"):
                raise _Abandon("already" if state == "cancelled" else state)
            text = f"cancelled by {by}" + (f": {reason}" if reason else "")
            db.execute("UPDATE studies SET state = 'cancelled', reason = ?, updated_at = ? WHERE study_id = ?",
                       (text, time.time(), study_id))
            self._append_log(db, {"kind": "study-cancelled", "study": study_id, "by": by, "reason": reason,
                                  "previous_state": state})
            return "cancelled"

        return str(self._write(write))

    def study(self, study_id: str) -> StudyRow | None:
        """A study's spec and state (not its evaluation table: see `evaluation`)."""
        rows = self._rows(f"SELECT {_STUDY_COLUMNS} FROM studies WHERE study_id = ?", (study_id,))
        return StudyRow(*rows[0]) if rows else None

    def studies(self, state: str | None = None) -> list[StudyRow]:
        if state is None:
            rows = self._rows(f"SELECT {_STUDY_COLUMNS} FROM studies ORDER BY created_at, study_id")
        else:
            rows = self._rows(f"SELECT {_STUDY_COLUMNS} FROM studies WHERE state = ? ORDER BY created_at, study_id",
                              (state,))
        return [StudyRow(*r) for r in rows]

    def evaluation(self, study_id: str) -> bytes | None:
        """The evaluation table the admin sent with the study, if any."""
        rows = self._rows("SELECT evaluation FROM studies WHERE study_id = ?", (study_id,))
        return None if not rows or rows[0][0] is None else bytes(rows[0][0])

    # ---------------------------------------------------------- submissions
    def submission(self, study_id: str, owner_id: str) -> Submission | None:
        rows = self._rows("SELECT * FROM submissions WHERE study_id = ? AND owner_id = ?", (study_id, owner_id))
        return Submission(*rows[0]) if rows else None

    def submissions(self, study_id: str) -> list[Submission]:
        """Accepted submissions of a study, ordered by owner id (the order mining uses)."""
        rows = self._rows("SELECT * FROM submissions WHERE study_id = ? ORDER BY owner_id", (study_id,))
        return [Submission(*r) for r in rows]

    def submitted_owners(self, study_id: str) -> set[str]:
        """Owners with an accepted submission to the study (no envelopes read)."""
        return {r[0] for r in self._rows("SELECT owner_id FROM submissions WHERE study_id = ?", (study_id,))}

    def nonce_seen(self, nonce: bytes) -> bool:
        return bool(self._rows("SELECT 1 FROM nonces WHERE nonce = ?", (nonce,)))

    def submit_view(self, study_id: str, owner_id: str, nonce: bytes) -> SubmitView:
        """The study, the owner's stored submission id and whether ``nonce`` is spent, in one query (`SubmitView`)."""
        row = self._rows(_SUBMIT_VIEW, (study_id, owner_id, nonce))[0]
        return SubmitView(None if row[0] is None else StudyRow(*row[:6]), row[6], bool(row[7]))

    def accept(self, sub: Submission, nonce: bytes) -> str:
        """Commit an accepted submission with its nonce and log entry.

        Returns ``"accepted"``, or ``"duplicate"`` when the identical envelope is already stored,
        or ``"conflict"`` when the owner already submitted a different one, or ``"replay"`` when
        the nonce is taken (both leave the store unchanged).
        """

        def write(db: sqlite3.Connection) -> str:
            old = db.execute(
                "SELECT submission_id FROM submissions WHERE study_id = ? AND owner_id = ?",
                (sub.study_id, sub.owner_id)
            ).fetchone()
            if old is not None:
                return "duplicate" if old[0] == sub.submission_id else "conflict"
            if db.execute("SELECT 1 FROM nonces WHERE nonce = ?", (nonce,)).fetchone():
                return "replay"
            db.execute("INSERT INTO submissions VALUES (?, ?, ?, ?, ?)",
                       (sub.study_id, sub.owner_id, sub.submission_id, sub.envelope, sub.accepted_at))
            db.execute("INSERT INTO nonces VALUES (?, ?, ?)", (nonce, sub.owner_id, sub.accepted_at))
            self._append_log(db, {"kind": "submission", "outcome": "accepted", "study": sub.study_id,
                                  "owner": sub.owner_id, "submission": sub.submission_id})
            return "accepted"

        return str(self._write(write))

    def refuse(self, study_id: str, owner_id: str, reason: str, nonce: bytes) -> bool:
        """Record an owner's refusal; False if it already answered the study."""

        def write(db: sqlite3.Connection) -> bool:
            answered = db.execute(
                "SELECT 1 FROM submissions WHERE study_id = ? AND owner_id = ? UNION "
                "SELECT 1 FROM refusals WHERE study_id = ? AND owner_id = ?", (study_id, owner_id, study_id, owner_id)
            ).fetchone()
            if answered or db.execute("SELECT 1 FROM nonces WHERE nonce = ?", (nonce,)).fetchone():
                raise _Abandon(False)
            now = time.time()
            db.execute("INSERT INTO refusals VALUES (?, ?, ?, ?)", (study_id, owner_id, reason, now))
            db.execute("INSERT INTO nonces VALUES (?, ?, ?)", (nonce, owner_id, now))
            self._append_log(db, {"kind": "refusal", "study": study_id, "owner": owner_id, "reason": reason})
            return True

        return bool(self._write(write))

    def refusals(self, study_id: str) -> dict[str, tuple[str, float]]:
        rows = self._rows("SELECT owner_id, reason, at FROM refusals WHERE study_id = ?", (study_id,))
        return {r[0]: (r[1], r[2]) for r in rows}

    def log_rejection(self, event: dict[str, Any], *, outcome: str = "rejected") -> None:
        """Append a submission that was not stored to the audit log, ``rejected`` or ``interrupted`` (nothing else
        is stored)."""
        self._write(lambda db: self._append_log(db, {"kind": "submission", "outcome": outcome, **event}))

    def count_submissions(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM submissions")[0][0])

    # -------------------------------------------------------------- results
    def finish(self, study_id: str, results: bytes) -> bool:
        """Store a study's results and mark it done, in one transaction; False (nothing stored) unless it is mining.

        A study cancelled while it was being mined stays cancelled and its results are dropped.
        """

        def write(db: sqlite3.Connection) -> bool:
            now = time.time()
            changed = db.execute("UPDATE studies SET state = 'done', reason = '', updated_at = ? "
                                 "WHERE study_id = ? AND state = 'mining'", (now, study_id)).rowcount
            if not changed:
                raise _Abandon(False)
            db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?)", (study_id, results, now))
            self._append_log(db, {"kind": "study-state", "study": study_id, "state": "done", "reason": ""})
            return True

        return bool(self._write(write))

    def results(self, study_id: str) -> bytes | None:
        rows = self._rows("SELECT results FROM results WHERE study_id = ?", (study_id,))
        return bytes(rows[0][0]) if rows else None


@dataclass(frozen=True)
class LogVerdict:
    """The outcome of `verify_log`: whether the history is intact, how many entries, and why not."""

    ok: bool
    entries: int
    problems: tuple[str, ...]


def _log_rows(db: sqlite3.Connection) -> Iterator[tuple[int, float, str, str, str]]:
    yield from db.execute("SELECT seq, at, event, prev_hash, hash FROM audit_log ORDER BY seq")


def verify_log(state_dir: str | Path) -> LogVerdict:
    """Re-check the audit log's hash chain and that it reaches the recorded head."""
    state_dir = Path(state_dir)
    db_path = state_dir / DB_NAME
    if not db_path.exists():
        return LogVerdict(False, 0, (f"no miner store at {db_path}",))
    db = _open_read_only(db_path)
    problems: list[str] = []
    prev, expected_seq, count = GENESIS, 1, 0
    hashes: dict[int, str] = {}
    logged: set[tuple[str, str, str]] = set()
    try:
        for seq, at, event, prev_hash, digest in _log_rows(db):
            count += 1
            if seq != expected_seq:
                problems.append(f"entry {seq}: expected entry {expected_seq} (entries deleted or reordered)")
            if prev_hash != prev:
                problems.append(f"entry {seq}: previous hash does not match entry {seq - 1}")
            if entry_hash(prev_hash, seq, at, event) != digest:
                problems.append(f"entry {seq}: content does not match its hash (edited)")
            prev, expected_seq = digest, seq + 1
            hashes[seq] = digest
            logged |= _accepted_key(event)
        accepted = db.execute("SELECT study_id, owner_id, submission_id FROM submissions").fetchall()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the miner store {db_path}: {exc}") from None
    finally:
        db.close()
    for study, owner, submission in accepted:
        if (study, owner, submission) not in logged:
            problems.append(f"stored submission of {owner} to {study} has no log entry")
    problems += _head_problems(state_dir / HEAD_NAME, hashes, count)
    return LogVerdict(not problems, count, tuple(problems))


def _open_read_only(db_path: Path) -> sqlite3.Connection:
    """A read-only connection to the store, also on a read-only filesystem.

    A WAL database opened read-only still needs its shared-memory file, which SQLite cannot create
    on a read-only filesystem ("unable to open database file"). A miner stopped cleanly leaves no
    write-ahead log, so the file alone is the whole database and is opened as immutable; with a
    log left behind (the miner is running, or was killed) the error says how to check it instead.
    """
    opened = _try_open(f"file:{db_path}?mode=ro")
    wal = db_path.with_name(db_path.name + "-wal")
    if isinstance(opened, sqlite3.Error) and (not wal.exists() or wal.stat().st_size == 0):
        opened = _try_open(f"file:{db_path}?mode=ro&immutable=1")
    if isinstance(opened, sqlite3.Connection):
        return opened
    hint = (f"; {wal.name} holds writes not yet folded into the database and SQLite cannot read them without writing "
            "beside it: copy the state directory to writable storage (or stop the miner cleanly) and check the copy"
            if wal.exists() else "")
    raise StoreError(f"cannot read the miner store {db_path}: {opened}{hint}")


def _try_open(uri: str) -> sqlite3.Connection | sqlite3.Error:
    """A connection that has read the store's schema, or the error opening it gave (the connection closed)."""
    try:
        db = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        return exc
    try:
        db.execute("SELECT 1 FROM audit_log LIMIT 1")  # connecting is lazy: this opens the file
    except sqlite3.Error as exc:
        db.close()
        return exc
    return db


def _accepted_key(event: str) -> set[tuple[str, str, str]]:
    """The (study, owner, submission) an accepted-submission entry records; empty for other entries."""
    try:
        data = json.loads(event)
    except ValueError:
        return set()
    if not isinstance(data, dict) or data.get("kind") != "submission" or data.get("outcome") != "accepted":
        return set()
    return {(str(data.get("study")), str(data.get("owner")), str(data.get("submission")))}


def _head_problems(head_path: Path, hashes: dict[int, str], count: int) -> list[str]:
    """A log that no longer reaches the head recorded after the last commit was truncated or rewritten."""
    if not head_path.exists():
        return [f"{head_path} is missing"] if count else []
    try:
        head = json.loads(head_path.read_text(encoding="utf-8"))
        seq, digest = int(head["seq"]), str(head["hash"])
    except (ValueError, KeyError, TypeError):
        return [f"{head_path} is unreadable"]
    if seq == 0:
        return []
    if seq not in hashes:
        return [f"the log ends at entry {count} but the head records entry {seq} (history truncated)"]
    if hashes[seq] != digest:
        return [f"entry {seq} does not match the recorded head hash (history rewritten)"]
    return []
