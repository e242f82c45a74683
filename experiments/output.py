"""The output layer every `modelshare experiment` shares.

Each experiment is a list of independent tasks (one per fold, repeat and setting), so it can run
in parallel and still give the same numbers for any ``--jobs``: a task carries its own seed, a
pure function of (seed, repeat, fold, setting), never state from a shared random generator, and
results are collected in task order. Every experiment writes the same files into ``--out``:

- ``results.csv``: the raw measurements, one row per fold/repeat/setting;
- ``summary.csv``: mean and standard deviation over folds and repeats per setting;
- ``results.json``: experiment, source table, settings, summary and raw rows (what ``--json`` prints);
- PNG plots with error bars (mean ± sd over folds and repeats) and, where the paper prints a
  number for the setting, the paper's value as a reference marker.

Files are written atomically (temporary file in the same directory, then rename), so an
interrupted run never leaves a half-written result behind.
"""

from __future__ import annotations

import argparse
import json
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pandas as pd
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from sklearn.model_selection import KFold, StratifiedKFold, train_test_split

from modelshare.cli.common import add_json, add_seed, add_test_fraction, err, positive_int
from modelshare.common.data.datasets import LoadedTable
from modelshare.common.files import atomic_write, atomic_write_via

__all__ = [
    "add_common_options",
    "reference_name",
    "Split",
    "splits",
    "run_tasks",
    "Results",
    "records",
    "write_results",
    "finish",
    "Series",
    "PlotResult",
    "series_by",
    "plot_lines",
    "plot_bars",
    "spread",
    "selections",
    "ACCURACY",
]

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")

ACCURACY = "accuracy (fraction of test rows)"
"""The y-axis label of every accuracy plot."""


# ------------------------------------------------------------------ options
def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type for an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value

    return parse


def _out_dir(text: str) -> Path:
    """An argparse type for an output directory: refuse an existing file before any work is done."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    return path


def add_common_options(
    parser: argparse.ArgumentParser,
    *,
    name: str,
    default_folds: int,
    default_repeats: int,
    holdout: bool = False,
    references: Mapping[str, str] | None = None,
) -> None:
    """Add --folds --repeats --seed --jobs --out --json (and --test-fraction, --reference) to ``parser``.

    ``holdout`` experiments accept ``--folds 1``: one random train/test split per repeat with
    ``--test-fraction`` of the rows held out (the attacks and k-AnonToRdt papers' protocol); others
    need at least two folds. ``references`` maps each table of paper values the experiment can
    draw to where it comes from; ``--reference`` picks one (default: the bundled dataset's own).
    """
    group = parser.add_argument_group("evaluation and output (common to every experiment)")
    if holdout:
        group.add_argument("--folds", type=_count(1), default=default_folds,
                           help="1 = one random train/test split per repeat (see --test-fraction); K >= 2 = K-fold "
                                f"cross-validation per repeat (default {default_folds})")
        add_test_fraction(group, help="share of the rows held out for testing when --folds is 1")
    else:
        group.add_argument("--folds", type=_count(2), default=default_folds,
                           help=f"cross-validation folds (default {default_folds})")
    group.add_argument("--repeats", type=positive_int, default=default_repeats,
                       help=f"repetitions of the whole split / cross-validation (default {default_repeats})")
    add_seed(group, default=0, help="master random seed; each task's randomness derives from (seed, repeat, fold, "
                                    "setting) alone, so --jobs never changes the results (default 0)")
    group.add_argument("--jobs", type=positive_int, default=1,
                       help="worker processes running folds/repeats/settings in parallel (default 1)")
    group.add_argument("--out", type=_out_dir, default=Path("results") / name,
                       help=f"directory for results.csv, summary.csv, results.json and the PNG plots "
                            f"(default results/{name}/ under the current directory)")
    add_json(group, "results.json's document")
    if references:
        tables = "; ".join(f"{name}: {where}" for name, where in sorted(references.items()))
        group.add_argument("--reference", choices=[*sorted(references), "none"], default=None,
                           help=f"whose paper values to draw as reference markers ({tables}); default: the "
                                "bundled dataset's, if the paper reports it; 'none' draws no markers")


def reference_name(args: argparse.Namespace, available: Collection[str]) -> str | None:
    """The paper table to draw: ``--reference``, else the bundled dataset's if ``available`` has it."""
    if args.reference is not None:
        return None if args.reference == "none" else args.reference
    if args.data is not None:
        return None
    name = args.dataset or args.default_dataset
    return name if name in available else None


# ------------------------------------------------------------------- splits
@dataclass(frozen=True)
class Split:
    """Row indices of one train/test split: fold ``fold`` of repeat ``repeat``."""

    repeat: int
    fold: int
    train: np.ndarray
    test: np.ndarray


def splits(y: np.ndarray, *, folds: int, repeats: int, seed: int, test_size: float, stratify: bool) -> list[Split]:
    """Every (repeat, fold) split; repeat ``i`` is drawn with ``random_state = seed + i``.

    ``folds == 1`` is ``train_test_split(..., test_size, random_state=seed + i)``: the same rows,
    in the same order, as splitting the arrays themselves, so existing single-split results are
    unchanged. ``folds >= 2`` is (stratified) shuffled K-fold with the same random state.
    """
    if y.shape[0] < max(folds, 2):
        raise ValueError(f"{y.shape[0]} rows cannot be split into {max(folds, 2)} parts")
    rows = np.arange(y.shape[0])
    out: list[Split] = []
    for i in range(repeats):
        if folds == 1:
            train, test = train_test_split(rows, test_size=test_size, random_state=seed + i,
                                           stratify=y if stratify else None)
            out.append(Split(i, 0, train, test))
            continue
        kfold = (StratifiedKFold if stratify else KFold)(n_splits=folds, shuffle=True, random_state=seed + i)
        out.extend(Split(i, f, train, test) for f, (train, test) in enumerate(kfold.split(rows, y)))
    return out


def held_out_or_separate(y: np.ndarray, n_test: int | None, *, folds: int, repeats: int, seed: int,
                         test_size: float, stratify: bool) -> list[Split]:
    """`splits` of the table, or with a separate test table of ``n_test`` rows, all rows per repeat against it."""
    if n_test is None:
        return splits(y, folds=folds, repeats=repeats, seed=seed, test_size=test_size, stratify=stratify)
    return [Split(i, 0, np.arange(y.shape[0]), np.arange(n_test)) for i in range(repeats)]


def task_seed(seed: int, split: Split, setting: str) -> int:
    """A task's seed from (seed, repeat, fold, the setting's name): independent of grid order and of ``--jobs``."""
    name = zlib.crc32(setting.encode())
    return int(np.random.SeedSequence([seed % 2**32, split.repeat, split.fold, name]).generate_state(1)[0])


# -------------------------------------------------------------------- tasks
_CONTEXT: Any = None


def _install(context: Any) -> None:
    """Worker initializer: keep the shared read-only context (data, settings) once per process."""
    global _CONTEXT
    _CONTEXT = context


def _call(fn: Callable[[Any, T], R], task: T) -> R:
    return fn(_CONTEXT, task)


def run_tasks(fn: Callable[[C, T], R], tasks: Sequence[T], *, context: C, jobs: int, label: str) -> list[R]:
    """``[fn(context, t) for t in tasks]``, in ``jobs`` processes, with a progress bar on stderr.

    ``fn`` must be a module-level function and every task must carry its own seed: the result
    list is in task order whatever finishes first, so the output does not depend on ``jobs``.
    ``context`` (the table, the settings) is sent to each worker once, not with every task.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    if jobs == 1 or len(tasks) <= 1:
        results: list[R] = []
        with Progress(*columns, console=err, transient=True) as progress:
            bar = progress.add_task(label, total=len(tasks))
            for task in tasks:
                results.append(fn(context, task))
                progress.advance(bar)
        return results
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), initializer=_install, initargs=(context,))
    try:
        # Submit before the progress bar starts its refresh thread: workers start without it.
        futures = [pool.submit(_call, fn, task) for task in tasks]
        with Progress(*columns, console=err, transient=True) as progress:
            bar = progress.add_task(f"{label} ({min(jobs, len(tasks))} processes)", total=len(tasks))
            for future in as_completed(futures):
                future.result()  # raise a worker's error now, not after the rest ran
                progress.advance(bar)
        return [future.result() for future in futures]
    finally:
        pool.shutdown(cancel_futures=True)


# ------------------------------------------------------------------ results
@dataclass(frozen=True)
class Results:
    """An experiment's outcome: the input table, its settings, raw measurements and summary."""

    experiment: str
    table: LoadedTable
    settings: Mapping[str, Any]
    raw: pd.DataFrame
    summary: pd.DataFrame
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Experiment-specific top-level entries of the document (JSON-ready)."""

    def document(self) -> dict[str, Any]:
        """The JSON document of ``results.json`` (NaN becomes null)."""
        return {
            "experiment": self.experiment,
            "source": self.table.source,
            "rows": int(len(self.table.frame)),
            "dropped_rows": self.table.dropped_rows,
            "schema_fingerprint": self.table.schema.fingerprint,
            "settings": dict(self.settings),
            "summary": records(self.summary),
            "raw": records(self.raw),
            **self.extra,
        }


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``frame`` as JSON-ready records (NaN becomes None)."""
    rows: list[dict[str, Any]] = json.loads(frame.to_json(orient="records"))
    return rows


def write_results(out_dir: Path, results: Results) -> list[Path]:
    """Write results.csv, summary.csv and results.json into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw, summary, document = out_dir / "results.csv", out_dir / "summary.csv", out_dir / "results.json"
    atomic_write_via(raw, lambda p: results.raw.to_csv(p, index=False))
    atomic_write_via(summary, lambda p: results.summary.to_csv(p, index=False))
    atomic_write(document, json.dumps(results.document(), indent=2) + "\n")
    return [raw, summary, document]


def finish(args: argparse.Namespace, results: Results, plots: Callable[[Path], Sequence[PlotResult]],
           show: Callable[[], None]) -> int:
    """Write the files and plots into ``args.out``, then print JSON (``--json``) or ``show()`` the table."""
    files = write_results(args.out, results)
    files += [plot.path for plot in plots(args.out)]
    err.print(f"wrote {', '.join(f.name for f in files)} to {args.out}", highlight=False)
    if args.json:
        print(json.dumps(results.document(), indent=2))
    else:
        show()
    return 0


# -------------------------------------------------------------------- plots
def spread(folds: int, repeats: int) -> str:
    """What a plot's error bars are over, for its title."""
    plural = "s" if repeats > 1 else ""
    if folds == 1:
        return f"mean ± sd over {repeats} random split{plural}"
    return f"mean ± sd over {folds} folds × {repeats} repeat{plural}"


@dataclass(frozen=True)
class Series:
    """One curve (or one bar colour): mean and sd per x, and the paper's values at some x."""

    label: str
    x: tuple[Any, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    reference: tuple[tuple[Any, float], ...] = ()


class PlotResult(NamedTuple):
    """A written PNG, how many series it draws and how many paper values it marks."""

    path: Path
    series: int
    references: int


def series_by(
    summary: pd.DataFrame,
    *,
    x: str,
    mean: str,
    std: str,
    by: Sequence[str],
    label: Callable[[tuple[Any, ...]], str],
    reference: Callable[[tuple[Any, ...]], Mapping[Any, float]] | None = None,
) -> list[Series]:
    """One series per group of ``by`` columns of ``summary``: column ``mean`` ± column ``std`` over ``x``.

    Groups whose mean is NaN everywhere (nothing measured) are left out; a NaN sd (one fold
    and repeat) draws no error bar. ``reference(key)`` maps x to the paper's value for the group;
    only x values that were run are marked.
    """
    for column in (x, mean, std, *by):
        if column not in summary.columns:
            raise KeyError(f"summary has no column {column!r}; it has {list(summary.columns)}")
    groups = summary.groupby(list(by), sort=False) if by else [((), summary)]
    out: list[Series] = []
    for key, group in groups:
        group = group.sort_values(x, kind="stable")
        means = group[mean].to_numpy(dtype=float)
        if np.isnan(means).all():
            continue
        xs = tuple(group[x].tolist())
        paper = reference(tuple(key)) if reference is not None else {}
        out.append(Series(
            label=label(tuple(key)),
            x=xs,
            mean=tuple(means.tolist()),
            std=tuple(np.nan_to_num(group[std].to_numpy(dtype=float)).tolist()),
            reference=tuple((v, paper[v]) for v in xs if v in paper),
        ))
    return out


def _axes() -> tuple[Any, Any]:
    """A figure on the Agg canvas (no pyplot, no global backend switch) and its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.8))
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _mark(ax: Any, xs: Sequence[float], ys: Sequence[float], color: Any) -> int:
    """Draw paper values as stars in the series' colour; return how many."""
    if len(xs):
        ax.scatter(xs, ys, marker="*", s=140, facecolors=[color], edgecolors="black", linewidths=0.8, zorder=5)
    return len(xs)


def _save(figure: Any, ax: Any, path: Path, *, title: str, xlabel: str, ylabel: str, marked: int,
          reference_label: str) -> None:
    """Label the axes, add the legend (with one entry for all paper markers) and write the PNG."""
    from matplotlib.lines import Line2D

    ax.set_title(title, fontsize="medium")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if marked:
        handles.append(Line2D([], [], linestyle="none", marker="*", markersize=12, markerfacecolor="white",
                              markeredgecolor="black", label=reference_label))
    if handles:
        ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_via(path, lambda p: figure.savefig(p, format="png", dpi=110, bbox_inches="tight"))


def plot_lines(path: Path, series: Sequence[Series], *, title: str, xlabel: str, ylabel: str,
               xscale: str = "linear", colors: Mapping[str, str] | None = None,
               reference_label: str = "paper's value") -> PlotResult:
    """Lines with error bars (mean ± sd) over numeric x, paper values as stars; a PNG at ``path``.

    ``xscale`` is matplotlib's ("log" for rates spanning decades); ``colors`` fixes a series'
    colour by its label, so one method looks the same in every plot.
    """
    figure, ax = _axes()
    marked = 0
    for s in series:
        drawn = ax.errorbar(s.x, s.mean, yerr=s.std, marker="o", markersize=4, capsize=3, label=s.label,
                            color=(colors or {}).get(s.label))
        marked += _mark(ax, [x for x, _ in s.reference], [v for _, v in s.reference], drawn.lines[0].get_color())
    ax.set_xscale(xscale)
    ticks = sorted({x for s in series for x in s.x})
    if 0 < len(ticks) <= 12:
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.minorticks_off()
    _save(figure, ax, path, title=title, xlabel=xlabel, ylabel=ylabel, marked=marked, reference_label=reference_label)
    return PlotResult(path, len(series), marked)


def plot_bars(path: Path, series: Sequence[Series], *, title: str, xlabel: str, ylabel: str,
              tick: Callable[[Any], str] = str, colors: Mapping[str, str] | None = None,
              reference_label: str = "paper's value") -> PlotResult:
    """Grouped bars with error bars (mean ± sd) per category x, paper values as stars; a PNG at ``path``.

    ``tick`` labels a category on the x axis; ``colors`` fixes a series' colour by its label.
    """
    figure, ax = _axes()
    categories = sorted({x for s in series for x in s.x})
    position = {c: i for i, c in enumerate(categories)}
    width = 0.8 / max(len(series), 1)
    marked = 0
    for i, s in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        bars = ax.bar([position[x] + offset for x in s.x], s.mean, width, yerr=s.std, capsize=3, label=s.label,
                      color=(colors or {}).get(s.label))
        color = bars.patches[0].get_facecolor()
        marked += _mark(ax, [position[x] + offset for x, _ in s.reference], [v for _, v in s.reference], color)
    ax.set_xticks(range(len(categories)), [tick(c) for c in categories])
    _save(figure, ax, path, title=title, xlabel=xlabel, ylabel=ylabel, marked=marked, reference_label=reference_label)
    return PlotResult(path, len(series), marked)


def selections(texts: Sequence[str]) -> str:
    """How a model's hyperparameters were set over the folds, one phrase: each distinct setting (``auto`` by the values
    it chose, without its CV sentence) with how many folds had it, most frequent first; ``-`` when none is known."""
    picks = pd.Series([t.split(" by ")[0] for t in texts if t], dtype=object)
    if picks.empty:
        return "-"
    return "; ".join(f"{pick} ({count}x)" for pick, count in picks.value_counts(sort=True).items())
