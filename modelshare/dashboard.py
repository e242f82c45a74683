"""The pages of the miner's web dashboard: the fleet, the studies and their progress, a finished study's results.

`dashboard_pages` binds the pages to the miner's study administration (`StudyAdminService`) and returns the
function of a URL path that `modelshare.miner_node.dashboard.DashboardServer` serves to a signed-in admin. The
pages read exactly what the admin's calls read: ``ListSites`` (`StudyAdminService.site_list`, shown through
`modelshare.admin.sites_dict` as ``miner sites`` shows it), ``ListStudies``, ``GetStudy`` and ``GetResults``, put
through the same dictionaries as ``study list``, ``study status`` and ``study results`` (`modelshare.admin`); a
finished study's ``report.html`` is `modelshare.report_html`'s page itself. Paths:

* ``/``: every provisioned site (owner, state, last poll, version, health) and every study (state, answers
  received of expected, quorum, deadline);
* ``/studies/ID``: the study's headline, settings and every owner's answer, and when it is done its global
  models' scores and a link to its report;
* ``/studies/ID/report.html``: the study report.

The overview and an unfinished study's page reload themselves every `REFRESH_SECONDS` (a meta refresh).
Every value is HTML-escaped; the pages hold no script, no form and no link off the dashboard. An unknown path
or study is 404, a study not finished has no report (409).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

from modelshare.admin import (
    answer_label,
    auc_text,
    results_dict,
    settings_text,
    sites_dict,
    status_dict,
    study_headline,
)
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.trees.readable import grouped
from modelshare.miner_node.administration import StudyAdminService
from modelshare.miner_node.verify import Rejection
from modelshare.report_html import CSS, render_report, study_report

__all__ = ["dashboard_pages"]

MADE_BY = "the miner's web dashboard"
REFRESH_SECONDS = 15
"""How often the overview and an unfinished study's page reload themselves."""
FINAL = ("done", "failed", "cancelled")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(head: list[str], rows: list[list[str]], *, cls: str = "") -> str:
    """A table of already-escaped cells."""
    attr = f' class="{cls}"' if cls else ""
    lines = [f"<table{attr}><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    lines += ["<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows]
    return "".join(lines) + "</table>"


def _page(title: str, body: list[str], *, refresh: bool = False) -> str:
    """A dashboard page; ``refresh``: the browser reloads it every `REFRESH_SECONDS` (no script: a meta refresh)."""
    nav = '<p class="sub"><a href="/">sites and studies</a></p>'
    reload = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{reload}<title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body>\n{nav}\n" + "\n".join(body) + "\n</body></html>\n")


def _study_href(study_id: str, tail: str = "") -> str:
    return f"/studies/{quote(study_id, safe='')}{tail}"


def _answered(data: dict[str, Any]) -> str:
    received = sum(a["state"] != "waiting" for a in data["answers"])
    return f"{received} / {len(data['answers'])}"


def _overview(admin: StudyAdminService) -> str:
    sites = sites_dict(admin.site_list())
    site_rows = [[_e(s["owner"]), _e(s["state"] + (f" ({s['revoked_at']})" if s["revoked_at"] else "")),
                  _e(s["last_poll_at"] or "never"), _e(s["version"] or "-"), _e(s["health"] or "-")]
                 for s in sites["sites"]]
    studies = [status_dict(s) for s in admin.study_list().studies]
    study_rows = [[f'<a href="{_e(_study_href(d["id"]))}">{_e(d["id"])}</a>', _e(d["state"]), _e(d["mechanism"]),
                   _e(d["requirement"] or ""), _e(_answered(d)), _e(d["quorum"]), _e(d["deadline"])] for d in studies]
    return _page("modelshare miner dashboard", [
        "<h1>Sites</h1>",
        f'<p class="sub">A site is silent after {sites["silent_after_seconds"]} s without a poll.</p>',
        _table(["owner", "state", "last poll", "version", "health"], site_rows, cls="sites")
        if site_rows else "<p>No owner is provisioned.</p>",
        "<h1>Studies</h1>",
        _table(["study", "state", "mechanism", "requirement", "answers received / expected", "quorum", "deadline"],
               study_rows, cls="studies") if study_rows else "<p>No study yet.</p>",
    ], refresh=True)


def _results(results: fpb.StudyResults) -> list[str]:
    data = results_dict(results)
    models = data["models"]
    if any("rmse" in m for m in models):
        rows = [[_e(m["model"]), _e(grouped(m["train_rows"])), _e(f"{m['rmse']:.4f}" if "rmse" in m else ""),
                 _e(f"{m['mae']:.4f}" if "mae" in m else "")] for m in models]
        table = _table(["global model", "train rows", "RMSE", "MAE"], rows, cls="models")
    else:
        rows = [[_e(m["model"]), _e(grouped(m["train_rows"])),
                 _e("" if m["accuracy"] is None else f"{m['accuracy']:.4f}"), _e(auc_text(m)), _e(settings_text(m))]
                for m in models]
        table = _table(["global model", "train rows", "accuracy", "AUC", "hyperparameters"], rows, cls="models")
    lines = ["<h2>Results</h2>", table]
    if data["reader"]:
        lines.append(f"<p>privacy: {_e(data['reader']['summary'])}</p>")
    return lines


def _study(admin: StudyAdminService, study_id: str) -> tuple[int, str]:
    try:
        status = admin.status(study_id)
    except Rejection:
        return 404, _page("No such study", [f"<h1>No study {_e(study_id)} on this miner</h1>"])
    data = status_dict(status)
    answers = [[_e(a["owner"]), _e(answer_label(a)), _e(a["reason"]), _e(a["at"] or "")] for a in data["answers"]]
    body = [f"<h1>Study {_e(data['id'])}: {_e(data['state'])}</h1>",
            f"<p>{_e(study_headline(data))}</p>",
            f"<p>{_e(data['mechanism'])} {_e(data['requirement'] or '')} · answers received {_e(_answered(data))} · "
            f"quorum {_e(data['quorum'])} · deadline {_e(data['deadline'])}</p>",
            "<h2>Answers</h2>", _table(["owner", "answer", "reason", "at"], answers, cls="answers")]
    if status.state == "done":
        body += _results(admin.results(study_id))
        body.append(f'<p><a href="{_e(_study_href(study_id, "/report.html"))}">the study report (report.html)</a></p>')
    return 200, _page(f"modelshare study {data['id']}", body, refresh=status.state not in FINAL)


def _report(admin: StudyAdminService, study_id: str) -> tuple[int, str]:
    try:
        status = admin.status(study_id)
    except Rejection:
        return 404, _page("No such study", [f"<h1>No study {_e(study_id)} on this miner</h1>"])
    if status.state != "done":
        return 409, _page("No report yet", [f"<h1>Study {_e(study_id)} is {_e(status.state)}</h1>",
                                            "<p>A study has a report once it is done.</p>"])
    return 200, render_report(study_report(status, admin.results(study_id), made_by=MADE_BY))


def dashboard_pages(admin: StudyAdminService) -> Callable[[str], tuple[int, str]]:
    """The dashboard's pages over ``admin`` (module docstring): a URL path -> (HTTP status, HTML)."""

    def page(path: str) -> tuple[int, str]:
        if path in ("/", ""):
            return 200, _overview(admin)
        parts = path.split("/")
        if len(parts) == 3 and parts[1] == "studies" and parts[2]:
            return _study(admin, unquote(parts[2]))
        if len(parts) == 4 and parts[1] == "studies" and parts[2] and parts[3] == "report.html":
            return _report(admin, unquote(parts[2]))
        return 404, _page("Not found", ["<h1>Not found</h1>", "<p>The dashboard has no such page.</p>"])

    return page
