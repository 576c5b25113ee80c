"""The alert sender end to end: decisions on the real Kafka broker -> a real HTTP server standing in
for Alertmanager (``http.server`` in a thread)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from uuid import uuid4

import orjson
import pytest

from services.domain.governance.decisions import (
    AlertAction,
    Decision,
    DecisionKind,
    Severity,
    encode_decision,
)
from services.processes.alerts.metrics import AlertMetrics
from services.processes.alerts.service import AlertOptions, run_alerts
from services.runtime.config import Settings
from tests.conftest import publish

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
QUARANTINE = "quarantine/gpu-node-b/GPU-a5ced723/gpu-node-b/GPU-a5ced723@51234"
HEARTBEAT = "node-heartbeat/gpu-node-c/2026-11-29T12:01:00Z"


class FakeAlertmanager:
    """``POST /api/v2/alerts`` recorder. Answers the statuses of ``script`` in turn, then 200;
    ``reject(alerts)`` true: 400. ``accepted`` holds the alerts of the 2xx answers, in order."""

    def __init__(
        self, script: list[int], reject: Callable[[list[dict[str, Any]]], bool] | None = None
    ) -> None:
        self.script = list(script)
        self.reject = reject
        self.lock = threading.Lock()
        self.requests: list[tuple[int, list[dict[str, Any]]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                alerts = orjson.loads(body)
                with fake.lock:
                    if self.path != "/api/v2/alerts":
                        status = 404
                    elif fake.reject is not None and fake.reject(alerts):
                        status = 400
                    else:
                        status = fake.script.pop(0) if fake.script else 200
                    fake.requests.append((status, alerts))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def statuses(self) -> list[int]:
        with self.lock:
            return [status for status, _ in self.requests]

    def accepted(self) -> list[dict[str, Any]]:
        with self.lock:
            return [a for status, alerts in self.requests if status < 300 for a in alerts]

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()


@pytest.fixture
def alertmanager() -> Iterator[Callable[..., FakeAlertmanager]]:
    started: list[FakeAlertmanager] = []

    def start(
        script: list[int], reject: Callable[[list[dict[str, Any]]], bool] | None = None
    ) -> FakeAlertmanager:
        fake = FakeAlertmanager(script, reject)
        fake.thread.start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.server.shutdown()
        fake.server.server_close()


@pytest.fixture
async def decisions_topic(kafka_admin: Any) -> AsyncIterator[str]:
    from aiokafka.admin import NewTopic

    name = f"t{uuid4().hex[:12]}.decisions"
    await kafka_admin.create_topics([NewTopic(name, 1, 1)])
    try:
        yield name
    finally:
        await kafka_admin.delete_topics([name])


def make(
    kind: DecisionKind,
    seq: int,
    incident: str | None,
    alert: AlertAction | None,
    severity: Severity | None = Severity.CRITICAL,
    node: str | None = "gpu-node-b",
    resource_id: str | None = "GPU-a5ced723",
    at: float = 0,
    index: int = 0,
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
        summary=f"{kind.value} {node}",
        details={"seq": seq},
    )


async def eventually(check: Callable[[], Any], seconds: float = 30.0, what: str = "") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        result = check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.1)


async def committed(kafka_admin: Any, group: str) -> dict[int, int]:
    offsets = await kafka_admin.list_consumer_group_offsets(group)
    return {tp.partition: meta.offset for tp, meta in offsets.items()}


class Running:
    """``run_alerts`` in a task, stopped with :meth:`stop`."""

    def __init__(self, settings: Settings, options: AlertOptions) -> None:
        self.stop_event = asyncio.Event()
        self.metrics = AlertMetrics()
        self.task = asyncio.create_task(
            run_alerts(settings, options, stop=self.stop_event, metrics=self.metrics)
        )

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    async def stop(self) -> None:
        self.stop_event.set()
        await asyncio.wait_for(self.task, 30)


async def test_alerts_reach_alertmanager_after_two_5xx_with_identical_labels(
    kafka_admin: Any,
    kafka_bootstrap: str,
    decisions_topic: str,
    alertmanager: Callable[..., FakeAlertmanager],
) -> None:
    am = alertmanager([500, 500])
    group = f"{decisions_topic}.alerts"
    settings = Settings(
        decisions_topic=decisions_topic,
        alert_webhook_url=am.url,
        alert_retries=3,
        alert_timeout_seconds=5,
    )
    options = AlertOptions(
        group_id=group, metrics_port=0, backoff_seconds=0.05, resend_interval_seconds=3600
    )
    decisions = [
        make(DecisionKind.QUARANTINED, 1, QUARANTINE, AlertAction.FIRING),
        make(DecisionKind.STATE_CHANGED, 1, None, None, index=1),
        make(
            DecisionKind.NODE_INCIDENT_OPENED,
            2,
            HEARTBEAT,
            AlertAction.FIRING,
            severity=Severity.WARNING,
            node="gpu-node-c",
            resource_id=None,
            at=60,
        ),
        # Resolved with another severity: the labels must still be the firing ones.
        make(
            DecisionKind.QUARANTINE_RELEASED,
            3,
            QUARANTINE,
            AlertAction.RESOLVED,
            severity=Severity.INFO,
            at=900,
        ),
    ]
    await publish(kafka_bootstrap, decisions_topic, [(None, encode_decision(d)) for d in decisions])

    running = Running(settings, options)
    try:
        await eventually(lambda: len(am.accepted()) >= 3, what="three accepted alerts")
        assert await _wait_committed(kafka_admin, group, 4) == {0: 4}
    finally:
        await running.stop()

    assert am.statuses()[:3] == [500, 500, 200]
    accepted = am.accepted()
    assert [a["labels"]["alertname"] for a in accepted] == [
        "DeviceQuarantined",
        "NodeHeartbeatLost",
        "DeviceQuarantined",
    ]
    firing_q, firing_hb, resolved_q = accepted
    assert (
        firing_q["labels"]
        == resolved_q["labels"]
        == {
            "alertname": "DeviceQuarantined",
            "incident": QUARANTINE,
            "node": "gpu-node-b",
            "resourceID": "GPU-a5ced723",
            "severity": "critical",
        }
    )
    assert firing_hb["labels"] == {
        "alertname": "NodeHeartbeatLost",
        "incident": HEARTBEAT,
        "node": "gpu-node-c",
        "severity": "warning",
    }
    assert "endsAt" not in firing_q and "endsAt" not in firing_hb
    assert resolved_q["startsAt"] == "2026-11-29T12:00:00Z"
    assert resolved_q["endsAt"] == "2026-11-29T12:15:00Z"
    assert firing_q["annotations"]["description"].startswith("decision 1.0 DeviceQuarantined: ")
    assert running.value("devicestate_alerts_retried_total") == 2
    assert running.value("devicestate_alerts_sent_total", status="firing", path="stream") == 2
    assert running.value("devicestate_alerts_sent_total", status="resolved", path="stream") == 1
    assert running.value("devicestate_alerts_decisions_total", alert="none") == 1

    # A restart reads nothing again (offsets committed) but rebuilds what still fires from the
    # log, and posts it again on the resend interval: the heartbeat alert, not the resolved one.
    am.clear()
    again = Running(settings, AlertOptions(**{**_fields(options), "resend_interval_seconds": 1}))
    try:
        await eventually(lambda: am.accepted(), what="a resend")
    finally:
        await again.stop()
    resent = am.accepted()
    assert {a["labels"]["incident"] for a in resent} == {HEARTBEAT}
    assert all("endsAt" not in a for a in resent)
    assert again.value("devicestate_alerts_sent_total", status="firing", path="resend") >= 1
    assert again.value("devicestate_alerts_sent_total", status="firing", path="stream") == 0


def _fields(options: AlertOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in options.__dataclass_fields__}


async def _wait_committed(kafka_admin: Any, group: str, offset: int) -> dict[int, int]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        offsets = await committed(kafka_admin, group)
        if offsets.get(0) == offset or loop.time() > deadline:
            return offsets
        await asyncio.sleep(0.2)


async def test_an_alert_refused_with_4xx_is_skipped_and_the_stream_flows_on(
    kafka_admin: Any,
    kafka_bootstrap: str,
    decisions_topic: str,
    alertmanager: Callable[..., FakeAlertmanager],
) -> None:
    am = alertmanager(
        [], reject=lambda alerts: any("bad" in a["labels"]["incident"] for a in alerts)
    )
    group = f"{decisions_topic}.alerts"
    settings = Settings(decisions_topic=decisions_topic, alert_webhook_url=am.url, alert_retries=1)
    options = AlertOptions(group_id=group, metrics_port=0, backoff_seconds=0.05)
    first = [
        make(DecisionKind.QUARANTINED, 1, "quarantine/bad/1", AlertAction.FIRING),
        make(DecisionKind.QUARANTINED, 2, "quarantine/good/1", AlertAction.FIRING),
    ]
    await publish(kafka_bootstrap, decisions_topic, [(None, encode_decision(d)) for d in first])
    running = Running(settings, options)
    try:
        await eventually(lambda: len(am.accepted()) >= 1, what="the good alert")
        later = make(DecisionKind.QUARANTINED, 3, "quarantine/good/2", AlertAction.FIRING)
        await publish(kafka_bootstrap, decisions_topic, [(None, encode_decision(later))])
        await eventually(lambda: len(am.accepted()) >= 2, what="the later alert")
        assert await _wait_committed(kafka_admin, group, 3) == {0: 3}
    finally:
        await running.stop()
    assert [a["labels"]["incident"] for a in am.accepted()] == [
        "quarantine/good/1",
        "quarantine/good/2",
    ]
    assert 400 in am.statuses()
    assert running.value("devicestate_alerts_failed_total", reason="rejected") == 1
    assert running.value("devicestate_alerts_retried_total") == 0


async def test_an_unavailable_alertmanager_gets_the_same_alerts_again_later(
    kafka_admin: Any,
    kafka_bootstrap: str,
    decisions_topic: str,
    alertmanager: Callable[..., FakeAlertmanager],
) -> None:
    am = alertmanager([503, 503, 503])  # retries exhausted once (2 attempts), then once more
    group = f"{decisions_topic}.alerts"
    settings = Settings(decisions_topic=decisions_topic, alert_webhook_url=am.url, alert_retries=1)
    options = AlertOptions(
        group_id=group, metrics_port=0, backoff_seconds=0.05, unavailable_pause_seconds=0.2
    )
    decisions = [
        make(DecisionKind.QUARANTINED, 1, QUARANTINE, AlertAction.FIRING),
        make(DecisionKind.QUARANTINE_RELEASED, 2, QUARANTINE, AlertAction.RESOLVED, at=60),
    ]
    await publish(kafka_bootstrap, decisions_topic, [(None, encode_decision(d)) for d in decisions])
    running = Running(settings, options)
    try:
        await eventually(lambda: len(am.accepted()) >= 2, what="the alerts, at last")
        assert await _wait_committed(kafka_admin, group, 2) == {0: 2}
    finally:
        await running.stop()
    statuses = am.statuses()
    assert statuses[:3] == [503, 503, 503] and set(statuses[3:]) == {200}
    firing, resolved = am.accepted()
    # The fold was rolled back with the offsets: the resolution still carries the firing labels.
    assert "endsAt" not in firing and resolved["labels"] == firing["labels"]
    assert resolved["startsAt"] == firing["startsAt"]
    assert running.value("devicestate_alerts_failed_total", reason="unavailable") >= 1
    assert running.value("devicestate_alerts_retried_total") == 2
