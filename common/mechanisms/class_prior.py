"""The class prior of a dp release: a charged noisy class histogram, and the owner's decline below a public threshold.

Every eps-DP classification release (each ``dp`` mechanism of the registry) spends a public share of
its study's epsilon on the owner's class histogram (``prior_share``, `DEFAULT_PRIOR_SHARE` unless the
study says otherwise; 0 is the papers' mechanisms unchanged) and the rest, ``(1 - share) * epsilon``,
on the mechanism's own trees. The histogram's counts have L1 sensitivity 1 under add/remove one row,
so discrete Laplace noise of scale ``1 / (share * epsilon)`` on every class, drawn by the release's secret
sampler (`modelshare.common.privacy.noise`), makes it ``share * epsilon``-DP; sequential composition with the
trees' ``(1 - share) * epsilon`` gives the study's epsilon. The noisy counts are clamped at 0.

The miner sums the owners' histograms into the study's class prior: a model that predicts its
majority class is the floor no global model should fall below (`modelshare.miner_node.selection`).

*Decline.* Right after the histogram is drawn, the owner compares its noisy total with a public
threshold, `DECLINE_SIGNAL` times its mechanism's ``decline_rows`` (`modelshare.common.mechanisms.registry`), a
function of the trees' requirement, the depth and the public schema only. The default
(`default_decline_rows`, `decline_threshold`) is the rows a release of ``trees`` trees of ``depth`` needs so
that, spread evenly over the ``2^depth`` leaves and ``C`` classes of one full binary tree, each (leaf, class)
count holds one noise scale of the smallest any of laplace-rdt, DPEA and DiffPETs adds to a released count,
``trees / ((1 - share) * epsilon)`` (laplace-rdt's exactly; DPEA and DiffPETs spend part of each tree's
budget on their splits, so their counts are noisier still). dpea-nb, whose budget goes mostly to
per-leaf class histograms of every other attribute, counts those cells and their noise instead
(`modelshare.common.mechanisms.dpea_nb.decline_rows`). Below it the owner releases the
histogram alone and spends the rest of the epsilon, ``(1 - share) * epsilon``, on drawing it once more
(``refined``, discrete Laplace of scale ``1 / ((1 - share) * epsilon)``): the floor is only as good as the
histogram, and on a small table the share's histogram alone often names the wrong majority class (at eps 0.1
its noise scale is 100 rows per class). The release is one root-only tree whose class counts are the second
draw, its report carries both draws, and the study's prior is their inverse-variance weighted mean
(`ClassPrior.estimate`): the whole epsilon, as a release of trees would spend it (sequential composition of
the two draws). The owner says why in a sentence that names only public numbers and the noisy total. The
decision reads the first histogram only, so it is post-processing of a DP output and discloses nothing
beyond it. A declined release without ``refined_counts`` (one made before the second draw existed) spent
``share * epsilon`` and is audited as such.

`class_prior_checks` re-derives all of it from the release for `modelshare.common.audit.release`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelshare.common.data.schema import Schema
from modelshare.common.privacy.checks import Check, recomputed
from modelshare.common.privacy.noise import SecretNoise, noisy_counts
from modelshare.common.privacy.report import PrivacyReport
from modelshare.common.privacy.requirements import DP
from modelshare.common.trees.tree import Tree

__all__ = ["DEFAULT_PRIOR_SHARE", "PAPER_PRIOR_SHARE", "DECLINE_SIGNAL", "SENSITIVITY", "PRIOR_PARAMETER",
           "ClassPrior", "Threshold", "check_prior_share", "decline_threshold", "default_decline_rows",
           "draw_class_prior", "class_prior_of",
           "tree_requirement", "class_prior_checks"]

# the share of a dp study's epsilon its class histogram spends unless the study says otherwise
DEFAULT_PRIOR_SHARE = 0.1
PAPER_PRIOR_SHARE = 0.0  # no histogram, no decline: the papers' mechanisms as published
DECLINE_SIGNAL = 1.0  # noise scales each (leaf, class) count must hold on average for the trees to be released
SENSITIVITY = 1  # L1 sensitivity of a class histogram under add/remove one row
PRIOR_PARAMETER = "class_prior"  # the report parameter that carries it


def check_prior_share(share: float) -> float:
    """``share`` as a float in [0, 1); ValueError naming the value otherwise."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= float(share) < 1.0:
        raise ValueError(f"prior_share must be a number in [0, 1) (the share of a dp study's epsilon its class "
                         f"histogram spends; 0: the papers' mechanisms); got {share!r}")
    return float(share)


def decline_threshold(tree_epsilon: float, trees: int, depth: int, n_classes: int) -> float:
    """The noisy total below which an owner releases its histogram alone (module docstring): the default rule."""
    return DECLINE_SIGNAL * n_classes * 2.0 ** min(depth, 1000) * trees / tree_epsilon  # no depth near 1000 is trained


def default_decline_rows(requirement: DP, depth: int, schema: Schema) -> float:
    """The registry's default ``decline_rows``: `decline_threshold` of the trees' requirement (``requirement``)."""
    return decline_threshold(requirement.epsilon, requirement.trees, depth, schema.n_classes)


Threshold = Callable[[DP, int], float]
"""For one schema and mechanism: the trees' requirement and depth -> the noisy total below which the owner
declines."""


@dataclass(frozen=True)
class ClassPrior:
    """A release's noisy class histogram and its accounting; ``declined`` is the owner's sentence, or None."""

    share: float
    epsilon: float
    tree_epsilon: float
    noise_scale: float
    counts: tuple[float, ...]
    threshold: float
    declined: str | None = None
    refined: tuple[float, ...] | None = None  # a declined release's second draw, at ``tree_epsilon`` (module docstring)

    @property
    def total(self) -> float:
        return math.fsum(self.counts)

    @property
    def spent(self) -> float:
        """The epsilon the release spent: the whole study's, or the share's alone for a decline without a second
        draw."""
        return self.epsilon + (self.tree_epsilon if self.declined is None or self.refined is not None else 0.0)

    @property
    def estimate(self) -> np.ndarray:
        """The class counts the miner's prior adds up: the histogram, or both draws weighted by their inverse variances
        (a discrete Laplace count's variance grows as its scale squared, so each draw weighs its epsilon squared)."""
        counts = np.asarray(self.counts, dtype=np.float64)
        if self.refined is None:
            return counts
        first, second = self.epsilon ** 2, self.tree_epsilon ** 2
        return (first * counts + second * np.asarray(self.refined, dtype=np.float64)) / (first + second)

    def to_parameters(self) -> dict[str, Any]:
        found: dict[str, Any] = {"share": self.share, "epsilon": self.epsilon, "tree_epsilon": self.tree_epsilon,
                                 "sensitivity": SENSITIVITY, "noise_scale": self.noise_scale,
                                 "counts": [float(c) for c in self.counts], "decline_threshold": self.threshold}
        if self.declined is not None:
            found["declined"] = self.declined
        if self.refined is not None:
            found["refined_counts"] = [float(c) for c in self.refined]
        return found

    @classmethod
    def from_parameters(cls, data: Mapping[str, Any]) -> ClassPrior:
        """Parse a report's ``class_prior``; ValueError naming the malformed field."""
        try:
            counts = tuple(float(c) for c in data["counts"])
            declined = data.get("declined")
            refined = data.get("refined_counts")
            return cls(float(data["share"]), float(data["epsilon"]), float(data["tree_epsilon"]),
                       float(data["noise_scale"]), counts, float(data["decline_threshold"]),
                       None if declined is None else str(declined),
                       None if refined is None else tuple(float(c) for c in refined))
        except KeyError as exc:
            raise ValueError(f"class_prior: field {exc.args[0]!r} is missing") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"class_prior: malformed field ({exc})") from None


def draw_class_prior(y: np.ndarray, n_classes: int, requirement: DP, share: float, depth: int,
                     noise: SecretNoise, threshold_of: Threshold) -> ClassPrior:
    """The noisy histogram of ``y`` at ``share * epsilon``, and whether the owner declines to release trees
    (its noisy total below ``threshold_of(the trees' requirement, depth)``, the mechanism's public rule)."""
    epsilon = requirement.epsilon * share
    tree_epsilon = requirement.epsilon - epsilon
    scale = SENSITIVITY / epsilon
    true = np.bincount(np.asarray(y, dtype=np.int64), minlength=n_classes)
    counts = noisy_counts(true, scale, noise)
    threshold = threshold_of(DP(tree_epsilon, requirement.trees), depth)
    total = float(counts.sum())
    if total >= threshold:
        return ClassPrior(share, epsilon, tree_epsilon, scale, tuple(float(c) for c in counts), threshold)
    declined = (f"the noisy class total {total:g} is below {threshold:.6g}, the rows {requirement.trees} trees of "
                f"depth {depth} over {n_classes} classes need at epsilon {tree_epsilon:g} (one noise scale per "
                f"released count); only the class histogram is released, drawn once more at epsilon {tree_epsilon:g}: "
                f"epsilon {requirement.epsilon:g} spent")
    refined = noisy_counts(true, SENSITIVITY / tree_epsilon, noise)
    return ClassPrior(share, epsilon, tree_epsilon, scale, tuple(float(c) for c in counts), threshold, declined,
                      tuple(float(c) for c in refined))


def class_prior_of(report: PrivacyReport | None) -> ClassPrior | None:
    """The release's class prior, or None when it carries none (a paper's release) or it is malformed."""
    if report is None or not isinstance(report.parameters.get(PRIOR_PARAMETER), Mapping):
        return None
    try:
        return ClassPrior.from_parameters(report.parameters[PRIOR_PARAMETER])
    except ValueError:
        return None


def tree_requirement(requirement: DP, prior: ClassPrior) -> DP:
    """What the trees of a release with ``prior`` were trained to: the study's trees at ``(1 - share) * epsilon``."""
    return DP(requirement.epsilon - requirement.epsilon * prior.share, requirement.trees)


def class_prior_checks(trees: Sequence[Tree], report: PrivacyReport, requirement: DP,
                       threshold_of: Threshold) -> list[Check]:
    """The histogram's accounting recomputed from (epsilon, share), its counts, and a decline's shape and threshold
    (``threshold_of``: the mechanism's public rule for the release's schema)."""
    name = "class histogram accounted"
    data = report.parameters.get(PRIOR_PARAMETER)
    if not isinstance(data, Mapping):
        return [Check(name, False, f"class_prior={data!r} is not a table")]
    try:
        prior = ClassPrior.from_parameters(data)
    except ValueError as exc:
        return [Check(name, False, str(exc))]
    n_classes = trees[0].schema.n_classes
    wrong = [] if 0.0 < prior.share < 1.0 else [f"share={prior.share!r} is not in (0, 1) (a release without a "
                                                 "histogram states no class_prior)"]
    if not wrong:
        epsilon = requirement.epsilon * prior.share
        wrong = recomputed(data, {"epsilon": epsilon, "tree_epsilon": requirement.epsilon - epsilon,
                                  "noise_scale": SENSITIVITY / epsilon if epsilon > 0 else math.inf,
                                  "sensitivity": SENSITIVITY})
    counts = np.asarray(prior.counts)
    for field, drawn in (("counts", prior.counts), ("refined_counts", prior.refined)):
        found = np.asarray(drawn if drawn is not None else np.zeros(n_classes), dtype=np.float64)
        if (found.size != n_classes or not np.isfinite(found).all() or (found < 0).any()
                or (found != np.rint(found)).any()):
            wrong.append(f"{field} {list(drawn or ())} are not {n_classes} non-negative integers (one per class)")
    if prior.refined is not None and prior.declined is None:
        wrong.append("refined_counts are stated by a release that does not decline (only a decline draws them)")
    if wrong:
        return [Check(name, False, "; ".join(wrong))]
    rest = ("the histogram's second draw (a decline)" if prior.refined is not None else
            "nothing else (a decline drawn once)" if prior.declined is not None else "the trees")
    checks = [Check(name, True, f"{n_classes} noisy class counts at epsilon {prior.epsilon:g} = share {prior.share:g} "
                                f"x {requirement.epsilon:g}, discrete Laplace scale {prior.noise_scale:g} (sensitivity "
                                f"{SENSITIVITY}); {prior.spent - prior.epsilon:g} more on {rest}: {prior.spent:g} in "
                                "total (sequential composition)")]
    depth = report.parameters.get("depth")
    whole = (int(depth) if isinstance(depth, (int, float)) and not isinstance(depth, bool) and float(depth).is_integer()
             and depth >= 1 else None)
    threshold = threshold_of(tree_requirement(requirement, prior), whole) if whole is not None else math.nan
    decline = "decline threshold recomputed"
    if whole is None or not math.isclose(prior.threshold, threshold, rel_tol=1e-9):
        checks.append(Check(decline, False, f"decline_threshold={prior.threshold!r}, recomputed {threshold:.6g} from "
                                            f"(trees, depth={depth!r}, the schema, tree epsilon)"))
        return checks
    below = prior.total < threshold
    if below != (prior.declined is not None):
        checks.append(Check(decline, False, f"the noisy total {prior.total:g} is {'below' if below else 'at or above'} "
                                            f"the threshold {threshold:g}, yet the release "
                                            f"{'releases trees' if below else 'declines'}"))
        return checks
    checks.append(Check(decline, True, f"noisy total {prior.total:g} vs threshold {threshold:g}: "
                                       + ("declined, histogram only" if below else "trees released")))
    if below:
        root = trees[0].nodes[0] if len(trees) == 1 else None
        held = counts if prior.refined is None else np.asarray(prior.refined)
        shaped = root is not None and len(trees[0].nodes) == 1 and np.array_equal(np.asarray(root.counts), held)
        which = "the histogram's" if prior.refined is None else "the second draw's"
        checks.append(Check("a declined release is its histogram alone", shaped,
                            f"one root-only tree whose class counts are {which}" if shaped else
                            f"the release carries {len(trees)} trees; a declined one carries one root-only tree "
                            f"holding {which} counts"))
    return checks
