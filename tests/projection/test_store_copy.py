"""The batch writer's COPY path (services/adapters/projection/batch_copy.py) against the real
PostgreSQL: stage tables empty in every transaction, a refusal raised like any statement's and
rolled back, the history's ``ON CONFLICT DO NOTHING`` kept, the cache path (replay) the same."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from services.adapters.projection.batch_copy import array_literal
from services.adapters.projection.cache import DeviceCache
from services.adapters.projection.errors import is_refused, is_transient
from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.directory import fold
from services.domain.events import Health
from tests.conftest import TOPIC, LogFactory, ObservationFactory, SchemaFactory
from tests.projection.test_store import all_devices, history_count

pytestmark = pytest.mark.integration


@pytest.fixture
async def one_connection(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine of a single pooled connection: every batch reuses the same session (and so the
    same temporary stage tables)."""
    engine = create_async_engine(database_url, pool_size=1, max_overflow=0)
    try:
        yield engine
    finally:
        await engine.dispose()


async def progress_offset(engine: AsyncEngine, schema: str) -> int | None:
    async with engine.connect() as conn:
        result = await conn.execute(
            text(f'SELECT "offset" FROM "{schema}".partition_progress WHERE topic = :t'),
            {"t": TOPIC},
        )
        row = result.first()
        return None if row is None else row[0]


async def test_batches_on_one_session_write_only_their_own_rows(
    one_connection: AsyncEngine,
    fresh_schema: str,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    store = ProjectionStore(one_connection, fresh_schema)
    pod = [observation(1, resource_id=f"GPU-{i}") for i in range(4)]  # one Pod, 4 devices
    first = logged(pod)
    second = logged(
        [observation(2, Health.UNHEALTHY, resource_id="GPU-1", message="XID 79")], start=4
    )
    stats = await store.apply_batch(LoggedBatch(first))
    assert stats.devices_written == 4
    stats = await store.apply_batch(LoggedBatch(second))
    assert stats.devices_written == 1 and stats.applied == 1
    assert await history_count(one_connection, fresh_schema) == 5
    reads = DeviceReads(one_connection, fresh_schema)
    assert await all_devices(reads) == fold([*pod, second[0].event])


async def test_a_value_postgresql_refuses_in_the_copy_is_a_refusal_and_rolls_back(
    one_connection: AsyncEngine,
    fresh_schema: str,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    store = ProjectionStore(one_connection, fresh_schema)
    await store.apply_batch(LoggedBatch(logged([observation(1)])))
    bad = observation(2, Health.UNHEALTHY, resource_id="GPU-1", message="XID\x0079")
    with pytest.raises(DBAPIError) as caught:
        await store.apply_batch(LoggedBatch(logged([observation(2), bad], start=1)))
    assert is_refused(caught.value) and not is_transient(caught.value)
    assert getattr(caught.value.orig, "sqlstate", "").startswith("22")
    # Nothing of the refused batch is written, and the session writes the next batch.
    assert await history_count(one_connection, fresh_schema) == 1
    assert await progress_offset(one_connection, fresh_schema) == 0
    good = observation(3, Health.UNHEALTHY, resource_id="GPU-1", message="XID 79")
    stats = await store.apply_batch(LoggedBatch(logged([good], start=1)))
    assert stats.devices_written == 1
    assert await history_count(one_connection, fresh_schema) == 2


async def test_history_rows_already_there_are_not_written_twice(
    store: ProjectionStore,
    engine: AsyncEngine,
    fresh_schema: str,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    """With the progress gone (a truncated ``partition_progress``), the same records are applied
    again: devices unchanged (duplicates), history rows kept once (keyed by log position)."""
    events = logged([observation(1), observation(2, Health.UNHEALTHY, resource_id="GPU-1")])
    await store.apply_batch(LoggedBatch(events))
    async with engine.begin() as conn:
        await conn.execute(text(f'DELETE FROM "{fresh_schema}".partition_progress'))
    stats = await store.apply_batch(LoggedBatch(events))
    assert stats.duplicates == 2 and stats.devices_written == 0
    assert await history_count(engine, fresh_schema) == 2


async def test_the_cache_path_writes_the_same_rows(
    engine: AsyncEngine,
    new_schema: SchemaFactory,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    events = logged(
        [observation(v, Health.UNHEALTHY if v % 2 else Health.HEALTHY) for v in range(1, 6)]
        + [observation(1, resource_id=f"GPU-{i}") for i in range(1, 4)]
    )
    direct, cached = await new_schema(), await new_schema()
    await ProjectionStore(engine, direct).apply_batch(LoggedBatch(events[:4]))
    await ProjectionStore(engine, direct).apply_batch(LoggedBatch(events[4:]))
    cache = DeviceCache()
    writer = ProjectionStore(engine, cached)
    await writer.apply_batch(LoggedBatch(events[:4]), cache=cache)
    await writer.apply_batch(LoggedBatch(events[4:]), cache=cache)
    assert await all_devices(DeviceReads(engine, direct)) == await all_devices(
        DeviceReads(engine, cached)
    )
    assert await history_count(engine, direct) == await history_count(engine, cached) == 8


async def test_flags_travel_as_an_array_literal_postgresql_reads_back_exactly(
    engine: AsyncEngine,
) -> None:
    cases = [(), ("",), ("NULL",), (" spaced ",), ('quote"d', "back\\slash", "{brace,comma}")]
    cases.append(('\\"', "é", "a,b", "}{"))
    async with engine.connect() as conn:
        for flags in cases:
            result = await conn.execute(
                text("SELECT CAST(CAST(:v AS text) AS text[])"), {"v": array_literal(flags)}
            )
            assert tuple(result.scalar_one()) == flags
