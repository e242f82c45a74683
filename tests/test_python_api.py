"""The Python API: `import modelshare as ms` is cheap, documented, and docs/python-api.md's example runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import modelshare as ms

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def documented_examples() -> list[str]:
    """The Python blocks of docs/python-api.md, in order (the first mines Nursery as simulate does)."""
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_documented_examples_run(capsys):
    mining, mixed = documented_examples()
    exec(compile(mining, str(DOC), "exec"), {"__name__": "python_api_example"})
    out = capsys.readouterr().out
    assert out.count("audit passed") == 5 and "decision-tree" in out and "naive-bayes" in out
    assert "PGEN off-path values: uniform" in out
    exec(compile(mixed, str(DOC), "exec"), {"__name__": "python_api_example"})
    out = capsys.readouterr().out
    assert out.count("audit passed") == 3 and "global tree from" in out and "PGEN" in out


def test_dir_shows_only_the_public_names():
    import modelshare.cli  # noqa: F401  (a submodule the package also holds)

    assert dir(ms) == sorted(ms.__all__)
    from modelshare import api

    assert sorted(api.__all__) == sorted(ms.__all__)


def test_every_api_name_has_a_docstring_with_its_parameters():
    for name in ms.__all__:
        value = getattr(ms, name)
        assert value.__doc__, name
        if callable(value) and not isinstance(value, type) and name not in ("write_release", "mechanisms",
                                                                           "read_release"):
            assert "Parameters" in value.__doc__ and "Returns" in value.__doc__, name


def test_importing_the_package_imports_no_numerics():
    code = "import sys, modelshare; print(sorted(m for m in ('numpy', 'pandas', 'sklearn') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
