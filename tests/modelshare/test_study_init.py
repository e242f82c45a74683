"""`modelshare study init`: a study.toml with simulate's defaults, which `study create` runs as a protected study;
and a study.toml without `[release]`, which is refused rather than released unprotected."""

from __future__ import annotations

import json

import pytest

from modelshare.cli import build_parser, main
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.study import StudyError, load_study_file, spec_from_mapping
from modelshare.common.federation.wire import disclosure_from_pb
from modelshare.owner_node.daemon import OwnerDaemon
from modelshare.provision import set_miner_port
from modelshare.simulate import prepare
from tests.federation_helpers import REGRESSION_SCHEMA, car_tables, make_federation

# What differs between any two studies of the same release and mining: who, when, and the schema's source.
_PER_STUDY = ("study_id", "title", "owners", "quorum", "deadline", "schema", "schema_fingerprint")


def _settings(spec: fpb.StudySpec) -> fpb.StudySpec:
    copy = fpb.StudySpec()
    copy.CopyFrom(spec)
    for name in _PER_STUDY:
        copy.ClearField(name)
    return copy


def test_study_init_writes_the_defaults_simulate_runs(tmp_path, capsys):
    args = build_parser().parse_args(["simulate", "--dataset", "car", "--owners", "2"])
    prepare(args, tmp_path / "sim")
    simulated = load_study_file(tmp_path / "sim" / "study.toml").spec
    assert main(["study", "init", "--dataset", "car", "-o", str(tmp_path / "study.toml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    written = load_study_file(tmp_path / "study.toml").spec
    assert _settings(written) == _settings(simulated)
    assert (written.mechanism, written.requirement, disclosure_from_pb(written.disclosure, where="study"),
            written.learner, list(written.global_models)) == (
        "apt", "cl-diversity:c=5,l=2", "hit_miss", "admissible", ["decision-tree", "naive-bayes"])
    assert report == {"path": str(tmp_path / "study.toml"), "mechanism": "apt", "requirement": "cl-diversity:c=5,l=2",
                      "disclosure": "hit_miss", "learner": "admissible",
                      "global_models": ["decision-tree", "naive-bayes"]}
    text = (tmp_path / "study.toml").read_text()
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "# apt: anonymity-based tree pruning" in text and 'dataset = "car"' in text


def test_study_init_keeps_an_existing_file_unless_forced_and_takes_a_regression_schema(tmp_path, capsys):
    out = tmp_path / "study.toml"
    out.write_text("mine\n")
    assert main(["study", "init", "-o", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err and out.read_text() == "mine\n"
    REGRESSION_SCHEMA.save(tmp_path / "schema.json")
    assert main(["study", "init", "--schema", str(tmp_path / "schema.json"), "-o", str(out), "--force"]) == 0
    spec = load_study_file(out).spec
    assert (spec.mechanism, spec.requirement, spec.max_depth, list(spec.global_models)) == (
        "diffpets", "dp:epsilon=1,trees=10", 4, ["regression-tree", "random-forest"])
    assert 'file = "schema.json"' in out.read_text()


def test_a_study_without_a_release_table_is_refused_naming_what_to_write():
    with pytest.raises(StudyError, match=r"study.toml: has no \[release\] table: name the mechanism .*"
                                         r"`modelshare study init`"):
        spec_from_mapping({"schema": {"dataset": "car"}}, where="study.toml")
    with pytest.raises(StudyError, match=r"\[release\]: mechanism is required"):
        spec_from_mapping({"schema": {"dataset": "car"}, "release": {"disclosure": "hit_miss"}}, where="study.toml")


def test_study_init_then_study_create_runs_a_protected_study(tmp_path, capsys):
    owners = ["site-a", "site-b"]
    fed = make_federation(tmp_path, owners, owner_data=car_tables(tmp_path, owners),
                          policy={"mechanisms": ["apt"], "miners": ["miner"]})
    with fed:
        set_miner_port(fed.kits.values(), fed.miner.port)
        assert main(["study", "init", "--dataset", "car", "-o", str(tmp_path / "study.toml")]) == 0
        capsys.readouterr()
        admin = str(fed.kits["admin"] / "admin.toml")
        assert main(["study", "create", str(tmp_path / "study.toml"), "--config", admin, "--json"]) == 0
        study_id = json.loads(capsys.readouterr().out)["id"]
        for owner in owners:
            with OwnerDaemon(fed.owner_config(owner)) as daemon:
                assert [o.outcome for o in daemon.run_once(wait_seconds=5)] == ["submitted"]
        status = fed.wait_study(study_id)
        assert status.state == "done", status.reason
        assert status.spec.mechanism == "apt" and status.spec.requirement == "cl-diversity:c=5,l=2"
