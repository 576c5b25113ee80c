"""Prometheus metrics of the stream worker.

Every :class:`WorkerMetrics` owns its own :class:`~prometheus_client.CollectorRegistry`, so several
workers built in one process (tests) do not collide on metric names; :meth:`WorkerMetrics.serve`
exposes that registry over HTTP on ``settings.worker_metrics_port`` (0 keeps it off).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.runtime.metrics_http import MetricsHttpServer

_BATCH_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_UNKNOWN_SECONDS_BUCKETS = (10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


class WorkerMetrics:
    """The worker's counters, histogram and lag gauge (names prefixed ``devicestate_worker_``),
    and the governor's (``devicestate_governor_``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._http = MetricsHttpServer(self.registry)
        r = self.registry
        self.consumed = Counter(
            "devicestate_worker_events_consumed",
            "Records read from the event topic (valid or not).",
            registry=r,
        )
        self.applied = Counter(
            "devicestate_worker_events_applied",
            "Events the projection applied: observations (kind=observed) and releases that removed "
            "an allocation (kind=released, counted per device).",
            ["kind"],
            registry=r,
        )
        self.table_duplicates = Counter(
            "devicestate_worker_table_duplicates_dropped",
            "Observations dropped early by the dedup table (same or older statusVersion).",
            ["kind"],
            registry=r,
        )
        self.db_noops = Counter(
            "devicestate_worker_db_noops",
            "Observations the projection's version guard found duplicate or stale, and "
            "(kind tombstoned) observations of released Pods whose allocation was not added back.",
            ["kind"],
            registry=r,
        )
        self.dead_lettered = Counter(
            "devicestate_worker_events_dead_lettered",
            "Records sent to the dead-letter topic.",
            ["stage"],
            registry=r,
        )
        self.db_retries = Counter(
            "devicestate_worker_db_retries",
            "Transient database errors retried while writing a batch.",
            registry=r,
        )
        self.poison_records = Counter(
            "devicestate_worker_poison_records",
            "Records whose values the database refused (a data error or constraint violation), "
            "found by bisecting their batch and sent to the dead-letter topic; the rest of the "
            "batch was written. By agent (health, governor).",
            ["agent"],
            registry=r,
        )
        self.batch_seconds = Histogram(
            "devicestate_worker_batch_seconds",
            "Time to handle one batch: decode, dedup, database commit, table update.",
            buckets=_BATCH_SECONDS_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "devicestate_worker_batch_events",
            "Records per batch.",
            buckets=(1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000),
            registry=r,
        )
        self.lag = Gauge(
            "devicestate_worker_consumer_lag",
            "Records in the partition after the last one the worker committed to the projection.",
            ["topic", "partition"],
            registry=r,
        )
        self.forwarded = Counter(
            "devicestate_worker_governance_forwarded",
            "Records the health agent forwarded to the governance topic, by type "
            "(HealthTransition, NodeHeartbeat, NodeResourcesChanged, WatcherTick, "
            "InventoryConflict, PartitionWatermark).",
            ["type"],
            registry=r,
        )
        self.gap_batches = Counter(
            "devicestate_worker_gap_batches",
            "Partition batches not written because they started after records the projection "
            "never got (out-of-order delivery after a rebalance); read again in order.",
            registry=r,
        )
        self.table_unjustified = Counter(
            "devicestate_worker_table_unjustified_drops",
            "Observations the dedup table dropped early that the projection did not have "
            "(services/domain/early_drops.py): their batch was written again without the table. "
            "Any increase is a bug to report.",
            registry=r,
        )
        self.clock_clamped = Counter(
            "devicestate_worker_event_time_clamped",
            "Records whose observedAt was more than DEVICESTATE_MAX_CLOCK_SKEW_SECONDS ahead of "
            "their Kafka (broker append) timestamp: their event time was clamped to the bound.",
            ["topic", "partition"],
            registry=r,
        )
        self.clock_skew = Gauge(
            "devicestate_worker_event_time_skew_seconds",
            "How far the newest batch's observedAt ran ahead of its records' Kafka timestamps at "
            "most (seconds; negative: behind), per partition.",
            ["topic", "partition"],
            registry=r,
        )
        # --- the governor (streams.governor) ---------------------------------------------------
        self.governor_records = Counter(
            "devicestate_governor_records_consumed",
            "Records read from the governance topic (valid or not, redeliveries included).",
            registry=r,
        )
        self.governor_batch_seconds = Histogram(
            "devicestate_governor_batch_seconds",
            "Time to handle one governance batch: fold, decisions sent, database commit.",
            buckets=_BATCH_SECONDS_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "devicestate_governor_decisions",
            "Governance decisions made, by kind.",
            ["kind"],
            registry=r,
        )
        self.active_quarantines = Gauge(
            "devicestate_governor_active_quarantines",
            "Devices with an active (or recovering) quarantine.",
            registry=r,
        )
        self.quarantines_needing_operator = Gauge(
            "devicestate_governor_quarantines_needing_operator",
            "Active quarantines past DEVICESTATE_QUARANTINE_OPERATOR_AGE_SECONDS without recovery "
            "progress (decision QuarantineNeedsOperator): reset or RMA the device.",
            registry=r,
        )
        self.adoption_pools = Gauge(
            "devicestate_governor_adoption_pools",
            "DRA adoption pools by the verdict the governor last recorded for them "
            "(AdoptionVerdictChanged: expand, hold, rollback; docs/dra-adoption.md); "
            'waiting="true": a plugin pool held only until the DRA driver publishes its '
            "ResourceSlices (no alert).",
            ["verdict", "waiting"],
            registry=r,
        )
        self.devices_by_state = Gauge(
            "devicestate_governor_devices",
            "Devices the governor knows, by governance state.",
            ["state"],
            registry=r,
        )
        self.breaker_open = Gauge(
            "devicestate_governor_breaker_open",
            "1 while the circuit breaker is open (automatic restrictions held back).",
            registry=r,
        )
        self.automation_paused = Gauge(
            "devicestate_governor_automation_paused",
            "1 while an operator has paused automation.",
            registry=r,
        )
        self.watch_stale = Gauge(
            "devicestate_governor_watch_stale",
            "1 while the governor holds the watch stale (decision WatchStale: no watch event, "
            "bookmark or LIST for DEVICESTATE_WATCH_STALE_SECONDS of event time).",
            registry=r,
        )
        self.node_incidents_open = Gauge(
            "devicestate_governor_node_incidents_open",
            "Open node incidents of devices that faulted together (NodeFaultIncidentOpened).",
            registry=r,
        )
        self.watermark = Gauge(
            "devicestate_governor_watermark_seconds",
            "The governor's event-time watermark (unix seconds): observations are complete up to "
            "this time; time() minus this is how stale the governor's view is.",
            registry=r,
        )
        self.recovery_stages = Counter(
            "devicestate_governor_recovery_stage_results",
            "Recovery stage results (RecoveryStagePassed / RecoveryFailed), by stage and result.",
            ["stage", "result"],
            registry=r,
        )
        self.false_quarantines = Counter(
            "devicestate_governor_false_quarantines",
            "Quarantines released without a confirmed fault.",
            registry=r,
        )
        self.unknown_seconds = Histogram(
            "devicestate_governor_unknown_duration_seconds",
            "How long devices stayed Unknown (tolerated or restricted) before leaving that state "
            "(event time).",
            buckets=_UNKNOWN_SECONDS_BUCKETS,
            registry=r,
        )

    def record_batch(
        self,
        result: Any,
        messages: Sequence[Any],
        highwaters: Mapping[tuple[str, int], int],
        started: float,
    ) -> None:
        """Count one health batch the projection committed: ``result`` (``BatchStats``: applied,
        released, duplicates, stale, tombstoned), the lag after the last of ``messages`` (faust messages) per
        partition, and the time since ``started`` (``time.perf_counter()``, seconds)."""
        self.applied.labels("observed").inc(result.applied)
        self.applied.labels("released").inc(result.released)
        if result.duplicates:
            self.db_noops.labels("duplicate").inc(result.duplicates)
        if result.stale:
            self.db_noops.labels("stale").inc(result.stale)
        if result.tombstoned:
            self.db_noops.labels("tombstoned").inc(result.tombstoned)
        last: dict[tuple[str, int], int] = {}
        for message in messages:
            key = (message.topic, message.partition)
            last[key] = max(last.get(key, -1), message.offset)
        self.set_lag(highwaters, last)
        self.batch_seconds.observe(time.perf_counter() - started)

    def set_lag(
        self, highwaters: Mapping[tuple[str, int], int], done: Mapping[tuple[str, int], int]
    ) -> None:
        """Set the lag gauge for each partition in ``done`` (last handled offset per partition)
        from the matching highwater (offset the next record will get)."""
        for (topic, partition), offset in done.items():
            highwater = highwaters.get((topic, partition))
            if highwater is not None:
                self.lag.labels(topic, str(partition)).set(max(highwater - offset - 1, 0))

    def serve(self, port: int, addr: str = "0.0.0.0") -> int | None:
        """Serve ``/metrics`` on ``port`` in a daemon thread; ``0`` does nothing. Returns the port."""
        if port == 0:
            return None
        try:
            return self._http.start(port, addr)
        except OSError as exc:
            raise SystemExit(
                f"error: cannot serve the worker's metrics on {addr}:{port} ({exc.strerror}); "
                "set DEVICESTATE_WORKER_METRICS_PORT to a free port, or 0 to turn them off"
            ) from None

    def close(self) -> None:
        """Stop the HTTP server started by :meth:`serve`, if any."""
        self._http.close()
