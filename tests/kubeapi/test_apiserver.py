"""What a real kube-apiserver (v1.36) accepts and refuses, as the watcher will meet it.

The Pod status shape is kubelet's (KEP-4680 ``allocatedResourcesStatus``); the refusals pin
down the server's validation, so the watcher need not expect what a server can never send:
health is exactly one of Healthy/Unhealthy/Unknown, resource IDs are unique within an entry, a
message is non-empty, and an entry's name matches one of the container's resource requests or
``claim:<claim>[/<request>]``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from devtools.testenv import kubeapi
from tests.kubeapi.conftest import NAMESPACE

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
STARTED_AT = "2026-11-29T12:00:00Z"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _gpu_id() -> str:
    return f"GPU-{uuid.uuid4()}"


async def _raw(call: Awaitable[Any]) -> dict[str, Any]:
    """The JSON the server sent (``_preload_content=False`` calls), not the client's models."""
    response = await call
    data = json.loads(await response.read())
    assert isinstance(data, dict)
    return data


async def _node(admin: client.ApiClient) -> str:
    core = client.CoreV1Api(admin)
    name = _name("gpu-node")
    await core.create_node(
        {"metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}}}
    )
    await core.patch_node_status(
        name, {"status": {"capacity": {GPU: "8"}, "allocatable": {GPU: "8"}}}
    )
    return name


async def _gpu_pod(admin: client.ApiClient, node: str, **spec: Any) -> str:
    """A Pod bound to ``node`` (nodeName, as after scheduling) with one container requesting a GPU."""
    name = _name("trainer")
    container: dict[str, Any] = {
        "name": "cuda",
        "image": "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04",
        "resources": {"limits": {GPU: "1"}},
    }
    container.update(spec.pop("container", {}))
    body = {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"nodeName": node, "containers": [container], **spec},
    }
    await client.CoreV1Api(admin).create_namespaced_pod(NAMESPACE, body)
    return name


def _running_status(allocated: list[dict[str, Any]]) -> dict[str, Any]:
    """A status patch as kubelet would send it for a running container."""
    return {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04",
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": STARTED_AT}},
                    "allocatedResourcesStatus": allocated,
                }
            ],
        }
    }


async def test_it_is_a_real_kube_apiserver(
    kube_api: kubeapi.KubeAPI, admin_client: client.ApiClient
) -> None:
    version = await client.VersionApi(admin_client).get_code()
    assert version.git_version == f"v{kube_api.kubernetes_version}"
    assert kube_api.kubernetes_version.startswith("1.36.")
    groups = await client.ApisApi(admin_client).get_api_versions()
    resource = next(g for g in groups.groups if g.name == "resource.k8s.io")
    served = {v.version for v in resource.versions}
    assert {"v1", "v1beta2"} <= served, served


async def test_pod_status_allocated_resources_status_round_trip(
    admin_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(admin_client)
    node = await _node(admin_client)
    pod = await _gpu_pod(admin_client, node)
    gpu = _gpu_id()
    allocated = [
        {
            "name": GPU,
            "resources": [{"resourceID": gpu, "health": "Unhealthy", "message": "XID 79"}],
        }
    ]
    await core.patch_namespaced_pod_status(pod, NAMESPACE, _running_status(allocated))

    stored = await _raw(core.read_namespaced_pod_status(pod, NAMESPACE, _preload_content=False))
    assert stored["spec"]["nodeName"] == node
    (status,) = stored["status"]["containerStatuses"]
    assert status["allocatedResourcesStatus"] == allocated

    # Recovery: kubelet replaces the list; the same device reported Healthy, message dropped.
    healthy = [{"name": GPU, "resources": [{"resourceID": gpu, "health": "Healthy"}]}]
    await core.patch_namespaced_pod_status(pod, NAMESPACE, _running_status(healthy))
    model = await core.read_namespaced_pod_status(pod, NAMESPACE)
    (entry,) = model.status.container_statuses[0].allocated_resources_status
    assert (entry.name, entry.resources[0].resource_id) == (GPU, gpu)
    assert (entry.resources[0].health, entry.resources[0].message) == ("Healthy", None)


async def test_a_watch_sees_the_status_change(admin_client: client.ApiClient) -> None:
    core = client.CoreV1Api(admin_client)
    pod = await _gpu_pod(admin_client, await _node(admin_client))
    listed = await core.list_namespaced_pod(NAMESPACE, field_selector=f"metadata.name={pod}")
    gpu = _gpu_id()
    allocated = [{"name": GPU, "resources": [{"resourceID": gpu, "health": "Unknown"}]}]

    async def patch_soon() -> None:
        await asyncio.sleep(0.5)
        await core.patch_namespaced_pod_status(pod, NAMESPACE, _running_status(allocated))

    patcher = asyncio.create_task(patch_soon())
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(30), watch.Watch() as stream:
        async for event in stream.stream(
            core.list_namespaced_pod,
            NAMESPACE,
            field_selector=f"metadata.name={pod}",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=20,
        ):
            raw = event["raw_object"]
            statuses = raw.get("status", {}).get("containerStatuses") or []
            if event["type"] == "MODIFIED" and statuses:
                seen.append(statuses[0])
                break
    await patcher
    assert seen and seen[0]["allocatedResourcesStatus"] == allocated


INVALID = {
    "health not in the enum": (
        [{"name": GPU, "resources": [{"resourceID": "GPU-x", "health": "Broken"}]}],
        'Unsupported value: "Broken"',
    ),
    "health is case-sensitive": (
        [{"name": GPU, "resources": [{"resourceID": "GPU-x", "health": "unhealthy"}]}],
        'Unsupported value: "unhealthy"',
    ),
    "health missing": (
        [{"name": GPU, "resources": [{"resourceID": "GPU-x"}]}],
        'Unsupported value: ""',
    ),
    "duplicate resource ID in one entry": (
        [
            {
                "name": GPU,
                "resources": [
                    {"resourceID": "GPU-x", "health": "Healthy"},
                    {"resourceID": "GPU-x", "health": "Unhealthy"},
                ],
            }
        ],
        "Duplicate value",
    ),
    "empty message": (
        [{"name": GPU, "resources": [{"resourceID": "GPU-x", "health": "Healthy", "message": ""}]}],
        "must be non-empty if specified",
    ),
    "message over 1024 bytes": (
        [
            {
                "name": GPU,
                "resources": [
                    {"resourceID": "GPU-x", "health": "Unhealthy", "message": "x" * 1025}
                ],
            }
        ],
        "Too long",
    ),
    "name not among the container's requests": (
        [{"name": "amd.com/gpu", "resources": [{"resourceID": "GPU-x", "health": "Healthy"}]}],
        "must match one of the container's resource requests",
    ),
    "claim not among the container's claims": (
        [{"name": "claim:nope", "resources": [{"resourceID": "GPU-x", "health": "Healthy"}]}],
        "must match one of the container's resource claims",
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
async def test_the_server_rejects_invalid_allocated_resources_status(
    admin_client: client.ApiClient, case: str
) -> None:
    allocated, message = INVALID[case]
    core = client.CoreV1Api(admin_client)
    pod = await _gpu_pod(admin_client, await _node(admin_client))
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod_status(pod, NAMESPACE, _running_status(allocated))
    assert caught.value.status == 422, caught.value.body
    body = json.loads(caught.value.body)
    assert body["reason"] == "Invalid"
    assert "allocatedResourcesStatus" in body["message"]
    assert message in body["message"], body["message"]
    stored = await core.read_namespaced_pod_status(pod, NAMESPACE)
    assert not stored.status.container_statuses  # nothing of the refused patch was kept


async def test_dra_claim_entries_are_accepted(admin_client: client.ApiClient) -> None:
    """A DRA-allocated device: the entry is named ``claim:<pod claim name>/<request>``."""
    core = client.CoreV1Api(admin_client)
    pod = await _gpu_pod(
        admin_client,
        await _node(admin_client),
        resourceClaims=[{"name": "gpus", "resourceClaimName": "training-gpus"}],
        container={"resources": {"claims": [{"name": "gpus", "request": "gpu"}]}},
    )
    gpu = _gpu_id()
    allocated = [
        {"name": "claim:gpus/gpu", "resources": [{"resourceID": gpu, "health": "Unhealthy"}]}
    ]
    await core.patch_namespaced_pod_status(pod, NAMESPACE, _running_status(allocated))
    stored = await _raw(core.read_namespaced_pod_status(pod, NAMESPACE, _preload_content=False))
    assert stored["status"]["containerStatuses"][0]["allocatedResourcesStatus"] == allocated


async def test_the_service_identity_needs_rbac(
    admin_client: client.ApiClient, service_client: client.ApiClient
) -> None:
    review = await client.AuthenticationV1Api(service_client).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review.status.user_info.username == kubeapi.SERVICE_USER
    assert set(kubeapi.SERVICE_GROUPS) <= set(review.status.user_info.groups)

    core = client.CoreV1Api(service_client)
    with pytest.raises(ApiException) as caught:
        await core.list_namespaced_pod(NAMESPACE)
    assert caught.value.status == 403

    rbac = client.RbacAuthorizationV1Api(admin_client)
    role = _name("devicestate-watcher")
    await rbac.create_cluster_role(
        {
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        }
    )
    await rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": kubeapi.SERVICE_ACCOUNT,
                    "namespace": kubeapi.SERVICE_NAMESPACE,
                }
            ],
        }
    )
    # The RBAC authorizer reads through an informer: allow it a moment to see the binding.
    async with asyncio.timeout(15):
        while True:
            try:
                pods = await core.list_namespaced_pod(NAMESPACE)
                break
            except ApiException as exc:
                assert exc.status == 403, exc.body
                await asyncio.sleep(0.1)
    assert pods.items is not None
    await core.list_node()

    # Read-only: still no right to write Pod status.
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod_status("any", NAMESPACE, {"status": {}})
    assert caught.value.status == 403


async def test_dra_objects_can_be_created(admin_client: client.ApiClient) -> None:
    resource = client.ResourceV1Api(admin_client)
    device_class = _name("gpu")
    await resource.create_device_class(
        {
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    node = await _node(admin_client)
    gpu = _gpu_id()
    slice_name = _name("gpu-slice")
    await resource.create_resource_slice(
        {
            "metadata": {"name": slice_name},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "gpu-0",
                        "attributes": {"uuid": {"string": gpu}},
                        "capacity": {"memory": {"value": "80Gi"}},
                        # DRADeviceTaints (on by default in 1.36): a driver taints a device.
                        "taints": [
                            {
                                "key": "devicestate.io/unhealthy",
                                "value": "xid-79",
                                "effect": "NoSchedule",
                            }
                        ],
                    }
                ],
            },
        }
    )
    stored = await _raw(resource.read_resource_slice(slice_name, _preload_content=False))
    (device,) = stored["spec"]["devices"]
    assert device["attributes"]["uuid"] == {"string": gpu}
    assert device["taints"][0]["effect"] == "NoSchedule"

    # DeviceTaintRule: resource.k8s.io/v1beta2 in 1.36 (enabled with DRADeviceTaintRules).
    rule = _name("taint-gpu-0")
    await client.ResourceV1beta2Api(admin_client).create_device_taint_rule(
        {
            "metadata": {"name": rule},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": node, "device": "gpu-0"},
                "taint": {
                    "key": "devicestate.io/unhealthy",
                    "value": "xid-79",
                    "effect": "NoExecute",
                },
            },
        }
    )
    stored_rule = await _raw(
        client.ResourceV1beta2Api(admin_client).read_device_taint_rule(rule, _preload_content=False)
    )
    assert stored_rule["spec"]["deviceSelector"]["device"] == "gpu-0"
