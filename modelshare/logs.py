"""Logging for the long-running nodes: readable text by default, JSON lines for log shippers."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

__all__ = ["FIELDS", "configure_logging"]


#: Structured fields a record may carry (``log.info(..., extra={...})``); JSON lines keep them as keys.
FIELDS = ("study", "owner", "outcome")


class _JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the `FIELDS` it carries, and any exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({f: getattr(record, f) for f in FIELDS if getattr(record, f, None) is not None})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(*, json_lines: bool = False, level: int = logging.INFO) -> None:
    """Send the ``modelshare`` loggers to stderr, as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines() if json_lines
                         else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("modelshare")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
