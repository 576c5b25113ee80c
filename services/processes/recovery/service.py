"""The lease flow of staged recovery (issue 3, item 5): :class:`RecoveryService`.

Fed the decisions in log order (:meth:`RecoveryService.handle`; the Kafka loop is
:mod:`services.processes.recovery.run`). For each ``RecoveryStageStarted`` of stage ``probe`` or
``canary`` (:mod:`services.processes.recovery.stages`) whose deadline has not passed:

1. append ``RecoveryLeaseRequested(node, resourceID, holder)`` through the
   :class:`~services.processes.recovery.publisher.RecordSink`;
2. wait for ``RecoveryLeaseGranted`` with this process's ``holder`` (a grant to another holder is
   not ours: another executor runs the check); ``RecoveryLeaseDenied`` for us, the stage ending
   (passed, failed, quarantine released) or its deadline passing: give up;
3. run the check with the executor, bounded by the stage deadline and the lease expiry;
4. append ``RecoveryReport`` with the grant's fencing token (the governor rejects a stale one).

Deadlines and lease expiries are the governor's event time, so they are compared with the
governor's clock as the decisions show it: the latest decision time seen plus the wall-clock time
since (:meth:`RecoveryService.governor_now`); a recorded stream replayed hours later still works.
While ``replaying`` (catching up at start) no lease is requested; :meth:`finish_replay` drops the
stages that expired meanwhile and asks for the ones still open.

At most one check per device is in flight (a newer stage of a busy device waits its turn) and at
most ``max_concurrent`` devices hold a slot, from the lease request to the report (a granted lease
never waits for a slot). ``holder`` is ``<hostname>/<pid>/<8 hex>``: unique per process, so a
restarted executor never acts on its predecessor's grants; the governor's stage timeout fails what
a crash left unfinished. ``requestedAt``/``reportedAt`` are wall-clock times (UTC). An executor
that raises or overruns its budget is reported as a failed check; a report that cannot be
published is logged (the governor's stage timeout fails the stage).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Final

import structlog

from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.device_state import DeviceKey
from services.domain.governance.inputs import RecoveryLeaseRequested, RecoveryReport, RecoveryStage
from services.processes.recovery.checks import CheckResult, Executor, RecoveryCheck
from services.processes.recovery.metrics import RecoveryMetrics
from services.processes.recovery.publisher import RecordSink
from services.processes.recovery.stages import (
    EXECUTABLE_STAGES,
    StageRequest,
    opt_time,
    stage_request,
)

log = structlog.get_logger(__name__)

DETAIL_MAX: Final = 1000
"""Longest report detail (characters)."""
DEFAULT_CHECK_SECONDS: Final = 600.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def default_holder() -> str:
    """``<hostname>/<pid>/<8 hex characters>``."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


@dataclass(slots=True)
class _Slot:
    """A device this executor works on: lease requested (``task`` None) or check running."""

    request: StageRequest
    fencing_token: int = 0
    lease_expires_at: datetime | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.task is not None


class RecoveryService:
    """The lease flow over decisions, one :meth:`handle` call per decision in log order."""

    def __init__(
        self,
        executor: Executor,
        publisher: RecordSink,
        *,
        holder: str,
        max_concurrent: int = 4,
        metrics: RecoveryMetrics | None = None,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
        replaying: bool = False,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.holder = holder
        self._executor = executor
        self._publisher = publisher
        self._max = max_concurrent
        self._metrics = metrics or RecoveryMetrics()
        self._clock = clock
        self._monotonic = monotonic
        self._event_at: datetime | None = None
        self._event_seen = 0.0
        self.replaying = replaying
        self._slots: dict[DeviceKey, _Slot] = {}
        self._queue: OrderedDict[DeviceKey, StageRequest] = OrderedDict()

    @property
    def in_flight(self) -> dict[DeviceKey, StageRequest]:
        return {key: slot.request for key, slot in self._slots.items()}

    def governor_now(self) -> datetime:
        """The governor's event time as the decisions show it: the latest decision time seen plus
        the wall-clock time since; the wall clock before any decision."""
        if self._event_at is None:
            return self._clock()
        return self._event_at + timedelta(seconds=self._monotonic() - self._event_seen)

    def _observe(self, decision: Decision) -> None:
        if self._event_at is None or decision.at >= self._event_at:
            self._event_at = decision.at
            self._event_seen = self._monotonic()

    def _expired(self, request: StageRequest) -> bool:
        return request.deadline is not None and request.deadline <= self.governor_now()

    async def finish_replay(self) -> None:
        """End of the catch-up: forget what expired, ask for the leases of the open stages."""
        self.replaying = False
        self.expire()
        log.info("caught up with the decisions", open_stages=len(self._queue))
        await self._pump()

    def _gauge(self) -> None:
        self._metrics.in_flight.set(len(self._slots))

    async def handle(self, decision: Decision) -> None:
        self._observe(decision)
        kind = decision.kind
        if kind is DecisionKind.RECOVERY_STAGE_STARTED:
            await self._stage_started(decision)
        elif kind is DecisionKind.LEASE_GRANTED:
            self._granted(decision)
        elif kind is DecisionKind.LEASE_DENIED:
            self._denied(decision)
        elif kind in (
            DecisionKind.RECOVERY_STAGE_PASSED,
            DecisionKind.RECOVERY_FAILED,
            DecisionKind.QUARANTINE_RELEASED,
        ):
            self._stage_ended(decision)
        else:
            return
        await self._pump()

    async def _stage_started(self, decision: Decision) -> None:
        request = stage_request(decision)
        if request is None:
            self._metrics.skipped.labels("not-executable").inc()
            return
        if self._expired(request):
            self._metrics.skipped.labels("expired").inc()
            return
        slot = self._slots.get(request.key)
        if slot is not None and not slot.running:
            # Still waiting for the device's lease: the grant will be for this newer stage.
            slot.request = request
            return
        self._queue[request.key] = request
        self._queue.move_to_end(request.key)

    def _ours(self, decision: Decision) -> _Slot | None:
        if decision.details.get("holder") != self.holder:
            return None
        if decision.node is None or decision.resource_id is None:
            return None
        return self._slots.get((decision.node, decision.resource_id))

    def _granted(self, decision: Decision) -> None:
        token = decision.details.get("fencingToken")
        if decision.details.get("holder") != self.holder:
            log.debug(
                "lease granted to another holder",
                node=decision.node,
                holder=decision.details.get("holder"),
            )
            return
        slot = self._ours(decision)
        if slot is None or type(token) is not int:
            log.info(
                "lease grant without a request of ours ignored",
                node=decision.node,
                resource_id=decision.resource_id,
            )
            return
        self._metrics.leases.labels("granted").inc()
        slot.fencing_token = max(slot.fencing_token, token)
        slot.lease_expires_at = opt_time(decision.details.get("expiresAt"))
        if slot.running:
            return  # a renewed grant: the report carries the newer token
        stage = decision.details.get("stage")
        if stage in {s.value for s in EXECUTABLE_STAGES} and stage != slot.request.stage.value:
            slot.request = replace(slot.request, stage=RecoveryStage(stage))
        slot.task = asyncio.create_task(
            self._execute(slot), name=f"recovery-check {slot.request.key}"
        )

    def _denied(self, decision: Decision) -> None:
        slot = self._ours(decision)
        if slot is None or slot.running:
            return
        self._metrics.leases.labels("denied").inc()
        log.info(
            "lease denied",
            node=decision.node,
            resource_id=decision.resource_id,
            held_by=decision.details.get("heldBy"),
            reason=decision.details.get("reason"),
        )
        self._drop(slot.request.key)

    def _stage_ended(self, decision: Decision) -> None:
        if decision.node is None or decision.resource_id is None:
            return
        key = (decision.node, decision.resource_id)
        stage = decision.details.get("stage")
        released = decision.kind is DecisionKind.QUARANTINE_RELEASED

        def ends(request: StageRequest) -> bool:
            return released or stage is None or stage == request.stage.value

        queued = self._queue.get(key)
        if queued is not None and ends(queued):
            del self._queue[key]
        slot = self._slots.get(key)
        if slot is not None and not slot.running and ends(slot.request):
            self._metrics.leases.labels("abandoned").inc()
            self._drop(key)

    def _drop(self, key: DeviceKey) -> None:
        self._slots.pop(key, None)
        self._gauge()

    def expire(self) -> None:
        """Forget requests whose stage deadline passed without a grant."""
        for key, request in list(self._queue.items()):
            if self._expired(request):
                del self._queue[key]
        for key, slot in list(self._slots.items()):
            if not slot.running and self._expired(slot.request):
                self._metrics.leases.labels("abandoned").inc()
                self._drop(key)

    async def _pump(self) -> None:
        """Request leases for queued stages while slots are free (not while catching up)."""
        while not self.replaying and len(self._slots) < self._max:
            key = next((k for k in self._queue if k not in self._slots), None)
            if key is None:
                return
            request = self._queue.pop(key)
            if self._expired(request):
                self._metrics.skipped.labels("expired").inc()
                continue
            self._slots[key] = _Slot(request)
            self._gauge()
            self._metrics.leases.labels("requested").inc()
            log.info(
                "requesting recovery lease",
                node=request.node,
                resource_id=request.resource_id,
                stage=request.stage.value,
                holder=self.holder,
            )
            await self._publisher.publish(
                RecoveryLeaseRequested(
                    request.node, request.resource_id, self.holder, self._clock()
                )
            )

    def _check(self, slot: _Slot) -> RecoveryCheck:
        r = slot.request
        ends = [t for t in (r.deadline, slot.lease_expires_at) if t is not None]
        budget = (min(ends) - self.governor_now()).total_seconds() if ends else None
        return RecoveryCheck(
            node=r.node,
            resource_id=r.resource_id,
            stage=r.stage,
            quarantine_id=r.quarantine_id,
            attempt=r.attempt,
            resource_name=r.resource_name,
            source=r.source,
            holder=self.holder,
            fencing_token=slot.fencing_token,
            resource_claim=r.resource_claim,
            deadline=r.deadline,
            lease_expires_at=slot.lease_expires_at,
            budget_seconds=budget,
        )

    async def _execute(self, slot: _Slot) -> None:
        check = self._check(slot)
        timeout = DEFAULT_CHECK_SECONDS if check.budget_seconds is None else check.budget_seconds
        try:
            try:
                result = await asyncio.wait_for(self._executor.run(check), max(0.0, timeout))
            except TimeoutError:
                result = CheckResult(
                    False, "check did not finish before the stage deadline or the lease expiry"
                )
            except Exception as exc:
                log.exception(
                    "recovery executor failed", node=check.node, resource_id=check.resource_id
                )
                result = CheckResult(False, f"executor error: {exc!r}")
            report = RecoveryReport(
                node=check.node,
                resource_id=check.resource_id,
                stage=check.stage,
                passed=result.passed,
                holder=self.holder,
                fencing_token=slot.fencing_token,
                reported_at=self._clock(),
                detail=result.detail[:DETAIL_MAX],
            )
            await self._publisher.publish(report)
            self._metrics.checks.labels(
                check.stage.value, "passed" if result.passed else "failed"
            ).inc()
            log.info(
                "recovery check reported",
                node=check.node,
                resource_id=check.resource_id,
                stage=check.stage.value,
                passed=result.passed,
                fencing_token=slot.fencing_token,
                detail=report.detail,
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "recovery report not published", node=check.node, resource_id=check.resource_id
            )
        finally:
            if self._slots.get(slot.request.key) is slot:
                self._drop(slot.request.key)
        await self._pump()

    async def drain(self, grace_seconds: float) -> None:
        """Wait up to ``grace_seconds`` for running checks to report; cancel the rest."""
        tasks = [s.task for s in self._slots.values() if s.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_seconds)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if pending:
            log.warning("recovery checks cancelled at shutdown", cancelled=len(pending))
