"""Raw LIST (all pages) and WATCH of one resource, errors mapped to the LIST/WATCH family
(:mod:`services.adapters.kube.errors`).

Responses are read raw (``_preload_content=False``); a LIST body is parsed with orjson, a WATCH
body is handed on as its lines (JSON ``WatchEvent`` objects, one a line), undecoded: what they
mean is the caller's business.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import orjson

from services.adapters.kube.errors import (
    WATCH_ERRORS,
    ApiRejected,
    ApiUnavailable,
    ResourceExpired,
    as_watch_error,
    raise_for_watch_status,
)
from services.runtime.config import WatchSettings

CONNECT_TIMEOUT_SECONDS: Final = 10.0
LIST_PAGE_SIZE: Final = 500

ListCall = Callable[..., Awaitable[Any]]
"""A kubernetes-asyncio list method (e.g. ``CoreV1Api.list_pod_for_all_namespaces``)."""


@dataclass(frozen=True, slots=True)
class ObjectList:
    """A complete LIST: the objects as raw JSON and the list's resourceVersion."""

    items: list[dict[str, Any]]
    resource_version: str | None


async def split_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Re-cut a byte stream into lines (without the newline), whatever the chunk sizes.

    Used on the HTTP watch body instead of ``readline()``, whose line limit (aiohttp: 128 KiB)
    a Pod with many annotations or managedFields can exceed. A last line without a newline
    (connection cut mid-object) is yielded too (the watcher decodes it as a broken line).
    """
    buffer = bytearray()
    async for chunk in chunks:
        # Search only the new bytes: the rest of the buffer is known to hold no newline.
        search_from = len(buffer)
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", search_from)) != -1:
            line = bytes(buffer[start:end])
            if line.strip():
                yield line
            start = search_from = end + 1
        del buffer[:start]
    if buffer.strip():
        yield bytes(buffer)


def _raise_mapped(exc: Exception) -> NoReturn:
    """Raise ``exc`` as its LIST/WATCH exception (itself when it is not a client's)."""
    mapped = as_watch_error(exc)
    if mapped is exc:
        raise exc
    raise mapped from exc


class RawListWatch:
    """LIST (all pages) and WATCH over one kubernetes-asyncio list call with raw JSON responses,
    errors mapped to ``ResourceExpired``/``ApiUnavailable``/``ApiRejected``.

    Each WATCH asks the server for bookmarks and to end after ``settings.watch_timeout_seconds``;
    the client gives up on a connection that sends nothing for ``settings.read_timeout_seconds``
    (half-open connections). ``params`` go to every call (selectors, namespace).
    """

    def __init__(
        self,
        call: ListCall,
        settings: WatchSettings,
        *,
        page_size: int = LIST_PAGE_SIZE,
        params: dict[str, Any] | None = None,
    ) -> None:
        self._call = call
        self._settings = settings
        self._page_size = page_size
        self._params = params or {}
        self._timeout = (CONNECT_TIMEOUT_SECONDS, settings.read_timeout_seconds)

    async def list_all(self) -> ObjectList:
        """LIST every object, following ``continue`` tokens."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        try:
            while True:
                paging: dict[str, Any] = {"limit": self._page_size}
                if token:
                    paging["_continue"] = token
                response = await self._call(
                    **self._params,
                    **paging,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
                try:
                    body: bytes = await response.read()
                    raise_for_watch_status(response.status, body)
                finally:
                    response.release()
                document = orjson.loads(body)
                items.extend(document.get("items") or [])
                metadata = document.get("metadata") or {}
                token = metadata.get("continue")
                if not token:
                    return ObjectList(items, metadata.get("resourceVersion"))
        except ResourceExpired as exc:
            # The continue token expired mid-way: start the LIST over after a backoff.
            raise ApiUnavailable(f"LIST continue token expired: {exc}") from exc
        except orjson.JSONDecodeError as exc:
            raise ApiUnavailable(f"LIST body is not JSON: {exc}") from exc
        except (ApiUnavailable, ApiRejected):
            raise
        except Exception as exc:
            _raise_mapped(exc)

    async def watch(self, resource_version: str | None) -> AsyncIterator[bytes]:
        """WATCH from ``resource_version``: the raw lines of the body until the server ends it."""
        try:
            response = await self._call(
                **self._params,
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=resource_version,
                timeout_seconds=self._settings.watch_timeout_seconds,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        except Exception as exc:
            _raise_mapped(exc)
        try:
            if response.status != 200:
                raise_for_watch_status(response.status, await response.read())
            async for line in split_lines(response.content.iter_any()):
                yield line
        except WATCH_ERRORS:
            raise
        except Exception as exc:
            _raise_mapped(exc)
        finally:
            response.release()
