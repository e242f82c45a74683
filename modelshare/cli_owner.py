"""`modelshare owner serve` (the owner daemon), `owner check` (a policy preview), `owner status` (health).

``owner check`` answers, before a study is ever announced, whether this site would take part:
it runs the site's policy on the study file and reads the local table with the study's schema
(header and values), without training anything or contacting the miner. Exit status: 0 the
site would answer with a model, 1 it would refuse, 2 the config or study file is unusable.

``owner status`` reports the daemon's health for a service manager or a monitoring check, from
the status file the daemon keeps in its state directory (`owner_node.daemon.StatusFile`); it
contacts nobody. Exit status: 0 healthy, 1 not running or unhealthy, 2 the config is unusable.

``owner budget`` shows the site's privacy-budget ledger (`owner_node.budget`): the epsilon and
delta each release spent, their sums, and what the policy's lifetime caps leave.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import grpc
from rich.table import Table

from common.federation.pb import federation_pb2 as fpb
from common.federation.study import StudyError, describe_spec, load_study_file, spec_schema
from modelshare.cli_common import err, out
from modelshare.logs import configure_logging
from owner_node.budget import Ledger, LedgerError
from owner_node.config import OwnerConfig, OwnerConfigError
from owner_node.daemon import (
    POLL_GRACE_SECONDS,
    POLL_WAIT_SECONDS,
    OwnerDaemon,
    read_status,
)
from owner_node.training import LocalDataError, load_local_table

__all__ = ["add_parsers", "budget_report", "check_study", "cmd_budget", "cmd_check", "cmd_serve", "cmd_status", "owner_health"]

_UNSETTLED = ("deferred", "gave-up")
DEFAULT_MAX_AGE = 3 * (POLL_WAIT_SECONDS + POLL_GRACE_SECONDS)  # a connected daemon polls at least this often


def _serve_once(daemon: OwnerDaemon, stop: threading.Event) -> int:
    """Resend the outbox and answer one Poll round; 1 when an answer is still unacknowledged."""
    outcomes = [*daemon.resend_outbox(stop), *daemon.run_once(POLL_WAIT_SECONDS, stop)]
    for o in outcomes:
        out.print(f"{o.study_id}\t{o.outcome}\t{o.reason}", highlight=False)
    return 1 if any(o.outcome in _UNSETTLED for o in outcomes) else 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the daemon until SIGTERM or SIGINT (or one round with ``--once``)."""
    config = OwnerConfig.load(args.config)
    configure_logging(json_lines=args.log_json)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with OwnerDaemon(config, insecure=args.insecure) as daemon:
            if args.once:
                return _serve_once(daemon, stop)
            daemon.run(stop)
            return 0
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") else "error"
        details = exc.details() if hasattr(exc, "details") else str(exc)
        err.print(f"[red]error:[/] miner {config.miner} ({config.miner_name}): {code}: {details}", highlight=False)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _data_problem(config: OwnerConfig, spec: fpb.StudySpec) -> tuple[int | None, str | None]:
    """Rows the local table yields under the study's schema, or the full (local) reason it cannot."""
    try:
        X, _ = load_local_table(config, spec_schema(spec))
    except LocalDataError as exc:
        return None, str(exc)
    return int(X.shape[0]), None


def check_study(config: OwnerConfig, study: Path) -> dict[str, Any]:
    """The preview `owner check` prints: decision, every reason, and what the local table yields."""
    spec = load_study_file(study).spec
    reasons = config.policy.check(spec, config.miner_name)
    over = Ledger(config.state_dir).over_cap(spec, config.policy.lifetime_epsilon, config.policy.lifetime_delta)
    if over is not None:
        reasons.append(over)
    rows, problem = _data_problem(config, spec)
    if problem is not None:
        reasons.append(problem)
    return {
        "study": describe_spec(spec),
        "miner": config.miner_name,
        "accept": not reasons,
        "reasons": reasons,
        "data": {"path": str(config.data_path), "rows": rows},
    }


def cmd_check(args: argparse.Namespace) -> int:
    """Preview whether the site's policy and data would let it answer a study with a model."""
    try:
        config = OwnerConfig.load(args.config)
        result = check_study(config, args.study)
    except (OwnerConfigError, StudyError, LedgerError) as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    elif result["accept"]:
        out.print(f"accept: {config.name} would answer study {result['study']['id']} with an "
                  f"{result['study']['mechanism']} release of {result['data']['rows']} rows", highlight=False)
    else:
        out.print(f"refuse: {config.name} would refuse study {result['study']['id']}:", highlight=False)
        for reason in result["reasons"]:
            out.print(f"  - {reason}", highlight=False)
    return 0 if result["accept"] else 1


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
    """Judge a status record (`owner_node.daemon.StatusFile`): (healthy, one-line reason).

    Healthy: the daemon's process runs, it has not stopped, its last call to the miner did not
    fail, and the miner answered it within ``max_age`` seconds (or, just started, it is within
    ``max_age`` of its start), or it is busy answering a study (training may take long).
    """
    if status is None:
        return False, "not running: no status file (the daemon has not started with this state directory)"
    pid, state = status.get("pid"), status.get("state")
    if state == "stopped":
        return False, f"stopped at {status.get('updated_at')}"
    if not alive(pid):
        return False, f"not running: process {pid} is gone (last update {status.get('updated_at')}, state {state})"
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
    """Report the daemon's health from its status file; exit 0 when healthy (for service managers)."""
    try:
        config = OwnerConfig.load(args.config)
        status = read_status(config.state_dir)
    except (OwnerConfigError, ValueError, OSError) as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return 2
    healthy, reason = owner_health(status, now=datetime.now(timezone.utc), max_age=args.max_age)
    record = status or {}
    report = {"name": config.name, "healthy": healthy, "reason": reason, "state": record.get("state"),
              "pid": record.get("pid"), "miner": config.miner, "started_at": record.get("started_at"),
              "updated_at": record.get("updated_at"), "last_contact_at": record.get("last_contact_at"),
              "consecutive_failures": record.get("consecutive_failures"), "last_error": record.get("last_error"),
              "last_outcome": record.get("last_outcome"), "pending": record.get("pending"),
              "status_file": str(config.state_dir / "status.json")}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        out.print(f"{config.name}: {'healthy' if healthy else 'UNHEALTHY'}: {reason}", highlight=False)
        last = record.get("last_outcome")
        if isinstance(last, dict):
            out.print(f"  last answer: study {last.get('study_id')} {last.get('outcome')} at {last.get('at')}"
                      + (f" ({last.get('reason')})" if last.get("reason") else ""), highlight=False)
    return 0 if healthy else 1


def budget_report(config: OwnerConfig) -> dict[str, Any]:
    """What `owner budget` prints: every charge, the totals, the lifetime caps and what is left."""
    ledger = Ledger(config.state_dir)
    (eps, delta), policy = ledger.spent, config.policy
    left = {"epsilon": None if policy.lifetime_epsilon is None else max(policy.lifetime_epsilon - eps, 0.0),
            "delta": None if policy.lifetime_delta is None else max(policy.lifetime_delta - delta, 0.0)}
    return {"name": config.name, "ledger": str(ledger.path), "charges": [dataclasses.asdict(c) for c in ledger.charges],
            "spent": {"epsilon": eps, "delta": delta},
            "cap": {"epsilon": policy.lifetime_epsilon, "delta": policy.lifetime_delta}, "left": left}


def cmd_budget(args: argparse.Namespace) -> int:
    """Show the site's privacy-budget ledger: what each release spent, the totals and the caps."""
    try:
        report = budget_report(OwnerConfig.load(args.config))
    except (OwnerConfigError, LedgerError) as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    table = Table(title=f"privacy budget of {report['name']} ({report['ledger']})")
    for column in ("study", "mechanism", "requirement", "epsilon", "delta", "at"):
        table.add_column(column, justify="right" if column in ("epsilon", "delta") else "left")
    for c in report["charges"]:
        table.add_row(c["study_id"], c["mechanism"], c["requirement"], f"{c['epsilon']:g}", f"{c['delta']:.3g}", c["at"])
    spent, cap, left = report["spent"], report["cap"], report["left"]
    table.add_row("spent", "", "", f"{spent['epsilon']:g}", f"{spent['delta']:.3g}", "", style="bold")

    def limit(value: float | None, fmt: str) -> str:
        return "no cap" if value is None else format(value, fmt)

    table.add_row("lifetime cap", "", "", limit(cap["epsilon"], "g"), limit(cap["delta"], "g"), "")
    table.add_row("left", "", "", limit(left["epsilon"], "g"), limit(left["delta"], ".3g"), "")
    out.print(table)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `owner serve`, `owner check` and `owner status`."""
    owner = sub.add_parser("owner", help="the data owner: run the daemon, or preview the policy on a study")
    owner_sub = owner.add_subparsers(dest="owner_command", required=True)

    serve = owner_sub.add_parser("serve", help="dial out to the miner and answer studies until SIGTERM/SIGINT")
    serve.add_argument("--config", type=Path, required=True, help="owner.toml of this owner's kit")
    serve.add_argument("--insecure", action="store_true",
                       help="plaintext channel without TLS, for debugging only")
    serve.add_argument("--once", action="store_true",
                       help="resend the outbox, answer one poll round and exit (1 if an answer is unacknowledged)")
    serve.add_argument("--log-json", action="store_true", help="log JSON lines instead of text")
    serve.set_defaults(func=cmd_serve)

    check = owner_sub.add_parser("check", help="would this site answer STUDY.toml? (no training, no miner)")
    check.add_argument("study", type=Path, help="study file (study.toml)")
    check.add_argument("--config", type=Path, required=True, help="owner.toml of this owner's kit")
    check.add_argument("--json", action="store_true", help="print machine-readable JSON")
    check.set_defaults(func=cmd_check)

    status = owner_sub.add_parser("status", help="is this site's daemon healthy? (exit 0 when it is; for service "
                                                 "managers; reads the daemon's status file, contacts nobody)")
    status.add_argument("--config", type=Path, required=True, help="owner.toml of this owner's kit")
    status.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE, metavar="SECONDS",
                        help="unhealthy when the miner has not answered for this long (default %(default)s)")
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")
    status.set_defaults(func=cmd_status)

    budget = owner_sub.add_parser("budget", help="what this site's releases have spent of its privacy budget "
                                                 "(epsilon, delta) and what its lifetime cap leaves")
    budget.add_argument("--config", type=Path, required=True, help="owner.toml of this owner's kit")
    budget.add_argument("--json", action="store_true", help="print machine-readable JSON")
    budget.set_defaults(func=cmd_budget)
