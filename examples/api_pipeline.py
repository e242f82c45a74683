"""Model sharing end to end with the Python API, on one machine, in a few seconds.

Three owners each hold a third of the bundled Car table, dealt as `modelshare simulate --dataset car
--owners 3` deals it (`ms.deal`). Each trains a local tree grown to the (c,l)-diversity requirement
`modelshare simulate` uses by default and releases it APT-pruned with hit/miss disclosure; each release
is audited from its released numbers alone. `ms.mine` then runs the miner's own mining on the three
releases with a study's defaults: pseudo-data regenerated from every release (PGEN), pooled, and a
global decision tree learned with its default setting, scored on the held-out rows against BASIS, the
same model trained on the owners' pooled raw rows (which only a simulation can see).

Run it with ``python examples/api_pipeline.py``.
"""

from __future__ import annotations

import numpy as np

import modelshare as ms

REQUIREMENT = "cl-diversity:c=5,l=2"  # simulate's default: no released leaf is dominated by one class


def main() -> None:
    """Release, audit, regenerate, learn and score; print one line per step."""
    table = ms.load_dataset("car")
    X, y = table.schema.encode(table.frame)
    test, owners = ms.deal(y, owners=3, random_state=0)
    training = np.concatenate(owners)

    releases = []
    for i, rows in enumerate(owners):
        tree = ms.train_tree(table.schema, X[rows], y[rows], learner="admissible", requirement=REQUIREMENT,
                             disclosure="hit_miss", random_state=0)
        released = ms.release("apt", tree=tree, requirement=REQUIREMENT, disclosure="hit_miss")
        result = ms.audit(released)
        assert result.passed, [c for c in result.checks if not c.passed]
        print(f"owner {i + 1}: {len(rows):,} rows -> {released.report.mechanism} release of "
              f"{len(released.trees[0].paths())} paths meeting {REQUIREMENT}; audit passed")
        releases.append(released)

    mined = ms.mine(releases, (X[test], y[test]), global_models=["decision-tree"])
    [tree] = mined.scores.itertuples()
    basis_model = ms.fit_global_model("decision-tree", table.schema, X[training], y[training], random_state=0)
    basis = float((basis_model.predict(X[test]) == y[test]).mean())
    print(f"global tree from {tree.train_rows:,} pseudo rows: accuracy {tree.accuracy:.3f} on {len(test):,} held-out "
          f"rows; BASIS {basis:.3f} ({100 * (basis - tree.accuracy):.1f} accuracy points apart)")


if __name__ == "__main__":
    main()
