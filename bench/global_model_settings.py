"""The miner's global-model settings side by side on the same releases: fixed rule against "auto", and other models.

Per stratified fold: the training part is dealt among the owners, each releases through the
mechanism (`modelshare.pipeline.release_owners`), the miner regenerates and pools the pseudo-data
(`modelshare.miner_node.tasks.pseudo_data`), and then every variant ``MODEL=MODE`` is fitted by the miner's own
code (`modelshare.miner_node.tasks.ClassificationTask.fit`, which chooses hyperparameters on the pseudo-data
only) on that same pooled table and scored on the held-out fold: accuracy and, for two classes,
AUC. BASIS (the same model on the raw pooled training rows, set by the same variant:
`modelshare.miner_node.selection.choose_basis`, ``auto`` cross-validating the same grid on the raw training
rows) is printed beside each variant. So old and new settings are compared on identical releases,
in one run (EXPERIMENTS.md), each against a BASIS tuned alike.

    python bench/global_model_settings.py --dataset nursery --mechanism kanon-rdt --owners 5 --folds 5 \\
        --variants decision-tree=fixed decision-tree=auto naive-bayes=fixed gradient-boosting=fixed
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from typing import cast

import numpy as np

from modelshare.cli.common import LEARNER_DEFAULT, model_setting, pruning_confidence
from modelshare.common.data.datasets import load_dataset
from modelshare.common.mechanisms import registry
from modelshare.common.study import ModelPlan
from modelshare.common.trees.learners.admissible import CATEGORY_SPLITS
from modelshare.common.trees.learners.random_tree import ensemble_predict_proba
from modelshare.common.trees.metrics import accuracy
from modelshare.miner_node.global_models import make_global_model
from modelshare.miner_node.offpath import OFF_PATH_MODES, OffPathMode, ReleasedLaw
from modelshare.miner_node.selection import choose_basis
from modelshare.miner_node.tasks import ClassificationTask, Fitted, pseudo_data, pseudo_sources, two_class_auc
from modelshare.miner_node.tree_vote import TreeVote
from modelshare.pipeline import PipelineConfig, _pooled, fold_plan, release_owners


def plan_for(model: str, setting: str | dict, mechanism: str, seed: int) -> ModelPlan:
    """What the miner's fit reads of a study: seed, mechanism and the model's setting."""
    return ModelPlan.checked([model], {model: setting}, seed=seed, mechanism=mechanism)


def distilled(trees: list, report: object, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Labels of one release's pseudo rows by its whole ensemble's vote (unchanged for a single tree)."""
    if len(trees) == 1:
        return y
    return np.argmax(ensemble_predict_proba(trees, X), axis=1).astype(np.int64)


def basis_fit(model: str, plan: ModelPlan, schema: object, X: np.ndarray, y: np.ndarray) -> Fitted:
    """BASIS: ``model`` on the raw training rows, set by the same setting as the pseudo-data variant (choose_basis)."""
    seed = plan.seed % 2**31

    def build(params: dict) -> object:
        return make_global_model(model, schema, random_state=seed, **params)

    choice = choose_basis(model, plan, X, y, build, regression=False)
    return Fitted(build(choice.parameters).fit(X, y), choice)


def learner_params(args: argparse.Namespace) -> dict[str, object]:
    """The owners' learner parameters the flags set (none: the learner's defaults for the requirement)."""
    params: dict[str, object] = {}
    if args.max_depth is not None:
        params["max_depth"] = args.max_depth
    if args.category_split is not None:
        params["category_split"] = args.category_split
    if args.confidence != LEARNER_DEFAULT:
        params["confidence"] = args.confidence
    return params


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="nursery")
    p.add_argument("--mechanism", default="kanon-rdt")
    p.add_argument("--requirement", default=None, help="default: the mechanism's")
    p.add_argument("--disclosure", default="counts")
    p.add_argument("--learner", default="cart")
    p.add_argument("--max-depth", type=int, default=None, help="the owners' tree depth (default: the mechanism's)")
    p.add_argument("--category-split", choices=CATEGORY_SPLITS, default=None,
                   help="the admissible learner's categorical splits (default: local_learner's, "
                   "either under k-anonymity)")
    p.add_argument("--confidence", type=pruning_confidence, default=LEARNER_DEFAULT,
                   help="the admissible learner's pruning confidence, or none (default: local_learner's)")
    p.add_argument("--owners", type=int, default=5)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--pgen-scale", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", nargs="+", default=["decision-tree=fixed", "decision-tree=auto"],
                   help="MODEL=auto, MODEL=fixed or MODEL:KEY=VALUE,... (simulate's --model-setting)")
    p.add_argument("--off-path", nargs="+", default=["uniform"], choices=OFF_PATH_MODES,
                   help="PGEN's off-path draws to compare (modelshare.miner_node.offpath); each "
                   "gives its own pseudo table")
    p.add_argument("--vote", action="store_true",
                   help="also score the miner's tree-vote model (the released trees' summed leaf class distributions)")
    p.add_argument("--distill", action="store_true",
                   help="also score every variant on pseudo rows labelled by their release's whole ensemble")
    args = p.parse_args()
    table = load_dataset(args.dataset)
    schema = table.schema
    X, y = schema.encode(table.frame)
    requirement = args.requirement or registry.get(args.mechanism).default_requirement
    config = PipelineConfig(n_sources=args.owners, folds=args.folds, mechanism=args.mechanism, requirement=requirement,
                            disclosure=args.disclosure, learner=args.learner, pgen_scale=args.pgen_scale,
                            learner_params=learner_params(args),
                            random_state=args.seed)
    task = ClassificationTask(schema)
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    chosen: dict[str, list[str]] = defaultdict(list)
    for _, fold, test, seed in fold_plan(y, config):
        rng = np.random.default_rng(seed)
        _, released, audited = release_owners(schema, X[~test], y[~test], config, rng)
        trees = [t for r in released.values() for t in r.trees]
        if args.vote and trees:
            voted = TreeVote(trees)
            scores["tree-vote"]["accuracy"].append(accuracy(y[test], voted.predict(X[test])))
            auc = two_class_auc(voted, X[test], y[test], schema.n_classes)
            scores["tree-vote"]["auc"].append(np.nan if auc is None else auc)
            scores["tree-vote"]["seconds"].append(0.0)
        tables = [("BASIS", (X[~test], y[~test], None))]
        for off_path in args.off_path:
            law = None if off_path == "uniform" else ReleasedLaw.from_trees(trees, cast(OffPathMode, off_path))
            parts = [(r, pseudo_data(r.trees, r.report, args.pgen_scale, rng, "exact", law)) for r in released.values()]
            Xp, yp = _pooled([part for _, part in parts], schema)
            groups = np.concatenate([i * 65536 + pseudo_sources(r.trees, r.report, args.pgen_scale, yr.shape[0])
                                     for i, (r, (_, yr)) in enumerate(parts)])
            tables.insert(len(tables) - 1, ("PGEN" if off_path == "uniform"
                                            else f"off-path {off_path}", (Xp, yp, groups)))
        if args.distill:
            Xd, yd = _pooled([(Xr, distilled(r.trees, r.report, Xr, yr)) for r, (Xr, yr) in parts], schema)
            tables.append(("distilled", (Xd, yd, groups)))
        for variant in args.variants:
            model, setting = model_setting(variant)
            mode = setting if isinstance(setting, str) else ",".join(f"{k}={v}" for k, v in setting.items())
            started = time.perf_counter()
            plan = plan_for(model, setting, args.mechanism, args.seed)
            for method, (Xt, yt, gt) in tables:
                fitted = (basis_fit(model, plan, schema, Xt, yt) if method == "BASIS"
                          else task.fit(model, plan, Xt, yt, gt))
                label = {"PGEN": f"{model} {mode}"}.get(method, f"{model} {mode} {method}")
                scores[label]["accuracy"].append(accuracy(y[test], fitted.model.predict(X[test])))
                auc = two_class_auc(fitted.model, X[test], y[test], schema.n_classes)
                scores[label]["auc"].append(np.nan if auc is None else auc)
                scores[label]["seconds"].append(time.perf_counter() - started)
                if mode == "auto":
                    chosen[label].append(fitted.choice.selection.split(" by ")[0].removeprefix("auto: "))
                if fold == 0 and mode == "auto":
                    print(f"  {label}: {fitted.choice.selection}", flush=True)
        print(f"fold {fold}: {len(released)} of {args.owners} owners released, {audited} passed the audit, "
              f"{yp.shape[0]} pseudo rows", flush=True)
    print(f"\n{args.dataset} {args.mechanism} {requirement} {args.owners} owners, {args.folds} folds, "
          f"pgen_scale {args.pgen_scale}")
    print(f"{'variant':32} {'accuracy':>16} {'AUC':>16} {'s/fold':>7}")
    for label, s in scores.items():
        acc, auc = np.array(s["accuracy"]), np.array(s["auc"])
        auc_text = "-" if np.isnan(auc).all() else f"{np.nanmean(auc):.4f} ± {np.nanstd(auc):.4f}"
        print(f"{label:32} {acc.mean():.4f} ± {acc.std():.4f} {auc_text:>16} {np.mean(s['seconds']):7.1f}")
    for label, picks in chosen.items():
        print(f"{label} chose: {'; '.join(picks)}")


if __name__ == "__main__":
    main()
