"""The alerts of a node-wide fault (issue 15 item 5), on what the real governor decides: one
``NodeFaultIncident`` alert, and every device alert of its devices marked ``nodeIncident`` (those
that fired before the incident opened are posted again with the label, their old label set
resolved); the stale-watch alert maps too."""

from __future__ import annotations

from services.domain.governance.decisions import AlertAction, Decision, DecisionKind
from services.processes.alerts.mapping import ActiveAlerts, Alert
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import transition, watermark
from tests.governance.test_machine import N1, N2, H, U
from tests.governance.test_node_incidents import GPUS, POLICY

INCIDENT = "node-fault/node-1/2026-11-29T12:00:10Z"


def eight_faults() -> list[Decision]:
    run = GovernanceRun(policy=POLICY)
    for i, gpu in enumerate(GPUS):
        run.feed(transition(N1, gpu, H, i + 1, 0))
        run.feed(transition(N2, gpu, H, i + 1, 0))
    run.feed(watermark(10))
    for i, gpu in enumerate(GPUS):
        run.feed(transition(N1, gpu, U, 100 + i, 10 + i * 0.1))
    run.feed(transition(N2, GPUS[0], U, 200, 11))  # another node: not in the incident
    return run.decisions


def posted(decisions: list[Decision]) -> tuple[ActiveAlerts, list[Alert]]:
    active = ActiveAlerts()
    return active, [a for d in decisions for a in active.apply(d)]


def test_one_node_alert_and_every_device_alert_marked_with_it() -> None:
    active, alerts = posted(eight_faults())
    firing = {a["labels"]["incident"]: a["labels"] for a in active.firing()}
    node = firing[INCIDENT]
    assert node["alertname"] == "NodeFaultIncident" and node["nodeIncident"] == INCIDENT
    assert node["severity"] == "critical" and node["reason"] == "node-wide-fault"
    devices = {i: labels for i, labels in firing.items() if labels.get("resourceID")}
    on_node_1 = {i: labels for i, labels in devices.items() if labels["node"] == N1}
    assert len(on_node_1) == 8
    assert {labels.get("nodeIncident") for labels in on_node_1.values()} == {INCIDENT}
    (other,) = [labels for labels in devices.values() if labels["node"] == N2]
    assert "nodeIncident" not in other
    # the three quarantined before the incident opened: their unmarked alert was resolved
    unmarked_ended = [
        a["labels"]["resourceID"]
        for a in alerts
        if "endsAt" in a and "nodeIncident" not in a["labels"] and a["labels"].get("resourceID")
    ]
    assert unmarked_ended == GPUS[:3]
    assert len([a for a in alerts if a["labels"]["incident"] == INCIDENT]) == 5  # open + 4 joins


def test_closing_resolves_the_node_alert_with_its_labels_and_stops_marking() -> None:
    decisions = eight_faults()
    active, _ = posted(decisions)
    opened = next(d for d in decisions if d.kind is DecisionKind.NODE_FAULT_OPENED)
    closed = Decision(
        kind=DecisionKind.NODE_FAULT_CLOSED,
        seq=999,
        index=0,
        at=opened.at,
        node=N1,
        incident=INCIDENT,
        alert=AlertAction.RESOLVED,
        details={"devices": GPUS, "reason": "node-wide-fault"},
    )
    (resolved,) = active.apply(closed)
    assert resolved["labels"]["nodeIncident"] == INCIDENT and "endsAt" in resolved
    assert resolved["labels"]["severity"] == "critical"  # the labels it fired with
    later = Decision(
        kind=DecisionKind.QUARANTINED,
        seq=1000,
        index=0,
        at=opened.at,
        node=N1,
        resource_id="GPU-9",
        incident="quarantine/node-1/GPU-9@1",
        alert=AlertAction.FIRING,
    )
    (alert,) = active.apply(later)
    assert "nodeIncident" not in alert["labels"]


def test_snapshot_restore_keeps_the_node_incidents() -> None:
    decisions = eight_faults()
    active = ActiveAlerts()
    opened_at = next(i for i, d in enumerate(decisions) if d.kind is DecisionKind.NODE_FAULT_OPENED)
    for d in decisions[: opened_at + 1]:
        active.apply(d)
    snapshot = active.snapshot()
    active.clear()
    active.restore(snapshot)
    late = [d for d in decisions[opened_at + 1 :] if d.kind is DecisionKind.QUARANTINED]
    (alert,) = active.apply(late[0])
    assert alert["labels"]["nodeIncident"] == INCIDENT


def test_the_stale_watch_alert() -> None:
    stale = Decision(
        kind=DecisionKind.WATCH_STALE,
        seq=1,
        index=0,
        at=watermark(0).event_time,
        incident="watch-stale/2026-11-29T12:00:00Z",
        alert=AlertAction.FIRING,
    )
    (alert,) = ActiveAlerts().apply(stale)
    assert alert["labels"]["alertname"] == "WatchStale"
    assert "nodeIncident" not in alert["labels"]
