"""The batch writer's SQL for ``pod_lifecycle_stages`` (:mod:`.lifecycle_tables`).

A batch's ``PodLifecycleObserved`` records become rows in log order; the first row of each key
(Pod UID, stage, device class, path, claim UID) is kept, in the batch (:func:`lifecycle_rows`)
and against the table (``ON CONFLICT DO NOTHING``): a Pod published again (a second watcher, a
redelivery) writes nothing, so replay and any batch split give the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from services.adapters.projection.tables import quoted_schema
from services.domain.lifecycle_events import PodLifecycleObserved
from services.domain.log import LogPosition

_COLUMNS = (
    "pod_uid, stage, device_class, path, claim_uid, node, namespace, pod_name, observed_at, seconds"
)
_RECORDSET = (
    "jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(pod_uid text, stage text, device_class text, "
    "path text, claim_uid text, node text, namespace text, pod_name text, "
    "observed_at timestamptz, seconds double precision)"
)


class LifecycleStatements:
    """The ``pod_lifecycle_stages`` insert of one schema (first wins)."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        self.insert = text(
            f"INSERT INTO {s}.pod_lifecycle_stages ({_COLUMNS}) "
            f"SELECT {_COLUMNS} FROM {_RECORDSET} ON CONFLICT DO NOTHING"
        )


def lifecycle_rows(records: Iterable[PodLifecycleObserved]) -> dict[str, str] | None:
    """The ``:rows`` parameter for ``records`` (log order, first of each key kept), or ``None``."""
    rows: dict[tuple[str, str, str, str, str], dict[str, object]] = {}
    for r in records:
        for s in r.stages:
            key = (r.pod_uid, s.stage.value, s.device_class, s.path.value, s.claim_uid)
            rows.setdefault(
                key,
                {
                    "pod_uid": r.pod_uid,
                    "stage": s.stage.value,
                    "device_class": s.device_class,
                    "path": s.path.value,
                    "claim_uid": s.claim_uid,
                    "node": r.node,
                    "namespace": r.namespace,
                    "pod_name": r.pod_name,
                    "observed_at": r.observed_at,
                    "seconds": s.seconds,
                },
            )
    return {"rows": orjson.dumps(list(rows.values())).decode()} if rows else None


def fresh_lifecycle_rows(
    items: Sequence[tuple[LogPosition, PodLifecycleObserved]],
    recorded: Callable[[tuple[str, int]], int | None],
) -> dict[str, str] | None:
    """:func:`lifecycle_rows` of the records after their partition's recorded offset
    (``recorded((topic, partition))``, ``None``: nothing recorded): a redelivery is skipped."""
    fresh = []
    for position, record in items:
        through = recorded((position.topic, position.partition))
        if through is None or position.offset > through:
            fresh.append(record)
    return lifecycle_rows(fresh)


async def write_lifecycles(
    conn: AsyncConnection, sql: LifecycleStatements, rows: dict[str, str] | None
) -> None:
    """Insert ``rows`` (:func:`lifecycle_rows`); nothing for ``None``."""
    if rows is not None:
        await conn.execute(sql.insert, rows)
