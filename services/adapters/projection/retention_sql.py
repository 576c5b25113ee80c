"""The retention statements of the projection (issue 11 item 9, :mod:`services.domain.retention`
and :mod:`services.domain.inventory.expiry`): ``device_history`` rows past their partition's
horizon, the identity rows of forgotten claim aliases, cleared conflicts past the window, and
which lapsed aliases a ``devices`` row still holds. Also what a batch tells the inventory fold
about event time: each applied observation's running maximum, and each partition's watermark and
last position after the batch. Parameters travel as arrays, as in
:mod:`services.adapters.projection.batch_sql`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from services.adapters.projection.tables import quoted_schema
from services.domain.event_time import effective_times
from services.domain.inventory.expiry import CONFLICT_RETENTION
from services.domain.log import LoggedEvent, LogPosition
from services.domain.retention import history_horizon

Partition = tuple[str, int]
Alias = tuple[str, str]


class RetentionStatements:
    """The retention SQL for one schema (schema names cannot be bind parameters)."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        self.prune_history = text(
            f"DELETE FROM {s}.device_history AS h USING unnest(CAST(:topic AS text[]), "
            "CAST(:partition AS integer[]), CAST(:horizon AS timestamptz[])) "
            'AS w(topic, "partition", horizon) WHERE h.topic = w.topic '
            'AND h."partition" = w."partition" AND h.observed_at < w.horizon'
        )
        self.forget_identities = text(
            f"DELETE FROM {s}.device_identities AS d USING unnest(CAST(:nodes AS text[]), "
            "CAST(:ids AS text[])) AS f(node, resource_id) "
            "WHERE d.node = f.node AND d.resource_id = f.resource_id"
        )
        # services.domain.inventory.expiry.conflicts_kept: relative to the log's newest event
        # time, which never decreases, so the rows kept do not depend on how the log was split
        # into batches (run after the batch's progress is written).
        self.prune_conflicts = text(
            f"DELETE FROM {s}.inventory_conflicts WHERE NOT active AND last_seen < "
            f"(SELECT max(last_event_at) FROM {s}.partition_progress) - "
            "make_interval(secs => :retention_seconds)"
        )
        self.allocated = text(
            f"SELECT v.node, v.resource_id FROM {s}.devices AS v JOIN unnest("
            "CAST(:nodes AS text[]), CAST(:ids AS text[])) AS f(node, resource_id) "
            "ON v.node = f.node AND v.resource_id = f.resource_id "
            "WHERE v.allocations <> '[]'::jsonb"
        )


def _aliases(aliases: Iterable[Alias]) -> dict[str, list[str]]:
    ordered = sorted(aliases)
    return {"nodes": [n for n, _ in ordered], "ids": [i for _, i in ordered]}


async def prune_history(
    conn: AsyncConnection,
    sql: RetentionStatements,
    watermarks: Mapping[Partition, datetime],
    retention_seconds: float,
) -> None:
    """Delete the ``device_history`` rows of each partition of ``watermarks`` observed more than
    ``retention_seconds`` before its watermark (nothing with a retention of 0)."""
    parts = sorted(watermarks)
    horizons = [history_horizon(watermarks[p], retention_seconds) for p in parts]
    if not parts or horizons[0] is None:
        return
    await conn.execute(
        sql.prune_history,
        {"topic": [t for t, _ in parts], "partition": [p for _, p in parts], "horizon": horizons},
    )


async def forget_identities(
    conn: AsyncConnection, sql: RetentionStatements, aliases: Iterable[Alias]
) -> None:
    """Delete the identity rows of ``aliases`` (forgotten claim aliases)."""
    params = _aliases(aliases)
    if params["nodes"]:
        await conn.execute(sql.forget_identities, params)


async def prune_conflicts(conn: AsyncConnection, sql: RetentionStatements) -> None:
    """Delete the cleared conflicts older than the window before the log's newest event time
    (the highest ``partition_progress.last_event_at``: write the batch's progress first)."""
    await conn.execute(
        sql.prune_conflicts, {"retention_seconds": CONFLICT_RETENTION.total_seconds()}
    )


async def allocated_aliases(
    conn: AsyncConnection, sql: RetentionStatements, aliases: Sequence[Alias]
) -> set[Alias]:
    """Those of ``aliases`` whose ``devices`` row holds an allocation (as written so far in the
    caller's transaction)."""
    if not aliases:
        return set()
    return {(n, r) for n, r in await conn.execute(sql.allocated, _aliases(aliases))}


def batch_event_times(
    records: Sequence[LoggedEvent],
    event_times: Iterable[tuple[LogPosition, datetime]],
    before: Mapping[Partition, datetime],
) -> tuple[dict[LogPosition, datetime], dict[Partition, datetime], dict[Partition, LogPosition]]:
    """``(times, watermarks, last)`` of a batch's fresh ``records`` and ``event_times`` (a record
    in both counts at the time given there, as ``partition_progress`` counts it): each position's
    running maximum along its partition from ``before`` (each partition's recorded
    ``last_event_at``), each partition's watermark after the batch, and its last position."""
    given = dict(event_times)
    pairs = [(r.position, given.pop(r.position, r.event.observed_at)) for r in records]
    pairs.extend(given.items())
    times = effective_times(pairs, before)
    watermarks: dict[Partition, datetime] = {}
    last: dict[Partition, LogPosition] = {}
    for position, at in times.items():
        part = (position.topic, position.partition)
        if part not in watermarks or at > watermarks[part]:
            watermarks[part] = at
        if part not in last or position.offset > last[part].offset:
            last[part] = position
    return times, watermarks, last
