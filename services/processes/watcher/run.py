"""The watcher's entry point, :func:`run_watch`: a source (a recorded file, or the Kubernetes API
in live mode, ``live``) -> a :class:`~services.processes.watcher.session.WatchSession` (Pods, node
Leases and Nodes, DRA objects through their processors) -> Kafka
(:class:`~services.adapters.kafka.producer.EventPublisher`), with metrics and a summary.

Time comes from the log (issue 3): besides device events the watcher publishes, on the same topic,
coarsened ``NodeHeartbeat``s (node Leases), ``NodeResourcesChanged`` (Nodes' extended resources)
and ``WatcherTick``s, one to every partition, so that every partition's event time moves on even
when nothing happens there. The DRA inventory goes on the same topic as ``InventoryObserved``
(issue 4), keyed by node where it has one, so a node's inventory shares its partition.

File mode (:func:`run_file`) reads the file to its end, flushes and returns; Node, Lease and DRA
objects in the stream are read like the live ones, and each ``_CLOCK`` directive sets the clock
and sends one tick to every partition with its time. Live mode runs until SIGTERM or SIGINT, or
until a loop fails; then the producer is flushed (for at most :data:`SHUTDOWN_FLUSH_SECONDS`;
what is left unacknowledged is re-emitted by the next start's LISTs).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Final

import structlog
from tenacity import AsyncRetrying, retry_if_exception, stop_never, wait_random_exponential

from services.adapters.kafka.clients import is_retriable
from services.adapters.kafka.producer import EventPublisher
from services.adapters.kafka.topics import TopicRole, ensure_topics
from services.domain.watch.failure_tracker import EVENT_KIND, FailureTracker
from services.domain.watch.inventory_tracker import INVENTORY_KINDS
from services.domain.watch.node_tracker import NodeTracker
from services.processes.watcher.file_source import read_watch_file, source_of
from services.processes.watcher.live import run_live
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.processor import NodeProcessor, WatchProcessor
from services.processes.watcher.session import WatchSession
from services.processes.watcher.summary import WatchSummary
from services.runtime.config import (
    GovernanceTopicSettings,
    WatcherProcessSettings,
    WatchSettings,
)

log = structlog.get_logger(__name__)

RECORD_TOO_LARGE: Final = "record-too-large"
"""Problem code of a record the producer dead-lettered as too large for the topic."""

WATCHER_TOPICS: Final = (TopicRole.EVENTS, TopicRole.DEAD_LETTER)
"""The topics the watcher writes (and checks on start)."""

SHUTDOWN_FLUSH_SECONDS: Final = 20.0
"""Longest wait (seconds) for Kafka acknowledgements when live mode stops."""


async def _wait_for_topics(settings: GovernanceTopicSettings) -> None:
    # The topics it writes, created if missing (unless told not to) and checked: a wrong one
    # raises TopicCheckError naming the fix, at once (not retriable).
    def before_sleep(state: object) -> None:
        log.info("waiting for kafka", bootstrap_servers=settings.kafka_bootstrap_servers)

    async for attempt in AsyncRetrying(
        retry=retry_if_exception(is_retriable),
        wait=wait_random_exponential(multiplier=0.5, max=10),
        stop=stop_never,
        before_sleep=before_sleep,
        reraise=True,
    ):
        with attempt:
            await ensure_topics(settings, WATCHER_TOPICS, create=settings.topics_create_missing)


def _file_kinds(settings: WatchSettings) -> frozenset[str]:
    kinds = set()
    if settings.watch_leases:
        kinds.add("Lease")
    if settings.watch_nodes:
        kinds.add("Node")
    if settings.watch_dra:
        kinds |= INVENTORY_KINDS
    if settings.watch_events:
        kinds.add(EVENT_KIND)
    return frozenset(kinds)


async def run_file(session: WatchSession, path: Path, settings: WatchSettings) -> None:
    """Hand every line of the recorded stream at ``path`` to ``session``, in order (Leases,
    Nodes and DRA objects read as such when ``settings`` watches them).

    At the end, one more tick to every partition, a millisecond after the stream's clock: the
    governor folds a record only once every partition's event time has passed it (issue 10), and
    a recording ends with ticks at the time of its last records, so without it they would be held
    until the next run (a live watcher's next tick does the same)."""
    for line, item in read_watch_file(path, kinds=_file_kinds(settings)):
        await session.handle(item, source_of(path, line))
    await session.tick(session.clock.now() + timedelta(milliseconds=1))


async def run_watch(
    settings: WatcherProcessSettings,
    from_file: Path | None = None,
    metrics: WatcherMetrics | None = None,
) -> WatchSummary:
    """Run the watcher and return its :class:`WatchSummary`.

    ``from_file``: a recorded JSONL watch stream, read to its end (``_CLOCK`` directives set
    ``observedAt`` and send ticks; without one the wall clock is used). ``None``: the live cluster
    (kubeconfig from ``settings``) until SIGTERM/SIGINT. Waits for Kafka at start; raises
    :class:`~services.adapters.kafka.topics.TopicCheckError` when the topics are missing (and
    not to be created) or wrong, ``services.adapters.kube.errors.ApiRejected`` if the API refuses the watcher (RBAC),
    ``OSError`` if the file cannot be read.

    ``metrics``: counters to keep in (a caller that serves and closes them itself, e.g. a test
    whose Prometheus scrapes them after the file's end); by default new ones, served on
    ``settings.watcher_metrics_port``.
    """
    metrics = WatcherMetrics() if metrics is None else metrics
    try:
        metrics.serve(settings.watcher_metrics_port)
    except OSError as exc:
        # Metrics are an aid, not a reason to stop watching (e.g. port taken by another run).
        log.warning(
            "metrics server not started", port=settings.watcher_metrics_port, error=str(exc)
        )
    summary = WatchSummary(source=f"file:{from_file}" if from_file else "kubernetes")
    await _wait_for_topics(settings)

    def refused(stage: str, record_type: str) -> None:
        # A record too large for the topic, dead-lettered by the producer itself (issue 11): it
        # was counted as published when handed over; the summary takes it back (the Prometheus
        # counter cannot), and counts it as a problem and a dead letter.
        summary.events_published[record_type] -= 1
        summary.events_published += Counter()  # drops a count that fell to 0
        summary.problems[RECORD_TOO_LARGE] += 1
        metrics.problems.labels(RECORD_TOO_LARGE).inc()
        summary.dead_lettered += 1
        metrics.dead_lettered.labels(stage).inc()

    publisher = EventPublisher(
        settings, on_retry=metrics.publish_retries.inc, on_dead_letter=refused
    )
    await publisher.start()
    nodes = NodeProcessor(
        NodeTracker(
            timedelta(seconds=settings.heartbeat_interval_seconds), settings.lease_namespace
        )
    )
    processor = WatchProcessor(
        max_message_bytes=settings.max_message_bytes, record_schema=settings.watcher_record_schema
    )
    failures = FailureTracker() if settings.watch_events else None
    session = WatchSession(
        publisher, metrics, summary, processor=processor, nodes=nodes, failures=failures
    )
    try:
        if from_file is not None:
            await run_file(session, from_file, settings)
        else:
            await run_live(session, settings)
    finally:
        await publisher.close(None if from_file is not None else SHUTDOWN_FLUSH_SECONDS)
    log.info("watcher finished", summary=summary.line())
    return summary
