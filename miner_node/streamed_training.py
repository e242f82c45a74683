"""xgboost trained on a Dask cluster's workers straight from Parquet files, each worker holding only quantised rows.

The Dask engine's streamed fit (`modelshare.miner_node.dask_engine.DaskEngine`, ``TRAINING_MATRIX`` "streamed"):
the miner splits the study's files into one run of consecutive files per worker (`shares`), starts
xgboost's collective tracker on the scheduler (`start_tracker`) and runs one `train_share` task pinned to
each worker. Each task builds an `xgboost.QuantileDMatrix` from `ParquetBatches`, which reads one file's
columns at a time (xgboost reads the batches twice: to sketch the quantiles, merged over the workers, and to
quantise), so a worker's memory is its share's quantised rows (one byte per attribute and row with
the default 256 bins), the training state per row, and one file's columns; nothing is persisted in
Dask. The workers train one booster together; the rank-0 worker returns it. A batch is the file's
columns as pandas, as `xgboost.dask.DaskQuantileDMatrix` is given a Dask frame's partitions, so on one
worker the two grow the same trees (tests/miner_node/test_dask_engine.py). This module imports
xgboost and distributed, so only the workers and the streamed fit load it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xgboost
from distributed import get_worker

from modelshare.miner_node.dask_engine import route_native_logs
from modelshare.miner_node.heap import malloc_trim

__all__ = ["ParquetBatches", "release_batches", "shares", "start_tracker", "train_share"]


def shares(files: Sequence[str], n: int) -> list[list[str]]:
    """``files`` in ``n`` runs of consecutive files, as even in count as they go (a run is empty when files are
    fewer)."""
    return [[str(f) for f in run] for run in np.array_split(np.asarray(files, dtype=object), n)]


def start_tracker(n_workers: int, host: str, timeout: int) -> dict[str, Any]:
    """Start xgboost's collective tracker for ``n_workers`` on ``host`` (run on the scheduler); the workers' arguments.

    The tracker waits for the group in a daemon thread and ends when training does; ``timeout`` seconds
    bound its wait for the workers to join and every collective call's, so a group that never forms
    or loses a member fails instead of hanging.
    """
    tracker = xgboost.tracker.RabitTracker(n_workers=n_workers, host_ip=host, sortby="task", timeout=timeout)
    tracker.start()
    threading.Thread(target=tracker.wait_for, daemon=True, name="xgboost-tracker").start()
    return {**tracker.worker_args(), "dmlc_timeout": timeout}


class ParquetBatches(xgboost.DataIter):
    """An `xgboost.DataIter` over Parquet files: each batch one file's attribute columns and class, read when
    asked for."""

    def __init__(self, files: Sequence[str], names: Sequence[str], label: str) -> None:
        self._files, self._names, self._label = list(files), list(names), label
        self._at = 0
        super().__init__(release_data=True)

    def next(self, input_data: Callable[..., None]) -> bool:
        if self._at == len(self._files):
            return False
        frame = pq.read_table(self._files[self._at], columns=[*self._names, self._label]).to_pandas()
        input_data(data=frame[self._names], label=frame[self._label], feature_names=self._names)
        self._at += 1
        return True

    def reset(self) -> None:
        self._at = 0


def release_batches() -> None:
    """Give the memory the read batches were freed from back to the system, before training starts.

    Arrow's pool (mimalloc) and glibc's heap keep freed buffers for reuse, and the batches' are not reused, so
    without this their resident cost would grow with the rows (bench/RESULTS.md, the streamed scale-out runs).
    """
    gc.collect()
    pa.default_memory_pool().release_unused()
    if malloc_trim is not None:
        malloc_trim()


def train_share(files: Sequence[str], names: Sequence[str], label: str, params: Mapping[str, Any], rounds: int,
                coll_args: Mapping[str, Any]) -> xgboost.Booster | None:
    """One worker's part of a streamed fit: its ``files`` quantised batch by batch, then trained in the collective.

    Runs in a Dask task pinned to the worker, inside the collective ``coll_args`` names (`start_tracker`
    plus this worker's ``dmlc_task_id``, which orders the ranks), with as many threads as the worker has;
    the rank-0 worker returns the booster, the others None.
    """
    route_native_logs(None)
    threads = get_worker().state.nthreads
    with xgboost.collective.CommunicatorContext(**coll_args):
        matrix = xgboost.QuantileDMatrix(ParquetBatches(files, names, label), nthread=threads)
        release_batches()
        booster = xgboost.train({**params, "nthread": threads}, matrix, num_boost_round=rounds)
        rank = xgboost.collective.get_rank()
    return booster if rank == 0 else None
