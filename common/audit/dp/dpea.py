"""DPEA's audit target (`modelshare.common.audit.dp.estimate.AuditTarget`) and the tiny adversarial table it is for.

DPEA's structure is chosen from the data: a release is (per tree) a whole structure, with its
all-zero leaves dropped, plus the other leaves' noisy counts. On a small schema and depth every full
structure can be listed, and the exact sampler gives each one's probability on D and on D' = D + r
(`DPEA.structure_log_probs`). Two targets use that:

* `DpeaReleaseTarget`, the registry's (default) target, runs DPEA's registered release path end to
  end per trial (`modelshare.common.audit.dp.blackbox`: the registry trainer, whole-tree embedding, the
  registered public domain) and scores the released trees by their *exact* log-likelihood ratio under the
  claimed law: ln P(tree) is the log of the sum, over the listed structures the released tree is
  consistent with, of P(structure) times the count log-pmf of each of its (leaf, class) cells (0 at
  a dropped leaf). Each trial trains DPEA once, so the CLI default is a few thousand trials per table.
* `DpeaTarget`, the exact-law *fast path*, for the trial counts (10^6) that DPEA's sharper-budget
  variants need and for embedding depths the registered trainer never uses. It samples the release
  law directly instead of re-running the mechanism; the tests check that law, structure and r's
  released count, against DPEA's real releases. Its design:

  *Sufficient statistic.* Given the structure, every leaf count except r's (leaf, class) cell has
  the same law under D and D' (Laplace noise per cell), and dropping all-zero subtrees is a function
  of the structure and the counts. So (structure, r's released cell count) per tree carries the whole
  likelihood ratio; the audit observes that pair, the release before the dropping post-processing
  (a violation there is a violation of the accounting; the dropping can only hide information).
  *Sampling.* Structures are drawn from the audited mechanism's exact law (its own
  ``structure_log_probs``, so a subclass with a broken selection budget is audited as such; the
  tests check that law against `DPEA.fit`'s draws), r's cell count from its own ``noisy_counts``.
  Vectorised over trials (no training per trial), so it reaches the 10^6 trials per table the tests need.
  *Score: the Neyman-Pearson statistic.* ln P'(release) - ln P(release) under the *claimed* law (a
  correct `DPEA` at the same setting): the structure's log-probability ratio plus r's count
  log-pmf ratio at the claimed noise scale (`modelshare.common.privacy.noise.discrete_laplace_log_pmf`, the same
  clamped, rounded Laplace), summed over the trees. Thresholding it gives the events on which a correct
  release comes closest to its bound.
  *Exact epsilon of the pair.* With the structures listed, the privacy loss of the audited
  mechanism on (D, D') is computable exactly (`exact_epsilon`): the largest |ln P'/P| over
  structures and released counts (counts beyond m + 2 or below m - 1 add nothing new), times the
  number of trees. The empirical audit is a statistical lower bound on it.

The added row r is chosen among the domain's points (all of them when the domain is small, else
sampled table rows and random points) with every class, maximising the symmetrised KL divergence
between the structure laws on D and D'. Note (module docstring of `modelshare.common.mechanisms.dpea`): all of DPEA's
scores are monotone under adding a row, which is what lets the default ``monotone`` selection use
beta = eps' / Δq'; its claim is then nearly tight on the audit pair, so a selection or leaf noise
sharper than stated shows. Under the paper's beta = eps' / (2 Δq') a correct tree's exact epsilon
is at most (ceil(D/d)/2 + 1) eps', a loose claim that hides some broken variants.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import logsumexp

from modelshare.common.audit.dp.blackbox import ReleasePath, describe_added_row
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.mechanisms.dpea import DPEA, MECHANISM, Domain, Structure, registered_dpea
from modelshare.common.privacy.noise import SeededNoise, discrete_laplace_log_pmf
from modelshare.common.trees.learners._data import check_xy
from modelshare.common.trees.tree import Tree

__all__ = ["DpeaReleaseTarget", "DpeaTarget", "tiny_table", "ADDED_ROW_CANDIDATES", "MAX_STRUCTURES", "dpea_target"]

ADDED_ROW_CANDIDATES = 64  # domain points tried as r (each with every class) when the domain is larger
MAX_STRUCTURES = 20_000  # full structures the target lists; more is refused (lower the depth)
_IMPOSSIBLE = 50.0  # score of a tree the claimed law allows under one table only
_WHERE = "where it moves the claimed law of the structures the most"
_COUNT_MARGIN = 3  # released counts max(0, m - 3) .. m + 2 take every value of the count log-ratio (constant beyond)


def tiny_table() -> tuple[Schema, np.ndarray, np.ndarray]:
    """The audits' D: six rows over three binary attributes a, b, c whose class is c ("yes" iff c = 1).

    Found by searching small tables for the largest exact privacy loss of the broken variants
    (`DpeaTarget.exact_epsilon`): every subtree that splits on c classifies D perfectly, so the
    selections concentrate on them, and an added row contradicting the rule (class "no" with c = 1)
    changes the score of the few subtrees that isolate it, which is where the exponential
    mechanism's loss is largest.
    """
    schema = Schema(
        tuple(CategoricalAttribute(name, ("0", "1")) for name in ("a", "b", "c")), "label", ("no", "yes"))
    X = np.array([[0, 1, 0], [1, 0, 0], [0, 1, 0], [1, 1, 1], [1, 0, 1], [0, 1, 1]], dtype=np.float64)
    y = X[:, 2].astype(np.int64)
    return schema, X, y


def _claimed(mechanism: DPEA) -> DPEA:
    """A correct `DPEA` at ``mechanism``'s setting: the law the release claims, even for a broken subclass."""
    return DPEA(**{f.name: getattr(mechanism, f.name) for f in dataclasses.fields(DPEA)})


def _leaf_path(structure: Structure, codes: np.ndarray) -> list[int]:
    """The attributes on the path ``codes`` takes through ``structure``."""
    path = []
    while structure is not None:
        a, children = structure
        path.append(a)
        structure = children[int(codes[a])]
    return path


class _Pair:
    """D, DPEA's listed structures at a claimed setting, and the added row r chosen on the claimed law.

    Shared by `DpeaReleaseTarget` (the registered release path) and `DpeaTarget` (the exact law).
    """

    def __init__(self, claimed: DPEA, schema: Schema, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> None:
        X, y = check_xy(schema, X, y)
        self.claimed = claimed
        self.epsilon, self.delta = float(claimed.epsilon), 0.0
        self.schema, self.X, self.y = schema, X, y
        self.domain = Domain.of(schema, claimed.bins, claimed.max_arity)
        count = self.domain.log_structure_count(claimed.depth)
        if count > math.log(MAX_STRUCTURES):
            raise ValueError(f"the dpea audit lists every structure of depth {claimed.depth}: "
                             f"about {math.exp(count):.3g} "
                             f"here, more than {MAX_STRUCTURES}; use a smaller depth or schema")
        self.structures = self.domain.structures(claimed.depth)
        self.codes = self.domain.codes(X)
        log_d = claimed.structure_log_probs(schema, X, y, self.structures)
        self.row, self.label, log_d1 = self._choose(log_d, rng)
        self.claimed_log_laws = (log_d, log_d1)

    # ------------------------------------------------------------------ the pair
    def _candidates(self, rng: np.random.Generator) -> np.ndarray:
        """Codes of the rows tried as r: every domain point, or sampled table rows and random points."""
        arity = self.domain.arity
        if math.prod(int(a) for a in arity) <= ADDED_ROW_CANDIDATES:
            return np.array(list(itertools.product(*(range(int(a)) for a in arity))), dtype=np.int64)
        half = ADDED_ROW_CANDIDATES // 2
        rows = self.codes[rng.choice(len(self.codes), min(half, len(self.codes)), replace=False)]
        points = np.column_stack([rng.integers(0, int(a), half) for a in arity])
        return np.unique(np.vstack([rows, points]), axis=0)

    def _choose(self, log_d: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, int, np.ndarray]:
        """r (encoded), its class and the claimed log-law on D + r: the candidate whose law moves the most."""
        best: tuple[float, np.ndarray, int, np.ndarray] | None = None
        p = np.exp(log_d)
        for codes in self._candidates(rng):
            row = self.domain.point(codes)
            for label in range(self.schema.n_classes):
                log_d1 = self.claimed.structure_log_probs(self.schema, np.vstack([self.X, row]),
                                                          np.append(self.y, label), self.structures)
                divergence = float(((np.exp(log_d1) - p) * (log_d1 - log_d)).sum())
                if best is None or divergence > best[0]:
                    best = (divergence, row, label, log_d1)
        assert best is not None
        return best[1], best[2], best[3]

    def _cell(self, structure: Structure, r: np.ndarray) -> int:
        """Rows of D in r's (leaf, class) cell of ``structure``."""
        path = _leaf_path(structure, r)
        same = (self.codes[:, path] == r[path]).all(axis=1) & (self.y == self.label)
        return int(same.sum())



class DpeaTarget(_Pair):
    """The exact-law fast path: DPEA's release law sampled directly, (structure, r's released cell count) per tree.

    Used for settings the registered trainer does not run (another ``embedding_depth``, a subclass
    with a broken budget) and for trial counts a black box cannot reach (10^6 per table); the tests
    check its law against `DPEA.fit`'s releases. The score is the LLR under the claimed law.

    Parameters
    ----------
    mechanism:
        The audited setting (a `DPEA`, or a broken subclass); its claim is a correct `DPEA` with the
        same fields. The ``mcmc`` sampler is refused: its law is not the exact one the target samples.
    schema, X, y:
        D.
    rng:
        Draws the candidate rows when the domain is too large to try every point.
    """

    mechanism = MECHANISM

    def __init__(self, mechanism: DPEA, schema: Schema, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> None:
        if mechanism.sampler == "mcmc":
            raise ValueError("the dpea audit samples the exact law of the selections; sampler 'mcmc' claims no exact "
                             "guarantee (use 'exact' or 'exhaustive')")
        super().__init__(_claimed(mechanism), schema, X, y, rng)
        self.audited = mechanism
        log_d, log_d1 = self.claimed_log_laws
        self.structure_llr = log_d1 - log_d  # under the claimed law
        r = self.domain.codes(self.row[None, :])[0]
        self.counts = np.array([self._cell(s, r) for s in self.structures])  # r's cell count in D, per structure
        X1, y1 = np.vstack([self.X, self.row]), np.append(self.y, self.label)
        self.law = tuple(self._law(mechanism.structure_log_probs(schema, data, labels, self.structures))
                         for data, labels in ((self.X, self.y), (X1, y1)))

    @staticmethod
    def _law(log_probs: np.ndarray) -> np.ndarray:
        p = np.exp(log_probs - log_probs.max())
        law: np.ndarray = p / p.sum()
        return law

    # --------------------------------------------------------------- releases
    def _scores(self, law: np.ndarray, added: int, trials: int, rng: np.random.Generator) -> np.ndarray:
        """Scores of ``trials`` releases on D (``added`` = 0) or D' (1): structure and r's count per tree."""
        chosen = rng.choice(law.size, size=(trials, self.audited.n_trees), p=law)
        m = self.counts[chosen]
        released = self.audited.noisy_counts(m + added, SeededNoise(rng))
        scale = self.claimed.noise_scale
        llr = (self.structure_llr[chosen] + discrete_laplace_log_pmf(released, m + 1, scale)
               - discrete_laplace_log_pmf(released, m, scale))
        scores: np.ndarray = llr.sum(axis=1)
        return scores

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return self._scores(self.law[0], 0, trials, rng), self._scores(self.law[1], 1, trials, rng)

    @property
    def exact_epsilon(self) -> float:
        """The audited mechanism's exact privacy loss on this pair: max |ln P'(release) / P(release)|."""
        structure = np.log(self.law[1]) - np.log(self.law[0])
        offsets = np.arange(-_COUNT_MARGIN, _COUNT_MARGIN)
        released = np.maximum(self.counts[:, None] + offsets, 0)
        scale = self.audited.noise_scale
        count = (discrete_laplace_log_pmf(released, self.counts[:, None] + 1, scale)
                 - discrete_laplace_log_pmf(released, self.counts[:, None], scale))
        loss = np.abs(structure[:, None] + count).max()
        return float(self.audited.n_trees * loss)

    def describe(self) -> dict[str, Any]:
        return {"added_row": describe_added_row(self.X, self.row, _WHERE),
                "rows": int(self.y.size), "structures": len(self.structures),
                "cell_counts_in_D": sorted({int(m) for m in self.counts}),
                "exact_epsilon": self.exact_epsilon,
                "score": f"log-likelihood ratio D'/D of (structure, r's released cell count) per tree under the "
                         f"claimed law: selections at beta {self.claimed.selection_beta:g}, noise scale "
                         f"{self.claimed.noise_scale:g}"}


def _leaves(structure: Structure) -> list[list[tuple[int, int]]]:
    """The (attribute, code) path of every leaf of ``structure``, in code order."""
    if structure is None:
        return [[]]
    a, children = structure
    return [[(a, code), *rest] for code, child in enumerate(children) for rest in _leaves(child)]


def _node_paths(tree: Tree, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node of a released tree: its depth, and the attributes split on from the root to it and at it (-1 padded)."""
    n = len(tree.nodes)
    depths = np.zeros(n, dtype=np.int64)
    attrs = np.full((n, depth + 1), -1, dtype=np.int64)
    stack = [0]
    while stack:
        i = stack.pop()
        node = tree.nodes[i]
        if not node.is_leaf and node.attribute is not None:  # a valid tree's split nodes all name their attribute
            attrs[i, depths[i]] = node.attribute
            for edge in node.edges:
                depths[edge.child] = depths[i] + 1
                attrs[edge.child] = attrs[i]
                stack.append(edge.child)
    return depths, attrs, np.array([node.is_leaf for node in tree.nodes])


class DpeaReleaseTarget(_Pair):
    """DPEA's registered release on (D, D' = D + r), per trial end to end; the score is the exact LLR of the release.

    A released tree is a full structure with its all-zero leaves dropped and its other leaves' noisy
    counts, so its likelihood under the claimed law (`DPEA` at the registered trainer's setting) is
    the sum, over the listed structures s it is consistent with, of P(s) times the count log-pmf of
    every (leaf, class) cell of s (0 for a dropped leaf; `discrete_laplace_log_pmf`). The score is
    sum_t ln P'(tree_t) - ln P(tree_t): the Neyman-Pearson statistic of a correct release, read from
    the released trees alone.
    """

    mechanism = MECHANISM

    def __init__(self, requirement: Any, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                 rng: np.random.Generator, *, mechanism: str = MECHANISM) -> None:
        super().__init__(registered_dpea(requirement.epsilon, requirement.trees, depth, schema),
                         schema, X, y, rng)
        self.mechanism = mechanism
        self.path = ReleasePath(mechanism, requirement, depth, schema, self.X, self.y, self.row, self.label)
        leaves = [(s, leaf) for s, structure in enumerate(self.structures) for leaf in _leaves(structure)]
        self._structure_of = np.array([s for s, _ in leaves])
        self._length = np.array([len(leaf) for _, leaf in leaves])
        self._attrs = np.full((len(leaves), depth + 1), -1, dtype=np.int64)
        codes = np.zeros((len(leaves), schema.n_attributes), dtype=np.int64)
        for i, (_, leaf) in enumerate(leaves):
            for j, (a, code) in enumerate(leaf):
                self._attrs[i, j], codes[i, a] = a, code
        self._points = np.array([self.domain.point(c) for c in codes])  # a point of each leaf, to route through a tree
        r = self.domain.codes(self.row[None, :])[0]
        self._true = np.zeros((2, len(leaves), schema.n_classes))  # per table, the leaves' class counts
        for i, (_, leaf) in enumerate(leaves):
            here = np.ones(len(self.y), dtype=bool)
            for a, code in leaf:
                here &= self.codes[:, a] == code
            self._true[:, i] = np.bincount(self.y[here], minlength=schema.n_classes)
            if all(r[a] == code for a, code in leaf):
                self._true[1, i, self.label] += 1

    def _log_likelihoods(self, tree: Tree) -> np.ndarray:
        """ln P(tree) under the claimed law on D and on D' (two values; -inf when no structure fits the tree)."""
        node = tree.apply(self._points)
        depths, attrs, is_leaf = _node_paths(tree, self.claimed.depth)
        d = depths[node]
        above = np.arange(attrs.shape[1])[None, :] < d[:, None]
        path_matches = ((attrs[node] == self._attrs) | ~above).all(axis=1)
        split_here = np.take_along_axis(self._attrs, np.minimum(d, attrs.shape[1] - 1)[:, None], axis=1)[:, 0]
        fits = path_matches & np.where(is_leaf[node], d == self._length,
                                       (d < self._length) & (attrs[node, d] == split_here))
        counts = np.array([n.counts if n.counts is not None else np.zeros(self.schema.n_classes) for n in tree.nodes])
        released = np.where(is_leaf[node][:, None], counts[node], 0.0)
        if len(tree.nodes) == 1:  # every count was 0: the zero root fits every structure
            fits, released = np.ones_like(fits), np.zeros_like(released)
        n = len(self.structures)
        misfit = np.bincount(self._structure_of, weights=~fits, minlength=n) > 0
        result = np.empty(2)
        for table in range(2):
            cells = discrete_laplace_log_pmf(released, self._true[table], self.claimed.noise_scale).sum(axis=1)
            log = self.claimed_log_laws[table] + np.bincount(self._structure_of, weights=cells, minlength=n)
            result[table] = logsumexp(np.where(misfit, -np.inf, log))
        return result

    def score(self, trees: Sequence[Tree]) -> float:
        """sum over the released trees of ln P'(tree) - ln P(tree) under the claimed law, each within +-`_IMPOSSIBLE`.

        A tree only one table's claimed law allows scores +-`_IMPOSSIBLE`; one neither allows, 0.
        """
        total = 0.0
        for tree in trees:
            log_d, log_d1 = self._log_likelihoods(tree)
            with np.errstate(invalid="ignore"):
                ratio = log_d1 - log_d  # nan when neither allows it
            total += float(np.nan_to_num(np.clip(ratio, -_IMPOSSIBLE, _IMPOSSIBLE), nan=0.0))
        return total

    def sample(self, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Scores of ``trials`` registered releases on D, then on D'."""
        return self.path.scores(trials, rng, self.score)

    def describe(self) -> dict[str, Any]:
        return {"added_row": self.path.added_row(_WHERE), "release_path": f"registry trainer of {self.mechanism!r}",
                "rows": int(self.y.size), "structures": len(self.structures),
                "score": f"exact log-likelihood ratio D'/D of the released trees under the claimed law: selections "
                         f"at beta {self.claimed.selection_beta:g}, noise scale {self.claimed.noise_scale:g}"}


def dpea_target(requirement: Any, depth: int, schema: Schema, X: np.ndarray, y: np.ndarray,
                rng: np.random.Generator, *, embedding_depth: int | None = None,
                mechanism: str = MECHANISM) -> DpeaReleaseTarget | DpeaTarget:
    """The registry's audit target of DPEA (or of ``mechanism``) at the claimed ``dp:epsilon,trees`` and ``depth``.

    The registered trainer embeds the whole tree; an ``embedding_depth`` (a setting owners' releases
    never use) is audited on the exact-law fast path `DpeaTarget` instead.
    """
    if embedding_depth is None:
        return DpeaReleaseTarget(requirement, depth, schema, X, y, rng, mechanism=mechanism)
    if mechanism != MECHANISM:
        raise ValueError(f"an embedding depth is audited on DPEA's own law; {mechanism!r} is not {MECHANISM!r}")
    return DpeaTarget(registered_dpea(requirement.epsilon, requirement.trees, depth, schema,
                                      embedding_depth=embedding_depth),
                      schema, X, y, rng)
