"""The owner's policy (accept/refuse matrix with exact reasons), owner.toml validation and `owner check`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.study import spec_from_mapping
from modelshare.common.study import StudyError
from modelshare.owner_node.config import OwnerConfig, OwnerConfigError
from modelshare.owner_node.policy import Policy, PolicyError

SITE = Policy(min_k=3, min_l=2, max_c=20, disclosures=("hit_miss",), miners=("miner",))


def study(mechanism: str = "apt", requirement: str | None = "cl-diversity:c=5,l=3",
          disclosure: str = "hit_miss") -> fpb.StudySpec:
    release: dict[str, Any] = {"mechanism": mechanism, "disclosure": disclosure}
    if requirement is not None:
        release["requirement"] = requirement
    data = {"study": {"id": "s1"}, "schema": {"dataset": "car"}, "release": release}
    return spec_from_mapping(data).spec


# ------------------------------------------------------------------ policy
def test_a_study_within_every_bound_is_accepted():
    assert SITE.check(study_from_pb(study()), "miner") == []
    assert SITE.check(study_from_pb(study(requirement="cl-diversity:c=20,l=3")), "miner") == []


def dps_study(requirement: str = "dps:k=5,beta=0.01,epsilon=2,trees=10") -> fpb.StudySpec:
    release = {"mechanism": "kanon-rdt", "requirement": requirement, "disclosure": "counts"}
    data = {"study": {"id": "s1"}, "schema": {"dataset": "car"}, "release": release, "training": {"max_depth": 3}}
    return spec_from_mapping(data).spec


DEFAULT = Policy(min_k=5, min_l=2, max_c=20)  # the provisioned default: accepts both kinds on a 4-class table
NONE = "study releases the tree as trained (mechanism 'none'), which guarantees nothing"
DPS_BOUNDED = Policy(mechanisms=("kanon-rdt",), max_epsilon=2.0)
DPS_STRICT = Policy(mechanisms=("kanon-rdt",), max_beta=0.05, max_delta=1e-4)


@pytest.mark.parametrize("policy, spec, reasons", [
    # each requirement family meets its own bounds: min_k bounds k-anonymity, min_l/max_c bound diversity
    pytest.param(DEFAULT, lambda: study(requirement="cl-diversity:c=5,l=2"), [], id="default-diversity"),
    pytest.param(DEFAULT, lambda: study(requirement="k-anonymity:k=10"), [], id="default-k"),
    pytest.param(DEFAULT, lambda: study(requirement="k-anonymity:k=4"),
                 ["study requires k-anonymity:k=4; this site requires at least k=5"], id="default-k-too-small"),
    pytest.param(DEFAULT, lambda: study(requirement="cl-diversity:c=25,l=2"),
                 ["study requires cl-diversity:c=25,l=2; this site requires (c,l)-diversity with c <= 20"],
                 id="default-c-too-large"),
    # k below the site minimum is refused with both numbers
    pytest.param(Policy(min_k=5), lambda: study("prune-parent", "k-anonymity:k=3"),
                 ["study requires k-anonymity:k=3; this site requires at least k=5"], id="k-below-min_k"),
    pytest.param(Policy(min_k=5), lambda: study("prune-parent", "k-anonymity:k=5"), [], id="k-at-min_k"),
    # diversity with l at least min_k meets the k bound
    pytest.param(Policy(min_k=3), lambda: study(requirement="cl-diversity:c=5,l=3"), [], id="l-at-min_k"),
    pytest.param(Policy(min_k=4), lambda: study(requirement="cl-diversity:c=5,l=3"),
                 ["study requires cl-diversity:c=5,l=3; this site requires at least k=4"], id="l-below-min_k"),
    # diversity bounds need a diversity requirement
    pytest.param(Policy(min_l=3, max_c=10), lambda: study("apt", "k-anonymity:k=50"),
                 ["study requires k-anonymity:k=50; this site accepts only (c,l)-diversity with l >= 3 and "
                  "(c,l)-diversity with c <= 10"], id="diversity-bounds-refuse-k"),
    pytest.param(Policy(min_l=3, max_c=10), lambda: study(requirement="cl-diversity:c=5,l=2"),
                 ["study requires cl-diversity:c=5,l=2; this site requires (c,l)-diversity with l >= 3"],
                 id="l-below-min_l"),
    pytest.param(Policy(min_l=3, max_c=10), lambda: study(requirement="cl-diversity:c=12,l=3"),
                 ["study requires cl-diversity:c=12,l=3; this site requires (c,l)-diversity with c <= 10"],
                 id="c-above-max_c"),
    # a per-leaf (c,l) promise needs the site's explicit consent, whatever its bounds
    pytest.param(Policy(min_l=2), lambda: study(requirement="cl-diversity:c=5,l=2,scope=leaf"),
                 ["study requires cl-diversity:c=5,l=2,scope=leaf, a promise per leaf only that a reader combining "
                  "the leaves can break; this site's policy does not allow it (per_leaf_diversity = false)"],
                 id="per-leaf-refused"),
    pytest.param(Policy(min_l=2, per_leaf_diversity=True), lambda: study(requirement="cl-diversity:c=5,l=2,scope=leaf"),
                 [], id="per-leaf-allowed"),
    pytest.param(Policy(), lambda: study(requirement="cl-diversity:c=5,l=2,scope=leaf"),
                 ["study requires cl-diversity:c=5,l=2,scope=leaf, a promise per leaf only that a reader combining "
                  "the leaves can break; this site's policy does not allow it (per_leaf_diversity = false)"],
                 id="per-leaf-refused-without-bounds"),
    # mechanism none fails every bound and the mechanism list
    pytest.param(Policy(min_k=5, min_l=2), lambda: study("none", None),
                 ["mechanism 'none' is not allowed by this site's policy (allowed: apt, prune-leaf, prune-parent)",
                  f"{NONE}; this site requires at least k=5",
                  f"{NONE}; this site requires (c,l)-diversity with l >= 2"],
                 id="mechanism-none"),
    # a missing requirement fails a bound; no bounds accept any allowed mechanism
    pytest.param(Policy(mechanisms=("none", "apt"), min_k=2), lambda: study("apt", None),
                 ["study states no privacy requirement; this site requires at least k=2"], id="no-requirement"),
    pytest.param(Policy(mechanisms=("none",)), lambda: study("none", None, "counts"), [], id="no-bounds"),
    # dps studies are bounded by beta, total epsilon and composed delta
    pytest.param(DPS_BOUNDED, dps_study, [], id="dps-within-epsilon"),
    pytest.param(DPS_BOUNDED, lambda: dps_study("dps:k=5,beta=0.01,epsilon=3,trees=10"),
                 ["study requires dps:k=5,beta=0.01,epsilon=3,trees=10; this site allows at most epsilon=2 in total"],
                 id="dps-epsilon-too-large"),
    pytest.param(DPS_STRICT, dps_study, [], id="dps-within-beta-and-delta"),  # composed delta 5.52e-05
    pytest.param(DPS_STRICT, lambda: dps_study("dps:k=5,beta=0.1,epsilon=2,trees=10"),
                 ["study requires dps:k=5,beta=0.1,epsilon=2,trees=10; this site allows at most beta=0.05",
                  "study requires dps:k=5,beta=0.1,epsilon=2,trees=10 (composed delta 0.352); this site allows at most "
                  "delta=0.0001"], id="dps-beta-and-delta-too-large"),
    # min_k bounds the k of a dps study, and diversity bounds refuse it
    pytest.param(Policy(mechanisms=("kanon-rdt",), min_k=5), dps_study, [], id="dps-k-at-min_k"),
    pytest.param(Policy(mechanisms=("kanon-rdt",), min_k=10), dps_study,
                 ["study requires dps:k=5,beta=0.01,epsilon=2,trees=10; this site requires at least k=10"],
                 id="dps-k-below-min_k"),
    pytest.param(Policy(mechanisms=("kanon-rdt",), min_l=2), dps_study,
                 ["study requires dps:k=5,beta=0.01,epsilon=2,trees=10; this site accepts only (c,l)-diversity with "
                  "l >= 2"], id="dps-refused-by-min_l"),
])
def test_the_policy_accepts_or_refuses_with_exact_reasons(policy, spec, reasons):
    assert policy.check(study_from_pb(spec()), "any") == reasons


def test_disclosure_and_miner_are_checked_and_every_reason_is_listed():
    reasons = SITE.check(study_from_pb(study("none", None, "counts")), "rogue")
    assert reasons[0] == "miner 'rogue' is not one this site answers (allowed: miner)"
    assert reasons[1].startswith("mechanism 'none' is not allowed")
    assert reasons[2] == "disclosure 'counts' is not allowed by this site's policy (allowed: hit_miss)"
    assert len(reasons) == 3 + 3  # one per bound: min_k, min_l, max_c


def test_dps_bounds_leave_other_studies_alone_and_a_malformed_dps_study_fails_them():
    policy = Policy(mechanisms=("apt", "kanon-rdt"), max_beta=0.1, max_epsilon=2.0)
    assert policy.check(study_from_pb(study("apt", "cl-diversity:c=5,l=3", "counts")), "any") == []
    spec = dps_study()
    spec.requirement = "dps:k=5,epsilon=lots"  # a malformed study never reaches the policy: it does not decode
    with pytest.raises(StudyError, match="study requirement: bad requirement 'dps:k=5,epsilon=lots'"):
        study_from_pb(spec)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"min-k": 5}, "unknown key 'min-k'; allowed keys: mechanisms, min_k, min_l, max_c, max_beta,"),
        ({"min_k": "5"}, "min_k must be an integer >= 1, got '5'"),
        ({"min_k": True}, "min_k must be an integer >= 1, got True"),
        ({"min_l": 1}, "min_l must be an integer >= 2, got 1"),
        ({"max_c": 0}, "max_c must be a positive finite number, got 0"),
        ({"max_beta": 1.5}, "max_beta must be a positive finite number at most 1, got 1.5"),
        ({"max_delta": 0}, "max_delta must be a positive finite number at most 1, got 0"),
        ({"max_epsilon": "2"}, "max_epsilon must be a positive finite number, got '2'"),
        ({"mechanisms": ["kanon-rdt", "kanon"]}, "mechanisms names ['kanon'], which are not among"),
        ({"mechanisms": ["apt", "pruneleaf"]}, "mechanisms names ['pruneleaf'], which are not among"),
        ({"mechanisms": []}, "mechanisms must list at least one name"),
        ({"disclosures": ["everything"]}, "disclosures names ['everything']"),
        ({"miners": "miner"}, "miners must be a list of names, got 'miner'"),
    ],
)
def test_policy_table_errors_name_where_and_the_key(table, message):
    with pytest.raises(PolicyError) as info:
        Policy.from_mapping(table, "kit/owner.toml [policy]")
    assert str(info.value).startswith("kit/owner.toml [policy]: ")
    assert message in str(info.value)


def test_policy_table_defaults():
    assert Policy.from_mapping({}, "here") == Policy()
    assert Policy.from_mapping({"max_c": 20, "miners": []}, "here") == Policy(max_c=20.0)


# ------------------------------------------------------------------ config
OWNER_TOML = """\
[owner]
name = "site-a"
miner = "localhost:50051"
miner_name = "miner"
state_dir = "state"
signing_key = "signing.key"
roster = "roster.json"
[tls]
ca = "ca.crt"
cert = "tls.crt"
key = "tls.key"
[data]
path = "table.csv"
class_column = "class"
[policy]
mechanisms = ["apt", "prune-leaf", "prune-parent"]
min_k = 4
min_l = 2
max_c = 20
max_beta = 0.1
max_epsilon = 2.0
max_delta = 0.001
disclosures = ["counts", "hit_miss"]
miners = ["miner"]
"""


@pytest.fixture(scope="module")
def car_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "car.csv"
    load_dataset("car").frame.to_csv(path, index=False)
    return path


@pytest.fixture
def kit(tmp_path: Path, car_csv: Path) -> Path:
    """A kit directory whose files exist (the config only checks that; it reads none of them)."""
    for name in ("signing.key", "roster.json", "ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_text("placeholder\n")
    (tmp_path / "table.csv").write_bytes(car_csv.read_bytes())
    (tmp_path / "owner.toml").write_text(OWNER_TOML)
    return tmp_path


def edit(kit: Path, old: str, new: str) -> Path:
    path = kit / "owner.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def test_config_resolves_paths_against_its_directory(kit):
    config = OwnerConfig.load(kit / "owner.toml")
    assert config.name == "site-a" and config.miner == "localhost:50051" and config.miner_name == "miner"
    assert config.state_dir == kit / "state" and config.signing_key == kit / "signing.key"
    assert config.tls.ca == kit / "ca.crt" and config.tls.key == kit / "tls.key"
    assert config.data_path == kit / "table.csv" and config.class_column == "class"
    assert config.policy == Policy(min_k=4, min_l=2, max_c=20.0, max_beta=0.1, max_epsilon=2.0, max_delta=0.001,
                                   miners=("miner",))
    assert config.insecure is False


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('state_dir = "state"', 'state_dir = "state"\nstate-dir = "x"',
         "unknown key 'owner.state-dir'; allowed keys in [owner]: name, miner, miner_name, state_dir,"),
        ("[data]", "[extra]\n[data]", "unknown key 'extra'; allowed keys: owner, tls, data, policy"),
        ("min_k = 4", 'min-k = 4', "unknown key 'policy.min-k'; allowed keys in [policy]: mechanisms, min_k,"),
        ("min_k = 4", 'min_k = "five"', "[policy]: min_k must be an integer >= 1, got 'five'"),
        ('state_dir = "state"', "state_dir = 3", "[owner]: state_dir must be a non-empty string, got 3"),
        ('name = "site-a"\n', "", "[owner]: name is required"),
        ('miner = "localhost:50051"', 'miner = "localhost"', "[owner]: miner = 'localhost' must be HOST:PORT"),
        ('signing_key = "signing.key"', 'signing_key = "gone.key"', "[owner]: signing_key = 'gone.key': "),
        ('path = "table.csv"', 'path = "."', "[data]: path = '.': "),  # absent is waited for; a directory is wrong
        ('key = "tls.key"', 'key = "."', "[tls]: key = '.': "),
        ("[owner]", "insecure = 1\n[owner]", "unknown key 'insecure'; allowed keys: owner, tls, data, policy"),
        ('roster = "roster.json"', 'roster = "roster.json"\ninsecure = "yes"', "insecure must be true or false"),
    ],
)
def test_config_errors_name_the_file_and_key(kit, old, new, message):
    path = edit(kit, old, new)
    with pytest.raises(OwnerConfigError) as info:
        OwnerConfig.load(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_a_missing_file_is_named_with_its_resolved_path(kit):
    (kit / "tls.crt").unlink()
    with pytest.raises(OwnerConfigError, match=r"\[tls\]: cert = 'tls.crt': .*tls.crt does not exist"):
        OwnerConfig.load(kit / "owner.toml")
    with pytest.raises(OwnerConfigError, match="owner config does not exist"):
        OwnerConfig.load(kit / "missing.toml")


def test_insecure_in_the_config_is_recorded_not_applied(kit):
    config = OwnerConfig.load(edit(kit, 'roster = "roster.json"', 'roster = "roster.json"\ninsecure = true'))
    assert config.insecure is True  # OwnerDaemon refuses it unless --insecure is also given


# ------------------------------------------------------------ owner check
def write_study(kit: Path, release: str) -> Path:
    path = kit / "study.toml"
    path.write_text(f'[study]\nid = "car-1"\n[schema]\ndataset = "car"\n[release]\n{release}\n')
    return path


def check(kit: Path, study_path: Path, capsys, *, as_json: bool = True) -> tuple[int, Any]:
    code = main(["owner", "check", str(study_path), "--config", str(kit / "owner.toml"),
                 *(["--json"] if as_json else [])])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if as_json and code != 2 else captured


def test_check_accepts_a_study_within_policy(kit, capsys):
    path = write_study(kit, 'mechanism = "apt"\nrequirement = "cl-diversity:c=5,l=4"\ndisclosure = "hit_miss"')
    code, result = check(kit, path, capsys)
    assert code == 0
    assert result["accept"] is True and result["reasons"] == []
    assert result["data"]["rows"] == 1728 and result["study"]["id"] == "car-1"
    code, captured = check(kit, path, capsys, as_json=False)
    assert code == 0
    assert "accept: site-a would answer study car-1 with an apt release of 1728 rows" in captured.out


def test_check_refuses_with_every_reason(kit, capsys):
    path = write_study(kit, 'mechanism = "none"')
    code, result = check(kit, path, capsys)
    assert code == 1 and result["accept"] is False
    assert result["reasons"][0].startswith("mechanism 'none' is not allowed")
    assert len(result["reasons"]) == 1 + 3
    code, captured = check(kit, path, capsys, as_json=False)
    assert code == 1 and "refuse: site-a would refuse study car-1" in captured.out


def test_check_reports_a_local_table_without_the_study_columns(kit, capsys):
    frame = load_dataset("car").frame.drop(columns=["safety"])
    frame.to_csv(kit / "table.csv", index=False)
    path = write_study(kit, 'mechanism = "apt"\nrequirement = "cl-diversity:c=5,l=4"')
    code, result = check(kit, path, capsys)
    assert code == 1
    [reason] = result["reasons"]
    assert "table.csv" in reason and "column 'safety'" in reason and "the table lacks columns ['safety']" in reason


def test_check_config_or_study_errors_exit_2(kit, capsys):
    path = write_study(kit, 'mechanism = "apt"\nrequirement = "k-anonymity:k=5"')
    edit(kit, "min_k = 4", "min_k = 0")
    code, captured = check(kit, path, capsys)
    assert code == 2 and "min_k must be an integer >= 1, got 0" in captured.err
    edit(kit, "min_k = 0", "min_k = 4")
    code, captured = check(kit, write_study(kit, 'mechanism = "apt"\nrequirement = "k-anon:k=5"'), capsys)
    assert code == 2 and "unknown requirement 'k-anon'" in captured.err


def test_check_previews_the_domain_fit_of_a_dp_study_and_the_refusal_of_a_path_study(kit, capsys):
    frame = load_dataset("car").frame
    frame.loc[5, "buying"] = "priceless"
    frame.to_csv(kit / "table.csv", index=False)
    edit(kit, 'mechanisms = ["apt", "prune-leaf", "prune-parent"]', 'mechanisms = ["apt", "laplace-rdt"]')
    dp = write_study(kit, 'mechanism = "laplace-rdt"\nrequirement = "dp:epsilon=1,trees=2"\ndisclosure = "counts"\n'
                          '[training]\nmax_depth = 3')
    code, result = check(kit, dp, capsys)
    assert code == 0 and result["data"]["rows"] == 1727
    assert result["data"]["domain_fit"] == ("dropped 1 row(s) with an unknown category or class or a value that is "
                                            "not a number (buying 1)")
    code, captured = check(kit, dp, capsys, as_json=False)
    assert code == 0 and "fitted to the schema's domain: dropped 1 row(s)" in captured.out
    code, result = check(kit, write_study(kit, 'mechanism = "apt"\nrequirement = "k-anonymity:k=5"'), capsys)
    assert code == 1 and result["data"]["domain_fit"] is None
    assert "row 6, column 'buying', value 'priceless': unknown category" in result["reasons"][0]
