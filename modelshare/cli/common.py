"""What every `modelshare` sub-command shares: consoles, failures, and one builder per option concept.

A concept (the global models, a depth, a seed, the test share, the owners, ``--json``) has one
spelling and one default on every command that takes it, because every command adds it with the
builder here. Lists are space-separated (``--global-models decision-tree naive-bayes``). An old
spelling that deployed files or the documentation still use stays as a hidden alias
(`deprecated_alias`) that prints one line on stderr naming the new spelling; the old
comma-separated lists (``--owners 1,2,5``) are read the same way.

This module imports only argparse and rich: every command's parser is built from it, including
the health probe ``modelshare owner status``, which must start fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

import tomllib
from rich.console import Console
from rich.table import Table

from modelshare.common.params import ParameterError, check_positive_int

__all__ = [
    "CommandFailed",
    "note_dropped",
    "target_range",
    "add_global_models",
    "add_json",
    "add_list",
    "add_max_depth",
    "add_max_depths",
    "add_model_settings",
    "model_setting",
    "add_owners",
    "add_seed",
    "add_test_fraction",
    "deprecated_alias",
    "err",
    "float_list",
    "fraction",
    "int_list",
    "leaf_size",
    "log_line",
    "note_deprecated",
    "out",
    "positive_int",
    "printable",
    "progress_step",
    "tree_params",
    "titled_table",
    "TABLE_WIDTH",
]

T = TypeVar("T")

class _Stdout(Console):
    """The commands' stdout: a reader that goes away (`| head -1`) is left to `modelshare.cli.main`, so every
    command ends alike on a closed pipe (rich's own handling exits 1)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


err = Console(stderr=True, emoji=False, soft_wrap=True)
out = _Stdout(emoji=False)

#: The width every table of the CLI is made to fit (a test renders them all at it).
TABLE_WIDTH = 100


def titled_table(title: str, *headers: str, **options: Any) -> Table:
    """A rich table at least as wide as its title, so the title line never wraps: its columns wrap instead.

    Rich wraps a title to the table's width, and a table of a few short columns is narrower than
    a title naming a source, a mechanism and its requirement. A title may break itself into lines
    with ``\n`` (each stays whole up to `TABLE_WIDTH`). Long cells should be given
    ``overflow="fold"`` (ids, paths, reasons) so that the table fits `TABLE_WIDTH` columns.
    """
    widest = max(len(line) for line in title.splitlines())
    return Table(*headers, title=title, min_width=min(widest, TABLE_WIDTH), **options)


class CommandFailed(Exception):
    """A command failed after starting its work (not bad input): `modelshare.cli.main` reports it.

    main prints the message (and, under ``--json``, one JSON error object on stdout, holding the
    ``report`` fields beside its ``error`` key), then each hint on stderr, and exits with
    ``exit_code``; bad input (ValueError, KeyError, OSError) exits 2.
    """

    exit_code = 1

    def __init__(self, message: str, *, hints: Sequence[str] = (), report: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.hints = tuple(hints)
        self.report = dict(report or {})


# ------------------------------------------------------------------ progress
def printable(text: str) -> str:
    """``text`` with every control character (escape sequences, carriage returns, newlines) written as an escape."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def log_line(text: str, *, stdout: bool = False) -> None:
    """One progress line, ``<UTC time> <text>``, plain: for output that is no terminal (a log, a pipe, CI).

    No styles and no control characters, whatever ``text`` quotes; on stderr unless ``stdout``.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"{stamp} {printable(text)}", file=sys.stdout if stdout else sys.stderr, flush=True)


def progress_step(text: str) -> None:
    """A step of a long command as a `log_line` on stderr when
    stderr is no terminal (a terminal shows live progress)."""
    if not err.is_terminal:
        log_line(text)


# ------------------------------------------------------------------ value types
def target_range(text: str) -> tuple[float, float]:
    """An argparse type for ``--target-range LOW,HIGH``: two numbers, LOW < HIGH."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 2 or not values[0] < values[1]:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH with LOW < HIGH (the target's public bounds), "
                                         f"got {text!r}")
    return values[0], values[1]


def positive_int(text: str) -> int:
    """An argparse type for an integer >= 1 (argparse itself reports text that is no integer)."""
    try:
        return check_positive_int("the value", int(text))
    except ParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def fraction(text: str) -> float:
    """An argparse type for a number strictly between 0 and 1 (a share of the rows)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
    return value


LEARNER_DEFAULT = "default"
"""The value of a learner flag left unset: the learner's own default for the requirement (`local_learner`)."""


def pruning_confidence(text: str) -> float | None | str:
    """C4.5's pruning confidence for the admissible learner: a number strictly between 0 and 1, ``none`` (no
    pruning) or ``default`` (`LEARNER_DEFAULT`: the learner's own for the requirement)."""
    word = text.strip().lower()
    if word in ("none", LEARNER_DEFAULT):
        return None if word == "none" else LEARNER_DEFAULT
    return fraction(text)


def leaf_size(text: str) -> int | float:
    """An integer >= 1 (rows) or a float in (0, 1) (fraction of the training rows)."""
    try:
        value: int | float = int(text)
    except ValueError:
        value = float(text)
    if (isinstance(value, int) and value >= 1) or (isinstance(value, float) and 0 < value < 1):
        return value
    raise argparse.ArgumentTypeError(f"must be an integer >= 1 or a fraction in (0, 1), got {text}")


def tree_params(max_depth: int | None, min_samples_leaf: int | float | None) -> dict[str, Any]:
    """Tree learner keyword arguments for the limits a user gave (none given: the learner's defaults)."""
    params: dict[str, Any] = {}
    if max_depth is not None:
        params["max_depth"] = max_depth
    if min_samples_leaf is not None:
        params["min_samples_leaf"] = min_samples_leaf
    return params


# ------------------------------------------------------------------ deprecation
def note_deprecated(old: str, new: str) -> None:
    """Say on stderr, in one line, that ``old`` is an old spelling of ``new``."""
    print(f"modelshare: note: '{old}' is deprecated; use '{new}'", file=sys.stderr)


class _Alias(argparse.Action):
    """A hidden old spelling of an option: notes the deprecation, then acts as the new option."""

    def __init__(self, option_strings: list[str], dest: str, *, target: argparse.Action) -> None:
        super().__init__(option_strings, target.dest, nargs=target.nargs, choices=target.choices,
                         default=argparse.SUPPRESS, metavar=target.metavar, help=argparse.SUPPRESS)
        self.type = target.type  # after __init__: its parameter omits the registry names (str) the attribute may hold
        self.target = target

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        new = self.target.option_strings[-1]
        note_deprecated(str(option_string), new)
        self.target(parser, namespace, values, new)


def deprecated_alias(parser: argparse.ArgumentParser, old: str, target: argparse.Action) -> None:
    """Accept ``old`` as a hidden spelling of the option ``target`` (what ``add_argument`` returned)."""
    parser.add_argument(old, action=_Alias, target=target)


# ------------------------------------------------------------------ lists
def _items(parse: Callable[[str], T], what: str) -> Callable[[str], tuple[T, ...]]:
    """An argparse type for one token of a list option: one value, or the old comma-separated values."""

    def convert(text: str) -> tuple[T, ...]:
        try:
            return tuple(parse(item) for item in text.split(","))
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r} ({exc})") from None

    return convert


class _List(argparse.Action):
    """Store ``--flag A B C`` as the tuple (A, B, C); ``--flag A,B,C`` (the old spelling) too, with a note.

    ``empty`` is the word that, alone, means no values at all (``--global-models none``).
    """

    def __init__(self, option_strings: list[str], dest: str, *, empty: str | None = None, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.empty = empty

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        flat = tuple(value for token in values for value in token)
        typed = " ".join(str(value) for value in flat)
        if any(len(token) > 1 for token in values):
            note_deprecated(f"{option_string} A,B", f"{option_string} {typed}")
        if self.empty is not None and self.empty in flat:
            if len(flat) > 1:
                parser.error(f"argument {option_string}: '{self.empty}' stands alone, got {typed}")
            flat = ()
        setattr(namespace, self.dest, flat)


def add_list(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str, parse: Callable[[str], Any], *,
             default: Sequence[Any] | None, help: str, metavar: str, what: str, dest: str | None = None,
             empty: str | None = None) -> argparse.Action:
    """Add a list option ``flag`` of values that ``parse`` reads (``what`` names one, for errors)."""
    # dest None: the flag's own (argparse derives it)
    return parser.add_argument(flag, nargs="+", type=_items(parse, what), action=_List, empty=empty,
                               default=None if default is None else tuple(default), metavar=metavar,
                               help=help, dest=dest)


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(f"must be >= {minimum}")
        return value

    return parse


def int_list(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str, *, minimum: int,
             default: Sequence[int], help: str, metavar: str = "N") -> argparse.Action:
    """A list option of integers, each at least ``minimum`` (``--ks 0 5 10``)."""
    return add_list(parser, flag, _int_at_least(minimum), default=default, help=help, metavar=metavar,
                    what=f"integers >= {minimum}")


def float_list(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str, *, default: Sequence[float],
               help: str, metavar: str = "X") -> argparse.Action:
    """A list option of numbers (``--epsilons 0.1 1 10``)."""
    return add_list(parser, flag, float, default=default, help=help, metavar=metavar, what="numbers")


# ------------------------------------------------------------------ one builder per concept
def add_json(parser: argparse.ArgumentParser | argparse._ArgumentGroup, report: str = "the report") -> None:
    """``--json``: print ``report`` as one JSON document on stdout; a failure prints one JSON error object."""
    parser.add_argument("--json", action="store_true",
                        help=f"print {report} as one JSON document on stdout instead of text; a failure prints "
                             '{"error": {"type": ..., "message": ...}} on stdout and exits with the same status')


def add_seed(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: int | None,
             help: str) -> argparse.Action:
    """``--seed``: the one spelling of every random seed (None: fresh OS entropy, where privacy needs it)."""
    return parser.add_argument("--seed", type=int, default=default, help=help)


def add_max_depth(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, help: str, default: int | None = None,
                  dest: str = "max_depth") -> argparse.Action:
    """``--max-depth D``: one depth limit (of a tree, or of every random tree of a release)."""
    return parser.add_argument("--max-depth", dest=dest, type=positive_int, default=default, metavar="D", help=help)


def add_max_depths(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: Sequence[int],
                   help: str) -> argparse.Action:
    """``--max-depths D [D ...]``: the depths an experiment sweeps."""
    return int_list(parser, "--max-depths", minimum=1, default=default, help=help, metavar="D")


def add_test_fraction(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, help: str,
                      default: float = 0.2) -> argparse.Action:
    """``--test-fraction F``: the share of the rows held out for testing (default 0.2 everywhere)."""
    return parser.add_argument("--test-fraction", type=fraction, default=default, metavar="F",
                               help=f"{help} (default {default:g})")


def add_owners(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: int | Sequence[int], help: str,
               several: bool = False) -> argparse.Action:
    """``--owners N``: how many data owners; ``several`` lets a sweeping experiment take ``N [N ...]``."""
    if several:
        assert not isinstance(default, int)
        return int_list(parser, "--owners", minimum=1, default=default, help=help)
    return parser.add_argument("--owners", type=positive_int, default=default, metavar="N", help=help)


def _pgen_mode(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str, modes: Sequence[str],
               default: str | None, default_text: str | None, help: str) -> argparse.Action:
    """A PGEN mode flag whose choices are the study's own list and whose help ends with the default and the choices."""
    return parser.add_argument(flag, choices=modes, default=default, metavar="MODE",
                               help=f"{help} (default {default_text or default}; from {', '.join(modes)})")


def add_off_path(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: str | None,
                 default_text: str | None = None) -> argparse.Action:
    """``--off-path MODE``: how PGEN fills the attributes a path leaves free (study.toml's ``[mining] off_path``)."""
    from modelshare.common.study import OFF_PATH_MODES  # the study's own list, imported when the parser is built

    return _pgen_mode(parser, "--off-path", OFF_PATH_MODES, default, default_text,
                      "PGEN's values for attributes a path leaves free: uniform over the public domain (the paper's), "
                      "or drawn from the law the released paths that constrain the attribute disclose, marginal "
                      "(pooled) or class (given the row's class)")


def add_on_path(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: str | None,
                default_text: str | None = None) -> argparse.Action:
    """``--on-path MODE``: how PGEN draws a category inside a path's allowed set (study.toml's ``[mining] on_path``)."""
    from modelshare.common.study import ON_PATH_MODES  # the study's own list, imported when the parser is built

    return _pgen_mode(parser, "--on-path", ON_PATH_MODES, default, default_text,
                      "PGEN's values inside a path's allowed category set: uniform in the set (the paper's), or "
                      "class, drawn from the class law all released paths determine (EM; free values follow "
                      "--off-path); classification only")


def add_global_models(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, choices: Collection[str],
                      default: Sequence[str] | None, help: str, allow_none: bool = False,
                      dest: str = "global_models", default_text: str | None = None) -> argparse.Action:
    """``--global-models MODEL [MODEL ...]``: the models the miner learns (``none`` alone, where allowed: none).

    The help states the default (``default_text`` where the command fills it in later) and the choices.
    """
    names = sorted(choices)
    stated = default_text if default_text is not None else " ".join(default or ())

    def parse(text: str) -> str:
        if text not in names and not (allow_none and text == "none"):
            raise ValueError(f"unknown global model; choose from {', '.join(names)}"
                             + (" or none" if allow_none else ""))
        return text

    return add_list(parser, "--global-models", parse, default=default, dest=dest, metavar="MODEL",
                    what="global model names", empty="none" if allow_none else None,
                    help=f"{help} (default {stated}; from {', '.join(names)}"
                         + (", or 'none' for no global model)" if allow_none else ")"))


def note_dropped(source: str, dropped: int) -> None:
    """One stderr line saying how many rows of ``source`` were dropped for a missing value (nothing when none)."""
    if dropped:
        err.print(f"[yellow]note:[/] {source}: dropped {dropped} row(s) with a missing value "
                  "(--missing category keeps a missing categorical value as its own category)", highlight=False)


def model_setting(text: str) -> tuple[str, str | dict[str, Any]]:
    """``--model-setting``'s value: ``MODEL=auto``, ``MODEL=fixed`` or ``MODEL:KEY=VALUE[,KEY=VALUE...]``.

    Values read as TOML would (``50``, ``0.005``, ``true``, ``entropy``); the names and values are
    checked with the study (`modelshare.common.study.settings`).
    """
    if ":" in text:
        name, _, pairs = text.partition(":")
        params: dict[str, Any] = {}
        for pair in pairs.split(","):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"expected MODEL:KEY=VALUE[,KEY=VALUE...], got {text!r}")
            params[key.strip()] = _toml_value(value.strip())
        return name.strip(), params
    name, sep, mode = text.partition("=")
    if not sep:
        raise ValueError(f"expected MODEL=auto, MODEL=fixed or MODEL:KEY=VALUE[,...], got {text!r}")
    return name.strip(), mode.strip()


def _toml_value(text: str) -> Any:
    """A parameter value as TOML reads it (a bare word is a string)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def add_model_settings(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> argparse.Action:
    """``--model-setting SETTING`` (repeatable): how the miner sets a global model's hyperparameters."""
    return parser.add_argument(
        "--model-setting", type=model_setting, action="append", default=[], dest="model_settings", metavar="SETTING",
        help="how the miner sets a global model's hyperparameters (study.toml's [global_models]; "
             "repeatable): MODEL=auto (cross-validated on the pseudo-data; the decision tree's default), "
             "MODEL=fixed (the built-in rule) or MODEL:KEY=VALUE[,KEY=VALUE...], e.g. "
             "decision-tree:min_samples_leaf=50")
