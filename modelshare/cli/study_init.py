"""`modelshare study init`: write a commented study.toml with the defaults `modelshare simulate` uses.

A study needs a `[release]` table (`modelshare.common.federation.study` refuses one without: no mechanism is
chosen behind the user's back), so this command gives a new user a file to start from. Its values
are not copied by hand: they come from the same constants and resolvers `simulate` fills its flags
with (`modelshare.simulate.TASK_MECHANISM`, the registry's default requirement and depth, `resolve_disclosure`,
`resolve_learner`, `modelshare.simulate.DEFAULT_MODELS`), and the file is parsed as a study before
it is written, so what it says is what `study create` will run.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from modelshare.cli.common import add_json
from modelshare.cli.inputs import resolve_disclosure, resolve_learner, resolve_requirement
from modelshare.common.data.datasets import DATASETS, bundled_schema
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import Schema
from modelshare.common.data.task import load_schema, task_of
from modelshare.common.federation.study import load_study_file
from modelshare.common.federation.wire import disclosure_from_pb
from modelshare.common.files import atomic_write
from modelshare.common.mechanisms import registry
from modelshare.simulate import DEFAULT_MODELS, DEFAULT_OFF_PATH, TASK_MECHANISM

__all__ = ["PGEN_SCALE", "cmd_study_init", "configure", "study_template"]

PGEN_SCALE = 10
"""Pseudo rows per disclosed tuple, as `simulate --pgen-scale` by default."""

_DISCLOSURES = {
    "hit_miss": "per path: its class, rows of it (hits) and not (misses)",
    "counts": "per released node: the row count of every class",
}


def _toml_string(value: str) -> str:
    """``value`` as a TOML basic string."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _line(key: str, value: str, comment: str) -> str:
    """``key = value`` with ``comment`` aligned after it."""
    return f"{f'{key} = {value}':<39} # {comment}"


def study_template(*, dataset: str | None = None, schema_file: str | None = None,
                   schema: Schema | RegressionSchema | None = None, evaluation: str | None = None) -> str:
    """The commented study.toml text for a bundled ``dataset`` or a ``schema_file`` (as written in the file; its
    parsed ``schema`` decides the task), with `simulate`'s defaults for that task; ``evaluation`` names the
    held-out table to score on, relative to the file (default: none, the line commented out)."""
    task = task_of(schema) if schema is not None else task_of(bundled_schema(str(dataset)))
    mechanism = TASK_MECHANISM[task]
    record = registry.get(mechanism)
    requirement = resolve_requirement(mechanism, None)
    disclosure = resolve_disclosure(mechanism, None)
    models = ", ".join(_toml_string(m) for m in DEFAULT_MODELS[task])
    name = dataset or Path(str(schema_file)).stem
    source = (_line("dataset", _toml_string(dataset), "a bundled dataset's schema; or file = \"schema.json\"")
              if dataset is not None else
              _line("file", _toml_string(str(schema_file)), "the public schema, relative to this file"))
    lines = [
        "# A study: what the miner asks of every owner. Written by `modelshare study init`",
        "# with the defaults of `modelshare simulate`; every key: docs/reference/study-toml.md.",
        "# Preview it at a site:   modelshare owner check study.toml --config owner.toml",
        "# Create it (the admin):  modelshare study create study.toml --config admin.toml",
        "",
        "[study]",
        _line("title", _toml_string(f"{mechanism} on {name}"), "for people"),
        _line("# id", '"my-study"', "default: a fresh id"),
        _line("# owners", '["site-a", "site-b"]', "default: every owner on the miner's roster"),
        _line("# quorum", "2", "answers needed to mine; default: every invited owner"),
        _line("deadline_minutes", "30", "how long the miner waits for the owners' answers"),
        _line("seed", "0", "public: tie-breaking, pseudo-data, global models"),
        "",
        "[schema]                                # the public description every owner encodes its table with",
        source,
        "",
        "[release]                               # how each owner's model is made safe to share",
        f"# {mechanism}: {record.summary}",
        _line("mechanism", _toml_string(mechanism), "`modelshare release --help` lists them all"),
    ]
    if requirement is not None:
        lines.append(_line("requirement", _toml_string(requirement), _requirement_comment(requirement)))
    lines.append(_line("disclosure", _toml_string(disclosure), _DISCLOSURES[disclosure]))
    lines += ["", "[training]                              # the owners' local learner"]
    if record.whole_release:
        lines.append(_line("max_depth", str(record.default_max_depth), f"the depth of every {mechanism} tree"))
    else:
        learner = resolve_learner(mechanism, None)
        lines.append(_line("learner", _toml_string(learner), "grows only splits whose leaves can meet the requirement"
                           if learner == "admissible" else "the owners' tree learner"))
    lines += [
        _line("min_samples_leaf", "1", "minimum rows in a leaf of an owner's tree"),
        "",
        "[mining]                                # what the miner learns from the pseudo-data",
        _line("global_models", f"[{models}]", "the models it learns and scores"),
        _line("pgen_scale", str(PGEN_SCALE), "pseudo rows per released tuple"),
        _line("off_path", _toml_string(DEFAULT_OFF_PATH[task]),
              "values a path leaves free: uniform"),
        _line("evaluation" if evaluation else "# evaluation", _toml_string(evaluation or "test.csv"),
              "held-out rows to score on (never to owners)"),
        "",
    ]
    return "\n".join(lines)


def _requirement_comment(requirement: str) -> str:
    """What the default requirement asks, in words."""
    if requirement.startswith("cl-diversity:"):
        return "per leaf: top class < c x (l-th and rarer)"
    if requirement.startswith("dp:"):
        return "epsilon-differential privacy over the release"
    return "what every released leaf must meet"


def cmd_study_init(args: argparse.Namespace) -> int:
    """Write the template to ``--out`` (refusing to overwrite without ``--force``) and say what to do next."""
    path: Path = args.out
    if path.exists() and not args.force:
        raise ValueError(f"{path} exists; pass --force to overwrite it, or -o another file")
    schema = None
    schema_file = None
    if args.schema is not None:
        schema = load_schema(args.schema)
        schema_file = os.path.relpath(args.schema.resolve(), path.resolve().parent)
    dataset = None if args.schema is not None else args.dataset
    text = study_template(dataset=dataset, schema_file=schema_file, schema=schema)
    atomic_write(path, text.encode("utf-8"), mode=0o644)
    try:
        spec = load_study_file(path).spec  # what study create would run; never leave an unusable template
    except ValueError:
        path.unlink()
        raise
    requirement = f" {spec.requirement}" if spec.HasField("requirement") else ""
    if args.json:
        print(json.dumps({"path": str(path), "mechanism": spec.mechanism, "requirement": requirement.strip() or None,
                          "disclosure": disclosure_from_pb(spec.disclosure, where="study"), "learner": spec.learner,
                          "global_models": list(spec.global_models)}, indent=2))
    else:
        print(f"wrote {path}: {spec.mechanism}{requirement}, global models {', '.join(spec.global_models)}; "
              f"edit it, then `modelshare study create {path} --config admin.toml`")
    return 0


def configure(init: argparse.ArgumentParser) -> None:
    """`study init [--dataset NAME | --schema FILE] [-o study.toml] [--force]`."""
    source = init.add_mutually_exclusive_group()
    source.add_argument("--dataset", default="nursery", choices=sorted(DATASETS),
                        help="a bundled dataset whose schema the study uses (default %(default)s)")
    source.add_argument("--schema", type=Path, default=None,
                        help="a schema file (`modelshare schema infer`); a regression schema gets simulate's "
                             "regression defaults")
    init.add_argument("-o", "--out", type=Path, default=Path("study.toml"),
                      help="where to write it (default %(default)s)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    add_json(init, "what was written")
    init.set_defaults(func=cmd_study_init)
