"""xgboost trained on a Dask cluster's workers straight from Parquet files, each worker holding only quantised rows.

The Dask engine's streamed fit (`modelshare.miner_node.dask_engine.DaskEngine`, ``TRAINING_MATRIX`` "streamed"):
the miner splits the study's files into one run of consecutive files per worker (`shares`), starts
xgboost's collective tracker in a process the scheduler spawns (`start_tracker`) and runs one `train_share` task
pinned to each worker. Each task builds an `xgboost.QuantileDMatrix` from `ParquetBatches`, which reads one file's
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
import multiprocessing
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xgboost
from distributed import get_worker

from modelshare.miner_node.dask_engine import route_native_logs
from modelshare.miner_node.heap import malloc_trim

__all__ = ["TRACKER_START_SECONDS", "ParquetBatches", "release_batches", "shares", "start_tracker", "train_share"]


def shares(files: Sequence[str], n: int) -> list[list[str]]:
    """``files`` in ``n`` runs of consecutive files, as even in count as they go (a run is empty when files are
    fewer)."""
    return [[str(f) for f in run] for run in np.array_split(np.asarray(files, dtype=object), n)]


#: Seconds the scheduler waits for a spawned tracker process to listen (it imports xgboost first).
TRACKER_START_SECONDS = 120.0


def start_tracker(n_workers: int, host: str, timeout: int) -> dict[str, Any]:
    """Start xgboost's collective tracker for ``n_workers`` on ``host`` (run on the scheduler); the workers' arguments.

    The tracker runs in a process of its own, spawned by the scheduler's: when a worker dies mid-fit xgboost's
    tracker may abort the process it runs in, which for a `LocalCluster` is the miner's own. That process ends
    when training does, or when ``timeout`` seconds (its bound on the workers' joining and on every
    collective call) say the group never formed or lost a member.

    Raises
    ------
    RuntimeError
        The tracker process ended, or did not listen within `TRACKER_START_SECONDS`, before it gave the arguments.
    """
    context = multiprocessing.get_context("spawn")  # the scheduler's process is multi-threaded: no fork
    answers, child = context.Pipe(duplex=False)
    process = context.Process(target=_run_tracker, args=(child, n_workers, host, timeout), daemon=True,
                              name="xgboost-tracker")
    process.start()
    child.close()
    try:
        worker_args: dict[str, Any] | None = answers.recv() if answers.poll(TRACKER_START_SECONDS) else None
    except (EOFError, OSError):  # the process ended before it answered
        worker_args = None
    finally:
        answers.close()
    if worker_args is None:
        ended = process.exitcode
        process.kill()
        process.join()
        why = (f"did not listen within {TRACKER_START_SECONDS:.0f} s" if ended is None
               else f"exited with code {ended} before it listened")
        raise RuntimeError(f"xgboost's tracker process {why}")
    threading.Thread(target=process.join, daemon=True, name="xgboost-tracker-reaper").start()
    return {**worker_args, "dmlc_timeout": timeout}


def _run_tracker(answers: Connection, n_workers: int, host: str, timeout: int) -> None:
    """The tracker process: listen, send the workers' arguments, wait for the group to finish, leave.

    A group that loses a member ends the wait with an error the fit's own tasks report; the process then
    leaves with `os._exit`, skipping the tracker's destructor (which can raise again on the broken sockets).
    """
    tracker = xgboost.tracker.RabitTracker(n_workers=n_workers, host_ip=host, sortby="task", timeout=timeout)
    tracker.start()
    answers.send(tracker.worker_args())
    answers.close()
    status = 0
    try:
        tracker.wait_for()
    except xgboost.core.XGBoostError:
        status = 1
    os._exit(status)


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
