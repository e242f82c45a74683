"""Model files on disk, in interim JSON forms until the wire contract's ModelMessage replaces them.

Two forms are read: a bare tree (``modelshare.tree/1``) and a release
(``modelshare.release/1``: ``{"format", "tree", "report"}``), which is what `modelshare release`
writes. Writes are atomic: a partial file never replaces a good one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common.report import PrivacyReport, Release
from common.tree import Tree, TreeError

__all__ = ["RELEASE_FORMAT", "read_model", "read_tree", "write_release", "write_tree"]

RELEASE_FORMAT = "modelshare.release/1"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TreeError(f"{path}: cannot read model file: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TreeError(f"{path}: not a JSON model file: {exc}") from None
    if not isinstance(data, dict):
        raise TreeError(f"{path}: a model file holds a JSON object at top level")
    return data


def read_model(path: str | Path) -> tuple[Tree, PrivacyReport | None]:
    """Read a tree or release file: the validated tree and the report (None for a bare tree)."""
    path = Path(path)
    data = _read_json(path)
    try:
        if data.get("format") == RELEASE_FORMAT:
            if not isinstance(data.get("tree"), dict) or not isinstance(data.get("report"), dict):
                raise TreeError("a release file needs a 'tree' object and a 'report' object")
            return Tree.from_dict(data["tree"]), PrivacyReport.from_dict(data["report"])
        return Tree.from_dict(data), None
    except (TreeError, ValueError) as exc:
        raise TreeError(f"{path}: {exc}") from None


def read_tree(path: str | Path) -> Tree:
    """Read the tree of a tree or release file; every failure names the file."""
    return read_model(path)[0]


def _write_json(data: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def write_tree(tree: Tree, path: str | Path) -> None:
    """Write a bare tree file atomically."""
    _write_json(tree.to_dict(), Path(path))


def write_release(release: Release, path: str | Path) -> None:
    """Write a release file (tree and privacy report) atomically."""
    _write_json({"format": RELEASE_FORMAT, "tree": release.tree.to_dict(), "report": release.report.to_dict()}, Path(path))
