"""One watcher session: every item of a source (a recorded file or the LIST/WATCH loops), in
order, through the processors, and what they produced to the publisher, counted in the
:class:`~services.processes.watcher.summary.WatchSummary` and the metrics.

Pods go through :class:`WatchProcessor`, node Leases and Nodes through :class:`NodeProcessor`,
DRA ResourceSlices, ResourceClaims and DeviceClasses through :class:`InventoryProcessor`, core/v1
Events and the Pods' ``PodScheduled`` conditions through the
:class:`~services.domain.watch.failure_tracker.FailureTracker` (driver and claim failures); a
``_CLOCK`` directive of a recorded stream sets the clock and sends a ``WatcherTick`` to every
partition (time comes from the log, issue 3).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final, Protocol

import structlog

from services.domain.codec import parse_resource_version
from services.domain.inventory.events import InventoryKind, InventoryObserved
from services.domain.inventory.objects import ResourceClaimInfo
from services.domain.lifecycle_events import lifecycle_record
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged
from services.domain.node_labels import NodeLabelsChanged
from services.domain.observations import DeviceHealthObservations
from services.domain.records import TopicRecord
from services.domain.watch.failure_tracker import EVENT_KIND, FailureOutcome, FailureTracker
from services.domain.watch.inventory_tracker import INVENTORY_KINDS
from services.domain.watch.lifecycle_tracker import LifecycleTracker
from services.domain.watch.node_tracker import NodeTracker
from services.domain.watch.pod_tracker import WatchKind
from services.domain.workloads.events import PodWorkloadObserved
from services.processes.watcher.deliveries import WatchDeliveries
from services.processes.watcher.file_source import HarnessClock
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.node_source import PLURALS
from services.processes.watcher.processor import (
    STAGE_WATCH_LINE,
    InventoryActions,
    InventoryProcessor,
    NodeActions,
    NodeProcessor,
    Outcome,
    WatchProcessor,
)
from services.processes.watcher.summary import WatchSummary
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
from services.processes.watcher.watch_loop import ObjectsListed, Relisted, SourceItem
from services.processes.watcher.workloads import WorkloadResolver

log = structlog.get_logger(__name__)

DEFAULT_HEARTBEAT_INTERVAL: Final = timedelta(seconds=60)
"""Heartbeat coarsening of a :class:`WatchSession` built without a :class:`NodeProcessor`."""

POD_STREAM: Final = "Pod"
"""``stream`` of the Pod source (and of a recorded file, whatever kinds it mixes)."""


class Publisher(Protocol):
    """Where a :class:`WatchSession` sends records, ticks and dead letters (an
    ``EventPublisher``)."""

    async def publish(self, record: TopicRecord) -> None: ...

    async def publish_tick(
        self, observed_at: datetime, watch_seen_at: datetime | None = None
    ) -> int: ...

    async def dead_letter(self, original: bytes, reason: str, stage: str, source: str) -> None: ...


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
        failures: FailureTracker | None = None,
    ) -> None:
        self.publisher = publisher
        self.metrics = metrics
        self.summary = summary
        self.clock = clock or HarnessClock()
        self.processor = processor or WatchProcessor()
        self.nodes = nodes or NodeProcessor(NodeTracker(DEFAULT_HEARTBEAT_INTERVAL))
        self.inventory = inventory or InventoryProcessor()
        self.lifecycle = lifecycle if lifecycle is not None else LifecycleTracker()
        self.failures = failures
        """Driver and claim failures of Events and Pod conditions (``None``: not watched)."""
        self.workloads: WorkloadResolver | None = None
        """Set by live mode (issue 13): the Pods holding devices are filed there."""
        self.deliveries = WatchDeliveries((POD_STREAM,))

    def _file_workload(self, kind: WatchKind, pod: dict[str, Any]) -> None:
        """Hand the Pod to the workload resolver (never waits): it holds devices when the pod
        tracker tracks it with devices and not released."""
        if self.workloads is None:
            return
        metadata = pod.get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        tracked = self.processor.tracker.get(uid) if isinstance(uid, str) else None
        holds = tracked is not None and bool(tracked.devices) and not tracked.released
        self.workloads.pod_changed(kind, pod, holds, self.clock.now())

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
        """Send a ``WatcherTick`` at ``observed_at`` to every partition, with when the quietest
        watch last delivered (:mod:`.deliveries`)."""
        seen = self.deliveries.seen_at(observed_at)
        sent = await self.publisher.publish_tick(observed_at, seen)
        self.summary.ticks_sent += sent
        self.metrics.ticks_sent.inc(sent)

    async def _publish(self, event: TopicRecord) -> None:
        # Counted before it is handed over: a publisher that dead-letters it as too large takes
        # the summary's count back (run.py) while publish() is running. A schema-2 record counts
        # as its observations (the counts are of events, whatever the records carrying them).
        kind, count = event.type, 1
        if isinstance(event, DeviceHealthObservations):
            kind, count = "DeviceHealthObserved", len(event.observations)
        self.summary.events_published[kind] += count
        self.metrics.events_published.labels(kind).inc(count)
        await self.publisher.publish(event)

    async def publish_workload(self, record: PodWorkloadObserved) -> None:
        """Publish a Pod's workload record (the resolver's task), counted like the others."""
        await self._publish(record)

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
            await self._publish(event)
        for letter in outcome.dead_letters:
            await self._dead_letter(letter.original, letter.reason, letter.stage, letter.source)
        self.summary.pods_tracked = len(self.processor.tracker)
        self.metrics.pods_tracked.set(self.summary.pods_tracked)
        self.metrics.pod_tombstones.set(len(self.processor.tracker.tombstones))

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
            await self._publish(event)
            if isinstance(event, NodeHeartbeat):
                self.metrics.heartbeats_published.inc()
            elif isinstance(event, NodeLabelsChanged):
                self.metrics.node_label_changes.inc()
            elif isinstance(event, NodeResourcesChanged):
                self.metrics.node_resource_changes.inc()
                missing = event.missing()
                if missing:
                    log.info("node allocatable below capacity", node=event.node, missing=missing)
        for node, dropped in actions.dropped_labels:
            log.warning(
                "node label dropped", node=node, reason=dropped.reason, detail=dropped.detail
            )
            self.metrics.node_labels_dropped.labels(dropped.reason).inc()
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

    async def _apply_failures(self, outcome: FailureOutcome, source: str) -> None:
        for problem in outcome.problems:
            log.warning("unreadable failure Event or Pod", source=source, problem=problem)
            self._problem("failure-unreadable")
        for reason in outcome.ignored:
            self.summary.ignored[f"{EVENT_KIND} {reason}"] += 1
        for record in outcome.records:
            await self._publish(record)
            self.metrics.dra_failures.labels(record.failure_class.value, record.reason).inc()

    async def _publish_inventory(self, event: InventoryObserved) -> None:
        await self._publish(event)
        change = "deleted" if event.deleted else "observed"
        self.metrics.inventory_published.labels(event.kind.value, change).inc()

    def _claim(self, namespace: str, name: str) -> ResourceClaimInfo | None:
        form = self.inventory.tracker.form(InventoryKind.RESOURCE_CLAIM, f"{namespace}/{name}")
        return form if isinstance(form, ResourceClaimInfo) else None

    async def _observe_lifecycle(self, kind: WatchKind, pod: dict[str, Any], name: str) -> None:
        """Claim lifecycle stages of a Pod first seen Ready (see :class:`LifecycleTracker`):
        observed on the histograms and published as a ``PodLifecycleObserved``."""
        report = self.lifecycle.watched(kind, pod, self._claim)
        record = lifecycle_record(pod, report, self.clock.now())
        if record is not None:
            await self._publish(record)
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
        # ``resource`` is the plural (``resourceslices``); the stream is named by its kind.
        self.deliveries.ended(next((k for k, v in PLURALS.items() if v == resource), resource))
        if resource not in self.summary.not_served:
            self.summary.not_served.append(resource)
        self.metrics.dra_not_served.labels(resource).set(1)

    async def handle(self, item: SourceItem, source: str, *, stream: str = POD_STREAM) -> None:
        """Process one item; ``source`` (e.g. ``file:path:line``) goes to logs and dead letters;
        ``stream`` names the source's resource (``Pod``, or the object kind of the Lease, Node and
        DRA live watches): only the Pod stream's resourceVersions are the summary's resume point.
        Raises only what the publisher raises."""
        self.summary.items += 1
        if isinstance(item, ClockSet):
            # A recording's clock lines stand for a live watch (its BOOKMARKs are not recorded).
            self.deliveries.delivered(stream, item.now)
        elif not isinstance(item, Directive):  # what the watch itself delivered
            self.deliveries.delivered(stream, self.clock.now())
        if isinstance(item, ObjectChange | ObjectsListed) and item.object_kind == EVENT_KIND:
            if self.failures is not None:
                now = self.clock.now()
                if isinstance(item, ObjectChange):
                    found = self.failures.event(item.kind, item.obj, now)
                else:
                    found = self.failures.events_listed(item.items, now)
                await self._apply_failures(found, source)
            if isinstance(item, ObjectsListed) or stream != POD_STREAM:
                self._object_resume_point(EVENT_KIND, item.resource_version)
        elif isinstance(item, ObjectChange) and item.object_kind in INVENTORY_KINDS:
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
            if self.failures is not None:
                found = self.failures.pod(item.kind, item.pod, self.clock.now())
                await self._apply_failures(found, source)
            await self._observe_lifecycle(item.kind, item.pod, pod)
            self._file_workload(item.kind, item.pod)
            self._resume_point(item.resource_version)
        elif isinstance(item, Relisted):
            outcome = self.processor.relisted(
                item.pods,
                item.resource_version,
                source,
                self.clock.now(),
                self.nodes.tracker.known_nodes(),
            )
            await self._apply(outcome, source, f"{len(item.pods)} listed")
            if self.failures is not None:
                found = self.failures.pods_listed(item.pods, self.clock.now())
                await self._apply_failures(found, source)
            self.lifecycle.listed(item.pods)
            if self.workloads is not None:
                self.workloads.relisted()
                for listed in item.pods:
                    self._file_workload(WatchKind.ADDED, listed)
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
