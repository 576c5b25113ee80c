"""Schema administration of the projection for the replay: name, find, drop and empty schemas,
and set aside the secondary indexes while a new schema is filled.

Schema names are plain identifiers (:func:`~services.adapters.projection.tables.check_schema_name`);
every function runs in its own transaction (or read) on ``engine`` and raises SQLAlchemy's
``DBAPIError`` family for database failures.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.tables import quoted_schema

REPLAY_SCHEMA_PREFIX: Final = "replay_"
"""Prefix of the schemas :func:`next_replay_schema` names."""
_REPLAY_SCHEMA: Final = re.compile(r"^replay_(\d+)$")

DEFERRED_INDEX_TABLES: Final = (
    "devices",
    "device_history",
    "pod_tombstones",
    "inventory_objects",
    "device_identities",
    "inventory_conflicts",
    "pod_workloads",
    "dra_failures",
)
"""Tables whose secondary indexes a replay into a new schema builds at the end."""
HEALTH_TABLES: Final = (
    "devices",
    "device_history",
    "inventory_objects",
    "node_resources",
    "node_labels",
    "device_identities",
    "inventory_conflicts",
    "pod_workloads",
    "dra_failures",
)
"""Tables built from the health topic (what an in-place replay truncates and rebuilds)."""


async def next_replay_schema(engine: AsyncEngine) -> str:
    """``replay_<n>`` with ``n`` one more than the highest existing replay schema (from 1)."""
    async with engine.connect() as conn:
        names = (
            await conn.execute(
                text("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'replay\\_%'")
            )
        ).scalars()
        numbers = [int(m.group(1)) for n in names if (m := _REPLAY_SCHEMA.match(n))]
    return f"{REPLAY_SCHEMA_PREFIX}{max(numbers, default=0) + 1}"


async def schema_exists(engine: AsyncEngine, schema: str) -> bool:
    """Whether the schema ``schema`` exists."""
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT 1 FROM pg_namespace WHERE nspname = :name"), {"name": schema}
        )
        return found.first() is not None


async def drop_schema(engine: AsyncEngine, schema: str) -> None:
    """``DROP SCHEMA ... CASCADE``, and its dashboard views' schema ``<schema>_views``
    (migration ``0008_dashboard_views``)."""
    async with engine.begin() as conn:
        await conn.execute(text(f"DROP SCHEMA IF EXISTS {quoted_schema(schema)} CASCADE"))
        if len(schema) <= 57:  # a longer name has no views schema (63 characters at most)
            views = quoted_schema(f"{schema}_views")
            await conn.execute(text(f"DROP SCHEMA IF EXISTS {views} CASCADE"))


async def truncate_projection(engine: AsyncEngine, schema: str, topic: str | None = None) -> None:
    """Empty the projection tables of ``schema`` (one transaction): the directory and the
    inventory. With ``topic``, only that topic's ``partition_progress`` rows go: the governance
    projection and the governance topic's progress row (the governor's, derived from another log)
    stay as they are."""
    s = quoted_schema(schema)
    health = ", ".join(f"{s}.{name}" for name in HEALTH_TABLES)
    async with engine.begin() as conn:
        if topic is None:
            await conn.execute(text(f"TRUNCATE {health}, {s}.partition_progress"))
            return
        await conn.execute(text(f"TRUNCATE {health}"))
        await conn.execute(
            text(f"DELETE FROM {s}.partition_progress WHERE topic = :topic"), {"topic": topic}
        )


async def drop_secondary_indexes(engine: AsyncEngine, schema: str) -> list[str]:
    """Drop the indexes of ``schema``'s projection tables that no constraint needs (neither
    primary key nor unique: the writes rely on those) and return the statements that create them
    again, as ``pg_get_indexdef`` gives them (see :func:`create_indexes`)."""
    async with engine.begin() as conn:
        found = list(
            await conn.execute(
                text(
                    "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index AS i "
                    "JOIN pg_class AS c ON c.oid = i.indexrelid "
                    "JOIN pg_class AS t ON t.oid = i.indrelid "
                    "JOIN pg_namespace AS n ON n.oid = t.relnamespace "
                    "WHERE n.nspname = :schema AND t.relname = ANY(:tables) "
                    "AND NOT i.indisprimary AND NOT i.indisunique "
                    "AND NOT EXISTS (SELECT 1 FROM pg_constraint AS k "
                    "WHERE k.conindid = i.indexrelid) ORDER BY c.relname"
                ),
                {"schema": schema, "tables": list(DEFERRED_INDEX_TABLES)},
            )
        )
        for name, _ in found:
            await conn.execute(text(f"DROP INDEX {quoted_schema(schema)}.{_quoted(name)}"))
    return [definition for _, definition in found]


async def create_indexes(engine: AsyncEngine, definitions: Sequence[str]) -> None:
    """Run ``CREATE INDEX`` statements (from :func:`drop_secondary_indexes`) in one transaction."""
    if not definitions:
        return
    async with engine.begin() as conn:
        for definition in definitions:
            await conn.execute(text(definition))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
