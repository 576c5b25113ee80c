"""The governance projection in PostgreSQL (:mod:`services.adapters.projection.governance_tables`): what the
governor (``streams/governor.py``) and the governance replay read and write.

:meth:`GovernanceStore.load` reads what a (re)started governor restores its state from: the
snapshots of every device and node, the fleet row, and the governance topic's recorded offset.
:meth:`GovernanceStore.write` writes one batch's rows (:func:`batch_rows`, encoded by
:mod:`services.adapters.projection.governance_rows`) in ONE transaction:
the touched device, node and quarantine rows, the fleet row, the event-time merge's pending
records added and released, the decisions, the operator commands,
the accepted migration evidence and the topic's ``partition_progress`` row. Every value comes
from the governance topic (event
times, never the wall clock; ``partition_progress.updated_at`` aside), so a replay of the topic
writes identical rows.

Rows travel as one jsonb parameter per table expanded with ``jsonb_to_recordset``, like
:mod:`services.adapters.projection.batch_sql`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.governance_rows import (
    FLEET_ROW_ID,
    BatchRows,
    active_quarantine,
    batch_rows,
    command_row,
    decision_row,
    device_row,
    effective_health,
)
from services.adapters.projection.tables import quoted_schema

GOVERNANCE_PARTITION: Final = 0
"""The governance topic has one partition."""


class StaleGovernorState(RuntimeError):
    """The governance topic's recorded offset is not the one the governor's state was built at:
    another governor instance wrote meanwhile (a rebalance). Rolled back; reload and retry."""


@dataclass(frozen=True, slots=True)
class GovernorSnapshot:
    """What :meth:`GovernanceStore.load` read: snapshot JSON objects and the recorded offset."""

    devices: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    fleet: dict[str, Any] | None
    offset: int | None
    """Last governance-topic offset applied (``None``: nothing yet)."""
    workloads: list[dict[str, Any]] = field(default_factory=list)
    """The migration policy's workload facts (``governor_workloads.snapshot``)."""
    labels: list[dict[str, Any]] = field(default_factory=list)
    """The nodes' labels (``governor_node_labels.snapshot``, by node)."""
    pending: list[dict[str, Any]] = field(default_factory=list)
    """The event-time merge's pending records (``governor_pending.snapshot``, by source)."""


# --- SQL ------------------------------------------------------------------------------------

_DEVICE_COLUMNS: Final = (
    "node, resource_id, resource_name, source, resource_claim, observed_health, "
    "effective_health, effective_reason, state, state_since, status_version, unknown_since, "
    "deadline, quarantine_id, snapshot"
)
_DEVICE_TYPES: Final = (
    "node text, resource_id text, resource_name text, source text, resource_claim text, "
    "observed_health text, effective_health text, effective_reason text, state text, "
    "state_since timestamptz, status_version numeric, unknown_since timestamptz, "
    "deadline timestamptz, quarantine_id text, snapshot jsonb"
)
_NODE_COLUMNS: Final = "node, last_heartbeat_at, heartbeat_lost, incident, snapshot"
_NODE_TYPES: Final = (
    "node text, last_heartbeat_at timestamptz, heartbeat_lost boolean, incident text, "
    "snapshot jsonb"
)
_FLEET_COLUMNS: Final = "id, watermark, breaker_open, automation_paused, snapshot"
_FLEET_TYPES: Final = (
    "id integer, watermark timestamptz, breaker_open boolean, automation_paused boolean, "
    "snapshot jsonb"
)
_QUARANTINE_COLUMNS: Final = (
    "quarantine_id, node, resource_id, resource_claim, kind, status, reason, actor, created_at, "
    "expires_at, released_at, release_reason, released_by, confirmed_fault, lease_holder, "
    "fencing_token, lease_expires_at, recovery_stage, recovery_attempts"
)
_QUARANTINE_TYPES: Final = (
    "quarantine_id text, node text, resource_id text, resource_claim text, kind text, "
    "status text, reason text, actor text, created_at timestamptz, expires_at timestamptz, "
    "released_at timestamptz, release_reason text, released_by text, confirmed_fault boolean, "
    "lease_holder text, fencing_token bigint, lease_expires_at timestamptz, "
    "recovery_stage text, recovery_attempts integer"
)
_DECISION_COLUMNS: Final = "seq, idx, kind, at, node, resource_id, incident, payload"
_DECISION_TYPES: Final = (
    "seq bigint, idx integer, kind text, at timestamptz, node text, resource_id text, "
    "incident text, payload jsonb"
)
_LABEL_COLUMNS: Final = "node, snapshot"
_LABEL_TYPES: Final = "node text, snapshot jsonb"
_PENDING_COLUMNS: Final = "source_partition, source_offset, source_index, snapshot"
_PENDING_TYPES: Final = (
    "source_partition integer, source_offset bigint, source_index integer, snapshot jsonb"
)
_WORKLOAD_COLUMNS: Final = "node, resource_id, pod_uid, snapshot"
_WORKLOAD_TYPES: Final = "node text, resource_id text, pod_uid text, snapshot jsonb"
_EVIDENCE_COLUMNS: Final = (
    "migration_id, pod_uid, namespace, pod_name, resource_version, status, node, resource_id, "
    "holder, collected_at, reported_at"
)
_EVIDENCE_TYPES: Final = (
    "migration_id text, pod_uid text, namespace text, pod_name text, resource_version text, "
    "status jsonb, node text, resource_id text, holder text, collected_at timestamptz, "
    "reported_at timestamptz"
)
_COMMAND_COLUMNS: Final = "command_id, action, actor, accepted, reason, seq, request_fingerprint"
_COMMAND_TYPES: Final = (
    "command_id text, action text, actor text, accepted boolean, reason text, seq bigint, "
    "request_fingerprint text"
)


def _upsert(schema: str, table: str, columns: str, types: str, key: str, update: bool) -> Any:
    names = [c.strip() for c in columns.split(",")]
    keys = {k.strip() for k in key.split(",")}
    if update:
        sets = ", ".join(f"{n} = EXCLUDED.{n}" for n in names if n not in keys)
        conflict = f"ON CONFLICT ({key}) DO UPDATE SET {sets}"
    else:
        conflict = "ON CONFLICT DO NOTHING"
    return text(
        f"INSERT INTO {schema}.{table} ({columns}) SELECT {columns} FROM "
        f"jsonb_to_recordset(CAST(:rows AS jsonb)) AS u({types}) {conflict}"
    )


class _Statements:
    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        self.devices = _upsert(
            s, "device_governance", _DEVICE_COLUMNS, _DEVICE_TYPES, "node, resource_id", True
        )
        self.nodes = _upsert(s, "governor_nodes", _NODE_COLUMNS, _NODE_TYPES, "node", True)
        self.fleet = _upsert(s, "governor_fleet", _FLEET_COLUMNS, _FLEET_TYPES, "id", True)
        self.quarantines = _upsert(
            s, "quarantines", _QUARANTINE_COLUMNS, _QUARANTINE_TYPES, "quarantine_id", True
        )
        self.decisions = _upsert(
            s, "governance_decisions", _DECISION_COLUMNS, _DECISION_TYPES, "seq, idx", False
        )
        self.commands = _upsert(
            s, "governance_commands", _COMMAND_COLUMNS, _COMMAND_TYPES, "command_id", False
        )
        self.delete_devices = text(
            f"DELETE FROM {s}.device_governance AS d USING unnest(CAST(:nodes AS text[]), "
            "CAST(:ids AS text[])) AS k(node, id) WHERE d.node = k.node AND d.resource_id = k.id"
        )
        self.workloads = _upsert(
            s,
            "governor_workloads",
            _WORKLOAD_COLUMNS,
            _WORKLOAD_TYPES,
            "node, resource_id, pod_uid",
            True,
        )
        # The fold keeps the first evidence per Pod; DO NOTHING is the same rule in SQL.
        self.evidence = _upsert(
            s, "migration_evidence", _EVIDENCE_COLUMNS, _EVIDENCE_TYPES, "migration_id", False
        )
        self.delete_workloads = text(
            f"DELETE FROM {s}.governor_workloads AS w USING unnest(CAST(:nodes AS text[]), "
            "CAST(:ids AS text[]), CAST(:pods AS text[])) AS k(node, id, pod) "
            "WHERE w.node = k.node AND w.resource_id = k.id AND w.pod_uid = k.pod"
        )
        self.load_workloads = text(
            f"SELECT snapshot::text, node, resource_id FROM {s}.governor_workloads "
            "ORDER BY node, resource_id, pod_uid"
        )
        self.labels = _upsert(s, "governor_node_labels", _LABEL_COLUMNS, _LABEL_TYPES, "node", True)
        self.delete_labels = text(
            f"DELETE FROM {s}.governor_node_labels WHERE node = ANY(CAST(:nodes AS text[]))"
        )
        self.load_labels = text(
            f"SELECT snapshot::text FROM {s}.governor_node_labels ORDER BY node"
        )
        # A redelivered batch writes the same record again: its row is the same.
        self.pending = _upsert(
            s,
            "governor_pending",
            _PENDING_COLUMNS,
            _PENDING_TYPES,
            "source_partition, source_offset, source_index",
            False,
        )
        self.delete_pending = text(
            f"DELETE FROM {s}.governor_pending AS g USING unnest(CAST(:parts AS integer[]), "
            "CAST(:offsets AS bigint[]), CAST(:indexes AS integer[])) AS k(p, o, i) "
            "WHERE g.source_partition = k.p AND g.source_offset = k.o AND g.source_index = k.i"
        )
        self.load_pending = text(
            f"SELECT snapshot::text FROM {s}.governor_pending "
            "ORDER BY source_partition, source_offset, source_index"
        )
        self.delete_nodes = text(
            f"DELETE FROM {s}.governor_nodes WHERE node = ANY(CAST(:nodes AS text[]))"
        )
        self.lock_progress = text(
            f'SELECT "offset" FROM {s}.partition_progress '
            'WHERE topic = :topic AND "partition" = :partition FOR UPDATE'
        )
        self.upsert_progress = text(
            f'INSERT INTO {s}.partition_progress AS p (topic, "partition", "offset", highwater, '
            "last_event_at, updated_at) VALUES (:topic, :partition, :offset, :highwater, "
            ":last_event_at, now()) "
            'ON CONFLICT (topic, "partition") DO UPDATE SET '
            '"offset" = GREATEST(p."offset", EXCLUDED."offset"), '
            "highwater = GREATEST(p.highwater, EXCLUDED.highwater), "
            "last_event_at = GREATEST(p.last_event_at, EXCLUDED.last_event_at), "
            "updated_at = EXCLUDED.updated_at"
        )
        self.load_devices = text(
            f"SELECT snapshot::text FROM {s}.device_governance ORDER BY node, resource_id"
        )
        self.load_nodes = text(f"SELECT snapshot::text FROM {s}.governor_nodes ORDER BY node")
        self.load_fleet = text(
            f"SELECT snapshot::text FROM {s}.governor_fleet WHERE id = {FLEET_ROW_ID}"
        )
        self.load_offset = text(
            f'SELECT "offset" FROM {s}.partition_progress '
            'WHERE topic = :topic AND "partition" = :partition'
        )


__all__ = [
    "FLEET_ROW_ID",
    "BatchRows",
    "GovernanceStore",
    "GovernorSnapshot",
    "StaleGovernorState",
    "active_quarantine",
    "batch_rows",
    "command_row",
    "decision_row",
    "device_row",
    "effective_health",
]


class GovernanceStore:
    """The governance tables in ``schema`` (migrated), through ``engine`` (asyncpg)."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._schema = schema
        self._sql = _Statements(schema)

    @property
    def schema(self) -> str:
        return self._schema

    async def load(self, topic: str) -> GovernorSnapshot:
        """Every device and node snapshot, the fleet snapshot and the recorded offset of
        ``topic`` (partition 0), read in one transaction (a consistent view)."""
        async with self._engine.begin() as conn:
            await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"))
            devices = [orjson.loads(r[0]) for r in await conn.execute(self._sql.load_devices)]
            nodes = [orjson.loads(r[0]) for r in await conn.execute(self._sql.load_nodes)]
            fleet_row = (await conn.execute(self._sql.load_fleet)).first()
            workloads = [
                {**orjson.loads(r[0]), "node": r[1], "resourceID": r[2]}
                for r in await conn.execute(self._sql.load_workloads)
            ]
            labels = [orjson.loads(r[0]) for r in await conn.execute(self._sql.load_labels)]
            pending = [orjson.loads(r[0]) for r in await conn.execute(self._sql.load_pending)]
            offset = (
                await conn.execute(
                    self._sql.load_offset, {"topic": topic, "partition": GOVERNANCE_PARTITION}
                )
            ).scalar()
        return GovernorSnapshot(
            devices=devices,
            nodes=nodes,
            fleet=None if fleet_row is None else orjson.loads(fleet_row[0]),
            offset=None if offset is None else int(offset),
            workloads=workloads,
            labels=labels,
            pending=pending,
        )

    async def write(
        self, rows: BatchRows, before_commit: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Write one batch in one transaction. Raises :class:`StaleGovernorState` (rolled back)
        when the topic's recorded offset is not ``rows.expected_offset``, and SQLAlchemy's
        ``DBAPIError`` family for database failures (rolled back). ``before_commit`` is awaited
        inside the transaction once every row is written, just before the commit (the governor
        sends its decisions there: rows the database refuses send none); an exception from it
        rolls the batch back and is raised."""
        async with self._engine.begin() as conn:
            await self._check_offset(conn, rows)
            sql = self._sql
            if rows.deleted_devices:
                await conn.execute(
                    sql.delete_devices,
                    {
                        "nodes": [n for n, _ in rows.deleted_devices],
                        "ids": [i for _, i in rows.deleted_devices],
                    },
                )
            if rows.deleted_nodes:
                await conn.execute(sql.delete_nodes, {"nodes": rows.deleted_nodes})
            if rows.deleted_labels:
                await conn.execute(sql.delete_labels, {"nodes": rows.deleted_labels})
            if rows.deleted_pending:
                await conn.execute(
                    sql.delete_pending,
                    {
                        "parts": [k[0] for k in rows.deleted_pending],
                        "offsets": [k[1] for k in rows.deleted_pending],
                        "indexes": [k[2] for k in rows.deleted_pending],
                    },
                )
            if rows.deleted_workloads:
                await conn.execute(
                    sql.delete_workloads,
                    {
                        "nodes": [k[0] for k in rows.deleted_workloads],
                        "ids": [k[1] for k in rows.deleted_workloads],
                        "pods": [k[2] for k in rows.deleted_workloads],
                    },
                )
            for statement, payload in (
                (sql.devices, rows.devices),
                (sql.nodes, rows.nodes),
                (sql.fleet, rows.fleet),
                (sql.quarantines, rows.quarantines),
                (sql.decisions, rows.decisions),
                (sql.commands, rows.commands),
                (sql.workloads, rows.workloads),
                (sql.evidence, rows.evidence),
                (sql.labels, rows.labels),
                (sql.pending, rows.pending),
            ):
                if payload is not None:
                    await conn.execute(statement, {"rows": payload})
            await conn.execute(
                sql.upsert_progress,
                {
                    "topic": rows.topic,
                    "partition": GOVERNANCE_PARTITION,
                    "offset": rows.offset,
                    "highwater": rows.highwater,
                    "last_event_at": rows.watermark,
                },
            )
            if before_commit is not None:
                await before_commit()

    async def _check_offset(self, conn: AsyncConnection, rows: BatchRows) -> None:
        recorded = (
            await conn.execute(
                self._sql.lock_progress, {"topic": rows.topic, "partition": GOVERNANCE_PARTITION}
            )
        ).scalar()
        recorded = None if recorded is None else int(recorded)
        if recorded != rows.expected_offset:
            raise StaleGovernorState(
                f"governance topic {rows.topic!r}: recorded offset {recorded}, the governor's "
                f"state is at {rows.expected_offset}"
            )
