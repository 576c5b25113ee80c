"""``devicestate enforce``: the loop that runs reconcile passes (:func:`run_enforcer`).

A pass (:class:`~services.processes.enforcement.reconciler.Reconciler`) runs every
``interval_seconds``, and early when a trigger decision arrives
(:mod:`services.processes.enforcement.triggers`); while a decision's expectation is unsettled,
passes repeat every ``retry_seconds`` (for at most ``expectation_seconds``), and a failed or
partial pass backs off from ``retry_seconds`` doubling up to ``interval_seconds``. A burst of
decisions is debounced by ``debounce_seconds``. A pass that raises is logged and counted as
failed; the loop goes on. SIGTERM or SIGINT lets the running pass finish (each call has a
timeout), then the process exits. With enforcement off
(``DEVICESTATE_ENFORCE_DEVICE_TAINT_RULES=false``) nothing is read or written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import structlog

from services.adapters.kafka.topics import TopicRole, prepare_topics
from services.domain.governance.decisions import Decision
from services.processes.enforcement.kube import TaintRuleApi
from services.processes.enforcement.metrics import EnforcementMetrics
from services.processes.enforcement.reconciler import Reconciler, ReconcileResult
from services.processes.enforcement.source import QuarantineSource
from services.processes.enforcement.triggers import Expectations, follow_decisions, kafka_decisions
from services.runtime.config import EnforcementProcessSettings, GovernanceTopicSettings
from services.runtime.loop import serve_metrics, stop_on_signals

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class EnforceOptions:
    """How ``devicestate enforce`` runs besides :class:`EnforcementProcessSettings`."""

    interval_seconds: float = 30.0
    metrics_port: int = 9111
    follow_decisions: bool = True
    once: bool = False
    retry_seconds: float = 1.0
    expectation_seconds: float = 30.0
    debounce_seconds: float = 0.2


async def _wait(stop: asyncio.Event, wake: asyncio.Event, seconds: float) -> None:
    """Until ``stop`` or ``wake`` is set, or ``seconds`` passed."""
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=max(seconds, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        for waiter in waiters:
            with contextlib.suppress(asyncio.CancelledError):
                await waiter


async def run_enforcer(
    settings: EnforcementProcessSettings,
    options: EnforceOptions | None = None,
    *,
    rules: TaintRuleApi | None = None,
    source: QuarantineSource | None = None,
    decisions: AsyncIterator[Decision] | None = None,
    stop: asyncio.Event | None = None,
    metrics: EnforcementMetrics | None = None,
    on_result: Callable[[ReconcileResult], None] | None = None,
) -> ReconcileResult | None:
    """Run the reconciler until ``stop`` (SIGTERM/SIGINT when not given), or one pass with
    ``options.once`` (its result is returned). ``rules``/``source``/``decisions`` replace the
    Kubernetes client, the PostgreSQL reader and the Kafka follower that ``settings`` name."""
    options = options or EnforceOptions()
    metrics = metrics or EnforcementMetrics()
    stop, remove_signal_handlers = stop_on_signals(stop)
    metrics.enabled.set(1 if settings.enforce_device_taint_rules else 0)
    metrics.dry_run.set(1 if settings.enforce_dry_run else 0)
    if not options.once:
        serve_metrics(metrics.serve, options.metrics_port)
    try:
        if not settings.enforce_device_taint_rules:
            log.warning(
                "DeviceTaintRule enforcement is off (DEVICESTATE_ENFORCE_DEVICE_TAINT_RULES="
                "false): nothing is read or written" + ("" if options.once else "; idle")
            )
            if not options.once:
                await stop.wait()
            return None
        async with contextlib.AsyncExitStack() as stack:
            if source is None:
                from services.processes.enforcement.source import (
                    PostgresQuarantineSource,
                    make_engine,
                )

                engine = make_engine(settings.database_url)
                stack.push_async_callback(engine.dispose)
                source = PostgresQuarantineSource(engine, settings.database_schema)
            if rules is None:
                from services.adapters.kube.taint_rules import kubernetes_taint_rules

                rules = await stack.enter_async_context(kubernetes_taint_rules(settings))
            reconciler = Reconciler(
                rules,
                source,
                dry_run=settings.enforce_dry_run,
                no_execute=settings.enforce_no_execute,
                metrics=metrics,
            )
            log.info(
                "device taint rule enforcement started",
                dry_run=settings.enforce_dry_run,
                effect="NoExecute" if settings.enforce_no_execute else "NoSchedule",
                interval_seconds=options.interval_seconds,
                schema=settings.database_schema,
                decisions=settings.decisions_topic if options.follow_decisions else None,
            )
            if options.once:
                result = await reconciler.reconcile()
                if on_result is not None:
                    on_result(result)
                return result
            return await _loop(settings, options, reconciler, decisions, stop, metrics, on_result)
    finally:
        remove_signal_handlers()


async def _loop(
    settings: GovernanceTopicSettings,
    options: EnforceOptions,
    reconciler: Reconciler,
    decisions: AsyncIterator[Decision] | None,
    stop: asyncio.Event,
    metrics: EnforcementMetrics,
    on_result: Callable[[ReconcileResult], None] | None,
) -> ReconcileResult | None:
    wake = asyncio.Event()
    expectations = Expectations(options.expectation_seconds)
    if decisions is None and options.follow_decisions:
        # The decisions topic must be right before it is followed (TopicCheckError otherwise).
        if not await prepare_topics(settings, (TopicRole.DECISIONS,), stop=stop):
            return None
        decisions = kafka_decisions(settings, stop)
    follower = (
        asyncio.create_task(follow_decisions(decisions, expectations, wake, metrics))
        if decisions is not None
        else None
    )
    last: ReconcileResult | None = None
    failures = 0
    try:
        while not stop.is_set():
            wake.clear()  # a decision arriving during the pass sets it again: one more pass
            try:
                last = await reconciler.reconcile()
            except Exception:
                log.exception("reconcile pass failed")
                last = ReconcileResult(dry_run=reconciler.dry_run, failed=True)
            if on_result is not None:
                on_result(last)
            if not last.failed:
                expectations.settle(last.quarantine_ids)
            if last.failed or last.errors:
                failures += 1
                delay = min(options.interval_seconds, options.retry_seconds * 2 ** (failures - 1))
            else:
                failures = 0
                delay = options.interval_seconds
            if expectations.pending:
                delay = min(delay, options.retry_seconds)
            await _wait(stop, wake, delay)
            if wake.is_set() and not stop.is_set():
                with contextlib.suppress(TimeoutError):  # let a burst of decisions settle
                    await asyncio.wait_for(stop.wait(), options.debounce_seconds)
    finally:
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        log.info("device taint rule enforcement stopped")
    return last
