"""Anonymity requirements on tree paths: k-anonymity and (c,l)-diversity (Sharkey et al. §3.1).

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
from typing import Union

import numpy as np

from common.tree import Disclosure, Tree

__all__ = [
    "GRAMMAR",
    "RequirementError",
    "KAnonymity",
    "CLDiversity",
    "Requirement",
    "parse_requirement",
    "weaker_than",
    "LeafStats",
    "leaf_stats",
    "cl_diverse_hit_miss",
    "cl_diverse_exact",
]

GRAMMAR = (
    "a requirement is NAME:PARAM=VALUE[,PARAM=VALUE]; accepted: "
    "'k-anonymity:k=K' (integer K >= 1) or 'cl-diversity:c=C,l=L' (real C > 0, integer L >= 2)"
)


class RequirementError(ValueError):
    """A requirement string that does not follow the grammar, or values outside their range."""

    def __init__(self, text: str, why: str) -> None:
        super().__init__(f"bad requirement {text!r}: {why}; {GRAMMAR}")
        self.text = text
        self.why = why


@dataclass(frozen=True)
class KAnonymity:
    """Every path holds at least ``k`` training tuples (hit + miss >= k)."""

    k: int

    def __str__(self) -> str:
        return f"k-anonymity:k={self.k}"

    def check(self, stats: "LeafStats") -> np.ndarray:
        """Per leaf: does it hold at least k tuples?"""
        return stats.total >= self.k


@dataclass(frozen=True)
class CLDiversity:
    """Every path is (c,l)-diverse, in the form its disclosure allows (see the module docstring)."""

    c: float
    l: int  # noqa: E741 - the papers' name

    def __str__(self) -> str:
        c = str(int(self.c)) if float(self.c).is_integer() else repr(float(self.c))
        return f"cl-diversity:c={c},l={self.l}"

    def check(self, stats: "LeafStats") -> np.ndarray:
        """Per leaf: exact form under counts disclosure, hit/miss form otherwise."""
        if stats.counts is not None:
            return cl_diverse_exact(stats.counts, self.c, self.l)
        return cl_diverse_hit_miss(stats.hit, stats.miss, self.c, self.l)


Requirement = Union[KAnonymity, CLDiversity]

_SHAPE = re.compile(r"^\s*([a-z-]+)\s*:\s*(.*?)\s*$")



def weaker_than(claimed: Requirement, required: Requirement) -> str | None:
    """Why ``claimed`` does not imply ``required``, or None when every path meeting it meets ``required``.

    k-anonymity is monotone in k. (c,l)-diversity tightens as l grows and c shrinks, in both the
    exact and the hit/miss form (a larger l drops terms from the right-hand sum, a smaller c scales
    it down). A (c,l)-diverse path holds at least l tuples in either form (l - 1 misses plus a
    majority of at least one), so it implies k-anonymity for k <= l; k-anonymity never implies
    diversity.
    """
    if isinstance(required, KAnonymity):
        have = claimed.k if isinstance(claimed, KAnonymity) else claimed.l
        return None if have >= required.k else f"{claimed} guarantees at most {have} tuples per path; {required} needs {required.k}"
    if not isinstance(claimed, CLDiversity):
        return f"{claimed} says nothing about class diversity; {required} is required"
    if claimed.l < required.l:
        return f"{claimed} has l={claimed.l}, below the required l={required.l}"
    if claimed.c > required.c:
        return f"{claimed} has c={claimed.c:g}, above the required c={required.c:g} (a smaller c is stricter)"
    return None

def _params(text: str, body: str, expected: set[str]) -> dict[str, str]:
    """Split ``a=1,b=2`` into a dict, insisting on exactly the expected names."""
    params: dict[str, str] = {}
    for item in body.split(","):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value:
            raise RequirementError(text, f"{item.strip()!r} is not PARAM=VALUE")
        if name in params:
            raise RequirementError(text, f"parameter {name!r} is given twice")
        params[name] = value
    if set(params) != expected:
        raise RequirementError(text, f"expected parameters {sorted(expected)}, got {sorted(params)}")
    return params


def _integer(text: str, name: str, value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise RequirementError(text, f"{name}={value!r} is not an integer") from None
    if number < low:
        raise RequirementError(text, f"{name}={number} must be at least {low}")
    return number


def parse_requirement(text: str, *, n_classes: int | None = None) -> Requirement:
    """Parse a requirement string such as ``k-anonymity:k=10`` or ``cl-diversity:c=5,l=3``.

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
        params = _params(text, body, {"c", "l"})
        try:
            c = float(params["c"])
        except ValueError:
            raise RequirementError(text, f"c={params['c']!r} is not a number") from None
        if not (math.isfinite(c) and c > 0):
            raise RequirementError(text, f"c={params['c']} must be a positive finite number")
        l = _integer(text, "l", params["l"], 2)  # noqa: E741
        if n_classes is not None and l > n_classes:
            raise RequirementError(text, f"l={l} exceeds the {n_classes} classes of the schema")
        return CLDiversity(c, l)
    raise RequirementError(text, f"unknown requirement {name!r}")


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
        return self.hit + self.miss


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
    return ranked[:, 0] < c * tail
