"""Bundled datasets and the table loader: row counts, schemas, missing values, error messages."""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from modelshare.common.data.datasets import (
    DATASETS,
    UnknownDatasetError,
    bundled_schema,
    describe_dataset,
    export_dataset,
    list_datasets,
    load_dataset,
    load_table,
    read_frame,
)
from modelshare.common.data.datasets.loading import MISSING_CATEGORY
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema, SchemaError

# name -> (rows kept by missing="drop", rows dropped)
EXPECTED_ROWS = {
    "nursery": (12960, 0),
    "car": (1728, 0),
    "adult": (45222, 3620),
    "vote": (232, 203),
    "winequality": (6497, 0),
}

SMALL_SCHEMA = Schema(
    (NumericAttribute("a", 0.0, 10.0), CategoricalAttribute("b", ("x", "y"))),
    "cls",
    ("p", "q"),
)


@pytest.fixture(scope="module")
def loaded():
    return {name: load_dataset(name) for name in DATASETS}


def _raw_bundled(name: str) -> pd.DataFrame:
    """The bundled file as stored, missing tokens as NA."""
    with resources.as_file(resources.files("modelshare.common.data.datasets") / "data" / f"{name}.csv.gz") as path:
        return read_frame(path)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------ bundled tables
def test_registry_lists_the_five_bundled_datasets():
    assert [info.name for info in list_datasets()] == ["nursery", "car", "adult", "vote", "winequality"]


@pytest.mark.parametrize("name", list(EXPECTED_ROWS))
def test_bundled_dataset_loads_with_expected_rows(name, loaded):
    table = loaded[name]
    rows, dropped = EXPECTED_ROWS[name]
    info = DATASETS[name]
    assert (len(table.frame), table.dropped_rows) == (rows, dropped)
    assert info.rows == rows + dropped
    assert info.n_attributes == table.schema.n_attributes
    assert info.classes == table.schema.classes
    assert list(table.frame.columns) == [*table.schema.names, table.schema.class_name]
    assert not table.frame.isna().any().any()
    X, y = table.schema.encode(table.frame)
    assert X.shape == (rows, table.schema.n_attributes)
    assert y.shape == (rows,)
    assert table.source == f"bundled:{name}"


def test_schema_fingerprint_is_stable_across_loads(loaded):
    for name in DATASETS:
        again = load_dataset(name)
        assert again.schema.fingerprint == loaded[name].schema.fingerprint == bundled_schema(name).fingerprint


def test_nursery_matches_manifest_and_uci_orders(loaded):
    table = loaded["nursery"]
    counts = table.frame["class"].value_counts().to_dict()
    assert counts == {"not_recom": 4320, "priority": 4266, "spec_prior": 4044, "very_recom": 328, "recommend": 2}
    schema = table.schema
    assert schema.classes == ("not_recom", "recommend", "very_recom", "priority", "spec_prior")
    assert schema.names == ("parents", "has_nurs", "form", "children", "housing", "finance", "social", "health")
    assert schema.attributes[0].categories == ("usual", "pretentious", "great_pret")
    assert schema.attributes[3].categories == ("1", "2", "3", "more")


def test_car_orders_follow_car_names(loaded):
    schema = loaded["car"].schema
    assert schema.attributes[0].categories == ("vhigh", "high", "med", "low")
    assert schema.attributes[2].categories == ("2", "3", "4", "5more")
    assert loaded["car"].frame["class"].value_counts().to_dict() == {"unacc": 1210, "acc": 384, "good": 69, "vgood": 65}


def test_adult_concatenates_train_and_test_with_clean_labels(loaded):
    raw = _raw_bundled("adult")
    assert len(raw) == 32561 + 16281
    assert raw["income"].value_counts().to_dict() == {"<=50K": 24720 + 12435, ">50K": 7841 + 3846}
    schema = loaded["adult"].schema
    numeric = [a.name for a in schema.attributes if isinstance(a, NumericAttribute)]
    assert numeric == ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
    bounds = {a.name: (a.low, a.high, a.integer) for a in schema.attributes if isinstance(a, NumericAttribute)}
    assert bounds == {  # public bounds, not the table's extremes (age 17-90, fnlwgt 12,285-1,490,400, ...)
        "age": (0.0, 120.0, True), "fnlwgt": (0.0, 1e7, True), "education-num": (1.0, 16.0, True),
        "capital-gain": (0.0, 1e5, True), "capital-loss": (0.0, 1e4, True), "hours-per-week": (0.0, 168.0, True),
    }
    workclass = schema.attributes[schema.index("workclass")]
    assert list(workclass.categories) == sorted(workclass.categories) and "?" not in workclass.categories


def test_vote_keeps_original_row_positions(loaded):
    raw = _raw_bundled("vote")
    assert len(raw) == 435
    assert int(raw.isna().sum().sum()) == 392
    complete = raw.index[~raw.isna().any(axis=1)]
    assert loaded["vote"].frame.index.equals(complete)
    assert loaded["vote"].frame.index[0] == 5


def test_winequality_has_color_and_quality_classes(loaded):
    table = loaded["winequality"]
    assert table.schema.names[0] == "color"
    assert table.frame["color"].value_counts().to_dict() == {"white": 4898, "red": 1599}
    assert table.schema.classes == ("3", "4", "5", "6", "7", "8", "9")
    assert table.frame["quality"].value_counts()["9"] == 5
    assert table.frame["alcohol"].dtype == np.float64
    bounds = {a.name: (a.low, a.high, a.integer) for a in table.schema.attributes if isinstance(a, NumericAttribute)}
    assert bounds == {  # public bounds from the units, rounded outward; no whole-number column
        "fixed acidity": (0.0, 20.0, False), "volatile acidity": (0.0, 2.0, False), "citric acid": (0.0, 2.0, False),
        "residual sugar": (0.0, 100.0, False), "chlorides": (0.0, 1.0, False),
        "free sulfur dioxide": (0.0, 500.0, False), "total sulfur dioxide": (0.0, 500.0, False),
        "density": (0.9, 1.1, False), "pH": (2.0, 5.0, False), "sulphates": (0.0, 3.0, False),
        "alcohol": (0.0, 20.0, False),
    }


@pytest.mark.parametrize("name", DATASETS)
def test_bundled_numeric_bounds_are_public_and_sourced(name, loaded):
    """Every numeric attribute states where its bounds come from, and no bound is the table's own extreme."""
    schema_file = resources.files("modelshare.common.data.datasets") / "data" / f"{name}.schema.json"
    data = json.loads(schema_file.read_text("utf-8"))
    assert Schema.from_dict(data) == loaded[name].schema
    frame = _raw_bundled(name)
    for attr in loaded[name].schema.attributes:
        raw = next(a for a in data["attributes"] if a["name"] == attr.name)
        if isinstance(attr, CategoricalAttribute):
            assert "source" not in raw
            continue
        assert isinstance(raw.get("source"), str) and raw["source"]
        values = pd.to_numeric(frame[attr.name])
        assert attr.low <= values.min() and values.max() <= attr.high
        if attr.name != "education-num":  # its bounds are the 16 education codes, which the table spans
            assert (attr.low, attr.high) != (values.min(), values.max())
        assert attr.integer == bool((values == values.round()).all())


def test_unknown_dataset_lists_bundled_names():
    with pytest.raises(KeyError) as info:
        load_dataset("mushroom")
    assert isinstance(info.value, UnknownDatasetError)
    message = str(info.value)
    assert "mushroom" in message and all(name in message for name in DATASETS)


def test_load_dataset_missing_error_names_first_row():
    with pytest.raises(SchemaError) as info:
        load_dataset("vote", missing="error")
    assert info.value.row == 1 and info.value.source == "bundled:vote"
    assert info.value.column == "synfuels-corporation-cutback"


def test_describe_dataset_summary():
    summary = describe_dataset("vote")
    assert (summary["rows"], summary["dropped_rows"]) == (232, 203)
    assert summary["class"] == "party"
    assert sum(summary["class_distribution"].values()) == 232
    assert list(summary["class_distribution"]) == ["democrat", "republican"]
    assert summary["attributes"][0] == {"name": "handicapped-infants", "kind": "categorical", "categories": ["n", "y"]}
    wine = describe_dataset("winequality")
    assert wine["attributes"][1]["kind"] == "numeric" and len(wine["attributes"][1]["range"]) == 2
    assert wine["class_distribution"]["3"] == 30


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".csv.gz"])
def test_export_round_trip(tmp_path, suffix):
    for name in ("vote", "winequality"):
        out = export_dataset(name, tmp_path / f"{name}{suffix}")
        schema = bundled_schema(name)
        back = load_table(out, schema.class_name, schema=schema)
        original = load_dataset(name).frame.reset_index(drop=True)
        assert back.dropped_rows == 0
        pd.testing.assert_frame_equal(back.frame, original, check_dtype=False)
        assert back.schema.fingerprint == schema.fingerprint


# ------------------------------------------------------------------ user tables
def test_bad_numeric_value_names_file_row_and_column(tmp_path):
    path = _write(tmp_path / "owner_a.csv", "a,b,cls\n1,x,p\n?,y,q\n2,y,q\nabc,x,p\n")
    with pytest.raises(SchemaError) as info:
        load_table(path, "cls", schema=SMALL_SCHEMA)
    message = str(info.value)
    assert "owner_a.csv" in message and "row 4" in message and "'a'" in message and "'abc'" in message
    assert (info.value.row, info.value.column, info.value.value) == (4, "a", "abc")


def test_out_of_range_value_names_row(tmp_path):
    path = _write(tmp_path / "t.csv", "a,b,cls\n1,x,p\n11,y,q\n")
    with pytest.raises(SchemaError, match=r"t\.csv, row 2, column 'a'.*outside the schema range"):
        load_table(path, "cls", schema=SMALL_SCHEMA)


def test_question_marks_are_dropped_and_counted(tmp_path):
    path = _write(tmp_path / "t.csv", "a,b,cls\n1,x,p\n?,y,q\n2, ,q\n3,y,?\n4,y,q\n")
    table = load_table(path, "cls")
    assert table.dropped_rows == 3
    assert list(table.frame.index) == [0, 4]
    assert table.frame["a"].tolist() == [1, 4]
    assert table.schema.attributes[0] == NumericAttribute("a", 1.0, 4.0)
    assert table.schema.classes == ("p", "q")


def test_missing_error_names_row_and_column(tmp_path):
    path = _write(tmp_path / "t.csv", "a,b,cls\n1,x,p\n2,y,q\n3,?,q\n")
    with pytest.raises(SchemaError) as info:
        load_table(path, "cls", missing="error")
    assert (info.value.row, info.value.column) == (3, "b")
    assert "t.csv" in str(info.value) and "row 3" in str(info.value)


def test_all_rows_missing_is_an_error(tmp_path):
    path = _write(tmp_path / "t.csv", "a,b,cls\n?,x,p\n2,?,q\n")
    with pytest.raises(SchemaError, match="every one of the 2 row"):
        load_table(path, "cls")


@pytest.mark.parametrize("schema_suffix", [".json", ".toml"])
def test_user_schema_file_with_unseen_category_names_value(tmp_path, schema_suffix):
    schema_path = tmp_path / f"schema{schema_suffix}"
    if schema_suffix == ".json":
        SMALL_SCHEMA.save(schema_path)
    else:
        _write(
            schema_path,
            'class = "cls"\nclasses = ["p", "q"]\n'
            '[[attributes]]\nname = "a"\ntype = "numeric"\nlow = 0\nhigh = 10\n'
            '[[attributes]]\nname = "b"\ntype = "categorical"\ncategories = ["x", "y"]\n',
        )
    path = _write(tmp_path / "t.csv", "a,b,cls\n1,x,p\n2,z,q\n")
    with pytest.raises(SchemaError) as info:
        load_table(path, "cls", schema=schema_path)
    assert (info.value.row, info.value.column, info.value.value) == (2, "b", "z")
    assert "'z'" in str(info.value) and "t.csv" in str(info.value)


def test_schema_restricts_columns_and_converts_numbers(tmp_path):
    path = _write(tmp_path / "t.csv", "extra,cls,b,a\nfoo,p,x,1.5\nbar,q,y,2\n")
    table = load_table(path, "cls", schema=SMALL_SCHEMA)
    assert list(table.frame.columns) == ["a", "b", "cls"]
    assert table.frame["a"].tolist() == [1.5, 2.0]
    assert table.schema is SMALL_SCHEMA


def test_schema_with_other_class_column_is_rejected(tmp_path):
    path = _write(tmp_path / "t.csv", "a,b,cls\n1,x,p\n")
    with pytest.raises(SchemaError, match="class column is 'cls'"):
        load_table(path, "b", schema=SMALL_SCHEMA)


@pytest.mark.parametrize(
    ("filename", "text"),
    [
        ("semi.csv", "a ; b;cls\n 1 ; x ;p\n2;y; q \n"),
        ("tab.tsv", "a\tb\tcls\n1\tx\tp\n2\ty\tq\n"),
        ("tab.csv", "a\tb\tcls\n1\tx\tp\n2\ty\tq\n"),
        ("comma.csv", '"a", "b", "cls"\n1, x, p\n2, y, q\n'),
    ],
)
def test_delimiters_are_sniffed_and_fields_stripped(tmp_path, filename, text):
    table = load_table(_write(tmp_path / filename, text), "cls")
    assert list(table.frame.columns) == ["a", "b", "cls"]
    assert table.frame["a"].tolist() == [1, 2]
    assert table.frame["b"].tolist() == ["x", "y"]
    assert table.frame["cls"].tolist() == ["p", "q"]


def test_gzip_csv_is_read(tmp_path):
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("a;b;cls\n1;x;p\n2;y;q\n")
    assert len(load_table(path, "cls").frame) == 2


def test_inference_keeps_categorical_text(tmp_path):
    path = _write(tmp_path / "t.csv", "zip,n,cls\n01,5,1\n02,7,2\n01,6,1\n")
    table = load_table(path, "cls", categorical=["zip"])
    assert table.schema.attributes[0] == CategoricalAttribute("zip", ("01", "02"))
    assert table.schema.attributes[1] == NumericAttribute("n", 5.0, 7.0)
    assert table.schema.classes == ("1", "2")
    assert table.frame["cls"].tolist() == ["1", "2", "1"]


def test_parquet_nulls_are_missing(tmp_path):
    path = tmp_path / "t.parquet"
    frame = pd.DataFrame({"a": [1.0, None, 3.0, 4.0], "b": ["x", "y", None, "y"], "cls": ["p", "q", "p", "q"]})
    frame.to_parquet(path)
    table = load_table(path, "cls")
    assert table.dropped_rows == 2
    assert list(table.frame.index) == [0, 3]
    assert table.frame["b"].tolist() == ["x", "y"]


def test_parquet_numeric_class_and_categorical_become_text(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"zip": [1, 2, 1], "n": [5, 7, 6], "cls": [3, 4, 3]}).to_parquet(path)
    table = load_table(path, "cls", categorical=["zip"])
    assert table.frame["cls"].tolist() == ["3", "4", "3"]
    assert table.schema.attributes[0] == CategoricalAttribute("zip", ("1", "2"))
    with_schema = load_table(path, "cls", schema=table.schema)
    assert with_schema.frame["zip"].tolist() == ["1", "2", "1"]
    assert with_schema.frame["n"].tolist() == [5, 7, 6]


def test_inference_errors_name_the_file(tmp_path):
    path = _write(tmp_path / "one_class.csv", "a,cls\n1,p\n2,p\n")
    with pytest.raises(SchemaError, match=r"one_class\.csv, column 'cls': .*at least two classes"):
        load_table(path, "cls")


@pytest.mark.parametrize(
    ("filename", "text", "why"),
    [
        ("empty.csv", "", "the file is empty"),
        ("header.csv", "a,b,cls\n", "no data rows"),
        ("noclass.csv", "a,b\n1,x\n", "class column not found"),
        ("table.xlsx", "a,b,cls\n", "unsupported file type"),
    ],
)
def test_unusable_files_raise_schema_error_naming_the_file(tmp_path, filename, text, why):
    path = _write(tmp_path / filename, text)
    with pytest.raises(SchemaError, match=why) as info:
        load_table(path, "cls")
    assert filename in str(info.value)


def test_nonexistent_and_unparsable_files(tmp_path):
    with pytest.raises(SchemaError, match=r"nope\.csv: file not found"):
        load_table(tmp_path / "nope.csv", "cls")
    with pytest.raises(SchemaError, match=r"bad\.parquet: cannot parse"):
        load_table(_write(tmp_path / "bad.parquet", "not parquet"), "cls")


def test_unknown_missing_policy_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing must be"):
        load_table(_write(tmp_path / "t.csv", "a,cls\n1,p\n"), "cls", missing="impute")  # type: ignore[arg-type]


def test_vendoring_writes_the_bundled_public_bounds():
    """A re-vendor (`modelshare.common.data.datasets.vendor`)
    states the same bounds and sources as the bundled files."""
    from modelshare.common.data.datasets.vendor import ADULT_BOUNDS, WINE_BOUNDS

    for name, bounds in (("adult", ADULT_BOUNDS), ("winequality", WINE_BOUNDS)):
        schema_file = resources.files("modelshare.common.data.datasets") / "data" / f"{name}.schema.json"
        data = json.loads(schema_file.read_text("utf-8"))
        stated = {a["name"]: (a["low"], a["high"], a.get("integer", False), a["source"])
                  for a in data["attributes"] if a["type"] == "numeric"}
        assert stated == {n: (float(lo), float(hi), whole, text) for n, (lo, hi, whole, text) in bounds.items()}


def test_vote_categories_are_the_documented_votes(loaded):
    schema = loaded["vote"].schema
    assert schema.classes == ("democrat", "republican")
    assert all(a.categories == ("n", "y") for a in schema.attributes)  # '?' (no position) is a missing token


# ------------------------------------------------------------------ input never changed silently
def test_a_short_row_is_refused_naming_row_and_the_first_column_without_a_value(tmp_path):
    path = _write(tmp_path / "t.csv", "a,b,cls\n1,x,p\n2,y\n3,x,q\n")
    with pytest.raises(SchemaError) as info:
        load_table(path, "cls")
    assert (info.value.row, info.value.column) == (2, "cls")
    assert str(info.value).startswith(f"{path}, row 2, column 'cls': the row has 2 field(s), the header 3")


def test_a_long_row_is_refused_naming_row_and_the_extra_value(tmp_path):
    path = _write(tmp_path / "t.csv", "a,b,cls\n1,x,p\n\n2,y,q,EXTRA\n")
    with pytest.raises(SchemaError) as info:
        load_table(path, "cls", schema=SMALL_SCHEMA)
    assert (info.value.row, info.value.value) == (2, "EXTRA")
    assert "the row has 4 fields, the header 3" in str(info.value) and "t.csv" in str(info.value)


def test_a_byte_that_is_not_utf8_is_named_by_row_and_column_not_by_offset(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b,cls\n1,x,p\n2,\xff\xfey,q\n")
    with pytest.raises(SchemaError) as info:
        load_table(path, "cls")
    assert (info.value.row, info.value.column) == (2, "b")
    assert "line 3 holds bytes that are not UTF-8" in str(info.value) and "position" not in str(info.value)


def test_one_stray_string_in_a_numeric_column_is_refused_not_read_as_categories(tmp_path):
    rows = [f"{i},x,{'pq'[i % 2]}" for i in range(35)]
    rows.insert(20, "abc,y,p")
    path = _write(tmp_path / "t.csv", "a,b,cls\n" + "\n".join(rows) + "\n")
    with pytest.raises(SchemaError) as info:
        load_table(path, "cls")
    assert (info.value.row, info.value.column, info.value.value) == (21, "a", "abc")
    assert "declare the column categorical" in str(info.value)
    few = _write(tmp_path / "doors.csv", "doors,cls\n2,p\n3,q\n4,p\n5more,q\n")  # a few numbers and a word: categories
    assert load_table(few, "cls").schema.attributes[0] == CategoricalAttribute("doors", ("2", "3", "4", "5more"))


def test_missing_category_keeps_categorical_values_and_still_drops_numeric_ones(tmp_path):
    path = _write(tmp_path / "t.csv", "a,b,cls\n1,x,p\n2,?,q\n?,y,q\n4,,p\n5,y,?\n")
    table = load_table(path, "cls", missing="category")
    assert table.dropped_rows == 2  # the missing number (row 3) and the missing class (row 5)
    assert table.frame["b"].tolist() == ["x", MISSING_CATEGORY, MISSING_CATEGORY]
    assert MISSING_CATEGORY in table.schema.attributes[1].categories
    with pytest.raises(SchemaError) as info:  # a given schema must list the category: it is the public domain
        load_table(path, "cls", schema=SMALL_SCHEMA, missing="category")
    assert (info.value.row, info.value.column) == (2, "b") and repr(MISSING_CATEGORY) in str(info.value)
    listed = Schema((SMALL_SCHEMA.attributes[0], CategoricalAttribute("b", ("x", "y", MISSING_CATEGORY))), "cls",
                    ("p", "q"))
    assert load_table(path, "cls", schema=listed, missing="category").dropped_rows == 2
