"""The watcher in live mode against a real kube-apiserver, publishing to the real Kafka broker.

``devicestate watch`` runs as a subprocess, exactly as the Deployment runs it: in-cluster settings
replaced by a kubeconfig holding a token of the ``devicestate-watcher`` ServiceAccount (from the
TokenRequest API) with the RBAC of ``deploy/`` and nothing else. The test plays kubelet and the
controllers: it creates Nodes (extended resources through the status subresource), node Leases,
Pods bound to nodes, PATCHes ``pods/status`` the way kubelet does, creates DRA objects with an
allocation (status subresource), deletes Pods, and reads what reaches the device-health topic and,
through a worker (``python -m streams.cli``), the directory in PostgreSQL.

The 410 test runs on a second API server without watch cache (``kube_api_etcd_watch``): the
watcher is stopped (SIGSTOP) until its watch has ended, Pods are deleted, etcd is compacted, and
the watcher resumed: its WATCH from the old resourceVersion is answered 410, it LISTs again and
releases the Pods that vanished meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer
from kubernetes_asyncio import client, config
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.testenv import kubeapi
from services.adapters.projection.reads_devices import DeviceReads
from services.domain.events import (
    ClaimRef,
    ContainerKind,
    DeviceHealthObserved,
    DeviceSource,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.objects import (
    DeviceClassInfo,
    ResourceClaimInfo,
    ResourceSliceInfo,
)
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged
from services.domain.observations import DeviceHealthObservations
from services.domain.records import TopicRecord, decode_record
from services.runtime.config import Settings
from tests.conftest import settings_env
from tests.kubeapi.kube_rest import (
    KubeREST,
    apply_identities,
    compact_etcd,
    wait_until_allowed,
)
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
DRIVER = "gpu.example.com"
IMAGE = "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04"
WATCHER_ACCOUNT = "devicestate-watcher"


# --- the watcher process ------------------------------------------------------------------------
class WatcherProcess:
    """``python -m services.cli.main watch`` with ``settings`` and ``kubeconfig``; output to
    ``log_path``."""

    def __init__(self, settings: Settings, kubeconfig: Path, log_path: Path, **extra: str) -> None:
        self.metrics_port = kubeapi.free_port()
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("DEVICESTATE_", "KUBECONFIG"))
        }
        env.update(settings_env(settings))
        env.update(
            DEVICESTATE_KUBECONFIG=str(kubeconfig),
            DEVICESTATE_WATCHER_METRICS_PORT=str(self.metrics_port),
            DEVICESTATE_TICK_INTERVAL_SECONDS="2",
            PYTHONPATH=str(ROOT),
            **extra,
        )
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "watch"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def check_running(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(
                f"the watcher exited ({self.process.returncode}):\n{self.log_text()}"
            )

    def metrics(self) -> dict[str, float]:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode()
        samples = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def stop(self) -> int:
        """SIGCONT (in case it is stopped), SIGTERM, wait; SIGKILL after 30 s."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._log.close()
        return code


@pytest.fixture
def watcher_process(tmp_path: Path) -> Iterator[Callable[..., WatcherProcess]]:
    started: list[WatcherProcess] = []

    def start(settings: Settings, kubeconfig: Path, **extra: str) -> WatcherProcess:
        watcher = WatcherProcess(
            settings, kubeconfig, tmp_path / f"watcher-{len(started)}.log", **extra
        )
        started.append(watcher)
        return watcher

    yield start
    for watcher in started:
        if watcher.process.poll() is None:
            watcher.stop()


# --- the topic ----------------------------------------------------------------------------------
class TopicTail:
    """Every record of one topic from its beginning, decoded (inventory records included)."""

    def __init__(self, bootstrap: str, topic: str, watcher: WatcherProcess) -> None:
        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
        )
        self._watcher = watcher
        self.records: list[TopicRecord] = []

    async def __aenter__(self) -> TopicTail:
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def wait_for(
        self, check: Callable[[list[TopicRecord]], bool], what: str, seconds: float = 30.0
    ) -> list[TopicRecord]:
        """Read until ``check(records)`` holds; fail after ``seconds`` (or if the watcher died)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not check(self.records):
            self._watcher.check_running()
            if loop.time() > deadline:
                kinds = sorted({type(r).__name__ for r in self.records})
                raise AssertionError(
                    f"timed out after {seconds} s waiting for {what}; {len(self.records)} records "
                    f"({kinds}); watcher log:\n{self._watcher.log_text()}"
                )
            for batch in (await self._consumer.getmany(timeout_ms=300)).values():
                for message in batch:
                    assert message.value is not None
                    record = decode_record(message.value, inventory=True)
                    assert message.key == record.node.encode()
                    if isinstance(record, DeviceHealthObservations):
                        # Schema 2 (the watcher's default): one Pod change's observations.
                        self.records.extend(record.observations)
                    else:
                        self.records.append(record)
        return self.records


def observations(records: list[TopicRecord], node: str, resource_id: str) -> list[Any]:
    return [
        r
        for r in records
        if isinstance(r, DeviceHealthObserved) and (r.node, r.resource_id) == (node, resource_id)
    ]


def releases(records: list[TopicRecord], pod_uid: str) -> list[PodDevicesReleased]:
    return [r for r in records if isinstance(r, PodDevicesReleased) and r.pod_uid == pod_uid]


def inventory(records: list[TopicRecord], kind: type, name: str) -> list[InventoryObserved]:
    return [
        r
        for r in records
        if isinstance(r, InventoryObserved) and isinstance(r.obj, kind) and r.obj.name == name
    ]


# --- kubelet and the controllers, played by the test ----------------------------------------------
def _micro(moment: datetime) -> str:
    """A MicroTime as the API writes it (RFC 3339, microseconds)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _z(at: datetime) -> str:
    """RFC 3339 with a Z, second precision (as the API server writes condition times)."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _container_status(name: str, allocated: list[dict[str, Any]] | None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "image": IMAGE,
        "imageID": "",
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": "2026-11-29T12:00:00Z"}},
    }
    if allocated is not None:
        status["allocatedResourcesStatus"] = allocated
    return status


def _gpu_entry(resource_id: str, health: str, message: str | None = None) -> dict[str, Any]:
    resource = {"resourceID": resource_id, "health": health}
    if message is not None:
        resource["message"] = message
    return {"name": GPU, "resources": [resource]}


class Cluster:
    """The writes kubelet, the scheduler and the DRA controllers would make, through the admin."""

    def __init__(self, admin: client.ApiClient) -> None:
        self.core = client.CoreV1Api(admin)
        self.coordination = client.CoordinationV1Api(admin)
        self.resource = client.ResourceV1Api(admin)

    async def node(self, name: str, gpus: int | None = None) -> None:
        await self.core.create_node({"metadata": {"name": name}})
        if gpus is not None:
            await self.gpus(name, gpus, gpus)

    async def gpus(self, node: str, capacity: int, allocatable: int) -> None:
        await self.core.patch_node_status(
            node,
            {"status": {"capacity": {GPU: str(capacity)}, "allocatable": {GPU: str(allocatable)}}},
        )

    async def lease(self, node: str, renewed: datetime) -> None:
        body = {
            "metadata": {"name": node, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": 40,
                "renewTime": _micro(renewed),
            },
        }
        try:
            await self.coordination.create_namespaced_lease("kube-node-lease", body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            await self.coordination.patch_namespaced_lease(
                node, "kube-node-lease", {"spec": {"renewTime": _micro(renewed)}}
            )

    async def pod(self, namespace: str, name: str, node: str, **spec: Any) -> str:
        """A Pod bound to ``node``; containers ``a`` and ``b`` with a GPU each unless given."""
        containers = spec.pop(
            "containers",
            [{"name": c, "image": IMAGE, "resources": {"limits": {GPU: "1"}}} for c in ("a", "b")],
        )
        created = await self.core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"nodeName": node, "containers": containers, **spec},
            },
        )
        return str(created.metadata.uid)

    async def status(self, namespace: str, pod: str, **status: Any) -> None:
        """PATCH pods/status as kubelet does (strategic merge; lists keyed by container name)."""
        await self.core.patch_namespaced_pod_status(pod, namespace, {"status": status})

    async def delete_pod(self, namespace: str, pod: str) -> None:
        # No kubelet confirms a graceful deletion here: grace 0 deletes at once, as kubelet's
        # final DELETE would.
        await self.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)


# --- LISTs, WATCHes, every kind of change, and the directory -------------------------------------
async def test_live_watcher_publishes_what_the_cluster_does(
    kube_api: kubeapi.KubeAPI,
    admin_client: client.ApiClient,
    rendered: dict[str, list[dict[str, Any]]],
    stream_settings: Settings,
    worker_process: Any,
    watcher_process: Callable[..., WatcherProcess],
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    settings = with_governance_topics(stream_settings)
    tag = uuid4().hex[:6]
    node_a, node_b, namespace = f"gpu-a-{tag}", f"gpu-b-{tag}", f"ml-{tag}"
    device_class, slice_name, claim_name = f"gpu-{tag}", f"{node_b}-{DRIVER}", f"train-{tag}-gpus"
    cluster = Cluster(admin_client)
    async with KubeREST(kube_api) as rest:
        await apply_identities(rest, rendered["base"])  # ServiceAccount + the watcher's RBAC
        await wait_until_allowed(rest, WATCHER_ACCOUNT, "list", "pods")
        await wait_until_allowed(
            rest,
            WATCHER_ACCOUNT,
            "list",
            "leases",
            group="coordination.k8s.io",
            namespace="kube-node-lease",
        )
        await wait_until_allowed(
            rest, WATCHER_ACCOUNT, "list", "resourceclaims", group="resource.k8s.io"
        )
        kubeconfig = await rest.service_account_kubeconfig(
            "devicestate", WATCHER_ACCOUNT, tmp_path / "watcher.kubeconfig"
        )

    # Before the watcher starts: its first LISTs see these.
    await cluster.core.create_namespace({"metadata": {"name": namespace}})
    await cluster.node(node_a, gpus=4)
    renewed = datetime.now(UTC).replace(microsecond=123456)
    await cluster.lease(node_a, renewed)
    await cluster.resource.create_device_class(
        {
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    await cluster.node(node_b)
    await cluster.resource.create_resource_slice(
        {
            "metadata": {"name": slice_name},
            "spec": {
                "driver": DRIVER,
                "nodeName": node_b,
                "pool": {"name": node_b, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{tag}-b{i}"}}}
                    for i in range(2)
                ],
            },
        }
    )

    worker = worker_process(settings)
    watcher = watcher_process(settings, kubeconfig)
    async with TopicTail(settings.kafka_bootstrap_servers, settings.topic, watcher) as tail:
        # --- the LISTs: node resources, a heartbeat, the DRA inventory ---------------------------
        def listed(records: list[TopicRecord]) -> bool:
            return (
                any(isinstance(r, NodeResourcesChanged) and r.node == node_a for r in records)
                and any(isinstance(r, NodeHeartbeat) and r.node == node_a for r in records)
                and bool(inventory(records, DeviceClassInfo, device_class))
                and bool(inventory(records, ResourceSliceInfo, slice_name))
            )

        records = await tail.wait_for(listed, "the first LISTs' events", 60)
        (resources,) = [
            r for r in records if isinstance(r, NodeResourcesChanged) and r.node == node_a
        ]
        assert (resources.capacity, resources.allocatable) == (((GPU, 4),), ((GPU, 4),))
        (heartbeat,) = [r for r in records if isinstance(r, NodeHeartbeat) and r.node == node_a]
        assert heartbeat.renewed_at == renewed  # event time: the Lease's renewTime
        (slice_event,) = inventory(records, ResourceSliceInfo, slice_name)
        assert slice_event.key == node_b and not slice_event.deleted
        assert isinstance(slice_event.obj, ResourceSliceInfo)
        assert [(d.name, d.uuid) for d in slice_event.obj.devices] == [
            ("gpu-0", f"GPU-{tag}-b0"),
            ("gpu-1", f"GPU-{tag}-b1"),
        ]
        (class_event,) = inventory(records, DeviceClassInfo, device_class)
        assert class_event.key == f"class:{device_class}"
        assert isinstance(class_event.obj, DeviceClassInfo) and class_event.obj.drivers == (DRIVER,)

        # --- a Pod with two GPU containers, as kubelet reports it --------------------------------
        gpu0, gpu1 = f"GPU-{tag}-a0", f"GPU-{tag}-a1"
        trainer = await cluster.pod(namespace, "trainer", node_a)
        await cluster.status(
            namespace,
            "trainer",
            phase="Running",
            containerStatuses=[
                _container_status("a", [_gpu_entry(gpu0, "Healthy")]),
                _container_status("b", [_gpu_entry(gpu1, "Healthy")]),
            ],
        )
        records = await tail.wait_for(
            lambda rs: bool(observations(rs, node_a, gpu0) and observations(rs, node_a, gpu1)),
            "both GPUs observed Healthy",
        )
        (first,) = observations(records, node_a, gpu0)
        assert (first.health, first.source, first.resource_name) == (
            Health.HEALTHY,
            DeviceSource.DEVICE_PLUGIN,
            GPU,
        )
        assert (first.namespace, first.pod_name, first.pod_uid) == (namespace, "trainer", trainer)
        assert [(c.name, c.kind) for c in first.containers] == [("a", ContainerKind.REGULAR)]
        assert first.status_version is not None and first.flags == ()

        # GPU 0 turns Unhealthy (XID 79): only that device is published again.
        await cluster.status(
            namespace,
            "trainer",
            containerStatuses=[
                _container_status(
                    "a", [_gpu_entry(gpu0, "Unhealthy", "XID 79: fallen off the bus")]
                ),
                _container_status("b", [_gpu_entry(gpu1, "Healthy")]),
            ],
        )
        records = await tail.wait_for(
            lambda rs: len(observations(rs, node_a, gpu0)) >= 2, "GPU 0 Unhealthy"
        )
        unhealthy = observations(records, node_a, gpu0)[1]
        assert (unhealthy.health, unhealthy.message) == (
            Health.UNHEALTHY,
            "XID 79: fallen off the bus",
        )
        assert unhealthy.status_version > first.status_version
        # And back: kubelet drops the message.
        await cluster.status(
            namespace,
            "trainer",
            containerStatuses=[
                _container_status("a", [_gpu_entry(gpu0, "Healthy")]),
                _container_status("b", [_gpu_entry(gpu1, "Healthy")]),
            ],
        )
        records = await tail.wait_for(
            lambda rs: len(observations(rs, node_a, gpu0)) >= 3, "GPU 0 Healthy again"
        )
        assert [(o.health, o.message) for o in observations(records, node_a, gpu0)] == [
            (Health.HEALTHY, None),
            (Health.UNHEALTHY, "XID 79: fallen off the bus"),
            (Health.HEALTHY, None),
        ]
        assert len(observations(records, node_a, gpu1)) == 1  # unchanged: not published again

        # --- node Lease renewals: coarsened on renewTime, one heartbeat per minute ---------------
        await cluster.lease(node_a, renewed + timedelta(seconds=10))
        await cluster.lease(node_a, renewed + timedelta(seconds=70))
        records = await tail.wait_for(
            lambda rs: sum(isinstance(r, NodeHeartbeat) and r.node == node_a for r in rs) >= 2,
            "the second heartbeat",
        )
        beats = [r.renewed_at for r in records if isinstance(r, NodeHeartbeat) and r.node == node_a]
        assert beats == [renewed, renewed + timedelta(seconds=70)]

        # --- the device plugin loses a GPU: allocatable drops below capacity ---------------------
        await cluster.gpus(node_a, capacity=4, allocatable=3)
        records = await tail.wait_for(
            lambda rs: (
                sum(isinstance(r, NodeResourcesChanged) and r.node == node_a for r in rs) >= 2
            ),
            "the allocatable change",
        )
        change = [r for r in records if isinstance(r, NodeResourcesChanged) and r.node == node_a][
            -1
        ]
        assert change.missing() == {GPU: 1}

        # --- DRA: a claim from a template, allocated on node B, and the Pod that uses it --------
        claim = await cluster.resource.create_namespaced_resource_claim(
            namespace,
            {
                "metadata": {"name": claim_name, "namespace": namespace},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {"deviceClassName": device_class, "count": 1},
                            }
                        ]
                    }
                },
            },
        )
        dra_pod = "trainer-dra"
        dra_uid = await cluster.pod(
            namespace,
            dra_pod,
            node_b,
            resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": f"train-{tag}"}],
            containers=[
                {
                    "name": "main",
                    "image": IMAGE,
                    "resources": {"claims": [{"name": "gpus", "request": "gpu"}]},
                }
            ],
        )
        await cluster.resource.patch_namespaced_resource_claim_status(
            claim_name,
            namespace,
            {
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [
                                {
                                    "request": "gpu",
                                    "driver": DRIVER,
                                    "pool": node_b,
                                    "device": "gpu-0",
                                }
                            ]
                        },
                        "nodeSelector": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": [node_b],
                                        }
                                    ]
                                }
                            ]
                        },
                    },
                    "reservedFor": [{"resource": "pods", "name": dra_pod, "uid": dra_uid}],
                }
            },
        )
        dra_device = f"{DRIVER}/{node_b}/gpu-0"
        await cluster.status(
            namespace,
            dra_pod,
            phase="Running",
            resourceClaimStatuses=[{"name": "gpus", "resourceClaimName": claim_name}],
            containerStatuses=[
                _container_status(
                    "main",
                    [
                        {
                            "name": "claim:gpus/gpu",
                            "resources": [
                                {"resourceID": dra_device, "health": "Unhealthy", "message": "ECC"}
                            ],
                        }
                    ],
                )
            ],
        )
        records = await tail.wait_for(
            lambda rs: (
                bool(observations(rs, node_b, dra_device))
                and any(
                    isinstance(e.obj, ResourceClaimInfo) and e.obj.results
                    for e in inventory(rs, ResourceClaimInfo, claim_name)
                )
            ),
            "the DRA observation and the allocated claim",
        )
        (dra,) = observations(records, node_b, dra_device)
        assert (dra.health, dra.message, dra.source) == (Health.UNHEALTHY, "ECC", DeviceSource.DRA)
        assert dra.resource_name == "claim:gpus/gpu"
        assert dra.claim == ClaimRef(
            pod_claim_name="gpus", request="gpu", resource_claim_name=claim_name
        )
        allocated = [
            e
            for e in inventory(records, ResourceClaimInfo, claim_name)
            if isinstance(e.obj, ResourceClaimInfo) and e.obj.results
        ][-1]
        assert allocated.key == node_b  # an allocated claim goes with its node
        assert isinstance(allocated.obj, ResourceClaimInfo)
        assert allocated.obj.uid == claim.metadata.uid
        assert [r.device_id for r in allocated.obj.results] == [dra_device]
        assert allocated.obj.reserved_for == ((dra_pod, dra_uid),)

        # --- the DRA Pod turns Ready: its claim lifecycle stages are published (issue 16) --------
        scheduled_at = datetime.now(UTC).replace(microsecond=0)
        await cluster.status(
            namespace,
            dra_pod,
            conditions=[
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _z(scheduled_at)},
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": _z(scheduled_at + timedelta(seconds=5)),
                },
            ],
        )
        records = await tail.wait_for(
            lambda rs: any(
                isinstance(r, PodLifecycleObserved) and r.pod_uid == dra_uid for r in rs
            ),
            "the DRA Pod's lifecycle stages",
        )
        (stages,) = [r for r in records if isinstance(r, PodLifecycleObserved)]
        assert (stages.node, stages.namespace, stages.pod_name) == (node_b, namespace, dra_pod)
        ready = [s for s in stages.stages if s.stage is Stage.POD_READY]
        assert [(s.device_class, s.path, s.seconds) for s in ready] == [
            (device_class, DevicePath.DRA, 5.0)
        ]

        # --- the Pods end: deleted, and terminated (phase Succeeded) -----------------------------
        await cluster.delete_pod(namespace, "trainer")
        await cluster.status(namespace, dra_pod, phase="Succeeded")
        records = await tail.wait_for(
            lambda rs: bool(releases(rs, trainer) and releases(rs, dra_uid)), "both releases"
        )
        (deleted,) = releases(records, trainer)
        assert (deleted.node, deleted.reason) == (node_a, ReleaseReason.DELETED)
        assert sorted(deleted.resource_ids) == sorted([gpu0, gpu1])
        (terminated,) = releases(records, dra_uid)
        assert (terminated.node, terminated.reason) == (node_b, ReleaseReason.TERMINATED)
        assert terminated.resource_ids == (dra_device,)

        # --- the slice goes away ------------------------------------------------------------------
        await cluster.resource.delete_resource_slice(slice_name)
        records = await tail.wait_for(
            lambda rs: any(e.deleted for e in inventory(rs, ResourceSliceInfo, slice_name)),
            "the slice's deletion",
        )

        # --- the directory, through the worker ---------------------------------------------------
        reads = DeviceReads(engine, settings.database_schema)

        async def directory_caught_up() -> bool:
            device = await reads.get_device(node_a, gpu0)
            dra_row = await reads.get_device(node_b, dra_device)
            return (
                device is not None
                and not device.allocations
                and dra_row is not None
                and not dra_row.allocations
            )

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 90
        while not await directory_caught_up():
            if worker.process.poll() is not None or loop.time() > deadline:
                raise AssertionError(
                    f"the directory did not catch up; worker:\n{worker.log_text()[-4000:]}"
                )
            await asyncio.sleep(0.2)
        async with engine.connect() as conn:
            result = await conn.execute(
                text(
                    f'SELECT stage, device_class, path, seconds FROM "{settings.database_schema}"'
                    ".pod_lifecycle_stages WHERE pod_uid = :uid AND stage = 'pod_ready'"
                ),
                {"uid": dra_uid},
            )
            assert [tuple(r) for r in result] == [("pod_ready", device_class, "dra", 5.0)]
        device = await reads.get_device(node_a, gpu0)
        assert device is not None
        assert (device.health, device.source, device.resource_name) == (
            Health.HEALTHY,
            DeviceSource.DEVICE_PLUGIN,
            GPU,
        )
        history = await reads.device_history(node_a, gpu0, limit=10)  # newest first
        assert [(h.kind, h.health) for h in history] == [
            ("released", Health.HEALTHY),
            ("observed", Health.HEALTHY),
            ("observed", Health.UNHEALTHY),
            ("observed", Health.HEALTHY),
        ]
        dra_row = await reads.get_device(node_b, dra_device)
        assert dra_row is not None
        assert (dra_row.health, dra_row.message, dra_row.source) == (
            Health.UNHEALTHY,
            "ECC",
            DeviceSource.DRA,
        )
        other = await reads.get_device(node_a, gpu1)
        assert other is not None and other.health is Health.HEALTHY

        metrics = watcher.metrics()
        assert metrics.get('devicestate_watcher_problems_total{code="watch-error"}', 0) == 0
        assert metrics.get('devicestate_watcher_dra_not_served{resource="resourceslices"}', 0) == 0
    assert watcher.stop() == 0  # SIGTERM: flush and exit cleanly


# --- 410 Gone: stop the watcher, delete Pods, compact etcd, resume --------------------------------
@pytest.fixture
async def topic_settings(kafka_admin: Any) -> AsyncIterator[Settings]:
    """Settings with event and dead-letter topics private to the test (created here as the
    service creates them, 3 partitions); every topic named after the test is deleted
    afterwards."""
    from services.adapters.kafka.topics import TopicRole, ensure_topics

    tag = f"t{uuid4().hex[:12]}"
    settings = Settings().model_copy(
        update={
            "topic": f"{tag}.events",
            "dead_letter_topic": f"{tag}.dead-letter",
            "topic_partitions": 3,
        }
    )
    await ensure_topics(settings, (TopicRole.EVENTS, TopicRole.DEAD_LETTER))
    yield settings
    names = [t for t in await kafka_admin.list_topics() if tag in t]
    if names:
        await kafka_admin.delete_topics(names)


async def test_a_watch_410_lists_again_and_releases_the_pods_deleted_meanwhile(
    kube_api_etcd_watch: kubeapi.KubeAPI,
    rendered: dict[str, list[dict[str, Any]]],
    topic_settings: Settings,
    watcher_process: Callable[..., WatcherProcess],
    tmp_path: Path,
) -> None:
    api = kube_api_etcd_watch
    admin = await config.new_client_from_config(config_file=str(api.kubeconfig_admin))
    try:
        async with KubeREST(api) as rest:
            await apply_identities(rest, rendered["base"])
            await wait_until_allowed(rest, WATCHER_ACCOUNT, "watch", "pods")
            await wait_until_allowed(
                rest,
                WATCHER_ACCOUNT,
                "watch",
                "leases",
                group="coordination.k8s.io",
                namespace="kube-node-lease",
            )
            kubeconfig = await rest.service_account_kubeconfig(
                "devicestate", WATCHER_ACCOUNT, tmp_path / "watcher.kubeconfig"
            )
        cluster = Cluster(admin)
        tag = uuid4().hex[:6]
        node, namespace = f"gpu-{tag}", f"batch-{tag}"
        await cluster.core.create_namespace({"metadata": {"name": namespace}})
        await cluster.node(node, gpus=8)
        uids, gpus = {}, {}
        for name in ("p1", "p2", "p3"):
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

        watcher = watcher_process(topic_settings, kubeconfig, DEVICESTATE_WATCH_TIMEOUT_SECONDS="2")
        async with TopicTail(
            topic_settings.kafka_bootstrap_servers, topic_settings.topic, watcher
        ) as tail:
            await tail.wait_for(
                lambda rs: all(observations(rs, node, gpu) for gpu in gpus.values()),
                "the listed Pods' devices",
                60,
            )
            # "Stop the watcher": its watch stays open, the server ends it after 2 s with
            # nothing more sent, and no later event reaches it.
            watcher.signal(signal.SIGSTOP)
            await asyncio.sleep(4)
            await cluster.delete_pod(namespace, "p1")
            await cluster.delete_pod(namespace, "p2")
            await cluster.status(
                namespace,
                "p3",
                containerStatuses=[
                    _container_status("a", [_gpu_entry(gpus["p3"], "Unhealthy", "XID 48")])
                ],
            )
            uids["p4"] = await cluster.pod(
                namespace,
                "p4",
                node,
                containers=[{"name": "a", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}],
            )
            gpus["p4"] = f"GPU-{tag}-p4"
            await cluster.status(
                namespace,
                "p4",
                containerStatuses=[_container_status("a", [_gpu_entry(gpus["p4"], "Healthy")])],
            )
            compacted = compact_etcd(api)  # the DELETED events are gone from etcd's history
            watcher.signal(signal.SIGCONT)

            records = await tail.wait_for(
                lambda rs: bool(
                    releases(rs, uids["p1"])
                    and releases(rs, uids["p2"])
                    and len(observations(rs, node, gpus["p3"])) >= 2
                    and observations(rs, node, gpus["p4"])
                ),
                "the releases and observations of the re-LIST",
                60,
            )
            for name in ("p1", "p2"):
                (release,) = releases(records, uids[name])
                assert (release.reason, release.resource_ids) == (
                    ReleaseReason.DELETED,
                    (gpus[name],),
                )
                # Stamped with the re-LIST's resourceVersion, newer than anything compacted away.
                assert release.status_version is not None and release.status_version >= compacted
            assert not releases(records, uids["p3"])
            assert observations(records, node, gpus["p3"])[-1].health is Health.UNHEALTHY
            assert len(observations(records, node, gpus["p4"])) == 1

            metrics = watcher.metrics()
            assert (
                metrics[
                    'devicestate_watcher_watch_restarts_total{reason="expired",resource="pods"}'
                ]
                >= 1
            )
            assert "watch expired (410 Gone), listing again" in watcher.log_text()
        assert watcher.stop() == 0
    finally:
        await admin.close()
