"""Faults cost nothing: SIGKILL of the miner at random points, silent owners, retries, a full or read-only disk.

The miner runs as the deployment runs it (`modelshare miner serve` in its own process, over mTLS
on loopback); the kill points are drawn from seeded generators so a failure can be replayed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from common.federation.pb import federation_pb2 as fpb
from miner_node.server import start_miner
from miner_node.store import StoreError, verify_log
from modelshare.provision import issue_throwaway_federation
from owner_node.config import OwnerConfig
from owner_node.daemon import Backoff, OwnerDaemon
from owner_node.release import RELEASE_MECHANISMS
from owner_node.status import read_status
from tests.federation_helpers import Federation, signed_model, study_spec
from tests.test_federation import _car_tables, _free_port, _start_miner

pytestmark = pytest.mark.slow  # separate miner and owner processes

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


def _wait_final(fed: Federation, study_id: str, timeout: float = 90) -> fpb.StudyStatus:
    """Poll the admin API until the study is done or failed (the miner is another process: no condition to wait on)."""
    admin = fed.stub("admin")
    deadline = time.monotonic() + timeout
    while (status := admin.GetStudy(fpb.StudyRef(study_id=study_id), timeout=10)).state not in ("done", "failed"):
        assert time.monotonic() < deadline, f"study {study_id} still {status.state}"
        time.sleep(0.05)
    return status


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
            assert self.acked.wait_for(lambda: len(self.acks) >= acks or len(self.acks) + len(self.errors) == len(self._threads), 60)

    def join(self) -> None:
        for t in self._threads:
            t.join(60)


@pytest.fixture(scope="module")
def ten_parts(car):
    schema, X, y = car
    parts = np.random.default_rng(0).permutation(len(y)) % len(OWNERS)
    return {o: (X[parts == i], y[parts == i]) for i, o in enumerate(OWNERS)}


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_sigkill_at_a_random_point_of_a_ten_owner_study_loses_no_acknowledged_submission(tmp_path, ten_parts, seed):
    rng = np.random.default_rng(seed)
    port = _free_port()
    kits = issue_throwaway_federation(tmp_path / "kits", owners=OWNERS, address=f"localhost:{port}")
    fed = Federation(kits)
    config, log = kits["miner"] / "miner.toml", tmp_path / "miner.log"
    proc = _start_miner(config, log)
    try:
        fed.miner = type("Addr", (), {"port": port})()  # stubs dial the subprocess
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f1")), timeout=10).spec
        envelopes = {o: signed_model(fed, o, spec, *ten_parts[o]) for o in OWNERS}
        kill_after = int(rng.integers(0, len(OWNERS) + 1))  # 10: after the last ack, while the study is mined
        submitters = _Submitters(fed, envelopes)
        submitters.start()
        submitters.wait_for(kill_after)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        submitters.join()
        fed.close_channels()
        acknowledged = dict(submitters.acks)
        assert len(acknowledged) >= kill_after
        proc = _start_miner(config, log)
        stored = _submissions(kits["miner"] / "state", "f1")
        assert set(acknowledged) <= set(stored), f"acknowledged but lost: {set(acknowledged) - set(stored)}"
        for owner in OWNERS:  # every owner resends its exact bytes, as the daemon's outbox does
            again = fed.stub(owner).Submit(envelopes[owner], timeout=30)
            if owner in acknowledged:
                assert again.duplicate and again.submission_id == acknowledged[owner].submission_id
        status = _wait_final(fed, "f1")
        assert status.state == "done", status.reason
        results = fed.stub("admin").GetResults(fpb.StudyRef(study_id="f1"), timeout=10)
        assert sorted(o.owner_id for o in results.owners) == OWNERS
        assert _submissions(kits["miner"] / "state", "f1") == {o: 1 for o in OWNERS}
    finally:
        fed.close_channels()
        proc.terminate()
        proc.wait()
    assert verify_log(kits["miner"] / "state").ok


def test_owner_daemons_retry_through_a_miner_restart_without_duplicates(tmp_path):
    owners = ["site-a", "site-b", "site-c"]
    port = _free_port()
    kits = issue_throwaway_federation(tmp_path / "kits", owners=owners, address=f"localhost:{port}",
                                      owner_data=_car_tables(tmp_path, owners),
                                      policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    fed = Federation(kits)
    config, log = kits["miner"] / "miner.toml", tmp_path / "miner.log"
    proc = _start_miner(config, log)
    fed.miner = type("Addr", (), {"port": port})()
    stop = threading.Event()
    daemons = [OwnerDaemon(OwnerConfig.load(kits[o] / "owner.toml"), backoff=Backoff(base=0.05, cap=0.5, attempts=1000))
               for o in owners]
    threads = [threading.Thread(target=d.run, args=(stop,), daemon=True) for d in daemons]
    try:
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f2")), timeout=10)
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while not _submissions(kits["miner"] / "state", "f2"):  # kill once the first answer is stored
            assert time.monotonic() < deadline, "no owner answered"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        fed.close_channels()
        proc = _start_miner(config, log)
        status = _wait_final(fed, "f2")
        assert status.state == "done", status.reason
        assert _submissions(kits["miner"] / "state", "f2") == {o: 1 for o in owners}
        for daemon in daemons:  # every daemon settled its answer and says so
            deadline = time.monotonic() + 30
            while ((read_status(daemon.config.state_dir) or {}).get("last_outcome") or {}).get("outcome") != "submitted":
                assert time.monotonic() < deadline, read_status(daemon.config.state_dir)
                time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for d in daemons:
            d.close()
        fed.close_channels()
        proc.terminate()
        proc.wait()


def test_at_the_deadline_without_the_quorum_the_study_fails_naming_the_silent_owners(tmp_path, ten_parts):
    fed = Federation(issue_throwaway_federation(tmp_path / "kits", owners=OWNERS[:3], address="localhost:50051"))
    fed.start()
    try:
        admin = fed.stub("admin")
        spec = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("f3", quorum=3, deadline_minutes=0.03)),
                                 timeout=10).spec
        fed.stub("site-0").Submit(signed_model(fed, "site-0", spec, *ten_parts["site-0"]), timeout=30)
        status = _wait_final(fed, "f3")
        assert status.state == "failed"
        assert "the deadline passed: 1 of the 3 submissions needed" in status.reason
        assert "site-1" in status.reason and "site-2" in status.reason
    finally:
        fed.close()


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
    fed = Federation(issue_throwaway_federation(tmp_path / "kits", owners=OWNERS[:3], address="localhost:50051"))
    config = dataclasses.replace(fed.miner_config(), state_dir=disk / "state")
    fed.miner = start_miner(config, mechanisms=RELEASE_MECHANISMS)
    try:
        yield fed, disk
    finally:
        fed.close()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> Path:
    """Write a file until the filesystem is full; returns it (delete it to free the space)."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            pass
    return filler


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


@needs_mount
def test_a_miner_whose_store_is_read_only_refuses_to_start_and_says_why(small_disk_fed):
    fed, disk = small_disk_fed
    config = fed.miner.config
    fed.close()  # a clean stop, then the store's filesystem turns read-only
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    with pytest.raises(StoreError) as info:
        start_miner(dataclasses.replace(config, listen="localhost:0"), mechanisms=RELEASE_MECHANISMS)
    assert str(config.state_dir) in str(info.value) and "read-only file system" in str(info.value).lower()
