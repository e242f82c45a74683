"""Generalisation hierarchies and the LD baseline: (c,l)-diversified publishing by full-domain generalisation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from experiments.baselines.hierarchy import (
    TOP,
    CategoricalHierarchy,
    HierarchyError,
    NumericHierarchy,
    derive_hierarchy,
    read_hierarchy,
    schema_hierarchies,
)
from experiments.baselines.ld import LDError, check_cl_diversity, diversify, fit_ld_model
from modelshare.common.data.datasets import bundled_schema
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.privacy.requirements import RequirementError

# ------------------------------------------------------------------ hierarchies


def _probe(hierarchy) -> np.ndarray:
    """Values covering the attribute's domain: every code, or a dense grid of the range with its ends."""
    attr = hierarchy.attribute
    if isinstance(hierarchy, CategoricalHierarchy):
        return np.arange(attr.size, dtype=float)
    return np.linspace(attr.low, attr.high, 1001)


@pytest.mark.parametrize("dataset", ["nursery", "adult", "car", "winequality"])
def test_derived_levels_nest_and_the_top_is_one_group(dataset):
    for hierarchy in schema_hierarchies(bundled_schema(dataset)).values():
        values = _probe(hierarchy)
        first = 0 if isinstance(hierarchy, CategoricalHierarchy) else 1
        ids = [hierarchy.group_ids(values, level) for level in range(first, hierarchy.height + 1)]
        for fine, coarse in zip(ids, ids[1:], strict=False):
            parents = {}
            for f, g in zip(fine, coarse, strict=False):
                assert parents.setdefault(f, g) == g, f"{hierarchy.attribute.name}: group {f} split"
            assert len(np.unique(coarse)) < len(np.unique(fine)) or len(np.unique(fine)) == 1
        assert set(ids[-1]) == {0}
        assert hierarchy.group_labels(hierarchy.height) == (TOP,)
        for level in range(first, hierarchy.height + 1):
            assert set(hierarchy.group_ids(values, level)) == set(range(len(hierarchy.group_labels(level))))


def test_numeric_hierarchy_halves_the_public_range():
    hierarchy = derive_hierarchy(NumericAttribute("x", 0.0, 100.0), numeric_splits=2)
    assert isinstance(hierarchy, NumericHierarchy) and hierarchy.height == 3
    assert hierarchy.group_labels(1) == ("[0.0, 25.0)", "[25.0, 50.0)", "[50.0, 75.0)", "[75.0, 100.0]")
    assert hierarchy.group_labels(2) == ("[0.0, 50.0)", "[50.0, 100.0]")
    values = np.array([0.0, 24.9, 25.0, 74.99, 99.0, 100.0])
    assert hierarchy.group_ids(values, 1).tolist() == [0, 0, 1, 2, 3, 3]
    assert hierarchy.group_ids(values, 2).tolist() == [0, 0, 0, 1, 1, 1]
    assert hierarchy.group_ids(values, 3).tolist() == [0] * 6
    assert derive_hierarchy(NumericAttribute("x", 0.0, 100.0)).group_labels(1)[0] == "[0.0, 6.25)"
    assert derive_hierarchy(NumericAttribute("k", 3.0, 3.0)).height == 1


def test_numeric_hierarchy_errors_name_the_column_row_and_value():
    hierarchy = derive_hierarchy(NumericAttribute("x", 0.0, 100.0))
    with pytest.raises(HierarchyError, match=r"row 2, column 'x', value 101\.0: values must be .*\[0, 100\]"):
        hierarchy.group_ids(np.array([5.0, 101.0]), 1)
    with pytest.raises(HierarchyError, match="level 0 of a numeric attribute is the raw number"):
        hierarchy.group_labels(0)
    with pytest.raises(HierarchyError, match=r"column 'x': level 9 is outside the hierarchy's levels 0\.\.5"):
        hierarchy.group_ids(np.array([5.0]), 9)


def test_categorical_hierarchy_groups_consecutive_categories():
    hierarchy = derive_hierarchy(CategoricalAttribute("g", ("a", "b", "c", "d", "e")))
    assert hierarchy.height == 3
    assert [hierarchy.group_labels(level) for level in range(4)] == [
        ("a", "b", "c", "d", "e"), ("{a,b}", "{c,d}", "{e}"), ("{a,b,c,d}", "{e}"), (TOP,)]
    assert hierarchy.group_ids(np.array([0.0, 1.0, 2.0, 4.0]), 1).tolist() == [0, 0, 1, 2]
    with pytest.raises(HierarchyError,
                       match=r"row 1, column 'g', value 5\.0: category codes must be integers in 0\.\.4"):
        hierarchy.group_ids(np.array([5.0]), 1)
    assert derive_hierarchy(CategoricalAttribute("one", ("only",))).group_labels(1) == (TOP,)


COLOUR = CategoricalAttribute("colour", ("red", "orange", "green", "blue"))


def _write(tmp_path, text: str, name: str = "colour.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("delimiter", [";", ","])
def test_hierarchy_file_is_read_in_schema_order(tmp_path, delimiter):
    rows = ["blue;cold;*", "red;warm;*", "green;cold;*", "", "orange;warm;*"]
    path = _write(tmp_path, "\n".join(r.replace(";", delimiter) for r in rows) + "\n")
    hierarchy = read_hierarchy(path, COLOUR)
    assert hierarchy.height == 2
    assert hierarchy.group_labels(1) == ("warm", "cold")  # ids follow the first category of each group
    assert hierarchy.group_ids(np.array([0.0, 1.0, 2.0, 3.0]), 1).tolist() == [0, 0, 1, 1]
    assert hierarchy.group_labels(0) == COLOUR.categories
    schema = Schema((COLOUR, NumericAttribute("size", 0.0, 8.0)), "label", ("no", "yes"))
    hierarchies = schema_hierarchies(schema, {"colour": path}, numeric_splits=1)
    assert hierarchies["colour"].group_labels(1) == ("warm", "cold")
    assert hierarchies["size"].group_labels(1) == ("[0.0, 4.0)", "[4.0, 8.0]")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"colour\.csv: hierarchy file has no rows"),
        ("red\norange\ngreen\nblue\n",
         r"colour\.csv, row 1, value 'red': each row needs the value and at least the top"),
        ("red;warm;*\norange;warm\ngreen;cold;*\nblue;cold;*\n",
         r"colour\.csv, row 2, value 'orange': row has 1 level\(s\) where the first row has 2"),
        ("red;warm;*\norange;;*\ngreen;cold;*\nblue;cold;*\n",
         r"colour\.csv, row 2, column 'level 1', value 'orange': missing value at level 1"),
        ("red;warm;*\npurple;warm;*\ngreen;cold;*\nblue;cold;*\n",
         r"colour\.csv, row 2, column 'level 0', value 'purple': not a category of attribute 'colour'"),
        ("red;warm;*\nred;warm;*\ngreen;cold;*\nblue;cold;*\n",
         r"colour\.csv, row 2, column 'level 0', value 'red': value listed twice \(first at row 1\)"),
        ("red;warm;*\ngreen;cold;*\nblue;cold;*\n",
         r"colour\.csv: categories \['orange'\] of attribute 'colour' have no row"),
        ("red;warm;any;*\norange;warm;any;*\ngreen;cold;any;*\nblue;cold;other;*\n",
         r"colour\.csv, row 4, column 'level 1', value 'blue': group 'cold' of level 1 is split across groups "
         r"'any' \(row 3\) and 'other' of level 2"),
        ("red;warm;*\norange;warm;*\ngreen;cold;all\nblue;cold;all\n",
         r"colour\.csv, row 3, column 'level 2', value 'green': the top level must be one group such as '\*'; "
         r"found '\*' \(row 1\) and 'all'"),
    ],
)
def test_hierarchy_file_errors_name_file_row_and_value(tmp_path, text, message):
    with pytest.raises(HierarchyError, match=message):
        read_hierarchy(_write(tmp_path, text), COLOUR)


def test_hierarchy_files_only_for_categorical_schema_attributes(tmp_path):
    path = _write(tmp_path, "1;*\n", "size.csv")
    with pytest.raises(HierarchyError, match=r"size\.csv, column 'size': hierarchy files are read for categorical"):
        read_hierarchy(path, NumericAttribute("size", 0.0, 8.0))
    schema = Schema((COLOUR,), "label", ("no", "yes"))
    with pytest.raises(HierarchyError, match=r"attributes \['size'\] that are not in the schema"):
        schema_hierarchies(schema, {"size": path})
    with pytest.raises(HierarchyError, match="cannot read hierarchy file"):
        read_hierarchy(tmp_path / "absent.csv", COLOUR)


# ------------------------------------------------------------------ the LD search

AB = Schema(
    (CategoricalAttribute("A", ("a", "b", "c", "d")), CategoricalAttribute("B", ("w", "x", "y", "z"))),
    "label",
    ("no", "yes"),
)


def _grid(repeat: int = 1) -> np.ndarray:
    """Every (A, B) combination of `AB`, ``repeat`` times."""
    return np.array(list(itertools.product(range(4), range(4))) * repeat, dtype=float)


def test_search_finds_the_known_minimal_node():
    X = _grid(2)
    y = (X[:, 0].astype(int) % 2).astype(np.int64)  # A decides the class: a, c -> no; b, d -> yes
    result = diversify(X, y, AB, c=2, l=2, max_suppression=0.0)
    # height 0: every EC is pure; height 1: A at level 1 pairs {a,b} and {c,d}, each EC (2, 2).
    assert result.node == (1, 0) and result.candidates == ((1, 0),)
    assert result.suppressed == 0 and result.equivalence_classes == 8
    assert result.discernibility == 8 * 4**2
    assert result.nodes_evaluated == 3  # (0,0), then (0,1) and (1,0)
    assert result.generalised_schema.attributes[0] == CategoricalAttribute("A", ("{a,b}", "{c,d}"))
    assert check_cl_diversity(result.frame, result.qi, "label", 2, 2).diverse.all()


def test_ties_go_to_least_discernibility_then_the_smallest_node():
    X = _grid()
    y = (X.sum(axis=1).astype(int) % 2).astype(np.int64)  # both height-1 nodes give ECs (1, 1)
    result = diversify(X, y, AB, c=2, l=2, max_suppression=0.0)
    assert result.candidates == ((0, 1), (1, 0)) and result.node == (0, 1)
    # B only takes w and x. A raw with B paired: ECs of 6, 2, 2, 2 rows (C_DM 48); A paired with B raw:
    # ECs of 4, 4, 2, 2 rows (C_DM 40). Both are diverse; the smaller C_DM wins over node order.
    cells = {(0, 0): [0, 0, 1], (0, 1): [1, 1, 0], (1, 0): [1], (1, 1): [0],
             (2, 0): [0], (2, 1): [1], (3, 0): [1], (3, 1): [0]}
    X = np.array([cell for cell, labels in cells.items() for _ in labels], dtype=float)
    y = np.array([label for labels in cells.values() for label in labels], dtype=np.int64)
    result = diversify(X, y, AB, c=2, l=2, max_suppression=0.0)
    assert result.candidates == ((1, 0), (0, 1)) and result.node == (1, 0) and result.discernibility == 40


def test_suppression_lets_a_finer_node_qualify_within_the_budget():
    X = np.vstack([_grid(2), [[0.0, 0.0]] * 3])
    y = np.array([0] * 16 + [1] * 16 + [0] * 3, dtype=np.int64)  # every cell (1, 1) but (a, w): (4, 1)
    strict = diversify(X, y, AB, c=2, l=2, max_suppression=0.0)
    lenient = diversify(X, y, AB, c=2, l=2, max_suppression=0.2)
    assert lenient.node == (0, 0) and lenient.suppressed == 5 <= int(0.2 * len(y))
    assert strict.suppressed == 0 and sum(strict.node) == 2
    for result in (strict, lenient):
        assert result.kept.sum() == len(result.y) == len(y) - result.suppressed
        assert check_cl_diversity(result.frame, result.qi, "label", 2, 2).diverse.all()


def _suppressed_at(X, y, schema, hierarchies, node, c, l):  # noqa: E741
    """Rows in non-diverse ECs of ``node``, computed with the hierarchies and the independent checker only."""
    frame = schema.decode(X, y)
    for j, (name, level) in enumerate(zip(schema.names, node, strict=False)):
        frame[name] = hierarchies[name].group_ids(X[:, j], level) if level else X[:, j]
    report = check_cl_diversity(frame, list(schema.names), schema.class_name, c, l)
    return int(report["size"][~report.diverse].sum())


@pytest.mark.parametrize("seed", range(6))
def test_output_is_diverse_within_budget_and_no_lower_node_qualifies(seed):
    rng = np.random.default_rng(seed)
    schema = Schema(
        (CategoricalAttribute("p", ("a", "b", "c")), CategoricalAttribute("q", ("u", "v", "w", "x", "y")),
         NumericAttribute("r", 0.0, 1.0)),
        "label", ("k0", "k1", "k2"),
    )
    hierarchies = schema_hierarchies(schema, numeric_splits=2)
    n = 300
    X = np.column_stack([rng.integers(0, 3, n), rng.integers(0, 5, n), rng.integers(0, 8, n) / 7]).astype(float)
    y = np.minimum(rng.geometric(0.5, n) - 1, 2).astype(np.int64)  # skewed classes
    c, l, share = [(3, 2, 0.05), (3, 3, 0.1), (1.5, 2, 0.0)][seed % 3]  # noqa: E741 (the paper's l)
    result = diversify(X, y, schema, c=c, l=l, hierarchies=hierarchies, max_suppression=share)
    heights = [hierarchies[name].height for name in schema.names]
    lattice = list(itertools.product(*(range(h + 1) for h in heights)))
    budget = int(share * n)
    qualifying = [node for node in lattice if _suppressed_at(X, y, schema, hierarchies, node, c, l) <= budget]
    assert qualifying, "every seed's setting has a qualifying node"
    best = min(map(sum, qualifying))
    assert result.has_data and sum(result.node) == best
    assert set(result.candidates) == {node for node in qualifying if sum(node) == best}
    assert result.suppressed <= budget
    assert check_cl_diversity(result.frame, result.qi, "label", c, l).diverse.all()
    assert np.array_equal(result.transform(X[result.kept]), result.X)


def test_suppressed_ec_breaks_monotonicity():
    """The module docstring's counterexample: with a 10-row budget a node qualifies and its generalisation fails."""
    schema = Schema((CategoricalAttribute("g", ("a", "b")),), "label", ("no", "yes"))
    X = np.array([[0.0], [0.0]] + [[1.0]] * 10)
    y = np.array([0, 1] + [0] * 10, dtype=np.int64)
    fine = check_cl_diversity(schema.decode(X, y), ["g"], "label", 2, 2)
    assert fine["size"][~fine.diverse].sum() == 10  # (1, 1) published, (10, 0) suppressed
    merged = schema.decode(X, y).assign(g="*")
    coarse = check_cl_diversity(merged, ["g"], "label", 2, 2)
    assert coarse["size"][~coarse.diverse].sum() == 12  # (11, 1) fails
    result = diversify(X, y, schema, c=2, l=2, max_suppression=0.84)  # 10 of 12 rows
    assert result.node == (0,) and result.suppressed == 10


def test_no_data_when_no_node_qualifies():
    schema = Schema((CategoricalAttribute("g", ("a", "b")),), "label", ("no", "yes"))
    X = np.zeros((11, 1))
    y = np.array([0] * 10 + [1], dtype=np.int64)
    skewed = diversify(X, y, schema, c=2, l=2)  # the whole table already rules every node out
    assert not skewed.has_data and skewed.nodes_evaluated == 0 and skewed.suppressed == 11
    # The whole-table bound passes (10 - 9 < 2 * 1) but every node is the one EC (10, 1): searched out.
    searched = diversify(X, y, schema, c=2, l=2, max_suppression=0.85)
    assert not searched.has_data and searched.nodes_evaluated == 2 and len(searched.y) == 0
    with pytest.raises(LDError, match=r"no data for cl-diversity:c=2,l=2; no model can be trained"):
        fit_ld_model(searched, "decision-tree")
    with pytest.raises(LDError, match="no data"):
        searched.transform(X)


def test_bad_input_is_refused():
    X = _grid()
    y = (X.sum(axis=1).astype(int) % 2).astype(np.int64)
    with pytest.raises(LDError, match=r"quasi-identifiers \['A', 'C'\] .* \(unknown: \['C'\]\)"):
        diversify(X, y, AB, c=2, l=2, qi=["A", "C"])
    with pytest.raises(LDError, match=r"max_suppression must lie in \[0, 1\), got 1\.0"):
        diversify(X, y, AB, c=2, l=2, max_suppression=1.0)
    with pytest.raises(RequirementError, match="l=1 must be at least 2"):
        diversify(X, y, AB, c=2, l=1)
    with pytest.raises(LDError, match=r"'B' has no hierarchy built for its schema attribute"):
        diversify(X, y, AB, c=2, l=2, hierarchies={"A": derive_hierarchy(AB.attributes[0])})
    with pytest.raises(LDError, match=r"max_nodes=2 at height 1 of a lattice of 9 nodes over QIs \['A', 'B'\]"):
        diversify(X, y, AB, c=2, l=2, max_nodes=2, max_suppression=0.0)


def test_subset_of_quasi_identifiers_keeps_the_others_raw(mixed):
    schema, X, y = mixed
    result = diversify(X, y, schema, c=3, l=2, qi=["size", "colour"])
    assert result.qi == ("colour", "size") and result.has_data
    assert result.generalised_schema.attributes[2] == schema.attributes[2]
    assert np.array_equal(result.X[:, 2], X[result.kept, 2])
    assert check_cl_diversity(result.frame, result.qi, "label", 3, 2).diverse.all()


@pytest.mark.parametrize("model, floor", [("decision-tree", 0.9), ("naive-bayes", 0.6)])
def test_model_trained_on_ld_data_scores_raw_rows(mixed, model, floor):
    schema, X, y = mixed
    train, test = slice(0, 1500), slice(1500, None)
    result = diversify(X[train], y[train], schema, c=3, l=2, qi=["size", "noise"])
    levels = result.levels
    assert result.has_data and 1 <= levels["size"] <= 4  # levels 1..4 keep an interval edge at 5
    assert result.generalised_schema.attributes[1].categories[0].startswith("[0.0, ")
    fitted = fit_ld_model(result, model, random_state=0)
    predicted = fitted.predict(X[test])
    assert predicted.shape == y[test].shape
    # size's intervals still split at 5, so a tree keeps the xor rule; naive Bayes cannot express it
    assert (predicted == y[test]).mean() > floor


# ------------------------------------------------------------------ Nursery (Sharkey et al., Fig. 7)


def test_nursery_l2_c5_publishes_diverse_data(nursery):
    schema, X, y = nursery
    result = diversify(X, y, schema, c=5, l=2)
    assert result.has_data and result.levels["health"] == 2  # the pure not_recom group cannot stay
    assert result.suppressed <= 0.02 * len(y)
    report = check_cl_diversity(result.frame, result.qi, schema.class_name, 5, 2)
    assert report.diverse.all() and report["size"].sum() == len(y) - result.suppressed


@pytest.mark.parametrize("l, c", [(4, 10), (5, 20)])
def test_nursery_strong_requirements_yield_no_data(nursery, l, c):  # noqa: E741
    schema, X, y = nursery
    result = diversify(X, y, schema, c=c, l=l)
    assert not result.has_data and result.nodes_evaluated == 0
