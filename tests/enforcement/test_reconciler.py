"""The reconciler and its loop on an in-memory API server and quarantine source (the real
kube-apiserver and PostgreSQL: ``tests/kubeapi/test_enforcement.py``)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.adapters.kube.errors import KubeApiError
from services.domain.governance.decisions import Decision, DecisionKind
from services.processes.enforcement.desired import LABEL_SELECTOR, rule_name
from services.processes.enforcement.metrics import EnforcementMetrics
from services.processes.enforcement.reconciler import Reconciler, ReconcileResult
from services.processes.enforcement.run import EnforceOptions, run_enforcer
from services.processes.enforcement.triggers import Expectations
from services.runtime.config import Settings
from tests.enforcement.test_desired import DRIVER, row
from tests.fakes.quarantine_source import FakeSource
from tests.fakes.taint_rules import FakeTaintRules

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def sample(metrics: EnforcementMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def reconciler(
    kube: FakeTaintRules, source: FakeSource, dry_run: bool = False, **kw: Any
) -> Reconciler:
    return Reconciler(
        kube, source, dry_run=dry_run, metrics=EnforcementMetrics(CollectorRegistry()), **kw
    )


def decision(kind: DecisionKind, quarantine_id: str) -> Decision:
    return Decision(kind=kind, seq=1, index=0, at=T0, details={"quarantineID": quarantine_id})


async def test_create_keep_remove() -> None:
    kube = FakeTaintRules()
    quarantine = row(f"{DRIVER}/node-a/gpu-0")
    source = FakeSource([quarantine, row("GPU-1", source="device-plugin")])
    r = reconciler(kube, source)

    first = await r.reconcile()
    assert first.created == [rule_name(quarantine.quarantine_id)] and not first.failed
    assert list(kube.objects) == first.created
    assert [s.reason.value for s in first.skipped] == ["device-plugin"]

    kube.calls.clear()
    second = await r.reconcile()
    assert not second.changed and second.present == 1 and kube.writes() == []
    assert kube.calls == [("list", LABEL_SELECTOR, False)]

    source.rows = [row(f"{DRIVER}/node-a/gpu-0", status="released")]
    third = await r.reconcile()
    assert third.deleted == first.created and kube.objects == {}
    m = r.metrics
    assert sample(m, "devicestate_enforcement_actions_total", action="create", dry_run="false") == 1
    assert sample(m, "devicestate_enforcement_actions_total", action="delete", dry_run="false") == 1
    assert sample(m, "devicestate_enforcement_rules_desired") == 0
    assert sample(m, "devicestate_enforcement_reconciles_total", result="ok") == 3


async def test_dry_run_writes_nothing_and_reports_what_it_would_do() -> None:
    kube = FakeTaintRules()
    source = FakeSource([row(f"{DRIVER}/node-a/gpu-0"), row(f"{DRIVER}/node-a/gpu-1")])
    r = reconciler(kube, source, dry_run=True)
    for _ in range(2):
        result = await r.reconcile()
        assert result.dry_run and len(result.created) == 2
        assert kube.objects == {}
    assert all(dry for _, _, dry in kube.writes())
    assert (
        sample(r.metrics, "devicestate_enforcement_actions_total", action="create", dry_run="true")
        == 4
    )
    assert sample(r.metrics, "devicestate_enforcement_dry_run") == 1


async def test_an_unlabelled_rule_is_never_touched() -> None:
    kube = FakeTaintRules()
    quarantine = row()
    kube.put(
        {
            "metadata": {"name": "admin-gpu-0"},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"},
                "taint": {"key": "admin/broken", "effect": "NoSchedule"},
            },
        }
    )
    squatter = kube.put({"metadata": {"name": rule_name(quarantine.quarantine_id)}, "spec": {}})
    r = reconciler(kube, FakeSource([quarantine]))
    result = await r.reconcile()
    assert result.errors == 1 and result.created == []
    assert kube.objects[rule_name(quarantine.quarantine_id)] == squatter
    assert sorted(kube.objects) == sorted(["admin-gpu-0", rule_name(quarantine.quarantine_id)])
    assert sample(r.metrics, "devicestate_enforcement_errors_total", operation="create") == 1
    assert sample(r.metrics, "devicestate_enforcement_reconciles_total", result="partial") == 1
    # Released: still nothing of theirs is deleted.
    r.source = FakeSource([])
    result = await r.reconcile()
    assert result.deleted == [] and len(kube.objects) == 2


async def test_a_changed_rule_is_updated_with_its_resource_version() -> None:
    kube = FakeTaintRules()
    source = FakeSource([row()])
    await reconciler(kube, source).reconcile()
    (name,) = kube.objects
    time_added = kube.objects[name]["spec"]["taint"]["timeAdded"]
    result = await reconciler(kube, source, no_execute=True).reconcile()
    assert result.updated == [name]
    assert kube.objects[name]["spec"]["taint"]["effect"] == "NoExecute"
    assert "timeAdded" not in kube.objects[name]["spec"]["taint"] or (
        kube.objects[name]["spec"]["taint"]["timeAdded"] == time_added
    )
    # Someone edited our label-less fields meanwhile: the update fails with 409, retried next pass.
    kube.fail_on["replace_rule"] = KubeApiError(409, "the object has been modified", "Conflict")
    result = await reconciler(kube, source).reconcile()
    assert result.errors == 1 and result.updated == []
    del kube.fail_on["replace_rule"]
    result = await reconciler(kube, source).reconcile()
    assert result.updated == [name]
    assert kube.objects[name]["spec"]["taint"]["effect"] == "NoSchedule"


async def test_a_new_quarantine_of_a_device_creates_before_it_deletes() -> None:
    kube = FakeTaintRules()
    device = f"{DRIVER}/node-a/gpu-0"
    await reconciler(kube, FakeSource([row(device, "q1")])).reconcile()
    source = FakeSource([row(device, "q1", status="released"), row(device, "q2")])
    kube.calls.clear()
    result = await reconciler(kube, source).reconcile()
    assert [c[0] for c in kube.writes()] == ["create", "delete"]
    assert result.created == [rule_name("q2")] and result.deleted == [rule_name("q1")]
    assert list(kube.objects) == [rule_name("q2")]


async def test_nothing_is_written_when_the_quarantines_cannot_be_read() -> None:
    kube = FakeTaintRules()
    await reconciler(kube, FakeSource([row()])).reconcile()
    r = reconciler(kube, FakeSource(error=OSError("connection refused")))
    result = await r.reconcile()
    assert result.failed and kube.writes() == [("create", rule_name(row().quarantine_id), False)]
    assert len(kube.objects) == 1
    assert sample(r.metrics, "devicestate_enforcement_errors_total", operation="read-quarantines")
    assert sample(r.metrics, "devicestate_enforcement_reconciles_total", result="failed") == 1


async def test_nothing_is_written_when_the_rules_cannot_be_listed() -> None:
    kube = FakeTaintRules(fail_on={"list_rules": KubeApiError(403, "forbidden", "Forbidden")})
    r = reconciler(kube, FakeSource([row()]))
    result = await r.reconcile()
    assert result.failed and kube.writes() == []
    assert sample(r.metrics, "devicestate_enforcement_errors_total", operation="list") == 1


async def test_a_failed_write_does_not_stop_the_others() -> None:
    kube = FakeTaintRules()
    await reconciler(kube, FakeSource([row(f"{DRIVER}/node-a/gpu-9", "old")])).reconcile()
    kube.fail_on["create_rule"] = KubeApiError(500, "etcd timeout")
    source = FakeSource([row(f"{DRIVER}/node-a/gpu-0", "new")])
    result = await reconciler(kube, source).reconcile()
    assert result.errors == 1 and result.deleted == [rule_name("old")]


def test_expectations_settle_when_the_database_shows_the_decision() -> None:
    now = [0.0]
    e = Expectations(ttl=30, clock=lambda: now[0])
    assert not e.add(decision(DecisionKind.RECOVERY_STAGE_STARTED, "q1"))
    assert e.add(decision(DecisionKind.QUARANTINED, "q1"))
    assert e.add(decision(DecisionKind.QUARANTINE_RELEASED, "q2"))
    e.settle(frozenset({"q2"}))
    assert e.pending  # q1 not there yet, q2 still there
    e.settle(frozenset({"q1"}))
    assert not e.pending
    e.add(decision(DecisionKind.QUARANTINED, "q3"))
    now[0] = 31
    e.settle(frozenset())
    assert not e.pending  # given up: the next periodic pass covers it


class Decisions:
    """An async iterator of decisions fed by the test."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Decision] = asyncio.Queue()

    def __aiter__(self) -> AsyncIterator[Decision]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Decision]:
        while True:
            yield await self.queue.get()


def enabled(**kw: Any) -> Settings:
    return Settings(enforce_device_taint_rules=True, enforce_dry_run=False, **kw)


async def test_loop_reacts_to_decisions_before_the_interval() -> None:
    kube = FakeTaintRules()
    source = FakeSource([])
    decisions = Decisions()
    stop = asyncio.Event()
    results: list[ReconcileResult] = []
    options = EnforceOptions(
        interval_seconds=3600, metrics_port=0, retry_seconds=0.05, debounce_seconds=0.01
    )
    task = asyncio.create_task(
        run_enforcer(
            enabled(),
            options,
            rules=kube,
            source=source,
            decisions=aiter(decisions),
            stop=stop,
            metrics=EnforcementMetrics(CollectorRegistry()),
            on_result=results.append,
        )
    )

    async def until(check: Any) -> None:
        async with asyncio.timeout(5):
            while True:
                if check():
                    return
                await asyncio.sleep(0.01)

    await until(lambda: len(results) == 1)
    # The decision comes first, the database row a moment later (the governor commits after).
    quarantine = row()
    decisions.queue.put_nowait(decision(DecisionKind.QUARANTINED, quarantine.quarantine_id))
    await asyncio.sleep(0.1)
    source.rows = [quarantine]
    await until(lambda: rule_name(quarantine.quarantine_id) in kube.objects)
    decisions.queue.put_nowait(decision(DecisionKind.QUARANTINE_RELEASED, quarantine.quarantine_id))
    source.rows = [row(status="released")]
    await until(lambda: not kube.objects)
    stop.set()
    last = await asyncio.wait_for(task, 5)
    assert last is not None and not last.failed


async def test_loop_retries_sooner_after_a_failure() -> None:
    kube = FakeTaintRules()
    source = FakeSource([row()], error=OSError("database restarting"))
    stop = asyncio.Event()
    results: list[ReconcileResult] = []

    def seen(result: ReconcileResult) -> None:
        results.append(result)
        if len(results) == 3:
            source.error = None
        if kube.objects:
            stop.set()

    options = EnforceOptions(
        interval_seconds=3600, metrics_port=0, retry_seconds=0.01, follow_decisions=False
    )
    await asyncio.wait_for(
        run_enforcer(enabled(), options, rules=kube, source=source, stop=stop, on_result=seen), 5
    )
    assert [r.failed for r in results] == [True, True, True, False]


async def test_disabled_does_nothing() -> None:
    kube = FakeTaintRules()
    source = FakeSource([row()])
    metrics = EnforcementMetrics(CollectorRegistry())
    result = await run_enforcer(
        Settings(enforce_device_taint_rules=False),
        EnforceOptions(once=True),
        rules=kube,
        source=source,
        metrics=metrics,
    )
    assert result is None and kube.calls == [] and source.reads == 0
    assert sample(metrics, "devicestate_enforcement_enabled") == 0


async def test_once_defaults_to_dry_run() -> None:
    kube = FakeTaintRules()
    result = await run_enforcer(
        Settings(enforce_device_taint_rules=True),
        EnforceOptions(once=True),
        rules=kube,
        source=FakeSource([row()]),
        metrics=EnforcementMetrics(CollectorRegistry()),
    )
    assert result is not None and result.dry_run and len(result.created) == 1
    assert kube.objects == {}


async def test_sigterm_stops_the_loop_after_the_running_pass() -> None:
    kube = FakeTaintRules()
    started = asyncio.Event()

    class SlowSource(FakeSource):
        async def enforced(self) -> list[Any]:
            started.set()
            await asyncio.sleep(0.2)
            return await super().enforced()

    results: list[ReconcileResult] = []
    options = EnforceOptions(interval_seconds=3600, metrics_port=0, follow_decisions=False)
    task = asyncio.create_task(
        run_enforcer(
            enabled(),
            options,
            rules=kube,
            source=SlowSource([row()]),
            metrics=EnforcementMetrics(CollectorRegistry()),
            on_result=results.append,
        )
    )
    await asyncio.wait_for(started.wait(), 5)
    os.kill(os.getpid(), signal.SIGTERM)
    last = await asyncio.wait_for(task, 5)
    # The pass that was running finished (its rule written), then the loop ended.
    assert last is not None and len(results) == 1 and len(kube.objects) == 1


@pytest.mark.parametrize("failure", [KubeApiError(403, "forbidden"), KubeApiError(409, "gone")])
async def test_delete_errors_are_counted(failure: KubeApiError) -> None:
    kube = FakeTaintRules()
    await reconciler(kube, FakeSource([row()])).reconcile()
    kube.fail_on["delete_rule"] = failure
    r = reconciler(kube, FakeSource([]))
    result = await r.reconcile()
    assert result.errors == 1 and len(kube.objects) == 1
    assert sample(r.metrics, "devicestate_enforcement_errors_total", operation="delete") == 1
