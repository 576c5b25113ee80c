"""The recovery executor's port to the Kubernetes API (``recovery.kube.KubeObjects``):
:class:`~tests.fakes.kube_objects.FakeKube` and
:class:`~services.adapters.kube.objects.KubernetesObjects` on the test kube-apiserver pass the
same tests.

Objects the executor only reads (Nodes, ResourceSlices, ResourceClaims, DeviceClasses) are put
there by each harness: the fake's fields, or the admin client. Names carry a per-test suffix:
the API server is shared by the session. Jobs and claims go to a namespace of the test's own.
No controller runs there: a Job is never started, and deleting it removes it at once
(background propagation).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.adapters.kube.errors import KubeApiError
from services.adapters.kube.objects import KubernetesObjects
from services.processes.recovery.kube import KubeObjects
from tests.fakes.kube_objects import FakeKube

DRIVER = "gpu.example.com"
OTHER_DRIVER = "other.example.com"


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "check", "image": "registry.invalid/none"}],
                }
            },
        },
    }


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}
        },
    }


def slice_of(node: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver.split('.')[0]}-{uuid.uuid4().hex[:6]}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


class Harness(ABC):
    objects: KubeObjects
    namespace: str
    suffix: str

    @abstractmethod
    async def add_node(self, name: str, taints: list[dict[str, Any]]) -> None: ...

    @abstractmethod
    async def add_slice(self, body: dict[str, Any]) -> None: ...

    @abstractmethod
    async def add_device_class(self, name: str) -> None: ...


class KubeObjectsContract:
    """What the executor relies on. Subclasses provide ``harness``."""

    async def test_read_node_is_the_node_or_none(self, harness: Harness) -> None:
        name = f"gpu-node-{harness.suffix}"
        assert await harness.objects.read_node(name) is None
        taints = [{"key": "devicestate.io/quarantined", "effect": "NoSchedule"}]
        await harness.add_node(name, taints)
        node = await harness.objects.read_node(name)
        assert node is not None and node["metadata"]["name"] == name
        # The server adds node.kubernetes.io/not-ready to a Node created without a kubelet;
        # the fake's nodes stand for ready ones. Ours are there either way.
        assert all(t in node["spec"]["taints"] for t in taints)

    async def test_slices_are_listed_for_their_node_and_driver_only(self, harness: Harness) -> None:
        node, other = f"gpu-node-{harness.suffix}", f"gpu-node-b-{harness.suffix}"
        mine = slice_of(node, DRIVER)
        for body in (mine, slice_of(node, OTHER_DRIVER), slice_of(other, DRIVER)):
            await harness.add_slice(body)
        listed = await harness.objects.list_resource_slices(node, DRIVER)
        assert [s["metadata"]["name"] for s in listed] == [mine["metadata"]["name"]]
        assert await harness.objects.list_resource_slices(f"none-{node}", DRIVER) == []

    async def test_read_device_class_is_the_class_or_none(self, harness: Harness) -> None:
        name = f"class-{harness.suffix}.example.com"
        assert await harness.objects.read_device_class(name) is None
        await harness.add_device_class(name)
        found = await harness.objects.read_device_class(name)
        assert found is not None and found["metadata"]["name"] == name

    async def test_a_created_job_reads_back_until_deleted(self, harness: Harness) -> None:
        name = f"check-{harness.suffix}"
        ns = harness.namespace
        assert await harness.objects.read_job(ns, name) is None
        created = await harness.objects.create_job(ns, job(name), dry_run=False)
        assert created["metadata"]["name"] == name and created["metadata"]["uid"]
        read = await harness.objects.read_job(ns, name)
        assert read is not None and read["metadata"]["uid"] == created["metadata"]["uid"]
        await harness.objects.delete_job(ns, name)
        assert await harness.objects.read_job(ns, name) is None
        await harness.objects.delete_job(ns, name)  # gone already: nothing

    async def test_a_second_job_of_a_name_is_409_dry_run_or_not(self, harness: Harness) -> None:
        name = f"check-{harness.suffix}"
        await harness.objects.create_job(harness.namespace, job(name), dry_run=False)
        for dry_run in (True, False):
            with pytest.raises(KubeApiError) as raised:
                await harness.objects.create_job(harness.namespace, job(name), dry_run=dry_run)
            assert (raised.value.status, raised.value.reason) == (409, "AlreadyExists")

    async def test_a_dry_run_job_is_answered_and_not_stored(self, harness: Harness) -> None:
        name = f"check-{harness.suffix}"
        would = await harness.objects.create_job(harness.namespace, job(name), dry_run=True)
        assert would["metadata"]["name"] == name and would["metadata"]["uid"]
        assert await harness.objects.read_job(harness.namespace, name) is None

    async def test_created_claims_are_listed_by_name_dry_runs_are_not(
        self, harness: Harness
    ) -> None:
        name, dry = f"gpus-{harness.suffix}", f"gpus-dry-{harness.suffix}"
        created = await harness.objects.create_resource_claim(
            harness.namespace, claim(name), dry_run=False
        )
        assert created["metadata"]["uid"]
        would = await harness.objects.create_resource_claim(
            harness.namespace, claim(dry), dry_run=True
        )
        assert would["metadata"]["name"] == dry and would["metadata"]["uid"]
        (listed,) = await harness.objects.list_resource_claims(name)
        assert listed["metadata"]["uid"] == created["metadata"]["uid"]
        assert listed["metadata"]["namespace"] == harness.namespace
        assert await harness.objects.list_resource_claims(dry) == []
        with pytest.raises(KubeApiError) as raised:
            await harness.objects.create_resource_claim(harness.namespace, claim(name), False)
        assert (raised.value.status, raised.value.reason) == (409, "AlreadyExists")


class FakeHarness(Harness):
    def __init__(self) -> None:
        self.fake = FakeKube()
        self.objects = self.fake
        self.namespace, self.suffix = "devicestate", uuid.uuid4().hex[:8]

    async def add_node(self, name: str, taints: list[dict[str, Any]]) -> None:
        self.fake.add_node(name, taints)

    async def add_slice(self, body: dict[str, Any]) -> None:
        self.fake.slices.append(body)

    async def add_device_class(self, name: str) -> None:
        self.fake.device_classes.add(name)


class KubeHarness(Harness):
    def __init__(self, admin: client.ApiClient, namespace: str, suffix: str) -> None:
        self.admin, self.namespace, self.suffix = admin, namespace, suffix
        self.objects = KubernetesObjects(admin)

    async def add_node(self, name: str, taints: list[dict[str, Any]]) -> None:
        body = {"metadata": {"name": name}, "spec": {"taints": taints}}
        await client.CoreV1Api(self.admin).create_node(body)

    async def add_slice(self, body: dict[str, Any]) -> None:
        await client.ResourceV1Api(self.admin).create_resource_slice(body)

    async def add_device_class(self, name: str) -> None:
        await client.ResourceV1Api(self.admin).create_device_class({"metadata": {"name": name}})


class TestFakeKube(KubeObjectsContract):
    @pytest.fixture
    def harness(self) -> Harness:
        return FakeHarness()


class TestKubernetesObjects(KubeObjectsContract):
    @pytest.fixture
    async def harness(self, admin_client: client.ApiClient) -> Harness:
        suffix = uuid.uuid4().hex[:8]
        namespace = f"contract-{suffix}"  # left behind: no namespace controller runs
        await client.CoreV1Api(admin_client).create_namespace({"metadata": {"name": namespace}})
        return KubeHarness(admin_client, namespace, suffix)
