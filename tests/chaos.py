"""Chaos for the miner: SIGKILL it again and again while owners submit, whole and in pieces; count what survives.

`run_chaos` provisions a federation, starts `modelshare miner serve` as its own process, creates studies
that every owner answers, and then, round after round, has every owner whose answer was not yet
acknowledged send it (half the owners with ``Submit``, half with ``SubmitChunks`` in small pieces) while
the miner is killed with SIGKILL after a seeded number of acknowledgements (up to the pending answers' share
of the kills left, so that every kill meets answers in flight), and restarted. At the end every
owner resends its exact bytes (as the daemon's outbox does). The result says what was acknowledged, what
was stored, how often, whether every resend of an acknowledged answer was a duplicate of the same
submission, whether every study finished, and whether the audit log verifies. Used by
`tests/federation/test_chaos.py` (a few kills) and `bench/chaos.py` (many).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from modelshare.common.federation.chunks import envelope_chunks
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.miner_node.store import verify_log
from tests.federation_helpers import Federation, make_federation, signed_model, study_spec

PIECE_BYTES = 997  # small pieces: a release of Car's tree travels in a dozen or more


@dataclass
class ChaosResult:
    """What one chaos run saw; `holds` is its verdict."""

    studies: int = 0
    kills: int = 0
    submissions: int = 0
    acknowledged: set[tuple[str, str]] = field(default_factory=set)
    stored: dict[tuple[str, str], int] = field(default_factory=dict)
    resends_not_duplicate: list[tuple[str, str]] = field(default_factory=list)
    studies_done: int = 0
    log_ok: bool = False
    restart_seconds: list[float] = field(default_factory=list)
    chunked_acks: int = 0

    @property
    def lost(self) -> set[tuple[str, str]]:
        return {key for key in self.acknowledged if self.stored.get(key, 0) == 0}

    @property
    def duplicated(self) -> dict[tuple[str, str], int]:
        return {key: n for key, n in self.stored.items() if n != 1}

    @property
    def holds(self) -> bool:
        return (not self.lost and not self.duplicated and not self.resends_not_duplicate and self.log_ok
                and len(self.stored) == self.submissions and self.studies_done == self.studies)


def stored_submissions(state_dir: Path) -> dict[tuple[str, str], int]:
    """Stored submissions per (study, owner), read straight from the miner's database."""
    db = sqlite3.connect(f"file:{state_dir / 'miner.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT study_id, owner_id, COUNT(*) FROM submissions GROUP BY study_id, owner_id").fetchall()
    finally:
        db.close()
    return {(study, owner): n for study, owner, n in rows}


class _Round:
    """Every pending answer sent at once from its own thread; acknowledgements counted as they come."""

    def __init__(self, fed: Federation, pending: dict[tuple[str, str], bytes], chunked: set[str]) -> None:
        self.acks: dict[tuple[str, str], fpb.SubmitAck] = {}
        self.failed = 0
        self.done = threading.Condition()
        self._threads = [threading.Thread(target=self._send, args=(fed, key, data, key[1] in chunked), daemon=True)
                         for key, data in pending.items()]
        self._stubs = {owner: fed.stub(owner) for _, owner in pending}

    def _send(self, fed: Federation, key: tuple[str, str], data: bytes, chunked: bool) -> None:
        stub = self._stubs[key[1]]
        try:
            if chunked:
                ack = stub.SubmitChunks(envelope_chunks(data, key[0], PIECE_BYTES), timeout=30)
            else:
                ack = stub.Submit(fpb.SignedEnvelope.FromString(data), timeout=30)
        except grpc.RpcError:
            with self.done:
                self.failed += 1
                self.done.notify_all()
            return
        with self.done:
            self.acks[key] = ack
            self.done.notify_all()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def wait_for(self, acks: int, timeout: float = 120) -> None:
        with self.done:
            self.done.wait_for(lambda: len(self.acks) >= acks or len(self.acks) + self.failed == len(self._threads),
                               timeout)

    def join(self) -> None:
        for thread in self._threads:
            thread.join(60)


def run_chaos(tmp: Path, parts: dict[str, tuple[np.ndarray, np.ndarray]], *, kills: int, studies: int,
              seed: int, study_timeout: float = 180) -> ChaosResult:
    """Kill the miner ``kills`` times while the owners of ``parts`` answer ``studies`` studies (module docstring)."""
    owners = sorted(parts)
    chunked = set(owners[1::2])
    rng = np.random.default_rng(seed)
    fed = make_federation(tmp, owners, address="localhost:0")
    state, log = fed.kits["miner"] / "state", tmp / "miner.log"
    result = ChaosResult(studies=studies)
    miner = fed.serve(log)
    try:
        answers: dict[tuple[str, str], bytes] = {}
        for s in range(studies):
            spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec(f"chaos-{s}")), timeout=10).spec
            for owner in owners:
                answers[(spec.study_id, owner)] = signed_model(fed, owner, spec, *parts[owner]).SerializeToString()
        result.submissions = len(answers)
        acknowledged: dict[tuple[str, str], fpb.SubmitAck] = {}
        while result.kills < kills and len(acknowledged) < len(answers):
            pending = {key: data for key, data in answers.items() if key not in acknowledged}
            round_ = _Round(fed, pending, chunked)
            round_.start()
            share = max(1, len(pending) // (kills - result.kills))  # the acknowledgements spread over the kills left
            round_.wait_for(int(rng.integers(0, share + 1)))
            miner.kill()
            result.kills += 1
            round_.join()
            fed.close_channels()
            acknowledged.update(round_.acks)
            result.chunked_acks += sum(1 for _, owner in round_.acks if owner in chunked)
            started = time.monotonic()
            miner = fed.serve(log)
            result.restart_seconds.append(time.monotonic() - started)
        for key, data in answers.items():  # every owner resends its exact bytes, as its outbox does
            stub = fed.stub(key[1])
            again = (stub.SubmitChunks(envelope_chunks(data, key[0], PIECE_BYTES), timeout=30) if key[1] in chunked
                     else stub.Submit(fpb.SignedEnvelope.FromString(data), timeout=30))
            if key in acknowledged and not (again.duplicate and again.submission_id == acknowledged[key].submission_id):
                result.resends_not_duplicate.append(key)
        for s in range(studies):
            result.studies_done += fed.wait_study(f"chaos-{s}", timeout=study_timeout).state == "done"
        result.acknowledged = set(acknowledged)
        result.stored = stored_submissions(state)
    finally:
        fed.close()
    result.log_ok = verify_log(state).ok
    return result


__all__ = ["ChaosResult", "PIECE_BYTES", "run_chaos", "stored_submissions"]
