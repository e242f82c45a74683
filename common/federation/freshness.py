"""Whether a signed message is fresh, and, when it is not, whether it is old or its sender's clock is wrong.

Every `ModelMessage` and `OwnerRefusal` carries the time its owner signed it; the miner accepts it
only within ``timestamp_window_seconds`` of its own clock (a replayed message from last week is
refused even if its nonce was forgotten). Two different faults fail that check and need opposite
cures:

``stale``
    The owner's clock is right but the message was signed long ago: an answer stored in the
    owner's outbox while the miner was down longer than the window. The cure is the owner's:
    sign the same release again with a fresh timestamp and nonce (`restamp`) and resend it. The
    release is unchanged, so nothing is retrained and no budget is charged twice.
``clock-skew``
    The owner's clock is off by more than the window, so every message it signs is refused. Only
    setting the clock right cures it; the miner says by how much it is off.

The miner tells them apart by the owner's clock at the moment of sending, which the owner puts
in the call's metadata (`SENT_AT`); the verdict travels back in the rejection's trailing metadata
(`REJECTION`, and `CLOCK_SKEW` in seconds, the owner's clock minus the miner's), so the owner
acts on a field, not on the wording of a message. An owner that sends no `SENT_AT` (one from
before this module) gets the ``stale`` verdict with a sentence that names both causes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from google.protobuf.timestamp_pb2 import Timestamp

from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.wire import new_nonce

__all__ = ["CLOCK_SKEW", "REJECTION", "SENT_AT", "Staleness", "restamp", "sent_at", "staleness", "trailing_verdict"]

SENT_AT = "modelshare-sent-at"
"""Call metadata: the sender's clock when it sent the call, in seconds since the epoch (decimal text)."""
REJECTION = "modelshare-rejection"
"""Trailing metadata of a refused message: ``stale`` or ``clock-skew``."""
CLOCK_SKEW = "modelshare-clock-skew"
"""Trailing metadata of a ``clock-skew`` rejection: the sender's clock minus the miner's, in seconds."""

Verdict = Literal["stale", "clock-skew"]


@dataclass(frozen=True)
class Staleness:
    """Why a message is not fresh: ``verdict``, the sentence for the sender, and the measured clock skew."""

    verdict: Verdict
    message: str
    skew: float | None = None

    def trailing(self) -> tuple[tuple[str, str], ...]:
        """The trailing metadata that carries this verdict back to the sender."""
        pairs = ((REJECTION, self.verdict),)
        return pairs if self.skew is None else (*pairs, (CLOCK_SKEW, f"{self.skew:.3f}"))


def _seconds_text(value: float) -> str:
    return f"{abs(value):.0f} s"


def staleness(signed_at: float, sent: float | None, now: float, window: float) -> Staleness | None:
    """None when ``signed_at`` is within ``window`` s of ``now``, else why not.

    ``sent`` is the sender's clock when it sent the call (`SENT_AT`), None when it gave none. A
    sender whose clock differs from ``now`` by more than the window has a skewed clock, whatever
    the message's age; otherwise the message itself is old (or was signed while the clock was off).
    """
    age = now - signed_at
    if abs(age) <= window:
        return None
    if sent is not None and abs(sent - now) > window:
        side = "ahead of" if sent > now else "behind"
        return Staleness("clock-skew", f"your clock is {_seconds_text(sent - now)} {side} the miner's; the window is "
                                       f"{window:.0f} s: set the owner's clock right (NTP) and resend", sent - now)
    when = f"{_seconds_text(age)} old" if age > 0 else f"{_seconds_text(age)} in the future"
    if sent is None:
        return Staleness("stale", f"message timestamp is {when}; the window is {window:.0f} s (the message was signed "
                                  "too long ago, or the owner's clock is off)")
    return Staleness("stale", f"message timestamp is {when}; the window is {window:.0f} s: sign the same answer again "
                              "with a fresh timestamp and nonce and resend it")


def sent_at(metadata: Sequence[tuple[str, str | bytes]] | None) -> float | None:
    """The sender's `SENT_AT` from call metadata, None when absent or not a finite number."""
    for key, value in metadata or ():
        if key == SENT_AT:
            try:
                seconds = float(value)
            except ValueError:
                return None
            return seconds if math.isfinite(seconds) else None
    return None


def trailing_verdict(metadata: Sequence[tuple[str, str | bytes]] | None) -> tuple[Verdict | None, float | None]:
    """The verdict and clock skew a rejection's trailing metadata carries (None, None for any other rejection)."""
    pairs = {key: value for key, value in metadata or ()}
    verdict = pairs.get(REJECTION)
    if verdict not in ("stale", "clock-skew"):
        return None, None
    try:
        skew = float(pairs[CLOCK_SKEW]) if CLOCK_SKEW in pairs else None
    except ValueError:
        skew = None
    return verdict, skew  # type: ignore[return-value]  # the check above leaves only the two literals


def restamp(payload: bytes, *, now: float, refusal: bool) -> bytes:
    """``payload`` (a serialized `ModelMessage`, or `OwnerRefusal`
    when ``refusal``) with a fresh nonce and time ``now``.

    Every other field, the released trees and report included, is carried over unchanged: the
    answer is the same, only its freshness is new, so it is signed again without retraining.
    """
    message = (fpb.OwnerRefusal if refusal else fpb.ModelMessage).FromString(payload)
    message.nonce = new_nonce()
    stamp = Timestamp()
    stamp.FromNanoseconds(int(now * 1e9))
    message.timestamp.CopyFrom(stamp)
    return message.SerializeToString()
