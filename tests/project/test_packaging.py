"""One import name: the folders common/, owner_node/ and miner_node/ are the packages modelshare.common,
modelshare.owner_node and modelshare.miner_node (through the links in modelshare/), a source checkout refuses
their bare names, and the wheel installs nothing at the top of site-packages but ``modelshare``."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("common", "owner_node", "miner_node")


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_folder_is_linked_into_the_one_package(folder):
    link = ROOT / "modelshare" / folder
    assert link.is_symlink(), f"modelshare/{folder} must be a symlink to ../{folder}"
    assert os.readlink(link) == f"../{folder}"
    assert link.resolve() == (ROOT / folder).resolve()


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_checkout_refuses_the_bare_name(folder):
    """From the repository root the folder is on sys.path, yet
    importing it by its own name fails, naming the right one."""
    run = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode != 0
    assert f"ImportError: import modelshare.{folder}, not {folder}" in run.stderr


@pytest.mark.slow
def test_the_wheel_installs_only_modelshare_and_runs_from_it(tmp_path):
    """Build the wheel, unpack it into an empty directory and run from there: ``import common`` fails, the
    package, its data files, the generated protobuf code and the command line work."""
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                          str(ROOT)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("modelshare-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "site")
    assert {name.split("/")[0] for name in names} == {"modelshare", wheel.name.split("-py3")[0] + ".dist-info"}
    for folder in FOLDERS:
        assert f"modelshare/{folder}/__init__.py" in names
    assert "modelshare/common/federation/pb/federation_pb2.py" in names
    assert not any(name.split("/")[:2] == ["modelshare", "experiments"] for name in names)  # experiments/ stays out
    assert "modelshare/common/data/datasets/data/car.csv.gz" in names

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    for folder in FOLDERS:
        bare = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
        assert f"No module named '{folder}'" in bare.stderr
    code = ("import modelshare, modelshare.miner_node.server, modelshare.owner_node.daemon; "
            "from modelshare.common.data.datasets import load_dataset; "
            "print(modelshare.__file__); print(len(load_dataset('car').frame))")
    used = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert used.returncode == 0, used.stderr[-2000:]
    where, rows = used.stdout.split()
    assert Path(where).is_relative_to(tmp_path / "site") and int(rows) == 1728
    cli = subprocess.run([sys.executable, "-m", "modelshare.cli", "datasets", "list"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert cli.returncode == 0 and "car" in cli.stdout, cli.stderr[-2000:]
    experiment = subprocess.run([sys.executable, "-m", "modelshare.cli", "experiment", "rdt", "--help"], cwd=tmp_path,
                                env=env, capture_output=True, text=True)
    assert experiment.returncode == 2 and "experiments/ of a source checkout" in experiment.stderr
