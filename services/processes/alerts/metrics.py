"""Prometheus metrics of the alert sender (each :class:`AlertMetrics` owns its registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class AlertMetrics:
    """Counters and gauges of ``devicestate alerts`` (names without prometheus' ``_total``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.decisions = Counter(
            "devicestate_alerts_decisions",
            "Decisions read from the decisions topic, by whether they start or end an alert "
            "(firing, resolved, none) or could not be decoded (undecodable).",
            ["alert"],
            registry=self.registry,
        )
        self.sent = Counter(
            "devicestate_alerts_sent",
            "Alerts Alertmanager accepted, by status (firing, resolved) and path (stream: from a "
            "decision; resend: a still-firing alert posted again).",
            ["status", "path"],
            registry=self.registry,
        )
        self.failed = Counter(
            "devicestate_alerts_failed",
            "Alerts not delivered, by reason: rejected (4xx, skipped for good) or unavailable "
            "(retries exhausted; the decisions are read again).",
            ["reason"],
            registry=self.registry,
        )
        self.retried = Counter(
            "devicestate_alerts_retried",
            "POSTs to Alertmanager retried after a connection error, timeout, 429 or 5xx.",
            registry=self.registry,
        )
        self.firing = Gauge(
            "devicestate_alerts_firing",
            "Incidents whose alert is firing (as folded from the decisions topic).",
            registry=self.registry,
        )

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on ``port`` (all interfaces) from a daemon thread; 0 means off."""
        if port:
            start_http_server(port, registry=self.registry)
