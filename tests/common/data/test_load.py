"""Many owners at once: 60 concurrent clients over mutual TLS, every submission accounted for.

The bench-sized run is ``python bench/miner_ingest.py --threads 64`` (bench/RESULTS.md); this is the
test-sized one. Each owner has its own channel and thread, all released from one barrier, and each
sends its envelope twice at once, so duplicate detection races against itself too.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import grpc
import numpy as np

from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.miner_node.store import verify_log
from tests.federation_helpers import deal, make_federation, signed_model, study_spec

OWNERS = [f"owner-{i:02d}" for i in range(60)]


def test_sixty_concurrent_owners_are_all_accounted_for(tmp_path, car):
    fed = make_federation(tmp_path, OWNERS)
    fed.start()
    try:
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("load")), timeout=10).spec
        envelopes = {o: signed_model(fed, o, spec, *part) for o, part in deal(*car[1:], OWNERS).items()}
        stubs = {o: fed.stub(o) for o in OWNERS}
        for stub in stubs.values():  # connect (TLS handshakes) before the clock starts
            stub.Health(fpb.HealthRequest(), timeout=30)
        calls = [o for o in OWNERS for _ in range(2)]
        acks: list[fpb.SubmitAck | None] = [None] * len(calls)
        errors: list[str] = []
        latency = np.zeros(len(calls))
        start = threading.Barrier(len(calls) + 1)

        def submit(i: int, owner: str) -> None:
            start.wait()
            t0 = time.perf_counter()
            try:
                acks[i] = stubs[owner].Submit(envelopes[owner], timeout=60)
            except grpc.RpcError as exc:
                errors.append(f"{owner}: {exc.code().name}: {exc.details()}")
            latency[i] = time.perf_counter() - t0

        threads = [threading.Thread(target=submit, args=(i, o)) for i, o in enumerate(calls)]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join(120)
        wall = time.perf_counter() - t0
        print(f"{len(calls)} concurrent submits: {len(calls) / wall:.0f}/s, "
              f"p50 {np.percentile(latency, 50) * 1e3:.0f} ms, p99 {np.percentile(latency, 99) * 1e3:.0f} ms")
        assert not errors, errors[:3]
        for owner in OWNERS:  # one fresh accept and one duplicate per owner, with the same submission id
            mine = [a for a, o in zip(acks, calls, strict=False) if o == owner]
            assert sorted(a.duplicate for a in mine) == [False, True]
            assert mine[0].submission_id == mine[1].submission_id
        status = fed.stub("admin").GetStudy(fpb.StudyRef(study_id="load"), timeout=10)
        assert {o.state for o in status.owners} <= {"submitted"} and len(status.owners) == len(OWNERS)
        state = fed.miner.config.state_dir
    finally:
        fed.close()
    db = sqlite3.connect(f"file:{state / 'miner.sqlite'}?mode=ro", uri=True)
    try:
        assert db.execute("SELECT COUNT(*), COUNT(DISTINCT owner_id) FROM submissions").fetchone() == (60, 60)
        assert db.execute("SELECT COUNT(*) FROM nonces").fetchone()[0] == 60
    finally:
        db.close()
    assert verify_log(state).ok
