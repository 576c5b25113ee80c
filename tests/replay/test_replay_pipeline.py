"""``replay()`` in-process against the real broker and PostgreSQL: its pipeline (cache instead of
locked rows, batch n+1 folded while batch n is written, secondary indexes built at the end) writes
exactly what ``apply_batch`` without a cache writes from the same records, and leaves the schema
as a migration makes it."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.schema_admin import drop_schema, schema_exists
from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.processes.replay.run import read_log, replay
from services.runtime.config import Settings
from tests.conftest import SchemaFactory, publish
from tests.projection.test_cache import rows
from tests.streams.synthetic import synthetic_log

pytestmark = pytest.mark.integration


async def index_definitions(engine: AsyncEngine, schema: str) -> list[tuple[str, str]]:
    """``(name, definition)`` of the schema's indexes, the schema name replaced by ``S``."""
    async with engine.connect() as conn:
        result = await conn.execute(
            text(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = :s "
                "ORDER BY indexname"
            ),
            {"s": schema},
        )
        return [(name, ddl.replace(f"{schema}.", "S.")) for name, ddl in result]


@pytest.fixture
async def topic(stream_settings: Settings, kafka_bootstrap: str) -> Settings:
    """A topic holding a realistic log (duplicates, stale, releases) and one malformed record."""
    records: list[tuple[bytes | None, bytes | None]] = list(
        synthetic_log(1500, nodes=7, seed=5).records
    )
    records.insert(200, (b"node-x", b"not json"))
    await publish(kafka_bootstrap, stream_settings.topic, records)
    return stream_settings


async def reference(engine: AsyncEngine, settings: Settings, schema: str) -> None:
    """The same records through ``apply_batch`` without a cache (the worker's path)."""
    store = ProjectionStore(engine, schema)
    end_offsets: dict[tuple[str, int], int] = {}
    async for batch in read_log(
        settings.kafka_bootstrap_servers, settings.topic, batch_size=100, end_offsets=end_offsets
    ):
        if batch.records:
            await store.apply_batch(LoggedBatch(batch.records, end_offsets))


@pytest.mark.parametrize("batch_size", [5000, 37])
async def test_replay_writes_what_apply_batch_without_a_cache_writes(
    topic: Settings, engine: AsyncEngine, new_schema: SchemaFactory, batch_size: int
) -> None:
    expected = await new_schema()
    await reference(engine, topic, expected)
    replayed = f"{expected}_r"
    try:
        summary = await replay(
            topic,
            engine=engine,
            database_url=topic.database_url,
            schema=replayed,
            batch_size=batch_size,
        )
        assert (summary.read, summary.undecodable) == (1501, 1)
        assert await rows(engine, replayed) == await rows(engine, expected)
        assert await index_definitions(engine, replayed) == await index_definitions(
            engine, expected
        )
        assert gc.isenabled()
    finally:
        await drop_schema(engine, replayed)


async def test_in_place_replay_keeps_the_indexes_and_writes_the_same_rows(
    topic: Settings, engine: AsyncEngine, new_schema: SchemaFactory
) -> None:
    expected, target = await new_schema(), await new_schema()
    await reference(engine, topic, expected)
    await reference(engine, topic, target)  # a live projection to rebuild
    await replay(
        topic, engine=engine, database_url=topic.database_url, schema=target, in_place=True
    )
    assert await rows(engine, target) == await rows(engine, expected)
    assert await index_definitions(engine, target) == await index_definitions(engine, expected)


async def test_a_failed_write_ends_the_replay_and_drops_its_schema(
    topic: Settings, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, new_schema: SchemaFactory
) -> None:
    written = 0
    original = ProjectionStore.write_prepared

    async def failing(self: ProjectionStore, prepared: Any) -> Any:
        nonlocal written
        written += 1
        if written == 3:
            raise RuntimeError("database went away")
        return await original(self, prepared)

    monkeypatch.setattr(ProjectionStore, "write_prepared", failing)
    schema = f"{await new_schema()}_f"
    with pytest.raises(RuntimeError, match="database went away"):
        await replay(
            topic, engine=engine, database_url=topic.database_url, schema=schema, batch_size=100
        )
    assert not await schema_exists(engine, schema)
    assert gc.isenabled()


async def test_in_place_replay_leaves_the_governance_projection_alone(
    topic: Settings, engine: AsyncEngine, new_schema: SchemaFactory
) -> None:
    target = await new_schema()
    await reference(engine, topic, target)
    s = f'"{target}"'
    async with engine.begin() as conn:
        await conn.execute(
            text(
                f'INSERT INTO {s}.partition_progress (topic, "partition", "offset") '
                "VALUES (:t, 0, 41)"
            ),
            {"t": topic.governance_topic},
        )
        await conn.execute(
            text(
                f"INSERT INTO {s}.governor_fleet (id, breaker_open, automation_paused, snapshot) "
                "VALUES (1, false, true, '{}')"
            )
        )
    await replay(
        topic, engine=engine, database_url=topic.database_url, schema=target, in_place=True
    )
    async with engine.connect() as conn:
        progress = await conn.execute(
            text(f'SELECT "offset" FROM {s}.partition_progress WHERE topic = :t'),
            {"t": topic.governance_topic},
        )
        assert progress.scalar_one() == 41  # the governor's progress is not the replay's
        fleet = await conn.execute(text(f"SELECT automation_paused FROM {s}.governor_fleet"))
        assert fleet.scalar_one() is True


async def test_node_and_inventory_records_are_skipped_not_undecodable(
    stream_settings: Settings, kafka_bootstrap: str, observation: Any
) -> None:
    from datetime import UTC, datetime

    from services.domain.event_codec import encode_event
    from services.domain.node_events import NodeHeartbeat, WatcherTick
    from services.domain.records import encode_record
    from tests.kafka.test_records import inventory_events

    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    payloads = [
        encode_record(NodeHeartbeat("gpu-node-a", renewed_at=now, observed_at=now)),
        encode_record(WatcherTick(0, now)),
        encode_record(inventory_events()[0]),
        encode_event(observation(1)),
    ]
    await publish(kafka_bootstrap, stream_settings.topic, [(b"gpu-node-a", p) for p in payloads])
    batches = [b async for b in read_log(kafka_bootstrap, stream_settings.topic, batch_size=10)]
    assert sum(b.read for b in batches) == 4
    assert sum(b.node_events for b in batches) == 3
    assert sum(b.undecodable for b in batches) == 0
    assert [r.event.type for b in batches for r in b.records] == ["DeviceHealthObserved"]
    # What the inventory folds: the DRA object and the observation, in log order.
    assert [(p.offset, type(e).__name__) for b in batches for p, e in b.items] == [
        (2, "InventoryObserved"),
        (3, "DeviceHealthObserved"),
    ]


# --- the inventory (issue 4) ------------------------------------------------------------------


@pytest.fixture
async def inventory_topic(stream_settings: Settings, kafka_bootstrap: str) -> Settings:
    """A realistic log with the shared DRA examples, pod-04, a device-plugin GPU that DRA also
    publishes and a slice update among its records."""
    from services.domain.event_codec import encode_event
    from services.domain.records import encode_record
    from tests.projection.inventory_examples import (
        inventory_events,
        plugin_gpu,
        pod_04,
        slice_event,
    )

    records: list[tuple[bytes | None, bytes | None]] = list(
        synthetic_log(600, nodes=5, seed=7).records
    )
    extra: list[tuple[bytes | None, bytes | None]] = [
        *((e.key.encode(), encode_record(e)) for e in inventory_events()),
        *((b"gpu-node-a", encode_event(o)) for o in pod_04()),
        (b"gpu-node-a", encode_event(plugin_gpu())),
        (b"gpu-node-a", encode_record(slice_event(30, without=("gpu-3",)))),
    ]
    for index, record in enumerate(extra):
        records.insert(50 + 80 * index, record)
    await publish(kafka_bootstrap, stream_settings.topic, records)
    return stream_settings


async def inventory_reference(engine: AsyncEngine, settings: Settings, schema: str) -> None:
    """The worker's path: ``apply_batch`` without a cache, maintaining the inventory."""
    store = ProjectionStore(engine, schema)
    end_offsets: dict[tuple[str, int], int] = {}
    async for batch in read_log(
        settings.kafka_bootstrap_servers, settings.topic, batch_size=64, end_offsets=end_offsets
    ):
        await store.apply_batch(LoggedBatch(batch.records, end_offsets, inventory=batch.items))


async def test_replay_rebuilds_the_inventory_the_worker_path_writes(
    inventory_topic: Settings, engine: AsyncEngine, new_schema: SchemaFactory
) -> None:
    from services.adapters.projection.compare import INVENTORY_COMPARED_TABLES, diff_projections

    expected = await new_schema()
    await inventory_reference(engine, inventory_topic, expected)
    replayed = f"{expected}_r"
    try:
        await replay(
            inventory_topic,
            engine=engine,
            database_url=inventory_topic.database_url,
            schema=replayed,
            batch_size=29,
        )
        assert await diff_projections(engine, expected, replayed) == []
        async with engine.connect() as conn:
            counts = {
                table.name: (
                    await conn.execute(text(f'SELECT count(*) FROM "{replayed}".{table.name}'))
                ).scalar_one()
                for table in INVENTORY_COMPARED_TABLES
            }
        assert counts["inventory_objects"] == 3
        assert counts["inventory_conflicts"] == 2  # plugin-and-dra, vanished-from-slice
        assert counts["device_identities"] > 4  # pod-04's, the plugin GPU, the synthetic ones
        assert await index_definitions(engine, replayed) == await index_definitions(
            engine, expected
        )
    finally:
        await drop_schema(engine, replayed)


async def test_in_place_replay_rebuilds_the_inventory(
    inventory_topic: Settings, engine: AsyncEngine, new_schema: SchemaFactory
) -> None:
    from services.adapters.projection.compare import diff_projections

    expected, target = await new_schema(), await new_schema()
    await inventory_reference(engine, inventory_topic, expected)
    await inventory_reference(engine, inventory_topic, target)
    async with engine.begin() as conn:
        await conn.execute(text(f'UPDATE "{target}".inventory_conflicts SET active = NOT active'))
        await conn.execute(text(f'DELETE FROM "{target}".device_identities'))
    assert await diff_projections(engine, expected, target) != []
    await replay(
        inventory_topic,
        engine=engine,
        database_url=inventory_topic.database_url,
        schema=target,
        in_place=True,
    )
    assert await diff_projections(engine, expected, target) == []
