"""The shape of the `modelshare` command line: lazy start-up, one spelling per concept, --version,
--json on every reporting command (errors too), the deprecated spellings that scripts still use,
the safe default of `release`, and `pgen` on every kind of release."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import modelshare_toy_histogram  # examples/plugin_mechanism, on pytest's pythonpath
import numpy as np
import pandas as pd
import pytest

from modelshare import cli
from modelshare.cli import build_parser, main
from modelshare.cli import datasets as cli_datasets
from modelshare.cli.common import CommandFailed
from modelshare.cli.owner_status import DEFAULT_MAX_AGE
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.model_io import read_model_file, write_release
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.release import release as release_model
from modelshare.miner_node.pgen import pgen_regression
from modelshare.miner_node.tasks import pseudo_data
from modelshare.owner_node.daemon import POLL_GRACE_SECONDS, POLL_WAIT_SECONDS
from modelshare.owner_node.status import STATUS_FILE, STATUS_FORMAT
from modelshare.provision import issue_throwaway_federation
from tests.federation_helpers import REGRESSION_SCHEMA, regression_rows

# Commands that run until stopped and report nothing: the only ones without --json.
DAEMONS = {("miner", "serve"), ("owner", "serve")}
# Old spellings of a concept; none may be a visible option of any command.
OLD_SPELLINGS = {"--depth", "--depths", "--models", "--test-size", "--random-state"}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of every command the full parser configures."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from _leaves(child, (*path, name))


LEAVES = dict(_leaves(build_parser()))


def _visible_options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions if a.help != argparse.SUPPRESS for s in a.option_strings}


# ------------------------------------------------------------------ lazy start-up
def _imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def test_importing_the_cli_imports_no_command():
    loaded = _imported_after("import modelshare.cli")
    heavy = {"experiments", "modelshare.simulate", "modelshare.provision", "pandas", "sklearn", "grpc"}
    assert not heavy & loaded


def test_the_owner_health_probe_builds_without_the_daemon_or_the_learners():
    loaded = _imported_after("import modelshare.cli\nmodelshare.cli.build_parser(('owner', 'status'))")
    assert "modelshare.cli.owner_status" in loaded
    assert not {"modelshare.owner_node.daemon", "modelshare.owner_node.training", "sklearn", "pandas",
                "experiments"} & loaded


def test_the_default_max_age_is_three_poll_rounds_of_the_daemon():
    assert DEFAULT_MAX_AGE == 3 * (POLL_WAIT_SECONDS + POLL_GRACE_SECONDS)


def test_every_command_of_the_tree_has_a_handler():
    assert ("privacy", "audit-dp") in LEAVES and ("owner", "status") in LEAVES
    for path, parser in LEAVES.items():
        assert callable(parser.get_default("func")), path


# ------------------------------------------------------------------ one spelling per concept
@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_every_reporting_command_documents_json_and_no_command_shows_an_old_spelling(path):
    parser = LEAVES[path]
    options = _visible_options(parser)
    assert not options & OLD_SPELLINGS, path
    if path in DAEMONS:
        assert "--json" not in options
        return
    [json_action] = [a for a in parser._actions if "--json" in a.option_strings]
    assert '{"error"' in json_action.help, path
    if "--seed" in options:
        [seed] = [a for a in parser._actions if "--seed" in a.option_strings]
        assert seed.type is int, path


ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDERS = {"N": "1", "S": "1", "OWNERS": "1", "ID": "study-1", "LEARNER": "admissible",
                "REQUIREMENT": "k-anonymity:k=10", "PAIRING": "deferred"}  # EXPERIMENTS.md's and README's


def _documented_commands() -> list[tuple[str, list[str]]]:
    """Every `modelshare ...` command line in README.md, EXPERIMENTS.md and docs/ (the generated reference aside)."""
    found = []
    pages = sorted(p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.relative_to(ROOT / "docs").parts)
    for path in [ROOT / "README.md", ROOT / "EXPERIMENTS.md", *pages]:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for line in re.findall(r"^\s*(modelshare [^#\n]*)", text, re.MULTILINE):
            command = line.split("&&")[0]
            found.append((path.name, [PLACEHOLDERS.get(w, w) for w in shlex.split(command)[1:]]))
    return found


PLUGIN_PAGES = {"mechanism-plugin.md"}  # their commands run where the example plugin is installed


@pytest.mark.parametrize("where, argv", _documented_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_documented_command_line_parses(capsys, request, where, argv):
    if where in PLUGIN_PAGES and modelshare_toy_histogram.NAME not in registry.names():
        registry.register(modelshare_toy_histogram.RECORD)
        request.addfinalizer(lambda: registry.unregister(modelshare_toy_histogram.NAME))
    try:
        build_parser().parse_args(argv)
    except SystemExit as exit:
        assert exit.code == 0 and argv in (["--help"], ["--version"]), f"{where}: {argv}"
    assert "deprecated" not in capsys.readouterr().err, f"{where} spells an old option: {argv}"


def test_global_models_and_other_lists_are_space_separated():
    args = build_parser().parse_args(["simulate", "--global-models", "decision-tree", "naive-bayes"])
    assert args.models == ("decision-tree", "naive-bayes")
    args = build_parser().parse_args(["experiment", "rdt", "--max-depths", "3", "4", "--global-models", "none"])
    assert args.max_depths == (3, 4) and args.global_models == ()
    args = build_parser().parse_args(["experiment", "sources", "--owners", "1", "5"])
    assert args.owners == (1, 5) and build_parser().parse_args(["simulate", "--owners", "3"]).owners == 3


def test_version_comes_from_the_installed_package_else_pyproject(capsys, monkeypatch):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out == f"modelshare {metadata.version('modelshare')}\n"

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert cli.package_version() == "0.1.0"  # pyproject.toml's


# ------------------------------------------------------------------ --json errors
def test_a_failing_command_prints_one_json_error_with_the_same_exit_status(capsys):
    assert main(["datasets", "show", "iris"]) == 2
    text = capsys.readouterr()
    assert text.out == "" and "iris" in text.err
    assert main(["datasets", "show", "iris", "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["error"]["type"] == "UnknownDatasetError" and "iris" in payload["error"]["message"]


def test_a_usage_error_under_json_is_a_json_error_too(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["privacy", "dps", "--k", "five", "--json"])
    assert exit.value.code == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"]["type"] == "UsageError" and "--k" in captured.err


def test_a_command_that_fails_after_starting_exits_1_with_its_hints(capsys, monkeypatch):
    def fails(args: argparse.Namespace) -> int:
        raise CommandFailed("the miner stalled", hints=["rerun with --keep-dir DIR"])

    monkeypatch.setattr(cli_datasets, "cmd_datasets", fails)
    assert main(["datasets", "list", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"error": {"type": "CommandFailed", "message": "the miner stalled"}}
    assert "hint: rerun with --keep-dir DIR" in captured.err


def test_owner_status_reports_an_unusable_config_as_json(tmp_path, capsys):
    assert main(["owner", "status", "--config", str(tmp_path / "missing.toml"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["type"] == "OwnerConfigError"


def test_owner_status_reads_a_status_file_whose_gave_up_is_not_a_table(tmp_path, capsys):
    """A hand-edited or foreign status file with a list for ``gave_up`` is reported, not an AttributeError."""
    kit = issue_throwaway_federation(tmp_path, owners=["site-a"], address="localhost:1",
                                     owner_data={"site-a": (str(tmp_path / "rows.csv"), "class")})["site-a"]
    (kit / "state").mkdir(exist_ok=True)
    (kit / "state" / STATUS_FILE).write_text(json.dumps({"format": STATUS_FORMAT, "state": "polling",
                                                          "gave_up": ["s1"]}))
    assert main(["owner", "status", "--config", str(kit / "owner.toml")]) in (0, 1)
    assert "site-a: " in capsys.readouterr().out


# ------------------------------------------------------------------ deprecated spellings
def test_audit_dp_is_privacy_audit_dp_and_the_old_spelling_says_so(capsys):
    argv = ["laplace-rdt", "--dataset", "vote", "--epsilon", "1", "--trials", "10"]
    assert main(["privacy", "audit-dp", *argv]) == 2
    new = capsys.readouterr().err
    assert main(["audit-dp", *argv]) == 2
    old = capsys.readouterr().err
    assert "at least 100 trials" in new and "at least 100 trials" in old
    assert "'modelshare audit-dp' is deprecated; use 'modelshare privacy audit-dp'" in old and "deprecated" not in new


def test_hidden_aliases_are_not_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "audit-dp" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["release", "--help"])
    text = capsys.readouterr().out
    assert "--max-depth" in text and "--depth " not in text


@pytest.mark.parametrize("argv, dest, value, note", [
    (["release", "--depth", "4", "--out", "m.json"], "max_depth", 4, "'--depth' is deprecated; use '--max-depth'"),
    (["privacy", "audit-dp", "dpea", "--epsilon", "1", "--depth", "2"], "depth", 2,
     "'--depth' is deprecated; use '--max-depth'"),
    (["experiment", "sources", "--models", "naive-bayes"], "global_models", ("naive-bayes",),
     "'--models' is deprecated; use '--global-models'"),
    (["experiment", "sources", "--owners", "1,2,5"], "owners", (1, 2, 5),
     "'--owners A,B' is deprecated; use '--owners 1 2 5'"),
], ids=["release --depth", "audit-dp --depth", "sources --models", "comma list"])
def test_an_old_option_spelling_still_works_and_says_so(capsys, argv, dest, value, note):
    assert getattr(build_parser().parse_args(argv), dest) == value
    assert note in capsys.readouterr().err


# ------------------------------------------------------------------ release: no unprotected default
def test_release_needs_an_explicit_mechanism_and_warns_when_it_is_none(tmp_path, capsys):
    model = tmp_path / "model.json"
    assert main(["release", "--dataset", "car", "--out", str(model)]) == 2
    message = capsys.readouterr().err
    assert "release needs --mechanism: one of apt, " in message and "'none' releases" in message
    assert not model.exists()
    assert main(["release", "--dataset", "car", "--mechanism", "none", "--out", str(model), "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning: --mechanism none: the released tree is unprotected" in captured.err
    summary = json.loads(captured.out)
    assert summary["report"]["mechanism"] == "none" and summary["report"]["parameters"]["disclosure"] == "hit_miss"


# ------------------------------------------------------------------ pgen on every kind of release
def _release(tmp_path, *flags: str) -> str:
    path = str(tmp_path / "model.json")
    assert main(["release", "--dataset", "car", "--seed", "4", "--out", path, *flags]) == 0
    return path


@pytest.mark.parametrize("flags", [
    ["--mechanism", "apt", "--requirement", "k-anonymity:k=5"],
    ["--mechanism", "kanon-rdt", "--requirement", "dps:k=5,beta=0.5,epsilon=4,trees=4", "--max-depth", "3"],
    ["--mechanism", "laplace-rdt", "--requirement", "dp:epsilon=1,trees=3", "--max-depth", "3"],
    ["--mechanism", "dpea", "--requirement", "dp:epsilon=1,trees=2", "--max-depth", "2"],
    ["--mechanism", "diffpets", "--requirement", "dp:epsilon=1,trees=2", "--max-depth", "2"],
], ids=["apt", "kanon-rdt", "laplace-rdt", "dpea", "diffpets"])
def test_pgen_regenerates_any_release_exactly_as_the_miner(tmp_path, capsys, flags):
    model = _release(tmp_path, *flags)
    out = tmp_path / "pseudo.csv"
    capsys.readouterr()
    assert main(["pgen", model, "--out", str(out), "--seed", "7", "--grouped", "--pgen-scale", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    decoded = read_model_file(model).model
    X, y = pseudo_data(decoded.trees, decoded.report, 2.0, np.random.default_rng(7), "exact")
    expected = decoded.schema.decode(X, y).astype(str)
    written = pd.read_csv(out, dtype=str)
    assert report["rows"] == len(written) == len(y) > 0
    assert (report["kind"] == "tree") == (len(decoded.trees) == 1)
    pd.testing.assert_frame_equal(written, expected.reset_index(drop=True), check_dtype=False)


def test_pgen_regenerates_a_regression_forest_and_refuses_rows_of_an_ensemble(tmp_path, capsys):
    X, y = regression_rows(200, 1)
    release = release_model("diffpets", schema=REGRESSION_SCHEMA, X=X, y=y, requirement="dp:epsilon=100,trees=2",
                            max_depth=3, random_state=1)
    model = tmp_path / "forest.json"
    write_release(release, model)
    out = tmp_path / "pseudo.parquet"
    assert main(["pgen", str(model), "--out", str(out), "--grouped"]) == 0
    frame = pd.read_parquet(out)
    Xp, yp = pgen_regression(read_model_file(model).model.forest, scale=1.0, rng=np.random.default_rng(0))
    assert list(frame.columns) == [*REGRESSION_SCHEMA.names, "y"] and len(frame) == len(yp)
    assert np.allclose(frame["y"].to_numpy(), yp)
    assert main(["pgen", str(model), "--out", str(out), "--rows", "10"]) == 2
    assert ("--rows asks for exactly N rows of a single tree; this model is a regression forest"
            in capsys.readouterr().err)


def test_pgen_shuffles_by_default_and_keeps_the_class_counts(tmp_path):
    model = _release(tmp_path, "--mechanism", "kanon-rdt", "--requirement", "dps:k=5,beta=0.5,epsilon=4,trees=4",
                     "--max-depth", "3")
    grouped, shuffled = tmp_path / "g.csv", tmp_path / "s.csv"
    assert main(["pgen", model, "--out", str(grouped), "--grouped"]) == 0
    assert main(["pgen", model, "--out", str(shuffled)]) == 0
    a, b = pd.read_csv(grouped), pd.read_csv(shuffled)
    assert len(a) == len(b) and not a.equals(b)
    classes = load_dataset("car").schema.class_name
    assert a[classes].value_counts().sort_index().equals(b[classes].value_counts().sort_index())


def test_an_unreachable_miner_is_named_with_its_address_and_the_likely_cause(tmp_path, capsys):
    from modelshare.provision import issue_throwaway_federation

    kits = issue_throwaway_federation(tmp_path / "kits", owners=["o1"], address="localhost:1")  # nothing listens
    assert main(["study", "list", "--config", str(kits["admin"] / "admin.toml")]) == 2
    said = capsys.readouterr().err
    assert "cannot reach the miner at localhost:1" in said and "modelshare miner serve" in said
    assert "the miner answered" not in said  # the miner never answered


def test_a_failing_simulate_under_json_prints_one_parsable_error_object(tmp_path, capsys):
    assert main(["simulate", "--data", str(tmp_path / "missing.csv"), "--class-column", "c", "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {"error"} and "missing.csv" in payload["error"]["message"]
