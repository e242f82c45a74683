"""A site's privacy policy: the weakest release this owner will ever make, checked per study.

The policy is enforced here, at the data owner, and never delegated to the miner. The miner is
honest-but-curious at best and may be misconfigured, compromised or impersonated by a party
holding a stolen certificate; whatever it announces is a request, not an authority. Only the
site holds the raw rows, so only the site can guarantee that no study, however it is phrased,
makes it release more than its data protection officer signed off: a mechanism it has not
vetted, a requirement weaker than its bounds, a disclosure it does not allow, or a miner it
does not answer. `Policy.check` lists every reason a study fails, for the site's log and
``modelshare owner check``; the refusal the miner records names only the refusing keys
(`Policy.findings`, `modelshare.common.federation.refusal`).

``[policy]`` in ``owner.toml``::

    mechanisms = ["apt", "prune-leaf", "prune-parent"]   # allowed release mechanisms
                               # (also "kanon-rdt", "kanon-rdt-log", "laplace-rdt", "diffpets", "dpea" and "none":
                               # each must be listed to be allowed; `modelshare release --help` lists the registry's
                               # names)
    min_k = 5                  # a k-anonymity study needs k >= min_k (and so does the k of a dps study)
    min_l = 2                  # a (c,l)-diversity study needs l >= min_l ...
    max_c = 20                 # ... and c <= max_c (a smaller c is stricter)
    max_beta = 0.1             # a dps study needs its sampling rate beta <= max_beta ...
    max_epsilon = 2.0          # ... its total epsilon (Nt*eps) <= max_epsilon (so must a dp study's) ...
    max_delta = 1e-3           # ... and its composed delta (Nt*delta) <= max_delta
    lifetime_epsilon = 10.0    # all releases together (the budget ledger) spend at most this epsilon ...
    lifetime_delta = 1e-2      # ... and this delta; a study that would cross either is refused
    mix_dp_with_non_dp = true  # false: refuse a dp/dps study once a non-DP release of the table left, and vice versa
    disclosures = ["counts", "hit_miss"]
    miners = ["miner"]         # TLS identities answered; empty: any miner of the federation

``max_beta``, ``max_epsilon`` and ``max_delta`` bound ``dps`` studies (mechanisms ``kanon-rdt``, ``kanon-rdt-log``), and
``max_epsilon`` bounds ``dp`` studies (the noise-based mechanisms); which mechanisms a site answers
at all is ``mechanisms``. What a site may spend over all its studies together is the budget
ledger's cap (``lifetime_epsilon``, ``lifetime_delta``; `modelshare.owner_node.budget`). The ledger also records
the non-DP releases (none, APT, the pruning methods), which the cap cannot bound: with
``mix_dp_with_non_dp = false`` a site keeps its table's releases of one kind, so that a DP study is
refused once a non-DP release of the table has left, and a non-DP study once a DP one has.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from modelshare.common.federation.config_file import ConfigModel, validate_config
from modelshare.common.mechanisms import registry
from modelshare.common.privacy.requirements import DP, DPS, CLDiversity, KAnonymity, Requirement, weaker_than
from modelshare.common.study import Study
from modelshare.owner_node.budget import Ledger

__all__ = ["DISCLOSURES", "Finding", "Policy", "PolicyError"]

DISCLOSURES = ("counts", "hit_miss")


class PolicyError(ValueError):
    """A ``[policy]`` table that cannot be enforced as written; the message names the file and key."""


@dataclass(frozen=True)
class Finding:
    """One reason a study fails the policy: the ``[policy]`` keys that refuse it, and the reason in words."""

    keys: tuple[str, ...]
    text: str


def _among(known: tuple[str, ...] | Callable[[], tuple[str, ...]]) -> AfterValidator:
    """Each name from ``known`` (or what it returns when validating: the mechanism registry, which
    plugins extend), at least one: a typo must not silently widen a policy, nor an empty list
    refuse every study."""

    def check(names: tuple[str, ...]) -> tuple[str, ...]:
        if not names:
            raise ValueError("must list at least one name (an empty list would refuse every study)")
        allowed = known() if callable(known) else known
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise ValueError(f"names {unknown}, which are not among {list(allowed)}")
        return names

    return AfterValidator(check)


_Names = Annotated[tuple[Annotated[str, Field(min_length=1)], ...],
                   Field(strict=False, description="a list of names")]  # TOML arrays are lists
_Positive = Annotated[float | None, Field(gt=0, allow_inf_nan=False)]
_Probability = Annotated[float | None, Field(gt=0, le=1, allow_inf_nan=False)]


class Policy(ConfigModel):
    """The weakest release a site allows; see the module docstring for each field."""

    mechanisms: Annotated[_Names, _among(registry.names)] = ("apt", "prune-leaf", "prune-parent")
    """Release mechanisms this site allows; each must be listed to be allowed (`none` too)."""
    min_k: Annotated[int | None, Field(ge=1)] = None
    """A k-anonymity study needs k >= min_k (and so does the k of a dps study)."""
    min_l: Annotated[int | None, Field(ge=2)] = None
    """A (c,l)-diversity study needs l >= min_l."""
    max_c: _Positive = None
    """A (c,l)-diversity study needs c <= max_c (a smaller c is stricter)."""
    max_beta: _Probability = None
    """A dps study needs its sampling rate beta <= max_beta."""
    max_epsilon: _Positive = None
    """A dps or dp study needs its total epsilon <= max_epsilon."""
    max_delta: _Probability = None
    """A dps study needs its composed delta (Nt * delta) <= max_delta."""
    lifetime_epsilon: _Positive = None
    """All releases together (the budget ledger) spend at most this epsilon; a study that would cross it is refused."""
    lifetime_delta: _Probability = None
    """All releases together spend at most this delta."""
    mix_dp_with_non_dp: bool = True
    """False: a dp or dps study is refused once a non-DP release of the table exists, and the other way round."""
    disclosures: Annotated[_Names, _among(DISCLOSURES)] = DISCLOSURES
    """Disclosures this site allows: `counts` (class counts) and/or `hit_miss` (majority class, hit, miss)."""
    miners: _Names = ()
    """Miner TLS identities this site answers; empty: any miner of the federation."""
    per_leaf_diversity: bool = False
    """True: also answer a (c,l)-diversity study that promises each leaf only (``scope=leaf``, the paper's);
    by default such a study is refused, since a reader who combines its leaves is not bounded."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str) -> Policy:
        """Validate a ``[policy]`` table; ``where`` (file and table) prefixes every error."""
        return validate_config(data, cls, PolicyError, where=where)

    def bounds(self) -> tuple[list[tuple[Requirement, str, str]], list[tuple[Requirement, str, str]]]:
        """The k-anonymity bounds and the diversity bounds: requirement, how to say it, its ``[policy]`` key."""
        k_bounds: list[tuple[Requirement, str, str]] = []
        div_bounds: list[tuple[Requirement, str, str]] = []
        if self.min_k is not None:
            k_bounds.append((KAnonymity(self.min_k), f"at least k={self.min_k}", "min_k"))
        if self.min_l is not None:
            div_bounds.append((CLDiversity(math.inf, self.min_l, per_leaf=True),
                               f"(c,l)-diversity with l >= {self.min_l}", "min_l"))
        if self.max_c is not None:  # per_leaf: these bound c and l; the scope is `_scope_reasons`'
            div_bounds.append((CLDiversity(self.max_c, 2, per_leaf=True), f"(c,l)-diversity with c <= {self.max_c:g}",
                               "max_c"))
        return k_bounds, div_bounds

    def check(self, study: Study, miner_name: str, ledger: Ledger | None = None) -> list[str]:
        """Every reason this site refuses ``study`` from ``miner_name``, in words; an empty list accepts it.

        With the site's ``ledger`` the releases its table has made are checked too (``mix_dp_with_non_dp``).
        """
        return [finding.text for finding in self.findings(study, miner_name, ledger)]

    def findings(self, study: Study, miner_name: str, ledger: Ledger | None = None) -> list[Finding]:
        """Every reason this site refuses ``study`` from ``miner_name``, each with its keys; empty accepts it."""
        findings: list[Finding] = []
        if ledger is not None and not self.mix_dp_with_non_dp and (mixing := ledger.mixing(study)) is not None:
            findings.append(Finding(("mix_dp_with_non_dp",), f"{mixing}; this site's policy does not mix DP and "
                                                             "non-DP releases of its table"))
        if self.miners and miner_name not in self.miners:
            findings.append(Finding(("miners",), f"miner {miner_name!r} is not one this site answers "
                                                 f"(allowed: {', '.join(self.miners)})"))
        if study.mechanism not in self.mechanisms:
            findings.append(Finding(("mechanisms",), f"mechanism {study.mechanism!r} is not allowed by this site's "
                                                     f"policy (allowed: {', '.join(self.mechanisms)})"))
        findings += self._disclosure_reasons(study)
        findings += self._bound_reasons(study)
        findings += self._scope_reasons(study)
        findings += self._dps_reasons(study)
        return findings

    def _scope_reasons(self, study: Study) -> list[Finding]:
        """A per-leaf (c,l)-diversity study, unless ``per_leaf_diversity`` allows it."""
        claimed, _ = _claimed_requirement(study)
        if self.per_leaf_diversity or not (isinstance(claimed, CLDiversity) and claimed.per_leaf):
            return []
        return [Finding(("per_leaf_diversity",), f"study requires {claimed}, a promise per leaf only that a reader "
                                                 "combining the leaves can break; this site's policy does not allow "
                                                 "it (per_leaf_diversity = false)")]

    def _disclosure_reasons(self, study: Study) -> list[Finding]:
        disclosure = study.disclosure
        if disclosure in self.disclosures:
            return []
        return [Finding(("disclosures",), f"disclosure {disclosure!r} is not allowed by this site's policy "
                                          f"(allowed: {', '.join(self.disclosures)})")]

    def _bound_reasons(self, study: Study) -> list[Finding]:
        """Each bound of the study's requirement family that its requirement fails to imply.

        ``min_k`` bounds k-anonymity studies and ``min_l``/``max_c`` bound (c,l)-diversity
        studies, so one site can say "k >= 10 if you ask for k-anonymity, l >= 3 and c <= 10 if
        you ask for diversity". A site that sets only ``min_k`` accepts a diversity study whose
        l reaches it (a (c,l)-diverse path holds at least l tuples); a site that sets only
        diversity bounds refuses k-anonymity studies, which promise no diversity at all.
        ``min_k`` also bounds the k of a dps study: every released nonzero (leaf, class) count
        of k-AnonToRdt is at least k, so each released leaf holds at least k sampled rows; dps
        promises no diversity, so diversity bounds alone refuse it like k-anonymity.
        """
        k_bounds, div_bounds = self.bounds()
        if not k_bounds and not div_bounds:
            return []
        claimed, problem = _claimed_requirement(study)
        if claimed is None:
            return [Finding((key,), f"{problem}; this site requires {say}") for _, say, key in (*k_bounds, *div_bounds)]
        if isinstance(claimed, DP):  # a whole-release eps-DP promise: bounded by max_epsilon (`_epsilon_reasons`)
            return []
        if isinstance(claimed, (KAnonymity, DPS)) and not k_bounds:
            return [Finding(tuple(key for *_, key in div_bounds), f"study requires {claimed}; this site accepts only "
                            + " and ".join(say for _, say, _ in div_bounds))]
        if isinstance(claimed, DPS):
            return [Finding((key,), f"study requires {claimed}; this site requires {say}")
                    for required, say, key in k_bounds if isinstance(required, KAnonymity) and claimed.k < required.k]
        family = k_bounds if isinstance(claimed, KAnonymity) else (div_bounds or k_bounds)
        return [Finding((key,), f"study requires {claimed}; this site requires {say}")
                for required, say, key in family if weaker_than(claimed, required) is not None]

    def _dps_bounds(self) -> list[tuple[str, str]]:
        """Each dps bound the site sets: its ``[policy]`` key and how to say it."""
        said = [("max_beta", self.max_beta, "beta <= {:g}"), ("max_epsilon", self.max_epsilon, "total epsilon <= {:g}"),
                ("max_delta", self.max_delta, "composed delta <= {:g}")]
        return [(key, say.format(limit)) for key, limit, say in said if limit is not None]

    def _dps_reasons(self, study: Study) -> list[Finding]:
        """Each of ``max_beta``, ``max_epsilon`` and ``max_delta`` a dps or dp study's requirement exceeds.

        Only studies that ask for dps or dp (a whole-release mechanism, or a ``dps:``/``dp:``
        requirement) are bounded. For dps, epsilon is the total Nt*eps and delta the composed
        Nt*delta (`modelshare.common.privacy.dps`); a dp study spends its total epsilon with delta 0 and samples
        nothing, so only ``max_epsilon`` can bound it.
        """
        bounds = self._dps_bounds()
        asks = study.mechanism in registry.names(kind="whole-release") or isinstance(study.requirement, (DPS, DP))
        if not bounds or not asks:
            return []
        claimed, problem = _claimed_requirement(study)
        if isinstance(claimed, DP):
            if self.max_epsilon is not None and claimed.epsilon > self.max_epsilon:
                return [Finding(("max_epsilon",), f"study requires {claimed}; this site allows at most "
                                                  f"epsilon={self.max_epsilon:g} in total")]
            return []
        if not isinstance(claimed, DPS):
            problem = problem or f"study requires {claimed}, which bounds no epsilon or delta"
            return [Finding((key,), f"{problem}; this site requires {say}") for key, say in bounds]
        reasons = []
        if self.max_beta is not None and claimed.beta > self.max_beta:
            reasons.append(Finding(("max_beta",), f"study requires {claimed}; this site allows at most "
                                                  f"beta={self.max_beta:g}"))
        if self.max_epsilon is not None and claimed.epsilon > self.max_epsilon:
            reasons.append(Finding(("max_epsilon",), f"study requires {claimed}; this site allows at most "
                                                     f"epsilon={self.max_epsilon:g} in total"))
        delta = claimed.guarantee().delta_total
        if self.max_delta is not None and delta > self.max_delta:
            reasons.append(Finding(("max_delta",), f"study requires {claimed} (composed delta {delta:.3g}); "
                                                   f"this site allows at most delta={self.max_delta:g}"))
        return reasons


def _claimed_requirement(study: Study) -> tuple[Requirement | None, str]:
    """The requirement the study's release will meet, or None and why none can be relied on."""
    if study.mechanism in registry.names(family="none"):
        return None, f"study releases the tree as trained (mechanism {study.mechanism!r}), which guarantees nothing"
    if study.requirement is None:
        return None, "study states no privacy requirement"
    return study.requirement, ""
