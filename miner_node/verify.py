"""Model verification on the miner: decode, validate and re-audit a submitted model.

This is the CPU-heavy part of accepting a submission (pure Python over every node), so the miner
runs it in a pool of worker processes: the gRPC threads then mostly wait, the store's committing
thread gets the interpreter lock when its fsync returns instead of queueing behind verification,
and a hostile model that exhausts or crashes a worker costs that worker, never the server. With
``processes=0`` verification runs on the calling thread (the same code, for small deployments
and debugging).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import select
import signal
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

import grpc

from modelshare.common.audit.release import audit
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import model_pb2 as mpb
from modelshare.common.federation.wire import OVER_MINER_LIMIT, WireError, decode_model
from modelshare.common.mechanisms.class_prior import class_prior_of
from modelshare.common.privacy.requirements import Requirement, RequirementError, parse_requirement, weaker_than
from modelshare.common.study import MAX_TREES, Study
from modelshare.common.trees.tree import Disclosure

__all__ = ["Rejection", "StudyTerms", "check_model", "ModelVerifier"]

log = logging.getLogger("modelshare.miner")
WORKER_START_SECONDS = 120.0  # a spawned interpreter importing numpy on a loaded machine


class Rejection(Exception):
    """A refused call: the gRPC status code and the message a person can act on."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class StudyTerms:
    """What a submitted model is checked against: the study's mechanism, disclosure and requirement."""

    mechanism: str
    disclosure: Disclosure
    requirement: Requirement | None
    prior_share: float | None = None  # a dp study's: the share of epsilon each release's class histogram spends

    @classmethod
    def of(cls, study: Study) -> StudyTerms:
        """The terms of ``study``."""
        return cls(study.mechanism, study.disclosure, study.requirement,
                   study.prior_share if study.family == "dp" and not study.regression else None)


def check_model(message: fpb.ModelMessage, terms: StudyTerms, max_nodes: int) -> None:
    """Raise `Rejection` unless the message's model is within limits, valid, re-audits and meets the study.

    A model carries one tree or, for a whole-release mechanism (kanon-rdt, laplace-rdt, diffpets, dpea),
    an ensemble of up to `modelshare.common.federation.wire.MAX_TREES`
    (a regression study: a DiffPETs regression forest, as ``regression_trees``); ``max_nodes``
    bounds the nodes of all its trees together. Counts are taken on the raw message, before the
    decode that costs time per node. Every tree is audited (`modelshare.common.audit.release.audit`, or
    the same `audit` for a regression forest), and the report's requirement must be
    at least as strong as the study's (`weaker_than`).
    """
    raw_trees: list[mpb.Tree | mpb.RegressionTree] = [*message.trees, *message.regression_trees]
    if len(raw_trees) > MAX_TREES:
        raise Rejection(grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"the model has {len(raw_trees)} trees; {OVER_MINER_LIMIT} {MAX_TREES}")
    nodes = sum(len(t.nodes) for t in raw_trees)
    if nodes > max_nodes:
        raise Rejection(grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"the model has {nodes} nodes in {len(raw_trees)} trees; {OVER_MINER_LIMIT} {max_nodes}")
    try:
        model = decode_model(message, max_trees=MAX_TREES)
    except WireError as exc:
        raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, f"malformed model: {exc}") from None
    trees, report = model.trees, model.report
    if report is None:
        raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, "the model carries no privacy report")
    if report.mechanism != terms.mechanism:
        raise Rejection(grpc.StatusCode.FAILED_PRECONDITION,
                        f"released with {report.mechanism!r}; the study requires {terms.mechanism!r}")
    wanted = terms.disclosure
    for i, tree in enumerate(trees):
        if tree.disclosure != wanted:
            which = "the tree" if len(trees) == 1 else f"tree {i}"
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION,
                            f"{which} discloses {tree.disclosure}; the study asks for {wanted}")
    try:
        result = audit(model.released, report, figures=False)
    except (ArithmeticError, ValueError) as exc:  # numbers of a hostile report the auditor cannot compute with
        log.warning("the re-audit could not check a model: %r", exc)
        raise Rejection(grpc.StatusCode.INVALID_ARGUMENT,
                        f"the miner's re-audit cannot check these claims ({type(exc).__name__}: {exc})") from None
    if not result.passed:
        failed = "; ".join(f"{c.name}: {c.detail}" for c in result.checks if not c.passed)
        raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, f"the miner's re-audit of the claims failed: {failed}")
    if terms.prior_share is not None:
        prior = class_prior_of(report)
        stated = 0.0 if prior is None else prior.share
        if stated != terms.prior_share:
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION,
                            f"the release spends a share {stated:g} of its epsilon on its class histogram; the study's "
                            f"prior_share is {terms.prior_share:g}")
    required = terms.requirement
    if required is None:
        return
    if report.requirement is None:
        raise Rejection(grpc.StatusCode.FAILED_PRECONDITION, f"the model claims nothing; the study requires {required}")
    try:
        reason = weaker_than(parse_requirement(report.requirement), required)
    except RequirementError as exc:
        raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
    if reason is not None:
        raise Rejection(grpc.StatusCode.FAILED_PRECONDITION, f"weaker than the study requires: {reason}")


def _verify_in_worker(payload: bytes, terms: StudyTerms, max_nodes: int) -> tuple[str, str] | None:
    """Worker-process entry point: None if the model passes, else (status code name, message)."""
    try:
        check_model(fpb.ModelMessage.FromString(payload), terms, max_nodes)
    except Rejection as rej:
        return rej.code.name, rej.message
    except Exception:  # a verifier bug: answer INTERNAL, as in-thread verification would, and keep this worker
        log.exception("verifying a model failed unexpectedly")
        return "INTERNAL", "internal miner error while verifying the model; nothing was stored"
    return None


class _Worker:
    """One spawned verification process and the pipe to it (requests and verdicts, one at a time)."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child,), name="miner-verifier", daemon=True)
        self.process.start()
        child.close()
        self._verdicts = select.poll()  # kept, not rebuilt per call as `Connection.poll` does
        self._verdicts.register(self.conn.fileno(), select.POLLIN)

    def answered(self, timeout: float | None) -> bool:
        """Whether the worker's answer (or its end: the pipe closed) is there within ``timeout`` seconds (None:
        wait)."""
        return bool(self._verdicts.poll(None if timeout is None else max(timeout, 0.0) * 1e3))

    def wait_ready(self, timeout: float) -> None:
        """Block until the worker has imported everything and said so (it sends ``"ready"`` first).

        Raises RuntimeError when it does not within ``timeout`` seconds, or exits first (its pipe closes).
        """
        try:
            ready = self.conn.poll(timeout) and self.conn.recv() == "ready"
        except (EOFError, OSError):
            raise RuntimeError("a verification worker exited before it was ready") from None
        if not ready:
            raise RuntimeError(f"a verification worker did not start within {timeout:.0f} s")

    def ask_to_stop(self) -> None:
        """Tell the worker to finish (it exits after its current request); `stop` then waits for it."""
        try:
            self.conn.send(None)
        except OSError:
            pass

    def stop(self) -> None:
        self.ask_to_stop()
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _serve(conn: Connection) -> None:
    """Worker process loop: announce readiness, then verify each (payload, spec, max_nodes) request until told to stop.

    The miner alone decides when a worker ends: Ctrl-C in its terminal reaches the workers too and is
    ignored here, and a miner that dies (SIGKILL) closes the pipe, which ends the worker quietly
    instead of with an EOFError traceback. The worker holds nothing to flush or release, so it leaves
    with `os._exit`, skipping the interpreter's teardown of its imported modules (over a second on a
    busy machine, which the miner's stop would otherwise wait for).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        conn.send("ready")
        while (request := conn.recv()) is not None:
            conn.send(_verify_in_worker(*request))
    except (EOFError, OSError):
        pass
    conn.close()
    os._exit(0)  # nothing to flush or release: skip the interpreter's teardown of its modules (~0.7 s of CPU)


class ModelVerifier:
    """Runs `check_model` in ``processes`` worker processes (0: on the calling thread).

    Workers are spawned (not forked: the miner is multi-threaded and gRPC does not survive a fork)
    by `start` or on first use; `start_in_background` lets the miner serve while they start, and until
    the first is ready a model is verified on the calling thread. A caller takes an idle worker, sends it the request
    over its pipe and waits for the verdict, with no broker thread in between; a worker that dies or overruns
    the call's deadline is replaced.
    """

    def __init__(self, processes: int, max_nodes: int) -> None:
        if processes < 0:
            raise ValueError(f"processes must be >= 0, got {processes}")
        self.processes = processes
        self.max_nodes = max_nodes
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._ready = threading.Event()  # set once a worker has been handed out
        self._handed = 0  # workers handed out (idle or busy), which `close` stops

    def start(self) -> None:
        """Spawn the worker processes and hand each out as soon as it is ready (idempotent).

        The miner calls it through `start_in_background` once it serves, so that a restart is back in
        seconds: a submission arriving before the first worker is ready is verified on its own thread. A
        worker that becomes ready after `close` is stopped at once.
        """
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
        pending = [_Worker() for _ in range(self.processes)]
        while pending:
            worker = pending.pop(0)
            try:
                worker.wait_ready(WORKER_START_SECONDS)
            except RuntimeError:
                for unready in (worker, *pending):
                    unready.stop()
                raise
            with self._lock:
                handed = not self._closed
                if handed:
                    self._handed += 1
                    self._idle.put(worker)
                    self._ready.set()
            if not handed:
                worker.stop()

    def start_in_background(self) -> None:
        """`start` on a thread of its own: the miner serves while the workers import (seconds on a busy machine),
        and a submission arriving before the first worker is ready is verified on the calling thread."""
        if self.processes == 0 or self._started:
            return
        threading.Thread(target=self._start_logged, name="miner-verifier-start", daemon=True).start()

    def _start_logged(self) -> None:
        try:
            self.start()
        except RuntimeError as exc:
            if self._closed:  # the miner stopped while its workers started: nothing is waiting for them
                log.debug("verifier start-up ended by shutdown: %s", exc)
            else:
                log.error("%s; submissions are verified on the serving threads instead", exc)

    def check(self, message: fpb.ModelMessage, payload: bytes, terms: StudyTerms, timeout: float | None) -> None:
        """Raise `Rejection` unless the model is acceptable; ``payload`` is ``message`` serialized."""
        if self.processes == 0 or not self._ready.is_set():
            self.start_in_background()
            check_model(message, terms, self.max_nodes)
            return
        try:
            worker = self._idle.get(timeout=timeout)
        except queue.Empty:
            raise Rejection(grpc.StatusCode.DEADLINE_EXCEEDED,
                            "no verifier was free before the call's deadline; nothing was stored") from None
        if worker is None:  # closing
            self._idle.put(None)
            raise Rejection(grpc.StatusCode.UNAVAILABLE, "the miner is shutting down; nothing was stored")
        returned: _Worker | None = worker  # back to the idle queue afterwards, unless replaced
        try:
            worker.conn.send((payload, terms, self.max_nodes))
            if not worker.answered(timeout):
                self._replace(worker)
                returned = None
                raise Rejection(grpc.StatusCode.DEADLINE_EXCEEDED,
                                "the model could not be verified before the call's deadline; nothing was stored")
            verdict = worker.conn.recv()
        except (EOFError, OSError):
            self._replace(worker)
            returned = None
            log.error("a verification worker died; the submission was not stored")
            raise Rejection(grpc.StatusCode.UNAVAILABLE,
                            "the miner's verifier was interrupted; nothing was stored, retry later") from None
        finally:
            if returned is not None:
                self._idle.put(returned)
        if verdict is not None:
            code, text = verdict
            raise Rejection(grpc.StatusCode[code], text)

    def _replace(self, worker: _Worker) -> None:
        """Kill a dead or stuck worker and put a fresh one in its place."""
        worker.process.kill()
        worker.stop()
        if self._closed:
            self._idle.put(None)
            return
        fresh = _Worker()
        fresh.wait_ready(WORKER_START_SECONDS)
        self._idle.put(fresh)

    def close(self) -> None:
        """Stop every worker (callers still waiting for one get UNAVAILABLE)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            handed = self._handed
        stopping = []
        for _ in range(handed):  # a busy worker comes back once its call ends
            worker = self._idle.get()
            if worker is not None:
                worker.ask_to_stop()  # all of them at once: an interpreter's exit takes a while on a busy machine
                stopping.append(worker)
        for worker in stopping:
            worker.stop()
        self._idle.put(None)
