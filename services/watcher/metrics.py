"""Prometheus metrics of the watcher (prometheus-client), served on
``settings.watcher_metrics_port`` by :meth:`WatcherMetrics.serve`.

Each :class:`WatcherMetrics` owns its registry, so tests and several watchers in one process
never collide on metric names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class WatcherMetrics:
    """The watcher's counters and gauges (names below, without prometheus' ``_total``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.events_published = Counter(
            "devicestate_watcher_events_published",
            "Events published to the event topic, by event type.",
            ["type"],
            registry=self.registry,
        )
        self.problems = Counter(
            "devicestate_watcher_problems",
            "Entries skipped or flagged while reading Pods and watch lines, by problem code.",
            ["code"],
            registry=self.registry,
        )
        self.dead_lettered = Counter(
            "devicestate_watcher_dead_lettered",
            "Records sent to the dead-letter topic, by stage (watch-line, pod-status).",
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
            "timeout).",
            ["reason"],
            registry=self.registry,
        )
        self.resource_version = Gauge(
            "devicestate_watcher_resource_version",
            "Last Pod resourceVersion the watch would resume from (as a float: approximate "
            "above 2**53, for dashboards only).",
            registry=self.registry,
        )
        self.pods_tracked = Gauge(
            "devicestate_watcher_pods_tracked",
            "Scheduled Pods the watcher remembers (one compact entry each).",
            registry=self.registry,
        )

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on ``port`` (all interfaces) from a daemon thread; 0 means off."""
        if port:
            start_http_server(port, registry=self.registry)
