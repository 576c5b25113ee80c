"""Prometheus metrics of the recovery service (each :class:`RecoveryMetrics` owns its registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class RecoveryMetrics:
    """Counters and gauges of ``devicestate recovery`` (names without prometheus' ``_total``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.checks = Counter(
            "devicestate_recovery_checks",
            "Probes and canaries run and reported, by stage and result (passed, failed).",
            ["stage", "result"],
            registry=self.registry,
        )
        self.leases = Counter(
            "devicestate_recovery_leases",
            "Recovery leases of this executor, by outcome: requested, granted, denied, "
            "abandoned (stage ended or deadline passed before an answer).",
            ["outcome"],
            registry=self.registry,
        )
        self.skipped = Counter(
            "devicestate_recovery_stages_skipped",
            "Recovery stages not taken up, by reason (expired: deadline already passed when read; "
            "not-executable: a stage with nothing to run, e.g. stability; undecodable).",
            ["reason"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "devicestate_recovery_in_flight",
            "Devices with a lease requested or a check running (at most one per device).",
            registry=self.registry,
        )

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on ``port`` (all interfaces) from a daemon thread; 0 means off."""
        if port:
            start_http_server(port, registry=self.registry)
