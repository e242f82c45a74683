"""Bad local tables at the owner: each error names file, row, column and value locally, and the miner
hears only the refusal code ``bad-local-data`` and its fixed sentence (no file, row, column or value)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import signal
import subprocess
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from modelshare.cli.owner_status import owner_health
from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.refusal import Refusal
from modelshare.owner_node.config import OwnerConfig, OwnerConfigError
from modelshare.owner_node.daemon import Backoff, Outbox, OwnerDaemon
from modelshare.owner_node.status import read_status
from modelshare.owner_node.training import LocalDataError, fits_domain, load_local_table
from modelshare.provision import set_miner_port
from tests.federation_helpers import CLI, make_federation, make_owner_config, study_spec, wait_until


@pytest.fixture(scope="module")
def adult_head():
    table = load_dataset("adult")
    return table.schema, table.frame.head(200).astype(object).reset_index(drop=True)


@pytest.fixture()
def adult_rows(adult_head):
    """The schema and a fresh copy of the 200 rows, for one test to spoil."""
    return adult_head[0], adult_head[1].copy()


def _load(tmp_path: Path, schema, path: Path) -> LocalDataError:
    with pytest.raises(LocalDataError) as info:
        load_local_table(make_owner_config(tmp_path, path), schema)
    return info.value


@pytest.mark.parametrize("index, column, value, why", [
    (41, "age", "forty-two", "not a finite number"),  # text in a numeric column
    (7, "workclass", "Astronaut", "unknown category"),  # a category the schema does not know
])
def test_a_bad_value_is_named_by_file_row_and_column_locally(tmp_path, adult_rows, index, column, value, why):
    schema, frame = adult_rows
    frame.loc[index, column] = value
    path = tmp_path / "sites.csv"
    frame.to_csv(path, index=False)
    error = _load(tmp_path, schema, path)
    row = f"row {index + 1}"
    assert all(part in str(error) for part in (str(path), row, f"column '{column}'", f"'{value}'", why))


@pytest.mark.parametrize("content, why", [
    (b"", "the file is empty"),
    (b"age,workclass\n", "lacks columns"),
])
def test_empty_files_and_headers_without_the_study_columns(tmp_path, adult_head, content, why):
    path = tmp_path / "empty.csv"
    path.write_bytes(content)
    error = _load(tmp_path, adult_head[0], path)
    assert "empty.csv" in str(error) and why in str(error)


def test_a_header_without_rows_is_an_empty_table(tmp_path, adult_rows):
    schema, frame = adult_rows
    path = tmp_path / "header.csv"
    frame.head(0).to_csv(path, index=False)
    error = _load(tmp_path, schema, path)
    assert "header.csv" in str(error) and "no row" in str(error)


@pytest.mark.parametrize("sep", [";", "|", "\t"])
def test_other_delimiters_are_sniffed_and_read(tmp_path, adult_rows, sep):
    schema, frame = adult_rows
    path = tmp_path / "semi.csv"
    frame.to_csv(path, index=False, sep=sep)
    X, y = load_local_table(make_owner_config(tmp_path, path), schema)
    assert X.shape == (200, schema.n_attributes) and len(y) == 200


def test_a_delimiter_that_splits_nothing_reports_the_missing_columns(tmp_path, adult_rows):
    schema, frame = adult_rows
    path = tmp_path / "spaces.csv"
    path.write_text("\n".join(" ".join(str(v).replace(" ", "_") for v in row) for row in
                              [frame.columns, *frame.head(5).itertuples(index=False)]) + "\n")
    error = _load(tmp_path, schema, path)
    assert "spaces.csv" in str(error) and "lacks columns" in str(error) and "one single column" in str(error)


def test_a_file_not_in_utf8_names_the_file_and_the_encoding(tmp_path, adult_rows):
    schema, frame = adult_rows
    frame.loc[3, "native-country"] = "Perú"
    path = tmp_path / "latin.csv"
    path.write_bytes(frame.to_csv(index=False).encode("latin-1"))
    error = _load(tmp_path, schema, path)
    assert "latin.csv" in str(error) and "utf-8" in str(error).lower()


def test_a_corrupt_gzip_is_named(tmp_path, adult_head):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(b"age,workclass\n1,x\n")[:-9])
    error = _load(tmp_path, adult_head[0], path)
    assert "t.csv.gz" in str(error) and "truncated" in str(error)


def test_the_daemon_reports_a_bad_table_to_the_miner_by_its_code_alone(tmp_path, adult_rows):
    schema, frame = adult_rows
    frame.loc[11, "age"] = "secret-age"
    owners = ["site-a"]
    path = tmp_path / "site-a.csv"
    frame.to_csv(path, index=False)
    fed = make_federation(tmp_path, owners, owner_data={"site-a": (str(path), schema.class_name)},
                          policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    fed.start()
    stop = threading.Event()
    daemon = OwnerDaemon(fed.owner_config("site-a"))
    try:
        admin = fed.stub("admin")
        admin.CreateStudy(fpb.CreateStudyRequest(spec=study_spec("bad", dataset="adult")), timeout=10)
        outcomes = daemon.run_once(wait_seconds=5, stop=stop)
        assert [o.outcome for o in outcomes] == ["refused"]
        status = fed.wait_study("bad", timeout=30)
        assert status.state == "failed", status.reason
        assert f"site-a refused: bad-local-data: {Refusal('bad-local-data').sentence}" in status.reason
        assert not any(part in status.reason for part in ("secret-age", "row 12", "'age'", "site-a.csv", str(tmp_path)))
    finally:
        daemon.close()
        fed.close()


def test_rows_dropped_for_a_missing_value_are_counted_and_category_keeps_them(tmp_path, adult_rows):
    schema, frame = adult_rows
    frame.loc[[3, 9], "workclass"] = "?"
    path = tmp_path / "gaps.csv"
    frame.to_csv(path, index=False)
    config = make_owner_config(tmp_path, path)
    table = load_local_table(config, schema)
    assert (table.dropped, len(table.y)) == (2, len(frame) - 2)
    with pytest.raises(LocalDataError, match=r"row 4, column 'workclass'.*'\(missing\)'"):  # the study schema lacks it
        load_local_table(dataclasses.replace(config, missing="category"), schema)


def _unreadable_table_study(tmp_path, adult_rows, deadline_minutes: float):
    schema, frame = adult_rows
    path = tmp_path / "site-a.csv"
    frame.to_csv(path, index=False)
    fed = make_federation(tmp_path, ["site-a"], owner_data={"site-a": (str(path), schema.class_name)},
                          policy={"mechanisms": ["apt"], "min_k": 5, "miners": ["miner"]})
    fed.start()
    fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec(
        "gone", dataset="adult", deadline_minutes=deadline_minutes)), timeout=10)
    return fed, path


def test_a_table_that_cannot_be_read_for_a_while_is_waited_for_not_refused(tmp_path, adult_rows):
    fed, path = _unreadable_table_study(tmp_path, adult_rows, deadline_minutes=10)
    daemon = OwnerDaemon(fed.owner_config("site-a"), data_retry=Backoff(base=0.0, cap=0.0))
    away = path.rename(tmp_path / "being-replaced.csv")  # after the start, which requires the file
    try:
        [outcome] = daemon.run_once(wait_seconds=0)
        assert outcome.outcome == "deferred" and f"the data file {path} is missing" in outcome.reason
        status = read_status(daemon.config.state_dir)
        assert status is not None and status["data_problems"]["gone"]["attempts"] == 1
        healthy, reason = owner_health(status, now=datetime.now(timezone.utc), max_age=45)
        assert not healthy and "the local table cannot be read for study gone" in reason
        assert fed.stub("admin").GetStudy(fpb.StudyRef(study_id="gone"), timeout=10).owners[0].state == "waiting"
        away.rename(path)
        [outcome] = daemon.run_once(wait_seconds=0)
        assert outcome.outcome == "submitted"
        assert read_status(daemon.config.state_dir)["data_problems"] == {}
    finally:
        daemon.close()
        fed.close()


def test_a_table_still_unreadable_as_the_deadline_nears_is_refused_so_the_miner_learns_why(tmp_path, adult_rows):
    fed, path = _unreadable_table_study(tmp_path, adult_rows, deadline_minutes=0.5)  # within DATA_LAST_CALL_SECONDS
    daemon = OwnerDaemon(fed.owner_config("site-a"))
    path.unlink()
    try:
        [outcome] = daemon.run_once(wait_seconds=0)
        assert outcome.outcome == "refused"
        detail = read_status(daemon.config.state_dir)["last_decision"]["detail"]
        assert detail.startswith("data-unavailable: ") and "stayed unreadable" in detail and "is missing" in detail
        reason = fed.wait_study("gone", timeout=30).reason
        assert f"site-a refused: data-unavailable: {Refusal('data-unavailable').sentence}" in reason
        assert "does not fit" not in reason and str(tmp_path) not in reason
    finally:
        daemon.close()
        fed.close()


def test_an_owner_config_loads_while_its_data_file_is_missing_but_not_when_the_path_is_a_directory(
        tmp_path, adult_rows):
    fed, path = _unreadable_table_study(tmp_path, adult_rows, deadline_minutes=10)
    fed.close()
    path.unlink()
    config = OwnerConfig.load(fed.kits["site-a"] / "owner.toml")
    assert config.data_path == path
    path.mkdir()
    with pytest.raises(OwnerConfigError, match=r"\[data\]: path = .*is a directory, not a file"):
        OwnerConfig.load(fed.kits["site-a"] / "owner.toml")


def test_a_daemon_started_without_its_data_file_is_unhealthy_saying_so_until_the_file_appears(tmp_path, adult_rows):
    fed, path = _unreadable_table_study(tmp_path, adult_rows, deadline_minutes=10)
    away = path.rename(tmp_path / "not-yet.csv")
    daemon = OwnerDaemon(fed.owner_config("site-a"), data_retry=Backoff(base=0.0, cap=0.0))
    try:
        data_file = read_status(daemon.config.state_dir)["data_file"]
        assert data_file["problem"] == f"the data file {path} is missing" and data_file["since"]
        healthy, reason = owner_health(read_status(daemon.config.state_dir), now=datetime.now(timezone.utc), max_age=45)
        assert not healthy and reason.startswith(f"waiting for the data file: the data file {path} is missing")
        away.rename(path)
        [outcome] = daemon.run_once(wait_seconds=0)
        assert outcome.outcome == "submitted"
        assert read_status(daemon.config.state_dir)["data_file"] is None
    finally:
        daemon.close()
        fed.close()


@pytest.mark.slow
def test_owner_serve_started_without_its_data_file_waits_shows_it_and_answers_once_it_appears(tmp_path, adult_rows):
    fed, path = _unreadable_table_study(tmp_path, adult_rows, deadline_minutes=10)
    away = path.rename(tmp_path / "not-yet.csv")
    set_miner_port(fed.kits.values(), fed.miner.port)
    config = fed.kits["site-a"] / "owner.toml"
    state_dir = OwnerConfig.load(config).state_dir
    with open(tmp_path / "owner.out", "wb") as out:
        owner = subprocess.Popen([*CLI, "owner", "serve", "--config", str(config)], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: ((read_status(state_dir) or {}).get("data_problems") or {}).get("gone"), 60,
                   "the daemon to try the study and wait for its data file")
        probe = subprocess.run([*CLI, "owner", "status", "--config", str(config), "--json"], capture_output=True,
                               text=True, timeout=60)
        assert probe.returncode == 1, probe.stderr
        report = json.loads(probe.stdout)
        assert report["reason"].startswith("the local table cannot be read for study gone (attempt 1, next at ")
        assert report["reason"].endswith(f"the data file {path} is missing")
        assert report["data_file"]["problem"] == f"the data file {path} is missing"
        assert owner.poll() is None  # still running: a Restart=on-failure unit does not loop
        away.rename(path)
        assert fed.wait_study("gone", timeout=60).state == "done"
    finally:
        owner.send_signal(signal.SIGTERM)
        owner.wait(timeout=30)
        fed.close()
    assert f"the data file {path} is missing; waiting for it" in (tmp_path / "owner.out").read_text()


# --------------------------------------------------------- dp and dps studies fit the rows instead of refusing
def _spoilt(frame):
    """Adult rows with two ages outside the public range [0, 120], one non-whole age (an integer attribute), an
    unknown category, an unknown class and an age that is no number."""
    frame.loc[11, "age"], frame.loc[12, "age"], frame.loc[20, "age"] = 150, -3, 41.6
    frame.loc[7, "workclass"], frame.loc[30, "income"], frame.loc[40, "age"] = "Astronaut", "maybe", "forty-two"
    return frame


def test_a_dp_study_fits_values_into_the_domain_where_a_path_study_refuses_them(tmp_path, adult_rows):
    schema, frame = adult_rows
    path = tmp_path / "site.csv"
    _spoilt(frame).to_csv(path, index=False)
    config = make_owner_config(tmp_path, path)
    assert fits_domain("laplace-rdt") and fits_domain("kanon-rdt") and fits_domain("dpea-nb")
    assert not fits_domain("apt") and not fits_domain("none")
    table = load_local_table(config, schema, fit_domain=True)
    assert table.fitted is not None and len(table.y) == 200 - 3
    assert (table.fitted.clamped, table.fitted.rounded) == ({"age": 2}, {"age": 1})
    assert table.fitted.dropped == {"age": 1, "workclass": 1, "income": 1} and table.fitted.dropped_rows == 3
    ages = table.X[:, 0]
    assert ages.max() == 120 and ages.min() == 0 and 42 in ages and (ages == ages.round()).all()
    assert table.fitted.describe().startswith("clamped 2 value(s) to the public range (age 2); rounded 1")
    error = _load(tmp_path, schema, path)  # a path study: refused at the first bad value, named locally
    assert "row 41, column 'age', value 'forty-two': not a finite number" in str(error)


def test_a_row_only_outside_the_domain_is_no_row_to_learn_from(tmp_path, adult_rows):
    schema, frame = adult_rows
    frame["income"] = "maybe"
    path = tmp_path / "site.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(LocalDataError, match=r"no row to learn from: every row was dropped \(.*income 200\)"):
        load_local_table(make_owner_config(tmp_path, path), schema, fit_domain=True)


def test_the_daemon_releases_a_dp_study_over_values_outside_the_domain_and_logs_the_fit_locally(
        tmp_path, adult_rows, caplog, monkeypatch) -> None:
    schema, frame = adult_rows
    path = tmp_path / "site-a.csv"
    _spoilt(frame).to_csv(path, index=False)
    sent: list[bytes] = []
    put = Outbox.put

    def recording_put(self: Outbox, study_id: str, data: bytes) -> Path:
        sent.append(data)
        return put(self, study_id, data)

    monkeypatch.setattr(Outbox, "put", recording_put)
    fed = make_federation(tmp_path, ["site-a"], owner_data={"site-a": (str(path), schema.class_name)},
                          policy={"mechanisms": ["laplace-rdt"], "miners": ["miner"]})
    fed.start()
    daemon = OwnerDaemon(fed.owner_config("site-a"))
    try:
        fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec(
            "dp", dataset="adult", mechanism="laplace-rdt", requirement="dp:epsilon=1,trees=2", disclosure="counts",
            max_depth=2)), timeout=10)
        assert [o.outcome for o in daemon.run_once(wait_seconds=5, stop=threading.Event())] == ["submitted"]
        status = read_status(daemon.config.state_dir)
        assert status is not None and isinstance(status["last_decision"], dict)
        detail = status["last_decision"]["detail"]
    finally:
        daemon.close()
        fed.close()
    fit = "clamped 2 value(s) to the public range (age 2); rounded 1 non-whole value(s)"
    assert fit in caplog.text and fit in detail and "release of 197 local rows" in detail  # the site's log and status
    assert len(sent) == 1 and not any(word in sent[0]
                                      for word in (b"value(s) to the public range", b"non-whole",
                                                   b"fitted", b"(age 2)"))
