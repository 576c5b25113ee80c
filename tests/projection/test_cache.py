"""The replay's in-memory path (services/adapters/projection/cache.py): folding over a :class:`DeviceCache`
instead of the locked rows writes exactly the rows the worker's path writes, batch by batch, and
so does the replay's pipeline (fold batch n+1 over the cache before batch n is written)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.cache import DeviceCache
from services.adapters.projection.rows import record_from_row
from services.adapters.projection.store import BatchStats, ProjectionStore
from services.adapters.projection.tables import quoted_schema
from services.domain.batch import LoggedBatch
from services.domain.directory import DeviceKey, DeviceRecord, apply_event, devices_held_by, fold
from services.domain.events import DeviceHealthObserved, Event, PodDevicesReleased, PodsListed
from services.domain.log import LoggedEvent, LogPosition
from tests.conftest import TOPIC, SchemaFactory
from tests.domain.strategies import event_logs
from tests.projection.test_store_properties import batch_sizes, split


def keyed_log(events: list[Event]) -> list[LoggedEvent]:
    """The events as the topic holds them: partition by node (as the node key does), consecutive
    offsets within each partition, log order kept."""
    partitions: dict[str, int] = {}
    next_offset: dict[int, int] = {}
    log = []
    for event in events:
        partition = partitions.setdefault(event.node, len(partitions))
        offset = next_offset.get(partition, 0)
        next_offset[partition] = offset + 1
        log.append(LoggedEvent(LogPosition(TOPIC, partition, offset), event))
    return log


async def rows(engine: AsyncEngine, schema: str) -> dict[str, list[Any]]:
    """Every column of every row of the projection (progress without its wall-clock time)."""
    s = quoted_schema(schema)
    queries = {
        "devices": f"SELECT * FROM {s}.devices ORDER BY node, resource_id",
        "history": f'SELECT * FROM {s}.device_history ORDER BY topic, "partition", "offset", '
        "node, resource_id",
        "progress": f'SELECT topic, "partition", "offset", highwater, last_event_at '
        f'FROM {s}.partition_progress ORDER BY topic, "partition"',
    }
    async with engine.connect() as conn:
        return {
            name: [tuple(r) for r in await conn.execute(text(sql))] for name, sql in queries.items()
        }


async def truncate(engine: AsyncEngine, *schemas: str) -> None:
    async with engine.begin() as conn:
        for schema in schemas:
            s = quoted_schema(schema)
            await conn.execute(
                text(
                    f"TRUNCATE {s}.devices, {s}.device_history, {s}.partition_progress, "
                    f"{s}.pod_tombstones"
                )
            )


@pytest.fixture
async def schemas(new_schema: SchemaFactory) -> tuple[str, str, str]:
    return await new_schema(), await new_schema(), await new_schema()


@pytest.mark.integration
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # tables emptied per example
)
@given(events=event_logs, sizes=batch_sizes)
async def test_the_cache_writes_what_the_locked_rows_write(
    engine: AsyncEngine, schemas: tuple[str, str, str], events: list[Event], sizes: list[int]
) -> None:
    await truncate(engine, *schemas)
    locked, cached, pipelined = (ProjectionStore(engine, s) for s in schemas)
    log = keyed_log(events)
    highwaters = {(TOPIC, 0): len(log), (TOPIC, 1): len(log), (TOPIC, 2): 0}
    cache, ahead = DeviceCache(), DeviceCache()
    writing: list[BatchStats] = []
    for batch in split(log, sizes):
        expected = await locked.apply_batch(LoggedBatch(batch, highwaters=highwaters))
        assert (
            await cached.apply_batch(LoggedBatch(batch, highwaters=highwaters), cache=cache)
            == expected
        )
        # The replay's pipeline: the cache moves on before the batch is written.
        prepared = pipelined.prepare_batch(LoggedBatch(batch, highwaters), ahead)
        ahead.update(prepared.written, prepared.offsets, prepared.tombstones)
        writing.append(await pipelined.write_prepared(prepared))
        assert writing[-1] == expected

    want = await rows(engine, schemas[0])
    assert await rows(engine, schemas[1]) == want
    assert await rows(engine, schemas[2]) == want
    # The cache holds exactly the table.
    table = {r.key: r for r in map(record_from_row, want["devices"])}
    assert table == fold(events)
    for c in (cache, ahead):
        assert len(c) == len(table)
        assert all(c.get(key) == record for key, record in table.items())
        for topic, partition, offset, *_ in want["progress"]:
            assert c.offset(topic, partition) == offset

    # Redelivery of the whole log: skipped by the cache's offsets as by the recorded progress.
    again = await locked.apply_batch(LoggedBatch(log))
    assert again.redelivered == len(log)
    assert await cached.apply_batch(LoggedBatch(log), cache=cache) == again
    assert await rows(engine, schemas[1]) == await rows(engine, schemas[0])


# --- the cache alone (no database) -----------------------------------------------------------


@given(events=event_logs, sizes=batch_sizes)
def test_current_is_what_the_store_would_lock(events: list[Event], sizes: list[int]) -> None:
    """``current`` returns the observed devices that exist and every device a released Pod holds
    on its node (the holders index follows allocations as they come and go)."""
    log = keyed_log(events)
    cache = DeviceCache()
    state: dict[DeviceKey, DeviceRecord] = {}
    for batch in split(log, sizes):
        want: dict[DeviceKey, DeviceRecord] = {}
        for logged in batch:
            event = logged.event
            if isinstance(event, DeviceHealthObserved):
                if event.device_key in state:
                    want[event.device_key] = state[event.device_key]
            elif isinstance(event, PodsListed):
                want.update(
                    (d.key, d) for d in state.values() if d.node == event.node and d.allocations
                )
            else:
                assert isinstance(event, PodDevicesReleased)
                want.update((d.key, d) for d in devices_held_by(state, event.node, event.pod_uid))
        assert cache.current(batch) == want
        written: dict[DeviceKey, DeviceRecord] = {}
        for logged in batch:
            for change in apply_event(state, logged.event):
                if change.changed:
                    state[change.key] = written[change.key] = change.record
        cache.update(written)
    assert len(cache) == len(state)


def test_fresh_drops_records_at_or_before_the_recorded_offsets() -> None:
    cache = DeviceCache()
    assert cache.fresh([]) == []
    records = [  # only positions matter here
        LoggedEvent(LogPosition(TOPIC, p, o), None)  # type: ignore[arg-type]
        for p, o in [(0, 3), (0, 4), (1, 0), (1, 7)]
    ]
    assert cache.fresh(records) is records  # nothing recorded yet
    cache.update({}, {(TOPIC, 0): 3, (TOPIC, 1): 5})
    assert [r.position for r in cache.fresh(records)] == [
        LogPosition(TOPIC, 0, 4),
        LogPosition(TOPIC, 1, 7),
    ]
    cache.update({}, {(TOPIC, 0): 1})  # an offset never moves back
    assert cache.offset(TOPIC, 0) == 3
    assert cache.offset(TOPIC, 2) is None
