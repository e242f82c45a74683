"""The documentation site builds in strict mode: a broken link, a page missing from mkdocs.yml's navigation or
an API docstring mkdocstrings cannot render fails here (the README's test command runs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_in_strict_mode(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                          str(ROOT / "mkdocs.yml"),
                          "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    for page in ("index.html", "tutorial/first-simulate/index.html", "glossary/index.html",
                 "reference/index.html", "api-reference/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    assert "Mine releases as a study" in (tmp_path / "site" / "api-reference" / "index.html").read_text()


def test_a_broken_link_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# home\n\n[a page that is not there](missing.md)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text().split("\nplugins:")[0].replace("docs_dir: docs",
                                                                                          f"docs_dir: {docs}") + "\n")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                          "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "missing.md" in run.stderr
