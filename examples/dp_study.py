"""A differentially private (dp) study with the Python API, on one machine, in about a minute.

Three owners each hold a share of the bundled Nursery table, dealt as `modelshare simulate --owners 3`
deals it (`ms.deal`). Each releases a DiffPETs forest (DP ExtraTrees, Li, Chen and Xie 2020) under
``dp:epsilon=1,trees=10``: 10 random trees of depth 4, the total epsilon of 1 spent over them, the noise
drawn by OpenDP's exact samplers from the OS CSPRNG (no seed: a seeded release could be replayed and fails
its audit). Each release is audited from its released numbers alone; then `ms.mine` runs the miner's own
mining on the three releases with a dp study's defaults (PGEN per release, pooled, a decision tree with the
dp leaf floor and naive Bayes), scored on the held-out rows against BASIS, the same models trained on the
owners' pooled raw rows. The noise is fresh on every run, so the accuracies vary from run to run.

Run it with ``python examples/dp_study.py``; the same study through a federation is
``modelshare simulate --owners 3 --mechanism diffpets`` (docs/how-to/dp-study.md).
"""

from __future__ import annotations

import numpy as np

import modelshare as ms

REQUIREMENT = "dp:epsilon=1,trees=10"  # total epsilon 1 over 10 trees: simulate's default for a dp mechanism


def main() -> None:
    """Release, audit, mine and score; print one line per step."""
    table = ms.load_dataset("nursery")
    X, y = table.schema.encode(table.frame)
    test, owners = ms.deal(y, owners=3, random_state=0)

    releases = []
    for i, rows in enumerate(owners):
        released = ms.release("diffpets", requirement=REQUIREMENT, schema=table.schema, X=X[rows], y=y[rows],
                              max_depth=4)  # no random_state: secure noise
        result = ms.audit(released)
        assert result.passed, [c for c in result.checks if not c.passed]
        print(f"owner {i + 1}: {len(rows):,} rows -> {released.report.mechanism} release of {len(released.trees)} "
              f"trees, {released.report.guarantee}; audit passed")
        releases.append(released)

    mined = ms.mine(releases, (X[test], y[test]))
    training = np.concatenate(owners)
    for model in mined.scores.itertuples():
        basis_model = ms.fit_global_model(model.model, table.schema, X[training], y[training], random_state=0)
        basis = float((basis_model.predict(X[test]) == y[test]).mean())
        print(f"{model.model}: accuracy {model.accuracy:.3f} on {len(test):,} held-out rows from "
              f"{model.train_rows:,} pseudo rows; BASIS {basis:.3f} ({100 * (basis - model.accuracy):.1f} accuracy "
              "points apart)")


if __name__ == "__main__":
    main()
