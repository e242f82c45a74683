"""The `modelshare` command line: one entry point, noun-verb sub-commands, each imported only when it runs.

`COMMANDS` is the whole command tree as data: a group holds commands, a command names the
function (``"module:function"``) that adds its options and its handler to its parser. `main`
reads which command the arguments name and builds only that command's parser, so ``modelshare
owner status`` (a service manager's health probe) never imports the experiments, the learners or
pandas' users beyond its own needs; ``modelshare --help`` imports no command at all.

Errors: bad input (ValueError, KeyError, OSError, and argparse's usage errors) exits 2, a command
that fails after starting its work (`modelshare.cli.common.CommandFailed`) exits 1; both print
one line on stderr and, under ``--json``, one ``{"error": {"type": ..., "message": ...}}`` object
on stdout (a command that failed after its work, like ``study wait`` on a failed study, adds its
report's fields beside ``error``). ``study wait`` exits 3 when its ``--timeout`` passes.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from rich.markup import escape

from modelshare.cli.common import CommandFailed, err, note_deprecated

__all__ = ["COMMANDS", "Command", "Group", "UsageError", "build_parser", "main", "package_version", "selected"]


@dataclass(frozen=True)
class Command:
    """A sub-command: its one-line help and the ``"module:function"`` that configures its parser.

    ``replaced_by`` marks an old spelling kept for scripts: hidden from ``--help``, it notes the
    new spelling on stderr whenever it runs.
    """

    help: str
    configure: str
    replaced_by: str | None = None


@dataclass(frozen=True)
class Group:
    """A noun: its one-line help and its verbs (commands or further groups)."""

    help: str
    commands: Mapping[str, Command | Group] = field(default_factory=dict)


def _experiment(name: str, help: str) -> Command:
    return Command(help, f"experiments.{name.replace('-', '_')}:configure")


COMMANDS = Group("modelshare", {
    "simulate": Command("run a miner and 1-10 owner processes over mutual TLS on one machine; one study",
                        "modelshare.simulate:configure"),
    "datasets": Command("list, show or export the bundled datasets", "modelshare.cli.datasets:configure"),
    "release": Command("train a local tree (or k-AnonToRdt or eps-DP random trees), apply a release mechanism, "
                       "write the model file", "modelshare.cli.release:configure_release"),
    "audit": Command("re-derive a model file's privacy claims from its released counts",
                     "modelshare.cli.release:configure_audit"),
    "schema": Group("draft a schema from a table for review, or check a table against a schema", {
        "infer": Command("draft a commented schema (TOML) from a table: ranges rounded outward, what came from the "
                         "data said in its header", "modelshare.cli.schema:configure_infer"),
        "check": Command("report every row of a table that does not fit a schema",
                         "modelshare.cli.schema:configure_check"),
    }),
    "pgen": Command("generate pseudo-data from a released model file (PGEN): one tree, an ensemble or a "
                    "regression forest", "modelshare.cli.pgen:configure"),
    "privacy": Group("privacy accounting and audits", {
        "dps": Command("(beta, eps, delta)-DPS of k-AnonToRdt: Bernoulli(beta) sampling, then counts < k zeroed",
                       "modelshare.cli.dps:configure"),
        "audit-dp": Command("empirically audit a mechanism's DP claim: run it on D and D' = D + one row, bound eps",
                            "modelshare.cli.dp_audit:configure"),
    }),
    "audit-dp": Command("old spelling of 'privacy audit-dp'", "modelshare.cli.dp_audit:configure",
                        replaced_by="modelshare privacy audit-dp"),
    "experiment": Group("reproduce a paper's experiment on any table", {
        "sources": _experiment("sources", "in-process cross-validation of 1-10 sources: BASIS vs PGEN vs BASEGEN "
                                          "(Sharkey et al. Figs. 5-6)"),
        "privacy": _experiment("privacy", "PPGEN (APT + PGEN) vs LD ((c,l)-diversified data) over a (c,l) grid "
                                          "(Sharkey et al. Fig. 7)"),
        "dp": _experiment("dp", "accuracy against epsilon of every eps-DP release mechanism, ensemble and PGEN "
                                "global models"),
        "dp-regression": _experiment("dp-regression", "RMSE and MAE against epsilon of eps-DP DiffPETs regression "
                                                      "forests: the forest itself and a regression tree learned "
                                                      "from its PGEN rows"),
        "pruning": _experiment("pruning", "uniqueness/homogeneity attacks by depth; Method 1 vs Method 2 pruning "
                                          "(Wakabayashi et al. Tables 5-7)"),
        "rdt": _experiment("rdt", "k-AnonToRdt accuracy by depth, k, trees and beta (Waseda et al. Tables 6-7)"),
        "suite": _experiment("suite", "the project's defaults on eight public tables no constant was tuned on: best "
                                      "model vs BASIS vs no privacy vs the majority class (issue 33)"),
    }),
    "provision": Command("create the project CA and a kit (certificates, keys, roster, config) per party; or add / "
                         "revoke a party later", "modelshare.cli.provision:configure"),
    "local": Group("a persistent federation on this machine to try studies against (as FLARE's POC mode)", {
        "up": Command("make (once) and start a local federation: a bundled table dealt to N "
                      "owners, kits, the miner and "
                      "the owners in the background; prints how to create a study",
                      "modelshare.cli.local:configure_up"),
        "status": Command("each process of the local federation: running or stopped, pid, port, health",
                          "modelshare.cli.local:configure_status"),
        "down": Command("stop the local federation's processes (--clean: and remove its folder)",
                        "modelshare.cli.local:configure_down"),
    }),
    "miner": Group("run or inspect the miner", {
        "serve": Command("serve gRPC over mutual TLS, store submissions, run studies",
                         "modelshare.cli.federation:configure_miner_serve"),
        "verify-log": Command("check the audit log's hash chain and head",
                              "modelshare.cli.federation:configure_miner_verify_log"),
        "status": Command("ask a running miner for its health (exit 0 when serving, 1 when unhealthy)",
                          "modelshare.cli.federation:configure_miner_status"),
        "sites": Command("every provisioned owner with its last poll, version, health and state (admin)",
                         "modelshare.cli.federation:configure_miner_sites"),
        "dashboard": Command("a one-time sign-in URL of the miner's read-only web dashboard (admin)",
                             "modelshare.cli.federation:configure_miner_dashboard"),
    }),
    "study": Group("create and follow studies (admin)", {
        "init": Command("write a commented study.toml with simulate's defaults to start from",
                        "modelshare.cli.study_init:configure"),
        "create": Command("create a study from study.toml", "modelshare.cli.federation:configure_study_create"),
        "status": Command("a study's state and every owner's answer (--follow: every change until it ends)",
                          "modelshare.cli.federation:configure_study_status"),
        "results": Command("fetch a finished study's results", "modelshare.cli.federation:configure_study_results"),
        "list": Command("every study on the miner", "modelshare.cli.federation:configure_study_list"),
        "wait": Command("block until a study ends: exit 0 done, 1 failed or cancelled (with the reason), "
                        "3 on --timeout", "modelshare.cli.study_control:configure_study_wait"),
        "cancel": Command("cancel an open or mining study: owners stop waiting, later answers are refused, the "
                          "audit log says who", "modelshare.cli.study_control:configure_study_cancel"),
    }),
    "owner": Group("the data owner: run the daemon, preview the policy on a study, report health and budget", {
        "serve": Command("dial out to the miner and answer studies until SIGTERM/SIGINT",
                         "modelshare.cli.owner:configure_serve"),
        "check": Command("would this site answer STUDY.toml? (no training, no miner)",
                         "modelshare.cli.owner:configure_check"),
        "status": Command("is this site's daemon healthy? (exit 0 when it is; for service managers; reads the "
                          "daemon's status file, contacts nobody)", "modelshare.cli.owner_status:configure"),
        "budget": Command("what this site's releases have spent of its privacy budget (epsilon, delta) and what "
                          "its lifetime cap leaves", "modelshare.cli.owner:configure_budget"),
    }),
})


# -------------------------------------------------------------------- parser
class UsageError(SystemExit):
    """argparse refused the command line (exit status 2); ``message`` is what it said."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise `UsageError`, so `main` can also report them as JSON."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise UsageError(message)


def package_version() -> str:
    """The installed package's version, else (a source checkout) the version pyproject.toml states."""
    from importlib import metadata

    try:
        return metadata.version("modelshare")
    except metadata.PackageNotFoundError:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - exercised only on Python 3.10
            import tomli as tomllib
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])


class _Version(argparse.Action):
    """``--version``: print ``modelshare X.Y.Z`` and exit (the version is looked up only then)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        print(f"modelshare {package_version()}")
        parser.exit()


def selected(argv: Sequence[str]) -> tuple[str, ...]:
    """The command path ``argv`` names, e.g. ("owner", "status"); it stops at the first unknown word.

    Groups take no options of their own but -h, so the first word that is not an option names the
    next command down.
    """
    path: list[str] = []
    node: Command | Group = COMMANDS
    for word in argv:
        if word.startswith("-"):
            continue
        if not isinstance(node, Group) or word not in node.commands:
            break
        path.append(word)
        node = node.commands[word]
        if isinstance(node, Command):
            break
    return tuple(path)


def _experiments_checkout() -> None:
    """Make the source checkout's ``experiments/`` importable, or say why ``modelshare experiment`` cannot run.

    The paper reproductions are not part of the installed package: they live in ``experiments/`` beside
    ``bench/`` in a source checkout, whose root is the folder above this package's ``modelshare/``.
    """
    if importlib.util.find_spec("experiments") is not None:
        return
    root = Path(__file__).resolve().parents[2]
    if not (root / "experiments" / "__init__.py").is_file():
        raise ValueError("`modelshare experiment` runs the paper reproductions, which are not "
                         "installed with the package: "
                         "they are in experiments/ of a source checkout; run it from a clone of the repository "
                         "installed with `pip install -e .`")
    sys.path.insert(0, str(root))


def _configure(parser: argparse.ArgumentParser, command: Command) -> None:
    module, _, function = command.configure.partition(":")
    if module.partition(".")[0] == "experiments":
        _experiments_checkout()
    configure: Callable[[argparse.ArgumentParser], None] = getattr(importlib.import_module(module), function)
    configure(parser)
    if command.replaced_by is not None:
        parser.set_defaults(replaced_by=command.replaced_by)


def _add_commands(parser: argparse.ArgumentParser, group: Group, path: tuple[str, ...] | None, dest: str) -> None:
    """Add ``group``'s commands to ``parser``; configure those on ``path`` (None: every one)."""
    sub = parser.add_subparsers(dest=dest, required=True, metavar="COMMAND")
    for name, node in group.commands.items():
        hidden = isinstance(node, Command) and node.replaced_by is not None
        # a hidden command is added without help=: argparse lists a command in the help when the keyword is given
        child = (sub.add_parser(name, description=node.help) if hidden
                 else sub.add_parser(name, description=node.help, help=node.help))
        if path is not None and path[:1] != (name,):
            continue
        rest = None if path is None else path[1:]
        if isinstance(node, Group):
            _add_commands(child, node, rest, f"{dest}_{name}".replace("-", "_"))
        else:
            _configure(child, node)


def build_parser(path: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `modelshare` parser; only the commands on ``path`` are configured (None: all, importing every module)."""
    parser = _Parser(prog="modelshare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action=_Version, help="print the installed version and exit")
    _add_commands(parser, COMMANDS, None if path is None else tuple(path), "command")
    return parser


# ---------------------------------------------------------------------- main
def _json_error(exc: BaseException, message: str) -> None:
    """The one JSON object a failing command prints on stdout under --json (with a `CommandFailed`'s report fields)."""
    report = exc.report if isinstance(exc, CommandFailed) else {}
    print(json.dumps({**report, "error": {"type": type(exc).__name__, "message": message}}))


def _report(exc: BaseException, message: str, as_json: bool) -> None:
    """One line on stderr; under --json also the error object on stdout."""
    err.print(f"[red]error:[/] {escape(message)}", highlight=False)
    if as_json:
        _json_error(exc, message)


#: The shell's status of a process that a closed pipe ends (128 + SIGPIPE), as `modelshare ... | head -1` expects.
CLOSED_PIPE_STATUS = 141


def _stdout_closed() -> int:
    """The reader of stdout went away (`| head -1`): write nothing more, no traceback, and exit as SIGPIPE would."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush then has somewhere to go
    return CLOSED_PIPE_STATUS


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    path = selected(argv)
    try:
        args = build_parser(path).parse_args(argv)
    except UsageError as exc:
        if "--json" in argv:
            _json_error(exc, exc.message)
        raise
    except ValueError as exc:  # a command that cannot run here (`modelshare experiment` outside a source checkout)
        _report(exc, str(exc), "--json" in argv)
        return 2
    as_json = bool(getattr(args, "json", False))
    if getattr(args, "replaced_by", None):
        note_deprecated(f"modelshare {' '.join(path)}", args.replaced_by)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here rather than in the interpreter's exit
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except CommandFailed as exc:
        _report(exc, str(exc), as_json)
        for hint in exc.hints:
            err.print(f"hint: {escape(hint)}", highlight=False)
        return exc.exit_code
    except (ValueError, KeyError, OSError) as exc:
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        _report(exc, message, as_json)
        return 2

