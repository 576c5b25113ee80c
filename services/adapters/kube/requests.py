"""One raw request to the API server, for the callers that read and write single objects.

``call`` is a kubernetes-asyncio API method (e.g. ``BatchV1Api.create_namespaced_job``); the
response is read raw (``_preload_content=False``) and parsed with orjson, errors raised as
:class:`~services.adapters.kube.errors.KubeApiError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson

from services.adapters.kube.errors import as_request_error, status_error

REQUEST_TIMEOUT: Final = (10.0, 30.0)
"""Connect and read timeouts (seconds) of every request."""

ApiCall = Callable[..., Awaitable[Any]]
"""A kubernetes-asyncio API method (it takes ``_preload_content`` and ``_request_timeout``)."""


async def request_json(call: ApiCall, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` and its JSON body (``{}`` when empty); ``None`` for a 404 when
    ``missing_ok``. Raises ``KubeApiError`` for any other non-2xx status (its Status message and
    reason) and when the server could not be reached (status 0); other exceptions pass."""
    try:
        response = await call(
            *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
        )
    except Exception as exc:
        error = as_request_error(exc)
        if error is None:
            raise
        raise error from exc
    try:
        body: bytes = await response.read()
    finally:
        response.release()
    if response.status == 404 and missing_ok:
        return None
    if not 200 <= response.status < 300:
        raise status_error(response.status, body)
    return orjson.loads(body) if body else {}
