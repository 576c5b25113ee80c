"""``GET /v1/adoption/report`` (issue 16 item 5): the DRA-against-plugin comparison of one
DeviceClass per adoption pool, computed on read from the projection
(:mod:`services.domain.adoption.report`), and its ``/metrics`` gauges."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Annotated, Final

import structlog
from fastapi import HTTPException, Query, Request
from prometheus_client import CollectorRegistry, Gauge

from services.adapters.projection.reads_adoption import AdoptionReads
from services.adapters.projection.reads_adoption_report import AdoptionReportReads
from services.adapters.projection.reads_inventory import InventoryReads
from services.domain.adoption.facts import ConflictFact, read_facts
from services.domain.adoption.report import build_report, report_pools
from services.domain.adoption.report_inputs import (
    claim_rows,
    declared_pool_nodes,
    device_rows,
    known_class,
    plugin_resource_of,
)
from services.domain.adoption.report_rows import DEFAULT_MIN_SAMPLES, Report, ReportInput
from services.domain.governance.adoption import fold
from services.processes.api.command_submit import reads_router
from services.processes.api.schemas import ErrorOut
from services.processes.api.schemas_adoption_report import AdoptionReportOut

log = structlog.get_logger(__name__)

DEFAULT_WINDOW_SECONDS: Final = 7 * 86400
MAX_WINDOW_SECONDS: Final = 90 * 86400
GAUGE_CACHE_SECONDS: Final = 60.0
"""How long the report gauges' computation is reused between scrapes."""

router = reads_router()


@dataclass(frozen=True, slots=True)
class Computed:
    report: Report
    failure_counts: bool


async def compute(
    request: Request,
    device_class: str,
    pool: str | None,
    window_seconds: float,
    min_samples: int,
    resource: str | None = None,
) -> Computed:
    """The report of ``device_class`` (one ``pool``, or every one) against the extended
    resource ``resource`` (default: the DeviceClass's ``extendedResourceName``). Raises
    :class:`HTTPException` 404 for an unknown DeviceClass or pool, 503 before the projection
    has an event time."""
    reads: AdoptionReportReads = request.app.state.adoption_report
    adoption: AdoptionReads = request.app.state.adoption
    inventory: InventoryReads = request.app.state.inventory
    end = await reads.event_time()
    if end is None:
        raise HTTPException(503, "the projection has no event time yet (no batch written)")
    snapshot = await inventory.snapshot()
    plugin = resource or plugin_resource_of(snapshot, device_class)
    classes = [device_class] if plugin is None else [device_class, plugin]
    stages = await reads.stages(classes, end)
    if not known_class(snapshot, device_class, (s.device_class for s in stages)):
        raise HTTPException(404, f"unknown DeviceClass {device_class!r}")
    conflicts = [
        ConflictFact(c.kind, c.node, c.subject) for c in await inventory.conflicts(active=True)
    ]
    facts = read_facts(snapshot, conflicts)
    # One window before the window: the allocations already open when it starts.
    since = end - timedelta(seconds=2 * window_seconds)
    inp = ReportInput(
        device_class=device_class,
        plugin_resource=plugin,
        pools=declared_pool_nodes(fold(await adoption.declarations()), facts),
        window_end=end,
        window_seconds=window_seconds,
        stages=tuple(stages),
        claims=claim_rows(snapshot),
        devices=device_rows(snapshot),
        history=tuple(await reads.history(since, end)),
        workloads=tuple(await reads.workloads(s.pod_uid for s in stages)),
        failures=tuple(await reads.failures(end - timedelta(seconds=window_seconds), end)),
        min_samples=min_samples,
    )
    pools = None
    if pool is not None:
        if pool not in report_pools(inp):
            raise HTTPException(404, f"unknown pool {pool!r}")
        pools = [pool]
    return Computed(build_report(inp, pools), inp.failures is not None)


@router.get(
    "/adoption/report",
    response_model=AdoptionReportOut,
    tags=["adoption"],
    responses={
        404: {"model": ErrorOut, "description": "Unknown DeviceClass or pool."},
        503: {"model": ErrorOut, "description": "The database unavailable, or no event time yet."},
    },
)
async def adoption_report(
    request: Request,
    device_class: Annotated[
        str,
        Query(
            alias="class",
            min_length=1,
            max_length=253,
            pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
            description="The DeviceClass (its extendedResourceName is the plugin side).",
        ),
    ],
    pool: Annotated[
        str | None,
        Query(min_length=1, max_length=253, description="One adoption pool, `unpooled` or `*`."),
    ] = None,
    window: Annotated[
        int,
        Query(ge=60, le=MAX_WINDOW_SECONDS, description="Window in seconds before the event time."),
    ] = DEFAULT_WINDOW_SECONDS,
    min_samples: Annotated[
        int,
        Query(alias="minSamples", ge=1, le=100_000, description="Fewest samples of a figure."),
    ] = DEFAULT_MIN_SAMPLES,
    resource: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=253,
            pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
            description="The device plugin's extended resource compared (default: the "
            "DeviceClass's extendedResourceName).",
        ),
    ] = None,
) -> AdoptionReportOut:
    """Per adoption pool and path (DRA, device plugin): allocation success rate, Pending-to-bound
    and bound-to-Ready p50/p95 (seconds), fragmentation, device-hours allocated against idle
    over the window, job retry rate; each with its sample count (``docs/dra-adoption.md``)."""
    done = await compute(request, device_class, pool, float(window), min_samples, resource)
    return AdoptionReportOut.of(done.report, done.failure_counts)


@dataclass(slots=True)
class ReportGaugeCache:
    """The last reports computed for ``/metrics`` (per DeviceClass) and when (monotonic s)."""

    reports: list[Report] = field(default_factory=list)
    read_at: float = float("-inf")


async def adoption_report_gauges(
    request: Request, registry: CollectorRegistry, errors: tuple[type[BaseException], ...]
) -> None:
    """Add the report's gauges to ``registry``, for every DeviceClass of the inventory over the
    default window (a figure without a value exports no sample):

    - ``devicestate_adoption_stage_seconds{class,pool,path,stage,quantile}``: stage
      ``pending_to_bound`` or ``bound_to_ready``, quantile ``0.5`` or ``0.95``;
    - ``devicestate_adoption_fragmentation{class,pool,path}``;
    - ``devicestate_adoption_device_hours{class,pool,path,state}``: allocated, idle, capacity;
    - ``devicestate_adoption_allocation_success{class,pool,path}``,
      ``devicestate_adoption_retry_rate{class,pool,path}``.
    """
    cache: ReportGaugeCache = request.app.state.adoption_report_gauges
    caught: tuple[type[BaseException], ...] = (*errors, HTTPException)
    now = time.monotonic()
    if now - cache.read_at > GAUGE_CACHE_SECONDS:
        try:
            snapshot = await request.app.state.inventory.snapshot()
            reports = []
            for name in sorted({c.name for c in snapshot.inventory.classes.values()}):
                done = await compute(
                    request, name, None, DEFAULT_WINDOW_SECONDS, DEFAULT_MIN_SAMPLES
                )
                reports.append(done.report)
        except caught as exc:
            log.warning("adoption report metrics read failed", error=repr(exc))
            return
        cache.reports, cache.read_at = reports, now
    labels = ["class", "pool", "path"]
    stage = Gauge(
        "devicestate_adoption_stage_seconds",
        "Claim lifecycle stage quantiles per DeviceClass, adoption pool and path (seconds).",
        [*labels, "stage", "quantile"],
        registry=registry,
    )
    frag = Gauge(
        "devicestate_adoption_fragmentation",
        "1 - largest free device count on one node / free devices, per class, pool and path.",
        labels,
        registry=registry,
    )
    hours = Gauge(
        "devicestate_adoption_device_hours",
        "Device-hours over the report window: allocated, idle, capacity.",
        [*labels, "state"],
        registry=registry,
    )
    success = Gauge(
        "devicestate_adoption_allocation_success",
        "Allocations that succeeded over those attempted (DRA: with the dra_failures counts).",
        labels,
        registry=registry,
    )
    retry = Gauge(
        "devicestate_adoption_retry_rate",
        "Share of Job Pods that were a second or later Pod of their job.",
        labels,
        registry=registry,
    )
    for report in cache.reports:
        for row in report.rows:
            key = (report.device_class, row.pool, row.path)
            for name, figures in (
                ("pending_to_bound", row.pending_to_bound),
                ("bound_to_ready", row.bound_to_ready),
            ):
                for q, fig in figures.items():
                    if fig.value is not None:
                        stage.labels(*key, name, "0.5" if q == "p50" else "0.95").set(fig.value)
            for state, fig in row.device_hours.items():
                if fig.value is not None:
                    hours.labels(*key, state).set(fig.value)
            for gauge, fig in (
                (frag, row.fragmentation),
                (success, row.allocation_success),
                (retry, row.retry_rate),
            ):
                if fig.value is not None:
                    gauge.labels(*key).set(fig.value)
