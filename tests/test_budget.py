"""The owner's privacy-budget ledger, dp studies end to end, and `owner budget`."""

from __future__ import annotations

import json
import threading

import pytest

from common.federation.pb import federation_pb2 as fpb
from common.federation.study import StudyError, check_spec
from modelshare.cli import main
from owner_node.budget import LEDGER_FILE, Ledger, LedgerError, study_cost
from owner_node.daemon import OwnerDaemon
from owner_node.policy import Policy, PolicyError
from tests.federation_helpers import car_tables, make_federation, study_spec

DP = "dp:epsilon=1,trees=4"
DPS = "dps:k=5,beta=0.1,epsilon=2,trees=10"


def dp_study(study_id: str, requirement: str = DP, mechanism: str = "laplace-rdt") -> fpb.StudySpec:
    return study_spec(study_id, mechanism=mechanism, requirement=requirement, disclosure="counts", max_depth=3)


# ------------------------------------------------------------------ studies
def test_a_dp_study_is_checked_like_a_dps_one():
    check_spec(dp_study("ok"))
    with pytest.raises(StudyError, match="dp:epsilon=1,trees=4 is met only by mechanism 'diffpets' or 'dpea' or 'laplace-rdt', not 'apt'"):
        check_spec(study_spec("x", mechanism="apt", requirement=DP, disclosure="counts", max_depth=3))
    with pytest.raises(StudyError, match=r"mechanism 'laplace-rdt' needs a requirement 'dp:epsilon=E,trees=T'"):
        check_spec(dp_study("x", requirement="k-anonymity:k=5"))
    with pytest.raises(StudyError, match="needs \\[training\\] max_depth"):
        check_spec(study_spec("x", mechanism="laplace-rdt", requirement=DP, disclosure="counts"))
    with pytest.raises(StudyError, match="discloses class counts"):
        check_spec(study_spec("x", mechanism="laplace-rdt", requirement=DP, max_depth=3))


def test_max_epsilon_bounds_dp_studies_and_k_bounds_do_not_apply():
    policy = Policy(mechanisms=("laplace-rdt",), min_k=10, max_epsilon=0.5)
    assert policy.check(dp_study("a", "dp:epsilon=0.5,trees=2"), "m") == []
    assert policy.check(dp_study("b"), "m") == [
        "study requires dp:epsilon=1,trees=4; this site allows at most epsilon=0.5 in total"]


# ------------------------------------------------------------------ the ledger
def test_study_cost_per_requirement_family():
    assert study_cost(dp_study("a")) == (1.0, 0.0)
    eps, delta = study_cost(dp_study("b", DPS, "kanon-rdt"))
    assert eps == 2.0 and 0 < delta < 1
    assert study_cost(study_spec("c")) is None  # k-anonymity spends no epsilon


def test_charges_are_durable_idempotent_and_capped(tmp_path):
    ledger = Ledger(tmp_path)
    assert ledger.spent == (0.0, 0.0) and not (tmp_path / LEDGER_FILE).exists()
    first = ledger.charge(dp_study("s1"))
    assert ledger.charge(dp_study("s1")) == first  # the same study spends once
    assert ledger.charge(study_spec("apt")) is None
    reloaded = Ledger(tmp_path)
    assert reloaded.charges == [first] and reloaded.spent == (1.0, 0.0)
    assert reloaded.over_cap(dp_study("s2"), 2.0, None) is None
    why = reloaded.over_cap(dp_study("s2", "dp:epsilon=1.5,trees=4"), 2.0, None)
    assert why == ("study spends epsilon=1.5; this site has spent 1 over 1 earlier release and its lifetime cap "
                   "is epsilon=2 (1 left)")
    assert reloaded.over_cap(dp_study("s1"), 0.5, None) is None  # already charged: a resend costs nothing
    dps = dp_study("s3", DPS, "kanon-rdt")
    assert "lifetime cap is delta=1e-09" in reloaded.over_cap(dps, None, 1e-9)


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read the privacy-budget ledger"),
    ('{"version": 7, "charges": []}', "not a version-1 privacy-budget ledger"),
    ('{"version": 1, "charges": [{"study_id": "a"}]}', "charge 0:"),
    ('{"version": 1, "charges": [{"study_id": "a", "mechanism": "m", "requirement": "r", "epsilon": -1, '
     '"delta": 0, "at": "t"}]}', "charge 0: epsilon and delta must be finite and >= 0"),
])
def test_a_damaged_ledger_is_named_not_reset(tmp_path, content, message):
    (tmp_path / LEDGER_FILE).write_text(content)
    with pytest.raises(LedgerError, match=message) as info:
        Ledger(tmp_path)
    assert str(tmp_path / LEDGER_FILE) in str(info.value)
    assert (tmp_path / LEDGER_FILE).read_text() == content


def test_lifetime_caps_are_policy_keys():
    policy = Policy.from_mapping({"lifetime_epsilon": 3, "lifetime_delta": 1e-3}, "owner.toml [policy]")
    assert (policy.lifetime_epsilon, policy.lifetime_delta) == (3.0, 1e-3)
    with pytest.raises(PolicyError, match="lifetime_delta"):
        Policy.from_mapping({"lifetime_delta": 2}, "owner.toml [policy]")


# ------------------------------------------------------------------ end to end
def test_a_laplace_rdt_study_is_mined_and_the_next_one_would_cross_the_lifetime_cap(tmp_path, capsys, caplog):
    owners = ["site-a", "site-b"]
    fed = make_federation(tmp_path, owners, owner_data=car_tables(tmp_path, owners),
                          policy={"mechanisms": ["laplace-rdt"], "max_epsilon": 1, "lifetime_epsilon": 1.5,
                                  "miners": ["miner"]})
    fed.start()
    stop = threading.Event()
    daemons = [OwnerDaemon(fed.owner_config(o)) for o in owners]
    try:
        admin = fed.stub("admin")
        admin.CreateStudy(fpb.CreateStudyRequest(spec=dp_study("dp-1")), timeout=10)
        assert [o.outcome for d in daemons for o in d.run_once(wait_seconds=5, stop=stop)] == ["submitted"] * 2
        status = fed.wait_study("dp-1")
        assert status.state == "done", status.reason
        results = admin.GetResults(fpb.StudyRef(study_id="dp-1"), timeout=10)
        assert all(o.audit_passed for o in results.owners) and len(results.owners) == 2

        admin.CreateStudy(fpb.CreateStudyRequest(spec=dp_study("dp-2")), timeout=10)
        assert [o.outcome for o in daemons[0].run_once(wait_seconds=5, stop=stop)] == ["refused"]
        status = admin.GetStudy(fpb.StudyRef(study_id="dp-2"), timeout=10)
        assert ("site-a refused: budget: answering would exceed this site's lifetime privacy budget; the details stay "
                "in the site's own log") in status.reason
        assert "study spends epsilon=1; this site has spent 1 over 1 earlier release" in caplog.text  # the site's log
    finally:
        for d in daemons:
            d.close()
        fed.close()
    assert main(["owner", "budget", "--config", str(fed.kits["site-a"] / "owner.toml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["study_id"] for c in report["charges"]] == ["dp-1"]
    assert report["spent"] == {"epsilon": 1.0, "delta": 0.0} and report["left"]["epsilon"] == 0.5
    assert main(["owner", "budget", "--config", str(fed.kits["site-a"] / "owner.toml")]) == 0
    assert "lifetime cap" in capsys.readouterr().out
