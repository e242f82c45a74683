"""Issue 23's eps = 1 probe: candidate eps-DP releases on Adult whose global model might reach 0.845.

Protocol (fixed): train on adult.data's rows, test on adult.test's (the bundled table, '?' rows dropped),
the bundled schema's public bounds, one release per seed. Each candidate is scored twice: its own model
(``released``: the release's posterior) and the miner's gradient boosting (the dp fixed rule, leaves of
at least 2 % of the rows, `modelshare.miner_node.dp_pgen`) learned from pseudo rows sampled from the release;
``--models`` adds the miner's ``decision-tree`` set as a dp study sets it (``auto``, `modelshare.miner_node.selection`).
Accuracy and ROC AUC of class ``>50K``.

Candidates (``--candidates``; every one spends exactly ``--eps`` in total, pure eps-DP, add/remove-one-row
neighbours, discrete Laplace noise and the exponential mechanism from `modelshare.common.privacy.noise`):

* ``mst``: Private-PGM's MST (McKenna, Miklau, Sheldon 2021) with pure-DP noise. Columns are the 14
  attributes on a public discretisation plus the class. eps/3 on every 1-way marginal (a row adds one to
  one cell of each of the 15: L1 sensitivity 15), eps/3 on choosing 14 edges one by one by Kruskal with the
  exponential mechanism (each pick eps/(3*14), score = L1 distance of the true 2-way marginal from the
  product of the noisy 1-way ones minus the expected noise of measuring it, sensitivity 1, so
  beta = eps_pick / 2), eps/3 on the 14 chosen 2-way marginals (L1 sensitivity 14). The model is the
  tree-structured distribution with conditionals read from the noisy edge marginals.
* ``tan``: the same with the class inside every marginal (a tree-augmented naive Bayes): (class, a) for
  every attribute, 13 edges chosen on (class, a, b) marginals, the 13 chosen (class, a, b) marginals.
* ``dpea-leaf``: a DPEA tree (the registry trainer's compact domain, depth ``--depth``) at
  ``--dpea-share`` of eps, plus, in each released leaf and class, noisy 1-way counts of every attribute its
  path leaves free (leaves are disjoint, so parallel composition: a row adds one to one cell of at most m
  histograms, m the most free attributes of any leaf, L1 sensitivity m). Its model: the leaf's class
  counts times a naive Bayes of the free attributes per leaf (an NBTree); pseudo rows are PGEN's rows of
  the tree with each free attribute redrawn from its leaf and class histogram.

``--calibrate F`` spends F * eps on a calibration histogram and the rest (1 - F) * eps on the release above:
the owner scores its own rows with the released model (a function of the release alone) and releases noisy
counts per (group, class, public bin of the model's log-odds) (each row adds one to one cell: L1 sensitivity
1, scale 1 / (F eps)); groups are one for all rows or, with ``--calibrate-by-leaf``, the DPEA tree's leaves.
The miner fits an isotonic map from bin to P(>50K) per group (``calibrated``) and relabels the pseudo rows
with it before the global models learn from them. ``--calibration temperature`` instead spends F * eps on
choosing a likelihood temperature T from a public grid (log P(c | x) = log P(c | leaf) + sum log P(x_a | leaf, c) / T)
by the exponential mechanism, utility = the owner's rows classified right (monotone, sensitivity 1: beta =
``--beta-factor`` x F eps, 1 by default); pseudo rows are relabelled by drawing from the tempered posterior,
or with ``--hard-labels`` by its argmax. (The registered mechanism ``dpea-nb`` is built on this variant.) ``--select-k
K`` (dpea-leaf) first spends ``--select-share`` of the release's eps on noisy (class, attribute) counts of every
attribute (L1 sensitivity |A|) and keeps histograms for the K of most noisy mutual information only; ``--drop`` names
attributes that get none (a public choice made by whoever runs the probe).

Shares of eps are ``--split A B C`` (1-way, selection, edges) for mst/tan and ``--dpea-share`` (the tree; the
histograms get the rest) for dpea-leaf, both of the release's part. Numeric attributes are binned on
the schema's public range only: ``--bins`` equal-width bins, on log(1 + x - low) where the public range
spans three decades or more (``--scale auto``), never on data quantiles. Conditionals are smoothed towards
their parent's marginal with ``--smooth`` times the noise scale of pseudo-counts (post-processing).
``--pgen-scale`` multiplies the pseudo rows (the release's noisy row count times the scale).
The noise is seeded (`Randomness.seeded`: the secure sampler's laws, reproducible, never for publication).

    python bench/dp_eps1_probe.py --candidates tan mst dpea-leaf --seeds 0 1 2 --eps 1
    python bench/dp_eps1_probe.py --candidates dpea-leaf --depth 1 --bins 16 --dpea-share 0.2 --calibrate 0.1
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute, Schema
from modelshare.common.mechanisms.dpea import registered_dpea
from modelshare.common.privacy.noise import Randomness, SecretNoise
from modelshare.miner_node.global_models import make_global_model
from modelshare.miner_node.pgen import pgen_ensemble
from modelshare.miner_node.selection import choose, global_model_params

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # experiments/ is in the checkout, not installed
from experiments.dp import DpSettings, model_plan  # noqa: E402

ADULT_TRAIN_ROWS = 32561  # adult.data's rows come first in the bundled table, adult.test's after
LOG_DECADES = 3.0  # ``--scale auto``: log bins when high - low >= 10^3 (a public property of the range)


# ------------------------------------------------------------------ public discretisation

def _categorical(attr: CategoricalAttribute | NumericAttribute) -> CategoricalAttribute:
    """``attr``, which has no bin edges, so it is categorical."""
    assert isinstance(attr, CategoricalAttribute), attr
    return attr


def _numeric(attr: CategoricalAttribute | NumericAttribute) -> NumericAttribute:
    """``attr``, which has bin edges, so it is numeric."""
    assert isinstance(attr, NumericAttribute), attr
    return attr

@dataclass(frozen=True)
class Discretiser:
    """Public bins of every attribute (categories as they are; numeric edges from the schema's range)."""

    schema: Schema
    edges: tuple[np.ndarray | None, ...]

    @classmethod
    def of(cls, schema: Schema, bins: int, scale: str) -> Discretiser:
        edges: list[np.ndarray | None] = []
        for attr in schema.attributes:
            if isinstance(attr, CategoricalAttribute):
                edges.append(None)
                continue
            assert isinstance(attr, NumericAttribute)
            lo, hi = float(attr.low), float(attr.high)
            use_log = scale == "log" or (scale == "auto" and hi - lo >= 10 ** LOG_DECADES)
            if use_log:
                e = lo + np.expm1(np.linspace(0.0, np.log1p(hi - lo), bins + 1))
            else:
                e = np.linspace(lo, hi, bins + 1)
            if attr.integer:  # bins of whole numbers: [e_k, e_k+1) on integers, each holding at least one
                e = np.unique(np.ceil(e))
                e[-1] = hi + 1
            else:
                e[-1] = np.nextafter(hi, np.inf)
            edges.append(e)
        return cls(schema, tuple(edges))

    @property
    def sizes(self) -> np.ndarray:
        return np.array([e.size - 1 if e is not None else _categorical(attr).size
                         for attr, e in zip(self.schema.attributes, self.edges, strict=False)])

    def codes(self, X: np.ndarray) -> np.ndarray:
        out = np.empty(X.shape, dtype=np.int64)
        for j, e in enumerate(self.edges):
            out[:, j] = X[:, j] if e is None else np.searchsorted(e[1:-1], X[:, j], side="right")
        return out

    def values(self, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Encoded rows for ``codes``: a category as it is, a number uniform inside its bin (whole if integer)."""
        X = np.empty(codes.shape, dtype=np.float64)
        for j, (attr, e) in enumerate(zip(self.schema.attributes, self.edges, strict=False)):
            if e is None:
                X[:, j] = codes[:, j]
                continue
            lo, hi = e[codes[:, j]], e[codes[:, j] + 1]
            numeric = _numeric(attr)
            if numeric.integer:
                X[:, j] = np.floor(lo + rng.random(lo.size) * (hi - lo))
            else:
                X[:, j] = np.minimum(lo + rng.random(lo.size) * (hi - lo), numeric.high)
        return X


def marginal(codes: np.ndarray, sizes: np.ndarray, cols: tuple[int, ...]) -> np.ndarray:
    """The count table of columns ``cols`` (shape: their sizes)."""
    shape = tuple(int(sizes[c]) for c in cols)
    flat = np.ravel_multi_index(tuple(codes[:, c] for c in cols), shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape).astype(np.float64)


# ------------------------------------------------------------------ tree-structured models
@dataclass
class Factor:
    """P(child | parents) as a table of shape (parents' sizes..., child's size)."""

    child: int
    parents: tuple[int, ...]
    table: np.ndarray


@dataclass
class GraphModel:
    """A directed tree of factors over code columns (the class is column ``klass``), in ancestral order."""

    factors: list[Factor]
    klass: int
    n_rows: float

    def sample(self, n: int, n_cols: int, rng: np.random.Generator) -> np.ndarray:
        codes = np.zeros((n, n_cols), dtype=np.int64)
        for f in self.factors:
            probs = (f.table[tuple(codes[:, p] for p in f.parents)] if f.parents
                     else np.broadcast_to(f.table, (n, f.table.size)))
            cum = np.cumsum(probs, axis=1)
            codes[:, f.child] = np.minimum((rng.random(n)[:, None] * cum[:, -1:] > cum).sum(axis=1),
                                           f.table.shape[-1] - 1)
        return codes

    def proba(self, codes: np.ndarray, n_classes: int) -> np.ndarray:
        """P(class | the other columns), from the factors that mention the class."""
        logp = np.zeros((codes.shape[0], n_classes))
        for k in range(n_classes):
            c = codes.copy()
            c[:, self.klass] = k
            for f in self.factors:
                if f.child == self.klass or self.klass in f.parents:
                    logp[:, k] += np.log(f.table[tuple(c[:, p] for p in f.parents) + (c[:, f.child],)])
        logp -= logp.max(axis=1, keepdims=True)
        p = np.exp(logp)
        return p / p.sum(axis=1, keepdims=True)


def _normalise(table: np.ndarray) -> np.ndarray:
    return table / table.sum(axis=-1, keepdims=True)


def _conditional(noisy: np.ndarray, prior: np.ndarray, strength: float) -> np.ndarray:
    """P(last axis | the others) from a clamped noisy table, smoothed by ``strength`` pseudo-counts of ``prior``."""
    return _normalise(np.maximum(noisy, 0.0) + strength * prior + 1e-9)


def chow_liu_release(codes: np.ndarray, sizes: np.ndarray, klass: int, tan: bool, eps: float,
                     split: tuple[float, float, float], smooth: float, noise: SecretNoise, n_edges: int | None = None,
                     floor: float = 0.0) -> tuple[GraphModel, dict[str, Any]]:
    """MST (class a column) or TAN (class in every marginal) at total ``eps`` (module docstring)."""
    share = np.asarray(split) / sum(split)
    e1, e2, e3 = (eps * s for s in share)
    nodes = [c for c in range(codes.shape[1]) if not (tan and c == klass)]
    base = (klass,) if tan else ()
    m = len(nodes)
    # 1. one-way marginals (with the class under tan): L1 sensitivity m
    s1 = m / e1
    one = {a: noise.discrete_laplace(marginal(codes, sizes, base + (a,)).astype(np.int64), s1).astype(float)
           for a in nodes}
    clamped = {a: np.maximum(v, 0.0) + 1e-9 for a, v in one.items()}
    if tan:
        class_rows = np.mean([v.sum(axis=1) for v in clamped.values()], axis=0)  # noisy rows per class
        cond = {a: _normalise(v) for a, v in clamped.items()}  # P(a | class)
    else:
        total = float(np.mean([v.sum() for v in clamped.values()]))
        cond = {a: v / v.sum() for a, v in clamped.items()}
    # 2. edges by Kruskal with the exponential mechanism, score sensitivity 1 (not monotone: beta = eps/2)
    k = m - 1 if n_edges is None else min(n_edges, m - 1)
    s3 = k / e3
    e_pick = e2 / k
    comp = {a: a for a in nodes}

    def find(a: int) -> int:
        while comp[a] != a:
            a = comp[a]
        return a

    edges: list[tuple[int, int]] = []
    pairs = list(itertools.combinations(nodes, 2))
    scores = {}
    for a, b in pairs:
        true = marginal(codes, sizes, base + (a, b))
        if tan:
            est = class_rows[:, None, None] * cond[a][:, :, None] * cond[b][:, None, :]
        else:
            est = total * np.outer(cond[a], cond[b])
        scores[(a, b)] = float(np.abs(true - est).sum()) - s3 * true.size  # minus the expected noise of measuring it
    for _ in range(k):
        cands = [p for p in pairs if find(p[0]) != find(p[1])]
        logits = np.array([scores[p] for p in cands]) * e_pick / 2.0
        a, b = cands[noise.exponential_index(logits)]
        comp[find(a)] = find(b)
        edges.append((a, b))
    # 3. the chosen marginals: L1 sensitivity k
    measured = {e: noise.discrete_laplace(marginal(codes, sizes, base + e).astype(np.int64), s3).astype(float)
                for e in edges}
    # the model: per component, root at the node of most edges, conditionals by breadth-first orientation
    degree = {a: sum(a in e for e in edges) for a in nodes}
    factors: list[Factor] = [Factor(klass, (), class_rows / class_rows.sum())] if tan else []
    seen: set[int] = set()
    for root in sorted(nodes, key=lambda a: -degree[a]):
        if root in seen:
            continue
        factors.append(Factor(root, base, cond[root]))
        seen.add(root)
        frontier = [root]
        while frontier:
            parent = frontier.pop(0)
            for a, b in edges:
                child = b if a == parent else a if b == parent else None
                if child is None or child in seen:
                    continue
                table = measured[(a, b)] - floor * s3
                if child == a:  # put the child last
                    table = np.swapaxes(table, -1, -2)
                prior = cond[child][:, None, :] if tan else cond[child][None, :]
                factors.append(Factor(child, base + (parent,), _conditional(table, prior, smooth * s3)))
                seen.add(child)
                frontier.append(child)
    n_rows = float(class_rows.sum()) if tan else total
    stated = {"eps_marginals": e1, "eps_selection": e2, "eps_edges": e3, "noise_one_way": s1, "noise_edges": s3,
              "edges": edges}
    return GraphModel(factors, klass, n_rows), stated


# ------------------------------------------------------------------ DPEA tree with per-leaf histograms
def _least_informative(schema: Schema, X: np.ndarray, y: np.ndarray, disc: Discretiser, eps: float, k: int,
                       noise: SecretNoise) -> list[int]:
    """All but the ``k`` attributes whose noisy (class, attribute) counts (L1 sensitivity |A|) carry the most
    mutual information with the class."""
    codes, sizes, n_attr = disc.codes(X), disc.sizes, schema.n_attributes
    info = []
    for a in range(n_attr):
        true = np.zeros((schema.n_classes, sizes[a]), dtype=np.int64)
        np.add.at(true, (y, codes[:, a]), 1)
        joint = np.maximum(noise.discrete_laplace(true, n_attr / eps), 0).astype(float) + 1e-9
        joint /= joint.sum()
        outer = joint.sum(axis=1, keepdims=True) * joint.sum(axis=0, keepdims=True)
        info.append(float((joint * np.log(joint / outer)).sum()))
    return [int(a) for a in np.argsort(info)[: n_attr - k]]


class LeafNB:
    """A released DPEA tree whose leaves carry noisy per-class histograms of their free attributes."""

    def __init__(self, tree: Any, disc: Discretiser, hist: dict[int, dict[int, np.ndarray]], free: dict[int, list[int]],
                 n_classes: int) -> None:
        self.tree, self.disc, self.hist, self.free, self.n_classes = tree, disc, hist, free, n_classes

    def parts(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row and class, log P(class | leaf) and the sum of log P(free attribute | leaf, class) (0: no leaf)."""
        codes = self.disc.codes(X)
        node = self.tree.apply(X)
        prior = np.zeros((X.shape[0], self.n_classes))
        lik = np.zeros((X.shape[0], self.n_classes))
        for leaf, attrs in self.free.items():
            rows = np.flatnonzero(node == leaf)
            if not rows.size:
                continue
            counts = np.asarray(self.tree.nodes[leaf].counts, dtype=float) + 1e-9
            prior[rows] = np.log(counts / counts.sum())
            for a in attrs:
                lik[rows] += np.log(self.hist[leaf][a][:, codes[rows, a]].T)
        return prior, lik

    def proba(self, X: np.ndarray, temperature: float = 1.0) -> np.ndarray:
        prior, lik = self.parts(X)
        return _softmax(prior + lik / temperature)


def _softmax(logp: np.ndarray) -> np.ndarray:
    logp = logp - logp.max(axis=1, keepdims=True)
    p = np.exp(logp)
    return p / p.sum(axis=1, keepdims=True)


def dpea_leaf_release(schema: Schema, X: np.ndarray, y: np.ndarray, disc: Discretiser, eps: float, share: float,
                      depth: int, smooth: float, randomness: Randomness,
                      drop: tuple[int, ...] = (), score: str = "max", select_k: int | None = None,
                      select_share: float = 0.0) -> tuple[LeafNB, dict[str, Any]]:
    e_tree, e_sel = eps * share, (eps * select_share if select_k is not None else 0.0)
    e_hist = eps - e_tree - e_sel
    tree = registered_dpea(e_tree, 1, depth, schema, score=score).fit(schema, X, y, randomness).trees[0]
    paths = tree.paths()
    n_attr = schema.n_attributes
    if select_k is not None:  # keep the k attributes of most noisy mutual information with the class
        drop = drop + tuple(_least_informative(schema, X, y, disc, e_sel, select_k, randomness.secret))
    free = {p.leaf: [a for a in range(n_attr) if a not in p.attributes and a not in drop] for p in paths}
    m = max(len(v) for v in free.values())
    scale = m / e_hist
    sizes = disc.sizes
    codes = disc.codes(X)
    node = tree.apply(X)
    hist: dict[int, dict[int, np.ndarray]] = {}
    raw: dict[int, dict[int, np.ndarray]] = {}
    for leaf, attrs in free.items():
        rows = node == leaf
        raw[leaf] = {}
        for a in attrs:
            true = np.zeros((schema.n_classes, sizes[a]), dtype=np.int64)
            np.add.at(true, (y[rows], codes[rows, a]), 1)
            raw[leaf][a] = np.maximum(randomness.secret.discrete_laplace(true, scale), 0).astype(float)
    # smoothing towards the pooled per-class histogram of every leaf (post-processing)
    pooled = {a: sum(raw[leaf][a] for leaf in free if a in raw[leaf]) for a in range(n_attr)}
    for leaf, attrs in free.items():
        hist[leaf] = {a: _normalise(raw[leaf][a] + smooth * scale * _normalise(pooled[a] + 1e-9)) for a in attrs}
    stated = {"eps_tree": e_tree, "eps_select": e_sel, "eps_hist": e_hist, "hist_sensitivity": m, "hist_noise": scale,
              "leaves": len(paths), "root": schema.names[tree.root.attribute]
              if tree.root.attribute is not None else "-"}
    return LeafNB(tree, disc, hist, free, schema.n_classes), stated


def leaf_pseudo_rows(model: LeafNB, rng: np.random.Generator, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """PGEN's rows of the tree with each free attribute redrawn from its leaf's class histogram."""
    Xp, yp = pgen_ensemble([model.tree], scale=scale, beta=1.0, rng=rng)
    node = model.tree.apply(Xp)
    codes = model.disc.codes(Xp)
    for leaf, attrs in model.free.items():
        rows = np.flatnonzero(node == leaf)
        for a in attrs:
            cum = np.cumsum(model.hist[leaf][a][yp[rows]], axis=1)
            codes[rows, a] = np.minimum((rng.random(rows.size)[:, None] > cum).sum(axis=1), cum.shape[1] - 1)
    redrawn = model.disc.values(codes, rng)
    free_mask = np.zeros(Xp.shape, dtype=bool)
    for leaf, attrs in model.free.items():
        free_mask[np.ix_(node == leaf, attrs)] = True
    return np.where(free_mask, redrawn, Xp), yp


# ------------------------------------------------------------------ calibration histogram
CALIBRATION_BINS = np.linspace(-12.0, 12.0, 97)  # public bins of the released model's logit


class Calibration:
    """Noisy (group, score bin, class) counts of the owner's rows under the released model, made monotone.

    Each row falls in one group (its leaf, or one group for all), one bin, one class: L1 sensitivity 1,
    discrete Laplace of scale 1 / eps. The miner fits an isotonic map from bin to P(class 1) per group on
    the noisy counts, and the pooled map where a group's noisy rows are few (post-processing).
    """

    def __init__(self, p_train: np.ndarray, y: np.ndarray, groups: np.ndarray, n_groups: int, eps: float,
                 noise: SecretNoise, fewest: float = 500.0) -> None:
        cells = CALIBRATION_BINS.size + 1
        true = np.zeros((n_groups, cells, 2), dtype=np.int64)
        np.add.at(true, (groups, self.bin(p_train), y), 1)
        noisy = np.maximum(noise.discrete_laplace(true, 1.0 / eps), 0).astype(float)
        self.pooled = self._fit(noisy.sum(axis=0))
        self.maps = [self._fit(n) if n.sum() >= fewest else self.pooled for n in noisy]

    @staticmethod
    def _fit(noisy: np.ndarray) -> Any:
        from sklearn.isotonic import IsotonicRegression

        total = noisy.sum(axis=1)
        keep = total > 0
        centres = np.arange(noisy.shape[0])
        return IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(
            centres[keep], noisy[keep, 1] / total[keep], sample_weight=total[keep])

    @staticmethod
    def bin(p: np.ndarray) -> np.ndarray:
        p = np.clip(p, 1e-12, 1 - 1e-12)
        return np.searchsorted(CALIBRATION_BINS, np.log(p / (1 - p)))

    def __call__(self, p: np.ndarray, groups: np.ndarray) -> np.ndarray:
        b = self.bin(p)
        q = np.empty(p.size)
        for g, m in enumerate(self.maps):
            rows = groups == g
            if rows.any():
                q[rows] = m.predict(b[rows])
        return np.column_stack([1 - q, q])


TEMPERATURES = np.round(np.geomspace(1.0, 8.0, 31), 4)  # a public grid of likelihood temperatures


def choose_temperature(model: LeafNB, X: np.ndarray, y: np.ndarray, eps: float, noise: SecretNoise,
                       beta_factor: float = 1.0) -> tuple[float, np.ndarray]:
    """A temperature from `TEMPERATURES` by the exponential mechanism, utility = owner rows classified right.

    Utility sensitivity 1 and monotone (adding a row adds 0 or 1 to every candidate's utility), so
    beta = eps (``beta_factor`` 1) is eps-DP; ``beta_factor`` 0.5 is the general eps / (2 sensitivity).
    """
    prior, lik = model.parts(X)
    utility = np.array([float((np.argmax(prior + lik / t, axis=1) == y).sum()) for t in TEMPERATURES])
    pick = noise.exponential_index(beta_factor * eps * utility)
    return float(TEMPERATURES[pick]), utility


# ------------------------------------------------------------------ scoring
def _scores(proba: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    return float((proba.argmax(axis=1) == y).mean()), float(roc_auc_score(y == 1, proba[:, 1]))


def _global(name: str, schema: Schema, Xp: np.ndarray, yp: np.ndarray, seed: int) -> Any:
    """The miner's model ``name`` on the pseudo rows, set as a dp study sets it."""
    def build(params: dict[str, Any]) -> Any:
        return make_global_model(name, schema, random_state=seed, **params)

    if name == "gradient-boosting":
        return build(global_model_params(name, "dpea", len(yp))).fit(Xp, yp)
    plan = model_plan(DpSettings((), {}, global_models=(name,)), "dpea", seed)
    return build(choose(name, plan, Xp, yp, build, regression=False).parameters).fit(Xp, yp)


def run(args: argparse.Namespace) -> None:
    table = load_dataset("adult")
    schema = table.schema
    train = table.frame.index < ADULT_TRAIN_ROWS
    X, y = schema.encode(table.frame[train])
    Xt, yt = schema.encode(table.frame[~train])
    disc = Discretiser.of(schema, args.bins, args.scale)
    sizes = np.append(disc.sizes, schema.n_classes)
    klass = schema.n_attributes
    codes = np.column_stack([disc.codes(X), y])
    test_codes = np.column_stack([disc.codes(Xt), yt])
    print(f"train {len(y)} rows, test {len(yt)}; bins per attribute {list(disc.sizes)}")
    results: dict[str, list[dict[str, float]]] = {}
    for cand, seed in itertools.product(args.candidates, args.seeds):
        start = time.time()
        randomness = Randomness.seeded(seed)
        rng = np.random.default_rng(seed + 1000)
        row: dict[str, float] = {}
        eps_release = args.eps * (1 - args.calibrate)
        if cand in ("mst", "tan"):
            model, stated = chow_liu_release(codes, sizes, klass, cand == "tan", eps_release, tuple(args.split),
                                             args.smooth, randomness.secret, args.edges, args.floor)
            row["released"], row["released_auc"] = _scores(model.proba(test_codes, schema.n_classes), yt)
            n = int(round(model.n_rows * args.pgen_scale))
            sampled = model.sample(n, codes.shape[1], rng)
            Xp, yp = disc.values(sampled[:, :klass], rng), sampled[:, klass]
            score = lambda X_, model=model: model.proba(  # noqa: E731
                np.column_stack([disc.codes(X_), np.zeros(len(X_), int)]), schema.n_classes)[:, 1]
        else:
            leaf_model, stated = dpea_leaf_release(schema, X, y, disc, eps_release, args.dpea_share, args.depth,
                                                   args.smooth, randomness,
                                                   tuple(schema.index(n) for n in args.drop), args.dpea_score,
                                                   args.select_k, args.select_share)
            row["tree"], row["tree_auc"] = _scores(_tree_proba(leaf_model.tree, Xt), yt)
            row["released"], row["released_auc"] = _scores(leaf_model.proba(Xt), yt)
            Xp, yp = leaf_pseudo_rows(leaf_model, rng, args.pgen_scale)
            score = lambda X_, leaf_model=leaf_model: leaf_model.proba(X_)[:, 1]  # noqa: E731
            if args.calibrate_by_leaf:
                leaf_ids = {leaf: i + 1 for i, leaf in enumerate(leaf_model.free)}  # group 0: rows no leaf admits
                group = lambda X_, ids=leaf_ids, model=leaf_model: np.vectorize(  # noqa: E731
                    lambda stop: ids.get(stop, 0))(model.tree.apply(X_))
        if args.calibrate and args.calibration == "temperature":
            temp, utility = choose_temperature(leaf_model, X, y, args.eps * args.calibrate, randomness.secret,
                                               args.beta_factor)
            stated["temperature"] = temp
            stated["best_temperature"] = float(TEMPERATURES[int(np.argmax(utility))])
            row["calibrated"], row["calibrated_auc"] = _scores(leaf_model.proba(Xt, temp), yt)
            pt = leaf_model.proba(Xp, temp)
            if args.hard_labels:
                yp = pt.argmax(axis=1)
            else:
                yp = (rng.random(len(yp))[:, None] > np.cumsum(pt, axis=1)).sum(axis=1).clip(max=pt.shape[1] - 1)
        elif args.calibrate:
            n_groups = 1 + (len(leaf_ids) if args.calibrate_by_leaf and cand == "dpea-leaf" else 0)
            if n_groups == 1:
                group = lambda X_: np.zeros(len(X_), dtype=np.int64)  # noqa: E731
            calib = Calibration(score(X), y, group(X), n_groups, args.eps * args.calibrate, randomness.secret)
            row["calibrated"], row["calibrated_auc"] = _scores(calib(score(Xt), group(Xt)), yt)
            yp = (rng.random(len(yp)) < calib(score(Xp), group(Xp))[:, 1]).astype(np.int64)  # PGEN's rows relabelled
        for name in args.models:
            model_fit = _global(name, schema, Xp, yp, seed)
            row[name], row[f"{name}_auc"] = _scores(model_fit.predict_proba(Xt), yt)
        results.setdefault(cand, []).append(row)
        shown = {k: v for k, v in stated.items() if k != "edges"}
        print(f"{cand} seed {seed} ({time.time() - start:.0f} s): "
              + " ".join(f"{k} {v:.4f}" for k, v in row.items()) + f"  | {shown}"
              + (f" edges {stated['edges']}" if args.show_edges and "edges" in stated else ""))
    print(f"\nmean over seeds {args.seeds}, eps {args.eps}:")
    for cand, rows in results.items():
        keys = rows[0].keys()
        print(f"  {cand}: " + "  ".join(f"{k} {np.mean([r[k] for r in rows]):.4f}"
                                        + (f" ± {np.std([r[k] for r in rows], ddof=1):.4f}" if len(rows) > 1 else "")
                                        for k in keys))


def _tree_proba(tree: Any, X: np.ndarray) -> np.ndarray:
    from modelshare.common.trees.learners.random_tree import ensemble_predict_proba
    return ensemble_predict_proba([tree], X)


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Refuse settings that would not spend a positive budget on every part, naming the option."""
    if args.eps <= 0:
        p.error(f"--eps must be positive, got {args.eps}")
    if not 0 <= args.calibrate < 1:
        p.error(f"--calibrate is a share of eps in [0, 1), got {args.calibrate}")
    used = args.dpea_share + (args.select_share if args.select_k is not None else 0.0)
    if not 0 < args.dpea_share or used >= 1:
        p.error(f"--dpea-share (and --select-share with --select-k) must leave the histograms a share: got {used}")
    if min(args.split) <= 0:
        p.error(f"--split shares must be positive, got {args.split}")
    if args.bins < 2 or args.depth < 1 or (args.edges is not None and args.edges < 1) or args.pgen_scale <= 0:
        p.error("--bins >= 2, --depth >= 1, --edges >= 1 and --pgen-scale > 0 are required")
    if args.select_k is not None and args.select_k < 1:
        p.error(f"--select-k must be >= 1, got {args.select_k}")
    if args.calibrate_by_leaf and not args.calibrate:
        p.error("--calibrate-by-leaf needs --calibrate")
    return args


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--candidates", nargs="+", choices=("mst", "tan", "dpea-leaf"), default=["tan"],
                   help="the releases to try (module docstring)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="one seeded release per seed")
    p.add_argument("--eps", type=float, default=1.0, help="total epsilon of a release (default 1)")
    p.add_argument("--split", nargs=3, type=float, default=[1.0, 1.0, 1.0], metavar=("ONE_WAY", "SELECT", "EDGES"),
                   help="mst/tan: relative shares of eps for 1-way marginals, edge selection, edge marginals")
    p.add_argument("--bins", type=int, default=10, help="public bins per numeric attribute (default 10)")
    p.add_argument("--scale", choices=("auto", "linear", "log"), default="auto",
                   help="bin numeric ranges on x, on log(1 + x - low), or log where the range spans 10^3 (auto)")
    p.add_argument("--smooth", type=float, default=1.0, help="smoothing pseudo-counts, in noise scales")
    p.add_argument("--edges", type=int, default=None, help="mst/tan: edges measured (default: a spanning tree)")
    p.add_argument("--floor", type=float, default=0.0,
                   help="mst/tan: noise scales subtracted from edge counts before clamping")
    p.add_argument("--pgen-scale", type=float, default=1.0, help="pseudo rows per released row (default 1)")
    p.add_argument("--dpea-share", type=float, default=0.5, help="dpea-leaf: share of the release's eps for the tree")
    p.add_argument("--dpea-score", choices=("max", "gini"), default="max", help="dpea-leaf: DPEA's selection score")
    p.add_argument("--depth", type=int, default=3, help="dpea-leaf: depth of the DPEA tree (default 3)")
    p.add_argument("--models", nargs="*", default=["gradient-boosting"], choices=("gradient-boosting", "decision-tree"),
                   help="the miner's global models learned from the pseudo rows")
    p.add_argument("--calibrate", type=float, default=0.0, help="share of eps for the calibration histogram")
    p.add_argument("--calibration", choices=("histogram", "temperature"), default="histogram",
                   help="dpea-leaf: release a calibration histogram, or choose a likelihood temperature from a "
                        "public grid by the exponential mechanism")
    p.add_argument("--hard-labels", action="store_true", help="temperature: pseudo rows labelled by the argmax")
    p.add_argument("--beta-factor", type=float, default=1.0,
                   help="temperature: beta = factor * eps_c (1: monotone utility; 0.5: the general bound)")
    p.add_argument("--calibrate-by-leaf", action="store_true", help="dpea-leaf: one calibration map per released leaf")
    p.add_argument("--select-k", type=int, default=None,
                   help="dpea-leaf: histograms for the k attributes of most noisy mutual information only")
    p.add_argument("--select-share", type=float, default=0.05,
                   help="dpea-leaf: share of the release's eps spent choosing them (with --select-k)")
    p.add_argument("--drop", nargs="*", default=[], help="dpea-leaf: attributes given no leaf histograms")
    p.add_argument("--show-edges", action="store_true", help="mst/tan: print the chosen edges")
    run(_check(p, p.parse_args(argv)))


if __name__ == "__main__":
    main()
