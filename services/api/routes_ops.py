"""Operational endpoints: ``/healthz`` (process alive), ``/readyz`` (database reachable and
projection lag known), ``/metrics`` (Prometheus text, read from the projection per scrape).

The stream worker exports its own counters on its own port; these gauges describe the projection
as the API sees it, so they are right whichever worker process wrote it.
"""

from __future__ import annotations

import structlog
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from services.api.routes_devices import Store
from services.api.schemas import PartitionOut, ReadyOut
from services.domain.events import now_utc

log = structlog.get_logger(__name__)

router = APIRouter(tags=["operations"])

DATABASE_ERRORS = (SQLAlchemyError, OSError, TimeoutError)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive (no dependencies are checked)."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses={503: {"model": ReadyOut, "description": "Not ready; `reason` says why."}},
)
async def readyz(store: Store) -> ReadyOut | JSONResponse:
    """Ready when the database answers and the projection's lag is known (the worker has recorded
    progress for at least one partition); 503 with a reason otherwise."""
    try:
        progress = await store.partition_progress()
    except DATABASE_ERRORS as exc:
        log.warning("readiness check failed", error=repr(exc))
        return _unavailable(f"database unreachable or not migrated: {type(exc).__name__}")
    if not progress:
        return _unavailable("projection lag unknown: no partition progress recorded yet")
    return ReadyOut(status="ready", partitions=[PartitionOut.of(p) for p in progress])


def _unavailable(reason: str) -> JSONResponse:
    body = ReadyOut(status="unavailable", reason=reason)
    return JSONResponse(body.model_dump(mode="json", by_alias=True), status_code=503)


@router.get("/metrics", response_class=Response)
async def metrics(store: Store) -> Response:
    """Prometheus metrics of the projection, read when scraped.

    ``devicestate_projection_freshness_seconds``: now minus the newest applied event's
    ``observedAt`` (absent before the first batch; negative if the watcher's clock runs ahead); ``devicestate_consumer_lag{topic,partition}``: records not yet applied
    (highwater - offset - 1); ``devicestate_devices{health}``: devices by health;
    ``devicestate_api_database_up``: 1 when the reads succeeded.
    """
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
            ).set((now_utc() - newest).total_seconds())
        lag = Gauge(
            "devicestate_consumer_lag",
            "Records of the partition not yet applied to the projection (highwater-offset-1).",
            ["topic", "partition"],
            registry=registry,
        )
        for p in progress:
            if p.lag is not None:
                lag.labels(p.topic, str(p.partition)).set(p.lag)
        devices = Gauge(
            "devicestate_devices",
            "Devices in the directory by health.",
            ["health"],
            registry=registry,
        )
        for health, count in fleet.by_health.items():
            devices.labels(health.value).set(count)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
