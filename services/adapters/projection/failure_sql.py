"""The batch writer's SQL for ``dra_failures`` (:mod:`services.adapters.projection.failure_tables`)
and the counts ``/metrics`` reads.

A batch's ``DRAFailureObserved`` records are reduced to one per ``sourceUID`` (the most
``occurrences``; the first of equals, log order), then written with one upsert that only ever
raises ``occurrences``: the same Event published again (a re-LIST, a watcher restart, a
redelivery) leaves the row as it was, so it is counted once. ``first_observed_at`` keeps the
earliest ``observedAt``. Rows travel as one jsonb parameter like the other batch rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.tables import quoted_schema
from services.domain.adoption.failure_events import DRAFailureObserved
from services.domain.governance.adoption_facts import FailureFact
from services.domain.log import LogPosition

_COLUMNS = (
    "source_uid, occurrences, origin, namespace, pod_name, pod_uid, node, reason, message, "
    "failure_class, why, first_observed_at, observed_at"
)
_RECORDSET = (
    "jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(source_uid text, occurrences integer, "
    "origin text, namespace text, pod_name text, pod_uid text, node text, reason text, "
    "message text, failure_class text, why text, first_observed_at timestamptz, "
    "observed_at timestamptz)"
)
_UPDATED = ", ".join(
    f"{c} = EXCLUDED.{c}" for c in _COLUMNS.split(", ")[1:] if c != "first_observed_at"
)


class FailureStatements:
    """The ``dra_failures`` upsert and count of one schema."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        self.upsert = text(
            f"INSERT INTO {s}.dra_failures AS f ({_COLUMNS}) SELECT {_COLUMNS} FROM {_RECORDSET} "
            f"ON CONFLICT (source_uid) DO UPDATE SET {_UPDATED}, "
            "first_observed_at = LEAST(f.first_observed_at, EXCLUDED.first_observed_at) "
            "WHERE EXCLUDED.occurrences > f.occurrences"
        )
        self.occurrences = text(
            f"SELECT source_uid, occurrences FROM {s}.dra_failures "
            "WHERE source_uid = ANY(CAST(:uids AS text[])) ORDER BY source_uid FOR UPDATE"
        )
        self.on_nodes = text(
            "SELECT node, observed_at, source_uid, occurrences, failure_class "
            f"FROM {s}.dra_failures WHERE node IS NOT NULL "
            "AND observed_at >= :since AND observed_at <= :until ORDER BY source_uid"
        )
        self.counts = text(
            "SELECT failure_class, reason, namespace, sum(occurrences)::bigint AS total "
            f"FROM {s}.dra_failures GROUP BY failure_class, reason, namespace "
            "ORDER BY failure_class, reason, namespace"
        )


def failure_rows(records: Iterable[DRAFailureObserved]) -> dict[str, str] | None:
    """The ``:rows`` parameter for ``records`` (log order), or ``None`` when there are none."""
    chosen: dict[str, DRAFailureObserved] = {}
    first: dict[str, DRAFailureObserved] = {}
    for r in records:
        first.setdefault(r.source_uid, r)
        kept = chosen.get(r.source_uid)
        if kept is None or r.occurrences > kept.occurrences:
            chosen[r.source_uid] = r
    rows = [
        {
            "source_uid": r.source_uid,
            "occurrences": r.occurrences,
            "origin": r.origin.value,
            "namespace": r.namespace,
            "pod_name": r.pod_name,
            "pod_uid": r.pod_uid,
            "node": r.node_name,
            "reason": r.reason,
            "message": r.message,
            "failure_class": r.failure_class.value,
            "why": r.why,
            "first_observed_at": min(first[uid].observed_at, r.observed_at),
            "observed_at": r.observed_at,
        }
        for uid, r in chosen.items()
    ]
    return {"rows": orjson.dumps(rows).decode()} if rows else None


def fresh_failure_rows(
    items: Sequence[tuple[LogPosition, DRAFailureObserved]],
    recorded: Callable[[tuple[str, int]], int | None],
) -> dict[str, str] | None:
    """:func:`failure_rows` of the records after their partition's recorded offset
    (``recorded((topic, partition))``, ``None``: nothing recorded): a redelivery is skipped."""
    fresh = []
    for position, record in items:
        through = recorded((position.topic, position.partition))
        if through is None or position.offset > through:
            fresh.append(record)
    return failure_rows(fresh)


async def projected_occurrences(
    conn: AsyncConnection, sql: FailureStatements, uids: Iterable[str]
) -> dict[str, int]:
    """``sourceUID`` -> the ``occurrences`` the projection holds now, for ``uids`` (absent: no
    row). The rows are locked until the transaction ends, so two workers raising one source's
    count forward one increase each, never the same one twice."""
    wanted = sorted(set(uids))
    if not wanted:
        return {}
    rows = await conn.execute(sql.occurrences, {"uids": wanted})
    return {r[0]: int(r[1]) for r in rows}


async def write_failures(
    conn: AsyncConnection, sql: FailureStatements, rows: dict[str, str] | None
) -> None:
    """Upsert ``rows`` (:func:`failure_rows`); nothing for ``None``."""
    if rows is not None:
        await conn.execute(sql.upsert, rows)


@dataclass(frozen=True, slots=True)
class FailureCount:
    """How many times failures of ``failure_class`` with ``reason`` happened in ``namespace``."""

    failure_class: str
    reason: str
    namespace: str
    total: int


class FailureReads:
    """The counts of ``dra_failures`` in schema ``schema`` through ``engine``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._sql = FailureStatements(schema)

    async def counts(self) -> list[FailureCount]:
        """Occurrences summed per class, reason and namespace (SQLAlchemy's ``DBAPIError``
        family when the database fails, or the table does not exist yet)."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(self._sql.counts)
            return [FailureCount(r[0], r[1], r[2], int(r[3])) for r in rows]

    async def on_nodes(self, since: datetime, until: datetime) -> list[FailureFact]:
        """The failures with a node last observed in ``[since, until]`` (UTC), as the gate's
        facts: each source once, all its ``occurrences`` at its last observation (the API's
        on-read view; the governor counts each increase at its own time). SQLAlchemy's
        ``DBAPIError`` family when the database fails."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(self._sql.on_nodes, {"since": since, "until": until})
            return [FailureFact(r[0], r[1], r[2], int(r[3]), int(r[3]), r[4]) for r in rows]
