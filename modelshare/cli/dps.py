"""`modelshare privacy dps`: the (beta, eps, delta)-DPS guarantee of k-AnonToRdt (Thm 1, Cor. 1).

One setting (--k, --beta, --epsilon, --trees) prints the composed guarantee of a forest; --table
prints the paper's whole Table 5 grid recomputed from the formula. Settings outside the theorem's
range raise DPSError, which `modelshare.cli.main` turns into a one-line error and exit code 2.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from modelshare.cli.common import add_json, out
from modelshare.common.privacy.dps import DPSError, DPSGuarantee, Table5, compose, table5

__all__ = ["cmd_dps", "configure"]


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _print_guarantee(g: DPSGuarantee) -> None:
    table = Table(title=f"k-AnonToRdt (beta, eps, delta)-DPS: k={g.k}, beta={g.beta:g}, {g.trees} tree(s)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("epsilon total (Nt*eps)", f"{g.epsilon_total:g}")
    table.add_row("epsilon per tree (eps)", f"{g.epsilon_per_tree:.6g}")
    table.add_row("delta per tree (d(k, beta, eps))", _fmt(g.delta_per_tree))
    table.add_row("delta total (Nt*delta)", _fmt(g.delta_total))
    verdict = (g.describe() if g.meaningful
               else "[red]no guarantee[/] (Nt*delta >= 1)")
    table.add_row("guarantee", verdict)
    out.print(table)


def _table5_json(grid: Table5) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (k, beta, eps), cell in grid.cells.items():
        if cell is None:
            rows.append({"k": k, "beta": beta, "epsilon_total": eps, "trees": grid.trees,
                         "delta_total": None, "reason": grid.reasons[(k, beta, eps)]})
        else:
            rows.append(cell.to_dict())
    return rows


def _print_table5(grid: Table5) -> None:
    """One rich table per k (as the paper's Table 5 groups its columns), so it fits 80 columns."""
    for k in grid.k_values:
        table = Table(title=f"Table 5: Nt*delta, k = {k}, Nt = {grid.trees}")
        table.add_column("Nt*eps", justify="right")
        for beta in grid.betas:
            table.add_column(f"beta={beta:g}", justify="right")
        for eps in grid.epsilon_totals:
            row = [f"{eps:g}"]
            for beta in grid.betas:
                cell = grid.cells[(k, beta, eps)]
                if cell is None:
                    row.append("[dim]--[/]")
                elif cell.meaningful:
                    row.append(_fmt(cell.delta_total))
                else:
                    row.append(f"[red]{_fmt(cell.delta_total)} (none)[/]")
            table.add_row(*row)
        out.print(table)
    out.print("--: the per-tree eps = Nt*eps / Nt is below -ln(1 - beta), outside Theorem 1 (refused); "
              "(none): Nt*delta >= 1, no guarantee", highlight=False)


def cmd_dps(args: argparse.Namespace) -> int:
    single = {"--k": args.k, "--beta": args.beta, "--epsilon": args.epsilon, "--trees": args.trees}
    if args.table:
        given = [name for name, value in single.items() if value is not None]
        if given:
            raise DPSError(f"--table prints the paper's fixed Table 5 grid; drop {', '.join(given)}")
        grid = table5()
        if args.json:
            print(json.dumps(_table5_json(grid), indent=2))
        else:
            _print_table5(grid)
        return 0
    missing = [name for name in ("--k", "--beta", "--epsilon") if single[name] is None]
    if missing:
        raise DPSError(f"privacy dps needs {', '.join(missing)} (or --table for the paper's Table 5)")
    g = compose(args.k, args.beta, args.epsilon, 1 if args.trees is None else args.trees)
    if args.json:
        print(json.dumps(g.to_dict(), indent=2))
    else:
        _print_guarantee(g)
    return 0


def configure(dps: argparse.ArgumentParser) -> None:
    """`privacy dps`: one setting, or --table."""
    dps.description = ("Theorem 1 / Corollary 1 of the k-AnonToRdt paper: a forest of Nt trees, each on its own "
                       "Bernoulli(beta) sample with counts below k zeroed, is (beta, Nt*eps, Nt*d(k, beta, eps))-DPS "
                       "for eps = epsilon_total / Nt >= -ln(1 - beta).")
    dps.add_argument("--k", type=int, default=None, help="anonymity threshold: counts below k are set to 0")
    dps.add_argument("--beta", type=float, default=None, help="per-row sampling probability, 0 < beta < 1")
    dps.add_argument("--epsilon", type=float, default=None, help="total epsilon of the forest (Nt*eps)")
    dps.add_argument("--trees", type=int, default=None, help="number of trees Nt (default 1)")
    dps.add_argument("--table", action="store_true", help="print the paper's Table 5 grid computed by the formula")
    add_json(dps, "the guarantee (or the grid)")
    dps.set_defaults(func=cmd_dps)
