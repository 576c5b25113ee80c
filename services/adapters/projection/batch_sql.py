"""The batch writer's SQL and the rows it sends: one set-based statement per table (the observed
devices and the history rows go by COPY instead, :mod:`services.adapters.projection.batch_copy`).

Batch rows here travel as ONE jsonb parameter (an array of objects, encoded by orjson) expanded with
``jsonb_to_recordset``: far cheaper on the client than a dozen typed arrays, and nested values
(allocations, flags) need no second encoding. Status versions travel as decimal strings (JSON
numbers lose precision above 2**53 in many parsers; PostgreSQL reads them into NUMERIC exactly).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from sqlalchemy import text

from services.adapters.projection.rows import allocation_to_json
from services.adapters.projection.tables import quoted_schema
from services.domain.directory import DeviceRecord

_DEVICE_RECORDSET = (
    "jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(node text, resource_id text, "
    "resource_name text, source text, health text, raw_health text, message text, "
    "status_version numeric, last_observed_at timestamptz, last_transition_at timestamptz, "
    "allocations jsonb, flags text[])"
)
# One lateral index probe per key (or per released Pod), whatever the planner's statistics say
# about a young table; keys are sorted, so rows are locked in key order.
_LOCKED_DEVICE = (
    "SELECT d.node, d.resource_id, d.resource_name, d.source, d.health, d.raw_health, "
    "d.message, d.status_version, d.ordered, d.last_observed_at, d.last_transition_at, "
    "d.allocations::text, d.flags FROM {s}.devices AS d WHERE {where} FOR UPDATE"
)


class BatchStatements:
    """The write path's SQL for one schema (schema names cannot be bind parameters)."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        by_key = _LOCKED_DEVICE.format(s=s, where="d.node = k.node AND d.resource_id = k.id")
        self.lock_by_key = text(
            "SELECT x.* FROM unnest(CAST(:nodes AS text[]), CAST(:ids AS text[])) AS k(node, id) "
            f"CROSS JOIN LATERAL ({by_key}) AS x"
        )
        by_pod = _LOCKED_DEVICE.format(
            s=s,
            where="d.node = k.node AND d.allocations @> "
            "jsonb_build_array(jsonb_build_object('podUID', k.pod_uid))",
        )
        self.lock_by_pod = text(
            "SELECT x.* FROM unnest(CAST(:nodes AS text[]), CAST(:pods AS text[])) "
            f"AS k(node, pod_uid) CROSS JOIN LATERAL ({by_pod}) AS x"
        )
        # The device ceiling's counts (one index range scan of the primary key per node).
        self.count_by_node = text(
            f"SELECT node, count(*) FROM {s}.devices WHERE node = ANY(CAST(:nodes AS text[])) "
            "GROUP BY node"
        )
        by_node = _LOCKED_DEVICE.format(
            s=s, where="d.node = k.node AND d.allocations <> CAST('[]' AS jsonb)"
        )
        self.lock_by_node = text(
            "SELECT x.* FROM unnest(CAST(:nodes AS text[])) AS k(node) "
            f"CROSS JOIN LATERAL ({by_node}) AS x"
        )
        # A release changes allocations only, of the state the fold saw (same status_version).
        self.update_released = text(
            f"UPDATE {s}.devices AS d SET allocations = u.allocations FROM {_DEVICE_RECORDSET} "
            "WHERE d.node = u.node AND d.resource_id = u.resource_id "
            "AND d.status_version IS NOT DISTINCT FROM u.status_version"
        )
        self.lock_progress = text(
            f'SELECT p.topic, p."partition", p."offset", p.last_event_at '
            f"FROM {s}.partition_progress AS p "
            "JOIN unnest(CAST(:topic AS text[]), CAST(:partition AS integer[])) "
            'AS u(topic, "partition") ON p.topic = u.topic AND p."partition" = u."partition" '
            'ORDER BY p.topic, p."partition" FOR UPDATE OF p'
        )
        self.upsert_progress = text(
            f'INSERT INTO {s}.partition_progress AS p (topic, "partition", "offset", highwater, '
            "last_event_at, updated_at) SELECT u.*, now() FROM unnest("
            "CAST(:topic AS text[]), CAST(:partition AS integer[]), CAST(:offset AS bigint[]), "
            "CAST(:highwater AS bigint[]), CAST(:last_event_at AS timestamptz[])) "
            'AS u(topic, "partition", "offset", highwater, last_event_at) '
            'ON CONFLICT (topic, "partition") DO UPDATE SET '
            '"offset" = GREATEST(p."offset", EXCLUDED."offset"), '
            "highwater = GREATEST(p.highwater, EXCLUDED.highwater), "
            "last_event_at = GREATEST(p.last_event_at, EXCLUDED.last_event_at), "
            "updated_at = EXCLUDED.updated_at"
        )


def _json_rows(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {"rows": orjson.dumps(rows).decode()}


# The row builders below hand orjson the enum members themselves: it writes a StrEnum member as
# its value, the same JSON text as ``.value`` without the property lookup per field.


def device_rows(records: Iterable[DeviceRecord]) -> dict[str, str]:
    """The ``:rows`` parameter of the device statements: one object per record."""
    return _json_rows(
        [
            {
                "node": r.node,
                "resource_id": r.resource_id,
                "resource_name": r.resource_name,
                "source": r.source,
                "health": r.health,
                "raw_health": r.raw_health,
                "message": r.message,
                "status_version": None if r.status_version is None else str(r.status_version),
                "last_observed_at": r.last_observed_at,
                "last_transition_at": r.last_transition_at,
                "allocations": [allocation_to_json(a) for a in r.allocations],
                "flags": r.flags,
            }
            for r in records
        ]
    )
