"""`modelshare schema infer` / `schema check`, and integer attributes (a whole number in, whole numbers out of PGEN)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import tomllib

from modelshare.cli import main
from modelshare.cli.schema import round_outward
from modelshare.common.data.datasets import load_dataset, load_table
from modelshare.common.data.schema import NumericAttribute, Schema, SchemaError
from modelshare.common.federation.wire import schema_from_pb, schema_to_pb
from modelshare.miner_node.pgen import pgen, uniform_rows


@pytest.fixture
def table(tmp_path):
    """Adult's first 600 rows as a CSV of one's own: whole-number and categorical columns, a class."""
    frame = load_dataset("adult").frame.head(600).copy()
    frame["ratio"] = np.linspace(0.25, 7.75, len(frame))  # a column that is not whole
    path = tmp_path / "people.csv"
    frame.to_csv(path, index=False)
    return path, frame


@pytest.mark.parametrize("low, high, expected", [
    (0, 987654, (0, 1_000_000)), (17, 90, (10, 100)), (1, 16, (0, 20)), (0.25, 7.75, (0, 8)), (-3.2, 4.1, (-4, 5)),
])
def test_ranges_round_outward_never_onto_a_rows_value(low, high, expected):
    assert round_outward(low, high) == expected


def test_infer_drafts_a_commented_schema_that_says_what_came_from_the_data(table, tmp_path, capsys):
    path, frame = table
    out = tmp_path / "people.schema.toml"
    assert main(["schema", "infer", str(path), "--class-column", "income", "--out", str(out)]) == 0
    text = out.read_text()
    assert "REVIEW BEFORE ANY RELEASE" in text and 'domain = "data-derived"' in text
    assert f"age: data range [{frame.age.min()}, {frame.age.max()}]" in text
    schema = Schema.load(out)
    assert schema.data_derived  # until the reviewer deletes the domain line
    age, ratio = (schema.attributes[schema.names.index(n)] for n in ("age", "ratio"))
    assert age.integer and not ratio.integer and (ratio.low, ratio.high) == (0, 8)
    assert age.low < frame.age.min() and age.high > frame.age.max()
    assert tomllib.loads(text)["class"] == "income" and set(schema.classes) == set(frame.income)
    assert load_table(path, "income", schema=schema).frame.shape[0] == len(frame)  # the draft fits its table


def test_check_names_every_row_that_does_not_fit(table, tmp_path, capsys):
    path, frame = table
    schema_file = tmp_path / "s.toml"
    assert main(["schema", "infer", str(path), "--class-column", "income", "--out", str(schema_file)]) == 0
    bad = frame.copy().astype({"age": object, "ratio": object})
    bad.loc[3, "age"] = 250          # out of range
    bad.loc[7, "age"] = "old"        # not a number
    bad.loc[9, "workclass"] = "Astronaut"
    bad.loc[11, "income"] = "rich"   # not a class
    bad.loc[13, "ratio"] = "?"       # missing
    bad_path = tmp_path / "bad.csv"
    bad.to_csv(bad_path, index=False)
    capsys.readouterr()
    assert main(["schema", "check", str(bad_path), "--schema", str(schema_file), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    found = {(p["row"], p["column"], p["why"].split(" ")[0]) for p in report["problems"]}
    assert found == {(4, "age", "outside"), (8, "age", "not"), (10, "workclass", "not"), (12, "income", "not"),
                     (14, "ratio", "missing")}
    assert not report["fits"] and report["rows"] == len(frame)
    assert main(["schema", "check", str(path), "--schema", str(schema_file)]) == 0
    assert "all 600 rows fit" in capsys.readouterr().err


def test_check_lists_ragged_rows_with_every_other_problem_by_file_line(table, tmp_path, capsys):
    path, frame = table
    schema_file = tmp_path / "s.toml"
    assert main(["schema", "infer", str(path), "--class-column", "income", "--out", str(schema_file)]) == 0
    lines = path.read_text().splitlines()
    lines[5] += ",EXTRA"                           # data row 5: one field too many
    lines[8] = "33,Private"                        # data row 8: too few fields
    lines.insert(10, "")                           # a blank line: data rows and file lines part from here
    fields = lines[20].split(",")
    lines[20] = ",".join([fields[0], "Astronaut", *fields[2:]])
    bad = tmp_path / "ragged.csv"
    bad.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["schema", "check", str(bad), "--schema", str(schema_file), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    found = [(p["line"], p["row"], p["column"], p["why"].split(":")[0]) for p in report["problems"]]
    assert found == [(6, 5, "#17 (beyond the header)", "the row has 17 fields, the header 16"),
                     (9, 8, "fnlwgt", "the row has 2 field(s), the header 16"),
                     (21, 19, "workclass", "not a category of the schema")]
    assert "Astronaut" in bad.read_text().splitlines()[20]  # file line 21, as reported
    assert report["rows"] == len(frame)
    assert main(["schema", "check", str(bad), "--schema", str(schema_file)]) == 1
    text = capsys.readouterr().out
    assert "Astronaut" in text and "EXTRA" in text


def test_infer_drafts_despite_a_stray_word_in_a_numeric_column_and_names_it(table, tmp_path, capsys):
    path, frame = table
    lines = path.read_text().splitlines()
    assert lines[121].startswith(str(frame.age.iloc[120]) + ",")
    lines[121] = "forty" + lines[121][lines[121].index(","):]  # data row 121, file line 122
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "s.toml"
    assert main(["schema", "infer", str(path), "--class-column", "income", "--out", str(out)]) == 0
    said = "age: 'forty' at data row 121 (file line 122) is not a number; read as missing"
    assert said in capsys.readouterr().err and said in out.read_text()
    age = Schema.load(out).attributes[0]
    assert age.name == "age" and isinstance(age, NumericAttribute) and age.integer
    with pytest.raises(SchemaError, match=r"row 121, column 'age', value 'forty'"):  # the library still refuses
        load_table(path, "income")


def test_an_integer_attribute_refuses_fractions_travels_and_pgen_draws_whole_numbers(nursery):
    schema = Schema((NumericAttribute("age", 0, 120, integer=True), NumericAttribute("ratio", 0, 1)), "c", ("a", "b"))
    assert schema_from_pb(schema_to_pb(schema)) == schema
    plain = Schema((NumericAttribute("age", 0, 120), NumericAttribute("ratio", 0, 1)), "c", ("a", "b"))
    assert "integer" not in plain.to_dict()["attributes"][0]  # old schemas keep their fingerprint
    with pytest.raises(SchemaError, match="not a whole number"):
        schema.encode(pd.DataFrame({"age": [30, 30.5], "ratio": [0.1, 0.2], "c": ["a", "b"]}))
    from modelshare.common.mechanisms.release import release
    from modelshare.common.trees.learners import make_learner

    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, 121, 2000), rng.random(2000)]).astype(float)
    y = ((X[:, 0] > 40) ^ (X[:, 1] > 0.5)).astype(np.int64)
    tree = make_learner("cart", schema, random_state=0, max_depth=4, public_cuts=True).fit(X, y).tree_
    released = release("apt", tree=tree, requirement="k-anonymity:k=5")
    Xp, _ = pgen(released.tree, rows=5000, rng=np.random.default_rng(1))
    assert np.all(Xp[:, 0] == np.round(Xp[:, 0])) and not np.all(Xp[:, 1] == np.round(Xp[:, 1]))
    assert np.all(released.tree.apply(Xp) >= 0)
    U = uniform_rows(schema, 1000, np.random.default_rng(2))
    assert np.all(U[:, 0] == np.round(U[:, 0])) and U[:, 0].min() >= 0 and U[:, 0].max() <= 120


@pytest.mark.slow
def test_simulate_runs_on_a_table_with_its_inferred_and_edited_schema(table, tmp_path, capsys):
    path, _ = table
    schema_file = tmp_path / "people.schema.toml"
    assert main(["schema", "infer", str(path), "--class-column", "income", "--out", str(schema_file)]) == 0
    edited = schema_file.read_text().replace("low = 10.0\nhigh = 100.0", "low = 0.0\nhigh = 120.0", 1)
    assert edited != schema_file.read_text()  # the reviewer states age's public bounds
    schema_file.write_text(edited)
    capsys.readouterr()
    assert main(["simulate", "--data", str(path), "--class-column", "income", "--schema", str(schema_file),
                 "--owners", "2", "--mechanism", "apt", "--requirement", "k-anonymity:k=5", "--seed", "0",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert all(o["audit_passed"] for o in report["owners"]) and report["models"]


def test_pgen_writes_integer_columns_as_integers(tmp_path, capsys):
    """`modelshare pgen` on a release over an integer attribute writes whole numbers, not 30.0."""
    frame = pd.DataFrame({"age": np.arange(400) % 90 + 10, "colour": np.where(np.arange(400) % 3, "red", "blue"),
                          "c": np.where(np.arange(400) % 90 > 40, "old", "young")})
    data, schema_file = tmp_path / "t.csv", tmp_path / "t.schema.toml"
    frame.to_csv(data, index=False)
    assert main(["schema", "infer", str(data), "--class-column", "c", "--out", str(schema_file)]) == 0
    model, pseudo = tmp_path / "m.json", tmp_path / "p.csv"
    assert main(["release", "--data", str(data), "--class-column", "c", "--schema", str(schema_file),
                 "--mechanism", "apt", "--requirement", "k-anonymity:k=5", "--out", str(model)]) == 0
    assert main(["pgen", str(model), "--out", str(pseudo), "--seed", "0"]) == 0
    written = pd.read_csv(pseudo)
    assert written["age"].dtype.kind == "i" and len(written) > 0


def test_infer_drafts_a_regression_schema_with_the_given_target_bounds(tmp_path, capsys):
    from modelshare.common.data.task import load_schema

    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.uniform(0.2, 6.9, 80), "k": rng.integers(1, 8, 80), "q": rng.uniform(0, 10, 80)}).to_csv(
        tmp_path / "r.csv", index=False)
    out = tmp_path / "r.toml"
    assert main(["schema", "infer", str(tmp_path / "r.csv"), "--target", "q", "--target-range", "0,10",
                 "--out", str(out)]) == 0
    schema = load_schema(out)
    assert schema.target.to_dict() == {"name": "q", "type": "numeric", "low": 0.0, "high": 10.0}
    assert schema.data_derived and schema.attributes[1].integer
    assert (schema.attributes[0].low, schema.attributes[0].high) == (0, 7)
    reviewed = out.read_text().replace('domain = "data-derived"\n', "")
    out.write_text(reviewed)
    assert not load_schema(out).data_derived  # the reviewer's deletion makes it a public schema
    capsys.readouterr()
    assert main(["schema", "infer", str(tmp_path / "r.csv"), "--target", "q"]) == 2
    assert "needs --target-range" in capsys.readouterr().err


def test_rows_dropped_for_a_missing_value_are_counted_on_stderr(tmp_path, capsys):
    path = tmp_path / "gaps.csv"
    path.write_text("a,b,cls\n1,x,p\n2,?,q\n3,y,q\n4,,p\n5,y,q\n")
    assert main(["schema", "infer", str(path), "--class-column", "cls", "--out", str(tmp_path / "s.toml")]) == 0
    assert f"{path}: dropped 2 row(s) with a missing value" in " ".join(capsys.readouterr().err.split())
