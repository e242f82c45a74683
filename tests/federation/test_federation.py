"""Owners, miner and admin as the deployment runs them: daemons, separate processes, SIGKILL, simulate.

The owner daemons run in this process against an in-process miner; the tests marked ``slow`` start
``modelshare miner serve`` / ``owner serve`` / ``simulate`` processes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess

import numpy as np
import pytest

from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.miner_node.store import verify_log
from modelshare.owner_node.daemon import OwnerDaemon
from modelshare.provision import set_miner_port
from tests.federation_helpers import (
    CLI,
    FINAL,
    Federation,
    MinerProcess,
    car_tables,
    deal,
    make_federation,
    signed_model,
    study_spec,
    wait_until,
)


def _daemon(fed: Federation, owner: str) -> OwnerDaemon:
    return OwnerDaemon(fed.owner_config(owner))


@pytest.fixture()
def daemons_fed(tmp_path):
    owners = ["site-a", "site-b"]
    with make_federation(tmp_path, owners, owner_data=car_tables(tmp_path, owners),
                         policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]}) as fed:
        yield fed


def test_owner_daemons_answer_and_never_send_a_raw_row(daemons_fed, tmp_path):
    fed = daemons_fed
    fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("d1", disclosure="counts")), timeout=10)
    for owner in ("site-a", "site-b"):
        with _daemon(fed, owner) as daemon:
            outcomes = daemon.run_once(wait_seconds=0)
        assert [(o.study_id, o.outcome) for o in outcomes] == [("d1", "submitted")], outcomes
    assert fed.wait_study("d1").state == "done"
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
    raw = {sep.join(r).encode() for r in frame.itertuples(index=False) for sep in (",", "\t")}
    raw |= {row.tobytes() for row in X if np.count_nonzero(row) >= 3}  # a row of mostly zeros is just zeros
    for envelope in envelopes:
        assert not any(r in envelope for r in raw)


def test_a_stricter_owner_refuses_and_status_reports_why(daemons_fed, tmp_path, capsys):
    fed = daemons_fed
    config = fed.owner_config("site-b")
    strict = dataclasses.replace(config, policy=config.policy.model_copy(update={"min_k": 50}))
    fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("d2", quorum=1)), timeout=10)
    with OwnerDaemon(strict) as daemon:
        assert [o.outcome for o in daemon.run_once(wait_seconds=0)] == ["refused"]
    status = fed.stub("admin").GetStudy(fpb.StudyRef(study_id="d2"), timeout=10)
    answers = {o.owner_id: (o.state, o.reason) for o in status.owners}
    assert answers["site-b"] == ("refused", "policy: this site's policy does not allow this study (policy keys: min_k)")
    # the kit's admin.toml names the provisioned address, where no miner listens: a clear error
    assert main(["study", "status", "d2", "--config", str(fed.kits["admin"] / "admin.toml"), "--json"]) == 2
    assert "cannot reach the miner at" in capsys.readouterr().err
    with _daemon(fed, "site-a") as daemon:
        daemon.run_once(wait_seconds=0)
    assert fed.wait_study("d2").state == "done"


def test_owner_daemons_answer_a_kanon_rdt_study_within_their_dps_bounds(tmp_path):
    owners = ["site-a", "site-b"]
    policy = {"mechanisms": ["kanon-rdt"], "min_k": 5, "max_beta": 0.5, "max_epsilon": 8.0, "max_delta": 0.2,
              "miners": ["miner"]}
    fed = make_federation(tmp_path, owners, owner_data=car_tables(tmp_path, owners), policy=policy)
    fed.start()
    try:
        admin = fed.stub("admin")
        for study_id, requirement in (("k1", "dps:k=5,beta=0.5,epsilon=8,trees=4"),
                                      ("k2", "dps:k=5,beta=0.5,epsilon=4,trees=4")):
            spec = study_spec(study_id, mechanism="kanon-rdt", requirement=requirement, disclosure="counts",
                              max_depth=3, global_models=("naive-bayes",), quorum=1 if study_id == "k2" else 0)
            admin.CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
        for owner in owners:
            with _daemon(fed, owner) as daemon:
                outcomes = {o.study_id: o.outcome for o in daemon.run_once(wait_seconds=0)}
            assert outcomes == {"k1": "submitted", "k2": "refused"}, outcomes
        assert fed.wait_study("k1").state == "done"
        results = admin.GetResults(fpb.StudyRef(study_id="k1"), timeout=10)
        assert all(o.audit_passed and o.pseudo_rows > 0 for o in results.owners)
        assert results.models[0].train_rows == sum(o.pseudo_rows for o in results.owners)
        status = admin.GetStudy(fpb.StudyRef(study_id="k2"), timeout=10)
        assert status.state == "failed" and all(
            o.state == "refused" and o.reason == "policy: this site's policy does not allow this study "
                                                 "(policy keys: max_delta)"
            for o in status.owners)
    finally:
        fed.close()


# ------------------------------------------------------------ real processes
@pytest.mark.slow  # a miner process
def test_sigkill_after_three_of_five_then_restart_completes_with_all_five(tmp_path, car):
    owners = [f"o{i}" for i in range(5)]
    fed = make_federation(tmp_path, owners, address="localhost:0")
    miner = fed.serve(tmp_path / "miner.log")
    try:
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("k1")), timeout=10).spec
        envelopes = {o: signed_model(fed, o, spec, *part) for o, part in deal(*car[1:], owners).items()}
        acks = {o: fed.stub(o).Submit(envelopes[o], timeout=30) for o in owners[:3]}
        miner.kill()
        fed.close_channels()
        assert fed.serve(tmp_path / "miner.log").port == miner.port  # the kits name the port it bound first
        for o in owners[:3]:  # acknowledged before the kill: still there, same ack
            again = fed.stub(o).Submit(envelopes[o], timeout=30)
            assert again.duplicate and again.submission_id == acks[o].submission_id
        for o in owners[3:]:
            fed.stub(o).Submit(envelopes[o], timeout=30)
        status = fed.wait_study("k1")
        assert status.state == "done", status.reason
        results = fed.stub("admin").GetResults(fpb.StudyRef(study_id="k1"), timeout=10)
        assert sorted(o.owner_id for o in results.owners) == owners
    finally:
        fed.close()
    assert verify_log(fed.kits["miner"] / "state").ok


@pytest.mark.slow  # simulate's processes, then a miner and two owner processes
def test_simulate_equals_a_provisioned_deployment(tmp_path, capsys):
    keep = tmp_path / "sim"
    assert main(["simulate", "--dataset", "car", "--owners", "2", "--seed", "3", "--json",
                 "--keep-dir", str(keep)]) == 0
    captured = capsys.readouterr()
    simulated = json.loads(captured.out)
    # no terminal: progress is one plain line per step on stderr
    assert "simulate: study done, 2 of 2 owners answered" in captured.err and "\x1b" not in captured.err
    assert all(o["audit_passed"] for o in simulated["owners"]) and len(simulated["owners"]) == 2
    assert all(m["accuracy"] is not None and 0 <= m["accuracy"] <= 1 for m in simulated["models"])

    # the same study, run by provisioned kits and separately started processes; the miner binds port 0
    policy = 'mechanisms = ["apt"]\ndisclosures = ["hit_miss"]\nminers = ["miner"]\n'
    project = 'name = "demo"\n[[parties]]\nname = "miner"\nrole = "miner"\naddress = "localhost:0"\n' \
              'listen = "localhost:0"\n[[parties]]\nname = "admin"\nrole = "admin"\n'
    for owner in ("owner-1", "owner-2"):
        project += f'[[parties]]\nname = "{owner}"\nrole = "owner"\ndata = "{keep / "data" / (owner + ".csv")}"\n' \
                   f'class_column = "class"\n[parties.policy]\n{policy}'
    (tmp_path / "project.toml").write_text(project)
    kits = tmp_path / "kits"
    assert main(["provision", str(tmp_path / "project.toml"), "--out", str(kits)]) == 0
    miner = MinerProcess(kits / "miner" / "miner.toml", tmp_path / "miner.log").start()
    set_miner_port(kits.iterdir(), miner.port)
    owners = [subprocess.Popen([*CLI, "owner", "serve", "--config", str(kits / o / "owner.toml")],
                               stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{o}.log", "ab"))
              for o in ("owner-1", "owner-2")]
    admin = str(kits / "admin" / "admin.toml")

    def study_state() -> str | None:
        capsys.readouterr()
        assert main(["study", "status", "simulate", "--config", admin, "--json"]) == 0
        state = json.loads(capsys.readouterr().out)["state"]
        return state if state in FINAL else None

    try:
        assert main(["study", "create", str(keep / "study.toml"), "--config", admin]) == 0
        assert wait_until(study_state, 90, "the deployed study to finish") == "done"
        assert main(["study", "results", "simulate", "--config", admin, "--out", str(tmp_path / "res"), "--json"]) == 0
        deployed = json.loads(capsys.readouterr().out)
        assert main(["study", "list", "--config", admin, "--json"]) == 0
        assert [s["state"] for s in json.loads(capsys.readouterr().out)] == ["done"]
    finally:
        for p in owners:
            p.send_signal(signal.SIGTERM)
        for p in owners:
            p.wait(timeout=20)
        miner.stop()
    assert {m["model"]: m["accuracy"] for m in deployed["models"]} == {m["model"]: m["accuracy"]
                                                                       for m in simulated["models"]}
    assert [o["leaves"] for o in deployed["owners"]] == [o["leaves"] for o in simulated["owners"]]
    assert (tmp_path / "res" / "global-decision-tree.json").exists() and (tmp_path / "res" / "predictions.csv").exists()
    assert "not known" in (tmp_path / "res" / "report.html").read_text()  # `study results` cannot know BASIS
    assert main(["miner", "verify-log", "--state-dir", str(kits / "miner" / "state")]) == 0
    assert os.stat(kits / "owner-1" / "signing.key").st_mode & 0o777 == 0o600
