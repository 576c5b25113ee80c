"""Every SQL panel of deploy/grafana's dashboards against a real projection of the demo stream
(real Kafka, PostgreSQL and worker with its governor), read as a login of the read-only role
``devicestate_dashboards`` the way Grafana reads it; and that role reads the dashboard views
(migration ``0008_dashboard_views``) and nothing else.

The demo stream (devtools/examples/demo-stream.jsonl) ends with 5 Quarantined and 3
UnknownTolerated devices (as tests/monitoring/test_scrape.py reads them from Prometheus).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from devtools.demo.catchup import wait_caught_up
from services.processes.watcher.run import run_watch
from services.runtime.config import Settings
from tests.conftest import SchemaFactory
from tests.monitoring.conftest import REPO
from tests.monitoring.test_dashboards import targets

pytestmark = pytest.mark.integration

DEMO_STREAM = REPO / "devtools" / "examples" / "demo-stream.jsonl"
READER = "devicestate_dashboards"
LOGIN = "devicestate_dashboards_test"


@pytest.fixture(scope="session")
async def reader_url(database_url: str) -> str:
    """A login in the read-only role (made by the cluster's superuser ``postgres``, the SQL
    step of docs/operations.md), existing before any schema of the session is migrated so the
    migration grants the role its views."""
    admin = create_async_engine(make_url(database_url).set(username="postgres", password=None))
    try:
        async with admin.begin() as conn:
            await conn.execute(
                text(
                    f"DO $$ BEGIN "
                    f"IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{READER}') "
                    f"THEN CREATE ROLE {READER} NOLOGIN; END IF; "
                    f"IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{LOGIN}') "
                    f"THEN CREATE ROLE {LOGIN} LOGIN IN ROLE {READER}; END IF; END $$"
                )
            )
    finally:
        await admin.dispose()
    return make_url(database_url).set(username=LOGIN, password=None).render_as_string(False)


@pytest.fixture
async def reader(reader_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(reader_url)
    yield engine
    await engine.dispose()


async def rows(engine: AsyncEngine, sql: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [dict(r._mapping) for r in await conn.execute(text(sql))]


def panel_sql(schema: str) -> dict[str, str]:
    """Each SQL panel's query by title, on the views of projection schema ``schema``."""
    return {
        title: sql.replace("${views_schema}", f'"{schema}_views"')
        for title, sql in targets("grafana-postgresql-datasource")
    }


async def test_every_sql_panel_on_the_demo_projection(
    reader: AsyncEngine,
    engine: AsyncEngine,
    stream_settings: Settings,
    kafka_bootstrap: str,
    worker_process: Any,
) -> None:
    settings = stream_settings
    schema = settings.database_schema
    worker = worker_process(settings)
    await run_watch(settings, from_file=DEMO_STREAM)
    await wait_caught_up(
        kafka_bootstrap,
        settings.topic,
        settings.consumer_group,
        120,
        still_alive=lambda: _alive(worker),
    )
    # The governor folds the governance topic after the health topic: wait for its quarantines.
    quarantined = f"SELECT count(*) AS n FROM \"{schema}\".quarantines WHERE status = 'active'"
    for _ in range(240):
        if (await rows(engine, quarantined))[0]["n"] == 5:
            break
        await asyncio.sleep(0.5)
    panels = panel_sql(schema)
    assert len(panels) == len(targets("grafana-postgresql-datasource")) == 14  # titles unique
    got = {title: await rows(reader, sql) for title, sql in panels.items()}
    assert set(got) == set(panels)  # every SQL panel ran, as the read-only login

    assert got["Quarantined devices"] == [{"quarantined": 5}]
    assert got["UnknownTolerated devices"] == [{"unknown_tolerated": 3}]
    by_node = {r["node"]: r for r in got["Devices by governance state per node"]}
    assert set(by_node) == {"gpu-node-a", "gpu-node-b"}
    assert (by_node["gpu-node-a"]["Quarantined"], by_node["gpu-node-b"]["Quarantined"]) == (4, 1)
    assert by_node["gpu-node-a"]["UnknownTolerated"] == 3
    assert sum(by_node["gpu-node-a"][s] or 0 for s in by_node["gpu-node-a"] if s != "node") == 12
    assert sum(by_node["gpu-node-b"][s] or 0 for s in by_node["gpu-node-b"] if s != "node") == 8

    quarantines = got["Quarantines"]
    assert len(quarantines) == 5
    assert {(q["reason"], q["actor"], q["status"]) for q in quarantines} == {
        ("pod-status-unhealthy", "system", "active")
    }
    assert ("gpu-node-b", "GPU-a5ced723-33de-5eef-89d7-909771744097") in {
        (q["node"], q["resource_id"]) for q in quarantines
    }
    # Ages are event time before the newest event (16:00:00.001 on the demo), not the clock.
    oldest = quarantines[0]
    assert oldest["resource_id"] == "GPU-a5ced723-33de-5eef-89d7-909771744097"
    assert float(oldest["age_seconds"]) == pytest.approx(19070.001)

    episodes = got["Unknown episodes"]
    assert len(episodes) == 3 and all(e["open"] and e["ended_at"] is None for e in episodes)
    assert {e["resource_id"] for e in episodes} == {
        "GPU-094de60e-ca18-5686-9344-34e540ea6692",
        "GPU-41d469f1-6229-504a-adc2-9009031b8be4",
        "GPU-6124440d-a51a-50c9-9503-1364cbdbe447",
    }
    ages = got["Status age"]
    assert len(ages) == 20 and float(ages[0]["age_seconds"]) == pytest.approx(21600.001)

    assert got["Breaker and automation"] == [{"breaker_open": 0, "automation_paused": 0}]
    # Quarantined devices held by a Pod count as allocated (as the capacity API counts them).
    assert got["Capacity"] == [{"idle": 0, "allocated": 19, "unavailable": 1, "fragmented": 0}]
    per_node = {
        r["node"]: (r["total"], r["allocated"], r["unavailable"]) for r in got["Capacity per node"]
    }
    assert per_node == {"gpu-node-a": (12, 11, 1), "gpu-node-b": (8, 8, 0)}
    assert [(r["stage"], r["started"]) for r in got["Recovery funnel"]] == [
        ("probe", 0),
        ("canary", 0),
        ("stability", 0),
        ("released", 0),
    ]
    assert got["False quarantines"] == [
        {"released": 0, "released_without_fault": 0, "false_rate": None}
    ]
    lag = got["Projection lag per partition"]
    assert {(r["topic"], r["partition"]) for r in lag} == {
        (settings.topic, 0),
        (settings.topic, 1),
        (settings.topic, 2),
        (settings.governance_topic, 0),
    }
    assert all(r["lag"] == 0 for r in lag)
    assert all(r["progress"] == 1 for r in got["Replay progress"])
    (governor,) = got["Governor watermark"]
    assert governor["watermark"] == governor["as_of"] and governor["watermark_behind_seconds"] == 0


async def test_the_reader_role_reads_the_views_and_nothing_else(
    reader: AsyncEngine, new_schema: SchemaFactory
) -> None:
    schema = await new_schema()  # migrated after the role exists: 0008 granted it the views
    views = f'"{schema}_views"'
    async with reader.connect() as conn:
        names = (
            await conn.execute(
                text("SELECT table_name FROM information_schema.views WHERE table_schema = :s"),
                {"s": f"{schema}_views"},
            )
        ).scalars()
        listed = sorted(names)
    assert "device_states" in listed and "quarantines" in listed and len(listed) == 11
    for name in listed:
        await rows(reader, f"SELECT * FROM {views}.{name}")
    for statement in (
        f'SELECT * FROM "{schema}".devices',
        f'SELECT * FROM "{schema}".quarantines',
        f'INSERT INTO "{schema}".governance_commands VALUES '
        "('c', 'pause', 'me', true, '', 1, NULL)",
        f"DELETE FROM {views}.partition_lag",  # an updatable view: the privilege refuses
        f"CREATE TABLE {views}.mine (x int)",
        f"CREATE VIEW {views}.mine AS SELECT 1",
    ):
        with pytest.raises(DBAPIError, match="permission denied"):
            async with reader.begin() as conn:
                await conn.execute(text(statement))


def _alive(worker: Any) -> None:
    if worker.process.poll() is not None:
        raise AssertionError(f"worker exited:\n{worker.log_text()[-4000:]}")
