"""The Kubernetes calls of :class:`~services.processes.recovery.executors.KubernetesJobExecutor`.

:class:`KubeObjects` is the port (raw JSON dicts in and out); :class:`KubernetesObjects` is the
adapter over kubernetes-asyncio, with raw responses (``_preload_content=False``) parsed by orjson.
Tests use an in-memory fake.

RBAC the executor's identity needs: ``get`` nodes; ``list`` resourceslices and resourceclaims (all
namespaces) and ``get`` deviceclasses (``resource.k8s.io``, DRA devices only); ``create``,
``get``, ``delete`` jobs and ``create`` resourceclaims in ``recovery_namespace``. A dry-run
create needs the same ``create`` permission as a real one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import orjson
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from services.runtime.config import Settings

REQUEST_TIMEOUT = (10.0, 30.0)
"""Connect and read timeouts (seconds) of every call."""


class KubeApiError(Exception):
    """The API server answered with an error (``status`` 0: no answer at all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def transient(self) -> bool:
        return self.status == 0 or self.status == 429 or self.status >= 500


class KubeObjects(Protocol):
    """What the executor reads and writes. ``read_*`` return ``None`` for 404; everything else
    that is not a success raises :class:`KubeApiError`."""

    async def read_node(self, name: str) -> dict[str, Any] | None: ...

    async def list_resource_slices(self, node: str, driver: str) -> list[dict[str, Any]]: ...

    async def list_resource_claims(self, name: str) -> list[dict[str, Any]]: ...

    async def read_device_class(self, name: str) -> dict[str, Any] | None: ...

    async def create_job(
        self, namespace: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]: ...

    async def create_resource_claim(
        self, namespace: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]: ...

    async def read_job(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def delete_job(self, namespace: str, name: str) -> None: ...


def _message(body: bytes) -> str:
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:300].decode("utf-8", "replace")
    if isinstance(status, dict) and status.get("message"):
        return f"{status.get('reason') or ''} {status['message']}".strip()
    return body[:300].decode("utf-8", "replace")


class KubernetesObjects:
    """:class:`KubeObjects` over a kubernetes-asyncio ``ApiClient``."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self._core = k8s_client.CoreV1Api(api_client)
        self._batch = k8s_client.BatchV1Api(api_client)
        self._resource = k8s_client.ResourceV1Api(api_client)

    async def _call(self, method: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        try:
            response = await method(
                *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
            )
        except ApiException as exc:
            raise KubeApiError(int(exc.status or 0), str(exc.reason)) from exc
        except (OSError, TimeoutError) as exc:
            raise KubeApiError(0, repr(exc)) from exc
        except Exception as exc:  # aiohttp.ClientError and kin
            if type(exc).__module__.startswith("aiohttp"):
                raise KubeApiError(0, repr(exc)) from exc
            raise
        try:
            body: bytes = await response.read()
        finally:
            response.release()
        if response.status == 404 and missing_ok:
            return None
        if not 200 <= response.status < 300:
            raise KubeApiError(response.status, _message(body))
        return orjson.loads(body) if body else {}

    async def read_node(self, name: str) -> dict[str, Any] | None:
        node: dict[str, Any] | None = await self._call(self._core.read_node, name, missing_ok=True)
        return node

    async def list_resource_slices(self, node: str, driver: str) -> list[dict[str, Any]]:
        listed = await self._call(
            self._resource.list_resource_slice,
            field_selector=f"spec.nodeName={node},spec.driver={driver}",
        )
        return list(listed.get("items") or [])

    async def list_resource_claims(self, name: str) -> list[dict[str, Any]]:
        listed = await self._call(
            self._resource.list_resource_claim_for_all_namespaces,
            field_selector=f"metadata.name={name}",
        )
        return list(listed.get("items") or [])

    async def read_device_class(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = await self._call(
            self._resource.read_device_class, name, missing_ok=True
        )
        return found

    async def create_job(
        self, namespace: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        created: dict[str, Any] = await self._call(
            self._batch.create_namespaced_job, namespace, body, **extra
        )
        return created

    async def create_resource_claim(
        self, namespace: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        created: dict[str, Any] = await self._call(
            self._resource.create_namespaced_resource_claim, namespace, body, **extra
        )
        return created

    async def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        job: dict[str, Any] | None = await self._call(
            self._batch.read_namespaced_job, name, namespace, missing_ok=True
        )
        return job

    async def delete_job(self, namespace: str, name: str) -> None:
        await self._call(
            self._batch.delete_namespaced_job,
            name,
            namespace,
            missing_ok=True,
            body={"propagationPolicy": "Background"},
        )


@asynccontextmanager
async def kubernetes_objects(settings: Settings) -> AsyncIterator[KubernetesObjects]:
    """:class:`KubernetesObjects` on the client the watcher uses (``settings.kubeconfig``, else
    in-cluster, else ``~/.kube/config``)."""
    from services.processes.watcher.kube_source import kubernetes_api_client

    async with kubernetes_api_client(settings) as api_client:
        yield KubernetesObjects(api_client)
