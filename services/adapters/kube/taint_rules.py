"""DeviceTaintRules at ``resource.k8s.io/v1beta2`` (cluster-scoped), for the enforcement
reconciler: :class:`KubernetesTaintRules` implements its port (``enforcement.kube.TaintRuleApi``),
raw JSON dicts in and out, errors as
:class:`~services.adapters.kube.errors.KubeApiError`.

Dry run: every write takes ``dry_run``. For create and replace it is the ``dryRun=All`` query
parameter. For DELETE it goes in the DeleteOptions body (``{"dryRun": ["All"]}``): when a DELETE
carries a body, kube-apiserver reads the options from the body only and ignores the query
parameters, so ``?dryRun=All`` next to a body with preconditions deletes for real (seen on
v1.36.3; ``tests/kubeapi/test_enforcement.py`` holds it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

from kubernetes_asyncio import client as k8s_client

from services.adapters.kube.client import ApiClient, kubernetes_api_client
from services.adapters.kube.errors import KubeApiError
from services.adapters.kube.requests import request_json
from services.runtime.config import KubeSettings

LIST_PAGE: Final = 500


class KubernetesTaintRules:
    """DeviceTaintRules over a kubernetes-asyncio ``ApiClient``. Anything but a success raises
    ``KubeApiError``, except that :meth:`delete_rule` returns ``False`` when the rule is gone."""

    def __init__(self, api_client: ApiClient) -> None:
        self._api = k8s_client.ResourceV1beta2Api(api_client)

    async def list_rules(self, label_selector: str) -> list[dict[str, Any]]:
        """Every rule matching ``label_selector`` (all pages)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"_continue": token} if token else {}
            listed = await request_json(
                self._api.list_device_taint_rule,
                label_selector=label_selector,
                limit=LIST_PAGE,
                **extra,
            )
            items.extend(listed.get("items") or [])
            token = (listed.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    async def create_rule(self, body: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        """The created rule (as the server would store it, for a dry run)."""
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        created = await request_json(self._api.create_device_taint_rule, body, **extra)
        return dict(created)

    async def replace_rule(self, name: str, body: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        """The replaced rule; 409 when ``body``'s resourceVersion is not the stored one."""
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        replaced = await request_json(self._api.replace_device_taint_rule, name, body, **extra)
        return dict(replaced)

    async def delete_rule(self, name: str, uid: str | None, dry_run: bool) -> bool:
        """``False`` when there was no such rule; 409 when its uid is not ``uid``."""
        # Options in the body only: with a body, the server ignores ?dryRun=All (module docstring).
        options: dict[str, Any] = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if dry_run:
            options["dryRun"] = ["All"]
        try:
            await request_json(self._api.delete_device_taint_rule, name, body=options)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True


@asynccontextmanager
async def kubernetes_taint_rules(settings: KubeSettings) -> AsyncIterator[KubernetesTaintRules]:
    """:class:`KubernetesTaintRules` on :func:`~services.adapters.kube.client.kubernetes_api_client`
    (``settings.kubeconfig``, else in-cluster, else ``~/.kube/config``)."""
    async with kubernetes_api_client(settings) as api_client:
        yield KubernetesTaintRules(api_client)
