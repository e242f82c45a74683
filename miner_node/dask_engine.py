"""The Dask engine: global models learned on a Dask cluster from a study's Parquet pseudo-data.

Chosen by ``[mining] engine = "dask"`` (`miner_node.config.MiningConfig`); needs the ``dask`` extra
(``pip install 'modelshare[dask]'``: dask.distributed and xgboost), imported only when a study runs
on it. The cluster is either an existing scheduler (``scheduler = "tcp://HOST:PORT"``; its workers
read the Parquet files at the miner's paths, so they share the state directory's file system) or a
LocalCluster of ``workers`` single-threaded processes on loopback that lives for one study.

The global models, each learned from the study's Parquet files without pooling them in the miner:

* ``gradient-boosting``: `xgboost.dask` histogram boosting, up to 200 rounds of shrinkage 0.1, at most
  31 leaves a tree, L2 penalty 1 (the local engine's `HistGradientBoostingClassifier` settings, without
  its early stopping);
* ``random-forest``: `xgboost.dask` in random-forest mode, 100 parallel trees of one unshrunk round,
  each on 63.2 % of the rows and 80 % of the attributes per split;
* ``decision-tree``: one unshrunk round of a single xgboost tree (for more than two classes, one
  regression tree per class on the softmax gradient, which is xgboost's form of one tree), depth at
  most 12 - the documented equivalent of the local CART;
* ``naive-bayes``: count tables, one Dask group-by per categorical attribute and per class sums of the
  numeric ones, turned into exactly the local `MixedNaiveBayes` (Laplace ``alpha`` 1, GaussianNB's
  variance smoothing);
* ``rules`` has no Dask form: a study that asks for it on this engine fails with that reason.

Categorical attributes are learned from their codes as ordered numbers. The models use fixed
hyperparameters, whatever the study's ``[global_models]`` setting (its modes are the local engine's);
the results say so. Every model is scored on the study's evaluation table in the miner, as on the
local engine.

Faults: every call to the cluster (connecting, each fit, each group-by) has a deadline,
``engine_timeout_seconds``: a lost or stuck cluster raises `EngineError` naming the call and the
deadline, which fails the study with that reason; the miner never waits on it longer. A worker
that dies mid-fit is Dask's to retry (its tasks are recomputed on the others); a fit that fails for
good raises `EngineError` with Dask's reason.
"""

from __future__ import annotations

import concurrent.futures
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from common.data.schema import CategoricalAttribute, Schema
from miner_node.config import MiningConfig

__all__ = ["DASK_MODELS", "EngineError", "DaskEngine", "BoosterModel", "CountNaiveBayes", "check_models"]

log = logging.getLogger("modelshare.miner")
T = TypeVar("T")

#: The classification global models the Dask engine learns, with the fixed parameters the results report.
DASK_MODELS: dict[str, dict[str, Any]] = {
    "gradient-boosting": {"num_boost_round": 200, "eta": 0.1, "max_leaves": 31, "grow_policy": "lossguide",
                          "max_depth": 0, "lambda": 1.0},
    "random-forest": {"num_boost_round": 1, "num_parallel_tree": 100, "eta": 1.0, "subsample": 0.632,
                      "colsample_bynode": 0.8, "max_depth": 12, "lambda": 1e-5},
    "decision-tree": {"num_boost_round": 1, "eta": 1.0, "max_depth": 12, "lambda": 1e-5},
    "naive-bayes": {"alpha": 1.0},
}
_VAR_SMOOTHING = 1e-9  # GaussianNB's default


class EngineError(RuntimeError):
    """The cluster failed or did not answer in time; the message says which call and why (a study's failure reason)."""


@dataclass
class BoosterModel:
    """A fitted xgboost booster as a global model: class probabilities and class indices over all the schema's classes."""

    booster: Any
    n_classes: int
    names: tuple[str, ...]

    @property
    def classes_(self) -> np.ndarray:
        return np.arange(self.n_classes)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        import xgboost

        p = np.asarray(self.booster.predict(xgboost.DMatrix(X, feature_names=list(self.names))), dtype=np.float64)
        return np.column_stack([1.0 - p, p]) if self.n_classes == 2 else p

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.argmax(self.predict_proba(X), axis=1).astype(np.int64)


@dataclass
class CountNaiveBayes:
    """Mixed naive Bayes from sufficient statistics: exactly `miner_node.global_models.MixedNaiveBayes` fitted on the rows.

    ``counts[j]`` is the (classes, categories) count table of categorical attribute ``j``; ``n``,
    ``sums`` and ``squares`` are per class the rows and the numeric attributes' sums and sums of squares.
    """

    schema: Schema
    alpha: float
    counts: dict[int, np.ndarray]
    n: np.ndarray
    sums: np.ndarray
    squares: np.ndarray

    @property
    def classes_(self) -> np.ndarray:
        return np.flatnonzero(self.n > 0)

    def _joint(self, X: np.ndarray) -> np.ndarray:
        seen = self.classes_
        n = self.n[seen].astype(np.float64)
        joint = np.tile(np.log(n / n.sum()), (X.shape[0], 1))
        for j, table in self.counts.items():
            t = table[seen].astype(np.float64)
            log_p = np.log(t + self.alpha) - np.log(n[:, None] + self.alpha * t.shape[1])
            codes = np.clip(X[:, j].astype(np.int64), 0, t.shape[1] - 1)
            joint += log_p[:, codes].T
        numeric = ~self.schema.categorical_mask
        if numeric.any():
            mean = self.sums[seen] / n[:, None]
            var = self.squares[seen] / n[:, None] - mean**2
            total = self.n.sum()
            overall = self.squares.sum(axis=0) / total - (self.sums.sum(axis=0) / total) ** 2
            var = np.maximum(var, 0.0) + _VAR_SMOOTHING * overall.max()
            x = X[:, numeric]
            joint += -0.5 * (np.log(2 * np.pi * var).sum(axis=1)[None, :]
                             + (((x[:, None, :] - mean[None]) ** 2) / var[None]).sum(axis=2))
        return joint

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        joint = self._joint(X)
        joint -= joint.max(axis=1, keepdims=True)
        p = np.exp(joint)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.classes_[np.argmax(self._joint(X), axis=1)].astype(np.int64)


def check_models(names: Sequence[str]) -> None:
    """EngineError naming the first of ``names`` the Dask engine cannot learn (checked before any pseudo-data is written)."""
    for name in names:
        if name not in DASK_MODELS:
            raise EngineError(f"the dask engine has no {name!r} global model; it learns {', '.join(DASK_MODELS)} "
                              "(use engine local for the others)")


class DaskEngine:
    """A connection to a Dask cluster for one study (a context manager: the LocalCluster it starts stops on exit)."""

    def __init__(self, config: MiningConfig) -> None:
        self.config = config
        self.timeout = config.engine_timeout_seconds
        self._client: Any = None
        self._cluster: Any = None

    def __enter__(self) -> "DaskEngine":
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:
            raise EngineError("engine dask needs the dask extra: pip install 'modelshare[dask]' "
                              f"({type(exc).__name__}: {exc})") from None
        if self.config.workers is not None:
            self._cluster = self._call("starting a LocalCluster", lambda: LocalCluster(
                n_workers=self.config.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=None, worker_dashboard_address=None, silence_logs=logging.WARNING))
            address = self._cluster.scheduler_address
        else:
            address = self.config.scheduler
        self._client = self._call(f"connecting to the Dask scheduler at {address}",
                                  lambda: Client(address, timeout=f"{self.timeout}s"))
        return self

    @property
    def client(self) -> Any:
        """The `distributed.Client` of the study's cluster (None outside the ``with`` block)."""
        return self._client

    def __exit__(self, *exc: object) -> None:
        for closing in (self._client, self._cluster):
            if closing is not None:
                try:
                    closing.close(timeout=min(self.timeout, 30))
                except Exception as why:  # a lost cluster: nothing left to stop
                    log.warning("closing the Dask engine: %s: %s", type(why).__name__, why)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` with the engine's deadline; EngineError naming ``what`` on a timeout or a failure."""
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="dask-call")
        future = pool.submit(call)
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            raise EngineError(f"the Dask cluster did not finish {what} within {self.timeout:g} s "
                              "(engine_timeout_seconds)") from None
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"the Dask engine failed {what}: {type(exc).__name__}: {exc}") from exc
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def fit(self, name: str, schema: Schema, files: Sequence[Path], seed: int) -> Any:
        """Global model ``name`` learned on the cluster from the Parquet ``files``; EngineError if it cannot be."""
        check_models([name])
        if name == "naive-bayes":
            return self._call("counting naive Bayes tables", lambda: self._naive_bayes(schema, files))
        return self._call(f"fitting {name}", lambda: self._xgboost(name, schema, files, seed))

    def _frame(self, schema: Schema, files: Sequence[Path]) -> Any:
        import dask.dataframe as dd

        return dd.read_parquet([str(f) for f in files], columns=[*schema.names, schema.class_name], blocksize=None)

    def _xgboost(self, name: str, schema: Schema, files: Sequence[Path], seed: int) -> BoosterModel:
        from xgboost import dask as dxgb

        frame = self._client.persist(self._frame(schema, files))  # one partitioning for the attributes and the class
        dtrain = dxgb.DaskDMatrix(self._client, frame[list(schema.names)], frame[schema.class_name])
        params = dict(DASK_MODELS[name])
        rounds = params.pop("num_boost_round")
        params.update({"tree_method": "hist", "seed": seed, "nthread": 1, "verbosity": 0})
        if schema.n_classes == 2:
            params["objective"] = "binary:logistic"
        else:
            params.update({"objective": "multi:softprob", "num_class": schema.n_classes})
        booster = dxgb.train(self._client, params, dtrain, num_boost_round=rounds)["booster"]
        return BoosterModel(booster, schema.n_classes, schema.names)

    def _naive_bayes(self, schema: Schema, files: Sequence[Path]) -> CountNaiveBayes:
        import dask

        frame = self._frame(schema, files)
        label = schema.class_name
        categorical = [j for j, a in enumerate(schema.attributes) if isinstance(a, CategoricalAttribute)]
        numeric = [a.name for a in schema.attributes if not isinstance(a, CategoricalAttribute)]
        tables = [frame.groupby([label, schema.attributes[j].name]).size() for j in categorical]
        sizes = frame.groupby(label).size()
        values = frame[numeric].astype("float64")  # integer columns: their squares' sums overflow int64
        sums = values.assign(**{label: frame[label]}).groupby(label).sum() if numeric else None
        squares = (values**2).assign(**{label: frame[label]}).groupby(label).sum() if numeric else None
        computed = dask.compute(tables, sizes, sums, squares)
        c = schema.n_classes
        counts = {}
        for j, table in zip(categorical, computed[0]):
            dense = np.zeros((c, schema.attributes[j].size))  # type: ignore[union-attr]
            keys = np.array(table.index.tolist(), dtype=np.int64).reshape(-1, 2)
            dense[keys[:, 0], keys[:, 1]] = table.to_numpy()
            counts[j] = dense
        n = np.zeros(c)
        n[computed[1].index.to_numpy(dtype=np.int64)] = computed[1].to_numpy()
        s, q = np.zeros((c, len(numeric))), np.zeros((c, len(numeric)))
        if numeric:
            s[computed[2].index.to_numpy(dtype=np.int64)] = computed[2][numeric].to_numpy(dtype=np.float64)
            q[computed[3].index.to_numpy(dtype=np.int64)] = computed[3][numeric].to_numpy(dtype=np.float64)
        return CountNaiveBayes(schema, DASK_MODELS["naive-bayes"]["alpha"], counts, n, s, q)
