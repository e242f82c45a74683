"""docs/reference/ is what `python -m modelshare.reference` generates from the code's definitions."""

from __future__ import annotations

from modelshare import reference


def test_the_reference_pages_are_current(capsys):
    assert reference.main(["--check"]) == 0, capsys.readouterr().err


def test_every_config_key_is_documented_with_its_meaning():
    """Each key of every file format has a docstring: a page row never has an empty meaning."""
    for fmt in reference.FILE_FORMATS:
        page = reference.file_page(fmt)
        empty = [line for line in page.splitlines() if line.startswith("| `") and line.endswith("|  |")]
        assert not empty, (fmt.name, empty)
