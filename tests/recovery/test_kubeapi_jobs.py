"""KubernetesJobExecutor against a real kube-apiserver (``tests/kubeapi``'s harness): the Job and
ResourceClaim manifests pass the server's validation, with the RBAC the executor documents.

No controller-manager or kubelet runs there: a dry-run is all that can pass; a live Job is created,
never runs, and is deleted when the stage deadline passes.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client

from services.adapters.kube.objects import KubernetesObjects
from services.domain.events import DeviceSource
from services.domain.governance.inputs import RecoveryStage
from services.processes.recovery.executors import (
    DRY_RUN_DETAIL,
    KubernetesJobExecutor,
    RecoveryCheck,
)

# The harness's session fixtures (a second API server when tests/kubeapi runs in the same session).
from tests.kubeapi import conftest as harness

kubeapi = harness.kubeapi
NAMESPACE: str = harness.NAMESPACE
kube_api = harness.kube_api
admin_client = harness.admin_client
service_client = harness.service_client

DRIVER = "gpu.example.com"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _check(node: str, source: DeviceSource, resource_id: str, **fields: Any) -> RecoveryCheck:
    values: dict[str, Any] = dict(
        node=node,
        resource_id=resource_id,
        stage=RecoveryStage.CANARY,
        quarantine_id=f"{node}/{resource_id}@17",
        attempt=1,
        resource_name="nvidia.com/gpu"
        if source is DeviceSource.DEVICE_PLUGIN
        else "claim:gpus/gpu",
        source=source,
        holder="test/1/deadbeef",
        fencing_token=4,
        deadline=datetime.now(UTC) + timedelta(minutes=10),
    )
    values.update(fields)
    return RecoveryCheck(**values)


async def _node_with_dra(admin: client.ApiClient) -> str:
    """A Node (tainted as a quarantine would) with a ResourceSlice of two GPUs and a DeviceClass."""
    node = _name("gpu-node")
    await client.CoreV1Api(admin).create_node(
        {
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": f"host-{node}"}},
            "spec": {
                "taints": [
                    {"key": "devicestate.io/quarantined", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                ]
            },
        }
    )
    resource = client.ResourceV1Api(admin)
    await resource.create_resource_slice(
        {
            "metadata": {"name": _name(f"{node}-slice")},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{node}-{i}"}}}
                    for i in range(2)
                ],
            },
        }
    )
    try:
        await resource.create_device_class(
            {
                "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
            }
        )
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    return node


async def _grant_documented_rbac(admin: client.ApiClient) -> None:
    """The rights services/processes/recovery/kube.py lists, to the service identity."""
    rbac = client.RbacAuthorizationV1Api(admin)
    name = _name("devicestate-recovery")
    subject = {
        "kind": "ServiceAccount",
        "name": kubeapi.SERVICE_ACCOUNT,
        "namespace": kubeapi.SERVICE_NAMESPACE,
    }
    await rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceslices", "resourceclaims"],
                    "verbs": ["list"],
                },
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["deviceclasses"],
                    "verbs": ["get"],
                },
            ],
        }
    )
    await rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [subject],
        }
    )
    await rbac.create_namespaced_role(
        NAMESPACE,
        {
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["batch"],
                    "resources": ["jobs"],
                    "verbs": ["create", "get", "delete"],
                },
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaims"],
                    "verbs": ["create"],
                },
            ],
        },
    )
    await rbac.create_namespaced_role_binding(
        NAMESPACE,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        },
    )


async def _eventually_allowed(run: Any, seconds: float = 15.0) -> Any:
    """The RBAC authorizer sees new bindings through an informer: retry 403 answers briefly."""
    async with asyncio.timeout(seconds):
        while True:
            result = await run()
            if "403" not in result.detail:
                return result
            await asyncio.sleep(0.2)


async def test_dry_run_jobs_and_claims_are_accepted_by_the_api_server(
    admin_client: client.ApiClient, service_client: client.ApiClient
) -> None:
    node = await _node_with_dra(admin_client)
    await _grant_documented_rbac(admin_client)
    executor = KubernetesJobExecutor(
        KubernetesObjects(service_client),
        namespace=NAMESPACE,
        image="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        dry_run=True,
    )

    plugin = _check(node, DeviceSource.DEVICE_PLUGIN, "GPU-a5ced723-33de-5eef-89d7-909771744097")
    result = await _eventually_allowed(lambda: executor.run(plugin))
    assert (result.passed, result.detail) == (True, DRY_RUN_DETAIL)

    dra = _check(node, DeviceSource.DRA, f"{DRIVER}/{node}/gpu-1", resource_claim=None)
    result = await _eventually_allowed(lambda: executor.run(dra))
    assert (result.passed, result.detail) == (True, DRY_RUN_DETAIL), result.detail

    unknown = _check(node, DeviceSource.DRA, f"k8s.{DRIVER}/claim=abc-gpu-1", resource_claim=None)
    result = await executor.run(unknown)
    assert not result.passed and result.detail.startswith("physical identity unknown")

    # Dry-run: nothing was stored.
    jobs = await client.BatchV1Api(admin_client).list_namespaced_job(NAMESPACE)
    assert [j.metadata.name for j in jobs.items if j.metadata.name.startswith("devicestate-")] == []
    claims = await client.ResourceV1Api(admin_client).list_namespaced_resource_claim(NAMESPACE)
    assert claims.items == []


async def test_live_job_is_created_and_deleted_when_the_deadline_passes(
    admin_client: client.ApiClient,
) -> None:
    node = await _node_with_dra(admin_client)
    executor = KubernetesJobExecutor(
        KubernetesObjects(admin_client),
        namespace=NAMESPACE,
        image="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        dry_run=False,
        poll_seconds=0.2,
    )
    check = _check(
        node,
        DeviceSource.DRA,
        f"{DRIVER}/{node}/gpu-0",
        lease_expires_at=datetime.now(UTC) + timedelta(seconds=2),
    )
    result = await executor.run(check)
    assert not result.passed and "did not finish before the stage deadline" in result.detail
    batch = client.BatchV1Api(admin_client)
    # Deleted (in the background: it may linger with a deletion timestamp without a GC running).
    jobs = await batch.list_namespaced_job(NAMESPACE)
    assert all(
        j.metadata.deletion_timestamp is not None
        for j in jobs.items
        if j.metadata.name.startswith("devicestate-canary-")
    )
    claims = await client.ResourceV1Api(admin_client).list_namespaced_resource_claim(NAMESPACE)
    [claim] = [c for c in claims.items if c.metadata.name.startswith("devicestate-canary-")]
    assert claim.metadata.owner_references[0].kind == "Job"  # the garbage collector's to delete
