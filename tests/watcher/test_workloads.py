"""The watcher's workload resolver (``services/processes/watcher/workloads.py``) over
:class:`~tests.fakes.owner_api.FakeOwners`: what it publishes, what it reads, what it retries.
The real API server: ``tests/kubeapi/test_watcher_workloads.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from services.adapters.kube.errors import KubeApiError
from services.domain.watch.owner_cache import OwnerCache
from services.domain.watch.pod_tracker import WatchKind
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass
from services.processes.watcher.workloads import WorkloadResolver
from tests.fakes.owner_api import FakeOwners
from tests.workloads.objects import APPS, obj, ref

AT = datetime(2026, 12, 2, 10, tzinfo=UTC)


def pod(name: str, uid: str, version: str, **fields: Any) -> dict[str, Any]:
    return obj(name, uid, node="gpu-1", resource_version=version, **fields)


def deployment_owners() -> FakeOwners:
    owners = FakeOwners()
    owners.add(
        APPS,
        "replicasets",
        obj("web-7d9", "rs-1", owners=[ref("Deployment", "web", "d-1", APPS)]),
    )
    owners.add(
        APPS,
        "deployments",
        obj("web", "d-1", annotations={"devicestate.io/migration-class": "checkpointed"}),
    )
    return owners


ON_RS = [ref("ReplicaSet", "web-7d9", "rs-1", APPS)]


class Run:
    """A resolver running in a task; ``published`` collects its records."""

    def __init__(self, owners: FakeOwners, cache_size: int = 100) -> None:
        self.published: list[PodWorkloadObserved] = []
        self.stop = asyncio.Event()

        async def publish(record: PodWorkloadObserved) -> None:
            self.published.append(record)

        self.resolver = WorkloadResolver(
            owners, publish, OwnerCache(cache_size), retry_seconds=(0.05,)
        )

    async def until(self, check: Callable[[], bool], seconds: float = 5.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not check():
            assert loop.time() < deadline, f"published: {self.published}"
            await asyncio.sleep(0.01)


@pytest.fixture
async def run() -> AsyncIterator[Callable[[FakeOwners], Run]]:
    tasks: list[tuple[Run, asyncio.Task[None]]] = []

    def start(owners: FakeOwners) -> Run:
        r = Run(owners)
        tasks.append((r, asyncio.create_task(r.resolver.run(r.stop))))
        return r

    yield start
    for r, task in tasks:
        r.stop.set()
        await asyncio.wait_for(task, 5)


async def test_chain_resolved_once_per_owner_and_published(
    run: Callable[[FakeOwners], Run],
) -> None:
    owners = deployment_owners()
    r = run(owners)
    r.resolver.pod_changed(WatchKind.ADDED, pod("web-a", "p-1", "10", owners=ON_RS), True, AT)
    r.resolver.pod_changed(WatchKind.ADDED, pod("web-b", "p-2", "11", owners=ON_RS), True, AT)
    await r.until(lambda: len(r.published) == 2)
    first = r.published[0]
    assert [c.kind for c in first.chain] == ["ReplicaSet", "Deployment"] and first.chain_complete
    assert first.migration_class is MigrationClass.CHECKPOINTED and first.status_version == 10
    assert first.observed_at == AT
    assert len(owners.reads) == 2  # the second Pod's owners came from the cache


async def test_unchanged_stale_and_released_pods_publish_nothing(
    run: Callable[[FakeOwners], Run],
) -> None:
    owners = deployment_owners()
    r = run(owners)
    r.resolver.pod_changed(WatchKind.ADDED, pod("web-a", "p-1", "10", owners=ON_RS), True, AT)
    await r.until(lambda: len(r.published) == 1)
    # Same facts at a newer resourceVersion; an older reading; a Pod holding no device.
    r.resolver.pod_changed(WatchKind.MODIFIED, pod("web-a", "p-1", "12", owners=ON_RS), True, AT)
    r.resolver.pod_changed(WatchKind.MODIFIED, pod("web-a", "p-1", "9"), True, AT)
    r.resolver.pod_changed(WatchKind.ADDED, pod("idle", "p-3", "13"), False, AT)
    await asyncio.sleep(0.2)
    assert len(r.published) == 1 and r.resolver.pending == 0
    # The Pod's own annotation changes the class: published at once.
    annotated = pod(
        "web-a",
        "p-1",
        "14",
        owners=ON_RS,
        annotations={"devicestate.io/migration-class": "sharded"},
    )
    r.resolver.pod_changed(WatchKind.MODIFIED, annotated, True, AT)
    await r.until(lambda: len(r.published) == 2)
    assert r.published[1].migration_class is MigrationClass.SHARDED
    assert r.published[1].shard == "web-a" and r.published[1].status_version == 14
    # Deleted: forgotten, so a later ADDED of the same UID is published again.
    r.resolver.pod_changed(WatchKind.DELETED, annotated, False, AT)
    r.resolver.pod_changed(WatchKind.ADDED, annotated, True, AT)
    await r.until(lambda: len(r.published) == 3)


async def test_transient_failure_published_as_far_as_known_then_retried(
    run: Callable[[FakeOwners], Run],
) -> None:
    owners = deployment_owners()
    owners.failures = [KubeApiError(503, "etcdserver: leader changed")]
    r = run(owners)
    r.resolver.pod_changed(WatchKind.ADDED, pod("web-a", "p-1", "10", owners=ON_RS), True, AT)
    await r.until(lambda: len(r.published) == 2)
    partial, whole = r.published
    assert [c.kind for c in partial.chain] == ["ReplicaSet"] and not partial.chain_complete
    assert partial.chain_reason == (
        "ReplicaSet web-7d9: GET failed, retried: HTTP 503: etcdserver: leader changed"
    )
    assert partial.migration_class is MigrationClass.NON_RECOVERABLE  # the owner is not known
    assert whole.chain_complete and whole.migration_class is MigrationClass.CHECKPOINTED
    await asyncio.sleep(0.2)
    assert len(r.published) == 2 and r.resolver.pending == 0  # no retry after the success


async def test_refusal_is_published_with_its_reason_and_not_retried(
    run: Callable[[FakeOwners], Run],
) -> None:
    owners = deployment_owners()
    owners.failures = [KubeApiError(403, 'replicasets.apps "web-7d9" is forbidden')]
    r = run(owners)
    r.resolver.pod_changed(WatchKind.ADDED, pod("web-a", "p-1", "10", owners=ON_RS), True, AT)
    await r.until(lambda: len(r.published) == 1)
    assert r.published[0].chain_reason is not None
    assert r.published[0].chain_reason.startswith("ReplicaSet web-7d9: GET refused: HTTP 403")
    await asyncio.sleep(0.2)
    assert len(r.published) == 1 and r.resolver.pending == 0


async def test_after_a_list_owners_are_read_again_and_records_republished(
    run: Callable[[FakeOwners], Run],
) -> None:
    owners = deployment_owners()
    r = run(owners)
    web = pod("web-a", "p-1", "10", owners=ON_RS)
    r.resolver.pod_changed(WatchKind.ADDED, web, True, AT)
    await r.until(lambda: len(r.published) == 1)
    r.resolver.relisted()
    r.resolver.pod_changed(WatchKind.ADDED, web, True, AT)
    await r.until(lambda: len(r.published) == 2)
    assert len(owners.reads) == 4 and len(r.resolver.cache) == 2


async def test_an_unexpected_read_error_is_retried_not_fatal(
    run: Callable[[FakeOwners], Run],
) -> None:
    owners = deployment_owners()
    owners.failures = [OSError("connection reset")]
    r = run(owners)
    r.resolver.pod_changed(WatchKind.ADDED, pod("web-a", "p-1", "10", owners=ON_RS), True, AT)
    await r.until(lambda: len(r.published) == 2)
    assert r.published[0].chain_reason == (
        "ReplicaSet web-7d9: GET failed, retried: OSError('connection reset')"
    )
    assert r.published[1].chain_complete and r.resolver.fetch_failures == 1
