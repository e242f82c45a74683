"""Study control against a real miner over mutual TLS on loopback: `study wait`, `study cancel`, `--follow`.

The miner runs in this process (`Federation.start`) and the admin's kit is pointed at the port it
bound, so the CLI commands dial it as deployed; owners are daemons in this process. The tests
marked ``slow`` run `study wait` and `study status --follow` as their own processes.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading

import grpc
import pytest

from modelshare.cli import main
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.miner_node.server import RunningMiner
from modelshare.miner_node.store import Store, verify_log
from modelshare.owner_node.budget import Ledger
from modelshare.owner_node.daemon import OwnerDaemon
from modelshare.provision import set_miner_port
from tests.federation_helpers import CLI, Federation, car_tables, deal, make_federation, signed_model, study_spec

OWNERS = ["site-a", "site-b"]


@pytest.fixture()
def fed(tmp_path):
    with make_federation(tmp_path, OWNERS, owner_data=car_tables(tmp_path, OWNERS),
                         policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]}) as federation:
        set_miner_port([federation.kits["admin"]], federation.miner.port)
        yield federation


def admin_toml(fed: Federation) -> str:
    return str(fed.kits["admin"] / "admin.toml")


def create(fed: Federation, study_id: str) -> None:
    fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec(study_id)), timeout=10)


def answer_all(fed: Federation) -> None:
    """Every owner's daemon answers what waits for it, once."""
    for owner in OWNERS:
        with OwnerDaemon(fed.owner_config(owner)) as daemon:
            daemon.run_once(wait_seconds=0)


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out)


def audit_events(fed: Federation) -> list[dict]:
    miner = fed.miner
    assert miner is not None, "the federation's miner is not started"
    state_dir = miner.config.state_dir if isinstance(miner, RunningMiner) else miner.state_dir
    db = sqlite3.connect(state_dir / "miner.sqlite")
    try:
        return [json.loads(row[0]) for row in db.execute("SELECT event FROM audit_log ORDER BY seq")]
    finally:
        db.close()


def test_wait_exits_0_on_a_done_study(fed, capsys):
    create(fed, "w1")
    answer_all(fed)
    code, status = run_json(capsys, "study", "wait", "w1", "--config", admin_toml(fed))
    assert code == 0 and status["state"] == "done" and "error" not in status
    assert [a["state"] for a in status["answers"]] == ["submitted", "submitted"]


def test_cancel_is_final_logged_refuses_later_answers_and_wait_exits_1(fed, capsys, car):
    create(fed, "c1")
    code, cancelled = run_json(capsys, "study", "cancel", "c1", "--reason", "wrong schema", "--config", admin_toml(fed))
    assert code == 0 and cancelled["state"] == "cancelled" and not cancelled["already_cancelled"]
    assert cancelled["reason"] == "cancelled by admin: wrong schema"

    code, waited = run_json(capsys, "study", "wait", "c1", "--config", admin_toml(fed))
    assert code == 1 and waited["state"] == "cancelled"
    assert waited["error"] == {"type": "StudyCancelled",
                               "message": "study c1 cancelled: cancelled by admin: wrong schema"}

    # cancelling twice is idempotent: the same state, nothing new in the audit log
    code, again = run_json(capsys, "study", "cancel", "c1", "--config", admin_toml(fed))
    assert code == 0 and again["already_cancelled"] and again["reason"] == "cancelled by admin: wrong schema"
    entries = [e for e in audit_events(fed) if e["kind"] == "study-cancelled"]
    assert entries == [{"kind": "study-cancelled", "study": "c1", "by": "admin", "reason": "wrong schema",
                        "previous_state": "open"}]

    # owners no longer see it, and an answer sent anyway is refused with the reason
    with OwnerDaemon(fed.owner_config("site-a")) as daemon:
        assert daemon.run_once(wait_seconds=0) == []
    spec = fed.stub("admin").GetStudy(fpb.StudyRef(study_id="c1"), timeout=10).spec
    X, y = deal(*car[1:], OWNERS)["site-b"]
    with pytest.raises(grpc.RpcError) as refused:
        fed.stub("site-b").Submit(signed_model(fed, "site-b", spec, X, y), timeout=30)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "is cancelled (cancelled by admin: wrong schema); it takes no answers" in refused.value.details()
    rejected = audit_events(fed)[-1]
    assert (rejected["kind"], rejected["outcome"], rejected["code"], rejected["study"]) == \
        ("submission", "rejected", "FAILED_PRECONDITION", "c1")
    assert verify_log(fed.miner.config.state_dir).ok


def test_an_owner_cannot_cancel(fed):
    create(fed, "o1")
    with pytest.raises(grpc.RpcError) as denied:
        fed.stub("site-a").CancelStudy(fpb.CancelStudyRequest(study_id="o1"), timeout=10)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'site-a' is a owner; only the admin may do this" in denied.value.details()
    assert fed.stub("admin").GetStudy(fpb.StudyRef(study_id="o1"), timeout=10).state == "open"
    assert not [e for e in audit_events(fed) if e["kind"] == "study-cancelled"]


def test_cancelling_a_finished_or_unknown_study_is_a_clear_error(fed, capsys):
    create(fed, "f1")
    answer_all(fed)
    assert fed.wait_study("f1").state == "done"
    code, error = run_json(capsys, "study", "cancel", "f1", "--config", admin_toml(fed))
    assert code == 2
    assert "study 'f1' is already done; only an open or mining study can be cancelled" in error["error"]["message"]
    code, error = run_json(capsys, "study", "cancel", "nope", "--config", admin_toml(fed))
    assert code == 2 and "NOT_FOUND: no study 'nope' on this miner" in error["error"]["message"]


def test_wait_times_out_with_its_own_exit_status(fed, capsys):
    create(fed, "t1")
    code, report = run_json(capsys, "study", "wait", "t1", "--timeout", "0.5", "--config", admin_toml(fed))
    assert code == 3 and report["state"] == "open"
    assert report["error"]["type"] == "WaitTimeout"
    assert report["error"]["message"].startswith("study t1 did not end within --timeout 0.5 s; it is open")


def test_an_owner_that_trained_for_a_study_cancelled_meanwhile_releases_and_charges_nothing(fed):
    create(fed, "r1")
    spec = fed.stub("admin").GetStudy(fpb.StudyRef(study_id="r1"), timeout=10).spec  # as announced before the cancel
    fed.stub("admin").CancelStudy(fpb.CancelStudyRequest(study_id="r1"), timeout=10)
    config = fed.owner_config("site-a")
    with OwnerDaemon(config) as daemon:
        outcome = daemon.answer(spec, threading.Event())
        assert daemon.outbox.pending() == [] and not daemon.outbox.is_sent("r1")
    assert (outcome.outcome, outcome.reason) == ("skipped", "the study was cancelled or closed; nothing released")
    assert Ledger(config.state_dir).charges == []
    status = fed.stub("admin").GetStudy(fpb.StudyRef(study_id="r1"), timeout=10)
    assert [o.state for o in status.owners] == ["waiting", "waiting"]


def test_a_cancellation_stands_against_the_lifecycle(tmp_path):
    """The lifecycle's moves are compare-and-set: a study cancelled meanwhile is neither mined nor failed."""
    store = Store(tmp_path)
    try:
        assert store.create_study("m1", b"", None, by="admin")
        assert store.transition("m1", "open", "mining")
        assert store.cancel("m1", by="admin", reason="") == "cancelled"
        assert not store.finish("m1", b"results")  # mining ended after the cancel: its results are dropped
        assert not store.transition("m1", "mining", "failed", "mining failed")
        assert store.study("m1").state == "cancelled" and store.results("m1") is None
        assert store.cancel("m1", by="admin", reason="") == "already"
        assert store.create_study("m2", b"", None, by="admin")
        assert store.transition("m2", "open", "failed", "the quorum cannot be reached")
        assert store.cancel("m2", by="admin", reason="") == "failed"
        assert store.cancel("m3", by="admin", reason="") == "missing"
    finally:
        store.close()
    assert verify_log(tmp_path).ok


@pytest.mark.slow
def test_wait_and_follow_in_their_own_processes_see_the_study_end(fed):
    create(fed, "p1")
    follow = subprocess.Popen([*CLI, "study", "status", "p1", "--follow", "--config", admin_toml(fed)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait = subprocess.Popen([*CLI, "study", "wait", "p1", "--timeout", "120", "--config", admin_toml(fed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # each prints the study's first state before the owners answer: both are following it
        assert follow.stdout.readline().rstrip().endswith("study p1: open; 0 of 2 answered "
                                                          "(site-a waiting, site-b waiting)")
        assert wait.stderr.readline().rstrip().endswith("study p1: open; 0 of 2 answered "
                                                        "(site-a waiting, site-b waiting)")
        answer_all(fed)
        followed, follow_err = follow.communicate(timeout=60)
        waited, wait_err = wait.communicate(timeout=60)
    finally:
        for process in (follow, wait):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert follow.returncode == 0, follow_err
    assert wait.returncode == 0, wait_err
    lines = followed.splitlines()
    assert lines[-1].endswith("study p1: done; 2 of 2 answered (site-a submitted, site-b submitted)")
    assert waited.strip() == "study p1: done; 2 of 2 answered (site-a submitted, site-b submitted)"
    assert "\x1b" not in followed + wait_err and "\r" not in followed + wait_err  # log lines, no control characters


def test_miner_sites_lists_every_provisioned_owner_with_its_last_poll_version_and_health(fed, capsys):
    """A real daemon's poll is recorded (version and health), a site that never polled says so, a revoked owner
    is "revoked", and an owner's certificate may not list the fleet."""
    from importlib.metadata import version

    from modelshare.provision import revoke_party

    code, before = run_json(capsys, "miner", "sites", "--config", admin_toml(fed))
    assert code == 0 and [s["state"] for s in before["sites"]] == ["never polled", "never polled"]
    with OwnerDaemon(fed.owner_config("site-a")) as daemon:
        daemon.run_once(wait_seconds=0)
    code, after = run_json(capsys, "miner", "sites", "--config", admin_toml(fed))
    sites = {s["owner"]: s for s in after["sites"]}
    assert sites["site-a"]["state"] == "polling" and sites["site-a"]["last_poll_at"]
    assert sites["site-a"]["version"] == version("modelshare") and sites["site-a"]["health"] == "ok"
    assert sites["site-b"] == {"owner": "site-b", "state": "never polled", "last_poll_at": None, "version": None,
                               "health": None, "revoked_at": None}
    revoke_party(fed.kits["miner"].parent, "site-b")
    code, revoked = run_json(capsys, "miner", "sites", "--config", admin_toml(fed))
    site_b = next(s for s in revoked["sites"] if s["owner"] == "site-b")
    assert site_b["state"] == "revoked" and site_b["revoked_at"]
    with pytest.raises(grpc.RpcError) as info:
        fed.stub("site-a").ListSites(fpb.ListSitesRequest(), timeout=10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_revoked_owner_reaches_the_final_revoked_state_and_stops_retrying(fed, capsys):
    """Revoked at the miner, a site's daemon stops polling on the miner's first refusal (no backoff loop of
    "cannot reach the miner"), its status file says "revoked", and `owner status` exits 1 saying so."""
    from modelshare.provision import revoke_party

    revoke_party(fed.kits["miner"].parent, "site-b")
    stop = threading.Event()
    with OwnerDaemon(fed.owner_config("site-b")) as daemon:
        runner = threading.Thread(target=daemon.run, args=(stop,))
        runner.start()
        runner.join(60)
        ended_by_itself = not runner.is_alive()
        stop.set()
        runner.join(10)
        assert ended_by_itself, "the revoked daemon kept retrying"
        record = daemon.status.data
    assert record["state"] == "revoked" and record["revoked_at"] and "was revoked at" in record["last_error"]
    assert record["consecutive_failures"] == 1  # one refusal, no retries
    code, report = run_json(capsys, "owner", "status", "--config", str(fed.kits["site-b"] / "owner.toml"))
    assert code == 1 and report["state"] == "revoked" and report["reason"].startswith("revoked:")


def test_a_study_is_named_by_a_start_of_its_id_or_latest(fed, capsys):
    create(fed, "nursery-2026-a")
    create(fed, "nursery-2026-b")
    create(fed, "car-2026")
    code, status = run_json(capsys, "study", "status", "car", "--config", admin_toml(fed))
    assert code == 0 and status["id"] == "car-2026"
    code, status = run_json(capsys, "study", "status", "latest", "--config", admin_toml(fed))
    assert code == 0 and status["id"] == "car-2026"
    code, error = run_json(capsys, "study", "status", "nursery", "--config", admin_toml(fed))
    assert code == 2 and "is the start of 2 studies' ids (nursery-2026-a, nursery-2026-b)" in error["error"]["message"]
    code, cancelled = run_json(capsys, "study", "cancel", "nursery-2026-b", "--config", admin_toml(fed))
    assert code == 0 and cancelled["state"] == "cancelled"
    code, error = run_json(capsys, "study", "status", "nope", "--config", admin_toml(fed))
    assert code == 2 and "NOT_FOUND" in error["error"]["message"]
