"""A reader of every release: owners that group a category differently each pass their own reader, not the study's."""

from __future__ import annotations

import dataclasses
import html
import json

import numpy as np
import pytest

from modelshare.admin import results_dict, status_dict
from modelshare.cli import main
from modelshare.cli.common import out
from modelshare.cli.federation import results_renderables
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.wire import DecodedModel
from modelshare.common.privacy.combining import NO_COMPOSITION, cap, read_study, release_verdict
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.privacy.requirements import CLDiversity, KAnonymity
from modelshare.common.trees.tree import CategorySet, Edge, Node, Tree
from modelshare.miner_node.mining import AcceptedModel, mine
from modelshare.provision import set_miner_port
from modelshare.report_html import render_report, study_report
from tests.federation_helpers import deal, make_federation, signed_model, study_spec

SCHEMA = Schema((CategoricalAttribute("h", ("a", "b", "c")),), "k", ("no", "yes"))
REQUIREMENT = CLDiversity(5, 2)  # a leaf may show at most 5/6 of one class


def grouped(together: set[int], alone: int, together_counts: list[float], alone_counts: list[float]) -> Tree:
    """A one-split tree on ``h`` (counts are (no, yes)): one leaf allows ``together``, the other ``alone``."""
    nodes = [Node.from_counts(np.add(together_counts, alone_counts)), Node.from_counts(np.array(together_counts)),
             Node.from_counts(np.array(alone_counts))]
    nodes[0].attribute = 0
    nodes[0].edges = [Edge(CategorySet(frozenset(together)), 1), Edge(CategorySet(frozenset({alone})), 2)]
    return Tree(SCHEMA, nodes)


# the truth behind both: "a" is always yes, "b" 8 no and 2 yes, "c" 6 no and 4 yes; each leaf is (5,2)-diverse
FIRST = grouped({0, 1}, 2, [8, 12], [6, 4])  # groups a with b
SECOND = grouped({0, 2}, 1, [6, 14], [8, 2])  # groups a with c


def test_each_owner_passes_its_own_reader_and_the_pair_does_not():
    for tree in (FIRST, SECOND):
        assert release_verdict([tree], REQUIREMENT).passed  # one tree leaves the split inside its set unknown
    reading = read_study([("owner-1", [FIRST], REQUIREMENT), ("owner-2", [SECOND], REQUIREMENT)])
    assert reading is not None and reading.trees == 2 and reading.cap == pytest.approx(5 / 6)
    assert reading.largest_belief > reading.cap  # the other grouping says "a" is yes
    assert all(not o.verdict.passed for o in reading.owners)
    persons = [o.verdict.persons for o in reading.owners]
    assert persons == pytest.approx([30, 30])
    shares = [o.verdict.confident_share for o in reading.owners]
    assert 0 < reading.confident_share == pytest.approx(np.average(shares, weights=persons))
    text = reading.describe()
    assert "beyond the per-leaf promise (top share c/(c+l-1) = 0.833)" in text and NO_COMPOSITION in text
    assert f"about {100 * reading.confident_share:.1f}% of released persons" in text


def test_k_anonymity_owners_are_measured_and_nothing_to_read_is_none():
    assert read_study([]) is None
    reading = read_study([("owner-1", [FIRST], KAnonymity(5)), ("owner-2", [SECOND], KAnonymity(5))],
                         skipped=["owner-3 (10 trees claiming dp:epsilon=1,trees=10: not one tree "
                                  "under a path requirement)"])
    assert reading is not None and reading.cap is None and reading.confident_share is None
    assert reading.largest_belief > cap(REQUIREMENT) and 0 < reading.smallest_group < 10
    assert "smallest estimated group" in reading.describe() and "not read: owner-3" in reading.describe()
    assert all(o.verdict.requirement is None for o in reading.owners)  # measured, not judged


def _accepted(owner: str, trees: tuple[Tree, ...], requirement: str | None) -> AcceptedModel:
    return AcceptedModel(owner, DecodedModel(SCHEMA, trees, PrivacyReport("apt", requirement=requirement)))


def test_mining_carries_the_study_figure_and_names_what_it_skipped():
    spec = study_spec("s", requirement=str(REQUIREMENT), global_models=("naive-bayes",))  # SCHEMA decides the task
    accepted = [_accepted("owner-1", (FIRST,), str(REQUIREMENT)), _accepted("owner-2", (SECOND,), str(REQUIREMENT)),
                _accepted("owner-3", (FIRST, SECOND), None)]
    results = mine(dataclasses.replace(study_from_pb(spec), schema=SCHEMA), accepted, None)
    reader = results.reader
    assert results.HasField("reader") and reader.trees == 2 and reader.cap == pytest.approx(5 / 6)
    assert reader.largest_belief > reader.cap and reader.confident_share > 0
    assert [o.owner_id for o in reader.owners] == ["owner-1", "owner-2"] and reader.owners[0].leaves_beyond >= 1
    assert list(reader.skipped) == ["owner-3 (2 trees claiming none: not one tree under a path requirement)"]
    data = results_dict(results)["reader"]
    assert data["summary"] == reader.summary and data["confident_share"] == pytest.approx(reader.confident_share)
    status = fpb.StudyStatus(spec=spec, state="done")
    with out.capture() as captured:
        for renderable in results_renderables(status_dict(status), results_dict(results)):
            out.print(renderable)
    assert "privacy: a reader of every release" in " ".join(captured.get().split())  # `study results`
    page = html.unescape(render_report(study_report(status, results, made_by="modelshare study results")))
    assert "A reader of every release" in page and reader.summary in page
    nothing = mine(dataclasses.replace(study_from_pb(spec), schema=SCHEMA), accepted[2:], None)
    assert not nothing.HasField("reader") and results_dict(nothing)["reader"] is None
    assert "A reader of every release" not in render_report(study_report(status, nothing, made_by="x"))


def test_study_results_json_carries_the_figure_over_grpc(tmp_path, car, capsys):
    owners = ["site-a", "site-b"]
    requirement = "cl-diversity:c=5,l=2"
    spec = study_spec("r1", requirement=requirement, global_models=("naive-bayes",))
    schema, X, y = car
    with make_federation(tmp_path, owners) as fed:
        set_miner_port([fed.kits["admin"]], fed.miner.port)
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=spec), timeout=10)
        for owner, (X_part, y_part) in deal(X, y, owners).items():
            assert fed.stub(owner).Submit(signed_model(fed, owner, spec, X_part, y_part), timeout=30).submission_id
        assert fed.wait_study("r1").state == "done"
        capsys.readouterr()
        assert main(["study", "results", "r1", "--config", str(fed.kits["admin"] / "admin.toml"),
                     "--out", str(tmp_path / "out"), "--json"]) == 0
    reader = json.loads(capsys.readouterr().out)["reader"]
    assert reader["trees"] == 2 and reader["cap"] == pytest.approx(5 / 6) and reader["skipped"] == []
    assert [o["owner"] for o in reader["owners"]] == owners
    assert all(o["requirement"] == requirement and o["persons"] > 0 for o in reader["owners"])
    assert 0 < reader["largest_belief"] <= 1 and 0 <= reader["confident_share"] <= 1
    assert reader["summary"].startswith("a reader of every release (2 trees of 2 owners) believes")
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["reader"] == reader
