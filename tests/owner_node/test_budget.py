"""The owner's privacy-budget ledger (every release, with its kind), dp studies end to end, and `owner budget`."""

from __future__ import annotations

import json
import threading

import pytest

from modelshare.cli import main
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.study import StudyError
from modelshare.owner_node.budget import LEDGER_FILE, Ledger, LedgerError, study_cost
from modelshare.owner_node.config import OwnerConfig
from modelshare.owner_node.daemon import OwnerDaemon
from modelshare.owner_node.policy import Policy, PolicyError
from tests.federation_helpers import car_tables, make_federation, study_spec

DP = "dp:epsilon=1,trees=4"
DPS = "dps:k=5,beta=0.1,epsilon=2,trees=10"


def dp_study(study_id: str, requirement: str = DP, mechanism: str = "laplace-rdt") -> fpb.StudySpec:
    return study_spec(study_id, mechanism=mechanism, requirement=requirement, disclosure="counts", max_depth=3)


# ------------------------------------------------------------------ studies
def test_a_dp_study_is_checked_like_a_dps_one():
    study_from_pb(dp_study("ok"))
    with pytest.raises(StudyError,
                       match="dp:epsilon=1,trees=4 is met only by mechanism 'diffpets' or 'dpea' or 'dpea-nb' "
                       "or 'laplace-rdt', not 'apt'"):
        study_from_pb(study_spec("x", mechanism="apt", requirement=DP, disclosure="counts", max_depth=3))
    with pytest.raises(StudyError, match=r"mechanism 'laplace-rdt' needs a requirement 'dp:epsilon=E,trees=T'"):
        study_from_pb(dp_study("x", requirement="k-anonymity:k=5"))
    with pytest.raises(StudyError, match="needs \\[training\\] max_depth"):
        study_from_pb(study_spec("x", mechanism="laplace-rdt", requirement=DP, disclosure="counts"))
    with pytest.raises(StudyError, match="discloses class counts"):
        study_from_pb(study_spec("x", mechanism="laplace-rdt", requirement=DP, max_depth=3))


def test_max_epsilon_bounds_dp_studies_and_k_bounds_do_not_apply():
    policy = Policy(mechanisms=("laplace-rdt",), min_k=10, max_epsilon=0.5)
    assert policy.check(study_from_pb(dp_study("a", "dp:epsilon=0.5,trees=2")), "m") == []
    assert policy.check(study_from_pb(dp_study("b")), "m") == [
        "study requires dp:epsilon=1,trees=4; this site allows at most epsilon=0.5 in total"]


# ------------------------------------------------------------------ the ledger
def test_study_cost_per_requirement_family():
    assert study_cost(study_from_pb(dp_study("a"))) == (1.0, 0.0)
    eps, delta = study_cost(study_from_pb(dp_study("b", DPS, "kanon-rdt")))
    assert eps == 2.0 and 0 < delta < 1
    assert study_cost(study_from_pb(study_spec("c"))) is None  # k-anonymity spends no epsilon


def test_charges_are_durable_idempotent_and_capped(tmp_path):
    ledger = Ledger(tmp_path)
    assert ledger.spent == (0.0, 0.0) and not (tmp_path / LEDGER_FILE).exists()
    first = ledger.charge(study_from_pb(dp_study("s1")))
    assert ledger.charge(study_from_pb(dp_study("s1"))) == first  # the same study spends once
    apt = ledger.charge(study_from_pb(study_spec("apt")))  # a non-DP release is recorded too, spending nothing
    assert (apt.kind, apt.epsilon, apt.delta, apt.is_dp) == ("path", 0.0, 0.0, False)
    reloaded = Ledger(tmp_path)
    assert reloaded.charges == [first, apt] and reloaded.spent == (1.0, 0.0)
    assert first.kind == "dp" and reloaded.non_dp == [apt]
    assert reloaded.over_cap(study_from_pb(dp_study("s2")), 2.0, None) is None
    why = reloaded.over_cap(study_from_pb(dp_study("s2", "dp:epsilon=1.5,trees=4")), 2.0, None)
    assert why == ("study spends epsilon=1.5; this site has spent 1 over 1 earlier release and its lifetime cap "
                   "is epsilon=2 (1 left)")
    # already charged: a resend costs nothing
    assert reloaded.over_cap(study_from_pb(dp_study("s1")), 0.5, None) is None
    dps = dp_study("s3", DPS, "kanon-rdt")
    assert "lifetime cap is delta=1e-09" in reloaded.over_cap(study_from_pb(dps), None, 1e-9)


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read the privacy-budget ledger"),
    ('{"version": 7, "charges": []}', r"not a privacy-budget ledger of a version this owner reads \(1 or 2\)"),
    ('{"version": 1, "charges": [{"study_id": "a"}]}', "charge 0:"),
    ('{"version": 1, "charges": [{"study_id": "a", "mechanism": "m", "requirement": "r", "epsilon": -1, '
     '"delta": 0, "at": "t"}]}', "charge 0: epsilon and delta must be finite and >= 0"),
    ('{"version": 2, "charges": [{"study_id": "a", "mechanism": "m", "requirement": "r", "epsilon": 1, '
     '"delta": 0, "at": "t"}]}', "charge 0:.*kind"),
    ('{"version": 2, "charges": [{"study_id": "a", "mechanism": "m", "requirement": "r", "epsilon": 1, '
     '"delta": 0, "at": "t", "kind": "sorta"}]}',
     r"charge 0: kind 'sorta' is not one of \['none', 'path', 'dps', 'dp'\]"),
])
def test_a_damaged_ledger_is_named_not_reset(tmp_path, content, message):
    (tmp_path / LEDGER_FILE).write_text(content)
    with pytest.raises(LedgerError, match=message) as info:
        Ledger(tmp_path)
    assert str(tmp_path / LEDGER_FILE) in str(info.value)
    assert (tmp_path / LEDGER_FILE).read_text() == content


def test_a_version_1_ledger_is_read_and_rewritten_as_version_2(tmp_path):
    old = [{"study_id": "d1", "mechanism": "laplace-rdt", "requirement": DP, "epsilon": 1.0, "delta": 0.0, "at": "t1"},
           {"study_id": "k1", "mechanism": "kanon-rdt", "requirement": DPS, "epsilon": 2.0, "delta": 1e-4, "at": "t2"}]
    (tmp_path / LEDGER_FILE).write_text(json.dumps({"version": 1, "charges": old}))
    ledger = Ledger(tmp_path)
    assert [(c.study_id, c.kind) for c in ledger.charges] == [("d1", "dp"), ("k1", "dps")]
    assert ledger.spent == (3.0, 1e-4) and ledger.non_dp == []
    ledger.charge(study_from_pb(study_spec("a1", mechanism="none", requirement=None)))
    data = json.loads((tmp_path / LEDGER_FILE).read_text())
    assert data["version"] == 2 and [c["kind"] for c in data["charges"]] == ["dp", "dps", "none"]
    assert [c.study_id for c in Ledger(tmp_path).charges] == ["d1", "k1", "a1"]


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
        status = fed.wait_study("dp-2")  # the miner decides the study on its lifecycle thread, after the ack
        assert status.state == "failed"
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


# ------------------------------------------------------------------ non-DP releases of the same table
def test_owner_budget_says_plainly_when_non_dp_releases_of_the_table_exist(tmp_path, capsys):
    fed = make_federation(tmp_path, ["site-a"], owner_data=car_tables(tmp_path, ["site-a"]))
    config = fed.kits["site-a"] / "owner.toml"
    assert main(["owner", "budget", "--config", str(config), "--json"]) == 0
    empty = json.loads(capsys.readouterr().out)
    assert (empty["non_dp_releases"], empty["note"], empty["mix_dp_with_non_dp"]) == ([], None, True)
    ledger = Ledger(OwnerConfig.load(config).state_dir)
    ledger.charge(study_from_pb(dp_study("d1")))
    ledger.charge(study_from_pb(study_spec("a1")))
    ledger.charge(study_from_pb(study_spec("n1", mechanism="none", requirement=None)))
    assert main(["owner", "budget", "--config", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(c["study_id"], c["kind"], c["epsilon"]) for c in report["charges"]] == [
        ("d1", "dp", 1.0), ("a1", "path", 0.0), ("n1", "none", 0.0)]
    assert report["spent"] == {"epsilon": 1.0, "delta": 0.0} and report["non_dp_releases"] == ["a1", "n1"]
    assert report["note"] == ("this table also has 2 non-DP releases (apt, none): they promise no epsilon and spend "
                              "none of the budget, so the lifetime cap does not bound what they disclose about the "
                              "same rows")
    assert main(["owner", "budget", "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert f"note: {report['note']}; this site's policy allows mixing DP and non-DP releases " \
           "(mix_dp_with_non_dp = true)" in " ".join(printed.split())
    kinds = {cells[0]: cells[2] for line in printed.splitlines()
             if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) > 2 and cells[0] in ("d1", "a1", "n1")}
    assert kinds == {"d1": "dp", "a1": "path", "n1": "none"}


def test_mix_dp_with_non_dp_false_refuses_either_kind_once_the_other_left(tmp_path):
    policy = Policy.from_mapping({"mechanisms": ["apt", "laplace-rdt"], "mix_dp_with_non_dp": False},
                                 "owner.toml [policy]")
    with pytest.raises(PolicyError, match="mix_dp_with_non_dp"):
        Policy.from_mapping({"mix_dp_with_non_dp": "no"}, "owner.toml [policy]")
    non_dp, dp = Ledger(tmp_path / "a"), Ledger(tmp_path / "b")
    non_dp.charge(study_from_pb(study_spec("a1")))
    dp.charge(study_from_pb(dp_study("d1")))
    assert policy.check(study_from_pb(dp_study("d2")), "m", non_dp) == [
        "study asks for a DP release (laplace-rdt); this table already has 1 non-DP release (apt in study a1); "
        "this site's policy does not mix DP and non-DP releases of its table"]
    assert policy.check(study_from_pb(study_spec("a2")), "m", dp) == [
        "study asks for a non-DP release (apt); this table already has 1 DP release (laplace-rdt in study d1); "
        "this site's policy does not mix DP and non-DP releases of its table"]
    assert policy.check(study_from_pb(study_spec("a2")), "m", non_dp) == []
    assert policy.check(study_from_pb(dp_study("d2")), "m", dp) == []
    # the recorded study itself (owner check after answering)
    assert policy.check(study_from_pb(dp_study("d1")), "m", dp) == []
    mixing = policy.model_copy(update={"mix_dp_with_non_dp": True})
    assert mixing.check(study_from_pb(dp_study("d2")), "m", non_dp) == []
    assert mixing.check(study_from_pb(study_spec("a2")), "m", dp) == []


def test_a_site_that_does_not_mix_refuses_a_dp_study_after_an_apt_release(tmp_path):
    fed = make_federation(tmp_path, ["site-a"], owner_data=car_tables(tmp_path, ["site-a"]),
                          policy={"mechanisms": ["apt", "laplace-rdt"], "mix_dp_with_non_dp": False,
                                  "miners": ["miner"]})
    fed.start()
    stop = threading.Event()
    daemon = OwnerDaemon(fed.owner_config("site-a"))
    try:
        admin = fed.stub("admin")
        admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("anon-1")), timeout=10)
        assert [o.outcome for o in daemon.run_once(wait_seconds=5, stop=stop)] == ["submitted"]
        admin.CreateStudy(fpb.CreateStudyRequest(spec=dp_study("dp-1")), timeout=10)
        assert [o.outcome for o in daemon.run_once(wait_seconds=5, stop=stop)] == ["refused"]
        status = fed.wait_study("dp-1")
    finally:
        daemon.close()
        fed.close()
    assert [(o.state, o.reason) for o in status.owners] == [
        ("refused", "policy: this site's policy does not allow this study (policy keys: mix_dp_with_non_dp)")]
    assert [(c.study_id, c.kind) for c in Ledger(fed.owner_config("site-a").state_dir).charges] == [("anon-1", "path")]
