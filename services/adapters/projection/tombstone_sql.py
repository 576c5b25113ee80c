"""The ``pod_tombstones`` statements of the batch writer (issue 11 item 7,
:mod:`services.domain.tombstones`): load the tombstones of a batch's observed Pods, upsert the
ones the batch leaves, and apply the retention. Rows travel as one jsonb parameter, as in
:mod:`services.adapters.projection.batch_sql`; status versions as decimal strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from services.adapters.projection.tables import quoted_schema
from services.domain.tombstones import TOMBSTONE_RETENTION, Tombstone


class TombstoneStatements:
    """The tombstone SQL for one schema (schema names cannot be bind parameters)."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        self.load = text(
            f"SELECT t.pod_uid, t.node, t.status_version, t.released_at FROM {s}.pod_tombstones "
            "AS t WHERE t.pod_uid = ANY(CAST(:uids AS text[])) ORDER BY t.pod_uid FOR UPDATE"
        )
        # The guard is services.domain.tombstones.later: the higher key, then the later time.
        self.upsert = text(
            f"INSERT INTO {s}.pod_tombstones AS t (pod_uid, node, status_version, released_at) "
            "SELECT u.pod_uid, u.node, u.status_version, u.released_at FROM "
            "jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(pod_uid text, node text, "
            "status_version numeric, released_at timestamptz) "
            "ON CONFLICT (pod_uid) DO UPDATE SET node = EXCLUDED.node, "
            "status_version = EXCLUDED.status_version, released_at = EXCLUDED.released_at "
            "WHERE (COALESCE(EXCLUDED.status_version, 0), EXCLUDED.released_at) > "
            "(COALESCE(t.status_version, 0), t.released_at)"
        )
        # Retention (services.domain.tombstones.retained): relative to the newest tombstone,
        # so the rows kept do not depend on how the log was split into batches.
        self.purge = text(
            f"DELETE FROM {s}.pod_tombstones WHERE released_at < "
            f"(SELECT max(released_at) FROM {s}.pod_tombstones) - "
            "make_interval(secs => :retention_seconds)"
        )


def tombstone_rows(tombstones: Iterable[Tombstone]) -> dict[str, str]:
    """The ``:rows`` parameter of the upsert: one object per tombstone."""
    rows = [
        {
            "pod_uid": t.pod_uid,
            "node": t.node,
            "status_version": None if t.status_version is None else str(t.status_version),
            "released_at": t.released_at,
        }
        for t in tombstones
    ]
    return {"rows": orjson.dumps(rows).decode()}


async def load_tombstones(
    conn: AsyncConnection, sql: TombstoneStatements, uids: Iterable[str]
) -> dict[str, Tombstone]:
    """The tombstones of ``uids`` (by Pod UID; rows locked until commit)."""
    wanted = sorted(set(uids))
    if not wanted:
        return {}
    found: dict[str, Tombstone] = {}
    for uid, node, version, released_at in await conn.execute(sql.load, {"uids": wanted}):
        found[uid] = Tombstone(uid, node, None if version is None else int(version), released_at)
    return found


async def write_tombstones(
    conn: AsyncConnection, sql: TombstoneStatements, tombstones: Mapping[str, Tombstone]
) -> None:
    """Upsert ``tombstones`` (by Pod UID), then drop those past the retention; nothing to do
    without any."""
    if not tombstones:
        return
    await conn.execute(sql.upsert, tombstone_rows(tombstones[uid] for uid in sorted(tombstones)))
    await conn.execute(sql.purge, {"retention_seconds": TOMBSTONE_RETENTION.total_seconds()})
