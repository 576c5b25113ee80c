"""The port of the migration executor to the Kubernetes API: Pods, their status condition,
annotations, policy/v1 Evictions and core/v1 Events, raw JSON dicts in and out.

The real one is :class:`~services.adapters.kube.pods.KubernetesPods` (RBAC there); the tests
run the executor against the real test API server.
"""

from __future__ import annotations

from typing import Any, Protocol


class MigrationPods(Protocol):
    """``read_pod`` returns ``None`` for 404; anything else that is not a success raises
    :class:`~services.adapters.kube.errors.KubeApiError` (``evict_pod``: 429 when a
    PodDisruptionBudget refuses, 404 when the Pod is gone)."""

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def patch_pod_condition(
        self, namespace: str, name: str, condition: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]: ...

    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str], dry_run: bool
    ) -> dict[str, Any]: ...

    async def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool) -> None: ...

    async def create_event(
        self, namespace: str, body: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]: ...
