"""``devicestate recovery``: run the probes and canaries of staged recovery (issue 3, item 5).

Reads the decisions topic (group ``devicestate-recovery``). For each ``RecoveryStageStarted`` of
stage ``probe`` or ``canary`` whose deadline has not passed:

1. append ``RecoveryLeaseRequested(node, resourceID, holder)`` to the governance topic (key =
   node, producer ``acks=all``, idempotent);
2. wait for ``RecoveryLeaseGranted`` with this process's ``holder`` (a grant to another holder is
   not ours: another executor runs the check); ``RecoveryLeaseDenied`` for us, the stage ending
   (passed, failed, quarantine released) or its deadline passing: give up;
3. run the check with the executor, bounded by the stage deadline and the lease expiry;
4. append ``RecoveryReport`` with the grant's fencing token (the governor rejects a stale one).

Deadlines and lease expiries are the governor's event time, so they are compared with the
governor's clock as the decisions show it: the latest decision time seen plus the wall-clock time
since (:meth:`RecoveryService.governor_now`); a recorded stream replayed hours later still works.
At start the service first reads up to the end of the topic without asking for leases (catching up:
stages that ended meanwhile are dropped), then asks for the stages still open.

At most one check per device is in flight (a newer stage of a busy device waits its turn) and at
most ``max_concurrent`` devices hold a slot, from the lease request to the report (a granted lease
never waits for a slot). ``holder`` is ``<hostname>/<pid>/<8 hex>``: unique per process, so a
restarted executor never acts on its predecessor's grants; the governor's stage timeout fails what
a crash left unfinished. Offsets are committed after each batch has been handled (requests
published); ``requestedAt``/``reportedAt`` are wall-clock times (UTC).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

import structlog
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_random_exponential

from services.adapters.kafka.clients import (
    TopicPartition,
    is_retriable,
    make_producer,
    start_until_stopped,
)
from services.adapters.kafka.follow import Start, TopicFollower
from services.adapters.kafka.headers import type_headers
from services.domain.codec import parse_time
from services.domain.events import DeviceSource
from services.domain.governance.decisions import Decision, DecisionKind, decode_decision
from services.domain.governance.device_state import DeviceKey
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import RecoveryLeaseRequested, RecoveryReport, RecoveryStage
from services.processes.recovery.checks import CheckResult, Executor, RecoveryCheck
from services.processes.recovery.metrics import RecoveryMetrics
from services.runtime.config import Settings

log = structlog.get_logger(__name__)

RECOVERY_GROUP: Final = "devicestate-recovery"
EXECUTABLE_STAGES: Final = frozenset({RecoveryStage.PROBE, RecoveryStage.CANARY})
DETAIL_MAX: Final = 1000
"""Longest report detail (characters)."""
DEFAULT_CHECK_SECONDS: Final = 600.0
PUBLISH_GIVE_UP_SECONDS: Final = 120.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def default_holder() -> str:
    """``<hostname>/<pid>/<8 hex characters>``."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class StageRequest:
    """A ``RecoveryStageStarted`` decision this executor can run."""

    node: str
    resource_id: str
    stage: RecoveryStage
    quarantine_id: str
    attempt: int
    resource_name: str
    source: DeviceSource
    resource_claim: str | None
    deadline: datetime | None

    @property
    def key(self) -> DeviceKey:
        return (self.node, self.resource_id)


def _opt_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def stage_request(decision: Decision) -> StageRequest | None:
    """The request in a ``RecoveryStageStarted`` decision, or ``None`` when it is another kind,
    a stage with nothing to run (stability) or lacks what a check needs."""
    if decision.kind is not DecisionKind.RECOVERY_STAGE_STARTED:
        return None
    details = decision.details
    try:
        stage = RecoveryStage(str(details.get("stage")))
        source = DeviceSource(details.get("source") or DeviceSource.DEVICE_PLUGIN.value)
    except ValueError:
        return None
    if stage not in EXECUTABLE_STAGES or not decision.node or not decision.resource_id:
        return None
    claim = details.get("resourceClaim")
    attempt = details.get("attempt")
    return StageRequest(
        node=decision.node,
        resource_id=decision.resource_id,
        stage=stage,
        quarantine_id=str(details.get("quarantineID") or ""),
        attempt=attempt if type(attempt) is int else 0,
        resource_name=str(details.get("resourceName") or ""),
        source=source,
        resource_claim=claim if isinstance(claim, str) and claim else None,
        deadline=_opt_time(details.get("deadline")),
    )


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


class GovernancePublisher:
    """Appends recovery records to the governance topic (key = node, type in the type header;
    idempotent, ``acks=all``), retrying retriable failures for up to ``PUBLISH_GIVE_UP_SECONDS``."""

    def __init__(self, settings: Settings) -> None:
        self._topic = settings.governance_topic
        self._producer = make_producer(settings, client_id="devicestate-recovery")

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, record: RecoveryLeaseRequested | RecoveryReport) -> None:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(is_retriable),
            wait=wait_random_exponential(multiplier=0.2, max=10),
            stop=stop_after_delay(PUBLISH_GIVE_UP_SECONDS),
            reraise=True,
        ):
            with attempt:
                await self._producer.send_and_wait(
                    self._topic,
                    encode_input(record),
                    key=record.node.encode("utf-8"),
                    headers=type_headers(record.type),
                )


class RecordSink(Protocol):
    """Where :class:`RecoveryService` appends records (a :class:`GovernancePublisher`)."""

    async def publish(self, record: RecoveryLeaseRequested | RecoveryReport) -> None: ...


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
        slot.lease_expires_at = _opt_time(decision.details.get("expiresAt"))
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


@dataclass(frozen=True, slots=True)
class RecoveryOptions:
    """How ``devicestate recovery`` runs besides :class:`Settings`. ``holder`` ``None``: a fresh
    :func:`default_holder`; ``fail``: devices the in-process executor fails."""

    group_id: str = RECOVERY_GROUP
    holder: str | None = None
    max_concurrent: int = 4
    metrics_port: int = 9110
    fail: tuple[DeviceKey, ...] = ()
    poll_timeout_ms: int = 500
    shutdown_grace_seconds: float = 30.0
    job_ttl_seconds: int = 600
    job_poll_seconds: float = 2.0


@asynccontextmanager
async def open_executor(settings: Settings, options: RecoveryOptions) -> AsyncIterator[Executor]:
    """The executor ``settings.recovery_executor`` names, with its resources."""
    from services.processes.recovery.executors import InProcessExecutor, KubernetesJobExecutor

    if settings.recovery_executor == "inprocess":
        yield InProcessExecutor(fail=options.fail)
        return
    from services.adapters.kube.objects import kubernetes_objects

    async with kubernetes_objects(settings) as objects:
        yield KubernetesJobExecutor(
            objects,
            namespace=settings.recovery_namespace,
            image=settings.recovery_canary_image,
            dry_run=settings.recovery_dry_run,
            ttl_seconds=options.job_ttl_seconds,
            poll_seconds=options.job_poll_seconds,
        )


async def consume(
    follower: TopicFollower[Decision], service: RecoveryService, stop: asyncio.Event
) -> None:
    """Feed decisions to ``service`` until ``stop``; commit after each handled batch (past the
    undecodable ones too). While ``service.replaying``, read up to the end offsets the
    assignment had when first seen, commit nothing, then :meth:`RecoveryService.finish_replay`."""
    targets: dict[TopicPartition, int] | None = None
    uncommitted: dict[TopicPartition, int] = {}
    async for batches in follower.batches(stop):
        for tp, records in batches.items():
            for record in records:
                if record.value is not None:
                    await service.handle(record.value)
            if records:
                uncommitted[tp] = records[-1].offset + 1
        if service.replaying:
            assignment = follower.assignment()
            if not assignment:
                continue
            if targets is None:
                targets = await follower.end_offsets(list(assignment))
            positions = {tp: await follower.position(tp) for tp in assignment}
            if any(positions[tp] < targets.get(tp, 0) for tp in assignment):
                continue
            await service.finish_replay()
        if uncommitted:
            await follower.commit(uncommitted)
            uncommitted = {}
        service.expire()


async def run_recovery(
    settings: Settings,
    options: RecoveryOptions | None = None,
    *,
    executor: Executor | None = None,
    stop: asyncio.Event | None = None,
    metrics: RecoveryMetrics | None = None,
    on_started: Callable[[RecoveryService], None] | None = None,
) -> None:
    """Run the recovery service until ``stop`` is set (or SIGTERM/SIGINT when not given).
    ``executor``: use this one instead of the one ``settings`` names."""
    options = options or RecoveryOptions()
    metrics = metrics or RecoveryMetrics()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    try:
        metrics.serve(options.metrics_port)
    except OSError as exc:
        log.warning("metrics server not started", port=options.metrics_port, error=str(exc))
    holder = options.holder or default_holder()

    def undecodable(offset: int, exc: Exception) -> None:
        metrics.skipped.labels("undecodable").inc()
        log.warning("undecodable decision skipped", offset=offset, error=str(exc))

    follower = TopicFollower(
        settings,
        [settings.decisions_topic],
        decode_decision,
        client_id="devicestate-recovery",
        group_id=options.group_id,
        start=Start.EARLIEST,
        poll_timeout_ms=options.poll_timeout_ms,
        on_undecodable=undecodable,
    )
    publisher = GovernancePublisher(settings)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if executor is None:
                executor = await stack.enter_async_context(open_executor(settings, options))
            if not await start_until_stopped(publisher, stop, what="producer"):
                return
            if not await follower.start(stop):
                return
            service = RecoveryService(
                executor,
                publisher,
                holder=holder,
                max_concurrent=options.max_concurrent,
                metrics=metrics,
                replaying=True,
            )
            log.info(
                "recovery service started",
                holder=holder,
                executor=type(executor).__name__,
                dry_run=settings.recovery_dry_run,
                decisions=settings.decisions_topic,
                governance=settings.governance_topic,
            )
            if on_started is not None:
                on_started(service)
            consuming = asyncio.create_task(consume(follower, service, stop))
            stopping = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({consuming, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if consuming in done:
                stopping.cancel()
                consuming.result()
            else:
                consuming.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await consuming
            await service.drain(options.shutdown_grace_seconds)
            log.info("recovery service stopped", holder=holder)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await follower.close()
        await publisher.stop()
