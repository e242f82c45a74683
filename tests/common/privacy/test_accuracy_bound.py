"""The price of hit/miss (c,l)-diversity: the bound against brute force over every tree of tiny tables."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.privacy import accuracy_bound
from modelshare.common.privacy.accuracy_bound import _bound_for, _whole_columns, cl_hit_miss_bound
from modelshare.common.privacy.requirements import cl_diverse_hit_miss
from modelshare.pipeline import stratified_parts
from modelshare.simulate import requirement_bound


def _schema(sizes: list[int], n_classes: int) -> Schema:
    attributes = [CategoricalAttribute(f"a{j}", tuple(f"v{i}" for i in range(size))) for j, size in enumerate(sizes)]
    return Schema(attributes=tuple(attributes), class_name="y", classes=tuple(f"k{i}" for i in range(n_classes)))


def _partitions(items: list[int]) -> list[list[list[int]]]:
    """Every set partition of ``items``."""
    if not items:
        return [[]]
    first, rest = items[0], items[1:]
    out = []
    for part in _partitions(rest):
        out.append([[first], *part])
        for i in range(len(part)):
            out.append([*part[:i], [first, *part[i]], *part[i + 1:]])
    return out


def best_tree(X: np.ndarray, y: np.ndarray, n_classes: int, c: float, l: int) -> float:  # noqa: E741
    """Most rows any tree with every leaf hit/miss (c,l)-diverse classifies correctly (-inf: none exists).

    A node is a leaf or splits one attribute's present values into two or more groups (any grouping,
    so every multiway, binary or grouped split); brute force over all of them, memoised on the row set.
    """

    @cache
    def best(rows: frozenset[int]) -> float:
        idx = np.array(sorted(rows))
        counts = np.bincount(y[idx], minlength=n_classes)
        hit = counts.max()
        value = float(hit) if cl_diverse_hit_miss(np.array([hit]), np.array([len(idx) - hit]), c, l)[0] else -np.inf
        for j in range(X.shape[1]):
            present = sorted(set(X[idx, j].tolist()))
            for groups in _partitions(present):
                if len(groups) < 2:
                    continue
                total = sum(best(frozenset(int(i) for i in idx[np.isin(X[idx, j], g)])) for g in groups)
                value = max(value, total)
        return value

    return best(frozenset(range(len(y))))


tables = st.integers(min_value=0, max_value=2**32 - 1).map(np.random.default_rng)


def _table(rng: np.random.Generator, sizes: list[int], n_classes: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    X = np.column_stack([rng.integers(0, s, rows) for s in sizes]).astype(np.float64)
    y = rng.integers(0, n_classes, rows)
    return X, y


@settings(max_examples=40, deadline=None)
@given(rng=tables, rows=st.integers(4, 12), c=st.sampled_from([1.0, 1.5, 2.0, 3.0, 5.0]), l=st.sampled_from([2, 3]))
def test_bound_is_at_least_every_admissible_tree(rng: np.random.Generator, rows: int, c: float, l: int) -> None:  # noqa: E741
    sizes, n_classes = [2, 3], 3
    X, y = _table(rng, sizes, n_classes, rows)
    bound = cl_hit_miss_bound(X, y, _schema(sizes, n_classes), c, l)
    tree = best_tree(X.astype(np.int64), y, n_classes, c, l)
    assert bound.correct >= tree - 1e-6


@settings(max_examples=40, deadline=None)
@given(rng=tables, rows=st.integers(3, 14), c=st.sampled_from([1.0, 1.5, 2.0, 3.0, 5.0]), l=st.sampled_from([2, 3]))
def test_bound_is_exact_on_one_attribute(rng: np.random.Generator, rows: int, c: float, l: int) -> None:  # noqa: E741
    """With one categorical attribute every grouping of its values is a tree: the integer program is exact."""
    sizes, n_classes = [4], 3
    X, y = _table(rng, sizes, n_classes, rows)
    bound = cl_hit_miss_bound(X, y, _schema(sizes, n_classes), c, l)
    tree = best_tree(X.astype(np.int64), y, n_classes, c, l)
    if tree == -np.inf:  # no admissible tree at all: the bound may still be positive, never below 0
        assert bound.correct >= 0
    else:
        assert bound.correct == pytest.approx(tree, abs=1e-6)


def test_nursery_pays_for_health() -> None:
    """Nursery's not_recom third must share a leaf with another health level: the bound sees it."""
    table = load_dataset("nursery")
    X, y = table.schema.encode(table.frame)
    bound = cl_hit_miss_bound(X, y, table.schema, 5, 2)
    assert bound.attributes == ("health",)
    assert 0.6 < bound.accuracy < 0.66  # far below the leaf share cap 5/6, which any table pays
    assert bound.candidates["(leaf share cap)"] == pytest.approx(5 / 6)


@settings(max_examples=30, deadline=None)
@given(rng=tables, rows=st.integers(6, 60), c=st.sampled_from([1.5, 3.0, 5.0]), l=st.sampled_from([2, 3]))
def test_whole_columns_never_exceed_the_attribute_program(rng: np.random.Generator, rows: int, c: float,
                                                          l: int) -> None:  # noqa: E741
    """The skip's premise: leaves taking all of an attribute's values are one solution of its program."""
    sizes, n_classes = [2, 3, 2], 3
    X, y = _table(rng, sizes, n_classes, rows)
    schema = _schema(sizes, n_classes)
    for j in range(len(sizes)):
        solved = _bound_for(X, y, schema, (j,), c, l, False)
        floor = _whole_columns(X, y, schema, j, c, l)
        if solved is None:  # infeasible (no admissible partition): so is every restriction of it
            assert floor == -np.inf
        else:
            assert floor <= solved[0] + 1e-6


def test_large_table_skips_only_what_cannot_lower_the_bound() -> None:
    """Above 2,000 rows, attributes whose whole-column floor reaches the bound found are not solved."""
    table = load_dataset("nursery")
    X, y = table.schema.encode(table.frame)
    keep = np.random.default_rng(0).random(y.size) < 0.9
    bound = cl_hit_miss_bound(X[keep], y[keep], table.schema, 5, 2)
    assert bound.attributes == ("health",) and set(bound.skipped) == set(table.schema.names) - {"health"}
    assert all(floor >= bound.accuracy for floor in bound.skipped.values())
    schema = table.schema
    for name in ("social", "has_nurs"):  # solving a skipped attribute's program confirms it
        j = schema.names.index(name)
        solved = _bound_for(X[keep], y[keep], schema, (j,), 5, 2, False)
        assert solved is None or solved[0] / keep.sum() >= bound.accuracy


def test_pure_table_pays_the_leaf_share_cap() -> None:
    """One class everywhere: no leaf can be diverse; the bound is the share cap's, never above it."""
    X = np.zeros((6, 1))
    y = np.zeros(6, dtype=np.int64)
    bound = cl_hit_miss_bound(X, y, _schema([2], 2), 5, 2)
    assert bound.accuracy <= 5 / 6
    assert best_tree(X.astype(np.int64), y, 2, 5, 2) == -np.inf


def test_refuses_mismatched_inputs() -> None:
    with pytest.raises(ValueError, match="one class per row"):
        cl_hit_miss_bound(np.zeros((3, 1)), np.zeros(2, dtype=np.int64), _schema([2], 2), 5, 2)
    with pytest.raises(ValueError, match="l >= 2"):
        cl_hit_miss_bound(np.zeros((3, 1)), np.zeros(3, dtype=np.int64), _schema([2], 2), 5, 1)


def test_partitions_enumerates_bell_numbers() -> None:
    assert [len(_partitions(list(range(n)))) for n in range(5)] == [1, 1, 2, 5, 15]
    assert all(sorted(itertools.chain(*p)) == [0, 1, 2] for p in _partitions([0, 1, 2]))


def test_simulate_reports_the_bound_only_for_hit_miss_cl_diversity() -> None:
    """simulate's ``requirement_bound``: on the pooled training rows, for (c,l) in hit/miss form only."""
    rng = np.random.default_rng(0)
    X, y = _table(rng, [2, 3], 3, 40)
    schema = _schema([2, 3], 3)
    data = {"X_train": X, "y_train": y, "requirement": "cl-diversity:c=5,l=2"}
    bound = requirement_bound(schema, data, "hit_miss")
    assert bound is not None and bound["computed_on"] == "pooled training rows" and bound["rows"] == 40
    assert bound["accuracy"] == cl_hit_miss_bound(X, y, schema, 5, 2).accuracy
    assert requirement_bound(schema, data, "counts") is None
    assert requirement_bound(schema, {**data, "requirement": "k-anonymity:k=5"}, "hit_miss") is None


def test_short_integer_programs_keep_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """On small tables (programs that finish) the rounded linear optimum and a short integer program lose nothing."""
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(12):
        sizes = [int(s) for s in rng.integers(2, 5, rng.integers(1, 4))]
        n_classes = int(rng.integers(2, 4))
        X, y = _table(rng, sizes, n_classes, int(rng.choice([10, 30, 60])))
        cases.append((X, y, _schema(sizes, n_classes), float(rng.choice([1.0, 2.0, 5.0])), int(rng.choice([2, 3]))))
    short = [cl_hit_miss_bound(X, y, schema, c, l).correct for X, y, schema, c, l in cases]  # noqa: E741
    monkeypatch.setattr(accuracy_bound, "_INTEGER_TIME_LIMIT", 30.0)
    assert short == [cl_hit_miss_bound(X, y, schema, c, l).correct for X, y, schema, c, l in cases]  # noqa: E741


def test_car_bound_is_the_whole_rows_optimum() -> None:
    """Car's 80 % split (simulate --dataset car --seed 3): 1,151 rows, the finest cells' proven integer optimum."""
    table = load_dataset("car")
    X, y = table.schema.encode(table.frame)
    train = stratified_parts(y, 5, np.random.default_rng(3)) != 0
    bound = cl_hit_miss_bound(X[train], y[train], table.schema, 5, 2)
    assert bound.correct == 1151 and bound.integer
