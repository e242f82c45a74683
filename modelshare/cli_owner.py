"""`modelshare owner serve` (the owner daemon) and `modelshare owner check` (a policy preview).

``owner check`` answers, before a study is ever announced, whether this site would take part:
it runs the site's policy on the study file and reads the local table with the study's schema
(header and values), without training anything or contacting the miner. Exit status: 0 the
site would answer with a model, 1 it would refuse, 2 the config or study file is unusable.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import grpc

from common.pb import federation_pb2 as fpb
from common.study import StudyError, describe_spec, load_study_file, spec_schema
from modelshare.cli_common import err, out
from owner_node.config import OwnerConfig, OwnerConfigError
from owner_node.daemon import POLL_WAIT_SECONDS, OwnerDaemon
from owner_node.training import LocalDataError, load_local_table

__all__ = ["add_parsers", "check_study", "cmd_check", "cmd_serve"]

_UNSETTLED = ("deferred", "gave-up")


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _serve_once(daemon: OwnerDaemon, stop: threading.Event) -> int:
    """Resend the outbox and answer one Poll round; 1 when an answer is still unacknowledged."""
    outcomes = [*daemon.resend_outbox(stop), *daemon.run_once(POLL_WAIT_SECONDS, stop)]
    for o in outcomes:
        out.print(f"{o.study_id}\t{o.outcome}\t{o.reason}", highlight=False)
    return 1 if any(o.outcome in _UNSETTLED for o in outcomes) else 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the daemon until SIGTERM or SIGINT (or one round with ``--once``)."""
    config = OwnerConfig.load(args.config)
    _configure_logging()
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
    except (OwnerConfigError, StudyError) as exc:
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `owner serve` and `owner check`."""
    owner = sub.add_parser("owner", help="the data owner: run the daemon, or preview the policy on a study")
    owner_sub = owner.add_subparsers(dest="owner_command", required=True)

    serve = owner_sub.add_parser("serve", help="dial out to the miner and answer studies until SIGTERM/SIGINT")
    serve.add_argument("--config", type=Path, required=True, help="owner.toml of this owner's kit")
    serve.add_argument("--insecure", action="store_true",
                       help="plaintext channel without TLS, for debugging only")
    serve.add_argument("--once", action="store_true",
                       help="resend the outbox, answer one poll round and exit (1 if an answer is unacknowledged)")
    serve.set_defaults(func=cmd_serve)

    check = owner_sub.add_parser("check", help="would this site answer STUDY.toml? (no training, no miner)")
    check.add_argument("study", type=Path, help="study file (study.toml)")
    check.add_argument("--config", type=Path, required=True, help="owner.toml of this owner's kit")
    check.add_argument("--json", action="store_true", help="print machine-readable JSON")
    check.set_defaults(func=cmd_check)
