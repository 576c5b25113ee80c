"""The inventory projection in PostgreSQL (issue 4): ``inventory_objects``, ``node_resources``,
``device_identities`` and ``inventory_conflicts`` (:mod:`services.adapters.projection.inventory_tables`).

Written only inside the health agent's batch transaction, by
:meth:`ProjectionStore.apply_batch <services.adapters.projection.store.ProjectionStore.apply_batch>` (and
by the replay through :meth:`~services.adapters.projection.store.ProjectionStore.write_prepared`), from an
:class:`~services.domain.inventory.fold.InventoryPlan`.

:class:`InventoryProjection` is the worker's side: the in-memory
:class:`~services.domain.inventory.fold.InventoryFold` (the inventory state and the active
conflicts) of one worker process, kept equal to the tables:

- it is loaded from the tables inside a batch's transaction: on the first batch, after a batch that
  was not committed (the fold went ahead of the tables: a rollback, a retry, an error), and when a
  partition of the batch has a recorded offset other than the one the state was built from (the
  partition was processed by another worker meanwhile, e.g. after a rebalance);
- each batch's records are folded in log order and the rows written in the same transaction as the
  directory, so what the fold knows is what PostgreSQL committed.

Its loaded state covers every partition, but a worker keeps it current only for the partitions it
processes: with several workers, a DeviceClass or pool-scoped ResourceSlice published on another
worker's partition reaches this one at its next load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeAlias, TypeVar

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from services.adapters.projection.retention_sql import (
    RetentionStatements,
    allocated_aliases,
    forget_identities,
    prune_conflicts,
)
from services.adapters.projection.tables import quoted_schema
from services.domain.inventory.events import InventoryKind, object_from_json
from services.domain.inventory.expiry import AliasExpiry
from services.domain.inventory.fold import ConflictRow, InventoryFold, InventoryPlan, Row
from services.domain.inventory.rows import place_identity, place_object
from services.domain.inventory.state import InventoryState
from services.domain.log import LogPosition

Partition = tuple[str, int]
Alias = tuple[str, str]
V = TypeVar("V")
BatchClock: TypeAlias = tuple[
    Mapping[LogPosition, datetime], Mapping[Partition, datetime], Mapping[Partition, LogPosition]
]
"""``(times, watermarks, last positions)`` of a batch
(:func:`services.adapters.projection.retention_sql.batch_event_times`)."""


def _rows(rows: Iterable[Row]) -> dict[str, str]:
    return {"rows": orjson.dumps(list(rows)).decode()}


class InventoryStatements:
    """The inventory's SQL for one schema (schema names cannot be bind parameters)."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        self.schema = schema
        self.upsert_objects = text(
            f"INSERT INTO {s}.inventory_objects AS o (kind, object_key, record_key, node, "
            '"object", deleted, observed_at) SELECT u.kind, u.object_key, u.record_key, u.node, '
            'u."object", u.deleted, u.observed_at FROM jsonb_to_recordset(CAST(:rows AS jsonb)) '
            'AS u(kind text, object_key text, record_key text, node text, "object" jsonb, '
            "deleted boolean, observed_at timestamptz) "
            "ON CONFLICT (kind, object_key) DO UPDATE SET record_key = EXCLUDED.record_key, "
            'node = EXCLUDED.node, "object" = EXCLUDED."object", deleted = EXCLUDED.deleted, '
            "observed_at = EXCLUDED.observed_at"
        )
        self.upsert_node_resources = text(
            f"INSERT INTO {s}.node_resources AS n (node, capacity, allocatable, observed_at) "
            "SELECT u.node, u.capacity, u.allocatable, u.observed_at FROM "
            "jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(node text, capacity jsonb, "
            "allocatable jsonb, observed_at timestamptz) "
            "ON CONFLICT (node) DO UPDATE SET capacity = EXCLUDED.capacity, "
            "allocatable = EXCLUDED.allocatable, observed_at = EXCLUDED.observed_at"
        )
        self.upsert_node_labels = text(
            f"INSERT INTO {s}.node_labels AS n (node, labels, observed_at) "
            "SELECT u.node, u.labels, u.observed_at FROM "
            "jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(node text, labels jsonb, "
            "observed_at timestamptz) "
            "ON CONFLICT (node) DO UPDATE SET labels = EXCLUDED.labels, "
            "observed_at = EXCLUDED.observed_at"
        )
        self.delete_node_labels = text(
            f"DELETE FROM {s}.node_labels WHERE node = ANY(CAST(:nodes AS text[]))"
        )
        self.upsert_identities = text(
            f"INSERT INTO {s}.device_identities AS d (node, resource_id, device_id, owner, "
            'status, uuid, candidates, reason, observed_at, reported_with, last_observed_at, "partition") '
            "SELECT u.node, u.resource_id, u.device_id, u.owner, u.status, u.uuid, u.candidates, "
            'u.reason, u.observed_at, u.reported_with, u.last_observed_at, u."partition" '
            "FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(node text, resource_id text, "
            "device_id text, owner text, status text, uuid text, candidates text[], reason text, "
            'observed_at timestamptz, reported_with jsonb, last_observed_at timestamptz, "partition" '
            "integer) ON CONFLICT (node, resource_id) DO UPDATE SET device_id = EXCLUDED.device_id, "
            "owner = EXCLUDED.owner, status = EXCLUDED.status, uuid = EXCLUDED.uuid, "
            "candidates = EXCLUDED.candidates, reason = EXCLUDED.reason, "
            "observed_at = EXCLUDED.observed_at, reported_with = EXCLUDED.reported_with, "
            'last_observed_at = EXCLUDED.last_observed_at, "partition" = EXCLUDED."partition"'
        )
        self.upsert_conflicts = text(
            f"INSERT INTO {s}.inventory_conflicts AS c (kind, node, subject, detail, active, "
            "first_seen, last_seen) SELECT u.kind, u.node, u.subject, u.detail, u.active, "
            "u.first_seen, u.last_seen FROM jsonb_to_recordset(CAST(:rows AS jsonb)) "
            "AS u(kind text, node text, subject text, detail text, active boolean, "
            "first_seen timestamptz, last_seen timestamptz) "
            "ON CONFLICT (kind, node, subject) DO UPDATE SET detail = EXCLUDED.detail, "
            "active = EXCLUDED.active, first_seen = EXCLUDED.first_seen, "
            "last_seen = EXCLUDED.last_seen"
        )
        self.load_objects = text(
            f'SELECT kind, "object"::text, deleted FROM {s}.inventory_objects '
            "ORDER BY kind, object_key"
        )
        self.load_node_resources = text(
            f"SELECT node, capacity::text FROM {s}.node_resources ORDER BY node"
        )
        self.load_identities = text(
            f"SELECT node, resource_id, device_id, owner, status, uuid, candidates, reason, "
            f'observed_at, reported_with::text, last_observed_at, "partition" '
            f"FROM {s}.device_identities"
        )
        self.load_conflicts = text(
            f"SELECT kind, node, subject, detail, active, first_seen, last_seen "
            f"FROM {s}.inventory_conflicts WHERE active ORDER BY kind, node, subject"
        )
        self.retention = RetentionStatements(schema)
        self.load_progress = text(
            f'SELECT topic, "partition", "offset" FROM {s}.partition_progress '
            'WHERE "offset" IS NOT NULL'
        )


async def write_plan(conn: AsyncConnection, sql: InventoryStatements, plan: InventoryPlan) -> None:
    """Upsert a plan's rows (one statement per table with rows)."""
    if plan.objects:
        await conn.execute(sql.upsert_objects, _rows(plan.objects.values()))
    if plan.node_resources:
        await conn.execute(sql.upsert_node_resources, _rows(plan.node_resources.values()))
    if plan.node_labels_removed:
        nodes = sorted(plan.node_labels_removed)
        await conn.execute(sql.delete_node_labels, {"nodes": nodes})
    if plan.node_labels:
        await conn.execute(sql.upsert_node_labels, _rows(plan.node_labels.values()))
    if plan.identities:
        await conn.execute(sql.upsert_identities, _rows(plan.identities.values()))
    await forget_identities(conn, sql.retention, plan.forgotten)
    if plan.conflicts:
        await conn.execute(sql.upsert_conflicts, _rows(c.to_row() for c in plan.conflicts.values()))
    # Every batch, not only one that wrote conflicts: the horizon moves with the log's event time.
    await prune_conflicts(conn, sql.retention)


async def load_fold(
    conn: AsyncConnection, sql: InventoryStatements
) -> tuple[InventoryFold, dict[Partition, int]]:
    """The fold the tables hold (objects, tombstones included: what the resolutions learned from
    them; capacities; identities with their first observation and reported claim; active
    conflicts) and every partition's recorded offset, read on ``conn`` (the caller's
    transaction)."""
    state = InventoryState()
    expiry = AliasExpiry()
    for kind, payload, deleted in await conn.execute(sql.load_objects):
        obj = object_from_json(InventoryKind(kind), orjson.loads(payload))
        place_object(state, obj, deleted)
    for node, capacity in await conn.execute(sql.load_node_resources):
        state.node_capacity[node] = dict(orjson.loads(capacity))
    for row in await conn.execute(sql.load_identities):
        m = dict(row._mapping)
        reported = m.pop("reported_with")
        last_observed_at, partition = m.pop("last_observed_at"), m.pop("partition")
        place_identity(
            state, {**m, "reported_with": None if reported is None else orjson.loads(reported)}
        )
        if last_observed_at is not None and partition is not None:
            expiry.touch((m["node"], m["resource_id"]), partition, last_observed_at)
    state.reindex()
    active = [
        ConflictRow(
            kind=m["kind"],
            node=m["node"],
            subject=m["subject"],
            detail=m["detail"],
            active=m["active"],
            first_seen=m["first_seen"],
            last_seen=m["last_seen"],
        )
        for m in (r._mapping for r in await conn.execute(sql.load_conflicts))
    ]
    offsets = {
        (topic, partition): offset
        for topic, partition, offset in await conn.execute(sql.load_progress)
    }
    return InventoryFold(state, active, expiry), offsets


class InventoryProjection:
    """The inventory of one worker process (see the module docstring), for schema ``schema``."""

    def __init__(self, schema: str) -> None:
        self.sql = InventoryStatements(schema)
        self._fold: InventoryFold | None = None
        self._folded: dict[Partition, int] = {}
        self._pending = False
        self.loads = 0
        """How many times the state was (re)loaded from the tables."""

    @property
    def current(self) -> InventoryFold | None:
        """The in-memory fold (``None`` before the first batch)."""
        return self._fold

    def _stale(self, applied_through: Mapping[Partition, int], parts: Iterable[Partition]) -> bool:
        if self._fold is None or self._pending:
            return True
        folded = self._folded
        return any(applied_through.get(p, -1) != folded.get(p, -1) for p in parts)

    async def apply(
        self,
        conn: AsyncConnection,
        items: Iterable[tuple[LogPosition, object]],
        applied: set[LogPosition],
        applied_through: Mapping[Partition, int],
        parts: Iterable[Partition],
        clock: BatchClock | None = None,
    ) -> InventoryPlan:
        """Fold a batch's fresh records (``items``, log order; ``applied``: the positions of the
        observations the directory fold applied) and write the rows on ``conn``, inside the
        batch's transaction, after the batch's ``devices`` rows. ``applied_through`` is each
        partition's recorded offset before the batch (rows locked), ``parts`` the batch's
        partitions, ``clock`` its event times (:func:`~.retention_sql.batch_event_times`; the
        lapsed claim aliases are then forgotten, :meth:`InventoryFold.expire`). Call
        :meth:`committed` once the transaction has committed; until then the next call
        reloads."""
        parts = list(parts)
        if self._stale(applied_through, parts):
            self._fold, self._folded = await load_fold(conn, self.sql)
            self.loads += 1
        fold = self._fold
        assert fold is not None
        self._pending = True
        if clock is None:
            plan = fold.fold(items, applied)
        else:
            times, watermarks, last = clock
            plan = fold.fold(items, applied, times)
            held = await allocated_aliases(
                conn, self.sql.retention, fold.expiry.candidates(_by_number(watermarks))
            )
            fold.expire(plan, _by_number(watermarks), lambda _: held, _by_number(last))
        await write_plan(conn, self.sql, plan)
        return plan

    def committed(self, offsets: Mapping[Partition, int]) -> None:
        """The batch's transaction committed, recording ``offsets`` for its partitions."""
        for part, offset in offsets.items():
            if offset > self._folded.get(part, -1):
                self._folded[part] = offset
        self._pending = False

    def fold_owned(
        self,
        items: Iterable[tuple[LogPosition, object]],
        applied: set[LogPosition],
        clock: BatchClock | None = None,
        allocated: Callable[[list[Alias]], set[Alias]] | None = None,
    ) -> InventoryPlan:
        """For a writer that owns a fresh or truncated schema (the replay): fold in memory from an
        empty inventory, nothing loaded; write the plan with :func:`write_plan` in order. With
        ``clock`` (as in :meth:`apply`) and ``allocated`` (which of the lapsed aliases a
        ``devices`` row holds after the batch), the lapsed claim aliases are forgotten."""
        if self._fold is None:
            self._fold = InventoryFold()
        fold = self._fold
        if clock is None or allocated is None:
            return fold.fold(items, applied)
        times, watermarks, last = clock
        plan = fold.fold(items, applied, times)
        fold.expire(plan, _by_number(watermarks), allocated, _by_number(last))
        return plan


def _by_number(by_partition: Mapping[Partition, V]) -> dict[int, V]:
    """Keyed by partition number: the inventory folds one topic."""
    return {partition: value for (_, partition), value in by_partition.items()}


def fresh_items(
    items: Sequence[tuple[LogPosition, object]], recorded: Mapping[Partition, int]
) -> Sequence[tuple[LogPosition, object]]:
    """``items`` after their partition's recorded offset (what a redelivery has not applied)."""
    if not recorded:
        return items
    return [
        item
        for item in items
        if item[0].offset > recorded.get((item[0].topic, item[0].partition), -1)
    ]


async def conflict_rows(conn: AsyncConnection, schema: str) -> list[dict[str, Any]]:
    """Every ``inventory_conflicts`` row, sorted by key (tests and tools)."""
    result = await conn.execute(
        text(
            "SELECT kind, node, subject, detail, active, first_seen, last_seen FROM "
            f"{quoted_schema(schema)}.inventory_conflicts ORDER BY kind, node, subject"
        )
    )
    return [dict(r._mapping) for r in result]
