"""The recovery service on the real Kafka broker: decisions in, lease requests and reports out on
the governance topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer

from services.domain.events import format_time
from services.domain.governance.decisions import Decision, DecisionKind, encode_decision
from services.domain.governance.input_codec import decode_input
from services.domain.governance.inputs import (
    GovernanceInput,
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
)
from services.processes.recovery.executors import InProcessExecutor
from services.processes.recovery.metrics import RecoveryMetrics
from services.processes.recovery.run import RecoveryOptions, run_recovery
from services.runtime.config import Settings
from tests.conftest import publish

pytestmark = pytest.mark.integration

HOLDER = "test-host/1/feedbeef"


@pytest.fixture
async def topics(kafka_admin: Any) -> AsyncIterator[Settings]:
    from services.adapters.kafka.topics import TopicRole, ensure_topics

    tag = f"t{uuid4().hex[:12]}"
    settings = Settings(
        decisions_topic=f"{tag}.decisions",
        governance_topic=f"{tag}.governance",
        recovery_executor="inprocess",
    )
    # As the service creates them: recovery checks them on start.
    await ensure_topics(settings, (TopicRole.DECISIONS, TopicRole.GOVERNANCE))
    try:
        yield settings
    finally:
        await kafka_admin.delete_topics([settings.decisions_topic, settings.governance_topic])


class GovernanceReader:
    """Reads the governance topic from its beginning."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
        )
        self.records: list[tuple[bytes | None, GovernanceInput]] = []

    async def until(self, count: int, seconds: float = 30.0) -> list[GovernanceInput]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while len(self.records) < count:
            if loop.time() > deadline:
                raise AssertionError(f"only {len(self.records)} governance records: {self.records}")
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                self.records.extend((r.key, decode_input(r.value)) for r in records)
        return [record for _, record in self.records]

    async def keep_reading(self, seconds: float) -> list[GovernanceInput]:
        """Everything read after ``seconds`` more of polling."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline:
            batch = await self.consumer.getmany(timeout_ms=100)
            for records in batch.values():
                self.records.extend((r.key, decode_input(r.value)) for r in records)
        return [record for _, record in self.records]


def stage_started(resource_id: str, seq: int, deadline: datetime) -> Decision:
    return Decision(
        DecisionKind.RECOVERY_STAGE_STARTED,
        seq,
        0,
        datetime.now(UTC),
        node="gpu-node-a",
        resource_id=resource_id,
        incident=None,
        details={
            "stage": "probe",
            "quarantineID": f"gpu-node-a/{resource_id}@1",
            "attempt": 1,
            "resourceName": "nvidia.com/gpu",
            "source": "device-plugin",
            "resourceClaim": None,
            "deadline": format_time(deadline),
        },
    )


def ended(resource_id: str, seq: int) -> Decision:
    return Decision(
        DecisionKind.RECOVERY_FAILED,
        seq,
        0,
        datetime.now(UTC),
        node="gpu-node-a",
        resource_id=resource_id,
        details={"stage": "probe", "reason": "probe timed out"},
    )


def lease_granted(resource_id: str, seq: int, holder: str, token: int) -> Decision:
    return Decision(
        DecisionKind.LEASE_GRANTED,
        seq,
        0,
        datetime.now(UTC),
        node="gpu-node-a",
        resource_id=resource_id,
        details={
            "holder": holder,
            "fencingToken": token,
            "stage": "probe",
            "expiresAt": format_time(datetime.now(UTC) + timedelta(minutes=5)),
            "quarantineID": f"gpu-node-a/{resource_id}@1",
        },
    )


async def test_lease_flow_over_kafka(kafka_bootstrap: str, topics: Settings) -> None:
    settings = topics
    deadline = datetime.now(UTC) + timedelta(minutes=10)
    executor = InProcessExecutor(fail=[("gpu-node-a", "GPU-2")])
    metrics = RecoveryMetrics()
    stop = asyncio.Event()
    started = asyncio.Event()
    options = RecoveryOptions(
        group_id=f"{settings.decisions_topic}.recovery", holder=HOLDER, metrics_port=0
    )
    # History before the service starts: GPU-0's probe ended (failed), GPU-3's is still open.
    await publish(
        kafka_bootstrap,
        settings.decisions_topic,
        [
            (None, encode_decision(stage_started("GPU-0", 1, deadline))),
            (None, encode_decision(ended("GPU-0", 2))),
            (None, encode_decision(stage_started("GPU-3", 3, deadline))),
        ],
    )
    task = asyncio.create_task(
        run_recovery(
            settings,
            options,
            executor=executor,
            stop=stop,
            metrics=metrics,
            on_started=lambda _: started.set(),
        )
    )
    reader = GovernanceReader(kafka_bootstrap, settings.governance_topic)
    await reader.consumer.start()
    try:
        await asyncio.wait_for(started.wait(), 30)
        [open_stage] = await reader.until(1)
        assert isinstance(open_stage, RecoveryLeaseRequested)
        assert open_stage.resource_id == "GPU-3"  # caught up: nothing for the ended GPU-0
        await publish(
            kafka_bootstrap,
            settings.decisions_topic,
            [
                (None, encode_decision(stage_started("GPU-1", 4, deadline))),
                (None, encode_decision(stage_started("GPU-2", 5, deadline))),
            ],
        )
        requests = (await reader.until(3))[1:]
        assert all(isinstance(r, RecoveryLeaseRequested) for r in requests)
        assert {(r.node, r.resource_id, r.holder) for r in requests} == {  # type: ignore[union-attr]
            ("gpu-node-a", "GPU-1", HOLDER),
            ("gpu-node-a", "GPU-2", HOLDER),
        }
        assert {key for key, _ in reader.records} == {b"gpu-node-a"}

        # GPU-1's lease goes to another executor: not ours to run. GPU-2's comes to us, later in
        # the log, so once its report is there GPU-1's grant has been handled too.
        await publish(
            kafka_bootstrap,
            settings.decisions_topic,
            [
                (None, encode_decision(lease_granted("GPU-1", 6, "other-host/9/00000000", 11))),
                (None, encode_decision(lease_granted("GPU-2", 7, HOLDER, 12))),
            ],
        )
        await reader.until(4)
        records = await reader.keep_reading(1.0)
        reports = [r for r in records if isinstance(r, RecoveryReport)]
        assert len(reports) == 1
        [report] = reports
        assert (report.resource_id, report.fencing_token, report.holder) == ("GPU-2", 12, HOLDER)
        assert report.stage is RecoveryStage.PROBE and report.passed is False
        assert "configured to fail" in report.detail
        assert [c.resource_id for c in executor.runs] == ["GPU-2"]
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await reader.consumer.stop()
    sample = metrics.registry.get_sample_value
    assert sample("devicestate_recovery_leases_total", {"outcome": "requested"}) == 3
    assert sample("devicestate_recovery_leases_total", {"outcome": "granted"}) == 1
    assert sample("devicestate_recovery_checks_total", {"stage": "probe", "result": "failed"}) == 1
