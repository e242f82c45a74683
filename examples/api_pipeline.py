"""Model sharing end to end with the Python API, on one machine, in a few seconds.

Three owners each hold a third of the bundled Car table. Each trains a local tree grown to the
(c,l)-diversity requirement `modelshare simulate` uses by default and releases it APT-pruned with
hit/miss disclosure; each release is audited from its released numbers alone. The miner's side
pools pseudo-data regenerated from every release (PGEN) and learns a global decision tree, scored
on held-out rows against BASIS, the same model trained on the owners' pooled raw rows (which only
a simulation can see).

Run it with ``python examples/api_pipeline.py``. This is the plain PGEN of `ms.pgen`, one release
at a time; the miner of a real study can also fit laws across releases (study.toml's `off_path`,
`on_path`), so its figures can differ from these.
"""

from __future__ import annotations

import numpy as np

import modelshare as ms

REQUIREMENT = "cl-diversity:c=5,l=2"  # simulate's default: no released leaf is dominated by one class


def main() -> None:
    """Release, audit, regenerate, learn and score; print one line per step."""
    table = ms.load_dataset("car")
    X, y = table.schema.encode(table.frame)
    rng = np.random.default_rng(0)
    test = rng.random(len(y)) < 0.2
    owners = np.array_split(rng.permutation(np.flatnonzero(~test)), 3)

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

    parts = [ms.pgen(r, scale=10, random_state=i) for i, r in enumerate(releases)]
    X_pseudo, y_pseudo = np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    model = ms.fit_global_model("decision-tree", table.schema, X_pseudo, y_pseudo, min_samples_leaf=20, random_state=0)
    ppgen = float((model.predict(X[test]) == y[test]).mean())

    basis_model = ms.fit_global_model("decision-tree", table.schema, X[~test], y[~test], random_state=0)
    basis = float((basis_model.predict(X[test]) == y[test]).mean())
    print(f"global tree from {len(y_pseudo):,} pseudo rows: accuracy {ppgen:.3f} on {int(test.sum()):,} held-out "
          f"rows; BASIS {basis:.3f} ({100 * (basis - ppgen):.1f} accuracy points apart)")


if __name__ == "__main__":
    main()
