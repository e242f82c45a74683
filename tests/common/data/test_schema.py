"""Schema: inference, files, fingerprint, and errors that name the file, row, column and value."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from modelshare.common.data.domain_fit import fit_to_domain
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema, SchemaError


def frame() -> pd.DataFrame:
    return pd.DataFrame({"age": [30, 40, 50], "job": ["a", "b", "a"], "cls": ["x", "y", "x"]})


def test_infer_kinds_ranges_and_sorted_categories():
    s = Schema.infer(frame(), "cls")
    assert s.names == ("age", "job")
    assert s.attributes[0] == NumericAttribute("age", 30.0, 50.0)
    assert s.attributes[1] == CategoricalAttribute("job", ("a", "b"))
    assert s.classes == ("x", "y")


def test_natural_sort_of_numeric_labels():
    s = Schema.infer(pd.DataFrame({"a": ["1", "10", "2"], "c": ["9", "10", "3"]}), "c")
    assert s.attributes[0].categories == ("1", "2", "10")
    assert s.classes == ("3", "9", "10")


def test_fingerprint_stable_and_sensitive():
    s1, s2 = Schema.infer(frame(), "cls"), Schema.infer(frame(), "cls")
    assert s1.fingerprint == s2.fingerprint and len(s1.fingerprint) == 64
    other = Schema(s1.attributes, s1.class_name, ("y", "x"))
    assert other.fingerprint != s1.fingerprint


def test_encode_decode_round_trip():
    s = Schema.infer(frame(), "cls")
    X, y = s.encode(frame())
    assert X.tolist() == [[30, 0], [40, 1], [50, 0]] and y.tolist() == [0, 1, 0]
    back = s.decode(X, y)
    assert back["job"].astype(str).tolist() == ["a", "b", "a"] and back["cls"].astype(str).tolist() == ["x", "y", "x"]


def test_unknown_category_names_source_row_column_value():
    s = Schema.infer(frame(), "cls")
    bad = frame()
    bad.loc[2, "job"] = "zzz"
    with pytest.raises(SchemaError) as info:
        s.encode(bad, source="people.csv")
    msg = str(info.value)
    assert "people.csv" in msg and "row 3" in msg and "'job'" in msg and "'zzz'" in msg and "unknown category" in msg
    assert info.value.row == 3 and info.value.column == "job"


def test_out_of_range_and_non_numeric_values():
    s = Schema.infer(frame(), "cls")
    bad = frame()
    bad.loc[1, "age"] = 99
    with pytest.raises(SchemaError, match=r"row 2, column 'age', value 99: outside the schema range \[30, 50\]"):
        s.encode(bad)
    bad = frame().astype({"age": object})
    bad.loc[0, "age"] = "old"
    with pytest.raises(SchemaError, match=r"row 1, column 'age', value 'old': not a finite number"):
        s.encode(bad)


def test_missing_column_and_unknown_class():
    s = Schema.infer(frame(), "cls")
    with pytest.raises(SchemaError, match="missing from the table"):
        s.encode(frame().drop(columns=["job"]))
    bad = frame()
    bad.loc[0, "cls"] = "q"
    with pytest.raises(SchemaError, match="unknown class"):
        s.encode(bad)


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_load_schema_files(tmp_path, suffix):
    s = Schema.infer(frame(), "cls")
    path = tmp_path / f"s{suffix}"
    if suffix == ".json":
        s.save(path)
    else:
        path.write_text(
            'class = "cls"\nclasses = ["x", "y"]\ndomain = "data-derived"\n'
            '[[attributes]]\nname = "age"\ntype = "numeric"\nlow = 30\nhigh = 50\n'
            '[[attributes]]\nname = "job"\ntype = "categorical"\ncategories = ["a", "b"]\n'
        )
    assert Schema.load(path).fingerprint == s.fingerprint and Schema.load(path).data_derived
    public = Schema(s.attributes, s.class_name, s.classes)  # the same bounds, stated publicly
    assert public.fingerprint != s.fingerprint and "domain" not in public.to_dict()


def test_attribute_source_is_documentation_outside_the_fingerprint(tmp_path):
    s = Schema((NumericAttribute("hours", 0, 168, True), CategoricalAttribute("job", ("a", "b"))), "cls", ("x", "y"))
    data = s.to_dict()
    data["attributes"][0]["source"] = "hours in a week"
    data["attributes"][1]["source"] = "the job code list"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    loaded = Schema.load(path)
    assert loaded == s and loaded.fingerprint == s.fingerprint and "source" not in json.dumps(loaded.to_dict())
    data["attributes"][0]["source"] = 168
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=r"column 'hours'.*attributes\[0\]\.source must be text"):
        Schema.load(path)


def test_bad_schema_file_names_file_and_field(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"class": "c", "classes": ["a", "b"], "attributes": [{"name": "x", "type": "weird"}]}))
    with pytest.raises(SchemaError, match=r"s\.json.*attributes\[0\]\.type is 'weird'"):
        Schema.load(path)
    path.write_text(json.dumps({"class": "c", "classes": ["a", "b"],
                                "attributes": [{"name": "x", "type": "numeric", "low": 5, "high": 1}]}))
    with pytest.raises(SchemaError, match="low 5.0 exceeds high 1.0"):
        Schema.load(path)
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(SchemaError, match="not UTF-8"):
        Schema.load(path)


def test_constructor_rejects_bad_schemas():
    with pytest.raises(SchemaError, match="at least two classes"):
        Schema((NumericAttribute("a", 0, 1),), "c", ("only",))
    with pytest.raises(SchemaError, match="duplicate attribute"):
        Schema((NumericAttribute("a", 0, 1), NumericAttribute("a", 0, 1)), "c", ("x", "y"))
    with pytest.raises(SchemaError, match="duplicate categories"):
        CategoricalAttribute("a", ("p", "p"))


def test_infer_names_source_on_degenerate_table():
    with pytest.raises(SchemaError, match="data.csv.*at least two classes"):
        Schema.infer(pd.DataFrame({"a": [1, 2], "c": ["x", "x"]}), "c", source="data.csv")
    with pytest.raises(SchemaError, match="class column not found"):
        Schema.infer(frame(), "nope")


def test_encode_is_vectorized_on_large_tables():
    s = Schema.infer(frame(), "cls")
    big = pd.concat([frame()] * 100_000, ignore_index=True)
    X, y = s.encode(big)
    assert X.shape == (300_000, 2) and np.bincount(y).tolist() == [200_000, 100_000]


def test_fit_to_domain_clamps_rounds_and_drops_row_by_row():
    """What a dp or dps study does with values outside the public domain (`modelshare.common.data.domain_fit`)."""
    schema = Schema((NumericAttribute("age", 0.5, 99.5, integer=True), NumericAttribute("w", -1.0, 1.0),
                     CategoricalAttribute("job", ("a", "b"))), "cls", ("x", "y"))
    raw = pd.DataFrame({"age": ["30", "120", "-4", "7.6", "n/a", "40"], "w": [0.5, 3.0, -9.0, 0.0, 0.0, 0.0],
                        "job": ["a", "b", "a", "c", "a", "b"], "cls": ["x", "y", "x", "x", "x", "z"]},
                       index=[3, 4, 5, 6, 7, 8])
    fitted, fit = fit_to_domain(raw, schema, source="t.csv")
    assert fitted.index.tolist() == [3, 4, 5]  # row 6: job c, row 7: not a number, row 8: class z
    assert fit.dropped == {"age": 1, "job": 1, "cls": 1} and fit.dropped_rows == 3
    assert fit.clamped == {"age": 2, "w": 2} and fit.rounded == {} and fitted["age"].tolist() == [30, 99, 1]
    assert fitted["w"].tolist() == [0.5, 1.0, -1.0]
    X, y = schema.encode(fitted, source="t.csv")  # the fitted table is within the domain
    assert X.shape == (3, 3) and y.tolist() == [0, 1, 0]
    _, whole = fit_to_domain(raw.loc[[6]].assign(job="a"), schema)
    assert whole.rounded == {"age": 1} and not whole.clamped
    regression = RegressionSchema((NumericAttribute("w", -1.0, 1.0),), NumericAttribute("t", 2.0, 4.0))
    fitted, fit = fit_to_domain(pd.DataFrame({"w": [0.0, 0.1], "t": [5.0, 3.0]}), regression)
    assert fit.clamped == {"t": 1} and fitted["t"].tolist() == [4.0, 3.0]
    unchanged = fit_to_domain(fitted, regression)[1]
    assert not unchanged.changed and unchanged.describe() == "every value within the schema's domain"
    with pytest.raises(SchemaError, match="column 'w'"):
        fit_to_domain(pd.DataFrame({"t": [3.0]}), regression, source="t.csv")
