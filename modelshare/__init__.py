"""modelshare: privacy-preserving data mining by knowledge model sharing.

``import modelshare as ms`` gives the Python API (`modelshare.api`; docs/python-api.md):
``ms.load_dataset``, ``ms.load_table``, ``ms.deal``, ``ms.train_tree``, ``ms.release``, ``ms.audit``,
``ms.mine``, ``ms.pgen``, ``ms.fit_global_model``, ``ms.run_study``, ``ms.mechanisms``,
``ms.read_release``, ``ms.write_release`` and the types ``ms.Mined``, ``ms.Release``, ``ms.Schema``,
``ms.Tree``, ``ms.PipelineConfig``; ``dir(ms)`` lists exactly these. They are imported on first use,
so that the command line (which imports this package) starts without numpy, pandas or scikit-learn.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "load_dataset", "load_table", "deal", "train_tree", "release", "audit", "mine", "pgen", "fit_global_model",
    "run_study", "mechanisms", "read_release", "write_release", "Mined", "PipelineConfig", "Release", "Schema", "Tree",
]


def __getattr__(name: str) -> Any:
    """The API names, imported from `modelshare.api` on first use (PEP 562)."""
    if name in __all__:
        from modelshare import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'modelshare' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names only (``dir(ms)``): the API, not the submodules and helpers this package also holds."""
    return sorted(__all__)
