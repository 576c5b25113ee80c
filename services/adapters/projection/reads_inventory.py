"""Read queries of the inventory projection (:mod:`services.adapters.projection.inventory_tables`)
for the API, joined with the directory (``devices``) and the governance (``device_governance``).
Read-only: the health agent writes the inventory tables, the governor the governance ones.

:meth:`InventoryReads.snapshot` loads what :mod:`services.domain.inventory.snapshot` holds (the
directory, capacity views and reconcile check read it); :mod:`.reads_node_facts` loads
only what the scheduler extender needs for the candidate nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import structlog
from sqlalchemy import Executable, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.governance_tables import device_governance
from services.adapters.projection.inventory_tables import (
    device_identities,
    inventory_conflicts,
    inventory_objects,
    node_labels,
    node_resources,
)
from services.adapters.projection.tables import devices, in_schema
from services.domain.inventory.events import InventoryKind, object_from_json
from services.domain.inventory.fold import ConflictRow
from services.domain.inventory.rows import place_object
from services.domain.inventory.snapshot import (
    GovernanceRow,
    IdentityRow,
    NodeResources,
    ObservedDevice,
    Snapshot,
)

log = structlog.get_logger(__name__)


def _json(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str | bytes) else value


def resource_counts(value: Any) -> dict[str, int]:
    """Resource name -> count from ``{"nvidia.com/gpu": 8}`` (or ``[["nvidia.com/gpu", 8]]``)."""
    raw = _json(value)
    if isinstance(raw, list):
        raw = {p[0]: p[1] for p in raw if isinstance(p, list) and len(p) == 2}
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if type(v) is int}


def allocation_pods(value: Any) -> tuple[tuple[str, str], ...]:
    raw = _json(value)
    if not isinstance(raw, list):
        return ()
    return tuple(
        (str(a.get("namespace", "")), str(a.get("podName", ""))) for a in raw if isinstance(a, dict)
    )


class InventoryReads:
    """Read helpers on the projection in ``schema``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._options = in_schema(schema)

    async def _rows(self, conn: AsyncConnection, stmt: Executable) -> Sequence[Any]:
        result = await conn.execute(stmt, execution_options=self._options)
        return list(result)

    async def snapshot(self, node: str | None = None, from_node: str | None = None) -> Snapshot:
        """The inventory, directory and governance rows (of ``node`` only, when given; of nodes
        ``>= from_node``, when given, for a page after a cursor). ResourceClaims and DeviceClasses
        are always loaded whole (allocations and class names are global). One read transaction,
        so the tables agree with each other."""
        snap = Snapshot()

        def per_node(column: Any) -> list[Any]:
            if node is not None:
                return [column == node]
            if from_node is not None:
                return [column >= from_node]
            return []

        o = inventory_objects.c
        objects = select(o.kind, o.object).where(o.deleted.is_(False))
        if node is not None or from_node is not None:
            # Pool-scoped slices (no node) always: their devices may be reported on any node.
            objects = objects.where(
                or_(
                    o.kind != InventoryKind.RESOURCE_SLICE.value,
                    o.node.is_(None),
                    *per_node(o.node),
                )
            )
        d = devices.c
        i = device_identities.c
        g = device_governance.c
        r = node_resources.c
        async with self._engine.connect() as conn, conn.begin():
            object_rows = await self._rows(conn, objects)
            resource_rows = await self._rows(
                conn, select(r.node, r.capacity, r.allocatable).where(*per_node(r.node))
            )
            lb = node_labels.c
            label_rows = await self._rows(
                conn, select(lb.node, lb.labels).where(*per_node(lb.node))
            )
            identity_rows = await self._rows(
                conn,
                select(i.node, i.resource_id, i.device_id, i.owner, i.status, i.uuid).where(
                    *per_node(i.node)
                ),
            )
            device_rows = await self._rows(
                conn,
                select(
                    d.node,
                    d.resource_id,
                    d.resource_name,
                    d.source,
                    d.health,
                    d.last_observed_at,
                    d.allocations,
                ).where(*per_node(d.node)),
            )
            governance_rows = await self._rows(
                conn,
                select(
                    g.node,
                    g.resource_id,
                    g.resource_name,
                    g.source,
                    g.state,
                    g.observed_health,
                    g.state_since,
                    g.quarantine_id,
                ).where(*per_node(g.node)),
            )
        state = snap.inventory
        for kind_value, raw in object_rows:
            try:
                obj = object_from_json(InventoryKind(kind_value), _json(raw))
            except (KeyError, ValueError, TypeError) as exc:
                log.warning("unreadable inventory object skipped", kind=kind_value, error=repr(exc))
                continue
            place_object(state, obj)
        for row in resource_rows:
            snap.node_resources[row.node] = NodeResources(
                row.node, resource_counts(row.capacity), resource_counts(row.allocatable)
            )
            state.node_capacity[row.node] = dict(resource_counts(row.capacity))
        for row in label_rows:
            raw = _json(row.labels)
            if isinstance(raw, dict):
                snap.node_labels[row.node] = tuple(sorted((str(k), str(v)) for k, v in raw.items()))
        snap.identities = [
            IdentityRow(row.node, row.resource_id, row.device_id, row.owner, row.status, row.uuid)
            for row in identity_rows
        ]
        snap.devices = [
            ObservedDevice(
                row.node,
                row.resource_id,
                row.resource_name,
                row.source,
                row.health,
                row.last_observed_at,
                allocation_pods(row.allocations),
            )
            for row in device_rows
        ]
        snap.governance = [
            GovernanceRow(
                row.node,
                row.resource_id,
                row.resource_name,
                row.source,
                row.state,
                row.observed_health,
                row.state_since,
                row.quarantine_id,
            )
            for row in governance_rows
        ]
        return snap

    async def conflicts(
        self, active: bool | None = None, node: str | None = None, kind: str | None = None
    ) -> list[ConflictRow]:
        """``inventory_conflicts`` rows matching the filters, sorted by (node, kind, subject)."""
        c = inventory_conflicts.c
        stmt = select(inventory_conflicts).order_by(c.node, c.kind, c.subject)
        if active is not None:
            stmt = stmt.where(c.active.is_(active))
        if node is not None:
            stmt = stmt.where(c.node == node)
        if kind is not None:
            stmt = stmt.where(c.kind == kind)
        async with self._engine.connect() as conn:
            rows = await self._rows(conn, stmt)
        return [
            ConflictRow(r.kind, r.node, r.subject, r.detail, r.active, r.first_seen, r.last_seen)
            for r in rows
        ]
