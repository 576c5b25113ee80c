"""A real Alertmanager, configured with deploy/alertmanager/alertmanager.yml, receives what
``devicestate alerts`` sends (API v2) from decisions on the real Kafka broker: the test reads the
alerts back (labels node, resourceID, namespace, reason), sees a resolved alert end, a device
alert inhibited by its node's heartbeat alert, and the grouping by alert name and node; and, for
a node-wide fault decided by the real governor, the eight device alerts held back by the one node
incident (label nodeIncident) in one group."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devtools.testenv import monitoring_servers
from devtools.testenv.monitoring_servers import Server
from services.domain.events import Health
from services.domain.governance.decisions import (
    AlertAction,
    Decision,
    DecisionKind,
    Severity,
    encode_decision,
)
from services.processes.alerts.service import AlertOptions
from services.runtime.config import Settings
from tests.alerts.test_alerts_kafka import Running, decisions_topic
from tests.conftest import publish
from tests.monitoring.conftest import DEPLOY

pytestmark = pytest.mark.integration
__all__ = ["decisions_topic"]  # the fixture, used below

CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
# Wall-clock times: Alertmanager compares endsAt with its own clock (a resolved alert ends).
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
Q_B = "quarantine/gpu-node-b/GPU-b0/gpu-node-b/GPU-b0@7"
Q_C = "quarantine/gpu-node-c/GPU-c0/gpu-node-c/GPU-c0@8"
HEARTBEAT_C = "node-heartbeat/gpu-node-c/2026-11-29T12:01:00Z"


def decision(
    kind: DecisionKind,
    seq: int,
    incident: str,
    alert: AlertAction,
    node: str,
    resource_id: str | None,
    details: dict[str, Any],
    minutes: float = 0,
) -> Decision:
    return Decision(
        kind=kind,
        seq=seq,
        index=0,
        at=T0 + timedelta(minutes=minutes),
        node=node,
        resource_id=resource_id,
        incident=incident,
        alert=alert,
        severity=Severity.CRITICAL,
        summary=f"{kind.value} {node}",
        details=details,
    )


def quarantined(seq: int, incident: str, node: str, gpu: str, pods: list[str]) -> Decision:
    details = {"reason": "pod-status-unhealthy", "pods": pods, "quarantineID": incident}
    return decision(DecisionKind.QUARANTINED, seq, incident, AlertAction.FIRING, node, gpu, details)


async def eventually(check: Callable[[], Any], what: str, seconds: float = 60.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        result = await asyncio.to_thread(check)
        if result:
            return result
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def by_incident(server: Server) -> dict[str, dict[str, Any]]:
    return {a["labels"]["incident"]: a for a in monitoring_servers.alerts(server)}


async def test_alertmanager_gets_the_alerts_inhibits_and_groups_them(
    kafka_bootstrap: str,
    decisions_topic: str,
    alertmanager_server: Callable[[Path], Server],
) -> None:
    am = alertmanager_server(CONFIG)
    settings = Settings(decisions_topic=decisions_topic, alert_webhook_url=am.url)
    options = AlertOptions(
        group_id=f"{decisions_topic}.alerts", metrics_port=0, resend_interval_seconds=3600
    )
    firing = [
        quarantined(1, Q_B, "gpu-node-b", "GPU-b0", ["training/train-0"]),
        quarantined(2, Q_C, "gpu-node-c", "GPU-c0", ["ml-serving/chat-1", "ml-serving/chat-2"]),
        decision(
            DecisionKind.NODE_INCIDENT_OPENED,
            3,
            HEARTBEAT_C,
            AlertAction.FIRING,
            "gpu-node-c",
            None,
            {"reason": "node-heartbeat-lost"},
            minutes=1,
        ),
    ]
    await publish(kafka_bootstrap, decisions_topic, [(None, encode_decision(d)) for d in firing])
    running = Running(settings, options)
    try:
        alerts = await eventually(
            lambda: (found := by_incident(am)) and len(found) == 3 and found,
            "three alerts in Alertmanager",
        )
        b, c, heartbeat = alerts[Q_B], alerts[Q_C], alerts[HEARTBEAT_C]
        assert b["labels"] == {
            "alertname": "DeviceQuarantined",
            "incident": Q_B,
            "node": "gpu-node-b",
            "resourceID": "GPU-b0",
            "namespace": "training",
            "reason": "pod-status-unhealthy",
            "severity": "critical",
        }
        assert c["labels"]["namespace"] == "ml-serving"
        assert heartbeat["labels"]["alertname"] == "NodeHeartbeatLost"
        assert "resourceID" not in heartbeat["labels"]
        # deploy/'s inhibition: the node's heartbeat alert holds back its device alerts only.
        assert b["status"]["state"] == "active" and b["status"]["inhibitedBy"] == []
        assert c["status"]["state"] == "suppressed"
        assert c["status"]["inhibitedBy"] == [heartbeat["fingerprint"]]
        assert heartbeat["status"]["state"] == "active"
        not_inhibited = monitoring_servers.alerts(am, inhibited=False)
        assert {a["labels"]["incident"] for a in not_inhibited} == {Q_B, HEARTBEAT_C}
        # deploy/'s grouping: by alert name and node; critical alerts go to the oncall receiver.
        groups = monitoring_servers.get_json(f"{am.url}/api/v2/alerts/groups")
        grouped = {
            (g["labels"]["alertname"], g["labels"]["node"]): (
                g["receiver"]["name"],
                sorted(a["labels"]["incident"] for a in g["alerts"]),
            )
            for g in groups
        }
        assert grouped == {
            ("DeviceQuarantined", "gpu-node-b"): ("oncall", [Q_B]),
            ("DeviceQuarantined", "gpu-node-c"): ("oncall", [Q_C]),
            ("NodeHeartbeatLost", "gpu-node-c"): ("oncall", [HEARTBEAT_C]),
        }

        # gpu-node-b's quarantine is released: its alert ends, the others stay.
        released = decision(
            DecisionKind.QUARANTINE_RELEASED,
            4,
            Q_B,
            AlertAction.RESOLVED,
            "gpu-node-b",
            "GPU-b0",
            {"confirmedFault": True},
            minutes=5,
        )
        await publish(kafka_bootstrap, decisions_topic, [(None, encode_decision(released))])
        remaining = await eventually(
            lambda: (found := by_incident(am)) and Q_B not in found and found,
            "the resolved alert to end",
        )
        assert set(remaining) == {Q_C, HEARTBEAT_C}

        # Counted once Alertmanager answered, which may be after it shows the alert ended.
        def resolved_sent() -> float:
            return running.value("devicestate_alerts_sent_total", status="resolved", path="stream")

        await eventually(lambda: resolved_sent() == 1, "the resolved alert to be counted")
        assert resolved_sent() == 1
    finally:
        await running.stop()


def node_wide_fault() -> list[Decision]:
    """What the real governor decides when all eight GPUs of gpu-node-d fault within 0.7 s (and
    one GPU of gpu-node-e alone), at wall-clock times (Alertmanager ends alerts on its clock).
    The node escalation is off, so what holds the device alerts back is the node incident alone
    (the escalation's own inhibition is the older rule)."""
    from tests.governance.harness import GovernanceRun
    from tests.governance.strategies import T0 as RUN_T0
    from tests.governance.strategies import transition, watermark
    from tests.governance.test_node_incidents import GPUS, POLICY

    shift = T0 - RUN_T0
    run = GovernanceRun(policy=replace(POLICY, node_escalation_min_devices=9))
    for i, gpu in enumerate(GPUS):
        run.feed(transition("gpu-node-d", gpu, Health.HEALTHY, i + 1, 0))
        run.feed(transition("gpu-node-e", gpu, Health.HEALTHY, i + 1, 0))
    run.feed(watermark(10))
    for i, gpu in enumerate(GPUS):
        run.feed(transition("gpu-node-d", gpu, Health.UNHEALTHY, 100 + i, 10 + i * 0.1))
    run.feed(transition("gpu-node-e", GPUS[0], Health.UNHEALTHY, 200, 11))
    return [replace(d, at=d.at + shift) for d in run.decisions if d.alert is not None]


async def test_alertmanager_holds_back_the_device_alerts_of_a_node_incident(
    kafka_bootstrap: str,
    decisions_topic: str,
    alertmanager_server: Callable[[Path], Server],
) -> None:
    am = alertmanager_server(CONFIG)
    settings = Settings(decisions_topic=decisions_topic, alert_webhook_url=am.url)
    options = AlertOptions(
        group_id=f"{decisions_topic}.alerts", metrics_port=0, resend_interval_seconds=3600
    )
    decisions = node_wide_fault()
    await publish(kafka_bootstrap, decisions_topic, [(None, encode_decision(d)) for d in decisions])
    running = Running(settings, options)
    try:
        # 8 quarantines on node d, 1 on node e, the node incident
        found = await eventually(
            lambda: len(got := monitoring_servers.alerts(am)) == 10 and got, "ten alerts"
        )
        by_name: dict[str, list[dict[str, Any]]] = {}
        for alert in found:
            by_name.setdefault(alert["labels"]["alertname"], []).append(alert)
        (node,) = by_name["NodeFaultIncident"]
        incident = node["labels"]["incident"]
        assert incident.startswith("node-fault/gpu-node-d/")
        assert node["labels"]["nodeIncident"] == incident
        assert node["status"]["state"] == "active"
        quarantines: dict[str, list[dict[str, Any]]] = {}
        for alert in by_name["DeviceQuarantined"]:
            quarantines.setdefault(alert["labels"]["node"], []).append(alert)
        assert len(quarantines["gpu-node-d"]) == 8
        for alert in quarantines["gpu-node-d"]:  # each device alert held back by the incident
            assert alert["labels"]["nodeIncident"] == incident
            assert alert["status"]["state"] == "suppressed"
            assert alert["status"]["inhibitedBy"] == [node["fingerprint"]]
        assert "NodeEscalation" not in by_name
        (alone,) = quarantines["gpu-node-e"]  # another node's device: its own page
        assert "nodeIncident" not in alone["labels"]
        assert alone["status"]["state"] == "active"
        # one page for gpu-node-d: what is not inhibited is the incident and node e's device
        not_inhibited = monitoring_servers.alerts(am, inhibited=False)
        assert sorted(a["labels"]["alertname"] for a in not_inhibited) == [
            "DeviceQuarantined",
            "NodeFaultIncident",
        ]
        groups = monitoring_servers.get_json(f"{am.url}/api/v2/alerts/groups")
        (group,) = [g for g in groups if g["labels"].get("nodeIncident") == incident]
        assert group["receiver"]["name"] == "oncall"
        assert len(group["alerts"]) == 9  # the incident and its eight devices: one group
    finally:
        await running.stop()
