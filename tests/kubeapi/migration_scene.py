"""The cluster of the migration scenario on ``kube_control_plane`` (issue 13 item 4), with the
writes kubelet, a device plugin and the workload would make (no kubelet runs there).

Two device-plugin nodes of 8 GPUs each (``nvidia.com/gpu``, allocatable as kubelet reports it), a
checkpointed training Job of one 8-GPU Pod (``devicestate.io/migration-class: checkpointed``, a
readiness gate on ``devicestate.io/serving``), created by the real Job controller and placed by
the real scheduler. The test plays:

- kubelet: a bound Pod turns Running and Ready with its 8 GPUs in ``allocatedResourcesStatus``
  (``kubelet_runs``); a GPU turns Unhealthy there and the node's allocatable drops by one, as
  kubelet does when a device plugin marks a device unhealthy (``gpu_fails``);
- the workload: it answers the checkpoint handshake (``answer_checkpoint``, docs/migration.md).

Every name is unique to one :class:`MigrationScene`.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually, register_node

GPU = "nvidia.com/gpu"
GPUS = 8
IMAGE = "registry.example.com/train:1"
SERVING = "devicestate.io/serving"
REQUEST = "devicestate.io/checkpoint-request"
RESPONSE = "devicestate.io/checkpoint-response"
Json = dict[str, Any]


def _stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


class MigrationScene:
    """The names of one run: namespace, the Job, two nodes (``first`` runs the Job's first Pod,
    ``spare``, cordoned until then, takes the replacement)."""

    def __init__(self) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.namespace = f"mig-{suffix}"
        self.job = f"train-{suffix}"
        self.first = f"gpu-a-{suffix}"
        self.spare = f"gpu-b-{suffix}"

    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def pod(self, name: str) -> str:
        return f"{self.pods()}/{name}"

    @staticmethod
    def device(node: str, index: int) -> str:
        """The GPU's resourceID as the device plugin reports it (its UUID)."""
        return f"GPU-{node}-{index}"


CHECKPOINTED = {
    "devicestate.io/migration-class": "checkpointed",
    "devicestate.io/checkpoint-max-age-seconds": "600",
}


def _template(s: MigrationScene, scheduler: str, annotations: dict[str, str], restart: str) -> Json:
    return {
        "metadata": {"labels": {"app": s.job}, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 0,
            "readinessGates": [{"conditionType": SERVING}],
            "containers": [
                {"name": "train", "image": IMAGE, "resources": {"limits": {GPU: str(GPUS)}}}
            ],
        },
    }


def job(s: MigrationScene, scheduler: str) -> Json:
    """The checkpointed training Job: one Pod of 8 GPUs, replaced by the Job controller when it
    is evicted (``backoffLimit``), grace 0 (no kubelet confirms a graceful deletion here)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": s.job, "namespace": s.namespace},
        "spec": {
            "backoffLimit": 4,
            "template": _template(s, scheduler, CHECKPOINTED, "Never"),
        },
    }


def sharded_job(s: MigrationScene, scheduler: str, shards: int, gpus: int) -> Json:
    """An Indexed Job of ``shards`` Pods of ``gpus`` GPUs each, declared ``sharded`` (each Pod
    its own shard, ``devicestate.io/shard`` unset): the Job controller recreates a lost index."""
    template = _template(s, scheduler, {"devicestate.io/migration-class": "sharded"}, "Never")
    template["spec"]["containers"][0]["resources"]["limits"][GPU] = str(gpus)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": s.job, "namespace": s.namespace},
        "spec": {
            "completionMode": "Indexed",
            "completions": shards,
            "parallelism": shards,
            "backoffLimit": 4,
            "template": template,
        },
    }


def deployment(s: MigrationScene, scheduler: str) -> Json:
    """A Deployment of one 8-GPU Pod declaring no migration class: non-recoverable."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": s.job, "namespace": s.namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": s.job}},
            "template": _template(s, scheduler, {}, "Always"),
        },
    }


def disruption_budget(s: MigrationScene) -> Json:
    """A PodDisruptionBudget keeping the workload's one Pod: no eviction is allowed."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": s.job, "namespace": s.namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": s.job}}},
    }


async def make_cluster(rest: KubeREST, s: MigrationScene) -> None:
    """The namespace and the two nodes (8 GPUs allocatable each)."""
    await rest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.namespace}})
    for node in (s.first, s.spare):
        await register_node(rest, node, {GPU: str(GPUS)})


async def job_pods(rest: KubeREST, s: MigrationScene) -> list[Json]:
    """The workload's Pods not being deleted, oldest first."""
    listed = await rest.request("GET", s.pods(), params={"labelSelector": f"app={s.job}"})
    pods = [p for p in listed.body["items"] if not p["metadata"].get("deletionTimestamp")]
    return sorted(pods, key=lambda p: str(p["metadata"]["creationTimestamp"]))


async def placed(rest: KubeREST, s: MigrationScene, excluding: set[str]) -> Json:
    """Wait for a Pod of the Job, other than ``excluding`` (names), bound to a node by the
    scheduler: the Pod."""

    async def probe() -> Json | None:
        for pod in await job_pods(rest, s):
            if pod["metadata"]["name"] not in excluding and pod["spec"].get("nodeName"):
                return pod
        return None

    return await eventually(f"a Pod of workload {s.namespace}/{s.job} placed", probe, 90)


def _container(devices: list[str], unhealthy: str | None) -> Json:
    resources = [
        {"resourceID": d, "health": "Unhealthy" if d == unhealthy else "Healthy"} for d in devices
    ]
    return {
        "name": "train",
        "image": IMAGE,
        "imageID": "",
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": "2026-12-03T07:00:00Z"}},
        "allocatedResourcesStatus": [{"name": GPU, "resources": resources}],
    }


async def kubelet_runs(
    rest: KubeREST, s: MigrationScene, pod: str, devices: list[str], unhealthy: str | None = None
) -> None:
    """PATCH pods/status as kubelet does for the running container: phase Running, Ready, each
    device's health (``allocatedResourcesStatus``, KEP-4680), ``unhealthy`` Unhealthy. The
    readiness gate's condition is the executor's: kubelet never writes it."""
    now = _stamp()
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("Initialized", "ContainersReady", "Ready")
    ]
    status = {
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": [_container(devices, unhealthy)],
    }
    await rest.request(
        "PATCH",
        f"{s.pod(pod)}/status",
        body={"status": status},
        content_type="application/strategic-merge-patch+json",
    )


async def gpu_fails(
    rest: KubeREST, s: MigrationScene, pod: str, devices: list[str], sick: str
) -> None:
    """The device plugin marks ``sick`` unhealthy: kubelet reports it in the Pod's status and
    lowers the node's allocatable by one (capacity stays)."""
    await kubelet_runs(rest, s, pod, devices, unhealthy=sick)
    counts = {"capacity": {GPU: str(GPUS)}, "allocatable": {GPU: str(GPUS - 1)}}
    await rest.request(
        "PATCH",
        f"/api/v1/nodes/{s.first}/status",
        body={"status": counts},
        content_type="application/strategic-merge-patch+json",
    )


def condition(pod: Json, kind: str) -> str | None:
    """The status of the Pod's condition ``kind`` (``"True"``/``"False"``), None without it."""
    for found in (pod.get("status") or {}).get("conditions", []):
        if found["type"] == kind:
            return str(found["status"])
    return None


async def answer_checkpoint(rest: KubeREST, s: MigrationScene, pod: str) -> Json:
    """The workload's part of the handshake: wait for the executor's checkpoint request on the
    Pod, save a checkpoint and answer with its ID and time (``devicestate.io/checkpoint-response``):
    the answer."""

    async def requested() -> str | None:
        found = (await rest.request("GET", s.pod(pod))).body
        value = (found["metadata"].get("annotations") or {}).get(REQUEST)
        return str(value) if value else None

    migration = await eventually(f"a checkpoint request on Pod {pod}", requested, 90)
    answer = {"migrationID": migration, "checkpointID": f"ckpt-{pod}", "checkpointAt": _stamp()}
    await rest.request(
        "PATCH",
        s.pod(pod),
        body={"metadata": {"annotations": {RESPONSE: json.dumps(answer)}}},
        content_type="application/merge-patch+json",
    )
    return answer
