"""Prometheus metrics of ``devicestate migrate`` (each :class:`ExecutorMetrics` owns its
registry). The governor's own migration metrics (phases, decisions) are the worker's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class ExecutorMetrics:
    """Counters and gauges of the migration executor (counter names without ``_total``:
    prometheus-client adds it)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.dry_run = Gauge(
            "devicestate_migrate_dry_run",
            "1 when the executor only prints what it would do (no report, dryRun=All writes).",
            registry=self.registry,
        )
        self.passes = Counter(
            "devicestate_migrate_passes",
            "Passes over GET /v1/migrations, by result: ok, partial (a step failed), failed "
            "(the migrations could not be listed).",
            ["result"],
            registry=self.registry,
        )
        self.reports = Counter(
            "devicestate_migrate_reports",
            "Reports posted to POST /v1/migrations/{id}/reports, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.evictions = Counter(
            "devicestate_migrate_evictions",
            "policy/v1 Evictions the API server accepted (dry_run true: dryRun=All).",
            ["dry_run"],
            registry=self.registry,
        )
        self.last_success = Gauge(
            "devicestate_migrate_last_success_timestamp_seconds",
            "Unix time of the last pass without an error.",
            registry=self.registry,
        )

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on ``port`` (all interfaces) from a daemon thread; 0 means off."""
        if port:
            start_http_server(port, registry=self.registry)
