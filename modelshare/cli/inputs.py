"""Options of the commands that learn from a table: the input table, the local learner and the release.

``release``, ``simulate`` and ``experiment sources`` (and the learner and disclosure of
``experiment privacy``) take these with one set of defaults, the model-sharing paper's protective
ones, except for the local tree: a tree grown to the requirement (``admissible``) for the path
mechanisms (the papers' experiments keep their multiway or CART learner), released by ``apt`` to
``cl-diversity:c=5,l=2`` with hit/miss disclosure (counts for the mechanisms that release counts
only). ``release`` writes a model file that leaves the site, so it takes no default mechanism or
requirement at all: the owner states both (`modelshare.cli.release`).

Unlike `modelshare.cli.common`, this module imports the data and learner code, so only the
commands that use it import it.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypedDict

from modelshare.cli.common import LEARNER_DEFAULT, err, note_dropped, pruning_confidence, tree_params
from modelshare.common.data.datasets import LoadedTable, load_dataset, load_table
from modelshare.common.data.datasets.streamed import EncodedTable, read_encoded
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema, SchemaError
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.registry import default_learner
from modelshare.common.trees.learner_options import (
    CATEGORY_SPLITS,
    LEARNER_NAMES,
    PAIRINGS,
    UNPRUNED,
    admissible_params,
)
from modelshare.common.trees.tree import DISCLOSURES, Disclosure

__all__ = [
    "AdmissibleOptions",
    "DEFAULT_DISCLOSURE",
    "DEFAULT_LEARNER",
    "DEFAULT_MECHANISM",
    "add_disclosure",
    "add_admissible_options",
    "add_confidence",
    "add_learner",
    "learner_params",
    "resolve_admissible",
    "add_release_options",
    "add_table_source",
    "load_encoded",
    "load_source",
    "resolve_disclosure",
    "resolve_learner",
    "resolve_requirement",
    "warn_data_derived",
]

DEFAULT_LEARNER = "multiway"
DEFAULT_MECHANISM = "apt"
DEFAULT_DISCLOSURE: Disclosure = "hit_miss"


def add_table_source(p: argparse.ArgumentParser, default_dataset: str | None) -> None:
    """--dataset, or --data with --class-column and --schema: the table a command reads (`load_source`)."""
    src = p.add_argument_group("input table (a bundled dataset, or your own file)")
    src.add_argument("--dataset", default=None,
                     help="bundled dataset name (`modelshare datasets list`)"
                          + (f"; default {default_dataset} unless --data is given" if default_dataset else
                             "; this or --data is required"))
    src.add_argument("--data", type=Path, help="CSV or Parquet file of your own")
    src.add_argument("--class-column", help="class column of --data")
    src.add_argument("--schema", type=Path, help="schema file (.json/.toml) for --data; inferred if omitted")
    src.add_argument("--missing", choices=("drop", "category"), default="drop",
                     help="a row with a missing value ('?' or empty): drop it (the count goes to stderr), or keep a "
                          "missing categorical value as the category '(missing)' (a given schema must list it; a row "
                          "missing a number or its class is still dropped) (default %(default)s)")
    src.set_defaults(default_dataset=default_dataset)


def load_source(args: argparse.Namespace) -> LoadedTable:
    """The table of ``--dataset`` or ``--data``, saying on stderr how many rows were dropped for a missing value.

    Raises `SchemaError` when neither or both are given.
    """
    if args.data is not None:
        if args.dataset is not None:
            raise SchemaError("give either --dataset or --data, not both")
        if not args.class_column:
            raise SchemaError("--data needs --class-column", source=str(args.data))
        table = load_table(args.data, args.class_column, schema=args.schema, missing=args.missing)
    else:
        name = args.dataset or args.default_dataset
        if name is None:
            raise SchemaError("no input table: give --dataset NAME or --data FILE --class-column COLUMN")
        table = load_dataset(name, missing=args.missing)
    note_dropped(table.source, table.dropped_rows)
    return table


def load_encoded(args: argparse.Namespace) -> EncodedTable:
    """The table of ``--dataset`` or ``--data`` encoded with its schema, as `load_source` then `Schema.encode`.

    A ``--data`` file with a ``--schema`` is read a block at a time straight into ``(X, y)``
    (`modelshare.common.data.datasets.streamed.read_encoded`), so a large file never sits in memory as text;
    the rows dropped for a missing value are said on stderr as `load_source` says them.
    """
    if args.data is not None and args.schema is not None and args.dataset is None and args.class_column:
        found = read_encoded(args.data, args.class_column, schema=args.schema, missing=args.missing)
        note_dropped(found.source, found.dropped_rows)
        return found
    table = load_source(args)
    X, y = table.schema.encode(table.frame, source=table.source)
    return EncodedTable(X, y, table.dropped_rows, table.source, table.schema)



def add_learner(p: argparse.ArgumentParser, *, help: str, default: str | None = None, several: bool = False) -> None:
    """--learner: the owners' local tree learner; ``default`` None leaves it to `resolve_learner` (by mechanism).

    The experiments that reproduce the papers pass the paper's learner as ``default``, so their
    documented commands keep their numbers. ``several``: one or more learners (a list, ``default``
    its one element), for experiments that compare learners on the same folds.
    """
    said = (f"default {default}" if default else
            f"default {default_learner(DEFAULT_MECHANISM)} (grown to the requirement) for the path mechanisms "
            f"{', '.join(registry.names(family='path'))}; {default_learner('none')} (each owner chooses by "
            "cross-validation) under none")
    if several:
        p.add_argument("--learner", nargs="+", default=[default], choices=LEARNER_NAMES, metavar="LEARNER",
                       help=f"{help} (one or more of {', '.join(LEARNER_NAMES)}; {said})")
    else:
        p.add_argument("--learner", default=default, choices=LEARNER_NAMES, help=f"{help} ({said})")


def add_admissible_options(p: argparse.ArgumentParser) -> None:
    """--pairing, --category-split and --confidence: the admissible
    learner's options (`resolve_admissible` checks them)."""
    p.add_argument("--pairing", choices=PAIRINGS, default=None,
                   help="admissible learner only: where a category that may not stand alone is grouped; "
                        "deferred (the default) only where grouping pays, with the partner chosen per subtree; "
                        "eager at the first node whose criterion picks its attribute (the earlier behaviour)")
    p.add_argument("--category-split", choices=CATEGORY_SPLITS, default=None,
                   help="admissible learner only: a branch per category (grouped), two groups (binary) or the better "
                        "of the two (either); default either under k-anonymity, grouped otherwise")
    add_confidence(p, "admissible learner only: ")


def add_confidence(p: argparse.ArgumentParser, scope: str) -> None:
    """--confidence: the admissible learner's C4.5 pruning confidence, none, or (unset) the learner's own default."""
    p.add_argument("--confidence", type=pruning_confidence, default=LEARNER_DEFAULT,
                   help=scope + "C4.5's pruning confidence (0 < CF < 1), or none to release the grown tree (every "
                                "leaf meets the requirement by construction; APT and the audit still check it); "
                                "default: the learner's own for the requirement (0.25; no pruning under k-anonymity)")


class AdmissibleOptions(TypedDict, total=False):
    """The admissible learner's options the flags set, as `admissible_params` takes them."""

    pairing: str
    category_split: str
    confidence: float | str


def resolve_admissible(args: argparse.Namespace) -> AdmissibleOptions:
    """The admissible options the flags set, as study.toml's [training] writes them (``args.learner`` resolved).

    Raises
    ------
    ValueError
        An option given with a learner other than ``admissible``, which alone takes them.
    """
    given = AdmissibleOptions()
    if args.pairing is not None:
        given["pairing"] = args.pairing
    if args.category_split is not None:
        given["category_split"] = args.category_split
    if args.confidence != LEARNER_DEFAULT:
        given["confidence"] = UNPRUNED if args.confidence is None else args.confidence
    admissible_params(args.learner, **given, spell=lambda key: "--" + key.replace("_", "-"))
    return given


def learner_params(args: argparse.Namespace) -> dict[str, Any]:
    """The local learner's parameters from ``--max-depth``, ``--min-samples-leaf`` and `resolve_admissible`'s flags."""
    return {**tree_params(args.max_depth, args.min_samples_leaf),
            **admissible_params(args.learner, **resolve_admissible(args))}


def resolve_learner(mechanism: str, given: str | None) -> str:
    """The learner a command uses: the one given, else the mechanism's default (`default_learner`)."""
    return given or default_learner(mechanism)


def add_release_options(p: argparse.ArgumentParser, mechanisms: Collection[str], *, mechanism_default: str | None,
                        mechanism_help: str, requirement_help: str) -> None:
    """--mechanism (one of ``mechanisms``), --requirement and --disclosure, as every command that releases trees.

    ``mechanism_default`` None leaves the mechanism to the command (``release`` requires it).
    --disclosure defaults to None, which `resolve_disclosure` reads as the mechanism's form.
    """
    p.add_argument("--mechanism", default=mechanism_default, choices=sorted(mechanisms), help=mechanism_help)
    p.add_argument("--requirement", default=None, help=requirement_help)
    add_disclosure(p, help="what released trees disclose per node")


def add_disclosure(p: argparse.ArgumentParser, *, help: str) -> None:
    """--disclosure: None unless given, which `resolve_disclosure` reads as the mechanism's form."""
    p.add_argument("--disclosure", default=None, choices=DISCLOSURES,
                   help=f"{help} (default {DEFAULT_DISCLOSURE}, the model-sharing paper's; counts for the mechanisms "
                        "that release counts only, the whole-release ones)")


def resolve_disclosure(mechanism: str, given: str | None) -> Disclosure:
    """The disclosure a release uses: the one given, else hit/miss where the mechanism allows it, else counts.

    A given disclosure the mechanism does not release (hit/miss of a count-only mechanism) is
    refused, never replaced behind the user's back.
    """
    allowed = registry.get(mechanism).disclosures or ()
    if given is None:
        return DEFAULT_DISCLOSURE if DEFAULT_DISCLOSURE in allowed else allowed[0]
    for disclosure in allowed:
        if disclosure == given:
            return disclosure
    raise ValueError(f"--disclosure {given}: mechanism {mechanism!r} releases {' or '.join(allowed)} only")


def resolve_requirement(mechanism: str, given: str | None) -> str | None:
    """The requirement a release meets: the one given, else the mechanism's registry default (None: it takes none)."""
    record = registry.get(mechanism)
    return (given or record.default_requirement) if record.needs_requirement else given


def warn_data_derived(schema: Schema | RegressionSchema, source: str, schema_file: str | Path | None = None) -> None:
    """One stderr warning naming the columns whose ranges or categories were read from the rows of ``source``.

    ``schema_file`` is the ``--schema`` given, when it is a draft still marked ``domain = "data-derived"``:
    the warning then names it and the line its reviewer deletes, rather than asking for a schema.
    """
    numeric = [a.name for a in schema.attributes if a.kind == "numeric"]
    categorical = [a.name for a in schema.attributes if a.kind == "categorical"]
    said = "; ".join(filter(None, [f"ranges of {', '.join(numeric)}" if numeric else "",
                                   f"categories of {', '.join(categorical)}" if categorical else "",
                                   f"the classes of {schema.class_name}"]))
    if schema_file is not None:
        err.print(f"[yellow]warning:[/] {schema_file} is still marked domain = \"data-derived\" (a draft of "
                  f"`modelshare schema infer`): its domain was read from rows ({said}), and the release discloses "
                  f"it. Review {schema_file} and delete its line domain = \"data-derived\" once every bound and "
                  "category is public.", highlight=False)
        return
    err.print(f"[yellow]warning:[/] {source} has no --schema, so the public domain was read from its rows ({said}): "
              "the release discloses them. Draft a schema with `modelshare schema infer` and review it.",
              highlight=False)
