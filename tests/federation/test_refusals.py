"""Refusals leave the owner as a reason code and a fixed sentence: nothing read off the table reaches the miner."""

from __future__ import annotations

import dataclasses
import re
import threading

import grpc
import pandas as pd
import pytest
from rich.console import Console

from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.refusal import CODES, SENTENCES, Refusal, describe, refusal_message
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import generate_signing_key
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.pruning import release_unchanged
from modelshare.owner_node.budget import Ledger
from modelshare.owner_node.daemon import OwnerDaemon
from modelshare.owner_node.status import read_status
from modelshare.owner_node.training import EmptyRelease, build_submission
from modelshare.simulate import _owners_table
from modelshare.simulate_hints import REFUSAL_HINTS, refusal_hints
from tests.federation_helpers import car_tables, make_federation, study_spec

SECRET = "secret-cell-7731"
_EMPTY_HINT = REFUSAL_HINTS["empty-release"]


def test_every_code_has_a_sentence_without_numbers_and_only_policy_names_keys() -> None:
    assert set(SENTENCES) == set(CODES)
    assert not any(re.search(r"\d", Refusal(code).sentence) for code in CODES if code != "too-large")
    assert Refusal("too-large", limit_bytes=1000).sentence == (
        "the encoded release exceeds the study's message size limit; nothing is released (the limit is 1000 bytes); "
        "the details stay in the site's own log")
    with pytest.raises(ValueError, match="a too-large refusal, and only it, names the study's size limit"):
        Refusal("too-large")
    assert str(Refusal("policy", ("min_k", "mechanisms"))) == (
        "policy: this site's policy does not allow this study (policy keys: mechanisms, min_k)")
    with pytest.raises(ValueError, match="only a policy refusal names policy keys"):
        Refusal("budget", ("lifetime_epsilon",))
    with pytest.raises(ValueError, match="refusal code 'nope' is not one of"):
        Refusal("nope")  # type: ignore[arg-type]


def test_the_miner_shows_code_and_sentence_and_an_old_owners_free_text_as_it_came() -> None:
    message = refusal_message(Refusal("empty-release"), study_id="s", owner_id="o")
    assert describe(message) == f"empty-release: {Refusal('empty-release').sentence}"
    assert describe(fpb.OwnerRefusal(reason="not today")) == "not today"
    assert describe(fpb.OwnerRefusal()) == "no reason given"
    assert describe(fpb.OwnerRefusal(code=42, reason="r")) == "code 42: r"  # type: ignore[arg-type]


def _table_values(paths: list[str]) -> set[str]:
    """Every cell of the owners' tables, as text, and each table's row count."""
    frames = [pd.read_csv(path, dtype=str) for path in paths]
    return {value for frame in frames for value in frame.to_numpy().ravel()} | {str(len(f)) for f in frames}


def test_refusals_through_a_federation_carry_no_value_of_the_table(tmp_path, caplog):
    """site-a's table has a bad cell (bad-local-data), site-b's cannot meet k=5000 (unsatisfiable)."""
    owners = ["site-a", "site-b"]
    data = car_tables(tmp_path, owners)
    bad = pd.read_csv(data["site-a"][0], dtype=str)
    bad.loc[11, "safety"] = SECRET
    bad.to_csv(data["site-a"][0], index=False)
    fed = make_federation(tmp_path, owners, owner_data=data,
                          policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    fed.start()
    daemons = [OwnerDaemon(fed.owner_config(o)) for o in owners]
    try:
        spec = study_spec("strict", requirement="k-anonymity:k=5000", quorum=1)  # open until both have answered
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
        for daemon in daemons:
            assert [o.outcome for o in daemon.run_once(wait_seconds=5, stop=threading.Event())] == ["refused"]
        status = fed.wait_study("strict")
    finally:
        for daemon in daemons:
            daemon.close()
        fed.close()
    payloads = {d.config.name: fpb.SignedEnvelope.FromString((d.outbox.sent_dir / "strict.bin").read_bytes()).payload
                for d in daemons}
    expected = {"site-a": ("bad-local-data", fpb.REFUSAL_CODE_BAD_LOCAL_DATA),
                "site-b": ("unsatisfiable", fpb.REFUSAL_CODE_UNSATISFIABLE)}
    values = _table_values([data[o][0] for o in owners])
    for owner, payload in payloads.items():
        refusal = fpb.OwnerRefusal.FromString(payload)
        code, number = expected[owner]
        assert (refusal.study_id, refusal.owner_id, refusal.code) == ("strict", owner, number)
        assert refusal.reason == Refusal(code).sentence  # the code's fixed sentence: nothing computed from rows
        text = " ".join((refusal.study_id, refusal.owner_id, refusal.reason))
        assert not set(re.findall(r"[\w.-]+", text)) & values, text
        assert SECRET.encode() not in payload and b"row 12" not in payload and b"safety" not in payload
    reasons = {o.owner_id: o.reason for o in status.owners}
    assert reasons == {o: f"{expected[o][0]}: {Refusal(expected[o][0]).sentence}" for o in owners}
    assert status.state == "failed" and SECRET not in status.reason
    # the details stay in the owners' own logs
    assert f"row 12, column 'safety', value '{SECRET}'" in caplog.text
    assert "no pruning of the local tree meets k-anonymity:k=5000" in caplog.text


# ------------------------------------------------------------------ a release that carries nothing
def test_small_owners_under_a_strict_dps_requirement_refuse_an_empty_release(tmp_path, caplog):
    """~150 rows each: k-AnonToRdt samples beta = 10% of them per tree and suppresses every count below k=5."""
    owners = ["site-a", "site-b"]
    frame = load_dataset("car").frame.sample(300, random_state=0)
    data = {}
    for i, owner in enumerate(owners):
        path = tmp_path / f"{owner}.csv"
        frame.iloc[i::2].to_csv(path, index=False)
        data[owner] = (str(path), "class")
    fed = make_federation(tmp_path, owners, owner_data=data, policy={"mechanisms": ["kanon-rdt"], "miners": ["miner"]})
    fed.start()
    daemons = [OwnerDaemon(fed.owner_config(o)) for o in owners]
    try:
        spec = study_spec("tiny", mechanism="kanon-rdt", requirement="dps:k=5,beta=0.1,epsilon=2,trees=10",
                          disclosure="counts", max_depth=4, quorum=1)
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
        for daemon in daemons:
            assert [o.outcome for o in daemon.run_once(wait_seconds=5, stop=threading.Event())] == ["refused"]
        status = fed.wait_study("tiny")
    finally:
        for daemon in daemons:
            daemon.close()
        fed.close()
    assert status.state == "failed" and "the quorum cannot be reached: 0 of the 1 submissions needed" in status.reason
    assert {o.owner_id: o.reason for o in status.owners} == {
        o: "empty-release: the release would carry no rows (every tree's released total is zero); nothing is "
           "released; the details stay in the site's own log" for o in owners}
    assert "the kanon-rdt release of 150 local rows carries no rows" in caplog.text  # the site's log
    # the mechanism ran and its (empty) output decided the refusal code: the study is charged all the same
    assert all([c.study_id for c in Ledger(d.config.state_dir).charges] == ["tiny"] for d in daemons)
    assert all(Ledger(d.config.state_dir).spent[0] == 2.0 for d in daemons)
    assert refusal_hints(status) == [f"site-a, site-b refused with empty-release: {_EMPTY_HINT}"]


def test_an_empty_release_is_refused_before_it_is_signed(key_and_car):
    key, (schema, X, y) = key_and_car
    def spec(k: int) -> fpb.StudySpec:
        return study_spec("tiny", mechanism="kanon-rdt", requirement=f"dps:k={k},beta=0.1,epsilon=2,trees=2",
                          disclosure="counts", max_depth=2)

    with pytest.raises(EmptyRelease, match=r"the kanon-rdt release of 100 local rows carries no rows \(2 tree\(s\)"):
        # 10 sampled rows: no count reaches 20
        build_submission(study_from_pb(spec(20)), X[:100], y[:100], owner_id="site-a", key=key)
    message = fpb.ModelMessage.FromString(
        build_submission(study_from_pb(spec(5)), X, y, owner_id="site-a", key=key).payload)
    assert sum(tree.nodes[0].hit + tree.nodes[0].miss for tree in message.trees) > 0  # 1728 rows: a count reaches 5


@pytest.fixture(scope="module")
def key_and_car(car):
    return generate_signing_key(), car


@pytest.mark.slow  # simulate's miner and owner processes
def test_simulate_names_the_owners_whose_releases_were_empty_and_fails(tmp_path, capsys):
    path = tmp_path / "cars.csv"
    car = load_dataset("car")
    car.frame.sample(600, random_state=0).to_csv(path, index=False)  # 3 owners of 160 rows
    car.schema.save(tmp_path / "car.schema.json")  # a dps study needs a public domain, not one read off the rows
    code = main(["simulate", "--data", str(path), "--class-column", "class", "--schema",
                 str(tmp_path / "car.schema.json"),
                 "--owners", "3", "--mechanism", "kanon-rdt", "--requirement", "dps:k=5,beta=0.1,epsilon=2,trees=10",
                 "--timeout", "120"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "the quorum cannot be reached: 0 of the 1 submissions needed" in err
    for owner in ("owner-1", "owner-2", "owner-3"):
        assert f"{owner} refused: empty-release: the release would carry no rows" in err
    assert "owner-1, owner-2, owner-3 refused with empty-release:" in err


def test_simulate_lists_a_refusing_owner_with_its_reason_beside_the_releases():
    report = {"source": "cars.csv", "mechanism": "kanon-rdt", "requirement": "dps:k=5,beta=0.1,epsilon=2,trees=10",
              "disclosure": "counts", "refusals": [{"owner": "owner-1", "rows": 150,
                                                    "reason": str(Refusal("empty-release"))}],
              "owners": [{"owner": "owner-2", "rows": 900, "leaves": 40, "claim": "dps", "audit_passed": True}]}
    console = Console(record=True, width=400)
    console.print(_owners_table(report))
    lines = console.export_text().splitlines()
    assert "cars.csv: 2 owners" in lines[0]
    [refused] = [line for line in lines if "owner-1" in line]
    assert "150" in refused and "empty-release: the release would carry no rows" in refused and "refused" in refused


def test_a_release_above_the_studys_size_limit_is_refused_at_once_with_the_sizes_kept_at_the_site(tmp_path):
    fed = make_federation(tmp_path, ["site-a"], owner_data=car_tables(tmp_path, ["site-a"]),
                          policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    with fed:
        admin = fed.stub("admin")
        default = admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("sized")), timeout=10).spec
        assert default.max_message_bytes == fed.miner.config.limits.max_message_bytes  # the miner names its limit
        spec = study_spec("small")
        spec.max_message_bytes = fed.miner.config.limits.max_message_bytes + 1
        with pytest.raises(grpc.RpcError) as info:
            admin.CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "exceeds this miner's limit" in info.value.details()
        admin.CancelStudy(fpb.CancelStudyRequest(study_id="sized"), timeout=10)
        spec.max_message_bytes = 1000
        admin.CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
        with OwnerDaemon(fed.owner_config("site-a")) as daemon:
            [outcome] = daemon.run_once(0)
            local = read_status(daemon.config.state_dir)
            charged = [c.study_id for c in Ledger(daemon.config.state_dir).charges]
        [answer] = admin.GetStudy(fpb.StudyRef(study_id="small"), timeout=10).owners
    assert outcome.outcome == "refused"
    assert answer.reason == f"too-large: {Refusal('too-large', limit_bytes=1000).sentence}"  # the limit, not the size
    assert local is not None and local["last_decision"]["kind"] == "refuse"
    assert re.fullmatch(r"too-large: the encoded apt release is \d{4,} bytes; the study's limit is 1000 bytes",
                        local["last_decision"]["detail"])
    assert charged == ["small"]  # the answer depends on the computed release: charged like one


def test_a_release_that_fails_the_owners_own_audit_is_refused_before_any_charge(tmp_path):
    """A broken path mechanism (APT's record, but its pruner returns the trained tree unpruned while the release
    still claims the requirement): the owner audits before it signs, refuses with failed-audit, charges nothing."""
    broken = dataclasses.replace(registry.get("apt"), name="apt-unpruned", prune=_unpruned)
    registry.register(broken)
    try:
        fed = make_federation(tmp_path, ["site-a"], owner_data=car_tables(tmp_path, ["site-a"]),
                              policy={"mechanisms": ["apt-unpruned"], "min_k": 5, "miners": ["miner"]})
        with fed:
            admin = fed.stub("admin")
            admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("broken", mechanism="apt-unpruned")), timeout=10)
            with OwnerDaemon(fed.owner_config("site-a")) as daemon:
                [outcome] = daemon.run_once(0)
                local = read_status(daemon.config.state_dir)
                charged = [c.study_id for c in Ledger(daemon.config.state_dir).charges]
            [answer] = admin.GetStudy(fpb.StudyRef(study_id="broken"), timeout=10).owners
    finally:
        registry.unregister("apt-unpruned")
    assert outcome.outcome == "refused"
    assert answer.reason == f"failed-audit: {Refusal('failed-audit').sentence}"
    assert local is not None and local["last_decision"]["kind"] == "refuse"
    assert "every path meets k-anonymity:k=5" in local["last_decision"]["detail"]  # the failing check stays local
    assert charged == []


def _unpruned(tree, requirement, disclosure):
    """A broken pruner: the trained tree as it is, although the release will claim ``requirement`` of every path."""
    return release_unchanged(tree, None, disclosure)
