"""What the live tests of ``devicestate migrate`` share (tests/kubeapi/test_migration_executor.py).

The governor is the real pure fold (``GovernanceRun``), its decisions written to the test's
PostgreSQL schema as the worker writes them, and served by the real API app; the executor's
reports go through ``POST /v1/migrations/{id}/reports`` onto the real Kafka governance topic,
from which :class:`Relay` feeds them back to the governor, as the worker's governor agent does.
One clock (``T0`` plus the real time elapsed) stamps the API's reports and the executor's lease
checks, so event time and the executor's time agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.adapters.kube.pods import KubernetesPods
from services.adapters.projection.governance_rows import decision_row
from services.adapters.projection.governance_tables import governance_decisions
from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.domain.governance.input_codec import decode_input
from services.domain.governance.inputs import GovernanceInput
from services.domain.log import LogPosition
from services.domain.migration.records import MigrationReport, WorkloadOnDevice
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass as WorkloadClass
from services.domain.workloads.owners import OwnerLink
from services.processes.migration.executor import MigrationExecutor, PassResult
from tests.api.conftest import Governor
from tests.conftest import TOPIC, as_log
from tests.governance.migration_builders import N1, N2, POLICY, gov, quarantine
from tests.governance.strategies import T0, at, transition
from tests.kubeapi.conftest import NAMESPACE

LEASE_SECONDS = POLICY.migration_lease_seconds


class Clock:
    """``T0`` + 20 s + the real time since it was made (after the quarantine at ``T0`` + 10 s)."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def __call__(self) -> datetime:
        return T0 + timedelta(seconds=20 + time.monotonic() - self._start)


class Governed:
    """The governor's run; :meth:`feed` writes its new decisions to the projection."""

    def __init__(self, governor: Governor) -> None:
        self.governor = governor
        self.run = gov()
        self.written = 0
        self.reports: list[MigrationReport] = []
        self.served: dict[str, str] = {}
        self.lock = asyncio.Lock()

    async def feed(self, *records: GovernanceInput) -> None:
        async with self.lock:
            for record in records:
                self.run.feed(record)
            rows = [decision_row(d) for d in self.run.decisions[self.written :]]
            self.written = len(self.run.decisions)
            if rows:
                await self.governor._insert(governance_decisions, rows)
            # What the API serves from now on (the phases are read only once written).
            self.served = {
                mid: m.phase.value for mid, m in self.run.state.fleet.migrations.migrations.items()
            }

    async def plan(self, pod: dict[str, Any], cls: str, max_age: int | None = None) -> str:
        """The Pod holds ``node-1/GPU-0`` and the device is quarantined: the migration's ID."""
        meta = pod["metadata"]
        fact = WorkloadOnDevice(
            node=N1,
            resource_id="GPU-0",
            workload_uid=f"w-{meta['uid']}",
            pod_uid=meta["uid"],
            namespace=meta["namespace"],
            pod_name=meta["name"],
            migration_class=cls,
            status_version=5,
            observed_at=at(1),
            checkpoint_max_age_seconds=max_age,
        )
        await self.feed(transition(N2, "GPU-0", Health.HEALTHY, 1, 0), fact)
        async with self.lock:
            quarantine(self.run, N1, "GPU-0", 10)
        await self.feed()
        (mid,) = self.run.state.fleet.migrations.migrations
        return str(mid)

    def phase(self, mid: str) -> str:
        """The migration's phase as the API serves it (its decisions are written)."""
        return self.served[mid]


@contextlib.asynccontextmanager
async def relay(bootstrap: str, topic: str, governed: Governed) -> AsyncIterator[None]:
    """Feeds every report appended to ``topic`` to the governor while the block runs."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()

    async def follow() -> None:
        while True:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    decoded = decode_input(record.value)
                    if isinstance(decoded, MigrationReport):
                        governed.reports.append(decoded)
                        await governed.feed(decoded)

    task = asyncio.create_task(follow())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await consumer.stop()


class CountingPods(KubernetesPods):
    """The real adapter, counting the evictions the API server accepted."""

    evictions = 0

    async def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool) -> None:
        await super().evict_pod(namespace, name, uid, dry_run)
        if not dry_run:
            self.evictions += 1


def pod_manifest(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Pod declaring the ``devicestate.io/serving`` readiness gate (unscheduled: no node)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "spec": {
            "containers": [{"name": "main", "image": "registry.example/train:1"}],
            "readinessGates": [{"conditionType": "devicestate.io/serving"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


async def create_pod(admin: client.ApiClient, manifest: dict[str, Any]) -> dict[str, Any]:
    pods = KubernetesPods(admin)
    with contextlib.suppress(ApiException):  # a Pod of an earlier run
        await client.CoreV1Api(admin).delete_namespaced_pod(
            manifest["metadata"]["name"], NAMESPACE, grace_period_seconds=0
        )
    for _ in range(50):
        if await pods.read_pod(NAMESPACE, manifest["metadata"]["name"]) is None:
            break
        await asyncio.sleep(0.1)
    await client.CoreV1Api(admin).create_namespaced_pod(NAMESPACE, manifest)
    pod = await pods.read_pod(NAMESPACE, manifest["metadata"]["name"])
    assert pod is not None
    return pod


async def drive(
    executors: list[MigrationExecutor],
    done: Callable[[], Awaitable[bool]],
    within: float = 30.0,
) -> list[PassResult]:
    """Passes of every executor (at once) until ``done``; fails after ``within`` seconds."""
    results: list[PassResult] = []
    deadline = time.monotonic() + within
    while not await done():
        assert time.monotonic() < deadline, f"not done after {within} s: {results[-4:]}"
        results.extend(await asyncio.gather(*(e.run_pass() for e in executors)))
        await asyncio.sleep(0.3)
    return results


def serving(pod: dict[str, Any]) -> str | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition["type"] == "devicestate.io/serving":
            return str(condition["status"])
    return None


async def replacement_in_directory(
    store: ProjectionStore, pod_name: str, pod_uid: str, workload_uid: str
) -> None:
    """The replacement Pod of workload ``workload_uid`` holds ``node-2/GPU-0`` in the directory,
    written by ``apply_batch`` as the worker writes it (an observation and its workload)."""
    observed = T0 + timedelta(seconds=30)
    event = DeviceHealthObserved(
        node=N2,
        namespace=NAMESPACE,
        pod_name=pod_name,
        pod_uid=pod_uid,
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id="GPU-0",
        source=DeviceSource.DEVICE_PLUGIN,
        health=Health.HEALTHY,
        status_version=40,
        observed_at=observed,
    )
    record = PodWorkloadObserved(
        node=N2,
        namespace=NAMESPACE,
        pod_name=pod_name,
        pod_uid=pod_uid,
        status_version=41,
        observed_at=observed,
        chain=(OwnerLink("Job", "train", workload_uid, "batch/v1"),),
        migration_class=WorkloadClass.CHECKPOINTED,
    )
    position = LogPosition(TOPIC, 0, 1)
    await store.apply_batch(
        LoggedBatch(
            as_log([event]),
            event_times=[(position, observed)],
            workloads=[(position, record)],
        )
    )
