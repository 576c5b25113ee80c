"""Single objects the recovery executor reads and writes: Nodes, ResourceSlices, ResourceClaims,
DeviceClasses, Jobs. :class:`KubernetesObjects` implements its port
(``recovery.kube.KubeObjects``), raw JSON dicts in and out, errors as
:class:`~services.adapters.kube.errors.KubeApiError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from kubernetes_asyncio import client as k8s_client

from services.adapters.kube.client import ApiClient, kubernetes_api_client
from services.adapters.kube.requests import request_json
from services.runtime.config import KubeSettings


class KubernetesObjects:
    """The executor's objects over a kubernetes-asyncio ``ApiClient``. ``read_*`` return
    ``None`` for 404; anything else that is not a success raises ``KubeApiError``."""

    def __init__(self, api_client: ApiClient) -> None:
        self._core = k8s_client.CoreV1Api(api_client)
        self._batch = k8s_client.BatchV1Api(api_client)
        self._resource = k8s_client.ResourceV1Api(api_client)

    async def read_node(self, name: str) -> dict[str, Any] | None:
        node: dict[str, Any] | None = await request_json(
            self._core.read_node, name, missing_ok=True
        )
        return node

    async def list_resource_slices(self, node: str, driver: str) -> list[dict[str, Any]]:
        """The slices ``driver`` publishes for ``node`` (one page: a node has a few)."""
        listed = await request_json(
            self._resource.list_resource_slice,
            field_selector=f"spec.nodeName={node},spec.driver={driver}",
        )
        return list(listed.get("items") or [])

    async def list_resource_claims(self, name: str) -> list[dict[str, Any]]:
        """The claims named ``name``, in any namespace."""
        listed = await request_json(
            self._resource.list_resource_claim_for_all_namespaces,
            field_selector=f"metadata.name={name}",
        )
        return list(listed.get("items") or [])

    async def read_device_class(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = await request_json(
            self._resource.read_device_class, name, missing_ok=True
        )
        return found

    async def create_job(
        self, namespace: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        created: dict[str, Any] = await request_json(
            self._batch.create_namespaced_job, namespace, body, **extra
        )
        return created

    async def create_resource_claim(
        self, namespace: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        created: dict[str, Any] = await request_json(
            self._resource.create_namespaced_resource_claim, namespace, body, **extra
        )
        return created

    async def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        job: dict[str, Any] | None = await request_json(
            self._batch.read_namespaced_job, name, namespace, missing_ok=True
        )
        return job

    async def delete_job(self, namespace: str, name: str) -> None:
        """Delete the Job and, in the background, its Pods; nothing when it is gone already."""
        await request_json(
            self._batch.delete_namespaced_job,
            name,
            namespace,
            missing_ok=True,
            body={"propagationPolicy": "Background"},
        )


@asynccontextmanager
async def kubernetes_objects(settings: KubeSettings) -> AsyncIterator[KubernetesObjects]:
    """:class:`KubernetesObjects` on :func:`~services.adapters.kube.client.kubernetes_api_client`
    (``settings.kubeconfig``, else in-cluster, else ``~/.kube/config``)."""
    async with kubernetes_api_client(settings) as api_client:
        yield KubernetesObjects(api_client)
