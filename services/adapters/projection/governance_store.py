"""The governance projection in PostgreSQL (:mod:`services.adapters.projection.governance_tables`): what the
governor (``streams/governor.py``) and the governance replay read and write.

:meth:`GovernanceStore.load` reads what a (re)started governor restores its state from: the
snapshots of every device and node, the fleet row, and the governance topic's recorded offset.
:meth:`GovernanceStore.write` writes one batch's rows (:func:`batch_rows`) in ONE transaction:
the touched device, node and quarantine rows, the fleet row, the decisions, the operator commands
and the topic's ``partition_progress`` row. Every value comes from the governance topic (event
times, never the wall clock; ``partition_progress.updated_at`` aside), so a replay of the topic
writes identical rows.

Rows travel as one jsonb parameter per table expanded with ``jsonb_to_recordset``, like
:mod:`services.adapters.projection.batch_sql`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.tables import quoted_schema
from services.domain.events import Health
from services.domain.governance.decisions import Decision, DecisionKind, decision_to_dict
from services.domain.governance.device_state import DeviceGov, QuarantineStatus
from services.domain.governance.state import GovernorState

GOVERNANCE_PARTITION: Final = 0
"""The governance topic has one partition."""

FLEET_ROW_ID: Final = 1


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


@dataclass(frozen=True, slots=True)
class BatchRows:
    """The rows of one governor batch, encoded (``None``: nothing for that table)."""

    topic: str
    offset: int
    """Last governance-topic offset the batch consumed."""
    expected_offset: int | None
    """The offset recorded before the batch (what the state was restored or last written at)."""
    devices: str | None
    deleted_devices: list[tuple[str, str]]
    nodes: str | None
    deleted_nodes: list[str]
    fleet: str
    quarantines: str | None
    decisions: str | None
    commands: str | None
    highwater: int | None
    watermark: datetime | None


def _json(rows: Sequence[Any]) -> str | None:
    return orjson.dumps(rows).decode() if rows else None


def effective_health(device: DeviceGov) -> Health:
    """The device's health once node facts count: a device whose node lost its heartbeat or its
    device plugin (``effective_reason``) reads Unknown unless it is observed Unhealthy."""
    if device.effective_reason is not None and device.observed_health is not Health.UNHEALTHY:
        return Health.UNKNOWN
    return device.observed_health


def device_row(device: DeviceGov) -> dict[str, Any]:
    """The ``device_governance`` row of one device."""
    quarantine = device.quarantine
    return {
        "node": device.node,
        "resource_id": device.resource_id,
        "resource_name": device.resource_name,
        "source": device.source.value,
        "resource_claim": device.resource_claim,
        "observed_health": device.observed_health.value,
        "effective_health": effective_health(device).value,
        "effective_reason": device.effective_reason,
        "state": device.state.value,
        "state_since": device.state_since,
        "status_version": None if device.status_version is None else str(device.status_version),
        "unknown_since": device.unknown_since,
        "deadline": device.deadline,
        "quarantine_id": None if quarantine is None else quarantine.quarantine_id,
        "snapshot": device.to_json(),
    }


def decision_row(decision: Decision) -> dict[str, Any]:
    """The ``governance_decisions`` row of one decision."""
    return {
        "seq": decision.seq,
        "idx": decision.index,
        "kind": decision.kind.value,
        "at": decision.at,
        "node": decision.node,
        "resource_id": decision.resource_id,
        "incident": decision.incident,
        "payload": decision_to_dict(decision),
    }


def command_row(decision: Decision) -> dict[str, Any] | None:
    """The ``governance_commands`` row of a ``CommandAccepted``/``CommandRejected`` decision
    (``None`` for other decisions, or one without a command id)."""
    if decision.kind not in (DecisionKind.COMMAND_ACCEPTED, DecisionKind.COMMAND_REJECTED):
        return None
    details = decision.details
    command_id = details.get("commandID")
    if not command_id:
        return None
    return {
        "command_id": str(command_id),
        "action": str(details.get("action") or ""),
        "actor": str(details.get("actor") or ""),
        "accepted": decision.kind is DecisionKind.COMMAND_ACCEPTED,
        "reason": str(details.get("reason") or ""),
        "seq": decision.seq,
        "request_fingerprint": details.get("requestFingerprint"),
    }


def batch_rows(
    state: GovernorState,
    decisions: Iterable[Decision],
    *,
    topic: str,
    offset: int,
    expected_offset: int | None,
    highwater: int | None = None,
) -> BatchRows:
    """Encode what one batch changed: the state's dirty devices and nodes, touched quarantines, the
    fleet, and ``decisions``. Call before ``state.clear_dirty()``."""
    devices, deleted_devices = [], []
    for key in sorted(state.dirty_devices):
        device = state.devices.get(key)
        if device is None:
            deleted_devices.append(key)
        else:
            devices.append(device_row(device))
    nodes, deleted_nodes = [], []
    for name in sorted(state.dirty_nodes):
        node = state.nodes.get(name)
        if node is None:
            deleted_nodes.append(name)
        else:
            nodes.append(
                {
                    "node": node.node,
                    "last_heartbeat_at": node.last_renewed_at,
                    "heartbeat_lost": node.heartbeat_lost_since is not None,
                    "incident": node.incident,
                    "snapshot": node.to_json(),
                }
            )
    fleet = state.fleet
    decision_rows, command_rows = [], []
    for decision in decisions:
        decision_rows.append(decision_row(decision))
        command = command_row(decision)
        if command is not None:
            command_rows.append(command)
    quarantines = [state.touched_quarantines[k].to_row() for k in sorted(state.touched_quarantines)]
    return BatchRows(
        topic=topic,
        offset=offset,
        expected_offset=expected_offset,
        devices=_json(devices),
        deleted_devices=deleted_devices,
        nodes=_json(nodes),
        deleted_nodes=deleted_nodes,
        fleet=orjson.dumps(
            [
                {
                    "id": FLEET_ROW_ID,
                    "watermark": fleet.watermark,
                    "breaker_open": fleet.breaker_open,
                    "automation_paused": fleet.automation_paused,
                    "snapshot": fleet.to_json(),
                }
            ]
        ).decode(),
        quarantines=_json(quarantines),
        decisions=_json(decision_rows),
        commands=_json(command_rows),
        highwater=highwater,
        watermark=fleet.watermark,
    )


def active_quarantine(device: DeviceGov) -> bool:
    """Whether the device has a quarantine that is not released."""
    q = device.quarantine
    return q is not None and q.status is not QuarantineStatus.RELEASED


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
        )

    async def write(self, rows: BatchRows) -> None:
        """Write one batch in one transaction. Raises :class:`StaleGovernorState` (rolled back)
        when the topic's recorded offset is not ``rows.expected_offset``, and SQLAlchemy's
        ``DBAPIError`` family for database failures (rolled back)."""
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
            for statement, payload in (
                (sql.devices, rows.devices),
                (sql.nodes, rows.nodes),
                (sql.fleet, rows.fleet),
                (sql.quarantines, rows.quarantines),
                (sql.decisions, rows.decisions),
                (sql.commands, rows.commands),
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
