"""``report.html``: one self-contained page that shows what a study did, for a person to look at.

`study_report` gathers what is known about a finished study from the miner's status and results
(and, in `modelshare simulate`, from what only a simulation knows: each owner's row count and the
BASIS models trained on the pooled raw rows); `write_report` renders it. The page holds:

* the study's settings and claims (mechanism, requirement, disclosure, schema and its fingerprint);
* one row per owner: its rows (where known), its release (leaves, tuples, claim, the miner's
  re-audit) or its refusal (reason code and its data-independent sentence), and what a reader of
  every release believes (the miner's figure across owners, `modelshare.common.privacy.combining.read_study`),
  when the miner read any release;
* every global model's score next to BASIS where known (``study results`` cannot know BASIS: the
  miner never sees raw rows, so the page says "not known");
* the privacy/utility picture: the scores per global model (BASIS against PGEN/PPGEN) and per owner
  what it held against what its release disclosed;
* the released trees, and the global decision tree, drawn as inline SVG (`modelshare.report_trees`).

The page needs no other file and no network: CSS is inline, plots are PNGs embedded as base64
data URIs (matplotlib on the Agg canvas), and every text that came from a party is escaped.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelshare.admin import global_tree_schema, reader_dict, settings_text
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.refusal import CODES
from modelshare.common.federation.serde import parameter_from_pb, study_from_pb
from modelshare.common.federation.wire import regression_tree_from_pb, tree_from_pb
from modelshare.common.files import atomic_write
from modelshare.common.trees.readable import grouped, plain_number
from modelshare.common.trees.regression import RegressionTree
from modelshare.common.trees.tree import Tree
from modelshare.legend import ACCURACY_GAP_POINTS, LEGEND, pseudo_data_name, vote_basis_key
from modelshare.miner_node.tree_vote import TREE_VOTE
from modelshare.report_trees import class_legend, draw_tree

__all__ = ["ModelRow", "OwnerRow", "StudyReport", "render_report", "study_report", "write_report"]

REPORT_FILE = "report.html"
MAX_TREES_DRAWN = 3
"""Trees drawn per owner; the rest of an ensemble is counted, not drawn."""

NOT_KNOWN = "not known"


@dataclass(frozen=True)
class OwnerRow:
    """One invited owner: its answer, its release or its refusal, and its row count where known."""

    owner: str
    answer: str  # "submitted", "refused" or "waiting" (no answer by the time the study was mined)
    rows: int | None = None
    leaves: int | None = None
    tuples: float | None = None
    claim: str | None = None
    audit_passed: bool | None = None
    pseudo_rows: int | None = None
    code: str | None = None  # a refusal's reason code
    reason: str = ""  # a refusal's sentence
    trees: tuple[Tree | RegressionTree, ...] = ()
    learner: str = ""  # the local learner the owner chose (learner "auto"); empty: the study's


@dataclass(frozen=True)
class ModelRow:
    """One global model's scores: accuracy (or RMSE and MAE), BASIS's where known, and its tree if it has one."""

    model: str
    train_rows: int
    score: float | None  # accuracy, or RMSE for regression
    basis: float | None = None
    mae: float | None = None
    basis_mae: float | None = None
    class_match: float | None = None
    path_match: float | None = None
    tree: Tree | None = None
    auc: float | None = None  # two-class studies: ROC AUC of the pseudo-data model, and of BASIS where known
    basis_auc: float | None = None
    settings: str = ""  # how the miner set the model's hyperparameters (`admin.settings_text`)
    basis_settings: str = ""  # how BASIS's were set, by the same setting on the raw rows, where known


@dataclass(frozen=True)
class StudyReport:
    """Everything the page shows, gathered by `study_report`."""

    study: dict[str, Any]
    state: str
    reason: str
    schema: Schema | RegressionSchema
    owners: tuple[OwnerRow, ...]
    models: tuple[ModelRow, ...]
    evaluation_rows: int
    evaluation_rows_dropped: int
    made_by: str  # "modelshare simulate" or "modelshare study results"
    basis_known: bool
    source: str | None = None
    off_path: str = ""  # how PGEN drew the attributes a path leaves free, in the miner's words
    on_path: str = ""  # how PGEN drew the categories inside a path's allowed sets, in the miner's words
    reader: dict[str, Any] | None = None  # what a reader of every release believes (`admin.reader_dict`)

    @property
    def regression(self) -> bool:
        return isinstance(self.schema, RegressionSchema)

    @property
    def released_label(self) -> str:
        """The global models' column: PGEN for an unprotected release ('none'), else PPGEN."""
        return pseudo_data_name(self.study["mechanism"])


def _split_reason(reason: str) -> tuple[str | None, str]:
    """A refusal's ``code: sentence`` as the miner records it; an owner from before codes sends a sentence alone."""
    code, sep, sentence = reason.partition(": ")
    return (code, sentence) if sep and code in CODES else (None, reason)


def _released_trees(entry: fpb.OwnerResult, schema: Schema | RegressionSchema) -> tuple[Tree | RegressionTree, ...]:
    where = f"{entry.owner_id}'s release"
    if isinstance(schema, RegressionSchema):
        return tuple(regression_tree_from_pb(t, schema, where=where) for t in entry.regression_trees)
    return tuple(tree_from_pb(t, schema, where=where) for t in entry.trees)


def _owner_rows(status: fpb.StudyStatus, results: fpb.StudyResults, schema: Schema | RegressionSchema,
                rows: Mapping[str, int]) -> tuple[OwnerRow, ...]:
    released = {o.owner_id: o for o in results.owners}
    out = []
    for answer in sorted(status.owners, key=lambda o: o.owner_id):
        owner = answer.owner_id
        if owner in released:
            r = released[owner]
            out.append(OwnerRow(owner, "submitted", rows.get(owner), r.leaves, r.tuples, r.claim, r.audit_passed,
                                r.pseudo_rows, trees=_released_trees(r, schema), learner=r.learner))
        else:
            code, sentence = _split_reason(answer.reason) if answer.state == "refused" else (None, answer.reason)
            out.append(OwnerRow(owner, answer.state, rows.get(owner), code=code, reason=sentence))
    return tuple(out)


def _model_rows(results: fpb.StudyResults, schema: Schema | RegressionSchema,
                basis: Mapping[str, Mapping[str, Any]]) -> tuple[ModelRow, ...]:
    out = []
    for m in results.models:
        known = basis.get(m.name, {})
        tree = (tree_from_pb(m.tree, global_tree_schema(schema, m.name), where=f"global {m.name}")
                if m.HasField("tree") else None)
        settings = settings_text({"parameters": {k: parameter_from_pb(v) for k, v in sorted(m.parameters.items())},
                                  "selection": m.selection})
        basis_settings = settings_text({"parameters": known.get("basis_parameters"),
                                        "selection": known.get("basis_selection")})
        if isinstance(schema, RegressionSchema):
            out.append(ModelRow(m.name, m.train_rows, m.rmse if m.HasField("rmse") else None, known.get("basis_rmse"),
                                m.mae if m.HasField("mae") else None, known.get("basis_mae"), settings=settings,
                                basis_settings=basis_settings))
        else:
            out.append(ModelRow(m.name, m.train_rows, m.accuracy if m.HasField("accuracy") else None,
                                known.get("basis_accuracy"), class_match=known.get("class_match"),
                                path_match=known.get("path_match"), tree=tree,
                                auc=m.auc if m.HasField("auc") else None, basis_auc=known.get("basis_auc"),
                                settings=settings, basis_settings=basis_settings))
    return tuple(out)


def study_report(status: fpb.StudyStatus, results: fpb.StudyResults, *, made_by: str,
                 rows: Mapping[str, int] | None = None, basis: Sequence[Mapping[str, Any]] | None = None,
                 source: str | None = None) -> StudyReport:
    """What the page shows of a finished study.

    ``rows`` (each owner's table size) and ``basis`` (per global model its ``basis_accuracy``,
    ``class_match`` and ``path_match``, or ``basis_rmse`` and ``basis_mae``, and the hyperparameters
    BASIS used, ``basis_parameters`` and ``basis_selection``: `modelshare.simulate`'s comparison rows)
    are what only a simulation knows; without them the page says "not known".
    """
    study = study_from_pb(status.spec)
    schema = study.schema
    by_model = {b["model"]: b for b in basis or ()}
    return StudyReport(
        study=study.describe(), state=status.state, reason=status.reason, schema=schema,
        owners=_owner_rows(status, results, schema, rows or {}), models=_model_rows(results, schema, by_model),
        evaluation_rows=int(results.evaluation_rows),
        evaluation_rows_dropped=int(results.evaluation_rows_dropped), made_by=made_by, basis_known=basis is not None,
        source=source, off_path=results.pgen_off_path, on_path=results.pgen_on_path, reader=reader_dict(results))


# ------------------------------------------------------------------ plots
def _png(figure: Any) -> str:
    """The figure as an ``<img>`` with a base64 PNG data URI."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _figure(width: float, height: float) -> Any:
    """A figure on the Agg canvas (no pyplot, no global backend switch); matplotlib is imported only here."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def _bars(ax: Any, labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None], str]],
          fmt: Callable[[float], str] = "{:.3f}".format) -> None:
    """Grouped bars, one group per label, each bar with its value (``fmt``) on it; a missing value is shown 'n/a'."""
    width = 0.8 / len(series)
    for k, (name, values, colour) in enumerate(series):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(labels))]
        heights = [v if v is not None else 0.0 for v in values]
        bars = ax.bar(xs, heights, width * 0.92, label=name, color=colour)
        ax.bar_label(bars, labels=["n/a" if v is None else fmt(v) for v in values], fontsize=9, padding=2)
    ax.set_xticks(range(len(labels)), labels)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _count_axis(ax: Any) -> None:
    """A count axis: whole-number ticks only, written with thousands separators (no offset, no exponent)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: grouped(value)))


def _scores_plot(report: StudyReport) -> str:
    """Scores per global model: BASIS against PGEN/PPGEN (accuracy, or RMSE for regression)."""
    figure = _figure(max(5.5, 1.6 * len(report.models) + 2.5), 3.8)
    ax = figure.add_subplot()
    names = [m.model for m in report.models]
    series = [(report.released_label, [m.score for m in report.models], "#e07b39")]
    if report.basis_known:
        series.insert(0, ("BASIS (raw rows pooled)", [m.basis for m in report.models], "#4c72b0"))
    _bars(ax, names, series)
    metric = "RMSE (lower is better)" if report.regression else "accuracy"
    ax.set_ylabel(metric)
    ax.set_ylim(0, 1.12 if not report.regression else _top(series) * 1.2)
    rows = f" on {report.evaluation_rows:,} evaluation rows" if report.evaluation_rows else ""
    ax.set_title(f"global models' {metric.split(' ')[0]}{rows}" + ("" if report.basis_known else "; BASIS not known"),
                 fontsize="medium")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(series), fontsize="small", frameon=False)
    return _png(figure)


def _top(series: Sequence[tuple[str, Sequence[float | None], str]]) -> float:
    """The largest value drawn (1 when there is none), so the value labels above the bars fit."""
    return max([v for _, values, _ in series for v in values if v is not None] + [1.0])


def _owners_plot(report: StudyReport) -> str:
    """Per owner: the rows it held (where known) against the tuples its release discloses, and its leaves."""
    figure = _figure(max(6.5, 1.1 * len(report.owners) + 3.5), 3.6)
    size, leaves = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    names = [o.owner for o in report.owners]
    sizes: list[tuple[str, Sequence[float | None], str]] = [
        ("tuples released (an ensemble: mean per tree)", [o.tuples for o in report.owners], "#e07b39")]
    rows_known = any(o.rows is not None for o in report.owners)
    if rows_known:
        sizes.insert(0, ("rows held", [o.rows for o in report.owners], "#8c8c8c"))
    counts: list[tuple[str, Sequence[float | None], str]] = [("leaves", [o.leaves for o in report.owners], "#55a868")]
    _bars(size, names, sizes, grouped)
    size.set_title(("rows held and tuples released" if rows_known else "tuples released (rows held: not known)")
                   + " per owner; n/a: no release", fontsize="small")
    size.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize="small", frameon=False)
    _bars(leaves, names, counts, grouped)
    leaves.set_title("leaves released per owner", fontsize="small")
    for ax, series in ((size, sizes), (leaves, counts)):
        ax.tick_params(axis="x", labelrotation=30 if len(names) > 4 else 0, labelsize=9)
        ax.set_ylim(0, _top(series) * 1.18)
        _count_axis(ax)
    figure.tight_layout()
    return _png(figure)


# ------------------------------------------------------------------ page
CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1180px; padding: 0 1em; color: #222;
       line-height: 1.45; font-size: 15px; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
h3 { margin-bottom: .3em; }
.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td:first-child { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.settings th { width: 13em; }
.pass { color: #17702b; font-weight: bold; } .fail { color: #b00020; font-weight: bold; }
.refused { color: #8a5a00; font-weight: bold; } .muted { color: #777; } .nowrap { white-space: nowrap; }
.tree { overflow-x: auto; border: 1px solid #e4e4e4; padding: .4em; margin-bottom: 1em; background: #fcfcfc; }
.note { background: #fff8e1; border-left: 4px solid #f0b400; padding: .5em .8em; }
.legend .swatch { display: inline-block; width: .9em; height: .9em; border: 1px solid #777; margin: 0 .25em 0 .8em;
                  vertical-align: middle; }
code { background: #f2f2f2; padding: 0 .2em; }
img { max-width: 100%; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _fmt(value: float | None, known: bool = True) -> str:
    if value is None:
        return NOT_KNOWN if not known else "-"
    return f"{value:.4f}"


def _points(gap: float | None, known: bool = True) -> str:
    """An accuracy gap (a share) in accuracy points, as the command line says it: ``21.7``."""
    return _fmt(gap, known) if gap is None else f"{100 * gap:.1f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], *, cls: str = "", numeric: Sequence[int] = ()) -> str:
    """A table of already-escaped HTML cells; the ``numeric`` columns are right-aligned."""
    attr = f' class="{cls}"' if cls else ""
    out = [f"<table{attr}><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if k in numeric else f"<td>{c}</td>" for k, c in enumerate(row))
        out.append(f"<tr>{cells}</tr>")
    return "".join(out) + "</table>"


def _settings(report: StudyReport) -> str:
    s, schema = report.study, report.schema
    attributes = ", ".join(a.name for a in schema.attributes)
    if isinstance(schema, RegressionSchema):
        learned = (f"target {schema.target.name} in [{plain_number(schema.target.low)}, "
                   f"{plain_number(schema.target.high)}] (public bounds)")
    else:
        learned = f"class column {schema.class_name} with classes " + ", ".join(schema.classes)
    rows = [
        ("study", f"{s['id']}" + (f" ({s['title']})" if s["title"] else "")),
        ("state", f"{report.state}" + (f": {report.reason}" if report.reason else "")),
        ("task", s["task"]),
        ("mechanism", s["mechanism"]),
        ("requirement (claimed)", s["requirement"] or "none (the mechanism's own guarantee)"),
        ("disclosure", s["disclosure"]),
        ("schema", f"{len(schema.attributes)} attributes: {attributes}; {learned}"
                   + ("; ranges read from the data (not public)" if schema.data_derived else "")),
        ("schema fingerprint", s["schema_fingerprint"]),
        ("owners' learner", f"{s['learner']}, max depth {s['max_depth'] or 'unlimited'}, "
                            f"min samples per leaf {s['min_samples_leaf']}"),
        ("global models", ", ".join(s["global_models"])),
        ("PGEN scale", f"{plain_number(s['pgen_scale'])} pseudo rows per released tuple"),
        ("PGEN off-path values", report.off_path or s["off_path"]),
        ("PGEN on-path values", report.on_path or s["on_path"]),
        ("quorum / owners invited", f"{s['quorum'] or 'all'} of {len(report.owners)}"),
        ("seed", str(s["seed"])),
        ("evaluation table",
         (f"{report.evaluation_rows:,} rows" + (f" ({report.evaluation_rows_dropped:,} with a missing "
                                                                  "value dropped)" if report.evaluation_rows_dropped
                                                                  else "")) if report.evaluation_rows else "none sent"),
    ]
    if report.source:
        rows.insert(0, ("table", report.source))
    return _table(["setting", "value"], [(_e(k), _e(v)) for k, v in rows], cls="settings")


def _known(count: float | None) -> str:
    """A count as `grouped` writes it, or the muted "not known" when the results do not say."""
    return grouped(count) if count is not None else f'<span class="muted">{NOT_KNOWN}</span>'


def _owners_table(report: StudyReport) -> str:
    """One row per invited owner; the refusal columns only when some owner refused or did not answer."""
    answered = [o for o in report.owners if o.answer != "submitted"]
    chose = any(o.learner for o in report.owners)
    head = ["owner", "rows", "answer", "leaves", "tuples released", "claim", "miner's re-audit", "pseudo rows"]
    head += ["learner (the owner's choice)"] if chose else []
    head += ["refusal code", "refusal reason"] if answered else []
    rows = []
    for o in report.owners:
        held = _known(o.rows)
        if o.answer == "submitted":
            audit = '<span class="pass">PASS</span>' if o.audit_passed else '<span class="fail">FAIL</span>'
            claim = f'<span class="nowrap">{_e(o.claim)}</span>'
            row = [_e(o.owner), held, "released", _known(o.leaves), _known(o.tuples), claim, audit,
                   _known(o.pseudo_rows)] + ([_e(o.learner or "-")] if chose else [])
            rows.append(row + (["", ""] if answered else []))
        else:
            answer = '<span class="refused">refused</span>' if o.answer == "refused" else _e(f"no answer ({o.answer})")
            rows.append([_e(o.owner), held, answer, "-", "-", "-", "-", "-"] + (["-"] if chose else [])
                        + [_e(o.code or ""), _e(o.reason)])
    ensemble = any(len(o.trees) > 1 for o in report.owners)
    note = ('<p class="sub">An ensemble\'s tuples released are the mean over its trees (each tree releases a '
            "sample of the rows); its leaves are all its trees' leaves.</p>") if ensemble else ""
    return _table(head, rows, numeric=(1, 3, 4, 7)) + note


def _reader(report: StudyReport) -> str:
    """The reader of every release: the miner's sentence and, per owner, its largest belief and share beyond."""
    if report.reader is None:
        return ""
    rows = [[_e(o["owner"]), f'<span class="nowrap">{_e(o["requirement"])}</span>', _fmt(o["largest_belief"]),
             "measured" if o["confident_share"] is None else f"{100 * o['confident_share']:.1f}%",
             str(o["leaves_beyond"])] for o in report.reader["owners"]]
    head = ["owner", "claim", "largest belief", "persons believed beyond the claim", "leaves beyond"]
    return (f"<h3>A reader of every release</h3><p>{_e(report.reader['summary'])}.</p>"
            + _table(head, rows, numeric=(2, 3, 4)))


def _models_table(report: StudyReport) -> str:
    label, known = report.released_label, report.basis_known
    if report.regression:
        head = ["global model", "train rows", f"{label} RMSE", "BASIS RMSE", f"{label} MAE", "BASIS MAE"]
        rows = [[_e(m.model), grouped(m.train_rows), _fmt(m.score), _fmt(m.basis, known),
                 _fmt(m.mae), _fmt(m.basis_mae, known)] for m in report.models]
    else:
        two_class = any(m.auc is not None for m in report.models)
        head = ["global model", "train rows", f"{label} accuracy", "BASIS accuracy", "gap (accuracy points)",
                *([f"{label} AUC", "BASIS AUC"] if two_class else []), "class match", "path match"]
        rows = [[_e(m.model), grouped(m.train_rows), _fmt(m.score), _fmt(m.basis, known),
                 _points(None if m.basis is None or m.score is None else m.basis - m.score, known),
                 *([_fmt(m.auc), _fmt(m.basis_auc, known)] if two_class else []),
                 _fmt(m.class_match, known), _fmt(m.path_match, known)] for m in report.models]
    numeric = range(1, len(head))
    if any(m.settings for m in report.models):  # text, not a number: left-aligned after the scores
        head.append("hyperparameters")
        for row, m in zip(rows, report.models, strict=False):
            row.append(_e(m.settings) or "-")
    if any(m.basis_settings for m in report.models):
        head.append("BASIS hyperparameters")
        for row, m in zip(rows, report.models, strict=False):
            row.append(_e(m.basis_settings) or "-")
    return _table(head, rows, numeric=numeric)


def _models_text(report: StudyReport) -> str:
    """What the columns mean, and what the requirement cost where BASIS is known."""
    label = report.released_label
    parts = [f"<p><b>{label}</b>: the global model the miner learned from pseudo-data regenerated (PGEN) from the "
             "owners' released trees; it never sees a raw row. "]
    vote = next((m for m in report.models if m.model == TREE_VOTE), None)  # built from the releases, no pseudo row
    if vote is not None:
        parts.append(f"{_e(LEGEND['vote'])} ")
    if report.basis_known:
        parts.append("<b>BASIS</b>: the same model trained on every owner's raw rows pooled, which only a "
                     "simulation can do, its hyperparameters set by the same setting as the global model's "
                     "(<code>auto</code>: the same grid, cross-validated on the raw training rows); it is the "
                     "reference a release's cost is measured against, not a ceiling (a model learned from "
                     "pseudo-data can score above it). <b>Gap</b>: BASIS accuracy minus the global model's, in "
                     "accuracy points (0.01 of accuracy is one point). ")
        if vote is not None:
            parts.append(f"{_e(LEGEND[vote_basis_key(vote.basis)])} ")
        if not report.regression:
            parts.append("<b>Class match</b>: the share of evaluation rows on which the two predict the same "
                         "class; <b>path match</b>: the share of the two trees' root-to-leaf paths that are "
                         "identical (1 for identical trees).")
        parts.append("</p>")
        gaps = [(m.model, 100 * (m.basis - m.score)) for m in report.models
                if m.basis is not None and m.score is not None and not report.regression]
        worst = max(gaps, key=lambda g: g[1], default=None)
        if worst is not None and worst[1] >= ACCURACY_GAP_POINTS:
            parts.append(f'<p class="note">The release cost {worst[0]} {worst[1]:.1f} accuracy points against BASIS: '
                         f"the privacy requirement ({_e(report.study['requirement'] or report.study['mechanism'])}) "
                         "removed or noised detail the global model needed. A weaker requirement, fewer and "
                         "larger owners, or a larger PGEN scale narrow the gap.</p>")
    else:
        parts.append(f"<b>BASIS</b>: {NOT_KNOWN}. The miner never sees raw rows, so it cannot train the "
                     "raw-data model a release should be compared with; <code>modelshare simulate</code> "
                     "on a comparable table can.</p>")
    return "".join(parts)


def _tree_block(tree: Tree | RegressionTree, caption: str) -> str:
    drawn = draw_tree(tree)
    said = f"{drawn.total} nodes, depth {drawn.depth}"
    if drawn.cut:
        said += (f"; drawn to depth {drawn.depth_drawn}: {drawn.drawn} nodes drawn, {drawn.cut} nodes below "
                 "cut (dashed boxes)")
    return f"<h3>{_e(caption)}</h3><p class=\"sub\">{_e(said)}</p><div class=\"tree\">{drawn.svg}</div>"


def _trees(report: StudyReport) -> str:
    parts = []
    if isinstance(report.schema, Schema):
        parts.append(class_legend(report.schema))
        leaves = "leaves their class and the released counts (hit: tuples of that class, miss: the others)"
    else:
        leaves = ("leaves the target value they predict and their noisy row count N' (the noise can make it "
                  "negative)")
    parts.append('<p class="sub">Read left to right: each box is a node, each edge\'s condition is written above '
                 "the node it leads to. Inner boxes name the split attribute and the tuples reaching them; "
                 f"{leaves}. Hover a box or an edge label for its whole text.</p>")
    for o in report.owners:
        if not o.trees:
            continue
        for k, tree in enumerate(o.trees[:MAX_TREES_DRAWN]):
            name = o.owner if len(o.trees) == 1 else f"{o.owner}: tree {k + 1} of {len(o.trees)}"
            parts.append(_tree_block(tree, f"{name} (claim: {o.claim})"))
        if len(o.trees) > MAX_TREES_DRAWN:
            parts.append(f"<p class=\"sub\">{_e(o.owner)}: {len(o.trees) - MAX_TREES_DRAWN} more trees of its "
                         "ensemble not drawn.</p>")
    if not any(o.trees for o in report.owners):
        parts.append("<p>No released trees: no owner released, or the miner's results predate carrying them.</p>")
    for m in report.models:
        if m.tree is not None:
            parts.append(_tree_block(m.tree, f"global model {m.model} (learned from the pseudo-data)"))
    return "".join(parts)


def render_report(report: StudyReport) -> str:
    """The whole page as one HTML string (no external resources)."""
    s = report.study
    released = sum(o.answer == "submitted" for o in report.owners)
    refused = [o.owner for o in report.owners if o.answer == "refused"]
    summary = (f"{released} of {len(report.owners)} owners released a model"
               + (f"; refused: {', '.join(refused)}" if refused else "")
               + f". Mechanism {s['mechanism']}" + (f", requirement {s['requirement']}" if s["requirement"] else "")
               + f", {s['disclosure']} disclosure.")
    body = [
        f"<h1>Study {_e(s['id'])}: {_e(report.state)}</h1>",
        f'<p class="sub">written by <code>{_e(report.made_by)}</code>. {_e(summary)}</p>',
        "<h2>Settings and claims</h2>", _settings(report),
        "<h2>Owners' releases</h2>", _owners_table(report), _reader(report),
        "<h2>Global models</h2>", _models_table(report), _models_text(report),
        "<h2>Privacy and utility</h2>",
        _scores_plot(report) if report.models else "<p>No global models.</p>", _owners_plot(report),
        "<h2>Released trees</h2>", _trees(report),
    ]
    title = f"modelshare study {s['id']}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(report: StudyReport, out: Path) -> Path:
    """Write ``out/report.html`` (creating ``out``); its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    atomic_write(path, render_report(report))
    return path
