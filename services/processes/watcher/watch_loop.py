"""The LIST/WATCH loop of one Kubernetes resource, and the items it hands over.

Pattern (``../shared/notes/stack.md``, kubernetes-asyncio watch): LIST and take its
resourceVersion; WATCH from it with ``allowWatchBookmarks=true`` and a server timeout; follow the
resourceVersion of every object event and BOOKMARK; when the watch ends, watch again from there;
on 410 Gone (an ERROR event with code 410, or HTTP 410) LIST again and reconcile; on network
errors back off exponentially with jitter (tenacity) and resume from the last resourceVersion.

:class:`ListWatchSource` is that loop; its subclasses say what to LIST and WATCH and how to
decode a line: ``pod_source.KubeSource`` (Pods) and ``node_source.ObjectSource`` (node Leases,
Nodes, the DRA objects). The calls raise the errors of :mod:`services.adapters.kube.errors`.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypedDict

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_never,
    wait_random_exponential,
)

from services.adapters.kube.errors import ApiUnavailable, ResourceExpired
from services.adapters.kube.list_watch import ObjectList
from services.processes.watcher.watch_lines import (
    Bookmark,
    BrokenLine,
    ObjectChange,
    PodChange,
    WatchError,
    WatchItem,
)

log = structlog.get_logger(__name__)

MIN_QUIET_WATCH_SECONDS: Final = 1.0
"""A watch that ends sooner than this (seconds) without any event counts as a failure."""


class WatchSilent(Exception):
    """A watch delivered no line for its ``silence_seconds`` (probably a half-open connection:
    the API server sends a BOOKMARK every minute to a watch that asked for them: at 60.5 s and
    119.8 s on a quiet Pod watch of the test kube-apiserver 1.36.3)."""


@dataclass(frozen=True, slots=True)
class Relisted:
    """A LIST was taken (at start or after 410): reconcile every Pod against it."""

    pods: list[dict[str, Any]]
    resource_version: str | None


@dataclass(frozen=True, slots=True)
class ObjectsListed:
    """A LIST of Leases, Nodes, ResourceSlices, ResourceClaims or DeviceClasses (``object_kind``)
    was taken (at start or after 410)."""

    object_kind: str
    items: list[dict[str, Any]]
    resource_version: str | None


SourceItem: TypeAlias = WatchItem | Relisted | ObjectsListed
Handler: TypeAlias = Callable[[SourceItem, str], Awaitable[None]]
"""``handle(item, source)``: ``source`` names where the item came from (dead-letter header)."""


class LoopOptions(TypedDict, total=False):
    """The options of every :class:`ListWatchSource`, as its subclasses pass them on."""

    max_backoff_seconds: float
    silence_seconds: float | None
    sleep: Callable[[float], Awaitable[None]]
    on_restart: Callable[[str], None] | None
    on_retry: Callable[[], None] | None


class ListWatchSource(ABC):
    """The LIST/WATCH loop of one resource; subclasses say how to LIST, WATCH and decode.

    ``max_backoff_seconds`` caps the wait between retries after transient errors; ``sleep`` is
    tenacity's sleep (tests pass a fast one); ``silence_seconds`` (``None``: no bound) ends a
    watch that delivered no line (event or BOOKMARK) for that long, to watch again from its last
    resourceVersion: a half-open connection would otherwise hang until the client's read
    timeout; ``on_restart(reason)`` is told each time a watch ends (``expired``, ``timeout``,
    ``silent``, ``error``) and ``on_retry()`` each time a backoff starts (:class:`LoopOptions`).
    """

    resource: str = "objects"
    """Plural name for logs (``pods``, ``leases``, ``nodes``)."""

    def __init__(
        self,
        *,
        max_backoff_seconds: float = 30.0,
        silence_seconds: float | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_restart: Callable[[str], None] | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self._max_backoff = max_backoff_seconds
        self._silence = silence_seconds
        self._sleep = sleep
        self._on_restart = on_restart or (lambda reason: None)
        self._on_retry = on_retry or (lambda: None)
        self._resource_version: str | None = None
        self._need_list = True

    @abstractmethod
    async def _list_objects(self) -> ObjectList:
        """LIST every object (all pages)."""

    @abstractmethod
    def _watch_lines(self, resource_version: str | None) -> AsyncIterator[bytes]:
        """WATCH from ``resource_version``: the raw lines of the body."""

    @abstractmethod
    def _decode(self, line: bytes) -> WatchItem:
        """One watch line as an item."""

    @abstractmethod
    def _listed(self, listed: ObjectList) -> SourceItem:
        """The item handed over after a LIST."""

    def _source(self, what: str) -> str:
        return f"kube:{what}@{self._resource_version}"

    @property
    def resource_version(self) -> str | None:
        """Where the next WATCH resumes from (``None`` before the first LIST)."""
        return self._resource_version

    async def run(self, handle: Handler, stop: asyncio.Event | None = None) -> None:
        """LIST/WATCH until ``stop`` is set (checked between watches) or the task is cancelled.

        Raises ``ApiRejected`` (and whatever ``handle`` raises); transient errors are
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
                resource=self.resource,
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
            async for line in self._lines_until_silent(self._resource_version):
                source = self._source("watch")
                item = self._decode(line)
                if isinstance(item, PodChange | ObjectChange | Bookmark) and item.resource_version:
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
        except WatchSilent as exc:
            self._on_restart("silent")
            log.warning(
                "watch silent, watching again",
                resource=self.resource,
                resume_from=self._resource_version,
                error=str(exc),
            )
            if not (listed or progressed):
                raise ApiUnavailable(str(exc)) from exc  # back off: it may be the server
        except ResourceExpired as exc:
            self._on_restart("expired")
            self._need_list = True
            log.info(
                "watch expired (410 Gone), listing again",
                resource=self.resource,
                expired=self._resource_version,
            )
            if listed and not progressed:
                # Expired right after a fresh LIST: something is off; do not LIST in a loop.
                raise ApiUnavailable(f"410 right after LIST: {exc}") from exc
        except ApiUnavailable:
            self._on_restart("error")
            if not (listed or progressed):
                raise
            log.warning(
                "watch interrupted, resuming",
                resource=self.resource,
                resume_from=self._resource_version,
            )

    async def _lines_until_silent(self, resource_version: str | None) -> AsyncIterator[bytes]:
        """The watch's lines; raises :class:`WatchSilent` (after closing the watch) when none
        came for ``silence_seconds``."""
        lines = aiter(self._watch_lines(resource_version))
        try:
            while True:
                try:
                    async with asyncio.timeout(self._silence):
                        line = await anext(lines)
                except StopAsyncIteration:
                    return
                except TimeoutError as exc:
                    raise WatchSilent(
                        f"no event or bookmark for {self._silence} s from {resource_version}"
                    ) from exc
                yield line
        finally:
            close = getattr(lines, "aclose", None)
            if close is not None:
                await close()

    async def _list(self, handle: Handler) -> None:
        listed = await self._list_objects()
        self._resource_version = listed.resource_version
        self._need_list = False
        log.info(
            f"listed {self.resource}",
            count=len(listed.items),
            resource_version=listed.resource_version,
        )
        await handle(self._listed(listed), self._source("list"))
