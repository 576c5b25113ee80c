"""LIST then WATCH node Leases and Nodes, with the loop of ``watch_loop``.

Leases: coordination.k8s.io/v1 in ``settings.lease_namespace`` (kube-node-lease: one per node,
renewed by kubelet every 10 s). Nodes: core/v1, cluster-scoped. Both as raw JSON, resumed from
the last resourceVersion, with bookmarks, a re-LIST after 410 Gone and backoff on errors, exactly
as Pods (:class:`~services.processes.watcher.watch_loop.ListWatchSource`). Each LIST is handed
over as :class:`~services.processes.watcher.watch_loop.ObjectsListed`, each watch event as
:class:`~services.processes.watcher.watch_lines.ObjectChange`. :class:`ObjectSource` runs the DRA
objects' loops too (``live``); those are *optional*: a cluster that does not serve their API (404)
ends the loop with a warning instead of the watcher.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Final, Protocol, Unpack

import structlog

from services.adapters.kube.errors import ResourceNotServed
from services.adapters.kube.list_watch import ObjectList
from services.processes.watcher.watch_lines import WatchItem, decode_watch_line
from services.processes.watcher.watch_loop import (
    Handler,
    ListWatchSource,
    LoopOptions,
    ObjectsListed,
    SourceItem,
)

log = structlog.get_logger(__name__)

PLURALS: Final = {
    "Lease": "leases",
    "Node": "nodes",
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
    "DeviceClass": "deviceclasses",
    "DeviceTaintRule": "devicetaintrules",
    "Event": "events",
    "Namespace": "namespaces",
}
"""The API's plural resource name of each object kind (logs, metrics, dead-letter sources)."""


class ObjectApi(Protocol):
    """LIST and WATCH of one kind of object (``object_kind``: ``Lease``, ``Node``, or a DRA kind:
    ``ResourceSlice``, ``ResourceClaim``, ``DeviceClass``). Both calls
    raise ``ResourceExpired``, ``ApiUnavailable`` or ``ApiRejected``
    (:mod:`services.adapters.kube.errors`), never a client library's exception. The real ones are
    :mod:`services.adapters.kube.watch_apis`'s."""

    @property
    def object_kind(self) -> str: ...

    async def list_objects(self) -> ObjectList:
        """LIST every object (all pages)."""
        ...

    def watch_objects(self, resource_version: str | None) -> AsyncIterator[bytes]:
        """WATCH from ``resource_version``: the raw lines of the body until the server ends it."""
        ...


class ObjectSource(ListWatchSource):
    """Drives LIST/WATCH over an :class:`ObjectApi` and hands every item to a handler, in order:
    ``ObjectsListed`` after each LIST, ``ObjectChange`` (and bookmarks, errors...) from the
    watch. Options as :class:`~services.processes.watcher.watch_loop.ListWatchSource`.

    ``optional``: when the API server does not serve the resource (HTTP 404,
    :class:`~services.adapters.kube.errors.ResourceNotServed`), log a warning, call
    ``on_not_served()`` and return from :meth:`run` (the other loops go on) instead of raising.
    """

    def __init__(
        self,
        api: ObjectApi,
        *,
        optional: bool = False,
        on_not_served: Callable[[], None] | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        super().__init__(**options)
        self._api = api
        self.object_kind = api.object_kind
        self.resource = PLURALS.get(api.object_kind, f"{api.object_kind.lower()}s")
        self._kinds = frozenset({api.object_kind})
        self._optional = optional
        self._on_not_served = on_not_served or (lambda: None)
        self.not_served = False

    async def run(self, handle: Handler, stop: asyncio.Event | None = None) -> None:
        """As :meth:`ListWatchSource.run`; an optional source returns when the resource is not
        served (``not_served`` is then true)."""
        try:
            await super().run(handle, stop)
        except ResourceNotServed as exc:
            if not self._optional:
                raise
            self.not_served = True
            self._on_not_served()
            log.warning(
                f"the API server does not serve {self.resource}: not watching them",
                resource=self.resource,
                error=str(exc),
            )

    async def _list_objects(self) -> ObjectList:
        return await self._api.list_objects()

    def _watch_lines(self, resource_version: str | None) -> AsyncIterator[bytes]:
        return self._api.watch_objects(resource_version)

    def _decode(self, line: bytes) -> WatchItem:
        return decode_watch_line(line, kinds=self._kinds, default_kind=self.object_kind)

    def _listed(self, listed: ObjectList) -> SourceItem:
        return ObjectsListed(self.object_kind, listed.items, listed.resource_version)

    def _source(self, what: str) -> str:
        return f"kube:{self.resource}/{what}@{self._resource_version}"
