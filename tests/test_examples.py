"""examples/ runs: the Python API script end to end, and study.toml is what `modelshare study init` writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from common.federation.study import load_study_file
from modelshare.cli_study_init import study_template

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_api_example_runs_and_prints_each_step():
    run = subprocess.run([sys.executable, str(EXAMPLES / "api_pipeline.py")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["owner 1", "owner 2", "owner 3"]
    assert all(line.endswith("audit passed") for line in lines[:3])
    assert lines[3].startswith("global tree from ") and "accuracy points apart" in lines[3]


def test_the_example_study_is_what_study_init_writes_and_a_valid_study():
    assert (EXAMPLES / "study.toml").read_text() == study_template(dataset="nursery")
    spec = load_study_file(EXAMPLES / "study.toml").spec
    assert (spec.mechanism, spec.requirement, spec.learner) == ("apt", "cl-diversity:c=5,l=2", "admissible")
