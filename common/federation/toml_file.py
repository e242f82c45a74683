"""Reading a TOML file (config, study, project) with one error form that names the file and the cause."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["read_toml"]


def read_toml(path: Path, what: str, error: type[Exception]) -> dict[str, Any]:
    """Parse ``path``; raise ``error`` naming the file, what it should be (``what``) and why not."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: {what} does not exist") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not a TOML {what}: {exc}") from None
