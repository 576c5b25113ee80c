"""Prometheus metrics of ``devicestate enforce`` (each :class:`EnforcementMetrics` owns its registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from services.processes.enforcement.desired import SkipReason


class EnforcementMetrics:
    """Counters and gauges of the DeviceTaintRule reconciler (counter names without ``_total``:
    prometheus-client adds it)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.enabled = Gauge(
            "devicestate_enforcement_enabled",
            "1 when DeviceTaintRule enforcement is on (DEVICESTATE_ENFORCE_DEVICE_TAINT_RULES).",
            registry=self.registry,
        )
        self.dry_run = Gauge(
            "devicestate_enforcement_dry_run",
            "1 when every write is a dry run (dryRun=All): nothing changes in the cluster.",
            registry=self.registry,
        )
        self.rules_desired = Gauge(
            "devicestate_enforcement_rules_desired",
            "DeviceTaintRules the active and recovering quarantines call for (last reconcile).",
            registry=self.registry,
        )
        self.rules_present = Gauge(
            "devicestate_enforcement_rules_present",
            "DeviceTaintRules labelled as devicestate's found in the cluster (last reconcile, "
            "before its changes).",
            registry=self.registry,
        )
        self.skipped = Gauge(
            "devicestate_enforcement_quarantines_skipped",
            "Enforced quarantines that get no DeviceTaintRule, by reason (device-plugin, "
            "unresolved, invalid-device-id, duplicate-device), at the last reconcile.",
            ["reason"],
            registry=self.registry,
        )
        for reason in SkipReason:
            self.skipped.labels(reason.value).set(0)
        self.actions = Counter(
            "devicestate_enforcement_actions",
            "DeviceTaintRule writes accepted by the API server, by action (create, update, "
            "delete) and dry_run (true: dryRun=All, nothing changed).",
            ["action", "dry_run"],
            registry=self.registry,
        )
        self.errors = Counter(
            "devicestate_enforcement_errors",
            "Failures, by operation: read-quarantines, list, create, update, delete.",
            ["operation"],
            registry=self.registry,
        )
        self.reconciles = Counter(
            "devicestate_enforcement_reconciles",
            "Reconcile passes, by result: ok, partial (some writes failed), failed (nothing "
            "could be read).",
            ["result"],
            registry=self.registry,
        )
        self.triggers = Counter(
            "devicestate_enforcement_triggers",
            "Decisions (DeviceQuarantined, QuarantineReleased) that started an early reconcile.",
            ["kind"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "devicestate_enforcement_reconcile_seconds",
            "Duration of one reconcile pass.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=self.registry,
        )
        self.last_success = Gauge(
            "devicestate_enforcement_last_success_timestamp_seconds",
            "Unix time of the last reconcile pass that completed without an error.",
            registry=self.registry,
        )

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on ``port`` (all interfaces) from a daemon thread; 0 means off."""
        if port:
            start_http_server(port, registry=self.registry)
