"""The admin's calls to the miner, shared by the commands that make them (`modelshare.cli.federation`,
`modelshare.cli.study_control`): one timeout per call (`CALL_TIMEOUT`, the admin client's), a refusal or an unreachable miner
turned into one ValueError sentence (`miner_error`, `rpc`), and a study's status as the terminal shows it
(`status_renderables`, `print_status`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from rich.table import Table
from rich.text import Text

from modelshare.admin import CALL_TIMEOUT, answer_label, study_headline
from modelshare.cli.common import out

__all__ = ["CALL_TIMEOUT", "miner_error", "print_status", "rpc", "status_renderables"]

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


def status_renderables(data: dict[str, Any]) -> list[Any]:
    """What `study status` prints: the headline, the settings line and the answers table, from one `status_dict`."""
    lines = [Text(study_headline(data)),
             Text(f"  {data['mechanism']} {data['requirement'] or ''} · quorum {data['quorum']} · deadline {data['deadline']}")]
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
