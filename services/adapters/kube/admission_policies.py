"""ValidatingAdmissionPolicies and their bindings at ``admissionregistration.k8s.io/v1``
(cluster-scoped, GA since Kubernetes 1.30), for the adoption rollback reconciler:
:class:`KubernetesAdmissionPolicies` implements its port
(``enforcement.admission_kube.AdmissionPolicyApi``), raw JSON dicts in and out, errors as
:class:`~services.adapters.kube.errors.KubeApiError`.

``kind`` is ``policy`` (ValidatingAdmissionPolicy) or ``binding``
(ValidatingAdmissionPolicyBinding). Dry run as for DeviceTaintRules
(:mod:`.taint_rules`): ``dryRun=All`` on create and replace, in the DeleteOptions body on delete.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, Literal

from kubernetes_asyncio import client as k8s_client

from services.adapters.kube.client import ApiClient, kubernetes_api_client
from services.adapters.kube.errors import KubeApiError
from services.adapters.kube.requests import ApiCall, request_json
from services.runtime.config import KubeSettings

LIST_PAGE: Final = 500
Kind = Literal["policy", "binding"]


class KubernetesAdmissionPolicies:
    """Policies and bindings over a kubernetes-asyncio ``ApiClient``. Anything but a success
    raises ``KubeApiError``, except that :meth:`delete` returns ``False`` when the object is
    gone."""

    def __init__(self, api_client: ApiClient) -> None:
        api = k8s_client.AdmissionregistrationV1Api(api_client)
        self._calls: dict[str, dict[str, ApiCall]] = {
            "policy": {
                "list": api.list_validating_admission_policy,
                "create": api.create_validating_admission_policy,
                "replace": api.replace_validating_admission_policy,
                "delete": api.delete_validating_admission_policy,
            },
            "binding": {
                "list": api.list_validating_admission_policy_binding,
                "create": api.create_validating_admission_policy_binding,
                "replace": api.replace_validating_admission_policy_binding,
                "delete": api.delete_validating_admission_policy_binding,
            },
        }

    async def list(self, kind: Kind, label_selector: str) -> list[dict[str, Any]]:
        """Every object of ``kind`` matching ``label_selector`` (all pages)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"_continue": token} if token else {}
            listed = await request_json(
                self._calls[kind]["list"], label_selector=label_selector, limit=LIST_PAGE, **extra
            )
            items.extend(listed.get("items") or [])
            token = (listed.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    async def create(self, kind: Kind, body: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        """The created object (as the server would store it, for a dry run)."""
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return dict(await request_json(self._calls[kind]["create"], body, **extra))

    async def replace(
        self, kind: Kind, name: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        """The replaced object; 409 when ``body``'s resourceVersion is not the stored one."""
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return dict(await request_json(self._calls[kind]["replace"], name, body, **extra))

    async def delete(self, kind: Kind, name: str, uid: str | None, dry_run: bool) -> bool:
        """``False`` when there was no such object; 409 when its uid is not ``uid``."""
        options: dict[str, Any] = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if dry_run:
            options["dryRun"] = ["All"]
        try:
            await request_json(self._calls[kind]["delete"], name, body=options)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True


@asynccontextmanager
async def kubernetes_admission_policies(
    settings: KubeSettings,
) -> AsyncIterator[KubernetesAdmissionPolicies]:
    """:class:`KubernetesAdmissionPolicies` on
    :func:`~services.adapters.kube.client.kubernetes_api_client`."""
    async with kubernetes_api_client(settings) as api_client:
        yield KubernetesAdmissionPolicies(api_client)
