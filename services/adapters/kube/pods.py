"""The Pod calls of the migration executor (``devicestate migrate``): read and list Pods, set a
condition through the status subresource, annotate, evict through the Eviction API and write
Events. :class:`KubernetesPods` implements its port (``migration.kube.MigrationPods``), raw JSON dicts
in and out, errors as :class:`~services.adapters.kube.errors.KubeApiError`.

RBAC it needs (``deploy/components/migration``): ``get``/``list``/``watch``/``patch`` pods,
``patch`` pods/status, ``create`` pods/eviction, ``create`` events. It never deletes a Pod.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from kubernetes_asyncio import client as k8s_client

from services.adapters.kube.client import ApiClient, kubernetes_api_client
from services.adapters.kube.requests import request_json
from services.runtime.config import KubeSettings

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
"""Pod conditions merge by ``type`` with a strategic merge patch: only ours is written."""


class KubernetesPods:
    """The executor's Pod calls over a kubernetes-asyncio ``ApiClient``. ``read_pod`` returns
    ``None`` for 404; anything else that is not a success raises ``KubeApiError``. ``dry_run``
    sends ``dryRun=All``: the API server checks the write (RBAC, admission, a
    PodDisruptionBudget for an eviction) and changes nothing."""

    def __init__(self, api_client: ApiClient) -> None:
        self._core = k8s_client.CoreV1Api(api_client)

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod: dict[str, Any] | None = await request_json(
            self._core.read_namespaced_pod, name, namespace, missing_ok=True
        )
        return pod

    async def list_pods(self, namespace: str) -> list[dict[str, Any]]:
        """The Pods of ``namespace`` (one page: the replacement of a workload is looked up
        where the workload runs)."""
        listed = await request_json(self._core.list_namespaced_pod, namespace)
        return list(listed.get("items") or [])

    async def patch_pod_condition(
        self, namespace: str, name: str, condition: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        """Set one condition (``type`` is the merge key) through ``pods/status``."""
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        patched: dict[str, Any] = await request_json(
            self._core.patch_namespaced_pod_status,
            name,
            namespace,
            {"status": {"conditions": [condition]}},
            _content_type=STRATEGIC_MERGE,
            **extra,
        )
        return patched

    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str], dry_run: bool
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        patched: dict[str, Any] = await request_json(
            self._core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"annotations": annotations}},
            _content_type=STRATEGIC_MERGE,
            **extra,
        )
        return patched

    async def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool) -> None:
        """A policy/v1 Eviction of the Pod with UID ``uid`` (a precondition: a Pod of the same
        name created since is not evicted). 429: a PodDisruptionBudget refused it; 404: gone."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        if dry_run:
            body["deleteOptions"]["dryRun"] = ["All"]
        await request_json(self._core.create_namespaced_pod_eviction, name, namespace, body)

    async def create_event(
        self, namespace: str, body: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        """Create a core/v1 Event. 409: one of that name exists (also with ``dry_run``: the
        server checks the name, so a dry-run create tells whether the Event is there)."""
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        created: dict[str, Any] = await request_json(
            self._core.create_namespaced_event, namespace, body, **extra
        )
        return created


@asynccontextmanager
async def kubernetes_pods(settings: KubeSettings) -> AsyncIterator[KubernetesPods]:
    """:class:`KubernetesPods` on :func:`~services.adapters.kube.client.kubernetes_api_client`."""
    async with kubernetes_api_client(settings) as api_client:
        yield KubernetesPods(api_client)
