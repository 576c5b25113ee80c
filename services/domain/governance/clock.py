"""Event time in the governor: the fleet watermark advances and fires every timer due at it.

The watermark is the minimum over the device-health topic's partitions of the forwarded
``WatermarkAdvanced`` times (``None`` until every partition reported one). Timers are heap entries
``(due, kind, node, resourceID)`` in :class:`~.state.GovernorState`; heartbeat timers go to
:mod:`.nodes`, device timers to :func:`.rules.evaluate`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from services.domain.governance import context, limits, nodes, quarantine_age, rules
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.device_state import GovState
from services.domain.governance.inputs import MergeKey, WatermarkAdvanced
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import TimerKind, device_deadlines


def on_watermark(ctx: context.Ctx, w: WatermarkAdvanced) -> None:
    """A ``WatermarkAdvanced`` record (the clock of governance topics written before issue 10,
    and of tests that drive the governor directly): the fleet clock is the minimum over the
    partitions' watermarks."""
    fleet = ctx.state.fleet
    fleet.partitions = w.partitions
    previous = fleet.watermarks.get(w.partition)
    if previous is None or w.event_time > previous:
        fleet.watermarks[w.partition] = w.event_time
    if any(p not in fleet.watermarks for p in range(fleet.partitions)):
        return
    advance(ctx, min(fleet.watermarks[p] for p in range(fleet.partitions)), every_time=True)


CLOCK_AHEAD: Final = "clock-ahead"
"""``conflict`` of the data-quality alert of a partition whose records' ``observedAt`` ran ahead of
the broker's clock by more than the allowed skew (their event time was clamped)."""


def on_key(ctx: context.Ctx, key: MergeKey) -> None:
    """A record released by the event-time merge: move the clock to its key time, and raise (a
    clamped key) or resolve (the partition's next unclamped one) the partition's clock-ahead
    alert, once per episode."""
    advance(ctx, key.event_time)
    fleet = ctx.state.fleet
    flagged = key.partition in fleet.clock_ahead
    if key.clamped == flagged:
        return
    if key.clamped:
        fleet.clock_ahead = sorted([*fleet.clock_ahead, key.partition])
        detail = (
            f"observedAt ran ahead of the broker's append time by more than the allowed skew "
            f"(record {key.partition}/{key.offset}); event time clamped to {key.event_time}"
        )
    else:
        fleet.clock_ahead = [p for p in fleet.clock_ahead if p != key.partition]
        detail = f"observedAt within the allowed skew again (record {key.partition}/{key.offset})"
    ctx.emit(
        DecisionKind.DATA_QUALITY,
        key.event_time,
        incident=f"data-quality/{CLOCK_AHEAD}/partition-{key.partition}",
        alert=AlertAction.FIRING if key.clamped else AlertAction.RESOLVED,
        severity=Severity.WARNING if key.clamped else Severity.INFO,
        summary=f"{CLOCK_AHEAD} on device-health partition {key.partition}: {detail}",
        conflict=CLOCK_AHEAD,
        subject=f"partition-{key.partition}",
        detail=detail,
        active=key.clamped,
    )


def advance(ctx: context.Ctx, low: datetime, *, every_time: bool = False) -> None:
    """Move the fleet clock to ``low`` (never back) and fire everything due by then: the timers
    (earliest first), then the node buckets' refill and the deferred devices. The event-time
    merge calls it with each released record's key time, before the record is folded (issue 10).

    The buckets and the deferred devices are looked at when the clock crosses into a new
    refill period (the shorter of the fleet's and the nodes' refill seconds, on a grid from the
    epoch), not at every record: a deferred device can only get a token when one has been
    refilled, and going through them before every record cost the governor four times its
    time. The grid is a function of event time, so a replay looks at them at the same records.
    ``every_time`` (the ``WatermarkAdvanced`` clock of older topics) looks at each advance."""
    fleet = ctx.state.fleet
    previous = fleet.watermark
    if previous is not None and low <= previous:
        return
    fleet.watermark = low
    fire_due(ctx)
    if not (every_time or _new_refill_period(ctx.policy, previous, low)):
        return
    # A bucket full at the restriction clock is the same as no bucket (every later restriction
    # is dated at or after that clock): drop them so the fleet snapshot stays small.
    clock = None if fleet.fleet_bucket is None else fleet.fleet_bucket.updated_at
    for name, bucket in sorted(fleet.node_buckets.items()):
        if clock is None:
            break
        limits.refill(
            bucket, clock, ctx.policy.restrict_node_burst, ctx.policy.restrict_node_refill_seconds
        )
        if bucket.tokens >= ctx.policy.restrict_node_burst:
            del fleet.node_buckets[name]
    for key in list(fleet.deferred):
        device = ctx.state.devices.get(key)
        if device is not None and device.state is GovState.DEFERRED:
            rules.evaluate(ctx, device, low)


def _new_refill_period(policy: GovernancePolicy, previous: datetime | None, now: datetime) -> bool:
    period = min(policy.restrict_fleet_refill_seconds, policy.restrict_node_refill_seconds)
    if previous is None or period <= 0:
        return True
    return int(previous.timestamp() // period) != int(now.timestamp() // period)


def fire_due(ctx: context.Ctx) -> None:
    """Fire every live timer due at the watermark, earliest first (ties in key order).

    A heap entry whose deadline is no longer one of the device's (or the node's) current
    deadlines is dropped unfired, so what fires depends on the state only -- the same after a
    restore, which rebuilds the heap from the state.
    """
    state = ctx.state
    watermark = state.fleet.watermark
    if watermark is None:
        return
    while (entry := state.pop_due(watermark)) is not None:
        due, kind, node, resource_id = entry
        if kind == TimerKind.HEARTBEAT.value:
            nodes.check_heartbeat(ctx, node, due)
            continue
        device = state.devices.get((node, resource_id))
        if device is not None and due in device_deadlines(device):
            quarantine_age.check(ctx, device, due)
            rules.evaluate(ctx, device, due)
