"""A batch's device and history rows by binary COPY into session temporary tables, then one merge.

The batch writer's two largest row sets (the observed devices and the history rows) travel as
asyncpg binary ``COPY`` (``copy_records_to_table``, tuples encoded by asyncpg's codecs: no JSON
for PostgreSQL to parse, no per-row SQLAlchemy work) into two temporary tables of the session
(``ON COMMIT DELETE ROWS``: each transaction starts them empty; created on first use per
connection). One statement then merges both into the schema's tables, with the same
``ON CONFLICT`` clauses as before: the version guard on ``devices``, ``DO NOTHING`` on
``device_history`` (keyed by log position). Rows are tuples in the stage tables' column order
(:data:`DEVICE_STAGE_COLUMNS`, :data:`HISTORY_STAGE_COLUMNS`); status versions are decimal
text (cast to ``NUMERIC`` in the merge), times aware ``datetime``, ``allocations`` JSON text,
``flags`` a ``text[]`` literal.

The raw asyncpg connection is reached through SQLAlchemy's ``AsyncConnection.get_raw_connection()``
inside the caller's transaction; a driver error of the ``COPY`` is raised as SQLAlchemy's
``DBAPIError`` wrapping asyncpg's error (its ``sqlstate`` kept), as every other statement's is,
so :mod:`services.adapters.projection.errors` classifies it the same way (a refused value is
class 22/23 whichever path carried it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import orjson
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from services.adapters.projection.batch_plan import BatchPlan
from services.adapters.projection.rows import allocation_to_json
from services.adapters.projection.tables import quoted_schema
from services.domain.directory import Allocation, DeviceRecord, Outcome
from services.domain.events import DeviceHealthObserved, PodsListed

DEVICE_STAGE: Final = "devicestate_stage_devices"
HISTORY_STAGE: Final = "devicestate_stage_history"
DEVICE_STAGE_COLUMNS: Final = (
    "node",
    "resource_id",
    "resource_name",
    "source",
    "health",
    "raw_health",
    "message",
    "status_version",
    "last_observed_at",
    "last_transition_at",
    "allocations",
    "flags",
)
HISTORY_STAGE_COLUMNS: Final = (
    "topic",
    "partition",
    "offset",
    "node",
    "resource_id",
    "kind",
    "health",
    "status_version",
    "observed_at",
    "transition",
    "pod_uid",
    "namespace",
    "pod_name",
    "message",
    "raw_health",
    "frozen",
)
_CREATE_STAGES: Final = (
    f"CREATE TEMP TABLE IF NOT EXISTS {DEVICE_STAGE} (node text, resource_id text, "
    "resource_name text, source text, health text, raw_health text, message text, "
    "status_version text, last_observed_at timestamptz, last_transition_at timestamptz, "
    "allocations jsonb, flags text) ON COMMIT DELETE ROWS; "
    f'CREATE TEMP TABLE IF NOT EXISTS {HISTORY_STAGE} (topic text, "partition" integer, '
    '"offset" bigint, node text, resource_id text, kind text, health text, '
    "status_version text, observed_at timestamptz, transition boolean, pod_uid text, "
    "namespace text, pod_name text, message text, raw_health text, frozen boolean) "
    "ON COMMIT DELETE ROWS"
)
_HISTORY_COLUMNS = ", ".join(f'"{c}"' for c in HISTORY_STAGE_COLUMNS)
_HISTORY_VALUES = _HISTORY_COLUMNS.replace('"status_version"', 'CAST("status_version" AS numeric)')


class CopyStatements:
    """The merge statements of one schema (schema names cannot be bind parameters)."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        upsert = (
            f"INSERT INTO {s}.devices AS d (node, resource_id, resource_name, source, health, "
            "raw_health, message, status_version, ordered, last_observed_at, last_transition_at, "
            "allocations, flags) "
            "SELECT u.node, u.resource_id, u.resource_name, u.source, u.health, u.raw_health, "
            "u.message, CAST(u.status_version AS numeric), u.status_version IS NOT NULL, "
            "u.last_observed_at, u.last_transition_at, u.allocations, CAST(u.flags AS text[]) "
            f"FROM pg_temp.{DEVICE_STAGE} AS u "
            "ON CONFLICT (node, resource_id) DO UPDATE SET "
            "resource_name = EXCLUDED.resource_name, source = EXCLUDED.source, "
            "health = EXCLUDED.health, raw_health = EXCLUDED.raw_health, "
            "message = EXCLUDED.message, status_version = EXCLUDED.status_version, "
            "ordered = EXCLUDED.ordered, last_observed_at = EXCLUDED.last_observed_at, "
            "last_transition_at = EXCLUDED.last_transition_at, "
            "allocations = EXCLUDED.allocations, flags = EXCLUDED.flags "
            # Version guard: an observation overwrites only an older (or unordered) state.
            "WHERE COALESCE(d.status_version, 0) < COALESCE(EXCLUDED.status_version, 0)"
        )
        history = (
            f"INSERT INTO {s}.device_history ({_HISTORY_COLUMNS}) "
            f"SELECT {_HISTORY_VALUES} FROM pg_temp.{HISTORY_STAGE} ON CONFLICT DO NOTHING"
        )
        self.merge_both = text(
            f"WITH h AS ({history}), w AS ({upsert} RETURNING 1) SELECT count(*) FROM w"
        )
        self.merge_devices = text(f"WITH w AS ({upsert} RETURNING 1) SELECT count(*) FROM w")
        self.merge_history = text(history)


async def _driver(conn: AsyncConnection) -> Any:
    """The asyncpg connection under ``conn``, inside ``conn``'s transaction (SQLAlchemy's adapter
    begins the driver's transaction with the first statement: one is run if none has been)."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    if driver is None:
        raise RuntimeError("batch_copy: the connection has no driver connection")
    if not driver.is_in_transaction():
        await conn.execute(text("SELECT 1"))
    return driver


async def _copy(
    driver: Any, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]
) -> None:
    try:
        await driver.copy_records_to_table(table, records=rows, columns=columns)
    except Exception as exc:  # the driver's own errors: wrapped as SQLAlchemy's would be
        if isinstance(exc, sa_exc.SQLAlchemyError):
            raise
        raise sa_exc.DBAPIError.instance(
            f"COPY {table} FROM STDIN (FORMAT binary)", None, exc, Exception
        ) from exc


async def write_rows(
    conn: AsyncConnection,
    sql: CopyStatements,
    devices: list[tuple[Any, ...]] | None,
    history: list[tuple[Any, ...]] | None,
) -> int:
    """COPY ``devices`` (observed device rows, :func:`device_tuples`) and ``history``
    (:func:`history_tuples`) into the stage tables and merge them in one statement; return how
    many device rows the version guard let through (inserted or updated). Raises SQLAlchemy's
    ``DBAPIError`` family for database failures (the caller's transaction then rolls back)."""
    if not devices and not history:
        return 0
    driver = await _driver(conn)
    await driver.execute(_CREATE_STAGES)
    if devices:
        await _copy(driver, DEVICE_STAGE, DEVICE_STAGE_COLUMNS, devices)
    if history:
        await _copy(driver, HISTORY_STAGE, HISTORY_STAGE_COLUMNS, history)
    if devices and history:
        return int((await conn.execute(sql.merge_both)).scalar_one())
    if devices:
        return int((await conn.execute(sql.merge_devices)).scalar_one())
    await conn.execute(sql.merge_history)
    return 0


def _allocations_json(allocations: tuple[Allocation, ...]) -> str:
    return orjson.dumps([allocation_to_json(a) for a in allocations]).decode()


def array_literal(values: Sequence[str]) -> str:
    """``values`` as a PostgreSQL ``text[]`` literal (every element double-quoted, ``"`` and
    ``\\`` backslash-escaped), which ``CAST(... AS text[])`` reads back exactly."""
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def device_tuples(records: Iterable[DeviceRecord]) -> list[tuple[Any, ...]]:
    """The stage rows of ``records`` (:data:`DEVICE_STAGE_COLUMNS` order). Status versions travel
    as decimal text and flags as an array literal (asyncpg's binary ``numeric`` and array
    encoders cost ten times a text value's; PostgreSQL casts them in the merge). A Pod's devices
    share one allocations value: it is encoded once per batch, as is each distinct flag set."""
    encoded: dict[tuple[Allocation, ...], str] = {}
    literals: dict[tuple[str, ...], str] = {}
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    last: tuple[Allocation, ...] = ()
    json = "[]"
    for r in records:
        allocations = r.allocations
        # The devices of one Pod change hold the same Allocation object (batch_plan): told by
        # identity, without hashing the allocations.
        if allocations is not last and not (
            len(allocations) == 1 and len(last) == 1 and allocations[0] is last[0]
        ):
            found = encoded.get(allocations)
            if found is None:
                found = encoded[allocations] = _allocations_json(allocations)
            json, last = found, allocations
        flags = literals.get(r.flags)
        if flags is None:
            flags = literals[r.flags] = array_literal(r.flags)
        version = r.status_version
        append(
            (
                r.node,
                r.resource_id,
                r.resource_name,
                r.source.value,
                r.health.value,
                r.raw_health,
                r.message,
                None if version is None else str(version),
                r.last_observed_at,
                r.last_transition_at,
                json,
                flags,
            )
        )
    return rows


def history_tuples(plan: BatchPlan) -> list[tuple[Any, ...]]:
    """The stage rows of the plan's history (:data:`HISTORY_STAGE_COLUMNS` order), one per change,
    the same values as the JSON rows of :func:`~services.adapters.projection.batch_sql.history_rows`."""
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    frozen_outcome = Outcome.FROZEN
    for position, change, event in plan.history:
        frozen = change.outcome is frozen_outcome
        message = raw_health = None
        health = change.record.health
        kind = "released"
        if isinstance(event, DeviceHealthObserved):
            kind, message, raw_health = "observed", event.message, event.raw_health
            if frozen:  # a frozen Healthy leaves the device as it was: its row keeps what it said
                health = event.health
        if isinstance(event, PodsListed):
            # A snapshot has no Pod of its own: the row names the Pod(s) it released.
            gone = change.released
            pod_uid = ",".join(a.pod_uid for a in gone)
            namespace = ",".join(dict.fromkeys(a.namespace for a in gone))
            pod_name = ",".join(a.pod_name for a in gone)
        else:
            pod_uid, namespace, pod_name = event.pod_uid, event.namespace, event.pod_name
        key = change.key
        version = event.status_version
        append(
            (
                position.topic,
                position.partition,
                position.offset,
                key[0],
                key[1],
                kind,
                health.value,
                None if version is None else str(version),
                event.observed_at,
                change.transition,
                pod_uid,
                namespace,
                pod_name,
                message,
                raw_health,
                frozen,
            )
        )
    return rows
