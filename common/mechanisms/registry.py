"""The mechanisms that train their own trees from the rows, and the requirement family each meets.

The tree mechanisms (``none``, ``apt``, ``prune-leaf``, ``prune-parent``) post-process one trained
tree to a per-path requirement. The *whole-release* mechanisms below train their own ensembles
and promise something about the release as a whole: ``kanon-rdt`` a ``dps:`` guarantee, the
noise-based ones a ``dp:`` guarantee. Studies, site policies, the owner's budget ledger and the
miner all ask this one table which requirement goes with which mechanism. Only names and
requirement classes live here, so the miner's verifier processes can import it without the
mechanisms' training code.
"""

from __future__ import annotations

from common.mechanisms.diffpets import MECHANISM as DIFFPETS
from common.mechanisms.dpea import MECHANISM as DPEA
from common.mechanisms.kanon_rdt import MECHANISM as KANON_RDT
from common.mechanisms.laplace_rdt import MECHANISM as LAPLACE_RDT
from common.privacy.requirements import DP, DPS

__all__ = ["DP_MECHANISM_NAMES", "REGRESSION_MECHANISMS", "WHOLE_RELEASE", "regression_refusal",
           "requirement_form"]

DP_MECHANISM_NAMES: tuple[str, ...] = (LAPLACE_RDT, DIFFPETS, DPEA)
WHOLE_RELEASE: dict[str, type] = {KANON_RDT: DPS, **{name: DP for name in DP_MECHANISM_NAMES}}
# The mechanisms that can release a model of a regression table (a numeric target): DiffPETs alone
# releases noisy target sums; every other mechanism releases class statistics.
REGRESSION_MECHANISMS: tuple[str, ...] = (DIFFPETS,)


def regression_refusal(mechanism: str, target: str) -> str | None:
    """Why ``mechanism`` cannot release a model of a regression table (numeric ``target``); None when it can."""
    if mechanism in REGRESSION_MECHANISMS:
        return None
    return (f"mechanism {mechanism!r} cannot release a model for task 'regression' (numeric target {target!r}); "
            f"only {' or '.join(repr(m) for m in REGRESSION_MECHANISMS)} can")


def requirement_form(mechanism: str) -> str:
    """How the requirement of a whole-release ``mechanism`` is written, for error messages."""
    return "'dps:k=K,beta=B,epsilon=E,trees=T'" if WHOLE_RELEASE[mechanism] is DPS else "'dp:epsilon=E,trees=T'"
