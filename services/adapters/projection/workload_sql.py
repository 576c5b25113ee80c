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
from services.domain.directory import DeviceKey
from services.domain.inventory.identity import IdentityStatus
from services.domain.log import LogPosition
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.fold import latest_per_pod
from services.domain.workloads.migration import MigrationSource
from services.domain.workloads.on_device import WorkloadFacts

_NAMED_BY_DEVICE_ID = frozenset({IdentityStatus.RESOLVED.value, IdentityStatus.REPORTED.value})

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
    """The ``pod_workloads`` upsert of one schema, and the reads of the ``WorkloadOnDevice``
    derivation (:mod:`services.domain.workloads.on_device`): the stored facts of some Pods, and
    the governor's name of some devices (``device_identities``)."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        self.facts = text(
            "SELECT pod_uid, namespace, pod_name, workload_uid, migration_class, "
            "migration_source, checkpoint_max_age_seconds, shard, status_version "
            f"FROM {s}.pod_workloads WHERE pod_uid = ANY(CAST(:uids AS text[]))"
        )
        self.names = text(
            "SELECT i.node, i.resource_id, i.device_id, i.status FROM unnest("
            "CAST(:nodes AS text[]), CAST(:ids AS text[])) AS k(node, resource_id) "
            f"JOIN {s}.device_identities AS i "
            "ON i.node = k.node AND i.resource_id = k.resource_id"
        )
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


async def stored_facts(
    conn: AsyncConnection, sql: WorkloadStatements, pod_uids: Iterable[str]
) -> dict[str, WorkloadFacts]:
    """The :class:`WorkloadFacts` of the ``pod_workloads`` rows of ``pod_uids``, by Pod UID."""
    uids = sorted(set(pod_uids))
    if not uids:
        return {}
    result = await conn.execute(sql.facts, {"uids": uids})
    out = {}
    for uid, ns, name, workload, cls, source, age, shard, version in result:
        out[uid] = WorkloadFacts(
            pod_uid=uid,
            namespace=ns,
            pod_name=name,
            workload_uid=workload,
            migration_class=None if source == MigrationSource.DEFAULT.value else cls,
            checkpoint_max_age_seconds=age,
            shard=shard,
            status_version=None if version is None else int(version),
        )
    return out


async def governed_names(
    conn: AsyncConnection, sql: WorkloadStatements, keys: Iterable[DeviceKey]
) -> dict[DeviceKey, str]:
    """The governor's name of each of ``keys`` that has an identity row: its ``device_id`` when
    resolved or as reported (as ``HealthTransition.device_id``), else the reported
    resourceID."""
    ordered = sorted(set(keys))
    if not ordered:
        return {}
    params = {"nodes": [n for n, _ in ordered], "ids": [i for _, i in ordered]}
    result = await conn.execute(sql.names, params)
    return {
        (node, rid): device_id if status in _NAMED_BY_DEVICE_ID else rid
        for node, rid, device_id, status in result
    }
