"""Every eps-DP release mechanism of modelshare next to diffprivlib's forest and tree, in the same run.

On Adult (train: the rows of adult.data, test: the rows of adult.test; the bundled table holds
the two files concatenated, so the split is by position, `ADULT_TRAIN_ROWS`), at each total
epsilon (default 0.1, 1, 5) and for ``--repeats`` seeds:

* every ``dp`` mechanism of `modelshare.common.mechanisms.registry`, released by `release` exactly as an
  owner releases it (``dp:epsilon=E,trees=T``), scored twice: the released ensemble itself
  (summed leaf counts, `ensemble_predict_proba`) and the miner's global decision tree learned
  from the release's PGEN pseudo-data exactly as the miner learns it (with the leaf floor of
  `modelshare.miner_node.dp_pgen`): what a federation study yields;
* diffprivlib's ``RandomForestClassifier`` (T trees) and ``DecisionTreeClassifier``, given the
  schema's *public* attribute ranges as bounds and the known classes (so neither reads the data
  to find them, as ours do not);
* the non-private references: the majority class and a depth-5 scikit-learn tree.

diffprivlib 0.6.x does not import under scikit-learn 1.9, and it is a bench-only extra, never a
runtime dependency of modelshare; run the bench in its own environment::

    python -m venv /tmp/dplenv && . /tmp/dplenv/bin/activate
    pip install "diffprivlib==0.6.6" "scikit-learn>=1.4,<1.6" -e .
    python bench/dp_vs_diffprivlib.py [--epsilons 0.1,1,5] [--repeats 3] [--trees 10] [--mechanism-trees dpea=1]

Results (mean and std of test accuracy over the repeats, fit seconds) go to bench/RESULTS.md, with
each method's accuracy as a ratio to diffprivlib's forest at the same epsilon.
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from results_file import (  # bench/ is sys.path[0] when run as a script
    machine,
    write_section,
)
from sklearn.tree import DecisionTreeClassifier as SkTree

from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.release import release
from modelshare.common.privacy.requirements import parse_requirement
from modelshare.common.trees.learners.random_tree import ensemble_predict_proba
from modelshare.miner_node.dp_pgen import dp_pgen_scale
from modelshare.miner_node.global_models import make_global_model
from modelshare.miner_node.pgen import pgen_ensemble
from modelshare.miner_node.selection import global_model_params

SECTION = "## eps-DP releases against diffprivlib (bench/dp_vs_diffprivlib.py)"
ADULT_TRAIN_ROWS = 32561  # rows of adult.data; the bundled table appends adult.test's 16,281 after them
DEFAULT_DEPTH = {"laplace-rdt": 4, "diffpets": 6, "dpea": 3}  # per mechanism; --depth MECH=D overrides
DEFAULT_TREES = {"dpea": 1}  # DPEA draws whole trees, so one tree gets all of eps; --mechanism-trees MECH=T overrides


@dataclass
class Score:
    method: str
    epsilon: float
    accuracy: list[float]
    seconds: list[float]


def adult_split() -> tuple[Schema, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Adult's own train/test split: bundled positions below `ADULT_TRAIN_ROWS` are adult.data's rows."""
    table = load_dataset("adult")
    X, y = table.schema.encode(table.frame)
    train = np.asarray(table.frame.index) < ADULT_TRAIN_ROWS
    return table.schema, X[train], y[train], X[~train], y[~train]


def public_bounds(schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Per attribute, the public range: [0, categories - 1] for codes, the schema's [low, high] otherwise."""
    low = [0.0 if isinstance(a, CategoricalAttribute) else a.low for a in schema.attributes]
    high = [a.size - 1.0 if isinstance(a, CategoricalAttribute) else a.high for a in schema.attributes]
    return np.array(low), np.array(high)


def timed(fit: Callable[[], Callable[[np.ndarray], np.ndarray]], X_test: np.ndarray,
          y_test: np.ndarray) -> tuple[float, float]:
    """Accuracy on the test rows of the predictor ``fit`` returns, and the seconds ``fit`` took."""
    t0 = time.perf_counter()
    predict = fit()
    seconds = time.perf_counter() - t0
    return float(np.mean(predict(X_test) == y_test)), seconds


def ours(schema: Schema, X: np.ndarray, y: np.ndarray, mechanism: str, epsilon: float, trees: int, depth: int,
         seed: int) -> tuple[Callable[[], Callable], Callable[[], Callable]]:
    """Fitters for the released ensemble and for the global tree on its PGEN rows (one release, shared)."""
    requirement = str(parse_requirement(f"dp:epsilon={epsilon:g},trees={trees}"))
    state: dict = {}

    def ensemble() -> Callable:
        state["release"] = release(mechanism, schema=schema, X=X, y=y, requirement=requirement, max_depth=depth,
                                   random_state=seed)
        released = state["release"].trees
        return lambda Xt: ensemble_predict_proba(released, Xt).argmax(axis=1)

    def global_tree() -> Callable:
        trees = state["release"].trees
        Xp, yp = pgen_ensemble(trees, scale=dp_pgen_scale(1.0, mechanism, trees), beta=1.0,
                               rng=np.random.default_rng(seed))
        model = make_global_model("decision-tree", schema, random_state=seed,
                                  **global_model_params("decision-tree", mechanism, len(yp)))
        model.fit(Xp, yp)
        return model.predict

    return ensemble, global_tree


def measure(args: argparse.Namespace) -> list[Score]:
    from diffprivlib.models import DecisionTreeClassifier as DplTree
    from diffprivlib.models import RandomForestClassifier as DplForest

    schema, X, y, X_test, y_test = adult_split()
    bounds, classes = public_bounds(schema), np.arange(schema.n_classes)
    scores: dict[tuple[str, float], Score] = {}

    def record(method: str, epsilon: float, result: tuple[float, float]) -> None:
        score = scores.setdefault((method, epsilon), Score(method, epsilon, [], []))
        score.accuracy.append(result[0])
        score.seconds.append(result[1])
        print(f"  {method:<34} eps={epsilon:<5g} accuracy {result[0]:.4f} ({result[1]:.1f} s)", flush=True)

    majority = float(np.mean(y_test == np.bincount(y).argmax()))
    for seed in range(args.repeats):
        record("non-private: majority class", 0.0, (majority, 0.0))
        record("non-private: scikit-learn tree, depth 5", 0.0,
               timed(lambda seed=seed: SkTree(max_depth=5, random_state=seed).fit(X, y).predict, X_test, y_test))
        for epsilon in args.epsilons:
            for mechanism in registry.names(family="dp"):
                depth = args.depth.get(mechanism, DEFAULT_DEPTH.get(mechanism, 4))
                trees = args.mechanism_trees.get(mechanism, DEFAULT_TREES.get(mechanism, args.trees))
                ensemble, global_tree = ours(schema, X, y, mechanism, epsilon, trees, depth, seed)
                label = f"{mechanism} (depth {depth}, {trees} tree{'s' * (trees > 1)})"
                record(f"{label}: released ensemble", epsilon, timed(ensemble, X_test, y_test))
                record(f"{label}: PGEN global tree", epsilon, timed(global_tree, X_test, y_test))
            record(f"diffprivlib forest ({args.trees} trees)", epsilon, timed(
                lambda epsilon=epsilon, seed=seed: DplForest(n_estimators=args.trees, epsilon=epsilon, bounds=bounds,
                                                            classes=classes,
                                  random_state=seed).fit(X, y).predict, X_test, y_test))
            record("diffprivlib tree", epsilon, timed(
                lambda epsilon=epsilon, seed=seed: DplTree(epsilon=epsilon, bounds=bounds, classes=classes,
                                                           random_state=seed).fit(X, y).predict,
                X_test, y_test))
    return list(scores.values())


def write_results(command: str, args: argparse.Namespace, scores: list[Score]) -> None:
    baseline = {s.epsilon: np.mean(s.accuracy) for s in scores if s.method.startswith("diffprivlib forest")}
    lines = [
        SECTION, "",
        f"`{command}` on {datetime.date.today().isoformat()}, {machine()}. Adult, trained on the "
        f"{ADULT_TRAIN_ROWS:,} rows of adult.data (less rows with '?') and tested on adult.test's; "
        f"{args.repeats} seeds; {args.trees} trees per ensemble unless the method says otherwise; diffprivlib "
        f"{_dpl_version()} given the "
        "schema's public ranges as bounds. Ratio: mean accuracy over diffprivlib's forest at the same epsilon.",
        "",
        "| method | total epsilon | test accuracy (mean ± std) | ratio to diffprivlib forest | fit seconds |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in sorted(scores, key=lambda s: (s.epsilon, s.method)):
        mean = float(np.mean(s.accuracy))
        ratio = f"{mean / baseline[s.epsilon]:.3f}" if s.epsilon in baseline else "-"
        eps = "∞ (no privacy)" if s.epsilon == 0.0 else f"{s.epsilon:g}"
        lines.append(f"| {s.method} | {eps} | {mean:.4f} ± {np.std(s.accuracy):.4f} | {ratio} | "
                     f"{np.mean(s.seconds):.2f} |")
    write_section(SECTION, "\n".join(lines) + "\n")


def _dpl_version() -> str:
    import diffprivlib

    return diffprivlib.__version__


def _per_mechanism(text: str) -> dict[str, int]:
    """``MECH=N,...`` as a dict."""
    pairs = [p.split("=", 1) for p in text.split(",") if p]
    return {name: int(value) for name, value in pairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=lambda t: tuple(float(v) for v in t.split(",")), default=(0.1, 1.0, 5.0))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trees", type=int, default=10)
    parser.add_argument("--depth", type=_per_mechanism, default={}, metavar="MECH=D,...",
                        help=f"tree depth per mechanism (defaults {DEFAULT_DEPTH})")
    parser.add_argument("--mechanism-trees", type=_per_mechanism, default={}, metavar="MECH=T,...",
                        help=f"trees per release of a mechanism (defaults {DEFAULT_TREES}, else --trees)")
    args = parser.parse_args()
    scores = measure(args)
    flags = [("--epsilons", ",".join(f"{e:g}" for e in args.epsilons), "0.1,1,5"), ("--repeats", args.repeats, 3),
             ("--trees", args.trees, 10)]
    command = "python bench/dp_vs_diffprivlib.py" + "".join(f" {f} {v}" for f, v, d in flags if v != d)
    for flag, given in (("--depth", args.depth), ("--mechanism-trees", args.mechanism_trees)):
        if given:
            command += f" {flag} " + ",".join(f"{k}={v}" for k, v in given.items())
    write_results(command, args, scores)


if __name__ == "__main__":
    main()
