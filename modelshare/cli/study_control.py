"""`modelshare study wait | cancel` and `study status --follow`: control a study and follow it to its end.

A study ends in one of `FINAL_STATES`: ``done`` (mined; its results can be fetched), ``failed``
(its quorum cannot be reached, its deadline passed without it, or mining failed) or ``cancelled``
(the admin cancelled it; the miner takes no more answers and mines nothing).

Following a study uses the miner's ``WatchStudy`` call, which the miner holds until the study's
state or its number of answers changes (at most `HOLD_SECONDS` per call), so a change is seen at
once and an idle study costs one call per hold. ``--timeout`` is a deadline on the whole wait. A
miner that stops answering after the first call (a restart, a network blip) is asked again with
a bounded backoff (`RETRY_SECONDS`) until the deadline; the first call failing is an error at once.

Output: on a terminal, ``study wait`` shows a live line on stderr and ``--follow`` prints changes
as they come; elsewhere (a log, a pipe, CI) every change is one plain line with its UTC time and
no control characters (`modelshare.cli.common.log_line`).

Exit status of ``study wait``: 0 done, 1 failed or cancelled (the reason is printed), 3 when the
timeout passes first, 2 for bad input or a call the miner refused.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import grpc

from modelshare.admin import AdminConfig, admin_stub, status_dict
from modelshare.cli.common import CommandFailed, add_json, err, log_line, out, printable
from modelshare.cli.miner_calls import CALL_TIMEOUT, miner_error, print_status, resolved_id, rpc
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc

__all__ = [
    "FINAL_STATES",
    "StudyCancelled",
    "StudyFailed",
    "WaitTimeout",
    "cmd_study_cancel",
    "cmd_study_wait",
    "configure_study_cancel",
    "configure_study_wait",
    "follow",
    "summary",
]

FINAL_STATES = ("done", "failed", "cancelled")
HOLD_SECONDS = 20
"""How long one WatchStudy call may be held by the miner (its cap is 30 s)."""
CALL_GRACE_SECONDS = 10
"""A held call's deadline is its hold plus this."""
RETRY_SECONDS = (1.0, 10.0)
"""Backoff while the miner does not answer: starts at the first, doubles, never above the second."""
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class StudyFailed(CommandFailed):
    """The study ended ``failed``; the message is the miner's reason."""


class StudyCancelled(CommandFailed):
    """The study ended ``cancelled``; the message says who cancelled it and why."""


class WaitTimeout(CommandFailed):
    """The study was not final when the wait's ``--timeout`` passed (exit status 3)."""

    exit_code = 3


def answered(status: fpb.StudyStatus) -> int:
    """How many invited owners have answered (submitted or refused)."""
    return sum(o.state != "waiting" for o in status.owners)


def summary(status: fpb.StudyStatus) -> str:
    """One line: the study's state (with its reason), how many owners answered, and each owner's answer."""
    reason = f" ({status.reason})" if status.reason else ""
    answers = ", ".join(f"{o.owner_id} {o.state}" for o in status.owners)
    return (f"study {status.spec.study_id}: {status.state}{reason}; {answered(status)} of {len(status.owners)} "
            f"answered ({answers})")


def follow(stub: fgrpc.StudyAdminStub, study_id: str, miner: str, *, timeout: float | None,
           on_change: Callable[[fpb.StudyStatus], None],
           on_retry: Callable[[str], None] = lambda _: None) -> fpb.StudyStatus:
    """Follow ``study_id`` until it is final and return its final status.

    ``on_change`` gets the first status and then every status whose state or number of answers
    differs from the last one. ``on_retry`` gets a sentence whenever the miner did not answer and
    the call is repeated.

    Raises
    ------
    WaitTimeout
        ``timeout`` seconds passed first (its report holds the last status seen).
    ValueError
        The miner refused a call, or could not be reached at the first call.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    last: fpb.StudyStatus | None = None
    failures = 0
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise _timed_out(study_id, timeout, last)
        hold = HOLD_SECONDS if remaining is None else min(HOLD_SECONDS, math.ceil(remaining))
        request = fpb.WatchStudyRequest(study_id=study_id, wait_seconds=hold)
        if last is not None:
            request.seen_state, request.seen_answers = last.state, answered(last)
        try:
            status = stub.WatchStudy(request, timeout=hold + CALL_GRACE_SECONDS)
        except grpc.RpcError as exc:
            if last is None or exc.code() not in TRANSIENT:
                raise miner_error(exc, miner) from None
            delay = min(RETRY_SECONDS[1], RETRY_SECONDS[0] * 2.0 ** min(failures, 16))
            delay = delay if remaining is None else max(0.0, min(delay, remaining))
            failures += 1
            on_retry(f"the miner at {miner} did not answer ({exc.code().name}); asking again in {delay:.0f} s")
            time.sleep(delay)  # a bounded backoff toward a remote party, under the wait's deadline
            continue
        failures = 0
        if last is None or (status.state, answered(status)) != (last.state, answered(last)):
            on_change(status)
        last = status
        if status.state in FINAL_STATES:
            return status


def _timed_out(study_id: str, timeout: float | None, last: fpb.StudyStatus | None) -> WaitTimeout:
    where = "" if last is None else f"; it is {last.state}, {answered(last)} of {len(last.owners)} owners answered"
    return WaitTimeout(f"study {study_id} did not end within --timeout {timeout:g} s{where}",
                       report={} if last is None else status_dict(last))


def _final_outcome(status: fpb.StudyStatus) -> None:
    """Raise the failure a failed or cancelled study is for ``study wait``; nothing for a done one."""
    if status.state == "done":
        return
    kind = StudyCancelled if status.state == "cancelled" else StudyFailed
    raise kind(f"study {status.spec.study_id} {status.state}: {status.reason or 'no reason given'}",
               report=status_dict(status))


# ---------------------------------------------------------------------- wait
def cmd_study_wait(args: argparse.Namespace) -> int:
    config = AdminConfig.load(args.config)
    args.id = resolved_id(config, args.id)
    channel, stub = admin_stub(config)
    live = err.is_terminal
    with channel, (err.status(f"waiting for study {args.id}") if live else nullcontext()) as spinner:
        def changed(status: fpb.StudyStatus) -> None:
            if spinner is not None:
                spinner.update(printable(summary(status)))
            else:
                log_line(summary(status))

        status = follow(stub, args.id, config.miner, timeout=args.timeout, on_change=changed,
                        on_retry=lambda text: err.print(printable(text), highlight=False, markup=False,
                                                        soft_wrap=True) if live else log_line(text))
    _final_outcome(status)
    if args.json:
        print(json.dumps(status_dict(status), indent=2))
    else:
        out.print(printable(summary(status)), highlight=False, markup=False, soft_wrap=True)
    return 0


def follow_status(args: argparse.Namespace) -> int:
    """``study status ID --follow``: the status, then one line per change until the study is final (exit 0)."""
    config = AdminConfig.load(args.config)
    args.id = resolved_id(config, args.id)
    channel, stub = admin_stub(config)
    live = out.is_terminal and not args.json
    first = True

    def changed(status: fpb.StudyStatus) -> None:
        nonlocal first
        if live and first:
            print_status(status_dict(status))
        elif live:
            out.print(f"{time.strftime('%H:%M:%S')} {printable(summary(status))}", highlight=False,
                      markup=False, soft_wrap=True)
        else:
            log_line(summary(status), stdout=not args.json)
        first = False

    with channel:
        status = follow(stub, args.id, config.miner, timeout=None, on_change=changed,
                        on_retry=lambda text: log_line(text))
    if args.json:
        print(json.dumps(status_dict(status), indent=2))
    return 0


# -------------------------------------------------------------------- cancel
def cmd_study_cancel(args: argparse.Namespace) -> int:
    config = AdminConfig.load(args.config)
    args.id = resolved_id(config, args.id)
    channel, stub = admin_stub(config)
    request = fpb.CancelStudyRequest(study_id=args.id, reason=args.reason or "")
    with channel:
        reply = rpc(lambda: stub.CancelStudy(request, timeout=CALL_TIMEOUT), config.miner)
    data: dict[str, Any] = {**status_dict(reply.status), "already_cancelled": reply.already_cancelled}
    if args.json:
        print(json.dumps(data, indent=2))
    elif reply.already_cancelled:
        out.print(printable(f"study {args.id} was already cancelled ({reply.status.reason}); nothing changed"),
                  highlight=False, markup=False, soft_wrap=True)
    else:
        out.print(printable(f"study {args.id} cancelled ({reply.status.reason}); owners stop waiting for it and "
                            "the miner takes no more answers"), highlight=False, markup=False, soft_wrap=True)
    return 0


# -------------------------------------------------------------------- parsers
def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def configure_study_wait(wait: argparse.ArgumentParser) -> None:
    """`study wait ID [--timeout S] --config admin.toml`."""
    wait.add_argument("id", help="the study's id, a start of it that names one study, or 'latest'")
    wait.add_argument("--timeout", type=_positive_seconds, default=None, metavar="SECONDS",
                      help="give up after this many seconds with exit status 3 (default: wait until the study ends)")
    wait.add_argument("--config", type=Path, required=True, help="admin.toml from the admin's kit")
    add_json(wait, "the study's final state and every owner's answer (on a failed or cancelled study, or a timeout, "
                   "beside the error key)")
    wait.epilog = ("exit status: 0 done, 1 failed or cancelled (the reason is printed), 2 bad input or a refused call, "
                   "3 timeout")
    wait.set_defaults(func=cmd_study_wait)


def configure_study_cancel(cancel: argparse.ArgumentParser) -> None:
    """`study cancel ID [--reason TEXT] --config admin.toml`."""
    cancel.add_argument("id", help="the study's id, a start of it that names one study, or 'latest' (open or mining; "
                        "a cancelled one is left as it is)")
    cancel.add_argument("--reason", default=None, metavar="TEXT",
                        help="why, in at most 500 characters: kept in the study's reason and the miner's audit log")
    cancel.add_argument("--config", type=Path, required=True, help="admin.toml from the admin's kit")
    add_json(cancel, "the cancelled study's state (with already_cancelled: true when it was cancelled before)")
    cancel.set_defaults(func=cmd_study_cancel)
