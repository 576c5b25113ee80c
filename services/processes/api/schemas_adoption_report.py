"""Response model of ``GET /v1/adoption/report`` (issue 16 item 5): the DRA-against-plugin
comparison of one DeviceClass (:mod:`services.domain.adoption.report`). camelCase JSON, times
RFC 3339 UTC, seconds for the stage quantiles, device-hours for ``deviceHours``."""

from __future__ import annotations

from datetime import datetime

from services.domain.adoption.report_rows import Figure, Report, ReportRow
from services.processes.api.schemas import ApiModel


class FigureOut(ApiModel):
    """``value`` null when it cannot be computed (``note`` says why, e.g. "insufficient data"),
    ``samples`` it is based on."""

    value: float | None
    samples: int
    note: str | None = None

    @classmethod
    def of(cls, f: Figure) -> FigureOut:
        return cls(value=f.value, samples=f.samples, note=f.note)


class ReportRowOut(ApiModel):
    """The figures of one (deviceClass, pool, path)."""

    device_class: str
    pool: str
    path: str
    allocation_success: FigureOut
    pending_to_bound: dict[str, FigureOut]
    bound_to_ready: dict[str, FigureOut]
    fragmentation: FigureOut
    device_hours: dict[str, FigureOut]
    retry_rate: FigureOut

    @classmethod
    def of(cls, r: ReportRow) -> ReportRowOut:
        def each(figures: dict[str, Figure]) -> dict[str, FigureOut]:
            return {k: FigureOut.of(v) for k, v in figures.items()}

        return cls(
            device_class=r.device_class,
            pool=r.pool,
            path=r.path,
            allocation_success=FigureOut.of(r.allocation_success),
            pending_to_bound=each(r.pending_to_bound),
            bound_to_ready=each(r.bound_to_ready),
            fragmentation=FigureOut.of(r.fragmentation),
            device_hours=each(r.device_hours),
            retry_rate=FigureOut.of(r.retry_rate),
        )


class AdoptionReportOut(ApiModel):
    """The comparison of ``deviceClass`` (DRA) against ``pluginResource`` (its
    ``extendedResourceName``; null: no plugin rows) over ``[windowStart, windowEnd]`` (event
    time: the health topic's watermark)."""

    device_class: str
    plugin_resource: str | None
    window_start: datetime
    window_end: datetime
    min_samples: int
    failure_counts: bool
    """Whether the DRA failure counts (``dra_failures``) were available to the rates."""
    rows: list[ReportRowOut]

    @classmethod
    def of(cls, r: Report, failure_counts: bool) -> AdoptionReportOut:
        return cls(
            device_class=r.device_class,
            plugin_resource=r.plugin_resource,
            window_start=r.window_start,
            window_end=r.window_end,
            min_samples=r.min_samples,
            failure_counts=failure_counts,
            rows=[ReportRowOut.of(row) for row in r.rows],
        )
