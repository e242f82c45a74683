"""The owner's privacy-budget ledger: what its releases have spent, across studies, for its lifetime.

Every ``dp`` release spends its total epsilon and every ``dps`` release (k-AnonToRdt) its total
Nt*eps and composed Nt*delta (Corollary 1 of Waseda et al.). Releases about the same rows
compose sequentially, so a site that answers many studies spends the sum, whatever each study's
own bound is. The ledger keeps that sum in ``state_dir/privacy-budget.json`` and the site policy
caps it (``lifetime_epsilon``, ``lifetime_delta`` in ``[policy]``). The anonymity mechanisms
(APT, the pruning methods) promise no epsilon and are not charged.

The charge is written before the answer enters the outbox, so a release never leaves unrecorded;
a crash between the two over-counts (the safe side). Charging is idempotent per study (the
outbox resends the same bytes, which spend nothing more), and the file is replaced atomically
(temp file, fsync, rename, directory fsync), so a crash never leaves it half written.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from common.federation.pb import federation_pb2 as fpb
from common.federation.study import StudyError, spec_requirement
from common.files import atomic_write
from common.privacy.requirements import DP, DPS

__all__ = ["LEDGER_FILE", "Charge", "Ledger", "LedgerError", "study_cost"]

LEDGER_FILE = "privacy-budget.json"
_VERSION = 1


class LedgerError(ValueError):
    """The ledger file cannot be read as written; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Charge:
    """What one study's release spent."""

    study_id: str
    mechanism: str
    requirement: str
    epsilon: float
    delta: float
    at: str


def study_cost(spec: fpb.StudySpec) -> tuple[float, float] | None:
    """(epsilon, delta) a release for ``spec`` spends, or None when its mechanism promises no epsilon."""
    try:
        requirement = spec_requirement(spec)
    except StudyError:
        return None
    if isinstance(requirement, DP):
        return float(requirement.epsilon), 0.0
    if isinstance(requirement, DPS):
        return float(requirement.epsilon), float(requirement.guarantee().delta_total)
    return None


class Ledger:
    """``state_dir/privacy-budget.json``: one `Charge` per study answered with a release that spends budget."""

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
        if not isinstance(data, dict) or data.get("version") != _VERSION or not isinstance(data.get("charges"), list):
            raise LedgerError(f"{self.path}: not a version-{_VERSION} privacy-budget ledger")
        charges = []
        for i, entry in enumerate(data["charges"]):
            try:
                charge = Charge(**entry)
                valid = all(math.isfinite(v) and v >= 0 for v in (charge.epsilon, charge.delta))
            except TypeError as exc:
                raise LedgerError(f"{self.path}: charge {i}: {exc}") from None
            if not valid:
                raise LedgerError(f"{self.path}: charge {i}: epsilon and delta must be finite and >= 0")
            charges.append(charge)
        return charges

    @property
    def spent(self) -> tuple[float, float]:
        """Total (epsilon, delta) over every charge (sequential composition)."""
        return (math.fsum(c.epsilon for c in self.charges), math.fsum(c.delta for c in self.charges))

    def charged(self, study_id: str) -> Charge | None:
        """The charge of ``study_id``, if it was charged."""
        return next((c for c in self.charges if c.study_id == study_id), None)

    def over_cap(self, spec: fpb.StudySpec, lifetime_epsilon: float | None, lifetime_delta: float | None) -> str | None:
        """Why answering ``spec`` would exceed the site's lifetime caps, or None when it fits (or is charged already)."""
        cost = study_cost(spec)
        if cost is None or self.charged(spec.study_id) is not None:
            return None
        (eps, delta), (spent_eps, spent_delta) = cost, self.spent
        studies = f"{len(self.charges)} earlier release{'s' if len(self.charges) != 1 else ''}"
        if lifetime_epsilon is not None and spent_eps + eps > lifetime_epsilon:
            return (f"study spends epsilon={eps:g}; this site has spent {spent_eps:g} over {studies} and its lifetime "
                    f"cap is epsilon={lifetime_epsilon:g} ({max(lifetime_epsilon - spent_eps, 0.0):g} left)")
        if lifetime_delta is not None and spent_delta + delta > lifetime_delta:
            return (f"study spends delta={delta:.3g}; this site has spent {spent_delta:.3g} over {studies} and its "
                    f"lifetime cap is delta={lifetime_delta:g} ({max(lifetime_delta - spent_delta, 0.0):.3g} left)")
        return None

    def charge(self, spec: fpb.StudySpec) -> Charge | None:
        """Record what a release for ``spec`` spends (once per study), durably; None when it spends nothing."""
        cost = study_cost(spec)
        if cost is None:
            return None
        if (earlier := self.charged(spec.study_id)) is not None:
            return earlier
        charge = Charge(spec.study_id, spec.mechanism, spec.requirement, cost[0], cost[1],
                        datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self._write([*self.charges, charge])
        self.charges.append(charge)
        return charge

    def _write(self, charges: list[Charge]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": _VERSION, "charges": [asdict(c) for c in charges]}
        atomic_write(self.path, json.dumps(data, indent=1) + "\n", mode=0o600)
