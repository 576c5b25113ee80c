"""A canary node of the DRA adoption scenario on ``kube_control_plane``, with the writes kubelet
and a device plugin would make (no kubelet runs there): a Ready Node, a DeviceClass naming an
``extendedResourceName`` (KEP-5004), a ResourceSlice (``resource.k8s.io/v1``) of 8 GPUs, claims
and Pods the scheduler places, device health in ``allocatedResourcesStatus``, and a device plugin's
Node capacity. Every name is unique to one :class:`Scene`."""

from __future__ import annotations

import uuid
from typing import Any

from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually, register_node

RESOURCE = "/apis/resource.k8s.io/v1"
GPUS = 8
IMAGE = "registry.example.com/train:1"
Json = dict[str, Any]


class Scene:
    """The names of one run, unique to it: driver, DeviceClass (its extended resource), node,
    namespace, pool."""

    def __init__(self) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.driver = f"gpu-{suffix}.example.com"
        self.device_class = self.driver
        self.extended = f"example.com/gpu-{suffix}"
        self.node = f"canary-{suffix}"
        self.namespace = f"train-{suffix}"
        self.pool = f"east-{suffix}"

    def claims(self, name: str = "") -> str:
        return f"{RESOURCE}/namespaces/{self.namespace}/resourceclaims{name and '/' + name}"

    def pod(self, name: str) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{name}"

    def device(self, name: str) -> str:
        """The device's ID as kubelet reports it in ``allocatedResourcesStatus``."""
        return f"{self.driver}/{self.node}/{name}"


async def make_cluster(rest: KubeREST, s: Scene) -> None:
    """Namespace, Ready Node, DeviceClass with its extended resource, ResourceSlice of 8 GPUs."""
    await rest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.namespace}})
    await register_node(rest, s.node)
    created = await rest.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": s.device_class},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{s.driver}"'}}],
                "extendedResourceName": s.extended,
            },
        }
    )
    # KEP-5004 is beta (on by default) in 1.36: a server with the gate off drops the field.
    assert created.body["spec"].get("extendedResourceName") == s.extended, created.body
    await rest.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{s.node}-{s.driver}"},
            "spec": {
                "driver": s.driver,
                "nodeName": s.node,
                "pool": {"name": s.node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{s.node}-{i}"}}}
                    for i in range(GPUS)
                ],
            },
        }
    )


def claim(s: Scene, name: str, count: int) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": s.namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": s.device_class, "count": count}}
                ]
            }
        },
    }


async def claim_and_pod(rest: KubeREST, s: Scene, name: str, count: int) -> None:
    """A claim of ``count`` GPUs of the class and a Pod using it (no nodeName: the scheduler
    places it)."""
    await rest.create(claim(s, name, count))
    await rest.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": s.namespace},
            "spec": {
                "resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
                "containers": [
                    {
                        "name": "train",
                        "image": IMAGE,
                        "resources": {"claims": [{"name": "gpus", "request": "gpu"}]},
                    }
                ],
                "terminationGracePeriodSeconds": 0,
            },
        }
    )


async def bound(rest: KubeREST, s: Scene, name: str) -> list[str]:
    """Wait until the scheduler bound the Pod to the node and allocated its claim (reserved for
    it): the devices, sorted."""

    async def probe() -> list[str] | None:
        pod = (await rest.request("GET", s.pod(name))).body
        claim = (await rest.request("GET", s.claims(name))).body
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation or not pod["spec"].get("nodeName"):
            return None
        assert pod["spec"]["nodeName"] == s.node
        assert [r["name"] for r in claim["status"].get("reservedFor", [])] == [name]
        results = allocation["devices"]["results"]
        assert {(r["driver"], r["pool"]) for r in results} == {(s.driver, s.node)}
        return sorted(str(r["device"]) for r in results)

    return await eventually(f"Pod {s.namespace}/{name} bound with its claim allocated", probe)


async def report_health(
    rest: KubeREST, s: Scene, pod: str, devices: list[str], unhealthy: str | None = None
) -> None:
    """PATCH pods/status as kubelet does for a running DRA container: each device's health
    (``allocatedResourcesStatus``, ResourceHealthStatus), ``unhealthy`` Unhealthy."""
    resources = [
        {"resourceID": s.device(d), "health": "Unhealthy" if d == unhealthy else "Healthy"}
        for d in devices
    ]
    status = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "train",
                "image": IMAGE,
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-12-03T07:00:00Z"}},
                "allocatedResourcesStatus": [{"name": "claim:gpus/gpu", "resources": resources}],
            }
        ],
    }
    await rest.request(
        "PATCH",
        f"{s.pod(pod)}/status",
        body={"status": status},
        content_type="application/strategic-merge-patch+json",
    )


async def device_plugin(rest: KubeREST, s: Scene, gpus: int) -> None:
    """What kubelet writes when a device plugin registers the class's extended resource."""
    counts = {s.extended: str(gpus)}
    await rest.request(
        "PATCH",
        f"/api/v1/nodes/{s.node}/status",
        body={"status": {"capacity": counts, "allocatable": counts}},
        content_type="application/strategic-merge-patch+json",
    )


async def create_claim(rest: KubeREST, s: Scene, name: str, *, dry_run: bool) -> tuple[int, str]:
    params = {"dryRun": "All"} if dry_run else None
    answer = await rest.request(
        "POST", s.claims(), body=claim(s, name, 1), params=params, ok=(201, 403, 422)
    )
    return answer.status, str((answer.body or {}).get("message", ""))


async def admission(rest: KubeREST, s: Scene, *, refused: bool) -> None:
    """Wait until the API server's admission sees the policy change (its informer is
    asynchronous): a dry-run create of a claim of the class is refused (or admitted)."""

    async def probe() -> bool | None:
        status, _ = await create_claim(rest, s, f"probe-{uuid.uuid4().hex[:6]}", dry_run=True)
        return True if (status >= 400) is refused else None

    await eventually(f"a new claim {'refused' if refused else 'admitted'} by admission", probe, 30)
