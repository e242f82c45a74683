"""modelshare.common.files: one atomic write, with bytes or through a writer callback."""

import stat

import pytest

from modelshare.common.files import atomic_write, atomic_write_via


def test_atomic_write_replaces_the_file_with_the_mode_asked_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "secret.key"
    path.write_text("old")
    atomic_write(path, b"new", mode=0o600)
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    atomic_write(path, "text é", mode=0o644)
    assert path.read_text(encoding="utf-8") == "text é"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["secret.key"]


def test_atomic_write_via_returns_the_writers_result_and_a_failure_keeps_the_old_file(tmp_path):
    path = tmp_path / "table.csv"
    assert atomic_write_via(path, lambda p: p.write_text("a,b\n")) == 4
    assert path.read_text() == "a,b\n"

    def broken(p):
        p.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write_via(path, broken)
    assert path.read_text() == "a,b\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]
