"""`modelshare owner status`: is this site's owner daemon healthy? For service managers and monitoring.

It reads the status file the daemon keeps in its state directory (`modelshare.owner_node.status.StatusFile`)
and contacts nobody. Exit status: 0 healthy, 1 not running or unhealthy, 2 the config or the
status file is unusable. A health probe runs every few seconds, so this module imports neither
the daemon nor any training code; the owner's config (`modelshare.owner_node.config`, which imports pandas
through the policy's schema) is imported only when the probe runs, not to build its parser.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from modelshare.cli.common import add_json, out
from modelshare.owner_node.status import STATUS_FILE, read_status

__all__ = ["DEFAULT_MAX_AGE", "cmd_status", "configure", "owner_health"]

# A connected daemon polls at least this often: three of its poll rounds, each the poll's hold
# time plus its grace (`modelshare.owner_node.daemon.POLL_WAIT_SECONDS` + `POLL_GRACE_SECONDS`; a test keeps
# the two in step without this module importing the daemon).
DEFAULT_MAX_AGE = 45.0


def _age(when: object, now: datetime) -> float | None:
    """Seconds from the ISO timestamp ``when`` to ``now``; None when absent or unreadable."""
    if not isinstance(when, str):
        return None
    try:
        moment = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (now - moment).total_seconds()


def _alive(pid: object) -> bool:
    """Whether process ``pid`` exists (in this PID namespace)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, run by another user
        return True
    return True


def owner_health(status: dict[str, Any] | None, *, now: datetime, max_age: float,
                 alive: Any = _alive) -> tuple[bool, str]:
    """Judge a status record (`modelshare.owner_node.status.StatusFile`): (healthy, one-line reason).

    Healthy: the daemon's process runs, it has not stopped, its data file is there to read, its last
    call to the miner did not fail, and the miner answered it within ``max_age`` seconds (or, just started, it is within
    ``max_age`` of its start), or it is busy answering a study (training may take long).
    """
    if status is None:
        return False, "not running: no status file (the daemon has not started with this state directory)"
    pid, state = status.get("pid"), status.get("state")
    if state == "stopped":
        return False, f"stopped at {status.get('updated_at')}"
    if state == "revoked":
        return False, ("revoked: the miner refuses this site (revoked at "
                       f"{status.get('revoked_at')}); the daemon stopped "
                       "polling for good; ask the project for a new kit")
    if not alive(pid):
        return False, f"not running: process {pid} is gone (last update {status.get('updated_at')}, state {state})"
    skew = status.get("clock_skew_seconds")
    if isinstance(skew, (int, float)):
        side = "ahead of" if skew > 0 else "behind"
        return False, (f"clock skew: this site's clock is {abs(skew):.0f} s {side} the miner's, beyond its window, so "
                       "the miner refuses every answer; set the clock right (NTP)")
    problems = status.get("data_problems") or {}
    if problems:
        study, problem = next(iter(sorted(problems.items())))
        return False, (f"the local table cannot be read for study {study} (attempt {problem.get('attempts')}, next "
                       f"at {problem.get('next_retry_at')}): {problem.get('error')}")
    data_file = status.get("data_file")
    if isinstance(data_file, dict):
        return False, (f"waiting for the data file: {data_file.get('problem')} (since {data_file.get('since')}); "
                       "the daemon runs and polls, and a study waits for the file until a minute before its deadline")
    failures = status.get("consecutive_failures") or 0
    if failures:
        since = status.get("last_contact_at") or "its start"
        return False, (f"cannot reach the miner {status.get('miner')}: {failures} failed call(s) since {since}; "
                       f"last error at {status.get('last_error_at')}: {status.get('last_error')}")
    if state == "answering":
        return True, f"answering study {status.get('study')} (since {status.get('updated_at')})"
    contact = _age(status.get("last_contact_at"), now)
    if contact is None:
        started = _age(status.get("started_at"), now)
        if started is not None and started <= max_age:
            return True, f"starting: waiting for the first answer of the miner {status.get('miner')}"
        return False, f"no answer from the miner {status.get('miner')} since the start at {status.get('started_at')}"
    if contact > max_age:
        return False, f"stale: the miner last answered {contact:.0f} s ago (more than {max_age:.0f} s)"
    return True, f"polling the miner {status.get('miner')} (last answer {contact:.0f} s ago)"


def cmd_status(args: argparse.Namespace) -> int:
    """Report the daemon's health from its status file; exit 0 when healthy (for service managers).

    An unusable config or status file raises (a ValueError or OSError): `modelshare.cli.main` exits 2.
    """
    from modelshare.owner_node.config import OwnerConfig  # the module docstring says why here

    config = OwnerConfig.load(args.config)
    status = read_status(config.state_dir)
    healthy, reason = owner_health(status, now=datetime.now(timezone.utc), max_age=args.max_age)
    record = status or {}
    report = {"name": config.name, "healthy": healthy, "reason": reason, "state": record.get("state"),
              "pid": record.get("pid"), "miner": config.miner, "started_at": record.get("started_at"),
              "updated_at": record.get("updated_at"), "last_contact_at": record.get("last_contact_at"),
              "consecutive_failures": record.get("consecutive_failures"), "last_error": record.get("last_error"),
              "last_outcome": record.get("last_outcome"), "last_decision": record.get("last_decision"),
              "pending": record.get("pending"), "gave_up": record.get("gave_up") or {},
              "clock_skew_seconds": record.get("clock_skew_seconds"), "data_problems": record.get("data_problems")
              or {}, "data_file": record.get("data_file"), "status_file": str(config.state_dir / STATUS_FILE)}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        out.print(f"{config.name}: {'healthy' if healthy else 'UNHEALTHY'}: {reason}", highlight=False)
        last = record.get("last_outcome")
        if isinstance(last, dict):
            out.print(f"  last answer: study {last.get('study_id')} {last.get('outcome')} at {last.get('at')}"
                      + (f" ({last.get('reason')})" if last.get("reason") else ""), highlight=False)
        decision = record.get("last_decision")
        if isinstance(decision, dict):
            out.print(f"  last decision: study {decision.get('study_id')} {decision.get('kind')} "
                      f"at {decision.get('at')}: {decision.get('detail')}", highlight=False)
        gave_up = record.get("gave_up")
        for study, why in sorted(gave_up.items() if isinstance(gave_up, dict) else ()):
            out.print(f"  gave up on study {study} until a restart: {why}", highlight=False)
    return 0 if healthy else 1


def configure(status: argparse.ArgumentParser) -> None:
    """`owner status --config owner.toml`."""
    status.add_argument("--config", type=Path, required=True, help="owner.toml of this owner's kit")
    status.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE, metavar="SECONDS",
                        help="unhealthy when the miner has not answered for this long (default %(default)s)")
    add_json(status, "the health report")
    status.set_defaults(func=cmd_status)
