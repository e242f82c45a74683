"""What every benchmark shares: the machine it ran on, and replacing its own section of RESULTS.md."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = "# Benchmark results\n\nRatios against a baseline measured in the same run.\n\n"


def machine() -> str:
    """Cores, CPU model, OS and Python version, for the line above each result table."""
    model = "unknown CPU"
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def write_section(heading: str, section: str) -> None:
    """Put ``section`` (starting with the ``heading`` line) in RESULTS.md in place of the old one, or append it."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    pattern = re.compile(re.escape(heading) + r"\n.*?(?=\n## |\Z)", re.DOTALL)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)
