"""The point GETs' read model: every device's response body, encoded once and kept in memory
(issue 12, the API lever).

``GET /v1/nodes/{node}/devices/{resourceID}`` is the directory's hot read (the scheduler and
every dashboard ask it); reading PostgreSQL, building the response model and validating it cost
about 1.2 ms of CPU per request. :class:`WarmDevices` holds each device's JSON body (exactly what
the route would answer, ``DeviceOut``) by ``(node, resourceID)``, so a GET is one dict look-up.

Freshness: the copy is loaded when the app starts (before it takes requests), then a task asks PostgreSQL every
``api_read_cache_poll_seconds`` what changed since the last read
(:meth:`~services.adapters.projection.reads_changes.ChangeReads.changed_since`: the devices whose
``devices``, ``device_identities`` or ``device_governance`` rows a transaction wrote since, found
by the rows' ``xmin``, whoever the writer) and replaces those bodies. A change committed at time
``t`` is served by ``t + poll + one refresh`` at the latest (the refresh's duration is the
``devicestate_api_read_cache_refresh_seconds`` gauge). While a refresh fails (the database is
down) the copy is not used: GETs read PostgreSQL and answer 503 as they did; the next successful
refresh catches up from where the last one ended.

While the copy holds the whole directory (fewer devices than ``api_read_cache_max_devices``), a
device it lacks was not in the directory at the last refresh: 404 without a query (a device
written since is served within the same bound). Otherwise a device not in the copy is read from
PostgreSQL; its body joins the copy only when no refresh ran in between, so a body read before a
change never outlives the refresh that saw the change. Each API process
(each uvicorn worker) holds its own copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from services.adapters.projection.errors import DatabaseError
from services.adapters.projection.reads_changes import ChangeReads, Horizon
from services.adapters.projection.reads_governance import GovernedDevice
from services.domain.directory import DeviceKey
from services.processes.api.schemas import DeviceOut

log = structlog.get_logger(__name__)

REFRESH_SLICE: Final = 100
"""Devices a refresh reads per statement and encodes between two yields to the event loop: a
GET waiting behind a refresh waits for one slice (about 100 us of CPU per device) instead of
the whole refresh, which while the worker ingests is thousands of devices."""


def device_body(device: GovernedDevice) -> bytes:
    """The JSON body of ``GET /v1/nodes/{node}/devices/{resourceID}`` for ``device``
    (``DeviceOut`` by alias, as FastAPI would serialise it)."""
    return DeviceOut.of(device.record, device.governance).model_dump_json(by_alias=True).encode()


@dataclass(slots=True)
class WarmStats:
    """Counters of one process's copy, for ``/metrics``."""

    hits: int = 0
    misses: int = 0
    refreshes: int = 0
    refresh_errors: int = 0
    changed: int = 0
    last_refresh_seconds: float = 0.0


class WarmDevices:
    """The bodies of up to ``max_devices`` devices, kept current by :meth:`run` (see the
    module doc). ``get`` returns ``None`` for a device it does not hold, and for every device
    while the copy is not ready (not loaded yet, or the last refresh failed)."""

    def __init__(self, reads: ChangeReads, *, poll_seconds: float, max_devices: int) -> None:
        self._reads = reads
        self._poll = poll_seconds
        self._max = max_devices
        self._bodies: dict[DeviceKey, bytes] = {}
        self._horizon: Horizon | None = None
        self._snapshot_id: str | None = None
        self._generation = 0
        self._ready = False
        self._complete = False
        self._refreshing = False
        self.stats = WarmStats()

    def __len__(self) -> int:
        return len(self._bodies)

    @property
    def ready(self) -> bool:
        """Whether GETs are served from the copy."""
        return self._ready

    @property
    def complete(self) -> bool:
        """Whether the copy holds every device of the directory as of the last refresh (none
        left out by ``max_devices``): a device it lacks is then not in the directory (404)."""
        return self._ready and self._complete

    @property
    def generation(self) -> int:
        """Bumped by every refresh; :meth:`put` takes the value read before its own read."""
        return self._generation

    def get(self, key: DeviceKey) -> bytes | None:
        """The device's body, or ``None`` (read PostgreSQL)."""
        if not self._ready:
            return None
        body = self._bodies.get(key)
        if body is None:
            self.stats.misses += 1
        else:
            self.stats.hits += 1
        return body

    def put(self, key: DeviceKey, body: bytes, generation: int) -> None:
        """Add a body read from PostgreSQL after :attr:`generation` was ``generation``; ignored
        when a refresh ran or began since, or runs now (the body may predate a change that
        refresh applies), or the copy is full."""
        if generation == self._generation and self._ready and not self._refreshing:
            if len(self._bodies) < self._max:
                self._bodies[key] = body
            else:
                self._complete = False

    async def load(self) -> None:
        """Load the copy (the first ``max_devices`` devices). Raises the database's errors."""
        snapshot = await self._reads.load(self._max)
        self._bodies = {d.record.key: device_body(d) for d in snapshot.items}
        self._complete = len(self._bodies) < self._max
        self._horizon = snapshot.horizon
        self._generation += 1
        self._ready = True
        log.info("api read cache loaded", devices=len(self._bodies))

    async def refresh(self) -> int:
        """Apply what changed since the last load or refresh; returns how many devices changed.
        Raises the database's errors (the copy is then not used until a refresh succeeds)."""
        if self._horizon is None:
            await self.load()
            return len(self._bodies)
        snapshot_id = await self._reads.snapshot_id()
        if snapshot_id == self._snapshot_id:
            return 0  # no transaction began or ended on the server: nothing changed
        # A body read from PostgreSQL before or during this refresh may predate a change it
        # applies: such a put is refused (the generation moves on, and no put while refreshing).
        self._generation += 1
        self._refreshing = True
        try:
            keys, snapshot = await self._reads.changed_since(self._horizon, chunk=REFRESH_SLICE)
            await self._apply(keys, snapshot.items)
        finally:
            self._refreshing = False
        self._horizon = snapshot.horizon
        self._snapshot_id = snapshot_id
        self._generation += 1
        self._ready = True
        return len(keys)

    async def _apply(self, keys: Iterable[DeviceKey], items: list[GovernedDevice]) -> None:
        """Replace the bodies of ``keys``, yielding to the event loop every
        :data:`REFRESH_SLICE` devices; a GET in between gets a body as of this refresh or the
        last, each at most one refresh stale."""
        bodies = self._bodies
        fresh = {d.record.key: d for d in items}
        for done, key in enumerate(keys, 1):
            if done % REFRESH_SLICE == 0:
                await asyncio.sleep(0)
            device = fresh.get(key)
            if device is None:
                bodies.pop(key, None)  # not a device (a governance row alone): nothing to serve
            elif key in bodies or len(bodies) < self._max:
                bodies[key] = device_body(device)
            else:
                self._complete = False

    async def start(self) -> None:
        """The first load, before the app takes requests; a database that cannot be read is
        logged and left to :meth:`run` (GETs read PostgreSQL meanwhile, and answer 503)."""
        try:
            await self.load()
        except (DatabaseError, OSError, TimeoutError) as exc:
            log.warning("api read cache not loaded at start; reading PostgreSQL", error=repr(exc))

    async def run(self) -> None:
        """Load, then refresh every ``poll_seconds`` until cancelled. A failed load or refresh
        is logged and retried at the next poll; meanwhile GETs read PostgreSQL."""
        while True:
            started = time.perf_counter()
            try:
                changed = await self.refresh()
            except (DatabaseError, OSError, TimeoutError) as exc:
                if self._ready:
                    log.warning(
                        "api read cache refresh failed; reading PostgreSQL", error=repr(exc)
                    )
                self._ready = False
                self._snapshot_id = None
                self.stats.refresh_errors += 1
            else:
                self.stats.refreshes += 1
                self.stats.changed += changed
                self.stats.last_refresh_seconds = time.perf_counter() - started
            await asyncio.sleep(self._poll)


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel the refresh task and wait for it."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def warm_metrics(warm: WarmDevices, registry: CollectorRegistry) -> None:
    """The copy's gauges and counters (``devicestate_api_read_cache_*``) into ``registry``."""
    name = "devicestate_api_read_cache"
    stats = warm.stats
    Gauge(f"{name}_ready", "1 while point GETs are served from memory.", registry=registry).set(
        1 if warm.ready else 0
    )
    Gauge(f"{name}_devices", "Devices held in memory.", registry=registry).set(len(warm))
    Gauge(
        f"{name}_refresh_seconds",
        "Duration of the last refresh (seconds); a GET may be this plus the poll interval stale.",
        registry=registry,
    ).set(stats.last_refresh_seconds)
    for what, value, doc in (
        ("hits", stats.hits, "Point GETs answered from memory."),
        ("misses", stats.misses, "Point GETs of a device not held (read from PostgreSQL)."),
        ("refresh_errors", stats.refresh_errors, "Refreshes that failed."),
    ):
        Counter(f"{name}_{what}", doc, registry=registry).inc(value)
