"""Accuracy against epsilon of every eps-DP release mechanism (`modelshare experiment dp`).

Protocol: ``repeats`` random 80/20 splits (``train_test_split(..., random_state=seed + i)``,
stratified; ``--folds K`` runs stratified K-fold cross-validation per repeat instead; with
``--test-data`` every repeat trains on the whole table and tests on that separate table). Per
split, every ``dp`` mechanism of `modelshare.common.mechanisms.registry` (the registry, not a fixed list, so
a mechanism registered later is run too; ``--mechanisms`` keeps some) releases ``trees`` trees at each total epsilon
through `modelshare.common.mechanisms.release.release` with ``dp:epsilon=E,trees=T``, exactly as an owner releases. Each
release is scored on the test rows twice over:

- ``ensemble``: the released trees themselves (summed noisy leaf counts, Alg. 2);
- ``pgen->MODEL``: each ``--global-models`` model learned exactly as the miner learns it: PGEN
  pseudo-data (scale 1, beta 1: no sampling to undo; at most `MAX_DP_PGEN_ROWS` rows,
  `modelshare.miner_node.dp_pgen`) from the release, and the model's hyperparameters set as the miner sets
  them (`modelshare.miner_node.selection.choose`, the study's ``--model-setting``): by default the decision
  tree's are cross-validated on the pseudo rows (``auto``; folds hold out whole released trees
  where there are at least 3), the others keep the fixed rule; ``decision-tree=fixed`` is the
  0.5 % leaf floor (`PGEN_LEAF_SHARE`) of the runs before studies could choose.

Each release spends ``--prior-share`` of its epsilon on a noisy class histogram (default 0.1,
`modelshare.common.mechanisms.class_prior`; 0: the papers' mechanisms): ``class-prior`` rows score its majority class,
the auto decision tree takes it as a candidate (`modelshare.miner_node.selection.choose`), and a release that declined
(the histogram alone) is scored as the miner scores it, its models falling back to the prior.

Two-class tables also report the ROC AUC of every scorer (the released trees' summed leaf counts,
a global model's predicted probabilities), as the miner's results do.

The non-private references, per split: the training rows' majority class, and a scikit-learn
CART of depth 5 (the miner's decision tree with ``max_depth=5``) trained on the real rows.

Depth per mechanism (``--max-depth MECH=D``, or ``--max-depth D`` for all, else `default_depth`): laplace-rdt 4, dpea 3,
diffpets floor(|A| / 2) as in the DiffPETs paper, any other mechanism its registry default (dpea-nb 1) or 4. A
mechanism whose record bounds its trees or depth (``max_trees``, ``max_depth``: dpea-nb releases one root of
depth 1) runs at no more than those; the rows state the trees and depth it ran at.

dpea-nb (`modelshare.common.mechanisms.dpea_nb`) releases a model rather than a partition, so it is scored as the miner
scores it: ``ensemble`` is its calibrated naive Bayes (`modelshare.miner_node.calibrated_nb.CalibratedNB`, the
``calibrated-nb`` release model) and its PGEN rows are the miner's for it (`modelshare.miner_node.tasks.pseudo_data`:
root rows, histogram attributes redrawn, calibrated labels). ``--pgen-scale`` multiplies every release's
pseudo rows (default 1). ``--dpea-steps`` (only
while ``dpea`` is registered) sweeps DPEA's embedding depth d, which its registry trainer fixes at
d = D; those releases are trained by `modelshare.common.mechanisms.dpea.DPEA` itself, the same trainer with d set.

Each (split, mechanism, d, epsilon) is one task seeded from (seed, repeat, fold, and a CRC of the
setting's name), so neither ``--jobs`` nor the registry's contents nor the epsilon list change a
setting's numbers. Outputs: ``results.csv`` (one row per split x mechanism x d x epsilon x
scored-as), ``summary.csv``, ``results.json`` (with the references) and ``accuracy_vs_epsilon.png``
(log x axis, one line per mechanism and scorer, references as flat grey lines).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table

from experiments.output import (
    ACCURACY,
    PlotResult,
    Results,
    Series,
    Split,
    add_common_options,
    finish,
    held_out_or_separate,
    plot_lines,
    run_tasks,
    series_by,
    spread,
    task_seed,
)
from modelshare.cli.common import (
    add_global_models,
    add_list,
    add_model_settings,
    float_list,
    int_list,
    note_dropped,
    out,
    positive_int,
)
from modelshare.cli.inputs import add_table_source, load_source
from modelshare.common.data.datasets import load_table as load_file
from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.class_prior import DEFAULT_PRIOR_SHARE, check_prior_share, class_prior_of
from modelshare.common.mechanisms.dpea import DOMAINS, registered_dpea
from modelshare.common.mechanisms.dpea import MECHANISM as DPEA_NAME
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.study import ModelPlan
from modelshare.common.trees.learners.random_tree import ensemble_predict_proba
from modelshare.common.trees.tree import Tree
from modelshare.miner_node.calibrated_nb import CalibratedNB, is_nb_release
from modelshare.miner_node.class_prior import CLASS_PRIOR, ClassPriorModel
from modelshare.miner_node.dp_pgen import dp_pgen_scale
from modelshare.miner_node.global_models import GLOBAL_MODELS, make_global_model
from modelshare.miner_node.pgen import pgen_ensemble
from modelshare.miner_node.selection import choose
from modelshare.miner_node.tasks import pseudo_data, pseudo_sources, two_class_auc

__all__ = ["DpSettings", "default_depth", "run_dp", "summarize_dp", "references", "configure"]

DEFAULT_EPSILONS = (0.01, 0.1, 0.5, 1.0, 10.0)
DEFAULT_DEPTHS: dict[str, int] = {"laplace-rdt": 4, DPEA_NAME: 3}
"""Depth per mechanism where it is a constant; diffpets' depends on the schema (`default_depth`)."""
FALLBACK_DEPTH = 4
REFERENCE_DEPTH = 5
ENSEMBLE = "ensemble"
REFERENCE_NAMES = {"majority": "majority class (non-private)",
                   "tree": f"CART depth {REFERENCE_DEPTH} on the real rows (non-private)"}


def _dp_mechanisms() -> tuple[str, ...]:
    """The registered ``dp`` mechanisms, in registration order (the order of the results)."""
    return tuple(m.name for m in registry.mechanisms() if m.family == "dp")


def default_depth(mechanism: str, schema: Schema) -> int:
    """The depth a mechanism runs at without ``--max-depth``: floor(|A| / 2) for diffpets, as its paper does."""
    if mechanism == "diffpets":
        return max(1, schema.n_attributes // 2)
    return DEFAULT_DEPTHS.get(mechanism) or registry.get(mechanism).default_max_depth or FALLBACK_DEPTH


def _bounded(mechanism: str, trees: int, depth: int) -> tuple[int, int]:
    """(trees, depth) capped at the mechanism's own ``max_trees`` and ``max_depth`` (module docstring)."""
    record = registry.get(mechanism)
    return min(trees, record.max_trees or trees), min(depth, record.max_depth or depth)


@dataclass(frozen=True)
class DpSettings:
    """The grid (mechanism x DPEA d x epsilon) at one number of trees, and the split protocol."""

    mechanisms: tuple[str, ...]
    depths: dict[str, int]
    epsilons: tuple[float, ...] = DEFAULT_EPSILONS
    trees: int = 10
    dpea_steps: tuple[int, ...] = ()
    dpea_domain: str = "compact"
    global_models: tuple[str, ...] = ("decision-tree",)
    # study.toml's [global_models], as --model-setting gives them
    model_settings: dict[str, Any] = field(default_factory=dict)
    folds: int = 1
    pgen_scale: float = 1.0
    prior_share: float = DEFAULT_PRIOR_SHARE
    repeats: int = 3
    test_size: float = 0.2
    seed: int = 0
    test_data: str | None = None

    @property
    def grid(self) -> list[tuple[str, int | None, float]]:
        """Every (mechanism, d, epsilon); d is None except for a ``--dpea-steps`` sweep of dpea."""
        return [(m, d, e) for m in self.mechanisms
                for d in (self.dpea_steps if m == DPEA_NAME and self.dpea_steps else (None,))
                for e in self.epsilons]


def _release(schema: Schema, X: np.ndarray, y: np.ndarray, mechanism: str, steps: int | None, epsilon: float,
             trees: int, depth: int, seed: int, dpea_domain: str = "compact",
             prior_share: float = DEFAULT_PRIOR_SHARE) -> tuple[list[Tree], PrivacyReport | None]:
    """The released trees and report: through `release`, or DPEA's own trainer (no report, no class histogram) when
    its d is swept or its domain is the paper's."""
    if mechanism == DPEA_NAME and (steps is not None or dpea_domain != "compact"):
        dpea = registered_dpea(epsilon, trees, depth, schema, dpea_domain, embedding_depth=steps)
        return dpea.fit(schema, X, y, np.random.default_rng(seed)).trees, None
    found = release(mechanism, schema=schema, X=X, y=y, requirement=f"dp:epsilon={epsilon:g},trees={trees}",
                    max_depth=depth, random_state=seed, prior_share=prior_share)
    return list(found.classification_trees), found.report


@dataclass(frozen=True)
class _Task:
    """Setting ``index`` of the grid on one split, with its own seed."""

    split: Split
    index: int
    seed: int


Context = tuple[Schema, np.ndarray, np.ndarray, np.ndarray, np.ndarray, DpSettings]
"""(schema, X, y, X_test, y_test, settings): a split's test indices point into X_test, y_test."""


def model_plan(settings: DpSettings, mechanism: str, seed: int) -> ModelPlan:
    """What the miner's model choice reads of the study: mechanism, seed, global models and their settings.

    Raises ValueError naming every fault of the settings, as a study's validation would.
    """
    return ModelPlan.checked(settings.global_models, settings.model_settings, seed=seed, mechanism=mechanism)


class _Proba:
    """The released trees as a model with ``predict_proba`` (summed leaf counts, Alg. 2), for `two_class_auc`."""

    def __init__(self, trees: Sequence[Tree]) -> None:
        self.trees = trees

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return ensemble_predict_proba(self.trees, X)


def _score(model: Any, X: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[float, float]:
    """(accuracy, ROC AUC or NaN when the task is not two-class) of ``model`` on ``X, y``."""
    proba = np.asarray(model.predict_proba(X))
    accuracy = float((proba.argmax(axis=1) == y).mean()) if isinstance(model, _Proba) else float(
        (model.predict(X) == y).mean())
    auc = two_class_auc(model, X, y, n_classes)
    return accuracy, float("nan") if auc is None else auc


def _run_setting(context: Context, task: _Task) -> list[dict[str, Any]]:
    schema, X, y, X_eval, y_eval, settings = context
    mechanism, steps, epsilon = settings.grid[task.index]
    n_trees, depth = _bounded(mechanism, settings.trees, settings.depths[mechanism])
    X_tr, y_tr = X[task.split.train], y[task.split.train]
    X_te, y_te = X_eval[task.split.test], y_eval[task.split.test]
    rng = np.random.default_rng(task.seed)
    trees, report = _release(schema, X_tr, y_tr, mechanism, steps, epsilon, n_trees, depth, task.seed,
                             settings.dpea_domain, settings.prior_share)
    prior = class_prior_of(report)
    floor = None if prior is None else ClassPriorModel(prior.estimate)
    if prior is not None and prior.declined is not None:  # the histogram alone: no trees, no pseudo rows
        scores: dict[str, tuple[float, float]] = {ENSEMBLE: (float("nan"), float("nan"))}
        Xp, yp, groups = np.empty((0, schema.n_attributes)), np.empty(0, dtype=np.int64), None
    elif is_nb_release(report):  # a model, scored and regenerated as the miner does (module docstring)
        scores = {ENSEMBLE: _score(CalibratedNB([(trees, report)]), X_te, y_te, schema.n_classes)}
        Xp, yp = pseudo_data(trees, report, settings.pgen_scale, rng, "exact")
        groups = None
    else:
        scores = {ENSEMBLE: _score(_Proba(trees), X_te, y_te, schema.n_classes)}
        scale = dp_pgen_scale(settings.pgen_scale, mechanism, trees)
        Xp, yp = pgen_ensemble(trees, scale=scale, beta=1.0, rng=rng)
        groups = pseudo_sources(trees, None, scale, len(yp)) if len(trees) > 1 else None
    plan = model_plan(settings, mechanism, task.seed)
    chosen: dict[str, str] = {}
    for name in settings.global_models:
        result = (float("nan"), float("nan"))  # a release whose counts are all 0 yields no PGEN rows to learn from
        if len(yp):
            def build(params: dict[str, Any], name: str = name) -> Any:
                return make_global_model(name, schema, random_state=task.seed, **params)

            choice = choose(name, plan, Xp, yp, build, regression=False, groups=groups, floor=floor)
            model = floor if choice.floor else build(choice.parameters).fit(Xp, yp)
            result = _score(model, X_te, y_te, schema.n_classes)
            chosen[f"pgen->{name}"] = choice.selection
        elif floor is not None:  # declined: the miner's models fall back to the prior
            result = _score(floor, X_te, y_te, schema.n_classes)
            chosen[f"pgen->{name}"] = "declined: the class prior's majority class"
        scores[f"pgen->{name}"] = result
    if floor is not None:
        scores[CLASS_PRIOR] = _score(floor, X_te, y_te, schema.n_classes)
    return [{"repeat": task.split.repeat, "fold": task.split.fold, "mechanism": mechanism, "steps": steps,
             "depth": depth, "trees": n_trees, "epsilon": epsilon, "scored_as": scored_as,
             "accuracy": acc, "auc": auc, "pgen_rows": int(len(yp)), "selection": chosen.get(scored_as, "")}
            for scored_as, (acc, auc) in scores.items()]


def _seed(settings: DpSettings, split: Split, index: int) -> int:
    """A task's seed from (seed, repeat, fold, the setting's name): independent of grid order and registry."""
    mechanism, steps, epsilon = settings.grid[index]
    return task_seed(settings.seed, split, f"{mechanism}/{steps}/{epsilon!r}")


def run_dp(schema: Schema, X: np.ndarray, y: np.ndarray, settings: DpSettings, *, jobs: int = 1,
           test: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The raw records (one per split x setting x scored-as) and the per-split references.

    ``test`` is a separate test table (X, y) over ``schema``; without it the splits hold out rows.
    """
    X_eval, y_eval = test if test is not None else (X, y)
    split_list = held_out_or_separate(y, None if test is None else y_eval.shape[0], folds=settings.folds,
                                      repeats=settings.repeats, seed=settings.seed, test_size=settings.test_size,
                                      stratify=True)
    tasks = [_Task(split, j, _seed(settings, split, j)) for split in split_list for j in range(len(settings.grid))]
    context: Context = (schema, X, y, X_eval, y_eval, settings)
    rows = run_tasks(_run_setting, tasks, context=context, jobs=jobs,
                     label=f"releases x splits ({len(settings.grid)} settings)")
    raw = pd.DataFrame.from_records([r for task_rows in rows for r in task_rows])
    raw["steps"] = raw["steps"].astype("Int64")
    return raw, references(schema, X, y, X_eval, y_eval, split_list, settings.seed)


def references(schema: Schema, X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, y_eval: np.ndarray,
               split_list: Sequence[Split], seed: int) -> pd.DataFrame:
    """Per split, the non-private accuracies: majority class and a depth-5 CART on the real training rows."""
    records = []
    for split in split_list:
        y_tr, y_te = y[split.train], y_eval[split.test]
        majority = np.bincount(y_tr, minlength=schema.n_classes).argmax()
        tree = make_global_model("decision-tree", schema, random_state=seed + split.repeat,
                                 max_depth=REFERENCE_DEPTH).fit(X[split.train], y_tr)
        records.append({"repeat": split.repeat, "fold": split.fold, "majority": float((y_te == majority).mean()),
                        "tree": float((tree.predict(X_eval[split.test]) == y_te).mean())})
    return pd.DataFrame.from_records(records)


def summarize_dp(raw: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation of the accuracy over the splits per (mechanism, d, epsilon, scored-as)."""
    keys = ["mechanism", "steps", "depth", "trees", "scored_as", "epsilon"]
    grouped = raw.groupby(keys, sort=False, dropna=False)
    summary = grouped["accuracy"].agg(["mean", "std", "count"])
    summary.columns = ["accuracy_mean", "accuracy_std", "splits"]
    summary["auc_mean"] = grouped["auc"].mean()
    return summary.reset_index()


def _label(mechanism: str, steps: Any, depth: int, scored_as: str) -> str:
    """A line's name: mechanism, depth (and DPEA's d), scorer."""
    d = "" if pd.isna(steps) else f", d={int(steps)}"
    return f"{mechanism} (D={depth}{d}) {scored_as}"


def _plot(summary: pd.DataFrame, refs: pd.DataFrame, settings: DpSettings, source: str,
          out_dir: Path) -> list[PlotResult]:
    """Accuracy against epsilon (log axis): a line per mechanism and scorer, the references flat in grey."""
    labelled = summary.assign(line=[_label(m, s, d, a) for m, s, d, a in
                                    summary[["mechanism", "steps", "depth", "scored_as"]].itertuples(index=False)])
    lines = series_by(labelled, x="epsilon", mean="accuracy_mean", std="accuracy_std", by=["line"],
                      label=lambda key: key[0])
    flat = [Series(REFERENCE_NAMES[name], settings.epsilons, (float(refs[name].mean()),) * len(settings.epsilons),
                   (float(np.nan_to_num(refs[name].std())),) * len(settings.epsilons)) for name in REFERENCE_NAMES]
    colors = {REFERENCE_NAMES["majority"]: "lightgrey", REFERENCE_NAMES["tree"]: "dimgrey"}
    return [plot_lines(out_dir / "accuracy_vs_epsilon.png", [*lines, *flat],
                       title=f"{source}: eps-DP releases of {settings.trees} trees "
                             f"({spread(settings.folds, settings.repeats)})",
                       xlabel="total privacy budget ε of the release (log scale)", ylabel=ACCURACY,
                       xscale="log", colors=colors)]


def _cell(mean: float, std: float, auc: float = float("nan")) -> str:
    """Mean ± sd of the accuracy, and the mean AUC where the task has one."""
    text = f"{mean:.3f} ± {0.0 if np.isnan(std) else std:.3f}"
    return text if np.isnan(auc) else f"{text} (AUC {auc:.3f})"


def _print(summary: pd.DataFrame, refs: pd.DataFrame, settings: DpSettings, title: str) -> None:
    table = Table(title=title)
    table.add_column("release, scored as")
    for epsilon in settings.epsilons:
        table.add_column(f"ε={epsilon:g}", justify="right")
    keys = ["mechanism", "steps", "depth", "scored_as"]
    for key, group in summary.groupby(keys, sort=False, dropna=False):
        cells = group.set_index("epsilon")
        table.add_row(_label(*key), *[_cell(cells.at[e, "accuracy_mean"], cells.at[e, "accuracy_std"],
                                            cells.at[e, "auc_mean"]) for e in settings.epsilons])
    for name, label in REFERENCE_NAMES.items():
        table.add_row(label, *[_cell(refs[name].mean(), refs[name].std())] * len(settings.epsilons))
    out.print(table)


def _depth_item(text: str) -> tuple[str | None, int]:
    """One ``--max-depth`` value: ``D`` (every mechanism) or ``MECH=D`` (one registered DP mechanism)."""
    name, sep, value = text.rpartition("=")
    if sep and name not in _dp_mechanisms():
        raise ValueError(f"MECH must be one of {', '.join(_dp_mechanisms())}")
    depth = int(value)
    if depth < 1:
        raise ValueError("D must be >= 1")
    return (name if sep else None), depth


def _depths(given: Sequence[tuple[str | None, int]], schema: Schema) -> dict[str, int]:
    """The depth of every registered mechanism: its ``MECH=D``, else a plain ``D``, else `default_depth`."""
    named = dict(given)
    return {m: named.get(m, named.get(None, default_depth(m, schema))) for m in _dp_mechanisms()}


def cmd_dp(args: argparse.Namespace) -> int:
    if any(e <= 0 for e in args.epsilons):
        raise ValueError(f"--epsilons must be positive, got {args.epsilons}")
    if not args.pgen_scale > 0:
        raise ValueError(f"--pgen-scale must be positive, got {args.pgen_scale:g}")
    if args.test_data is not None and args.folds != 1:
        raise ValueError("--test-data replaces the held-out rows: use it with --folds 1")
    table = load_source(args)
    schema = table.schema
    X, y = schema.encode(table.frame, source=table.source)
    test = None
    if args.test_data is not None:
        test_table = load_file(args.test_data, schema.class_name, schema=schema)
        note_dropped(test_table.source, test_table.dropped_rows)
        test = schema.encode(test_table.frame, source=test_table.source)
    depths = _depths(args.max_depth, schema)
    model_plan(DpSettings((), depths, global_models=args.global_models, model_settings=dict(args.model_settings)),
               DPEA_NAME, args.seed)  # refuse faulty settings before any release
    if args.dpea_steps and max(args.dpea_steps) > depths[DPEA_NAME]:
        raise ValueError(f"--dpea-steps {args.dpea_steps}: DPEA's d is at most its depth D={depths[DPEA_NAME]}")
    chosen = tuple(m for m in _dp_mechanisms() if args.mechanisms is None or m in args.mechanisms)
    settings = DpSettings(mechanisms=chosen, depths=depths, epsilons=args.epsilons, trees=args.trees,
                          dpea_steps=args.dpea_steps, dpea_domain=args.dpea_domain, global_models=args.global_models,
                          model_settings=dict(args.model_settings), folds=args.folds, pgen_scale=args.pgen_scale,
                          prior_share=check_prior_share(args.prior_share),
                          repeats=args.repeats, test_size=args.test_fraction, seed=args.seed,
                          test_data=None if args.test_data is None else str(args.test_data))
    raw, refs = run_dp(schema, X, y, settings, jobs=args.jobs, test=test)
    summary = summarize_dp(raw)
    reference_summary = {name: {"label": label, "mean": float(refs[name].mean()),
                                "std": float(np.nan_to_num(refs[name].std()))}
                         for name, label in REFERENCE_NAMES.items()}
    results = Results("dp", table, asdict(settings), raw, summary,
                      extra={"references": reference_summary, "references_raw": refs.to_dict(orient="records")})
    name = Path(table.source).name
    splits_run = len(refs)
    return finish(args, results, lambda out_dir: _plot(summary, refs, settings, name, out_dir),
                  lambda: _print(summary, refs, settings,
                                 f"{name}: eps-DP release accuracy (mean ± sd of {splits_run} splits)"))


def configure(p: argparse.ArgumentParser) -> None:
    """`experiment dp`: the table, the epsilons, the trees, the depths, the global models, DPEA's steps."""
    p.description = (f"Accuracy against epsilon of every eps-DP release mechanism ({', '.join(_dp_mechanisms())}): the "
                     "released ensemble itself and global models learned from its PGEN data.")
    add_table_source(p, "nursery")
    p.add_argument("--test-data", type=Path, default=None,
                   help="a separate test table over the same schema (e.g. Adult's adult.test); every repeat then "
                        "trains on all rows of the input table (needs --folds 1)")
    float_list(p, "--epsilons", default=DEFAULT_EPSILONS, metavar="EPS",
               help="total epsilons of a release (default 0.01 0.1 0.5 1 10)")
    p.add_argument("--trees", type=positive_int, default=10, help="trees per release (default 10)")
    add_list(p, "--max-depth", _depth_item, default=(), metavar="[MECH=]D", what="D or MECH=D",
             help="depth of the released trees: D for every mechanism, MECH=D for one, e.g. --max-depth "
                  "laplace-rdt=5 diffpets=4 (default laplace-rdt 4, dpea 3, diffpets floor(|attributes| / 2), "
                  "others 4)")
    p.add_argument("--mechanisms", nargs="+", choices=_dp_mechanisms(), default=None, metavar="MECH",
                   help=f"run only these dp mechanisms (default: every one registered: {', '.join(_dp_mechanisms())}); "
                        "a setting's numbers do not depend on which others run")
    p.add_argument("--pgen-scale", type=float, default=1.0,
                   help="pseudo rows per released row for the global models (default 1; at most "
                   "1,000,000 rows a release)")
    p.add_argument("--prior-share", type=float, default=DEFAULT_PRIOR_SHARE, metavar="SHARE",
                   help=f"share of each release's epsilon spent on its noisy class histogram, the floor the models are "
                        f"held to (default {DEFAULT_PRIOR_SHARE:g}; 0: the papers' mechanisms, "
                        "no histogram, no decline); rows 'class-prior' score the floor")
    add_global_models(p, choices=GLOBAL_MODELS, default=("decision-tree",), allow_none=True,
                      help="global models learned from each release's PGEN data (the experiment compares trees)")
    add_model_settings(p)
    if DPEA_NAME in _dp_mechanisms():
        int_list(p, "--dpea-steps", minimum=1, default=(), metavar="d",
                 help="sweep DPEA's embedding depth d (levels per exponential-mechanism selection), e.g. 1 2 3; "
                      "default: the registry's d = D")
        p.add_argument("--dpea-domain", choices=DOMAINS, default="compact",
                       help="DPEA's public domain: 'compact' (default, the registry trainer's: bins and category "
                            "groups capped so that the release fits 2 MB) or 'paper' (every category, the finest bins "
                            "up to 24 that fit 100,000 nodes per tree: the paper's reproductions)")
    p.set_defaults(func=cmd_dp, dpea_steps=(), dpea_domain="compact")
    add_common_options(p, name="dp", default_folds=1, default_repeats=3, holdout=True)
