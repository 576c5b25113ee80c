"""The port of :class:`~services.processes.recovery.executors.KubernetesJobExecutor` to the
Kubernetes API, raw JSON dicts in and out.

The real one is :class:`~services.adapters.kube.objects.KubernetesObjects`; tests use an
in-memory fake or the real test API server.

RBAC the executor's identity needs: ``get`` nodes; ``list`` resourceslices and resourceclaims (all
namespaces) and ``get`` deviceclasses (``resource.k8s.io``, DRA devices only); ``create``,
``get``, ``delete`` jobs and ``create`` resourceclaims in ``recovery_namespace``. A dry-run
create needs the same ``create`` permission as a real one.
"""

from __future__ import annotations

from typing import Any, Protocol


class KubeObjects(Protocol):
    """What the executor reads and writes. ``read_*`` return ``None`` for 404; everything else
    that is not a success raises :class:`~services.adapters.kube.errors.KubeApiError`."""

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
