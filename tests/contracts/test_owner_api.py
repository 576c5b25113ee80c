"""The watcher's owner reads (``watcher.workloads.OwnerApi``):
:class:`~tests.fakes.owner_api.FakeOwners` and
:class:`~services.adapters.kube.owners.KubernetesOwners` on the test kube-apiserver pass the same
tests. No controller runs there: a ReplicaSet or Job created stays as written."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.adapters.kube.owners import KubernetesOwners
from services.processes.watcher.workloads import OwnerApi
from tests.fakes.owner_api import FakeOwners

LABELS = {"app": "contract"}
TEMPLATE = {
    "metadata": {"labels": LABELS},
    "spec": {"containers": [{"name": "a", "image": "registry.invalid/none"}]},
}


def replica_set(name: str, namespace: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"selector": {"matchLabels": LABELS}, "template": TEMPLATE},
    }


class Harness(ABC):
    owners: OwnerApi
    namespace: str

    @abstractmethod
    async def add_replica_set(self, body: dict[str, Any]) -> str:
        """Create it; its UID."""


class OwnerApiContract:
    async def test_an_owner_reads_back_with_its_uid_and_annotations(self, harness: Harness) -> None:
        name = f"rs-{uuid.uuid4().hex[:6]}"
        body = replica_set(name, harness.namespace, {"devicestate.io/migration-class": "sharded"})
        uid = await harness.add_replica_set(body)
        found = await harness.owners.read_owner("apps/v1", "replicasets", harness.namespace, name)
        assert found is not None
        assert found["metadata"]["uid"] == uid and found["metadata"]["name"] == name
        assert found["metadata"]["annotations"]["devicestate.io/migration-class"] == "sharded"

    async def test_a_missing_owner_is_none(self, harness: Harness) -> None:
        missing = await harness.owners.read_owner(
            "batch/v1", "jobs", harness.namespace, "no-such-job"
        )
        assert missing is None

    async def test_a_core_api_version_is_refused(self, harness: Harness) -> None:
        with pytest.raises(ValueError, match="has no group"):
            await harness.owners.read_owner("v1", "replicationcontrollers", harness.namespace, "x")


class FakeHarness(Harness):
    def __init__(self) -> None:
        self.fake = FakeOwners()
        self.owners = self.fake
        self.namespace = "contract"

    async def add_replica_set(self, body: dict[str, Any]) -> str:
        uid = str(uuid.uuid4())
        self.fake.add(
            "apps/v1", "replicasets", {**body, "metadata": {**body["metadata"], "uid": uid}}
        )
        return uid


class KubeHarness(Harness):
    def __init__(self, admin: client.ApiClient, namespace: str) -> None:
        self.apps = client.AppsV1Api(admin)
        self.owners = KubernetesOwners(admin)
        self.namespace = namespace

    async def add_replica_set(self, body: dict[str, Any]) -> str:
        created = await self.apps.create_namespaced_replica_set(self.namespace, body)
        return str(created.metadata.uid)


class TestFakeOwners(OwnerApiContract):
    @pytest.fixture
    def harness(self) -> Harness:
        return FakeHarness()


class TestKubernetesOwners(OwnerApiContract):
    @pytest.fixture
    async def harness(self, admin_client: client.ApiClient) -> Harness:
        namespace = f"owners-{uuid.uuid4().hex[:8]}"  # left behind: no namespace controller runs
        await client.CoreV1Api(admin_client).create_namespace({"metadata": {"name": namespace}})
        return KubeHarness(admin_client, namespace)
