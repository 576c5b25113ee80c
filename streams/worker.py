"""Run the stream worker from our own event loop: migrate, ensure topics, start Faust, stop cleanly.

:func:`run_worker` is what ``devicestate worker`` runs. It returns the process exit code: 0 after a
SIGTERM/SIGINT shutdown (within ``DEVICESTATE_WORKER_SHUTDOWN_GRACE_SECONDS``, see
:mod:`streams.shutdown`), 1 when a batch could not be written (non-transient database error) or
Faust crashed. A batch in flight at shutdown is finished (or abandoned unacknowledged) first; see
:mod:`streams.dedup`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from typing import Any, Final

import faust
import structlog
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential_jitter

from services.adapters.kafka.clients import is_connection_error
from services.adapters.projection.errors import is_transient
from services.runtime.config import WorkerProcessSettings
from streams.app import WorkerApp, assignor_topic, build_worker_app
from streams.heap import trim_after_batches
from streams.metrics import WorkerMetrics
from streams.shutdown import ShutdownBound
from streams.watchdog import ConsumerWatchdog

log = structlog.get_logger(__name__)

STARTUP_WAIT_SECONDS: Final = 120.0
"""How long to wait for PostgreSQL and Kafka to answer at start-up."""

PROGRESS_LOG_SECONDS: Final = 10.0


class _Worker(faust.Worker):  # type: ignore[misc]
    """faust's Worker with our signal handling (we own the loop and the shutdown, bounded by
    :class:`~streams.shutdown.ShutdownBound`)."""

    def __init__(self, *args: Any, bound: ShutdownBound, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._devicestate_bound = bound

    def install_signal_handlers(self) -> None:
        self._devicestate_bound.install()


async def _retry_start(what: str, fn: Any, *args: Any) -> Any:
    """Call ``await fn(*args)`` until it succeeds or :data:`STARTUP_WAIT_SECONDS` pass, retrying
    transient (connection) errors; returns what it returned."""

    def before_sleep(state: Any) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.info("waiting for dependency", what=what, attempt=state.attempt_number, error=repr(exc))

    retrying = AsyncRetrying(
        retry=retry_if_exception(_startup_transient),
        wait=wait_exponential_jitter(multiplier=0.5, max=5.0, jitter=0.5),
        stop=stop_after_delay(STARTUP_WAIT_SECONDS),
        before_sleep=before_sleep,
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await fn(*args)
    raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover


def _startup_transient(exc: BaseException) -> bool:
    # The Kafka client's connection errors are not OSErrors: asked of the Kafka adapter.
    return is_transient(exc) or is_connection_error(exc)


async def prepare(settings: WorkerProcessSettings) -> None:
    """Bring the projection schema up to date and make sure the topics exist (created when
    missing unless ``settings.topics_create_missing`` is false; faust's assignor topic too, so it
    gets the replication of the others) and are as the worker needs them (raises
    :class:`~services.adapters.kafka.topics.TopicCheckError` naming the fix)."""
    from services.adapters.kafka.topics import ensure_internal_topics
    from services.adapters.projection.migrate import migrate

    await _retry_start("postgresql", migrate, settings.database_url, settings.database_schema)
    await check_topics(settings, create=settings.topics_create_missing)
    await _retry_start(
        "kafka", functools.partial(ensure_internal_topics, settings, {assignor_topic(settings): 1})
    )


async def check_topics(settings: WorkerProcessSettings, *, create: bool) -> None:
    """The four topics the worker reads and writes, checked (created first if ``create``)."""
    from services.adapters.kafka.topics import ensure_topics

    await _retry_start("kafka", functools.partial(ensure_topics, settings, create=create))


async def run_worker(
    settings: WorkerProcessSettings, *, loglevel: str | None = None, prepare_first: bool = True
) -> int:
    """Run until SIGTERM/SIGINT (exit code 0) or a fatal error (1). ``prepare_first`` runs
    :func:`prepare` (migrations, topics) before starting."""
    from services.adapters.kafka.topics import cluster_replication_factor
    from services.adapters.projection.engine import create_engine
    from services.adapters.projection.governance_store import GovernanceStore
    from services.adapters.projection.store import ProjectionStore

    started = time.monotonic()
    if prepare_first:
        await prepare(settings)
    else:  # the topics are checked all the same: a wrong one would stop the worker later
        await check_topics(settings, create=False)
    # The changelogs faust creates get the replication of the topics (min(3, brokers) unless set).
    replication: int = await _retry_start("kafka", cluster_replication_factor, settings)

    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    fatal: list[BaseException] = []

    def on_signal(sig: signal.Signals) -> None:
        if not stop_requested.is_set():
            log.info("signal received, stopping", signal=sig.name)
        stop_requested.set()
        built.begin_shutdown()

    def on_fatal(exc: BaseException) -> None:
        fatal.append(exc)
        loop.call_soon(stop_requested.set)

    engine = create_engine(settings.database_url, pool_size=2, pre_ping=True)
    metrics = WorkerMetrics()
    metrics_port = metrics.serve(settings.worker_metrics_port)
    built = build_worker_app(
        settings,
        sink=ProjectionStore(engine, settings.database_schema),
        governance_sink=GovernanceStore(engine, settings.database_schema),
        metrics=metrics,
        on_fatal=on_fatal,
        replication=replication,
    )
    bound = ShutdownBound(loop, settings.worker_shutdown_grace_seconds, on_signal)
    worker = _Worker(
        built.app,
        bound=bound,
        loglevel=loglevel or settings.log_level,
        override_logging=False,
        quiet=True,
        daemon=False,
        redirect_stdouts=False,
    )
    worker.spinner = None  # no terminal spinner: we log
    log.info(
        "worker starting",
        topic=settings.topic,
        group=settings.consumer_group,
        schema=settings.database_schema,
        store=settings.worker_store,
        batch_size=settings.worker_batch_size,
        metrics_port=metrics_port,
    )
    progress = asyncio.ensure_future(_log_progress(built, stop_requested))
    trimming = (
        asyncio.ensure_future(
            trim_after_batches(
                lambda: built.dedup.batches + built.governor.batches,
                settings.worker_heap_trim_seconds,
                stop_requested,
            )
        )
        if settings.worker_heap_trim_seconds > 0
        else None
    )
    try:
        await worker.start()
        log.info("worker started", seconds=round(time.monotonic() - started, 2))
        while not stop_requested.is_set():
            crash = built.app.crash_reason or worker.crash_reason
            if crash is not None:
                fatal.append(crash)
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_requested.wait(), timeout=1.0)
    finally:
        log.info("worker stopping")
        await worker.stop()
        progress.cancel()
        if trimming is not None:
            trimming.cancel()
        await engine.dispose()
        metrics.close()
        bound.cancel()
        log.info(
            "worker stopped",
            batches=built.dedup.batches,
            events=built.dedup.events_seen,
            governance_batches=built.governor.batches,
            governance_records=built.governor.records_seen,
            error=repr(fatal[0]) if fatal else None,
        )
    return 1 if fatal else 0


async def _log_progress(built: WorkerApp, stop: asyncio.Event) -> None:
    last_events, last_time = 0, time.monotonic()
    watchdog = ConsumerWatchdog(
        built.app, built.dedup.settings.topic, lambda: built.dedup.events_seen
    )
    while not stop.is_set():
        await asyncio.sleep(PROGRESS_LOG_SECONDS)
        events, now = built.dedup.events_seen, time.monotonic()
        if watchdog.check(now):
            await watchdog.refetch_now()
        if events != last_events:
            log.info(
                "progress",
                events=events,
                batches=built.dedup.batches,
                events_per_second=round((events - last_events) / (now - last_time)),
            )
        last_events, last_time = events, now
