"""`modelshare pgen MODEL --out FILE`: pseudo-data from any released model file, as the miner makes it.

Every kind of release regenerates: one tree, an ensemble (kanon-rdt, laplace-rdt, diffpets, dpea:
several trees) and a DiffPETs regression forest. By default the rows are exactly those the miner
generates from the model in a study whose ``pgen_scale`` is ``--pgen-scale`` (default 1: a
tree's hit + miss per path, an ensemble's estimated real rows), because this command calls the
miner's own code: `modelshare.miner_node.tasks.pseudo_data` (which sizes an ensemble by the sampling rate
its report states and caps a dp release at `modelshare.miner_node.dp_pgen.MAX_DP_PGEN_ROWS` rows) and, for a
regression forest, `modelshare.miner_node.pgen.pgen_regression`. ``--rows N`` instead asks for
exactly N rows of a single tree, generated and written in chunks of ``--chunk-rows``, so a table
larger than memory can be written. Rows are shuffled unless ``--grouped``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from modelshare.cli.common import add_json, add_seed, err, positive_int
from modelshare.common.data.table_io import write_table_chunks
from modelshare.common.federation.model_io import read_model_file
from modelshare.common.federation.wire import DecodedModel
from modelshare.miner_node.pgen import pgen_chunks, pgen_regression
from modelshare.miner_node.tasks import pseudo_data

__all__ = ["cmd_pgen", "configure"]

Chunks = Iterable[tuple[np.ndarray, np.ndarray]]


def _kind(model: DecodedModel) -> str:
    if model.forest is not None:
        return f"regression forest of {len(model.forest.trees)} trees"
    return "tree" if len(model.trees) == 1 else f"ensemble of {len(model.trees)} trees"


def _in_chunks(X: np.ndarray, y: np.ndarray, chunk_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(X, y)`` in slices of ``chunk_rows`` rows (one empty slice for an empty table)."""
    for start in range(0, max(len(y), 1), chunk_rows):
        yield X[start:start + chunk_rows], y[start:start + chunk_rows]


def _rows(model: DecodedModel, args: argparse.Namespace, rng: np.random.Generator) -> Chunks:
    """The pseudo rows of ``model`` as the flags ask, in chunks ready to write."""
    if args.rows is not None:
        if model.forest is not None or len(model.trees) > 1:
            raise ValueError(f"{args.model}: --rows asks for exactly N rows of a single tree; this model is a "
                             f"{_kind(model)}, which regenerates as the miner sizes it: use --pgen-scale")
        return pgen_chunks(model.trees[0], rows=args.rows, rng=rng, class_assignment=args.class_assignment,
                           chunk_rows=args.chunk_rows, shuffle=not args.grouped)
    if model.forest is not None:
        X, y = pgen_regression(model.forest, scale=args.pgen_scale, rng=rng)
    else:
        X, y = pseudo_data(model.trees, model.report, args.pgen_scale, rng, args.class_assignment)
    if not args.grouped:
        order = rng.permutation(len(y))
        X, y = X[order], y[order]
    return _in_chunks(X, y, args.chunk_rows)


def cmd_pgen(args: argparse.Namespace) -> int:
    if not args.pgen_scale > 0:
        raise ValueError(f"--pgen-scale must be positive, got {args.pgen_scale:g}")
    model = read_model_file(args.model).model
    rows = write_table_chunks(model.schema, _rows(model, args, np.random.default_rng(args.seed)), args.out)
    if args.json:
        mechanism = model.report.mechanism if model.report is not None else None
        print(json.dumps({"model": str(args.model), "kind": _kind(model), "mechanism": mechanism, "rows": rows,
                          "out": str(args.out), "seed": args.seed}, indent=2))
    else:
        err.print(f"wrote {rows} pseudo rows of a {_kind(model)} to {args.out}")
    return 0


def configure(p: argparse.ArgumentParser) -> None:
    """`pgen MODEL --out FILE`."""
    p.description = __doc__.split("\n\n")[1].replace("``", "")
    p.add_argument("model", type=Path, help="model file (JSON) written by 'modelshare release' or received by a miner")
    p.add_argument("--out", type=Path, required=True, help="output .csv, .csv.gz or .parquet")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--pgen-scale", type=float, default=1.0,
                      help="pseudo rows per row the model describes, as the miner's pgen_scale (default 1: a tree's "
                           "hit + miss per path; an ensemble's or forest's estimated real rows)")
    size.add_argument("--rows", type=positive_int, default=None,
                      help="exactly this many rows of a single-tree model, streamed in chunks")
    add_seed(p, default=0, help="seed of the pseudo rows (default 0)")
    p.add_argument("--class-assignment", choices=["exact", "sample"], default="exact",
                   help="exact: each path's classes in exact proportion to its counts (default); sample: drawn")
    p.add_argument("--chunk-rows", type=positive_int, default=1_000_000,
                   help="rows written per chunk (default 1000000)")
    p.add_argument("--grouped", action="store_true", help="keep rows grouped by path (default: shuffled)")
    add_json(p, "what was written")
    p.set_defaults(func=cmd_pgen)
