"""Privacy requirements: k-anonymity and (c,l)-diversity of paths, (beta, eps, delta)-DPS, and eps-DP.

k-anonymity and (c,l)-diversity (Sharkey et al. §3.1) are *path* requirements, checked leaf by
leaf. ``dps:k=K,beta=B,epsilon=E,trees=T`` is the guarantee of a whole k-AnonToRdt release
(Waseda, Nojima & Wang 2024, Corollary 1): T random trees, each on its own Bernoulli(B) sample
with every (leaf, class) count below K released as 0, are (B, E, T*d(K, B, E/T))-DPS
(`modelshare.common.privacy.dps`). It says nothing about single paths; `DPS` documents how it is compared.
``dp:epsilon=E,trees=T`` is the eps-differential privacy of a whole noise-based release (add/remove
one row neighbours), whose budget E is spent over T trees
(`modelshare.common.mechanisms.laplace_rdt`); `DP` documents it.

A root-to-leaf path partitions the training tuples like a QI-group of an anonymized table, so the
measures of data anonymization apply to it. A requirement is parsed from the string a user types
(``k-anonymity:k=10``, ``cl-diversity:c=5,l=3``) and checked per leaf, vectorized over leaves, in
the form the released disclosure allows:

* ``hit_miss`` disclosure (majority class, hit, miss): the paper's form,
  ``l <= miss + 1`` and ``hit < c * miss / (l - 1)``, which assumes the misses are spread evenly
  over ``l - 1`` other classes;
* ``counts`` disclosure (the class-count vector): the exact (c,l)-diversity of Machanavajjhala et
  al., ``r1 < c * (r_l + ... + r_m)`` with ``r1 >= r2 >= ...`` the sorted class counts.

The hit/miss form is a relaxation of the exact one: it trusts an even spread of the misses that
the counts may not have, so a path with counts (10, 9, 1) passes it for c=3, l=3 although the
exact form fails (10 >= 3 * 1). It is an estimate rather than a bound, so the converse also occurs:
(10, 1, 1, 1, 1) fails the hit/miss form for c=4, l=3 (10 >= 4 * 4 / 2) and passes the exact one
(10 < 4 * 3). The module tests pin both cases.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from modelshare.common.trees.tree import Disclosure, Tree

if TYPE_CHECKING:
    from modelshare.common.privacy.dps import DPSGuarantee

__all__ = [
    "as_requirement",
    "GRAMMAR",
    "RequirementError",
    "KAnonymity",
    "CLDiversity",
    "DPS",
    "DP",
    "PathRequirement",
    "Requirement",
    "parse_requirement",
    "weaker_than",
    "LeafStats",
    "leaf_stats",
    "PathRule",
    "path_rule",
    "cl_diverse_hit_miss",
    "cl_diverse_exact",
]

GRAMMAR = (
    "a requirement is NAME:PARAM=VALUE[,PARAM=VALUE]; accepted: "
    "'k-anonymity:k=K' (integer K >= 1), 'cl-diversity:c=C,l=L[,scope=leaf]' (real C > 0, integer L >= 2; "
    "scope=leaf promises each leaf only, not the whole release) or "
    "'dps:k=K,beta=B,epsilon=E,trees=T' (integer K >= 1, 0 < B < 1, total E > 0 with E/T >= -ln(1 - B), "
    "integer T >= 1) or 'dp:epsilon=E,trees=T' (total E > 0, integer T >= 1)"
)


class RequirementError(ValueError):
    """A requirement string that does not follow the grammar, or values outside their range."""

    def __init__(self, text: str, why: str) -> None:
        super().__init__(f"bad requirement {text!r}: {why}; {GRAMMAR}")
        self.text = text
        self.why = why


def _number(value: float) -> str:
    """A float as typed in a requirement: ``5`` for 5.0, else the shortest exact repr."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(frozen=True)
class KAnonymity:
    """Every path holds at least ``k`` training tuples (hit + miss >= k)."""

    k: int

    def __str__(self) -> str:
        return f"k-anonymity:k={self.k}"

    def check(self, stats: LeafStats) -> np.ndarray:
        """Per leaf: does it hold at least k tuples?"""
        return stats.total >= self.k


@dataclass(frozen=True)
class CLDiversity:
    """Every path is (c,l)-diverse, in the form its disclosure allows (see the module docstring).

    By default the promise holds for the whole release: a reader who combines every released path
    (`modelshare.common.privacy.combining`) believes no person's class beyond what a (c,l)-diverse leaf shows.
    ``per_leaf`` (``scope=leaf`` in the string) promises it leaf by leaf only, the paper's
    requirement, kept for the reproductions; it is weaker (`weaker_than`).
    """

    c: float
    l: int  # noqa: E741 - the papers' name
    per_leaf: bool = False

    def __str__(self) -> str:
        return f"cl-diversity:c={_number(self.c)},l={self.l}" + (",scope=leaf" if self.per_leaf else "")

    def check(self, stats: LeafStats) -> np.ndarray:
        """Per leaf: exact form under counts disclosure, hit/miss form otherwise."""
        if stats.counts is not None:
            return cl_diverse_exact(stats.counts, self.c, self.l)
        return cl_diverse_hit_miss(stats.hit, stats.miss, self.c, self.l)


@dataclass(frozen=True)
class DPS:
    """(beta, epsilon, delta)-DPS of a k-AnonToRdt release: ``dps:k=K,beta=B,epsilon=E,trees=T``.

    ``epsilon`` is the *total* budget Nt*eps of the ``trees`` trees (each gets ``epsilon / trees``)
    and delta is not typed but derived: `guarantee` composes Theorem 1 over the trees
    (Corollary 1). `parse_requirement` only builds settings inside the theorem's range whose
    composed delta is below 1, so `guarantee` never raises for a parsed requirement.
    """

    k: int
    beta: float
    epsilon: float
    trees: int

    def __str__(self) -> str:
        return f"dps:k={self.k},beta={_number(self.beta)},epsilon={_number(self.epsilon)},trees={self.trees}"

    def guarantee(self) -> DPSGuarantee:
        """The composed (beta, epsilon, delta_total) guarantee of this setting
        (`modelshare.common.privacy.dps.compose`).

        `modelshare.common.privacy.dps` (and with it scipy.stats) is imported on first use: most processes that parse
        requirements (the miner's verifier workers among them) never meet a dps one.
        """
        from modelshare.common.privacy.dps import compose

        return compose(self.k, self.beta, self.epsilon, self.trees)


@dataclass(frozen=True)
class DP:
    """epsilon-differential privacy of a whole release: ``dp:epsilon=E,trees=T``.

    Neighbouring tables differ by one added or removed row (unbounded DP, as the DiffPETs paper
    defines it). ``epsilon`` is the total budget of the release and ``trees`` the number of trees
    it is spent on by sequential composition; ``trees`` says how the budget is spent, not how
    strong the guarantee is, so `weaker_than` compares epsilon alone.
    """

    epsilon: float
    trees: int

    def __str__(self) -> str:
        return f"dp:epsilon={_number(self.epsilon)},trees={self.trees}"

    def describe(self) -> str:
        """The guarantee as a release states it: ``1-DP (add/remove one row)``."""
        return f"{self.epsilon:g}-DP (add/remove one row)"


PathRequirement = KAnonymity | CLDiversity
Requirement = KAnonymity | CLDiversity | DPS | DP

_SHAPE = re.compile(r"^\s*([a-z-]+)\s*:\s*(.*?)\s*$")


def _dps_weaker(claimed: DPS, required: DPS) -> str | None:
    """Why the DPS claim ``claimed`` is weaker than ``required`` (see `weaker_than`), or None."""
    if claimed.k < required.k:
        return f"{claimed} zeroes counts below k={claimed.k}; {required} needs k >= {required.k}"
    if claimed.beta > required.beta:
        return f"{claimed} samples rows with beta={claimed.beta:g}; {required} allows at most beta={required.beta:g}"
    if claimed.epsilon > required.epsilon:
        return f"{claimed} spends epsilon={claimed.epsilon:g} in total; {required} allows at most {required.epsilon:g}"
    have, need = claimed.guarantee().delta_total, required.guarantee().delta_total
    if have > need:
        return f"{claimed} has composed delta {have:.3g}; {required} allows at most {need:.3g}"
    return None


def weaker_than(claimed: Requirement, required: Requirement) -> str | None:
    """Why ``claimed`` does not imply ``required``, or None when it does.

    Path requirements: every path meeting ``claimed`` must meet ``required``. k-anonymity is
    monotone in k. (c,l)-diversity tightens as l grows and c shrinks, in both the exact and the
    hit/miss form (a larger l drops terms from the right-hand sum, a smaller c scales it down). A
    (c,l)-diverse path holds at least l tuples in either form (l - 1 misses plus a majority of at
    least one), so it implies k-anonymity for k <= l; k-anonymity never implies diversity.

    DPS: a claim is at least as strong as the required setting when k >= k_req, beta <= beta_req,
    epsilon (total) <= epsilon_req and its composed delta <= the required setting's composed
    delta. The (epsilon, delta) pair is the differential-privacy guarantee itself; delta is
    compared after composition because the tree counts may differ and because d(k, beta, eps) is
    not monotone in beta (`modelshare.common.privacy.dps.dps_delta`), so the first three bounds alone would not
    imply it. k and beta are bounded in their own right: a study may insist on a minimum count
    per released cell and on each tree seeing at most a beta share of the rows. DPS and the path
    requirements never imply each other: a DPS release makes no per-path claim, and a path
    requirement bounds no epsilon or delta.

    DP: a claim is at least as strong when its total epsilon is at most the required one (the
    tree count is how the budget is spent). DP and the other families never imply each other:
    eps-DP zeroes no count below k and bounds no path size, and neither a path requirement nor
    (beta, eps, delta)-DPS (a guarantee about sampled rows, with a delta) gives pure eps-DP.
    """
    if isinstance(required, DP) or isinstance(claimed, DP):
        if not isinstance(required, DP):
            return f"{claimed} is eps-differential privacy, which does not imply {required}"
        if not isinstance(claimed, DP):
            return f"{claimed} gives no eps-differential privacy; {required} is required"
        if claimed.epsilon > required.epsilon:
            return (f"{claimed} spends epsilon={claimed.epsilon:g} in total; "
                    f"{required} allows at most {required.epsilon:g}")
        return None
    if isinstance(required, DPS) or isinstance(claimed, DPS):
        if not isinstance(required, DPS):
            return f"{claimed} is a guarantee of the whole release, not of every path; {required} is required"
        if not isinstance(claimed, DPS):
            return f"{claimed} gives no (beta, epsilon, delta)-DPS guarantee; {required} is required"
        return _dps_weaker(claimed, required)
    if isinstance(required, KAnonymity):
        have = claimed.k if isinstance(claimed, KAnonymity) else claimed.l
        return (None if have >= required.k
                else f"{claimed} guarantees at most {have} tuples per path; {required} needs {required.k}")
    if not isinstance(claimed, CLDiversity):
        return f"{claimed} says nothing about class diversity; {required} is required"
    if claimed.per_leaf and not required.per_leaf:
        return f"{claimed} holds per leaf only; {required} must hold for a reader of the whole release"
    if claimed.l < required.l:
        return f"{claimed} has l={claimed.l}, below the required l={required.l}"
    if claimed.c > required.c:
        return f"{claimed} has c={claimed.c:g}, above the required c={required.c:g} (a smaller c is stricter)"
    return None


def _params(text: str, body: str, expected: set[str], optional: frozenset[str] = frozenset()) -> dict[str, str]:
    """Split ``a=1,b=2`` into a dict, insisting on exactly the expected names (and any of ``optional``)."""
    params: dict[str, str] = {}
    for item in body.split(","):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value:
            raise RequirementError(text, f"{item.strip()!r} is not PARAM=VALUE")
        if name in params:
            raise RequirementError(text, f"parameter {name!r} is given twice")
        params[name] = value
    if not expected <= set(params) <= expected | optional:
        also = f" (optionally {sorted(optional)})" if optional else ""
        raise RequirementError(text, f"expected parameters {sorted(expected)}{also}, got {sorted(params)}")
    return params


#: Largest integer parameter: tuple counts are floats, and above 2**53 a comparison with one is
#: inexact (and far above it, overflows).
MAX_INTEGER = 2**53


def _integer(text: str, name: str, value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise RequirementError(text, f"{name}={value[:40]!r} is not an integer") from None
    if number < low:
        raise RequirementError(text, f"{name}={number} must be at least {low}")
    if number > MAX_INTEGER:
        raise RequirementError(text, f"{name} has {len(value)} digits; it must be at most 2**53")
    return number


def as_requirement(value: str | Requirement, *, n_classes: int | None = None) -> Requirement:
    """``value`` parsed (`parse_requirement`), or returned as it is when it is a requirement already.

    A decoded study (`modelshare.common.study.Study`) holds its requirement parsed and checked once; the mechanisms take
    it so, or as the public string a person types.
    """
    if isinstance(value, (KAnonymity, CLDiversity, DPS, DP)):
        return value
    return parse_requirement(value, n_classes=n_classes)


def parse_requirement(text: str, *, n_classes: int | None = None) -> Requirement:
    """Parse a requirement string: ``k-anonymity:k=10``, ``cl-diversity:c=5,l=3``, ``dps:...`` or ``dp:...``.

    Parameters
    ----------
    text:
        The string as typed.
    n_classes:
        When given, (c,l)-diversity with ``l`` above the number of classes is refused: no path
        can hold ``l`` well-represented classes of fewer than ``l``.

    Raises
    ------
    RequirementError
        Malformed string or out-of-range value; the message shows the accepted grammar.
    """
    if not isinstance(text, str):
        raise RequirementError(str(text), "a requirement is a string")
    match = _SHAPE.match(text)
    if match is None:
        raise RequirementError(text, "no NAME: prefix")
    name, body = match.groups()
    if name == "k-anonymity":
        params = _params(text, body, {"k"})
        return KAnonymity(_integer(text, "k", params["k"], 1))
    if name == "cl-diversity":
        params = _params(text, body, {"c", "l"}, frozenset({"scope"}))
        scope = params.get("scope", "release")
        if scope not in ("release", "leaf"):
            raise RequirementError(text, f"scope={scope!r} must be 'release' (the default: the whole release keeps the "
                                         "promise) or 'leaf' (each leaf only, the paper's requirement)")
        try:
            c = float(params["c"])
        except ValueError:
            raise RequirementError(text, f"c={params['c']!r} is not a number") from None
        if not (math.isfinite(c) and c > 0):
            raise RequirementError(text, f"c={params['c']} must be a positive finite number")
        l = _integer(text, "l", params["l"], 2)  # noqa: E741
        if n_classes is not None and l > n_classes:
            raise RequirementError(text, f"l={l} exceeds the {n_classes} classes of the schema")
        return CLDiversity(c, l, per_leaf=scope == "leaf")
    if name == "dps":
        return _parse_dps(text, body)
    if name == "dp":
        params = _params(text, body, {"epsilon", "trees"})
        epsilon = _real(text, "epsilon", params["epsilon"])
        if epsilon <= 0:
            raise RequirementError(text, f"epsilon={params['epsilon']} must be positive")
        return DP(epsilon, _integer(text, "trees", params["trees"], 1))
    raise RequirementError(text, f"unknown requirement {name!r}")


def _real(text: str, name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise RequirementError(text, f"{name}={value!r} is not a number") from None
    if not math.isfinite(number):
        raise RequirementError(text, f"{name}={value} must be finite")
    return number


def _parse_dps(text: str, body: str) -> DPS:
    """``k=K,beta=B,epsilon=E,trees=T`` inside Theorem 1's range, with a composed delta below 1.

    Outside the range the theorem gives nothing and a composed delta >= 1 bounds nothing, so
    neither can be required or claimed.
    """
    params = _params(text, body, {"k", "beta", "epsilon", "trees"})
    k = _integer(text, "k", params["k"], 1)
    beta = _real(text, "beta", params["beta"])
    if not 0.0 < beta < 1.0:
        raise RequirementError(text, f"beta={params['beta']} must lie strictly between 0 and 1")
    epsilon = _real(text, "epsilon", params["epsilon"])
    if epsilon <= 0:
        raise RequirementError(text, f"epsilon={params['epsilon']} must be positive")
    requirement = DPS(k, beta, epsilon, _integer(text, "trees", params["trees"], 1))
    from modelshare.common.privacy.dps import DPSError  # see DPS.guarantee

    try:
        guarantee = requirement.guarantee()
    except DPSError as exc:
        raise RequirementError(text, str(exc)) from None
    if not guarantee.meaningful:
        raise RequirementError(text, f"the composed delta {guarantee.delta_total:.3g} is >= 1 and bounds nothing "
                                     f"(raise k or epsilon, or use fewer trees)")
    return requirement


@dataclass(frozen=True)
class LeafStats:
    """What a tree discloses about each leaf: ids, majority class, hit, miss, counts (or None)."""

    leaves: np.ndarray
    label: np.ndarray
    hit: np.ndarray
    miss: np.ndarray
    counts: np.ndarray | None
    disclosure: Disclosure

    @property
    def total(self) -> np.ndarray:
        total: np.ndarray = self.hit + self.miss
        return total


def leaf_stats(tree: Tree) -> LeafStats:
    """Collect the disclosed statistics of every leaf of ``tree`` into arrays (leaf order)."""
    leaves = np.array(tree.leaves, dtype=np.int64)
    nodes = [tree.nodes[i] for i in leaves]
    counts = np.array([n.counts for n in nodes], dtype=np.float64) if tree.disclosure == "counts" else None
    return LeafStats(
        leaves=leaves,
        label=np.array([n.label for n in nodes], dtype=np.int64),
        hit=np.array([n.hit for n in nodes], dtype=np.float64),
        miss=np.array([n.miss for n in nodes], dtype=np.float64),
        counts=counts,
        disclosure=tree.disclosure,
    )


def cl_diverse_hit_miss(hit: np.ndarray, miss: np.ndarray, c: float, l: int) -> np.ndarray:  # noqa: E741
    """Sharkey et al.'s (c,l)-diversity of a path from hit and miss: l <= miss+1 and hit < c*miss/(l-1)."""
    hit = np.asarray(hit, dtype=np.float64)
    miss = np.asarray(miss, dtype=np.float64)
    return (miss + 1 >= l) & (hit < c * miss / (l - 1))


def cl_diverse_exact(counts: np.ndarray, c: float, l: int) -> np.ndarray:  # noqa: E741
    """Machanavajjhala et al.'s (c,l)-diversity per row of ``counts``: r1 < c * (r_l + ... + r_m)."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2:
        raise ValueError(f"counts must be a (leaves, classes) matrix, got shape {counts.shape}")
    ranked = -np.sort(-counts, axis=1)
    tail = ranked[:, l - 1 :].sum(axis=1)
    diverse: np.ndarray = ranked[:, 0] < c * tail
    return diverse


@dataclass(frozen=True)
class PathRule:
    """A path requirement as a test on class-count vectors, in the form a disclosure allows.

    What a requirement-aware learner (`modelshare.common.trees.learners.admissible`) checks each candidate
    child with: ``ok`` says whether a leaf with these counts would meet the requirement once
    released with ``disclosure`` (hit = majority count and miss = the rest under ``hit_miss``),
    ``deficit`` how far it is from meeting it, in rows, so that grouping can move towards it.
    """

    requirement: PathRequirement
    disclosure: Disclosure

    def ok(self, counts: np.ndarray) -> np.ndarray:
        """Per row of ``counts`` (shape ``(n, classes)``): would a leaf with these counts pass?"""
        counts = np.asarray(counts, dtype=np.float64)
        hit = counts.max(axis=1)
        if isinstance(self.requirement, KAnonymity):  # its check reads the total alone: hit + miss, as LeafStats
            anonymous: np.ndarray = hit + (counts.sum(axis=1) - hit) >= self.requirement.k
            return anonymous
        stats = LeafStats(np.arange(counts.shape[0]), counts.argmax(axis=1), hit, counts.sum(axis=1) - hit,
                          counts if self.disclosure == "counts" else None, self.disclosure)
        return self.requirement.check(stats)

    def fewest_rows(self) -> int:
        """A lower bound on the rows of a passing leaf: k, or l (l classes present) for (c,l)-diversity."""
        return self.requirement.k if isinstance(self.requirement, KAnonymity) else self.requirement.l

    def deficit(self, counts: np.ndarray) -> np.ndarray:
        """Per row: 0 where `ok`, else roughly how many rows (of other classes, for diversity) are missing."""
        counts = np.asarray(counts, dtype=np.float64)
        total = counts.sum(axis=1)
        requirement = self.requirement
        if isinstance(requirement, KAnonymity):
            short = requirement.k - total
        else:
            c, l = requirement.c, requirement.l  # noqa: E741
            ranked = -np.sort(-counts, axis=1)
            if self.disclosure == "counts":
                short = ranked[:, 0] / c - ranked[:, l - 1:].sum(axis=1)
            else:
                miss = total - ranked[:, 0]
                short = np.maximum(l - 1 - miss, ranked[:, 0] * (l - 1) / c - miss)
        # a failing leaf is never at 0: the strict inequalities fail on equality too
        return np.where(self.ok(counts), 0.0, np.maximum(short, 0.0) + 1e-6)


def path_rule(requirement: str | PathRequirement, disclosure: Disclosure, *, n_classes: int | None = None) -> PathRule:
    """The `PathRule` of a k-anonymity or (c,l)-diversity requirement (string or parsed) under ``disclosure``.

    Raises
    ------
    RequirementError
        The requirement is malformed or not a per-path one (dps and dp say nothing about a leaf).
    """
    parsed = parse_requirement(requirement, n_classes=n_classes) if isinstance(requirement, str) else requirement
    if not isinstance(parsed, (KAnonymity, CLDiversity)):
        raise RequirementError(str(requirement), "a requirement-aware learner needs a per-path requirement "
                                                 "(k-anonymity or cl-diversity)")
    return PathRule(parsed, disclosure)
