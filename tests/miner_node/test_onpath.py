"""On-path draws: the EM class law over released paths, and redraws that move only values inside allowed sets."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest

from modelshare.admin import results_dict, status_dict
from modelshare.cli import build_parser
from modelshare.cli.common import out
from modelshare.cli.federation import results_renderables
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.study import StudyError, load_study_file, spec_from_mapping
from modelshare.common.federation.wire import decode_model, model_message
from modelshare.common.mechanisms.release import release as release_model
from modelshare.common.trees.learners import CartTreeClassifier
from modelshare.common.trees.tree import CategorySet, Edge, Node, Tree
from modelshare.miner_node.config import MiningConfig
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine
from modelshare.miner_node.onpath import ClassSetLaw, OnPathTree, class_set_law, redraw_on_path
from modelshare.miner_node.pgen import PathTable, pgen
from modelshare.miner_node.pseudo_parquet import chunk_rows, read_all
from modelshare.miner_node.tasks import pseudo_data, pseudo_tree_chunks
from modelshare.pipeline import PipelineConfig, run_study
from modelshare.report_html import render_report, study_report
from modelshare.simulate import prepare
from tests.federation_helpers import REGRESSION_SCHEMA

SCHEMA = Schema((CategoricalAttribute("h", ("a", "b", "c")), NumericAttribute("x", 0.0, 10.0)), "k", ("no", "yes"))


def pair_tree(together: set[int], alone: int, together_counts, alone_counts) -> Tree:
    """A one-split tree on ``h``: one leaf allows the categories ``together``, the other only ``alone``."""
    nodes = [Node.from_counts(np.add(together_counts, alone_counts)), Node.from_counts(together_counts),
             Node.from_counts(alone_counts)]
    nodes[0].attribute = 0
    nodes[0].edges = [Edge(CategorySet(frozenset(together)), 1), Edge(CategorySet(frozenset({alone})), 2)]
    return Tree(SCHEMA, nodes)


# "a" is always "yes" and "b", "c" always "no"; each release pairs "a" with a different partner
PAIRED = [pair_tree({0, 1}, 2, [10, 10], [10, 0]), pair_tree({0, 2}, 1, [10, 10], [10, 0])]


def test_the_em_law_finds_the_category_that_the_leaves_pair_with_different_partners():
    law = ClassSetLaw.from_trees(PAIRED)
    assert set(law.theta) == {0}  # x is numeric: untouched
    theta = law.theta[0]
    np.testing.assert_allclose(theta.sum(axis=0), 1.0)
    assert theta[0, 1] > 0.9 and theta[0, 0] < 0.15  # "yes" on "a", hardly any "no"
    one_step = class_set_law(np.vstack([t.allowed[0] for t in _tables(PAIRED)]), np.array(
        [[10, 10], [10, 0], [10, 10], [10, 0]], dtype=float), iterations=1)
    assert one_step[0, 1] < theta[0, 1]  # the iterations sharpen the law
    tree = PAIRED[0]
    X, y = pgen(tree, rows=4000, rng=np.random.default_rng(0))
    redrawn = redraw_on_path(OnPathTree.of(tree, law), X, y, np.random.default_rng(1))
    pair = X[:, 0] != 2
    assert np.mean(X[pair & (y == 1), 0] == 0) == pytest.approx(0.5, abs=0.05)  # PGEN's uniform draw hides it
    assert np.mean(redrawn[pair & (y == 1), 0] == 0) > 0.9
    assert np.mean(redrawn[pair & (y == 0), 0] == 1) > 0.75  # uniform: 0.5


def _tables(trees):
    return [PathTable.from_tree(t) for t in trees]


def test_redraws_keep_paths_class_counts_single_sets_and_numeric_values(car):
    schema, X, y = car
    tree = CartTreeClassifier(schema, max_depth=3, random_state=0).fit(X, y).tree_
    law = ClassSetLaw.from_trees([tree])
    assert law.theta
    Xp, yp = pgen(tree, rng=np.random.default_rng(1))
    redrawn = redraw_on_path(OnPathTree.of(tree, law), Xp, yp, np.random.default_rng(2))
    leaf = tree.apply(Xp)
    assert np.array_equal(tree.apply(redrawn), leaf)  # every row still satisfies its own path
    assert not np.array_equal(redrawn, Xp)
    table = _tables([tree])[0]
    free = [(path.leaf, j) for p, path in enumerate(tree.paths()) for j in law.theta if table.allowed[j][p].all()]
    assert free and all(np.array_equal(redrawn[leaf == k, j], Xp[leaf == k, j]) for k, j in free)  # free: off_path's
    for p, path in enumerate(tree.paths()):
        rows = leaf == path.leaf
        for j in range(schema.n_attributes):
            moved = not np.array_equal(redrawn[rows, j], Xp[rows, j])
            if moved:  # only an attribute of the law with more than one allowed category moves
                assert j in law.theta and table.n_allowed[j][p] > 1, (path.describe(schema), j)
            if j in table.allowed:
                assert set(np.unique(redrawn[rows, j])) <= set(np.flatnonzero(table.allowed[j][p]))


def test_numeric_columns_are_untouched():
    X, y = pgen(PAIRED[1], rows=500, rng=np.random.default_rng(3))
    redrawn = redraw_on_path(OnPathTree.of(PAIRED[1], ClassSetLaw.from_trees(PAIRED)), X, y, np.random.default_rng(4))
    assert np.array_equal(redrawn[:, 1], X[:, 1])
    assert np.array_equal(redrawn[X[:, 0] == 1, 0], X[X[:, 0] == 1, 0])  # the single-category leaf keeps "b"


def test_uniform_leaves_pgen_byte_identical_and_chunks_redraw_as_the_whole():
    trees = PAIRED[:1]
    same = pseudo_data(trees, None, 2.0, np.random.default_rng(5), "exact", None, None)
    plain = pgen(trees[0], rows=int(round(2.0 * trees[0].root.total)), rng=np.random.default_rng(5),
                 class_assignment="exact")
    assert all(np.array_equal(a, b) for a, b in zip(same, plain, strict=False))
    law = ClassSetLaw.from_trees(PAIRED)
    whole = pseudo_data(PAIRED, None, 50.0, np.random.default_rng(6), "exact", None, law)
    chunks = list(pseudo_tree_chunks(PAIRED, None, 50.0, np.random.default_rng(6), "exact", 97, None, law))
    X = np.vstack([c[0] for c in chunks])
    y = np.concatenate([c[1] for c in chunks])
    assert np.array_equal(np.sort(y), np.sort(whole[1]))  # the same class counts, path by path
    for tree_X, tree_y in ((whole[0], whole[1]), (X, y)):
        assert np.mean(tree_X[tree_y == 1, 0] == 0) > 0.9  # every "yes" row's set holds "a": the law puts it there


def study(mining: dict) -> dict:
    return {"study": {"id": "s1", "seed": 3}, "schema": {"dataset": "car"},
            "release": {"mechanism": "none", "disclosure": "counts"},
            "mining": {"global_models": ["naive-bayes"], "pgen_scale": 2, **mining}}


def test_on_path_travels_in_the_spec_and_is_checked(tmp_path):
    # no requirement: the paper's PGEN
    assert study_from_pb(spec_from_mapping(study({})).spec).describe()["on_path"] == "uniform"
    spec = spec_from_mapping(study({"on_path": "class"})).spec
    assert type(spec).FromString(spec.SerializeToString()).pgen_on_path == "class"
    with pytest.raises(StudyError, match=r"study.toml: on_path must be one of \['uniform', 'class'\], got 'path'"):
        spec_from_mapping(study({"on_path": "path"}), where="study.toml")
    with pytest.raises(StudyError, match="onpath"):  # a misspelt key is an error, not a default
        spec_from_mapping(study({"onpath": "class"}), where="study.toml")
    with pytest.raises(StudyError, match="on_path 'class' does not apply to 'dpea-nb' releases"):
        spec_from_mapping({**study({"on_path": "class"}), "schema": {"dataset": "adult"},
                           "release": {"mechanism": "dpea-nb", "requirement": "dp:epsilon=1,trees=1",
                                       "disclosure": "counts"},
                           "training": {"max_depth": 1}})
    REGRESSION_SCHEMA.save(tmp_path / "schema.json")
    with pytest.raises(StudyError,
                       match="on_path 'class' needs class labels; a regression study's PGEN draws uniformly"):
        spec_from_mapping({"study": {"id": "r"}, "schema": {"file": "schema.json"},
                           "release": {"mechanism": "diffpets", "requirement": "dp:epsilon=1,trees=2"},
                           "training": {"max_depth": 2},
                           "mining": {"global_models": ["regression-tree"], "on_path": "class"}},
                          base=tmp_path)


@pytest.mark.parametrize(("release", "expected"), [
    ({"mechanism": "apt", "requirement": "cl-diversity:c=5,l=2", "disclosure": "hit_miss"}, "uniform"),
    ({"mechanism": "apt", "requirement": "cl-diversity:c=5,l=2", "disclosure": "counts"}, "uniform"),
    ({"mechanism": "apt", "requirement": "k-anonymity:k=10", "disclosure": "hit_miss"}, "uniform"),
    ({"mechanism": "prune-leaf", "requirement": "k-anonymity:k=10", "disclosure": "counts"}, "uniform"),
])
def test_a_study_without_on_path_gets_the_default_of_its_requirement(release, expected):
    spec = spec_from_mapping({**study({}), "release": release}).spec
    # the admin's study says its mode on the wire, the default included
    assert spec.pgen_on_path == expected == study_from_pb(spec).on_path == study_from_pb(spec).describe()["on_path"]
    said = spec_from_mapping({**study({"on_path": "uniform"}), "release": release}).spec
    assert study_from_pb(said).on_path == "uniform"  # a study that says keeps what it says


def test_the_miner_draws_on_path_values_as_the_study_says_and_reports_it(car):
    schema, X, y = car
    models = []
    for owner, rows in zip(("site-a", "site-b"), np.array_split(np.arange(X.shape[0]), 2), strict=False):
        tree = CartTreeClassifier(schema, max_depth=2, random_state=0).fit(X[rows], y[rows]).tree_
        models.append(AcceptedModel(owner, decode_model(model_message(release_model("none", tree=tree)))))
    evaluation = Evaluation(X, y, np.arange(y.shape[0]))
    uniform = mine(study_from_pb(spec_from_mapping(study({"on_path": "uniform"})).spec), models, evaluation)
    informed = mine(study_from_pb(spec_from_mapping(study({"on_path": "class"})).spec), models, evaluation)
    assert uniform.pgen_on_path.startswith("uniform: ")
    assert informed.pgen_on_path.startswith("class: ") and "EM, 10 iterations" in informed.pgen_on_path
    assert results_dict(informed)["on_path"] == informed.pgen_on_path
    status = fpb.StudyStatus(spec=spec_from_mapping(study({"on_path": "class"})).spec, state="done")
    with out.capture() as captured:
        for renderable in results_renderables(status_dict(status), results_dict(informed)):
            out.print(renderable)
    assert "PGEN on-path values: class: " in captured.get()  # `study results`
    page = html.unescape(render_report(study_report(status, informed, made_by="modelshare study results")))
    assert "PGEN on-path values" in page and informed.pgen_on_path in page
    assert [o.pseudo_rows for o in informed.owners] == [o.pseudo_rows for o in uniform.owners]


def test_simulate_writes_on_path_into_the_study_and_experiments_take_it(tmp_path):
    args = build_parser().parse_args(["simulate", "--dataset", "car", "--owners", "2", "--on-path", "class"])
    prepare(args, tmp_path)
    assert load_study_file(tmp_path / "study.toml").spec.pgen_on_path == "class"
    default = build_parser().parse_args(["simulate", "--dataset", "car", "--owners", "2"])
    assert default.on_path is None  # the study decides: uniform unless it says class
    prepare(default, tmp_path / "default")
    spec = load_study_file(tmp_path / "default" / "study.toml").spec
    assert spec.pgen_on_path == "uniform" == study_from_pb(spec).on_path
    with pytest.raises(SystemExit):
        build_parser().parse_args(["simulate", "--dataset", "car", "--on-path", "path"])
    for command in ("sources", "privacy"):
        assert build_parser().parse_args(["experiment", command, "--on-path", "class"]).on_path == "class"


def test_the_in_process_pipeline_takes_on_path_and_keeps_uniform_by_default(car):
    schema, X, y = car
    assert PipelineConfig().on_path == "uniform"  # the paper reproductions' PGEN
    with pytest.raises(ValueError, match=r"on_path must be one of \['uniform', 'class'\], got 'marginal'"):
        PipelineConfig(on_path="marginal")
    config = PipelineConfig(n_sources=2, folds=2, mechanism="none", global_models=("naive-bayes",), on_path="class",
                            methods=("BASIS", "PGEN"))
    results = run_study(schema, X, y, config)
    assert set(results["method"]) == {"BASIS", "PGEN"} and results["accuracy"].notna().all()


@pytest.mark.slow  # a LocalCluster of one worker process
def test_the_dask_engine_redraws_each_chunk_as_the_local_engine_does(car, tmp_path):
    pytest.importorskip("distributed")
    pytest.importorskip("xgboost")
    schema, X, y = car
    models = [AcceptedModel(owner, decode_model(model_message(release_model(
        "none", tree=CartTreeClassifier(schema, max_depth=3, random_state=0).fit(X[rows], y[rows]).tree_))))
        for owner, rows in zip(("site-a", "site-b"), np.array_split(np.arange(y.shape[0]), 2), strict=False)]
    spec = spec_from_mapping(study({"on_path": "class"})).spec
    evaluation = Evaluation(X, y, np.arange(y.shape[0]))
    local = mine(study_from_pb(spec), models, evaluation)
    dask = mine(study_from_pb(spec), models, evaluation,
                mining=MiningConfig(engine="dask", workers=1, memory_budget_mb=1), pseudo_dir=tmp_path)
    assert dask.engine == "dask" and dask.pgen_on_path == local.pgen_on_path and dask.pgen_on_path.startswith("class: ")
    X_dask, y_dask = read_all(sorted(tmp_path.glob("owner=*/part-*.parquet")), schema)
    law = ClassSetLaw.from_trees([t for m in models for t in m.model.trees])
    rows = chunk_rows(schema, 1)
    expected, uniform = [], []
    for i, m in enumerate(models):
        for on_path, drawn in ((law, expected), (None, uniform)):
            chunks = pseudo_tree_chunks(m.model.trees, None, spec.pgen_scale, np.random.default_rng([3, i]), "exact",
                                        rows, None, on_path)
            drawn.extend(X for X, _, _ in chunks)
    assert np.array_equal(X_dask, np.vstack(expected)) and y_dask.shape[0] == sum(o.pseudo_rows for o in local.owners)
    moved = np.flatnonzero((X_dask != np.vstack(uniform)).any(axis=0))
    assert moved.size and set(moved) <= set(law.theta)  # only categories the law covers were redrawn


@pytest.mark.slow  # a miner and two owner processes
def test_simulate_with_on_path_class_end_to_end(tmp_path, capsys):
    from modelshare.cli import main

    assert main(["simulate", "--dataset", "car", "--owners", "2", "--mechanism", "none", "--pgen-scale", "2",
                 "--global-models", "naive-bayes", "--on-path", "class", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["on_path"].startswith("class: values inside a path's allowed category set drawn from the class law")
    assert report["off_path"].startswith("uniform: ") and report["models"][0]["accuracy"] is not None
