"""Refusals leave the owner as a reason code and a fixed sentence: nothing read off the table reaches the miner."""

from __future__ import annotations

import re
import threading

import pandas as pd
import pytest

from common.federation.pb import federation_pb2 as fpb
from common.federation.refusal import CODES, SENTENCES, Refusal, describe, refusal_message
from owner_node.daemon import OwnerDaemon
from tests.federation_helpers import car_tables, make_federation, study_spec

SECRET = "secret-cell-7731"


def test_every_code_has_a_sentence_without_numbers_and_only_policy_names_keys():
    assert set(SENTENCES) == set(CODES)
    assert not any(re.search(r"\d", Refusal(code).sentence) for code in CODES)
    assert str(Refusal("policy", ("min_k", "mechanisms"))) == (
        "policy: this site's policy does not allow this study (policy keys: mechanisms, min_k)")
    with pytest.raises(ValueError, match="only a policy refusal names policy keys"):
        Refusal("budget", ("lifetime_epsilon",))
    with pytest.raises(ValueError, match="refusal code 'nope' is not one of"):
        Refusal("nope")  # type: ignore[arg-type]


def test_the_miner_shows_code_and_sentence_and_an_old_owners_free_text_as_it_came():
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
