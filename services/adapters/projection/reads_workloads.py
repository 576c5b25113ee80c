"""Read queries of ``GET /v1/workloads`` (issue 13 item 1): the Pods' workloads
(``pod_workloads``) with the devices they hold now (``devices.allocations``) and those devices'
governance (joined on their physical identity like the device list,
:mod:`services.adapters.projection.reads_governance`).

A Pod appears only while it holds a device on its node (its allocation is in the directory);
``quarantined`` keeps the Pods that hold at least one device whose governance state is
``Quarantined``. Pages are keyset-paginated by Pod UID. Read-only; database failures raise
SQLAlchemy's ``DBAPIError`` family.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import ColumnElement, and_, exists, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import device_governance
from services.adapters.projection.reads_governance import _with_governance
from services.adapters.projection.tables import devices, in_schema
from services.adapters.projection.workload_tables import pod_workloads
from services.domain.governance.device_state import GovState


@dataclass(frozen=True, slots=True)
class WorkloadFilters:
    """``None`` means any; ``quarantined`` true keeps Pods on a quarantined device."""

    quarantined: bool = False
    node: str | None = None
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """A device the Pod holds, with its governance state (``None``: not governed yet)."""

    resource_id: str
    resource_name: str
    health: str
    state: str | None
    quarantine_id: str | None


@dataclass(frozen=True, slots=True)
class WorkloadRow:
    """One ``pod_workloads`` row (JSON columns decoded) and the devices the Pod holds."""

    row: dict[str, Any]
    devices: list[HeldDevice] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WorkloadPage:
    items: list[WorkloadRow]
    next_after: str | None
    """The Pod UID to continue after (``None``: last page)."""


_W = pod_workloads.c
_D = devices.c
_G = device_governance.c


def _holds() -> ColumnElement[bool]:
    """``devices`` row allocated to the ``pod_workloads`` row's Pod (the GIN index serves it)."""
    probe = func.jsonb_build_array(func.jsonb_build_object("podUID", _W.pod_uid))
    return and_(_D.node == _W.node, _D.allocations.op("@>")(probe))


def _json(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str | bytes) else value


class WorkloadReads:
    """Reads of ``pod_workloads`` in schema ``schema`` through ``engine``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._options = in_schema(schema)

    async def list_workloads(
        self, filters: WorkloadFilters, limit: int, after: str | None
    ) -> WorkloadPage:
        """One page of workloads sorted by Pod UID, after ``after``."""
        holding = select(_D.node).select_from(_with_governance(devices)).where(_holds())
        if filters.quarantined:
            holding = holding.where(_G.state == GovState.QUARANTINED.value)
        stmt = select(pod_workloads).where(exists(holding)).order_by(_W.pod_uid).limit(limit + 1)
        if filters.node is not None:
            stmt = stmt.where(_W.node == filters.node)
        if filters.namespace is not None:
            stmt = stmt.where(_W.namespace == filters.namespace)
        if after is not None:
            stmt = stmt.where(_W.pod_uid > after)
        async with self._engine.connect() as conn:
            conn = await conn.execution_options(**self._options)
            rows = [dict(r._mapping) for r in await conn.execute(stmt)]
            page, more = rows[:limit], len(rows) > limit
            held: dict[str, list[HeldDevice]] = defaultdict(list)
            if page:
                devices_stmt = (
                    select(
                        _W.pod_uid,
                        _D.resource_id,
                        _D.resource_name,
                        _D.health,
                        _G.state,
                        _G.quarantine_id,
                    )
                    .select_from(_with_governance(devices).join(pod_workloads, _holds()))
                    .where(_W.pod_uid.in_([r["pod_uid"] for r in page]))
                    .order_by(_W.pod_uid, _D.resource_id)
                )
                for r in await conn.execute(devices_stmt):
                    held[r.pod_uid].append(
                        HeldDevice(
                            r.resource_id, r.resource_name, r.health, r.state, r.quarantine_id
                        )
                    )
        items = []
        for row in page:
            row["chain"] = _json(row["chain"])
            row["migration_reasons"] = _json(row["migration_reasons"])
            items.append(WorkloadRow(row, held.get(row["pod_uid"], [])))
        return WorkloadPage(items, page[-1]["pod_uid"] if more else None)
