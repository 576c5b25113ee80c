"""The recovery service's lease flow, decision by decision (no Kafka)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.inputs import (
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
)
from services.processes.recovery.checks import CheckResult, RecoveryCheck
from services.processes.recovery.executors import InProcessExecutor
from services.processes.recovery.metrics import RecoveryMetrics
from services.processes.recovery.service import RecoveryService, default_holder
from services.processes.recovery.stages import stage_request

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
HOLDER = "host-a/42/abcd1234"
Record = RecoveryLeaseRequested | RecoveryReport


class Sink:
    def __init__(self) -> None:
        self.records: list[Record] = []

    async def publish(self, record: Record) -> None:
        self.records.append(record)

    def of(self, kind: type[Any]) -> list[Any]:
        return [r for r in self.records if isinstance(r, kind)]


def started(
    resource_id: str = "GPU-1",
    stage: str = "probe",
    node: str = "gpu-node-a",
    deadline: datetime | None = NOW + timedelta(minutes=10),
    seq: int = 1,
    **details: Any,
) -> Decision:
    values: dict[str, Any] = {
        "stage": stage,
        "quarantineID": f"{node}/{resource_id}@1",
        "attempt": 1,
        "resourceName": "nvidia.com/gpu",
        "source": "device-plugin",
        "resourceClaim": None,
        "deadline": None if deadline is None else deadline.isoformat().replace("+00:00", "Z"),
    }
    values.update(details)
    return Decision(
        DecisionKind.RECOVERY_STAGE_STARTED,
        seq,
        0,
        NOW,
        node=node,
        resource_id=resource_id,
        details=values,
    )


def granted(
    resource_id: str = "GPU-1",
    holder: str = HOLDER,
    token: int = 1,
    stage: str = "probe",
    node: str = "gpu-node-a",
) -> Decision:
    return Decision(
        DecisionKind.LEASE_GRANTED,
        2,
        0,
        NOW,
        node=node,
        resource_id=resource_id,
        details={
            "holder": holder,
            "fencingToken": token,
            "stage": stage,
            "expiresAt": "2026-11-29T12:05:00Z",
            "quarantineID": f"{node}/{resource_id}@1",
        },
    )


def decided(kind: DecisionKind, resource_id: str = "GPU-1", **details: Any) -> Decision:
    return Decision(kind, 3, 0, NOW, node="gpu-node-a", resource_id=resource_id, details=details)


def service(
    executor: Any = None, max_concurrent: int = 4
) -> tuple[RecoveryService, Sink, RecoveryMetrics]:
    sink = Sink()
    metrics = RecoveryMetrics()
    return (
        RecoveryService(
            executor or InProcessExecutor(),
            sink,
            holder=HOLDER,
            max_concurrent=max_concurrent,
            metrics=metrics,
            clock=lambda: NOW,
        ),
        sink,
        metrics,
    )


async def settle(svc: RecoveryService) -> None:
    for _ in range(50):
        await asyncio.sleep(0)
        if not any(s.running for s in svc._slots.values()):
            return
    await asyncio.sleep(0.05)


def value(metrics: RecoveryMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_default_holder_shape() -> None:
    host, pid, suffix = default_holder().split("/")
    assert host and pid.isdigit() and len(suffix) == 8
    assert default_holder() != default_holder()


def test_stage_request_reads_the_details() -> None:
    request = stage_request(started(stage="canary", source="dra", resourceClaim="claim-1"))
    assert request is not None
    assert request.stage is RecoveryStage.CANARY and request.resource_claim == "claim-1"
    assert request.deadline == NOW + timedelta(minutes=10)
    assert stage_request(started(stage="stability")) is None
    assert stage_request(started(stage="bogus")) is None
    assert stage_request(granted()) is None


async def test_grant_to_us_runs_the_check_and_reports_with_the_token() -> None:
    run = InProcessExecutor()
    svc, sink, metrics = service(run)
    await svc.handle(started())
    [request] = sink.of(RecoveryLeaseRequested)
    assert (request.node, request.resource_id, request.holder) == ("gpu-node-a", "GPU-1", HOLDER)
    assert request.requested_at == NOW
    await svc.handle(granted(token=7))
    await settle(svc)
    [report] = sink.of(RecoveryReport)
    assert report.fencing_token == 7 and report.passed and report.holder == HOLDER
    assert report.stage is RecoveryStage.PROBE and report.reported_at == NOW
    [ran] = run.runs
    assert ran.fencing_token == 7 and ran.quarantine_id == "gpu-node-a/GPU-1@1"
    assert ran.lease_expires_at == NOW + timedelta(minutes=5)
    assert svc.in_flight == {}
    assert value(metrics, "devicestate_recovery_checks_total", stage="probe", result="passed") == 1
    assert value(metrics, "devicestate_recovery_leases_total", outcome="granted") == 1


async def test_grant_to_another_holder_is_not_ours() -> None:
    svc, sink, _ = service()
    await svc.handle(started())
    await svc.handle(granted(holder="someone-else/1/x"))
    await settle(svc)
    assert sink.of(RecoveryReport) == []
    assert ("gpu-node-a", "GPU-1") in svc.in_flight  # still waiting for our own answer


async def test_denied_gives_up() -> None:
    svc, sink, metrics = service()
    await svc.handle(started())
    await svc.handle(
        Decision(
            DecisionKind.LEASE_DENIED,
            2,
            0,
            NOW,
            node="gpu-node-a",
            resource_id="GPU-1",
            details={"holder": HOLDER, "heldBy": "other", "reason": "held"},
        )
    )
    assert svc.in_flight == {}
    await svc.handle(granted())  # a late grant without a request of ours does nothing
    await settle(svc)
    assert sink.of(RecoveryReport) == []
    assert value(metrics, "devicestate_recovery_leases_total", outcome="denied") == 1


async def test_failed_check_is_reported_failed() -> None:
    svc, sink, metrics = service(InProcessExecutor(fail=[("gpu-node-a", "GPU-1")]))
    await svc.handle(started(stage="canary"))
    await svc.handle(granted(stage="canary", token=2))
    await settle(svc)
    [report] = sink.of(RecoveryReport)
    assert not report.passed and report.stage is RecoveryStage.CANARY
    assert value(metrics, "devicestate_recovery_checks_total", stage="canary", result="failed") == 1


async def test_executor_exception_is_a_failed_report() -> None:
    def boom(check: RecoveryCheck) -> CheckResult:
        raise RuntimeError("kaboom")

    svc, sink, _ = service(InProcessExecutor(decide=boom))
    await svc.handle(started())
    await svc.handle(granted())
    await settle(svc)
    [report] = sink.of(RecoveryReport)
    assert not report.passed and "kaboom" in report.detail


async def test_expired_and_stability_stages_are_skipped() -> None:
    svc, sink, metrics = service()
    await svc.handle(started(deadline=NOW - timedelta(seconds=1)))
    await svc.handle(started(stage="stability"))
    assert sink.records == []
    assert value(metrics, "devicestate_recovery_stages_skipped_total", reason="expired") == 1
    assert value(metrics, "devicestate_recovery_stages_skipped_total", reason="not-executable") == 1


async def test_one_check_per_device() -> None:
    gate = asyncio.Event()

    async def slow(check: RecoveryCheck) -> CheckResult:
        await gate.wait()
        return CheckResult(True, "ok")

    class Slow:
        async def run(self, check: RecoveryCheck) -> CheckResult:
            return await slow(check)

    svc, sink, _ = service(Slow())
    await svc.handle(started())
    await svc.handle(started(seq=2))  # again while waiting for the lease: no second request
    assert len(sink.of(RecoveryLeaseRequested)) == 1
    await svc.handle(granted())
    await asyncio.sleep(0)
    await svc.handle(started(stage="canary", seq=3))  # while the probe runs: waits its turn
    assert len(sink.of(RecoveryLeaseRequested)) == 1
    gate.set()
    await settle(svc)
    assert len(sink.of(RecoveryReport)) == 1
    assert len(sink.of(RecoveryLeaseRequested)) == 2  # the canary's turn
    assert svc.in_flight[("gpu-node-a", "GPU-1")].stage is RecoveryStage.CANARY


async def test_concurrency_is_bounded() -> None:
    svc, sink, _ = service(max_concurrent=2)
    for rid in ("GPU-1", "GPU-2", "GPU-3"):
        await svc.handle(started(resource_id=rid))
    assert [r.resource_id for r in sink.of(RecoveryLeaseRequested)] == ["GPU-1", "GPU-2"]
    await svc.handle(granted(resource_id="GPU-1"))
    await settle(svc)
    assert [r.resource_id for r in sink.of(RecoveryLeaseRequested)] == ["GPU-1", "GPU-2", "GPU-3"]


async def test_stage_end_or_release_abandons_the_request() -> None:
    svc, _sink, metrics = service()
    await svc.handle(started())
    await svc.handle(decided(DecisionKind.RECOVERY_STAGE_PASSED, stage="canary"))  # not ours
    assert svc.in_flight
    await svc.handle(decided(DecisionKind.RECOVERY_FAILED, stage="probe"))
    assert svc.in_flight == {}
    await svc.handle(started(resource_id="GPU-2"))
    await svc.handle(decided(DecisionKind.QUARANTINE_RELEASED, resource_id="GPU-2"))
    assert svc.in_flight == {}
    assert value(metrics, "devicestate_recovery_leases_total", outcome="abandoned") == 2


async def test_expire_forgets_requests_past_their_deadline() -> None:
    ticks = [0.0]
    sink = Sink()
    svc = RecoveryService(
        InProcessExecutor(), sink, holder=HOLDER, clock=lambda: NOW, monotonic=lambda: ticks[0]
    )
    await svc.handle(started(deadline=NOW + timedelta(seconds=30)))
    assert svc.in_flight
    ticks[0] = 31.0  # the governor's clock moves on with the wall clock
    assert svc.governor_now() == NOW + timedelta(seconds=31)
    svc.expire()
    assert svc.in_flight == {}


async def test_deadlines_are_read_on_the_governors_clock_not_the_wall_clock() -> None:
    """A recorded stream replayed a day later: the decisions' times, not the wall clock, tell
    whether a stage is still open; the check's time budget is measured the same way."""
    run = InProcessExecutor()
    sink = Sink()
    svc = RecoveryService(
        run, sink, holder=HOLDER, clock=lambda: NOW + timedelta(days=1), monotonic=lambda: 0.0
    )
    assert svc.governor_now() == NOW + timedelta(days=1)  # nothing seen yet: the wall clock
    await svc.handle(started(deadline=NOW + timedelta(minutes=10)))
    assert len(sink.of(RecoveryLeaseRequested)) == 1
    await svc.handle(granted())  # lease expires at NOW + 5 min
    await settle(svc)
    assert run.runs[0].budget_seconds == 300.0
    assert len(sink.of(RecoveryReport)) == 1


async def test_catching_up_asks_only_for_stages_still_open() -> None:
    svc, sink, _ = service()
    svc.replaying = True
    await svc.handle(started(resource_id="GPU-1"))
    await svc.handle(started(resource_id="GPU-2"))
    await svc.handle(granted(resource_id="GPU-2", holder="old-process/1/x"))
    await svc.handle(
        decided(DecisionKind.RECOVERY_STAGE_PASSED, resource_id="GPU-2", stage="probe")
    )
    await svc.handle(started(resource_id="GPU-3", deadline=NOW - timedelta(seconds=1)))
    assert sink.records == []
    await svc.finish_replay()
    assert [r.resource_id for r in sink.of(RecoveryLeaseRequested)] == ["GPU-1"]


async def test_a_renewed_grant_during_the_check_updates_the_token() -> None:
    gate = asyncio.Event()

    class Gated:
        async def run(self, check: RecoveryCheck) -> CheckResult:
            await gate.wait()
            return CheckResult(True, "ok")

    svc, sink, _ = service(Gated())
    await svc.handle(started())
    await svc.handle(granted(token=1))
    await asyncio.sleep(0)
    await svc.handle(granted(token=2))
    gate.set()
    await settle(svc)
    [report] = sink.of(RecoveryReport)
    assert report.fencing_token == 2


async def test_drain_cancels_what_does_not_finish() -> None:
    class Forever:
        async def run(self, check: RecoveryCheck) -> CheckResult:
            await asyncio.sleep(3600)
            raise AssertionError

    svc, sink, _ = service(Forever())
    await svc.handle(started())
    await svc.handle(granted())
    await asyncio.sleep(0)
    await svc.drain(0.05)
    assert sink.of(RecoveryReport) == []


def test_max_concurrent_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RecoveryService(InProcessExecutor(), Sink(), holder=HOLDER, max_concurrent=0)
