"""The watcher's workloads against a real kube-apiserver (issue 13 item 1): a Deployment's
ReplicaSet and Pod, a Job and its Pod, a bare Pod and a Pod whose ReplicaSet is gone, made as
API objects (no controller-manager runs on this server: the test writes what the Deployment and
Job controllers would, ownerReferences included), each Pod given a GPU in its status as kubelet
reports it.

``devicestate watch`` runs as a subprocess with the ``devicestate-watcher`` ServiceAccount and
the RBAC of ``deploy/`` only; it must GET the owners, publish the chains and migration classes
as ``PodWorkloadObserved`` on the health topic, and a worker projects them into
``pod_workloads`` (read back through ``WorkloadReads``, as ``GET /v1/workloads`` reads them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from kubernetes_asyncio import client
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.testenv import kubeapi
from services.adapters.projection.reads_workloads import WorkloadFilters, WorkloadReads
from services.domain.records import TopicRecord
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass, MigrationSource
from services.runtime.config import Settings
from tests.kubeapi.kube_rest import KubeREST, apply_identities, wait_until_allowed
from tests.kubeapi.test_watcher_live import (
    GPU,
    IMAGE,
    WATCHER_ACCOUNT,
    Cluster,
    TopicTail,
    WatcherProcess,
    _container_status,
    _gpu_entry,
    watcher_process,  # noqa: F401 - the fixture
)
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

CONTAINERS = [{"name": "a", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}]
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "train"}},
    "spec": {"restartPolicy": "Never", "containers": CONTAINERS},
}


POD_TEMPLATE = {"metadata": TEMPLATE["metadata"], "spec": {"containers": CONTAINERS}}
"""The template of a Deployment or ReplicaSet (restartPolicy Always, the default)."""


def _owner(kind: str, api_version: str, created: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": created.metadata.name,
        "uid": created.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def _pod(
    cluster: Cluster,
    namespace: str,
    name: str,
    node: str,
    owner: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    if annotations is not None:
        metadata["annotations"] = annotations
    created = await cluster.core.create_namespaced_pod(
        namespace,
        {"metadata": metadata, "spec": {"nodeName": node, **TEMPLATE["spec"]}},
    )
    await cluster.status(
        namespace,
        name,
        phase="Running",
        containerStatuses=[_container_status("a", [_gpu_entry(f"GPU-{name}", "Healthy")])],
    )
    return str(created.metadata.uid)


def workloads(records: list[TopicRecord]) -> dict[str, PodWorkloadObserved]:
    """The newest record of each Pod UID."""
    return {r.pod_uid: r for r in records if isinstance(r, PodWorkloadObserved)}


async def test_watcher_publishes_the_controller_chains(
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
    tag = uuid4().hex[:6]
    node, namespace = f"gpu-w-{tag}", f"wl-{tag}"
    cluster = Cluster(admin_client)
    apps, batch = client.AppsV1Api(admin_client), client.BatchV1Api(admin_client)
    async with KubeREST(kube_api) as rest:
        await apply_identities(rest, rendered["base"])
        for resource, group in (
            ("replicasets", "apps"),
            ("deployments", "apps"),
            ("jobs", "batch"),
        ):
            await wait_until_allowed(rest, WATCHER_ACCOUNT, "get", resource, group=group)
        await wait_until_allowed(rest, WATCHER_ACCOUNT, "list", "pods")
        kubeconfig = await rest.service_account_kubeconfig(
            "devicestate", WATCHER_ACCOUNT, tmp_path / "watcher.kubeconfig"
        )
    await cluster.core.create_namespace({"metadata": {"name": namespace}})
    await cluster.node(node, gpus=4)

    # A Deployment declaring the class for its Pods; its ReplicaSet; one Pod of it (before the
    # watcher starts: the first LIST finds it).
    selector = {"matchLabels": {"app": "train"}}
    deployment = await apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {
                "name": "serve",
                "annotations": {
                    "devicestate.io/migration-class": "checkpointed",
                    "devicestate.io/checkpoint-max-age-seconds": "600",
                },
            },
            "spec": {
                "selector": selector,
                "template": POD_TEMPLATE,
            },  # type: ignore[index]
        },
    )
    replica_set = await apps.create_namespaced_replica_set(
        namespace,
        {
            "metadata": {
                "name": "serve-7d9",
                "ownerReferences": [_owner("Deployment", "apps/v1", deployment)],
            },
            "spec": {
                "selector": selector,
                "template": POD_TEMPLATE,
            },  # type: ignore[index]
        },
    )
    serve_uid = await _pod(
        cluster, namespace, "serve-7d9-x1", node, _owner("ReplicaSet", "apps/v1", replica_set)
    )

    worker_process(settings)
    watcher = watcher_process(settings, kubeconfig)
    async with TopicTail(settings.kafka_bootstrap_servers, settings.topic, watcher) as tail:
        records = await tail.wait_for(
            lambda rs: serve_uid in workloads(rs), "the listed Deployment Pod's workload", 60
        )
        serve = workloads(records)[serve_uid]
        assert [(c.kind, c.name) for c in serve.chain] == [
            ("ReplicaSet", "serve-7d9"),
            ("Deployment", "serve"),
        ]
        assert serve.chain_complete and serve.chain_reason is None
        assert serve.chain[-1].uid == deployment.metadata.uid
        assert serve.migration_class is MigrationClass.CHECKPOINTED
        assert serve.migration_source is MigrationSource.OWNER
        assert serve.checkpoint_max_age_seconds == 600
        assert serve.node == node and serve.namespace == namespace

        # Watched: a Job's Pod declaring itself sharded, a bare Pod, a Pod whose ReplicaSet is gone.
        job = await batch.create_namespaced_job(
            namespace,
            {
                "metadata": {"name": "train"},
                "spec": {"manualSelector": True, "selector": selector, "template": TEMPLATE},
            },
        )
        train_uid = await _pod(
            cluster,
            namespace,
            "train-0",
            node,
            _owner("Job", "batch/v1", job),
            {"devicestate.io/migration-class": "sharded", "devicestate.io/shard": "rank-0"},
        )
        bare_uid = await _pod(
            cluster, namespace, "solo", node, annotations={"devicestate.io/migration-class": "x"}
        )
        gone = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "old-rs",
            "uid": str(uuid4()),
            "controller": True,
        }
        orphan_uid = await _pod(cluster, namespace, "orphan", node, gone)
        records = await tail.wait_for(
            lambda rs: {train_uid, bare_uid, orphan_uid} <= workloads(rs).keys(),
            "the watched Pods' workloads",
            60,
        )
        found = workloads(records)
        train = found[train_uid]
        assert [(c.kind, c.name, c.uid) for c in train.chain] == [
            ("Job", "train", job.metadata.uid)
        ]
        assert train.migration_class is MigrationClass.SHARDED and train.shard == "rank-0"
        bare = found[bare_uid]
        assert bare.chain == () and bare.chain_complete and bare.workload_kind == "Pod"
        assert bare.migration_class is MigrationClass.NON_RECOVERABLE
        assert bare.migration_reasons and "unknown value 'x'" in bare.migration_reasons[0]
        orphan = found[orphan_uid]
        assert [c.name for c in orphan.chain] == ["old-rs"] and not orphan.chain_complete
        assert orphan.chain_reason == "ReplicaSet old-rs: not found (deleted?)"

        # The worker projects them: the directory holds each Pod with its workload.
        reads = WorkloadReads(engine, settings.database_schema)
        expected = {
            serve_uid: "Deployment",
            train_uid: "Job",
            bare_uid: "Pod",
            orphan_uid: "ReplicaSet",
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            page = await reads.list_workloads(WorkloadFilters(quarantined=False), 100, None)
            # Only this test's Pods: the shared API server may hold other tests' Pods.
            kinds = {
                i.row["pod_uid"]: i.row["workload_kind"]
                for i in page.items
                if i.row["pod_uid"] in expected
            }
            if kinds == expected:
                break
            assert loop.time() < deadline, f"pod_workloads holds {kinds}"
            await asyncio.sleep(0.5)
        assert (
            watcher.metrics()[
                'devicestate_watcher_events_published_total{type="PodWorkloadObserved"}'
            ]
            >= 4
        )
