"""The Dask engine: global models learned on a Dask cluster from a study's Parquet pseudo-data.

Chosen by ``[mining] engine = "dask"`` (`modelshare.miner_node.config.MiningConfig`); needs the ``dask`` extra
(``pip install 'modelshare[dask]'``: dask.distributed and xgboost), imported only when a study runs
on it. The cluster is either an existing scheduler (``scheduler = "tcp://HOST:PORT"``; its workers
read the Parquet files at the miner's paths, so they share the state directory's file system) or a
LocalCluster of ``workers`` single-threaded processes on loopback that lives for one study, each capped
at ``worker_memory_mb`` (Dask's ``memory_limit``) when that is set.

The global models, each learned from the study's Parquet files without pooling them in the miner:

* ``gradient-boosting``: xgboost's histogram boosting, up to 200 rounds of shrinkage 0.1, at most
  31 leaves a tree, L2 penalty 1 (the local engine's `HistGradientBoostingClassifier` settings, without
  its early stopping);
* ``random-forest``: xgboost in random-forest mode, 100 parallel trees of one unshrunk round,
  each on 63.2 % of the rows and 80 % of the attributes per split;
* ``decision-tree``: one unshrunk round of a single xgboost tree (for more than two classes, one
  regression tree per class on the softmax gradient, which is xgboost's form of one tree), depth at
  most 12 - the documented equivalent of the local CART;
* ``naive-bayes``: count tables per class and category, and per class sums and squares of the numeric
  attributes, counted partition by partition (`count_partition`) and added up, turned into exactly the
  local `MixedNaiveBayes` (Laplace ``alpha`` 1, GaussianNB's variance smoothing);
* ``rules`` has no Dask form: a study that asks for it on this engine fails with that reason.

Categorical attributes are learned from their codes as ordered numbers. Every model is scored on the
study's evaluation table in the miner, as on the local engine. The workers train streamed from the files
(`TRAINING_MATRIX` "streamed", `modelshare.miner_node.streamed_training`): each worker quantises its own run
of files one file at a time and keeps only the quantised rows, and the workers train one booster together
in xgboost's collective; nothing is persisted in Dask. On one worker that grows the same trees as
`xgboost.dask`'s matrices (which hold the whole frame in the workers and remain for bench/scale_out.py's
comparison); on several, the quantile sketch and a forest's row sample follow the fixed split of the files.

The study's ``[global_models]`` settings apply (`xgboost_parameters` maps the study's parameters,
named as the local engine's, onto xgboost's; `check_settings` refuses, before any pseudo-data is
written, a given parameter that has no faithful equivalent). A leaf size of the single-round models
(the decision tree and the random forest) comes with ``base_score`` 0.5: every row and every class
starts from the same margin (not from xgboost's estimated per-class intercepts), so the first and
only round's hessian is one constant per row, `first_round_hessian`:
1/4 for two classes (logistic loss, p(1-p) at p = 1/2), 2/K (1 - 1/K) for K classes (xgboost's
softmax hessian 2p(1-p) at p = 1/K). A child's hessian sum is then that constant times its rows,
and ``min_samples_leaf`` = n is *exactly* ``min_child_weight`` = h (n - 1/2). With ``lambda`` near 0
the round's split gain at a constant hessian is the decrease of the squared error of the 0/1
labels, which for two classes is the Gini decrease, so ``criterion = "gini"`` is what the tree
already does (for K classes, per class one-against-the-rest). Boosting has no such equivalent for
``min_samples_leaf``: after its first round the logistic hessian differs from row to row, so no
``min_child_weight`` counts rows, and the parameter is refused; nor has ``criterion`` ``"entropy"`` /
``"log_loss"`` one. Nor does a dp study's boosting get the local engine's leaf floor: the floor xgboost
could guarantee (``min_child_weight`` = n times the largest hessian a row can have) also refuses larger
leaves where the model is confident, and scored below the fixed parameters (docs/scale-out.md).
``"auto"`` cross-validates the engine's own grid (`DASK_GRIDS`, every candidate mappable) with the same
xgboost models trained in the miner (`LocalBooster`) on a bounded sample of the Parquet files
(`modelshare.miner_node.pseudo_parquet.sample`; as many rows as the local engine's cross-validation takes).

Faults: every call to the cluster (connecting, each fit, naive Bayes' counts) has a deadline,
``engine_timeout_seconds``: a lost or stuck cluster raises `EngineError` naming the call and the
deadline, which fails the study with that reason; the miner never waits on it longer. A worker
that dies mid-fit (killed, or restarted by its nanny over its memory cap) ends a streamed fit, whose
workers cannot go on without its share: `EngineError` names the worker; naive Bayes' counting tasks
are Dask's to recompute on the others. A fit that fails otherwise raises `EngineError` with the reason.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from modelshare.common.data.schema import CategoricalAttribute, Schema
from modelshare.common.study import GIVEN, ModelPlan
from modelshare.miner_node.config import MiningConfig
from modelshare.miner_node.global_models import DP_LEAF_FLOORS, GRIDS
from modelshare.miner_node.pseudo_parquet import TREE_COLUMN

__all__ = ["DASK_MODELS", "DASK_GRIDS", "DASK_DP_LEAF_FLOORS", "EngineError", "DaskEngine", "BoosterModel",
           "CountNaiveBayes", "LocalBooster",
           "check_models", "check_settings", "count_partition", "first_round_hessian", "xgboost_parameters"]

log = logging.getLogger("modelshare.miner")
#: xgboost's native log lines in the Dask workers' threads (`route_native_logs`).
native_log = logging.getLogger("modelshare.miner.xgboost")
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

#: Candidates of ``"auto"`` on this engine, simplest first, in the study's parameter names (all mappable).
DASK_GRIDS: dict[str, list[Mapping[str, Any]]] = {
    "decision-tree": GRIDS["decision-tree"],
    "naive-bayes": GRIDS["naive-bayes"],
    "random-forest": GRIDS["random-forest"],
    "gradient-boosting": [{"max_leaf_nodes": n} for n in (15, 31, 63)],
}

#: The dp leaf floors of the local engine's fixed rule that this engine honours: the single-round tree's
#: (a leaf size maps exactly, module docstring), not boosting's, which keeps its fixed parameters here
#: (a guaranteed floor scored lower: bench/dask_dp_boosting.py).
DASK_DP_LEAF_FLOORS: dict[str, tuple[float, int]] = {"decision-tree": DP_LEAF_FLOORS["decision-tree"]}

#: How the workers hold the training rows. "streamed" (the engine's): each worker quantises its share of the
#: Parquet files file by file into an `xgboost.QuantileDMatrix` and keeps nothing else
# (`modelshare.miner_node.streamed_training`).
#: "DaskQuantileDMatrix" and "DaskDMatrix": `xgboost.dask`'s matrices, which first compute the whole frame into
#: the workers' memory and keep it for the fit (the quantile one then quantises it, the plain one copies and
#: concatenates it first); bench/scale_out.py sets them for its comparison runs.
STREAMED = "streamed"
#: How often a streamed fit checks that its workers are still in the cluster (`DaskEngine._await_group`).
GROUP_POLL_SECONDS = 1.0
TRAINING_MATRIX = STREAMED

_SINGLE_ROUND = ("decision-tree", "random-forest")
#: Per model, each study parameter's xgboost name (``min_samples_leaf`` and ``criterion`` are mapped apart).
_RENAMED: dict[str, dict[str, str]] = {
    "decision-tree": {"max_depth": "max_depth"},
    "random-forest": {"max_depth": "max_depth", "n_estimators": "num_parallel_tree"},
    "gradient-boosting": {"max_depth": "max_depth", "max_iter": "num_boost_round", "learning_rate": "eta",
                          "max_leaf_nodes": "max_leaves", "l2_regularization": "lambda"},
    "naive-bayes": {"alpha": "alpha"},
}
_VAR_SMOOTHING = 1e-9  # GaussianNB's default


class EngineError(RuntimeError):
    """The cluster failed or did not answer in time; the message says which call and why (a study's failure reason)."""


@dataclass
class BoosterModel:
    """A fitted xgboost booster as a global model: class
    probabilities and class indices over all the schema's classes."""

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
        labels: np.ndarray = np.argmax(self.predict_proba(X), axis=1).astype(np.int64)
        return labels


@dataclass
class CountNaiveBayes:
    """Mixed naive Bayes from sufficient statistics: exactly
    `modelshare.miner_node.global_models.MixedNaiveBayes` fitted on the rows.

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
        proba: np.ndarray = p / p.sum(axis=1, keepdims=True)
        return proba

    def predict(self, X: np.ndarray) -> np.ndarray:
        labels: np.ndarray = self.classes_[np.argmax(self._joint(X), axis=1)].astype(np.int64)
        return labels


def first_round_hessian(n_classes: int) -> float:
    """The hessian of every row in a single-round model's one round (module docstring): 1/4, or 2/K (1 - 1/K)."""
    return 0.25 if n_classes == 2 else 2.0 / n_classes * (1.0 - 1.0 / n_classes)


def _mapped(name: str, key: str, value: Any, n_classes: int) -> dict[str, Any]:
    """Study parameter ``key`` = ``value`` of model ``name`` as
    xgboost parameters; EngineError where none is faithful."""
    where = f"[global_models] {name}: {key}"
    if key in _RENAMED.get(name, {}):
        return {_RENAMED[name][key]: value}
    if key == "min_samples_leaf" and name in _SINGLE_ROUND:
        return {"min_child_weight": first_round_hessian(n_classes) * (value - 0.5), "base_score": 0.5}
    if key == "criterion" and name == "decision-tree":
        if value == "gini":
            return {}
        raise EngineError(f"{where} = {value!r} has no equivalent on the dask engine: its tree splits on the "
                          "squared error of the labels at a constant hessian, which is the Gini decrease "
                          "(use \"gini\" or engine local)")
    why = ("after the first round the logistic hessian differs from row to row, so no min_child_weight counts rows"
           if key == "min_samples_leaf" else "xgboost has no equivalent")
    raise EngineError(f"{where} has no equivalent on the dask engine ({why}); drop it or use engine local")


def xgboost_parameters(name: str, n_classes: int, params: Mapping[str, Any]) -> dict[str, Any]:
    """The full parameters of Dask model ``name`` with the study's
    ``params`` (leaf sizes in rows) mapped over its fixed ones."""
    out = dict(DASK_MODELS[name])
    for key, value in params.items():
        out.update(_mapped(name, key, value, n_classes))
    return out


def check_settings(plan: ModelPlan, n_classes: int) -> None:
    """EngineError naming the first model and parameter the
    study gives that the Dask engine cannot honour faithfully."""
    for name in plan.models:
        setting = plan.settings.get(name)
        if setting is not None and setting.mode == GIVEN:
            for key in sorted(setting.parameters):
                _mapped(name, key, setting.parameters[key], n_classes)


def _booster_params(params: Mapping[str, Any], n_classes: int, seed: int) -> tuple[dict[str, Any], int]:
    """xgboost's training parameters and rounds from a model's full parameters (`xgboost_parameters`)."""
    out = dict(params)
    rounds = int(out.pop("num_boost_round"))
    # verbosity 1: xgboost's warnings, which the workers log through route_native_logs; no informational lines
    out.update({"tree_method": "hist", "seed": seed, "nthread": 1, "verbosity": 1})
    if n_classes == 2:
        out["objective"] = "binary:logistic"
    else:
        out.update({"objective": "multi:softprob", "num_class": n_classes})
    return out, rounds


class LocalBooster:
    """Dask model ``name`` trained in this process with the study's
    ``params``: what ``"auto"`` cross-validates on the sample.

    The same xgboost model, parameters and seed as the cluster fits (`DaskEngine.fit`), so a candidate
    scores as the model it would become; single-threaded, for a bounded sample only.
    """

    def __init__(self, name: str, schema: Schema, params: Mapping[str, Any], seed: int) -> None:
        self.name, self.schema, self.params, self.seed = name, schema, dict(params), seed

    def fit(self, X: np.ndarray, y: np.ndarray) -> BoosterModel:
        import xgboost

        n = self.schema.n_classes
        params, rounds = _booster_params(xgboost_parameters(self.name, n, self.params), n, self.seed)
        data = xgboost.DMatrix(X, label=y, feature_names=list(self.schema.names))
        return BoosterModel(xgboost.train(params, data, num_boost_round=rounds), n, self.schema.names)


def _native_line(message: bytes) -> None:
    """One native xgboost log line: a warning stays a warning; console chatter ("Task ... got rank 0") is debug."""
    text = message.decode("utf-8", errors="replace").rstrip()
    native_log.log(logging.WARNING if "WARNING:" in text else logging.DEBUG, "%s", text)


_NATIVE_LINE = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(_native_line)  # kept alive: xgboost holds its address
_routed = threading.local()


@functools.cache
def _native_library() -> tuple[Any, str]:
    """The loaded xgboost library through public interfaces, or None and why not (once per process).

    `xgboost.build_info` (public) names the library file the package loaded; opening that path again
    returns the same loaded library, whose C API (``c_api.h``, public) has ``XGBRegisterLogCallback``.
    Python's xgboost offers no public function to register a log callback for another thread, and
    neither its verbosity (the rank line is printed whatever it is, before the fit's configuration
    applies) nor its Python loggers or training callbacks see the native lines.
    """
    import xgboost

    path = xgboost.build_info().get("libxgboost")
    if not isinstance(path, str):
        return None, "xgboost.build_info() names no library file"
    try:
        library = ctypes.CDLL(path)
        library.XGBRegisterLogCallback.restype = ctypes.c_int
    except (OSError, AttributeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return library, ""


def route_native_logs(partition: T) -> T:
    """``partition`` unchanged; in passing, the calling thread's native xgboost log lines go to `native_log`.

    xgboost's C++ library logs through a callback kept per thread. Python's xgboost registers one in
    the thread that imports it; a Dask worker's task threads keep the library's default, which writes
    every line to standard error, including the line ``Task [xgboost.dask-0]:tcp://... got rank 0``
    that each worker logs when it joins the training group whatever the verbosity. Mapped over the
    partitions the workers train on (before the fit, in the threads the fit then runs in: the
    LocalCluster's workers have one), this routes those lines through Python logging instead, where
    warnings stay warnings and the rest is debug. Where the library cannot be reached through public
    interfaces (`_native_library`) or refuses the callback, the worker logs why once and the lines keep
    the library's default: nothing but where they are written changes.
    """
    if getattr(_routed, "done", False):
        return partition
    _routed.done = True
    library, why = _native_library()
    if library is not None and library.XGBRegisterLogCallback(_NATIVE_LINE) != 0:
        library, why = None, "XGBRegisterLogCallback returned an error"
    if library is None:
        _unrouted(why)
    return partition


@functools.cache
def _unrouted(why: str) -> None:
    """Say once per process and reason that xgboost's native lines stay on standard error."""
    log.warning("xgboost's native log lines stay on standard error in this worker (%s)", why)


def worker_addresses(dask_scheduler: Any) -> list[str]:
    """The addresses of the scheduler's workers, asked of the scheduler itself (run by `Client.run_on_scheduler`).

    Not `Client.scheduler_info`: the client's periodic refresh overwrites the same cached answer without
    the workers, so a read between the two can find none (it did, under load).
    """
    return list(dask_scheduler.workers)


def check_models(names: Sequence[str]) -> None:
    """EngineError naming the first of ``names`` the Dask engine
    cannot learn (checked before any pseudo-data is written)."""
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

    def __enter__(self) -> DaskEngine:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:
            raise EngineError("engine dask needs the dask extra: pip install 'modelshare[dask]' "
                              f"({type(exc).__name__}: {exc})") from None
        if self.config.workers is not None:
            # distributed's constructors are unannotated (no stubs): the calls return what they say
            self._cluster = self._call("starting a LocalCluster", lambda: LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=self.config.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                memory_limit="auto" if self.config.worker_memory_mb is None else f"{self.config.worker_memory_mb}MiB",
                dashboard_address=None, worker_dashboard_address=None, silence_logs=logging.WARNING))
            address = self._cluster.scheduler_address
        else:
            address = self.config.scheduler
        self._client = self._call(f"connecting to the Dask scheduler at {address}",
                                  lambda: Client(address, timeout=f"{self.timeout}s"))  # type: ignore[no-untyped-call]
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

    def fit(self, name: str, schema: Schema, files: Sequence[Path], seed: int, params: Mapping[str, Any]) -> Any:
        """Global model ``name`` learned on the cluster from the Parquet
        ``files`` with its full ``params`` (`xgboost_parameters`).

        EngineError if it cannot be.
        """
        check_models([name])
        if name == "naive-bayes":
            alpha = float(params["alpha"])
            return self._call("counting naive Bayes tables", lambda: self._naive_bayes(schema, files, alpha))
        return self._call(f"fitting {name}", lambda: self._xgboost(schema, files, seed, params))

    def _frame(self, schema: Schema, files: Sequence[Path]) -> Any:
        """The files' every column (a frame read with fewer, then persisted, lost its partitions: dask 2026.8)."""
        import dask.dataframe as dd

        columns = [*schema.names, schema.class_name, TREE_COLUMN]
        return dd.read_parquet([str(f) for f in files], columns=columns, blocksize=None)

    def _xgboost(self, schema: Schema, files: Sequence[Path], seed: int, params: Mapping[str, Any]) -> BoosterModel:
        train, rounds = _booster_params(params, schema.n_classes, seed)
        if TRAINING_MATRIX == STREAMED:
            return BoosterModel(self._streamed(schema, files, train, rounds), schema.n_classes, schema.names)
        from xgboost import dask as dxgb

        read = self._frame(schema, files)
        # one partitioning for the attributes and the class; its tasks route the native log lines (route_native_logs)
        frame = self._client.persist(read.map_partitions(route_native_logs, meta=read._meta))
        dtrain = getattr(dxgb, TRAINING_MATRIX)(self._client, frame[list(schema.names)], frame[schema.class_name])
        del frame  # the matrix holds its own attribute and class parts: the whole frame's may go
        booster = dxgb.train(self._client, train, dtrain, num_boost_round=rounds)["booster"]
        return BoosterModel(booster, schema.n_classes, schema.names)

    def _streamed(self, schema: Schema, files: Sequence[Path], train: Mapping[str, Any], rounds: int) -> Any:
        """The booster trained by every worker together, each on its `shares` of the files read one at a time.

        One task per worker, pinned to it; the tasks join one xgboost collective (its tracker runs in a process
        the scheduler spawns, `start_tracker`) and each builds its `xgboost.QuantileDMatrix` from `ParquetBatches`,
        so a worker holds its share's quantised rows and one file's columns, never a frame. The first
        worker's booster (every worker's is the same) is the result; a failed task cancels the others.
        """
        from distributed.comm.addressing import get_address_host

        from modelshare.miner_node.streamed_training import shares, start_tracker, train_share

        workers = sorted(self._client.run_on_scheduler(worker_addresses))
        if not workers:
            raise EngineError("the Dask cluster has no workers")
        parts = [share for share in shares([str(f) for f in files], len(workers)) if share]
        host = get_address_host(self._client.scheduler.address)
        args = self._client.run_on_scheduler(start_tracker, len(parts), host, int(self.timeout))
        futures = [self._client.submit(train_share, share, schema.names, schema.class_name, dict(train), rounds,
                                       {**args, "dmlc_task_id": f"{rank:06d}"},
                                       key=f"modelshare-train-{rank}-{uuid.uuid4().hex}",
                                       workers=[workers[rank]], allow_other_workers=False, pure=False)
                   for rank, share in enumerate(parts)]
        try:
            self._await_group(futures, workers[: len(parts)])
            return next(booster for booster in (f.result() for f in futures) if booster is not None)
        finally:
            self._client.cancel(futures)

    def _await_group(self, futures: Sequence[Any], workers: Sequence[str]) -> None:
        """Return once every task of a streamed fit is done; raise the first task's error, or name a worker that left.

        A task pinned to a worker that dies is never run elsewhere and the others wait for it in the collective,
        so the cluster's worker list is checked every `GROUP_POLL_SECONDS` while the tasks run.
        """
        from distributed import TimeoutError as DaskTimeout
        from distributed import wait

        pending = list(futures)
        while pending:
            try:
                wait(pending, timeout=GROUP_POLL_SECONDS, return_when="FIRST_COMPLETED")  # type: ignore[no-untyped-call]
            except DaskTimeout:
                pass
            for future in pending:
                if future.status in ("error", "cancelled"):
                    future.result()  # raises the task's error
            pending = [future for future in pending if future.status != "finished"]
            present = self._client.run_on_scheduler(worker_addresses) if pending else workers
            lost = [w for w in workers if w not in present]
            if lost:
                raise RuntimeError(f"worker {lost[0]} left the cluster during the fit; a streamed fit cannot go on "
                                   "without its share of the files")

    def _naive_bayes(self, schema: Schema, files: Sequence[Path], alpha: float) -> CountNaiveBayes:
        from dask.delayed import delayed

        partials = [delayed(count_partition)(part, schema) for part in self._frame(schema, files).to_delayed()]
        counts, n, sums, squares = delayed(_add_counts)(partials).compute()
        return CountNaiveBayes(schema, alpha, counts, n, sums, squares)


Counts = tuple[dict[int, np.ndarray], np.ndarray, np.ndarray, np.ndarray]
"""Naive Bayes' sufficient statistics (`CountNaiveBayes`): count tables, rows, sums and sums of squares per class."""


def count_partition(part: Any, schema: Schema) -> Counts:
    """The sufficient statistics of one partition (a pandas frame of the Parquet columns), counted in its task.

    One task per partition reads it, counts and returns a few small arrays, so a worker holds one
    partition at a time rather than every partition the group-bys of all attributes would share.
    Sums and squares are in float64 (integer squares overflow int64).
    """
    c = schema.n_classes
    y = _codes(part, schema.class_name, c)
    counts = {}
    for j, attribute in enumerate(schema.attributes):
        if isinstance(attribute, CategoricalAttribute):
            codes = _codes(part, attribute.name, attribute.size)
            counts[j] = np.bincount(y * attribute.size + codes, minlength=c * attribute.size).reshape(c, attribute.size)
    numeric = [a.name for a in schema.attributes if not isinstance(a, CategoricalAttribute)]
    values = part[numeric].to_numpy(dtype=np.float64)
    sums, squares = np.zeros((c, len(numeric))), np.zeros((c, len(numeric)))
    for i in range(len(numeric)):
        sums[:, i] = np.bincount(y, weights=values[:, i], minlength=c)
        squares[:, i] = np.bincount(y, weights=values[:, i] ** 2, minlength=c)
    return counts, np.bincount(y, minlength=c), sums, squares


def _codes(part: Any, column: str, size: int) -> np.ndarray:
    """Column ``column`` of a partition as codes; ValueError naming it if one is outside 0..size-1."""
    codes: np.ndarray = part[column].to_numpy(dtype=np.int64)
    if codes.size and (codes.min() < 0 or codes.max() >= size):
        raise ValueError(f"pseudo-data column {column!r} holds codes outside 0..{size - 1}")
    return codes


def _add_counts(partials: Sequence[Counts]) -> Counts:
    """The statistics of all partitions from each one's (`count_partition`)."""
    counts = {j: _total([p[0][j] for p in partials]) for j in partials[0][0]}
    return (counts, _total([p[1] for p in partials]), _total([p[2] for p in partials]),
            _total([p[3] for p in partials]))


def _total(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The elementwise sum of one or more arrays of one shape."""
    return sum(arrays[1:], arrays[0])
