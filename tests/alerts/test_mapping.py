"""Decision -> Alertmanager alert: names, labels, annotations, and firing/resolved identity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.domain.codec import parse_time
from services.domain.governance.decisions import (
    AlertAction,
    Decision,
    DecisionKind,
    Severity,
    decode_decision,
    encode_decision,
)
from services.processes.alerts.mapping import (
    ActiveAlerts,
    alert_from_decision,
    alert_labels,
    alert_name,
    camel_case,
    device_url,
    pod_namespaces,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
QUARANTINE = "quarantine/gpu-node-b/GPU-a5ced723/gpu-node-b/GPU-a5ced723@51234"


def decision(
    kind: DecisionKind = DecisionKind.QUARANTINED,
    *,
    seq: int = 7,
    index: int = 0,
    at: float = 0,
    node: str | None = "gpu-node-b",
    resource_id: str | None = "GPU-a5ced723",
    incident: str | None = QUARANTINE,
    alert: AlertAction | None = AlertAction.FIRING,
    severity: Severity | None = Severity.CRITICAL,
    summary: str = "GPU-a5ced723 on gpu-node-b quarantined: Unhealthy",
    details: dict[str, Any] | None = None,
) -> Decision:
    return Decision(
        kind=kind,
        seq=seq,
        index=index,
        at=T0 + timedelta(seconds=at),
        node=node,
        resource_id=resource_id,
        incident=incident,
        alert=alert,
        severity=severity,
        summary=summary,
        details={"quarantineID": "q1", "reason": "Unhealthy"} if details is None else details,
    )


@pytest.mark.parametrize(
    ("incident", "name"),
    [
        ("quarantine/n/GPU-1/q", "DeviceQuarantined"),
        ("deferred/n/GPU-1/2026-11-29T12:00:00Z", "QuarantineDeferred"),
        ("node-unknown/n/2026-11-29T12:00:00Z", "DeviceUnknown"),
        ("node-heartbeat/n/2026-11-29T12:00:00Z", "NodeHeartbeatLost"),
        ("device-plugin/n/nvidia.com/gpu/2026", "DevicePluginLost"),
        ("breaker/2026-11-29T12:00:00Z", "MassSignalBreakerOpen"),
        ("escalation/n/2026", "NodeEscalation"),
        ("automation-paused", "AutomationPaused"),
        ("restriction-deferred/n/GPU-1", "RestrictionDeferred"),
        ("something_new/x", "SomethingNew"),
        ("---/x", "DevicestateIncident"),
    ],
)
def test_alert_name_from_incident_type(incident: str, name: str) -> None:
    assert alert_name(incident) == name


def test_camel_case() -> None:
    assert camel_case("node-heartbeat") == "NodeHeartbeat"
    assert camel_case("a.b_c") == "ABC"
    assert camel_case("") == ""


def test_firing_alert_shape() -> None:
    alert = alert_from_decision(decision(), generator_url="http://api/v1/nodes/gpu-node-b")
    assert alert == {
        "labels": {
            "alertname": "DeviceQuarantined",
            "incident": QUARANTINE,
            "node": "gpu-node-b",
            "resourceID": "GPU-a5ced723",
            "reason": "Unhealthy",
            "severity": "critical",
        },
        "annotations": {
            "summary": "GPU-a5ced723 on gpu-node-b quarantined: Unhealthy",
            "description": 'decision 7.0 DeviceQuarantined: {"quarantineID":"q1","reason":"Unhealthy"}',
        },
        "startsAt": "2026-11-29T12:00:00Z",
        "generatorURL": "http://api/v1/nodes/gpu-node-b",
    }
    assert all(isinstance(v, str) for v in alert["labels"].values())


def test_resolved_alert_has_ends_at_and_the_same_labels() -> None:
    firing = alert_from_decision(decision())
    resolved = alert_from_decision(
        decision(DecisionKind.QUARANTINE_RELEASED, seq=9, at=600, alert=AlertAction.RESOLVED)
    )
    assert firing is not None and resolved is not None
    assert resolved["labels"] == firing["labels"]
    assert resolved["startsAt"] == resolved["endsAt"] == "2026-11-29T12:10:00Z"
    assert "endsAt" not in firing


def test_decisions_without_alert_or_incident_map_to_nothing() -> None:
    assert alert_from_decision(decision(DecisionKind.STATE_CHANGED, alert=None)) is None
    assert alert_from_decision(decision(incident=None)) is None
    with pytest.raises(ValueError):
        alert_labels(decision(incident=None))


def test_fleet_incident_has_no_node_or_resource_labels() -> None:
    alert = alert_from_decision(
        decision(
            DecisionKind.BREAKER_OPENED,
            node=None,
            resource_id=None,
            incident="breaker/2026-11-29T12:00:00Z",
            severity=None,
            summary="",
        )
    )
    assert alert is not None
    assert alert["labels"] == {
        "alertname": "MassSignalBreakerOpen",
        "incident": "breaker/2026-11-29T12:00:00Z",
        "reason": "Unhealthy",
        "severity": "warning",
    }
    assert alert["annotations"]["summary"] == "MassSignalBreakerOpen"


def test_node_incident_omits_resource_id() -> None:
    alert = alert_from_decision(
        decision(
            DecisionKind.NODE_INCIDENT_OPENED,
            resource_id=None,
            incident="node-heartbeat/gpu-node-b/2026-11-29T12:00:00Z",
            severity=Severity.WARNING,
        )
    )
    assert alert is not None
    assert set(alert["labels"]) == {"alertname", "incident", "node", "reason", "severity"}


def test_namespace_and_reason_labels() -> None:
    details = {"reason": "pod-status-unhealthy", "pods": ["ml/b-1", "qa/c", "ml/a-0", "bad"]}
    alert = alert_from_decision(decision(details=details))
    assert alert is not None
    assert alert["labels"]["namespace"] == "ml,qa"
    assert alert["labels"]["reason"] == "pod-status-unhealthy"
    bare = alert_from_decision(decision(details={"pods": [], "reason": ""}))
    assert bare is not None
    assert "namespace" not in bare["labels"] and "reason" not in bare["labels"]
    assert pod_namespaces(None) == pod_namespaces(["no-slash"]) == ""


def test_description_cuts_huge_details() -> None:
    alert = alert_from_decision(decision(details={"x": "y" * 10000}))
    assert alert is not None
    assert len(alert["annotations"]["description"]) < 4100
    assert alert["annotations"]["description"].endswith("...(cut)")


def test_alerts_survive_the_wire_form() -> None:
    original = decision(details={"deadline": "2026-11-29T12:05:00Z", "attempt": 1})
    again = decode_decision(encode_decision(original))
    assert alert_from_decision(again) == alert_from_decision(original)


def test_device_url() -> None:
    assert device_url(None, decision()) is None
    assert device_url("http://api:8080/", decision()) == (
        "http://api:8080/v1/nodes/gpu-node-b/devices/GPU-a5ced723"
    )
    assert device_url("http://api", decision(resource_id=None)) == "http://api/v1/nodes/gpu-node-b"
    assert device_url("http://api", decision(node=None)) is None


# --- ActiveAlerts ---------------------------------------------------------------------------


def test_resolution_reuses_the_firing_labels_and_start() -> None:
    active = ActiveAlerts()
    [firing] = active.apply(decision())
    assert QUARANTINE in active
    [resolved] = active.apply(
        decision(
            DecisionKind.QUARANTINE_RELEASED,
            seq=20,
            at=900,
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,  # a different severity must not change the label set
        )
    )
    assert resolved["labels"] == firing["labels"]
    assert resolved["labels"]["severity"] == "critical"
    assert resolved["startsAt"] == firing["startsAt"] == "2026-11-29T12:00:00Z"
    assert resolved["endsAt"] == "2026-11-29T12:15:00Z"
    assert len(active) == 0 and active.firing() == []


def test_repeated_firing_keeps_the_start_and_does_not_duplicate() -> None:
    active = ActiveAlerts()
    active.apply(decision())
    [again] = active.apply(decision(seq=8, at=60))
    assert again["startsAt"] == "2026-11-29T12:00:00Z"
    assert len(active) == 1


def test_firing_with_new_labels_resolves_the_old_label_set() -> None:
    active = ActiveAlerts()
    [first] = active.apply(decision(severity=Severity.WARNING))
    old, new = active.apply(decision(seq=8, at=60, severity=Severity.CRITICAL))
    assert old["labels"] == first["labels"] and old["endsAt"] == "2026-11-29T12:01:00Z"
    assert new["labels"]["severity"] == "critical" and "endsAt" not in new
    assert [a["labels"] for a in active.firing()] == [new["labels"]]


def test_resolution_of_an_unknown_incident_is_sent_as_it_comes() -> None:
    active = ActiveAlerts()
    [resolved] = active.apply(decision(alert=AlertAction.RESOLVED))
    assert resolved["endsAt"] == resolved["startsAt"]
    assert resolved["labels"]["incident"] == QUARANTINE


def test_snapshot_restore_and_copies() -> None:
    active = ActiveAlerts("http://api")
    active.apply(decision())
    snapshot = active.snapshot()
    active.firing()[0]["labels"]["node"] = "changed"  # a copy
    active.apply(decision(alert=AlertAction.RESOLVED, at=5))
    assert len(active) == 0
    active.restore(snapshot)
    [alert] = active.firing()
    assert alert["labels"]["node"] == "gpu-node-b"
    assert alert["generatorURL"] == "http://api/v1/nodes/gpu-node-b/devices/GPU-a5ced723"
    active.clear()
    assert len(active) == 0


def test_non_alert_decisions_change_nothing() -> None:
    active = ActiveAlerts()
    assert active.apply(decision(DecisionKind.STATE_CHANGED, alert=None)) == []
    assert len(active) == 0


severities = st.one_of(st.none(), st.sampled_from(list(Severity)))
kinds = st.sampled_from(list(DecisionKind))
texts = st.text(min_size=1, max_size=20)


@given(
    incident=st.tuples(st.sampled_from(["quarantine", "node-heartbeat", "breaker", "x"]), texts),
    node=st.one_of(st.none(), texts),
    resource_id=st.one_of(st.none(), texts),
    fire=st.tuples(kinds, severities),
    resolve=st.tuples(kinds, severities),
    gap=st.integers(min_value=0, max_value=10**6),
)
def test_firing_and_resolved_of_one_incident_share_labels(
    incident: tuple[str, str],
    node: str | None,
    resource_id: str | None,
    fire: tuple[DecisionKind, Severity | None],
    resolve: tuple[DecisionKind, Severity | None],
    gap: int,
) -> None:
    key = "/".join(incident)
    common = dict(node=node, resource_id=resource_id, incident=key)
    active = ActiveAlerts()
    [firing] = active.apply(decision(fire[0], severity=fire[1], **common))  # type: ignore[arg-type]
    [resolved] = active.apply(
        decision(
            resolve[0],
            seq=99,
            at=gap,
            alert=AlertAction.RESOLVED,
            severity=resolve[1],
            **common,  # type: ignore[arg-type]
        )
    )
    assert resolved["labels"] == firing["labels"]
    assert parse_time(resolved["startsAt"]) <= parse_time(resolved["endsAt"])
    orjson.dumps([firing, resolved])  # JSON-ready
