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
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.processes.enforcement.desired import LABEL_SELECTOR
from services.runtime.config import Settings
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.test_enforcement import REPO, _quarantine, _released_fields, _write

DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu.example.com"
GPUS = 8
QUARANTINED = "gpu-3"
RESOURCE = "/apis/resource.k8s.io/v1"

T = TypeVar("T")


async def _eventually(
    what: str, probe: Callable[[], Awaitable[T | None]], within: float = 60.0
) -> T:
    """Poll ``probe`` until it returns something other than None; fail after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {within:.0f} s")
        await asyncio.sleep(0.2)


@pytest.fixture
async def rest(kube_control_plane: ControlPlaneEnv) -> AsyncIterator[KubeREST]:
    async with KubeREST(kube_control_plane.api) as session:
        yield session


@pytest.fixture
async def gpu_node(rest: KubeREST) -> AsyncIterator[tuple[str, str]]:
    """``(node, namespace)`` of :func:`make_gpu_node`, deleted afterwards."""
    node, namespace = await make_gpu_node(rest)
    heartbeat = asyncio.create_task(renew_node_lease(rest, node))
    try:
        await wait_node_schedulable(rest, node)
        yield node, namespace
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
    # The namespace controller (kube-controller-manager) removes the Pods and claims.
    await rest.request("DELETE", f"/api/v1/namespaces/{namespace}", ok=(200, 202))
    await rest.request("DELETE", f"{RESOURCE}/resourceslices/{node}-{DRIVER}")
    await rest.request("DELETE", f"/api/v1/nodes/{node}")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def renew_node_lease(rest: KubeREST, node: str, every: float = 5.0) -> None:
    """Kubelet's heartbeat: create the Node's Lease in ``kube-node-lease`` and renew it every
    ``every`` seconds until cancelled, so the node lifecycle controller keeps the Node Ready
    (without it the Node is tainted unreachable after 50 s)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
    await rest.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": _now()},
        }
    )
    while True:
        await asyncio.sleep(every)
        await rest.request(
            "PATCH",
            path,
            body={"spec": {"renewTime": _now()}},
            content_type="application/merge-patch+json",
        )


async def wait_node_schedulable(rest: KubeREST, node: str) -> None:
    """Wait until the node lifecycle controller has removed the ``not-ready`` taint admission
    puts on a new Node, so a Pod's first scheduling attempt sees the Node as it will stay."""

    async def probe() -> bool | None:
        taints = (await rest.request("GET", f"/api/v1/nodes/{node}")).body["spec"].get("taints")
        return None if taints else True

    await _eventually(f"Node {node} without taints", probe)


async def make_gpu_node(rest: KubeREST) -> tuple[str, str]:
    """A Ready Node (status written as kubelet would), a DeviceClass, a ResourceSlice with 8 GPUs
    on the node, and a namespace: ``(node, namespace)``, all unique to the test."""
    suffix = uuid.uuid4().hex[:6]
    node, namespace = f"gpu-node-{suffix}", f"train-{suffix}"
    await rest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await rest.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    await rest.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        body={
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
            }
        },
        content_type="application/strategic-merge-patch+json",
    )
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

    return await _eventually(f"Pod {namespace}/{name} bound with its claim allocated", probe)


async def _unschedulable(rest: KubeREST, namespace: str, name: str) -> dict[str, Any]:
    """Wait until the scheduler has tried and failed: the Pod's PodScheduled condition."""

    async def probe() -> dict[str, Any] | None:
        pod = (await rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")).body
        for condition in (pod.get("status") or {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and condition["status"] == "False":
                assert not pod["spec"].get("nodeName")
                return dict(condition)
        return None

    return await _eventually(f"Pod {namespace}/{name} reported unschedulable", probe)


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
    rest: KubeREST,
    gpu_node: tuple[str, str],
    engine: AsyncEngine,
    fresh_schema: str,
) -> None:
    node, namespace = gpu_node
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
