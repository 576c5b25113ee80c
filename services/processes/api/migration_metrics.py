"""The migration metrics on the API's ``/metrics`` (issue 13 item 5), computed from the
projection's governance decisions when scraped (each scrape folds the decisions written since the
last: :class:`MigrationMetricsFollower`) (:mod:`services.domain.migration.metrics` has
the definitions): every API replica serves the same values, a restart of the worker or the API
neither loses nor repeats a count, and a replay rebuilds them.

- ``devicestate_migrations_total{outcome,reason,namespace}``: finished migrations (``outcome``
  completed, failed, evidence-kept, cancelled; ``reason`` the failure's, else empty).
- ``devicestate_migrations_deferred_total{waiting_for}``: ``MigrationDeferred`` decisions.
- ``devicestate_migrations_waiting{waiting_for}``: migrations waiting now (latest decision).
- ``devicestate_migration_checkpoint_seconds``: histogram, checkpoint requested -> committed.
- ``devicestate_migration_rebuild_seconds``: histogram, device released -> completed.
- ``devicestate_quarantined_idle_gpu_seconds_total``: GPU-seconds quarantined with no migration
  under way (open quarantines up to the governor's watermark).
- ``devicestate_api_migrations_up``: 1 when the decisions could be read for this scrape.

All durations are seconds of event time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import structlog
from fastapi import Request
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from services.adapters.projection.migration_metrics_sql import MigrationMetricReads
from services.domain.migration.metrics import (
    WAITING_REASONS,
    Histogram,
    MetricsFold,
    MigrationMetrics,
)

log = structlog.get_logger(__name__)


def _histogram(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
    buckets = [("+Inf" if b == float("inf") else repr(b), c) for b, c in h.buckets]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=h.total)


class _Migrations(Collector):
    def __init__(self, m: MigrationMetrics) -> None:
        self._m = m

    def collect(self) -> Iterator[Metric]:
        m = self._m
        outcomes = CounterMetricFamily(
            "devicestate_migrations",
            "Finished workload migrations by outcome (completed, failed, evidence-kept, "
            "cancelled), failure reason and the workload's namespace (from the governor's "
            "decisions in the projection).",
            labels=["outcome", "reason", "namespace"],
        )
        for (outcome, reason, namespace), n in sorted(m.outcomes.items()):
            outcomes.add_metric([outcome, reason, namespace], n)
        yield outcomes
        deferred = CounterMetricFamily(
            "devicestate_migrations_deferred",
            "MigrationDeferred decisions by waitingFor (rate-limited, breaker-open, "
            "automation-paused): migrations held back by the limits.",
            labels=["waiting_for"],
        )
        waiting = GaugeMetricFamily(
            "devicestate_migrations_waiting",
            "Migrations waiting now (their latest decision is a MigrationDeferred), by waitingFor.",
            labels=["waiting_for"],
        )
        for reason in sorted(set(WAITING_REASONS) | set(m.deferred) | set(m.waiting)):
            deferred.add_metric([reason], m.deferred.get(reason, 0))
            waiting.add_metric([reason], m.waiting.get(reason, 0))
        yield deferred
        yield waiting
        yield _histogram(
            "devicestate_migration_checkpoint_seconds",
            "Event-time seconds from MigrationCheckpointRequested to MigrationCheckpointCommitted.",
            m.checkpoint,
        )
        yield _histogram(
            "devicestate_migration_rebuild_seconds",
            "Event-time seconds from MigrationDeviceReleased (Pods evicted) to MigrationCompleted "
            "(the replacement on unrestricted devices).",
            m.rebuild,
        )
        yield CounterMetricFamily(
            "devicestate_quarantined_idle_gpu_seconds",
            "Event-time GPU-seconds devices spent quarantined with no migration of them under "
            "way (MigrationPlanned to MigrationDeviceReleased or its end).",
            value=m.idle_gpu_seconds,
        )


class MigrationMetricsFollower:
    """The API process's fold of the migration decisions: each scrape reads only the decisions
    written after the last one it folded (``governance_decisions`` is append-only in ``(seq,
    idx)`` order, and a replay writes the same rows at the same positions), so a scrape costs
    the new decisions, not the whole log. A table behind the position read (rebuilt or emptied)
    starts the fold again from the first decision."""

    def __init__(self, reads: MigrationMetricReads) -> None:
        self._reads = reads
        self._fold = MetricsFold()
        self._after: tuple[int, int] | None = None
        self._lock = asyncio.Lock()  # one read at a time: concurrent scrapes fold once

    async def metrics(self) -> MigrationMetrics:
        """The metrics of every decision so far. Raises what
        :meth:`MigrationMetricReads.facts` raises (the fold is left as it was)."""
        async with self._lock:
            facts, after, watermark, behind = await self._reads.facts(self._after)
            if behind:
                self._fold, self._after = MetricsFold(), None
                facts, after, watermark, _ = await self._reads.facts(None)
            self._fold.add(facts)
            self._after = after
            return self._fold.metrics(watermark)


async def migration_metrics(
    request: Request, registry: CollectorRegistry, errors: tuple[type[BaseException], ...]
) -> None:
    """Add the migration metrics (module docstring) and ``devicestate_api_migrations_up`` (1 when
    the decisions could be read; 0 also while the table does not exist) to ``registry``."""
    up = Gauge(
        "devicestate_api_migrations_up",
        "1 when the API could read the migration decisions for this scrape.",
        registry=registry,
    )
    follower: MigrationMetricsFollower | None = getattr(
        request.app.state, "migration_metrics", None
    )
    if follower is None:
        up.set(0)
        return
    try:
        metrics = await follower.metrics()
    except errors as exc:
        log.warning("migration metrics read failed", error=repr(exc))
        up.set(0)
        return
    up.set(1)
    registry.register(_Migrations(metrics))
