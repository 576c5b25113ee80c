"""LIST then WATCH Pods in all namespaces from the Kubernetes API (kubernetes-asyncio, raw JSON).

Pattern (``../shared/notes/stack.md``, kubernetes-asyncio watch): LIST and take its
resourceVersion; WATCH from it with ``allowWatchBookmarks=true`` and a server timeout; follow the
resourceVersion of every Pod event and BOOKMARK; when the watch ends, watch again from there;
on 410 Gone (an ERROR event with code 410, or HTTP 410) LIST again and reconcile; on network
errors back off exponentially with jitter (tenacity) and resume from the last resourceVersion.

The Kubernetes I/O sits behind :class:`PodApi` (two calls), so tests drive :class:`KubeSource`
with a fake API. :class:`KubernetesPodApi` is the real one: raw responses
(``_preload_content=False``) parsed with orjson, never the client's model objects (75x the
memory and CPU per Pod, see the notes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeAlias

import aiohttp
import orjson
import structlog
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_never,
    wait_random_exponential,
)

from services.config import Settings
from services.watcher.watch_lines import (
    Bookmark,
    BrokenLine,
    PodChange,
    WatchError,
    WatchItem,
    decode_watch_line,
    split_lines,
)

log = structlog.get_logger(__name__)

CONNECT_TIMEOUT_SECONDS: Final = 10.0
LIST_PAGE_SIZE: Final = 500
MIN_QUIET_WATCH_SECONDS: Final = 1.0
"""A watch that ends sooner than this (seconds) without any event counts as a failure."""


class ResourceExpired(Exception):
    """HTTP 410 Gone: the resourceVersion to resume from is too old; LIST again."""


class ApiUnavailable(Exception):
    """A transient failure (network, timeout, 429, 5xx): retry after a backoff."""


class ApiRejected(Exception):
    """A failure that retrying will not fix (401, 403, 400...): the watcher stops."""


@dataclass(frozen=True, slots=True)
class PodList:
    """A complete LIST: the Pods as raw JSON objects and the list's resourceVersion."""

    items: list[dict[str, Any]]
    resource_version: str | None


class PodApi(Protocol):
    """The two Kubernetes calls the watcher needs. Both raise :class:`ResourceExpired`,
    :class:`ApiUnavailable` or :class:`ApiRejected`, never a client library's exception."""

    async def list_pods(self) -> PodList:
        """LIST every Pod (all pages)."""
        ...

    def watch_pods(self, resource_version: str | None) -> AsyncIterator[bytes]:
        """WATCH Pods from ``resource_version``: the raw lines of the watch body, until the
        server ends the watch."""
        ...


@dataclass(frozen=True, slots=True)
class Relisted:
    """A LIST was taken (at start or after 410): reconcile every Pod against it."""

    pods: list[dict[str, Any]]
    resource_version: str | None


SourceItem: TypeAlias = WatchItem | Relisted
Handler: TypeAlias = Callable[[SourceItem, str], Awaitable[None]]
"""``handle(item, source)``: ``source`` names where the item came from (dead-letter header)."""


class KubeSource:
    """Drives LIST/WATCH over a :class:`PodApi` and hands every item to a handler, in order.

    ``max_backoff_seconds`` caps the wait between retries after transient errors; ``sleep`` is
    tenacity's sleep (tests pass a fast one); ``on_restart(reason)`` is told each time a watch
    ends (``expired``, ``timeout``, ``error``) and ``on_retry()`` each time a backoff starts.
    """

    def __init__(
        self,
        api: PodApi,
        *,
        max_backoff_seconds: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_restart: Callable[[str], None] | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self._api = api
        self._max_backoff = max_backoff_seconds
        self._sleep = sleep
        self._on_restart = on_restart or (lambda reason: None)
        self._on_retry = on_retry or (lambda: None)
        self._resource_version: str | None = None
        self._need_list = True

    @property
    def resource_version(self) -> str | None:
        """Where the next WATCH resumes from (``None`` before the first LIST)."""
        return self._resource_version

    async def run(self, handle: Handler, stop: asyncio.Event | None = None) -> None:
        """LIST/WATCH until ``stop`` is set (checked between watches) or the task is cancelled.

        Raises :class:`ApiRejected` (and whatever ``handle`` raises); transient errors are
        retried forever.
        """
        stop = stop or asyncio.Event()
        while not stop.is_set():
            # A fresh retry state per round: a watch that made progress resets the backoff.
            async for attempt in self._retrying():
                with attempt:
                    await self._round(handle, stop)

    def _retrying(self) -> AsyncRetrying:
        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            self._on_retry()
            log.warning(
                "kubernetes API unavailable, backing off",
                attempt=state.attempt_number,
                resume_from=self._resource_version,
                error=repr(exc),
            )

        return AsyncRetrying(
            retry=retry_if_exception_type(ApiUnavailable),
            wait=wait_random_exponential(multiplier=0.5, max=self._max_backoff),
            stop=stop_never,
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )

    async def _round(self, handle: Handler, stop: asyncio.Event) -> None:
        """One LIST (when needed) and one WATCH. Returns when the watch ended after progress;
        raises :class:`ApiUnavailable` when it failed before any, so the caller backs off."""
        if stop.is_set():
            return
        listed = progressed = False
        started = time.monotonic()
        try:
            if self._need_list:
                await self._list(handle)
                listed = True
            async for line in self._api.watch_pods(self._resource_version):
                source = f"kube:watch@{self._resource_version}"
                item = decode_watch_line(line)
                if isinstance(item, PodChange | Bookmark) and item.resource_version:
                    self._resource_version = item.resource_version
                    progressed = True
                await handle(item, source)
                if isinstance(item, WatchError):
                    if item.expired:
                        raise ResourceExpired(item.message)
                    raise ApiUnavailable(f"watch ERROR {item.code}: {item.message}")
                if isinstance(item, BrokenLine):
                    # Cut mid-object (dropped connection): resume from the last good version.
                    raise ApiUnavailable(f"broken watch line: {item.reason}")
            if not (listed or progressed) and time.monotonic() - started < MIN_QUIET_WATCH_SECONDS:
                # Ended at once without a single event: a misbehaving server or proxy, not the
                # server-side timeout. Back off instead of reconnecting in a tight loop.
                raise ApiUnavailable("watch ended immediately without events")
            self._on_restart("timeout")
        except ResourceExpired as exc:
            self._on_restart("expired")
            self._need_list = True
            log.info("watch expired (410 Gone), listing again", expired=self._resource_version)
            if listed and not progressed:
                # Expired right after a fresh LIST: something is off; do not LIST in a loop.
                raise ApiUnavailable(f"410 right after LIST: {exc}") from exc
        except ApiUnavailable:
            self._on_restart("error")
            if not (listed or progressed):
                raise
            log.warning("watch interrupted, resuming", resume_from=self._resource_version)

    async def _list(self, handle: Handler) -> None:
        pods = await self._api.list_pods()
        self._resource_version = pods.resource_version
        self._need_list = False
        log.info("listed pods", count=len(pods.items), resource_version=pods.resource_version)
        await handle(
            Relisted(pods.items, pods.resource_version), f"kube:list@{pods.resource_version}"
        )


# --- the real Kubernetes API ----------------------------------------------------------------


def _raise_for_status(status: int, body: bytes) -> None:
    if 200 <= status < 300:
        return
    text = body[:500].decode("utf-8", "replace")
    if status == 410:
        raise ResourceExpired(text)
    if status == 429 or status >= 500:
        raise ApiUnavailable(f"HTTP {status}: {text}")
    raise ApiRejected(f"HTTP {status}: {text}")


def _mapped(exc: BaseException) -> BaseException:
    """A client library exception as :class:`ResourceExpired`/:class:`ApiUnavailable`/
    :class:`ApiRejected`; other exceptions unchanged."""
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        if status == 410:
            return ResourceExpired(str(exc.reason))
        if status == 0 or status == 429 or status >= 500:
            return ApiUnavailable(f"HTTP {status}: {exc.reason}")
        return ApiRejected(f"HTTP {status}: {exc.reason}")
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | OSError):
        return ApiUnavailable(repr(exc))
    return exc


class KubernetesPodApi:
    """:class:`PodApi` over kubernetes-asyncio's ``CoreV1Api`` with raw JSON responses.

    Selectors come from ``settings.label_selector``/``field_selector``; each WATCH asks the server
    to end after ``settings.watch_timeout_seconds`` and the client gives up on a connection that
    sends nothing for ``settings.read_timeout_seconds`` (half-open connections).
    """

    def __init__(self, core: Any, settings: Settings, *, page_size: int = LIST_PAGE_SIZE) -> None:
        self._core = core
        self._settings = settings
        self._page_size = page_size
        self._timeout = (CONNECT_TIMEOUT_SECONDS, settings.read_timeout_seconds)

    def _selectors(self) -> dict[str, str]:
        selectors = {}
        if self._settings.label_selector:
            selectors["label_selector"] = self._settings.label_selector
        if self._settings.field_selector:
            selectors["field_selector"] = self._settings.field_selector
        return selectors

    async def list_pods(self) -> PodList:
        items: list[dict[str, Any]] = []
        token: str | None = None
        try:
            while True:
                paging: dict[str, Any] = {"limit": self._page_size}
                if token:
                    paging["_continue"] = token
                response = await self._core.list_pod_for_all_namespaces(
                    **self._selectors(),
                    **paging,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
                try:
                    body: bytes = await response.read()
                    _raise_for_status(response.status, body)
                finally:
                    response.release()
                document = orjson.loads(body)
                items.extend(document.get("items") or [])
                metadata = document.get("metadata") or {}
                token = metadata.get("continue")
                if not token:
                    return PodList(items, metadata.get("resourceVersion"))
        except ResourceExpired as exc:
            # The continue token expired mid-way: start the LIST over after a backoff.
            raise ApiUnavailable(f"LIST continue token expired: {exc}") from exc
        except orjson.JSONDecodeError as exc:
            raise ApiUnavailable(f"LIST body is not JSON: {exc}") from exc
        except (ApiUnavailable, ApiRejected):
            raise
        except Exception as exc:
            mapped = _mapped(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def watch_pods(self, resource_version: str | None) -> AsyncIterator[bytes]:
        try:
            response = await self._core.list_pod_for_all_namespaces(
                **self._selectors(),
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=resource_version,
                timeout_seconds=self._settings.watch_timeout_seconds,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        except Exception as exc:
            mapped = _mapped(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        try:
            if response.status != 200:
                _raise_for_status(response.status, await response.read())
            async for line in split_lines(response.content.iter_any()):
                yield line
        except (ResourceExpired, ApiUnavailable, ApiRejected):
            raise
        except Exception as exc:
            mapped = _mapped(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        finally:
            response.release()


@asynccontextmanager
async def kubernetes_pod_api(settings: Settings) -> AsyncIterator[KubernetesPodApi]:
    """A :class:`KubernetesPodApi` configured from ``settings.kubeconfig``, else the in-cluster
    service account, else ``~/.kube/config``. Raises ``kubernetes_asyncio.config.ConfigException``
    when none is usable."""
    configuration = k8s_client.Configuration()
    if settings.kubeconfig:
        await k8s_config.load_kube_config(
            config_file=settings.kubeconfig, client_configuration=configuration
        )
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException:
            await k8s_config.load_kube_config(client_configuration=configuration)
    async with k8s_client.ApiClient(configuration=configuration) as api_client:
        yield KubernetesPodApi(k8s_client.CoreV1Api(api_client), settings)
