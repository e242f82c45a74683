"""The legend `simulate` prints under its tables: what each column means, and what privacy cost.

A first-time reader of ``BASIS 0.995, PPGEN 0.545`` cannot tell whether that is expected. The
legend names every column once and, when the global models fall far behind BASIS, says in one
sentence that this is what the privacy requirement costs and what to try. The tutorial (docs/tutorial/first-simulate.md)
quotes the fixed lines verbatim (a test checks), so the two cannot drift.

Naming: Sharkey et al. (2008, §4) call the pseudo-data of *unpruned* trees PGEN and that of
trees made private first (their APT pruning, here any mechanism but ``none``) PPGEN, whatever
the disclosure; `pseudo_data_name` is the one place that choice is made.
"""

from __future__ import annotations

from typing import Any

from modelshare.miner_node.calibrated_nb import CALIBRATED_NB
from modelshare.miner_node.tree_vote import TREE_VOTE

__all__ = ["ACCURACY_GAP_POINTS", "RMSE_GAP_RATIO", "LEGEND", "pseudo_data_name", "legend_lines", "vote_basis_key"]

#: A classification model this many accuracy points (or more) below BASIS gets the cost sentence.
#: 5 points: more than the 1-5 point spread PGEN alone shows at 1-10 owners (EXPERIMENTS.md), so a
#: larger gap is mostly the release mechanism's.
ACCURACY_GAP_POINTS = 5.0
#: A regression model whose RMSE exceeds BASIS's by this factor (or more) gets the cost sentence.
RMSE_GAP_RATIO = 1.25

#: The fixed lines, by key; `legend_lines` picks those that apply. Quoted verbatim in docs/tutorial/first-simulate.md.
LEGEND = {
    "basis": "BASIS: the same global model trained on the owners' pooled raw training rows, which only a "
             "simulation can see, its hyperparameters set by the same setting (auto: the same grid, "
             "cross-validated on those rows): the reference the release's cost is measured against, not a "
             "ceiling (a model learned from pseudo-data can score above it).",
    "pgen": "PGEN: the global model the miner learned from pseudo-data regenerated from the owners' "
            "unpruned trees (--mechanism none).",
    "ppgen": "PPGEN: the global model the miner learned from pseudo-data regenerated from the owners' "
             "privacy-preserving releases (any --mechanism but none).",
    "class": "class match: the share of held-out rows the global model classifies exactly as BASIS does, "
             "right or wrong.",
    "path": "path match: the share of root-to-leaf paths the two decision trees have in common (same "
            "attributes, same admitted values, same class); low is usual even when class match is high.",
    "errors": "RMSE, MAE: root mean squared and mean absolute error on the held-out rows, on the target's "
              "scale; lower is better.",
    "vote": "tree-vote: the released trees' vote (per row, every released tree's leaf class distribution summed, "
            "the largest class predicted), which the miner builds from the releases themselves; it reads no "
            "pseudo-data.",
    "vote-basis": "tree-vote's BASIS: the same vote of the owners' local trees trained by the same learner on "
                  "their raw rows with no privacy mechanism (as --mechanism none releases them: no requirement, "
                  "full class counts).",
    "calibrated-nb": "calibrated-nb: the owners' dpea-nb releases read as the calibrated naive Bayes they describe "
                     "(root leaf class counts, per-leaf class histograms, the owner's privately chosen temperature), "
                     "averaged over owners; built from the releases themselves, it reads no pseudo-data and has no "
                     "BASIS (-).",
    "vote-no-basis": "tree-vote's BASIS is shown as -: under a whole-release mechanism the owners' trees are the "
                     "mechanism's own random trees, which have no version without the mechanism to train.",
}


def pseudo_data_name(mechanism: str) -> str:
    """``PGEN`` for unpruned trees (mechanism ``none``), ``PPGEN`` for privacy-preserving releases."""
    return "PGEN" if mechanism == "none" else "PPGEN"


def legend_lines(report: dict[str, Any]) -> list[str]:
    """The legend for a `simulate` report: the column meanings, then the cost sentence if the gap is large."""
    name = "pgen" if pseudo_data_name(report["mechanism"]) == "PGEN" else "ppgen"
    if report["task"] == "regression":
        lines = [LEGEND["basis"], LEGEND[name], LEGEND["errors"]]
    else:
        lines = [LEGEND["basis"], LEGEND[name], LEGEND["class"]]
        if any(m.get("path_match") is not None for m in report["models"]):
            lines.append(LEGEND["path"])
        for m in report["models"]:
            if m["model"] == TREE_VOTE:
                lines += [LEGEND["vote"], LEGEND[vote_basis_key(m["basis_accuracy"])]]
            elif m["model"] == CALIBRATED_NB:
                lines.append(LEGEND["calibrated-nb"])
    cost = _cost_sentence(report)
    return lines + ([cost] if cost else [])


def vote_basis_key(basis_accuracy: float | None) -> str:
    """The `LEGEND` key saying what the vote's BASIS is, or (``basis_accuracy`` None) why it has none."""
    return "vote-no-basis" if basis_accuracy is None else "vote-basis"


def _cost_sentence(report: dict[str, Any]) -> str | None:
    """One sentence naming the worst gap to BASIS, what it is the price of, and what to try; None if small."""
    worst = _worst_gap(report)
    if worst is None:
        return None
    model, gap = worst
    requirement = report["requirement"] or report["mechanism"]
    if report["mechanism"] == "none":
        cause = "the owners' tables are small or split the classes unevenly (no privacy requirement was applied)"
        remedy = "use fewer, larger owners (--owners) or a larger --pgen-scale"
    else:
        cause = (f"this is what the privacy requirement ({report['mechanism']} {requirement}) costs on these "
                 "owners' tables")
        remedy = ("try a weaker requirement (--requirement), another mechanism (--mechanism), or fewer, larger "
                  "owners (--owners) so each has more rows")
    return f"{model} is {gap} BASIS: {cause}; {remedy}."


def _worst_gap(report: dict[str, Any]) -> tuple[str, str] | None:
    """The model furthest behind BASIS past the threshold, with the gap in words; None if none is."""
    if report["task"] == "regression":
        ratios = [(m["rmse"] / m["basis_rmse"], m["model"]) for m in report["models"]
                  if m["rmse"] is not None and m["basis_rmse"] > 0]
        ratio, model = max(ratios, key=lambda r: r[0], default=(0.0, ""))
        return (model, f"{ratio:.1f}x the RMSE of") if ratio >= RMSE_GAP_RATIO else None
    gaps = [(100 * (m["basis_accuracy"] - m["accuracy"]), m["model"]) for m in report["models"]
            if m["accuracy"] is not None and m["basis_accuracy"] is not None]
    points, model = max(gaps, key=lambda g: g[0], default=(0.0, ""))
    return (model, f"{points:.1f} accuracy points below") if points >= ACCURACY_GAP_POINTS else None
