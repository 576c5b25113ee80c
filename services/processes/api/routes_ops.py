"""Operational endpoints: ``/healthz`` (process alive), ``/readyz`` (database reachable, the
worker's true lag known and under its thresholds), ``/metrics`` (Prometheus text, read from the
projection and the broker per scrape).

The stream worker exports its own counters on its own port; these gauges describe the projection
as the API sees it, so they are right whichever worker process wrote it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

import structlog
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from services.adapters.kafka.lag import PartitionLag
from services.adapters.projection.errors import DatabaseError
from services.adapters.projection.reads_governance import FleetStatus, GovernanceReads
from services.processes.api.failure_metrics import failure_metrics
from services.processes.api.readiness import LagUnavailable, lag_problem
from services.processes.api.routes_adoption_report import adoption_report_gauges
from services.processes.api.routes_devices import Store
from services.processes.api.routes_extender import extender_metrics
from services.processes.api.routes_inventory import CAPACITY_NODE_VIEW_METRICS, inventory_gauges
from services.processes.api.routing import ServiceRoute
from services.processes.api.schemas import LagOut, PartitionOut, ReadyOut
from services.processes.api.warm_devices import warm_metrics

log = structlog.get_logger(__name__)

router = APIRouter(tags=["operations"], route_class=ServiceRoute)

DATABASE_ERRORS = (DatabaseError, OSError, TimeoutError)

GOVERNANCE_CACHE_SECONDS = 5.0
"""How long the governance gauges' projection reads are reused between scrapes."""


@dataclass(slots=True)
class GovernanceGaugeCache:
    """The last :class:`FleetStatus` read for ``/metrics`` and when (monotonic seconds)."""

    status: FleetStatus | None = None
    read_at: float = float("-inf")

    async def get(self, reads: GovernanceReads) -> FleetStatus:
        """The cached status while younger than :data:`GOVERNANCE_CACHE_SECONDS`, else a new
        read (errors propagate and are not cached)."""
        now = time.monotonic()
        if self.status is None or now - self.read_at > GOVERNANCE_CACHE_SECONDS:
            self.status = await reads.fleet_status()
            self.read_at = now
        return self.status


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive (no dependencies are checked)."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses={503: {"model": ReadyOut, "description": "Not ready; `reason` says why."}},
)
async def readyz(request: Request, store: Store) -> ReadyOut | JSONResponse:
    """Ready when the database answers, the worker has recorded progress for at least one
    partition, and the broker says the worker group is not behind: on no partition of the event
    and governance topics more than ``DEVICESTATE_READY_MAX_LAG_RECORDS`` records after its
    committed offset, nor a waiting record older than ``DEVICESTATE_READY_MAX_LAG_SECONDS``
    (a dead worker with records waiting). 503 with a reason (and the figures) otherwise."""
    try:
        progress = await store.partition_progress()
    except DATABASE_ERRORS as exc:
        log.warning("readiness check failed", error=repr(exc))
        return _unavailable(f"database unreachable or not migrated: {type(exc).__name__}")
    if not progress:
        return _unavailable("projection lag unknown: no partition progress recorded yet")
    partitions = [PartitionOut.of(p) for p in progress]
    try:
        lags = await request.app.state.lag.read()
    except LagUnavailable as exc:
        log.warning("readiness check: lag unknown", error=str(exc))
        return _unavailable(f"projection lag unknown: {exc}", partitions)
    now = request.app.state.clock()
    lag = [_lag_out(one, now) for one in lags]
    problem = lag_problem(lags, now, request.app.state.settings)
    if problem is not None:
        return _unavailable(problem, partitions, lag)
    return ReadyOut(status="ready", partitions=partitions, lag=lag)


def _lag_out(lag: PartitionLag, now: datetime) -> LagOut:
    return LagOut(
        topic=lag.topic,
        partition=lag.partition,
        end_offset=lag.end,
        committed_offset=lag.committed,
        records=lag.records,
        seconds=lag.seconds(now),
    )


def _unavailable(
    reason: str, partitions: list[PartitionOut] | None = None, lag: list[LagOut] | None = None
) -> JSONResponse:
    body = ReadyOut(status="unavailable", reason=reason, partitions=partitions or [], lag=lag or [])
    return JSONResponse(body.model_dump(mode="json", by_alias=True), status_code=503)


@router.get("/metrics", response_class=Response)
async def metrics(
    request: Request,
    store: Store,
    capacity_node_view: Annotated[
        bool,
        Query(
            alias="capacityNodeView",
            description="false: leave out the per-node capacity series (large fleets).",
        ),
    ] = CAPACITY_NODE_VIEW_METRICS,
) -> Response:
    """Prometheus metrics of the projection, read when scraped.

    ``devicestate_projection_freshness_seconds``: now minus the newest applied event's
    ``observedAt`` (absent before the first batch; negative if the watcher's clock runs ahead);
    ``devicestate_projection_recorded_lag{topic,partition}``: records seen and not applied when
    the worker last wrote (highwater - offset - 1); ``devicestate_devices{health}``: devices by
    health; ``devicestate_api_database_up``: 1 when the reads succeeded.

    True lag, from the broker (at most every 2 s), per partition of the event and governance
    topics: ``devicestate_consumer_lag{topic,partition}`` (records after the worker group's
    committed offset), ``devicestate_consumer_lag_seconds{topic,partition}`` (how long the oldest
    of them has waited); ``devicestate_api_lag_up``: 1 when the broker answered.

    Governance (read at most every 5 s): ``devicestate_quarantines_active`` (active or
    recovering), ``devicestate_devices_by_governance_state{state}``,
    ``devicestate_governor_watermark_age_seconds`` (wall clock minus the governor's watermark;
    absent before the first watermark), ``devicestate_breaker_open``,
    ``devicestate_automation_paused``; ``devicestate_api_governance_up``: 1 when those reads
    succeeded (0 also while the governance tables do not exist yet).

    Inventory (read at most every 5 s): ``devicestate_capacity_devices{view,key,kind}`` (kind
    total/allocated/idle/unavailable/fragmented; the node view unless ``capacityNodeView=false``),
    ``devicestate_capacity_request_size``, ``devicestate_inventory_divergence{node,resource}``
    (ResourceSlice devices minus Node capacity where both offer the resource),
    ``devicestate_api_inventory_up``. Driver and claim failures (issue 16 item 3):
    ``devicestate_dra_failures_total{class,reason,namespace}`` summed from the projection,
    ``devicestate_api_dra_failures_up``. The DRA adoption comparison (read at most every 60 s,
    per DeviceClass: ``docs/dra-adoption.md``): ``devicestate_adoption_stage_seconds{class,pool,path,
    stage,quantile}``, ``devicestate_adoption_fragmentation{class,pool,path}``,
    ``devicestate_adoption_device_hours{class,pool,path,state}``,
    ``devicestate_adoption_allocation_success{...}``, ``devicestate_adoption_retry_rate{...}``.
    With the scheduler extender enabled:
    ``devicestate_scheduler_extender_calls_total{outcome}`` and
    ``devicestate_scheduler_extender_failed_nodes_total``. With the point GETs' in-memory copy
    (``DEVICESTATE_API_READ_CACHE``): ``devicestate_api_read_cache_ready``,
    ``..._devices``, ``..._refresh_seconds`` (the last refresh's duration: with the poll
    interval, how stale a GET can be), ``..._hits_total``, ``..._misses_total``,
    ``..._refresh_errors_total``.
    """
    clock = request.app.state.clock
    registry = CollectorRegistry()
    up = Gauge(
        "devicestate_api_database_up",
        "1 when the API could read the projection for this scrape.",
        registry=registry,
    )
    try:
        newest = await store.freshness()
        progress = await store.partition_progress()
        fleet = await store.fleet_counts()
    except DATABASE_ERRORS as exc:
        log.warning("metrics read failed", error=repr(exc))
        up.set(0)
    else:
        up.set(1)
        if newest is not None:
            Gauge(
                "devicestate_projection_freshness_seconds",
                "Seconds since the observedAt of the newest event applied to the projection.",
                registry=registry,
            ).set((clock() - newest).total_seconds())
        recorded = Gauge(
            "devicestate_projection_recorded_lag",
            "Records of the partition the worker saw and had not applied when it last wrote "
            "(highwater-offset-1; stays put when the worker stops: see devicestate_consumer_lag).",
            ["topic", "partition"],
            registry=registry,
        )
        for p in progress:
            if p.lag is not None:
                recorded.labels(p.topic, str(p.partition)).set(p.lag)
        devices = Gauge(
            "devicestate_devices",
            "Devices in the directory by health.",
            ["health"],
            registry=registry,
        )
        for health, count in fleet.by_health.items():
            devices.labels(health.value).set(count)
    await _lag_gauges(request, registry, clock())
    await _governance_gauges(request, registry, clock())
    await inventory_gauges(request, registry, capacity_node_view, DATABASE_ERRORS)
    await failure_metrics(request, registry, DATABASE_ERRORS)
    await adoption_report_gauges(request, registry, DATABASE_ERRORS)
    if request.app.state.settings.scheduler_extender:
        extender_metrics(request, registry)
    warm = getattr(request.app.state, "warm_devices", None)
    if warm is not None:
        warm_metrics(warm, registry)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


async def _lag_gauges(request: Request, registry: CollectorRegistry, now: datetime) -> None:
    up = Gauge(
        "devicestate_api_lag_up",
        "1 when the API could measure the worker group's lag on the broker for this scrape.",
        registry=registry,
    )
    try:
        lags = await request.app.state.lag.read()
    except LagUnavailable as exc:
        log.warning("lag metrics read failed", error=str(exc))
        up.set(0)
        return
    up.set(1)
    records = Gauge(
        "devicestate_consumer_lag",
        "Records of the partition after the worker group's committed offset (broker's end "
        "offset minus the committed one).",
        ["topic", "partition"],
        registry=registry,
    )
    seconds = Gauge(
        "devicestate_consumer_lag_seconds",
        "Seconds the oldest record the worker group has not consumed has waited (wall clock "
        "minus its Kafka timestamp; 0 when none waits).",
        ["topic", "partition"],
        registry=registry,
    )
    for lag in lags:
        records.labels(lag.topic, str(lag.partition)).set(lag.records)
        seconds.labels(lag.topic, str(lag.partition)).set(lag.seconds(now))


async def _governance_gauges(request: Request, registry: CollectorRegistry, now: datetime) -> None:
    up = Gauge(
        "devicestate_api_governance_up",
        "1 when the API could read the governance projection for this scrape.",
        registry=registry,
    )
    cache: GovernanceGaugeCache = request.app.state.governance_gauges
    try:
        status = await cache.get(request.app.state.reads)
    except DATABASE_ERRORS as exc:
        log.warning("governance metrics read failed", error=repr(exc))
        up.set(0)
        return
    up.set(1)
    Gauge(
        "devicestate_quarantines_active",
        "Quarantines active or recovering.",
        registry=registry,
    ).set(status.active_quarantines)
    by_state = Gauge(
        "devicestate_devices_by_governance_state",
        "Devices the governor knows, by governance state.",
        ["state"],
        registry=registry,
    )
    for state, count in status.by_state.items():
        by_state.labels(state).set(count)
    if status.watermark is not None:
        Gauge(
            "devicestate_governor_watermark_age_seconds",
            "Wall clock minus the governor's event-time watermark: how old its view of the "
            "observations is.",
            registry=registry,
        ).set((now - status.watermark).total_seconds())
    Gauge(
        "devicestate_breaker_open",
        "1 while the governance circuit breaker is open.",
        registry=registry,
    ).set(int(status.breaker_open))
    Gauge(
        "devicestate_automation_paused",
        "1 while an operator paused governance automation.",
        registry=registry,
    ).set(int(status.automation_paused))
