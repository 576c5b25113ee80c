"""LIST then WATCH Pods in all namespaces, with the loop of ``watch_loop``.

The Kubernetes I/O sits behind :class:`PodApi` (two calls), so tests drive :class:`KubeSource`
with a fake API. The real one is :class:`~services.adapters.kube.watch_apis.KubernetesPodApi`
(raw responses parsed with orjson, errors mapped in :mod:`services.adapters.kube.errors`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, Unpack

from services.adapters.kube.list_watch import ObjectList
from services.processes.watcher.watch_lines import WatchItem, decode_watch_line
from services.processes.watcher.watch_loop import (
    ListWatchSource,
    LoopOptions,
    Relisted,
    SourceItem,
)


class PodApi(Protocol):
    """The two Kubernetes calls the watcher needs. Both raise ``ResourceExpired``,
    ``ApiUnavailable`` or ``ApiRejected`` (:mod:`services.adapters.kube.errors`), never a client
    library's exception."""

    async def list_pods(self) -> ObjectList:
        """LIST every Pod (all pages)."""
        ...

    def watch_pods(self, resource_version: str | None) -> AsyncIterator[bytes]:
        """WATCH Pods from ``resource_version``: the raw lines of the watch body, until the
        server ends the watch."""
        ...


class KubeSource(ListWatchSource):
    """Drives LIST/WATCH of Pods over a :class:`PodApi` and hands every item to a handler, in
    order (``Relisted`` after each LIST). Options: :class:`ListWatchSource`."""

    resource = "pods"

    def __init__(self, api: PodApi, **options: Unpack[LoopOptions]) -> None:
        super().__init__(**options)
        self._api = api

    async def _list_objects(self) -> ObjectList:
        return await self._api.list_pods()

    def _watch_lines(self, resource_version: str | None) -> AsyncIterator[bytes]:
        return self._api.watch_pods(resource_version)

    def _decode(self, line: bytes) -> WatchItem:
        return decode_watch_line(line)

    def _listed(self, listed: ObjectList) -> SourceItem:
        return Relisted(listed.items, listed.resource_version)
