"""The decisions topic starts an early pass: real Kafka, in-memory API server and quarantines."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

import pytest
from prometheus_client import CollectorRegistry

from services.domain.governance.decisions import Decision, DecisionKind, encode_decision
from services.processes.enforcement.desired import rule_name
from services.processes.enforcement.metrics import EnforcementMetrics
from services.processes.enforcement.reconciler import ReconcileResult
from services.processes.enforcement.run import EnforceOptions, run_enforcer
from services.runtime.config import Settings
from tests.conftest import T0, publish
from tests.enforcement.test_desired import row
from tests.fakes.quarantine_source import FakeSource
from tests.fakes.taint_rules import FakeTaintRules

pytestmark = pytest.mark.integration


async def test_a_quarantine_decision_starts_a_pass_long_before_the_interval(
    kafka_admin: Any, kafka_bootstrap: str
) -> None:
    from aiokafka.admin import NewTopic

    topic = f"t{uuid4().hex[:12]}.decisions"
    await kafka_admin.create_topics([NewTopic(topic, 1, 1)])
    try:
        settings = Settings(
            kafka_bootstrap_servers=kafka_bootstrap,
            decisions_topic=topic,
            enforce_device_taint_rules=True,
            enforce_dry_run=False,
        )
        kube, source, stop = FakeTaintRules(), FakeSource([]), asyncio.Event()
        metrics = EnforcementMetrics(CollectorRegistry())
        results: list[ReconcileResult] = []
        task = asyncio.create_task(
            run_enforcer(
                settings,
                EnforceOptions(interval_seconds=3600, metrics_port=0, retry_seconds=0.1),
                rules=kube,
                source=source,
                stop=stop,
                metrics=metrics,
                on_result=results.append,
            )
        )
        async with asyncio.timeout(10):
            while True:
                if results:  # the pass at start: nothing quarantined yet
                    break
                await asyncio.sleep(0.01)
        quarantine = row()
        source.rows = [quarantine]  # committed by the governor; the decision says so
        message = encode_decision(
            Decision(
                kind=DecisionKind.QUARANTINED,
                seq=7,
                index=0,
                at=T0,
                node=quarantine.node,
                resource_id=quarantine.resource_id,
                details={"quarantineID": quarantine.quarantine_id},
            )
        )
        # The follower reads from the end of the topic once it has its partition: publish until
        # a pass has run because of a decision.
        async with asyncio.timeout(30):
            while True:
                await publish(kafka_bootstrap, topic, [(quarantine.node.encode(), message)])
                await asyncio.sleep(0.5)
                if rule_name(quarantine.quarantine_id) in kube.objects:
                    break
        assert results[0].created == [] and len(results) >= 2
        triggered = metrics.registry.get_sample_value(
            "devicestate_enforcement_triggers_total", {"kind": "DeviceQuarantined"}
        )
        assert triggered is not None and triggered >= 1
        stop.set()
        await asyncio.wait_for(task, 10)
    finally:
        await kafka_admin.delete_topics([topic])
