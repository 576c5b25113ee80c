"""Prometheus metrics of the watcher (prometheus-client), served on
``settings.watcher_metrics_port`` by :meth:`WatcherMetrics.serve`.

Each :class:`WatcherMetrics` owns its registry, so tests and several watchers in one process
never collide on metric names.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.runtime.metrics_http import MetricsHttpServer

CLAIM_STAGE_BUCKETS: Final = (
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600,
)  # fmt: skip
"""Seconds: scheduling and start-up latencies, from sub-second to an hour (image pulls, waits for
free devices); timestamps have second precision, so 0 lands in the first bucket."""


class WatcherMetrics:
    """The watcher's counters and gauges (names below, without prometheus' ``_total``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._http = MetricsHttpServer(self.registry)
        self.events_published = Counter(
            "devicestate_watcher_events_published",
            "Events published to the event topic, by event type.",
            ["type"],
            registry=self.registry,
        )
        self.problems = Counter(
            "devicestate_watcher_problems",
            "Entries skipped or flagged while reading Pods, Leases, Nodes and watch lines, by "
            "problem code.",
            ["code"],
            registry=self.registry,
        )
        self.dead_lettered = Counter(
            "devicestate_watcher_dead_lettered",
            "Records sent to the dead-letter topic, by stage (watch-line, pod-status, node-lease, "
            "node-status, dra-inventory).",
            ["stage"],
            registry=self.registry,
        )
        self.publish_retries = Counter(
            "devicestate_watcher_publish_retries",
            "Kafka sends retried after a retriable failure (broker unavailable, timeout).",
            registry=self.registry,
        )
        self.watch_restarts = Counter(
            "devicestate_watcher_watch_restarts",
            "WATCH requests ended and restarted, by reason (expired = 410 Gone, relist, error, "
            "timeout) and resource (pods, leases, nodes, resourceslices, resourceclaims, "
            "deviceclasses).",
            ["reason", "resource"],
            registry=self.registry,
        )
        self.resource_version = Gauge(
            "devicestate_watcher_resource_version",
            "Last Pod resourceVersion the watch would resume from (as a float: approximate "
            "above 2**53, for dashboards only).",
            registry=self.registry,
        )
        self.dra_failures = Counter(
            "devicestate_watcher_dra_failures_published",
            "DRAFailureObserved records published, by failure class and Event or condition "
            "reason (this process only, from its start: the count of record is the API's "
            "devicestate_dra_failures_total).",
            ["class", "reason"],
            registry=self.registry,
        )
        self.heartbeats_published = Counter(
            "devicestate_watcher_heartbeats_published",
            "NodeHeartbeat events published (node Lease renewals kept by the coarsening).",
            registry=self.registry,
        )
        self.heartbeats_coarsened = Counter(
            "devicestate_watcher_heartbeats_coarsened",
            "Node Lease renewals not published: one was published less than "
            "heartbeat_interval_seconds before (event time).",
            registry=self.registry,
        )
        self.node_resource_changes = Counter(
            "devicestate_watcher_node_resource_changes",
            "NodeResourcesChanged events published (a Node's extended-resource capacity or "
            "allocatable changed, or the Node was first seen).",
            registry=self.registry,
        )
        self.node_label_changes = Counter(
            "devicestate_watcher_node_label_changes",
            "NodeLabelsChanged records published (a Node's labels changed, the Node was first "
            "seen, a LIST re-stated them, or the Node is gone: a removal).",
            registry=self.registry,
        )
        self.node_labels_dropped = Counter(
            "devicestate_watcher_node_labels_dropped",
            "Node labels left out of a NodeLabelsChanged, by reason (invalid-key, "
            "invalid-value, too-many).",
            ["reason"],
            registry=self.registry,
        )
        self.ticks_sent = Counter(
            "devicestate_watcher_ticks_sent",
            "WatcherTick records sent (one per partition of the event topic each tick).",
            registry=self.registry,
        )
        self.nodes_tracked = Gauge(
            "devicestate_watcher_nodes_tracked",
            "Nodes the watcher remembers a heartbeat or resource counts of.",
            registry=self.registry,
        )
        self.inventory_published = Counter(
            "devicestate_watcher_inventory_published",
            "InventoryObserved events published, by DRA object kind (ResourceSlice, ResourceClaim, "
            "DeviceClass) and change (observed: first sighting or a changed compact form; "
            "deleted).",
            ["kind", "change"],
            registry=self.registry,
        )
        self.inventory_tracked = Gauge(
            "devicestate_watcher_inventory_tracked",
            "DRA objects the watcher remembers the last published form of, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.dra_not_served = Gauge(
            "devicestate_watcher_dra_not_served",
            "1 for each DRA resource (resourceslices, resourceclaims, deviceclasses) whose watch "
            "stopped because the API server does not serve resource.k8s.io/v1 (404).",
            ["resource"],
            registry=self.registry,
        )
        self.pods_tracked = Gauge(
            "devicestate_watcher_pods_tracked",
            "Scheduled Pods the watcher remembers (one compact entry each).",
            registry=self.registry,
        )
        self.pod_tombstones = Gauge(
            "devicestate_watcher_pod_tombstones",
            "Released terminal Pods the watcher remembers only as a tombstone (UID, "
            "resourceVersion), at most 100,000 (services/domain/watch/pod_tombstones.py).",
            registry=self.registry,
        )
        self.claim_stage_seconds = Histogram(
            "devicestate_claim_stage_seconds",
            "Claim lifecycle stage latencies of Pods first seen Ready by a watch event (Pods "
            "already Ready when listed are not counted): claim_allocated (claim created to "
            "allocated), pod_bound (allocated, or Pod created for device plugins, to PodScheduled), "
            "pod_ready (PodScheduled to Ready); by device_class (DeviceClass, or extended resource "
            "name for device plugins) and path (dra, device-plugin).",
            ["stage", "device_class", "path"],
            buckets=CLAIM_STAGE_BUCKETS,
            registry=self.registry,
        )
        self.claim_stage_claims_unknown = Counter(
            "devicestate_claim_stage_claims_unknown",
            "ResourceClaims of Pods first seen Ready that the watcher did not know (yet, or DRA "
            "not watched): their claim stages were not observed, pod_ready was, with "
            "device_class=unknown.",
            registry=self.registry,
        )

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` on ``port`` (all interfaces) from a daemon thread; 0 means off.
        Raises ``OSError`` if the port is taken."""
        if port and not self._http.running:
            self._http.start(port, addr)

    def close(self) -> None:
        """Stop the HTTP server :meth:`serve` started, if any."""
        self._http.close()
