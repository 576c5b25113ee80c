"""The fleet governance status document of ``GET /v1/governance``.

:func:`governance_status` turns the governor's recorded state
(:class:`~services.adapters.projection.reads_governance.FleetStatus`: its snapshot, event-time
watermark, breaker, automation switch and counts) into a
:class:`~services.processes.api.schemas_governance.GovernanceOut` at a wall-clock time, deciding
whether observations are stale: the watermark more than :func:`staleness_threshold` seconds
behind the wall clock (or no watermark at all). Pure: no I/O, no errors raised.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from services.adapters.projection.reads_governance import FleetStatus
from services.domain.codec import parse_time
from services.domain.events import format_time
from services.processes.api.schemas_governance import (
    AutomationOut,
    BreakerOut,
    FleetGovernanceOut,
    GovernanceOut,
    NodeIncidentOut,
    WatchOut,
)
from services.runtime.config import TickSettings

STALE_SLACK_SECONDS: Final = 5.0
"""Added to twice the watcher's tick interval before observations count as stale."""


def staleness_threshold(settings: TickSettings) -> float:
    """Seconds the watermark may lag the wall clock before observations count as stale: two of
    the watcher's ticks plus a few seconds."""
    return 2 * settings.tick_interval_seconds + STALE_SLACK_SECONDS


def silent_partitions(snap: dict[str, Any]) -> list[int]:
    """Partitions of the device-health topic the event-time merge has no watermark from yet."""
    order = snap.get("order") or {}
    known = order.get("watermarks") or {}
    return [p for p in range(int(order.get("partitions") or 0)) if str(p) not in known]


def pending_records(order: dict[str, Any]) -> int:
    """How many records the event-time merge holds: the fleet row's ``pendingCount`` (the records
    are rows of their own, ``governor_pending``), or its ``pending`` list (a row written before)."""
    count = order.get("pendingCount")
    return int(count) if isinstance(count, int) else len(order.get("pending") or ())


def governance_status(fleet: FleetStatus, now: datetime, settings: TickSettings) -> GovernanceOut:
    """The status document of ``GET /v1/governance`` at wall-clock time ``now``."""
    threshold = staleness_threshold(settings)
    snap = fleet.snapshot
    age = None if fleet.watermark is None else (now - fleet.watermark).total_seconds()
    stale = age is None or age > threshold
    if not fleet.seen:
        message = "the governor has not recorded any state yet"
    elif fleet.watermark is None and silent_partitions(snap):
        order = snap.get("order") or {}
        message = (
            f"no watermark yet from device-health partition(s) "
            f"{', '.join(map(str, silent_partitions(snap)))}: the governor holds "
            f"{pending_records(order)} record(s) until every partition has reported "
            "(the watcher ticks every partition; is it running, and on this topic?)"
        )
    elif fleet.watermark is None:
        message = "no watermark yet: the governor has not received the watcher's ticks"
    elif stale:
        message = (
            f"observations stale since {format_time(fleet.watermark)}: the watermark is "
            f"{age:.0f} s behind the wall clock (threshold {threshold:.0f} s)"
        )
    else:
        message = (
            f"observations current (watermark {age:.0f} s behind the wall clock)"
            if age is None or age >= 0
            else f"observations current (watermark {-age:.0f} s ahead of the wall clock: a "
            "recorded stream or clock skew)"
        )
    order = snap.get("order") or {}
    clamped = int(order.get("clamped") or 0)
    if clamped:
        message += (
            f"; event time clamped to the broker's clock for {clamped} record(s), last at "
            f"{order.get('lastClampedAt')} (a watcher clock or recorded stream ahead of time)"
        )
    if fleet.breaker_open:
        message += "; circuit breaker OPEN"
    if fleet.automation_paused:
        message += "; automation PAUSED"
    levels = fleet_governance(fleet)
    if levels.watch.stale:
        message += f"; watch STALE (no event or bookmark since {_text(levels.watch.last_seen_at)})"
    if levels.node_incidents:
        message += f"; {len(levels.node_incidents)} node incident(s) open"

    # The event-time merge keeps per-partition watermarks of its own (issue 10); older states
    # (and governors driven by WatermarkAdvanced records) keep them in the fleet itself.
    watermarks = order.get("watermarks") or snap.get("watermarks") or {}
    return GovernanceOut(
        governor_seen=fleet.seen,
        watermark=fleet.watermark,
        watermarks={str(p): t for p, t in ((p, opt_time(v)) for p, v in watermarks.items()) if t},
        pending=pending_records(order),
        clamped=clamped,
        last_clamped_at=opt_time(order.get("lastClampedAt")),
        watermark_age_seconds=age,
        stale=stale,
        stale_since=fleet.watermark if stale else None,
        stale_threshold_seconds=threshold,
        message=message,
        breaker=levels.breaker,
        automation=levels.automation,
        active_quarantines=fleet.active_quarantines,
        deferred=len(snap.get("deferred") or ()),
        nodes_heartbeat_lost=fleet.nodes_heartbeat_lost,
        devices=sum(fleet.by_state.values()),
        devices_by_state=fleet.by_state,
        watch=levels.watch,
        node_incidents=levels.node_incidents,
    )


def opt_time(value: Any) -> datetime | None:
    return None if not isinstance(value, str) else parse_time(value)


def _text(value: datetime | None) -> str:
    return "?" if value is None else format_time(value)


def fleet_governance(fleet: FleetStatus) -> FleetGovernanceOut:
    """The fleet-level governance state of ``GET /v1/fleet`` (and ``GET /v1/governance``): the
    breaker, the automation switch, the watch's freshness and the open node incidents, as the
    governor's fleet snapshot holds them (:class:`~services.domain.governance.state.FleetGov`)."""
    snap = fleet.snapshot
    incident = snap.get("watchStaleIncident")
    faults = snap.get("nodeFaults") or {}
    return FleetGovernanceOut(
        governor_seen=fleet.seen,
        breaker=BreakerOut(
            open=fleet.breaker_open,
            opened_at=opt_time(snap.get("breakerOpenedAt")) if fleet.breaker_open else None,
            incident=snap.get("breakerIncident") if fleet.breaker_open else None,
        ),
        automation=AutomationOut(
            paused=fleet.automation_paused,
            paused_by=snap.get("pausedBy") if fleet.automation_paused else None,
            reason=snap.get("pauseReason") if fleet.automation_paused else None,
        ),
        watch=WatchOut(
            stale=incident is not None,
            last_seen_at=opt_time(snap.get("watchSeenAt")),
            incident=incident,
        ),
        node_incidents=[
            NodeIncidentOut(
                node=name,
                incident=fault["incident"],
                opened_at=parse_time(fault["openedAt"]),
                devices=list(fault.get("members") or ()),
            )
            for name, fault in sorted(faults.items())
        ],
    )
