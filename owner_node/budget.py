"""The owner's privacy-budget ledger: every release of its table, and what the DP ones spent, for its lifetime.

Every release is recorded with its kind, the registry family of its mechanism (``none``, ``path``,
``dps`` or ``dp``). Every ``dp`` release spends its total epsilon and every ``dps`` release
(k-AnonToRdt) its total Nt*eps and composed Nt*delta (Corollary 1 of Waseda et al.). Releases about
the same rows compose sequentially, so a site that answers many studies spends the sum, whatever
each study's own bound is; the site policy caps it (``lifetime_epsilon``, ``lifetime_delta`` in
``[policy]``). The non-DP releases (``none``, APT and the pruning methods) promise no epsilon and
spend 0, but they are recorded too: once one has left, the lifetime cap no longer bounds what the
table has disclosed, which ``modelshare owner budget`` says plainly (`non_dp_note`), and a site
can refuse to mix the two kinds (``mix_dp_with_non_dp = false``, `Ledger.mixing`). One owner's state
directory serves one table (its ``data_path``), so every record is a release of that table.

The file is ``state_dir/privacy-budget.json``, version 2; a version-1 file (which recorded only the
dp and dps releases, without a kind) is read with each kind taken from its requirement, and is
written as version 2 with the next release.

The charge is written before the answer enters the outbox, so a release never leaves unrecorded;
a crash between the two over-counts (the safe side). Charging is idempotent per study (the
outbox resends the same bytes, which spend nothing more), and the file is replaced atomically
(temp file, fsync, rename, directory fsync), so a crash never leaves it half written.
"""

from __future__ import annotations

import json
import math
import typing
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from modelshare.common.files import atomic_write
from modelshare.common.mechanisms import registry
from modelshare.common.privacy.requirements import DP, DPS
from modelshare.common.study import Study

__all__ = ["DP_KINDS", "KINDS", "LEDGER_FILE", "Charge", "Ledger", "LedgerError", "non_dp_note", "release_kind",
           "study_cost"]

LEDGER_FILE = "privacy-budget.json"
_VERSION = 2
_READABLE = (1, 2)  # version 1 recorded only dp and dps releases, without their kind
KINDS: tuple[str, ...] = typing.get_args(registry.Family)  # the registry's requirement families
DP_KINDS = ("dps", "dp")  # the kinds that spend (and are bounded by) a privacy budget


class LedgerError(ValueError):
    """The ledger file cannot be read as written; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Charge:
    """One study's release: its mechanism, requirement and kind (registry family), and what it spent."""

    study_id: str
    mechanism: str
    requirement: str
    epsilon: float
    delta: float
    at: str
    kind: str

    @property
    def is_dp(self) -> bool:
        """Whether the release promises a budget (dp or dps), as opposed to none or path."""
        return self.kind in DP_KINDS


def release_kind(study: Study) -> str:
    """The kind of a release for ``study``: its mechanism's registry family (none, path, dps or dp)."""
    return registry.get(study.mechanism).family


def _version_1_kind(entry: dict[str, object]) -> str:
    """The kind of a version-1 charge, which only dp and dps releases had: read off its requirement."""
    return "dps" if str(entry.get("requirement", "")).startswith("dps:") else "dp"


def study_cost(study: Study) -> tuple[float, float] | None:
    """(epsilon, delta) a release for ``study`` spends, or None when its mechanism promises no epsilon."""
    requirement = study.requirement
    if isinstance(requirement, DP):
        return float(requirement.epsilon), 0.0
    if isinstance(requirement, DPS):
        return float(requirement.epsilon), float(requirement.guarantee().delta_total)
    return None


class Ledger:
    """``state_dir/privacy-budget.json``: one `Charge` per study answered with a release, of any kind."""

    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / LEDGER_FILE
        self.charges = self._read()

    def _read(self) -> list[Charge]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise LedgerError(f"{self.path}: cannot read the privacy-budget ledger: {exc}") from None
        version = data.get("version") if isinstance(data, dict) else None
        if version not in _READABLE or not isinstance(data.get("charges"), list):
            raise LedgerError(f"{self.path}: not a privacy-budget ledger of a version this owner reads "
                              f"({' or '.join(str(v) for v in _READABLE)})")
        charges = []
        for i, entry in enumerate(data["charges"]):
            try:
                charge = Charge(**entry, kind=_version_1_kind(entry)) if version == 1 else Charge(**entry)
                valid = all(math.isfinite(v) and v >= 0 for v in (charge.epsilon, charge.delta))
            except (TypeError, AttributeError) as exc:
                raise LedgerError(f"{self.path}: charge {i}: {exc}") from None
            if not valid:
                raise LedgerError(f"{self.path}: charge {i}: epsilon and delta must be finite and >= 0")
            if charge.kind not in KINDS:
                raise LedgerError(f"{self.path}: charge {i}: kind {charge.kind!r} is not one of {list(KINDS)}")
            charges.append(charge)
        return charges

    @property
    def spent(self) -> tuple[float, float]:
        """Total (epsilon, delta) over every charge (sequential composition; a non-DP release spends 0)."""
        return (math.fsum(c.epsilon for c in self.charges), math.fsum(c.delta for c in self.charges))

    @property
    def non_dp(self) -> list[Charge]:
        """The releases of kind none or path: they promise no epsilon, and the lifetime cap does not bound them."""
        return [c for c in self.charges if not c.is_dp]

    def charged(self, study_id: str) -> Charge | None:
        """The charge of ``study_id``, if it was charged."""
        return next((c for c in self.charges if c.study_id == study_id), None)

    def over_cap(self, study: Study, lifetime_epsilon: float | None, lifetime_delta: float | None) -> str | None:
        """Why answering ``study`` would exceed the site's lifetime
        caps, or None when it fits (or is charged already)."""
        cost = study_cost(study)
        if cost is None or self.charged(study.study_id) is not None:
            return None
        (eps, delta), (spent_eps, spent_delta) = cost, self.spent
        count = sum(c.is_dp for c in self.charges)
        studies = f"{count} earlier release{'s' if count != 1 else ''}"
        if lifetime_epsilon is not None and spent_eps + eps > lifetime_epsilon:
            return (f"study spends epsilon={eps:g}; this site has spent {spent_eps:g} over {studies} and its lifetime "
                    f"cap is epsilon={lifetime_epsilon:g} ({max(lifetime_epsilon - spent_eps, 0.0):g} left)")
        if lifetime_delta is not None and spent_delta + delta > lifetime_delta:
            return (f"study spends delta={delta:.3g}; this site has spent {spent_delta:.3g} over {studies} and its "
                    f"lifetime cap is delta={lifetime_delta:g} ({max(lifetime_delta - spent_delta, 0.0):.3g} left)")
        return None

    def mixing(self, study: Study) -> str | None:
        """Why a release for ``study`` would mix DP and non-DP releases of this table, or None when it would not.

        A dp or dps release mixes with any earlier none or path release, and the other way round
        (``study``'s own study, when recorded, is of its own kind and so never counts).
        """
        wants_dp = release_kind(study) in DP_KINDS
        other = [c for c in self.charges if c.is_dp != wants_dp]
        if not other:
            return None
        earlier = ", ".join(f"{c.mechanism} in study {c.study_id}" for c in other)
        return (f"study asks for a {'DP' if wants_dp else 'non-DP'} release ({study.mechanism}); this table already "
                f"has {len(other)} {'non-DP' if wants_dp else 'DP'} release{'s' if len(other) != 1 else ''} "
                f"({earlier})")

    def charge(self, study: Study, *, spent_epsilon: float | None = None) -> Charge:
        """Record a release for ``study`` with its kind and what it spends (0 when it promises no epsilon),
        once per study, durably. ``spent_epsilon`` is what a dp release that declined to release trees spent
        (its class histogram's share, `modelshare.common.mechanisms.class_prior`); it never raises the study's cost."""
        if (earlier := self.charged(study.study_id)) is not None:
            return earlier
        epsilon, delta = study_cost(study) or (0.0, 0.0)
        if spent_epsilon is not None:
            epsilon = min(epsilon, float(spent_epsilon))
        charge = Charge(study.study_id, study.mechanism, "" if study.requirement is None else str(study.requirement),
                        epsilon, delta, datetime.now(timezone.utc).isoformat(timespec="seconds"), release_kind(study))
        self._write([*self.charges, charge])
        self.charges.append(charge)
        return charge

    def _write(self, charges: list[Charge]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": _VERSION, "charges": [asdict(c) for c in charges]}
        atomic_write(self.path, json.dumps(data, indent=1) + "\n", mode=0o600)


def non_dp_note(ledger: Ledger) -> str | None:
    """A plain statement that non-DP releases of this table exist, for ``owner budget``; None when none does."""
    if not ledger.non_dp:
        return None
    mechanisms = sorted({c.mechanism for c in ledger.non_dp})
    count = len(ledger.non_dp)
    return (f"this table also has {count} non-DP release{'s' if count != 1 else ''} ({', '.join(mechanisms)}): "
            "they promise no epsilon and spend none of the budget, so the lifetime cap does not bound what "
            "they disclose about the same rows")
