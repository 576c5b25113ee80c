"""Node facts in the governor: Lease heartbeats, device-plugin loss, node escalation, and the
circuit breaker's signals."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from services.domain.events import DeviceSource, Health, format_time
from services.domain.governance import context, limits, rules
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.fleet_state import NodeGov
from services.domain.governance.state import (
    TimerKind,
)
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged

# --- nodes --------------------------------------------------------------------------------------


def on_heartbeat(ctx: context.Ctx, h: NodeHeartbeat) -> None:
    # A renewal the watcher saw cannot be later than when it saw it: a kubelet clock running
    # ahead (renewTime in 2036, or 9999) would otherwise hide the node's heartbeat loss for good.
    # observedAt itself is bounded by the broker's clock (services.domain.event_time).
    renewed_at = min(h.renewed_at, h.observed_at)
    if renewed_at != h.renewed_at:
        h = replace(h, renewed_at=renewed_at)
    node = context.node_of(ctx, h.node)
    if node.last_renewed_at is not None and h.renewed_at <= node.last_renewed_at:
        return
    node.last_renewed_at = h.renewed_at
    grace = timedelta(seconds=ctx.policy.heartbeat_grace_seconds)
    if h.renewed_at <= datetime.max.replace(tzinfo=UTC) - grace:  # a 9999 record: no deadline
        ctx.state.schedule(h.renewed_at + grace, TimerKind.HEARTBEAT, h.node)
    if node.heartbeat_lost_since is not None:
        ctx.emit(
            DecisionKind.NODE_INCIDENT_CLOSED,
            h.renewed_at,
            node=h.node,
            incident=node.incident,
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"node {h.node}: heartbeat back",
            reason=context.REASON_HEARTBEAT,
            lostSince=node.heartbeat_lost_since,
        )
        node.heartbeat_lost_since = None
        node.incident = None
        for device in ctx.state.devices_on(h.node):
            rules.evaluate(ctx, device, h.renewed_at)


def check_heartbeat(ctx: context.Ctx, name: str, due: datetime) -> None:
    node = ctx.state.nodes.get(name)
    grace = timedelta(seconds=ctx.policy.heartbeat_grace_seconds)
    if node is None or node.heartbeat_lost_since is not None or node.last_renewed_at is None:
        return
    if node.last_renewed_at > due - grace:
        return  # renewed since this timer was set
    ctx.state.dirty_nodes.add(name)
    node.heartbeat_lost_since = node.last_renewed_at
    node.incident = f"node-heartbeat/{name}/{format_time(node.last_renewed_at)}"
    devices = ctx.state.devices_on(name)
    ctx.emit(
        DecisionKind.NODE_INCIDENT_OPENED,
        due,
        node=name,
        incident=node.incident,
        alert=AlertAction.FIRING,
        severity=Severity.CRITICAL,
        summary=f"node {name}: heartbeat lost since {format_time(node.last_renewed_at)}; "
        f"its {len(devices)} devices read Unknown",
        reason=context.REASON_HEARTBEAT,
        lastRenewedAt=node.last_renewed_at,
        devices=len(devices),
    )
    signal(ctx, due, name, "")
    for device in devices:
        rules.evaluate(ctx, device, due)


def on_resources(ctx: context.Ctx, r: NodeResourcesChanged) -> None:
    node = context.node_of(ctx, r.node)
    node.capacity = dict(r.capacity)
    node.allocatable = dict(r.allocatable)
    sync_plugin_loss(ctx, r.node, r.observed_at)


def unexplained_loss(
    ctx: context.Ctx, node: NodeGov, names: Iterable[str] | None = None
) -> dict[str, int]:
    """Per extended resource (``names``, or all), how many devices are in the node's capacity but
    not allocatable, less those the governor knows Unhealthy (> 0 only).

    kubelet's allocatable counts a device plugin's *healthy* devices (its ListAndWatch health),
    capacity all of them: a device the plugin reports Unhealthy is missing from allocatable and
    shows Unhealthy in the Pod holding it (KEP-4680). That gap is the device's own fault, not a
    plugin that lost devices, so it opens no node incident. A device Unhealthy that no Pod holds
    is not known here and still reads as lost (conservative). Scans the node's devices only
    while something is missing."""
    missing = {
        name: count - node.allocatable.get(name, 0)
        for name, count in node.capacity.items()
        if count > node.allocatable.get(name, 0) and (names is None or name in names)
    }
    if not missing:
        return {}
    unhealthy: Counter[str] = Counter(
        d.resource_name
        for d in ctx.state.devices_on(node.node)
        if d.source is DeviceSource.DEVICE_PLUGIN
        and d.resource_name in missing
        and d.observed_health is Health.UNHEALTHY
    )
    return {n: c - unhealthy[n] for n, c in sorted(missing.items()) if c > unhealthy[n]}


def sync_plugin_loss(
    ctx: context.Ctx, name: str, at: datetime, names: frozenset[str] | None = None
) -> None:
    """Open or close the node's ``device-plugin-lost`` incidents (of ``names``, or every
    resource) from its last capacity and allocatable and the devices known Unhealthy, and
    re-evaluate the device-plugin devices of each resource that changed. Called on a node's
    resources and when a device-plugin device turns Unhealthy or stops being so."""
    node = ctx.state.nodes.get(name)
    if node is None:
        return  # no resources recorded for the node: nothing is missing
    lost = unexplained_loss(ctx, node, names)
    changed: set[str] = set()
    for resource, count in lost.items():
        if resource in node.plugin_lost:
            continue
        node.plugin_lost[resource] = at
        node.plugin_incidents[resource] = f"device-plugin/{name}/{resource}/{format_time(at)}"
        changed.add(resource)
        ctx.emit(
            DecisionKind.NODE_INCIDENT_OPENED,
            at,
            node=name,
            incident=node.plugin_incidents[resource],
            alert=AlertAction.FIRING,
            severity=Severity.WARNING,
            summary=f"node {name}: {count} of {node.capacity[resource]} {resource} not allocatable "
            "(device plugin lost devices)",
            reason=context.REASON_PLUGIN,
            resourceName=resource,
            missing=count,
            capacity=node.capacity[resource],
        )
        signal(ctx, at, name, "")
    for resource in sorted(set(node.plugin_lost) - set(lost)):
        if names is not None and resource not in names:
            continue
        since = node.plugin_lost.pop(resource)
        ctx.emit(
            DecisionKind.NODE_INCIDENT_CLOSED,
            at,
            node=name,
            incident=node.plugin_incidents.pop(resource, None),
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"node {name}: {resource} allocatable again",
            reason=context.REASON_PLUGIN,
            resourceName=resource,
            lostSince=since,
            lostSeconds=(at - since).total_seconds(),
        )
        changed.add(resource)
    if not changed:
        return  # nothing to re-evaluate: no scan of the node per resource record (issue 11)
    for device in ctx.state.devices_on(name):
        if device.resource_name in changed and device.source is DeviceSource.DEVICE_PLUGIN:
            rules.evaluate(ctx, device, at)


def check_escalation(ctx: context.Ctx, name: str, at: datetime) -> None:
    # O(1): counts kept by the state's node index, not a scan of the node (issue 11).
    count = ctx.state.device_count(name)
    if not count:
        return
    bad = ctx.state.index.unhealthy_count(name)
    node = context.node_of(ctx, name)
    policy = ctx.policy
    over = bad >= policy.node_escalation_min_devices and bad >= policy.node_escalation_share * count
    if over and node.escalation_incident is None:
        node.escalation_incident = f"escalation/{name}/{format_time(at)}"
        ctx.emit(
            DecisionKind.NODE_ESCALATION_RECOMMENDED,
            at,
            node=name,
            incident=node.escalation_incident,
            alert=AlertAction.FIRING,
            severity=Severity.CRITICAL,
            summary=f"node {name}: {bad} of {count} devices Unhealthy; node-level action "
            "recommended (devicestate edits no Node or Pod)",
            unhealthy=bad,
            devices=count,
        )
    elif not over and node.escalation_incident is not None:
        ctx.emit(
            DecisionKind.NODE_ESCALATION_RECOMMENDED,
            at,
            node=name,
            incident=node.escalation_incident,
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=f"node {name}: {bad} of {count} devices Unhealthy; recommendation over",
            unhealthy=bad,
            devices=count,
        )
        node.escalation_incident = None


# --- breaker ------------------------------------------------------------------------------------


def signal(ctx: context.Ctx, at: datetime, node: str, resource_id: str) -> None:
    state = ctx.state
    fleet = state.fleet
    known_nodes = len(state.node_names)
    reading = limits.record_signal(
        fleet, at, node, resource_id, ctx.policy, len(state.devices), known_nodes
    )
    if fleet.breaker_open or not reading.tripped(ctx.policy):
        return
    fleet.breaker_open = True
    fleet.breaker_opened_at = at
    fleet.breaker_incident = f"breaker/{format_time(at)}"
    ctx.emit(
        DecisionKind.BREAKER_OPENED,
        at,
        incident=fleet.breaker_incident,
        alert=AlertAction.FIRING,
        severity=Severity.CRITICAL,
        summary=f"mass signal: {reading.devices} devices on {reading.nodes} nodes turned "
        f"Unknown/Unhealthy within {ctx.policy.breaker_window_seconds:g} s; automatic "
        "restriction stopped until an operator resets the breaker",
        devices=reading.devices,
        nodes=reading.nodes,
        knownDevices=reading.known_devices,
        knownNodes=reading.known_nodes,
    )
