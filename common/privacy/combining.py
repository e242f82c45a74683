"""The combining reader: what someone who reads every released path believes of a person's class.

A per-path requirement is checked leaf by leaf, but a path that groups categories into a set (say
``health in {not_recom, priority}``) is unpicked by the other paths, which group them differently.
`CombiningReader` is that reader made precise. From the released numbers alone (each path's
allowed category sets and class mass: the counts, or hit with the miss spread evenly over the
other classes under hit/miss) it fits, per categorical attribute that some path constrains, the
law ``theta_j[v, c]`` of the attribute's value given the class by EM over every released path
(`class_set_law`; the same law `modelshare.miner_node.onpath` draws from), then believes, of a person with
values ``x`` in the leaf of path ``p``::

    q(c) ∝ W_p[c] * prod_j theta_j[x_j, c] / Z_pj[c],   Z_pj[c] = sum over v in A_pj of theta_j[v, c]

over the attributes ``j`` that path ``p`` constrains to a set of two or more (but not all)
categories: naive Bayes inside the leaf. A set of one category adds nothing beyond the leaf and
an attribute the path leaves free is not used (the reader would only apply the population law
there; docs/privacy.md, limit 11).

`release_verdict` is the release-level check of a (c,l)-diversity requirement: for every leaf and
every combination of values its sets allow, the believed distribution ``q`` must itself be
(c,l)-diverse in the exact form (Machanavajjhala et al.), so no person's belief exceeds what a
(c,l)-diverse leaf may show (top share below ``c / (c + l - 1)``). Combinations are enumerated
exactly up to `MAX_COMBINATIONS` per leaf; a leaf with more is checked on a sound upper bound of
its top share (`_top_share_bound`, exact for l = 2, necessary only for l > 2). The verdict also
estimates how many persons each combination holds (``sum_c W_p[c] prod_j theta_j[x_j,c]/Z_pj[c]``),
which gives the share of persons a reader is confident about and, for k-anonymity, the smallest
estimated group of persons sharing a leaf and their set values.

`row_beliefs` is the same reader applied to the owner's own rows (each row's leaf and values):
the figures an owner sees locally and never sends (`ReaderFigures`).

`read_study` is the reader of every release of a study, which no owner can run: the miner fits one
reader over every owner's released paths and judges each owner's leaves with it against that
owner's own requirement (`StudyReading`). Sites group categories differently, so a study can let
this reader believe beyond the per-leaf promise although every owner's own release passes its
reader: syntactic requirements do not compose across owners (docs/privacy.md, "A reader of every
release").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.privacy.requirements import CLDiversity, PathRequirement, cl_diverse_exact, parse_requirement
from modelshare.common.trees.regression import RegressionTree
from modelshare.common.trees.tree import CategorySet, Tree

__all__ = ["EM_ITERATIONS", "MAX_COMBINATIONS", "class_set_law", "ReleasedPaths", "CombiningReader",
           "LeafFinding", "ReaderVerdict", "release_verdict", "OwnerReading", "StudyReading", "read_study",
           "ReaderFigures", "reader_figures", "owner_readers", "cap"]

#: EM iterations of `class_set_law`.
EM_ITERATIONS = 10
#: Value combinations of one leaf enumerated exactly; beyond, the leaf is checked on a bound.
MAX_COMBINATIONS = 1 << 16
#: Pseudo-count added to every (category, class) cell per iteration, so no category gets probability 0.
_SMOOTHING = 0.5


def cap(requirement: CLDiversity) -> float:
    """The largest share of one class a (c,l)-diverse class distribution may show: ``c / (c + l - 1)``."""
    return requirement.c / (requirement.c + requirement.l - 1)


def class_set_law(allowed: np.ndarray, mass: np.ndarray, iterations: int = EM_ITERATIONS) -> np.ndarray:
    """``theta`` (categories, classes): each class's law over the categories, by EM over released paths.

    ``allowed`` (paths, categories) is each path's allowed set, ``mass`` (paths, classes) its class
    mass. From ``theta = 1 / V``, ``iterations`` times::

        Z = A @ theta
        N = theta * (A.T @ (W / Z, 0 where Z == 0)) + 0.5
        theta = N / N.sum(axis=0)
    """
    if allowed.ndim != 2 or mass.ndim != 2 or allowed.shape[0] != mass.shape[0]:
        raise ValueError(f"allowed {allowed.shape} and mass {mass.shape} must be (paths, "
                         "categories) and (paths, classes)")
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    A = allowed.astype(np.float64)
    theta = np.full((A.shape[1], mass.shape[1]), 1.0 / A.shape[1])
    for _ in range(iterations):
        Z = A @ theta
        ratio = np.divide(mass, Z, out=np.zeros_like(Z), where=Z > 0)
        N = theta * (A.T @ ratio) + _SMOOTHING
        theta = N / N.sum(axis=0)
    return theta


@dataclass(frozen=True)
class ReleasedPaths:
    """One released tree's paths as the reader sees them: leaf ids, class mass, allowed category sets.

    ``leaves`` (paths,) are node indices in `Tree.paths` order, ``mass`` (paths, classes) the class
    mass, ``allowed[j]`` (paths, categories) each categorical attribute's allowed set.
    """

    tree: Tree
    leaves: np.ndarray
    mass: np.ndarray
    allowed: dict[int, np.ndarray]

    @classmethod
    def of(cls, tree: Tree) -> ReleasedPaths:
        schema = tree.schema
        paths = tree.paths()
        n_classes = schema.n_classes
        mass = np.zeros((len(paths), n_classes))
        allowed = {j: np.ones((len(paths), a.size), dtype=bool) for j, a in enumerate(schema.attributes)
                   if isinstance(a, CategoricalAttribute)}
        for p, path in enumerate(paths):
            total = max(path.total, 0.0)
            if path.counts is not None:
                mass[p] = np.clip(path.counts, 0, None)
            elif total > 0:
                mass[p] = path.miss / max(n_classes - 1, 1)
                mass[p, path.label] = path.hit
            for j, constraint in path.constraints:
                if j in allowed and isinstance(constraint, CategorySet):
                    row = np.zeros(allowed[j].shape[1], dtype=bool)
                    row[list(constraint.codes)] = True
                    allowed[j][p] = row
        return cls(tree, np.array([p.leaf for p in paths], dtype=np.int64), mass, allowed)

    def sets(self, j: int) -> np.ndarray:
        """(paths,) whether each path constrains attribute ``j`` to a set of two or more, but not all, categories."""
        n = self.allowed[j].sum(axis=1)
        narrowed: np.ndarray = (n > 1) & (n < self.allowed[j].shape[1])
        return narrowed


@dataclass(frozen=True)
class CombiningReader:
    """The law ``theta[j]`` (categories, classes) per categorical attribute some released path constrains.

    Build with `from_trees` on every tree a reader holds: one release, or every release of a study.
    """

    schema: Schema
    theta: dict[int, np.ndarray]
    iterations: int
    free: bool = False
    """Also apply the law to attributes a path leaves free (the population reader, measured for owners only)."""

    @classmethod
    def from_trees(cls, trees: Sequence[Tree | ReleasedPaths], iterations: int = EM_ITERATIONS,
                   free: bool = False) -> CombiningReader:
        """Fit ``theta`` for each constrained categorical attribute over every path of ``trees`` (one schema)."""
        if not trees:
            raise ValueError("a combining reader needs at least one released tree")
        compiled = [t if isinstance(t, ReleasedPaths) else ReleasedPaths.of(t) for t in trees]
        schema = compiled[0].tree.schema
        mass = np.vstack([c.mass for c in compiled])
        theta = {}
        for j in compiled[0].allowed:
            allowed = np.vstack([c.allowed[j] for c in compiled])
            if allowed.all():
                continue
            theta[j] = class_set_law(allowed, mass, iterations)
        return cls(schema, theta, iterations, free)

    def _log_factors(self, paths: ReleasedPaths, p: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Per attribute path ``p`` constrains to a set: (attribute,
        allowed codes, log theta / Z per code and class)."""
        found = []
        for j, theta in self.theta.items():
            row = paths.allowed[j][p]
            n = int(row.sum())
            if n <= 1 or (n == row.size and not self.free):
                continue
            codes = np.flatnonzero(row)
            part = theta[codes]
            found.append((j, codes, np.log(part) - np.log(part.sum(axis=0))[None, :]))
        return found

    def leaf_beliefs(self, paths: ReleasedPaths, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Every value combination of path ``p``'s sets: (codes (m, sets), beliefs (m, classes), persons (m,)).

        None when the leaf holds no mass or has more than `MAX_COMBINATIONS` combinations.
        ``persons`` is the reader's estimate of how many of the leaf's rows hold each combination.
        """
        mass = paths.mass[p]
        if mass.sum() <= 0:
            return None
        factors = self._log_factors(paths, p)
        if math.prod(len(codes) for _, codes, _ in factors) > MAX_COMBINATIONS:
            return None
        with np.errstate(divide="ignore"):
            log_w = np.log(mass)
        acc = log_w[None, :]
        combos = np.zeros((1, 0), dtype=np.int64)
        for _, codes, log_f in factors:
            acc = (acc[:, None, :] + log_f[None, :, :]).reshape(-1, mass.size)
            combos = np.hstack([np.repeat(combos, len(codes), axis=0), np.tile(codes, combos.shape[0])[:, None]])
        top = acc.max(axis=1, keepdims=True)
        weights = np.exp(acc - top)
        persons = weights.sum(axis=1) * np.exp(top[:, 0])
        return combos, weights / weights.sum(axis=1, keepdims=True), persons

    def top_share_bound(self, paths: ReleasedPaths, p: int) -> float:
        """A sound upper bound on the largest belief in any class over all combinations of path ``p`` (no enumeration).

        For class a, ``q_a = 1 / (1 + sum_b r_b(x))`` with ``r_b = W_b f_b(x) / (W_a f_a(x))``; each
        ``r_b`` is a product over attributes, so its minimum over x is the product of per-attribute
        minima, and the sum of minima is at most the minimum of the sum.
        """
        mass = paths.mass[p]
        factors = self._log_factors(paths, p)
        best = 0.0
        for a in np.flatnonzero(mass > 0):
            log_r = np.log(np.where(mass > 0, mass, 1.0)) - math.log(mass[a])
            for _, _, log_f in factors:
                log_r = log_r + (log_f - log_f[:, [a]]).min(axis=0)
            others = [b for b in np.flatnonzero(mass > 0) if b != a]
            best = max(best, 1.0 / (1.0 + float(np.exp(log_r[others]).sum())))
        return best

    def row_beliefs(self, tree: Tree, X: np.ndarray) -> np.ndarray:
        """(rows, classes): the reader's belief about each row of ``X`` (encoded), from its leaf and set values."""
        paths = ReleasedPaths.of(tree)
        path_of = np.full(len(tree.nodes), -1, dtype=np.int64)
        path_of[paths.leaves] = np.arange(paths.leaves.size)
        pid = path_of[tree.apply(X)]
        if (pid < 0).any():
            raise ValueError("a row stops at an inner node of the released tree; the reader needs every row in a leaf")
        with np.errstate(divide="ignore"):
            log_q = np.log(paths.mass)[pid]
        for j, theta in self.theta.items():
            uses = (paths.allowed[j].sum(axis=1) > 1 if self.free else paths.sets(j))[pid]
            if not uses.any():
                continue
            log_z = np.log(paths.allowed[j].astype(np.float64) @ theta)
            rows = np.flatnonzero(uses)
            values = X[rows, j].astype(np.int64)
            log_q[rows] += np.log(theta[values]) - log_z[pid[rows]]
        top = log_q.max(axis=1, keepdims=True)
        q = np.exp(log_q - np.where(np.isfinite(top), top, 0.0))
        sums = q.sum(axis=1, keepdims=True)
        posterior: np.ndarray = np.divide(q, sums, out=np.full_like(q, 1.0 / q.shape[1]), where=sums > 0)
        return posterior


@dataclass(frozen=True)
class LeafFinding:
    """A leaf where the reader's belief breaks the requirement: tree, leaf, values, belief, estimated persons."""

    tree: int
    leaf: int
    values: str
    belief: tuple[float, ...]
    persons: float

    def describe(self) -> str:
        top = max(self.belief)
        who = f" for {self.values}" if self.values else ""
        return (f"tree {self.tree} leaf {self.leaf}{who}: belief {top:.3f} in class {self.belief.index(top)} "
                f"(about {self.persons:.1f} persons)")


@dataclass(frozen=True)
class ReaderVerdict:
    """What the combining reader believes of a release: failing leaves, the largest belief, estimated persons.

    ``confident_share`` is the estimated share of released persons whose belief breaks the
    requirement (a leaf checked on its bound counts whole); ``smallest_group`` the fewest estimated
    persons sharing a leaf and its set values (the k-anonymity analogue), ``leaves`` how many were read,
    ``persons`` the released persons read (every leaf's class mass added up).
    """

    requirement: CLDiversity | None
    findings: tuple[LeafFinding, ...]
    largest_belief: float
    confident_share: float
    smallest_group: float
    leaves: int
    bounded_leaves: int
    persons: float

    @property
    def passed(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, object]:
        return {"requirement": None if self.requirement is None else str(self.requirement), "passed": self.passed,
                "largest_belief": self.largest_belief, "confident_share": self.confident_share,
                "smallest_group": self.smallest_group, "leaves": self.leaves, "bounded_leaves": self.bounded_leaves,
                "persons": self.persons, "findings": [f.describe() for f in self.findings]}

    def describe(self) -> str:
        cap_text = ("" if self.requirement is None
                    else f" (a {self.requirement} leaf shows at most {cap(self.requirement):.3f})")
        text = (f"a reader who combines all {self.leaves} released leaves believes at most {self.largest_belief:.3f} "
                f"of a person's class{cap_text}; the smallest estimated group sharing a leaf and its set values holds "
                f"{self.smallest_group:.3g} persons")
        if self.requirement is not None:
            text += (f"; {len(self.findings)} leaves break the requirement for about "
                     f"{100 * self.confident_share:.1f}% of persons")
        if self.bounded_leaves:
            text += f"; {self.bounded_leaves} leaves with over {MAX_COMBINATIONS} value combinations checked on a bound"
        return text


def _describe_values(schema: Schema, attributes: list[int], codes: np.ndarray) -> str:
    parts = []
    for j, code in zip(attributes, codes, strict=False):
        attr = schema.attributes[j]
        assert isinstance(attr, CategoricalAttribute)
        parts.append(f"{attr.name} = {attr.categories[int(code)]}")
    return ", ".join(parts)


def release_verdict(trees: Sequence[Tree], requirement: CLDiversity | None,
                    reader: CombiningReader | None = None) -> ReaderVerdict:
    """Read every leaf of ``trees`` as the combining reader (module docstring) and check ``requirement`` on its beliefs.

    ``reader`` defaults to the one fitted on ``trees`` themselves (one release); the miner passes
    the reader of a whole study to judge one owner's leaves against everything released.
    ``requirement`` None measures without judging (k-anonymity, a per-leaf-only release).
    """
    compiled = [ReleasedPaths.of(t) for t in trees]
    reader = reader or CombiningReader.from_trees(compiled)
    findings: list[LeafFinding] = []
    largest, confident, total, smallest, bounded, leaves = 0.0, 0.0, 0.0, math.inf, 0, 0
    for t, paths in enumerate(compiled):
        schema = paths.tree.schema
        for p in range(paths.leaves.size):
            leaves += 1
            mass = float(paths.mass[p].sum())
            if mass <= 0:
                continue
            total += mass
            found = reader.leaf_beliefs(paths, p)
            if found is None:
                bounded += 1
                bound = reader.top_share_bound(paths, p)
                largest = max(largest, bound)
                if requirement is not None and bound >= cap(requirement):
                    confident += mass
                    findings.append(LeafFinding(t, int(paths.leaves[p]), "some values of its sets (bound)",
                                                (bound,), mass))
                continue
            combos, beliefs, persons = found
            largest = max(largest, float(beliefs.max()))
            smallest = min(smallest, float(persons.min()))
            if requirement is None:
                continue
            bad = ~cl_diverse_exact(beliefs, requirement.c, requirement.l)
            if bad.any():
                confident += float(persons[bad].sum())
                worst = int(np.argmax(np.where(bad, beliefs.max(axis=1), -1.0)))
                attributes = [j for j, _, _ in reader._log_factors(paths, p)]
                findings.append(LeafFinding(t, int(paths.leaves[p]),
                                            _describe_values(schema, attributes, combos[worst]),
                                            tuple(float(v) for v in beliefs[worst]), float(persons[bad].sum())))
    return ReaderVerdict(requirement, tuple(findings), largest, confident / total if total > 0 else 0.0,
                         smallest if math.isfinite(smallest) else 0.0, leaves, bounded, total)


#: What every study-level sentence ends with: the reason the figure exists.
NO_COMPOSITION = ("syntactic requirements do not compose across owners and studies — use a dp mechanism "
                  "(laplace-rdt, dpea, dpea-nb, diffpets) for a guarantee that does")


@dataclass(frozen=True)
class OwnerReading:
    """One owner's leaves read by the reader of every release: its requirement and the verdict against it.

    The verdict judges a (c,l)-diversity requirement and only measures under k-anonymity (its ``requirement`` None).
    """

    owner: str
    requirement: PathRequirement
    verdict: ReaderVerdict


@dataclass(frozen=True)
class StudyReading:
    """What a reader of every release of a study believes (`read_study`).

    ``cap`` is the per-leaf promise's top share ``c / (c + l - 1)``, the loosest over the owners that
    claim (c,l)-diversity (None when none does); ``confident_share`` the estimated share of those
    owners' released persons, each owner weighted by the persons its release holds, whom the reader
    believes beyond their owner's requirement (None when no owner claims (c,l)-diversity);
    ``largest_belief`` and ``smallest_group`` are over every owner read; ``skipped`` names the
    releases not read and why.
    """

    owners: tuple[OwnerReading, ...]
    trees: int
    cap: float | None
    largest_belief: float
    confident_share: float | None
    smallest_group: float
    skipped: tuple[str, ...] = ()

    def describe(self) -> str:
        owners = len(self.owners)
        read = (f"a reader of every release ({self.trees} tree{'s' * (self.trees != 1)} of {owners} "
                f"owner{'s' * (owners != 1)})")
        if self.cap is None or self.confident_share is None:
            text = (f"{read} believes at most {self.largest_belief:.3f} of a person's class; the smallest estimated "
                    f"group sharing a leaf and its set values holds {self.smallest_group:.3g} persons")
        elif self.confident_share > 0:
            text = (f"{read} believes some class beyond the per-leaf promise (top share c/(c+l-1) = {self.cap:.3f}) "
                    f"for about {100 * self.confident_share:.1f}% of released persons "
                    f"(largest belief {self.largest_belief:.3f})")
        else:
            text = (f"{read} believes no class beyond the per-leaf promise (top share c/(c+l-1) = {self.cap:.3f}) "
                    f"of any released person (largest belief {self.largest_belief:.3f})")
        skipped = f"; not read: {'; '.join(self.skipped)}" if self.skipped else ""
        return f"{text}; {NO_COMPOSITION}{skipped}"


def read_study(releases: Sequence[tuple[str, Sequence[Tree], PathRequirement]],
               skipped: Sequence[str] = ()) -> StudyReading | None:
    """The reader of every release of a study: ``(owner, trees, requirement)`` per path release, one schema.

    Fits one `CombiningReader` over every tree of every owner and judges each owner's leaves with it
    (`release_verdict`) against the owner's requirement when it is (c,l)-diversity (its scope
    aside: the figure is what the study discloses, not what the owner promised), measures them only
    under k-anonymity, and aggregates (`StudyReading`). ``skipped`` (releases not read, each with why)
    is carried into the reading. None when there is no release to read.
    """
    if not releases:
        return None
    reader = CombiningReader.from_trees([tree for _, trees, _ in releases for tree in trees])
    owners = tuple(OwnerReading(owner, requirement, release_verdict(
        trees, requirement if isinstance(requirement, CLDiversity) else None, reader=reader))
        for owner, trees, requirement in releases)
    judged = [(o.verdict, o.requirement) for o in owners if isinstance(o.requirement, CLDiversity)]
    persons = sum(v.persons for v, _ in judged)
    share = ((sum(v.confident_share * v.persons for v, _ in judged) / persons if persons > 0 else 0.0)
             if judged else None)
    groups = [o.verdict.smallest_group for o in owners if o.verdict.smallest_group > 0]  # 0: no leaf enumerated
    return StudyReading(owners, sum(len(trees) for _, trees, _ in releases),
                        max((cap(r) for _, r in judged), default=None),
                        max(o.verdict.largest_belief for o in owners), share, min(groups, default=0.0),
                        tuple(skipped))


@dataclass(frozen=True)
class ReaderFigures:
    """The reader on an owner's own rows: share of persons believed beyond the cap, how often right, largest belief.

    Computed where the rows are and never sent (`reader_figures`).
    """

    rows: int
    cap: float
    confident: int
    right: int
    largest_belief: float
    population: bool = False
    """The population reader: the same law applied also to the attributes a path leaves free (not bounded)."""

    @property
    def who(self) -> str:
        return ("a reader who also applies the released law to the attributes a path leaves free (the population "
                "law, which no syntactic requirement bounds)" if self.population
                else "a reader who combines the released leaves")

    @property
    def confident_share(self) -> float:
        return self.confident / self.rows if self.rows else 0.0

    @property
    def right_share(self) -> float:
        return self.right / self.confident if self.confident else 0.0

    def describe(self) -> str:
        if not self.confident:
            return (f"{self.who} believes at most {self.largest_belief:.3f} of any of "
                    f"the {self.rows} persons' classes; none above {self.cap:.3f}")
        return (f"{self.who} believes some class above {self.cap:.3f} for "
                f"{self.confident} of {self.rows} persons ({100 * self.confident_share:.1f}%), right for "
                f"{100 * self.right_share:.0f}% of them; largest belief {self.largest_belief:.3f}")

    def to_dict(self) -> dict[str, float | int]:
        return {"rows": self.rows, "cap": self.cap, "confident": self.confident, "right": self.right,
                "largest_belief": self.largest_belief, "population": self.population}


def reader_figures(trees: Sequence[Tree], X: np.ndarray, y: np.ndarray, cap_share: float,
                   reader: CombiningReader | None = None, *, population: bool = False) -> ReaderFigures:
    """The combining reader of ``trees`` (or ``reader``) on the owner's rows ``X``, ``y`` against ``cap_share``.

    ``population`` reads as the population reader (``CombiningReader.free``). A one-tree release reads each
    row in its leaf; for an ensemble each row's largest belief over the trees counts.
    """
    reader = reader or CombiningReader.from_trees(list(trees), free=population)
    y = np.asarray(y, dtype=np.int64)
    if y.size == 0:
        return ReaderFigures(0, cap_share, 0, 0, 0.0, reader.free)
    best = np.zeros(y.size)
    guess = np.zeros(y.size, dtype=np.int64)
    for tree in trees:
        q = reader.row_beliefs(tree, X)
        top = q.max(axis=1)
        better = top > best
        best = np.where(better, top, best)
        guess = np.where(better, q.argmax(axis=1), guess)
    confident = best > cap_share
    return ReaderFigures(int(y.size), cap_share, int(confident.sum()), int((confident & (guess == y)).sum()),
                         float(best.max()), reader.free)


def owner_readers(trees: Sequence[Tree] | Sequence[RegressionTree], X: np.ndarray, y: np.ndarray,
                  requirement: str | None) -> tuple[ReaderFigures, ...]:
    """What an owner sees of its one-tree (c,l) release on its own rows: the combining reader, then the population
    reader, each against the per-leaf cap; none for any other release (never sent: `ReaderFigures`)."""
    if len(trees) != 1 or requirement is None:
        return ()
    tree = trees[0]
    if not isinstance(tree, Tree):
        return ()
    parsed = parse_requirement(requirement)
    if not isinstance(parsed, CLDiversity):
        return ()
    return tuple(reader_figures((tree,), X, y, cap(parsed), population=population) for population in (False, True))
