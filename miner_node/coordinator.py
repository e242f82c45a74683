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
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

from common.federation.pb import federation_pb2 as fpb
from common.federation.study import spec_schema
from common.federation.wire import decode_model
from miner_node.mining import AcceptedModel, load_evaluation, mine
from miner_node.store import Store, StoreError

__all__ = ["Coordinator", "DEADLINE_PASSED", "QUORUM_UNREACHABLE"]

log = logging.getLogger("modelshare.miner")

#: The two causes a failed study's reason starts with (the admin's headline names the cause and
#: reads who answered from the owners' current states, which a late answer may have changed).
DEADLINE_PASSED = "the deadline passed"
QUORUM_UNREACHABLE = "the quorum cannot be reached"


class Coordinator:
    """Decides when studies are mined or failed and runs the mining; notifies pollers of changes."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self.changed = threading.Condition()
        self._queue: "queue.Queue[str | None]" = queue.Queue()
        self._answers: "queue.Queue[str | None]" = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -------------------------------------------------------------- threads
    def start(self) -> None:
        """Resume every unfinished study, then start the mining worker and the deadline watcher."""
        for row in self.store.studies("mining"):
            self._queue.put(row.study_id)
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
        with self.changed:
            self.changed.notify_all()

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
                    self.evaluate(study_id)  # type: ignore[arg-type]
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
                self._queue.put(study_id)
        elif len(submitted) + len(waiting) < quorum or expired:
            why = DEADLINE_PASSED if expired and len(submitted) + len(waiting) >= quorum else QUORUM_UNREACHABLE
            self.store.transition(study_id, "open", "failed", self._failure(why, quorum, submitted, waiting, refused))
        else:
            return
        self.notify()

    @staticmethod
    def _failure(why: str, quorum: int, submitted: set[str], waiting: list[str], refused: dict[str, tuple[str, float]]) -> str:
        parts = [f"{why}: {len(submitted)} of the {quorum} submissions needed"]
        if waiting:
            parts.append(f"no answer from {', '.join(sorted(waiting))}")
        parts += [f"{owner} refused: {reason}" for owner, (reason, _) in sorted(refused.items())]
        return "; ".join(parts)

    # --------------------------------------------------------------- mining
    def _mine_loop(self) -> None:
        while not self._stop.is_set():
            study_id = self._queue.get()
            if study_id is None:
                return
            try:
                self._mine(study_id)
            except StoreError as exc:
                log.error("study %s: cannot store its results (%s); it stays in 'mining' and resumes on restart", study_id, exc)
            except Exception as exc:  # a bad study must not stop the worker
                log.exception("study %s: mining failed", study_id)
                self.store.transition(study_id, "mining", "failed", f"mining failed: {type(exc).__name__}: {exc}")
            self.notify()

    def _mine(self, study_id: str) -> None:
        row = self.store.study(study_id)
        if row is None or row.state != "mining":
            return
        spec = fpb.StudySpec.FromString(row.spec)
        schema = spec_schema(spec)
        accepted = []
        for sub in self.store.submissions(study_id):
            message = fpb.ModelMessage.FromString(fpb.SignedEnvelope.FromString(sub.envelope).payload)
            accepted.append(AcceptedModel(sub.owner_id, decode_model(message)))
        table = self.store.evaluation(study_id)
        evaluation = load_evaluation(table, schema) if table else None
        results = mine(spec, schema, accepted, evaluation)
        if not self.store.finish(study_id, results.SerializeToString()):
            log.info("study %s: cancelled while it was mined; its results are dropped", study_id)
            return
        log.info("study %s: done; %d models from %d owners in %.2f s", study_id, len(results.models),
                 len(accepted), results.mining_seconds)

    def _deadline_loop(self) -> None:
        """Re-evaluate open studies once their deadlines pass (checked every half second)."""
        while not self._stop.wait(0.5):
            now = self.clock()
            try:
                for row in self.store.studies("open"):
                    if now >= fpb.StudySpec.FromString(row.spec).deadline.ToSeconds():
                        self.evaluate(row.study_id)
            except StoreError as exc:
                log.error("deadline check: %s", exc)
