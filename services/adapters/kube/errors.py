"""What a failed Kubernetes call raises: two families, one per kind of caller.

LIST/WATCH loops (the watcher) retry or stop by exception type: :class:`ResourceExpired` (410:
LIST again), :class:`ApiUnavailable` (network, timeout, 429, 5xx: back off and retry),
:class:`ApiRejected` (any other refusal: stop), of which :class:`ResourceNotServed` (404).
Single requests (enforcement, recovery) raise :class:`KubeApiError`, which keeps the HTTP status
and the Status object's ``message`` and ``reason``; the caller decides (409: conflict, 404:
gone, :attr:`KubeApiError.transient`).

Statuses come from the response (``_preload_content=False`` never raises for them); client
exceptions are kubernetes-asyncio's ``ApiException`` (status 0 when the request could not even
be built) and the transport's (aiohttp, ``OSError``, ``TimeoutError``: no answer at all).
"""

from __future__ import annotations

import orjson
from kubernetes_asyncio.client.exceptions import ApiException

STATUS_TEXT_LIMIT = 500
"""Bytes of a LIST/WATCH error body kept in the exception's message."""
REQUEST_TEXT_LIMIT = 300
"""Bytes of a non-Status error body kept as a :class:`KubeApiError` message."""


class ResourceExpired(Exception):
    """HTTP 410 Gone: the resourceVersion to resume from is too old; LIST again."""


class ApiUnavailable(Exception):
    """A transient failure (network, timeout, 429, 5xx): retry after a backoff."""


class ApiRejected(Exception):
    """A failure that retrying will not fix (401, 403, 400...): the watcher stops."""


class ResourceNotServed(ApiRejected):
    """HTTP 404 on a LIST or WATCH: the API server does not serve the resource (e.g. a cluster
    without resource.k8s.io/v1, or a namespace that does not exist). An :class:`ApiRejected`:
    it stops the watcher, unless the loop was started as optional
    (``watcher.node_source.ObjectSource(optional=True)``)."""


WATCH_ERRORS = (ResourceExpired, ApiUnavailable, ApiRejected)
"""Every exception of the LIST/WATCH family (to let them through a broader ``except``)."""


class KubeApiError(Exception):
    """The API server answered a single request with an error: ``status`` (0: no answer at
    all), the Status object's ``message`` (else the start of the body) and ``reason`` (e.g.
    ``Conflict``, ``""`` when the body is not a Status)."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.reason = reason

    @property
    def transient(self) -> bool:
        """No answer, 429 or 5xx: the same request may succeed later."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @property
    def described(self) -> str:
        """The error with the reason before the message, e.g. ``HTTP 403: Forbidden jobs.batch
        is forbidden: ...`` (``str()`` of the error without the reason)."""
        text = f"{self.reason} {self.message}".strip() if self.reason else self.message
        return f"HTTP {self.status}: {text}" if self.status else text


def is_transport_error(exc: BaseException) -> bool:
    """No answer from the API server: the connection, a timeout, or anything aiohttp raised."""
    return isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith("aiohttp")


def raise_for_watch_status(status: int, body: bytes) -> None:
    """Nothing for a 2xx; else the LIST/WATCH exception of ``status`` with the body's start."""
    if 200 <= status < 300:
        return
    text = body[:STATUS_TEXT_LIMIT].decode("utf-8", "replace")
    if status == 410:
        raise ResourceExpired(text)
    if status == 429 or status >= 500:
        raise ApiUnavailable(f"HTTP {status}: {text}")
    if status == 404:
        raise ResourceNotServed(f"HTTP {status}: {text}")
    raise ApiRejected(f"HTTP {status}: {text}")


def as_watch_error(exc: BaseException) -> BaseException:
    """A client library exception as :class:`ResourceExpired`/:class:`ApiUnavailable`/
    :class:`ApiRejected`; other exceptions unchanged."""
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        if status == 410:
            return ResourceExpired(str(exc.reason))
        if status == 0 or status == 429 or status >= 500:
            return ApiUnavailable(f"HTTP {status}: {exc.reason}")
        if status == 404:
            return ResourceNotServed(f"HTTP {status}: {exc.reason}")
        return ApiRejected(f"HTTP {status}: {exc.reason}")
    if is_transport_error(exc):
        return ApiUnavailable(repr(exc))
    return exc


def status_error(status: int, body: bytes) -> KubeApiError:
    """The :class:`KubeApiError` of an error response: its Status ``message`` and ``reason``,
    or the start of the body when it is not a Status."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("message"):
        return KubeApiError(status, str(parsed["message"]), str(parsed.get("reason") or ""))
    return KubeApiError(status, body[:REQUEST_TEXT_LIMIT].decode("utf-8", "replace"))


def as_request_error(exc: BaseException) -> KubeApiError | None:
    """A client library exception as a :class:`KubeApiError` (status 0 for the transport's);
    ``None`` for any other exception."""
    if isinstance(exc, ApiException):
        body = exc.body if isinstance(exc.body, bytes | str) else b""
        raw = body.encode() if isinstance(body, str) else body
        status = int(exc.status or 0)
        return status_error(status, raw) if raw else KubeApiError(status, str(exc.reason))
    if is_transport_error(exc):
        return KubeApiError(0, repr(exc))
    return None
