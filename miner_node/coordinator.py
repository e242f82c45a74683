"""Study lifecycle on the miner: open -> mining -> done | failed, driven by answers and deadlines.

The admin may cancel an open or mining study (`Store.cancel`); every move here is a compare-and-set
on the state it read (`Store.transition`), so a cancellation is never overwritten, and the results
of a study cancelled while it was mined are dropped.

A study is mined when every invited owner has answered (submitted or refused) with at least the
quorum submitted, or when its deadline passes with at least the quorum; it fails as soon as the
quorum can no longer be reached, or at the deadline without it, with a reason that names the
owners missing and the reasons of those that refused. Mining runs on one worker thread, off the
gRPC threads. Everything the lifecycle needs is in the store, so `resume` after a restart
(also after SIGKILL mid-mining) picks every study up where it was.

Nothing ends the mining worker: a study whose mining raises fails with ``mining failed: ...``; a
store that refuses the outcome (a full disk) keeps the mined results in memory and retries their
write with a growing pause, and `health` reports the problem until a write succeeds. A study
still mining `mining_timeout` seconds after it entered mining here fails with the reason
(`MINING_TOO_LONG`), and results that arrive later are dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.wire import decode_model
from modelshare.miner_node.config import MINING_TIMEOUT_SECONDS, MiningConfig
from modelshare.miner_node.mining import AcceptedModel, load_evaluation, mine
from modelshare.miner_node.pseudo_parquet import study_pseudo_dir
from modelshare.miner_node.store import Store, StoreError, StudyRow

__all__ = ["Coordinator", "DEADLINE_PASSED", "MINING_TOO_LONG", "QUORUM_UNREACHABLE"]

log = logging.getLogger("modelshare.miner")

#: The two causes a failed study's reason starts with (the admin's headline names the cause and
#: reads who answered from the owners' current states, which a late answer may have changed).
DEADLINE_PASSED = "the deadline passed"
QUORUM_UNREACHABLE = "the quorum cannot be reached"
MINING_TOO_LONG = "mining did not finish in time"
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 5.0


class Coordinator:
    """Decides when studies are mined or failed and runs the mining; notifies pollers of changes."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time,
                 mining_timeout: float = MINING_TIMEOUT_SECONDS, mining: MiningConfig | None = None,
                 state_dir: Path | None = None) -> None:
        self.store = store
        self.mining = mining or MiningConfig()
        self.state_dir = state_dir
        """Where the dask engine writes studies' pseudo-data
        (`modelshare.miner_node.pseudo_parquet.study_pseudo_dir`)."""
        self.clock = clock
        self.mining_timeout = mining_timeout
        self.changed = threading.Condition()
        self.problem: str | None = None
        """Why mining cannot progress right now (None while it can); `health` reports it."""
        self._listeners: list[Callable[[], None]] = []
        self._pending: dict[str, tuple[str, bytes | str]] = {}  # outcomes mined but not yet stored
        self._attempts: dict[str, int] = {}
        self._mining_since: dict[str, float] = {}  # monotonic time each study was queued for mining here
        self._current: tuple[str, float] | None = None  # the study the mining worker is on, since when
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -------------------------------------------------------------- threads
    def start(self) -> None:
        """Resume every unfinished study, then start the mining worker and the deadline watcher."""
        for row in self.store.studies("mining"):
            self._enqueue(row.study_id)
        for row in self.store.studies("open"):
            self.evaluate(row.study_id)
        for target, name in ((self._mine_loop, "miner-mining"), (self._deadline_loop, "miner-deadlines"),
                             (self._answer_loop, "miner-answers")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        self._answers.put(None)
        self.notify()
        for thread in self._threads:
            thread.join(timeout=30)

    def notify(self) -> None:
        """Wake everyone waiting for a change: threads on `changed`, and every `subscribe`d listener."""
        with self.changed:
            self.changed.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` (from whichever thread changed something; it must not block) on every change."""
        with self.changed:
            self._listeners.append(listener)

    def health(self) -> str | None:
        """Why mining cannot progress (a store that refuses its outcomes, a study mined for too long), or None."""
        current = self._current
        if self.problem is None and current is not None and time.monotonic() - current[1] > self.mining_timeout:
            return f"the mining worker has been busy with study {current[0]} for {time.monotonic() - current[1]:.0f} s"
        return self.problem

    def _enqueue(self, study_id: str) -> None:
        self._mining_since.setdefault(study_id, time.monotonic())
        self._queue.put(study_id)

    # ------------------------------------------------------------ decisions
    def answered(self, study_id: str) -> None:
        """An owner answered: re-evaluate the study on the lifecycle thread, off the request path."""
        self._answers.put(study_id)
        self.notify()

    def _answer_loop(self) -> None:
        """Re-evaluate answered studies; a burst of answers to one study costs one evaluation."""
        while not self._stop.is_set():
            pending = [self._answers.get()]
            while not self._answers.empty():
                pending.append(self._answers.get_nowait())
            if None in pending:
                return
            for study_id in dict.fromkeys(pending):
                try:
                    self.evaluate(study_id)  # type: ignore[arg-type]  # None was returned on above
                except StoreError as exc:
                    log.error("study %s: cannot update its state (%s); the deadline check retries", study_id, exc)

    def evaluate(self, study_id: str) -> None:
        """Move an open study on if its answers or its deadline decide it; otherwise leave it."""
        row = self.store.study(study_id)
        if row is None or row.state != "open":
            return
        spec = fpb.StudySpec.FromString(row.spec)
        invited = list(spec.owners)
        submitted = self.store.submitted_owners(study_id)
        refused = self.store.refusals(study_id)
        waiting = [o for o in invited if o not in submitted and o not in refused]
        quorum = spec.quorum
        expired = self.clock() >= spec.deadline.ToSeconds()
        if len(submitted) >= quorum and (not waiting or expired):
            if self.store.transition(study_id, "open", "mining"):
                self._enqueue(study_id)
        elif len(submitted) + len(waiting) < quorum or expired:
            why = DEADLINE_PASSED if expired and len(submitted) + len(waiting) >= quorum else QUORUM_UNREACHABLE
            self.store.transition(study_id, "open", "failed", self._failure(why, quorum, submitted, waiting, refused))
        else:
            return
        self.notify()

    @staticmethod
    def _failure(why: str, quorum: int, submitted: set[str], waiting: list[str],
                 refused: dict[str, tuple[str, float]]) -> str:
        parts = [f"{why}: {len(submitted)} of the {quorum} submissions needed"]
        if waiting:
            parts.append(f"no answer from {', '.join(sorted(waiting))}")
        parts += [f"{owner} refused: {reason}" for owner, (reason, _) in sorted(refused.items())]
        return "; ".join(parts)

    # --------------------------------------------------------------- mining
    def _mine_loop(self) -> None:
        """Mine queued studies one at a time; nothing a study does, and no store failure, ends this thread."""
        while not self._stop.is_set():
            study_id = self._queue.get()
            if study_id is None:
                return
            self._current = (study_id, time.monotonic())
            try:
                self._attempt(study_id)
            except Exception:  # a bug in the handling below: log it and keep mining the others
                log.exception("study %s: unexpected error while handling its mining", study_id)
            finally:
                self._current = None
            self.notify()

    def _attempt(self, study_id: str) -> None:
        """Mine one study and store its outcome; a store failure retries later and marks the miner unhealthy."""
        outcome = self._pending.pop(study_id, None)
        try:
            outcome = outcome or self._mined(study_id)
            if outcome is not None and (late := self._overdue(study_id)) is not None:
                outcome = "failed", late  # mined, or stored, too late: the same end as the deadline watcher's
            if outcome is not None:
                self._store_outcome(study_id, outcome)
        except StoreError as exc:
            if outcome is not None:
                self._pending[study_id] = outcome  # not mined again: only the write is retried
            self._retry(study_id, exc)
            return
        self._attempts.pop(study_id, None)
        self._mining_since.pop(study_id, None)
        self.problem = None

    def _mined(self, study_id: str) -> tuple[str, bytes | str] | None:
        """("done", results) or ("failed", reason) for a study in mining; None when it no longer is."""
        row = self.store.study(study_id)
        if row is None or row.state != "mining":
            return None
        try:
            return "done", self._mine(study_id, row)
        except StoreError:
            raise
        except Exception as exc:  # a bad study must not stop the worker
            log.exception("study %s: mining failed", study_id)
            return "failed", f"mining failed: {type(exc).__name__}: {exc}"

    def _store_outcome(self, study_id: str, outcome: tuple[str, bytes | str]) -> None:
        kind, value = outcome
        if kind == "failed":
            self.store.transition(study_id, "mining", "failed", str(value))
        elif self.store.finish(study_id, bytes(value)):  # type: ignore[arg-type]  # a done outcome carries bytes
            log.info("study %s: done", study_id, extra={"study": study_id, "outcome": "done"})
        else:
            row = self.store.study(study_id)
            log.info("study %s: %s while it was mined; its results are dropped", study_id,
                     "cancelled" if row is None or row.state == "cancelled" else f"{row.state} ({row.reason})")

    def _retry(self, study_id: str, exc: StoreError) -> None:
        """Requeue a study whose outcome could not be stored, after a pause that doubles up to `RETRY_MAX_SECONDS`."""
        attempt = self._attempts[study_id] = self._attempts.get(study_id, 0) + 1
        pause = min(RETRY_FIRST_SECONDS * 2 ** (attempt - 1), RETRY_MAX_SECONDS)
        self.problem = f"cannot store the outcome of study {study_id} ({exc}); retry {attempt} in {pause:g} s"
        log.error("study %s: cannot store its mining outcome (%s); retry %d in %.1f s", study_id, exc, attempt, pause)
        self.notify()
        if not self._stop.wait(pause):
            self._queue.put(study_id)

    def _mine(self, study_id: str, row: StudyRow) -> bytes:
        """The serialized results of mining the study's accepted models."""
        study = study_from_pb(fpb.StudySpec.FromString(row.spec))
        accepted = []
        for sub in self.store.submissions(study_id):
            message = fpb.ModelMessage.FromString(fpb.SignedEnvelope.FromString(sub.envelope).payload)
            accepted.append(AcceptedModel(sub.owner_id, decode_model(message)))
        table = self.store.evaluation(study_id)
        evaluation = load_evaluation(table, study.schema) if table else None
        pseudo_dir = None if self.state_dir is None else study_pseudo_dir(self.state_dir, study_id)
        results = mine(study, accepted, evaluation, mining=self.mining, pseudo_dir=pseudo_dir)
        log.info("study %s: mined %d models from %d owners in %.2f s (engine %s)", study_id, len(results.models),
                 len(accepted), results.mining_seconds, results.engine)
        return results.SerializeToString()

    def _deadline_loop(self) -> None:
        """Re-evaluate open studies once their deadlines pass, and
        fail studies mined for too long (every half second)."""
        while not self._stop.wait(0.5):
            now = self.clock()
            try:
                for row in self.store.studies("open"):
                    if now >= fpb.StudySpec.FromString(row.spec).deadline.ToSeconds():
                        self.evaluate(row.study_id)
                self._fail_overdue_mining()
            except StoreError as exc:
                log.error("deadline check: %s", exc)

    def _overdue(self, study_id: str) -> str | None:
        """The failure reason of a study that entered mining here more than `mining_timeout` seconds ago, else None."""
        since = self._mining_since.get(study_id)
        elapsed = 0.0 if since is None else time.monotonic() - since
        if elapsed <= self.mining_timeout:
            return None
        reason = (f"{MINING_TOO_LONG}: still mining {elapsed:.0f} s after it started; the limit is "
                  f"{self.mining_timeout:.0f} s (mining_timeout_seconds)")
        return reason + (f"; last problem: {self.problem}" if self.problem else "")

    def _fail_overdue_mining(self) -> None:
        """Fail each study mined for longer than `mining_timeout`; results that arrive later are dropped."""
        for study_id in list(self._mining_since):
            reason = self._overdue(study_id)
            if reason is None:
                continue
            if self.store.transition(study_id, "mining", "failed", reason):
                log.error("study %s: %s", study_id, reason, extra={"study": study_id, "outcome": "failed"})
                self.notify()
            self._mining_since.pop(study_id, None)
