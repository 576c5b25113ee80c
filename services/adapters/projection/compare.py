"""Compare two projection schemas row by row: the check behind ``devicestate replay --verify``
(and ``--governance --verify``, over :data:`GOVERNANCE_COMPARED_TABLES`).

Replaying the same log must give identical ``devices``, ``device_history``, ``pod_tombstones``,
``pod_workloads``, ``dra_failures`` and ``pod_lifecycle_stages`` rows, and identical
inventory rows (``inventory_objects``, ``node_resources``, ``device_identities``,
``inventory_conflicts``), every column; ``partition_progress`` is left out: its ``updated_at`` is
wall-clock time. PostgreSQL finds the
differing rows (``EXCEPT ALL`` both ways, so identical schemas cost two scans and no transfer);
rows are then paired by primary key to say which columns differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Table, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.failure_tables import dra_failures
from services.adapters.projection.governance_tables import (
    device_governance,
    governance_decisions,
    governor_node_labels,
    governor_workloads,
    migration_evidence,
    quarantines,
)
from services.adapters.projection.inventory_tables import (
    device_identities,
    inventory_conflicts,
    inventory_objects,
    node_labels,
    node_resources,
)
from services.adapters.projection.lifecycle_tables import pod_lifecycle_stages
from services.adapters.projection.tables import (
    device_history,
    devices,
    pod_tombstones,
    quoted_schema,
)
from services.adapters.projection.workload_tables import pod_workloads

INVENTORY_COMPARED_TABLES: Final = (
    inventory_objects,
    node_resources,
    node_labels,  # issue 16: pools selected by node labels
    device_identities,
    inventory_conflicts,
)
"""The inventory tables the health agent maintains (issue 4)."""

COMPARED_TABLES: Final = (
    devices,
    device_history,
    pod_tombstones,
    *INVENTORY_COMPARED_TABLES,
    pod_workloads,
    dra_failures,
    pod_lifecycle_stages,  # the claim lifecycle stages (issue 16)
)
"""Tables whose rows a replay of the health topic must reproduce exactly."""

GOVERNANCE_COMPARED_TABLES: Final = (
    device_governance,
    quarantines,
    governance_decisions,
    governor_workloads,  # the migration policy's workload facts (issue 13)
    migration_evidence,  # non-recoverable migrations' evidence (issue 13 item 3)
    governor_node_labels,  # the adoption gate's node labels (issue 16)
)
"""Tables whose rows a replay of the governance topic must reproduce exactly."""

MAX_REPORTED: Final = 50
"""Differences listed per table; the rest are counted."""


def _column_list(table: Table) -> str:
    return ", ".join(f'"{c.name}"' for c in table.columns)


async def _rows_only_in(
    conn: AsyncConnection, table: Table, schema: str, other: str
) -> list[tuple[Any, ...]]:
    columns = _column_list(table)
    order = ", ".join(f'"{c.name}"' for c in table.primary_key.columns)
    sql = (
        f"SELECT {columns} FROM {quoted_schema(schema)}.{table.name} EXCEPT ALL "
        f"SELECT {columns} FROM {quoted_schema(other)}.{table.name} ORDER BY {order}"
    )
    return [tuple(row) for row in await conn.execute(text(sql))]


def _describe(table: Table, key: tuple[Any, ...]) -> str:
    names = [c.name for c in table.primary_key.columns]
    return f"{table.name} " + ", ".join(f"{n}={v!r}" for n, v in zip(names, key, strict=True))


def _table_differences(
    table: Table,
    names: tuple[str, str],
    only_a: Sequence[tuple[Any, ...]],
    only_b: Sequence[tuple[Any, ...]],
) -> list[str]:
    columns = [c.name for c in table.columns]
    key_at = [columns.index(c.name) for c in table.primary_key.columns]

    def key(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(row[i] for i in key_at)

    rows_a = {key(r): r for r in only_a}
    rows_b = {key(r): r for r in only_b}
    out: list[str] = []
    for k in sorted(rows_a.keys() | rows_b.keys()):
        a, b = rows_a.get(k), rows_b.get(k)
        if b is None:
            out.append(f"{_describe(table, k)}: only in {names[0]}")
        elif a is None:
            out.append(f"{_describe(table, k)}: only in {names[1]}")
        else:
            diffs = [
                f"{col}: {va!r} != {vb!r}"
                for col, va, vb in zip(columns, a, b, strict=True)
                if va != vb
            ]
            out.append(f"{_describe(table, k)}: " + ("; ".join(diffs) or "rows differ"))
    # EXCEPT ALL also catches duplicate rows, which share a key with an identical row.
    surplus = (len(only_a) - len(rows_a)) + (len(only_b) - len(rows_b))
    if surplus:
        out.append(f"{table.name}: {surplus} duplicated row(s) on one side")
    if len(out) > MAX_REPORTED:
        out = [*out[:MAX_REPORTED], f"{table.name}: ... and {len(out) - MAX_REPORTED} more"]
    return out


async def diff_projections(
    engine: AsyncEngine,
    schema_a: str,
    schema_b: str,
    tables: Sequence[Table] = COMPARED_TABLES,
) -> list[str]:
    """Human-readable differences between the projections in ``schema_a`` and ``schema_b``.

    Compares every column of ``tables`` (:data:`COMPARED_TABLES` by default; jsonb columns
    compare as JSON values), in primary-key order; an empty
    list means the rows are identical. At most :data:`MAX_REPORTED` lines per table, then a count.
    Raises ``ValueError`` for a schema name that is not a plain identifier, and SQLAlchemy's
    ``ProgrammingError`` when a schema lacks the tables (not migrated).
    """
    names = (schema_a, schema_b)
    out: list[str] = []
    async with engine.connect() as conn:
        for table in tables:
            only_a = await _rows_only_in(conn, table, schema_a, schema_b)
            only_b = await _rows_only_in(conn, table, schema_b, schema_a)
            out.extend(_table_differences(table, names, only_a, only_b))
    return out
