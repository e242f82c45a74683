"""``state_dir/status.json``: the owner daemon's health record, written by the daemon and read by probes.

The daemon (`modelshare.owner_node.daemon`) rewrites the record after every poll and answer; ``modelshare
owner status`` reads it for a service manager or a monitoring check. Reading it must stay cheap
(a health probe runs every few seconds), so this module imports neither the daemon nor any
training code.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime, timezone
from pathlib import Path

from modelshare.common.files import atomic_write

__all__ = ["STATUS_FILE", "STATUS_FORMAT", "StatusFile", "read_status", "utc_now"]

log = logging.getLogger("modelshare.owner")

STATUS_FILE = "status.json"
STATUS_FORMAT = "modelshare.owner-status/1"


def utc_now() -> str:
    """Now, in UTC, as the ISO timestamp (milliseconds) every status record and answer line carries."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class StatusFile:
    """``state_dir/status.json``: what the daemon is doing, for ``modelshare owner status``.

    One JSON object, replaced atomically (temporary file, fsync, rename) on every change, so a
    reader sees the previous or the next version, never a part::

        format                "modelshare.owner-status/1"
        owner, miner          this owner's name and the miner address it dials
        pid, started_at       the daemon process and when it started
        updated_at            the last rewrite
        state                 starting | polling | answering | backing-off | stopped | revoked (final: the miner
                              refused this site as revoked; the daemon stopped polling)
        revoked_at            when the roster says this site was revoked (state "revoked" only)
        study                 the study being answered (state "answering"), else null
        last_contact_at       when the miner last answered a call (a poll or an answer), or null
        consecutive_failures  failed calls since then (0 when the last call succeeded)
        last_error, last_error_at   the last failed call's status and message
        last_outcome          {study_id, outcome, reason, at} of the last answer delivered or deferred
        last_decision         {study_id, kind, detail, at} of the last answer built: "submit" or "refuse",
                              and the local account the answer itself does not carry (a refusal's cause,
                              the encoded size of a release over the study's limit); it stays at the site
        pending               answers in the outbox not yet acknowledged
        gave_up               {study_id: the miner's status and message} of answers the miner rejected for
                              good (no resend can change its mind); kept in the outbox until a restart
        clock_skew_seconds    this site's clock minus the miner's, when the miner refuses every timestamp
                              of this site because the difference exceeds its window; null otherwise
        data_problems         {study_id: {error, attempts, next_retry_at}} of studies waiting for the local
                              table to become readable again (`modelshare.owner_node.training.DataUnavailable`)
        data_file             {path, problem, since} while the data file is missing or unreadable (looked at
                              on start and after every poll, study or not), else null

    Failing to write it is logged and otherwise ignored: health reporting never stops the daemon.
    """

    def __init__(self, state_dir: Path, *, owner: str, miner: str) -> None:
        self.path = Path(state_dir) / STATUS_FILE
        self._lock = threading.Lock()
        now = utc_now()
        self._data: dict[str, object] = {
            "format": STATUS_FORMAT, "owner": owner, "miner": miner, "pid": os.getpid(), "started_at": now,
            "updated_at": now, "state": "starting", "study": None, "last_contact_at": None,
            "consecutive_failures": 0, "last_error": None, "last_error_at": None, "last_outcome": None,
            "last_decision": None, "pending": 0, "gave_up": {}, "clock_skew_seconds": None, "data_problems": {},
            "data_file": None,
        }
        self._write()

    @property
    def data(self) -> dict[str, object]:
        """A copy of the current record."""
        with self._lock:
            return dict(self._data)

    def update(self, **changes: object) -> None:
        """Merge ``changes`` into the record and rewrite the file (unless they change nothing)."""
        with self._lock:
            if all(self._data.get(key) == value for key, value in changes.items()):
                return
            self._data.update(changes, updated_at=utc_now())
            self._write()

    def contact(self, **changes: object) -> None:
        """The miner answered a call: record it and clear the failure count."""
        self.update(last_contact_at=utc_now(), consecutive_failures=0, **changes)

    def failure(self, error: str, **changes: object) -> None:
        """A call to the miner failed with ``error``."""
        with self._lock:  # read and increment under one hold, so concurrent failures are all counted
            # the ignore below: an int, as this class writes it
            failures = int(self._data["consecutive_failures"]) + 1  # type: ignore[call-overload]
            self._data.update(changes, consecutive_failures=failures, last_error=error, last_error_at=utc_now(),
                              updated_at=utc_now())
            self._write()

    def _write(self) -> None:
        try:
            atomic_write(self.path, (json.dumps(self._data, indent=2) + "\n").encode("utf-8"), mode=0o644)
        except OSError as exc:
            log.warning("cannot write the status file %s: %s", self.path, exc)


def read_status(state_dir: Path) -> dict[str, object] | None:
    """The status record a daemon keeps in ``state_dir`` (the fields `StatusFile` lists), or None when there is none.

    Raises
    ------
    ValueError
        The file exists but is not a status record.
    """
    path = Path(state_dir) / STATUS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a status file: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != STATUS_FORMAT:
        raise ValueError(f"{path}: not a status file (format {STATUS_FORMAT!r})")
    return data
