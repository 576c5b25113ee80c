"""What the scheduler extender reads of the projection (:mod:`services.domain.placement`'s
:class:`NodeFacts`): per node, its extended-resource counts (``node_resources``), its
device-plugin resourceIDs with their physical identity (``devices``, ``device_identities``) and
its blocked devices (``device_governance``).

Two ways to read them. :meth:`NodeFactReads.for_nodes` reads the candidate nodes of one filter
call. The API's warm copy (:mod:`services.processes.api.warm_node_facts`) instead loads every
node once (:meth:`NodeFactReads.load`) and then reads only the nodes whose rows a transaction
wrote since (:meth:`NodeFactReads.changed_since`, by the rows' ``xmin``, as
:mod:`.reads_changes` does for the point GETs). Each read is one REPEATABLE READ snapshot, so the
four tables agree with each other and with the horizon it returns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any, Final

from sqlalchemy import Executable, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.governance_tables import device_governance
from services.adapters.projection.inventory_tables import device_identities, node_resources
from services.adapters.projection.reads_changes import (
    READ_ONLY,
    SNAPSHOT_ID,
    XMIN_WINDOW,
    Horizon,
)
from services.adapters.projection.reads_inventory import allocation_pods, resource_counts
from services.adapters.projection.tables import devices, in_schema, quoted_schema
from services.domain.events import DeviceSource
from services.domain.placement import (
    BLOCKED_STATES,
    BlockedDevice,
    NodeFacts,
    PluginDevice,
    physical_id,
)

PLUGIN = DeviceSource.DEVICE_PLUGIN.value

ROWS_PER_FETCH: Final = 500
"""Rows fetched per round trip of a read (about 10 ms of CPU to turn into facts)."""


class NodeFactReads:
    """The extender's reads of the projection in ``schema``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._options = in_schema(schema)
        s = quoted_schema(schema)
        window = XMIN_WINDOW.format(alias="")
        changed = " UNION ".join(
            f"SELECT node FROM {s}.{table}, bounds WHERE {window}"
            for table in ("node_resources", "devices", "device_identities", "device_governance")
        )
        self._changed_nodes = text(
            f"""
            WITH bounds AS (
                SELECT CAST(CAST(pg_snapshot_xmax(pg_current_snapshot()) AS text) AS bigint)
                       % 4294967296 AS hi
            ),
            nodes AS ({changed})
            SELECT (SELECT CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text)
                    AS bigint)), nodes.node
            FROM (SELECT 1) AS one LEFT JOIN nodes ON true
            """
        )
        self._horizon = text(
            "SELECT CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint)"
        )

    async def snapshot_id(self) -> str:
        """The server's current snapshot as text: unchanged while no transaction that wrote
        began or ended (:meth:`.reads_changes.ChangeReads.snapshot_id`)."""
        async with self._engine.connect() as conn:
            return str((await conn.execute(SNAPSHOT_ID)).scalar_one())

    async def for_nodes(
        self, nodes: Iterable[str], resources: Iterable[str]
    ) -> dict[str, NodeFacts]:
        """Per candidate node the projection knows: extended-resource counts, device-plugin
        resourceIDs of ``resources`` (allocated or not) and blocked devices."""
        names = sorted(set(nodes))
        wanted = sorted(set(resources))
        if not names or not wanted:
            return {}
        async with self._engine.connect() as conn, conn.begin():
            return await self._facts(conn, names, wanted)

    async def load(self) -> tuple[dict[str, NodeFacts], Horizon]:
        """Every node's facts (all resources), and the horizon of the snapshot they were read
        in."""
        async with self._engine.begin() as conn:
            await conn.execute(READ_ONLY)
            horizon = Horizon(int((await conn.execute(self._horizon)).scalar_one()))
            return await self._facts(conn, None, None), horizon

    async def changed_since(
        self, horizon: Horizon
    ) -> tuple[set[str], dict[str, NodeFacts], Horizon]:
        """The nodes whose rows in any of the four tables changed since ``horizon``, the facts
        of those the projection still knows (all resources), and the next horizon, all from one
        snapshot. Deleted rows leave no ``xmin``: the warm copy reloads whole now and then."""
        lo = horizon.xid % 4294967296
        async with self._engine.begin() as conn:
            await conn.execute(READ_ONLY)
            rows = list(await conn.execute(self._changed_nodes, {"lo": lo}))
            following = Horizon(int(rows[0][0]))
            nodes = {str(r[1]) for r in rows if r[1] is not None}
            facts = await self._facts(conn, sorted(nodes), None) if nodes else {}
        return nodes, facts, following

    async def _rows(self, conn: AsyncConnection, stmt: Executable) -> AsyncIterator[Any]:
        """The rows of ``stmt``, fetched :data:`ROWS_PER_FETCH` at a time from a server-side
        cursor: a whole load (every node, every :data:`~.warm_node_facts.FULL_RELOAD_SECONDS`)
        is hundreds of thousands of rows, and the event loop serves requests between fetches
        instead of waiting for all of them to be turned into facts."""
        result = await conn.stream(stmt, execution_options=self._options)
        async for part in result.partitions(ROWS_PER_FETCH):
            for row in part:
                yield row

    async def _facts(
        self, conn: AsyncConnection, names: list[str] | None, wanted: list[str] | None
    ) -> dict[str, NodeFacts]:
        """The facts of ``names`` (``None``: every node), devices of ``wanted`` resources only
        (``None``: all)."""
        r, d, i, g = node_resources.c, devices.c, device_identities.c, device_governance.c
        resource_q = select(r.node, r.capacity, r.allocatable)
        device_q = select(d.node, d.resource_id, d.resource_name, d.allocations).where(
            d.source == PLUGIN
        )
        identity_q = select(i.node, i.resource_id, i.device_id).where(i.owner == PLUGIN)
        blocked_q = select(g.node, g.resource_id, g.resource_name, g.state).where(
            g.source == PLUGIN, g.state.in_(sorted(BLOCKED_STATES))
        )
        if names is not None:
            resource_q = resource_q.where(r.node.in_(names))
            device_q = device_q.where(d.node.in_(names))
            identity_q = identity_q.where(i.node.in_(names))
            blocked_q = blocked_q.where(g.node.in_(names))
        if wanted is not None:
            device_q = device_q.where(d.resource_name.in_(wanted))
            blocked_q = blocked_q.where(g.resource_name.in_(wanted))
        identities: dict[str, dict[str, str]] = {}
        async for row in self._rows(conn, identity_q):
            identities.setdefault(row.node, {})[row.resource_id] = row.device_id
        facts: dict[str, NodeFacts] = {}
        async for row in self._rows(conn, resource_q):
            facts[row.node] = NodeFacts(
                resource_counts(row.capacity), resource_counts(row.allocatable)
            )
        async for row in self._rows(conn, device_q):
            facts.setdefault(row.node, NodeFacts()).devices.append(
                PluginDevice(
                    row.resource_id,
                    row.resource_name,
                    physical_id(row.resource_id, identities.get(row.node, {})),
                    bool(allocation_pods(row.allocations)),
                )
            )
        async for row in self._rows(conn, blocked_q):
            facts.setdefault(row.node, NodeFacts()).blocked.append(
                BlockedDevice(row.resource_id, row.resource_name, row.state)
            )
        return facts


def facts_of(
    warm: dict[str, NodeFacts], nodes: Iterable[str], resources: Iterable[str]
) -> dict[str, NodeFacts]:
    """What :meth:`NodeFactReads.for_nodes` would read, from a copy of every node's facts: the
    candidate ``nodes`` it holds, their devices and blocked devices of ``resources`` only."""
    wanted = set(resources)
    if not wanted:
        return {}
    found: dict[str, NodeFacts] = {}
    for name in set(nodes):
        held = warm.get(name)
        if held is None:
            continue
        kept = [dev for dev in held.devices if dev.resource_name in wanted]
        blocked = [dev for dev in held.blocked if dev.resource_name in wanted]
        if held.capacity is not None or kept or blocked:  # as the per-call read finds it
            found[name] = NodeFacts(held.capacity, held.allocatable, kept, blocked)
    return found
