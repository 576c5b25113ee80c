"""ProjectionStore.apply_batch and the directory reads (DeviceReads) against the real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.compare import diff_projections
from services.adapters.projection.errors import ProjectionConflictError
from services.adapters.projection.read_models import DeviceFilters
from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.store import BatchStats, ProjectionStore
from services.adapters.projection.tables import device_history, in_schema, quoted_schema
from services.domain.batch import LoggedBatch
from services.domain.directory import DeviceRecord, fold
from services.domain.events import ClaimRef, ContainerKind, ContainerRef, Event, Health
from tests.conftest import (
    T0,
    TOPIC,
    LogFactory,
    ObservationFactory,
    ReleaseFactory,
    SchemaFactory,
)

pytestmark = pytest.mark.integration

KEY = ("gpu-node-a", "GPU-0")


async def all_devices(reads: DeviceReads) -> dict[tuple[str, str], DeviceRecord]:
    page = await reads.list_devices(limit=10_000)
    return {d.key: d for d in page.items}


async def history_count(engine: AsyncEngine, schema: str) -> int:
    async with engine.connect() as conn:
        stmt = select(func.count()).select_from(device_history)
        count: int = (await conn.execute(stmt, execution_options=in_schema(schema))).scalar_one()
        return count


async def test_observation_creates_the_device_and_one_history_row(
    store: ProjectionStore, reads: DeviceReads, observation: ObservationFactory, logged: LogFactory
) -> None:
    event = observation(
        2**70,
        Health.UNHEALTHY,
        message="XID 79",
        raw_health=None,
        containers=(ContainerRef("main"), ContainerRef("init-0", ContainerKind.INIT)),
        claim=ClaimRef("gpus", None, "claim-x"),
        flags=('quote"d', "back\\slash", "{brace,comma}"),
    )
    stats = await store.apply_batch(LoggedBatch(logged([event])))
    assert stats == BatchStats(applied=1, transitions=1, devices_written=1)
    assert await reads.get_device(*KEY) == fold([event])[KEY]
    [entry] = await reads.device_history(*KEY)
    assert (entry.kind, entry.health, entry.status_version, entry.transition) == (
        "observed",
        Health.UNHEALTHY,
        2**70,
        True,
    )
    assert (entry.position.topic, entry.position.offset, entry.message) == (TOPIC, 0, "XID 79")


async def test_duplicate_and_stale_observations_change_nothing(
    store: ProjectionStore,
    reads: DeviceReads,
    engine: AsyncEngine,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    await store.apply_batch(LoggedBatch(logged([observation(5, Health.UNHEALTHY)])))
    before = await all_devices(reads)
    stats = await store.apply_batch(
        LoggedBatch(
            logged(
                [observation(5, Health.HEALTHY, at=10), observation(3, Health.HEALTHY, at=20)],
                start=1,
            )
        )
    )
    assert stats == BatchStats(duplicates=1, stale=1)
    assert await all_devices(reads) == before
    assert await history_count(engine, store.schema) == 1


async def test_unordered_observation_creates_but_never_overwrites_ordered_state(
    store: ProjectionStore, reads: DeviceReads, observation: ObservationFactory, logged: LogFactory
) -> None:
    await store.apply_batch(LoggedBatch(logged([observation(None, Health.UNKNOWN)])))
    first = await reads.get_device(*KEY)
    assert first is not None and not first.ordered and first.status_version is None

    await store.apply_batch(LoggedBatch(logged([observation(7, Health.HEALTHY, at=5)], start=1)))
    ordered = await reads.get_device(*KEY)
    assert ordered is not None and ordered.ordered and ordered.health is Health.HEALTHY

    stats = await store.apply_batch(
        LoggedBatch(logged([observation(None, Health.UNHEALTHY, at=9, message="late")], start=2))
    )
    assert stats.stale == 1 and stats.devices_written == 0
    assert await reads.get_device(*KEY) == ordered


async def test_release_removes_the_allocation_but_keeps_health(
    store: ProjectionStore,
    reads: DeviceReads,
    observation: ObservationFactory,
    release: ReleaseFactory,
    logged: LogFactory,
) -> None:
    shared = [
        observation(10, Health.UNHEALTHY, message="ECC"),
        observation(11, Health.UNHEALTHY, pod_uid="uid-2", pod_name="sidecar", at=1, message="ECC"),
        observation(12, resource_id="GPU-1", at=2),  # uid-1 holds a second device
    ]
    await store.apply_batch(LoggedBatch(logged(shared)))
    stats = await store.apply_batch(LoggedBatch(logged([release(20, at=30)], start=3)))
    assert stats == BatchStats(released=2, devices_written=2)

    gpu0, gpu1 = await reads.get_device(*KEY), await reads.get_device("gpu-node-a", "GPU-1")
    assert gpu0 is not None and gpu1 is not None
    assert [a.pod_uid for a in gpu0.allocations] == ["uid-2"]
    assert (gpu0.health, gpu0.status_version, gpu0.message) == (Health.UNHEALTHY, 11, "ECC")
    assert gpu1.allocations == () and gpu1.health is Health.HEALTHY
    assert {d.key: d for d in (gpu0, gpu1)} == fold(
        [e.event for e in logged(shared)] + [release(20, at=30)]
    )

    entry = (await reads.device_history(*KEY))[0]
    assert (entry.kind, entry.pod_uid, entry.health, entry.transition) == (
        "released",
        "uid-1",
        Health.UNHEALTHY,
        False,
    )
    # The namespace filter no longer finds the released Pod's devices.
    page = await reads.list_devices(DeviceFilters(pod_uid="uid-1"))
    assert page.items == []


async def test_release_keeps_an_allocation_observed_at_a_newer_version(
    store: ProjectionStore,
    reads: DeviceReads,
    observation: ObservationFactory,
    release: ReleaseFactory,
    logged: LogFactory,
) -> None:
    await store.apply_batch(LoggedBatch(logged([observation(30)])))
    stats = await store.apply_batch(LoggedBatch(logged([release(25)], start=1)))
    assert stats == BatchStats()
    device = await reads.get_device(*KEY)
    assert device is not None and [a.pod_uid for a in device.allocations] == ["uid-1"]


async def test_release_in_the_same_batch_sees_devices_created_earlier_in_it(
    store: ProjectionStore,
    reads: DeviceReads,
    observation: ObservationFactory,
    release: ReleaseFactory,
    logged: LogFactory,
) -> None:
    events: list[Event] = [
        observation(1),
        observation(2, resource_id="GPU-1"),
        release(3),
        observation(4, resource_id="GPU-2"),
    ]
    stats = await store.apply_batch(LoggedBatch(logged(events)))
    assert stats == BatchStats(applied=3, released=2, transitions=3, devices_written=3)
    assert await all_devices(reads) == fold(events)


async def test_redelivered_batch_writes_history_once(
    store: ProjectionStore,
    reads: DeviceReads,
    engine: AsyncEngine,
    observation: ObservationFactory,
    release: ReleaseFactory,
    logged: LogFactory,
) -> None:
    batch = logged([observation(1), observation(2, Health.UNHEALTHY, at=5), release(3, at=9)])
    await store.apply_batch(LoggedBatch(batch))
    rows, devices = await history_count(engine, store.schema), await all_devices(reads)
    assert rows == 3

    again = await store.apply_batch(LoggedBatch(batch))
    assert again == BatchStats(redelivered=3)
    assert await history_count(engine, store.schema) == rows
    assert await all_devices(reads) == devices

    # Even if the device rows and progress were lost, history is keyed by log position.
    async with engine.begin() as conn:
        await conn.execute(text(f"DELETE FROM {quoted_schema(store.schema)}.devices"))
        await conn.execute(text(f"DELETE FROM {quoted_schema(store.schema)}.partition_progress"))
        await conn.execute(text(f"DELETE FROM {quoted_schema(store.schema)}.pod_tombstones"))
    rebuilt = await store.apply_batch(LoggedBatch(batch))
    assert rebuilt.applied == 2 and rebuilt.released == 1
    assert await history_count(engine, store.schema) == rows
    assert await all_devices(reads) == devices


async def test_batch_split_gives_identical_rows(
    engine: AsyncEngine,
    new_schema: SchemaFactory,
    observation: ObservationFactory,
    release: ReleaseFactory,
    logged: LogFactory,
) -> None:
    events: list[Event] = []
    for i in range(30):
        node = f"gpu-node-{'ab'[i % 2]}"
        rid = f"GPU-{i % 4}"
        pod = f"uid-{i % 3}"
        if i % 7 == 6:
            events.append(release(100 + i, at=i, node=node, pod_uid=pod))
        else:
            version = None if i % 11 == 5 else 100 + i - (3 if i % 5 == 4 else 0)
            health = [Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN][i % 3]
            events.append(
                observation(version, health, at=i, node=node, resource_id=rid, pod_uid=pod)
            )
    log = logged(events)

    whole = await new_schema()
    await ProjectionStore(engine, whole).apply_batch(LoggedBatch(log))
    for size in (1, 2, 7):
        split = await new_schema()
        store = ProjectionStore(engine, split)
        for i in range(0, len(log), size):
            await store.apply_batch(LoggedBatch(log[i : i + size]))
        assert await diff_projections(engine, whole, split) == []
    assert await all_devices(DeviceReads(engine, whole)) == fold(events)


async def test_partition_progress_keeps_the_highest_offset_and_newest_event_time(
    store: ProjectionStore, reads: DeviceReads, observation: ObservationFactory, logged: LogFactory
) -> None:
    first = logged([observation(1, at=50), observation(2, at=40)], start=10)
    await store.apply_batch(LoggedBatch(first, highwaters={(TOPIC, 0): 20, (TOPIC, 1): 7}))
    [p0, p1] = await reads.partition_progress()
    assert (p0.partition, p0.offset, p0.highwater, p0.lag) == (0, 11, 20, 8)
    assert p0.last_event_at == T0.replace(second=50)
    assert (p1.partition, p1.offset, p1.highwater, p1.lag) == (1, None, 7, 7)

    # An older batch redelivered does not move anything back.
    await store.apply_batch(
        LoggedBatch(logged([observation(1, at=5)], start=3), highwaters={(TOPIC, 0): 21})
    )
    [p0, _] = await reads.partition_progress()
    assert (p0.offset, p0.highwater, p0.last_event_at) == (11, 21, T0.replace(second=50))
    assert await reads.freshness() == T0.replace(second=50)


async def test_empty_batch_is_a_no_op(store: ProjectionStore, reads: DeviceReads) -> None:
    assert await store.apply_batch(LoggedBatch([])) == BatchStats()
    assert await reads.partition_progress() == []
    assert await reads.freshness() is None


async def test_version_guard_refuses_a_write_that_lost_a_race(
    store: ProjectionStore,
    reads: DeviceReads,
    engine: AsyncEngine,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    """Another writer inserts the same new device (uncommitted) with a newer version: our batch
    found no row to lock, waits on the insert, then must refuse to overwrite and roll back."""
    s = quoted_schema(store.schema)
    rival = await engine.connect()
    try:
        await rival.execute(
            text(
                f"INSERT INTO {s}.devices VALUES ('gpu-node-a', 'GPU-0', 'nvidia.com/gpu', "
                "'device-plugin', 'Healthy', NULL, NULL, 9, true, now(), now(), '[]', '{}')"
            )
        )
        ours = asyncio.create_task(
            store.apply_batch(LoggedBatch(logged([observation(5, Health.UNHEALTHY)])))
        )
        async with engine.connect() as probe:
            for _ in range(200):  # until our INSERT waits for the rival's transaction
                waiting = await probe.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        f"AND query LIKE 'INSERT INTO {s}.devices%'"
                    )
                )
                if waiting.scalar_one():
                    break
                await probe.rollback()
                await asyncio.sleep(0.01)
        await rival.commit()
        with pytest.raises(ProjectionConflictError):
            await ours
    finally:
        await rival.close()
    device = await reads.get_device(*KEY)
    assert device is not None and device.status_version == 9
    assert await reads.device_history(*KEY) == []
    # Retrying (what the worker does) now sees the newer row: the observation is stale.
    assert (
        await store.apply_batch(LoggedBatch(logged([observation(5, Health.UNHEALTHY)])))
    ).stale == 1


async def test_list_devices_rejects_a_limit_below_one(
    store: ProjectionStore, reads: DeviceReads
) -> None:
    with pytest.raises(ValueError, match="limit"):
        await reads.list_devices(limit=0)


async def test_records_at_or_before_the_recorded_offset_are_skipped_whole(
    store: ProjectionStore,
    reads: DeviceReads,
    observation: ObservationFactory,
    release: ReleaseFactory,
    logged: LogFactory,
) -> None:
    """A release then an unordered observation of the same Pod: redelivering the batch must not
    release the allocation the observation re-created (the fold alone cannot tell)."""
    batch = logged([release(None, at=1), observation(None, at=2)])
    await store.apply_batch(LoggedBatch(batch))
    devices = await all_devices(reads)
    assert [a.pod_uid for d in devices.values() for a in d.allocations]
    assert (await store.apply_batch(LoggedBatch(batch))).redelivered == 2
    assert await all_devices(reads) == devices


async def test_consumed_through_advances_progress_past_records_not_passed(
    store: ProjectionStore, reads: DeviceReads, observation: ObservationFactory, logged: LogFactory
) -> None:
    [record] = logged([observation(1)])
    part = (record.position.topic, record.position.partition)
    await store.apply_batch(
        LoggedBatch([record], consumed_through={part: record.position.offset + 10})
    )
    [progress] = await reads.partition_progress()
    assert progress.offset == record.position.offset + 10
