"""A small synchronous client of the devicestate API for the operator commands."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

TIMEOUT_SECONDS = 10.0


class ApiError(Exception):
    """The API answered 4xx/5xx (``status`` set) or could not be reached (``status`` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def path_segment(value: str) -> str:
    """``value`` for a path that takes it unescaped (``/`` and ``@`` kept): only what URLs
    require is percent-encoded (``%``, ``?``, ``#``, spaces, ...)."""
    return quote(value, safe="/@:+,;=!$&'()*~")


def error_message(response: httpx.Response) -> str:
    """A readable one-line message for an error response: the API's ``detail`` (validation
    errors as ``field: message`` pairs), else the body."""
    reason = response.reason_phrase or ""
    try:
        body = response.json()
    except ValueError:
        body = None
    detail: Any = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                message = re.sub(r"^Value error, ", "", str(item.get("msg", "")))
                parts.append(f"{where}: {message}" if where else message)
            else:
                parts.append(str(item))
        text = "; ".join(parts)
    elif detail is not None:
        text = str(detail)
    else:
        text = response.text.strip()[:500] or "(no body)"
    return f"{response.status_code} {reason}: {text}".replace(" :", ":")


class ApiClient:
    """``ApiClient(url, token)``; methods raise :class:`ApiError`."""

    def __init__(self, api_url: str, token: str | None, timeout: float = TIMEOUT_SECONDS) -> None:
        self.api_url = api_url
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=api_url, headers=headers, timeout=timeout)

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        accept: tuple[int, ...] = (),
        timeout: float | None = None,
    ) -> httpx.Response:
        """Send a request; a status >= 400 not in ``accept`` raises :class:`ApiError`."""
        try:
            response = self._client.request(
                method,
                path,
                json=json,
                params=params,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach the API at {self.api_url}: {exc}") from None
        if response.status_code >= 400 and response.status_code not in accept:
            raise ApiError(error_message(response), response.status_code)
        return response

    def get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, params=clean).json()

    def pages(self, path: str, params: dict[str, Any], page_size: int = 500) -> Iterator[Any]:
        """Every item of a keyset-paginated list (following ``nextCursor``)."""
        query = {k: v for k, v in params.items() if v is not None}
        query["limit"] = page_size
        while True:
            body = self.request("GET", path, params=query).json()
            yield from body["items"]
            cursor = body.get("nextCursor")
            if not cursor:
                return
            query["cursor"] = cursor
