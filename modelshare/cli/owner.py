"""`modelshare owner serve` (the owner daemon), `owner check` (a policy preview), `owner budget` (the ledger).

``owner status``, the health probe, is `modelshare.cli.owner_status`: it must start fast, so it
does not import this module's daemon and training code.

``owner check`` answers, before a study is ever announced, whether this site would take part:
it runs the site's policy on the study file and reads the local table with the study's schema
(header and values), without training anything or contacting the miner. Exit status: 0 the
site would answer with a model, 1 it would refuse, 2 the config or study file is unusable.

``owner budget`` shows the site's privacy-budget ledger (`modelshare.owner_node.budget`): every release of the
table with its kind, the epsilon and delta each spent, their sums, what the policy's lifetime caps
leave, and, plainly, whether non-DP releases of the table exist (which the caps cannot bound).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import threading
from pathlib import Path
from typing import Any

import grpc

from modelshare.cli.common import add_json, err, out, titled_table
from modelshare.common.federation.study import load_study_file
from modelshare.common.study import Study
from modelshare.logs import configure_logging
from modelshare.owner_node.budget import Ledger, non_dp_note
from modelshare.owner_node.config import OwnerConfig
from modelshare.owner_node.daemon import POLL_WAIT_SECONDS, OwnerDaemon
from modelshare.owner_node.training import LocalDataError, LocalTable, fits_domain, load_local_table

__all__ = ["budget_report", "check_study", "cmd_budget", "cmd_check", "cmd_serve", "configure_budget",
           "configure_check", "configure_serve"]

_UNSETTLED = ("deferred", "gave-up")


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
            print(f"modelshare owner {config.name}: dialling the miner {config.miner_name} at {config.miner}; "
                  f"state in {config.state_dir}" + (" (one round)" if args.once else ""), flush=True)
            if (problem := daemon.watch_data_file()) is not None:
                print(f"modelshare owner {config.name}: {problem}; waiting for it (`owner status` shows the wait)",
                      flush=True)
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


def _data_problem(config: OwnerConfig, study: Study) -> tuple[LocalTable | None, str | None]:
    """The local table under the study's schema (fitted into its domain for a dp or dps study, as the daemon
    does), or the full (local) reason it cannot be read."""
    try:
        return load_local_table(config, study.schema, fit_domain=fits_domain(study.mechanism)), None
    except LocalDataError as exc:
        return None, str(exc)


def check_study(config: OwnerConfig, study: Path) -> dict[str, Any]:
    """The preview `owner check` prints: decision, every reason, and what the local table yields."""
    decoded = load_study_file(study).study
    ledger = Ledger(config.state_dir)
    reasons = config.policy.check(decoded, config.miner_name, ledger)
    over = ledger.over_cap(decoded, config.policy.lifetime_epsilon, config.policy.lifetime_delta)
    if over is not None:
        reasons.append(over)
    table, problem = _data_problem(config, decoded)
    if problem is not None:
        reasons.append(problem)
    fit = None if table is None else table.fitted
    fitted = fit.describe() if fit is not None and fit.changed else None  # a dp or dps study only
    return {
        "study": decoded.describe(),
        "miner": config.miner_name,
        "accept": not reasons,
        "reasons": reasons,
        "data": {"path": str(config.data_path), "rows": None if table is None else int(table.X.shape[0]),
                 "dropped_rows": None if table is None else table.dropped, "missing": config.missing,
                 "domain_fit": fitted},
    }


def cmd_check(args: argparse.Namespace) -> int:
    """Preview whether the site's policy and data would let it answer a study with a model.

    An unusable config or study file raises (OwnerConfigError, StudyError, LedgerError: all
    ValueErrors), which `modelshare.cli.main` reports with exit status 2.
    """
    config = OwnerConfig.load(args.config)
    result = check_study(config, args.study)
    if args.json:
        print(json.dumps(result, indent=2))
    elif result["accept"]:
        out.print(f"accept: {config.name} would answer study {result['study']['id']} with an "
                  f"{result['study']['mechanism']} release of {result['data']['rows']} rows"
                  + (f" ({result['data']['dropped_rows']} row(s) with a missing value dropped)"
                     if result["data"]["dropped_rows"] else "")
                  + (f"; fitted to the schema's domain: {result['data']['domain_fit']}"
                     if result["data"]["domain_fit"] else ""), highlight=False)
    else:
        out.print(f"refuse: {config.name} would refuse study {result['study']['id']}:", highlight=False)
        for reason in result["reasons"]:
            out.print(f"  - {reason}", highlight=False)
    return 0 if result["accept"] else 1


def budget_report(config: OwnerConfig) -> dict[str, Any]:
    """What `owner budget` prints: every release (with its kind), the totals, the lifetime caps and what is
    left, the non-DP releases' study ids and the note that says they exist, and the mixing policy."""
    ledger = Ledger(config.state_dir)
    (eps, delta), policy = ledger.spent, config.policy
    left = {"epsilon": None if policy.lifetime_epsilon is None else max(policy.lifetime_epsilon - eps, 0.0),
            "delta": None if policy.lifetime_delta is None else max(policy.lifetime_delta - delta, 0.0)}
    return {"name": config.name, "ledger": str(ledger.path), "charges": [dataclasses.asdict(c) for c in ledger.charges],
            "spent": {"epsilon": eps, "delta": delta},
            "cap": {"epsilon": policy.lifetime_epsilon, "delta": policy.lifetime_delta}, "left": left,
            "non_dp_releases": [c.study_id for c in ledger.non_dp], "note": non_dp_note(ledger),
            "mix_dp_with_non_dp": policy.mix_dp_with_non_dp}


def cmd_budget(args: argparse.Namespace) -> int:
    """Show the site's privacy-budget ledger: what each release spent, the totals and the caps (exit 2: unusable)."""
    report = budget_report(OwnerConfig.load(args.config))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    table = titled_table(f"privacy budget of {report['name']} ({report['ledger']})")
    for column in ("study", "mechanism", "kind", "requirement", "epsilon", "delta", "at"):
        table.add_column(column, justify="right" if column in ("epsilon", "delta") else "left",
                         no_wrap=column == "study", overflow="fold")  # it also names the rows "lifetime cap" and "left"
    for c in report["charges"]:
        table.add_row(c["study_id"], c["mechanism"], c["kind"], c["requirement"], f"{c['epsilon']:g}",
                      f"{c['delta']:.3g}", c["at"])
    spent, cap, left = report["spent"], report["cap"], report["left"]
    table.add_row("spent", "", "", "", f"{spent['epsilon']:g}", f"{spent['delta']:.3g}", "", style="bold")

    def limit(value: float | None, fmt: str) -> str:
        return "no cap" if value is None else format(value, fmt)

    table.add_row("lifetime cap", "", "", "", limit(cap["epsilon"], "g"), limit(cap["delta"], "g"), "")
    table.add_row("left", "", "", "", limit(left["epsilon"], "g"), limit(left["delta"], ".3g"), "")
    out.print(table)
    if report["note"] is not None:
        mixing = "allows" if report["mix_dp_with_non_dp"] else "refuses"
        out.print(f"note: {report['note']}; this site's policy {mixing} mixing DP and non-DP releases "
                  f"(mix_dp_with_non_dp = {str(report['mix_dp_with_non_dp']).lower()})", highlight=False)
    return 0


def _config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, required=True, help="owner.toml of this owner's kit")


def configure_serve(serve: argparse.ArgumentParser) -> None:
    """`owner serve --config owner.toml`."""
    _config(serve)
    serve.add_argument("--insecure", action="store_true",
                       help="plaintext channel without TLS, for debugging only")
    serve.add_argument("--once", action="store_true",
                       help="resend the outbox, answer one poll round and exit (1 if an answer is unacknowledged)")
    serve.add_argument("--log-json", action="store_true", help="log JSON lines instead of text")
    serve.set_defaults(func=cmd_serve)


def configure_check(check: argparse.ArgumentParser) -> None:
    """`owner check STUDY.toml --config owner.toml`."""
    check.add_argument("study", type=Path, help="study file (study.toml)")
    _config(check)
    add_json(check, "the decision, every reason and what the local table yields")
    check.set_defaults(func=cmd_check)


def configure_budget(budget: argparse.ArgumentParser) -> None:
    """`owner budget --config owner.toml`."""
    _config(budget)
    add_json(budget, "every release with its kind, the totals, the caps, what is left and the non-DP releases")
    budget.set_defaults(func=cmd_budget)
