"""Regenerate the committed protobuf/gRPC code in ``common/federation/pb`` from ``protos/modelshare/v1``.

protoc writes imports as ``from modelshare.v1 import model_pb2`` (the proto path), which would
resolve to the CLI package; the generated modules live in ``modelshare.common.federation.pb`` instead, so those imports
are rewritten. ``--check`` regenerates into a temporary directory and exits 1 if the committed
code differs (CI runs it through the test suite). Beside protoc's own ``.pyi`` stubs of the messages,
mypy-protobuf's ``protoc-gen-mypy_grpc`` plugin (pinned in the test extra) writes typed stubs of the gRPC
services (``*_pb2_grpc.pyi``), so mypy checks every call through a generated stub and every servicer.

Usage: python protos/generate.py [--check]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "protos"
PACKAGE_DIR = Path("modelshare") / "v1"
TARGET = ROOT / "common" / "federation" / "pb"
HEADER = '"""Generated from protos/modelshare/v1 by protos/generate.py; do not edit."""\n'


def generate(out: Path) -> None:
    """Write the generated modules (with rewritten imports) into ``out``."""
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    plugin = (shutil.which("protoc-gen-mypy_grpc", path=str(Path(sys.executable).parent))
              or shutil.which("protoc-gen-mypy_grpc"))
    if plugin is None:
        raise SystemExit("protoc-gen-mypy_grpc is not installed; install the test extra: pip install '.[test]'")
    with tempfile.TemporaryDirectory() as raw:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            f"--grpc_python_out={raw}",
            f"--plugin=protoc-gen-mypy_grpc={plugin}",
            f"--mypy_grpc_out={raw}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        out.mkdir(parents=True, exist_ok=True)
        for src in sorted((Path(raw) / PACKAGE_DIR).iterdir()):
            text = re.sub(r"^from modelshare\.v1 import ", "from modelshare.common.federation.pb import ",
                          src.read_text(), flags=re.M)
            (out / src.name).write_text(text)
        (out / "__init__.py").write_text(HEADER)


def differences(committed: Path, fresh: Path) -> list[str]:
    """Names of files that differ, are missing, or are extra in ``committed``."""
    names = {p.name for p in committed.glob("*.py*")} | {p.name for p in fresh.glob("*.py*")}
    return sorted(
        n
        for n in names
        if not (committed / n).exists() or not (fresh / n).exists()
        or (committed / n).read_bytes() != (fresh / n).read_bytes()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed code is not current")
    args = parser.parse_args(argv)
    if not args.check:
        generate(TARGET)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        diff = differences(TARGET, Path(tmp))
    if diff:
        print(f"common/federation/pb is stale ({', '.join(diff)}); run: python protos/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
