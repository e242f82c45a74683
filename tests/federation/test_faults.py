"""Faults cost nothing: SIGKILL of the miner at random points, silent owners, retries, a full or read-only disk.

The miner runs as the deployment runs it (`modelshare miner serve` in its own process, over mTLS
on loopback); the kill points are drawn from seeded generators so a failure can be replayed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import grpc
import numpy as np
import pytest

from modelshare.cli.owner_status import owner_health
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.mechanisms import registry
from modelshare.miner_node.config import default_verify_processes
from modelshare.miner_node.server import RunningMiner, start_miner
from modelshare.miner_node.store import StoreError, verify_log
from modelshare.owner_node.budget import Ledger
from modelshare.owner_node.daemon import Backoff, OwnerDaemon
from modelshare.owner_node.status import read_status
from modelshare.provision import set_miner_port
from tests.federation_helpers import (
    CLI,
    Federation,
    MinerProcess,
    car_tables,
    deal,
    make_federation,
    signed_model,
    study_spec,
    wait_until,
)

OWNERS = [f"site-{i}" for i in range(10)]


def _submissions(state_dir: Path, study_id: str) -> dict[str, int]:
    """Stored submissions per owner of ``study_id``, read straight from the miner's database."""
    db = sqlite3.connect(f"file:{state_dir / 'miner.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT owner_id, COUNT(*) FROM submissions WHERE study_id = ? GROUP BY owner_id",
                          (study_id,)).fetchall()
    finally:
        db.close()
    return dict(rows)


class _Submitters:
    """Ten owners submitting their envelopes at once from threads; records which were acknowledged."""

    def __init__(self, fed: Federation, envelopes: dict[str, fpb.SignedEnvelope]) -> None:
        self.acks: dict[str, fpb.SubmitAck] = {}
        self.errors: dict[str, grpc.StatusCode] = {}
        self.acked = threading.Condition()
        self._threads = [threading.Thread(target=self._submit, args=(fed.stub(o), o, e), daemon=True)
                         for o, e in envelopes.items()]

    def _submit(self, stub, owner: str, envelope: fpb.SignedEnvelope) -> None:
        try:
            ack = stub.Submit(envelope, timeout=30)
        except grpc.RpcError as exc:
            with self.acked:
                self.errors[owner] = exc.code()
                self.acked.notify_all()
            return
        with self.acked:
            self.acks[owner] = ack
            self.acked.notify_all()

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def wait_for(self, acks: int) -> None:
        with self.acked:
            assert self.acked.wait_for(lambda: len(self.acks) >= acks
                                       or len(self.acks) + len(self.errors) == len(self._threads), 60)

    def join(self) -> None:
        for t in self._threads:
            t.join(60)


def _stop_daemons(stop: threading.Event, threads: list[threading.Thread], daemons: list[OwnerDaemon],
                  fed: Federation) -> None:
    """Stop the owner daemons' threads, close the daemons, then the federation."""
    stop.set()
    for t in threads:
        t.join(30)
    for d in daemons:
        d.close()
    fed.close()


@pytest.fixture(scope="module")
def ten_parts(car):
    return deal(*car[1:], OWNERS)


@pytest.mark.slow  # a miner process
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_sigkill_at_a_random_point_of_a_ten_owner_study_loses_no_acknowledged_submission(tmp_path, ten_parts, seed):
    rng = np.random.default_rng(seed)
    fed = make_federation(tmp_path, OWNERS, address="localhost:0")
    state, log = fed.kits["miner"] / "state", tmp_path / "miner.log"
    miner = fed.serve(log)
    try:
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f1")), timeout=10).spec
        envelopes = {o: signed_model(fed, o, spec, *ten_parts[o]) for o in OWNERS}
        kill_after = int(rng.integers(0, len(OWNERS) + 1))  # 10: after the last ack, while the study is mined
        submitters = _Submitters(fed, envelopes)
        submitters.start()
        submitters.wait_for(kill_after)
        miner.kill()
        submitters.join()
        fed.close_channels()
        acknowledged = dict(submitters.acks)
        assert len(acknowledged) >= kill_after
        fed.serve(log)
        stored = _submissions(state, "f1")
        assert set(acknowledged) <= set(stored), f"acknowledged but lost: {set(acknowledged) - set(stored)}"
        for owner in OWNERS:  # every owner resends its exact bytes, as the daemon's outbox does
            again = fed.stub(owner).Submit(envelopes[owner], timeout=30)
            if owner in acknowledged:
                assert again.duplicate and again.submission_id == acknowledged[owner].submission_id
        status = fed.wait_study("f1", timeout=90)
        assert status.state == "done", status.reason
        results = fed.stub("admin").GetResults(fpb.StudyRef(study_id="f1"), timeout=10)
        assert sorted(o.owner_id for o in results.owners) == OWNERS
        assert _submissions(state, "f1") == {o: 1 for o in OWNERS}
    finally:
        fed.close()
    assert verify_log(state).ok


@pytest.mark.slow  # a miner process
def test_owner_daemons_retry_through_a_miner_restart_without_duplicates(tmp_path):
    owners = ["site-a", "site-b", "site-c"]
    fed = make_federation(tmp_path, owners, address="localhost:0", owner_data=car_tables(tmp_path, owners),
                          policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    state, log = fed.kits["miner"] / "state", tmp_path / "miner.log"
    miner = fed.serve(log)  # and the owners' kits now name the port it bound
    stop = threading.Event()
    daemons = [OwnerDaemon(fed.owner_config(o), backoff=Backoff(base=0.05, cap=0.5, attempts=1000)) for o in owners]
    threads = [threading.Thread(target=d.run, args=(stop,), daemon=True) for d in daemons]
    try:
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f2")), timeout=10)
        for t in threads:
            t.start()
        wait_until(lambda: _submissions(state, "f2"), 60, "an owner's answer")  # kill once the first is stored
        miner.kill()
        fed.close_channels()
        fed.serve(log)
        status = fed.wait_study("f2", timeout=90)
        assert status.state == "done", status.reason
        assert _submissions(state, "f2") == {o: 1 for o in owners}
        for daemon in daemons:  # every daemon settled its answer and says so
            wait_until(lambda daemon=daemon: ((read_status(daemon.config.state_dir) or {}).get("last_outcome") or {})
                       .get("outcome") == "submitted", 30,
                       lambda daemon=daemon: f"{daemon.config.name}'s status {read_status(daemon.config.state_dir)}")
    finally:
        _stop_daemons(stop, threads, daemons, fed)


@pytest.mark.slow  # a miner process, killed and restarted
def test_an_owner_backing_off_with_the_default_backoff_reaches_a_restarted_miner_within_seconds(tmp_path, caplog):
    fed = make_federation(tmp_path, ["site-a"], address="localhost:0", owner_data=car_tables(tmp_path, ["site-a"]),
                          policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    log = tmp_path / "miner.log"
    miner = fed.serve(log)
    stop = threading.Event()
    daemon = OwnerDaemon(fed.owner_config("site-a"))  # the default backoff, as deployed
    state = daemon.config.state_dir
    thread = threading.Thread(target=daemon.run, args=(stop,), daemon=True)

    def state_is(name: str) -> bool:
        return (read_status(state) or {}).get("state") == name

    def failed_polls() -> int:
        return sum(r.getMessage().startswith("poll of") for r in caplog.records)

    try:
        caplog.set_level("WARNING", logger="modelshare.owner")
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f2")), timeout=10)
        thread.start()
        wait_until(lambda: ((read_status(state) or {}).get("last_outcome") or {}).get("outcome") == "submitted", 60,
                   lambda: f"the owner's first answer: {read_status(state)}")
        miner.kill()
        fed.close_channels()
        # enough failed polls that the backoff has reached its cap (ceilings 0.5, 1, 2, 4 s)
        wait_until(lambda: failed_polls() >= 6, 90, lambda: f"six failed polls, {failed_polls()} so far")
        fed.serve(log)
        ready = time.monotonic()
        # a study open at once, so the owner's next Poll returns as soon as it reaches the miner
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f3")), timeout=10)
        wait_until(lambda: state_is("polling") or state_is("answering"), 30,
                   lambda: f"the owner back at the miner: {read_status(state)}")
        assert time.monotonic() - ready < Backoff().cap + 3.0  # one capped, jittered wait and the reconnection
    finally:
        _stop_daemons(stop, [thread], [daemon], fed)


def test_at_the_deadline_without_the_quorum_the_study_fails_naming_the_silent_owners(tmp_path, ten_parts):
    with make_federation(tmp_path, OWNERS[:3]) as fed:
        admin = fed.stub("admin")
        spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f3", quorum=3, deadline_minutes=0.03)),
                                 timeout=10).spec
        fed.stub("site-0").Submit(signed_model(fed, "site-0", spec, *ten_parts["site-0"]), timeout=30)
        status = fed.wait_study("f3", timeout=90)
    assert status.state == "failed"
    assert "the deadline passed: 1 of the 3 submissions needed" in status.reason
    assert "site-1" in status.reason and "site-2" in status.reason


# ------------------------------------------------------------------ answers older than the freshness window
def _miner_setting(fed: Federation, line: str) -> None:
    """Add ``line`` (a key of the [miner] table) to the miner's kit config."""
    path = fed.kits["miner"] / "miner.toml"
    path.write_text(path.read_text().replace("[miner]\n", f"[miner]\n{line}\n", 1))


def _without_freshness(payload: bytes) -> fpb.ModelMessage:
    message = fpb.ModelMessage.FromString(payload)
    message.ClearField("nonce")
    message.ClearField("timestamp")
    return message


@pytest.mark.slow  # a miner process, killed and restarted
def test_answers_stored_through_an_outage_longer_than_the_freshness_window_are_resigned_and_count_once(tmp_path):
    owners = ["site-a", "site-b", "site-c"]
    fed = make_federation(tmp_path, owners, address="localhost:0", owner_data=car_tables(tmp_path, owners),
                          policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    window = 2
    _miner_setting(fed, f"timestamp_window_seconds = {window}")
    state, log = fed.kits["miner"] / "state", tmp_path / "miner.log"
    miner = fed.serve(log)
    stop = threading.Event()
    daemons = [OwnerDaemon(fed.owner_config(o), backoff=Backoff(base=0.05, cap=0.5, attempts=1000)) for o in owners]
    threads = [threading.Thread(target=d.run, args=(stop,), daemon=True) for d in daemons]
    try:
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f6")), timeout=10).spec
        held = threading.Event()
        held.set()  # each owner decides, charges and stores its answer; the set event keeps it from being sent
        for daemon in daemons:
            assert daemon.answer(spec, held).outcome == "deferred"
        built = {d.config.name: d.outbox.read("f6") for d in daemons}
        signed_at = max(fpb.ModelMessage.FromString(fpb.SignedEnvelope.FromString(b).payload).timestamp.ToSeconds()
                        for b in built.values())
        miner.kill()
        fed.close_channels()
        wait_until(lambda: time.time() > signed_at + window + 1, window + 5, "the clock to pass the freshness window")
        fed.serve(log)
        for t in threads:
            t.start()
        status = fed.wait_study("f6", timeout=90)
        assert status.state == "done", status.reason
        assert _submissions(state, "f6") == {o: 1 for o in owners}
        for daemon in daemons:
            sent = (daemon.outbox.sent_dir / "f6.bin").read_bytes()
            before, after = (fpb.SignedEnvelope.FromString(b).payload for b in (built[daemon.config.name], sent))
            assert _without_freshness(after) == _without_freshness(before)  # the same release, signed again
            assert fpb.ModelMessage.FromString(after).nonce != fpb.ModelMessage.FromString(before).nonce
            [record] = [json.loads(line) for line in daemon.outbox.answers.read_text().splitlines()]
            assert (record["outcome"], record["status"]) == ("submitted", "OK")
            assert [c.study_id for c in Ledger(daemon.config.state_dir).charges] == ["f6"]  # charged once
    finally:
        _stop_daemons(stop, threads, daemons, fed)
    assert log.read_text().count("sign the same answer again with a fresh timestamp and nonce") == len(owners)
    assert verify_log(state).ok


def test_an_owner_whose_clock_is_off_beyond_the_window_is_told_by_how_much(tmp_path):
    fed = make_federation(tmp_path, ["site-a"], owner_data=car_tables(tmp_path, ["site-a"]),
                          policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    with fed:
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f7")), timeout=10)
        assert isinstance(fed.miner, RunningMiner)
        fed.miner.exchange.clock = lambda: time.time() + 600  # the miner's clock is 10 minutes ahead of the owner's
        with OwnerDaemon(fed.owner_config("site-a"), backoff=Backoff(base=0.0, cap=0.0, attempts=2)) as daemon:
            [outcome] = daemon.run_once(0)
            assert outcome.outcome == "deferred" and "your clock is 600 s behind the miner's" in outcome.reason
            status = read_status(daemon.config.state_dir)
            assert status is not None and round(status["clock_skew_seconds"]) == -600
            healthy, reason = owner_health(status, now=datetime.now(timezone.utc), max_age=45)
            assert not healthy and "this site's clock is 600 s behind the miner's" in reason
            fed.miner.exchange.clock = time.time  # the clocks agree again: the stored answer goes through
            [outcome] = daemon.run_once(0)
            assert outcome.outcome == "submitted"
            assert read_status(daemon.config.state_dir)["clock_skew_seconds"] is None


def test_an_answer_the_miner_rejects_for_good_is_given_up_and_named_in_the_status(tmp_path, ten_parts):
    owners = OWNERS[:2]
    fed = make_federation(tmp_path, owners, owner_data=car_tables(tmp_path, owners))
    with fed:
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f8")), timeout=10).spec
        with OwnerDaemon(fed.owner_config(owners[0])) as daemon:
            foreign = signed_model(fed, owners[1], spec, *ten_parts[owners[1]])  # signed by the other site
            daemon.outbox.put("f8", foreign.SerializeToString())
            [outcome] = daemon.resend_outbox(threading.Event())
            status = read_status(daemon.config.state_dir)
    assert outcome.outcome == "gave-up" and outcome.reason.startswith("PERMISSION_DENIED: TLS identity")
    assert status is not None and status["gave_up"] == {"f8": outcome.reason}
    assert daemon.outbox.pending() == ["f8"]  # kept until a restart, never resent in this run


# ------------------------------------------------------------------ disk full / read-only store
def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                   capture_output=True)


needs_mount = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None or sys.platform != "linux",
    reason="mounting a small tmpfs to fill the disk needs root on Linux (file permissions do not stop root)")


@pytest.fixture()
def small_disk_fed(tmp_path):
    """A federation whose miner keeps its state on a 4 MiB tmpfs."""
    disk = tmp_path / "disk"
    try:
        _mount_tmpfs(disk, "4m")
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc.stderr.decode().strip()}")
    fed = make_federation(tmp_path, OWNERS[:3])
    config = dataclasses.replace(fed.miner_config(), state_dir=disk / "state")
    fed.miner = start_miner(config, mechanisms=registry.names())
    try:
        yield fed, disk
    finally:
        fed.close()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> Path:
    """Write a file until the filesystem is full; returns it (delete it to free the space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to flush (and fail) on close
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            pass
    return filler


@pytest.mark.slow  # mounts a tmpfs
@needs_mount
def test_a_full_disk_refuses_submissions_with_a_clear_status_and_acknowledges_nothing(small_disk_fed, ten_parts):
    fed, disk = small_disk_fed
    spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f4")), timeout=10).spec
    envelope = signed_model(fed, "site-0", spec, *ten_parts["site-0"])
    filler = _fill(disk)
    with pytest.raises(grpc.RpcError) as info:
        fed.stub("site-0").Submit(envelope, timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "cannot store" in info.value.details() and "full" in info.value.details()
    assert fed.stub("admin").Health(fpb.HealthRequest(), timeout=10).status == "serving"  # the miner lives on
    filler.unlink()
    ack = fed.stub("site-0").Submit(envelope, timeout=30)  # the same bytes: nothing of the refused try was kept
    assert not ack.duplicate and ack.owner_id == "site-0"
    assert _submissions(fed.miner.config.state_dir, "f4") == {"site-0": 1}


@pytest.mark.slow  # mounts a tmpfs
@needs_mount
def test_a_miner_whose_store_is_read_only_refuses_to_start_and_says_why(small_disk_fed):
    fed, disk = small_disk_fed
    config = fed.miner.config
    fed.close()  # a clean stop, then the store's filesystem turns read-only
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    with pytest.raises(StoreError) as info:
        start_miner(dataclasses.replace(config, listen="localhost:0"), mechanisms=registry.names())
    assert str(config.state_dir) in str(info.value) and "read-only file system" in str(info.value).lower()


def _study_state(fed: Federation, study_id: str) -> str | None:
    assert isinstance(fed.miner, RunningMiner)
    row = fed.miner.store.study(study_id)
    return None if row is None else row.state


@pytest.mark.slow  # mounts a tmpfs
@needs_mount
def test_a_disk_that_fills_during_mining_is_retried_and_the_next_study_completes_without_a_restart(
        small_disk_fed, ten_parts) -> None:
    fed, disk = small_disk_fed
    miner = fed.miner
    owners = OWNERS[:3]
    admin = fed.stub("admin")
    spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("m1")), timeout=10).spec
    filled: list[Path] = []

    def fill_once_mining() -> None:  # called on every change; fills the disk once the study has entered mining
        if not filled and _study_state(fed, "m1") == "mining":
            filled.append(_fill(disk))

    miner.coordinator.subscribe(fill_once_mining)
    for owner in owners:
        fed.stub(owner).Submit(signed_model(fed, owner, spec, *ten_parts[owner]), timeout=30)

    def wake(seconds: float) -> None:
        with miner.coordinator.changed:
            miner.coordinator.changed.wait(seconds)

    health = wait_until(lambda: (h := admin.Health(fpb.HealthRequest(), timeout=10)).status != "serving" and h, 60,
                        "the miner to report that mining cannot progress", wake=wake)
    assert health.status.startswith("unhealthy: mining cannot progress") and "m1" in health.status
    assert "full" in health.status
    assert _study_state(fed, "m1") == "mining"  # not lost, not failed: retried
    assert [t.name for t in threading.enumerate() if t.name == "miner-mining"] == ["miner-mining"]
    filled[0].unlink()
    assert fed.wait_study("m1").state == "done"  # the retry stored the results once there was room
    assert admin.Health(fpb.HealthRequest(), timeout=10).status == "serving"
    spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("m2")), timeout=10).spec
    for owner in owners:
        fed.stub(owner).Submit(signed_model(fed, owner, spec, *ten_parts[owner]), timeout=30)
    status = fed.wait_study("m2")
    assert status.state == "done", status.reason
    assert verify_log(miner.config.state_dir).ok


@pytest.mark.slow  # waits out a one-second mining timeout
def test_a_study_whose_mining_outlasts_the_mining_timeout_fails_with_the_reason_and_mining_goes_on(
        tmp_path, ten_parts) -> None:
    owners = OWNERS[:2]
    fed = make_federation(tmp_path, owners)
    miner = fed.miner = start_miner(dataclasses.replace(fed.miner_config(), mining_timeout_seconds=1),
                                    mechanisms=registry.names())
    held: list[sqlite3.Connection] = []

    def lock_once_mining() -> None:  # another writer takes the database once the study is mining: its results wait
        if not held and _study_state(fed, "slow") == "mining":
            db = sqlite3.connect(miner.config.state_dir / "miner.sqlite", isolation_level=None, check_same_thread=False)
            db.execute("BEGIN IMMEDIATE")
            held.append(db)

    def wake(seconds: float) -> None:
        with miner.coordinator.changed:
            miner.coordinator.changed.wait(seconds)

    try:
        miner.coordinator.subscribe(lock_once_mining)
        admin = fed.stub("admin")
        spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("slow")), timeout=10).spec
        for owner in owners:
            fed.stub(owner).Submit(signed_model(fed, owner, spec, *ten_parts[owner]), timeout=30)
        # the first store attempt waits out SQLite's 5 s busy timeout: by then the 1 s limit has passed
        wait_until(lambda: "database is locked" in admin.Health(fpb.HealthRequest(), timeout=10).status, 60,
                   "the miner to report that it cannot store the study's results", wake=wake)
        held[0].rollback()
        held[0].close()
        status = fed.wait_study("slow")
        assert status.state == "failed" and status.reason.startswith("mining did not finish in time"), status.reason
        assert "mining_timeout_seconds" in status.reason
        assert admin.GetResults.future(fpb.StudyRef(study_id="slow"), timeout=10).exception().code() \
            == grpc.StatusCode.FAILED_PRECONDITION  # no results were stored
        # naive Bayes alone: mined well within the 1 s limit even on a loaded machine (the auto tree's
        # cross-validation need not be, and this asks only that mining goes on after a timeout)
        spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("next", global_models=("naive-bayes",))),
                                 timeout=10).spec
        for owner in owners:
            fed.stub(owner).Submit(signed_model(fed, owner, spec, *ten_parts[owner]), timeout=30)
        status = fed.wait_study("next")
        assert status.state == "done", status.reason
        assert admin.Health(fpb.HealthRequest(), timeout=10).status == "serving"
    finally:
        fed.close()


def _serve(config: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([*CLI, "miner", "serve", "--config", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


@pytest.mark.slow  # two miner processes
def test_a_second_miner_on_the_same_state_directory_exits_2_naming_the_directory_and_the_holder(tmp_path):
    fed = make_federation(tmp_path, OWNERS[:1], address="localhost:0")
    first = fed.serve(tmp_path / "first.log")
    try:
        second = _serve(fed.kits["miner"] / "miner.toml", tmp_path / "second.log")
        assert second.wait(timeout=60) == 2
        said = (tmp_path / "second.log").read_text()
        state = (fed.kits["miner"] / "state").resolve()
        assert "Traceback" not in said
        assert f"the miner state directory {state}" in " ".join(said.split()) or str(state) in said
        assert f"pid {first.process.pid}" in said and "in use by another miner" in said
        assert fed.stub("admin").Health(fpb.HealthRequest(), timeout=10).status == "serving"  # the first serves on
    finally:
        fed.close()
    third = MinerProcess(fed.kits["miner"] / "miner.toml", tmp_path / "third.log").start()  # the lock went with it
    third.stop()


@pytest.mark.slow  # a miner process
def test_a_port_in_use_exits_2_naming_the_address_before_the_store_is_opened(tmp_path):
    fed = make_federation(tmp_path, OWNERS[:1], address="localhost:0")
    with contextlib.ExitStack() as held:
        port = _hold_localhost_port(held)
        set_miner_port(fed.kits.values(), port)
        miner = _serve(fed.kits["miner"] / "miner.toml", tmp_path / "miner.log")
        assert miner.wait(timeout=60) == 2
    said = (tmp_path / "miner.log").read_text()
    assert "Traceback" not in said and f"cannot listen on localhost:{port}" in said and "in use" in said
    assert not (fed.kits["miner"] / "state" / "miner.sqlite").exists()


def _hold_localhost_port(stack: contextlib.ExitStack) -> int:
    """A port taken on every loopback address "localhost" resolves
    to (gRPC binds all of them), held until ``stack`` closes."""
    v4 = stack.enter_context(socket.socket(socket.AF_INET))
    v4.bind(("127.0.0.1", 0))
    v4.listen()
    port = v4.getsockname()[1]
    try:
        v6 = stack.enter_context(socket.socket(socket.AF_INET6))
        v6.bind(("::1", port))
        v6.listen()
    except OSError:  # no IPv6 loopback here: localhost is 127.0.0.1 alone
        pass
    return port


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _verifiers(pid: int) -> list[int]:
    """The miner's verification workers: its children that multiprocessing spawned."""
    found = []
    for child in _children(pid):
        try:
            if b"multiprocessing.spawn" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except FileNotFoundError:
            continue
    return found


def _gone(pid: int) -> bool:
    """The process exited (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.slow  # a miner process
def test_killing_the_miner_ends_its_verifier_processes_without_tracebacks(tmp_path):
    fed = make_federation(tmp_path, OWNERS[:1], address="localhost:0")
    log = tmp_path / "miner.log"
    miner = fed.serve(log)
    # the verifier processes start in the background once the miner serves (miner_node.verify.start_in_background)
    wanted = default_verify_processes()
    try:
        wait_until(lambda: len(_verifiers(miner.process.pid)) >= wanted, 60,
                   f"the {wanted} verifier processes to start")
        workers = _verifiers(miner.process.pid)
    finally:  # killed however the wait ends: a miner left running would outlive the test
        miner.kill()
    wait_until(lambda: all(_gone(p) for p in workers), 30, "the verifier processes to exit")
    said = log.read_text()
    assert "Traceback" not in said and "EOFError" not in said, said[-3000:]


@pytest.mark.slow  # mounts a tmpfs
@needs_mount
def test_verify_log_reads_a_stopped_store_on_a_read_only_filesystem_and_explains_a_leftover_log(small_disk_fed):
    fed, disk = small_disk_fed
    fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("ro")), timeout=10)
    state = fed.miner.config.state_dir
    fed.close()  # a clean stop folds the write-ahead log into the database
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    ok = subprocess.run([*CLI, "miner", "verify-log", "--state-dir", str(state)], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and "audit log intact" in ok.stdout, ok.stderr
    subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
    # a store left with its write-ahead log (a killed miner): a process writes and dies without closing it
    subprocess.run([sys.executable, "-c", "import os, signal, sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
                    "db.execute('PRAGMA journal_mode=WAL'); db.execute('PRAGMA wal_autocheckpoint=0'); "
                    "db.execute('CREATE TABLE t (x)'); db.commit(); os.kill(os.getpid(), signal.SIGKILL)",
                    str(state / "miner.sqlite")], check=False, timeout=60)
    (state / "miner.sqlite-shm").unlink()  # as in a copy without it: SQLite would have to create it to read the log
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    failed = subprocess.run([*CLI, "miner", "verify-log", "--state-dir", str(state), "--json"], capture_output=True,
                            text=True, timeout=60)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    message = json.loads(failed.stdout)["error"]["message"]
    assert f"cannot read the miner store {state / 'miner.sqlite'}" in message and "copy the state directory" in message
