"""An in-memory :class:`~services.processes.recovery.kube.KubeObjects` for executor tests, held to
the real adapter on the test kube-apiserver by ``tests/contracts/test_kube_objects.py``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.adapters.kube.errors import KubeApiError


@dataclass
class FakeKube:
    """Nodes, ResourceSlices, ResourceClaims and DeviceClasses to read; records what is created
    (``created``: ``(kind, namespace, body, dry_run)``, every call) and deleted. Created Jobs
    and ResourceClaims are kept (not a dry run's); a second one of a name is 409 AlreadyExists,
    a dry run's too. Jobs are keyed by name only (the executor uses one namespace). A live Job's
    status comes from ``job_status(name, reads)`` (``reads``: how often it was read).
    ``fail_on``: a method name -> the :class:`KubeApiError` it raises."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    slices: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    device_classes: set[str] = field(default_factory=set)
    job_status: Callable[[str, int], dict[str, Any]] = lambda name, reads: {}
    fail_on: dict[str, KubeApiError] = field(default_factory=dict)
    created: list[tuple[str, str, dict[str, Any], bool]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    reads: dict[str, int] = field(default_factory=dict)

    def _maybe_fail(self, method: str) -> None:
        if method in self.fail_on:
            raise self.fail_on[method]

    def add_node(
        self, name: str, taints: list[dict[str, Any]] | None = None, hostname: str | None = None
    ) -> None:
        self.nodes[name] = {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": hostname or name}},
            "spec": {"taints": taints or []},
        }

    async def read_node(self, name: str) -> dict[str, Any] | None:
        self._maybe_fail("read_node")
        return copy.deepcopy(self.nodes.get(name))

    async def list_resource_slices(self, node: str, driver: str) -> list[dict[str, Any]]:
        self._maybe_fail("list_resource_slices")
        return [
            copy.deepcopy(s)
            for s in self.slices
            if s["spec"].get("nodeName") == node and s["spec"].get("driver") == driver
        ]

    async def list_resource_claims(self, name: str) -> list[dict[str, Any]]:
        self._maybe_fail("list_resource_claims")
        return [copy.deepcopy(c) for c in self.claims if c["metadata"]["name"] == name]

    async def read_device_class(self, name: str) -> dict[str, Any] | None:
        self._maybe_fail("read_device_class")
        return {"metadata": {"name": name}} if name in self.device_classes else None

    async def create_job(
        self, namespace: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        self._maybe_fail("create_job")
        self.created.append(("Job", namespace, copy.deepcopy(body), dry_run))
        name = body["metadata"]["name"]
        stored = copy.deepcopy(body)
        stored["metadata"]["uid"] = f"uid-{name}"
        # A dry run is refused for an existing name too, as the API server does.
        if name in self.jobs:
            raise KubeApiError(409, f'jobs.batch "{name}" already exists', "AlreadyExists")
        if not dry_run:
            self.jobs[name] = stored
        return stored

    async def create_resource_claim(
        self, namespace: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        self._maybe_fail("create_resource_claim")
        self.created.append(("ResourceClaim", namespace, copy.deepcopy(body), dry_run))
        name = body["metadata"]["name"]
        stored = copy.deepcopy(body)
        stored["metadata"].update(namespace=namespace, uid=f"uid-{namespace}-{name}")
        if any(
            c["metadata"]["name"] == name and c["metadata"].get("namespace") == namespace
            for c in self.claims
        ):
            raise KubeApiError(
                409, f'resourceclaims.resource.k8s.io "{name}" already exists', "AlreadyExists"
            )
        if not dry_run:
            self.claims.append(stored)
        return copy.deepcopy(stored)

    async def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._maybe_fail("read_job")
        if name not in self.jobs:
            return None
        self.reads[name] = self.reads.get(name, 0) + 1
        job = copy.deepcopy(self.jobs[name])
        job["status"] = self.job_status(name, self.reads[name])
        return job

    async def delete_job(self, namespace: str, name: str) -> None:
        self._maybe_fail("delete_job")
        self.deleted.append(name)
        self.jobs.pop(name, None)
