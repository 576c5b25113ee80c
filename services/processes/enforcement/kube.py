"""The Kubernetes calls of the enforcement reconciler: DeviceTaintRules at ``resource.k8s.io/v1beta2``.

:class:`TaintRuleApi` is the port (raw JSON dicts in and out); :class:`KubernetesTaintRules` is
the adapter over kubernetes-asyncio (raw responses, ``_preload_content=False``, parsed by orjson).
Tests use an in-memory fake or the real test API server.

Dry run: every write takes ``dry_run``. For create and replace it is the ``dryRun=All`` query
parameter. For DELETE it goes in the DeleteOptions body (``{"dryRun": ["All"]}``): when a DELETE
carries a body, kube-apiserver reads the options from the body only and ignores the query
parameters, so ``?dryRun=All`` next to a body with preconditions deletes for real (seen on
v1.36.3; ``tests/kubeapi/test_enforcement.py`` holds it).
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
LIST_PAGE = 500


class KubeApiError(Exception):
    """The API server answered with an error (``status`` 0: no answer at all)."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.reason = reason

    @property
    def transient(self) -> bool:
        return self.status == 0 or self.status == 429 or self.status >= 500


class TaintRuleApi(Protocol):
    """DeviceTaintRules (cluster-scoped). Anything but a success raises :class:`KubeApiError`,
    except that :meth:`delete_rule` returns ``False`` when the rule is already gone."""

    async def list_rules(self, label_selector: str) -> list[dict[str, Any]]: ...

    async def create_rule(self, body: dict[str, Any], dry_run: bool) -> dict[str, Any]: ...

    async def replace_rule(
        self, name: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]: ...

    async def delete_rule(self, name: str, uid: str | None, dry_run: bool) -> bool: ...


def _error(status: int, body: bytes) -> KubeApiError:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("message"):
        return KubeApiError(status, str(parsed["message"]), str(parsed.get("reason") or ""))
    return KubeApiError(status, body[:300].decode("utf-8", "replace"))


class KubernetesTaintRules:
    """:class:`TaintRuleApi` over a kubernetes-asyncio ``ApiClient``."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self._api = k8s_client.ResourceV1beta2Api(api_client)

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        try:
            response = await method(
                *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
            )
        except ApiException as exc:
            body = exc.body if isinstance(exc.body, bytes | str) else b""
            raw = body.encode() if isinstance(body, str) else body
            error = _error(int(exc.status or 0), raw) if raw else None
            raise error or KubeApiError(int(exc.status or 0), str(exc.reason)) from exc
        except (OSError, TimeoutError) as exc:
            raise KubeApiError(0, repr(exc)) from exc
        except Exception as exc:  # aiohttp.ClientError and kin
            if type(exc).__module__.startswith("aiohttp"):
                raise KubeApiError(0, repr(exc)) from exc
            raise
        try:
            body_bytes: bytes = await response.read()
        finally:
            response.release()
        if not 200 <= response.status < 300:
            raise _error(response.status, body_bytes)
        return response.status, (orjson.loads(body_bytes) if body_bytes else {})

    async def list_rules(self, label_selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            extra: dict[str, Any] = {"_continue": token} if token else {}
            _, listed = await self._call(
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
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        _, created = await self._call(self._api.create_device_taint_rule, body, **extra)
        return dict(created)

    async def replace_rule(self, name: str, body: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        _, replaced = await self._call(self._api.replace_device_taint_rule, name, body, **extra)
        return dict(replaced)

    async def delete_rule(self, name: str, uid: str | None, dry_run: bool) -> bool:
        # Options in the body only: with a body, the server ignores ?dryRun=All (module docstring).
        options: dict[str, Any] = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if dry_run:
            options["dryRun"] = ["All"]
        try:
            await self._call(self._api.delete_device_taint_rule, name, body=options)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True


@asynccontextmanager
async def kubernetes_taint_rules(settings: Settings) -> AsyncIterator[KubernetesTaintRules]:
    """:class:`KubernetesTaintRules` on the client the watcher uses (``settings.kubeconfig``,
    else in-cluster, else ``~/.kube/config``)."""
    from services.processes.watcher.kube_source import kubernetes_api_client

    async with kubernetes_api_client(settings) as api_client:
        yield KubernetesTaintRules(api_client)
