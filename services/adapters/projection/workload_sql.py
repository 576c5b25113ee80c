"""The batch writer's SQL for ``pod_workloads`` (:mod:`services.adapters.projection.workload_tables`).

A batch's ``PodWorkloadObserved`` records are first reduced to one per Pod UID
(:func:`~services.domain.workloads.fold.latest_per_pod`), then written with one guarded upsert
whose ``WHERE`` is :func:`~services.domain.workloads.fold.supersedes` in SQL: the row changes only
for a newer comparable ``statusVersion``, or when the stored one is unordered. Rows travel as one
jsonb parameter like the other batch rows (:mod:`services.adapters.projection.batch_sql`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from services.adapters.projection.tables import quoted_schema
from services.domain.log import LogPosition
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.fold import latest_per_pod

_COLUMNS = (
    "pod_uid, node, namespace, pod_name, status_version, observed_at, workload_kind, "
    "workload_name, workload_uid, chain, chain_complete, chain_reason, migration_class, "
    "migration_source, checkpoint_max_age_seconds, shard, migration_reasons"
)
_RECORDSET = (
    "jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(pod_uid text, node text, namespace text, "
    "pod_name text, status_version numeric, observed_at timestamptz, workload_kind text, "
    "workload_name text, workload_uid text, chain jsonb, chain_complete boolean, "
    "chain_reason text, migration_class text, migration_source text, "
    "checkpoint_max_age_seconds integer, shard text, migration_reasons jsonb)"
)
_UPDATED = ", ".join(f"{c} = EXCLUDED.{c}" for c in _COLUMNS.split(", ")[1:])


class WorkloadStatements:
    """The ``pod_workloads`` upsert of one schema."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        self.upsert = text(
            f"INSERT INTO {s}.pod_workloads AS w ({_COLUMNS}) SELECT {_COLUMNS} FROM {_RECORDSET} "
            f"ON CONFLICT (pod_uid) DO UPDATE SET {_UPDATED} "
            "WHERE w.status_version IS NULL OR (EXCLUDED.status_version IS NOT NULL "
            "AND EXCLUDED.status_version > w.status_version)"
        )


def workload_rows(records: Iterable[PodWorkloadObserved]) -> dict[str, str] | None:
    """The ``:rows`` parameter for ``records`` (log order), or ``None`` when there are none."""
    rows = []
    for r in latest_per_pod(records):
        top = r.workload
        rows.append(
            {
                "pod_uid": r.pod_uid,
                "node": r.node,
                "namespace": r.namespace,
                "pod_name": r.pod_name,
                "status_version": None if r.status_version is None else str(r.status_version),
                "observed_at": r.observed_at,
                "workload_kind": r.workload_kind,
                "workload_name": r.pod_name if top is None else top.name,
                "workload_uid": r.pod_uid if top is None else top.uid,
                "chain": [
                    {"kind": c.kind, "name": c.name, "uid": c.uid, "apiVersion": c.api_version}
                    for c in r.chain
                ],
                "chain_complete": r.chain_complete,
                "chain_reason": r.chain_reason,
                "migration_class": r.migration_class.value,
                "migration_source": r.migration_source.value,
                "checkpoint_max_age_seconds": r.checkpoint_max_age_seconds,
                "shard": r.shard,
                "migration_reasons": list(r.migration_reasons),
            }
        )
    return {"rows": orjson.dumps(rows).decode()} if rows else None


def fresh_rows(
    items: Sequence[tuple[LogPosition, PodWorkloadObserved]],
    recorded: Callable[[tuple[str, int]], int | None],
) -> dict[str, str] | None:
    """:func:`workload_rows` of the records after their partition's recorded offset
    (``recorded((topic, partition))``, ``None``: nothing recorded): a redelivery is skipped."""
    fresh = []
    for position, record in items:
        through = recorded((position.topic, position.partition))
        if through is None or position.offset > through:
            fresh.append(record)
    return workload_rows(fresh)


async def write_workloads(
    conn: AsyncConnection, sql: WorkloadStatements, rows: dict[str, str] | None
) -> None:
    """Upsert ``rows`` (:func:`workload_rows`); nothing for ``None``."""
    if rows is not None:
        await conn.execute(sql.upsert, rows)
