"""Model files on disk: the interim JSON form of a `Tree` (until the wire contract's ModelMessage)."""

from __future__ import annotations

import json
from pathlib import Path

from common.tree import Tree, TreeError

__all__ = ["read_tree", "write_tree"]


def read_tree(path: str | Path) -> Tree:
    """Read and validate a tree file; every failure names the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TreeError(f"{path}: cannot read model file: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TreeError(f"{path}: not a JSON model file: {exc}") from None
    if not isinstance(data, dict):
        raise TreeError(f"{path}: a model file holds a JSON object at top level")
    try:
        return Tree.from_dict(data)
    except (TreeError, ValueError) as exc:
        raise TreeError(f"{path}: {exc}") from None


def write_tree(tree: Tree, path: str | Path) -> None:
    """Write a tree file atomically (a partial file never replaces a good one)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(tree.to_dict(), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
