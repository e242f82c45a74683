"""One loader for every TOML file kind: unknown keys are refused, naming the file, the key and the allowed keys."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomli_w

from modelshare.admin import AdminConfig, AdminError
from modelshare.cli import main
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.study import StudyError, load_study_file
from modelshare.miner_node.config import ConfigError, MinerConfig
from modelshare.owner_node.config import OwnerConfig, OwnerConfigError
from modelshare.provision import ProvisionError, issue_throwaway_federation, load_project

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STUDY = {"study": {"id": "typo"}, "schema": {"dataset": "car"},
         "release": {"mechanism": "apt", "requirement": "k-anonymity:k=5", "disclosure": "counts"}}
PROJECT = {"name": "demo", "ca": {"valid_days": 30},
           "parties": [{"name": "miner", "role": "miner", "address": "localhost:50051"}]}


@pytest.fixture(scope="module")
def kits(tmp_path_factory) -> dict[str, Path]:
    """A throw-away federation's kits (owner "site-a" with a data file), a study.toml and a project.toml."""
    root = tmp_path_factory.mktemp("configs")
    table = root / "car.csv"
    load_dataset("car").frame.to_csv(table, index=False)
    kits = issue_throwaway_federation(root / "kits", owners=["site-a"], address="localhost:50051",
                                      owner_data={"site-a": (str(table), "class")})
    (root / "study.toml").write_text(tomli_w.dumps(STUDY))
    (root / "project.toml").write_text(tomli_w.dumps(PROJECT))
    return {**kits, "root": root}


# (file, the loader, its error type, the table that gets an unknown key, the keys that table allows)
KINDS = {
    "owner": (lambda k: k["site-a"] / "owner.toml", OwnerConfig.load, OwnerConfigError, "owner",
              "name, miner, miner_name, state_dir, signing_key, roster, insecure"),
    "miner": (lambda k: k["miner"] / "miner.toml", MinerConfig.load, ConfigError, "miner",
              "name, listen, state_dir, roster, studies, max_message_bytes, "
              "max_grpc_message_bytes, stream_idle_seconds, "
              "max_nodes, timestamp_window_seconds, workers, max_calls, max_streams_per_owner, "
              "max_buffered_bytes_per_owner, max_buffered_bytes, mining_timeout_seconds, "
              "verify_processes"),
    "admin": (lambda k: k["admin"] / "admin.toml", AdminConfig.load, AdminError, "admin",
              "name, miner, miner_name, signing_key, roster"),
    "study": (lambda k: k["root"] / "study.toml", load_study_file, StudyError, "release",
              "mechanism, requirement, disclosure, prior_share"),
    "project": (lambda k: k["root"] / "project.toml", load_project, ProvisionError, "ca", "valid_days"),
}


def _edited(original: Path, prefix: str, edit) -> Path:
    """A copy of ``original`` beside it (its relative paths still resolve) with its tables passed through ``edit``."""
    data = tomllib.loads(original.read_text())
    edit(data)
    copy = original.with_name(prefix + original.name)
    copy.write_text(tomli_w.dumps(data))
    return copy


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_loader_refuses_an_unknown_key_naming_file_key_and_allowed_keys(kits, kind):
    file_of, load, error, table, allowed = KINDS[kind]
    original = file_of(kits)
    load(original)  # the file as written loads
    typo = _edited(original, "typo-", lambda data: data[table].update(requirment="x"))
    extra = _edited(original, "extra-", lambda data: data.update(extra={"key": 1}))
    try:
        with pytest.raises(error) as info:
            load(typo)
        assert str(info.value) == f"{typo}: unknown key '{table}.requirment'; allowed keys in [{table}]: {allowed}"
        with pytest.raises(error, match=rf"^{extra}: unknown key 'extra'; allowed keys: "):
            load(extra)
    finally:
        typo.unlink()
        extra.unlink()


def test_study_create_refuses_a_misspelt_requirement_with_exit_2(kits, tmp_path, capsys):
    """``requirment =`` must not create a study that asks for no requirement: the CLI exits 2 naming the key."""
    path = tmp_path / "study.toml"
    path.write_text(tomli_w.dumps({**STUDY, "release": {"mechanism": "apt", "requirment": "k-anonymity:k=5"}}))
    code = main(["study", "create", str(path), "--config", str(kits["admin"] / "admin.toml")])
    assert code == 2
    assert (f"{path}: unknown key 'release.requirment'; allowed keys in [release]: mechanism, "
            "requirement, disclosure, prior_share"
            in capsys.readouterr().err)


def test_wrong_values_name_the_table_the_key_and_what_it_must_be(kits, tmp_path):
    study = {**STUDY, "study": {"id": "x", "quorum": -1, "owners": ["a", 3]}, "mining": {"pgen_scale": 0}}
    path = tmp_path / "study.toml"
    path.write_text(tomli_w.dumps(study))
    with pytest.raises(StudyError) as info:
        load_study_file(path)
    assert str(info.value).splitlines() == [
        f"{path} [study]: owners[1] must be a string, got 3",
        f"{path} [study]: quorum must be an integer >= 0, got -1",
        f"{path} [mining]: pgen_scale must be a positive finite number, got 0",
    ]


def test_a_missing_evaluation_table_is_named_by_its_key(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(tomli_w.dumps({**STUDY, "mining": {"evaluation": "nope.csv"}}))
    with pytest.raises(StudyError) as info:
        load_study_file(path)
    assert str(info.value) == f"{path} [mining]: evaluation = 'nope.csv': no such file ({tmp_path / 'nope.csv'})"


@pytest.mark.parametrize("miner, words", [
    ({"max_message_bytes": 2**20, "max_buffered_bytes_per_owner": 2**19},
     "max_buffered_bytes_per_owner (524288) is less than max_message_bytes (1048576)"),
    ({"max_buffered_bytes_per_owner": 2**27, "max_buffered_bytes": 2**26},
     "max_buffered_bytes (67108864) is less than max_buffered_bytes_per_owner (134217728)"),
])
def test_buffer_limits_that_could_never_take_an_answer_are_refused(tmp_path, miner, words):
    with pytest.raises(ConfigError) as info:
        MinerConfig.from_mapping({"miner": {"name": "miner", **miner}}, base=tmp_path, where="miner.toml")
    assert words in str(info.value), str(info.value)
    limits = MinerConfig.from_mapping({"miner": {"name": "miner"}}, base=tmp_path, where="miner.toml").limits
    assert (limits.max_buffered_bytes_per_owner, limits.max_buffered_bytes) == (64 * 2**20, 256 * 2**20)
