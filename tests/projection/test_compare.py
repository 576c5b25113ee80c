"""diff_projections: what ``devicestate replay --verify`` reports."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.compare import MAX_REPORTED, diff_projections
from services.adapters.projection.store import ProjectionStore
from services.adapters.projection.tables import quoted_schema
from services.domain.batch import LoggedBatch
from services.domain.events import Health
from tests.conftest import TOPIC, LogFactory, ObservationFactory, ReleaseFactory, SchemaFactory

pytestmark = pytest.mark.integration


@pytest.fixture
async def pair(
    engine: AsyncEngine,
    new_schema: SchemaFactory,
    observation: ObservationFactory,
    release: ReleaseFactory,
    logged: LogFactory,
) -> tuple[str, str]:
    """Two schemas holding the same log, applied with different batch sizes and highwaters."""
    log = logged(
        [
            observation(1),
            observation(2, Health.UNHEALTHY, at=5, resource_id="a/b/c"),
            release(3, at=9),
            observation(4, resource_id="GPU-1", at=12),
        ]
    )
    a, b = await new_schema(), await new_schema()
    await ProjectionStore(engine, a).apply_batch(LoggedBatch(log, highwaters={(TOPIC, 0): 4}))
    store_b = ProjectionStore(engine, b)
    for record in log:
        await store_b.apply_batch(LoggedBatch([record], highwaters={(TOPIC, 0): 100}))
    return a, b


async def execute(engine: AsyncEngine, sql: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(sql))


async def test_same_log_gives_no_differences(engine: AsyncEngine, pair: tuple[str, str]) -> None:
    # partition_progress differs (highwater, updated_at) and is not compared.
    assert await diff_projections(engine, *pair) == []


async def test_changed_columns_are_named_with_both_values(
    engine: AsyncEngine, pair: tuple[str, str]
) -> None:
    a, b = pair
    await execute(
        engine,
        f"UPDATE {quoted_schema(b)}.devices SET health = 'Unknown', message = 'x' "
        "WHERE resource_id = 'a/b/c'",
    )
    assert await diff_projections(engine, a, b) == [
        "devices node='gpu-node-a', resource_id='a/b/c': "
        "health: 'Unhealthy' != 'Unknown'; message: None != 'x'"
    ]


async def test_rows_on_one_side_only_are_reported_for_both_tables(
    engine: AsyncEngine, pair: tuple[str, str]
) -> None:
    a, b = pair
    await execute(engine, f"DELETE FROM {quoted_schema(a)}.devices WHERE resource_id = 'GPU-1'")
    await execute(engine, f'DELETE FROM {quoted_schema(b)}.device_history WHERE "offset" = 0')
    assert await diff_projections(engine, a, b) == [
        f"devices node='gpu-node-a', resource_id='GPU-1': only in {b}",
        f"device_history topic='{TOPIC}', partition=0, offset=0, node='gpu-node-a', "
        f"resource_id='GPU-0': only in {a}",
    ]


async def test_long_reports_are_cut_with_a_count(
    engine: AsyncEngine, pair: tuple[str, str]
) -> None:
    a, b = pair
    await execute(
        engine,
        f"INSERT INTO {quoted_schema(a)}.devices "
        "SELECT 'n' || i, 'GPU', 'r', 'dra', 'Healthy', NULL, NULL, i, true, now(), now(), "
        "'[]', '{}' FROM generate_series(1, 60) AS i",
    )
    report = await diff_projections(engine, a, b)
    assert len(report) == MAX_REPORTED + 1
    assert report[-1] == f"devices: ... and {60 - MAX_REPORTED} more"
