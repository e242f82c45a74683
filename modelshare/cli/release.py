"""`modelshare release` (train, make safe, write a model file) and `modelshare audit` (re-check it).

``release`` post-processes one trained tree with a tree mechanism (apt, prune-leaf, prune-parent,
none), or with ``--mechanism kanon-rdt`` trains and releases k-AnonToRdt random trees from a
``dps:`` requirement and ``--max-depth`` (the depth of every random tree), or with an eps-DP
mechanism (``laplace-rdt``, ``diffpets``, ``dpea``) trains noisy trees from a
``dp:epsilon=E,trees=T`` requirement and ``--max-depth``. The model file leaves the site, so
``release`` has no default mechanism or requirement: without ``--mechanism`` it refuses, naming
the choices, and ``--mechanism none`` (an unprotected tree) says so on stderr. ``audit``
re-checks a model file of one tree or of an ensemble.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from modelshare.cli.common import (
    add_json,
    add_max_depth,
    add_seed,
    deprecated_alias,
    err,
    out,
    positive_int,
    titled_table,
)
from modelshare.cli.inputs import (
    add_admissible_options,
    add_learner,
    add_release_options,
    add_table_source,
    learner_params,
    load_encoded,
    resolve_disclosure,
    resolve_learner,
    warn_data_derived,
)
from modelshare.common.audit.release import audit
from modelshare.common.data.schema import Schema
from modelshare.common.federation.model_io import read_model, write_release
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.class_prior import DEFAULT_PRIOR_SHARE, check_prior_share
from modelshare.common.mechanisms.release import DataDerivedDomain
from modelshare.common.mechanisms.train_release import train_and_release
from modelshare.common.privacy.attacks import attack_report
from modelshare.common.privacy.combining import owner_readers
from modelshare.common.privacy.report import Release
from modelshare.common.trees.learners.random_tree import ensemble_predict_proba

__all__ = ["UNPROTECTED", "cmd_audit", "cmd_release", "configure_audit", "configure_release"]

UNPROTECTED = "none"  # the mechanism that releases the trained tree as it is


def _attack_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Table rows of an attack report in its `AttackReport.to_dict` form."""
    rows = [(name, str(report[name]["leaves"]), f"{report[name]['users']:g}") for name in ("uniqueness", "homogeneity")]
    rows += [(f"background, {b['known']} known", str(b["leaves"]), f"{b['users']:g}") for b in report["background"]]
    return rows


def _release_tree(args: argparse.Namespace, schema: Schema, X: np.ndarray,
                  y: np.ndarray) -> tuple[Release, dict[str, Any]]:
    """Train the local learner and apply a tree mechanism; the release and what to report about it."""
    made = train_and_release(args.mechanism, schema, X, y, requirement=args.requirement, disclosure=args.disclosure,
                             learner=args.learner, learner_params=learner_params(args), max_depth=None,
                             seed=0 if args.seed is None else args.seed)
    release, trained = made.release, made.tree
    assert trained is not None  # a tree mechanism
    summary = {
        "trained_leaves": trained.n_leaves,
        "released_leaves": release.tree.n_leaves,
        "released_depth": release.tree.depth,
        "training_accuracy": float((release.tree.predict(X) == y).mean()),
        "owner_attacks": attack_report(release.tree, X, y).to_dict(),
    }
    figures = owner_readers(release.trees, X, y, release.report.requirement)
    if figures:
        summary["owner_readers"] = [{**f.to_dict(), "text": f.describe()} for f in figures]
    return release, summary


def _release_forest(args: argparse.Namespace, schema: Schema, X: np.ndarray,
                    y: np.ndarray) -> tuple[Release, dict[str, Any]]:
    """Train and release k-AnonToRdt or eps-DP trees (--max-depth,
    a dps or dp --requirement); the release and its summary.

    Without --seed the structure, the samples and the noise come from fresh OS entropy, as their
    privacy needs; the owner's view of the attacks is left out, since it would count every
    training row rather than what each tree released.
    """
    shape = registry.requirement_form(args.mechanism)
    if args.requirement is None or args.max_depth is None:
        raise ValueError(f"--mechanism {args.mechanism} needs --requirement {shape} and --max-depth D")
    try:
        release = train_and_release(args.mechanism, schema, X, y, requirement=args.requirement,
                                    disclosure=args.disclosure, learner=args.learner, learner_params={},
                                    max_depth=args.max_depth, seed=args.seed, noise=args.seed,
                                    allow_data_derived_domain=args.data_derived_domain,
                                    prior_share=check_prior_share(args.prior_share)).release
    except DataDerivedDomain as exc:
        raise ValueError(f"{exc}. Here: pass --schema, or --data-derived-domain to give the guarantee up") from None
    trees = release.classification_trees
    summary = {
        "trees": len(trees),
        "released_leaves": sum(tree.n_leaves for tree in trees),
        "released_depth": max(tree.depth for tree in trees),
        "released_rows_per_tree": [float(tree.root.total) for tree in trees],
        "training_accuracy": float((ensemble_predict_proba(trees, X).argmax(axis=1) == y).mean()),
    }
    return release, summary


def _print_release(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    """The human-readable account of a release: what was released, its claim, the attacks on it."""
    if registry.get(args.mechanism).whole_release:
        err.print(f"{summary['source']}: {summary['rows']} rows -> {args.mechanism} released "
                  f"{summary['trees']} random trees "
                  f"of depth <= {summary['released_depth']} ({summary['released_leaves']} leaves in all)")
    else:
        err.print(f"{summary['source']}: {summary['rows']} rows; {args.learner} tree with {summary['trained_leaves']} "
                  f"leaves -> {args.mechanism} released {summary['released_leaves']} leaves "
                  f"(depth {summary['released_depth']})")
    err.print(f"claim: {summary['report']['guarantee']}")
    owner = summary.get("owner_attacks")
    attacks = titled_table("attacks on the released tree" if owner
                           else "attacks on the released trees (summed over the trees)")
    columns = ["attack", "leaves", "users (released counts)"] + (["users (training rows)"] if owner else [])
    for col in columns:
        attacks.add_column(col, justify="left" if col == "attack" else "right")
    released = _attack_rows(summary["report"]["attacks"])
    own = _attack_rows(owner) if owner else [()] * len(released)
    for row, mine in zip(released, own, strict=False):
        attacks.add_row(*row, *mine[2:])
    out.print(attacks)
    for reader in summary.get("owner_readers", ()):
        err.print(f"on your rows (not in the model file): {reader['text']}")
    err.print(f"wrote {args.out}")


def _mechanism(args: argparse.Namespace, choices: Sequence[str]) -> None:
    """Refuse a release without an explicit --mechanism; warn on stderr when it is unprotected."""
    if args.mechanism is None:
        raise ValueError(f"release needs --mechanism: one of {', '.join(choices)}. The model file leaves the site, "
                         f"so its protection is never a default ('{UNPROTECTED}' releases the trained tree "
                         "unprotected)")
    if args.mechanism == UNPROTECTED:
        err.print(f"[yellow]warning:[/] --mechanism {UNPROTECTED}: the released tree is unprotected; its counts "
                  "are the training rows' own and no privacy requirement is checked", highlight=False)


def cmd_release(args: argparse.Namespace) -> int:
    _mechanism(args, list(registry.names()))
    args.disclosure = resolve_disclosure(args.mechanism, args.disclosure)
    args.learner = resolve_learner(args.mechanism, args.learner)
    table = load_encoded(args)
    X, y = table.X, table.y
    record = registry.get(args.mechanism)
    if table.schema.data_derived:
        warn_data_derived(table.schema, table.source, getattr(args, "schema", None))
    make = _release_forest if record.whole_release else _release_tree
    release, details = make(args, table.schema, X, y)
    write_release(release, args.out)
    summary: dict[str, Any] = {"source": table.source, "rows": int(len(y)), **details,
                               "report": release.report.to_dict(), "out": str(args.out)}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_release(args, summary)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    trees, report = read_model(args.model)
    result = audit(trees, report)
    if args.json:
        print(json.dumps({"model": str(args.model), **result.to_dict()}, indent=2))
        return 0 if result.passed else 1
    checks = titled_table(f"audit of {args.model}: {'PASS' if result.passed else 'FAIL'}")
    checks.add_column("check", no_wrap=True)
    checks.add_column("result", no_wrap=True)
    checks.add_column("detail", overflow="fold")
    for c in result.checks:
        checks.add_row(c.name, "[green]pass[/]" if c.passed else "[red]FAIL[/]", c.detail)
    out.print(checks)
    ensemble = len(trees) > 1
    paths = titled_table(f"{len(result.paths)} released paths" + (f" in {len(trees)} trees" if ensemble else ""))
    columns = (("tree",) if ensemble else ()) + ("leaf", "result", "tuples", "hit", "miss", "path")
    for col in columns:
        paths.add_column(col, justify="left" if col in ("result", "path") else "right",
                         no_wrap=col != "path", overflow="fold")
    for p in sorted(result.paths, key=lambda p: p.passed):
        row = (str(p.leaf), "pass" if p.passed else "[red]FAIL[/]", f"{p.tuples:g}", f"{p.hit:g}",
               f"{p.miss:g}", p.path)
        paths.add_row(*((str(p.tree),) if ensemble else ()), *row)
    out.print(paths)
    attacks = titled_table("attacks on the released statistics" + (" (summed over the trees)" if ensemble else ""))
    for col in ("attack", "leaves", "users"):
        attacks.add_column(col, justify="left" if col == "attack" else "right")
    for attack in _attack_rows(result.attacks.to_dict()):
        attacks.add_row(*attack)
    out.print(attacks)
    return 0 if result.passed else 1


def configure_release(rel: argparse.ArgumentParser) -> None:
    """`release`: the table, the learner, the mechanism (required), the depth, the seed, the model file."""
    rel.epilog = "; ".join(f"{m.name}: --requirement {m.requirement_form} and --max-depth D"
                           for m in registry.mechanisms() if m.whole_release)
    add_table_source(rel, None)
    add_learner(rel, help="local learner (kanon-rdt and the dp mechanisms train random trees instead)")
    depth = add_max_depth(rel, help="depth limit of the tree; for kanon-rdt and the dp mechanisms (required) the "
                                    "depth of every random tree")
    deprecated_alias(rel, "--depth", depth)
    rel.add_argument("--min-samples-leaf", type=positive_int, default=None,
                     help="minimum leaf size (default 1; not used by kanon-rdt and the dp mechanisms)")
    add_admissible_options(rel)
    add_release_options(rel, registry.names(), mechanism_default=None,
                        mechanism_help=f"release mechanism (required: the model file leaves the site; "
                                       f"'{UNPROTECTED}' releases the tree unprotected)",
                        requirement_help="privacy requirement of the mechanism: 'k-anonymity:k=K' or "
                                         "'cl-diversity:c=C,l=L' (" + "; ".join(
                                             f"{m.name}: {m.requirement_form}" for m in registry.mechanisms()
                                             if m.whole_release) + ")")
    add_seed(rel, default=None,
             help="learner seed (default 0); for kanon-rdt and the dp mechanisms the seed of the structure, samples "
                  "and noise (default: OpenDP's exact samplers on the OS CSPRNG; a seeded release is reproducible, "
                  "so its audit fails: for experiments only)")
    rel.add_argument("--data-derived-domain", action="store_true",
                     help="give up the dp/dps guarantee: release over ranges and categories read from the rows "
                          "(no --schema); the report says 'domain: data-derived' and the audit fails the claim")
    rel.add_argument("--prior-share", type=float, default=DEFAULT_PRIOR_SHARE, metavar="SHARE",
                     help=f"dp mechanisms: share of epsilon spent on a noisy class histogram; below its public "
                          f"threshold only the histogram is released (default {DEFAULT_PRIOR_SHARE:g}; 0: the papers' "
                          "mechanisms)")
    rel.add_argument("--out", type=Path, required=True, help="model file to write (JSON)")
    add_json(rel, "what was released (summary, privacy report, attacks)")
    rel.set_defaults(func=cmd_release)


def configure_audit(aud: argparse.ArgumentParser) -> None:
    """`audit MODEL`."""
    aud.add_argument("model", type=Path, help="model file written by 'modelshare release' (one tree or an ensemble)")
    add_json(aud, "every check, path and attack")
    aud.set_defaults(func=cmd_audit)
