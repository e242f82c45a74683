"""The study administration (the ``StudyAdmin`` gRPC service): the admin creates, reads, watches and cancels studies.

Every call reaching a handler here has been authenticated as the admin's by
`modelshare.miner_node.rpc.AdminInterceptor`,
once, before the handler runs; the handlers only read the admin's name off the call (for the audit log).
`StudyAdminService.complete_spec` checks a new study and fills its defaults, for ``CreateStudy`` and for the
studies a miner config lists. ``WatchStudy`` holds a call, as a coroutine, until the study changes. The reads
(`StudyAdminService.site_list`, `status`, `study_list`, `results`) are also what the web dashboard shows, and
``OpenDashboard`` hands the admin a one-time sign-in to it (`modelshare.miner_node.dashboard`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from modelshare.common.data.schema import SchemaError
from modelshare.common.federation.kit import peer_identity
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.study import Study, StudyError
from modelshare.miner_node.config import Limits
from modelshare.miner_node.coordinator import Coordinator
from modelshare.miner_node.global_models import CLASSIFICATION_MODELS, REGRESSION_MODELS
from modelshare.miner_node.mining import load_evaluation
from modelshare.miner_node.rpc import Attached, Identity, async_handler, handler, timestamp_seconds
from modelshare.miner_node.store import Store
from modelshare.miner_node.verify import Rejection

__all__ = ["StudyAdminService"]

log = logging.getLogger("modelshare.miner")
MAX_WATCH_SECONDS = 30
MAX_CANCEL_REASON = 500
SILENT_AFTER_SECONDS = 120
"""A site whose last poll is older than this is "silent": a live daemon polls at least every 30 s (a held
Poll's longest hold) plus its backoff after failures."""


def _admin(context: grpc.ServicerContext) -> str:
    """The admin's name on a call the interceptor let through (the miner config's name for a config study)."""
    return peer_identity(context) or "admin"


class StudyAdminService(Attached, fgrpc.StudyAdminServicer):
    """Implements the StudyAdmin service over a `Store`, the live roster and a `Coordinator`.

    Parameters
    ----------
    store, identity, coordinator:
        Durable state, the live roster (owners a study may invite), and the study lifecycle.
    limits:
        The miner's message size limit, which a study's ``max_message_bytes`` may not exceed.
    mechanisms:
        Release mechanism names studies may ask for (the composition root passes the registry's names).
    clock:
        The miner's time, against which a new study's deadline is checked.
    """

    def __init__(self, store: Store, identity: Identity, coordinator: Coordinator, limits: Limits, *,
                 mechanisms: Iterable[str], clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.identity = identity
        self.coordinator = coordinator
        self.limits = limits
        self.mechanisms = frozenset(mechanisms)
        self.clock = clock
        self.dashboard: Callable[[str], tuple[str, float]] | None = None
        """Set by the server when it serves the web dashboard: the admin's name -> (one-time sign-in URL, expiry)."""

    @handler
    def CreateStudy(self, request: fpb.CreateStudyRequest, context: grpc.ServicerContext) -> fpb.StudyStatus:
        admin = _admin(context)
        spec = fpb.StudySpec()
        spec.CopyFrom(request.spec)
        study = self.complete_spec(spec)
        evaluation = bytes(request.evaluation_csv) or None
        if evaluation is not None:
            try:
                load_evaluation(evaluation, study.schema)
            except SchemaError as exc:
                raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, f"evaluation table: {exc}") from None
        if not self.store.create_study(spec.study_id, spec.SerializeToString(), evaluation,
                                       by=admin):
            raise Rejection(grpc.StatusCode.ALREADY_EXISTS,
                            f"a study {spec.study_id!r} exists already; choose another id")
        log.info("study %s: created for %s (quorum %d)", spec.study_id, ", ".join(spec.owners), spec.quorum)
        self.coordinator.notify()
        return self.status(spec.study_id)

    def complete_spec(self, spec: fpb.StudySpec) -> Study:
        """Validate a new study and fill its defaults: every roster owner, a quorum of all of them, this
        miner's message size limit (owners refuse to send a larger answer). Returns the study as decoded
        before the defaults were filled (its schema and models are what the defaults leave alone)."""
        try:
            study = study_from_pb(spec, where="study")
        except StudyError as exc:
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        if faults := study.mining_faults():
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, "\n".join(f"study: {fault}" for fault in faults))
        if spec.mechanism not in self.mechanisms:
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT,
                            f"unknown mechanism {spec.mechanism!r}; available: {', '.join(sorted(self.mechanisms))}")
        regression = study.regression
        models = list(REGRESSION_MODELS if regression else CLASSIFICATION_MODELS)
        unknown = [m for m in spec.global_models if m not in models]
        if unknown:
            task = " to a regression study" if regression else ""
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT,
                            f"unknown global models {unknown}; available{task}: {', '.join(models)}")
        roster = self.identity.roster.current()
        if not spec.owners:
            spec.owners.extend(roster.owners())
        strangers = [o for o in spec.owners if o not in roster.owners()]
        if strangers:
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, f"{strangers} are not (unrevoked) owners on the roster")
        if not spec.owners:
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION, "the roster has no owners to invite")
        if spec.max_message_bytes == 0:
            spec.max_message_bytes = self.limits.max_message_bytes
        if spec.max_message_bytes > self.limits.max_message_bytes:
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, f"max_message_bytes {spec.max_message_bytes} exceeds "
                            f"this miner's limit of {self.limits.max_message_bytes} bytes")
        if spec.quorum == 0:
            spec.quorum = len(spec.owners)
        if spec.quorum > len(spec.owners):
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT,
                            f"quorum {spec.quorum} exceeds the {len(spec.owners)} invited owners")
        if timestamp_seconds(spec.deadline, "the deadline") <= self.clock():
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT, "the deadline has already passed")
        return study

    @handler
    def ListSites(self, request: fpb.ListSitesRequest, context: grpc.ServicerContext) -> fpb.SiteList:
        return self.site_list()

    def site_list(self) -> fpb.SiteList:
        """Every owner on the roster (revoked ones included) with its last poll, version, health and state
        (``ListSites``; the web dashboard shows the same)."""
        seen = self.store.sites()
        now = self.clock()
        reply = fpb.SiteList(silent_after_seconds=SILENT_AFTER_SECONDS)
        for party in sorted(self.identity.roster.current().parties.values(), key=lambda p: p.name):
            if party.role != "owner":
                continue
            site = reply.sites.add(owner_id=party.name)
            if party.name in seen:
                at, site.version, site.health = seen[party.name]
                site.last_poll_at.FromNanoseconds(int(at * 1e9))
                site.state = "polling" if now - at <= SILENT_AFTER_SECONDS else "silent"
            else:
                site.state = "never polled"
            if party.revoked:
                site.state, site.revoked_at = "revoked", party.revoked_at or ""
        return reply

    @handler
    def OpenDashboard(self, request: fpb.OpenDashboardRequest, context: grpc.ServicerContext) -> fpb.DashboardLogin:
        """A one-time sign-in URL of the web dashboard for the admin whose certificate this call proved."""
        if self.dashboard is None:
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION,
                            "this miner serves no web dashboard: add a [dashboard] table to its "
                            "miner.toml and restart it")
        url, expires = self.dashboard(_admin(context))
        reply = fpb.DashboardLogin(url=url)
        reply.expires_at.FromNanoseconds(int(expires * 1e9))
        log.info("dashboard: sign-in code issued to %s", _admin(context))
        return reply

    @handler
    def GetStudy(self, request: fpb.StudyRef, context: grpc.ServicerContext) -> fpb.StudyStatus:
        return self.status(request.study_id)

    @handler
    def ListStudies(self, request: fpb.ListStudiesRequest, context: grpc.ServicerContext) -> fpb.StudyList:
        return self.study_list()

    def study_list(self) -> fpb.StudyList:
        """Every study's status, in the store's order (``ListStudies``)."""
        reply = fpb.StudyList()
        for row in self.store.studies():
            reply.studies.append(self.status(row.study_id))
        return reply

    @handler
    def GetResults(self, request: fpb.StudyRef, context: grpc.ServicerContext) -> fpb.StudyResults:
        return self.results(request.study_id)

    def results(self, study_id: str) -> fpb.StudyResults:
        """A finished study's results (``GetResults``); NOT_FOUND or FAILED_PRECONDITION (its state) otherwise."""
        row = self.store.study(study_id)
        if row is None:
            raise Rejection(grpc.StatusCode.NOT_FOUND, f"no study {study_id!r} on this miner")
        data = self.store.results(study_id)
        if data is None:
            reason = f": {row.reason}" if row.reason else ""
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION, f"study {study_id!r} is {row.state}{reason}")
        return fpb.StudyResults.FromString(data)

    @handler
    def CancelStudy(self, request: fpb.CancelStudyRequest, context: grpc.ServicerContext) -> fpb.CancelReply:
        """Cancel an open or mining study (idempotent: a second cancel changes and logs nothing)."""
        by = _admin(context)
        if len(request.reason) > MAX_CANCEL_REASON:
            raise Rejection(grpc.StatusCode.INVALID_ARGUMENT,
                            f"the reason is {len(request.reason)} characters; at most {MAX_CANCEL_REASON}")
        outcome = self.store.cancel(request.study_id, by=by, reason=request.reason)
        if outcome == "missing":
            raise Rejection(grpc.StatusCode.NOT_FOUND, f"no study {request.study_id!r} on this miner")
        if outcome not in ("cancelled", "already"):
            raise Rejection(grpc.StatusCode.FAILED_PRECONDITION,
                            f"study {request.study_id!r} is already {outcome}; only an open or "
                            "mining study can be cancelled")
        if outcome == "cancelled":
            log.info("study %s: cancelled by %s", request.study_id, by,
                     extra={"study": request.study_id, "outcome": "cancelled"})
            self.coordinator.notify()
        return fpb.CancelReply(status=self.status(request.study_id), already_cancelled=outcome == "already")

    @async_handler
    async def WatchStudy(self, request: fpb.WatchStudyRequest, context: Any) -> fpb.StudyStatus:
        """The study's status as soon as its state or its number of answers differs from what the caller saw.

        Held (like ``OwnerExchange.Poll``, as a coroutine) on the coordinator's change notifications, at most
        `MAX_WATCH_SECONDS`; at the end of the hold the unchanged status is returned and the caller asks again.
        """
        assert self.feed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(request.wait_seconds, MAX_WATCH_SECONDS)
        while True:
            version = self.feed.version
            status = await self.offload(self.status, request.study_id)
            answered = sum(o.state != "waiting" for o in status.owners)
            remaining = deadline - loop.time()
            if status.state != request.seen_state or answered != request.seen_answers or remaining <= 0:
                return status
            await self.feed.wait(version, remaining)


    def status(self, study_id: str) -> fpb.StudyStatus:
        """The study's state and every invited owner's answer (``GetStudy``); NOT_FOUND for an unknown id."""
        row = self.store.study(study_id)
        if row is None:
            raise Rejection(grpc.StatusCode.NOT_FOUND, f"no study {study_id!r} on this miner")
        spec = fpb.StudySpec.FromString(row.spec)
        status = fpb.StudyStatus(state=row.state, reason=row.reason)
        status.spec.CopyFrom(spec)
        status.created_at.FromNanoseconds(int(row.created_at * 1e9))
        status.updated_at.FromNanoseconds(int(row.updated_at * 1e9))
        submitted = {s.owner_id: s.accepted_at for s in self.store.submissions(study_id)}
        refused = self.store.refusals(study_id)
        for owner in spec.owners:
            entry = status.owners.add(owner_id=owner, state="waiting")
            if owner in submitted:
                entry.state = "submitted"
                entry.updated_at.FromNanoseconds(int(submitted[owner] * 1e9))
            elif owner in refused:
                entry.state, entry.reason = "refused", refused[owner][0]
                entry.updated_at.FromNanoseconds(int(refused[owner][1] * 1e9))
        return status
