"""Alembic migrations: the CLI on an empty schema, downgrade, programmatic and concurrent runs, and
agreement between the revisions and ``services.adapters.projection.tables``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

import services.adapters.projection.failure_tables  # (the imports register their tables on ``metadata``)
import services.adapters.projection.governance_tables  # (the imports register their tables on ``metadata``)
import services.adapters.projection.inventory_tables
import services.adapters.projection.lifecycle_tables
import services.adapters.projection.workload_tables  # noqa: F401
from services.adapters.projection.migrate import REPO_ROOT, migrate
from services.adapters.projection.tables import check_schema_name, metadata

pytestmark = pytest.mark.integration

GOVERNANCE_TABLES = (
    "device_governance",
    "governor_nodes",
    "governor_fleet",
    "quarantines",
    "governance_decisions",
    "governance_commands",
    "governor_workloads",  # 0011_migration_workloads (issue 13)
    "migration_evidence",  # 0014_migration_evidence (issue 13 item 3)
    "governor_node_labels",  # 0016_governor_node_labels (issue 16 / 12)
    "governor_pending",  # 0017_governor_pending (issue 12)
)

INVENTORY_TABLES = (
    "inventory_objects",
    "node_resources",
    "node_labels",  # 0015_node_labels (issue 16)
    "device_identities",
    "inventory_conflicts",
)


@pytest.fixture
async def schema_name(engine: AsyncEngine) -> AsyncIterator[str]:
    """A schema name nobody uses yet (the schema itself is NOT created); dropped afterwards."""
    name = f"test_mig_{uuid4().hex[:12]}"
    yield name
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}_views" CASCADE'))


async def tables_in(engine: AsyncEngine, schema: str) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"),
            {"s": schema},
        )
        return {r[0] for r in rows}


async def columns_of(engine: AsyncEngine, schema: str, table: str) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = :s AND table_name = :t"
            ),
            {"s": schema, "t": table},
        )
        return {r[0] for r in rows}


def alembic_cli(database_url: str, schema: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "alembic",
            "-x",
            f"schema={schema}",
            "-x",
            f"url={database_url}",
            *args,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def views_in(engine: AsyncEngine, schema: str) -> set[str]:
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT table_name FROM information_schema.views WHERE table_schema = :s"),
            {"s": schema},
        )
        return set(found.scalars())


async def test_cli_upgrade_on_an_empty_schema_then_downgrade_to_base(
    engine: AsyncEngine, database_url: str, schema_name: str
) -> None:
    upgraded = await asyncio.to_thread(alembic_cli, database_url, schema_name, "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    assert await tables_in(engine, schema_name) == {
        "alembic_version",
        "devices",
        "device_history",
        "partition_progress",
        "pod_tombstones",
        "pod_workloads",
        "dra_failures",
        "pod_lifecycle_stages",
        *GOVERNANCE_TABLES,
        *INVENTORY_TABLES,
    }
    current = await asyncio.to_thread(alembic_cli, database_url, schema_name, "current")
    assert "0017_governor_pending (head)" in current.stdout
    assert {"last_observed_at", "partition"} <= await columns_of(
        engine, schema_name, "device_identities"
    )
    assert "frozen" in await columns_of(engine, schema_name, "device_history")

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "governor_pending" not in await tables_in(engine, schema_name)  # 0017
    assert "governor_node_labels" in await tables_in(engine, schema_name)

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "governor_node_labels" not in await tables_in(engine, schema_name)  # 0016
    assert "node_labels" in await tables_in(engine, schema_name)

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "node_labels" not in await tables_in(engine, schema_name)  # 0015
    assert "migration_evidence" in await tables_in(engine, schema_name)

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "migration_evidence" not in await tables_in(engine, schema_name)  # 0014
    assert "pod_lifecycle_stages" in await tables_in(engine, schema_name)

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "pod_lifecycle_stages" not in await tables_in(engine, schema_name)  # 0013

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "dra_failures" not in await tables_in(engine, schema_name)  # 0012

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "governor_workloads" not in await tables_in(engine, schema_name)  # 0011

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "pod_workloads" not in await tables_in(engine, schema_name)  # 0010

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "frozen" not in await columns_of(engine, schema_name, "device_history")

    views = f"{schema_name}_views"
    assert "quarantines" in await views_in(engine, views)
    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert await views_in(engine, views) == set()  # 0008: the views' schema is gone

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "last_observed_at" not in await columns_of(engine, schema_name, "device_identities")

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "request_fingerprint" not in await columns_of(engine, schema_name, "governance_commands")

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "pod_tombstones" not in await tables_in(engine, schema_name)

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert "reported_with" not in await columns_of(engine, schema_name, "device_identities")

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert await tables_in(engine, schema_name) == {
        "alembic_version",
        "devices",
        "device_history",
        "partition_progress",
        *(
            t
            for t in GOVERNANCE_TABLES
            if t
            not in (
                "governor_workloads",
                "migration_evidence",
                "governor_node_labels",
                "governor_pending",
            )
        ),
    }

    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    assert await tables_in(engine, schema_name) == {
        "alembic_version",
        "devices",
        "device_history",
        "partition_progress",
    }

    downgraded = await asyncio.to_thread(
        alembic_cli, database_url, schema_name, "downgrade", "base"
    )
    assert downgraded.returncode == 0, downgraded.stderr
    assert await tables_in(engine, schema_name) == {"alembic_version"}


async def test_migrate_is_idempotent_and_safe_to_run_concurrently(
    engine: AsyncEngine, database_url: str, schema_name: str
) -> None:
    await asyncio.gather(*(migrate(database_url, schema_name) for _ in range(3)))
    await migrate(database_url, schema_name)
    assert "devices" in await tables_in(engine, schema_name)
    async with engine.connect() as conn:
        version = await conn.execute(
            text(f'SELECT version_num FROM "{schema_name}".alembic_version')
        )
        assert [r[0] for r in version] == ["0017_governor_pending"]


async def test_revisions_match_the_table_metadata(engine: AsyncEngine, fresh_schema: str) -> None:
    def compare(conn: Connection) -> list[Any]:
        conn.execute(text(f'SET search_path TO "{fresh_schema}"'))
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "compare_server_default": True,
                "include_name": lambda name, kind, _parent: (
                    not (kind == "table" and name == "alembic_version")
                ),
            },
        )
        diffs: list[Any] = compare_metadata(context, metadata)
        return diffs

    async with engine.connect() as conn:
        assert await conn.run_sync(compare) == []


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", 'x"; DROP TABLE y; --', "a" * 64])
def test_schema_names_must_be_plain_identifiers(bad: str) -> None:
    with pytest.raises(ValueError, match="plain identifier"):
        check_schema_name(bad)


async def test_a_downgrade_of_0017_puts_the_pending_records_back_into_the_fleet_row(
    engine: AsyncEngine, database_url: str, schema_name: str
) -> None:
    """The previous version reads the merge's pending records from ``governor_fleet`` only."""
    upgraded = await asyncio.to_thread(alembic_cli, database_url, schema_name, "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    fleet = '{"order": {"marks": [], "pendingCount": 2}, "other": 1}'
    async with engine.begin() as conn:
        await conn.execute(
            text(
                f'INSERT INTO "{schema_name}".governor_fleet '
                "(id, breaker_open, automation_paused, snapshot) "
                "VALUES (1, false, false, CAST(:fleet AS jsonb))"
            ),
            {"fleet": fleet},
        )
        for offset in (9, 4):
            await conn.execute(
                text(
                    f'INSERT INTO "{schema_name}".governor_pending VALUES '
                    "(0, :offset, 0, CAST(:snapshot AS jsonb))"
                ),
                {"offset": offset, "snapshot": f'{{"offset": {offset}}}'},
            )
    back = await asyncio.to_thread(alembic_cli, database_url, schema_name, "downgrade", "-1")
    assert back.returncode == 0, back.stderr
    async with engine.connect() as conn:
        snapshot = (
            await conn.execute(text(f'SELECT snapshot FROM "{schema_name}".governor_fleet'))
        ).scalar_one()
    assert snapshot == {
        "order": {"marks": [], "pending": [{"offset": 4}, {"offset": 9}]},
        "other": 1,
    }
