"""The admin's calls to the miner, shared by the commands that make them (`modelshare.cli.federation`,
`modelshare.cli.study_control`): one timeout per call (`CALL_TIMEOUT`, the admin client's), a refusal or an unreachable
miner turned into one ValueError sentence (`miner_error`, `rpc`), and a study's status as the terminal shows it
(`status_renderables`, `print_status`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from rich.table import Table
from rich.text import Text

from modelshare.admin import CALL_TIMEOUT, AdminConfig, admin_stub, answer_label, study_headline
from modelshare.cli.common import out
from modelshare.common.federation.pb import federation_pb2 as fpb

__all__ = ["CALL_TIMEOUT", "LATEST", "miner_error", "print_status", "resolve_study", "resolved_id", "rpc",
           "status_renderables"]

LATEST = "latest"
"""The study id that names the study created last."""


def miner_error(exc: grpc.RpcError, miner: str) -> ValueError:
    """A failed admin call as a ValueError with the miner's status and message.

    A miner that cannot be reached (UNAVAILABLE) is said as such, with the address dialled and the
    likely causes, rather than as a status the miner never sent.
    """
    details = exc.details() or ""
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        why = "connection refused" if "refused" in details.lower() else details
        return ValueError(f"cannot reach the miner at {miner} ({why}): is `modelshare miner serve` running there, "
                          "and was this kit provisioned by the same project CA?")
    return ValueError(f"the miner answered {exc.code().name}: {details}")


def rpc(call: Callable[[], Any], miner: str) -> Any:
    """Run an admin call; a refusal by the miner becomes a ValueError (`miner_error`)."""
    try:
        return call()
    except grpc.RpcError as exc:
        raise miner_error(exc, miner) from None


def resolve_study(stub: Any, given: str, miner: str) -> str:
    """The full id of study ``given``: itself when the miner has it, ``latest`` the one created last, else the one
    study whose id starts with ``given`` (ids are long: a prefix that names one is enough).

    Raises ValueError when ``latest`` finds no study, or a prefix names several (the matches are listed); an id no
    study has is passed on, for the miner to say it has no such study.
    """
    studies = rpc(lambda: stub.ListStudies(fpb.ListStudiesRequest(), timeout=CALL_TIMEOUT), miner).studies
    ids = [s.spec.study_id for s in studies]
    if given in ids:
        return given
    if given == LATEST:
        if not studies:
            raise ValueError("'latest' names the study created last, and the miner has none")
        newest = max(studies, key=lambda s: (s.created_at.seconds, s.created_at.nanos, s.spec.study_id))
        return str(newest.spec.study_id)
    matches = sorted(i for i in ids if i.startswith(given))
    if len(matches) > 1:
        raise ValueError(f"study id {given!r} is the start of {len(matches)} studies' ids ({', '.join(matches)}); "
                         "give more of it")
    return matches[0] if matches else given


def resolved_id(config: AdminConfig, given: str) -> str:
    """`resolve_study` on a channel of its own, for the commands that take a study id."""
    channel, stub = admin_stub(config)
    with channel:
        return resolve_study(stub, given, config.miner)


def status_renderables(data: dict[str, Any]) -> list[Any]:
    """What `study status` prints: the headline, the settings line and the answers table, from one `status_dict`."""
    lines = [Text(study_headline(data)),
             Text(f"  {data['mechanism']} {data['requirement'] or ''} · quorum {data['quorum']} · "
                  f"deadline {data['deadline']}")]
    table = Table("owner", "answer", "reason", "at")
    table.columns[0].no_wrap = table.columns[1].no_wrap = True
    table.columns[2].overflow = "fold"
    for a in data["answers"]:
        table.add_row(a["owner"], answer_label(a), a["reason"], a["at"] or "")
    return [*lines, table]


def print_status(data: dict[str, Any]) -> None:
    """Print `status_renderables` (`study status`, `study wait`, `--follow`'s final state)."""
    for renderable in status_renderables(data):
        out.print(renderable)
