"""How the miner learns a global decision tree from the PGEN rows of a noise-based eps-DP release.

PGEN draws every attribute a leaf does not constrain uniformly, and DP trees are shallow (few
levels, coarse leaves), so most of a pseudo row is uniform noise. A fully grown tree on such rows
isolates single rows on those noise columns and predicts close to chance: 0.58 on Adult from a
DPEA release whose own tree scores 0.84, below the majority class's 0.754. The global
``decision-tree`` of a dp study therefore gets ``min_samples_leaf`` = ``PGEN_LEAF_SHARE`` of its
training rows, which reads only the pseudo rows, so it costs no privacy. APT and pruning studies
keep the fully grown tree of the model-sharing paper, whose deep trees leave little uniform noise.

Considered and left out: zeroing leaf counts below a few noise scales before PGEN, to drop the
rows that the clamped noise of empty leaves adds. It helped on Adult (30,000 rows) but cost 3
points on a 2,000-row table whose real leaves are as small as the noise, so it is no default.
"""

from __future__ import annotations

from typing import Any

from common.mechanisms import DP_MECHANISM_NAMES

__all__ = ["PGEN_LEAF_SHARE", "global_model_params"]

PGEN_LEAF_SHARE = 0.005  # min_samples_leaf of a dp study's global decision tree, as a share of its rows


def global_model_params(name: str, mechanism: str, rows: int) -> dict[str, Any]:
    """Hyperparameters of global model ``name`` learned from ``rows`` PGEN rows of a ``mechanism`` study."""
    if name == "decision-tree" and mechanism in DP_MECHANISM_NAMES:
        return {"min_samples_leaf": max(1, round(PGEN_LEAF_SHARE * rows))}
    return {}
