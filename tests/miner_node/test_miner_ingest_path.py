"""The miner's ingest path below gRPC: group-committed store writes and process-based model verification."""

from __future__ import annotations

import asyncio
import threading

import grpc
import numpy as np
import pytest

from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.wire import model_message
from modelshare.common.mechanisms.release import release as release_model
from modelshare.common.trees.learners import make_learner
from modelshare.miner_node.rpc import ChangeFeed
from modelshare.miner_node.store import Store, Submission, SubmitView, verify_log
from modelshare.miner_node.verify import ModelVerifier, Rejection, StudyTerms, check_model
from tests.federation_helpers import study_spec


def _submission(i: int) -> tuple[Submission, bytes]:
    return Submission("s1", f"owner-{i:03d}", f"id-{i}", b"envelope-%d" % i, float(i)), b"nonce-%d" % i


def test_concurrent_writes_are_all_committed_with_an_intact_log(tmp_path) -> None:
    store = Store(tmp_path)
    store.create_study("s1", b"spec", None, by="test")
    outcomes: dict[int, str] = {}
    start = threading.Barrier(32)

    def accept(i: int) -> None:
        start.wait()
        sub, nonce = _submission(i)
        outcomes[i] = store.accept(sub, nonce)

    threads = [threading.Thread(target=accept, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(outcomes.values()) == {"accepted"} and len(outcomes) == 32
    assert store.count_submissions() == 32
    store.close()
    verdict = verify_log(tmp_path)
    assert verdict.ok and verdict.entries == 33, verdict.problems


def test_a_failing_write_in_a_batch_undoes_only_itself(tmp_path) -> None:
    store = Store(tmp_path)
    store.create_study("s1", b"spec", None, by="test")
    sub, nonce = _submission(0)
    assert store.accept(sub, nonce) == "accepted"
    results: dict[str, object] = {}
    start = threading.Barrier(3)

    def replay() -> None:  # same nonce, new owner: refused by the store, nothing kept
        start.wait()
        results["replay"] = store.accept(Submission("s1", "owner-x", "id-x", b"x", 1.0), nonce)

    def broken() -> None:  # a write whose SQL fails mid-way must not take the others with it
        start.wait()
        try:
            store._write(lambda db: (db.execute("INSERT INTO nonces VALUES (?, ?, ?)", (b"n-b", "b", 1.0)),
                                     db.execute("INSERT INTO no_such_table VALUES (1)")))
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            results["broken"] = exc

    def good() -> None:
        start.wait()
        results["good"] = store.accept(*_submission(1))

    threads = [threading.Thread(target=f) for f in (replay, broken, good)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["replay"] == "replay" and results["good"] == "accepted"
    assert "cannot write the miner store" in str(results["broken"])
    assert not store.nonce_seen(b"n-b")
    assert store.submitted_owners("s1") == {"owner-000", "owner-001"}
    store.close()
    assert verify_log(tmp_path).ok


def test_a_closed_store_refuses_writes_and_keeps_its_head(tmp_path):
    store = Store(tmp_path)
    store.create_study("s1", b"spec", None, by="test")
    store.close()
    store.close()  # idempotent
    with pytest.raises(Exception, match="closed"):
        store.accept(*_submission(0))
    assert verify_log(tmp_path).ok


def test_the_submit_view_reads_study_previous_answer_and_nonce_at_once(tmp_path):
    store = Store(tmp_path)
    assert store.submit_view("s1", "owner-000", b"nonce-0") == SubmitView(None, None, False)
    store.create_study("s1", b"spec", None, by="test")
    view = store.submit_view("s1", "owner-000", b"nonce-0")
    assert view.study == store.study("s1") and view.previous_id is None and not view.nonce_seen
    assert store.accept(*_submission(0)) == "accepted"
    assert store.submit_view("s1", "owner-000", b"nonce-0") == SubmitView(store.study("s1"), "id-0", True)
    assert store.submit_view("s1", "owner-001", b"nonce-1") == SubmitView(store.study("s1"), None, False)
    assert store.submit_view("s2", "owner-000", b"nonce-0") == SubmitView(None, None, True)  # a nonce is miner-wide
    store.close()


def test_changes_while_a_bump_is_pending_share_it_and_later_ones_get_their_own():
    loop = asyncio.new_event_loop()
    try:
        feed = ChangeFeed(loop)
        for _ in range(50):  # the loop is not running: one bump is scheduled, the others join it
            feed.changed()
        loop.run_until_complete(asyncio.sleep(0))
        assert feed.version == 1
        feed.changed()
        loop.run_until_complete(asyncio.sleep(0))
        assert feed.version == 2
    finally:
        loop.close()
    feed.changed()  # a closed loop has no waiters: nothing to do, no error


@pytest.fixture(scope="module")
def messages():
    """A valid ModelMessage for a car study, and one whose leaf claims fewer tuples than it holds."""
    table = load_dataset("car")
    X, y = table.schema.encode(table.frame)
    spec = study_spec("s1", owners=["site-a"], disclosure="counts")
    rows = np.random.default_rng(0).choice(len(y), size=300, replace=False)
    tree = make_learner("multiway", table.schema, random_state=0).fit(X[rows], y[rows]).tree_
    release = release_model("apt", tree=tree, requirement="k-anonymity:k=5", disclosure="counts")
    good = model_message(release, study_id="s1", owner_id="site-a")
    bad = model_message(release, study_id="s1", owner_id="site-a")
    bad.report.claims[0].tuples += 1
    return spec, good, bad


def test_worker_processes_give_the_same_verdicts_as_the_calling_thread(messages):
    spec, good, bad = messages
    with pytest.raises(Rejection) as in_thread:
        check_model(bad, StudyTerms.of(study_from_pb(spec)), 200_000)
    verifier = ModelVerifier(1, 200_000)
    try:
        verifier.check(good, good.SerializeToString(), StudyTerms.of(study_from_pb(spec)), timeout=60)
        with pytest.raises(Rejection) as in_worker:
            verifier.check(bad, bad.SerializeToString(), StudyTerms.of(study_from_pb(spec)), timeout=60)
        assert (in_worker.value.code, in_worker.value.message) == (in_thread.value.code, in_thread.value.message)
        assert in_worker.value.code == grpc.StatusCode.INVALID_ARGUMENT and "re-audit" in in_worker.value.message
    finally:
        verifier.close()


def test_a_dead_worker_answers_unavailable_and_is_replaced(messages):
    spec, good, _ = messages
    verifier = ModelVerifier(1, 200_000)
    try:
        verifier.start()
        worker = verifier._idle.get()
        worker.process.kill()
        worker.process.join()
        verifier._idle.put(worker)
        with pytest.raises(Rejection) as dead:
            verifier.check(good, good.SerializeToString(), StudyTerms.of(study_from_pb(spec)), timeout=60)
        assert dead.value.code == grpc.StatusCode.UNAVAILABLE
        # the replacement serves
        verifier.check(good, good.SerializeToString(), StudyTerms.of(study_from_pb(spec)), timeout=60)
    finally:
        verifier.close()
        verifier.close()


def test_a_verifier_process_imports_neither_scikit_learn_nor_scipy_nor_pandas():
    """What a verifier process imports (`verify`, and through it the audit) stays light, so that it is ready within
    about a second of a restart; the heavy libraries are the learners' and the miner's, imported where they work."""
    import subprocess
    import sys

    probe = ("import sys, modelshare.miner_node.verify; "
             "print(sorted(m for m in ('sklearn', 'scipy', 'pandas') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "[]\n"
