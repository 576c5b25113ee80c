"""The governor: ``step(state, record, seq, policy) -> decisions`` (issue 3).

One record of the governance topic at a time, in topic order. Time is *event time*: the
fleet watermark (the minimum over the device-health topic's partitions of the forwarded
``WatermarkAdvanced`` times) fires every timer -- Unknown tolerance, heartbeat loss, recovery stage
timeouts, stability windows, quarantine expiry, hold-downs -- so a replay makes the same decisions,
and when the watcher stops, event time stops and no device changes state because of our outage.

Rules (the design is in ``docs/governance.md``):

- Unhealthy -> a quarantine at once (subject to the blast-radius limits), alert.
- Unknown (Pod status ``Unknown``, an unrecognised value, a node whose heartbeat is lost, a device
  plugin that lost devices) -> ``UnknownTolerated`` for a window that grows for a device that keeps
  going Unknown; ``Restricted`` only when it expires. Node-level reasons raise ONE node incident.
- Automatic restrictions take a token from the node's and the fleet's bucket; a tripped breaker or
  paused automation defers them until an operator acts.
- A quarantined device reporting Healthy goes probe -> canary -> stability before release; any
  failure extends the quarantine. Flapping devices stay quarantined.
- Devices of one node faulting together are one node incident (:mod:`.node_faults`); a watch
  silent past ``watch_stale_seconds`` is stale (:mod:`.watch_freshness`), devices unchanged.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from services.domain.directory import version_rank
from services.domain.events import DeviceSource, Health
from services.domain.governance import (
    adoption_verdicts,
    clock,
    commands,
    context,
    identities,
    leases,
    migrations,
    node_faults,
    nodes,
    rules,
    watch_freshness,
)
from services.domain.governance.decisions import AlertAction, Decision, DecisionKind, Severity
from services.domain.governance.device_state import DeviceGov
from services.domain.governance.driver_taints import on_taints
from services.domain.governance.inputs import (
    DeviceIdentified,
    GovernanceInput,
    HealthTransition,
    InventoryConflict,
    MergeKey,
    OperatorCommand,
    RecoveryLeaseRequested,
    RecoveryReport,
    WatermarkAdvanced,
)
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.governance.taint_inputs import DeviceTaintsObserved
from services.domain.migration.records import (
    MigrationEvidence,
    MigrationReport,
    WorkloadOnDevice,
)
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
CEILING_CONFLICT: Final = "device-ceiling"
"""``conflict`` of the data-quality decision of a node at ``max_devices_per_node``."""

# --- entry point ------------------------------------------------------------------------------


def step(
    state: GovernorState,
    record: GovernanceInput,
    seq: int,
    policy: GovernancePolicy,
    key: MergeKey | None = None,
) -> list[Decision]:
    """Apply one governance record, the ``seq``-th the governor folds, to ``state`` (mutated).

    ``key`` is the record's place in event time when it comes out of the event-time merge
    (:mod:`.event_order`): the clock first moves to its time (UTC) and every timer due by then
    fires, so a timer fires between the records on either side of its due time; a clamped key
    raises the partition's clock-ahead alert (:func:`.clock.on_key`). ``None``: a record outside
    the merge (a command, a recovery record, a legacy ``WatermarkAdvanced`` stream).

    Returns the decisions it caused, in order; ids are ``f"{seq}.{index}"``. Deterministic: the same
    records from the same state give the same decisions and state, whatever the wall clock says.
    Touched rows are added to ``state.dirty_devices``/``dirty_nodes``/``touched_quarantines``.
    """
    ctx = context.Ctx(state, seq, policy)
    if key is not None:
        clock.on_key(ctx, key)
    if isinstance(record, HealthTransition):
        on_transition(ctx, identities.follow(state, record))
    elif isinstance(record, DeviceIdentified):
        identities.on_identified(ctx, record)
    elif isinstance(record, WatermarkAdvanced):
        clock.on_watermark(ctx, record)
    elif isinstance(record, NodeHeartbeat):
        nodes.on_heartbeat(ctx, record)
    elif isinstance(record, NodeResourcesChanged):
        nodes.on_resources(ctx, record)
    elif isinstance(record, OperatorCommand):
        commands.on_command(ctx, record)
    elif isinstance(record, RecoveryLeaseRequested):
        leases.on_lease_request(ctx, record)
    elif isinstance(record, InventoryConflict):
        on_conflict(ctx, record)
    elif isinstance(record, RecoveryReport):
        leases.on_report(ctx, record)
    elif isinstance(record, DeviceTaintsObserved):
        on_taints(ctx, record)  # issue 15: ResourceSlice device taints
    elif isinstance(record, WorkloadOnDevice):
        migrations.on_workload(ctx, record)
    elif isinstance(record, MigrationReport):
        migrations.on_report(ctx, record)
    elif isinstance(record, MigrationEvidence):
        migrations.on_evidence(ctx, record)
    # A WatcherTick only moves the clock (``at``) and reports the watch (``watch_freshness``); a
    # PartitionWatermark is the merge's, not ours.
    clock.fire_due(ctx)
    watch_freshness.on_record(ctx, record)
    node_faults.settle(ctx)
    migrations.after_step(ctx)
    adoption_verdicts.after_step(ctx, record, record_time(record, ctx), key)
    return ctx.decisions


def record_time(record: GovernanceInput, ctx: context.Ctx) -> datetime:
    """The time of a decision the adoption gate makes before the governor has event time: the
    last decision's, else the record's own (UTC); a record without one gives the epoch."""
    if ctx.decisions:
        return ctx.decisions[-1].at
    for name in ("observed_at", "requested_at", "event_time", "at", "reported_at"):
        value = getattr(record, name, None)
        if isinstance(value, datetime):
            return value
    return EPOCH


# --- observations -----------------------------------------------------------------------------


def refusal(state: GovernorState, record: GovernanceInput, policy: GovernancePolicy) -> str | None:
    """Why the governor will not govern ``record``, or ``None``: a :class:`HealthTransition` of a
    device new to a node that already has ``policy.max_devices_per_node`` governed devices (issue
    11: one hot node must not cost the fleet's governance). O(1). The worker's governor agent
    dead-letters such a record with this reason; :func:`step` refuses it the same way (and flags
    the node once), so a replay decides alike."""
    if not isinstance(record, HealthTransition):
        return None
    record = identities.follow(state, record)
    if record.device_key in state.devices:
        return None
    count = state.device_count(record.node)
    if count < policy.max_devices_per_node:
        return None
    return (
        f"device ceiling: node {record.node} already has {count} governed devices "
        f"(max_devices_per_node={policy.max_devices_per_node}); {record.device_key[1]} is not governed"
    )


def on_transition(ctx: context.Ctx, t: HealthTransition) -> None:
    state = ctx.state
    refused = refusal(state, t, ctx.policy)
    if refused is not None:
        flag_ceiling(ctx, t, refused)
        return
    device = state.devices.get(t.device_key)
    if device is not None:
        if device.status_version is not None and version_rank(t.status_version) <= version_rank(
            device.status_version
        ):
            return  # duplicate or stale (the idempotency key is (node, resourceID, statusVersion))
        if (
            device.status_version is None
            and t.status_version is None
            and (device.observed_health is t.health)
        ):
            return
    if device is None:
        device = DeviceGov(
            node=t.node,
            resource_id=t.device_key[1],
            resource_name=t.resource_name,
            source=t.source,
            observed_health=t.health,
            observed_at=t.observed_at,
            state_since=t.observed_at,
        )
        state.add_device(device)
        previous: Health | None = None
    else:
        previous = device.observed_health
    was_bad = previous is not None and rules.effective(state, device)[0] is not Health.HEALTHY
    device.observed_health = t.health
    state.refresh(device)
    device.observed_at = t.observed_at
    device.status_version = t.status_version
    device.raw_health = t.raw_health
    device.message = t.message
    device.resource_name = t.resource_name
    device.source = t.source
    device.resource_claim = t.resource_claim or device.resource_claim
    device.pods = t.pods
    device.reported_id = t.resource_id
    device.uuid = t.uuid or device.uuid
    if t.health is Health.UNHEALTHY and previous is not Health.UNHEALTHY:
        horizon = t.observed_at - timedelta(seconds=ctx.policy.flap_window_seconds)
        device.unhealthy_transitions = (
            *(x for x in device.unhealthy_transitions if x > horizon),
            t.observed_at,
        )
    if not was_bad and rules.effective(state, device)[0] is not Health.HEALTHY:
        nodes.signal(ctx, t.observed_at, device.node, device.resource_id)
    ctx.touch(device)
    if t.health is Health.UNHEALTHY and previous is not Health.UNHEALTHY:
        # Before the device's own decisions: its alert is marked with the incident at once.
        node_faults.on_fault(ctx, device, t.observed_at)
    if device.source is DeviceSource.DEVICE_PLUGIN and (
        (t.health is Health.UNHEALTHY) is not (previous is Health.UNHEALTHY)
    ):
        # An Unhealthy device explains one device missing from the node's allocatable.
        nodes.sync_plugin_loss(ctx, device.node, t.observed_at, frozenset({device.resource_name}))
    rules.evaluate(ctx, device, t.observed_at)
    nodes.check_escalation(ctx, device.node, t.observed_at)


# --- data quality -------------------------------------------------------------------------------


def flag_ceiling(ctx: context.Ctx, t: HealthTransition, reason: str) -> None:
    """One data-quality decision per node that reached the device ceiling (the first refusal);
    later refusals only go to the dead-letter topic. Devices are never removed from the governor,
    so the node stays at its ceiling and the flag is never resolved."""
    node = ctx.state.nodes.get(t.node)
    if node is not None and node.ceiling_incident is not None:
        return
    node = context.node_of(ctx, t.node)
    node.ceiling_incident = f"data-quality/{CEILING_CONFLICT}/{t.node}"
    ctx.emit(
        DecisionKind.DATA_QUALITY,
        t.observed_at,
        node=t.node,
        incident=node.ceiling_incident,
        alert=AlertAction.FIRING,
        severity=Severity.WARNING,
        summary=f"{CEILING_CONFLICT} on {t.node}: {reason}",
        conflict=CEILING_CONFLICT,
        subject=t.node,
        detail=reason,
        active=True,
        ceiling=ctx.policy.max_devices_per_node,
    )


def on_conflict(ctx: context.Ctx, c: InventoryConflict) -> None:
    """An inventory conflict is an alert of its own (issue 4: flagged, never merged silently)."""
    ctx.emit(
        DecisionKind.DATA_QUALITY,
        c.observed_at,
        node=c.node,
        incident=f"data-quality/{c.kind}/{c.node}/{c.subject}",
        alert=AlertAction.FIRING if c.active else AlertAction.RESOLVED,
        severity=Severity.WARNING if c.active else Severity.INFO,
        summary=f"{c.kind} on {c.node}: {c.subject}: {c.detail}",
        conflict=c.kind,
        subject=c.subject,
        detail=c.detail,
        active=c.active,
    )
