"""Restart memory (issue 11 item 7) end to end: real kube-apiserver, Kafka and PostgreSQL.

The watcher (``devicestate watch``, a subprocess) and a worker (``python -m streams.cli``) run;
the watcher is killed (SIGKILL: no goodbye), a Pod is deleted while it is down, and a new
watcher starts with an empty memory. Its LIST publishes one ``PodsListed`` snapshot per node, and
the worker releases the deleted Pod's allocation (before, it stayed until a later event of that
Pod, which never comes). A replay of the topic then gives the same projection
(``replay --verify``: tombstones included).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from kubernetes_asyncio import client
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.testenv import kubeapi
from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.schema_admin import drop_schema
from services.domain.events import PodsListed
from services.domain.records import TopicRecord
from services.processes.replay.run import replay, verify
from services.runtime.config import Settings
from tests.kubeapi.kube_rest import KubeREST, apply_identities, wait_until_allowed
from tests.kubeapi.test_watcher_live import (  # noqa: F401 (watcher_process: a fixture)
    GPU,
    IMAGE,
    WATCHER_ACCOUNT,
    Cluster,
    TopicTail,
    WatcherProcess,
    _container_status,
    _gpu_entry,
    observations,
    watcher_process,
)
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration


def snapshots(records: list[TopicRecord], node: str) -> list[PodsListed]:
    return [r for r in records if isinstance(r, PodsListed) and r.node == node]


async def eventually(check: Callable[[], Awaitable[bool]], what: str, worker: Any) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 90
    while not await check():
        if worker.process.poll() is not None or loop.time() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}; worker:\n{worker.log_text()[-4000:]}"
            )
        await asyncio.sleep(0.2)


async def test_a_restarted_watcher_releases_the_pods_deleted_while_it_was_down(
    kube_api: kubeapi.KubeAPI,
    admin_client: client.ApiClient,
    rendered: dict[str, list[dict[str, Any]]],
    stream_settings: Settings,
    worker_process: Any,
    watcher_process: Callable[..., WatcherProcess],  # noqa: F811
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    settings = with_governance_topics(stream_settings)
    async with KubeREST(kube_api) as rest:
        await apply_identities(rest, rendered["base"])
        await wait_until_allowed(rest, WATCHER_ACCOUNT, "watch", "pods")
        kubeconfig = await rest.service_account_kubeconfig(
            "devicestate", WATCHER_ACCOUNT, tmp_path / "watcher.kubeconfig"
        )
    cluster = Cluster(admin_client)
    tag = uuid4().hex[:6]
    node, namespace = f"gpu-r-{tag}", f"restart-{tag}"
    await cluster.core.create_namespace({"metadata": {"name": namespace}})
    await cluster.node(node, gpus=2)
    uids, gpus = {}, {}
    for name in ("p1", "p2"):
        uids[name] = await cluster.pod(
            namespace,
            name,
            node,
            containers=[{"name": "a", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}],
        )
        gpus[name] = f"GPU-{tag}-{name}"
        await cluster.status(
            namespace,
            name,
            containerStatuses=[_container_status("a", [_gpu_entry(gpus[name], "Healthy")])],
        )
    reads = DeviceReads(engine, settings.database_schema)

    async def held_by(name: str) -> list[str]:
        device = await reads.get_device(node, gpus[name])
        return [] if device is None else [a.pod_uid for a in device.allocations]

    worker = worker_process(settings)
    first = watcher_process(settings, kubeconfig)
    async with TopicTail(settings.kafka_bootstrap_servers, settings.topic, first) as tail:
        await tail.wait_for(
            lambda rs: all(observations(rs, node, gpu) for gpu in gpus.values()),
            "the listed Pods' devices",
            60,
        )

        async def both_held() -> bool:
            return await held_by("p1") == [uids["p1"]] and await held_by("p2") == [uids["p2"]]

        await eventually(both_held, "both allocations in the directory", worker)

        first.signal(signal.SIGKILL)  # the watcher's memory is gone with it
        first.process.wait()
        await cluster.delete_pod(namespace, "p1")  # nobody sees its DELETED

        second = watcher_process(settings, kubeconfig)
        tail._watcher = second  # the tail now checks the running watcher
        records = await tail.wait_for(
            lambda rs: len(snapshots(rs, node)) >= 2, "the second LIST's snapshot", 60
        )
        latest = snapshots(records, node)[-1]
        assert latest.pod_uids == (uids["p2"],)
        assert latest.list_version is not None

        async def p1_released() -> bool:
            return await held_by("p1") == []

        await eventually(p1_released, "the deleted Pod's allocation released", worker)
        assert await held_by("p2") == [uids["p2"]]
        async with engine.connect() as conn:
            tombstone = (
                await conn.execute(
                    text(
                        f'SELECT node, status_version FROM "{settings.database_schema}"'
                        ".pod_tombstones WHERE pod_uid = :uid"
                    ),
                    {"uid": uids["p1"]},
                )
            ).one()
        assert (tombstone.node, int(tombstone.status_version)) == (node, latest.list_version)
        assert second.stop() == 0

    worker.signal(signal.SIGTERM)
    assert await worker.wait() == 0
    replayed = f"{settings.database_schema}_r"
    try:
        await replay(settings, engine=engine, database_url=settings.database_url, schema=replayed)
        assert await verify(engine, settings.database_schema, replayed) == []
    finally:
        await drop_schema(engine, replayed)
