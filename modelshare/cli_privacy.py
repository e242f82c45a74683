"""`modelshare release` (train, make safe, write a model file) and `modelshare audit` (re-check it)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from common.attacks import AttackReport, attack_report
from common.audit import audit
from common.learners import LEARNERS, make_learner
from common.model_io import read_model, write_release
from modelshare.cli_common import (
    add_release_options,
    add_table_source,
    err,
    load_source,
    out,
    positive_int,
    tree_params,
)
from owner_node.release import release_tree

__all__ = ["add_parsers", "cmd_release", "cmd_audit"]


def _attack_rows(report: AttackReport) -> list[tuple[str, str, str]]:
    rows = [
        ("uniqueness", str(report.uniqueness.leaves), f"{report.uniqueness.users:g}"),
        ("homogeneity", str(report.homogeneity.leaves), f"{report.homogeneity.users:g}"),
    ]
    rows += [(f"background, {i + 1} known", str(c.leaves), f"{c.users:g}") for i, c in enumerate(report.background)]
    return rows


def cmd_release(args: argparse.Namespace) -> int:
    table = load_source(args)
    X, y = table.schema.encode(table.frame, source=table.source)
    learner = make_learner(args.learner, table.schema, random_state=args.seed, **tree_params(args.max_depth, args.min_samples_leaf))
    learner.fit(X, y)
    release = release_tree(learner.tree_, args.mechanism, requirement=args.requirement, disclosure=args.disclosure)
    write_release(release, args.out)
    owner_view = attack_report(release.tree, X, y)
    summary: dict[str, Any] = {
        "source": table.source,
        "rows": int(len(y)),
        "trained_leaves": learner.tree_.n_leaves,
        "released_leaves": release.tree.n_leaves,
        "released_depth": release.tree.depth,
        "training_accuracy": float((release.tree.predict(X) == y).mean()),
        "report": release.report.to_dict(),
        "owner_attacks": owner_view.to_dict(),
        "out": str(args.out),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    err.print(
        f"{table.source}: {len(y)} rows; {args.learner} tree with {learner.tree_.n_leaves} leaves -> "
        f"{args.mechanism} released {release.tree.n_leaves} leaves (depth {release.tree.depth})"
    )
    err.print(f"claim: {release.report.guarantee}")
    attacks = Table(title="attacks on the released tree")
    for col in ("attack", "leaves", "users (released counts)", "users (training rows)"):
        attacks.add_column(col, justify="left" if col == "attack" else "right")
    for (name, leaves, users), (_, _, own) in zip(_attack_rows(release.report.attacks), _attack_rows(owner_view)):  # type: ignore[arg-type]
        attacks.add_row(name, leaves, users, own)
    out.print(attacks)
    err.print(f"wrote {args.out}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    tree, report = read_model(args.model)
    result = audit(tree, report)
    if args.json:
        print(json.dumps({"model": str(args.model), **result.to_dict()}, indent=2))
        return 0 if result.passed else 1
    checks = Table(title=f"audit of {args.model}: {'PASS' if result.passed else 'FAIL'}")
    for col in ("check", "result", "detail"):
        checks.add_column(col)
    for c in result.checks:
        checks.add_row(c.name, "[green]pass[/]" if c.passed else "[red]FAIL[/]", c.detail)
    out.print(checks)
    paths = Table(title=f"{len(result.paths)} released paths")
    for col in ("leaf", "result", "tuples", "hit", "miss", "path"):
        paths.add_column(col, justify="right" if col in ("leaf", "tuples", "hit", "miss") else "left")
    for p in sorted(result.paths, key=lambda p: p.passed):
        paths.add_row(str(p.leaf), "pass" if p.passed else "[red]FAIL[/]", f"{p.tuples:g}", f"{p.hit:g}", f"{p.miss:g}", p.path)
    out.print(paths)
    attacks = Table(title="attacks on the released statistics")
    for col in ("attack", "leaves", "users"):
        attacks.add_column(col, justify="left" if col == "attack" else "right")
    for row in _attack_rows(result.attacks):
        attacks.add_row(*row)
    out.print(attacks)
    return 0 if result.passed else 1


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `release` and `audit`."""
    rel = sub.add_parser("release", help="train a local tree, apply a release mechanism, write the model file")
    add_table_source(rel, None)
    rel.add_argument("--learner", default="cart", choices=sorted(LEARNERS), help="local learner (default cart)")
    rel.add_argument("--max-depth", type=positive_int, default=None, help="depth limit of the tree")
    rel.add_argument("--min-samples-leaf", type=positive_int, default=None, help="minimum leaf size (default 1)")
    add_release_options(rel)
    rel.add_argument("--seed", type=int, default=0, help="learner seed (default 0)")
    rel.add_argument("--out", type=Path, required=True, help="model file to write (JSON)")
    rel.add_argument("--json", action="store_true", help="print machine-readable JSON")
    rel.set_defaults(func=cmd_release)

    aud = sub.add_parser("audit", help="re-derive a model file's privacy claims from its released counts")
    aud.add_argument("model", type=Path, help="model file written by 'modelshare release'")
    aud.add_argument("--json", action="store_true", help="print machine-readable JSON")
    aud.set_defaults(func=cmd_audit)
