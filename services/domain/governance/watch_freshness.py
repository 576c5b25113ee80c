"""A silent watch, on event time (issue 15 item 3).

A watch connection that delivers neither events nor bookmarks for longer than the API server's
bookmark interval is probably half-open (kubernetes/kubernetes and client-go have reported such
hangs); the watcher's read timeout only covers a live connection. The watcher says when its watches
last delivered: every ``WatcherTick`` carries ``watch_seen_at``, the watcher's clock when its
quietest watch last delivered an event, a BOOKMARK or a LIST (or when the watcher started). The
tick of an older watcher, without it, and a ``WatermarkAdvanced`` (the clock of topics written
before issue 10) count as a delivery at their own time: it is all they say.

Records made from watch events (``HealthTransition``, ``NodeHeartbeat``...) are *not* evidence:
one watch (Leases) can be live while another (Pods) is silent, and the tick already reports the
quietest one within a tick interval.

The watch is *stale* when a record's event time is more than ``watch_stale_seconds`` past the
latest ``watch_seen_at``: decision ``WatchStale`` (alert firing, incident
``watch-stale/<last seen>``), dated at that record, once per silence. A tick reporting a delivery
within the setting makes it fresh again: ``WatchFresh`` (resolved). A record that moves the clock
and reports a fresh delivery at once (a watcher back after an outage of ours) raises nothing.
Only this fleet flag changes: devices never turn Unknown because the watch went quiet (the data is
old, the devices are not), and when nothing arrives at all, event time stops and nothing is
decided.
"""

from __future__ import annotations

from datetime import datetime

from services.domain.events import format_time
from services.domain.governance import context
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.inputs import GovernanceInput, WatermarkAdvanced
from services.domain.node_events import WatcherTick


def delivered_at(record: GovernanceInput) -> datetime | None:
    """When ``record`` says the watch last delivered (UTC), or ``None`` for a record that says
    nothing about it."""
    if isinstance(record, WatcherTick):
        return record.watch_seen_at if record.watch_seen_at is not None else record.observed_at
    if isinstance(record, WatermarkAdvanced):
        return record.event_time
    return None


def on_record(ctx: context.Ctx, record: GovernanceInput) -> None:
    """After ``record`` was folded (the clock at its time): take its report of the watch, then
    decide stale (``WatchStale``) or fresh again (``WatchFresh``)."""
    fleet = ctx.state.fleet
    at = delivered_at(record)
    if at is not None and ctx.now is not None:
        # A watch cannot have delivered after the record that says so: a tick's watchSeenAt
        # runs on the watcher's clock, which only its own observedAt is bounded against (the
        # worker bounds that by the broker's clock). Unbounded, one tick dated 9999 would hide
        # every later silence.
        at = min(at, ctx.now)
    if at is not None and (fleet.watch_seen_at is None or at > fleet.watch_seen_at):
        fleet.watch_seen_at = at
    now, seen = ctx.now, fleet.watch_seen_at
    if now is None or seen is None:
        return
    limit = ctx.policy.watch_stale_seconds
    stale = (now - seen).total_seconds() > limit
    incident = fleet.watch_stale_incident
    if stale and incident is None:
        fleet.watch_stale_incident = f"watch-stale/{format_time(seen)}"
        ctx.emit(
            DecisionKind.WATCH_STALE,
            now,
            incident=fleet.watch_stale_incident,
            alert=AlertAction.FIRING,
            severity=Severity.WARNING,
            summary=f"watch stale: no watch event, bookmark or LIST since {format_time(seen)} "
            f"(over {limit:g} s of event time); the directory may be old, devices keep their "
            "state",
            lastSeenAt=seen,
            silentSeconds=(now - seen).total_seconds(),
            staleSeconds=limit,
        )
    elif not stale and incident is not None:
        fleet.watch_stale_incident = None
        ctx.emit(
            DecisionKind.WATCH_FRESH,
            now,
            incident=incident,
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"watch fresh again: delivered at {format_time(seen)}",
            lastSeenAt=seen,
        )
