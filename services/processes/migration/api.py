"""The executor's calls to the devicestate API (over HTTP: the governor's record is what it
follows and where its reports go).

- ``GET /v1/migrations?phase=`` and ``GET /v1/migrations/{id}``: the migrations to act on;
- ``POST /v1/migrations/{id}/reports`` (operator token): a report (202; the governor decides it
  on its event time);
- ``POST /v1/migrations/{id}/evidence`` (operator token): what a non-recoverable workload's Pods
  looked like (202 accepted, 404 unknown migration);
- ``GET /v1/workloads?quarantined=false&namespace=``: the Pods of a namespace holding devices,
  with their workload UID (the replacement).

:class:`HttpMigrationsApi` is the real one (httpx, an exemption of the ``http-client-in-the-
clients`` contract like the alerts sender: a process may not import ``services.client``).
Anything but a success raises :class:`ApiCallError`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Protocol

import httpx

from services.domain.events import format_time

TIMEOUT_SECONDS: Final = 10.0
PAGE_SIZE: Final = 500


class ApiCallError(Exception):
    """The API refused a call (``status``) or could not be reached (``status`` 0)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class MigrationsApi(Protocol):
    async def list_migrations(self, phase: str, limit: int = 1000) -> list[dict[str, Any]]:
        """``GET /v1/migrations?phase=&limit=``: the items, the most recently decided first."""
        ...

    async def get_migration(self, migration_id: str) -> dict[str, Any] | None:
        """``GET /v1/migrations/{id}`` (``None``: 404)."""
        ...

    async def report(self, migration_id: str, body: dict[str, Any]) -> None: ...

    async def post_evidence(self, migration_id: str, body: dict[str, Any]) -> bool:
        """``True``: 202 accepted; ``False``: 404 (unknown migration, or an API without the
        route yet)."""
        ...

    async def workloads(self, namespace: str) -> list[dict[str, Any]]: ...


def report_body(
    kind: str, holder: str, token: int, *, detail: str = "", **fields: Any
) -> dict[str, Any]:
    """A ``POST /v1/migrations/{id}/reports`` body (``fencingToken`` for every kind but
    ``lease-requested``; ``detail`` cut to the API's 1000 characters)."""
    body: dict[str, Any] = {"kind": kind, "holder": holder}
    if kind != "lease-requested":
        body["fencingToken"] = token
    if detail:
        body["detail"] = detail[:1000]
    body.update(fields)
    return body


def evidence_body(
    holder: str, collected_at: datetime, pods: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``POST /v1/migrations/{id}/evidence`` body: ``{"holder", "collectedAt" (RFC 3339
    UTC), "pods": [{"namespace", "name", "uid", "resourceVersion", "status"}]}`` from the Pods
    as read (``status``: the Pod's last ``.status``, JSON as the API server served it)."""
    return {
        "holder": holder,
        "collectedAt": format_time(collected_at),
        "pods": [
            {
                "namespace": p["metadata"]["namespace"],
                "name": p["metadata"]["name"],
                "uid": p["metadata"].get("uid", ""),
                "resourceVersion": p["metadata"].get("resourceVersion", ""),
                "status": p.get("status") or {},
            }
            for p in pods
        ],
    }


def _message(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = str(detail) if detail is not None else response.text[:300]
    return f"HTTP {response.status_code}: {text}"


class HttpMigrationsApi:
    """:class:`MigrationsApi` over HTTP at ``api_url`` with bearer ``token`` (the operator
    role: reports and evidence are writes). ``transport`` replaces the network (tests);
    :meth:`over` uses a client made elsewhere (e.g. on an app's ASGI transport)."""

    def __init__(
        self,
        api_url: str,
        token: str | None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(
            base_url=api_url, headers=headers, timeout=timeout, transport=transport
        )

    @classmethod
    def over(cls, client: httpx.AsyncClient) -> HttpMigrationsApi:
        """Calls through ``client`` (its base URL and headers; closing it is the caller's)."""
        api = cls.__new__(cls)
        api._client = client
        return api

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        accept: tuple[int, ...] = (),
    ) -> httpx.Response:
        try:
            response = await self._client.request(method, path, json=json, params=params)
        except httpx.HTTPError as exc:
            raise ApiCallError(f"cannot reach the API at {self._client.base_url}: {exc}") from None
        if response.status_code >= 400 and response.status_code not in accept:
            raise ApiCallError(_message(response), response.status_code)
        return response

    async def list_migrations(self, phase: str, limit: int = 1000) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"phase": phase, "limit": limit}
        response = await self._call("GET", "/v1/migrations", params=params)
        return list(response.json()["items"])

    async def get_migration(self, migration_id: str) -> dict[str, Any] | None:
        response = await self._call("GET", f"/v1/migrations/{migration_id}", accept=(404,))
        if response.status_code == 404:
            return None
        found: dict[str, Any] = response.json()
        return found

    async def report(self, migration_id: str, body: dict[str, Any]) -> None:
        await self._call("POST", f"/v1/migrations/{migration_id}/reports", json=body)

    async def post_evidence(self, migration_id: str, body: dict[str, Any]) -> bool:
        response = await self._call(
            "POST", f"/v1/migrations/{migration_id}/evidence", json=body, accept=(404,)
        )
        return response.status_code != 404

    async def workloads(self, namespace: str) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"quarantined": "false", "namespace": namespace}
        params["limit"] = PAGE_SIZE
        items: list[dict[str, Any]] = []
        while True:
            body = (await self._call("GET", "/v1/workloads", params=params)).json()
            items.extend(body["items"])
            if not body.get("nextCursor"):
                return items
            params["cursor"] = body["nextCursor"]
