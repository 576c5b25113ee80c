"""Wiring of the watcher: a source (recorded file or Kubernetes API) -> :class:`WatchProcessor`
-> Kafka (:class:`~services.kafka.producer.EventPublisher`), with metrics and a summary.

File mode reads the file to its end, flushes and returns. Live mode LISTs and WATCHes until
SIGTERM or SIGINT, then stops the watch and flushes the producer (for at most
:data:`SHUTDOWN_FLUSH_SECONDS`; what is left unacknowledged is re-emitted by the next start's
LIST).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

import structlog
from tenacity import AsyncRetrying, retry_if_exception, stop_never, wait_random_exponential

from services.config import Settings
from services.domain.events import Event, parse_resource_version
from services.kafka.producer import EventPublisher, is_retriable
from services.kafka.topics import ensure_topics
from services.watcher.file_source import HarnessClock, read_watch_file, source_of
from services.watcher.kube_source import KubeSource, Relisted, SourceItem, kubernetes_pod_api
from services.watcher.metrics import WatcherMetrics
from services.watcher.processor import STAGE_WATCH_LINE, Outcome, WatchProcessor
from services.watcher.watch_lines import (
    Bookmark,
    BrokenLine,
    ClockSet,
    Directive,
    OtherKind,
    PodChange,
    UnknownType,
    WatchError,
)

log = structlog.get_logger(__name__)

SHUTDOWN_FLUSH_SECONDS: Final = 20.0
"""Longest wait (seconds) for Kafka acknowledgements when live mode stops."""


class Publisher(Protocol):
    """Where a :class:`WatchSession` sends events and dead letters (an ``EventPublisher``)."""

    async def publish(self, event: Event) -> None: ...

    async def dead_letter(self, original: bytes, reason: str, stage: str, source: str) -> None: ...


@dataclass
class WatchSummary:
    """Counts of one watcher run: items read, events published by type, problems by code
    (Pod problems from ``read_pod`` plus ``broken-line``, ``unknown-event-type``,
    ``watch-error``), dead-lettered records, ignored items by kind, and the last
    resourceVersion."""

    source: str
    items: int = 0
    events_published: Counter[str] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    dead_lettered: int = 0
    ignored: Counter[str] = field(default_factory=Counter)
    resource_version: str | None = None
    pods_tracked: int = 0

    @property
    def events_total(self) -> int:
        return sum(self.events_published.values())

    def line(self) -> str:
        """One human-readable line, e.g. for the CLI."""

        def counts(counter: Counter[str]) -> str:
            return ", ".join(f"{k}={v}" for k, v in sorted(counter.items())) or "none"

        return (
            f"{self.source}: {self.items} items, {self.events_total} events published "
            f"({counts(self.events_published)}), {sum(self.problems.values())} problems "
            f"({counts(self.problems)}), {self.dead_lettered} dead-lettered, "
            f"{self.pods_tracked} pods tracked, last resourceVersion {self.resource_version}"
        )

    def __str__(self) -> str:
        return self.line()

    def __rich__(self) -> str:
        return self.line()


class WatchSession:
    """Handles each item of a source in order: Pods through the processor, results to the
    publisher, and everything counted in the summary and the metrics."""

    def __init__(
        self,
        publisher: Publisher,
        metrics: WatcherMetrics,
        summary: WatchSummary,
        clock: HarnessClock | None = None,
        processor: WatchProcessor | None = None,
    ) -> None:
        self.publisher = publisher
        self.metrics = metrics
        self.summary = summary
        self.clock = clock or HarnessClock()
        self.processor = processor or WatchProcessor()

    def _problem(self, code: str) -> None:
        self.summary.problems[code] += 1
        self.metrics.problems.labels(code).inc()

    def _resume_point(self, version: str | None) -> None:
        if version is None:
            return
        self.summary.resource_version = version
        number = parse_resource_version(version)
        if number is not None:
            self.metrics.resource_version.set(number)

    async def _dead_letter(self, original: bytes, reason: str, stage: str, source: str) -> None:
        await self.publisher.dead_letter(original, reason, stage, source)
        self.summary.dead_lettered += 1
        self.metrics.dead_lettered.labels(stage).inc()

    async def _apply(self, outcome: Outcome, source: str, pod: str) -> None:
        if outcome.problems:
            log.warning(
                "pod status problems",
                source=source,
                pod=pod,
                problems=[f"{p.code.value}: {p.message}" for p in outcome.problems],
            )
        for problem in outcome.problems:
            self._problem(problem.code.value)
        for event in outcome.events:
            await self.publisher.publish(event)
            self.summary.events_published[event.type] += 1
            self.metrics.events_published.labels(event.type).inc()
        for letter in outcome.dead_letters:
            await self._dead_letter(letter.original, letter.reason, letter.stage, letter.source)
        self.summary.pods_tracked = len(self.processor.tracker)
        self.metrics.pods_tracked.set(self.summary.pods_tracked)

    async def handle(self, item: SourceItem, source: str) -> None:
        """Process one item; ``source`` (e.g. ``file:path:line``) goes to logs and dead letters.
        Raises only what the publisher raises."""
        self.summary.items += 1
        if isinstance(item, PodChange):
            metadata = item.pod.get("metadata")
            metadata = metadata if isinstance(metadata, dict) else {}
            pod = f"{metadata.get('namespace')}/{metadata.get('name')}"
            outcome = self.processor.pod_event(
                item.kind, item.pod, item.raw, source, self.clock.now()
            )
            await self._apply(outcome, source, pod)
            self._resume_point(item.resource_version)
        elif isinstance(item, Relisted):
            outcome = self.processor.relisted(
                item.pods, item.resource_version, source, self.clock.now()
            )
            await self._apply(outcome, source, f"{len(item.pods)} listed")
            self._resume_point(item.resource_version)
        elif isinstance(item, Bookmark):
            self._resume_point(item.resource_version)
            self.summary.ignored["bookmark"] += 1
        elif isinstance(item, ClockSet):
            self.clock.set(item.now)
        elif isinstance(item, Directive):
            self.summary.ignored[f"directive {item.name}"] += 1
            log.debug("harness directive skipped", source=source, directive=item.name)
        elif isinstance(item, WatchError):
            self._problem("watch-error")
            log.warning(
                "watch ERROR event",
                source=source,
                code=item.code,
                reason=item.reason,
                message=item.message,
                expired=item.expired,
            )
        elif isinstance(item, OtherKind):
            # Nodes, ResourceClaims, ...: handled by later parts of the watcher, not here.
            self.summary.ignored[f"kind {item.kind}"] += 1
            log.debug("non-Pod object ignored", source=source, kind=item.kind)
        elif isinstance(item, UnknownType):
            self._problem("unknown-event-type")
            log.warning("unknown watch event type ignored", source=source, type=item.event_type)
        elif isinstance(item, BrokenLine):
            self._problem("broken-line")
            log.warning("unreadable watch line", source=source, reason=item.reason)
            await self._dead_letter(item.raw, item.reason, STAGE_WATCH_LINE, source)


async def _wait_for_topics(settings: Settings) -> None:
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
            await ensure_topics(settings)


async def _run_file(session: WatchSession, path: Path) -> None:
    for line, item in read_watch_file(path):
        await session.handle(item, source_of(path, line))


async def _run_live(session: WatchSession, settings: Settings) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        async with kubernetes_pod_api(settings) as api:
            metrics = session.metrics
            source = KubeSource(
                api,
                on_restart=lambda reason: metrics.watch_restarts.labels(reason).inc(),
            )
            watching = asyncio.create_task(source.run(session.handle, stop))
            stopping = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({watching, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if watching in done:
                stopping.cancel()
                watching.result()  # raises what ended the watch (e.g. ApiRejected)
            else:
                log.info("stopping", resume_from=source.resource_version)
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def run_watch(settings: Settings, from_file: Path | None = None) -> WatchSummary:
    """Run the watcher and return its :class:`WatchSummary`.

    ``from_file``: a recorded JSONL watch stream, read to its end (``_CLOCK`` directives set
    ``observedAt``; without one the wall clock is used). ``None``: the live cluster (kubeconfig
    from ``settings``) until SIGTERM/SIGINT. Waits for Kafka at start; raises
    ``kube_source.ApiRejected`` if the API refuses the watcher (RBAC), ``OSError`` if the file
    cannot be read.
    """
    metrics = WatcherMetrics()
    try:
        metrics.serve(settings.watcher_metrics_port)
    except OSError as exc:
        # Metrics are an aid, not a reason to stop watching (e.g. port taken by another run).
        log.warning(
            "metrics server not started", port=settings.watcher_metrics_port, error=str(exc)
        )
    summary = WatchSummary(source=f"file:{from_file}" if from_file else "kubernetes")
    await _wait_for_topics(settings)
    publisher = EventPublisher(settings, on_retry=metrics.publish_retries.inc)
    await publisher.start()
    session = WatchSession(publisher, metrics, summary)
    try:
        if from_file is not None:
            await _run_file(session, from_file)
        else:
            await _run_live(session, settings)
    finally:
        await publisher.close(None if from_file is not None else SHUTDOWN_FLUSH_SECONDS)
    log.info("watcher finished", summary=summary.line())
    return summary
