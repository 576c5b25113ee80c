"""GET of one Pod owner (ReplicaSet, Job, Deployment, StatefulSet, JobSet, LeaderWorkerSet...)
for the watcher's controller chains, raw JSON through
:func:`~services.adapters.kube.requests.request_json`.

Every owner kind the chain reads lives under ``/apis/<group>/<version>`` (apps/v1, batch/v1,
jobset.x-k8s.io, leaderworkerset.x-k8s.io), so one generic GET serves them all
(``CustomObjectsApi.get_namespaced_custom_object`` builds exactly that path).
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s_client

from services.adapters.kube.client import ApiClient
from services.adapters.kube.requests import request_json


class KubernetesOwners:
    """Reads owners over a kubernetes-asyncio ``ApiClient``."""

    def __init__(self, api_client: ApiClient) -> None:
        self._custom = k8s_client.CustomObjectsApi(api_client)

    async def read_owner(
        self, api_version: str, resource: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """The object ``namespace/name`` of ``resource`` (plural) in ``api_version``
        (``group/version``), or ``None`` when it does not exist (404). Raises ``ValueError`` for
        an ``api_version`` without a group (core kinds are not owners the chain reads) and
        :class:`~services.adapters.kube.errors.KubeApiError` for any other refusal or when the
        server cannot be reached (``status`` 0)."""
        group, _, version = api_version.rpartition("/")
        if not group:
            raise ValueError(f"apiVersion {api_version!r} has no group")
        found: dict[str, Any] | None = await request_json(
            self._custom.get_namespaced_custom_object,
            group,
            version,
            namespace,
            resource,
            name,
            missing_ok=True,
        )
        return found
