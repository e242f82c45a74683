"""`modelshare simulate`: a whole federation on one machine, over the deployment's code paths.

It splits a table into a held-out test part and one private table per owner, provisions a
throw-away CA and kits (exactly as ``modelshare provision`` does), starts ``modelshare miner
serve`` and one ``modelshare owner serve`` per owner as separate processes talking gRPC over
mutual TLS on loopback, creates one study as the admin, waits for it, and compares the miner's
global models with BASIS models trained here on the pooled raw training rows (which only a
simulation can see), each set by the study's setting for it as the miner's is (`fitted_basis`:
``auto`` cross-validates the same grid on the raw training rows, never the held-out ones; the
local engine's grid, also under ``--engine dask``); the released trees' vote (``tree-vote``) is
compared with the vote of the owners' trees trained without the privacy mechanism (`basis_model`). Every wait has a
deadline; a process that dies or stalls is named with the tail of its log. Processes are always stopped, also
on Ctrl-C (they are sent SIGTERM once the results are fetched and reaped after the BASIS comparison,
so their shutdown overlaps it), and the directory is removed unless ``--keep-dir`` is given (it then
holds the kits, the owners' tables, study.toml and every log).

On Linux the parties are forked from a fork server (`modelshare.forkserver`), started first so that it
imports the miner's and the owners' code while the tables are dealt: each party is still a process of
its own, in its own session, reading its own config, keys, TLS identity and store and writing its own
log, as a ``modelshare miner serve`` or ``modelshare owner serve`` started by hand would; only the
interpreter's start-up and imports (about 1.5 s of CPU per party) are paid once. Elsewhere each party
is a new interpreter (``python -m modelshare.cli``).

The study's quorum is one owner: it is mined from every owner that released a model once all have
answered, and each refusal is reported with its reason code (an owner whose release would carry no
rows refuses with ``empty-release``). When no owner released anything, the study fails and so does
``simulate`` (exit status 1), naming every refusing owner with a hint per reason.

``--task regression`` runs a regression study on ``--data FILE --target COLUMN``: the target's
public bounds come from ``--target-range LOW,HIGH`` (or from a ``--schema`` file that says
``task = "regression"``, which implies the task), the owners release DiffPETs regression
forests (``--mechanism diffpets``, the only mechanism that can) and the miner's regression global
models (``regression-tree``, ``random-forest``) are compared with BASIS by RMSE and MAE.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from modelshare.admin import AdminConfig, admin_stub, reader_dict, settings_text, status_dict, study_headline
from modelshare.cli.common import (
    CommandFailed,
    add_global_models,
    add_json,
    add_max_depth,
    add_model_settings,
    add_off_path,
    add_on_path,
    add_owners,
    add_seed,
    add_test_fraction,
    err,
    note_dropped,
    out,
    positive_int,
    progress_step,
    target_range,
    titled_table,
)
from modelshare.cli.inputs import (
    DEFAULT_MECHANISM,
    add_admissible_options,
    add_learner,
    add_release_options,
    add_table_source,
    load_encoded,
    resolve_admissible,
    resolve_disclosure,
    resolve_learner,
    resolve_requirement,
    warn_data_derived,
)
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.data.task import (
    CLASSIFICATION_TASK,
    REGRESSION_TASK,
    TASKS,
    load_regression_table,
    load_schema,
    task_of,
)
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.common.federation.serde import parameter_from_pb, study_to_pb
from modelshare.common.federation.study import load_study_file
from modelshare.common.federation.wire import tree_from_pb
from modelshare.common.files import atomic_write
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.class_prior import DEFAULT_PRIOR_SHARE
from modelshare.common.mechanisms.diffpets import MECHANISM as DIFFPETS
from modelshare.common.mechanisms.registry import regression_refusal
from modelshare.common.mechanisms.train_release import train_and_release
from modelshare.common.privacy.accuracy_bound import cl_hit_miss_bound
from modelshare.common.privacy.requirements import CLDiversity, parse_requirement
from modelshare.common.study import Study
from modelshare.common.trees.learner_options import admissible_params
from modelshare.common.trees.metrics import accuracy, class_match, mae, path_match, rmse
from modelshare.common.trees.readable import grouped
from modelshare.common.trees.tree import Disclosure
from modelshare.forkserver import Forked, ForkServer, ForkServerError
from modelshare.legend import legend_lines, pseudo_data_name
from modelshare.miner_node.config import ENGINES
from modelshare.miner_node.dask_engine import EngineError, check_models
from modelshare.miner_node.global_models import (
    CLASSIFICATION_MODELS,
    REGRESSION_MODELS,
    RELEASE_MODELS,
    build_release_model,
    make_global_model,
    make_regression_model,
)
from modelshare.miner_node.selection import Choice, choose_basis
from modelshare.miner_node.server import read_ready
from modelshare.miner_node.tasks import two_class_auc
from modelshare.pipeline import stratified_parts
from modelshare.provision import issue_throwaway_federation, set_miner_port
from modelshare.report_html import study_report, write_report
from modelshare.simulate_hints import refusal_hints, study_settings, whole_table_hints

__all__ = ["DealtTables", "configure", "cmd_simulate", "deal_tables", "owner_names", "SimulationError"]

STUDY_ID = "simulate"
TASK_MECHANISM = {CLASSIFICATION_TASK: DEFAULT_MECHANISM, REGRESSION_TASK: DIFFPETS}  # DiffPETs: the regression release
DEFAULT_MODELS = {CLASSIFICATION_TASK: ["decision-tree", "naive-bayes"],
                  REGRESSION_TASK: ["regression-tree", "random-forest"]}
#: PGEN's off-path draws (`modelshare.miner_node.offpath`); regression has no classes to condition on.
DEFAULT_OFF_PATH = {CLASSIFICATION_TASK: "uniform", REGRESSION_TASK: "uniform"}
MODELS = {CLASSIFICATION_TASK: CLASSIFICATION_MODELS, REGRESSION_TASK: tuple(REGRESSION_MODELS)}


class SimulationError(CommandFailed):
    """A simulated party failed or stalled; the message names it and shows its log's tail (exit status 1)."""


@dataclass
class Party:
    """A started process: its name, handle (spawned, or forked by the fork server) and log file."""

    name: str
    process: subprocess.Popen[bytes] | Forked
    log: Path

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:]) or "(empty log)"


def _spawn(name: str, args: list[str], log: Path, server: ForkServer | None) -> Party:
    """Start ``modelshare ARGS`` as party ``name``: forked by ``server``, or without one a new interpreter."""
    if server is not None:
        try:
            return Party(name, server.fork(args, log), log)
        except ForkServerError as exc:
            raise SimulationError(f"{name} could not be started: {exc}") from None
    handle = open(log, "wb")
    process = subprocess.Popen([sys.executable, "-m", "modelshare.cli", *args], stdout=handle, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    handle.close()
    return Party(name, process, log)


def _terminate(parties: list[Party]) -> None:
    """SIGTERM everyone still running; `_reap` waits for them."""
    for p in parties:
        if p.process.poll() is None:
            p.process.send_signal(signal.SIGTERM)


def _reap(parties: list[Party]) -> None:
    """Wait briefly for everyone `_terminate` signalled, SIGKILL whoever is left."""
    deadline = time.monotonic() + 10
    for p in parties:
        try:
            p.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.process.kill()
            p.process.wait()


def start_fork_server(logs: Path) -> ForkServer | None:
    """The fork server the parties are forked from (`modelshare.forkserver`), on Linux; None elsewhere, where each
    party is a new interpreter (fork without exec is not safe after macOS's system libraries are loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    logs.mkdir(parents=True, exist_ok=True)
    return ForkServer(logs / "forkserver.log")


def _check_alive(parties: list[Party]) -> None:
    for p in parties:
        code = p.process.poll()
        if code is not None:
            raise SimulationError(f"{p.name} exited with status {code}; its log ends with:\n{p.tail()}")


def _wait_ready(miner: Party, state_dir: Path, timeout: float) -> int:
    """Wait until the miner has written its ready file (it binds first), or fail naming it; the port it bound."""
    deadline = time.monotonic() + timeout
    while (ready := read_ready(state_dir)) is None or ready["pid"] != miner.process.pid:
        _check_alive([miner])
        if time.monotonic() > deadline:
            raise SimulationError(f"timed out after {timeout:.0f} s waiting for the miner to serve; its log "
                                  f"ends with:\n{miner.tail()}")
        time.sleep(0.05)
    return int(ready["port"])


def _study_toml(args: argparse.Namespace, schema_file: Path, requirement: str | None, owners: list[str]) -> str:
    """study.toml for the simulated study (`modelshare.common.federation.study`), relative to its directory."""
    release = {"mechanism": args.mechanism, "disclosure": args.disclosure}
    release |= {"requirement": requirement} if requirement is not None else {}
    release |= {"prior_share": args.prior_share} if registry.get(args.mechanism).family == "dp" else {}
    training = {"learner": args.learner, "min_samples_leaf": args.min_samples_leaf, **args.admissible}
    training |= {"max_depth": args.max_depth} if args.max_depth else {}
    return tomli_w.dumps({
        "study": {"id": STUDY_ID, "title": "modelshare simulate", "owners": owners, "quorum": 1,
                  "deadline_minutes": round(args.timeout / 60, 3), "seed": args.seed},
        "schema": {"file": schema_file.name},
        "release": release,
        "training": training,
        "mining": {"global_models": list(args.models), "pgen_scale": args.pgen_scale, "off_path": args.off_path,
                   **({"on_path": args.on_path} if args.on_path else {}), "evaluation": "test.csv"},
        **({"global_models": dict(args.model_settings)} if args.model_settings else {}),
    })


def _source_task(args: argparse.Namespace) -> tuple[str, Schema | RegressionSchema | None]:
    """The task the flags ask for, and the ``--schema`` file's schema (None without one).

    The task is ``--task``, else the one the schema file declares, else regression when
    ``--target`` names a target, else classification; flags that contradict it are refused.
    """
    schema = load_schema(args.schema) if args.schema is not None else None
    declared = None if schema is None else task_of(schema)
    if args.task is not None and declared is not None and args.task != declared:
        raise ValueError(f"--task {args.task} contradicts --schema {args.schema}, which declares task {declared!r}")
    task = args.task or declared or (REGRESSION_TASK if args.target else CLASSIFICATION_TASK)
    if task != REGRESSION_TASK and args.target_range is not None:
        raise ValueError("--target-range gives a regression target's public bounds; it needs --task regression")
    if task != REGRESSION_TASK and args.target:
        raise ValueError("--target names a regression target; it needs --task regression "
                         "(a classification table names its class with --class-column)")
    return task, schema


def _load_regression(args: argparse.Namespace,
                     schema: RegressionSchema | None) -> tuple[RegressionSchema, np.ndarray, np.ndarray, str]:
    """The regression table of ``--data`` and its ``--target``, bounded by ``--target-range`` or the schema file."""
    if args.data is None or args.dataset is not None:
        raise ValueError("--task regression needs --data FILE with --target COLUMN (the bundled datasets are "
                         "classification tables)")
    if args.class_column:
        raise ValueError("--class-column names a class; a regression table names its numeric target with --target")
    if not args.target:
        raise ValueError(f"--task regression needs --target: the numeric target column of {args.data}")
    if (schema is None) == (args.target_range is None):
        raise ValueError("--task regression needs the target's public bounds from exactly one of --target-range "
                         "LOW,HIGH and a --schema file with task = \"regression\"")
    table = load_regression_table(args.data, args.target, schema=schema, target_range=args.target_range)
    note_dropped(table.source, table.dropped_rows)
    return table.schema, table.X, table.y, table.source


def _infer_flags(args: argparse.Namespace, schema: Schema | RegressionSchema) -> str:
    """The `schema infer` flags that draft this table's schema: its class, or its target and public range."""
    if isinstance(schema, RegressionSchema):
        return f"--target {schema.target.name} --target-range {schema.target.low:g},{schema.target.high:g}"
    return f"--class-column {schema.class_name}"


def _task_defaults(args: argparse.Namespace, task: str, schema: Schema | RegressionSchema) -> None:
    """Fill ``--mechanism``, ``--disclosure`` and ``--global-models``
    for the task; refuse what it cannot do, naming the flag."""
    args.mechanism = args.mechanism or TASK_MECHANISM[task]
    args.disclosure = resolve_disclosure(args.mechanism, args.disclosure)
    args.learner = resolve_learner(args.mechanism, args.learner)
    args.admissible = resolve_admissible(args)
    args.models = args.models or list(DEFAULT_MODELS[task])
    args.off_path = args.off_path or DEFAULT_OFF_PATH[task]
    if task == REGRESSION_TASK and args.off_path != "uniform":
        raise ValueError(f"--off-path {args.off_path} draws by class; a regression study's PGEN draws uniformly")
    if task == REGRESSION_TASK and args.on_path not in (None, "uniform"):
        raise ValueError(f"--on-path {args.on_path} draws by class; a regression study's PGEN draws uniformly")
    if isinstance(schema, RegressionSchema) and (why := regression_refusal(args.mechanism, schema.target.name)):
        raise ValueError(f"--mechanism: {why}")
    wrong = [m for m in args.models if m not in MODELS[task]]
    if wrong:
        raise ValueError(f"--global-models: {wrong} are not {task} models; choose from {', '.join(MODELS[task])}")
    if args.engine == "dask":  # the miner's engine refuses these by name, but only once every owner has trained
        try:
            check_models(args.models)
        except EngineError as exc:
            raise ValueError(f"--global-models with --engine dask: {exc}") from None
    record = registry.get(args.mechanism)
    if schema.data_derived and record.whole_release:
        if args.schema is not None:
            raise ValueError(f"--mechanism {args.mechanism} makes {record.family} releases, whose guarantee needs a "
                             f"public domain, and --schema {args.schema} is still marked domain = \"data-derived\" "
                             "(a draft of `modelshare schema infer`, read from rows): the miner refuses such a study. "
                             f"Review {args.schema} and delete its line domain = \"data-derived\"")
        raise ValueError(f"--mechanism {args.mechanism} makes {record.family} releases, whose guarantee needs a public "
                         f"domain, and --data has no --schema: the ranges and categories would be read from the "
                         "rows, and the miner refuses such a study. Draft a schema with `modelshare schema infer "
                         f"{args.data} {_infer_flags(args, schema)}`, review it, and pass --schema")


def owner_names(count: int) -> list[str]:
    """The simulated owners' names: owner-1 .. owner-``count``."""
    return [f"owner-{i + 1}" for i in range(count)]


@dataclass(frozen=True)
class DealtTables:
    """A table dealt by `deal_tables`: the held-out rows, each training row's owner, each owner's file and row count."""

    test: np.ndarray
    """True for a held-out row of the table (written to test.csv)."""
    parts: np.ndarray
    """For each training row (the rows not held out, in order), the index of its owner in ``owners``."""
    data: dict[str, tuple[str, str]]
    """Owner -> (its table's path, the class or target column), as `issue_throwaway_federation` takes them."""
    rows: dict[str, int]
    """Owner -> how many training rows it got."""


def deal_tables(schema: Schema | RegressionSchema, X: np.ndarray, y: np.ndarray, owners: list[str], root: Path, *,
                test_fraction: float, seed: int) -> DealtTables:
    """Hold out ``test_fraction`` of the rows and deal the rest to ``owners``, both stratified by class (by target
    for a regression table), seeded by ``seed``; write ``root/data/<owner>.csv``, ``root/test.csv`` and
    ``root/schema.json``."""
    rng = np.random.default_rng(seed)
    test = stratified_parts(y, round(1 / test_fraction), rng) == 0
    parts = stratified_parts(y[~test], len(owners), rng)
    X_train, y_train = X[~test], y[~test]
    data: dict[str, tuple[str, str]] = {}
    rows: dict[str, int] = {}
    for i, owner in enumerate(owners):
        path = root / "data" / f"{owner}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        schema.decode(X_train[parts == i], y_train[parts == i]).to_csv(path, index=False)
        data[owner] = (str(path), schema.class_name)
        rows[owner] = int((parts == i).sum())
    schema.decode(X[test], y[test]).to_csv(root / "test.csv", index=False)
    schema.save(root / "schema.json")
    return DealtTables(test, parts, data, rows)


def prepare(args: argparse.Namespace, root: Path) -> tuple[Schema | RegressionSchema, dict[str, Any]]:
    """Write the owners' tables, the test table, the schema, study.toml and the kits under ``root``.

    The returned data holds the split (``X_train`` .. ``y_test``, each owner's ``parts`` and ``rows``)
    and the ``study`` as study.toml gives it to the miner.

    A regression table is split like a classification one (`stratified_parts` deals the rows
    sorted by target, so every part spans the target's range).
    """
    task, declared = _source_task(args)
    schema: Schema | RegressionSchema
    if task == REGRESSION_TASK:
        schema, X, y, source = _load_regression(args, declared if isinstance(declared, RegressionSchema) else None)
    else:
        table = load_encoded(args)
        schema, source, X, y = table.schema, table.source, table.X, table.y
    _task_defaults(args, task, schema)
    if schema.data_derived:
        warn_data_derived(schema, source, args.schema)
    owners = owner_names(args.owners)
    dealt = deal_tables(schema, X, y, owners, root, test_fraction=args.test_fraction, seed=args.seed)
    test, parts, data, rows = dealt.test, dealt.parts, dealt.data, dealt.rows
    requirement = resolve_requirement(args.mechanism, args.requirement)
    record = registry.get(args.mechanism)
    if record.whole_release:
        args.max_depth = args.max_depth or record.default_max_depth
    atomic_write(root / "study.toml", _study_toml(args, root / "schema.json", requirement, owners))
    study = load_study_file(root / "study.toml").study  # checked before any process starts
    policy: dict[str, Any] = {"mechanisms": [args.mechanism], "disclosures": [args.disclosure], "miners": ["miner"]}
    parsed = None if requirement is None else parse_requirement(requirement)
    if isinstance(parsed, CLDiversity) and parsed.per_leaf:  # the user asked for the per-leaf promise
        policy["per_leaf_diversity"] = True
    kits = issue_throwaway_federation(root / "kits", owners=owners, address="localhost:0",
                                      owner_data=data, policy=policy)
    return schema, {"X_train": X[~test], "y_train": y[~test], "X_test": X[test], "y_test": y[test], "rows": rows,
                    "parts": parts, "study": study,
                    "kits": kits, "source": source, "requirement": requirement, "task": task}


def _table_hints(schema: Schema | RegressionSchema, data: Mapping[str, Any], disclosure: Disclosure) -> list[str]:
    """`simulate_hints.whole_table_hints` for the owners' tables `prepare` dealt (none for a regression study)."""
    if isinstance(schema, RegressionSchema):
        return []
    return whole_table_hints(data["requirement"], disclosure, data["y_train"], data["parts"], list(data["rows"]),
                             schema.n_classes)


def mining_table(miner_toml: Path, engine: str, workers: int | None) -> None:
    """Append the miner's ``[mining]`` table for ``--engine
    dask``: a LocalCluster of ``workers`` processes on loopback."""
    if engine == "local":
        return
    text = miner_toml.read_text()
    atomic_write(miner_toml, text + f'\n[mining]\nengine = "dask"\nworkers = {workers or 2}\n')


def run_federation(root: Path, study: Study, kits: dict[str, Path], owners: list[str], timeout: float,
                   table_hints: Sequence[str] = (), server: ForkServer | None = None,
                   parties: list[Party] | None = None) -> tuple[fpb.StudyStatus, fpb.StudyResults]:
    """Start the miner and the owners, create ``study``, wait for it, return its status and results.

    ``table_hints`` (`simulate_hints.whole_table_hints`) follow the refusal hints when the study fails.
    With a ``server`` (`start_fork_server`) the parties are forked from it, else each is a new interpreter.
    Every party is sent SIGTERM on the way out; given a ``parties`` list, the started parties are added to it
    and the caller `_reap`s them (so that their shutdown overlaps its own work), else they are reaped here.
    """
    reap = parties is None
    parties = [] if parties is None else parties
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    try:
        if server is not None:
            try:
                server.wait_ready(timeout)
            except ForkServerError as exc:
                raise SimulationError(str(exc)) from None
        miner = _spawn("miner", ["miner", "serve", "--config", str(kits["miner"] / "miner.toml")], logs / "miner.log",
                       server)
        parties.append(miner)
        port = _wait_ready(miner, kits["miner"] / "state", timeout)
        set_miner_port(kits.values(), port)  # it bound port 0
        progress_step(f"simulate: the miner serves on port {port}")
        for owner in owners:
            parties.append(_spawn(owner, ["owner", "serve", "--config", str(kits[owner] / "owner.toml")],
                                  logs / f"{owner}.log", server))
        progress_step(f"simulate: started {len(owners)} owner processes ({', '.join(owners)})")
        request = fpb.CreateStudyRequest(spec=study_to_pb(study), evaluation_csv=(root / "test.csv").read_bytes())
        channel, stub = admin_stub(AdminConfig.load(kits["admin"] / "admin.toml"))
        with channel:
            stub.CreateStudy(request, timeout=30)
            progress_step(f"simulate: created study {STUDY_ID}")
            status = _wait_study(stub, parties, owners, timeout)
            if status.state != "done":
                raise SimulationError(_failure(status),
                                      hints=[*refusal_hints(status, study_settings(study)), *table_hints])
            results = stub.GetResults(fpb.StudyRef(study_id=STUDY_ID), timeout=30)
        return status, results
    finally:
        _terminate(parties)
        if reap:
            _reap(parties)


def _failure(status: fpb.StudyStatus) -> str:
    """A failed study in one line: its headline (as `study status` prints it), then each refusal's reason."""
    data = status_dict(status)
    refused = [f"{a['owner']} refused: {a['reason']}" for a in data["answers"] if a["state"] == "refused"]
    return "; ".join([study_headline(data), *refused])


def _wait_study(stub: fgrpc.StudyAdminStub, parties: list[Party], owners: list[str], timeout: float) -> fpb.StudyStatus:
    """The study's final status; a progress bar on a terminal, else one line per change (`progress_step`)."""
    deadline = time.monotonic() + timeout
    seen: tuple[str, int] | None = None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("owners answered", total=len(owners))
        while True:
            status = stub.GetStudy(fpb.StudyRef(study_id=STUDY_ID), timeout=10)
            answered = sum(o.state != "waiting" for o in status.owners)
            progress.update(task, completed=answered,
                            description="mining" if status.state == "mining" else "owners answered")
            if seen != (status.state, answered):
                seen = (status.state, answered)
                progress_step(f"simulate: study {status.state}, {answered} of {len(owners)} owners answered")
            if status.state in ("done", "failed", "cancelled"):
                return status
            _check_alive(parties)
            if time.monotonic() > deadline:
                waiting = [o.owner_id for o in status.owners if o.state == "waiting"]
                who = [p for p in parties if p.name in waiting] or [parties[0]]
                raise SimulationError(
                    f"timed out after {timeout:.0f} s with the study {status.state}; waiting for "
                    f"{', '.join(waiting) or 'the miner'}. Log of {who[0].name}:\n{who[0].tail()}"
                )
            time.sleep(0.2)


def compare(schema: Schema, data: dict[str, Any], results: fpb.StudyResults,
            args: argparse.Namespace) -> list[dict[str, Any]]:
    """BASIS against the miner's models: accuracy (AUC for two classes), class match, path match.

    BASIS is `fitted_basis` for a model fitted on pseudo-data, with the hyperparameters it used
    (``basis_parameters``, ``basis_selection``), and `basis_model` for one built from the releases;
    a model without a BASIS (`basis_model` says when) has None for every comparison with it.
    """
    rows = []
    by_name = {m.name: m for m in results.models}
    two_class = schema.n_classes == 2
    for name in args.models:
        if name in RELEASE_MODELS:
            basis, choice = basis_model(name, schema, data, args), None
        else:
            basis, choice = fitted_basis(name, schema, data)
        basis_pred = None if basis is None else np.asarray(basis.predict(data["X_test"]))
        mined = by_name[name]
        pred = np.asarray(mined.predictions, dtype=np.int64)
        row: dict[str, Any] = {
            "model": name, "basis_accuracy": None if basis_pred is None else accuracy(data["y_test"], basis_pred),
            "accuracy": mined.accuracy if len(pred) else None,
            **({"basis_auc": None if basis is None else two_class_auc(basis, data["X_test"], data["y_test"], 2),
                "auc": mined.auc if mined.HasField("auc") else None} if two_class else {}),
            "parameters": {k: parameter_from_pb(v) for k, v in sorted(mined.parameters.items())},
            "selection": mined.selection,
            "basis_parameters": None if choice is None else choice.parameters,
            "basis_selection": None if choice is None else choice.selection,
            "class_match": class_match(pred, basis_pred) if len(pred) and basis_pred is not None else None,
            "path_match": None, "train_rows": mined.train_rows}
        basis_tree = getattr(basis, "tree_", None)
        if mined.HasField("tree") and basis_tree is not None:
            row["path_match"] = path_match(tree_from_pb(mined.tree, schema), basis_tree, values=data["X_train"])
        rows.append(row)
    return rows


def fitted_basis(name: str, schema: Schema, data: dict[str, Any]) -> tuple[Any, Choice]:
    """Global model ``name`` fitted on the owners' pooled raw training rows, and the hyperparameters it used.

    They are set by the study's setting for the model (``data["study"]``), as the miner sets the model
    it fits on pseudo-data (`modelshare.miner_node.selection.choose_basis`: the same values, fixed rule or grid;
    ``auto`` cross-validated on the raw training rows), with the miner's seed; the held-out rows are
    never read here.
    """
    study = data["study"]

    def build(params: dict[str, Any]) -> Any:
        return make_global_model(name, schema, random_state=study.seed % (2**31), **params)

    choice = choose_basis(name, study.model_plan, data["X_train"], data["y_train"], build, regression=False)
    return build(choice.parameters).fit(data["X_train"], data["y_train"]), choice


def basis_model(name: str, schema: Schema, data: dict[str, Any], args: argparse.Namespace) -> Any | None:
    """Release model ``name`` as it would be without privacy, from the raw training rows only a simulation sees.

    A model built from the releases (`modelshare.miner_node.global_models.RELEASE_MODELS`, the trees' vote) is built
    from each owner's tree trained by the study's learner on the owner's raw rows with no requirement and
    full class counts, exactly what ``--mechanism none`` with the same ``--learner`` releases (the
    ``admissible`` learner then grows and prunes as it does with no requirement); None (no BASIS)
    under a whole-release mechanism, whose random trees have no version without the mechanism to train.
    """
    if registry.get(args.mechanism).whole_release:
        return None
    limits = {"min_samples_leaf": args.min_samples_leaf, **({"max_depth": args.max_depth} if args.max_depth else {}),
              **admissible_params(args.learner, **args.admissible)}
    releases = []
    for owner in range(args.owners):
        rows = data["parts"] == owner
        made = train_and_release("none", schema, data["X_train"][rows], data["y_train"][rows], requirement=None,
                                 disclosure="counts", learner=args.learner, learner_params=limits,
                                 max_depth=args.max_depth, seed=args.seed % (2**32))
        releases.append((made.release.classification_trees, None))
    return build_release_model(name, releases)


def compare_regression(data: dict[str, Any], results: fpb.StudyResults, models: list[str]) -> list[dict[str, Any]]:
    """BASIS (the regressor on the raw pooled rows, set by the study's setting as `fitted_basis` sets a classifier)
    against the miner's regression models: RMSE and MAE, and the hyperparameters each used."""
    rows = []
    by_name = {m.name: m for m in results.models}
    study = data["study"]
    for name in models:
        def build(params: dict[str, Any], name: str = name) -> Any:
            return make_regression_model(name, random_state=study.seed % (2**31), **params)

        choice = choose_basis(name, study.model_plan, data["X_train"], data["y_train"], build, regression=True)
        basis = build(choice.parameters).fit(data["X_train"], data["y_train"])
        predicted = np.asarray(basis.predict(data["X_test"]), dtype=np.float64)
        mined = by_name[name]
        scored = mined.HasField("rmse")
        rows.append({"model": name, "basis_rmse": rmse(data["y_test"], predicted),
                     "basis_mae": mae(data["y_test"], predicted), "rmse": mined.rmse if scored else None,
                     "mae": mined.mae if scored else None, "train_rows": mined.train_rows,
                     "parameters": {k: parameter_from_pb(v) for k, v in sorted(mined.parameters.items())},
                     "selection": mined.selection, "basis_parameters": choice.parameters,
                     "basis_selection": choice.selection})
    return rows


def requirement_bound(schema: Schema | RegressionSchema, data: dict[str, Any],
                      disclosure: str) -> dict[str, Any] | None:
    """The price of a hit/miss (c,l) requirement: an upper bound on any admissible tree's accuracy.

    Computed on the pooled training rows (every owner's rows together, which simulate holds in
    process; no owner computes it), so it bounds a single tree released over all of them
    (`modelshare.common.privacy.accuracy_bound`). None for any other requirement or disclosure.
    """
    if isinstance(schema, RegressionSchema) or disclosure != "hit_miss" or not data["requirement"]:
        return None
    parsed = parse_requirement(data["requirement"])
    if not isinstance(parsed, CLDiversity):
        return None
    bound = cl_hit_miss_bound(data["X_train"], data["y_train"], schema, parsed.c, parsed.l)
    return {**bound.to_dict(), "computed_on": "pooled training rows"}


def cmd_simulate(args: argparse.Namespace) -> int:
    if not 1 <= args.owners <= 10:
        raise ValueError(f"--owners must be between 1 and 10, got {args.owners}")
    if args.dask_workers is not None and args.engine != "dask":
        raise ValueError("--dask-workers applies to --engine dask")
    started = time.perf_counter()
    root = Path(args.keep_dir) if args.keep_dir else Path(tempfile.mkdtemp(prefix="modelshare-simulate-"))
    if args.keep_dir:
        if root.exists() and any(root.iterdir()):
            raise ValueError(f"--keep-dir {root} exists and is not empty; give a new directory")
        root.mkdir(parents=True, exist_ok=True)
    server = start_fork_server(root / "logs")  # it imports the parties' code while the tables are dealt
    parties: list[Party] = []
    try:
        schema, data = prepare(args, root)
        mining_table(data["kits"]["miner"] / "miner.toml", args.engine, args.dask_workers)
        owners = sorted(data["rows"])
        progress_step(f"simulate: split {data['source']} into {len(owners)} owners' tables and "
                      f"{data['y_test'].shape[0]} held-out rows; provisioned the kits in {root}")
        table_hints = _table_hints(schema, data, args.disclosure)
        status, results = run_federation(root, data["study"], data["kits"], owners, args.timeout, table_hints, server,
                                         parties)  # stopping while BASIS is trained here
        progress_step("simulate: fetched the results; training BASIS on the pooled rows to compare")
        if isinstance(schema, RegressionSchema):
            models = compare_regression(data, results, args.models)
        else:
            models = compare(schema, data, results, args)
    except SimulationError as exc:
        hints = list(exc.hints)
        if not args.keep_dir:
            hints.append("rerun with --keep-dir DIR to keep every log")
        raise SimulationError(f"simulate failed: {exc}", hints=hints) from None
    finally:
        _reap(parties)
        if server is not None:
            server.close()
        if not args.keep_dir:
            shutil.rmtree(root, ignore_errors=True)
    bound = requirement_bound(schema, data, args.disclosure)
    wall = time.perf_counter() - started
    owner_rows = [{"owner": o.owner_id, "rows": data["rows"][o.owner_id], "leaves": o.leaves, "claim": o.claim,
                   "audit_passed": o.audit_passed, "pseudo_rows": o.pseudo_rows, "learner": o.learner or None}
                  for o in results.owners]
    refusals = [{"owner": o.owner_id, "rows": data["rows"][o.owner_id], "reason": o.reason}
                for o in status.owners if o.state == "refused"]
    report = {"source": data["source"], "task": data["task"], "mechanism": args.mechanism, "refusals": refusals,
              "hints": [*refusal_hints(status, {"learner": args.learner, "mechanism": args.mechanism,
                                                "requirement": data["requirement"], "disclosure": args.disclosure}),
                        *table_hints],
              "requirement": data["requirement"],
              "disclosure": args.disclosure, "learner": None if registry.get(args.mechanism).whole_release
              else args.learner, "learner_options": args.admissible,
              "owners": owner_rows, "models": models,
              "test_rows": int(data["y_test"].shape[0]), "off_path": results.pgen_off_path,
              "on_path": results.pgen_on_path, "reader": reader_dict(results), "wall_seconds": wall,
              "engine": results.engine or "local", "requirement_bound": bound,
              "dir": str(root) if args.keep_dir else None}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    if args.report is not None:
        page = study_report(status, results, made_by="modelshare simulate", rows=data["rows"], basis=models,
                            source=data["source"])
        err.print(f"wrote {write_report(page, args.report)}", highlight=False)
    return 0


def _owners_table(report: dict[str, Any]) -> Table:
    """One row per owner: its release (leaves, claim, the miner's audit) or its refusal's reason."""
    claim = f" {report['requirement']}" if report["requirement"] else ""
    count = len(report["owners"]) + len(report["refusals"])
    owners = titled_table(f"{Path(report['source']).name}: {count} owners\n"
                          f"{report['mechanism']}{claim} ({report['disclosure']})")
    for col in ("owner", "rows", "leaves"):
        owners.add_column(col, no_wrap=True)
    owners.add_column("claim or refusal", overflow="fold")
    owners.add_column("audit", no_wrap=True)
    chose = any(o.get("learner") for o in report["owners"])
    if chose:
        owners.add_column("learner chosen", overflow="fold")

    def chosen(o: dict[str, Any]) -> tuple[str, ...]:
        return (o.get("learner") or "-",) if chose else ()

    rows = [(o["owner"], grouped(o["rows"]), grouped(o["leaves"]), o["claim"], "PASS" if o["audit_passed"] else "FAIL",
             *chosen(o)) for o in report["owners"]]
    rows += [(r["owner"], grouped(r["rows"]), "-", r["reason"], "refused", *chosen({})) for r in report["refusals"]]
    for row in sorted(rows):
        owners.add_row(*row)
    return owners


def _print(report: dict[str, Any]) -> None:
    out.print(_owners_table(report))
    for hint in report["hints"]:
        err.print(f"[yellow]note:[/] {hint}", highlight=False)
    fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    if report["task"] == REGRESSION_TASK:
        out.print(_regression_table(report, fmt))
    else:
        out.print(_models_table(report, fmt))
    for m in report["models"]:
        out.print(f"{m['model']} hyperparameters: {settings_text(m)}", highlight=False)
        if m.get("basis_selection"):  # a model fitted on pseudo-data: its BASIS was set by the same setting
            basis = settings_text({"parameters": m["basis_parameters"], "selection": m["basis_selection"]})
            out.print(f"{m['model']} BASIS hyperparameters: {basis}", highlight=False)
    bound = report.get("requirement_bound")
    if bound is not None:
        on = f"grouping {'+'.join(bound['attributes'])}" if bound["attributes"] else "leaf share cap"
        out.print(f"requirement bound {bound['accuracy']:.4f}: no tree meeting {bound['requirement']} (hit/miss) "
                  f"on the pooled training rows classifies more of them correctly ({on})", highlight=False)
    if report.get("off_path"):  # what the miner said it did (a report built by hand may not say)
        out.print(f"PGEN off-path values: {report['off_path']}", highlight=False)
    if report.get("on_path"):
        out.print(f"PGEN on-path values: {report['on_path']}", highlight=False)
    if report.get("reader"):
        out.print(f"privacy: {report['reader']['summary']}", highlight=False)
    out.print(f"wall time {report['wall_seconds']:.1f} s (miner and owners as separate processes, mTLS on loopback; "
              f"global models on the {report.get('engine', 'local')} engine)")
    out.print()
    for line in legend_lines(report):
        out.print(line, highlight=False)


def _models_table(report: dict[str, Any], fmt: Any) -> Table:
    """The classification models' table: BASIS and (P)PGEN accuracy, class match, path match."""
    table = titled_table(f"global models on {grouped(report['test_rows'])} held-out rows")
    table.add_column("global model", no_wrap=True)
    name = pseudo_data_name(report["mechanism"])
    two_class = any("auc" in m for m in report["models"])
    aucs = ("BASIS AUC", f"{name} AUC") if two_class else ()
    for col in ("BASIS accuracy", f"{name} accuracy", *aucs, "class match", "path match"):
        table.add_column(col)
    for m in report["models"]:
        auc = (fmt(m["basis_auc"]), fmt(m["auc"])) if two_class else ()
        table.add_row(m["model"], fmt(m["basis_accuracy"]), fmt(m["accuracy"]), *auc, fmt(m["class_match"]),
                      fmt(m["path_match"]))
    return table


def _regression_table(report: dict[str, Any], fmt: Any) -> Table:
    """The regression models' table: BASIS and PPGEN RMSE and MAE on the held-out rows (target's scale)."""
    name = pseudo_data_name(report["mechanism"])
    table = titled_table(f"regression global models on {grouped(report['test_rows'])} held-out rows")
    table.add_column("global model", no_wrap=True)
    for col in ("BASIS RMSE", f"{name} RMSE", "BASIS MAE", f"{name} MAE", "train rows"):
        table.add_column(col)
    for m in report["models"]:
        table.add_row(m["model"], fmt(m["basis_rmse"]), fmt(m["rmse"]), fmt(m["basis_mae"]), fmt(m["mae"]),
                      grouped(m["train_rows"]))
    return table


def configure(p: argparse.ArgumentParser) -> None:
    """`simulate`: the table, the federation's size, the release, the study, the output."""
    add_table_source(p, "nursery")
    add_owners(p, default=5, help="number of owner processes, 1-10 (default 5)")
    p.add_argument("--task", default=None, choices=TASKS,
                   help="classification (default) or regression (implied by --target or a regression --schema "
                        "file): a DiffPETs study of a numeric target, scored by RMSE and MAE")
    p.add_argument("--target", default=None, metavar="COLUMN",
                   help="the numeric target column of --data, for --task regression (instead of --class-column)")
    p.add_argument("--target-range", type=target_range, default=None, metavar="LOW,HIGH",
                   help="the regression target's public bounds (the DP sensitivities rest on them; never read off "
                        "the data), e.g. 0,10 for wine quality")
    records = registry.mechanisms()
    add_release_options(
        p, registry.names(), mechanism_default=None,
        mechanism_help=f"release mechanism (default {DEFAULT_MECHANISM}: PPGEN; {DIFFPETS} for --task regression, the "
                       "only one that can release a regression model; the whole-release mechanisms release trees of "
                       "their default depth with counts disclosure unless --max-depth says otherwise: "
                       + ", ".join(f"{m.name} {m.default_max_depth}" for m in records if m.whole_release) + ")",
        requirement_help="the mechanism's requirement (default: "
                         + "; ".join(f"{m.name} {m.default_requirement}" for m in records if m.default_requirement)
                         + ")")
    add_learner(p, help="owners' local learner")
    add_max_depth(p, help="depth limit of the owners' trees")
    p.add_argument("--min-samples-leaf", type=positive_int, default=1,
                   help="minimum leaf of the owners' trees (default 1)")
    add_admissible_options(p)
    add_global_models(p, choices={*CLASSIFICATION_MODELS, *REGRESSION_MODELS}, default=None, dest="models",
                      help="global models the miner learns from pseudo-data, or builds from the releases: "
                           "tree-vote, for classification on the local engine",
                      default_text=f"{' '.join(DEFAULT_MODELS[CLASSIFICATION_TASK])}; with --task regression "
                                   f"{' '.join(DEFAULT_MODELS[REGRESSION_TASK])}")
    add_model_settings(p)
    p.add_argument("--engine", choices=ENGINES, default="local",
                   help="where the miner learns the global models: local (in its process, the default) or dask "
                        "(pseudo-data to Parquet, models on a LocalCluster on loopback; needs modelshare[dask])")
    p.add_argument("--dask-workers", type=positive_int, default=None, metavar="N",
                   help="--engine dask: worker processes of the miner's LocalCluster (default 2)")
    p.add_argument("--pgen-scale", type=float, default=10.0, help="PGEN rows per disclosed tuple (default 10)")
    p.add_argument("--prior-share", type=float, default=DEFAULT_PRIOR_SHARE, metavar="SHARE",
                   help=f"dp mechanisms: share of epsilon each owner spends on its noisy class histogram, the miner's "
                        f"floor (default {DEFAULT_PRIOR_SHARE:g}; 0: the papers' mechanisms)")
    add_off_path(p, default=None, default_text=f"{DEFAULT_OFF_PATH[CLASSIFICATION_TASK]}; with --task regression "
                                               f"{DEFAULT_OFF_PATH[REGRESSION_TASK]}")
    add_on_path(p, default=None, default_text="the study's: uniform unless it says class")
    add_test_fraction(p, help="held-out share of the table")
    add_seed(p, default=0, help="seed of the split, the owners' learners, PGEN and the models (default 0)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the study (default 300)")
    p.add_argument("--keep-dir", type=Path, default=None,
                   help="keep kits, tables, study.toml and logs in this new directory")
    p.add_argument("--report", type=Path, default=None, metavar="DIR",
                   help="write DIR/report.html: settings, releases, scores against BASIS, plots and the released "
                        "trees drawn, in one self-contained page")
    add_json(p, "the owners' releases and the global models' scores")
    p.set_defaults(func=cmd_simulate)
