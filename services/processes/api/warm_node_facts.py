"""The scheduler extender's read model: every node's :class:`NodeFacts` in memory (issue 12,
the extender's target: 100 candidate nodes, p99 <= 10 ms at 200 calls/s).

Reading the four tables for 100 candidate nodes costs about 17 ms of CPU per filter call (SQL
rows of every device, identity and governance row of the nodes), and kube-scheduler calls the
filter on every scheduling cycle. :class:`WarmNodeFacts` loads every node's facts when the app
starts, then every ``api_read_cache_poll_seconds`` reads only the nodes whose rows a transaction
wrote since (:meth:`~services.adapters.projection.reads_node_facts.NodeFactReads.changed_since`),
and every :data:`FULL_RELOAD_SECONDS` reloads whole (deleted rows, such as forgotten claim
aliases, leave no ``xmin`` to find). A filter call then reads a dict.

Freshness: a quarantine committed at ``t`` filters nodes by ``t + poll + one refresh`` at the
latest, as the point GETs' copy (:mod:`.warm_devices`). While the copy is not ready (not loaded
yet, or the last refresh failed) the filter reads PostgreSQL as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Final

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from services.adapters.projection.errors import DatabaseError
from services.adapters.projection.reads_changes import Horizon
from services.adapters.projection.reads_node_facts import NodeFactReads, facts_of
from services.domain.placement import NodeFacts

log = structlog.get_logger(__name__)

FULL_RELOAD_SECONDS: Final = 60.0
"""Longest time (seconds, monotonic) between two whole loads of the copy."""


class WarmNodeFacts:
    """Every node's facts, kept current by :meth:`run` (see the module doc)."""

    def __init__(self, reads: NodeFactReads, *, poll_seconds: float) -> None:
        self._reads = reads
        self._poll = poll_seconds
        self._facts: dict[str, NodeFacts] = {}
        self._horizon: Horizon | None = None
        self._snapshot_id: str | None = None
        self._loaded_at = 0.0
        self._ready = False
        self.last_refresh_seconds = 0.0
        self.refresh_errors = 0

    def __len__(self) -> int:
        return len(self._facts)

    @property
    def ready(self) -> bool:
        """Whether filter calls are answered from the copy."""
        return self._ready

    def facts(self, nodes: Iterable[str], resources: Iterable[str]) -> dict[str, NodeFacts] | None:
        """What the per-call read would give for ``nodes`` and ``resources``, or ``None`` while
        the copy is not ready (read PostgreSQL)."""
        if not self._ready:
            return None
        return facts_of(self._facts, nodes, resources)

    async def load(self) -> None:
        """Load every node. Raises the database's errors."""
        self._snapshot_id = None
        self._facts, self._horizon = await self._reads.load()
        self._loaded_at = time.monotonic()
        self._ready = True

    async def refresh(self) -> int:
        """Apply what changed since the last load or refresh (a whole load when none, or when
        the last was :data:`FULL_RELOAD_SECONDS` ago); returns the nodes read. Raises the
        database's errors."""
        if self._horizon is None or time.monotonic() - self._loaded_at >= FULL_RELOAD_SECONDS:
            await self.load()
            return len(self._facts)
        snapshot_id = await self._reads.snapshot_id()
        if snapshot_id == self._snapshot_id:
            return 0  # no transaction began or ended on the server: nothing changed
        nodes, facts, horizon = await self._reads.changed_since(self._horizon)
        self._snapshot_id = snapshot_id
        for node in nodes:
            if node in facts:
                self._facts[node] = facts[node]
            else:
                self._facts.pop(node, None)
        self._horizon = horizon
        self._ready = True
        return len(nodes)

    async def start(self) -> None:
        """The first load, before the app takes requests; a failure is logged and left to
        :meth:`run` (the filter reads PostgreSQL meanwhile)."""
        try:
            await self.load()
            log.info("extender read model loaded", nodes=len(self._facts))
        except (DatabaseError, OSError, TimeoutError) as exc:
            log.warning("extender read model not loaded at start", error=repr(exc))

    async def run(self) -> None:
        """Refresh every ``poll_seconds`` until cancelled; a failed refresh is logged, the copy
        set aside until the next one succeeds."""
        while True:
            await asyncio.sleep(self._poll)
            started = time.perf_counter()
            try:
                await self.refresh()
            except (DatabaseError, OSError, TimeoutError) as exc:
                if self._ready:
                    log.warning("extender read model refresh failed", error=repr(exc))
                self._ready = False
                self._horizon = None  # reload whole once the database answers again
                self.refresh_errors += 1
            else:
                self.last_refresh_seconds = time.perf_counter() - started


def node_facts_metrics(warm: WarmNodeFacts, registry: CollectorRegistry) -> None:
    """The copy's gauges (``devicestate_api_extender_read_model_*``) into ``registry``."""
    name = "devicestate_api_extender_read_model"
    Gauge(
        f"{name}_ready", "1 while extender calls are answered from memory.", registry=registry
    ).set(1 if warm.ready else 0)
    Gauge(f"{name}_nodes", "Nodes held in memory.", registry=registry).set(len(warm))
    Gauge(
        f"{name}_refresh_seconds",
        "Duration of the last refresh (seconds); a call may be this plus the poll interval stale.",
        registry=registry,
    ).set(warm.last_refresh_seconds)
    Counter(f"{name}_refresh_errors", "Refreshes that failed.", registry=registry).inc(
        warm.refresh_errors
    )
