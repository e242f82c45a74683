"""The project's defaults on tables no constant was tuned on (`modelshare experiment suite`, issue 33).

For every suite table (`experiments.suite_tables`), every owner count and every requirement,
the in-process pipeline (`modelshare.pipeline.run_fold`) runs the study `simulate` would run with its
defaults: the mechanism's default learner (``admissible`` under a path requirement, released by ``apt``
with hit/miss disclosure; the whole-release mechanisms' own trees at their registry depth, counts
disclosure), PGEN at scale 10, and `simulate`'s global models set as a study without a
``[global_models]`` table sets them (`modelshare.miner_node.selection.DEFAULT_MODES`: the decision tree ``auto``,
the others their fixed rule, a dp study's leaf floors included). A requirement is ``k-anonymity:k=K``
or ``cl-diversity:c=C,l=L`` (released by ``apt``), ``kanon-rdt`` (its registry requirement), or
``dp:epsilon=E`` (each of ``--dp-mechanisms`` at its registry number of trees). Beside each study
the same folds run the no-privacy federation (``--mechanism none``, its default learner) at the same
owner count.

Folds are the pipeline's (`fold_plan`): one per (table, repeat, fold), the same for every owner count
and requirement, with the fold's own seed, so the owners get the same rows everywhere and any
``--jobs`` gives the same numbers. Per fold the records are BASIS (the global models on the pooled raw
training rows, set alike) and PGEN, plus the training part's majority class scored on the held-out
fold and, for a (c,l) requirement, its hit/miss accuracy bound on the pooled training rows
(`modelshare.common.privacy.accuracy_bound`). The table reports per (table, requirement, owners) the best global
model by mean accuracy over the folds ("no rows" where no release carried a pseudo row, so there is no
model, and a condition fails there), the best BASIS model, the best model of the no-privacy
federation, the majority class and the bound; `done_conditions` checks issue 33's two conditions on
them, and beside the dp condition `order_risk`: the least chance that any study at that epsilon names the wrong
one of the training part's two largest classes, on the table or on a neighbour of it (a proof, not a
measurement), which says how far a dp floor can be held to the majority class at all. Tables run one after another and
the files in ``--out`` are rewritten after each, so an
interrupted run keeps every finished table; ``--merge`` writes the one table of several runs' folders.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments.output import add_common_options, records, run_tasks
from experiments.suite_tables import SUITE, load_suite_table
from modelshare.cli.common import add_global_models, add_list, add_owners, err, out, titled_table
from modelshare.cli.inputs import DEFAULT_MECHANISM, resolve_disclosure
from modelshare.common.data.schema import Schema
from modelshare.common.files import atomic_write, atomic_write_via
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.registry import default_learner
from modelshare.common.privacy.accuracy_bound import cl_hit_miss_bound
from modelshare.common.privacy.requirements import DP, CLDiversity, KAnonymity, parse_requirement
from modelshare.common.study import Training
from modelshare.common.trees.learner_options import LEARNER_NAMES
from modelshare.common.trees.tree import DISCLOSURES
from modelshare.miner_node.global_models import CLASSIFICATION_MODELS
from modelshare.miner_node.selection import DEFAULT_MODES
from modelshare.pipeline import PipelineConfig, fold_plan, run_fold
from modelshare.simulate import DEFAULT_MODELS

__all__ = ["Setting", "SuiteSettings", "settings_for", "run_table", "summarize_suite", "done_conditions", "configure",
           "order_risk"]

NONE = "none"
DEFAULT_OWNERS = (1, 5, 10)
DEFAULT_REQUIREMENTS = ("k-anonymity:k=10", "cl-diversity:c=5,l=2", "kanon-rdt", "dp:epsilon=0.1", "dp:epsilon=1")
DEFAULT_DP_MECHANISMS = ("dpea-nb",)
QUICK_OWNERS = (5,)
QUICK_FOLDS = 3
SHORT = {"decision-tree": "tree", "naive-bayes": "NB", "gradient-boosting": "GB", "random-forest": "RF"}
K_TARGET = ("k-anonymity:k=10", 5, 0.05, 0.02)
"""Issue 33: under k-anonymity k=10 at 5 owners, within 5 points
of the no-privacy federation on every table, 2 on the median."""
DP_TARGETS = ("dp:epsilon=0.1", "dp:epsilon=1")


@dataclass(frozen=True)
class Setting:
    """One release of the suite: its row label, the ``--requirements`` item it came from, mechanism and requirement."""

    label: str
    item: str
    mechanism: str
    requirement: str | None
    learner: str | None = None  # a path release's owners' learner; None: the mechanism's default
    disclosure: str | None = None  # a path release's disclosure; None: the mechanism's default


def _trees(mechanism: str) -> int:
    """The number of trees of a dp mechanism's registry requirement (dpea-nb 1, the others 10)."""
    found = parse_requirement(registry.get(mechanism).default_requirement or "")
    assert isinstance(found, DP)
    return found.trees


def requirement_item(text: str) -> str:
    """One ``--requirements`` item, checked: a path requirement,
    a dps mechanism's name, ``dp:epsilon=E`` or ``none``."""
    if text == NONE or (text in registry.names() and registry.get(text).family == "dps"):
        return text
    if match := re.fullmatch(r"dp:epsilon=([0-9.eE+-]+)", text):
        epsilon = float(match.group(1))
        if not epsilon > 0:
            raise ValueError("epsilon must be positive")
        return f"dp:epsilon={epsilon:g}"
    found = parse_requirement(text)
    if not isinstance(found, (KAnonymity, CLDiversity)):
        raise ValueError("expected k-anonymity:k=K, cl-diversity:c=C,l=L, a dps mechanism "
                         f"({', '.join(registry.names(family='dps'))}), dp:epsilon=E or none")
    return text


def _requirement_arg(text: str) -> str:
    """`requirement_item` as an argparse type: a bad item is a usage error that says why."""
    try:
        return requirement_item(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def settings_for(item: str, dp_mechanisms: Sequence[str], *, learner: str | None = None,
                 disclosure: str | None = None) -> list[Setting]:
    """The releases one ``--requirements`` item stands for (several for ``dp:epsilon=E``: one per dp mechanism).

    ``learner`` and ``disclosure`` replace the defaults of a path release (``k-anonymity``, ``cl-diversity``) and
    are named in its label; the other releases keep their own.
    """
    item = requirement_item(item)
    if item == NONE:
        return [Setting(NONE, NONE, NONE, None)]
    if item in registry.names():
        requirement = registry.get(item).default_requirement
        return [Setting(f"{item} {requirement}", item, item, requirement)]
    if item.startswith("dp:"):
        return [Setting(f"{m} {item},trees={_trees(m)}", item, m, f"{item},trees={_trees(m)}") for m in dp_mechanisms]
    named = "".join(f" {key}={value}" for key, value in (("learner", learner), ("disclosure", disclosure)) if value)
    return [Setting(f"{DEFAULT_MECHANISM} {item}{named}", item, DEFAULT_MECHANISM, item, learner, disclosure)]


@dataclass(frozen=True)
class SuiteSettings:
    """What the suite runs on each table: owner counts, releases (the no-privacy one included), folds and models."""

    owners: tuple[int, ...]
    settings: tuple[Setting, ...]
    global_models: tuple[str, ...]
    folds: int = 5
    repeats: int = 1
    seed: int = 0


def pipeline_config(setting: Setting, owners: int, suite: SuiteSettings) -> PipelineConfig:
    """The study `simulate` runs with its defaults for this release, as the in-process pipeline's settings."""
    record = registry.get(setting.mechanism)
    learner = setting.learner or default_learner(setting.mechanism)
    return PipelineConfig(
        n_sources=owners, folds=suite.folds, repeats=suite.repeats, learner=learner,
        learner_params={} if record.whole_release else Training(learner=learner).learner_params(),
        mechanism=setting.mechanism, requirement=setting.requirement,
        disclosure=resolve_disclosure(setting.mechanism, setting.disclosure),
        global_models=suite.global_models,
        model_settings={m: DEFAULT_MODES.get(m, "fixed") for m in suite.global_models},
        methods=("BASIS", "PGEN"), random_state=suite.seed,
    )


@dataclass(frozen=True)
class _Task:
    owners: int
    setting: Setting
    repeat: int
    fold: int
    test: np.ndarray
    seed: int


def _bound(setting: Setting, schema: Schema, X: np.ndarray, y: np.ndarray) -> float:
    """The hit/miss (c,l) accuracy bound on the pooled training rows, for a (c,l) release; NaN for any other."""
    found = None if setting.requirement is None else parse_requirement(setting.requirement)
    if not isinstance(found, CLDiversity) or resolve_disclosure(setting.mechanism, None) != "hit_miss":
        return float("nan")
    return float(cl_hit_miss_bound(X, y, schema, found.c, found.l).accuracy)


def order_risk(y_train: np.ndarray, n_classes: int, item: str) -> float:
    """For a ``dp:epsilon=E`` release, the least chance, over a table and a neighbour of it, that an E-DP study names
    the wrong majority class; NaN for any other release.

    With training counts n1 >= n2 of the two largest classes and gap g = n1 - n2, removing g + 1 rows of the
    first class makes the second the majority. Every owner's release is E-DP in its own rows and the owners hold
    disjoint rows, so the whole study is E-DP in each row and, by group privacy, any output's probability changes
    by at most e^(E (g + 1)) between the two tables. If it named the first class with probability 1 - w on this
    table, it names it with probability at least (1 - w) e^-(E (g + 1)) on the neighbour, where that is wrong:
    one of the two errs with probability at least 1 / (1 + e^(E (g + 1))), whatever the mechanism.
    """
    if not item.startswith("dp:"):
        return float("nan")
    epsilon = float(item.split("=")[1])
    top = np.sort(np.bincount(y_train, minlength=max(n_classes, 2)))[::-1]
    return float(1.0 / (1.0 + np.exp(epsilon * (int(top[0] - top[1]) + 1))))


def _run(context: tuple[str, Schema, np.ndarray, np.ndarray, SuiteSettings], task: _Task) -> list[dict[str, Any]]:
    name, schema, X, y, suite = context
    train = ~task.test
    started = time.perf_counter()
    config = pipeline_config(task.setting, task.owners, suite)
    found = run_fold(schema, X[train], y[train], X[task.test], y[task.test], config, np.random.default_rng(task.seed))
    majority = float((y[task.test] == np.bincount(y[train], minlength=schema.n_classes).argmax()).mean())
    bound = _bound(task.setting, schema, X[train], y[train])
    risk = order_risk(y[train], schema.n_classes, task.setting.item)
    seconds = time.perf_counter() - started
    return [{"table": name, "setting": task.setting.label, "requirement": task.setting.item,
             "mechanism": task.setting.mechanism, "owners": task.owners, "repeat": task.repeat, "fold": task.fold,
             **record, "majority": majority, "bound": bound, "order_risk": risk, "seconds": seconds}
            for record in found]


def run_table(name: str, schema: Schema, X: np.ndarray, y: np.ndarray, suite: SuiteSettings, *,
              jobs: int = 1) -> pd.DataFrame:
    """One record per (owners, release, repeat, fold, method, global model) on one table."""
    plan = fold_plan(y, pipeline_config(suite.settings[0], suite.owners[0], suite))
    tasks = [_Task(n, s, r, f, test, seed) for n in suite.owners for s in suite.settings for r, f, test, seed in plan]
    chunks = run_tasks(_run, tasks, context=(name, schema, X, y, suite), jobs=jobs,
                       label=f"{name}: folds x owners x releases ({len(y)} rows)")
    return pd.DataFrame.from_records([row for chunk in chunks for row in chunk])


def _best(frame: pd.DataFrame) -> tuple[str, float, float]:
    """(model, mean, sd) of the global model with the best mean accuracy over the folds."""
    scores = frame.groupby("model", sort=False)["accuracy"].agg(["mean", "std"])
    if scores["mean"].isna().all():
        return "-", float("nan"), float("nan")
    model = str(scores["mean"].idxmax())
    return model, float(scores.at[model, "mean"]), float(np.nan_to_num(scores.at[model, "std"]))


def _rank(item: str) -> tuple[int, float]:
    """A release's place in the table: no privacy, k-anonymity, (c,l)-diversity, dps, then dp by epsilon."""
    if item.startswith("dp:"):
        return 4, float(item.split("=")[1])
    return {NONE: 0, "k-anonymity": 1, "cl-diversity": 2}.get(item.split(":")[0], 3), 0.0


def summarize_suite(raw: pd.DataFrame) -> pd.DataFrame:
    """One row per (table, release, owners): best model, best
    BASIS, the no-privacy federation's best, majority, bound."""
    rows = []
    keys = ["table", "setting", "requirement", "mechanism", "owners"]
    for (table, setting, item, mechanism, owners), frame in raw.groupby(keys, sort=False):
        pgen = frame[frame["method"] == "PGEN"]
        model, mean, std = _best(pgen)
        basis_model, basis, _ = _best(frame[frame["method"] == "BASIS"])
        plain = raw[(raw["table"] == table) & (raw["setting"] == NONE) & (raw["owners"] == owners)
                    & (raw["method"] == "PGEN")]
        none_model, none_mean, _ = _best(plain) if len(plain) else ("-", float("nan"), float("nan"))
        rows.append({"table": table, "setting": setting, "requirement": item, "mechanism": mechanism,
                     "owners": owners, "folds": int(pgen[["repeat", "fold"]].drop_duplicates().shape[0]),
                     "best_model": model, "best": mean, "best_std": std, "basis_model": basis_model, "basis": basis,
                     "none_model": none_model, "none": none_mean, "majority": float(frame["majority"].mean()),
                     "bound": float(frame["bound"].mean()),
                     "order_risk": float(frame["order_risk"].mean()) if "order_risk" in frame else float("nan"),
                     "owners_released": float(pgen.groupby(["repeat", "fold"])["owners_released"].first().mean()),
                     "seconds": float(frame.groupby(["repeat", "fold"])["seconds"].first().sum())})
    summary = pd.DataFrame.from_records(rows)
    if summary.empty:
        return summary
    tables = {t: i for i, t in enumerate(dict.fromkeys(raw["table"]))}
    order = sorted(range(len(summary)), key=lambda i: (tables[summary.at[i, "table"]], summary.at[i, "owners"],
                                                        _rank(summary.at[i, "requirement"]), summary.at[i, "setting"]))
    return summary.iloc[order].reset_index(drop=True)


TIE = 1e-9  # two means of the same fold accuracies, summed in another order, differ by rounding alone


def done_conditions(summary: pd.DataFrame) -> list[dict[str, Any]]:
    """Issue 33's conditions on what ran: k=10 at 5 owners against the no-privacy federation, dp against the majority.

    One entry per condition and table that ran (a cell whose releases carried no pseudo row has no model and
    fails), and the median condition over the tables that ran (``holds`` None when none did).
    """
    item, owners, every, median = K_TARGET
    out_rows: list[dict[str, Any]] = []
    k = summary[(summary["requirement"] == item) & (summary["owners"] == owners)]
    gaps = []
    for row in k.itertuples(index=False):
        gap = row.best - row.none
        gaps.append(gap)
        out_rows.append({"condition": f"{item} at {owners} owners: best within {every * 100:g} points of no privacy",
                         "table": row.table, "value": gap, "holds": bool(gap >= -every)})  # no rows: NaN, fails
    ran = [-np.inf if np.isnan(g) else g for g in gaps]  # a federation without rows ranks last
    out_rows.append({"condition": f"{item} at {owners} owners: median within {median * 100:g} points of no privacy",
                     "table": f"median of {len(ran)}", "value": statistics.median(ran) if ran else float("nan"),
                     "holds": bool(statistics.median(ran) >= -median) if ran else None})
    dp = summary[summary["requirement"].isin(DP_TARGETS)]
    for (table, item_, n), frame in dp.groupby(["table", "requirement", "owners"], sort=False):
        best = frame["best"].max()
        margin = best - frame["majority"].iloc[0]
        out_rows.append({"condition": f"{item_} at {n} owners: best (any dp mechanism run) not below the majority",
                         "table": table, "value": margin, "holds": bool(margin >= -TIE),
                         "order_risk": float(frame["order_risk"].iloc[0]) if "order_risk" in frame else float("nan")})
    return out_rows


def _acc(mean: float, model: str | None = None) -> str:
    if np.isnan(mean):
        return "no rows" if model == "-" else "-"  # a model column without a mean: no release carried a row
    return f"{mean:.3f}" + (f" {SHORT.get(model, model)}" if model else "")


def _spread(mean: float, std: float) -> str:
    return "" if np.isnan(mean) else f" ± {std:.3f}"


def markdown(summary: pd.DataFrame, checks: Sequence[dict[str, Any]], command: str) -> str:
    """The suite's table and its conditions as Markdown, headed by the command that ran them."""
    lines = [f"    {command}", "",
             "| table | release | owners | best model | BASIS | no privacy | majority | (c,l) bound | released trees |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in summary[summary["setting"] != NONE].itertuples(index=False):
        lines.append(f"| {r.table} | {r.setting} | {r.owners} | "
                     f"{_acc(r.best, r.best_model)}{_spread(r.best, r.best_std)} | "
                     f"{_acc(r.basis, r.basis_model)} | {_acc(r.none, r.none_model)} | {_acc(r.majority)} | "
                     f"{_acc(r.bound)} | {r.owners_released:.1f}/{r.owners} |")
    lines += ["", "| condition | table | value | holds | least chance an eps-DP study names the wrong majority |",
              "|---|---|---|---|---|"]
    for c in checks:
        held = "not run" if c["holds"] is None else ("yes" if c["holds"] else "**no**")
        risk = c.get("order_risk", float("nan"))
        lines.append(f"| {c['condition']} | {c['table']} | {c['value']:+.3f} | {held} | "
                     f"{'' if risk is None or np.isnan(risk) else f'{risk:.3f}'} |")
    return "\n".join(lines) + "\n"


def _show(summary: pd.DataFrame, checks: Sequence[dict[str, Any]], folds: str) -> None:
    table = titled_table(f"the project's defaults on unseen tables ({folds}): best global model by mean accuracy",
                         "table", "release", "N", "best", "BASIS", "no privacy", "majority", "(c,l) bound")
    for r in summary[summary["setting"] != NONE].itertuples(index=False):
        table.add_row(r.table, r.setting, str(r.owners), _acc(r.best, r.best_model), _acc(r.basis, r.basis_model),
                      _acc(r.none, r.none_model), _acc(r.majority), _acc(r.bound))
    out.print(table)
    for c in checks:
        held = "not run" if c["holds"] is None else ("holds" if c["holds"] else "FAILS")
        risk = c.get("order_risk", float("nan"))
        note = ("" if risk is None or np.isnan(risk) else
                f" (any eps-DP study names the wrong majority with chance >= {risk:.3f} on it or a neighbour)")
        out.print(f"{c['condition']}: {c['table']} {c['value']:+.3f} {held}{note}", highlight=False)


def _table(name: str) -> str:
    """One ``--tables`` item: a suite table's name."""
    if name not in SUITE:
        raise ValueError(f"no suite table {name!r}; the suite's tables are {', '.join(SUITE)}")
    return name


def command_line(args: argparse.Namespace) -> str:
    """The command that reruns exactly this suite (every selection spelt out), for EXPERIMENTS.md."""
    return (f"modelshare experiment suite --tables {' '.join(args.tables)} --owners {' '.join(map(str, args.owners))} "
            f"--requirements {' '.join(args.requirements)} --dp-mechanisms {' '.join(args.dp_mechanisms)} "
            f"--global-models {' '.join(args.global_models)} --folds {args.folds} --repeats {args.repeats} "
            f"--seed {args.seed}" + "".join(f" --{flag} {value}" for flag, value in
                                            (("learner", args.learner), ("disclosure", args.disclosure)) if value))


def document(settings: dict[str, Any], raw: pd.DataFrame, summary: pd.DataFrame,
             checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """results.json: the settings, the summary, the conditions and the raw records (NaN as null)."""
    return {"experiment": "suite", "settings": settings, "summary": records(summary),
            "conditions": records(pd.DataFrame.from_records(list(checks))), "raw": records(raw)}


def write_suite(out_dir: Path, doc: dict[str, Any], raw: pd.DataFrame, summary: pd.DataFrame, text: str) -> list[Path]:
    """results.csv, summary.csv, results.json and suite.md (the Markdown table), each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name in ("results.csv", "summary.csv", "results.json", "suite.md")]
    atomic_write_via(paths[0], lambda p: raw.to_csv(p, index=False))
    atomic_write_via(paths[1], lambda p: summary.to_csv(p, index=False))
    atomic_write(paths[2], json.dumps(doc, indent=2) + "\n")
    atomic_write(paths[3], text)
    return paths


def merge_runs(folders: Sequence[Path]) -> tuple[pd.DataFrame, list[str]]:
    """The raw records of earlier suite runs as one, and their commands.

    A cell (table, release, owners, repeat, fold) that several runs hold, such as the no-privacy federation
    every run carries, is kept once, from the first run named: its seed depends only on the fold, so the runs'
    records of it agree when their folds and seed do; runs with different folds, repeats, seed or global
    models are refused.
    """
    frames, commands, shapes = [], [], set()
    for folder in folders:
        try:
            doc = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--merge {folder}: no suite results.json to read ({exc})") from None
        if doc.get("experiment") != "suite":
            raise ValueError(f"--merge {folder}: results.json is of experiment {doc.get('experiment')!r}, not suite")
        settings = doc["settings"]
        shapes.add((settings["folds"], settings["repeats"], settings["seed"], tuple(settings["global_models"])))
        frames.append(pd.DataFrame.from_records(doc["raw"]))
        commands.append(settings["command"])
    if len(shapes) > 1:
        raise ValueError(f"--merge: the runs differ in folds, repeats, seed or global models: {sorted(shapes)}")
    raw = pd.concat(frames, ignore_index=True)
    cell = ["table", "setting", "owners", "repeat", "fold", "method", "model"]
    return raw.drop_duplicates(subset=cell, keep="first").reset_index(drop=True), commands


def _merge(args: argparse.Namespace) -> int:
    """``--merge``: the one table of earlier runs (`merge_runs`), written and shown as a run's."""
    raw, commands = merge_runs(args.merge)
    summary = summarize_suite(raw)
    checks = done_conditions(summary)
    doc = document({"merged": [str(f) for f in args.merge], "commands": commands,
                    "tables_run": list(raw["table"].unique())}, raw, summary, checks)
    files = write_suite(args.out, doc, raw, summary, markdown(summary, checks, "\n    ".join(commands)))
    err.print(f"merged {len(args.merge)} runs: wrote {', '.join(f.name for f in files)} to {args.out}", highlight=False)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _show(summary, checks, "merged runs")
    return 0


def cmd_suite(args: argparse.Namespace) -> int:
    if args.merge:
        return _merge(args)
    if args.quick:
        args.owners, args.folds = QUICK_OWNERS, QUICK_FOLDS
    settings = tuple(s for item in dict.fromkeys([NONE, *args.requirements])
                     for s in settings_for(item, args.dp_mechanisms, learner=args.learner, disclosure=args.disclosure))
    suite = SuiteSettings(tuple(args.owners), settings, tuple(args.global_models), folds=args.folds,
                          repeats=args.repeats, seed=args.seed)
    for n in suite.owners:
        for s in settings:
            pipeline_config(s, n, suite)  # every setting checked before any table runs
    command = command_line(args)
    frames: list[pd.DataFrame] = []
    raw = summary = pd.DataFrame()
    checks: list[dict[str, Any]] = []
    doc: dict[str, Any] = {}
    for name in dict.fromkeys(args.tables):
        loaded = load_suite_table(name)
        X, y = loaded.schema.encode(loaded.frame, source=loaded.source)
        frames.append(run_table(name, loaded.schema, X, y, suite, jobs=args.jobs))
        raw = pd.concat(frames, ignore_index=True)
        summary = summarize_suite(raw)
        checks = done_conditions(summary)
        settings_doc = {"command": command, "tables_run": list(raw["table"].unique()), "owners": list(suite.owners),
                        "releases": [s.label for s in settings], "global_models": list(suite.global_models),
                        "folds": suite.folds, "repeats": suite.repeats, "seed": suite.seed}
        doc = document(settings_doc, raw, summary, checks)
        files = write_suite(args.out, doc, raw, summary, markdown(summary, checks, command))
        err.print(f"{name} done: wrote {', '.join(f.name for f in files)} to {args.out}", highlight=False)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _show(summary, checks, f"{suite.folds}-fold CV x {suite.repeats}")
    return 0


def configure(p: argparse.ArgumentParser) -> None:
    """`experiment suite`: which tables, owner counts and requirements; the dp mechanisms; the global models."""
    p.description = ("The project's defaults on public tables no constant was tuned on: per table, requirement and "
                     "owner count, the best global model against BASIS, the no-privacy federation and the majority "
                     "class, with the (c,l) bound where it applies (issue 33).")
    add_list(p, "--tables", _table, default=tuple(SUITE), metavar="TABLE", what="suite table names",
             help=f"suite tables to run (default all: {', '.join(SUITE)})")
    add_owners(p, default=DEFAULT_OWNERS, several=True,
               help=f"numbers of data owners (default {' '.join(map(str, DEFAULT_OWNERS))})")
    p.add_argument("--requirements", nargs="+", type=_requirement_arg, default=DEFAULT_REQUIREMENTS, metavar="REQ",
                   help="releases to run beside the no-privacy federation: k-anonymity:k=K and cl-diversity:c=C,l=L "
                        "(apt), kanon-rdt (its registry requirement), dp:epsilon=E (each --dp-mechanisms) "
                        f"(default {' '.join(DEFAULT_REQUIREMENTS)})")
    p.add_argument("--dp-mechanisms", nargs="+", default=DEFAULT_DP_MECHANISMS, metavar="MECH",
                   choices=registry.names(family="dp"),
                   help=f"dp mechanisms a dp:epsilon=E requirement runs, each at its registry number of trees and "
                        f"depth (default {' '.join(DEFAULT_DP_MECHANISMS)})")
    add_global_models(p, choices=CLASSIFICATION_MODELS, default=tuple(DEFAULT_MODELS["classification"]),
                      help="global models (simulate's default), set as a study without [global_models] sets them")
    p.add_argument("--learner", choices=LEARNER_NAMES, default=None,
                   help="the owners' learner of the k-anonymity and cl-diversity releases (default: the mechanism's, "
                        "admissible); named in their rows. The no-privacy federation keeps its own default")
    p.add_argument("--disclosure", choices=DISCLOSURES, default=None,
                   help="what the k-anonymity and cl-diversity releases disclose per leaf (default: the mechanism's, "
                        "hit_miss); named in their rows")
    p.add_argument("--quick", action="store_true",
                   help=f"the owner count issue 33's conditions read, {' '.join(map(str, QUICK_OWNERS))}, and "
                        f"{QUICK_FOLDS} folds (replaces --owners and --folds)")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="DIR",
                   help="run nothing: write the one table of earlier runs' --out folders (runs split by table, owner "
                        "count or requirement), each cell once")
    add_common_options(p, name="suite", default_folds=5, default_repeats=1)
    p.set_defaults(func=cmd_suite)
