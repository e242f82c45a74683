"""What an owner's refusal says: a fixed reason code and that code's data-independent sentence.

A refusal leaves the site, and the miner records and shows it. What made an owner refuse is often
about its private table (the bad cell of row 12, a tree no pruning could make k-anonymous, leaves
whose counts were all suppressed) or about its history (the budget its earlier releases spent), so
that detail stays in the owner's own log and in ``modelshare owner check``. The wire carries only
one of `CODES` and the code's sentence from `SENTENCES`; a ``policy`` refusal also names the
``[policy]`` keys that refused, which are the site's own public policy and never a value computed
from rows. `Refusal` is the owner's side, `describe` the miner's and admin's.

``data-unavailable`` says the site's data file was missing or unreadable (a dropped mount, a file
never put in place) for as long as the owner could wait, which is about the site's files, not
their rows; ``bad-local-data`` says a table that was read does not fit the schema.

The sentence is data-independent; *which* code is sent is not. ``bad-local-data``,
``unsatisfiable``, ``empty-release`` and ``too-large`` are decided by the table (an ``empty-release``
or ``too-large`` refusal is therefore charged to the budget ledger like a release: it tells the
miner something about the release that was computed), ``budget`` by the site's history, and a
``policy`` refusal naming ``mix_dp_with_non_dp`` says that a release of the other kind exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.wire import new_nonce, now_timestamp

__all__ = ["CODES", "SENTENCES", "Code", "Refusal", "describe", "refusal_message"]

Code = Literal["policy", "bad-study", "budget", "bad-local-data", "data-unavailable", "unsatisfiable", "empty-release",
               "internal", "too-large", "failed-audit"]
CODES: tuple[Code, ...] = get_args(Code)

SENTENCES: dict[Code, str] = {
    "policy": "this site's policy does not allow this study",
    "bad-study": "the study's specification does not pass this owner's checks",
    "budget": "answering would exceed this site's lifetime privacy budget",
    "bad-local-data": "this site's table does not fit the study's schema",
    "data-unavailable": "this site's data file is missing or could not be read until the study's deadline neared",
    "unsatisfiable": "no release of this site's table meets the study's requirement; nothing is released",
    "empty-release": "the release would carry no rows (every tree's released total is zero); nothing is released",
    "internal": "this owner could not compute a release for the study",
    "too-large": "the encoded release exceeds the study's message size limit; nothing is released",
    "failed-audit": "this owner's own audit of its release failed, so it was not signed; nothing is released",
}
_DETAILS = "the details stay in the site's own log"

_TO_PB: dict[Code, int] = {
    "policy": fpb.REFUSAL_CODE_POLICY, "bad-study": fpb.REFUSAL_CODE_BAD_STUDY, "budget": fpb.REFUSAL_CODE_BUDGET,
    "bad-local-data": fpb.REFUSAL_CODE_BAD_LOCAL_DATA, "data-unavailable": fpb.REFUSAL_CODE_DATA_UNAVAILABLE,
    "unsatisfiable": fpb.REFUSAL_CODE_UNSATISFIABLE,
    "empty-release": fpb.REFUSAL_CODE_EMPTY_RELEASE, "internal": fpb.REFUSAL_CODE_INTERNAL,
    "too-large": fpb.REFUSAL_CODE_TOO_LARGE, "failed-audit": fpb.REFUSAL_CODE_FAILED_AUDIT,
}
_FROM_PB: dict[int, Code] = {value: code for code, value in _TO_PB.items()}


@dataclass(frozen=True)
class Refusal:
    """An owner's refusal as it leaves the site: ``code``, for ``policy`` the refusing ``[policy]`` keys, and for
    ``too-large`` the study's public size limit (never the release's own size, which the table decides)."""

    code: Code
    policy_keys: tuple[str, ...] = ()
    limit_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"refusal code {self.code!r} is not one of {list(CODES)}")
        if self.policy_keys and self.code != "policy":
            raise ValueError(f"only a policy refusal names policy keys, not a {self.code!r} one")
        if (self.limit_bytes is not None) != (self.code == "too-large"):
            raise ValueError("a too-large refusal, and only it, names the study's size limit")

    @property
    def sentence(self) -> str:
        """The data-independent sentence sent with the code (a policy refusal adds its keys, sorted)."""
        if self.policy_keys:
            return f"{SENTENCES['policy']} (policy keys: {', '.join(sorted(set(self.policy_keys)))})"
        if self.limit_bytes is not None:
            return f"{SENTENCES['too-large']} (the limit is {self.limit_bytes} bytes); {_DETAILS}"
        return f"{SENTENCES[self.code]}; {_DETAILS}"

    def __str__(self) -> str:
        return f"{self.code}: {self.sentence}"


def refusal_message(refusal: Refusal, *, study_id: str, owner_id: str) -> fpb.OwnerRefusal:
    """The `OwnerRefusal` payload of ``refusal``: ids, code, sentence, a fresh nonce and the current time."""
    # the ignore below: _TO_PB holds the enum's values
    message = fpb.OwnerRefusal(study_id=study_id, owner_id=owner_id, code=_TO_PB[refusal.code],  # type: ignore[arg-type]
                               reason=refusal.sentence, nonce=new_nonce())
    message.timestamp.CopyFrom(now_timestamp())
    return message


def describe(message: fpb.OwnerRefusal) -> str:
    """How the miner records and shows a refusal: ``code: reason``.

    An owner from before reason codes sends none (its reason stands alone); a code this version
    does not know is shown by its number.
    """
    reason = message.reason or "no reason given"
    if message.code == fpb.REFUSAL_CODE_UNSPECIFIED:
        return reason
    return f"{_FROM_PB.get(message.code, f'code {message.code}')}: {reason}"
