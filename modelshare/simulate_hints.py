"""What `modelshare simulate` tells its user when owners refuse: why, and what to change.

A real miner learns only an owner's refusal code; the reason stays in the site's log. Two kinds of
hint follow from that split:

* `refusal_hints` explains each refusal code from the study's *public* settings (learner, mechanism,
  requirement, disclosure) and names a concrete weaker requirement to try.
* `whole_table_hints` is what only a simulation can say: `simulate` dealt every owner's table itself,
  so it can check whether an owner's *whole* table (a root-only tree) already fails a per-path
  requirement. Then no tree of that table can meet it (a split's children cannot all meet a
  diversity or size rule that their union misses: the majority-to-rest ratio of the union lies between
  the children's), and the hint names the loosest setting at which every owner's whole table passes,
  which is necessary, not sufficient, for a release. It reads the tables the user handed to
  `simulate`, never anything a federation would see.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.mechanisms.registry import default_learner
from modelshare.common.privacy.requirements import (
    CLDiversity,
    KAnonymity,
    PathRule,
    RequirementError,
    parse_requirement,
    path_rule,
)
from modelshare.common.study import Study
from modelshare.common.trees.learner_options import REQUIREMENT_AWARE
from modelshare.common.trees.tree import Disclosure

__all__ = ["REFUSAL_HINTS", "refusal_hints", "study_settings", "unsatisfiable_hint", "whole_table_hints"]

#: The hint per refusal code when the study's settings say nothing more specific.
REFUSAL_HINTS = {
    "unsatisfiable": "the release requirement is too strict for this table (their learner found no admissible "
                     "split, or pruning reached the root of their trees); choose a weaker one, e.g. --requirement "
                     "k-anonymity:k=5, or fewer, larger owners (--owners)",
    "empty-release": "every count of their releases was suppressed or noised to 0, so they released nothing "
                     "usable: their tables are too small for the requirement; use fewer, larger owners (--owners) "
                     "or a weaker requirement (e.g. a smaller k)",
    "too-large": "their encoded releases exceed the study's message size limit; raise max_message_bytes in the "
                 "miner's config, or ask for smaller releases (a lower max_depth, fewer trees)",
    "failed-audit": "their own audit of the release failed before signing: the mechanism is broken (a plugin's "
                    "trainer or pruner); their logs name the failing checks",
}

_LARGEST_C = 1000  # the loosest c a whole-table hint searches up to


def _weaker(requirement: str | None) -> str:
    """A concrete weaker requirement to suggest in place of ``requirement`` (empty when there is none to name)."""
    try:
        parsed = parse_requirement(requirement) if requirement else None
    except RequirementError:
        return ""
    if isinstance(parsed, CLDiversity):
        looser = f"cl-diversity:c={parsed.c * 2:g},l={parsed.l}" if parsed.l == 2 else \
            f"cl-diversity:c={parsed.c:g},l={parsed.l - 1}"
        return f"a larger c or a smaller l (e.g. --requirement {looser}), "
    if isinstance(parsed, KAnonymity) and parsed.k > 2:
        return f"a smaller k (e.g. --requirement k-anonymity:k={parsed.k // 2}), "
    return ""


def unsatisfiable_hint(learner: str | None, mechanism: str | None, requirement: str | None,
                       disclosure: str | None) -> str:
    """Why owners refused as unsatisfiable, told from the study's public settings, and what to change."""
    if not (learner and mechanism and requirement):
        return REFUSAL_HINTS["unsatisfiable"]
    said = f"{requirement} with {disclosure} disclosure" if disclosure else requirement
    if learner in REQUIREMENT_AWARE:
        why = (f"no split of their tables has children that all meet {said} (the {learner} learner grows only such "
               "splits, and a root-only tree is no model)")
    else:
        why = (f"{mechanism} pruned their {learner} trees to the root to meet {said}; --learner "
               f"{default_learner(mechanism)} grows the tree to the requirement and often releases where pruning "
               "cannot")
    return f"{why}; choose {_weaker(requirement) or 'a weaker requirement, '}or fewer, larger owners (--owners)"


def study_settings(study: Study) -> dict[str, str | None]:
    """The public settings of a study that `refusal_hints` explains an unsatisfiable refusal with."""
    return {"learner": study.training.learner, "mechanism": study.mechanism,
            "requirement": None if study.requirement is None else str(study.requirement),
            "disclosure": study.disclosure}


def refusal_hints(status: fpb.StudyStatus, settings: Mapping[str, str | None] | None = None) -> list[str]:
    """One hint per refusal code the simulator can advise on, naming the owners that refused with it.

    ``settings`` (the study's ``learner``, ``mechanism``, ``requirement`` and ``disclosure``) makes the
    unsatisfiable hint say which requirement failed, why, and a concrete weaker one.
    """
    hints = []
    for code, hint in REFUSAL_HINTS.items():
        owners = [o.owner_id for o in status.owners if o.state == "refused" and o.reason.startswith(f"{code}:")]
        if code == "unsatisfiable" and settings is not None:
            hint = unsatisfiable_hint(settings.get("learner"), settings.get("mechanism"), settings.get("requirement"),
                                      settings.get("disclosure"))
        if owners:
            hints.append(f"{', '.join(owners)} refused with {code}: {hint}")
    return hints


def _root_counts(y: np.ndarray, parts: np.ndarray, n_owners: int, n_classes: int) -> np.ndarray:
    """(owners, classes): each owner's class counts, i.e. its whole table as one leaf."""
    return np.bincount(parts * n_classes + y, minlength=n_owners * n_classes).reshape(n_owners, n_classes).astype(float)


def _loosest_passing(parsed: CLDiversity, disclosure: Disclosure, counts: np.ndarray) -> str | None:
    """The (c,l)-diversity at which every owner's whole table passes, nearest to ``parsed``: the smallest whole c
    above it at the same l, else the same search at l - 1 ... 2; None when no such setting exists."""
    for l in range(parsed.l, 1, -1):  # noqa: E741 - the paper's name
        for c in range(math.floor(parsed.c) + 1, _LARGEST_C + 1):
            looser = CLDiversity(c=c, l=l)
            if PathRule(looser, disclosure).ok(counts).all():
                return str(looser)
    return None


def whole_table_hints(requirement: str | None, disclosure: Disclosure, y: np.ndarray, parts: np.ndarray,
                      owners: Sequence[str], n_classes: int) -> list[str]:
    """Hints for owners whose whole table already fails a per-path ``requirement`` (module docstring).

    ``y`` are the training rows' class indices and ``parts[i]`` the index in ``owners`` of row i's owner.
    Empty when the requirement is not a per-path one (k-anonymity, (c,l)-diversity) or every whole table
    meets it.
    """
    try:
        parsed = parse_requirement(requirement, n_classes=n_classes) if requirement else None
    except RequirementError:
        return []
    if not isinstance(parsed, (KAnonymity, CLDiversity)):
        return []
    counts = _root_counts(np.asarray(y, dtype=np.int64), np.asarray(parts, dtype=np.int64), len(owners), n_classes)
    failing = ~path_rule(parsed, disclosure, n_classes=n_classes).ok(counts)
    if not failing.any():
        return []
    named = [owners[int(i)] for i in np.flatnonzero(failing)]
    worst = int(np.flatnonzero(failing)[np.argmax(counts[failing].max(axis=1) / counts[failing].sum(axis=1))])
    row = counts[worst]
    majority, total = row.max(), row.sum()
    said = f"{requirement} with {disclosure} disclosure"
    if isinstance(parsed, KAnonymity):
        fix = f"fewer owners (--owners): {owners[worst]} has only {total:.0f} rows"
    else:
        share = f"{owners[worst]}'s largest class is {majority:.0f} of its {total:.0f} rows ({majority / total:.1%})"
        looser = _loosest_passing(parsed, disclosure, counts)
        fix = (f"{share}; every owner's whole table first meets --requirement {looser} (needed, not enough: "
               "the tree's leaves must meet it too)" if looser else f"{share}; no (c,l)-diversity up to "
               f"c={_LARGEST_C} holds for every owner's table")
    return [f"{', '.join(named)}: the whole table already fails {said} (this simulation dealt the tables, so it "
            f"can check), so no tree of it can meet it; {fix}"]
