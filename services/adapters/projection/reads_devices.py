"""Read queries of the device directory (``devices``, ``device_history``, ``partition_progress``) for
the API and the tests. Read-only: :class:`~services.adapters.projection.store.ProjectionStore` is the
only writer.

:func:`device_filter_clauses` is the one WHERE chain of :class:`DeviceFilters` on ``devices``;
:class:`~services.adapters.projection.reads_governance.GovernanceReads` pages the same filters
over ``devices`` joined with the governance.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Executable, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.read_models import (
    DeviceFilters,
    DevicePage,
    FleetCounts,
    HistoryEntry,
    NodeCounts,
    NodeSummary,
    PartitionProgress,
    zero_health,
)
from services.adapters.projection.rows import HEALTH, SOURCE, history_from_row, record_from_row
from services.adapters.projection.tables import (
    device_history,
    devices,
    in_schema,
    partition_progress,
)
from services.domain.directory import DeviceKey, DeviceRecord
from services.domain.events import DeviceSource, Health


def device_filter_clauses(
    filters: DeviceFilters, after: DeviceKey | None = None
) -> list[ColumnElement[bool]]:
    """The WHERE clauses on ``devices`` of ``filters`` (a ``None`` filter adds none) and, with
    ``after``, of the keyset page after that ``(node, resource_id)``."""
    f, c = filters, devices.c
    clauses: list[ColumnElement[bool]] = []
    if f.node is not None:
        clauses.append(c.node == f.node)
    if f.health is not None:
        clauses.append(c.health == f.health.value)
    if f.resource_name is not None:
        clauses.append(c.resource_name == f.resource_name)
    if f.source is not None:
        clauses.append(c.source == f.source.value)
    if f.namespace is not None:
        clauses.append(c.allocations.contains([{"namespace": f.namespace}]))
    if f.pod_uid is not None:
        clauses.append(c.allocations.contains([{"podUID": f.pod_uid}]))
    if after is not None:
        clauses.append(tuple_(c.node, c.resource_id) > tuple_(*after))
    return clauses


class DeviceReads:
    """Reads of the device directory in PostgreSQL schema ``schema`` (migrated), through ``engine``.

    Each method runs one read (its own connection); database failures raise SQLAlchemy's
    ``DBAPIError`` family (:data:`services.adapters.projection.errors.DatabaseError`)."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._schema = schema
        self._options = in_schema(schema)

    @property
    def schema(self) -> str:
        return self._schema

    async def _fetch(self, stmt: Executable) -> list[Any]:
        async with self._engine.connect() as conn:
            result = await conn.execute(stmt, execution_options=self._options)
            return list(result)

    async def list_devices(
        self, filters: DeviceFilters | None = None, limit: int = 100, after: DeviceKey | None = None
    ) -> DevicePage:
        """Devices matching ``filters``, sorted by ``(node, resource_id)``, at most ``limit``
        (>= 1), starting after the key ``after`` (keyset pagination). Raises ``ValueError`` for a
        limit below 1."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        c = devices.c
        stmt = (
            select(devices)
            .where(*device_filter_clauses(filters or DeviceFilters(), after))
            .order_by(c.node, c.resource_id)
            .limit(limit + 1)
        )
        items = [record_from_row(row) for row in await self._fetch(stmt)]
        if len(items) > limit:
            return DevicePage(items[:limit], items[limit - 1].key)
        return DevicePage(items, None)

    async def get_device(self, node: str, resource_id: str) -> DeviceRecord | None:
        """The device ``(node, resource_id)``, or ``None`` when it is unknown."""
        c = devices.c
        stmt = select(devices).where(c.node == node, c.resource_id == resource_id)
        rows = await self._fetch(stmt)
        return record_from_row(rows[0]) if rows else None

    async def device_history(
        self, node: str, resource_id: str, limit: int = 100, before: datetime | None = None
    ) -> list[HistoryEntry]:
        """History of one device, newest first (by ``observed_at``, then log position), at most
        ``limit``; with ``before``, only entries observed strictly earlier. Empty for an unknown
        device."""
        c = device_history.c
        stmt = (
            select(device_history)
            .where(c.node == node, c.resource_id == resource_id)
            .order_by(c.observed_at.desc(), c.topic.desc(), c.partition.desc(), c.offset.desc())
            .limit(limit)
        )
        if before is not None:
            stmt = stmt.where(c.observed_at < before)
        return [history_from_row(row) for row in await self._fetch(stmt)]

    async def node_summary(self, node: str) -> NodeSummary | None:
        """Counts by health and the devices of ``node``; ``None`` when it has no devices."""
        c = devices.c
        stmt = select(devices).where(c.node == node).order_by(c.resource_id)
        records = [record_from_row(row) for row in await self._fetch(stmt)]
        if not records:
            return None
        counts = NodeCounts(node, len(records))
        for record in records:
            counts.by_health[record.health] += 1
        return NodeSummary(counts, records)

    async def list_nodes(
        self, limit: int | None = None, after: str | None = None
    ) -> list[NodeCounts]:
        """Per-node device counts by health, sorted by node name: the first ``limit`` nodes
        (all when ``None``) whose name sorts after ``after`` (keyset pagination)."""
        c = devices.c
        stmt = select(c.node, c.health, func.count()).group_by(c.node, c.health)
        if after is not None:
            stmt = stmt.where(c.node > after)
        if limit is not None:
            page = select(c.node).distinct().order_by(c.node).limit(limit)
            if after is not None:
                page = page.where(c.node > after)
            stmt = stmt.where(c.node.in_(page.scalar_subquery()))
        stmt = stmt.order_by(c.node, c.health)
        by_node: dict[str, dict[Health, int]] = defaultdict(zero_health)
        for node, health, count in await self._fetch(stmt):
            by_node[node][HEALTH[health]] = count
        return [NodeCounts(node, sum(c.values()), c) for node, c in by_node.items()]

    async def fleet_counts(self) -> FleetCounts:
        """Device counts over all nodes, by health and by source."""
        c = devices.c
        by_health = zero_health()
        by_source = dict.fromkeys(DeviceSource, 0)
        for health, count in await self._fetch(select(c.health, func.count()).group_by(c.health)):
            by_health[HEALTH[health]] = count
        for source, count in await self._fetch(select(c.source, func.count()).group_by(c.source)):
            by_source[SOURCE[source]] = count
        [(nodes,)] = await self._fetch(select(func.count(c.node.distinct())))
        return FleetCounts(sum(by_health.values()), nodes, by_health, by_source)

    async def partition_progress(self) -> list[PartitionProgress]:
        """Progress rows sorted by ``(topic, partition)`` (empty before the first batch)."""
        c = partition_progress.c
        stmt = select(partition_progress).order_by(c.topic, c.partition)
        return [
            PartitionProgress(
                r.topic, r.partition, r.offset, r.highwater, r.last_event_at, r.updated_at
            )
            for r in await self._fetch(stmt)
        ]

    async def freshness(self) -> datetime | None:
        """The newest ``last_event_at`` over all partitions (event time, UTC), or ``None``."""
        [(newest,)] = await self._fetch(select(func.max(partition_progress.c.last_event_at)))
        result: datetime | None = newest
        return result
