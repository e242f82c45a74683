"""Output that explains itself: every table of the CLI fits 100 columns with its title on one line,
`simulate` ends with the legend the tutorial quotes, and a study's headline agrees with its table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from modelshare import simulate
from modelshare.admin import results_dict, status_dict, study_headline
from modelshare.cli import CLOSED_PIPE_STATUS, main
from modelshare.cli.common import TABLE_WIDTH, out
from modelshare.cli.federation import list_table, results_renderables
from modelshare.cli.miner_calls import status_renderables
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.refusal import Refusal
from modelshare.common.federation.serde import study_from_pb
from modelshare.legend import ACCURACY_GAP_POINTS, LEGEND, legend_lines
from modelshare.owner_node.budget import Ledger
from modelshare.owner_node.config import OwnerConfig
from tests.federation_helpers import car_tables, make_federation, study_spec

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial" / "first-simulate.md"
OWNERS = [f"hospital-site-{i:02d}" for i in range(1, 11)]


@pytest.fixture
def width(monkeypatch):
    """Set the CLI's console to a width; returns a function checking printed text against it."""

    def at(columns: int):
        monkeypatch.setattr(out, "width", columns)

        def check(text: str, *titles: str) -> list[str]:
            lines = text.splitlines()
            assert lines, "nothing was printed"
            too_long = [line for line in lines if len(line) > columns]
            assert not too_long, f"{len(too_long)} lines exceed {columns} columns:\n" + "\n".join(too_long)
            for title in titles:  # a title is one line, never wrapped
                assert any(title in line for line in lines), f"title {title!r} is not on one line:\n{text}"
            return lines
        return check
    return at


def _report(task: str = "classification", mechanism: str = "kanon-rdt", accuracy: float = 0.55) -> dict:
    """A simulate report of 10 owners, two refusing with their long reasons."""
    refused = OWNERS[:2]
    report = {
        "source": "/data/exports/2026/patients-with-long-name.csv", "task": task, "mechanism": mechanism,
        "requirement": "dps:k=5,beta=0.1,epsilon=2,trees=10" if mechanism != "none" else None,
        "disclosure": "counts", "test_rows": 2592, "wall_seconds": 12.3, "hints": [], "engine": "local",
        "refusals": [{"owner": o, "rows": 150, "reason": str(Refusal("empty-release"))} for o in refused],
        "owners": [{"owner": o, "rows": 1036, "leaves": 2483, "claim": "dps:k=5,beta=0.1,epsilon=2,trees=10 "
                    "(beta=0.1, epsilon=2, delta=3.2e-05)", "audit_passed": True} for o in OWNERS[2:]],
    }
    if task == "classification":
        report["models"] = [{"model": m, "basis_accuracy": 0.995, "accuracy": accuracy, "class_match": 0.55,
                             "path_match": 0.0 if m == "decision-tree" else None, "train_rows": 103680}
                            for m in ("decision-tree", "naive-bayes", "random-forest", "rules")]
    else:
        report["models"] = [{"model": m, "basis_rmse": 0.7, "basis_mae": 0.5, "rmse": 1.4, "mae": 1.1,
                             "train_rows": 4000} for m in ("regression-tree", "random-forest")]
    return report


def _title(report: dict) -> tuple[str, str]:
    """The owners table's title, in its two lines."""
    return "patients-with-long-name.csv: 10 owners", f"{report['mechanism']} {report['requirement']} (counts)"


@pytest.mark.parametrize("columns", [80, TABLE_WIDTH])
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_simulate_tables_fit_and_titles_do_not_wrap(capsys, width, columns, task):
    check = width(columns)
    report = _report(task)
    simulate._print(report)
    kind = "regression global models" if task == "regression" else "global models"
    check(capsys.readouterr().out, *_title(report), f"{kind} on 2,592 held-out rows")


def test_simulate_ends_with_the_legend_the_tutorial_quotes(capsys, width):
    check = width(TABLE_WIDTH)
    tutorial = " ".join(TUTORIAL.read_text().split())
    for line in LEGEND.values():
        assert line in tutorial, f"docs/tutorial/first-simulate.md does not quote the legend line {line!r}"
    simulate._print(_report(mechanism="kanon-rdt", accuracy=0.55))
    printed = " ".join(check(capsys.readouterr().out))
    printed = " ".join(printed.split())
    assert "PPGEN accuracy" in printed and "PGEN accuracy" not in printed.replace("PPGEN", "")
    for key in ("basis", "ppgen", "class", "path"):
        assert LEGEND[key] in printed
    assert "decision-tree is 44.5 accuracy points below BASIS: this is what the privacy requirement (kanon-rdt " \
           "dps:k=5,beta=0.1,epsilon=2,trees=10) costs" in printed
    assert "a weaker requirement (--requirement), another mechanism (--mechanism)" in printed


def test_the_cost_sentence_appears_only_past_the_threshold_and_pgen_is_named_for_mechanism_none():
    close = _report(mechanism="none", accuracy=0.995 - (ACCURACY_GAP_POINTS - 0.1) / 100)
    lines = legend_lines(close)
    assert lines == [LEGEND["basis"], LEGEND["pgen"], LEGEND["class"], LEGEND["path"]]
    far = _report(mechanism="none", accuracy=0.995 - (ACCURACY_GAP_POINTS + 0.1) / 100)
    assert "no privacy requirement was applied" in legend_lines(far)[-1]
    regression = legend_lines(_report(task="regression"))
    assert regression[:3] == [LEGEND["basis"], LEGEND["ppgen"], LEGEND["errors"]]
    assert regression[3].startswith("regression-tree is 2.0x the RMSE of BASIS")


# ----------------------------------------------------------------- study status, list, results
def _status(state: str, reason: str, answers: list[tuple[str, str, str, int]], updated: int = 1000) -> fpb.StudyStatus:
    """A StudyStatus of a 10-owner study; answers are (owner, state, reason, seconds)."""
    status = fpb.StudyStatus(spec=study_spec("outcome-study-2026-11-25-hospitals", owners=OWNERS, quorum=8,
                                             requirement="cl-diversity:c=5,l=2"), state=state, reason=reason)
    status.created_at.FromSeconds(100)
    status.updated_at.FromSeconds(updated)
    for owner, answer, why, at in answers:
        entry = status.owners.add(owner_id=owner, state=answer, reason=why)
        if at:
            entry.updated_at.FromSeconds(at)
    return status


def _render(renderables) -> str:
    with out.capture() as captured:
        for r in renderables:
            out.print(r)
    return captured.get()


def test_study_status_list_and_results_fit(width):
    check = width(TABLE_WIDTH)
    answers = [(o, "refused", str(Refusal("unsatisfiable")), 900) for o in OWNERS[:3]]
    answers += [(o, "submitted", "", 800) for o in OWNERS[3:9]] + [(OWNERS[9], "waiting", "", 0)]
    status = _status("failed", "the deadline passed: 6 of the 8 submissions needed; ...", answers)
    data = status_dict(status)
    check(_render(status_renderables(data)))
    check(_render([list_table([data] * 3)]))
    results = fpb.StudyResults(study_id=data["id"])
    results.models.add(name="decision-tree", train_rows=103680, accuracy=0.91)
    check(_render(results_renderables(data, results_dict(results))))


def test_a_failed_study_headline_agrees_with_its_table(width):
    check = width(TABLE_WIDTH)
    # The miner stored "no answer from site-a" when the deadline passed; site-a's model was accepted
    # a moment later (it raced the deadline), so the table says submitted.
    stored = "the deadline passed: 1 of the 2 submissions needed; no answer from hospital-site-01"
    answers = [(OWNERS[0], "submitted", "", 1001), (OWNERS[1], "submitted", "", 900),
               (OWNERS[2], "refused", "unsatisfiable: ...", 950), (OWNERS[3], "waiting", "", 0)]
    data = status_dict(_status("failed", stored, answers, updated=1000))
    headline = study_headline(data)
    assert headline == ("study outcome-study-2026-11-25-hospitals: failed: the deadline passed: 1 of the 8 "
                        "submissions needed; submitted: hospital-site-02; refused: hospital-site-03; "
                        "no answer: hospital-site-04; answered after it failed: hospital-site-01")
    lines = check(_render(status_renderables(data)))
    rows = {cells[0]: cells[1] for line in lines
            if len(cells := [c.strip() for c in line.split("│")[1:-1]]) > 2 and cells[0].startswith("hospital")}
    assert rows == {OWNERS[0]: "submitted late", OWNERS[1]: "submitted", OWNERS[2]: "refused", OWNERS[3]: "waiting"}
    for owner, answer in rows.items():  # every owner the headline names, it names under the table's answer
        said = re.search(rf"(submitted|refused|no answer|answered after it failed): [^;]*{owner}", headline).group(1)
        assert said == {"submitted late": "answered after it failed", "waiting": "no answer"}.get(answer, answer)


# ----------------------------------------------------------------- datasets, release, audit, budget
def test_datasets_release_audit_and_budget_tables_fit(tmp_path, capsys, width, monkeypatch):
    check = width(TABLE_WIDTH)
    monkeypatch.chdir(tmp_path)  # model files named as a user would, relative to where they work
    Path("releases").mkdir()
    assert main(["datasets", "list"]) == 0
    check(capsys.readouterr().out, "bundled datasets")
    for name, flags in (("tree", ["--mechanism", "apt", "--requirement", "k-anonymity:k=5"]),
                        ("rdt", ["--mechanism", "kanon-rdt", "--requirement", "dps:k=5,beta=0.5,epsilon=4,trees=3",
                                 "--max-depth", "3"])):
        model = Path("releases") / f"{name}-with-a-rather-long-file-name-for-the-audit-title.json"
        assert main(["release", "--dataset", "adult", "--out", str(model), *flags]) == 0
        check(capsys.readouterr().out)
        main(["audit", str(model)])
        check(capsys.readouterr().out, f"audit of {model}")
    fed = make_federation(tmp_path / "fed", ["site-a"], owner_data=car_tables(tmp_path, ["site-a"]))
    config = fed.kits["site-a"] / "owner.toml"
    ledger = Ledger(OwnerConfig.load(config).state_dir)
    ledger.charge(study_from_pb(study_spec("outcome-study-2026-11-25-hospitals-laplace", mechanism="laplace-rdt",
                             requirement="dp:epsilon=1,trees=4", disclosure="counts", max_depth=4)))
    ledger.charge(study_from_pb(study_spec("outcome-study-2026-11-25-hospitals-apt",
                                           requirement="cl-diversity:c=5,l=2")))
    assert main(["owner", "budget", "--config", str(config)]) == 0
    check(capsys.readouterr().out, "privacy budget of site-a")


@pytest.mark.parametrize("argv", [["datasets", "list", "--json"], ["privacy", "dps", "--table"]],
                         ids=["print", "rich table"])
def test_a_closed_pipe_ends_a_command_quietly_with_the_sigpipe_status(argv):
    run = subprocess.Popen([sys.executable, "-m", "modelshare.cli", *argv], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    assert run.stdout is not None and run.stderr is not None
    run.stdout.close()  # the reader is gone before the command writes, as `modelshare ... | head -0`
    said = run.stderr.read().decode()
    assert run.wait(timeout=120) == CLOSED_PIPE_STATUS and said == "", said
