"""Owners, miner and admin as the deployment runs them: daemons, separate processes, SIGKILL, simulate."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from common.data.datasets import load_dataset
from common.federation.pb import federation_pb2 as fpb
from miner_node.store import verify_log
from modelshare.cli import main
from modelshare.provision import issue_throwaway_federation
from owner_node.config import OwnerConfig
from owner_node.daemon import OwnerDaemon
from tests.federation_helpers import Federation, signed_model, study_spec

pytestmark = pytest.mark.slow  # separate miner and owner processes

CLI = [sys.executable, "-m", "modelshare.cli"]


def _car_tables(tmp: Path, owners: list[str]) -> dict[str, tuple[str, str]]:
    table = load_dataset("car")
    parts = np.random.default_rng(1).permutation(len(table.frame)) % len(owners)
    data = {}
    for i, owner in enumerate(owners):
        path = tmp / f"{owner}.csv"
        table.frame[parts == i].to_csv(path, index=False)
        data[owner] = (str(path), table.schema.class_name)
    return data


def _daemon(fed: Federation, owner: str) -> OwnerDaemon:
    config = OwnerConfig.load(fed.kits[owner] / "owner.toml")
    return OwnerDaemon(dataclasses.replace(config, miner=fed.address))


def _wait_done(fed: Federation, study_id: str, timeout: float = 60) -> fpb.StudyStatus:
    admin = fed.stub("admin")
    deadline = time.monotonic() + timeout
    while True:
        status = admin.GetStudy(fpb.StudyRef(study_id=study_id), timeout=10)
        if status.state in ("done", "failed") or time.monotonic() > deadline:
            return status
        with fed.miner.coordinator.changed:
            fed.miner.coordinator.changed.wait(0.5)


@pytest.fixture()
def daemons_fed(tmp_path):
    owners = ["site-a", "site-b"]
    kits = issue_throwaway_federation(tmp_path / "kits", owners=owners, address="localhost:50051",
                                      owner_data=_car_tables(tmp_path, owners),
                                      policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    fed = Federation(kits)
    fed.start()
    yield fed
    fed.close()


def test_owner_daemons_answer_and_never_send_a_raw_row(daemons_fed, tmp_path):
    fed = daemons_fed
    fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("d1", disclosure="counts")), timeout=10)
    for owner in ("site-a", "site-b"):
        with _daemon(fed, owner) as daemon:
            outcomes = daemon.run_once(wait_seconds=0)
        assert [(o.study_id, o.outcome) for o in outcomes] == [("d1", "submitted")], outcomes
    assert _wait_done(fed, "d1").state == "done"
    # restarted with the same kit: nothing new to answer, nothing submitted twice
    with _daemon(fed, "site-a") as daemon:
        assert daemon.run_once(wait_seconds=0) == []
    db = sqlite3.connect(fed.miner.config.state_dir / "miner.sqlite")
    envelopes = [bytes(r[0]) for r in db.execute("SELECT envelope FROM submissions")]
    db.close()
    assert len(envelopes) == 2
    table = load_dataset("car")
    X, _ = table.schema.encode(table.frame)
    frame = table.frame.astype(str)
    raw = {",".join(r).encode() for r in frame.itertuples(index=False)} | {"\t".join(r).encode() for r in frame.itertuples(index=False)}
    raw |= {row.tobytes() for row in X if np.count_nonzero(row) >= 3}  # a row of mostly zeros is just zeros
    for envelope in envelopes:
        assert not any(r in envelope for r in raw)


def test_a_stricter_owner_refuses_and_status_reports_why(daemons_fed, tmp_path, capsys):
    fed = daemons_fed
    config = OwnerConfig.load(fed.kits["site-b"] / "owner.toml")
    strict = dataclasses.replace(config, miner=fed.address, policy=config.policy.model_copy(update={"min_k": 50}))
    fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("d2", quorum=1)), timeout=10)
    with OwnerDaemon(strict) as daemon:
        assert [o.outcome for o in daemon.run_once(wait_seconds=0)] == ["refused"]
    status = fed.stub("admin").GetStudy(fpb.StudyRef(study_id="d2"), timeout=10)
    answers = {o.owner_id: (o.state, o.reason) for o in status.owners}
    assert answers["site-b"][0] == "refused" and "k=50" in answers["site-b"][1]
    # the kit's admin.toml names the provisioned address, where no miner listens: a clear error
    assert main(["study", "status", "d2", "--config", str(fed.kits["admin"] / "admin.toml"), "--json"]) == 2
    assert "the miner answered UNAVAILABLE" in capsys.readouterr().err
    with _daemon(fed, "site-a") as daemon:
        daemon.run_once(wait_seconds=0)
    assert _wait_done(fed, "d2").state == "done"


def test_owner_daemons_answer_a_kanon_rdt_study_within_their_dps_bounds(tmp_path):
    owners = ["site-a", "site-b"]
    policy = {"mechanisms": ["kanon-rdt"], "min_k": 5, "max_beta": 0.5, "max_epsilon": 8.0, "max_delta": 0.2,
              "miners": ["miner"]}
    fed = Federation(issue_throwaway_federation(tmp_path / "kits", owners=owners, address="localhost:50051",
                                                owner_data=_car_tables(tmp_path, owners), policy=policy))
    fed.start()
    try:
        admin = fed.stub("admin")
        for study_id, requirement in (("k1", "dps:k=5,beta=0.5,epsilon=8,trees=4"), ("k2", "dps:k=5,beta=0.5,epsilon=4,trees=4")):
            spec = study_spec(study_id, mechanism="kanon-rdt", requirement=requirement, disclosure="counts", max_depth=3,
                              global_models=("naive-bayes",), quorum=1 if study_id == "k2" else 0)
            admin.CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
        for owner in owners:
            with _daemon(fed, owner) as daemon:
                outcomes = {o.study_id: o.outcome for o in daemon.run_once(wait_seconds=0)}
            assert outcomes == {"k1": "submitted", "k2": "refused"}, outcomes
        assert _wait_done(fed, "k1").state == "done"
        results = admin.GetResults(fpb.StudyRef(study_id="k1"), timeout=10)
        assert all(o.audit_passed and o.pseudo_rows > 0 for o in results.owners)
        assert results.models[0].train_rows == sum(o.pseudo_rows for o in results.owners)
        status = admin.GetStudy(fpb.StudyRef(study_id="k2"), timeout=10)
        assert status.state == "failed" and all(
            o.state == "refused" and "(composed delta 0.438); this site allows at most delta=0.2" in o.reason
            for o in status.owners)
    finally:
        fed.close()


# ------------------------------------------------------------ real processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_miner(config: Path, log: Path) -> subprocess.Popen:
    """Start `modelshare miner serve` and wait for its 'serving' line (readiness, not time)."""
    proc = subprocess.Popen([*CLI, "miner", "serve", "--config", str(config)], stdout=subprocess.PIPE,
                            stderr=open(log, "ab"), text=True)
    line = proc.stdout.readline()
    assert "serving on port" in line, f"miner did not start: {line!r}\n{log.read_text()}"
    return proc


def test_sigkill_after_three_of_five_then_restart_completes_with_all_five(tmp_path, car):
    owners = [f"o{i}" for i in range(5)]
    port = _free_port()
    kits = issue_throwaway_federation(tmp_path / "kits", owners=owners, address=f"localhost:{port}")
    fed = Federation(kits)
    config = kits["miner"] / "miner.toml"
    proc = _start_miner(config, tmp_path / "miner.log")
    try:
        fed.miner = type("Addr", (), {"port": port})()  # stubs dial the subprocess
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("k1")), timeout=10).spec
        schema, X, y = car
        parts = np.random.default_rng(0).permutation(len(y)) % 5
        envelopes = {o: signed_model(fed, o, spec, X[parts == i], y[parts == i]) for i, o in enumerate(owners)}
        acks = {o: fed.stub(o).Submit(envelopes[o], timeout=30) for o in owners[:3]}
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        fed.close_channels()
        proc = _start_miner(config, tmp_path / "miner.log")
        for o in owners[:3]:  # acknowledged before the kill: still there, same ack
            again = fed.stub(o).Submit(envelopes[o], timeout=30)
            assert again.duplicate and again.submission_id == acks[o].submission_id
        for o in owners[3:]:
            fed.stub(o).Submit(envelopes[o], timeout=30)
        admin = fed.stub("admin")
        deadline = time.monotonic() + 60
        while (status := admin.GetStudy(fpb.StudyRef(study_id="k1"), timeout=10)).state not in ("done", "failed"):
            assert time.monotonic() < deadline, status.state
            time.sleep(0.1)
        assert status.state == "done", status.reason
        results = admin.GetResults(fpb.StudyRef(study_id="k1"), timeout=10)
        assert sorted(o.owner_id for o in results.owners) == owners
    finally:
        fed.close_channels()
        proc.terminate()
        proc.wait()
    assert verify_log(kits["miner"] / "state").ok


def test_simulate_equals_a_provisioned_deployment(tmp_path, capsys):
    keep = tmp_path / "sim"
    assert main(["simulate", "--dataset", "car", "--owners", "2", "--seed", "3", "--json", "--keep-dir", str(keep)]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert all(o["audit_passed"] for o in simulated["owners"]) and len(simulated["owners"]) == 2
    assert all(m["accuracy"] is not None and 0 <= m["accuracy"] <= 1 for m in simulated["models"])

    # the same study, run by provisioned kits and separately started processes
    port = _free_port()
    policy = 'mechanisms = ["apt"]\ndisclosures = ["hit_miss"]\nminers = ["miner"]\n'
    project = f'name = "demo"\n[[parties]]\nname = "miner"\nrole = "miner"\naddress = "localhost:{port}"\n' \
              '[[parties]]\nname = "admin"\nrole = "admin"\n'
    for owner in ("owner-1", "owner-2"):
        project += f'[[parties]]\nname = "{owner}"\nrole = "owner"\ndata = "{keep / "data" / (owner + ".csv")}"\n' \
                   f'class_column = "class"\n[parties.policy]\n{policy}'
    (tmp_path / "project.toml").write_text(project)
    kits = tmp_path / "kits"
    assert main(["provision", str(tmp_path / "project.toml"), "--out", str(kits)]) == 0
    miner = _start_miner(kits / "miner" / "miner.toml", tmp_path / "miner.log")
    owners = [subprocess.Popen([*CLI, "owner", "serve", "--config", str(kits / o / "owner.toml")],
                               stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{o}.log", "ab"))
              for o in ("owner-1", "owner-2")]
    admin = str(kits / "admin" / "admin.toml")
    try:
        assert main(["study", "create", str(keep / "study.toml"), "--config", admin]) == 0
        deadline = time.monotonic() + 90
        while True:
            capsys.readouterr()
            assert main(["study", "status", "simulate", "--config", admin, "--json"]) == 0
            state = json.loads(capsys.readouterr().out)["state"]
            if state in ("done", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert state == "done"
        assert main(["study", "results", "simulate", "--config", admin, "--out", str(tmp_path / "res"), "--json"]) == 0
        deployed = json.loads(capsys.readouterr().out)
        assert main(["study", "list", "--config", admin, "--json"]) == 0
        assert [s["state"] for s in json.loads(capsys.readouterr().out)] == ["done"]
    finally:
        for p in (*owners, miner):
            p.send_signal(signal.SIGTERM)
        for p in (*owners, miner):
            p.wait(timeout=20)
    assert {m["model"]: m["accuracy"] for m in deployed["models"]} == {m["model"]: m["accuracy"] for m in simulated["models"]}
    assert [o["leaves"] for o in deployed["owners"]] == [o["leaves"] for o in simulated["owners"]]
    assert (tmp_path / "res" / "global-decision-tree.json").exists() and (tmp_path / "res" / "predictions.csv").exists()
    assert main(["miner", "verify-log", "--state-dir", str(kits / "miner" / "state")]) == 0
    assert os.stat(kits / "owner-1" / "signing.key").st_mode & 0o777 == 0o600
