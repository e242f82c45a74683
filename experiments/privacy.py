"""Sharkey et al.'s PPGEN vs LD experiment (`modelshare experiment privacy`), §4.2 and Fig. 7.

For each (c,l)-diversity requirement of the grid (``--ls`` x ``--cs``) and each cross-validation
fold, the training part is used twice:

- PPGEN: dealt among ``--owners`` owners, each owner's tree (each learner of ``--learner``, multiway
  by default as in the paper; several learners run on the same owners and folds) pruned by APT to
  ``cl-diversity:c=C,l=L`` in the form ``--disclosure`` allows (hit/miss by default: the paper's
  even spread of the misses over the other classes; an owner whose tree cannot meet it releases
  nothing), PGEN pseudo-data pooled, global models learned from it (`modelshare.pipeline.run_fold`, which also learns
  BASIS, the same models on the raw training part, kept as the reference line);
- LD: the training part itself (c,l)-diversified by full-domain generalisation and suppression
  (`experiments.baselines.ld.diversify`), global models learned from the published table (`fit_ld_model`) and
  scored on the test fold generalised the same way.

Beside PPGEN each row carries ``bound_accuracy``: the price of the requirement, an upper bound on
the accuracy any tree whose leaves all meet it in hit/miss form can reach on the fold's training
rows (`modelshare.common.privacy.accuracy_bound`; NaN under counts disclosure, which it does not cover). LD and
the bound depend on the fold and the requirement only, so each is computed once per (fold, l, c)
task and shared by every learner's rows.

The global models are fitted by the paper's fixed rules unless ``--model-setting`` gives the miner's
setting (``decision-tree=auto``: the leaf minimum cross-validated on the rows each side learns from,
`modelshare.miner_node.selection.choose`); it then applies to PPGEN's pseudo-data, to LD's published table and
to BASIS's raw training rows alike (`modelshare.miner_node.selection.choose_basis`: the same grid, cross-validated
on shuffled folds of the training part, never the test fold), so no side is tuned and another not. Each
raw row says how BASIS's and PPGEN's hyperparameters were set (``basis_selection``, ``ppgen_selection``).

When LD publishes nothing (no node of the lattice qualifies) its accuracy is NaN and
``ld_yields_data`` False; likewise PPGEN when no owner released a tree (APT reached the root, so
there is no pseudo-data). One raw row per (repeat, fold, l, c, global model) holds all three
methods side by side, so the PPGEN - LD difference is read off one row (with several learners,
one row per learner).

Folds and their seeds are drawn as `run_study` draws them (`modelshare.pipeline.fold_plan`); every requirement
of a fold reuses the fold's seed, so the owners' partitions and local trees are the same across
the grid and only the requirement changes, and ``--jobs`` never changes the numbers. The paper
gives Fig. 7 only as a chart (DESIGN.md states its claim, not its values), so the plots carry no
paper markers.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import to_hex
from rich.table import Table

from experiments.baselines.ld import DEFAULT_MAX_SUPPRESSION, LDModel, LDResult, diversify, fit_ld_model
from experiments.output import (
    ACCURACY,
    PlotResult,
    Results,
    Series,
    add_common_options,
    finish,
    plot_lines,
    run_tasks,
    selections,
    series_by,
    spread,
)
from modelshare.cli.common import (
    LEARNER_DEFAULT,
    add_global_models,
    add_model_settings,
    add_on_path,
    add_owners,
    float_list,
    int_list,
    out,
)
from modelshare.cli.inputs import (
    add_confidence,
    add_disclosure,
    add_learner,
    add_table_source,
    load_source,
    resolve_disclosure,
)
from modelshare.common.data.schema import Schema
from modelshare.common.privacy.accuracy_bound import cl_hit_miss_bound
from modelshare.common.study import ModelPlan
from modelshare.common.trees.metrics import accuracy
from modelshare.common.trees.tree import Disclosure
from modelshare.miner_node.global_models import GLOBAL_MODELS, make_global_model
from modelshare.miner_node.selection import choose
from modelshare.pipeline import PipelineConfig, fold_plan, run_fold

__all__ = ["PrivacySettings", "PrivacyTask", "requirement", "run_privacy", "summarize_privacy",
           "plot_privacy", "configure"]

METHODS = ("basis", "ppgen", "ld")
"""Column prefixes of the raw rows: BASIS (raw training rows), PPGEN and LD."""

SCORES = ("basis_accuracy", "ppgen_accuracy", "bound_accuracy", "ld_accuracy", "ppgen_yields_data", "ld_yields_data",
          "ppgen_owners_released", "ppgen_releases_audited_ok", "ppgen_train_rows", "ld_train_rows",
          "ld_suppressed_rows", "ld_equivalence_classes")
"""Per-row measurements the summary averages (a yields-data mean is the share of folds with data)."""


@dataclass(frozen=True)
class PrivacySettings:
    """The (l, c) grid, owners, global models, LD's suppression budget and the fold protocol."""

    ls: tuple[int, ...] = (2, 3, 4, 5)
    cs: tuple[float, ...] = (5.0, 10.0, 15.0, 20.0)
    owners: int = 1
    learners: tuple[str, ...] = ("multiway",)
    disclosure: Disclosure = "hit_miss"
    global_models: tuple[str, ...] = ("decision-tree", "naive-bayes")
    max_suppression: float = DEFAULT_MAX_SUPPRESSION
    folds: int = 10
    repeats: int = 1
    seed: int = 0
    confidence: float | None | str = LEARNER_DEFAULT
    """The admissible learner's pruning confidence (None: no pruning); `LEARNER_DEFAULT` keeps `local_learner`'s."""
    model_settings: dict[str, Any] = field(default_factory=dict)
    """How the global models' hyperparameters are set, for PPGEN, LD and BASIS alike (`PipelineConfig.model_settings`);
    none: the paper's fixed rules."""
    on_path: str = "uniform"
    """PGEN's values inside a path's allowed category set (`PipelineConfig.on_path`); uniform: the paper's."""
    scope: str = "release"
    """Whom the promise holds against: ``release`` (the default: APT's release guard keeps the combining reader within
    it) or ``leaf`` (the paper's per-leaf requirement, for the reproductions)."""

    def pipeline(self, learner: str | None = None) -> PipelineConfig:
        """PPGEN's pipeline settings (APT, BASIS and PGEN only) with ``learner`` (default: the first);
        each task sets its own requirement."""
        learner = learner or self.learners[0]
        chosen = learner == "admissible" and self.confidence != LEARNER_DEFAULT
        params = {"confidence": self.confidence} if chosen else {}
        return PipelineConfig(n_sources=self.owners, folds=self.folds, repeats=self.repeats,
                              learner=learner, learner_params=params, model_settings=self.model_settings,
                              mechanism="apt", requirement=requirement(self.cs[0], self.ls[0], self.scope),
                              disclosure=self.disclosure, global_models=self.global_models,
                              methods=("BASIS", "PGEN"), on_path=self.on_path, random_state=self.seed)


def requirement(c: float, l: int, scope: str = "release") -> str:  # noqa: E741 - the paper's name
    """The requirement string APT prunes to, e.g. ``cl-diversity:c=5,l=2`` (``...,scope=leaf`` per leaf only)."""
    return f"cl-diversity:c={c:g},l={l}" + (",scope=leaf" if scope == "leaf" else "")


@dataclass(frozen=True)
class PrivacyTask:
    """One requirement on one fold of one repeat, with the fold's own seed."""

    l: int  # noqa: E741 - the paper's name
    c: float
    repeat: int
    fold: int
    test: np.ndarray
    seed: int


def _run_task(context: tuple[Schema, np.ndarray, np.ndarray, PrivacySettings],
              task: PrivacyTask) -> list[dict[str, Any]]:
    """BASIS, PPGEN (per learner) and LD accuracy per global model on one fold under one requirement.

    Every learner's pipeline gets a generator seeded alike, so a learner's rows do not depend on
    which other learners run beside it; LD and the bound are computed once for all of them.
    """
    schema, X, y, settings = context
    train = ~task.test
    X_tr, y_tr, X_te, y_te = X[train], y[train], X[task.test], y[task.test]
    ld = diversify(X_tr, y_tr, schema, c=task.c, l=task.l, max_suppression=settings.max_suppression)
    ld_accuracy = {name: accuracy(y_te, _ld_model(ld, name, settings, task.seed).predict(X_te))
                   if ld.has_data else np.nan for name in settings.global_models}
    bound = (cl_hit_miss_bound(X_tr, y_tr, schema, task.c, task.l).accuracy if settings.disclosure == "hit_miss"
             else np.nan)
    rows: list[dict[str, Any]] = []
    for learner in settings.learners:
        config = replace(settings.pipeline(learner), requirement=requirement(task.c, task.l, settings.scope))
        pipeline = {(r["method"], r["model"]): r for r in run_fold(schema, X_tr, y_tr, X_te, y_te, config,
                                                                   np.random.default_rng(task.seed))}
        rows += [_row(task, learner, name, pipeline, bound, ld, ld_accuracy[name]) for name in settings.global_models]
    return rows


def _ld_model(ld: LDResult, name: str, settings: PrivacySettings, seed: int) -> LDModel:
    """LD's global model ``name`` on its published table, its hyperparameters set as PPGEN's are (`model_settings`):
    ``auto`` cross-validates on the published rows, which LD makes public, so both sides get the miner's choice."""
    params: dict[str, Any] = {}
    if name in settings.model_settings:
        plan = ModelPlan.checked(settings.global_models, settings.model_settings, seed=seed, mechanism="none")

        def build(given: dict[str, Any]) -> Any:
            return make_global_model(name, ld.generalised_schema, random_state=seed, **given)

        params = choose(name, plan, ld.X, ld.y, build, regression=False).parameters
    return fit_ld_model(ld, name, random_state=seed, **params)


def _row(task: PrivacyTask, learner: str, name: str, pipeline: dict[tuple[str, str], dict[str, Any]], bound: float,
         ld: LDResult, ld_accuracy: float) -> dict[str, Any]:
    """One raw record: BASIS, one learner's PPGEN, the bound and LD for one global model."""
    ppgen = pipeline["PGEN", name]
    return {
        "repeat": task.repeat, "fold": task.fold, "l": task.l, "c": task.c, "learner": learner, "model": name,
        "basis_accuracy": pipeline["BASIS", name]["accuracy"],
        "ppgen_accuracy": ppgen["accuracy"],
        "basis_selection": pipeline["BASIS", name]["selection"],
        "ppgen_selection": ppgen["selection"],
        "bound_accuracy": bound,
        "ld_accuracy": ld_accuracy,
        "ppgen_yields_data": ppgen["owners_released"] > 0,
        "ld_yields_data": ld.has_data,
        "ppgen_owners_released": ppgen["owners_released"],
        "ppgen_releases_audited_ok": ppgen["releases_audited_ok"],
        "ppgen_train_rows": ppgen["train_rows"],
        "ld_train_rows": int(ld.y.shape[0]),
        "ld_suppressed_rows": ld.suppressed,
        "ld_equivalence_classes": ld.equivalence_classes,
        "ld_node": None if ld.node is None else ",".join(map(str, ld.node)),
    }


def run_privacy(schema: Schema, X: np.ndarray, y: np.ndarray, settings: PrivacySettings, *,
                jobs: int = 1) -> pd.DataFrame:
    """One record per (repeat, fold, l, c, learner, global model) with BASIS, PPGEN and LD scores."""
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    if not settings.global_models:
        raise ValueError("give at least one global model")
    if not settings.learners or len(set(settings.learners)) != len(settings.learners):
        raise ValueError(f"give one or more distinct learners, got {list(settings.learners)}")
    if settings.confidence != LEARNER_DEFAULT and "admissible" not in settings.learners:
        raise ValueError("a pruning confidence applies to the admissible learner only, not to "
                         f"{list(settings.learners)}")
    if not 0.0 <= settings.max_suppression < 1.0:
        raise ValueError(f"max suppression must lie in [0, 1), got {settings.max_suppression}")
    if any(c <= 0 for c in settings.cs):
        raise ValueError(f"every c must be positive, got {list(settings.cs)}")
    tasks = [PrivacyTask(l, c, r, f, test, seed) for r, f, test, seed in fold_plan(y, settings.pipeline())
             for l in settings.ls for c in settings.cs]  # noqa: E741
    chunks = run_tasks(_run_task, tasks, context=(schema, X, y, settings), jobs=jobs,
                       label=f"requirements x folds ({len(y)} rows)")
    return pd.DataFrame.from_records([row for chunk in chunks for row in chunk])


def summarize_privacy(raw: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation of every score per (l, c, learner, global model); NaN accuracies are skipped."""
    grouped = raw.astype({s: float for s in SCORES}).groupby(["l", "c", "learner", "model"], sort=True)[list(SCORES)]
    summary = grouped.mean().add_suffix("_mean").join(grouped.std().add_suffix("_std")).reset_index()
    summary["ppgen_minus_ld_mean"] = summary["ppgen_accuracy_mean"] - summary["ld_accuracy_mean"]
    return summary


PPGEN_COLORMAPS = ("Blues", "Greens", "Purples", "Reds")
"""PPGEN's line colours, one colour map per learner (in ``--learner`` order; LD's lines are orange)."""


def _ppgen_label(learner: str, c: float, several: bool) -> str:
    """A PPGEN line's label: the learner is named only when several ran."""
    return f"PPGEN {learner} c={c:g}" if several else f"PPGEN c={c:g}"


def _colors(cs: Sequence[float], learners: Sequence[str]) -> dict[str, str]:
    """PPGEN lines in blues (greens, purples, reds for further learners) and LD lines in oranges, darker
    for larger c; BASIS in grey."""
    colors = {"BASIS (raw training rows)": "tab:gray"}
    shade = [0.45 + 0.5 * i / max(len(cs) - 1, 1) for i in range(len(cs))]
    for learner, cmap in zip(learners, PPGEN_COLORMAPS, strict=False):
        for c, x in zip(cs, shade, strict=False):
            colors[_ppgen_label(learner, c, len(learners) > 1)] = to_hex(colormaps[cmap](x))
    for c, x in zip(cs, shade, strict=False):
        colors[f"LD c={c:g}"] = to_hex(colormaps["Oranges"](x))
    return colors


def plot_privacy(summary: pd.DataFrame, settings: PrivacySettings, source: str, out_dir: Path) -> list[PlotResult]:
    """Per global model: accuracy against l, one line per (method, learner, c), and BASIS for reference."""
    if len(settings.learners) > len(PPGEN_COLORMAPS):
        raise ValueError(f"at most {len(PPGEN_COLORMAPS)} learners can be plotted, got {len(settings.learners)}")
    colors = _colors(settings.cs, settings.learners)
    several = len(settings.learners) > 1
    plots: list[PlotResult] = []
    for model in settings.global_models:
        rows = summary[summary["model"] == model]
        once = rows[rows["learner"] == settings.learners[0]]  # BASIS and LD do not depend on the learner
        series: list[Series] = series_by(once[once["c"] == settings.cs[0]], x="l", mean="basis_accuracy_mean",
                                         std="basis_accuracy_std", by=[], label=lambda key: "BASIS (raw training rows)")
        series += series_by(rows, x="l", mean="ppgen_accuracy_mean", std="ppgen_accuracy_std", by=["learner", "c"],
                            label=lambda key: _ppgen_label(key[0], key[1], several))
        series += series_by(once, x="l", mean="ld_accuracy_mean", std="ld_accuracy_std", by=["c"],
                            label=lambda key: f"LD c={key[0]:g}")
        plots.append(plot_lines(
            out_dir / f"accuracy_vs_l_{model}.png", series,
            title=f"{source}: global {model}, {settings.owners} owner(s), APT vs LD "
                  f"({spread(settings.folds, settings.repeats)}; LD missing = no data)",
            xlabel="l of the (c,l)-diversity requirement (stronger privacy →)", ylabel=ACCURACY, colors=colors))
    return plots


def _show(summary: pd.DataFrame, raw: pd.DataFrame, title: str, several: bool) -> None:
    """BASIS, PPGEN and LD accuracy per requirement, learner (when ``several``) and global model, and
    whether each yielded data; then how BASIS's and PPGEN's hyperparameters were set (from the ``raw`` rows)."""
    table = Table(title=title)
    columns = ("l", "c", *(("learner",) if several else ()), "global model", "BASIS", "PPGEN", "bound", "LD",
               "PPGEN - LD", "PPGEN data", "LD data", "LD suppressed")
    for col in columns:
        table.add_column(col, justify="left" if col in ("learner", "global model") else "right", no_wrap=True)

    def acc(mean: float, std: float) -> str:
        return "-" if np.isnan(mean) else f"{mean:.3f}±{0.0 if np.isnan(std) else std:.3f}"

    for row in summary.itertuples(index=False):
        table.add_row(str(row.l), f"{row.c:g}", *((row.learner,) if several else ()), row.model,
                      acc(row.basis_accuracy_mean, row.basis_accuracy_std),
                      acc(row.ppgen_accuracy_mean, row.ppgen_accuracy_std),
                      "-" if np.isnan(row.bound_accuracy_mean) else f"{row.bound_accuracy_mean:.3f}",
                      acc(row.ld_accuracy_mean, row.ld_accuracy_std),
                      "-" if np.isnan(row.ppgen_minus_ld_mean) else f"{100 * row.ppgen_minus_ld_mean:+.1f} pts",
                      f"{row.ppgen_yields_data_mean:.0%}", f"{row.ld_yields_data_mean:.0%}",
                      f"{row.ld_suppressed_rows_mean:.0f}")
    out.print(table)
    for model, rows in raw.groupby("model", sort=False):
        out.print(f"{model} hyperparameters over the folds: BASIS {selections(list(rows.basis_selection))}; "
                  f"PPGEN {selections(list(rows.ppgen_selection))}", highlight=False)


def cmd_privacy(args: argparse.Namespace) -> int:
    table = load_source(args)
    X, y = table.schema.encode(table.frame, source=table.source)
    settings = PrivacySettings(ls=args.ls, cs=args.cs, owners=args.owners, learners=tuple(args.learner),
                               disclosure=resolve_disclosure("apt", args.disclosure), global_models=args.global_models,
                               max_suppression=args.max_suppression, folds=args.folds, repeats=args.repeats,
                               seed=args.seed, confidence=args.confidence, model_settings=dict(args.model_settings),
                               on_path=args.on_path, scope=args.scope)
    raw = run_privacy(table.schema, X, y, settings, jobs=args.jobs)
    summary = summarize_privacy(raw)
    results = Results("privacy", table, asdict(settings), raw, summary)
    name = Path(table.source).name
    title = (f"{name}: PPGEN ({settings.owners} owner(s), APT) vs LD, {settings.folds}-fold CV x {settings.repeats} "
             f"(data = share of folds with data)")
    return finish(args, results, lambda out_dir: plot_privacy(summary, settings, name, out_dir),
                  lambda: _show(summary, raw, title, len(settings.learners) > 1))


def configure(p: argparse.ArgumentParser) -> None:
    """`experiment privacy`: the table, the (c,l) grid, the owners' APT release, the global models, LD."""
    add_table_source(p, "nursery")
    int_list(p, "--ls", minimum=2, default=PrivacySettings.ls, metavar="L",
             help="l values of the (c,l)-diversity requirement (default 2 3 4 5)")
    float_list(p, "--cs", default=PrivacySettings.cs, metavar="C",
               help="c values of the (c,l)-diversity requirement (default 5 10 15 20)")
    add_owners(p, default=PrivacySettings.owners, help="data owners the training part is dealt among for PPGEN "
                                                       "(default 1)")
    add_learner(p, default=PrivacySettings.learners[0], several=True,
                help="owners' local learners, each run on the same owners and folds (the paper's multiway: APT merges "
                     "siblings of a multiway split; admissible: grown to the requirement; a binary CART tree collapses "
                     "to its root under any l >= 2)")
    add_confidence(p, "for the admissible learner among --learner: ")
    add_disclosure(p, help="what the released trees disclose, and so the form APT checks (hit_miss: misses spread "
                           "evenly over the other classes)")
    add_global_models(p, choices=GLOBAL_MODELS, default=PrivacySettings.global_models,
                      help="global models learned from BASIS, PPGEN and LD data")
    add_model_settings(p)
    add_on_path(p, default=PrivacySettings.on_path)
    p.add_argument("--scope", choices=("release", "leaf"), default=PrivacySettings.scope,
                   help="whom each requirement holds against: release (the default: no reader combining the released "
                        "leaves believes beyond it, APT's release guard) or leaf (the paper's per-leaf requirement)")
    p.add_argument("--max-suppression", type=float, default=PrivacySettings.max_suppression,
                   help="share of the training rows LD may suppress, in [0, 1) (default %(default)s)")
    add_common_options(p, name="privacy", default_folds=PrivacySettings.folds, default_repeats=PrivacySettings.repeats)
    p.set_defaults(func=cmd_privacy)
