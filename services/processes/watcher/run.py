"""Wiring of the watcher: a source (recorded file or Kubernetes API) -> :class:`WatchProcessor`
(Pods), :class:`NodeProcessor` (node Leases, Nodes) and :class:`InventoryProcessor` (DRA
ResourceSlices, ResourceClaims, DeviceClasses) -> Kafka
(:class:`~services.adapters.kafka.producer.EventPublisher`), with metrics and a summary.

Time comes from the log (issue 3): besides device events the watcher publishes, on the same topic,
coarsened ``NodeHeartbeat``s (node Leases), ``NodeResourcesChanged`` (Nodes' extended resources)
and ``WatcherTick``s, one to every partition, so that every partition's event time moves on even
when nothing happens there. The DRA inventory goes on the same topic as ``InventoryObserved``
(issue 4), keyed by node where it has one, so a node's inventory shares its partition.

File mode reads the file to its end, flushes and returns; Node, Lease and DRA objects in the
stream are read like the live ones, and each ``_CLOCK`` directive sets the clock and sends one tick
to every partition with its time. Live mode runs the LIST/WATCH loops (Pods; Leases unless
``watch_leases`` is off; Nodes unless ``watch_nodes`` is off; DeviceClasses, ResourceSlices and
ResourceClaims unless ``watch_dra`` is off -- each of those ends by itself, with a warning, on a
cluster that does not serve resource.k8s.io/v1) and a ticker (every ``tick_interval_seconds`` of
wall clock) until SIGTERM or SIGINT, or until one of them fails; then it stops all of them and
flushes the producer (for at most :data:`SHUTDOWN_FLUSH_SECONDS`; what is left unacknowledged is
re-emitted by the next start's LISTs).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, Protocol

import structlog
from tenacity import AsyncRetrying, retry_if_exception, stop_never, wait_random_exponential

from services.adapters.kafka.producer import EventPublisher, is_retriable
from services.adapters.kafka.topics import ensure_topics
from services.adapters.kube.client import ApiClient, kubernetes_api_client
from services.adapters.kube.watch_apis import (
    KubernetesObjectApi,
    KubernetesPodApi,
    device_class_api,
    lease_api,
    node_api,
    resource_claim_api,
    resource_slice_api,
)
from services.domain.events import parse_resource_version
from services.domain.inventory.events import InventoryKind, InventoryObserved
from services.domain.inventory.objects import ResourceClaimInfo
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged
from services.domain.records import TopicRecord
from services.domain.watch.inventory_tracker import INVENTORY_KINDS
from services.domain.watch.lifecycle_tracker import LifecycleTracker
from services.domain.watch.node_tracker import NodeTracker
from services.domain.watch.pod_tracker import WatchKind
from services.processes.watcher.file_source import HarnessClock, read_watch_file, source_of
from services.processes.watcher.kube_source import (
    KubeSource,
    ListWatchSource,
    ObjectsListed,
    Relisted,
    SourceItem,
)
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.node_source import PLURALS, ObjectSource
from services.processes.watcher.processor import (
    STAGE_WATCH_LINE,
    InventoryActions,
    InventoryProcessor,
    NodeActions,
    NodeProcessor,
    Outcome,
    WatchProcessor,
)
from services.processes.watcher.watch_lines import (
    Bookmark,
    BrokenLine,
    ClockSet,
    Directive,
    ObjectChange,
    OtherKind,
    PodChange,
    UnknownType,
    WatchError,
)
from services.runtime.config import Settings

log = structlog.get_logger(__name__)

SHUTDOWN_FLUSH_SECONDS: Final = 20.0
"""Longest wait (seconds) for Kafka acknowledgements when live mode stops."""


DEFAULT_HEARTBEAT_INTERVAL: Final = timedelta(seconds=60)
"""Heartbeat coarsening of a :class:`WatchSession` built without a :class:`NodeProcessor`."""

POD_STREAM: Final = "Pod"
"""``stream`` of the Pod source (and of a recorded file, whatever kinds it mixes)."""

DRA_APIS: Final[tuple[Callable[[ApiClient, Settings], KubernetesObjectApi], ...]] = (
    device_class_api,
    resource_slice_api,
    resource_claim_api,
)
"""The three DRA watches, in the order the watcher starts them."""


class Publisher(Protocol):
    """Where a :class:`WatchSession` sends records, ticks and dead letters (an
    ``EventPublisher``)."""

    async def publish(self, record: TopicRecord) -> None: ...

    async def publish_tick(self, observed_at: datetime) -> int: ...

    async def dead_letter(self, original: bytes, reason: str, stage: str, source: str) -> None: ...


@dataclass
class WatchSummary:
    """Counts of one watcher run: items read, events published by type (device, node and
    inventory events; ticks are counted apart in ``ticks_sent``), problems by code (Pod problems
    from ``read_pod``, Lease/Node problems from ``node_tracker``, plus ``broken-line``,
    ``unknown-event-type``, ``watch-error``, ``dra-inventory``), dead-lettered records, ignored
    items by kind, the last Pod resourceVersion (``resource_version``) and the Lease, Node and DRA
    ones (``object_versions``), the DRA objects tracked by kind (``inventory_tracked``) and the
    DRA resources the API server does not serve (``not_served``)."""

    source: str
    items: int = 0
    events_published: Counter[str] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    dead_lettered: int = 0
    ignored: Counter[str] = field(default_factory=Counter)
    resource_version: str | None = None
    pods_tracked: int = 0
    ticks_sent: int = 0
    heartbeats_coarsened: int = 0
    nodes_tracked: int = 0
    object_versions: dict[str, str] = field(default_factory=dict)
    inventory_tracked: dict[str, int] = field(default_factory=dict)
    not_served: list[str] = field(default_factory=list)

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
            f"{self.pods_tracked} pods tracked, last resourceVersion {self.resource_version}, "
            f"{self.ticks_sent} ticks sent, {self.heartbeats_coarsened} heartbeats coarsened, "
            f"{self.nodes_tracked} nodes tracked, "
            f"{sum(self.inventory_tracked.values())} DRA objects tracked"
        )

    def __str__(self) -> str:
        return self.line()

    def __rich__(self) -> str:
        return self.line()


class WatchSession:
    """Handles each item of a source in order: Pods through the processor, Leases and Nodes
    through the node processor, ResourceSlices, ResourceClaims and DeviceClasses through the
    inventory processor, results to the publisher, and everything counted in the summary and the
    metrics. A ``_CLOCK`` directive sets the clock and sends a tick to every partition. Pods also
    go through the :class:`LifecycleTracker`: a Pod first seen Ready by a watch event (a line of a
    recorded stream is one) has its claim lifecycle stages observed, with its ResourceClaims as
    the inventory tracker last saw them; a LIST only remembers the Pods already Ready."""

    def __init__(
        self,
        publisher: Publisher,
        metrics: WatcherMetrics,
        summary: WatchSummary,
        clock: HarnessClock | None = None,
        processor: WatchProcessor | None = None,
        nodes: NodeProcessor | None = None,
        inventory: InventoryProcessor | None = None,
        lifecycle: LifecycleTracker | None = None,
    ) -> None:
        self.publisher = publisher
        self.metrics = metrics
        self.summary = summary
        self.clock = clock or HarnessClock()
        self.processor = processor or WatchProcessor()
        self.nodes = nodes or NodeProcessor(NodeTracker(DEFAULT_HEARTBEAT_INTERVAL))
        self.inventory = inventory or InventoryProcessor()
        self.lifecycle = lifecycle if lifecycle is not None else LifecycleTracker()

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

    def _object_resume_point(self, stream: str, version: str | None) -> None:
        if version is not None:
            self.summary.object_versions[stream] = version

    async def tick(self, observed_at: datetime) -> None:
        """Send a ``WatcherTick`` at ``observed_at`` to every partition."""
        sent = await self.publisher.publish_tick(observed_at)
        self.summary.ticks_sent += sent
        self.metrics.ticks_sent.inc(sent)

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

    async def _apply_nodes(self, actions: NodeActions, source: str, what: str) -> None:
        if actions.problems:
            log.warning(
                "node object problems",
                source=source,
                object=what,
                problems=[f"{p.code.value}: {p.message}" for p in actions.problems],
            )
        for problem in actions.problems:
            self._problem(problem.code.value)
        for event in actions.events:
            await self.publisher.publish(event)
            self.summary.events_published[event.type] += 1
            self.metrics.events_published.labels(event.type).inc()
            if isinstance(event, NodeHeartbeat):
                self.metrics.heartbeats_published.inc()
            elif isinstance(event, NodeResourcesChanged):
                self.metrics.node_resource_changes.inc()
                missing = event.missing()
                if missing:
                    log.info("node allocatable below capacity", node=event.node, missing=missing)
        if actions.coarsened:
            self.summary.heartbeats_coarsened += actions.coarsened
            self.metrics.heartbeats_coarsened.inc(actions.coarsened)
        for reason in actions.ignored:
            self.summary.ignored[f"{what.split(' ')[0]} {reason}"] += 1
        for letter in actions.dead_letters:
            await self._dead_letter(letter.original, letter.reason, letter.stage, letter.source)
        self.summary.nodes_tracked = self.nodes.tracker.nodes
        self.metrics.nodes_tracked.set(self.summary.nodes_tracked)

    async def _apply_inventory(self, actions: InventoryActions, what: str) -> None:
        for event in actions.events:
            await self._publish_inventory(event)
        for reason in actions.ignored:
            self.summary.ignored[f"{what} {reason}"] += 1
        for letter in actions.dead_letters:
            log.warning("unreadable DRA object", source=letter.source, reason=letter.reason)
            self._problem(letter.stage)
            await self._dead_letter(letter.original, letter.reason, letter.stage, letter.source)
        self.summary.inventory_tracked = self.inventory.tracked()
        for kind, count in self.summary.inventory_tracked.items():
            self.metrics.inventory_tracked.labels(kind).set(count)

    async def _publish_inventory(self, event: InventoryObserved) -> None:
        await self.publisher.publish(event)
        self.summary.events_published[event.type] += 1
        self.metrics.events_published.labels(event.type).inc()
        change = "deleted" if event.deleted else "observed"
        self.metrics.inventory_published.labels(event.kind.value, change).inc()

    def _claim(self, namespace: str, name: str) -> ResourceClaimInfo | None:
        form = self.inventory.tracker.form(InventoryKind.RESOURCE_CLAIM, f"{namespace}/{name}")
        return form if isinstance(form, ResourceClaimInfo) else None

    def _observe_lifecycle(self, kind: WatchKind, pod: dict[str, Any], name: str) -> None:
        """Claim lifecycle stages of a Pod first seen Ready (see :class:`LifecycleTracker`)."""
        report = self.lifecycle.watched(kind, pod, self._claim)
        for latency in report.latencies:
            self.metrics.claim_stage_seconds.labels(
                latency.stage.value, latency.device_class, latency.path.value
            ).observe(latency.seconds)
        if report.unknown_claims:
            self.metrics.claim_stage_claims_unknown.inc(len(report.unknown_claims))
            log.info(
                "claim of a Ready pod not known: claim stages not observed",
                pod=name,
                claims=[claim.label for claim in report.unknown_claims],
            )

    def not_served(self, resource: str) -> None:
        """A DRA loop ended because the API server does not serve ``resource``."""
        if resource not in self.summary.not_served:
            self.summary.not_served.append(resource)
        self.metrics.dra_not_served.labels(resource).set(1)

    async def handle(self, item: SourceItem, source: str, *, stream: str = POD_STREAM) -> None:
        """Process one item; ``source`` (e.g. ``file:path:line``) goes to logs and dead letters;
        ``stream`` names the source's resource (``Pod``, or the object kind of the Lease, Node and
        DRA live watches): only the Pod stream's resourceVersions are the summary's resume point.
        Raises only what the publisher raises."""
        self.summary.items += 1
        if isinstance(item, ObjectChange) and item.object_kind in INVENTORY_KINDS:
            inventory = self.inventory.object_event(
                item.kind, item.object_kind, item.obj, item.raw, source, self.clock.now()
            )
            await self._apply_inventory(inventory, item.object_kind)
            if stream != POD_STREAM:
                self._object_resume_point(stream, item.resource_version)
        elif isinstance(item, ObjectsListed) and item.object_kind in INVENTORY_KINDS:
            inventory = self.inventory.listed(
                item.object_kind, item.items, source, self.clock.now()
            )
            await self._apply_inventory(inventory, item.object_kind)
            self._object_resume_point(item.object_kind, item.resource_version)
        elif isinstance(item, ObjectChange):
            actions = self.nodes.object_event(
                item.kind, item.object_kind, item.obj, item.raw, source, self.clock.now()
            )
            metadata = item.obj.get("metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
            await self._apply_nodes(actions, source, f"{item.object_kind} {name}")
            if stream != POD_STREAM:
                self._object_resume_point(stream, item.resource_version)
        elif isinstance(item, ObjectsListed):
            actions = self.nodes.listed(item.object_kind, item.items, source, self.clock.now())
            await self._apply_nodes(actions, source, f"{item.object_kind} {len(item.items)} listed")
            self._object_resume_point(item.object_kind, item.resource_version)
        elif isinstance(item, PodChange):
            metadata = item.pod.get("metadata")
            metadata = metadata if isinstance(metadata, dict) else {}
            pod = f"{metadata.get('namespace')}/{metadata.get('name')}"
            outcome = self.processor.pod_event(
                item.kind, item.pod, item.raw, source, self.clock.now()
            )
            await self._apply(outcome, source, pod)
            self._observe_lifecycle(item.kind, item.pod, pod)
            self._resume_point(item.resource_version)
        elif isinstance(item, Relisted):
            outcome = self.processor.relisted(
                item.pods, item.resource_version, source, self.clock.now()
            )
            await self._apply(outcome, source, f"{len(item.pods)} listed")
            self.lifecycle.listed(item.pods)
            self._resume_point(item.resource_version)
        elif isinstance(item, Bookmark):
            if stream == POD_STREAM:
                self._resume_point(item.resource_version)
            else:
                self._object_resume_point(stream, item.resource_version)
            self.summary.ignored["bookmark"] += 1
        elif isinstance(item, ClockSet):
            self.clock.set(item.now)
            await self.tick(item.now)
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
            # Kinds not read (Nodes/Leases/DRA objects whose watch is off, anything else).
            self.summary.ignored[f"kind {item.kind}"] += 1
            log.debug("object of another kind ignored", source=source, kind=item.kind)
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


def _file_kinds(settings: Settings) -> frozenset[str]:
    kinds = set()
    if settings.watch_leases:
        kinds.add("Lease")
    if settings.watch_nodes:
        kinds.add("Node")
    if settings.watch_dra:
        kinds |= INVENTORY_KINDS
    return frozenset(kinds)


async def run_file(session: WatchSession, path: Path, settings: Settings) -> None:
    """Hand every line of the recorded stream at ``path`` to ``session``, in order (Leases,
    Nodes and DRA objects read as such when ``settings`` watches them)."""
    for line, item in read_watch_file(path, kinds=_file_kinds(settings)):
        await session.handle(item, source_of(path, line))


async def tick_every(session: WatchSession, interval_seconds: float, stop: asyncio.Event) -> None:
    """Send a tick (at ``session.clock.now()``) at once, then every ``interval_seconds`` of the
    event loop's clock, until ``stop`` is set. A late tick does not make the next ones come in a
    burst: the schedule restarts from it."""
    loop = asyncio.get_running_loop()
    due = loop.time()
    while not stop.is_set():
        await session.tick(session.clock.now())
        due += interval_seconds
        if due < loop.time():
            due = loop.time()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), due - loop.time())


def _live_tasks(
    session: WatchSession, settings: Settings, api_client: ApiClient, stop: asyncio.Event
) -> dict[str, Coroutine[Any, Any, None]]:
    metrics = session.metrics

    def restarts(resource: str) -> Any:
        return lambda reason: metrics.watch_restarts.labels(reason, resource).inc()

    pods = KubeSource(
        KubernetesPodApi(api_client, settings),
        on_restart=restarts("pods"),
    )
    sources: list[tuple[ListWatchSource, str]] = [(pods, POD_STREAM)]
    if settings.watch_leases:
        sources.append(
            (ObjectSource(lease_api(api_client, settings), on_restart=restarts("leases")), "Lease")
        )
    if settings.watch_nodes:
        sources.append(
            (ObjectSource(node_api(api_client, settings), on_restart=restarts("nodes")), "Node")
        )
    if settings.watch_dra:
        for make_api in DRA_APIS:
            api = make_api(api_client, settings)
            source = ObjectSource(
                api,
                on_restart=restarts(PLURALS[api.object_kind]),
                optional=True,
                on_not_served=functools.partial(session.not_served, PLURALS[api.object_kind]),
            )
            sources.append((source, api.object_kind))
    tasks: dict[str, Coroutine[Any, Any, None]] = {
        source.resource: source.run(functools.partial(session.handle, stream=stream), stop)
        for source, stream in sources
    }
    tasks["ticker"] = tick_every(session, settings.tick_interval_seconds, stop)
    return tasks


async def _until(stop: asyncio.Event) -> None:
    await stop.wait()


async def _run_live(session: WatchSession, settings: Settings) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        async with kubernetes_api_client(settings) as api_client:
            tasks = {
                asyncio.create_task(coroutine, name=f"watcher-{name}")
                for name, coroutine in _live_tasks(session, settings, api_client, stop).items()
            }
            stopping = asyncio.create_task(_until(stop))
            failed: asyncio.Task[None] | None = None
            try:
                running = set(tasks)
                while running and failed is None and not stop.is_set():
                    done, running = await asyncio.wait(
                        running | {stopping}, return_when=asyncio.FIRST_COMPLETED
                    )
                    running.discard(stopping)
                    failed = next(
                        (t for t in done if t is not stopping and t.exception() is not None),
                        None,
                    )
                if failed is None:
                    log.info(
                        "stopping",
                        resume_from=session.summary.resource_version,
                        object_versions=session.summary.object_versions,
                    )
            finally:
                # Every loop stops with the watcher, whatever ended it (signal, a failed loop,
                # the caller cancelling).
                for task in (*tasks, stopping):
                    task.cancel()
                await asyncio.gather(*tasks, stopping, return_exceptions=True)
            error = failed.exception() if failed is not None else None
            if error is not None:
                # What ended that loop (e.g. ApiRejected) ends the watcher.
                raise error
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def run_watch(settings: Settings, from_file: Path | None = None) -> WatchSummary:
    """Run the watcher and return its :class:`WatchSummary`.

    ``from_file``: a recorded JSONL watch stream, read to its end (``_CLOCK`` directives set
    ``observedAt`` and send ticks; without one the wall clock is used). ``None``: the live cluster
    (kubeconfig from ``settings``) until SIGTERM/SIGINT. Waits for Kafka at start; raises
    ``services.adapters.kube.errors.ApiRejected`` if the API refuses the watcher (RBAC), ``OSError`` if the file
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
    nodes = NodeProcessor(
        NodeTracker(
            timedelta(seconds=settings.heartbeat_interval_seconds), settings.lease_namespace
        )
    )
    session = WatchSession(publisher, metrics, summary, nodes=nodes)
    try:
        if from_file is not None:
            await run_file(session, from_file, settings)
        else:
            await _run_live(session, settings)
    finally:
        await publisher.close(None if from_file is not None else SHUTDOWN_FLUSH_SECONDS)
    log.info("watcher finished", summary=summary.line())
    return summary
