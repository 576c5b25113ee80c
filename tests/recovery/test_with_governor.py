"""The recovery service against the real governor (:func:`services.domain.governance.machine.step`,
through ``tests/governance/harness.py``), in memory: a quarantined device that reports Healthy goes
probe -> canary -> stability -> released, with this service taking the leases and reporting; two
executors competing for one device run one check."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.device_state import GovState
from services.domain.governance.inputs import (
    HealthTransition,
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
    WatermarkAdvanced,
)
from services.processes.recovery.checks import CheckResult, RecoveryCheck
from services.processes.recovery.executors import InProcessExecutor
from services.processes.recovery.service import RecoveryService
from tests.governance.harness import GovernanceRun

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NODE, GPU = "gpu-node-a", "GPU-7d1ab9d3-92d7-5056-a63f-8c47362936c2"
Record = RecoveryLeaseRequested | RecoveryReport


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def health(value: Health, version: int, t: float) -> HealthTransition:
    return HealthTransition(
        node=NODE,
        resource_id=GPU,
        resource_name="nvidia.com/gpu",
        source=DeviceSource.DEVICE_PLUGIN,
        health=value,
        status_version=version,
        observed_at=at(t),
        partition=0,
        offset=version,
        pods=("ml/train-0",),
    )


class Harness:
    """The governor and recovery services wired in memory: every record a service publishes goes
    to the governor; every decision goes to every service, in order."""

    def __init__(self, *executors: Any) -> None:
        self.run = GovernanceRun()
        self.outbox: list[Record] = []
        self.services = [
            RecoveryService(
                executor,
                self,
                holder=f"executor-{i}",
                clock=lambda: datetime(2030, 1, 1, tzinfo=UTC),  # the wall clock is irrelevant
            )
            for i, executor in enumerate(executors)
        ]

    async def publish(self, record: Record) -> None:
        self.outbox.append(record)

    async def feed(self, record: Any) -> list[Decision]:
        decided = self.run.feed(record)
        for decision in decided:
            for service in self.services:
                await service.handle(decision)
        return decided

    async def settle(self) -> None:
        """Deliver published records until nothing moves."""
        for _ in range(200):
            for _ in range(5):
                await asyncio.sleep(0)
            if not self.outbox:
                if all(not any(s.running for s in svc._slots.values()) for svc in self.services):
                    return
                await asyncio.sleep(0.001)
                continue
            record, *self.outbox = self.outbox
            await self.feed(record)
        raise AssertionError("the lease flow did not settle")

    def kinds(self) -> list[DecisionKind]:
        return [d.kind for d in self.run.decisions]

    def of(self, kind: DecisionKind) -> list[Decision]:
        return [d for d in self.run.decisions if d.kind is kind]

    def device(self) -> Any:
        return self.run.state.devices[(NODE, GPU)]


async def quarantine_then_heal(h: Harness) -> None:
    await h.feed(WatermarkAdvanced(0, 1, at(0)))
    await h.feed(health(Health.HEALTHY, 1, 1))
    await h.feed(health(Health.UNHEALTHY, 2, 10))
    await h.feed(WatermarkAdvanced(0, 1, at(20)))
    assert h.device().state is GovState.QUARANTINED
    await h.feed(health(Health.HEALTHY, 3, 30))
    await h.feed(WatermarkAdvanced(0, 1, at(40)))


async def test_staged_recovery_to_release() -> None:
    executor = InProcessExecutor()
    h = Harness(executor)
    await quarantine_then_heal(h)
    await h.settle()
    stages = [d.details["stage"] for d in h.of(DecisionKind.RECOVERY_STAGE_STARTED)]
    assert stages == ["probe", "canary", "stability"]
    assert [d.details["stage"] for d in h.of(DecisionKind.RECOVERY_STAGE_PASSED)] == [
        "probe",
        "canary",
    ]
    assert h.of(DecisionKind.REPORT_REJECTED) == []
    tokens = [d.details["fencingToken"] for d in h.of(DecisionKind.LEASE_GRANTED)]
    assert tokens == [1, 2]
    assert [(c.stage, c.fencing_token) for c in executor.runs] == [
        (RecoveryStage.PROBE, 1),
        (RecoveryStage.CANARY, 2),
    ]
    # Stability needs nothing from the executor: time passes, the quarantine is released.
    await h.feed(WatermarkAdvanced(0, 1, at(40 + 900 + 60)))
    await h.settle()
    assert h.of(DecisionKind.QUARANTINE_RELEASED)
    assert h.device().state is GovState.AVAILABLE


async def test_failed_canary_fails_the_recovery() -> None:
    h = Harness(InProcessExecutor(decide=lambda c: c.stage is RecoveryStage.PROBE))
    await quarantine_then_heal(h)
    await h.settle()
    [failed] = h.of(DecisionKind.RECOVERY_FAILED)
    assert failed.details["stage"] == "canary"
    assert h.device().state is GovState.QUARANTINED


async def test_two_executors_one_device_one_check() -> None:
    first, second = InProcessExecutor(), InProcessExecutor()
    h = Harness(first, second)
    await quarantine_then_heal(h)
    await h.settle()
    assert h.of(DecisionKind.REPORT_REJECTED) == []
    assert len(h.of(DecisionKind.LEASE_DENIED)) == 2  # one per stage: the other holder
    # Each stage ran exactly once, by whichever executor got its lease.
    assert sorted(c.stage.value for c in first.runs + second.runs) == ["canary", "probe"]
    assert [d.details["stage"] for d in h.of(DecisionKind.RECOVERY_STAGE_PASSED)] == [
        "probe",
        "canary",
    ]


async def test_a_check_that_outlives_the_lease_is_rejected_by_token() -> None:
    """A slow executor reports after its lease expired and another took it: the stale fencing
    token is refused; the newer holder's report counts."""
    release = asyncio.Event()

    class Slow:
        def __init__(self) -> None:
            self.runs: list[RecoveryCheck] = []

        async def run(self, check: RecoveryCheck) -> CheckResult:
            self.runs.append(check)
            await release.wait()
            return CheckResult(True, "late")

    slow = Slow()
    h = Harness(slow)
    await quarantine_then_heal(h)
    for _ in range(20):
        await asyncio.sleep(0)
        if h.outbox:
            await h.feed(h.outbox.pop(0))
    assert len(slow.runs) == 1  # the probe runs under token 1
    # The lease (300 s) expires in event time; another executor takes the device.
    await h.feed(WatermarkAdvanced(0, 1, at(40 + 301)))
    granted = await h.feed(RecoveryLeaseRequested(NODE, GPU, "other/1/x", at(341)))
    assert granted[0].kind is DecisionKind.LEASE_GRANTED
    assert granted[0].details["fencingToken"] == 2
    release.set()
    await h.settle()
    [rejected] = h.of(DecisionKind.REPORT_REJECTED)
    assert rejected.details["fencingToken"] == 1 and "stale" in rejected.details["reason"]
