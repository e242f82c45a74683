"""A dp study's gradient boosting on the local and the Dask engine, and on Dask with a guaranteed leaf floor, in one
run.

Issue 23's eps = 0.1 setting: each repeat releases one DPEA tree of depth 3 over adult.data (the bundled
Adult rows from adult.data; the rows from adult.test evaluate), with its own seed, and learns boosting
from the same PGEN rows three ways:

* ``local``: the study mined on the local engine (`modelshare.miner_node.mining.mine`, as the miner's coordinator
  calls it): scikit-learn's boosting with the dp fixed rule's leaf floor, n = 2 % of the PGEN rows;
* ``dask``: the study mined on the Dask engine (a LocalCluster of one worker): xgboost with its fixed
  parameters, which have no floor (docs/scale-out.md);
* ``dask floor``: the Dask engine's same model fitted on the same Parquet files (`DaskEngine.fit`) with
  ``min_child_weight`` = h_max (n - 1/2), h_max the largest hessian a row can have (1/4 for the logistic
  loss, 1/2 for xgboost's softmax 2p(1-p)): every leaf then holds at least n rows, but leaves of n rows
  or more are refused where the model is confident (small hessians). The floor the engine could map.

Results (mean and standard deviation of the accuracy on adult.test, and each repeat's) go to bench/RESULTS.md.

    python bench/dask_dp_boosting.py [--repeats 5] [--epsilon 0.1] [--dir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from results_file import machine, write_section  # noqa: E402 (bench/ is sys.path[0] when run as a script)

from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.study import spec_from_mapping
from modelshare.common.federation.wire import decode_model, model_message
from modelshare.common.mechanisms.release import release
from modelshare.miner_node.config import MiningConfig
from modelshare.miner_node.dask_engine import DaskEngine, xgboost_parameters
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine
from modelshare.miner_node.selection import global_model_params

HEADING = "## A dp study's gradient boosting on the local and the Dask engine (bench/dask_dp_boosting.py)"
DEPTH = 3
VARIANTS = ("local", "dask", "dask floor")


def hessian_bound(n_classes: int) -> float:
    """The largest hessian one row can have in xgboost's boosting: p(1-p) <= 1/4, or softmax's 2p(1-p) <= 1/2."""
    return 0.25 if n_classes == 2 else 0.5


def repeat(seed: int, epsilon: float, directory: Path) -> dict[str, tuple[float, str]]:
    """One release and the three minings of it: per variant, the accuracy on adult.test and the parameters."""
    table = load_dataset("adult")
    schema = table.schema
    train = table.frame.index < 32561  # adult.data's rows; the rest are adult.test's
    X, y = schema.encode(table.frame[train])
    X_test, y_test = schema.encode(table.frame[~train])
    found = release("dpea", schema=schema, X=X, y=y, requirement=f"dp:epsilon={epsilon:g},trees=1", max_depth=DEPTH,
                    random_state=seed)
    accepted = [AcceptedModel("site-a", decode_model(model_message(found)))]
    spec = spec_from_mapping({
        "study": {"id": "dp-boosting", "seed": seed}, "schema": {"dataset": "adult"},
        "release": {"mechanism": "dpea", "requirement": f"dp:epsilon={epsilon:g},trees=1"},
        "training": {"max_depth": DEPTH}, "mining": {"global_models": ["gradient-boosting"], "pgen_scale": 1}}).spec
    evaluation = Evaluation(X_test, y_test, np.arange(y_test.shape[0]))
    out = {}
    for engine in ("local", "dask"):
        mining = MiningConfig(engine=engine, workers=1 if engine == "dask" else None)
        model = mine(spec, schema, accepted, evaluation, mining=mining, pseudo_dir=directory / str(seed)).models[0]
        shown = {k: (v.float_value or v.int_value) for k, v in model.parameters.items() if k == "min_samples_leaf"}
        out[engine] = (model.accuracy, f"{model.train_rows} rows, {shown or 'no floor'}")
    rows = model.train_rows
    floor = global_model_params("gradient-boosting", "dpea", rows)["min_samples_leaf"]
    params = {**xgboost_parameters("gradient-boosting", schema.n_classes, {}),
              "min_child_weight": hessian_bound(schema.n_classes) * (floor - 0.5)}
    files = sorted((directory / str(seed)).glob("owner=*/part-*.parquet"))
    with DaskEngine(MiningConfig(engine="dask", workers=1)) as engine:
        fitted = engine.fit("gradient-boosting", schema, files, int(spec.seed) % 2**31, params)
    out["dask floor"] = (float((fitted.predict(X_test) == y_test).mean()),
                         f"{rows} rows, min_child_weight {params['min_child_weight']:g}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (the table shows a standard deviation)")
    started = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory(prefix="dask-dp-", dir=args.dir) as directory:
        for r in range(args.repeats):
            runs.append(repeat(r, args.epsilon, Path(directory)))
            print(r, runs[-1], flush=True)
    lines = [HEADING, "",
             f"{machine()}; one DPEA tree of depth {DEPTH} at eps = {args.epsilon:g} over "
             "adult.data per repeat (seed = "
             f"repeat), scored on adult.test; Dask: a LocalCluster of one worker; {args.repeats} repeats in "
             f"{time.perf_counter() - started:.0f} s.", "",
             "| variant | accuracy mean ± sd | per repeat | repeat 0's fit |", "|---|---|---|---|"]
    for label in VARIANTS:
        accuracies = [run[label][0] for run in runs]
        lines.append(f"| {label} | {np.mean(accuracies):.4f} ± {np.std(accuracies, ddof=1):.4f} | "
                     f"{', '.join(f'{a:.4f}' for a in accuracies)} | {runs[0][label][1]} |")
    lines += ["", f"`python bench/dask_dp_boosting.py --repeats {args.repeats} --epsilon {args.epsilon:g}`", ""]
    write_section(HEADING, "\n".join(lines))


if __name__ == "__main__":
    main()
