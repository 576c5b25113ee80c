"""The real kube-scheduler (v1.36) keeps a quarantined DRA device out of new allocations.

On ``kube_control_plane`` (kube-apiserver + kube-scheduler + kube-controller-manager, no kubelet):
a Node, a ResourceSlice (resource.k8s.io/v1) with 8 GPUs of one driver on it and a DeviceClass.
One GPU is quarantined as the governor records it (a ``quarantines`` row in PostgreSQL, as
``test_enforcement.py`` does) and ``devicestate enforce --live --once`` writes its DeviceTaintRule
(``resource.k8s.io/v1beta2``, effect NoSchedule). ResourceClaims + Pods made afterwards are
allocated and bound by the scheduler: never to the tainted GPU, even when it is the last free
one. After the release, ``enforce`` deletes the rule and the next claim gets that GPU: the control
that shows the test can fail.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.processes.enforcement.desired import LABEL_SELECTOR
from services.runtime.config import Settings
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually, node_heartbeats, register_node
from tests.kubeapi.test_enforcement import REPO, _quarantine, _released_fields, _write

DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu.example.com"
GPUS = 8
QUARANTINED = "gpu-3"
RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture
async def gpu_node(control_plane_rest: KubeREST) -> AsyncIterator[tuple[str, str]]:
    """``(node, namespace)`` of :func:`make_gpu_node`, deleted afterwards."""
    rest = control_plane_rest
    node, namespace = await make_gpu_node(rest)
    async with node_heartbeats(rest, [node]):
        yield node, namespace
        # The namespace controller (kube-controller-manager) removes the Pods and claims.
        await rest.request("DELETE", f"/api/v1/namespaces/{namespace}", ok=(200, 202))
        await rest.request("DELETE", f"{RESOURCE}/resourceslices/{node}-{DRIVER}")


async def make_gpu_node(rest: KubeREST) -> tuple[str, str]:
    """A Ready Node (``kubelet.register_node``), a DeviceClass, a ResourceSlice with 8 GPUs on
    the node, and a namespace: ``(node, namespace)``, all unique to the test."""
    suffix = uuid.uuid4().hex[:6]
    node, namespace = f"gpu-node-{suffix}", f"train-{suffix}"
    await rest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await register_node(rest, node)
    classes = (await rest.request("GET", f"{RESOURCE}/deviceclasses")).body["items"]
    if DEVICE_CLASS not in {c["metadata"]["name"] for c in classes}:
        await rest.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DEVICE_CLASS},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    await rest.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {"uuid": {"string": f"GPU-{suffix}-{i:04d}"}},
                        "capacity": {"memory": {"value": "80Gi"}},
                    }
                    for i in range(GPUS)
                ],
            },
        }
    )
    return node, namespace


async def _claim_and_pod(rest: KubeREST, namespace: str, name: str) -> None:
    """A ResourceClaim for one GPU of the class and a Pod using it, with no nodeName: placing
    it is the scheduler's job."""
    await rest.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS, "count": 1}}
                    ]
                }
            },
        }
    )
    await rest.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.example.com/train:1",
                        "resources": {"claims": [{"name": "gpus"}]},
                    }
                ],
                "terminationGracePeriodSeconds": 0,
            },
        }
    )


async def _allocated(rest: KubeREST, namespace: str, name: str) -> tuple[str, str]:
    """Wait until the Pod is bound and its claim allocated: ``(node, device)``."""

    async def probe() -> tuple[str, str] | None:
        pod = (await rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")).body
        claim = (
            await rest.request("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")
        ).body
        allocation = (claim.get("status") or {}).get("allocation")
        node = pod["spec"].get("nodeName")
        if not allocation or not node:
            return None
        (result,) = allocation["devices"]["results"]
        assert (result["request"], result["driver"], result["pool"]) == ("gpu", DRIVER, node)
        reserved = [r["name"] for r in claim["status"].get("reservedFor", [])]
        assert reserved == [name]
        return node, str(result["device"])

    return await eventually(f"Pod {namespace}/{name} bound with its claim allocated", probe)


async def _unschedulable(rest: KubeREST, namespace: str, name: str) -> dict[str, Any]:
    """Wait until the scheduler has tried and failed: the Pod's PodScheduled condition."""

    async def probe() -> dict[str, Any] | None:
        pod = (await rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")).body
        for condition in (pod.get("status") or {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and condition["status"] == "False":
                assert not pod["spec"].get("nodeName")
                return dict(condition)
        return None

    return await eventually(f"Pod {namespace}/{name} reported unschedulable", probe)


async def _enforce(kube_control_plane: ControlPlaneEnv, schema: str) -> None:
    """``devicestate enforce --live --once``: one real reconcile pass against the cluster."""
    env = {
        **os.environ,
        "DEVICESTATE_KUBECONFIG": str(kube_control_plane.api.kubeconfig_admin),
        "DEVICESTATE_DATABASE_URL": Settings().database_url,
        "DEVICESTATE_DATABASE_SCHEMA": schema,
        "DEVICESTATE_ENFORCE_DEVICE_TAINT_RULES": "true",
    }
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "services.cli.main", "enforce", "--live", "--once"],
        *["--no-follow-decisions", "--metrics-port=0"],
        env=env,
        cwd=REPO,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()


async def _own_rules(rest: KubeREST) -> list[dict[str, Any]]:
    listed = await rest.request(
        "GET",
        "/apis/resource.k8s.io/v1beta2/devicetaintrules",
        params={"labelSelector": LABEL_SELECTOR},
    )
    return list(listed.body["items"])


async def test_the_scheduler_never_allocates_the_quarantined_gpu_until_it_is_released(
    kube_control_plane: ControlPlaneEnv,
    control_plane_rest: KubeREST,
    gpu_node: tuple[str, str],
    engine: AsyncEngine,
    fresh_schema: str,
) -> None:
    rest, (node, namespace) = control_plane_rest, gpu_node
    quarantine = _quarantine(f"{DRIVER}/{node}/{QUARANTINED}", node=node)
    await _write(engine, fresh_schema, [quarantine])
    await _enforce(kube_control_plane, fresh_schema)
    rules = [r for r in await _own_rules(rest) if r["spec"]["deviceSelector"]["pool"] == node]
    assert [r["spec"]["deviceSelector"]["device"] for r in rules] == [QUARANTINED]
    assert rules[0]["spec"]["taint"]["effect"] == "NoSchedule"

    # One claim at a time, until every healthy GPU is taken: the tainted one is never chosen.
    devices = []
    for i in range(GPUS - 1):
        await _claim_and_pod(rest, namespace, f"train-{i}")
        bound_node, device = await _allocated(rest, namespace, f"train-{i}")
        assert bound_node == node
        devices.append(device)
    assert sorted(devices) == sorted(f"gpu-{i}" for i in range(GPUS) if f"gpu-{i}" != QUARANTINED)

    # The quarantined GPU is the only free one left, and still nobody gets it.
    await _claim_and_pod(rest, namespace, "train-last")
    condition = await _unschedulable(rest, namespace, "train-last")
    assert condition["reason"] == "Unschedulable", condition
    assert "cannot allocate all claims" in condition["message"], condition
    claim = (
        await rest.request("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/train-last")
    ).body
    assert not (claim.get("status") or {}).get("allocation")

    # Control: the release deletes the rule, and the GPU is allocatable again. A new Pod, so
    # that the test does not depend on when the scheduler retries the unschedulable one.
    await rest.request(
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods/train-last",
        params={"gracePeriodSeconds": "0"},
    )
    await rest.request("DELETE", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/train-last")
    await _write(engine, fresh_schema, [{**quarantine, **_released_fields()}])
    await _enforce(kube_control_plane, fresh_schema)
    assert [r for r in await _own_rules(rest) if r["spec"]["deviceSelector"]["pool"] == node] == []
    await _claim_and_pod(rest, namespace, "train-after-release")
    assert await _allocated(rest, namespace, "train-after-release") == (node, QUARANTINED)
