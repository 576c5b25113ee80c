"""The workloads of the Pods holding devices (issue 13 item 1): each such Pod's controller
chain, resolved by GET of its owners, and its migration class, published as
``PodWorkloadObserved``.

The session hands every Pod event over with :meth:`WorkloadResolver.pod_changed`, which only
files the Pod (newest reading per UID) and returns at once: the GETs run in the resolver's own
task (:meth:`WorkloadResolver.run`), so an owner the API server is slow to return never holds
back a Pod's device events. Owners are cached by UID (:class:`~services.domain.watch.owner_cache.OwnerCache`,
bounded); a chain whose owner could not be read is published as far as known, with the reason,
and resolved again after :data:`RETRY_SECONDS` (transient failures: no answer, 429, 5xx) until it
succeeds or the Pod is gone. A record is published when the Pod's facts changed (chain,
migration class), never for a reading older than the last published one; after a LIST every
Pod's record is published again (the projection keeps the newest by ``statusVersion``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

import structlog

from services.adapters.kube.errors import KubeApiError
from services.domain.codec import parse_resource_version
from services.domain.watch.owner_cache import OwnerCache
from services.domain.watch.pod_tracker import WatchKind, is_stale
from services.domain.workloads.codec import workload_violations
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.owners import (
    OWNER_RESOURCES,
    FetchFailed,
    OwnerLink,
    resolve_chain,
)
from services.domain.workloads.record import workload_record

log = structlog.get_logger(__name__)

RETRY_SECONDS: Final = (1.0, 5.0, 30.0, 120.0)
"""Waits (seconds) before resolving a chain again after a transient failure; the last repeats."""

MAX_PENDING: Final = 50_000
"""Most Pods waiting to be resolved; beyond it the oldest is dropped (a LIST files it again)."""


class OwnerApi(Protocol):
    """The one Kubernetes call of the resolver
    (:class:`~services.adapters.kube.owners.KubernetesOwners`)."""

    async def read_owner(
        self, api_version: str, resource: str, namespace: str, name: str
    ) -> dict[str, Any] | None: ...


@dataclass(slots=True)
class _Pending:
    pod: Mapping[str, Any]
    observed_at: datetime
    attempt: int = 0


class WorkloadResolver:
    """Resolves and publishes the workloads of the Pods filed by :meth:`pod_changed`.

    ``publish`` sends one record (the session's publisher, counted like every record)."""

    def __init__(
        self,
        api: OwnerApi,
        publish: Callable[[PodWorkloadObserved], Awaitable[None]],
        cache: OwnerCache | None = None,
        retry_seconds: tuple[float, ...] = RETRY_SECONDS,
    ) -> None:
        self._api = api
        self._publish = publish
        self.cache = cache if cache is not None else OwnerCache()
        self._retry_seconds = retry_seconds
        self._pending: dict[str, _Pending] = {}
        self._retries: dict[str, tuple[float, _Pending]] = {}
        self._published: dict[str, tuple[int | None, tuple[object, ...]]] = {}
        self._held: set[str] = set()
        self._wake = asyncio.Event()
        self.fetch_failures = 0

    @property
    def pending(self) -> int:
        """Pods waiting to be resolved (new readings and retries)."""
        return len(self._pending) + len(self._retries)

    def pod_changed(
        self, kind: WatchKind, pod: Mapping[str, Any], holds_devices: bool, observed_at: datetime
    ) -> None:
        """File one Pod event (never waits). ``holds_devices``: the Pod holds devices now (the
        pod tracker says so); a Pod that does not, or a DELETED one, is forgotten."""
        metadata = pod.get("metadata")
        if not isinstance(metadata, Mapping):
            return
        uid = metadata.get("uid")
        if not isinstance(uid, str) or not uid:
            return
        if kind is WatchKind.DELETED or not holds_devices:
            self.forget(uid)
            return
        self._held.add(uid)
        published = self._published.get(uid)
        version = parse_resource_version(metadata.get("resourceVersion"))
        if published is not None and is_stale(published[0], version):
            return
        self._retries.pop(uid, None)
        self._pending.pop(uid, None)  # re-inserted last: the queue stays in arrival order
        self._pending[uid] = _Pending(pod, observed_at)
        while len(self._pending) > MAX_PENDING:
            self._pending.pop(next(iter(self._pending)))
        self._wake.set()

    def forget(self, uid: str) -> None:
        """The Pod is gone or holds no device any more."""
        self._held.discard(uid)
        self._pending.pop(uid, None)
        self._retries.pop(uid, None)
        self._published.pop(uid, None)

    def relisted(self) -> None:
        """A LIST of Pods: owners are read again, and every record published again."""
        self.cache.clear()
        self._published.clear()
        self._held.clear()  # the listed Pods that hold devices are filed again

    async def _fetch(self, link: OwnerLink, namespace: str) -> Mapping[str, Any] | FetchFailed:
        cached = self.cache.get(link.uid)
        if cached is not None:
            return cached
        resource = OWNER_RESOURCES[link.kind]
        try:
            found = await self._api.read_owner(link.api_version, resource, namespace, link.name)
        except (KubeApiError, ValueError) as exc:
            self.fetch_failures += 1
            transient = isinstance(exc, KubeApiError) and exc.transient
            text = exc.described if isinstance(exc, KubeApiError) else str(exc)
            return FetchFailed(("GET failed, retried: " if transient else "GET refused: ") + text)
        except Exception as exc:  # anything else (a body that is not JSON...): never fatal here
            self.fetch_failures += 1
            log.warning("owner read failed", owner=f"{link.kind} {link.name}", error=repr(exc))
            return FetchFailed(f"GET failed, retried: {exc!r}")
        if found is None:
            return FetchFailed("not found (deleted?)")
        self.cache.put(link.uid, found)
        return found

    async def resolve(
        self, pod: Mapping[str, Any], observed_at: datetime
    ) -> tuple[PodWorkloadObserved | None, bool]:
        """The record of ``pod`` and whether a transient failure stopped its chain."""
        metadata = pod.get("metadata")
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        owners: dict[str, Mapping[str, Any] | FetchFailed] = {}
        transient = False
        chain = resolve_chain(pod, owners)
        while chain.missing is not None and isinstance(namespace, str):
            found = await self._fetch(chain.missing, namespace)
            if isinstance(found, FetchFailed) and found.reason.startswith("GET failed"):
                transient = True
            owners[chain.missing.uid] = found
            chain = resolve_chain(pod, owners)
        return workload_record(pod, chain, observed_at), transient

    async def _resolve_and_publish(self, uid: str, entry: _Pending) -> None:
        record, transient = await self.resolve(entry.pod, entry.observed_at)
        if uid in self._pending or uid not in self._held:
            return  # a newer reading came meanwhile (resolved next), or the Pod is gone
        if record is None:
            return
        problems = workload_violations(record)
        if problems:
            log.warning("workload record not storable", pod=uid, problems=problems)
            return
        if transient:
            wait = self._retry_seconds[min(entry.attempt, len(self._retry_seconds) - 1)]
            due = asyncio.get_running_loop().time() + wait
            self._retries[uid] = (due, _Pending(entry.pod, entry.observed_at, entry.attempt + 1))
        published = self._published.get(uid)
        if published is not None and published[1] == record.facts():
            return
        self._published[uid] = (record.status_version, record.facts())
        await self._publish(record)

    def _due_retries(self, now: float) -> float | None:
        """Move the retries due at ``now`` to the queue; the time of the next one."""
        nearest = None
        for uid, (due, entry) in list(self._retries.items()):
            if due <= now:
                del self._retries[uid]
                self._pending.setdefault(uid, entry)
            elif nearest is None or due < nearest:
                nearest = due
        return nearest

    async def run(self, stop: asyncio.Event) -> None:
        """Resolve the filed Pods, oldest first, until ``stop`` is set."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            nearest = self._due_retries(loop.time())
            if not self._pending:
                self._wake.clear()
                timeout = None if nearest is None else max(0.0, nearest - loop.time())
                waiters = {
                    asyncio.ensure_future(self._wake.wait()),
                    asyncio.ensure_future(stop.wait()),
                }
                try:
                    await asyncio.wait(
                        waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:  # also when the task is cancelled: no waiter outlives it
                    for waiter in waiters:
                        waiter.cancel()
                continue
            uid = next(iter(self._pending))
            entry = self._pending.pop(uid)
            await self._resolve_and_publish(uid, entry)
