"""Node-wide faults as one incident (issue 15 item 5).

When every GPU of a node flips within a second, the governor quarantines each device (right),
but one page per GPU is a storm for one event (NVIDIA NVSentinel and node-problem-detector users
report such storms). Here the devices' faults are grouped:

- a *fault* is a device's observed health turning Unhealthy (a ``HealthTransition``, at its
  ``observed_at``);
- faults of one node within ``node_incident_window_seconds`` of each other, once they reach
  ``node_incident_share`` of the node's governed devices (and at least
  ``node_incident_min_devices``), open ONE node incident ``node-fault/<node>/<first fault>``
  listing its devices: ``NodeFaultIncidentOpened`` (alert firing, critical);
- a device of the node that faults while it is open joins it: ``NodeFaultIncidentUpdated`` (the
  same incident and alert, the longer list);
- it closes when none of its devices is held any more (no active quarantine, no alert of its
  own, not observed Unhealthy): ``NodeFaultIncidentClosed`` (resolved).

The devices' own quarantine records and decisions are unchanged; the alerts sender marks their
alerts with the incident (label ``nodeIncident``) so Alertmanager inhibits them while it fires
(``deploy/alertmanager/alertmanager.yml``). Event time only: the faults' times decide, and the
event-time merge gives every reader the same order, so a replay decides alike.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from services.domain.events import Health, format_time
from services.domain.governance import context
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.device_state import DeviceGov, QuarantineStatus
from services.domain.governance.state import NodeFault

REASON_NODE_FAULT = "node-wide-fault"


def on_fault(ctx: context.Ctx, device: DeviceGov, at: datetime) -> None:
    """``device`` turned Unhealthy at ``at``: join the node's open incident, or count the fault
    and open one if the node's recent faults now reach the share."""
    fleet = ctx.state.fleet
    name, rid = device.node, device.resource_id
    open_fault = fleet.node_faults.get(name)
    if open_fault is not None:
        if rid not in open_fault.members:
            open_fault.members = sorted([*open_fault.members, rid])
            _emit(ctx, DecisionKind.NODE_FAULT_UPDATED, open_fault, at, AlertAction.FIRING)
        return
    window = timedelta(seconds=ctx.policy.node_incident_window_seconds)
    # One entry per device (its latest fault), sorted by (time, resourceID), none older than the
    # window before the newest: a late record cannot make the order of arrival matter.
    latest: dict[str, datetime] = {}
    for t, r in [*fleet.recent_faults.get(name, ()), (at, rid)]:
        latest[r] = max(t, latest.get(r, t))
    newest = max(latest.values())
    faults = sorted((t, r) for r, t in latest.items() if t >= newest - window)
    devices = ctx.state.device_count(name)
    policy = ctx.policy
    if len(faults) < policy.node_incident_min_devices or len(faults) < (
        policy.node_incident_share * devices
    ):
        fleet.recent_faults[name] = faults
        fleet.faults_floor = None  # its newest fault may be the oldest: scan again
        return
    fleet.recent_faults.pop(name, None)
    opened = NodeFault(
        node=name,
        incident=f"node-fault/{name}/{format_time(faults[0][0])}",
        opened_at=at,
        members=sorted(r for _, r in faults),
    )
    fleet.node_faults[name] = opened
    _emit(ctx, DecisionKind.NODE_FAULT_OPENED, opened, at, AlertAction.FIRING)


def settle(ctx: context.Ctx) -> None:
    """End of a step: forget faults older than the window, and close the node incidents whose
    devices are no longer held (only nodes this step decided something about are looked at)."""
    fleet = ctx.state.fleet
    now = ctx.now
    if fleet.recent_faults and now is not None:
        horizon = now - timedelta(seconds=ctx.policy.node_incident_window_seconds)
        floor = fleet.faults_floor
        if floor is None or floor < horizon:  # else none is older than the window: no scan
            for name in [n for n, f in fleet.recent_faults.items() if f[-1][0] < horizon]:
                del fleet.recent_faults[name]
            fleet.faults_floor = min((f[-1][0] for f in fleet.recent_faults.values()), default=None)
    if not fleet.node_faults:
        return
    touched = {d.node for d in ctx.decisions if d.node is not None}
    for name in sorted(touched & set(fleet.node_faults)):
        fault = fleet.node_faults[name]
        devices = ctx.state.devices
        if any(_held(devices.get((name, rid))) for rid in fault.members):
            continue
        del fleet.node_faults[name]
        at = max(d.at for d in ctx.decisions if d.node == name)
        _emit(ctx, DecisionKind.NODE_FAULT_CLOSED, fault, at, AlertAction.RESOLVED)


def _held(device: DeviceGov | None) -> bool:
    if device is None:
        return False
    q = device.quarantine
    return (
        (q is not None and q.status is not QuarantineStatus.RELEASED)
        or device.alert_incident is not None
        or device.observed_health is Health.UNHEALTHY
    )


def _emit(
    ctx: context.Ctx, kind: DecisionKind, fault: NodeFault, at: datetime, alert: AlertAction
) -> None:
    count = ctx.state.device_count(fault.node)
    closing = alert is AlertAction.RESOLVED
    ctx.emit(
        kind,
        at,
        node=fault.node,
        incident=fault.incident,
        alert=alert,
        severity=Severity.INFO if closing else Severity.CRITICAL,
        summary=f"node {fault.node}: "
        + (
            f"node incident over, none of its {len(fault.members)} devices held any more"
            if closing
            else f"{len(fault.members)} of {count} devices faulted together "
            f"(within {ctx.policy.node_incident_window_seconds:g} s): one node incident; "
            "their device alerts are held back while it fires"
        ),
        reason=REASON_NODE_FAULT,
        devices=list(fault.members),
        nodeDevices=count,
        openedAt=fault.opened_at,
    )
