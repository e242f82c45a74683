"""The Python API: `import modelshare as ms` is cheap, documented, and docs/python-api.md's example runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modelshare as ms
from modelshare.cli import main as cli_main

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


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
    assert subprocess.run([sys.executable, "-c",
                           code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def _car_releases(mechanism: str = "apt", requirement: str = "k-anonymity:k=5") -> tuple:
    table = ms.load_dataset("car")
    X, y = table.schema.encode(table.frame)
    test, owners = ms.deal(y, owners=2, random_state=1)
    releases = [ms.release(mechanism, requirement=requirement, disclosure="hit_miss",
                           tree=ms.train_tree(table.schema, X[rows], y[rows], learner="multiway"))
                for rows in owners]
    return table, X, y, test, owners, releases


def test_deal_is_simulates_split_and_mine_takes_the_studys_mining_choices(tmp_path):
    table, X, y, test, owners, releases = _car_releases()
    assert sorted(np.concatenate([test, *owners]).tolist()) == list(range(len(y)))
    assert abs(len(owners[0]) - len(owners[1])) <= 1 and abs(len(test) - 0.2 * len(y)) <= 5
    mined = ms.mine(releases, (X[test], y[test]), global_models=["naive-bayes"], off_path="marginal",
                    on_path="class", pgen_scale=2)
    [row] = mined.scores.to_dict("records")
    assert row["model"] == "naive-bayes" and 0.5 < row["accuracy"] <= 1 and row["selection"] == "fixed"
    assert mined.off_path.startswith("marginal") and mined.on_path.startswith("class")
    assert [o.owner_id for o in mined.results.owners] == ["owner-1", "owner-2"]
    assert all(o.audit_passed for o in mined.results.owners)
    assert mined.study.pgen_scale == 2 and mined.study.mechanism == "apt"
    unscored = ms.mine(releases, global_models=["naive-bayes"])
    assert np.isnan(unscored.scores["accuracy"][0]) and unscored.scores["train_rows"][0] > 0


def test_mine_refuses_what_no_study_could_mine(tmp_path):
    _, X, y, test, owners, releases = _car_releases()
    with pytest.raises(ValueError, match="at least one release"):
        ms.mine([])
    other = ms.release("apt", requirement="k-anonymity:k=10", disclosure="hit_miss", tree=releases[0].tree)
    with pytest.raises(ValueError, match="differ in mechanism or requirement"):
        ms.mine([releases[0], other])
    nursery = tmp_path / "study.toml"
    assert cli_main(["study", "init", "--dataset", "nursery", "-o", str(nursery)]) == 0
    with pytest.raises(ValueError, match="is not study .*'s"):
        ms.mine(releases, study=nursery)
    with pytest.raises(ValueError, match="global model"):
        ms.mine(releases, global_models=["no-such-model"])


def test_mine_learns_a_regression_study_from_diffpets_forests():
    from tests.federation_helpers import REGRESSION_SCHEMA, regression_rows

    X, y = regression_rows(400, 3)
    releases = [ms.release("diffpets", schema=REGRESSION_SCHEMA, X=X[i::2], y=y[i::2],
                           requirement="dp:epsilon=50,trees=2", max_depth=3) for i in range(2)]
    mined = ms.mine(releases, regression_rows(100, 4))
    assert list(mined.scores["model"]) == ["regression-tree", "random-forest"]
    assert (mined.scores["rmse"] > 0).all() and (mined.scores["mae"] > 0).all()
