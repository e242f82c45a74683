"""`modelshare privacy audit-dp MECHANISM`: the empirical DP audit
(`modelshare.common.audit.dp.estimate`) of a mechanism on a table.

The table is D; the audit adds one adversarially chosen row for D', runs the mechanism's registered
release path (its registry trainer, what owners run) ``--trials`` times on each, and bounds eps from
below with confidence 1 - ``--alpha``. Any registered mechanism with a target can be named, a plugin's
or a test's variant included. kanon-rdt's ``--aim`` picks the added row: cells of k - 1 rows (tests the
sampling) or the emptiest (tests the suppression). Exit code 0 when the claimed ``--epsilon`` is at
least the bound, 1 when the bound exceeds it (the claim is refuted),
2 on bad input. Without ``--seed`` the audit draws fresh OS entropy and prints the seed it used,
so a failing audit can be replayed. ``modelshare audit-dp`` is the old spelling of the command,
and ``--depth`` of ``--max-depth``; both still work and say so on stderr.
"""

from __future__ import annotations

import argparse
import inspect
import json
import secrets

import numpy as np
from rich.table import Table

from modelshare.cli.common import (
    add_json,
    add_max_depth,
    add_seed,
    deprecated_alias,
    err,
    out,
    positive_int,
)
from modelshare.cli.inputs import add_table_source, load_encoded
from modelshare.common.audit.dp.estimate import MIN_TRIALS, AuditTarget, DPAuditResult, audit_dp
from modelshare.common.data.schema import Schema
from modelshare.common.mechanisms import registry
from modelshare.common.privacy.requirements import parse_requirement

__all__ = ["TRIALS", "audited_mechanisms", "cmd_audit_dp", "configure"]

TRIALS = 2000  # default releases per table: every trial runs the registered trainer end to end
_TARGET_OPTIONS = {  # options only some targets take: the factory's keyword, and whose it is
    "embedding_depth": "dpea's levels of splits per selection",
    "aim": "kanon-rdt's choice of the added row",
}


def audited_mechanisms() -> tuple[str, ...]:
    """The registered mechanisms with an empirical DP audit target."""
    return tuple(m.name for m in sorted(registry.mechanisms(), key=lambda m: m.name) if m.dp_audit_target is not None)


def _claim(args: argparse.Namespace, family: str) -> str:
    """The claimed requirement the command line states: ``dps:`` for a dps mechanism, ``dp:`` otherwise."""
    given = [flag for flag, value in (("--k", args.k), ("--beta", args.beta)) if value is not None]
    if family != "dps":
        if given:
            raise ValueError(f"{args.mechanism} takes no {' or '.join(given)} (those set a dps claim)")
        return f"dp:epsilon={args.epsilon!r},trees={args.trees}"
    if len(given) < 2:
        raise ValueError(f"{args.mechanism} needs --k and --beta (its claim is dps:k=K,beta=B,epsilon=E,trees=T)")
    return f"dps:k={args.k},beta={args.beta!r},epsilon={args.epsilon!r},trees={args.trees}"


def _target(args: argparse.Namespace, schema: Schema, X: np.ndarray, y: np.ndarray,
            rng: np.random.Generator) -> AuditTarget:
    """The audit target of the named mechanism at the claimed setting (its registry record's factory)."""
    record = registry.get(args.mechanism)
    factory = record.resolve_dp_audit_target()
    if factory is None:
        raise ValueError(f"mechanism {args.mechanism!r} has no empirical DP audit target")
    requirement = parse_requirement(_claim(args, record.family), n_classes=schema.n_classes)  # or RequirementError
    options = {name: getattr(args, name) for name in _TARGET_OPTIONS if getattr(args, name) is not None}
    for name in options:
        if name not in inspect.signature(factory).parameters:
            raise ValueError(f"{args.mechanism} takes no --{name.replace('_', '-')} ({_TARGET_OPTIONS[name]})")
    target: AuditTarget = factory(requirement, args.depth, schema, X, y, rng, mechanism=record.name, **options)
    return target  # the registry (below the audit layer) types its factories loosely; this is their contract


def _print(result: DPAuditResult, seed: int, claim: str) -> None:
    neighbours = result.neighbours
    err.print(f"added row r (D' = D + r): {neighbours['added_row']}", highlight=False)
    counts = neighbours.get("cell_counts_in_D")
    err.print((f"r's cell counts in D: {counts}; " if counts is not None else "") + f"score: {neighbours['score']}",
              highlight=False)
    err.print(f"seed {seed} (--seed replays this audit)", highlight=False)
    verdict = "[green]PASS[/]" if result.passed else "[red]FAIL[/]"
    table = Table(title=f"empirical DP audit of {result.mechanism} ({claim}): {verdict}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("trials per table (half choose E, half bound)", str(result.trials))
    table.add_row("P[E|D]", f"{result.p_d:.4g}  [{result.interval_d[0]:.4g}, {result.interval_d[1]:.4g}]")
    table.add_row("P[E|D']", f"{result.p_d1:.4g}  [{result.interval_d1[0]:.4g}, {result.interval_d1[1]:.4g}]")
    for b in result.bounds:
        table.add_row(f"ln {b.ratio}, E: {b.event}", f"{b.epsilon:.4f}")
    table.add_row(f"eps lower bound (confidence {1 - result.alpha:g})",
                  f"{result.epsilon_lower:.4f} vs claimed {result.epsilon:g}"
                  + (f", delta {result.delta:.3g}" if result.delta else ""))
    out.print(table)


def cmd_audit_dp(args: argparse.Namespace) -> int:
    if args.trials < MIN_TRIALS:
        raise ValueError(f"--trials {args.trials}: the audit needs at least {MIN_TRIALS} trials per table")
    table = load_encoded(args)
    X, y = table.X, table.y
    seed = secrets.randbits(128) if args.seed is None else args.seed  # 128 bits of OS entropy, as SeedSequence() draws
    rng = np.random.default_rng(seed)
    target = _target(args, table.schema, X, y, rng)
    result = audit_dp(target, args.trials, rng, alpha=args.alpha)
    claim = str(parse_requirement(_claim(args, registry.get(args.mechanism).family)))  # as the target was built
    if args.json:
        print(json.dumps({"source": table.source, "rows": int(len(y)), "seed": seed, "depth": args.depth,
                          "trees": args.trees, **result.to_dict()}, indent=2))
    else:
        err.print(f"{table.source}: {len(y)} rows, {args.trees} trees of depth {args.depth}")
        _print(result, seed, claim)
    return 0 if result.passed else 1


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
    return value


def configure(p: argparse.ArgumentParser) -> None:
    """`privacy audit-dp MECHANISM` (and its old spelling `audit-dp`)."""
    p.description = ("Runs MECHANISM's registered trainer (what owners run) many times on the table (D) and on the "
                     "table plus one adversarially chosen row (D'), picks a distinguishing event on half the trials, "
                     "and bounds eps from below with "
                     "Clopper-Pearson intervals on the other half (minus delta for kanon-rdt's (eps, delta) claim). "
                     "Exit 1 when the bound exceeds --epsilon.")
    p.add_argument("mechanism", choices=audited_mechanisms(), help="the mechanism to audit")
    add_table_source(p, None)
    p.add_argument("--epsilon", type=float, required=True, help="claimed total epsilon (over all trees)")
    p.add_argument("--trees", type=positive_int, default=10, help="number of trees (default 10)")
    depth = add_max_depth(p, dest="depth", default=3, help="depth of every random tree (default 3)")
    deprecated_alias(p, "--depth", depth)
    p.add_argument("--embedding-depth", type=positive_int, default=None,
                   help="dpea: levels of splits per exponential-mechanism draw, audited on DPEA's exact-law fast "
                        "path (default: the whole tree, through the registered trainer)")
    p.add_argument("--k", type=positive_int, default=None, help="kanon-rdt: counts below k are released as 0")
    p.add_argument("--beta", type=_probability, default=None, help="kanon-rdt: per-tree sampling probability")
    p.add_argument("--aim", choices=("threshold", "sparse"), default=None,
                   help="kanon-rdt: add a row whose cells hold k - 1 rows of the table (threshold, the default: tests "
                        "the sampling) or the fewest (sparse: tests the suppression below k)")
    p.add_argument("--trials", type=int, default=TRIALS,
                   help=f"releases per table (default {TRIALS}; each trains the registered mechanism once)")
    p.add_argument("--alpha", type=_probability, default=0.05, help="1 - confidence of the bound (default 0.05)")
    add_seed(p, default=None, help="audit seed (default: fresh OS entropy, printed)")
    add_json(p, "the audit (seed, probabilities, bounds, verdict)")
    p.set_defaults(func=cmd_audit_dp)
