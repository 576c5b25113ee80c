"""``devicestate recovery``: the Kafka-facing loop around the lease flow (issue 3, item 5).

:func:`run_recovery` reads the decisions topic (group :data:`RECOVERY_GROUP`, from the earliest
offset) and feeds each decision to a
:class:`~services.processes.recovery.service.RecoveryService`, which appends lease requests and
reports through a :class:`~services.processes.recovery.publisher.GovernancePublisher`. At start
it first reads up to the end of the topic without asking for leases (catching up: stages that
ended meanwhile are dropped), then asks for the stages still open (:func:`consume`). Offsets are
committed after each batch has been handled (requests published); undecodable decisions are
counted (``skipped{reason="undecodable"}``), logged and committed past. The executor is the one
``settings.recovery_executor`` names (:func:`open_executor`: in-process, or Kubernetes Jobs through
the kube adapter). On stop (SIGTERM/SIGINT) running checks get
``shutdown_grace_seconds`` to report, then are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

import structlog

from services.adapters.kafka.clients import TopicPartition, start_until_stopped
from services.adapters.kafka.follow import Start, TopicFollower
from services.adapters.kafka.topics import TopicRole, prepare_topics
from services.domain.governance.decisions import Decision, decode_decision
from services.domain.governance.device_state import DeviceKey
from services.processes.recovery.checks import Executor
from services.processes.recovery.metrics import RecoveryMetrics
from services.processes.recovery.publisher import GovernancePublisher
from services.processes.recovery.service import RecoveryService, default_holder
from services.runtime.config import RecoveryProcessSettings
from services.runtime.loop import serve_metrics, stop_on_signals

log = structlog.get_logger(__name__)

RECOVERY_GROUP: Final = "devicestate-recovery"


@dataclass(frozen=True, slots=True)
class RecoveryOptions:
    """How ``devicestate recovery`` runs besides :class:`RecoveryProcessSettings`. ``holder`` ``None``: a fresh
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
async def open_executor(
    settings: RecoveryProcessSettings, options: RecoveryOptions
) -> AsyncIterator[Executor]:
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
    settings: RecoveryProcessSettings,
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
    stop, remove_signal_handlers = stop_on_signals(stop)
    serve_metrics(metrics.serve, options.metrics_port)
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
            topics = (TopicRole.DECISIONS, TopicRole.GOVERNANCE)
            if not await prepare_topics(settings, topics, stop=stop):
                return
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
        remove_signal_handlers()
        await follower.close()
        await publisher.stop()
