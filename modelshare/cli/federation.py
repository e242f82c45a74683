"""`modelshare miner serve | verify-log | status | sites |
dashboard` and `modelshare study create | status | results | list`.

``study status --follow`` runs `modelshare.cli.study_control.follow_status`; ``study wait`` and ``study cancel``
are there too. Both modules call the miner through `modelshare.cli.miner_calls`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from modelshare.admin import (
    AdminConfig,
    admin_stub,
    auc_text,
    results_dict,
    settings_text,
    sites_dict,
    status_dict,
    study_headline,
    write_results,
)
from modelshare.cli.common import add_json, err, out
from modelshare.cli.miner_calls import CALL_TIMEOUT, print_status, resolve_study, rpc
from modelshare.cli.study_control import follow_status
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.common.federation.study import load_study_file
from modelshare.common.mechanisms import registry
from modelshare.common.trees.readable import grouped
from modelshare.dashboard import dashboard_pages
from modelshare.logs import configure_logging
from modelshare.miner_node.config import MinerConfig
from modelshare.miner_node.server import start_miner
from modelshare.miner_node.store import StoreError, verify_log
from modelshare.report_html import study_report, write_report

__all__ = [
    "cmd_miner_dashboard",
    "cmd_miner_serve",
    "cmd_miner_sites",
    "cmd_miner_status",
    "cmd_miner_verify_log",
    "cmd_study_create",
    "cmd_study_list",
    "cmd_study_results",
    "cmd_study_status",
    "configure_miner_dashboard",
    "configure_miner_serve",
    "configure_miner_sites",
    "configure_miner_status",
    "configure_miner_verify_log",
    "configure_study_create",
    "configure_study_list",
    "configure_study_results",
    "configure_study_status",
]

# --------------------------------------------------------------------- miner
def cmd_miner_serve(args: argparse.Namespace) -> int:
    configure_logging(json_lines=args.log_json)
    config = MinerConfig.load(args.config)
    stop = threading.Event()  # before the ready file exists: a SIGTERM as soon as it does is a clean stop
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        miner = start_miner(config, mechanisms=registry.names(), insecure=args.insecure,
                            dashboard_pages=dashboard_pages)
    except StoreError as exc:  # an unwritable or full state directory: say so, no traceback
        raise OSError(str(exc)) from None
    print(f"modelshare miner {config.name}: serving on port {miner.port} "
          f"({'INSECURE plaintext' if args.insecure else 'mutual TLS'}), state in {config.state_dir}", flush=True)
    if miner.dashboard is not None:
        print(f"web dashboard on {miner.dashboard.base_url} (admin only: `modelshare miner dashboard --config "
              "admin.toml` prints a sign-in URL)", flush=True)
    while not stop.wait(0.5):  # woken now and then: a signal another thread took runs its handler here
        pass
    err.print("stopping the miner")
    miner.stop()
    return 0


def cmd_miner_verify_log(args: argparse.Namespace) -> int:
    state_dir = args.state_dir if args.state_dir is not None else MinerConfig.load(args.config).state_dir
    try:
        verdict = verify_log(state_dir)
    except StoreError as exc:  # unreadable here (a read-only copy with its write-ahead log, a corrupt file): say so
        raise OSError(str(exc)) from None
    if args.json:
        print(json.dumps({"ok": verdict.ok, "entries": verdict.entries, "problems": list(verdict.problems)}, indent=2))
    elif verdict.ok:
        out.print(f"audit log intact: {verdict.entries} entries, hash chain and head verified")
    else:
        err.print(f"[red]audit log FAILED verification[/] ({verdict.entries} entries):", highlight=False)
        for problem in verdict.problems:
            err.print(f"  - {problem}", highlight=False)
    return 0 if verdict.ok else 1


def cmd_miner_status(args: argparse.Namespace) -> int:
    config = AdminConfig.load(args.config)
    channel, _ = admin_stub(config)
    with channel:
        reply = rpc(lambda: fgrpc.MinerStub(channel).Health(fpb.HealthRequest(), timeout=args.timeout), config.miner)
    health = {"status": reply.status, "name": reply.name, "open_studies": reply.open_studies,
              "submissions": reply.submissions}
    print(json.dumps(health) if args.json else f"{reply.name}: {reply.status}, {reply.open_studies} open studies, "
          f"{reply.submissions} submissions stored")
    return 0 if reply.status == "serving" else 1


# --------------------------------------------------------------------- study
def list_table(rows: list[dict[str, Any]]) -> Table:
    """`study list`'s table: one row per study (a `status_dict`), its answers counted."""
    table = Table("study", "state", "mechanism", "requirement", "answers", "deadline")
    table.columns[0].overflow = table.columns[3].overflow = "fold"
    for r in rows:
        answered = sum(a["state"] != "waiting" for a in r["answers"])
        table.add_row(r["id"], r["state"], r["mechanism"], r["requirement"] or "",
                      f"{answered}/{len(r['answers'])}", r["deadline"])
    return table


def results_renderables(status: dict[str, Any], results: dict[str, Any]) -> list[Any]:
    """What `study results` prints: the study's headline (as `study status` has it) and the models' scores."""
    models = results["models"]
    if any("rmse" in m for m in models):  # a regression study: errors on the target's scale
        table = Table("global model", "train rows", "RMSE", "MAE")
        for m in models:
            table.add_row(m["model"], grouped(m["train_rows"]), f"{m['rmse']:.4f}" if "rmse" in m else "",
                          f"{m['mae']:.4f}" if "mae" in m else "")
    else:
        two_class = any(m.get("auc") is not None for m in models)  # AUC: two-class studies only
        table = Table("global model", "train rows", "accuracy", *(["AUC"] if two_class else []), "hyperparameters")
        for m in models:
            auc = [auc_text(m)] if two_class else []
            table.add_row(m["model"], grouped(m["train_rows"]), "" if m["accuracy"] is None else f"{m['accuracy']:.4f}",
                          *auc, settings_text(m))
    lines = [Text(study_headline(status)), table]
    if results.get("off_path"):
        lines.append(Text(f"PGEN off-path values: {results['off_path']}"))
    if results.get("on_path"):
        lines.append(Text(f"PGEN on-path values: {results['on_path']}"))
    if results.get("reader"):  # a miner from before the reader, or a study with no path release, sends none
        lines.append(Text(f"privacy: {results['reader']['summary']}"))
    return [*lines, Text(engine_line(results))]


def engine_line(results: dict[str, Any]) -> str:
    """Which engine learned the global models and, when the miner kept it, where the study's pseudo-data is."""
    line = f"global models learned on the {results.get('engine', 'local')} engine"
    if results.get("pseudo_data"):
        line += f"; pseudo-data (Parquet) on the miner's host in {results['pseudo_data']}"
    return line


def copy_pseudo_data(results: fpb.StudyResults, out: Path) -> Path | None:
    """Copy the study's Parquet pseudo-data into ``out/pseudo-data`` when the miner's directory is reachable here.

    None when it is not (another host: `engine_line` names where it is); ValueError when the study kept none
    (the local engine pools pseudo-data in memory and keeps no files).
    """
    if not results.pseudo_data:
        raise ValueError(f"study {results.study_id} kept no pseudo-data files: it ran on the local engine "
                         '(the miner keeps Parquet pseudo-data with [mining] engine = "dask")')
    source = Path(results.pseudo_data)
    if not source.is_dir():
        return None
    target = out / "pseudo-data"
    shutil.copytree(source, target, dirs_exist_ok=True)
    return target


def cmd_study_create(args: argparse.Namespace) -> int:
    study = load_study_file(args.study)
    config = AdminConfig.load(args.config)
    request = fpb.CreateStudyRequest(spec=study.spec)
    if study.evaluation is not None:
        request.evaluation_csv = study.evaluation.read_bytes()
    channel, stub = admin_stub(config)
    with channel:
        status = rpc(lambda: stub.CreateStudy(request, timeout=CALL_TIMEOUT), config.miner)
    data = status_dict(status)
    print(json.dumps(data, indent=2)) if args.json else print_status(data)
    return 0


def cmd_study_status(args: argparse.Namespace) -> int:
    if args.follow:
        return follow_status(args)
    config = AdminConfig.load(args.config)
    channel, stub = admin_stub(config)
    with channel:
        study_id = resolve_study(stub, args.id, config.miner)
        status = rpc(lambda: stub.GetStudy(fpb.StudyRef(study_id=study_id), timeout=CALL_TIMEOUT), config.miner)
    data = status_dict(status)
    print(json.dumps(data, indent=2)) if args.json else print_status(data)
    return 0


def cmd_study_list(args: argparse.Namespace) -> int:
    config = AdminConfig.load(args.config)
    channel, stub = admin_stub(config)
    with channel:
        reply = rpc(lambda: stub.ListStudies(fpb.ListStudiesRequest(), timeout=CALL_TIMEOUT), config.miner)
    rows = [status_dict(s) for s in reply.studies]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    out.print(list_table(rows))
    return 0


def cmd_study_results(args: argparse.Namespace) -> int:
    config = AdminConfig.load(args.config)
    channel, stub = admin_stub(config)
    with channel:
        ref = fpb.StudyRef(study_id=resolve_study(stub, args.id, config.miner))
        status = rpc(lambda: stub.GetStudy(ref, timeout=CALL_TIMEOUT), config.miner)
        results = rpc(lambda: stub.GetResults(ref, timeout=CALL_TIMEOUT), config.miner)
    written = write_results(results, status, args.out)
    written.append(write_report(study_report(status, results, made_by="modelshare study results"), args.out))
    copied = copy_pseudo_data(results, args.out) if args.pseudo_data else None
    if copied is not None:
        written.append(copied)
    if args.json:
        print(json.dumps({**results_dict(results), **({"pseudo_data_copy": str(copied)} if copied else {})}, indent=2))
        return 0
    for renderable in results_renderables(status_dict(status), results_dict(results)):
        out.print(renderable)
    err.print("wrote " + ", ".join(str(p) for p in written))
    return 0


# -------------------------------------------------------------------- parsers
def configure_miner_serve(serve: argparse.ArgumentParser) -> None:
    """`miner serve --config miner.toml`."""
    serve.add_argument("--config", type=Path, required=True, help="miner.toml from the miner's kit")
    serve.add_argument("--insecure", action="store_true", help="plaintext, no client authentication (debugging only)")
    serve.add_argument("--log-json", action="store_true", help="log JSON lines instead of text")
    serve.set_defaults(func=cmd_miner_serve)


def configure_miner_verify_log(verify: argparse.ArgumentParser) -> None:
    """`miner verify-log (--config miner.toml | --state-dir DIR)`."""
    where = verify.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=Path, help="miner.toml (its state_dir is checked)")
    where.add_argument("--state-dir", type=Path, help="the miner's state directory")
    add_json(verify, "the verdict, the entries and every problem")
    verify.set_defaults(func=cmd_miner_verify_log)


def configure_miner_status(status: argparse.ArgumentParser) -> None:
    """`miner status --config admin.toml`."""
    status.add_argument("--config", type=Path, required=True, help="admin.toml (or any kit config with [admin])")
    status.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the miner (default 5)")
    add_json(status, "the miner's health")
    status.set_defaults(func=cmd_miner_status)


def configure_miner_sites(sites: argparse.ArgumentParser) -> None:
    """`miner sites --config admin.toml`."""
    sites.add_argument("--config", type=Path, required=True, help="admin.toml from the admin's kit")
    add_json(sites, "every site: owner, state, last poll, version, health, revoked_at")
    sites.set_defaults(func=cmd_miner_sites)


def cmd_miner_sites(args: argparse.Namespace) -> int:
    config = AdminConfig.load(args.config)
    channel, stub = admin_stub(config)
    with channel:
        reply = rpc(lambda: stub.ListSites(fpb.ListSitesRequest(), timeout=CALL_TIMEOUT), config.miner)
    data = sites_dict(reply)
    if args.json:
        print(json.dumps(data))
        return 0
    sites = data["sites"]
    table = Table("owner", "state", "last poll", "version", "health")
    for s in sites:
        table.add_row(s["owner"], s["state"] + (f" ({s['revoked_at']})" if s["revoked_at"] else ""),
                      s["last_poll_at"] or "never", s["version"] or "-", s["health"] or "-")
    out.print(table)
    return 0


def configure_miner_dashboard(dashboard: argparse.ArgumentParser) -> None:
    """`miner dashboard --config admin.toml`."""
    dashboard.add_argument("--config", type=Path, required=True, help="admin.toml from the admin's kit")
    add_json(dashboard, "the sign-in URL and when it expires")
    dashboard.set_defaults(func=cmd_miner_dashboard)


def cmd_miner_dashboard(args: argparse.Namespace) -> int:
    config = AdminConfig.load(args.config)
    channel, stub = admin_stub(config)
    with channel:
        reply = rpc(lambda: stub.OpenDashboard(fpb.OpenDashboardRequest(), timeout=CALL_TIMEOUT), config.miner)
    url = dashboard_url(reply.url, config.miner)
    expires = reply.expires_at.ToJsonString()
    if args.json:
        print(json.dumps({"url": url, "expires_at": expires}))
        return 0
    print(url)
    err.print(f"open it once, before {expires}: it signs this browser in (a session cookie) and is then used up")
    return 0


def dashboard_url(url: str, miner: str) -> str:
    """The sign-in URL as the miner made it, its host replaced by the miner's (as the admin dials it) when the
    dashboard listens on every address ("0.0.0.0", "[::]")."""
    scheme, _, rest = url.partition("://")
    host_port, slash, path = rest.partition("/")
    host, _, port = host_port.rpartition(":")
    if host in ("0.0.0.0", "[::]", ""):
        host = miner.rpartition(":")[0]
    return f"{scheme}://{host}:{port}{slash}{path}"


def _admin_options(p: argparse.ArgumentParser, report: str) -> None:
    p.add_argument("--config", type=Path, required=True, help="admin.toml from the admin's kit")
    add_json(p, report)


def configure_study_create(create: argparse.ArgumentParser) -> None:
    """`study create STUDY.toml --config admin.toml`."""
    create.add_argument("study", type=Path, help="study file (study.toml)")
    _admin_options(create, "the created study's state")
    create.set_defaults(func=cmd_study_create)


def configure_study_status(status: argparse.ArgumentParser) -> None:
    """`study status ID [--follow] --config admin.toml`."""
    status.add_argument("id", help="the study's id, a start of it that names one study, or 'latest'")
    status.add_argument("--follow", action="store_true",
                        help="then print one line per change (state, answers per owner) until the study is done, "
                             "failed or cancelled; plain timestamped lines when stdout is not a terminal (with --json: "
                             "the lines on stderr, the final state as the one JSON document)")
    _admin_options(status, "the study's state and every owner's answer")
    status.set_defaults(func=cmd_study_status)


def configure_study_results(results: argparse.ArgumentParser) -> None:
    """`study results ID --out DIR --config admin.toml`."""
    results.add_argument("id", help="the study's id, a start of it that names one study, or 'latest'")
    results.add_argument("--out", type=Path, required=True,
                         help="directory for results.json, model files, predictions.csv and report.html")
    results.add_argument("--pseudo-data", action="store_true",
                         help="also copy the study's Parquet pseudo-data (engine dask) into OUT/pseudo-data when the "
                              "miner's state directory is reachable from here; otherwise say where it is on the miner")
    _admin_options(results, "the results (every global model's scores)")
    results.set_defaults(func=cmd_study_results)


def configure_study_list(lst: argparse.ArgumentParser) -> None:
    """`study list --config admin.toml`."""
    _admin_options(lst, "every study's state")
    lst.set_defaults(func=cmd_study_list)
